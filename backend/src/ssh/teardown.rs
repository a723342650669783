//! Removing a run from every host: its daemons and every process that names the run's
//! folder killed, the cut chain and its `INPUT` rule deleted, the run folder removed,
//! then the connections closed and the control folder removed.

use super::scripts::{KILL_ALL, REMOVE_CHAIN};
use super::session::{lock, ssh_error, Daemon, HostConn, Inner, LIVE, STEP_TIMEOUT};
use super::wait::{join_all, timed};
use crate::tools::{self, display_command};
use crate::BackendError;
use std::sync::Arc;

impl Inner {
    pub(super) async fn teardown(&self) -> Result<(), BackendError> {
        lock(&self.run).closed = true;
        // Waits for operations that create things to finish.
        let _gate = self.gate.write().await;
        let (daemons, dirs, chains) = {
            let run = lock(&self.run);
            if run.torn_down {
                return Ok(());
            }
            (run.daemons.clone(), run.dirs.clone(), run.chains.clone())
        };
        let jobs = self.hosts.iter().enumerate().map(|(index, host)| {
            let daemons: Vec<Daemon> = daemons
                .iter()
                .filter(|daemon| daemon.node == host.node)
                .cloned()
                .collect();
            let dir = dirs.get(index).copied().unwrap_or(false);
            let chain = chains.get(index).copied().unwrap_or(false);
            self.teardown_host(host, daemons, dir, chain)
        });
        let mut failures: Vec<String> = join_all(jobs).await.into_iter().flatten().collect();
        for host in &self.hosts {
            let session = lock(&host.session).take();
            if let Some(session) = session {
                match Arc::try_unwrap(session) {
                    Ok(session) => {
                        if let Err(error) = session.close().await {
                            tracing::debug!(node = %host.node, error = %ssh_error(&error), "closing the ssh connection");
                        }
                    }
                    // Still in use by a command (a teardown from the Ctrl-C handler): the
                    // master is told to exit, which ends that command too.
                    Err(shared) => {
                        let argv = vec![
                            "ssh".to_string(),
                            "-S".to_string(),
                            shared.control_socket().display().to_string(),
                            "-O".to_string(),
                            "exit".to_string(),
                            "none".to_string(),
                        ];
                        if let Err(error) = tools::run_cancellable(argv).await {
                            tracing::debug!(node = %host.node, %error, "stopping the ssh master");
                        }
                    }
                }
            }
        }
        match std::fs::remove_dir_all(&self.control_dir) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => failures.push(format!(
                "control folder {}: {error}",
                self.control_dir.display()
            )),
        }
        if failures.is_empty() {
            let mut run = lock(&self.run);
            run.torn_down = true;
            run.daemons.clear();
            drop(run);
            lock(&LIVE).retain(|weak| {
                weak.upgrade()
                    .is_some_and(|inner| inner.run_id != self.run_id)
            });
            Ok(())
        } else {
            Err(BackendError::Teardown {
                prefix: self.run_id.clone(),
                failures,
            })
        }
    }

    /// Removes the run from one host; returns what failed.
    async fn teardown_host(
        &self,
        host: &HostConn,
        daemons: Vec<Daemon>,
        dir: bool,
        chain: bool,
    ) -> Vec<String> {
        let mut failures = Vec::new();
        if daemons.is_empty() && !dir && !chain {
            return failures;
        }
        let described = self.describe(host);
        if let Err(error) = self.ensure_connected(host).await {
            failures.push(format!("{described}: {error}"));
            return failures;
        }
        let mut args = vec![self.run_dir_text.clone()];
        for daemon in &daemons {
            args.push(daemon.pid.to_string());
            args.push(daemon.start_time.to_string());
        }
        match timed(STEP_TIMEOUT, self.run_script(host, "kill", KILL_ALL, &args)).await {
            Ok(output) => {
                for line in output.stdout.lines() {
                    if let Some(pid) = line.strip_prefix("killed ") {
                        let what = daemons
                            .iter()
                            .find(|daemon| daemon.pid.to_string() == pid)
                            .map(|daemon| format!(" `{}`", display_command(&daemon.argv)))
                            .unwrap_or_default();
                        tracing::debug!(run = %self.run_id, "killed process {pid}{what} on {described}");
                    }
                }
            }
            Err(error) => failures.push(format!("{described}: stopping processes: {error}")),
        }
        if chain {
            if let Some(facts) = host.facts.get() {
                let args = vec![
                    facts.iptables.clone(),
                    self.chain.clone(),
                    self.run_id.clone(),
                ];
                if let Err(error) = timed(
                    STEP_TIMEOUT,
                    self.run_script(host, "unchain", REMOVE_CHAIN, &args),
                )
                .await
                {
                    failures.push(format!("{described}: chain {}: {error}", self.chain));
                }
            }
        }
        if dir {
            let argv = vec![
                "rm".to_string(),
                "-rf".to_string(),
                "--".to_string(),
                self.run_dir_text.clone(),
            ];
            if let Err(error) = timed(STEP_TIMEOUT, self.run_argv(host, &argv, false)).await {
                failures.push(format!(
                    "{described}: folder {}: {error}",
                    self.run_dir_text
                ));
            }
        }
        failures
    }

    /// Reconnects to a host whose connection is gone (for teardown).
    async fn ensure_connected(&self, host: &HostConn) -> Result<(), BackendError> {
        let current = lock(&host.session).clone();
        if let Some(session) = current {
            if session.check().await.is_ok() {
                return Ok(());
            }
        }
        self.connect(host).await
    }
}
