//! Backends: where a test's nodes live and how the harness acts on them (DESIGN.md §3).
//!
//! A [`Backend`] gives each node (`n1..nN`) an address and lets the harness run commands
//! there, start daemons with a log file, signal them, copy files to and from them, and
//! cut or heal traffic between nodes. The runner and the nemesis see only this trait;
//! `harness test` picks the implementation from `--backend`.
//!
//! - [`netns`]: one Linux network namespace per node on a bridge (the default; root).
//! - [`state`]: the state file every netns run keeps in `/run/harness/`, the process
//!   identities in it (pid plus start time), and the test range's subnet claims; what
//!   `harness clean` reads to find a crashed run's leftovers.
//! - [`ssh`]: one host per node reached over SSH (`--nodes-file`, `--vagrant`): the
//!   broker uploaded and started with sudo, cuts as iptables rules on each host.
//! - [`tools`]: running the system tools (`ip`, `iptables`, `kill`) with errors that name
//!   the command and its stderr, installing missing ones with apt, the root check.
//!
//! The trait is object safe and async through boxed futures (the ssh backend talks to its
//! hosts through the async `openssh` crate); the futures must be polled on a tokio runtime.

mod join;
pub mod netns;
pub mod ssh;
pub mod state;
pub mod tools;

pub use join::join_all;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;

/// The future every [`Backend`] method returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A signal the harness sends to a daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Signal {
    Kill,
    Stop,
    Cont,
    Term,
}

impl Signal {
    /// The name `kill -s` takes.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Kill => "KILL",
            Signal::Stop => "STOP",
            Signal::Cont => "CONT",
            Signal::Term => "TERM",
        }
    }
}

/// Traffic to drop: packets from `from` to `to` (only those to the given destination
/// ports, TCP and UDP, when `ports` is set), and the same with `from` and `to` swapped
/// unless `one_way`. Packets are dropped on arrival, so the sender sees silence (a
/// timeout), not an error. Traffic between the harness and the nodes is never cut.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Cut {
    pub from: String,
    pub to: String,
    pub ports: Option<Vec<u16>>,
    pub one_way: bool,
}

impl Cut {
    /// Drop everything between `a` and `b`, both ways.
    pub fn between(a: &str, b: &str) -> Cut {
        Cut {
            from: a.to_string(),
            to: b.to_string(),
            ports: None,
            one_way: false,
        }
    }

    /// Only packets from `from` to `to`.
    pub fn one_way(mut self) -> Cut {
        self.one_way = true;
        self
    }

    /// Only packets to these destination ports.
    pub fn ports(mut self, ports: &[u16]) -> Cut {
        self.ports = Some(ports.to_vec());
        self
    }
}

/// What a command run with [`Backend::exec`] printed (it exited 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    pub stdout: String,
    pub stderr: String,
}

/// Every way a backend operation fails. Command failures name the command and carry its
/// stderr, so a message alone says what went wrong where.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("{what} needs root ({why}); running as uid {uid}: run it as root, e.g. with sudo")]
    NotRoot { what: String, why: String, uid: u32 },
    #[error("`{command}` failed ({status}){}", stderr_suffix(stderr))]
    Command {
        command: String,
        status: String,
        stdout: String,
        stderr: String,
    },
    #[error("could not start `{command}`: {source}")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "`{tool}` is missing: install the package `{package}`{}",
        reason_suffix(reason)
    )]
    MissingTool {
        tool: String,
        package: String,
        reason: String,
    },
    #[error("no node {node:?} (nodes: {})", nodes.join(", "))]
    UnknownNode { node: String, nodes: Vec<String> },
    #[error("pid {pid} on {node} is not a daemon this backend started")]
    NotOurProcess { node: String, pid: u32 },
    #[error("pid {pid} on {node} is no longer running")]
    ProcessGone { node: String, pid: u32 },
    #[error("daemon `{command}` on {node} did not start: {reason}")]
    DaemonStart {
        node: String,
        command: String,
        reason: String,
    },
    #[error("invalid cut {cut:?}: {reason}")]
    InvalidCut { cut: Box<Cut>, reason: String },
    #[error("{what}{}: {source}", path_suffix(path))]
    Io {
        what: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("state file {}: {reason}", path.display())]
    State { path: PathBuf, reason: String },
    #[error("{0}")]
    Setup(String),
    #[error("the backend has been torn down")]
    TornDown,
    #[error("teardown of {prefix} left things behind (run `harness clean`): {}", failures.join("; "))]
    Teardown {
        prefix: String,
        failures: Vec<String>,
    },
    #[error("internal error: {0}")]
    Internal(String),
}

fn stderr_suffix(stderr: &str) -> String {
    let stderr = stderr.trim();
    if stderr.is_empty() {
        String::new()
    } else {
        format!(": {stderr}")
    }
}

fn path_suffix(path: &Path) -> String {
    if path.as_os_str().is_empty() {
        String::new()
    } else {
        format!(" {}", path.display())
    }
}

fn reason_suffix(reason: &str) -> String {
    if reason.is_empty() {
        String::new()
    } else {
        format!(" ({reason})")
    }
}

/// The nodes of a test and what the harness can do to them.
///
/// Nodes are named `n1..nN`. Every method checks the node name and fails with
/// [`BackendError::UnknownNode`] for others. After [`Backend::teardown`] every method but
/// `teardown` fails with [`BackendError::TornDown`].
pub trait Backend: Send + Sync {
    /// The backend's name as `--backend` spells it.
    fn kind(&self) -> &'static str;

    /// The node names, `n1..nN`, in order.
    fn nodes(&self) -> Vec<String>;

    /// The address the harness and the other nodes reach `node` at.
    fn address(&self, node: &str) -> Result<IpAddr, BackendError>;

    /// Run `argv` on `node` (no shell: each element is one argument) and wait for it.
    /// A non-zero exit is a [`BackendError::Command`] carrying stdout and stderr.
    /// Dropping the future kills the command.
    fn exec<'a>(
        &'a self,
        node: &'a str,
        argv: &'a [String],
    ) -> BoxFuture<'a, Result<ExecOutput, BackendError>>;

    /// Start `argv` on `node` in the background, stdout and stderr appended to
    /// `log_file` (a path on the node), and return its pid: the daemon's own pid, so that
    /// [`Backend::signal`] reaches it. Fails if the command exits at once.
    fn spawn_daemon<'a>(
        &'a self,
        node: &'a str,
        argv: &'a [String],
        log_file: &'a Path,
    ) -> BoxFuture<'a, Result<u32, BackendError>>;

    /// Send `signal` to a daemon started by [`Backend::spawn_daemon`] on `node`.
    fn signal<'a>(
        &'a self,
        node: &'a str,
        pid: u32,
        signal: Signal,
    ) -> BoxFuture<'a, Result<(), BackendError>>;

    /// Whether a daemon started by [`Backend::spawn_daemon`] still exists (a stopped one
    /// does; an exited one does not).
    fn is_running<'a>(
        &'a self,
        node: &'a str,
        pid: u32,
    ) -> BoxFuture<'a, Result<bool, BackendError>>;

    /// Copy a local file or folder to `remote` on `node` (parents created).
    fn upload<'a>(
        &'a self,
        local: &'a Path,
        node: &'a str,
        remote: &'a Path,
    ) -> BoxFuture<'a, Result<(), BackendError>>;

    /// Copy a file or folder at `remote` on `node` to `local` (parents created).
    fn download<'a>(
        &'a self,
        node: &'a str,
        remote: &'a Path,
        local: &'a Path,
    ) -> BoxFuture<'a, Result<(), BackendError>>;

    /// Drop the traffic the cuts describe, in addition to any cut already in place.
    fn cut<'a>(&'a self, cuts: &'a [Cut]) -> BoxFuture<'a, Result<(), BackendError>>;

    /// Remove exactly what an earlier [`Backend::cut`] of the same cuts added, leaving
    /// every other cut in place. Cuts add up: a cut made twice is in place twice and
    /// needs two uncuts. Removing a cut that is not in place (never made, or healed
    /// since) is an error, after every other rule of `cuts` has been removed.
    fn uncut<'a>(&'a self, cuts: &'a [Cut]) -> BoxFuture<'a, Result<(), BackendError>>;

    /// Remove every cut this backend made.
    fn heal(&self) -> BoxFuture<'_, Result<(), BackendError>>;

    /// Kill every daemon this backend started and remove everything it created.
    /// Idempotent: a second call does nothing and succeeds.
    fn teardown(&self) -> BoxFuture<'_, Result<(), BackendError>>;
}

/// Installs (once per process) handlers for SIGINT (Ctrl-C), SIGTERM and SIGHUP that tear
/// down every live backend of this process, netns and ssh alike, and then exit with 128 +
/// the signal's number. Call it from inside a tokio runtime before creating a backend;
/// later calls do nothing.
pub fn install_signal_teardown() -> Result<(), BackendError> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::signal::unix::{signal, SignalKind};
    static INSTALLED: AtomicBool = AtomicBool::new(false);
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(BackendError::Internal(
            "install_signal_teardown must be called inside a tokio runtime".into(),
        ));
    }
    if INSTALLED.swap(true, Ordering::SeqCst) {
        return Ok(());
    }
    let listen = |kind: SignalKind| {
        signal(kind)
            .map_err(|error| BackendError::Setup(format!("installing a signal handler: {error}")))
    };
    let mut interrupt = listen(SignalKind::interrupt())?;
    let mut terminate = listen(SignalKind::terminate())?;
    let mut hangup = listen(SignalKind::hangup())?;
    tokio::spawn(async move {
        let (name, code) = tokio::select! {
            _ = interrupt.recv() => ("SIGINT", 130),
            _ = terminate.recv() => ("SIGTERM", 143),
            _ = hangup.recv() => ("SIGHUP", 129),
        };
        eprintln!("{name}: tearing down");
        let mut outcomes = tokio::task::spawn_blocking(netns::teardown_all)
            .await
            .unwrap_or_default();
        outcomes.extend(ssh::teardown_all().await);
        for (run, outcome) in outcomes {
            match outcome {
                Ok(()) => eprintln!("removed run {run}"),
                Err(error) => eprintln!("error: {error}"),
            }
        }
        std::process::exit(code);
    });
    Ok(())
}
