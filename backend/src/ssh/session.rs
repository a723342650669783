//! The backend's shared core ([`Inner`]) and its per-host connections: one multiplexed
//! `openssh` session per host, the commands and scripts run over it (under the watchdog,
//! as root through sudo when needed, within the host's channel budget), what the run
//! created so far, and the registry of live backends that teardown walks.

use super::hosts::Host;
use super::quote::{check_argv, remote_line, split_exit_marker, with_prelude};
use super::scripts::WATCHDOG;
use super::{HostKeyPolicy, SshOptions};
use crate::state::ProcessRecord;
use crate::tools::display_command;
use crate::{BackendError, ExecOutput};
use openssh::{KnownHosts, Session, SessionBuilder, Stdio};
use std::net::Ipv4Addr;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::sync::{RwLock, Semaphore};

/// How long ssh waits for a host to answer when connecting.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// How often ssh checks that an idle connection is still alive.
const ALIVE_INTERVAL: Duration = Duration::from_secs(10);

/// The longest a setup or teardown command may take (apt has its own, longer).
pub(super) const STEP_TIMEOUT: Duration = Duration::from_secs(120);

/// How a remote invocation's stdin and stdout are connected.
pub(super) enum Stdin {
    /// A pipe the harness holds open and never writes (the watchdog's).
    Held,
    /// Read from this local file.
    File(std::fs::File),
}

pub(super) enum Stdout {
    Capture,
    File(std::fs::File),
}

/// One remote invocation: `sh -c <script> sh <args>`, as root (through sudo when the
/// host needs it) unless `as_user`; `shown` names it in errors.
pub(super) struct Call<'a> {
    pub(super) script: &'a str,
    pub(super) args: &'a [String],
    pub(super) as_user: bool,
    pub(super) stdin: Stdin,
    pub(super) stdout: Stdout,
    pub(super) shown: &'a str,
}

/// A daemon this backend started.
#[derive(Debug, Clone)]
pub(super) struct Daemon {
    pub(super) node: String,
    pub(super) pid: u32,
    pub(super) start_time: u64,
    pub(super) argv: Vec<String>,
}

/// What a host turned out to be, once probed.
#[derive(Debug, Clone)]
pub(super) struct Facts {
    /// The user ssh logs in as.
    pub(super) user: String,
    pub(super) port: u16,
    pub(super) address: Ipv4Addr,
    /// The iptables binary that works there.
    pub(super) iptables: String,
}

/// One host of the run.
pub(super) struct HostConn {
    /// `n1`, `n2`, ...
    pub(super) node: String,
    pub(super) host: Host,
    pub(super) session: Mutex<Option<Arc<Session>>>,
    /// Commands go through `sudo -n` (the user is not root); known once probed.
    pub(super) sudo: OnceLock<bool>,
    pub(super) facts: OnceLock<Facts>,
    pub(super) channels: Semaphore,
}

/// What the run created and whether it is over.
#[derive(Default)]
pub(super) struct Run {
    pub(super) daemons: Vec<Daemon>,
    /// Per host: its run folder may exist.
    pub(super) dirs: Vec<bool>,
    /// Per host: its chain and `INPUT` rule may exist.
    pub(super) chains: Vec<bool>,
    pub(super) closed: bool,
    pub(super) torn_down: bool,
}

/// The backend's shared core; [`SshBackend`](super::SshBackend) is its guard.
pub(super) struct Inner {
    pub(super) run_id: String,
    pub(super) run_dir: PathBuf,
    pub(super) run_dir_text: String,
    pub(super) remote_dir_text: String,
    pub(super) chain: String,
    pub(super) control_dir: PathBuf,
    /// The harness process that owns the run (for the run's record).
    pub(super) owner: ProcessRecord,
    /// When the run started (RFC 3339), for its record.
    pub(super) created: String,
    pub(super) options: SshOptions,
    pub(super) hosts: Vec<HostConn>,
    pub(super) run: Mutex<Run>,
    /// Held shared by operations that create things (daemons, cuts), exclusively by
    /// teardown, so that teardown sees everything they made.
    pub(super) gate: RwLock<()>,
}

/// Every live backend of this process, for [`teardown_all`](super::teardown_all).
pub(super) static LIVE: Mutex<Vec<Weak<Inner>>> = Mutex::new(Vec::new());

pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// The openssh error with its causes (ssh's own message is in a source).
pub(super) fn ssh_error(error: &openssh::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text = format!("{text}: {cause_text}");
        }
        source = cause.source();
    }
    text
}

impl Inner {
    pub(super) fn host(&self, node: &str) -> Result<&HostConn, BackendError> {
        self.hosts
            .iter()
            .find(|host| host.node == node)
            .ok_or_else(|| BackendError::UnknownNode {
                node: node.to_string(),
                nodes: self.hosts.iter().map(|host| host.node.clone()).collect(),
            })
    }

    pub(super) fn facts<'a>(&self, host: &'a HostConn) -> Result<&'a Facts, BackendError> {
        host.facts
            .get()
            .ok_or_else(|| BackendError::Internal(format!("{} is not set up", host.node)))
    }

    pub(super) fn open(&self) -> Result<(), BackendError> {
        if lock(&self.run).closed {
            Err(BackendError::TornDown)
        } else {
            Ok(())
        }
    }

    pub(super) fn describe(&self, host: &HostConn) -> String {
        match host.facts.get() {
            Some(facts) => {
                let mut text = format!(
                    "{} ({}, {}@{}:{}",
                    host.node, host.host.label, facts.user, host.host.address, facts.port
                );
                if host.host.address != facts.address.to_string() {
                    text.push_str(&format!(", address {}", facts.address));
                }
                text.push(')');
                text
            }
            None => format!("{} ({}, {})", host.node, host.host.label, host.host.address),
        }
    }

    fn builder(&self, host: &Host) -> SessionBuilder {
        let mut builder = SessionBuilder::default();
        if let Some(user) = &host.user {
            builder.user(user.clone());
        }
        if let Some(port) = host.port {
            builder.port(port);
        }
        if let Some(key) = host
            .identity_file
            .as_ref()
            .or(self.options.identity_file.as_ref())
        {
            builder.keyfile(key);
        }
        if let Some(config) = &self.options.config_file {
            builder.config_file(config);
        }
        builder.known_hosts_check(match self.options.host_keys {
            HostKeyPolicy::Strict => KnownHosts::Strict,
            HostKeyPolicy::AcceptNew => KnownHosts::Add,
            HostKeyPolicy::Off => KnownHosts::Accept,
        });
        if self.options.host_keys == HostKeyPolicy::Off {
            builder.user_known_hosts_file("/dev/null");
        }
        builder
            .connect_timeout(CONNECT_TIMEOUT)
            .server_alive_interval(ALIVE_INTERVAL)
            .control_directory(&self.control_dir);
        builder
    }

    pub(super) async fn connect(&self, host: &HostConn) -> Result<(), BackendError> {
        let session = self
            .builder(&host.host)
            .connect(&host.host.address)
            .await
            .map_err(|error| {
                BackendError::Setup(format!(
                    "connecting to {}: {}",
                    self.describe(host),
                    ssh_error(&error)
                ))
            })?;
        *lock(&host.session) = Some(Arc::new(session));
        Ok(())
    }

    fn session(&self, host: &HostConn) -> Result<Arc<Session>, BackendError> {
        lock(&host.session).clone().ok_or(BackendError::TornDown)
    }

    /// Runs `call` on `host` and returns its output; a non-zero status is a
    /// [`BackendError::Command`] naming the call.
    pub(super) async fn invoke(
        &self,
        host: &HostConn,
        call: Call<'_>,
    ) -> Result<ExecOutput, BackendError> {
        let Call {
            script,
            args,
            as_user,
            stdin,
            stdout,
            shown,
        } = call;
        let sudo = !as_user && host.sudo.get().copied().unwrap_or(false);
        let line = remote_line(sudo, script, args);
        let session = self.session(host)?;
        let command_text = format!("{}: {shown}", host.node);
        let spawn_error = |error: &openssh::Error| BackendError::Spawn {
            command: command_text.clone(),
            source: std::io::Error::other(format!(
                "ssh to {}: {}",
                self.describe(host),
                ssh_error(error)
            )),
        };
        let mut command = session.raw_command(&line);
        command.stdin(match stdin {
            Stdin::Held => Stdio::piped(),
            Stdin::File(file) => Stdio::from(OwnedFd::from(file)),
        });
        let capture = matches!(stdout, Stdout::Capture);
        command.stdout(match stdout {
            Stdout::Capture => Stdio::piped(),
            Stdout::File(file) => Stdio::from(OwnedFd::from(file)),
        });
        command.stderr(Stdio::piped());
        tracing::debug!(node = %host.node, command = %shown, "ssh exec");
        let mut child = command.spawn().await.map_err(|error| spawn_error(&error))?;
        // Held until the command has ended: its end of file is the watchdog's signal.
        let held = child.stdin().take();
        let out = child.stdout().take();
        let err = child.stderr().take();
        let read_out = async move {
            let mut bytes = Vec::new();
            if let Some(mut out) = out {
                out.read_to_end(&mut bytes).await?;
            }
            Ok::<_, std::io::Error>(bytes)
        };
        let read_err = async move {
            let mut bytes = Vec::new();
            if let Some(mut err) = err {
                err.read_to_end(&mut bytes).await?;
            }
            Ok::<_, std::io::Error>(bytes)
        };
        let (out, err) = tokio::join!(read_out, read_err);
        let waited = child.wait().await;
        drop(held);
        let io_error = |source: std::io::Error| BackendError::Io {
            what: format!("reading the output of `{command_text}`"),
            path: PathBuf::new(),
            source,
        };
        let out = out.map_err(io_error)?;
        let err = err.map_err(io_error)?;
        let stdout_text = if capture {
            String::from_utf8_lossy(&out).into_owned()
        } else {
            String::new()
        };
        let stderr_text = String::from_utf8_lossy(&err).into_owned();
        match split_exit_marker(&stderr_text) {
            Some((stderr, 0)) => Ok(ExecOutput {
                stdout: stdout_text,
                stderr,
            }),
            Some((stderr, code)) => Err(BackendError::Command {
                command: command_text,
                status: format!("exit {code}"),
                stdout: stdout_text,
                stderr,
            }),
            None => {
                let status = match &waited {
                    Ok(status) => format!("no exit status from the host, ssh {status}"),
                    Err(error) => format!("ssh: {}", ssh_error(error)),
                };
                Err(BackendError::Command {
                    command: command_text,
                    status: format!("{status}; connection to {} lost?", self.describe(host)),
                    stdout: stdout_text,
                    stderr: stderr_text,
                })
            }
        }
    }

    /// Runs `argv` on `host` under the watchdog, as root.
    pub(super) async fn run_argv(
        &self,
        host: &HostConn,
        argv: &[String],
        as_user: bool,
    ) -> Result<ExecOutput, BackendError> {
        self.run_argv_shown(host, argv, as_user, &display_command(argv))
            .await
    }

    /// [`Inner::run_argv`], named `shown` in errors (for a generated `sh -c` script,
    /// what it does rather than its text).
    pub(super) async fn run_argv_shown(
        &self,
        host: &HostConn,
        argv: &[String],
        as_user: bool,
        shown: &str,
    ) -> Result<ExecOutput, BackendError> {
        check_argv(argv)?;
        let script = with_prelude(WATCHDOG, false);
        self.invoke(
            host,
            Call {
                script: &script,
                args: argv,
                as_user,
                stdin: Stdin::Held,
                stdout: Stdout::Capture,
                shown,
            },
        )
        .await
    }

    /// Runs one of the [`scripts`](super::scripts) (with the `/proc` helpers) under the
    /// watchdog.
    pub(super) async fn run_script(
        &self,
        host: &HostConn,
        name: &str,
        script: &str,
        args: &[String],
    ) -> Result<ExecOutput, BackendError> {
        let mut argv = vec![
            "sh".to_string(),
            "-c".to_string(),
            with_prelude(script, true),
            name.to_string(),
        ];
        argv.extend(args.iter().cloned());
        let shown = format!("{name} {}", display_command(args));
        check_argv(&argv)?;
        self.invoke(
            host,
            Call {
                script: &with_prelude(WATCHDOG, false),
                args: &argv,
                as_user: false,
                stdin: Stdin::Held,
                stdout: Stdout::Capture,
                shown: &shown,
            },
        )
        .await
    }

    /// [`Inner::run_argv`] within a channel of the host's budget, for operations.
    pub(super) async fn exec(
        &self,
        node: &str,
        argv: &[String],
    ) -> Result<ExecOutput, BackendError> {
        self.open()?;
        let host = self.host(node)?;
        check_argv(argv)?;
        let _channel = host
            .channels
            .acquire()
            .await
            .map_err(|_| BackendError::TornDown)?;
        self.run_argv(host, argv, false).await
    }

    /// [`Inner::run_script`] within a channel of the host's budget.
    pub(super) async fn script(
        &self,
        host: &HostConn,
        name: &str,
        script: &str,
        args: &[String],
    ) -> Result<ExecOutput, BackendError> {
        let _channel = host
            .channels
            .acquire()
            .await
            .map_err(|_| BackendError::TornDown)?;
        self.run_script(host, name, script, args).await
    }
}
