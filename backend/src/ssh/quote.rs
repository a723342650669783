//! What ssh sends: every argument quoted for the remote login shell ([`shell_quote`]),
//! the `sh -c <script> sh <args...>` line (through `sudo -n` when needed), the `PATH`
//! and `/proc` prelude of a script, the exit marker split off its stderr, and the checks
//! that refuse an argument or a path that could not reach the host intact.

use super::scripts::{EXIT_MARKER, PATH_PRELUDE, PROC_FUNCTIONS};
use crate::tools::display_command;
use crate::BackendError;
use std::path::Path;

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
pub(super) fn remote_line(sudo: bool, script: &str, args: &[String]) -> String {
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
pub(super) fn with_prelude(script: &str, proc_functions: bool) -> String {
    let mut text = String::from(PATH_PRELUDE);
    if proc_functions {
        text.push_str(PROC_FUNCTIONS);
    }
    text.push_str(script);
    text
}

/// Splits the exit marker off stderr: the stderr the command wrote and its status.
pub(super) fn split_exit_marker(stderr: &str) -> Option<(String, i32)> {
    let at = stderr.rfind(EXIT_MARKER)?;
    let after = &stderr[at + EXIT_MARKER.len()..];
    let (code, rest) = after.split_once('\n')?;
    let code = code.trim().parse().ok()?;
    Some((format!("{}{}", &stderr[..at], rest), code))
}

/// A remote path as an argument (paths are UTF-8 here: they come from `String`s).
pub(super) fn path_arg(path: &Path) -> Result<String, BackendError> {
    path.to_str()
        .map(str::to_string)
        .ok_or_else(|| BackendError::Io {
            what: "a remote path must be UTF-8".into(),
            path: path.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not UTF-8"),
        })
}

/// A remote path's parent folder (`/` for a top-level one, `.` for a bare name).
pub(super) fn parent_arg(path: &Path) -> Result<String, BackendError> {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => path_arg(parent),
        Some(_) => Ok(".".into()),
        None => Ok("/".into()),
    }
}

/// Fails for argv that cannot reach a program intact.
pub(super) fn check_argv(argv: &[String]) -> Result<(), BackendError> {
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
pub(super) fn check_remote_dir(dir: &Path) -> Result<String, BackendError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools;
    use std::process::{Command, Stdio as StdStdio};

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
