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
//! and the scripts (constants below) use their arguments only as `"$@"` / `"$1"`, so an
//! argument reaches its program byte for byte whatever it holds. Arguments may not
//! contain NUL (no argv can).
//!
//! Every script reports its exit status as a last line on stderr (`@@harness-exit N`),
//! which the backend strips: ssh's own status cannot tell a command's exit 255 from a
//! lost connection, the line can (no line: the connection was lost).
//!
//! [`Backend::exec`] runs argv under a watchdog (the [`WATCHDOG`] script): the command's
//! stdin is `/dev/null`, and a background loop reads the ssh channel's stdin, which the
//! harness holds open and never writes. When the future is dropped, the local `ssh` is
//! killed, sshd closes the channel, the loop sees end of file and SIGKILLs the command
//! (its own process; children it started in the background are not tracked). The same
//! happens when the connection to the host is lost.
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
//! target exists, so teardown is idempotent. Unlike the netns backend, no state file is
//! kept and `harness clean` knows nothing of ssh runs: after a SIGKILL of the harness,
//! the run's folder, chain and daemons stay on the hosts (named by the run id), and so
//! do the ControlMaster `ssh` processes of its control folder here.

use super::netns::{self, CutRule, RuleVerb};
use super::state;
use super::tools::{self, display_command};
use super::{Backend, BackendError, BoxFuture, Cut, ExecOutput, Signal};
use openssh::{KnownHosts, Session, SessionBuilder, Stdio};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::sync::{RwLock, Semaphore};

/// The default folder on every host under which a run keeps its files
/// (`<remote_dir>/<run id>/<node>/`).
pub const DEFAULT_REMOTE_DIR: &str = "/var/tmp/harness";

/// Commands that may run at once on one host (sshd's `MaxSessions` is 10 by default; a
/// teardown may add one more).
pub const CHANNELS_PER_HOST: usize = 8;

/// How long ssh waits for a host to answer when connecting.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// How often ssh checks that an idle connection is still alive.
const ALIVE_INTERVAL: Duration = Duration::from_secs(10);

/// The longest a setup or teardown command may take (apt has its own, longer).
const STEP_TIMEOUT: Duration = Duration::from_secs(120);

/// The longest installing missing tools may take.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(900);

/// The line every script ends its stderr with, before its exit status.
const EXIT_MARKER: &str = "\n@@harness-exit ";

/// Puts the sbin folders on `PATH` (iptables lives there; a non-root login often lacks
/// them, and sudo may keep the user's `PATH`).
const PATH_PRELUDE: &str =
    "PATH=\"$PATH:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\"; export PATH\n";

/// `fields STAT-LINE` sets `state` (field 3) and `start` (field 22) of a
/// `/proc/<pid>/stat` line, counting from the last `)` (the command name may hold spaces
/// and parentheses); `alive` says whether `$pid` is still the process born at `$born`
/// (stopped counts, a zombie does not).
const PROC_FUNCTIONS: &str = r#"
fields() {
  rest=${1##*") "}
  set -f
  set -- $rest
  set +f
  [ $# -ge 20 ] || return 1
  state=$1
  shift 19
  start=$1
}
alive() {
  IFS= read -r stat 2>/dev/null <"/proc/$pid/stat" || return 1
  fields "$stat" || return 1
  [ "$start" = "$born" ] && [ "$state" != Z ] && [ "$state" != X ]
}
"#;

/// Runs `"$@"` with stdin `/dev/null`, and SIGKILLs it when the ssh channel's stdin
/// ends (the harness dropped the command, or the connection is gone). Then the marker.
const WATCHDOG: &str = r#"exec 3<&0
"$@" </dev/null 3<&- &
p=$!
(while read -r _; do :; done; kill -s KILL "$p") <&3 >/dev/null 2>&1 &
w=$!
exec 3<&-
wait "$p"
s=$?
kill "$w" 2>/dev/null
printf '\n@@harness-exit %s\n' "$s" >&2
exit "$s"
"#;

/// Args: parent folder, path, expected size, mode (octal). Writes stdin to a temporary
/// file beside the path, checks its size, sets its mode and renames it into place.
const UPLOAD_FILE: &str = r#"s=1
tmp="$2.harness-part-$$"
if mkdir -p -- "$1" && cat >"$tmp"; then
  got=$(wc -c <"$tmp")
  if [ "$got" -eq "$3" ]; then
    chmod "$4" "$tmp" && mv -f -- "$tmp" "$2" && s=0
  else
    echo "received $got of $3 bytes" >&2
  fi
fi
[ "$s" = 0 ] || rm -f -- "$tmp"
printf '\n@@harness-exit %s\n' "$s" >&2
exit "$s"
"#;

/// Args: folder. Unpacks the tar archive on stdin into the folder (created).
const UPLOAD_DIR: &str = r#"s=1
mkdir -p -- "$1" && tar -xf - -C "$1" && s=0
printf '\n@@harness-exit %s\n' "$s" >&2
exit "$s"
"#;

/// Args: the log's folder, the log, argv. Prints `started <pid> <start time>`, or
/// `exited <status>` and the log's last lines, or `timeout`.
const SPAWN: &str = r#"mkdir -p -- "$1" || exit 1
log=$2
shift 2
if command -v setsid >/dev/null 2>&1; then
  setsid "$@" >>"$log" 2>&1 </dev/null &
else
  "$@" >>"$log" 2>&1 </dev/null &
fi
pid=$!
exited() {
  wait "$pid"
  echo "exited $?"
  tail -n 5 -- "$log" 2>/dev/null
  exit 0
}
IFS= read -r stat 2>/dev/null <"/proc/$pid/stat" || exited
fields "$stat" || exited
born=$start
shell=$(tr '\0' '\001' <"/proc/$$/cmdline")
launcher=$( (printf 'setsid\001'; printf '%s\001' "$@") )
i=0
while :; do
  alive || exited
  now=$(tr '\0' '\001' 2>/dev/null <"/proc/$pid/cmdline")
  if [ "$i" -ge 5 ] && [ -n "$now" ] && [ "$now" != "$shell" ] && [ "$now" != "$launcher" ]; then
    break
  fi
  i=$((i + 1))
  if [ "$i" -gt 1000 ]; then
    kill -s KILL "$pid" 2>/dev/null
    echo timeout
    exit 0
  fi
  sleep 0.01
done
echo "started $pid $born"
"#;

/// Args: the remote folder, the run folder, a token, `first` or `other`. Makes the run
/// folder, which must not exist, and puts the token in it; on the other hosts an
/// existing run folder with the same token is the first host's (a shared file system).
const MAKE_RUN_DIR: &str = r#"mkdir -p -- "$1" || exit 1
if mkdir -- "$2" 2>/dev/null; then
  printf '%s\n' "$3" >"$2/.harness-run" || exit 1
  exit 0
fi
if [ "$4" = other ] && [ "$(cat -- "$2/.harness-run" 2>/dev/null)" = "$3" ]; then
  exit 0
fi
echo "$2 exists already: another run uses this run id (try again)" >&2
exit 1
"#;

/// Args: pid, start time, signal name or empty. Prints `gone`, `alive` or `signalled`.
const CHECK: &str = r#"pid=$1
born=$2
sig=$3
alive || { echo gone; exit 0; }
[ -n "$sig" ] || { echo alive; exit 0; }
if kill -s "$sig" "$pid"; then
  echo signalled
  exit 0
fi
alive && exit 1
echo gone
"#;

/// Args: the run folder, then pid and start time pairs. SIGKILLs the recorded daemons
/// still alive and every process whose command line names a path inside the run
/// folder, then waits (10 s) until they are gone. Prints `killed <pid>` for each.
const KILL_ALL: &str = r#"dir=$1
shift
targets=
while [ $# -ge 2 ]; do
  pid=$1
  born=$2
  shift 2
  if alive && kill -s KILL "$pid" 2>/dev/null; then
    targets="$targets $pid:$born"
    echo "killed $pid"
  fi
done
for file in $(printf '%s/\n' "$dir" | grep -laFf - /proc/[0-9]*/cmdline 2>/dev/null); do
  pid=${file#/proc/}
  pid=${pid%/cmdline}
  [ "$pid" = "$$" ] && continue
  IFS= read -r stat 2>/dev/null <"/proc/$pid/stat" || continue
  fields "$stat" || continue
  if kill -s KILL "$pid" 2>/dev/null; then
    targets="$targets $pid:$start"
    echo "killed $pid"
  fi
done
i=0
while :; do
  left=
  for target in $targets; do
    pid=${target%%:*}
    born=${target#*:}
    alive && left="$left $pid"
  done
  [ -z "$left" ] && exit 0
  i=$((i + 1))
  if [ "$i" -gt 1000 ]; then
    echo "still running 10 s after SIGKILL:$left" >&2
    exit 1
  fi
  sleep 0.01
done
"#;

/// Args: iptables, chain, comment. Deletes every `INPUT` rule jumping to the chain with
/// the comment, then the chain, if they exist.
const REMOVE_CHAIN: &str = r#"ipt=$1
chain=$2
tag=$3
while "$ipt" -w 10 -C INPUT -m comment --comment "$tag" -j "$chain" 2>/dev/null; do
  "$ipt" -w 10 -D INPUT -m comment --comment "$tag" -j "$chain" || exit 1
done
if "$ipt" -w 10 -S "$chain" >/dev/null 2>&1; then
  "$ipt" -w 10 -F "$chain" && "$ipt" -w 10 -X "$chain" || exit 1
fi
"#;

/// Args: tools. Prints `missing: <tools>`, `proc: yes|no`, `os: <ID> <ID_LIKE>`,
/// `apt: yes|no`.
const PROBE: &str = r#"missing=
for tool in "$@"; do
  command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done
echo "missing:$missing"
if [ -r /proc/self/stat ]; then echo "proc: yes"; else echo "proc: no"; fi
if [ -r /etc/os-release ]; then
  (. /etc/os-release; echo "os: ${ID:-} ${ID_LIKE:-}")
fi
if command -v apt-get >/dev/null 2>&1; then echo "apt: yes"; else echo "apt: no"; fi
"#;

/// Args: packages. Installs them with apt, updating the package lists if that fails.
const INSTALL: &str = r#"DEBIAN_FRONTEND=noninteractive
export DEBIAN_FRONTEND
install() {
  apt-get -o DPkg::Lock::Timeout=120 install -y --no-install-recommends "$@"
}
install "$@" || { apt-get -o DPkg::Lock::Timeout=120 update && install "$@"; }
"#;

/// The host's own IPv4 addresses.
const ADDRESSES: &str = "hostname -I 2>/dev/null || ip -4 -o addr show scope global";

/// The tools the backend's scripts need on every host, besides `sh` and its builtins,
/// and the Debian package of each. `setsid`, `grep` and `tar` are used when present.
const REQUIRED_TOOLS: [(&str, &str); 10] = [
    ("iptables", "iptables"),
    ("cat", "coreutils"),
    ("mkdir", "coreutils"),
    ("rm", "coreutils"),
    ("mv", "coreutils"),
    ("chmod", "coreutils"),
    ("wc", "coreutils"),
    ("tr", "coreutils"),
    ("tail", "coreutils"),
    ("sleep", "coreutils"),
];

/// One host of a nodes file or of `vagrant ssh-config`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// The host's label in the file (`n1`, `db-3`, ...); the harness names nodes
    /// `n1..nN` by position, and shows the label beside it.
    pub label: String,
    /// What ssh connects to: a name or an address as written.
    pub address: String,
    pub user: Option<String>,
    pub port: Option<u16>,
    /// A private key for this host (vagrant gives one per machine).
    pub identity_file: Option<PathBuf>,
}

/// How ssh treats host keys it does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostKeyPolicy {
    /// Only hosts already in known_hosts (`StrictHostKeyChecking=yes`).
    Strict,
    /// New hosts are added to known_hosts, changed keys refused (`accept-new`).
    AcceptNew,
    /// No checking at all (`StrictHostKeyChecking=no`), as vagrant's own config does.
    Off,
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

/// Why a host's address, user or label is refused, if it is.
fn check_host(host: &Host) -> Result<(), String> {
    if host.label.is_empty() {
        return Err("empty label".into());
    }
    // A destination or user starting with `-` would be read by ssh as an option.
    let name_ok = |text: &str| {
        !text.is_empty()
            && !text.starts_with('-')
            && text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-:[]%".contains(c))
    };
    if !name_ok(&host.address) {
        return Err(format!(
            "address {:?}: expected a host name or an IP address",
            host.address
        ));
    }
    if let Some(user) = &host.user {
        let user_ok = !user.is_empty()
            && !user.starts_with('-')
            && user
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-$".contains(c));
        if !user_ok {
            return Err(format!("user {user:?}: not a user name"));
        }
    }
    if host.port == Some(0) {
        return Err("port 0".into());
    }
    Ok(())
}

/// Refuses a second host with the same label or address (`what` names the source).
fn check_unique(hosts: &[Host], host: &Host) -> Result<(), String> {
    if let Some(index) = hosts.iter().position(|other| other.label == host.label) {
        return Err(format!(
            "label {:?} is already host {} of the list",
            host.label,
            index + 1
        ));
    }
    if let Some(index) = hosts.iter().position(|other| other.address == host.address) {
        return Err(format!(
            "address {:?} is already host {} ({}) of the list",
            host.address,
            index + 1,
            hosts[index].label
        ));
    }
    Ok(())
}

/// Parses a nodes file: one host per line, `label address [user] [port]`, `#` comments
/// and blank lines ignored. Errors name the line.
pub fn parse_nodes_file(text: &str) -> Result<Vec<Host>, BackendError> {
    let mut hosts: Vec<Host> = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let refuse = |reason: String| BackendError::Setup(format!("line {number}: {reason}"));
        let content = line.split('#').next().unwrap_or_default();
        let fields: Vec<&str> = content.split_whitespace().collect();
        let (label, address, user, port) = match fields.as_slice() {
            [] => continue,
            [label] => {
                return Err(refuse(format!(
                    "host {label:?} has no address (expected `label address [user] [port]`)"
                )))
            }
            [label, address] => (label, address, None, None),
            [label, address, user] => (label, address, Some(user), None),
            [label, address, user, port] => (label, address, Some(user), Some(port)),
            _ => {
                return Err(refuse(format!(
                    "{} fields; expected `label address [user] [port]`",
                    fields.len()
                )))
            }
        };
        let port = match port {
            None => None,
            Some(text) => match text.parse::<u16>() {
                Ok(port) if port > 0 => Some(port),
                _ => return Err(refuse(format!("bad port {text:?} (1 to 65535)"))),
            },
        };
        // `-` keeps the default user, for a line that only sets the port.
        let user = user
            .filter(|user| **user != "-")
            .map(|user| user.to_string());
        let host = Host {
            label: label.to_string(),
            address: address.to_string(),
            user,
            port,
            identity_file: None,
        };
        check_host(&host).map_err(&refuse)?;
        check_unique(&hosts, &host).map_err(&refuse)?;
        hosts.push(host);
    }
    if hosts.is_empty() {
        return Err(BackendError::Setup(
            "no hosts (one per line: `label address [user] [port]`)".into(),
        ));
    }
    Ok(hosts)
}

/// An ssh config value: the rest of the line, without the quotes around it.
fn config_value(rest: &str) -> String {
    let rest = rest.trim();
    let rest = rest.strip_prefix('=').map(str::trim).unwrap_or(rest);
    match rest.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        Some(inner) => inner.to_string(),
        None => rest.to_string(),
    }
}

/// Parses the output of `vagrant ssh-config` (Host, HostName, User, Port, IdentityFile).
pub fn parse_vagrant_ssh_config(text: &str) -> Result<Vec<Host>, BackendError> {
    let mut hosts: Vec<Host> = Vec::new();
    let mut current: Option<(usize, Host)> = None;
    let finish = |hosts: &mut Vec<Host>, current: Option<(usize, Host)>| {
        if let Some((number, host)) = current {
            let refuse = |reason: String| {
                BackendError::Setup(format!("vagrant ssh-config line {number}: {reason}"))
            };
            check_host(&host).map_err(&refuse)?;
            check_unique(hosts, &host).map_err(&refuse)?;
            hosts.push(host);
        }
        Ok::<(), BackendError>(())
    };
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, rest) = line
            .split_once(|c: char| c.is_whitespace() || c == '=')
            .unwrap_or((line, ""));
        let value = config_value(rest);
        let refuse = |reason: String| {
            BackendError::Setup(format!("vagrant ssh-config line {number}: {reason}"))
        };
        if key.eq_ignore_ascii_case("Host") {
            finish(&mut hosts, current.take())?;
            if value.is_empty() {
                return Err(refuse("`Host` without a name".into()));
            }
            current = Some((
                number,
                Host {
                    label: value.clone(),
                    address: value,
                    user: None,
                    port: None,
                    identity_file: None,
                },
            ));
            continue;
        }
        let Some((_, host)) = current.as_mut() else {
            return Err(refuse(format!("`{key}` before any `Host`")));
        };
        if key.eq_ignore_ascii_case("HostName") {
            host.address = value;
        } else if key.eq_ignore_ascii_case("User") {
            host.user = Some(value);
        } else if key.eq_ignore_ascii_case("Port") {
            match value.parse::<u16>() {
                Ok(port) if port > 0 => host.port = Some(port),
                _ => return Err(refuse(format!("bad port {value:?} (1 to 65535)"))),
            }
        } else if key.eq_ignore_ascii_case("IdentityFile") {
            // The first one counts, as for ssh; vagrant lists one.
            if host.identity_file.is_none() {
                host.identity_file = Some(PathBuf::from(value));
            }
        }
    }
    finish(&mut hosts, current.take())?;
    if hosts.is_empty() {
        return Err(BackendError::Setup(
            "vagrant ssh-config lists no hosts (is the machine up? `vagrant up`)".into(),
        ));
    }
    Ok(hosts)
}

/// Runs `vagrant ssh-config` in `dir` (the current folder when `None`) and parses it.
pub async fn vagrant_hosts(dir: Option<&Path>) -> Result<Vec<Host>, BackendError> {
    let Some(vagrant) = tools::find_binary("vagrant") else {
        return Err(BackendError::MissingTool {
            tool: "vagrant".into(),
            package: "vagrant".into(),
            reason: "needed for --vagrant; or list the hosts in a --nodes-file".into(),
        });
    };
    let dir = dir.map(Path::to_path_buf);
    let argv = vec![vagrant.display().to_string(), "ssh-config".to_string()];
    let output = tokio::task::spawn_blocking(move || {
        let mut command = std::process::Command::new(&argv[0]);
        command.args(&argv[1..]).stdin(std::process::Stdio::null());
        if let Some(dir) = &dir {
            command.current_dir(dir);
        }
        let shown = display_command(&argv);
        let output = command.output().map_err(|source| BackendError::Spawn {
            command: shown.clone(),
            source,
        })?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(BackendError::Command {
                command: shown,
                status: output.status.to_string(),
                stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            })
        }
    })
    .await
    .map_err(|error| BackendError::Internal(format!("running vagrant: {error}")))??;
    parse_vagrant_ssh_config(&output)
}

/// Whether `arg` needs no quotes: characters no POSIX shell treats specially in a word
/// (no `=`, which makes a first word an assignment, no `~`, no glob characters).
fn is_plain(arg: &str) -> bool {
    !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:,@+%".contains(c))
}

/// `arg` quoted for a POSIX shell so that it reaches the program as exactly one argument
/// whatever it contains.
pub fn shell_quote(arg: &str) -> String {
    if is_plain(arg) {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

/// `argv` as one shell command line, every element quoted.
pub fn shell_command(argv: &[String]) -> String {
    argv.iter()
        .map(|arg| shell_quote(arg))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The line ssh sends for `sh -c <script> sh <args...>`, through `sudo -n` when `sudo`.
fn remote_line(sudo: bool, script: &str, args: &[String]) -> String {
    let mut argv: Vec<String> = Vec::with_capacity(args.len() + 7);
    if sudo {
        argv.extend(["sudo", "-n", "--"].map(String::from));
    }
    argv.extend(["sh".to_string(), "-c".to_string(), script.to_string()]);
    argv.push("sh".to_string());
    argv.extend(args.iter().cloned());
    shell_command(&argv)
}

/// A script with the `/proc` helpers and the `PATH` prelude in front.
fn with_prelude(script: &str, proc_functions: bool) -> String {
    let mut text = String::from(PATH_PRELUDE);
    if proc_functions {
        text.push_str(PROC_FUNCTIONS);
    }
    text.push_str(script);
    text
}

/// Splits the exit marker off stderr: the stderr the command wrote and its status.
fn split_exit_marker(stderr: &str) -> Option<(String, i32)> {
    let at = stderr.rfind(EXIT_MARKER)?;
    let after = &stderr[at + EXIT_MARKER.len()..];
    let (code, rest) = after.split_once('\n')?;
    let code = code.trim().parse().ok()?;
    Some((format!("{}{}", &stderr[..at], rest), code))
}

/// For each host, the addresses it may be reached at: the one resolved here when there
/// is one, else those of the host's own addresses (`reported`) that no other host also
/// reports, in the host's order. Empty when neither gives one.
fn address_candidates(
    resolved: &[Option<Ipv4Addr>],
    reported: &[Vec<Ipv4Addr>],
) -> Vec<Vec<Ipv4Addr>> {
    let mut counts: BTreeMap<Ipv4Addr, usize> = BTreeMap::new();
    for addresses in reported {
        let mut unique = addresses.clone();
        unique.sort();
        unique.dedup();
        for address in unique {
            *counts.entry(address).or_default() += 1;
        }
    }
    resolved
        .iter()
        .enumerate()
        .map(|(index, resolved)| match resolved {
            Some(address) => vec![*address],
            None => reported
                .get(index)
                .map(|addresses| {
                    addresses
                        .iter()
                        .copied()
                        .filter(|address| !address.is_loopback() && counts.get(address) == Some(&1))
                        .collect()
                })
                .unwrap_or_default(),
        })
        .collect()
}

/// The first candidate this machine can open a TCP connection to on port 22 (2 s each,
/// all at once), else the first candidate: a single vagrant machine's NAT address is its
/// alone too, but not reachable from here.
async fn pick_address(candidates: &[Ipv4Addr]) -> Option<Ipv4Addr> {
    if candidates.len() <= 1 {
        return candidates.first().copied();
    }
    let probes = candidates.iter().map(|address| async move {
        let connect = tokio::net::TcpStream::connect((*address, 22));
        matches!(
            tokio::time::timeout(Duration::from_secs(2), connect).await,
            Ok(Ok(_))
        )
    });
    let reached = join_all(probes).await;
    candidates
        .iter()
        .zip(reached)
        .find(|(_, reached)| *reached)
        .map(|(address, _)| *address)
        .or_else(|| candidates.first().copied())
}

/// The IPv4 addresses in the output of `hostname -I` (every word) or of
/// `ip -4 -o addr show` (the word after each `inet`, not the `brd` one).
fn parse_addresses(text: &str) -> Vec<Ipv4Addr> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let candidates: Vec<&str> = if words.contains(&"inet") {
        words
            .windows(2)
            .filter(|pair| pair[0] == "inet")
            .map(|pair| pair[1])
            .collect()
    } else {
        words
    };
    candidates
        .into_iter()
        .filter_map(|word| word.split('/').next()?.parse::<Ipv4Addr>().ok())
        .filter(|address| !address.is_loopback() && !address.is_unspecified())
        .collect()
}

/// What `ssh -G` says ssh would use for a host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Effective {
    hostname: Option<String>,
    user: Option<String>,
    port: Option<u16>,
}

fn parse_ssh_g(text: &str) -> Effective {
    let mut effective = Effective::default();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(' ') else {
            continue;
        };
        let value = value.trim();
        match key {
            "hostname" => effective.hostname = Some(value.to_string()),
            "user" => effective.user = Some(value.to_string()),
            "port" => effective.port = value.parse().ok(),
            _ => {}
        }
    }
    effective
}

/// A remote path as an argument (paths are UTF-8 here: they come from `String`s).
fn path_arg(path: &Path) -> Result<String, BackendError> {
    path.to_str()
        .map(str::to_string)
        .ok_or_else(|| BackendError::Io {
            what: "a remote path must be UTF-8".into(),
            path: path.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not UTF-8"),
        })
}

/// A remote path's parent folder (`/` for a top-level one, `.` for a bare name).
fn parent_arg(path: &Path) -> Result<String, BackendError> {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => path_arg(parent),
        Some(_) => Ok(".".into()),
        None => Ok("/".into()),
    }
}

/// Fails for argv that cannot reach a program intact.
fn check_argv(argv: &[String]) -> Result<(), BackendError> {
    if argv.is_empty() {
        return Err(BackendError::Spawn {
            command: String::new(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "empty argv"),
        });
    }
    if argv.iter().any(|arg| arg.contains('\0')) {
        return Err(BackendError::Spawn {
            command: display_command(argv),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "an argument contains a NUL byte",
            ),
        });
    }
    Ok(())
}

/// Refuses a remote folder that is not absolute, names `.` or `..`, or holds control
/// characters (teardown matches command lines against it).
fn check_remote_dir(dir: &Path) -> Result<String, BackendError> {
    let refuse =
        |reason: &str| BackendError::Setup(format!("--remote-dir {}: {reason}", dir.display()));
    let text = dir
        .to_str()
        .ok_or_else(|| refuse("not UTF-8"))?
        .trim_end_matches('/');
    if !dir.is_absolute() {
        return Err(refuse("must be an absolute path"));
    }
    if text.split('/').any(|part| part == "." || part == "..") {
        return Err(refuse("must not contain `.` or `..`"));
    }
    if text.chars().any(char::is_control) {
        return Err(refuse("must not contain control characters"));
    }
    Ok(text.to_string())
}

/// How a remote invocation's stdin and stdout are connected.
enum Stdin {
    /// A pipe the harness holds open and never writes (the watchdog's).
    Held,
    /// Read from this local file.
    File(std::fs::File),
}

enum Stdout {
    Capture,
    File(std::fs::File),
}

/// One remote invocation: `sh -c <script> sh <args>`, as root (through sudo when the
/// host needs it) unless `as_user`; `shown` names it in errors.
struct Call<'a> {
    script: &'a str,
    args: &'a [String],
    as_user: bool,
    stdin: Stdin,
    stdout: Stdout,
    shown: &'a str,
}

/// A daemon this backend started.
#[derive(Debug, Clone)]
struct Daemon {
    node: String,
    pid: u32,
    start_time: u64,
    argv: Vec<String>,
}

/// What a host turned out to be, once probed.
#[derive(Debug, Clone)]
struct Facts {
    /// The user ssh logs in as.
    user: String,
    port: u16,
    address: Ipv4Addr,
    /// The iptables binary that works there.
    iptables: String,
}

/// One host of the run.
struct HostConn {
    /// `n1`, `n2`, ...
    node: String,
    host: Host,
    session: Mutex<Option<Arc<Session>>>,
    /// Commands go through `sudo -n` (the user is not root); known once probed.
    sudo: OnceLock<bool>,
    facts: OnceLock<Facts>,
    channels: Semaphore,
}

/// What the run created and whether it is over.
#[derive(Default)]
struct Run {
    daemons: Vec<Daemon>,
    /// Per host: its run folder may exist.
    dirs: Vec<bool>,
    /// Per host: its chain and `INPUT` rule may exist.
    chains: Vec<bool>,
    closed: bool,
    torn_down: bool,
}

/// The backend's shared core; [`SshBackend`] is its guard.
struct Inner {
    run_id: String,
    run_dir: PathBuf,
    run_dir_text: String,
    remote_dir_text: String,
    chain: String,
    control_dir: PathBuf,
    options: SshOptions,
    hosts: Vec<HostConn>,
    run: Mutex<Run>,
    /// Held shared by operations that create things (daemons, cuts), exclusively by
    /// teardown, so that teardown sees everything they made.
    gate: RwLock<()>,
}

/// Every live backend of this process, for [`teardown_all`].
static LIVE: Mutex<Vec<Weak<Inner>>> = Mutex::new(Vec::new());

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// The openssh error with its causes (ssh's own message is in a source).
fn ssh_error(error: &openssh::Error) -> String {
    crate::error_chain(error)
}

impl Inner {
    fn host(&self, node: &str) -> Result<&HostConn, BackendError> {
        self.hosts
            .iter()
            .find(|host| host.node == node)
            .ok_or_else(|| BackendError::UnknownNode {
                node: node.to_string(),
                nodes: self.hosts.iter().map(|host| host.node.clone()).collect(),
            })
    }

    fn facts<'a>(&self, host: &'a HostConn) -> Result<&'a Facts, BackendError> {
        host.facts
            .get()
            .ok_or_else(|| BackendError::Internal(format!("{} is not set up", host.node)))
    }

    fn open(&self) -> Result<(), BackendError> {
        if lock(&self.run).closed {
            Err(BackendError::TornDown)
        } else {
            Ok(())
        }
    }

    fn describe(&self, host: &HostConn) -> String {
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

    async fn connect(&self, host: &HostConn) -> Result<(), BackendError> {
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
    async fn invoke(&self, host: &HostConn, call: Call<'_>) -> Result<ExecOutput, BackendError> {
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
    async fn run_argv(
        &self,
        host: &HostConn,
        argv: &[String],
        as_user: bool,
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
                shown: &display_command(argv),
            },
        )
        .await
    }

    /// Runs one of the scripts above (with the `/proc` helpers) under the watchdog.
    async fn run_script(
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
    async fn exec(&self, node: &str, argv: &[String]) -> Result<ExecOutput, BackendError> {
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
    async fn script(
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

    /// Connects to every host, probes them and creates the run's folder and chains.
    async fn setup(&self) -> Result<(), BackendError> {
        let connected = join_all(self.hosts.iter().map(|host| self.connect(host))).await;
        first_error(connected)?;
        let probed = join_all(self.hosts.iter().map(|host| self.probe(host))).await;
        let probed: Vec<Probed> = probed.into_iter().collect::<Result<_, _>>()?;
        let resolved: Vec<Option<Ipv4Addr>> = probed.iter().map(|p| p.resolved).collect();
        let reported: Vec<Vec<Ipv4Addr>> = probed.iter().map(|p| p.reported.clone()).collect();
        let candidates = address_candidates(&resolved, &reported);
        let addresses = join_all(candidates.iter().map(|list| pick_address(list))).await;
        for ((host, probed), address) in self.hosts.iter().zip(probed).zip(addresses) {
            let address = address.ok_or_else(|| {
                BackendError::Setup(format!(
                    "{}: cannot tell its IPv4 address (`{}` does not resolve here to a \
                     non-loopback IPv4 address, and none of the host's own addresses {:?} \
                     is its alone); give its address in the nodes file",
                    self.describe(host),
                    probed.hostname,
                    probed.reported
                ))
            })?;
            let _ = host.facts.set(Facts {
                user: probed.user,
                port: probed.port,
                address,
                iptables: probed.iptables,
            });
        }
        self.create_run_dirs().await?;
        let chains = join_all(self.hosts.iter().enumerate().map(|(i, host)| {
            lock(&self.run).chains[i] = true;
            self.create_chain(host)
        }))
        .await;
        first_error(chains)
    }

    /// The run folder on every host, made with `mkdir` (not `-p`), so that a folder that
    /// exists already is refused: the first host's gets a token file, and on a later host
    /// an existing folder is accepted only with that token in it (the hosts share a file
    /// system). Recorded for teardown once made.
    async fn create_run_dirs(&self) -> Result<(), BackendError> {
        let token = format!(
            "{} {} {}",
            self.run_id,
            std::process::id(),
            self.control_dir.display()
        );
        let Some(first) = self.hosts.first() else {
            return Ok(());
        };
        self.make_run_dir(0, first, &token).await?;
        let others = self
            .hosts
            .iter()
            .enumerate()
            .skip(1)
            .map(|(index, host)| self.make_run_dir(index, host, &token));
        first_error(join_all(others).await)
    }

    /// [`MAKE_RUN_DIR`] on one host (the first one when `index` is 0).
    async fn make_run_dir(
        &self,
        index: usize,
        host: &HostConn,
        token: &str,
    ) -> Result<(), BackendError> {
        let args = vec![
            self.remote_dir_text.clone(),
            self.run_dir_text.clone(),
            token.to_string(),
            if index == 0 { "first" } else { "other" }.to_string(),
        ];
        timed(
            STEP_TIMEOUT,
            self.run_script(host, "mkrun", MAKE_RUN_DIR, &args),
        )
        .await?;
        lock(&self.run).dirs[index] = true;
        Ok(())
    }

    async fn create_chain(&self, host: &HostConn) -> Result<(), BackendError> {
        let iptables = self.facts(host)?.iptables.clone();
        let argv = |args: &[&str]| -> Vec<String> {
            let mut argv = vec![iptables.clone(), "-w".into(), "10".into()];
            argv.extend(args.iter().map(|arg| arg.to_string()));
            argv
        };
        self.run_argv(host, &argv(&["-N", &self.chain]), false)
            .await?;
        self.run_argv(
            host,
            &argv(&[
                "-I",
                "INPUT",
                "1",
                "-m",
                "comment",
                "--comment",
                &self.run_id,
                "-j",
                &self.chain,
            ]),
            false,
        )
        .await
        .map(drop)
    }

    /// What one host is: its effective user and port, whether sudo is needed, its
    /// tools (installed if missing), iptables, and its address candidates.
    async fn probe(&self, host: &HostConn) -> Result<Probed, BackendError> {
        let step = |what: &'static str| {
            let described = self.describe(host);
            move |error: BackendError| BackendError::Setup(format!("{described}: {what}: {error}"))
        };
        let effective = self.ssh_g(&host.host).await;
        let hostname = effective
            .hostname
            .clone()
            .unwrap_or_else(|| host.host.address.clone());
        let port = effective.port.or(host.host.port).unwrap_or(22);
        let uid = timed(
            STEP_TIMEOUT,
            self.run_argv(host, &["id".into(), "-u".into()], true),
        )
        .await
        .map_err(step("checking the user"))?;
        let sudo = uid.stdout.trim() != "0";
        let user = match (&effective.user, &host.host.user) {
            (Some(user), _) | (None, Some(user)) => user.clone(),
            (None, None) => String::from("?"),
        };
        if sudo {
            let check = timed(
                STEP_TIMEOUT,
                self.run_argv(host, &["sudo".into(), "-n".into(), "true".into()], true),
            )
            .await;
            if let Err(error) = check {
                return Err(BackendError::Setup(format!(
                    "{}: the user {user} is not root and cannot use sudo without a password \
                     ({error}); allow it passwordless sudo (NOPASSWD in sudoers) or log in as root",
                    self.describe(host)
                )));
            }
        }
        // Commands below run as root (through sudo when needed).
        let _ = host.sudo.set(sudo);
        self.ensure_tools(host)
            .await
            .map_err(step("preparing the host"))?;
        let iptables = self
            .choose_iptables(host)
            .await
            .map_err(step("finding a working iptables"))?;
        let resolved = resolve_here(&hostname, port).await;
        let reported = if resolved.is_none() {
            let out = timed(
                STEP_TIMEOUT,
                self.run_argv(host, &["sh".into(), "-c".into(), ADDRESSES.into()], true),
            )
            .await
            .map_err(step("listing its addresses"))?;
            parse_addresses(&out.stdout)
        } else {
            Vec::new()
        };
        Ok(Probed {
            hostname,
            user,
            port,
            iptables,
            resolved,
            reported,
        })
    }

    /// `ssh -G` for the host: what ssh makes of it with the same options (a config's
    /// `HostName`, `User`, `Port`). Empty if ssh cannot say.
    async fn ssh_g(&self, host: &Host) -> Effective {
        let mut argv = vec!["ssh".to_string(), "-G".to_string()];
        if let Some(config) = &self.options.config_file {
            argv.extend(["-F".to_string(), config.display().to_string()]);
        }
        if let Some(port) = host.port {
            argv.extend(["-p".to_string(), port.to_string()]);
        }
        if let Some(user) = &host.user {
            argv.extend(["-l".to_string(), user.clone()]);
        }
        argv.extend(["--".to_string(), host.address.clone()]);
        match tools::run_cancellable(argv).await {
            Ok(output) => parse_ssh_g(&output.stdout),
            Err(error) => {
                tracing::debug!(%error, "ssh -G");
                Effective::default()
            }
        }
    }

    /// Installs what [`REQUIRED_TOOLS`] lists and is missing, on Debian and Ubuntu.
    async fn ensure_tools(&self, host: &HostConn) -> Result<(), BackendError> {
        let tools: Vec<String> = REQUIRED_TOOLS
            .iter()
            .map(|(tool, _)| tool.to_string())
            .collect();
        let probe = timed(STEP_TIMEOUT, self.run_script(host, "probe", PROBE, &tools)).await?;
        let mut missing: Vec<&str> = Vec::new();
        let mut proc_ok = false;
        let mut os = String::new();
        let mut apt = false;
        for line in probe.stdout.lines() {
            if let Some(rest) = line.strip_prefix("missing:") {
                missing = rest.split_whitespace().collect();
            } else if let Some(rest) = line.strip_prefix("proc: ") {
                proc_ok = rest.trim() == "yes";
            } else if let Some(rest) = line.strip_prefix("os: ") {
                os = rest.trim().to_string();
            } else if let Some(rest) = line.strip_prefix("apt: ") {
                apt = rest.trim() == "yes";
            }
        }
        if !proc_ok {
            return Err(BackendError::Setup(
                "no readable /proc (the backend identifies processes by /proc/<pid>/stat)".into(),
            ));
        }
        if missing.is_empty() {
            return Ok(());
        }
        let packages: Vec<String> = {
            let mut packages: Vec<String> = REQUIRED_TOOLS
                .iter()
                .filter(|(tool, _)| missing.contains(tool))
                .map(|(_, package)| package.to_string())
                .collect();
            packages.sort();
            packages.dedup();
            packages
        };
        let debian = os
            .split_whitespace()
            .any(|id| id == "debian" || id == "ubuntu");
        if !(debian && apt) {
            return Err(BackendError::MissingTool {
                tool: missing.join(", "),
                package: packages.join(" "),
                reason: format!(
                    "not installing on a host that is not Debian/Ubuntu with apt-get (os: {})",
                    if os.is_empty() { "unknown" } else { &os }
                ),
            });
        }
        eprintln!(
            "{}: installing {} with apt-get",
            self.describe(host),
            packages.join(", ")
        );
        timed(
            INSTALL_TIMEOUT,
            self.run_script(host, "install", INSTALL, &packages),
        )
        .await?;
        let again = timed(STEP_TIMEOUT, self.run_script(host, "probe", PROBE, &tools)).await?;
        let still: Vec<&str> = again
            .stdout
            .lines()
            .find_map(|line| line.strip_prefix("missing:"))
            .map(|rest| rest.split_whitespace().collect())
            .unwrap_or_default();
        if still.is_empty() {
            Ok(())
        } else {
            Err(BackendError::MissingTool {
                tool: still.join(", "),
                package: packages.join(" "),
                reason: "still missing after installing it".into(),
            })
        }
    }

    /// `iptables`, or `iptables-legacy` where the kernel lacks nf_tables: the first that
    /// can list `INPUT`.
    async fn choose_iptables(&self, host: &HostConn) -> Result<String, BackendError> {
        let mut errors = Vec::new();
        for candidate in ["iptables", "iptables-legacy"] {
            let argv: Vec<String> = [candidate, "-w", "10", "-S", "INPUT"]
                .iter()
                .map(|arg| arg.to_string())
                .collect();
            match timed(STEP_TIMEOUT, self.run_argv(host, &argv, false)).await {
                Ok(_) => return Ok(candidate.to_string()),
                Err(error) => errors.push(error.to_string()),
            }
        }
        Err(BackendError::Setup(errors.join("; ")))
    }

    async fn spawn_daemon(
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
    async fn check(
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

    async fn signal(&self, node: &str, pid: u32, signal: Signal) -> Result<(), BackendError> {
        if self.check(node, pid, Some(signal)).await? {
            Ok(())
        } else {
            Err(BackendError::ProcessGone {
                node: node.to_string(),
                pid,
            })
        }
    }

    /// A temporary file name in the control folder.
    fn scratch_file(&self, what: &str) -> PathBuf {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.control_dir.join(format!("{what}-{n}"))
    }

    async fn upload(&self, local: &Path, node: &str, remote: &Path) -> Result<(), BackendError> {
        self.open()?;
        let host = self.host(node)?;
        let io = |what: &str, path: &Path| {
            let what = what.to_string();
            let path = path.to_path_buf();
            move |source| BackendError::Io { what, path, source }
        };
        let meta = std::fs::metadata(local).map_err(io("reading", local))?;
        let remote_text = path_arg(remote)?;
        let _channel = host
            .channels
            .acquire()
            .await
            .map_err(|_| BackendError::TornDown)?;
        let shown = format!("upload {} to {remote_text}", local.display());
        if meta.is_dir() {
            let archive = self.scratch_file("upload.tar");
            let argv = vec![
                "tar".to_string(),
                "-cf".to_string(),
                archive.display().to_string(),
                "-C".to_string(),
                local.display().to_string(),
                ".".to_string(),
            ];
            let packed = tools::run_cancellable(argv).await;
            let outcome = match packed {
                Ok(_) => {
                    let file = std::fs::File::open(&archive).map_err(io("opening", &archive))?;
                    self.invoke(
                        host,
                        Call {
                            script: &with_prelude(UPLOAD_DIR, false),
                            args: &[remote_text],
                            as_user: false,
                            stdin: Stdin::File(file),
                            stdout: Stdout::Capture,
                            shown: &shown,
                        },
                    )
                    .await
                    .map(drop)
                }
                Err(error) => Err(error),
            };
            let _ = std::fs::remove_file(&archive);
            return outcome;
        }
        use std::os::unix::fs::PermissionsExt;
        let file = std::fs::File::open(local).map_err(io("opening", local))?;
        let args = vec![
            parent_arg(remote)?,
            remote_text,
            meta.len().to_string(),
            format!("{:o}", meta.permissions().mode() & 0o7777),
        ];
        self.invoke(
            host,
            Call {
                script: &with_prelude(UPLOAD_FILE, false),
                args: &args,
                as_user: false,
                stdin: Stdin::File(file),
                stdout: Stdout::Capture,
                shown: &shown,
            },
        )
        .await
        .map(drop)
    }

    async fn download(&self, node: &str, remote: &Path, local: &Path) -> Result<(), BackendError> {
        self.open()?;
        let host = self.host(node)?;
        let remote_text = path_arg(remote)?;
        let io = |what: &str, path: &Path| {
            let what = what.to_string();
            let path = path.to_path_buf();
            move |source| BackendError::Io { what, path, source }
        };
        let _channel = host
            .channels
            .acquire()
            .await
            .map_err(|_| BackendError::TornDown)?;
        let kind = self
            .run_argv(
                host,
                &[
                    "sh".into(),
                    "-c".into(),
                    "if [ -d \"$1\" ]; then echo dir; else echo file; fi".into(),
                    "sh".into(),
                    remote_text.clone(),
                ],
                false,
            )
            .await?;
        if let Some(parent) = local.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(io("creating", parent))?;
        }
        let is_dir = kind.stdout.trim() == "dir";
        let temp = if is_dir {
            self.scratch_file("download.tar")
        } else {
            let name = local
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_else(|| "download".into());
            local.with_file_name(format!(".{name}.part-{}", std::process::id()))
        };
        let file = std::fs::File::create(&temp).map_err(io("creating", &temp))?;
        let argv: Vec<String> = if is_dir {
            vec![
                "tar".into(),
                "-C".into(),
                remote_text.clone(),
                "-cf".into(),
                "-".into(),
                ".".into(),
            ]
        } else {
            vec!["cat".into(), "--".into(), remote_text.clone()]
        };
        let copied = self
            .invoke(
                host,
                Call {
                    script: &with_prelude(WATCHDOG, false),
                    args: &argv,
                    as_user: false,
                    stdin: Stdin::Held,
                    stdout: Stdout::File(file),
                    shown: &display_command(&argv),
                },
            )
            .await;
        let outcome = match copied {
            Err(error) => Err(error),
            Ok(_) if is_dir => {
                match std::fs::create_dir_all(local).map_err(io("creating", local)) {
                    Ok(()) => tools::run_cancellable(vec![
                        "tar".into(),
                        "-xf".into(),
                        temp.display().to_string(),
                        "-C".into(),
                        local.display().to_string(),
                    ])
                    .await
                    .map(drop),
                    Err(error) => Err(error),
                }
            }
            Ok(_) => {
                return std::fs::rename(&temp, local).map_err(|source| {
                    let _ = std::fs::remove_file(&temp);
                    BackendError::Io {
                        what: format!("renaming {} to", temp.display()),
                        path: local.to_path_buf(),
                        source,
                    }
                })
            }
        };
        let _ = std::fs::remove_file(&temp);
        outcome
    }

    /// The rules of `cuts` grouped by the host they go to, all built (and so every cut
    /// checked) before any is applied.
    fn rules(
        &self,
        cuts: &[Cut],
        verb: RuleVerb,
    ) -> Result<BTreeMap<String, Vec<CutRule>>, BackendError> {
        let address = |node: &str| {
            self.host(node)
                .ok()
                .and_then(|host| host.facts.get())
                .map(|facts| facts.address)
        };
        let mut by_node: BTreeMap<String, Vec<CutRule>> = BTreeMap::new();
        for cut in cuts {
            for rule in netns::cut_rules(cut, verb, &self.chain, &address)? {
                by_node.entry(rule.node.clone()).or_default().push(rule);
            }
        }
        Ok(by_node)
    }

    /// Applies rules per host, the hosts in parallel. With `keep_going`, every rule is
    /// tried and the first failure returned; otherwise a host stops at its first.
    async fn apply(
        &self,
        by_node: BTreeMap<String, Vec<CutRule>>,
        keep_going: bool,
    ) -> Result<(), BackendError> {
        let jobs = by_node.into_iter().map(|(node, rules)| async move {
            let host = self.host(&node)?;
            let iptables = self.facts(host)?.iptables.clone();
            let mut script = String::from("s=0\n");
            for rule in &rules {
                let mut argv = vec![iptables.clone(), "-w".to_string(), "10".to_string()];
                argv.extend(rule.args.iter().cloned());
                let line = shell_command(&argv);
                if keep_going {
                    script.push_str(&format!("{line} || s=1\n"));
                } else {
                    script.push_str(&format!("{line} || exit 1\n"));
                }
            }
            script.push_str("exit $s\n");
            let shown = rules
                .iter()
                .map(|rule| format!("iptables {}", display_command(&rule.args)))
                .collect::<Vec<_>>()
                .join("; ");
            let _channel = host
                .channels
                .acquire()
                .await
                .map_err(|_| BackendError::TornDown)?;
            let argv = vec!["sh".to_string(), "-c".to_string(), script];
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
            .map(drop)
        });
        first_error(join_all(jobs).await)
    }

    async fn cut(&self, cuts: &[Cut]) -> Result<(), BackendError> {
        let by_node = self.rules(cuts, RuleVerb::Append)?;
        let _gate = self.gate.read().await;
        self.open()?;
        self.apply(by_node, false).await
    }

    async fn uncut(&self, cuts: &[Cut]) -> Result<(), BackendError> {
        let by_node = self.rules(cuts, RuleVerb::Delete)?;
        let _gate = self.gate.read().await;
        self.open()?;
        self.apply(by_node, true).await
    }

    async fn heal(&self) -> Result<(), BackendError> {
        let _gate = self.gate.read().await;
        self.open()?;
        let jobs = self.hosts.iter().map(|host| async move {
            let iptables = self.facts(host)?.iptables.clone();
            let argv = vec![
                iptables,
                "-w".into(),
                "10".into(),
                "-F".into(),
                self.chain.clone(),
            ];
            self.exec(&host.node, &argv).await.map(drop)
        });
        first_error(join_all(jobs).await)
    }

    async fn teardown(&self) -> Result<(), BackendError> {
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

/// What [`Inner::probe`] found out about a host.
struct Probed {
    hostname: String,
    user: String,
    port: u16,
    iptables: String,
    resolved: Option<Ipv4Addr>,
    reported: Vec<Ipv4Addr>,
}

/// The first non-loopback IPv4 address `hostname` resolves to here.
async fn resolve_here(hostname: &str, port: u16) -> Option<Ipv4Addr> {
    let addresses = tokio::net::lookup_host((hostname, port)).await.ok()?;
    addresses
        .filter_map(|address| match address.ip() {
            IpAddr::V4(v4) if !v4.is_loopback() && !v4.is_unspecified() => Some(v4),
            _ => None,
        })
        .next()
}

/// `future`, or a [`BackendError::Setup`] after `limit`.
async fn timed<T>(
    limit: Duration,
    future: impl std::future::Future<Output = Result<T, BackendError>>,
) -> Result<T, BackendError> {
    match tokio::time::timeout(limit, future).await {
        Ok(outcome) => outcome,
        Err(_) => Err(BackendError::Setup(format!("no answer within {limit:?}"))),
    }
}

/// Polls every future to its end, concurrently, on the current task.
async fn join_all<F: std::future::Future>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    use std::task::Poll;
    let mut futures: Vec<std::pin::Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut results: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, slot) in futures.iter_mut().zip(results.iter_mut()) {
            if slot.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(output) => *slot = Some(output),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    results.into_iter().flatten().collect()
}

/// The first error of `outcomes`, if any.
fn first_error(outcomes: Vec<Result<(), BackendError>>) -> Result<(), BackendError> {
    outcomes.into_iter().find(Result::is_err).unwrap_or(Ok(()))
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
        let remote_dir_text = check_remote_dir(&options.remote_dir)?;
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
        let run_dir_text = format!("{remote_dir_text}/{run_id}");
        let hosts: Vec<HostConn> = options.hosts[..nodes]
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
        let inner = Arc::new(Inner {
            chain: format!("{run_id}-cuts"),
            run_dir: PathBuf::from(&run_dir_text),
            run_dir_text,
            remote_dir_text,
            run_id,
            control_dir,
            options,
            run: Mutex::new(Run {
                dirs: vec![false; nodes],
                chains: vec![false; nodes],
                ..Run::default()
            }),
            hosts,
            gate: RwLock::new(()),
        });
        lock(&LIVE).push(Arc::downgrade(&inner));
        // From here on, dropping the guard (on the error below too) tears the run down.
        let backend = SshBackend { inner };
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
        let dir = std::env::temp_dir().join(format!("harness-ssh-{run_id}"));
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::process::{Command, Stdio as StdStdio};
    use std::time::Instant;

    /// Arguments no shell may interpret.
    fn hostile() -> Vec<String> {
        [
            "plain",
            "",
            " ",
            "two words",
            "'",
            "''",
            "it's",
            "\"",
            "\"quoted\"",
            "$(touch /tmp/harness-ssh-pwned)",
            "`touch /tmp/harness-ssh-pwned`",
            "; touch /tmp/harness-ssh-pwned",
            "&& touch /tmp/harness-ssh-pwned",
            "| cat",
            "a\nb",
            "\n",
            "trailing newline\n",
            "tab\there",
            "*",
            "/*",
            "?",
            "[a-z]",
            "~",
            "~root",
            "-n",
            "--",
            "-e",
            "$HOME",
            "${HOME}",
            "$1",
            "$@",
            "\\",
            "\\'",
            "'\\''",
            "!",
            "!!",
            "{a,b}",
            "a=b",
            "> /tmp/harness-ssh-pwned",
            "< /etc/passwd",
            "#comment",
            "%s",
            "\u{1}\u{7f}",
            "ünïcødé ✓",
        ]
        .iter()
        .map(|arg| arg.to_string())
        .collect()
    }

    /// Pseudo-random strings over every ASCII character but NUL, and a few others.
    fn random_strings(count: usize) -> Vec<String> {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        (0..count)
            .map(|_| {
                let len = (next() % 12) as usize;
                (0..len)
                    .map(|_| match next() % 20 {
                        0 => 'é',
                        1 => '\n',
                        _ => char::from(1 + (next() % 127) as u8),
                    })
                    .collect()
            })
            .collect()
    }

    /// What `shell -c line` prints, split at NUL bytes.
    fn through_shell(shell: &str, line: &str) -> Vec<String> {
        let output = Command::new(shell)
            .arg("-c")
            .arg(line)
            .stdin(StdStdio::null())
            .output()
            .expect("run the shell");
        assert!(
            output.status.success(),
            "{shell} -c {line:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let mut parts: Vec<String> = output
            .stdout
            .split(|byte| *byte == 0)
            .map(|part| String::from_utf8(part.to_vec()).expect("utf-8"))
            .collect();
        assert_eq!(parts.pop().as_deref(), Some(""), "ends with a NUL");
        parts
    }

    fn printf_argv(args: &[String]) -> Vec<String> {
        let mut argv = vec!["printf".to_string(), "%s\\000".to_string()];
        argv.extend(args.iter().cloned());
        argv
    }

    #[test]
    fn quoted_arguments_reach_the_program_byte_for_byte() {
        let pwned = Path::new("/tmp/harness-ssh-pwned");
        let _ = std::fs::remove_file(pwned);
        let mut args = hostile();
        args.extend(random_strings(300));
        let shells: Vec<&str> = ["sh", "bash", "dash"]
            .into_iter()
            .filter(|shell| tools::find_binary(shell).is_some())
            .collect();
        assert!(!shells.is_empty());
        for shell in shells {
            let line = shell_command(&printf_argv(&args));
            assert_eq!(through_shell(shell, &line), args, "{shell}");
            // One argument at a time too (each alone is a whole word).
            for arg in &args {
                let line = shell_command(&printf_argv(std::slice::from_ref(arg)));
                assert_eq!(
                    through_shell(shell, &line),
                    vec![arg.clone()],
                    "{shell}: {arg:?}"
                );
            }
        }
        assert!(!pwned.exists(), "a quoted argument ran a command");
    }

    #[test]
    fn quoting_is_minimal_and_single_quoted() {
        assert_eq!(shell_quote("abc-1.2/x:y,z@w+%"), "abc-1.2/x:y,z@w+%");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote("a=b"), "'a=b'");
        assert_eq!(shell_quote("~"), "'~'");
        assert_eq!(
            shell_command(&["echo".into(), "$(x)".into(), "*".into()]),
            "echo '$(x)' '*'"
        );
    }

    #[test]
    fn the_remote_line_runs_its_script_with_the_arguments_intact() {
        // What the remote login shell does with the line, here.
        let args = hostile();
        let line = remote_line(false, "printf '%s\\000' \"$@\"", &args);
        assert_eq!(through_shell("sh", &line), args);
        let sudo = remote_line(true, "true", &[]);
        assert!(sudo.starts_with("sudo -n -- sh -c true sh"), "{sudo}");
    }

    /// Runs a script of this module locally the way the backend runs it on a host:
    /// `sh -c <watchdog> sh sh -c <script> name args...`, stdin held open.
    fn run_local(script: &str, args: &[String]) -> (String, String, Option<i32>) {
        let mut argv = vec![
            "sh".to_string(),
            "-c".to_string(),
            with_prelude(script, true),
            "test".to_string(),
        ];
        argv.extend(args.iter().cloned());
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(with_prelude(WATCHDOG, false))
            .arg("sh")
            .args(&argv)
            .stdin(StdStdio::piped())
            .stdout(StdStdio::piped())
            .stderr(StdStdio::piped())
            .spawn()
            .expect("sh");
        let held = child.stdin.take();
        let output = child.wait_with_output().expect("wait");
        drop(held);
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        let (stderr, code) = match split_exit_marker(&stderr) {
            Some((stderr, code)) => (stderr, Some(code)),
            None => (stderr, None),
        };
        (
            String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr,
            code,
        )
    }

    #[test]
    fn the_watchdog_reports_the_exit_status_and_keeps_stderr() {
        let (out, err, code) = run_local("printf out; printf err >&2; exit 3", &[]);
        assert_eq!((out.as_str(), err.as_str(), code), ("out", "err", Some(3)));
        let (_, err, code) = run_local("echo e >&2", &[]);
        assert_eq!((err.as_str(), code), ("e\n", Some(0)));
        let (_, err, code) = run_local("exec /nonexistent/harness-tool", &[]);
        assert_eq!(code, Some(127));
        assert!(err.contains("nonexistent"), "{err}");
        assert_eq!(split_exit_marker("no marker"), None);
        assert_eq!(
            split_exit_marker("a\n@@harness-exit 255\nlate"),
            Some(("alate".to_string(), 255))
        );
    }

    #[test]
    fn the_watchdog_kills_the_command_when_stdin_ends() {
        let dir = std::env::temp_dir().join(format!("harness-ssh-wd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let pid_file = dir.join("pid");
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(with_prelude(WATCHDOG, false))
            .args(["sh", "sh", "-c", "echo $$ > \"$1\"; exec sleep 60", "x"])
            .arg(&pid_file)
            .stdin(StdStdio::piped())
            .stdout(StdStdio::null())
            .stderr(StdStdio::null())
            .spawn()
            .expect("sh");
        let deadline = Instant::now() + Duration::from_secs(10);
        let pid: u32 = loop {
            if let Ok(pid) = std::fs::read_to_string(&pid_file)
                .unwrap_or_default()
                .trim()
                .parse()
            {
                break pid;
            }
            assert!(Instant::now() < deadline, "no pid");
            std::thread::sleep(Duration::from_millis(5));
        };
        let sleeper = state::ProcessRecord::of(pid).expect("sleep runs");
        // Closing stdin is what sshd does when the channel goes away.
        drop(child.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        while sleeper.is_alive() {
            assert!(Instant::now() < deadline, "the command survived");
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = child.wait();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_daemon_scripts_start_check_signal_and_kill_with_identity() {
        let dir = std::env::temp_dir().join(format!("harness-ssh-daemon-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let log = dir.join("logs it's").join("d.log");
        let log_text = log.display().to_string();
        let parent = log.parent().expect("parent").display().to_string();
        let (out, err, code) = run_local(
            SPAWN,
            &[
                parent.clone(),
                log_text.clone(),
                "sleep".into(),
                "60".into(),
            ],
        );
        assert_eq!(code, Some(0), "{out} {err}");
        let words: Vec<&str> = out.split_whitespace().collect();
        assert_eq!(words.first(), Some(&"started"), "{out}");
        let pid: u32 = words[1].parse().expect("pid");
        let record = state::ProcessRecord::of(pid).expect("the daemon");
        assert_eq!(
            record.cmdline,
            vec!["sleep", "60"],
            "the pid is the daemon's own"
        );
        assert_eq!(words[2], record.start_time.to_string());
        let check = |sig: &str, born: &str| {
            run_local(CHECK, &[pid.to_string(), born.to_string(), sig.to_string()]).0
        };
        let born = record.start_time.to_string();
        assert_eq!(check("", &born).trim(), "alive");
        // Another start time is another process: never signalled.
        assert_eq!(check("KILL", "1").trim(), "gone");
        assert!(record.is_alive());
        assert_eq!(check("STOP", &born).trim(), "signalled");
        assert_eq!(check("", &born).trim(), "alive", "a stopped daemon exists");
        assert_eq!(check("CONT", &born).trim(), "signalled");
        let (out, err, code) = run_local(
            KILL_ALL,
            &[dir.display().to_string(), pid.to_string(), born.clone()],
        );
        assert_eq!(code, Some(0), "{out} {err}");
        assert!(out.contains(&format!("killed {pid}")), "{out}");
        assert!(!record.is_alive());
        assert_eq!(check("TERM", &born).trim(), "gone");

        // A command that exits at once is reported with its status and log.
        let (out, _, code) = run_local(
            SPAWN,
            &[
                parent.clone(),
                log_text.clone(),
                "sh".into(),
                "-c".into(),
                "echo boom; exit 3".into(),
            ],
        );
        assert_eq!(code, Some(0));
        assert!(out.starts_with("exited 3\n"), "{out}");
        assert!(out.contains("boom"), "{out}");
        let (out, _, _) = run_local(
            SPAWN,
            &[parent, log_text, "/nonexistent/harness-daemon".into()],
        );
        assert!(out.starts_with("exited "), "{out}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_upload_script_refuses_a_short_file() {
        let dir = std::env::temp_dir().join(format!("harness-ssh-up-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let target = dir.join("sub").join("f $(x)");
        let run = |size: &str, data: &[u8]| {
            let mut child = Command::new("sh")
                .arg("-c")
                .arg(with_prelude(UPLOAD_FILE, false))
                .arg("sh")
                .arg(target.parent().expect("parent"))
                .arg(&target)
                .arg(size)
                .arg("640")
                .stdin(StdStdio::piped())
                .stdout(StdStdio::null())
                .stderr(StdStdio::piped())
                .spawn()
                .expect("sh");
            let mut stdin = child.stdin.take().expect("stdin");
            stdin.write_all(data).expect("write");
            drop(stdin);
            let output = child.wait_with_output().expect("wait");
            split_exit_marker(&String::from_utf8_lossy(&output.stderr))
        };
        let (_, code) = run("5", b"hello").expect("marker");
        assert_eq!(code, 0);
        assert_eq!(std::fs::read(&target).expect("uploaded"), b"hello");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&target)
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o640);
        let (stderr, code) = run("9", b"cut").expect("marker");
        assert_eq!(code, 1);
        assert!(stderr.contains("received 3 of 9 bytes"), "{stderr}");
        assert_eq!(
            std::fs::read(&target).expect("kept"),
            b"hello",
            "the old file stays"
        );
        let names: Vec<String> = std::fs::read_dir(target.parent().expect("parent"))
            .expect("list")
            .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
            .collect();
        assert_eq!(
            names,
            vec!["f $(x)".to_string()],
            "no temporary file is left"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn nodes_files_are_parsed_with_defaults_and_comments() {
        let text = "# the cluster\n\nn1 10.0.0.1\ndb-2 db2.example.com admin  # a comment\nn3 10.0.0.3 - 2222\nn4 [::1] root 22\n";
        let hosts = parse_nodes_file(text).expect("parsed");
        assert_eq!(hosts.len(), 4);
        assert_eq!(
            hosts[0],
            Host {
                label: "n1".into(),
                address: "10.0.0.1".into(),
                user: None,
                port: None,
                identity_file: None
            }
        );
        assert_eq!(hosts[1].user.as_deref(), Some("admin"));
        assert_eq!(
            (hosts[2].user.as_deref(), hosts[2].port),
            (None, Some(2222))
        );
        assert_eq!(hosts[3].port, Some(22));
    }

    #[test]
    fn bad_nodes_files_are_refused_with_the_line_and_reason() {
        for (text, expected) in [
            ("n1 10.0.0.1 root 0\n", "line 1: bad port \"0\""),
            ("n1 10.0.0.1 root 70000\n", "line 1: bad port"),
            ("\nn1 10.0.0.1 root x\n", "line 2: bad port \"x\""),
            ("n1 a b 22 extra\n", "line 1: 5 fields"),
            ("n1\n", "line 1: host \"n1\" has no address"),
            (
                "n1 10.0.0.1\nn1 10.0.0.2\n",
                "line 2: label \"n1\" is already host 1",
            ),
            (
                "a 10.0.0.1\nb 10.0.0.1\n",
                "line 2: address \"10.0.0.1\" is already host 1 (a)",
            ),
            (
                "n1 -oProxyCommand=x\n",
                "line 1: address \"-oProxyCommand=x\"",
            ),
            ("n1 host;rm\n", "line 1: address"),
            ("n1 10.0.0.1 -l\n", "line 1: user \"-l\""),
            ("# nothing\n\n", "no hosts"),
            ("", "no hosts"),
        ] {
            match parse_nodes_file(text) {
                Err(error) => {
                    let message = error.to_string();
                    assert!(message.contains(expected), "{text:?}: {message}");
                }
                Ok(hosts) => panic!("{text:?} accepted: {hosts:?}"),
            }
        }
    }

    #[test]
    fn vagrant_ssh_config_is_read_per_host() {
        let text = r#"Host n1
  HostName 127.0.0.1
  User vagrant
  Port 2222
  UserKnownHostsFile /dev/null
  StrictHostKeyChecking no
  IdentityFile "/home/me/my project/.vagrant/machines/n1/virtualbox/private_key"
  IdentitiesOnly yes
  LogLevel FATAL

Host n2
  HostName 192.168.56.12
  User vagrant
  Port 22
  IdentityFile /home/me/p/.vagrant/machines/n2/virtualbox/private_key
"#;
        let hosts = parse_vagrant_ssh_config(text).expect("parsed");
        assert_eq!(
            hosts,
            vec![
                Host {
                    label: "n1".into(),
                    address: "127.0.0.1".into(),
                    user: Some("vagrant".into()),
                    port: Some(2222),
                    identity_file: Some(PathBuf::from(
                        "/home/me/my project/.vagrant/machines/n1/virtualbox/private_key"
                    )),
                },
                Host {
                    label: "n2".into(),
                    address: "192.168.56.12".into(),
                    user: Some("vagrant".into()),
                    port: Some(22),
                    identity_file: Some(PathBuf::from(
                        "/home/me/p/.vagrant/machines/n2/virtualbox/private_key"
                    )),
                },
            ]
        );
        for (text, expected) in [
            ("", "lists no hosts"),
            (
                "  HostName 1.2.3.4\n",
                "line 1: `HostName` before any `Host`",
            ),
            ("Host a\n  Port x\n", "line 2: bad port"),
            ("Host a\nHost a\n", "line 2: label \"a\""),
        ] {
            let message = parse_vagrant_ssh_config(text).expect_err(text).to_string();
            assert!(message.contains(expected), "{text:?}: {message}");
        }
    }

    #[test]
    fn addresses_come_from_resolution_or_from_what_only_one_host_has() {
        let nat = Ipv4Addr::new(10, 0, 2, 15);
        let private = |i: u8| Ipv4Addr::new(192, 168, 56, i);
        let chosen = address_candidates(
            &[None, None, Some(Ipv4Addr::new(10, 1, 1, 1))],
            &[vec![nat, private(11)], vec![nat, private(12)], vec![]],
        );
        assert_eq!(
            chosen,
            vec![
                vec![private(11)],
                vec![private(12)],
                vec![Ipv4Addr::new(10, 1, 1, 1)]
            ]
        );
        assert_eq!(
            address_candidates(&[None, None], &[vec![nat], vec![nat]]),
            vec![Vec::<Ipv4Addr>::new(), Vec::new()]
        );
        // One machine alone: both of its addresses are its alone.
        assert_eq!(
            address_candidates(&[None], &[vec![nat, private(11)]]),
            vec![vec![nat, private(11)]]
        );
        assert_eq!(
            parse_addresses("10.0.2.15 192.168.56.11 fe80::1 \n"),
            vec![nat, private(11)]
        );
        assert_eq!(
            parse_addresses("2: eth0    inet 10.0.2.15/24 brd 10.0.2.255 scope global eth0\n"),
            vec![nat]
        );
        assert_eq!(
            parse_ssh_g(
                "user vagrant\nhostname 127.0.0.1\nport 2222\nidentityfile ~/.ssh/id_rsa\n"
            ),
            Effective {
                hostname: Some("127.0.0.1".into()),
                user: Some("vagrant".into()),
                port: Some(2222),
            }
        );
    }

    #[tokio::test]
    async fn an_address_no_one_answers_at_falls_back_to_the_first_candidate() {
        // Loopback addresses where nothing listens on port 22 refuse at once.
        let first = Ipv4Addr::new(127, 0, 0, 2);
        let second = Ipv4Addr::new(127, 0, 0, 3);
        assert_eq!(pick_address(&[first, second]).await, Some(first));
        assert_eq!(pick_address(&[second]).await, Some(second));
        assert_eq!(pick_address(&[]).await, None);
    }

    #[test]
    fn remote_folders_must_be_absolute_and_plain() {
        assert_eq!(
            check_remote_dir(Path::new("/var/tmp/harness/")).expect("ok"),
            "/var/tmp/harness"
        );
        for bad in ["relative", "/a/../b", "/a/./b", "/a\nb"] {
            assert!(check_remote_dir(Path::new(bad)).is_err(), "{bad:?}");
        }
        assert!(check_argv(&[]).is_err());
        assert!(check_argv(&["a\0b".to_string()]).is_err());
        assert!(check_argv(&["ok".to_string()]).is_ok());
        assert_eq!(parent_arg(Path::new("/a/b")).expect("parent"), "/a");
        assert_eq!(parent_arg(Path::new("/a")).expect("parent"), "/");
        assert_eq!(parent_arg(Path::new("a")).expect("parent"), ".");
    }
}
