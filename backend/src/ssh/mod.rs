//! The ssh backend: every node is a host (a VM, a machine) reached over SSH.
//!
//! ## Connections
//!
//! [`SshBackend::start`] opens one multiplexed connection per host (an `openssh`
//! [`Session`]: a ControlMaster `ssh` process whose control socket lives in a private
//! folder of the system temp dir, `harness-ssh-<run id>`, removed at teardown). Every
//! command is one more `ssh` client on that socket: no new handshake, about 17 ms a
//! command on a lean host, plus whatever the remote login shell's startup costs (bash
//! sources `~/.bashrc` for every command ssh runs). At most [`CHANNELS_PER_HOST`]
//! commands run at once on a host (sshd's `MaxSessions` defaults to 10 per connection).
//! Host keys follow [`HostKeyPolicy`]; with [`HostKeyPolicy::Off`] nothing is written to
//! any known_hosts file. A lost connection is not re-established for operations (they
//! fail with a [`BackendError::Command`] that says so); teardown reconnects.
//!
//! ## Commands and quoting
//!
//! ssh sends a command to the host as one string that the remote user's login shell
//! parses. The backend never lets that shell see an unquoted byte of ours: every argument
//! is quoted with [`shell_quote`] (single quotes, `'` as `'\''`) and the whole line is
//! given to `openssh` with `raw_command` (which passes it through untouched). `openssh`'s
//! own `Command::arg` quotes too, but with rules of its own; one quoting function, ours,
//! tested against `sh`, keeps every layer in one place. The login shell must be a POSIX
//! shell (sh, dash, bash, zsh, ksh; not csh or fish).
//!
//! Each line runs `sh -c <script> sh <args...>`, as root: through `sudo -n` when the user
//! is not root (checked once with `sudo -n true`). `sudo` runs its argv without a shell,
//! and the scripts (the constants of `scripts`) use their arguments only as `"$@"` /
//! `"$1"`, so an argument reaches its program byte for byte whatever it holds. Arguments
//! may not contain NUL (no argv can).
//!
//! Every script reports its exit status as a last line on stderr (`@@harness-exit N`),
//! which the backend strips: ssh's own status cannot tell a command's exit 255 from a
//! lost connection, the line can (no line: the connection was lost).
//!
//! [`Backend::exec`] runs argv under a watchdog (the [`scripts::WATCHDOG`] script): the
//! command's stdin is `/dev/null`, and a background loop reads the ssh channel's stdin,
//! which the harness holds open and never writes. When the future is dropped, the local
//! `ssh` is killed, sshd closes the channel, the loop sees end of file and SIGKILLs the
//! command (its own process; children it started in the background are not tracked).
//! The same happens when the connection to the host is lost.
//!
//! ## Daemons
//!
//! [`Backend::spawn_daemon`] starts argv in the background (`setsid` when present),
//! stdout and stderr appended to the log, stdin `/dev/null`, no tie to the ssh session;
//! the pid returned is the daemon's own (`setsid` of a process that is not a group
//! leader execs without forking). The script waits until the daemon has exec'd and is
//! still alive 50 ms after it started, else it fails with [`BackendError::DaemonStart`]
//! and the log's tail. Each daemon is recorded with its start time (field 22 of
//! `/proc/<pid>/stat`), and every signal, liveness check and kill compares it first.
//!
//! ## Addresses
//!
//! [`Backend::address`] is the IPv4 address the brokers listen on and the harness
//! connects to. The host name ssh connects to (after the ssh config: `ssh -G`) is
//! resolved on this machine; when that fails or gives a loopback address (vagrant's port
//! forwards, a `ProxyJump` to a name only the jump host knows), the host is asked
//! (`hostname -I`, else `ip -4 addr`), and of its addresses that no other host also has
//! (vagrant gives every machine the same NAT address 10.0.2.15 beside its private one)
//! the first that this machine can connect to on port 22 is taken, else the first.
//!
//! ## The run on the hosts
//!
//! A run has an id, `jh` + 6 hex digits. On every host it creates the folder
//! `<remote_dir>/<run id>/` (node `nK`'s files in `nK/`; made with `mkdir`, so that one
//! that exists already is refused, except the first host's on hosts that share a file
//! system, recognized by a token file in it), then an iptables chain `<run id>-cuts` and
//! a rule at the head of `INPUT` that jumps to it, commented with the run id (recorded
//! before they are created). Cuts are `DROP` rules in the receiver's chain
//! ([`netns::cut_rules`], the same as the netns backend's), made with `iptables -A` and
//! removed with `iptables -D`, so they add up and an uncut of a cut not in place fails;
//! the rules of one call are applied with one command per host, the hosts in parallel.
//! Missing tools are installed with apt on Debian and Ubuntu, as Jepsen's OS setup does.
//!
//! ## Teardown
//!
//! [`SshBackend`] is a guard: dropping it tears the run down (on a thread of its own
//! with its own runtime), [`Backend::teardown`] does it explicitly, and
//! [`teardown_all`] does it for every live backend of the process (the Ctrl-C handler).
//! On every host it SIGKILLs the recorded daemons (identity checked) and any process
//! whose command line names a path inside the run's folder, waits until they are gone,
//! deletes the `INPUT` rule and the chain, removes exactly `<remote_dir>/<run id>`, then
//! closes the connections and removes the control folder. Each step checks that its
//! target exists, so teardown is idempotent.
//!
//! ## The run's record, and `harness clean`
//!
//! The run writes what a teardown needs into its control folder (`run.json`, the
//! `record` module): how to reach each host, what the probe found, which hosts may hold
//! the run folder and chain, the daemons. It is written before the chains are made, once
//! the folders are, and after each daemon starts, and goes with the control folder at the end of
//! a teardown; a teardown that could not remove everything from a host keeps it. After
//! a SIGKILL of the harness, [`clean_leftovers`] (`harness clean`) finds the folders in
//! the temp dir whose owner is gone, stops that harness's ssh masters, and tears the run
//! down from the record. It trusts a record only in a folder of its own user that no one
//! else may write, whose names all carry the run id and whose hosts pass the nodes
//! file's checks. Clean looks in the temp dir of its own environment (`TMPDIR`): a run
//! made with another one is found only with the same.
//!
//! ## Files
//!
//! - this file: the options ([`SshOptions`], [`HostKeyPolicy`]), the guard
//!   [`SshBackend`] with its [`Backend`] implementation, and [`teardown_all`];
//! - `hosts`: [`Host`], the nodes file and `vagrant ssh-config` parsers, host checks;
//! - `address`: `ssh -G` output, the host's own addresses, the choice of each node's
//!   IPv4 address;
//! - `quote`: [`shell_quote`], the line ssh sends, the exit marker, argument checks;
//! - `scripts`: the shell scripts run on the hosts and the tools they need;
//! - `session`: the per-host connections and running a command or script on a host
//!   (the backend's shared core, `Inner`);
//! - `setup`: connecting, probing and preparing the hosts (tools, sudo, iptables,
//!   addresses, the run folder and chain);
//! - `daemons`: starting daemons, liveness checks and signals, identity checked;
//! - `files`: upload and download;
//! - `cuts`: cutting and healing traffic with iptables rules;
//! - `teardown`: removing the run from every host;
//! - `record`: the run's record in its control folder ([`SshRunRecord`]);
//! - `clean`: `harness clean` for runs whose harness is gone ([`clean_leftovers`]);
//! - `wait`: waiting on futures (a time limit, all at once, the first error).
//!
//! [`Session`]: openssh::Session
//! [`netns::cut_rules`]: super::netns::cut_rules

mod address;
mod clean;
mod cuts;
mod daemons;
mod files;
mod hosts;
mod quote;
mod record;
mod scripts;
mod session;
mod setup;
mod teardown;
mod wait;

pub use clean::{clean_leftovers, control_folders};
pub use hosts::{parse_nodes_file, parse_vagrant_ssh_config, vagrant_hosts, Host};
pub use quote::{shell_command, shell_quote};
pub use record::{SshRunRecord, CONTROL_DIR_PREFIX, RECORD_FILE};

use crate::state;
use crate::tools;
use crate::{Backend, BackendError, BoxFuture, Cut, ExecOutput, Signal};
use hosts::check_host;
use quote::check_remote_dir;
use session::{lock, HostConn, Inner, Run, LIVE};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use tokio::sync::{RwLock, Semaphore};

/// The default folder on every host under which a run keeps its files
/// (`<remote_dir>/<run id>/<node>/`).
pub const DEFAULT_REMOTE_DIR: &str = "/var/tmp/harness";

/// Commands that may run at once on one host (sshd's `MaxSessions` is 10 by default; a
/// teardown may add one more).
pub const CHANNELS_PER_HOST: usize = 8;

/// How ssh treats host keys it does not know (`--ssh-host-keys strict|accept-new|off`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostKeyPolicy {
    /// Only hosts already in known_hosts (`StrictHostKeyChecking=yes`).
    Strict,
    /// New hosts are added to known_hosts, changed keys refused (`accept-new`).
    AcceptNew,
    /// No checking at all (`StrictHostKeyChecking=no`), as vagrant's own config does.
    Off,
}

impl HostKeyPolicy {
    pub const ALL: [HostKeyPolicy; 3] = [
        HostKeyPolicy::Strict,
        HostKeyPolicy::AcceptNew,
        HostKeyPolicy::Off,
    ];

    /// The name `--ssh-host-keys` takes.
    pub fn name(self) -> &'static str {
        match self {
            HostKeyPolicy::Strict => "strict",
            HostKeyPolicy::AcceptNew => "accept-new",
            HostKeyPolicy::Off => "off",
        }
    }
}

impl std::str::FromStr for HostKeyPolicy {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        HostKeyPolicy::ALL
            .into_iter()
            .find(|policy| policy.name() == text)
            .ok_or_else(|| format!("{text:?}: one of strict, accept-new, off"))
    }
}

/// Everything the ssh backend needs to reach its hosts.
#[derive(Debug, Clone)]
pub struct SshOptions {
    /// The hosts, in node order; a test of N nodes uses the first N.
    pub hosts: Vec<Host>,
    /// A private key for hosts without their own (`--ssh-key`).
    pub identity_file: Option<PathBuf>,
    /// An ssh config file passed to ssh as `-F` (`--ssh-config`).
    pub config_file: Option<PathBuf>,
    pub host_keys: HostKeyPolicy,
    /// Where runs keep their files on the hosts (`--remote-dir`).
    pub remote_dir: PathBuf,
}

/// The nodes of a test on hosts reached over ssh.
pub struct SshBackend {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SshBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SshBackend")
            .field("run_id", &self.inner.run_id)
            .field("run_dir", &self.inner.run_dir)
            .field("hosts", &self.inner.hosts.len())
            .finish_non_exhaustive()
    }
}

impl SshBackend {
    /// Connects to the first `nodes` hosts, prepares them (tools installed, the cut chain,
    /// the run's folder) and returns the backend. On error everything created so far is
    /// removed.
    pub async fn start(options: SshOptions, nodes: usize) -> Result<SshBackend, BackendError> {
        if nodes == 0 || nodes > options.hosts.len() {
            return Err(BackendError::Setup(format!(
                "{nodes} nodes, but {} hosts are given",
                options.hosts.len()
            )));
        }
        check_remote_dir(&options.remote_dir)?;
        for host in &options.hosts[..nodes] {
            check_host(host).map_err(|reason| {
                BackendError::Setup(format!("host {:?}: {reason}", host.label))
            })?;
        }
        let ssh = tools::Tool {
            binary: "ssh",
            package: "openssh-client",
        };
        tokio::task::spawn_blocking(move || tools::ensure_tools(&[ssh]))
            .await
            .map_err(|error| BackendError::Internal(format!("looking for ssh: {error}")))??;
        let (run_id, control_dir) = fresh_control_dir()?;
        let owner = match state::ProcessRecord::this_process() {
            Some(owner) => owner,
            None => {
                let _ = std::fs::remove_dir(&control_dir);
                return Err(BackendError::Internal(
                    "cannot read this process's own /proc entry".into(),
                ));
            }
        };
        let created = chrono::Utc::now().to_rfc3339();
        let inner = Arc::new(Inner::new(
            options,
            nodes,
            run_id,
            control_dir,
            owner,
            created,
        ));
        lock(&LIVE).push(Arc::downgrade(&inner));
        // From here on, dropping the guard (on the errors below too) tears the run down.
        let backend = SshBackend { inner };
        backend.inner.save_record()?;
        backend.inner.setup().await?;
        Ok(backend)
    }

    /// The run's folder on every host (`<remote_dir>/<run id>`); node `nK`'s files go
    /// in `<run folder>/nK/`.
    pub fn run_dir(&self) -> &Path {
        &self.inner.run_dir
    }

    /// The run's id, `jh` + 6 hex digits: the run folder's name, the chain's prefix.
    pub fn run_id(&self) -> &str {
        &self.inner.run_id
    }

    /// The iptables chain on every host that holds the cuts.
    pub fn chain(&self) -> &str {
        &self.inner.chain
    }

    /// The local folder of the connections' control sockets (removed at teardown).
    pub fn control_dir(&self) -> &Path {
        &self.inner.control_dir
    }

    /// `nK (label, user@address:port)` for messages (and the IPv4 address the node is
    /// reached at, when that is not the address ssh connects to).
    pub fn describe(&self, node: &str) -> String {
        match self.inner.host(node) {
            Ok(host) => self.inner.describe(host),
            Err(_) => node.to_string(),
        }
    }
}

/// A new run id and its private control folder in the system temp dir.
fn fresh_control_dir() -> Result<(String, PathBuf), BackendError> {
    use std::os::unix::fs::DirBuilderExt;
    for _ in 0..64 {
        let run_id = state::random_prefix()?;
        let dir = std::env::temp_dir().join(format!("{CONTROL_DIR_PREFIX}{run_id}"));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok((run_id, dir)),
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(source) => {
                return Err(BackendError::Io {
                    what: "creating".into(),
                    path: dir,
                    source,
                })
            }
        }
    }
    Err(BackendError::Setup(
        "no unused run id after 64 tries".into(),
    ))
}

impl Inner {
    /// The core of a run on the first `nodes` hosts of `options`, nothing made yet.
    fn new(
        options: SshOptions,
        nodes: usize,
        run_id: String,
        control_dir: PathBuf,
        owner: state::ProcessRecord,
        created: String,
    ) -> Inner {
        let remote_dir_text = options
            .remote_dir
            .to_string_lossy()
            .trim_end_matches('/')
            .to_string();
        let run_dir_text = format!("{remote_dir_text}/{run_id}");
        let hosts: Vec<HostConn> = options.hosts[..nodes.min(options.hosts.len())]
            .iter()
            .enumerate()
            .map(|(index, host)| HostConn {
                node: format!("n{}", index + 1),
                host: host.clone(),
                session: Mutex::new(None),
                sudo: OnceLock::new(),
                facts: OnceLock::new(),
                channels: Semaphore::new(CHANNELS_PER_HOST),
            })
            .collect();
        let count = hosts.len();
        Inner {
            chain: format!("{run_id}-cuts"),
            run_dir: PathBuf::from(&run_dir_text),
            run_dir_text,
            remote_dir_text,
            run_id,
            control_dir,
            owner,
            created,
            options,
            run: Mutex::new(Run {
                dirs: vec![false; count],
                chains: vec![false; count],
                ..Run::default()
            }),
            hosts,
            gate: RwLock::new(()),
        }
    }
}

/// Tears down every live ssh backend of this process (for a signal handler).
pub async fn teardown_all() -> Vec<(String, Result<(), BackendError>)> {
    let live: Vec<Arc<Inner>> = lock(&LIVE).iter().filter_map(Weak::upgrade).collect();
    let mut outcomes = Vec::new();
    for inner in live {
        outcomes.push((inner.run_id.clone(), inner.teardown().await));
    }
    outcomes
}

impl Drop for SshBackend {
    fn drop(&mut self) {
        if lock(&self.inner.run).torn_down {
            return;
        }
        // Teardown is async; a thread of its own with its own runtime runs it whether or
        // not this drop happens inside a runtime.
        let inner = Arc::clone(&self.inner);
        let outcome = std::thread::Builder::new()
            .name(format!("teardown-{}", inner.run_id))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|error| {
                        BackendError::Internal(format!("teardown runtime: {error}"))
                    })?;
                runtime.block_on(inner.teardown())
            })
            .map_err(|error| BackendError::Internal(format!("teardown thread: {error}")))
            .and_then(|thread| {
                thread
                    .join()
                    .map_err(|_| BackendError::Internal("the teardown thread panicked".into()))?
            });
        if let Err(error) = outcome {
            eprintln!("error: {error}");
        }
    }
}

impl Backend for SshBackend {
    fn kind(&self) -> &'static str {
        "ssh"
    }

    fn nodes(&self) -> Vec<String> {
        self.inner
            .hosts
            .iter()
            .map(|host| host.node.clone())
            .collect()
    }

    fn address(&self, node: &str) -> Result<IpAddr, BackendError> {
        let host = self.inner.host(node)?;
        Ok(IpAddr::V4(self.inner.facts(host)?.address))
    }

    fn exec<'a>(
        &'a self,
        node: &'a str,
        argv: &'a [String],
    ) -> BoxFuture<'a, Result<ExecOutput, BackendError>> {
        Box::pin(self.inner.exec(node, argv))
    }

    fn spawn_daemon<'a>(
        &'a self,
        node: &'a str,
        argv: &'a [String],
        log_file: &'a Path,
    ) -> BoxFuture<'a, Result<u32, BackendError>> {
        Box::pin(self.inner.spawn_daemon(node, argv, log_file))
    }

    fn signal<'a>(
        &'a self,
        node: &'a str,
        pid: u32,
        signal: Signal,
    ) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(self.inner.signal(node, pid, signal))
    }

    fn is_running<'a>(
        &'a self,
        node: &'a str,
        pid: u32,
    ) -> BoxFuture<'a, Result<bool, BackendError>> {
        Box::pin(self.inner.check(node, pid, None))
    }

    fn upload<'a>(
        &'a self,
        local: &'a Path,
        node: &'a str,
        remote: &'a Path,
    ) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(self.inner.upload(local, node, remote))
    }

    fn download<'a>(
        &'a self,
        node: &'a str,
        remote: &'a Path,
        local: &'a Path,
    ) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(self.inner.download(node, remote, local))
    }

    fn cut<'a>(&'a self, cuts: &'a [Cut]) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(self.inner.cut(cuts))
    }

    fn uncut<'a>(&'a self, cuts: &'a [Cut]) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(self.inner.uncut(cuts))
    }

    fn heal(&self) -> BoxFuture<'_, Result<(), BackendError>> {
        Box::pin(self.inner.heal())
    }

    fn teardown(&self) -> BoxFuture<'_, Result<(), BackendError>> {
        Box::pin(self.inner.teardown())
    }
}
