//! The system tools a backend drives: finding them, installing missing ones with apt (as
//! root on Debian/Ubuntu, as Jepsen's OS setup does), the root check, and running them
//! with errors that name the command and carry its stderr.
//!
//! Commands are always given as argv (no shell), resolved to absolute paths so that a
//! `PATH` without `/usr/sbin` still finds `ip` and `iptables`.

use crate::{BackendError, ExecOutput};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A tool and the Debian/Ubuntu package that has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tool {
    pub binary: &'static str,
    pub package: &'static str,
}

pub const IP: Tool = Tool {
    binary: "ip",
    package: "iproute2",
};
pub const IPTABLES: Tool = Tool {
    binary: "iptables",
    package: "iptables",
};
pub const KILL: Tool = Tool {
    binary: "kill",
    package: "procps",
};

/// Folders searched after `PATH`: root's tools live in the sbin ones.
const EXTRA_DIRS: [&str; 4] = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"];

/// The effective uid of this process, from `/proc/self/status`.
pub fn effective_uid() -> Result<u32, BackendError> {
    let path = Path::new("/proc/self/status");
    let status = std::fs::read_to_string(path).map_err(|source| BackendError::Io {
        what: "reading".into(),
        path: path.to_path_buf(),
        source,
    })?;
    parse_effective_uid(&status).ok_or_else(|| BackendError::State {
        path: path.to_path_buf(),
        reason: "no readable `Uid:` line".into(),
    })
}

/// The second field of the `Uid:` line (real, effective, saved, fs).
pub(crate) fn parse_effective_uid(status: &str) -> Option<u32> {
    let line = status.lines().find(|line| line.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// Fails with [`BackendError::NotRoot`] unless this process runs as root; `why` says
/// what `what` does that needs it.
pub fn require_root(what: &str, why: &str) -> Result<(), BackendError> {
    let uid = effective_uid()?;
    if uid == 0 {
        Ok(())
    } else {
        Err(BackendError::NotRoot {
            what: what.to_string(),
            why: why.to_string(),
            uid,
        })
    }
}

/// The absolute path of `binary` on `PATH` or in the sbin/bin folders.
pub fn find_binary(binary: &str) -> Option<PathBuf> {
    let path_dirs = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default();
    path_dirs
        .into_iter()
        .chain(EXTRA_DIRS.iter().map(PathBuf::from))
        .map(|dir| dir.join(binary))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Finds every tool, installing the missing ones with `apt-get install -y` when running as
/// root on Debian/Ubuntu (after `apt-get update` if the first install fails). Elsewhere a
/// missing tool is a [`BackendError::MissingTool`] naming its package.
pub fn ensure_tools(tools: &[Tool]) -> Result<Vec<PathBuf>, BackendError> {
    let missing: Vec<Tool> = tools
        .iter()
        .copied()
        .filter(|tool| find_binary(tool.binary).is_none())
        .collect();
    if let Some(first) = missing.first() {
        let apt = find_binary("apt-get");
        let debian = Path::new("/etc/debian_version").exists();
        let root = effective_uid()? == 0;
        match apt {
            Some(apt) if debian && root => apt_install(&apt, &missing)?,
            _ => {
                return Err(BackendError::MissingTool {
                    tool: first.binary.to_string(),
                    package: first.package.to_string(),
                    reason: if !root {
                        "not root, so not installing it".into()
                    } else {
                        "not a Debian/Ubuntu system with apt-get".into()
                    },
                })
            }
        }
    }
    tools
        .iter()
        .map(|tool| {
            find_binary(tool.binary).ok_or_else(|| BackendError::MissingTool {
                tool: tool.binary.to_string(),
                package: tool.package.to_string(),
                reason: "still missing after installing it".into(),
            })
        })
        .collect()
}

fn apt_install(apt: &Path, tools: &[Tool]) -> Result<(), BackendError> {
    let mut packages: Vec<&str> = tools.iter().map(|tool| tool.package).collect();
    packages.sort_unstable();
    packages.dedup();
    let apt = apt.display().to_string();
    let mut install: Vec<String> = [
        apt.as_str(),
        "-o",
        "DPkg::Lock::Timeout=120",
        "install",
        "-y",
        "--no-install-recommends",
    ]
    .iter()
    .map(|arg| arg.to_string())
    .collect();
    install.extend(packages.iter().map(|package| package.to_string()));
    eprintln!("installing {} with apt-get", packages.join(", "));
    if run_with_env(&install, &[("DEBIAN_FRONTEND", "noninteractive")]).is_ok() {
        return Ok(());
    }
    let update: Vec<String> = [apt.as_str(), "-o", "DPkg::Lock::Timeout=120", "update"]
        .iter()
        .map(|arg| arg.to_string())
        .collect();
    run_with_env(&update, &[("DEBIAN_FRONTEND", "noninteractive")])?;
    run_with_env(&install, &[("DEBIAN_FRONTEND", "noninteractive")])?;
    Ok(())
}

/// `argv` as a person would type it, quoting arguments that need it.
pub fn display_command<S: AsRef<str>>(argv: &[S]) -> String {
    argv.iter()
        .map(|arg| {
            let arg = arg.as_ref();
            let plain = !arg.is_empty()
                && arg
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@+%".contains(c));
            if plain {
                arg.to_string()
            } else {
                format!("'{}'", arg.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn status_text(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => status.to_string(),
    }
}

fn command_for(argv: &[String]) -> Result<Command, BackendError> {
    let (program, args) = argv.split_first().ok_or_else(|| BackendError::Spawn {
        command: String::new(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "empty argv"),
    })?;
    let mut command = Command::new(program);
    command.args(args).stdin(Stdio::null());
    Ok(command)
}

/// Run `argv`, wait, and return its stdout; a non-zero exit is a
/// [`BackendError::Command`] with stdout and stderr.
pub fn run(argv: &[String]) -> Result<String, BackendError> {
    run_with_env(argv, &[])
}

fn run_with_env(argv: &[String], env: &[(&str, &str)]) -> Result<String, BackendError> {
    let mut command = command_for(argv)?;
    command.envs(env.iter().copied());
    tracing::debug!(command = %display_command(argv), "run");
    let output = command.output().map_err(|source| BackendError::Spawn {
        command: display_command(argv),
        source,
    })?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if output.status.success() {
        Ok(stdout)
    } else {
        Err(BackendError::Command {
            command: display_command(argv),
            status: status_text(output.status),
            stdout,
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }
}

/// Kills the child when dropped before it was reaped; dropping `run_cancellable`'s future
/// therefore kills the command. The child is only reaped with the lock held, and
/// `Child::kill` on an unreaped child cannot hit another process.
struct KillOnDrop {
    child: Arc<Mutex<Child>>,
    armed: bool,
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut child = match self.child.lock() {
            Ok(child) => child,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Ok(None) = child.try_wait() {
            let _ = child.kill();
        }
    }
}

/// Like [`run`], asynchronously, returning stdout and stderr; dropping the future kills
/// the command. Must be polled on a tokio runtime.
pub async fn run_cancellable(argv: Vec<String>) -> Result<ExecOutput, BackendError> {
    let shown = display_command(&argv);
    let mut command = command_for(&argv)?;
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    tracing::debug!(command = %shown, "exec");
    let mut child = command.spawn().map_err(|source| BackendError::Spawn {
        command: shown.clone(),
        source,
    })?;
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let child = Arc::new(Mutex::new(child));
    let mut guard = KillOnDrop {
        child: Arc::clone(&child),
        armed: true,
    };
    let waited = tokio::task::spawn_blocking(move || wait_output(&child, stdout, stderr)).await;
    guard.armed = false;
    let (status, stdout, stderr) = waited
        .map_err(|error| BackendError::Internal(format!("waiting for `{shown}`: {error}")))?
        .map_err(|source| BackendError::Io {
            what: format!("waiting for `{shown}`"),
            path: PathBuf::new(),
            source,
        })?;
    if status.success() {
        Ok(ExecOutput { stdout, stderr })
    } else {
        Err(BackendError::Command {
            command: shown,
            status: status_text(status),
            stdout,
            stderr,
        })
    }
}

/// Reads both pipes to their end, then reaps the child without holding its lock while
/// blocked (so [`KillOnDrop`] can always take it).
fn wait_output(
    child: &Mutex<Child>,
    stdout: Option<std::process::ChildStdout>,
    stderr: Option<std::process::ChildStderr>,
) -> std::io::Result<(std::process::ExitStatus, String, String)> {
    let stderr_reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        if let Some(mut stderr) = stderr {
            let _ = stderr.read_to_end(&mut text);
        }
        text
    });
    let mut out = Vec::new();
    if let Some(mut stdout) = stdout {
        stdout.read_to_end(&mut out)?;
    }
    let err = stderr_reader
        .join()
        .map_err(|_| std::io::Error::other("stderr reader panicked"))?;
    let mut pause = Duration::from_micros(200);
    let status = loop {
        let polled = match child.lock() {
            Ok(mut child) => child.try_wait()?,
            Err(poisoned) => poisoned.into_inner().try_wait()?,
        };
        if let Some(status) = polled {
            break status;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    };
    Ok((
        status,
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&err).into_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn effective_uid_is_the_second_uid_field() {
        let status = "Name:\tx\nUmask:\t0022\nUid:\t1000\t0\t0\t0\nGid:\t0\t0\t0\t0\n";
        assert_eq!(parse_effective_uid(status), Some(0));
        assert_eq!(parse_effective_uid("Name:\tx\n"), None);
        assert_eq!(parse_effective_uid("Uid:\tabc\tdef\n"), None);
    }

    #[test]
    fn commands_display_with_quotes_where_needed() {
        assert_eq!(
            display_command(&[
                "ip",
                "netns",
                "exec",
                "jh-n1",
                "python3",
                "-c",
                "print('a b')"
            ]),
            r"ip netns exec jh-n1 python3 -c 'print('\''a b'\'')'"
        );
        assert_eq!(display_command(&["echo", ""]), "echo ''");
    }

    #[test]
    fn run_reports_the_command_and_its_stderr() {
        let argv: Vec<String> = ["sh", "-c", "echo out; echo oops >&2; exit 3"]
            .iter()
            .map(|arg| arg.to_string())
            .collect();
        match run(&argv) {
            Err(BackendError::Command {
                command,
                status,
                stdout,
                stderr,
            }) => {
                assert!(command.starts_with("sh -c"), "{command}");
                assert_eq!(status, "exit 3");
                assert_eq!(stdout, "out\n");
                assert_eq!(stderr, "oops\n");
            }
            other => panic!("expected a command error, got {other:?}"),
        }
        let missing = vec!["/nonexistent/harness-tool".to_string()];
        assert!(matches!(run(&missing), Err(BackendError::Spawn { .. })));
    }

    #[tokio::test]
    async fn cancelled_exec_kills_the_command() {
        let dir = std::env::temp_dir().join(format!("harness-tools-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let pid_file = dir.join("pid");
        let argv: Vec<String> = vec![
            "sh".into(),
            "-c".into(),
            format!("echo $$ > {}; exec sleep 30", pid_file.display()),
        ];
        let mut command = Box::pin(run_cancellable(argv));
        // Run the command until it has written its pid, then drop the future.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let pid = loop {
            tokio::select! {
                outcome = &mut command => panic!("the command ended early: {outcome:?}"),
                _ = tokio::time::sleep(Duration::from_millis(5)) => {}
            }
            let text = std::fs::read_to_string(&pid_file).unwrap_or_default();
            if let Ok(pid) = text.trim().parse::<u32>() {
                break pid;
            }
            assert!(std::time::Instant::now() < deadline, "no pid written");
        };
        let identity = crate::state::ProcessRecord::of(pid).expect("sleep is running");
        assert!(identity.is_alive());
        drop(command);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while identity.is_alive() {
            assert!(
                std::time::Instant::now() < deadline,
                "sleep survived the drop"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let _ = std::fs::remove_dir_all(&dir);

        let ok =
            run_cancellable(vec!["sh".into(), "-c".into(), "echo hi; echo e >&2".into()]).await;
        match ok {
            Ok(output) => {
                assert_eq!(output.stdout, "hi\n");
                assert_eq!(output.stderr, "e\n");
            }
            Err(error) => panic!("{error}"),
        }
    }
}
