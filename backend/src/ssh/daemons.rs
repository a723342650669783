//! Daemons on the hosts: starting one in the background with its log (recorded with its
//! start time), and the liveness checks and signals that compare that identity first.

use super::quote::{check_argv, parent_arg, path_arg};
use super::scripts::{CHECK, SPAWN};
use super::session::{lock, Daemon, Inner};
use crate::tools::display_command;
use crate::{BackendError, Signal};
use std::path::Path;

impl Inner {
    pub(super) async fn spawn_daemon(
        &self,
        node: &str,
        argv: &[String],
        log_file: &Path,
    ) -> Result<u32, BackendError> {
        let _gate = self.gate.read().await;
        self.open()?;
        let host = self.host(node)?;
        check_argv(argv)?;
        let command = display_command(argv);
        let start_error = |reason: String| BackendError::DaemonStart {
            node: node.to_string(),
            command: command.clone(),
            reason,
        };
        let mut args = vec![parent_arg(log_file)?, path_arg(log_file)?];
        args.extend(argv.iter().cloned());
        let output = self.script(host, "spawn", SPAWN, &args).await?;
        let line = output.stdout.lines().next().unwrap_or_default().to_string();
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["started", pid, start] => {
                let (Ok(pid), Ok(start_time)) = (pid.parse::<u32>(), start.parse::<u64>()) else {
                    return Err(start_error(format!("unexpected answer {line:?}")));
                };
                lock(&self.run).daemons.push(Daemon {
                    node: node.to_string(),
                    pid,
                    start_time,
                    argv: argv.to_vec(),
                });
                // A daemon missing from the record is still found by `harness clean`: its
                // command line names the run folder.
                if let Err(error) = self.save_record() {
                    tracing::warn!(run = %self.run_id, %error, "recording a daemon");
                }
                Ok(pid)
            }
            ["exited", status] => {
                let tail: Vec<&str> = output.stdout.lines().skip(1).collect();
                let tail = if tail.is_empty() {
                    "(empty)".to_string()
                } else {
                    tail.join(" | ")
                };
                Err(start_error(format!(
                    "it exited at once (exit {status}); its log ends: {tail}"
                )))
            }
            ["timeout"] => Err(start_error("it did not start within 10 s (killed)".into())),
            _ => Err(start_error(format!("unexpected answer {line:?}"))),
        }
    }

    fn daemon(&self, node: &str, pid: u32) -> Result<Daemon, BackendError> {
        self.host(node)?;
        let run = lock(&self.run);
        if run.closed {
            return Err(BackendError::TornDown);
        }
        run.daemons
            .iter()
            .rev()
            .find(|daemon| daemon.node == node && daemon.pid == pid)
            .cloned()
            .ok_or_else(|| BackendError::NotOurProcess {
                node: node.to_string(),
                pid,
            })
    }

    /// The identity-checked liveness check (`signal: None`) or signal of a daemon.
    pub(super) async fn check(
        &self,
        node: &str,
        pid: u32,
        signal: Option<Signal>,
    ) -> Result<bool, BackendError> {
        let daemon = self.daemon(node, pid)?;
        let host = self.host(node)?;
        let args = vec![
            daemon.pid.to_string(),
            daemon.start_time.to_string(),
            signal.map(Signal::name).unwrap_or_default().to_string(),
        ];
        let output = self.script(host, "check", CHECK, &args).await?;
        match output.stdout.trim() {
            "alive" | "signalled" => Ok(true),
            "gone" => Ok(false),
            other => Err(BackendError::Internal(format!(
                "checking pid {pid} on {node}: unexpected answer {other:?}"
            ))),
        }
    }

    pub(super) async fn signal(
        &self,
        node: &str,
        pid: u32,
        signal: Signal,
    ) -> Result<(), BackendError> {
        if self.check(node, pid, Some(signal)).await? {
            Ok(())
        } else {
            Err(BackendError::ProcessGone {
                node: node.to_string(),
                pid,
            })
        }
    }
}
