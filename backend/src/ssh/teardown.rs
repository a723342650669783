//! Removing a run from every host: its daemons and every process that names the run's
//! folder killed, the cut chain and its `INPUT` rule deleted, the run folder removed,
//! then the connections closed and the control folder removed (kept, with the run's
//! record, when something could not be removed from a host).

use super::record::SshRunRecord;
use super::scripts::{KILL_ALL, REMOVE_CHAIN};
use super::session::{lock, ssh_error, Daemon, HostConn, Inner, LIVE, STEP_TIMEOUT};
use super::wait::{join_all, timed};
use crate::state::ProcessRecord;
use crate::tools::{self, display_command};
use crate::BackendError;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a master told to exit gets before it is killed.
const MASTER_EXIT_GRACE: Duration = Duration::from_secs(5);

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
        let left_on_hosts = !failures.is_empty();
        for host in &self.hosts {
            let session = lock(&host.session).take();
            if let Some(session) = session {
                // `-O exit` only asks the master to go; it leaves on its own time. Its
                // pid, learned first, is what teardown waits on.
                let socket = session.control_socket().to_path_buf();
                let master = master_process(&socket).await;
                match Arc::try_unwrap(session) {
                    Ok(session) => {
                        if let Err(error) = session.close().await {
                            tracing::debug!(node = %host.node, error = %ssh_error(&error), "closing the ssh connection");
                        }
                    }
                    // Still in use by a command (a teardown from the Ctrl-C handler): the
                    // master is told to exit, which ends that command too.
                    Err(_shared) => {
                        if let Err(error) = tools::run_cancellable(exit_argv(&socket)).await {
                            tracing::debug!(node = %host.node, %error, "stopping the ssh master");
                        }
                    }
                }
                if let Some(master) = master {
                    if let Err(error) = await_master_exit(&master).await {
                        failures.push(format!("{}: {error}", self.describe(host)));
                    }
                }
            }
        }
        if left_on_hosts {
            // The record stays (the connections' sockets are gone), for `harness clean`.
            failures.push(format!(
                "kept {} for `harness clean`",
                SshRunRecord::path(&self.control_dir).display()
            ));
        } else {
            match std::fs::remove_dir_all(&self.control_dir) {
                Ok(()) => {}
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => failures.push(format!(
                    "control folder {}: {error}",
                    self.control_dir.display()
                )),
            }
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

/// `ssh -O exit` for the master listening on `socket`.
pub(super) fn exit_argv(socket: &Path) -> Vec<String> {
    vec![
        "ssh".to_string(),
        "-S".to_string(),
        socket.display().to_string(),
        "-O".to_string(),
        "exit".to_string(),
        "none".to_string(),
    ]
}

/// The local ssh master behind `socket` (from `ssh -O check`, which says
/// `Master running (pid=N)`), or `None` if none answers.
pub(super) async fn master_process(socket: &Path) -> Option<ProcessRecord> {
    let argv = vec![
        "ssh".to_string(),
        "-S".to_string(),
        socket.display().to_string(),
        "-O".to_string(),
        "check".to_string(),
        "none".to_string(),
    ];
    let output = tools::run_cancellable(argv).await.ok()?;
    let pid = master_pid(&output.stderr).or_else(|| master_pid(&output.stdout))?;
    let record = ProcessRecord::of(pid)?;
    // Only an ssh process is ours to wait on or signal.
    let is_ssh = record.cmdline.first().is_some_and(|program| {
        Path::new(program)
            .file_name()
            .is_some_and(|name| name == "ssh")
    });
    is_ssh.then_some(record)
}

/// The pid in `ssh -O check`'s answer.
fn master_pid(text: &str) -> Option<u32> {
    let rest = &text[text.find("(pid=")? + "(pid=".len()..];
    rest[..rest.find(')')?].trim().parse().ok()
}

/// Waits for a master told to exit to be gone; kills it (by pid, while it is still the
/// recorded process) if it outstays [`MASTER_EXIT_GRACE`].
pub(super) async fn await_master_exit(master: &ProcessRecord) -> Result<(), String> {
    let deadline = Instant::now() + MASTER_EXIT_GRACE;
    while master.is_alive() {
        if Instant::now() >= deadline {
            tracing::debug!(pid = master.pid, "the ssh master did not exit; killing it");
            let argv = vec![
                "kill".to_string(),
                "-s".to_string(),
                "KILL".to_string(),
                master.pid.to_string(),
            ];
            if master.is_alive() {
                let _ = tools::run_cancellable(argv).await;
            }
            let killed_by = Instant::now() + Duration::from_secs(2);
            while master.is_alive() {
                if Instant::now() >= killed_by {
                    return Err(format!(
                        "the ssh master (pid {}) outlived SIGKILL",
                        master.pid
                    ));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::master_pid;

    #[test]
    fn the_master_pid_is_read_from_the_check_answer() {
        assert_eq!(master_pid("Master running (pid=1587)\r\n"), Some(1587));
        assert_eq!(master_pid("Master running (pid= 42 )"), Some(42));
        assert_eq!(master_pid("Control socket connect(/x): No such file"), None);
        assert_eq!(master_pid("(pid=abc)"), None);
        assert_eq!(master_pid("(pid=12"), None);
    }
}
