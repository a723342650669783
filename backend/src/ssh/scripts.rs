//! The shell scripts the backend runs on the hosts, each with the arguments it takes and
//! what it prints; the prelude they start with, the exit marker they end with, and the
//! tools they need on every host.

/// The line every script ends its stderr with, before its exit status.
pub(super) const EXIT_MARKER: &str = "\n@@harness-exit ";

/// Puts the sbin folders on `PATH` (iptables lives there; a non-root login often lacks
/// them, and sudo may keep the user's `PATH`).
pub(super) const PATH_PRELUDE: &str =
    "PATH=\"$PATH:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\"; export PATH\n";

/// `fields STAT-LINE` sets `state` (field 3) and `start` (field 22) of a
/// `/proc/<pid>/stat` line, counting from the last `)` (the command name may hold spaces
/// and parentheses); `alive` says whether `$pid` is still the process born at `$born`
/// (stopped counts, a zombie does not, unless other threads of it still exit: they still
/// hold its files, its listening sockets among them).
pub(super) const PROC_FUNCTIONS: &str = r#"
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
  [ "$start" = "$born" ] || return 1
  case $state in
    Z|X) set -- /proc/"$pid"/task/*; [ $# -gt 1 ] ;;
  esac
}
"#;

/// Runs `"$@"` with stdin `/dev/null`, and SIGKILLs it when the ssh channel's stdin
/// ends (the harness dropped the command, or the connection is gone). Then the marker.
pub(super) const WATCHDOG: &str = r#"exec 3<&0
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
pub(super) const UPLOAD_FILE: &str = r#"s=1
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
pub(super) const UPLOAD_DIR: &str = r#"s=1
mkdir -p -- "$1" && tar -xf - -C "$1" && s=0
printf '\n@@harness-exit %s\n' "$s" >&2
exit "$s"
"#;

/// Args: the log's folder, the log, argv. Prints `started <pid> <start time>`, or
/// `exited <status>` and the log's last lines, or `timeout`.
pub(super) const SPAWN: &str = r#"mkdir -p -- "$1" || exit 1
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
pub(super) const MAKE_RUN_DIR: &str = r#"mkdir -p -- "$1" || exit 1
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
pub(super) const CHECK: &str = r#"pid=$1
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
pub(super) const KILL_ALL: &str = r#"dir=$1
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
pub(super) const REMOVE_CHAIN: &str = r#"ipt=$1
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
pub(super) const PROBE: &str = r#"missing=
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
pub(super) const INSTALL: &str = r#"DEBIAN_FRONTEND=noninteractive
export DEBIAN_FRONTEND
install() {
  apt-get -o DPkg::Lock::Timeout=120 install -y --no-install-recommends "$@"
}
install "$@" || { apt-get -o DPkg::Lock::Timeout=120 update && install "$@"; }
"#;

/// The host's own IPv4 addresses.
pub(super) const ADDRESSES: &str = "hostname -I 2>/dev/null || ip -4 -o addr show scope global";

/// The tools the backend's scripts need on every host, besides `sh` and its builtins,
/// and the Debian package of each. `setsid`, `grep` and `tar` are used when present.
pub(super) const REQUIRED_TOOLS: [(&str, &str); 10] = [
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ssh::quote::{split_exit_marker, with_prelude};
    use crate::state;
    use std::io::Write;
    use std::process::{Command, Stdio as StdStdio};
    use std::time::{Duration, Instant};

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
    fn a_daemon_whose_main_thread_exited_first_is_alive_to_the_check_script() {
        // As a SIGKILLed multi-threaded daemon for a moment: the main thread a zombie,
        // another thread still exiting (and holding the daemon's sockets).
        let script = "import ctypes, threading, time\n\
                      threading.Thread(target=time.sleep, args=(1.5,)).start()\n\
                      ctypes.CDLL(None).pthread_exit(None)\n";
        let mut child = Command::new("python3")
            .args(["-c", script])
            .spawn()
            .expect("python3 runs");
        let pid = child.id();
        let born = state::read_stat(pid)
            .expect("its stat")
            .start_time
            .to_string();
        let deadline = Instant::now() + Duration::from_secs(5);
        while state::read_stat(pid).map(|s| s.state) != Some('Z') {
            assert!(Instant::now() < deadline, "the main thread never exited");
            std::thread::sleep(Duration::from_millis(5));
        }
        let check = || run_local(CHECK, &[pid.to_string(), born.clone(), String::new()]).0;
        assert_eq!(check().trim(), "alive");
        assert!(child.wait().expect("it ends").success());
        assert_eq!(check().trim(), "gone");
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
}
