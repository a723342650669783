//! The hosts of an ssh run: [`Host`], read from a nodes file or from
//! `vagrant ssh-config`, and the checks every host passes (no value ssh could read as an
//! option, no label or address twice).

use crate::tools::{self, display_command};
use crate::BackendError;
use std::path::{Path, PathBuf};

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

/// Why a host's address, user or label is refused, if it is.
pub(super) fn check_host(host: &Host) -> Result<(), String> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
