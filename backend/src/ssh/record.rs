//! What an ssh run records about itself, so that `harness clean` can remove it from the
//! hosts after the harness was SIGKILLed: `run.json` in the run's private control folder
//! (`<temp dir>/harness-ssh-<run id>/`), written atomically whenever the run is about to
//! create something on a host or has started a daemon there, and removed with the folder
//! at the end of a teardown that left nothing behind.
//!
//! The chains are recorded before they are made; a host's run folder once `mkdir` has
//! made it (a folder of that name that existed already is not the run's to remove), so
//! a SIGKILL between the two leaves that empty folder, named by the run id.
//!
//! The record holds what a teardown needs and nothing it could learn again: how to reach
//! each host (its nodes-file entry, the ssh key, config and host-key policy), what the
//! probe found (login user, port, address, iptables binary, sudo), which hosts may have
//! the run folder and the cut chain, and the daemons with their identities. Reading it
//! back checks every name against the run id, the hosts as the nodes file is checked,
//! and the folder's owner and mode: `harness clean` runs as root, and a file planted in
//! a shared temp dir must not make it connect anywhere or remove anything.

use super::hosts::{check_host, Host};
use super::quote::check_remote_dir;
use super::session::{lock, Daemon, Facts, Inner};
use super::{HostKeyPolicy, SshOptions};
use crate::state::{is_prefix, write_json_atomically, ProcessRecord};
use crate::BackendError;
use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// The record's file name inside the control folder.
pub const RECORD_FILE: &str = "run.json";

/// The version of the record format this code writes and reads.
pub const RECORD_VERSION: u32 = 1;

/// The prefix of a control folder's name; the run id follows it.
pub const CONTROL_DIR_PREFIX: &str = "harness-ssh-";

/// Everything one ssh run may have left on its hosts and here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SshRunRecord {
    pub version: u32,
    /// `jh` + 6 hex digits: the run folder's name, the chain's prefix.
    pub run_id: String,
    /// The harness process that owns the run; the run is live while it is.
    pub owner: ProcessRecord,
    /// `--remote-dir`; the run folder is `<remote_dir>/<run id>`.
    pub remote_dir: String,
    pub identity_file: Option<PathBuf>,
    pub config_file: Option<PathBuf>,
    pub host_keys: HostKeyPolicy,
    pub hosts: Vec<HostRecord>,
    pub daemons: Vec<DaemonEntry>,
    /// When the run started (RFC 3339), for people.
    pub created: String,
}

/// One host of the run: how to reach it and what the run may have made there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostRecord {
    pub node: String,
    pub label: String,
    /// What ssh connects to, as the nodes file has it.
    pub address: String,
    pub user: Option<String>,
    pub port: Option<u16>,
    pub identity_file: Option<PathBuf>,
    /// What the probe found, once it ran.
    pub probed: Option<ProbedRecord>,
    /// The run folder may exist on this host.
    pub dir: bool,
    /// The cut chain and its `INPUT` rule may exist on this host.
    pub chain: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbedRecord {
    pub login_user: String,
    pub login_port: u16,
    pub ipv4: Ipv4Addr,
    pub iptables: String,
    pub sudo: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonEntry {
    pub node: String,
    pub pid: u32,
    pub start_time: u64,
    pub argv: Vec<String>,
}

impl SshRunRecord {
    /// The record's path in `control_dir`.
    pub fn path(control_dir: &Path) -> PathBuf {
        control_dir.join(RECORD_FILE)
    }

    /// Writes the record atomically (temporary file, fsync, rename) into `control_dir`.
    pub fn write(&self, control_dir: &Path) -> Result<(), BackendError> {
        let path = SshRunRecord::path(control_dir);
        let temp = control_dir.join(format!("{RECORD_FILE}.tmp"));
        write_json_atomically(self, &path, &temp)
    }

    /// Reads and checks the record of the control folder `control_dir`: the folder is
    /// this user's and no one else's to write, its name carries the record's run id,
    /// and the record passes [`SshRunRecord::validate`].
    pub fn read(control_dir: &Path) -> Result<SshRunRecord, BackendError> {
        let path = SshRunRecord::path(control_dir);
        let refuse = |reason: String| BackendError::State {
            path: path.clone(),
            reason,
        };
        check_private(control_dir).map_err(&refuse)?;
        let text = std::fs::read_to_string(&path).map_err(|source| BackendError::Io {
            what: "reading".into(),
            path: path.clone(),
            source,
        })?;
        let record: SshRunRecord =
            serde_json::from_str(&text).map_err(|error| refuse(error.to_string()))?;
        record.validate().map_err(&refuse)?;
        let expected = format!("{CONTROL_DIR_PREFIX}{}", record.run_id);
        if control_dir.file_name().and_then(|name| name.to_str()) != Some(expected.as_str()) {
            return Err(refuse(format!(
                "the folder is not named {expected} after the record's run"
            )));
        }
        Ok(record)
    }

    /// Checks what a teardown relies on: the version, the run id, the remote folder, and
    /// every host as the nodes file's hosts are checked.
    pub fn validate(&self) -> Result<(), String> {
        if self.version != RECORD_VERSION {
            return Err(format!(
                "version {} (this harness reads version {RECORD_VERSION})",
                self.version
            ));
        }
        if !is_prefix(&self.run_id) {
            return Err(format!("{:?} is not a run id", self.run_id));
        }
        let checked = check_remote_dir(Path::new(&self.remote_dir)).map_err(|e| e.to_string())?;
        if checked != self.remote_dir || checked.is_empty() {
            return Err(format!(
                "remote folder {:?} is not normalized",
                self.remote_dir
            ));
        }
        if self.hosts.is_empty() {
            return Err("no hosts".into());
        }
        for (index, host) in self.hosts.iter().enumerate() {
            if host.node != format!("n{}", index + 1) {
                return Err(format!("host {} is named {:?}", index + 1, host.node));
            }
            check_host(&host.host())
                .map_err(|reason| format!("host {:?}: {reason}", host.label))?;
            if let Some(probed) = &host.probed {
                let binary = Path::new(&probed.iptables)
                    .file_name()
                    .and_then(|name| name.to_str());
                if !binary.is_some_and(|name| name.starts_with("iptables")) {
                    return Err(format!("{:?} is not an iptables binary", probed.iptables));
                }
            }
        }
        for daemon in &self.daemons {
            if !self.hosts.iter().any(|host| host.node == daemon.node) {
                return Err(format!("a daemon on unknown node {:?}", daemon.node));
            }
        }
        Ok(())
    }

    /// Whether the harness that owns this run is still running.
    pub fn is_live(&self) -> bool {
        self.owner.is_alive()
    }

    /// The options that reach the same hosts.
    pub fn options(&self) -> SshOptions {
        SshOptions {
            hosts: self.hosts.iter().map(HostRecord::host).collect(),
            identity_file: self.identity_file.clone(),
            config_file: self.config_file.clone(),
            host_keys: self.host_keys,
            remote_dir: PathBuf::from(&self.remote_dir),
        }
    }
}

impl HostRecord {
    pub fn host(&self) -> Host {
        Host {
            label: self.label.clone(),
            address: self.address.clone(),
            user: self.user.clone(),
            port: self.port,
            identity_file: self.identity_file.clone(),
        }
    }
}

/// Why `dir` is not a private folder of this user, if it is not: it must be a folder
/// (not a link), owned by this process's effective user, writable by no one else.
fn check_private(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(dir).map_err(|error| error.to_string())?;
    if !meta.is_dir() {
        return Err("the control folder is not a folder".into());
    }
    let own_uid = crate::tools::effective_uid().map_err(|error| error.to_string())?;
    if meta.uid() != own_uid {
        return Err(format!(
            "the control folder belongs to uid {}, not to this user ({own_uid})",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "the control folder is writable by others (mode {:o})",
            meta.mode() & 0o777
        ));
    }
    Ok(())
}

impl Inner {
    /// The run as it stands, for its record.
    pub(super) fn record(&self) -> SshRunRecord {
        let run = lock(&self.run);
        let hosts = self
            .hosts
            .iter()
            .enumerate()
            .map(|(index, conn)| HostRecord {
                node: conn.node.clone(),
                label: conn.host.label.clone(),
                address: conn.host.address.clone(),
                user: conn.host.user.clone(),
                port: conn.host.port,
                identity_file: conn.host.identity_file.clone(),
                probed: conn.facts.get().map(|facts| ProbedRecord {
                    login_user: facts.user.clone(),
                    login_port: facts.port,
                    ipv4: facts.address,
                    iptables: facts.iptables.clone(),
                    sudo: conn.sudo.get().copied().unwrap_or(false),
                }),
                dir: run.dirs.get(index).copied().unwrap_or(false),
                chain: run.chains.get(index).copied().unwrap_or(false),
            })
            .collect();
        let daemons = run
            .daemons
            .iter()
            .map(|daemon| DaemonEntry {
                node: daemon.node.clone(),
                pid: daemon.pid,
                start_time: daemon.start_time,
                argv: daemon.argv.clone(),
            })
            .collect();
        SshRunRecord {
            version: RECORD_VERSION,
            run_id: self.run_id.clone(),
            owner: self.owner.clone(),
            remote_dir: self.remote_dir_text.clone(),
            identity_file: self.options.identity_file.clone(),
            config_file: self.options.config_file.clone(),
            host_keys: self.options.host_keys,
            hosts,
            daemons,
            created: self.created.clone(),
        }
    }

    /// Writes the run's record (before anything it names is created on a host).
    pub(super) fn save_record(&self) -> Result<(), BackendError> {
        self.record().write(&self.control_dir)
    }

    /// Restores what a record says the run made, into a core made from its options
    /// (for `harness clean`'s teardown).
    pub(super) fn restore(&self, record: &SshRunRecord) {
        let mut run = lock(&self.run);
        for (index, (conn, host)) in self.hosts.iter().zip(&record.hosts).enumerate() {
            if let Some(probed) = &host.probed {
                let _ = conn.facts.set(Facts {
                    user: probed.login_user.clone(),
                    port: probed.login_port,
                    address: probed.ipv4,
                    iptables: probed.iptables.clone(),
                });
                let _ = conn.sudo.set(probed.sudo);
            }
            if let Some(dir) = run.dirs.get_mut(index) {
                *dir = host.dir;
            }
            if let Some(chain) = run.chains.get_mut(index) {
                *chain = host.chain && host.probed.is_some();
            }
        }
        run.daemons = record
            .daemons
            .iter()
            .map(|daemon| Daemon {
                node: daemon.node.clone(),
                pid: daemon.pid,
                start_time: daemon.start_time,
                argv: daemon.argv.clone(),
            })
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(run_id: &str) -> SshRunRecord {
        SshRunRecord {
            version: RECORD_VERSION,
            run_id: run_id.into(),
            owner: ProcessRecord {
                pid: 1,
                start_time: 1,
                cmdline: vec!["harness".into()],
            },
            remote_dir: "/var/tmp/harness".into(),
            identity_file: Some("/root/.ssh/id".into()),
            config_file: None,
            host_keys: HostKeyPolicy::AcceptNew,
            hosts: vec![HostRecord {
                node: "n1".into(),
                label: "db-1".into(),
                address: "192.168.56.11".into(),
                user: Some("vagrant".into()),
                port: Some(22),
                identity_file: None,
                probed: Some(ProbedRecord {
                    login_user: "vagrant".into(),
                    login_port: 22,
                    ipv4: Ipv4Addr::new(192, 168, 56, 11),
                    iptables: "iptables-legacy".into(),
                    sudo: true,
                }),
                dir: true,
                chain: true,
            }],
            daemons: vec![DaemonEntry {
                node: "n1".into(),
                pid: 4242,
                start_time: 99,
                argv: vec!["broker".into()],
            }],
            created: "2026-12-07T00:00:00Z".into(),
        }
    }

    fn private_dir(name: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("record-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let dir = dir.join(format!("{CONTROL_DIR_PREFIX}jh0a1b2c"));
        std::fs::create_dir_all(&dir).expect("folder");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("mode");
        dir
    }

    #[test]
    fn a_record_round_trips_through_its_folder() {
        let dir = private_dir("round");
        let written = record("jh0a1b2c");
        written.write(&dir).expect("write");
        assert_eq!(SshRunRecord::read(&dir).expect("read"), written);
        assert!(!dir.join(format!("{RECORD_FILE}.tmp")).exists());
        let _ = std::fs::remove_dir_all(dir.parent().expect("parent"));
    }

    #[test]
    fn records_that_could_aim_a_teardown_elsewhere_are_refused() {
        let dir = private_dir("refused");
        let mut cases: Vec<(&str, SshRunRecord)> = Vec::new();
        cases.push(("another run's folder", record("jh0a1b2d")));
        let mut bad = record("jh0a1b2c");
        bad.run_id = "../../etc".into();
        cases.push(("run id", bad));
        let mut bad = record("jh0a1b2c");
        bad.remote_dir = "/var/tmp/../..".into();
        cases.push(("remote dir with ..", bad));
        let mut bad = record("jh0a1b2c");
        bad.remote_dir = "relative".into();
        cases.push(("relative remote dir", bad));
        let mut bad = record("jh0a1b2c");
        bad.hosts[0].address = "-oProxyCommand=touch /tmp/x".into();
        cases.push(("an address ssh reads as an option", bad));
        let mut bad = record("jh0a1b2c");
        if let Some(probed) = bad.hosts[0].probed.as_mut() {
            probed.iptables = "/bin/rm".into();
        }
        cases.push(("not iptables", bad));
        let mut bad = record("jh0a1b2c");
        bad.hosts[0].node = "n7".into();
        cases.push(("node names out of order", bad));
        let mut bad = record("jh0a1b2c");
        bad.daemons[0].node = "n2".into();
        cases.push(("a daemon on no host", bad));
        let mut bad = record("jh0a1b2c");
        bad.version = RECORD_VERSION + 1;
        cases.push(("a newer version", bad));
        for (what, bad) in cases {
            bad.write(&dir).expect("write");
            assert!(SshRunRecord::read(&dir).is_err(), "{what} accepted");
        }
        std::fs::write(SshRunRecord::path(&dir), "{ not json").expect("write");
        assert!(SshRunRecord::read(&dir).is_err(), "garbage accepted");
        let _ = std::fs::remove_dir_all(dir.parent().expect("parent"));
    }

    #[test]
    fn a_folder_others_may_write_is_not_trusted() {
        use std::os::unix::fs::PermissionsExt;
        let dir = private_dir("shared");
        record("jh0a1b2c").write(&dir).expect("write");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).expect("mode");
        let refused = SshRunRecord::read(&dir).expect_err("world-writable folder trusted");
        assert!(
            refused.to_string().contains("writable by others"),
            "{refused}"
        );
        let _ = std::fs::remove_dir_all(dir.parent().expect("parent"));
    }
}
