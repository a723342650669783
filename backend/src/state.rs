//! What a netns run records about itself, so that anything it leaves behind can be found
//! and removed by `harness clean` even when the harness was SIGKILLed.
//!
//! - [`RunState`]: one JSON file per run, `/run/harness/<prefix>.json`, written (atomically,
//!   through a temporary file and a rename) before the resources it names are created:
//!   namespaces, links, the test range's route, the root `FORWARD` rule, daemons.
//! - [`ProcessRecord`]: a process's identity, pid plus its start time from
//!   `/proc/<pid>/stat`, so that a recorded pid is only ever signalled while it is still
//!   the same process.
//! - Subnet claims: `/run/harness/subnet-<K>.claim` holds the prefix of the run that
//!   uses 10.77.K.0/24; created with `create_new`, so two runs never get the same /24.
//! - The naming rules: a run's prefix is `jh` and 6 hex digits, and everything the run
//!   creates is named `<prefix>-...`; [`is_prefix`] and [`prefix_of`] are what teardown and
//!   clean check before removing anything.

use crate::BackendError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Where the state files and subnet claims live (a tmpfs, emptied at boot, like the
/// namespaces they describe).
pub const STATE_DIR: &str = "/run/harness";

/// The version of the state file format this code writes and reads.
pub const STATE_VERSION: u32 = 1;

/// A process's identity: pid, start time (clock ticks after boot, field 22 of
/// `/proc/<pid>/stat`) and, for people reading the file, its command line then.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessRecord {
    pub pid: u32,
    pub start_time: u64,
    pub cmdline: Vec<String>,
}

impl ProcessRecord {
    /// The identity of the live process `pid`, or `None` if there is none.
    pub fn of(pid: u32) -> Option<ProcessRecord> {
        let stat = read_stat(pid)?;
        Some(ProcessRecord {
            pid,
            start_time: stat.start_time,
            cmdline: cmdline(pid).unwrap_or_default(),
        })
    }

    /// This process.
    pub fn this_process() -> Option<ProcessRecord> {
        ProcessRecord::of(std::process::id())
    }

    /// Whether the process still exists (stopped counts, a zombie does not) and is still
    /// the one recorded (same start time), not a later process with the same pid. A
    /// main thread that is a zombie while other threads of the process still exit counts
    /// as alive: those threads still hold the process's files (its sockets).
    pub fn is_alive(&self) -> bool {
        match read_stat(self.pid) {
            Some(stat) if stat.start_time == self.start_time => {
                !matches!(stat.state, 'Z' | 'X') || other_threads(self.pid)
            }
            _ => false,
        }
    }
}

/// The fields of `/proc/<pid>/stat` this module uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    pub state: char,
    pub start_time: u64,
}

/// Whether process `pid` has a thread besides its main one (`/proc/<pid>/task`).
fn other_threads(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/task")).is_ok_and(|tasks| {
        tasks
            .filter_map(Result::ok)
            .any(|task| task.file_name().to_str() != Some(pid.to_string().as_str()))
    })
}

pub(crate) fn read_stat(pid: u32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// Parses `/proc/<pid>/stat`: the command (field 2) is in parentheses and may itself hold
/// spaces and parentheses, so fields are counted from the last `)`.
pub(crate) fn parse_stat(text: &str) -> Option<Stat> {
    let after = &text[text.rfind(')')? + 1..];
    let mut fields = after.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // After the state (field 3), the start time is field 22: 18 fields further on.
    let start_time = fields.nth(18)?.parse().ok()?;
    Some(Stat { state, start_time })
}

/// The command line of `pid`, or `None` if it cannot be read (or is empty, as for a
/// process in the middle of `exec`).
pub fn cmdline(pid: u32) -> Option<Vec<String>> {
    let bytes = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<String> = bytes
        .split(|byte| *byte == 0)
        .filter(|arg| !arg.is_empty())
        .map(|arg| String::from_utf8_lossy(arg).into_owned())
        .collect();
    if args.is_empty() {
        None
    } else {
        Some(args)
    }
}

/// A daemon a run started: which node, and its identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonRecord {
    pub node: String,
    #[serde(flatten)]
    pub process: ProcessRecord,
    pub log_file: PathBuf,
}

/// Everything one netns run creates, recorded before it is created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunState {
    pub version: u32,
    /// `jh` + 6 hex digits; every name below starts with `<prefix>-`.
    pub prefix: String,
    /// The harness process that owns the run; the run is live while it is.
    pub owner: ProcessRecord,
    /// The run's /24 is 10.77.`subnet`.0/24.
    pub subnet: u8,
    pub bridge: String,
    /// Node name → namespace, host-side veth, in node order.
    pub nodes: Vec<NodeRecord>,
    /// The chain inside each namespace that holds the cuts.
    pub cut_chain: String,
    /// The `unreachable` route for the whole test range in the root namespace, shared by
    /// every run (removed by the last live one).
    pub route: String,
    /// An `ACCEPT` rule for the bridge at the head of the root namespace's `FORWARD` chain
    /// (its `iptables` arguments after `-I FORWARD 1` / `-D FORWARD`), when bridged
    /// traffic passes through that chain.
    pub forward_rule: Option<Vec<String>>,
    pub daemons: Vec<DaemonRecord>,
    /// When the run started (RFC 3339), for people.
    pub created: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub name: String,
    pub namespace: String,
    pub host_link: String,
}

impl RunState {
    /// The state file of the run `prefix` in `dir`.
    pub fn path(dir: &Path, prefix: &str) -> PathBuf {
        dir.join(format!("{prefix}.json"))
    }

    /// Writes the file atomically (temporary file, fsync, rename).
    pub fn write(&self, dir: &Path) -> Result<(), BackendError> {
        let path = RunState::path(dir, &self.prefix);
        let temp = dir.join(format!("{}.json.tmp", self.prefix));
        write_json_atomically(self, &path, &temp)
    }

    /// Reads and checks a state file: the version, and that every name it holds carries
    /// its prefix (so that a damaged file cannot make teardown remove anything else).
    pub fn read(path: &Path) -> Result<RunState, BackendError> {
        let text = std::fs::read_to_string(path).map_err(|source| BackendError::Io {
            what: "reading".into(),
            path: path.to_path_buf(),
            source,
        })?;
        let state: RunState = serde_json::from_str(&text).map_err(|error| BackendError::State {
            path: path.to_path_buf(),
            reason: error.to_string(),
        })?;
        state.validate().map_err(|reason| BackendError::State {
            path: path.to_path_buf(),
            reason,
        })?;
        Ok(state)
    }

    /// Checks the invariants [`RunState::read`] relies on.
    pub fn validate(&self) -> Result<(), String> {
        if self.version != STATE_VERSION {
            return Err(format!(
                "version {} (this harness reads version {STATE_VERSION})",
                self.version
            ));
        }
        if !is_prefix(&self.prefix) {
            return Err(format!("{:?} is not a run prefix", self.prefix));
        }
        let mut names = vec![&self.bridge, &self.cut_chain];
        for node in &self.nodes {
            names.push(&node.namespace);
            names.push(&node.host_link);
        }
        if let Some(name) = names
            .into_iter()
            .find(|name| prefix_of(name) != Some(self.prefix.as_str()))
        {
            return Err(format!(
                "{name:?} does not carry the prefix {}",
                self.prefix
            ));
        }
        if let Some(rule) = &self.forward_rule {
            if !rule.iter().any(|arg| arg == &self.prefix) {
                return Err(format!(
                    "the FORWARD rule {rule:?} does not carry the prefix {}",
                    self.prefix
                ));
            }
        }
        Ok(())
    }

    /// Whether the harness that owns this run is still running.
    pub fn is_live(&self) -> bool {
        self.owner.is_alive()
    }
}

/// Writes `value` as pretty JSON to `path` through `temp` (written, fsynced, renamed),
/// so that a reader never sees half a file.
pub(crate) fn write_json_atomically(
    value: &impl Serialize,
    path: &Path,
    temp: &Path,
) -> Result<(), BackendError> {
    let text = serde_json::to_string_pretty(value).map_err(|error| BackendError::State {
        path: path.to_path_buf(),
        reason: error.to_string(),
    })?;
    let io = |what: &str, path: &Path| {
        let what = what.to_string();
        let path = path.to_path_buf();
        move |source| BackendError::Io { what, path, source }
    };
    let mut file = std::fs::File::create(temp).map_err(io("creating", temp))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.write_all(b"\n"))
        .and_then(|()| file.sync_all())
        .map_err(io("writing", temp))?;
    std::fs::rename(temp, path).map_err(io("renaming to", path))?;
    Ok(())
}

/// Whether `text` is a run prefix: `jh` and 6 lowercase hex digits.
pub fn is_prefix(text: &str) -> bool {
    text.len() == 8
        && text.starts_with("jh")
        && text[2..]
            .chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
}

/// The run prefix a resource name carries (`jh1a2b3c-n1` → `jh1a2b3c`), if any.
pub fn prefix_of(name: &str) -> Option<&str> {
    let (prefix, rest) = name.split_once('-')?;
    (is_prefix(prefix) && !rest.is_empty()).then_some(prefix)
}

/// A prefix from 3 bytes of `/dev/urandom`.
pub fn random_prefix() -> Result<String, BackendError> {
    use std::io::Read;
    let path = Path::new("/dev/urandom");
    let mut bytes = [0u8; 3];
    std::fs::File::open(path)
        .and_then(|mut file| file.read_exact(&mut bytes))
        .map_err(|source| BackendError::Io {
            what: "reading".into(),
            path: path.to_path_buf(),
            source,
        })?;
    Ok(format!(
        "jh{:02x}{:02x}{:02x}",
        bytes[0], bytes[1], bytes[2]
    ))
}

/// Every state file in `dir`, read (an unreadable one as its error).
pub fn read_all(dir: &Path) -> Vec<(PathBuf, Result<RunState, BackendError>)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| {
            path.extension().is_some_and(|ext| ext == "json")
                && path
                    .file_stem()
                    .and_then(|stem| stem.to_str())
                    .is_some_and(is_prefix)
        })
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let state = RunState::read(&path);
            (path, state)
        })
        .collect()
}

/// The runs in `dir` whose harness is still running.
pub fn live_runs(dir: &Path) -> Vec<RunState> {
    read_all(dir)
        .into_iter()
        .filter_map(|(_, state)| state.ok())
        .filter(RunState::is_live)
        .collect()
}

/// The claim file of 10.77.`subnet`.0/24.
pub fn claim_path(dir: &Path, subnet: u8) -> PathBuf {
    dir.join(format!("subnet-{subnet}.claim"))
}

/// The claim files in `dir`: subnet and the prefix written in it (`None` if unreadable).
pub fn claims(dir: &Path) -> Vec<(u8, PathBuf, Option<String>)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(u8, PathBuf, Option<String>)> = entries
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter_map(|path| {
            let name = path.file_name()?.to_str()?;
            let subnet: u8 = name
                .strip_prefix("subnet-")?
                .strip_suffix(".claim")?
                .parse()
                .ok()?;
            let owner = std::fs::read_to_string(&path)
                .ok()
                .map(|text| text.trim().to_string())
                .filter(|text| is_prefix(text));
            Some((subnet, path, owner))
        })
        .collect();
    found.sort();
    found
}

/// Claims a free /24 for `prefix`: the first one that no claim file holds and that no
/// address in `in_use` (from `ip -4 -o addr show`) lies in. `create_new` makes the claim
/// atomic, so a concurrent run that chose the same one moves on to the next.
pub fn claim_subnet(dir: &Path, prefix: &str, in_use: &BTreeSet<u8>) -> Result<u8, BackendError> {
    let mut taken: BTreeSet<u8> = in_use.clone();
    loop {
        taken.extend(claims(dir).into_iter().map(|(subnet, _, _)| subnet));
        let subnet = choose_subnet(&taken).ok_or_else(|| {
            BackendError::Setup(format!(
                "no free /24 in 10.77.0.0/16: every one is claimed in {} (run `harness clean`)",
                dir.display()
            ))
        })?;
        let path = claim_path(dir, subnet);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(mut file) => {
                file.write_all(prefix.as_bytes())
                    .map_err(|source| BackendError::Io {
                        what: "writing".into(),
                        path: path.clone(),
                        source,
                    })?;
                return Ok(subnet);
            }
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                taken.insert(subnet);
            }
            Err(source) => {
                return Err(BackendError::Io {
                    what: "creating".into(),
                    path,
                    source,
                })
            }
        }
    }
}

/// The lowest K in 0..=255 not in `taken`.
pub fn choose_subnet(taken: &BTreeSet<u8>) -> Option<u8> {
    (0..=u8::MAX).find(|subnet| !taken.contains(subnet))
}

/// The K of every 10.77.K.x address in `ip -4 -o addr show` output.
pub fn subnets_in_use(ip_addr_output: &str) -> BTreeSet<u8> {
    ip_addr_output
        .split_whitespace()
        .filter_map(|word| {
            let address = word.split('/').next()?;
            let mut octets = address.split('.');
            let (a, b, c) = (octets.next()?, octets.next()?, octets.next()?);
            octets.next()?;
            (a == "10" && b == "77").then(|| c.parse().ok()).flatten()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RunState {
        RunState {
            version: STATE_VERSION,
            prefix: "jh0a1b2c".into(),
            owner: ProcessRecord {
                pid: 42,
                start_time: 1234,
                cmdline: vec!["harness".into(), "test".into()],
            },
            subnet: 7,
            bridge: "jh0a1b2c-br".into(),
            nodes: (1..=3)
                .map(|i| NodeRecord {
                    name: format!("n{i}"),
                    namespace: format!("jh0a1b2c-n{i}"),
                    host_link: format!("jh0a1b2c-v{i}"),
                })
                .collect(),
            cut_chain: "jh0a1b2c-cuts".into(),
            route: "10.77.0.0/16".into(),
            forward_rule: Some(
                [
                    "-i",
                    "jh0a1b2c-br",
                    "-o",
                    "jh0a1b2c-br",
                    "-m",
                    "comment",
                    "--comment",
                    "jh0a1b2c",
                    "-j",
                    "ACCEPT",
                ]
                .iter()
                .map(|arg| arg.to_string())
                .collect(),
            ),
            daemons: vec![DaemonRecord {
                node: "n2".into(),
                process: ProcessRecord {
                    pid: 4321,
                    start_time: 99,
                    cmdline: vec!["broker".into(), "--config".into(), "node.toml".into()],
                },
                log_file: PathBuf::from("/tmp/n2/broker.log"),
            }],
            created: "2026-01-01T00:00:00Z".into(),
        }
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("harness-state-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    #[test]
    fn state_file_round_trips() {
        let dir = temp_dir("round-trip");
        let state = sample();
        state.write(&dir).expect("write");
        let path = RunState::path(&dir, &state.prefix);
        assert_eq!(RunState::read(&path).expect("read"), state);
        assert!(!dir.join("jh0a1b2c.json.tmp").exists());
        let all = read_all(&dir);
        assert_eq!(all.len(), 1);
        assert!(matches!(&all[0].1, Ok(read) if *read == state));
        // The owner (pid 42 with start time 1234) is not this machine's pid 42.
        assert!(live_runs(&dir).is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn state_files_with_foreign_names_are_refused() {
        let dir = temp_dir("foreign");
        let mut state = sample();
        state.nodes[1].namespace = "production".into();
        state.write(&dir).expect("write");
        let error = RunState::read(&RunState::path(&dir, &state.prefix)).expect_err("refused");
        assert!(
            error
                .to_string()
                .contains("\"production\" does not carry the prefix"),
            "{error}"
        );

        let mut state = sample();
        state.forward_rule = Some(vec!["-j".into(), "ACCEPT".into()]);
        assert!(state.validate().is_err());
        let mut state = sample();
        state.prefix = "jhXYZ".into();
        assert!(state.validate().is_err());
        let mut state = sample();
        state.version = 2;
        assert!(state.validate().is_err());

        std::fs::write(dir.join("jh000000.json"), "{ not json").expect("write");
        let all = read_all(&dir);
        assert_eq!(all.len(), 2);
        assert!(all.iter().any(|(_, state)| state.is_err()));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn prefixes_and_names() {
        assert!(is_prefix("jh0a1b2c"));
        assert!(!is_prefix("jh0A1b2c"));
        assert!(!is_prefix("jh0a1b2"));
        assert!(!is_prefix("xx0a1b2c"));
        assert_eq!(prefix_of("jh0a1b2c-n12"), Some("jh0a1b2c"));
        assert_eq!(prefix_of("jh0a1b2c-br"), Some("jh0a1b2c"));
        assert_eq!(prefix_of("jh0a1b2c-"), None);
        assert_eq!(prefix_of("jh0a1b2c"), None);
        assert_eq!(prefix_of("eth0"), None);
        assert_eq!(prefix_of("docker-br"), None);
        let prefix = random_prefix().expect("urandom");
        assert!(is_prefix(&prefix), "{prefix}");
    }

    #[test]
    fn subnet_choice_skips_used_and_claimed() {
        assert_eq!(choose_subnet(&BTreeSet::new()), Some(0));
        assert_eq!(choose_subnet(&[0, 1, 3].into_iter().collect()), Some(2));
        assert_eq!(choose_subnet(&(0..=255).collect()), None);
        let output = "1: lo    inet 127.0.0.1/8 scope host lo\n\
                      7: jh1-br    inet 10.77.3.254/24 scope global jh1-br\n\
                      9: eth1    inet 10.770.5.1/24 scope global eth1\n\
                      10: eth2    inet 10.77.9.1/16 scope global eth2\n";
        assert_eq!(subnets_in_use(output), [3, 9].into_iter().collect());

        let dir = temp_dir("claims");
        let in_use: BTreeSet<u8> = [0].into_iter().collect();
        assert_eq!(claim_subnet(&dir, "jh000001", &in_use).expect("claim"), 1);
        assert_eq!(claim_subnet(&dir, "jh000002", &in_use).expect("claim"), 2);
        std::fs::remove_file(claim_path(&dir, 1)).expect("release");
        assert_eq!(claim_subnet(&dir, "jh000003", &in_use).expect("claim"), 1);
        let found = claims(&dir);
        assert_eq!(
            found
                .iter()
                .map(|(subnet, _, owner)| (*subnet, owner.clone()))
                .collect::<Vec<_>>(),
            vec![(1, Some("jh000003".into())), (2, Some("jh000002".into()))]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_process_whose_main_thread_exited_first_is_alive_until_its_last_thread_ends() {
        // The main thread leaves (pthread_exit) while another sleeps: the main thread is a
        // zombie, the process still holds its files.
        let script = "import ctypes, threading, time\n\
                      threading.Thread(target=time.sleep, args=(1.5,)).start()\n\
                      ctypes.CDLL(None).pthread_exit(None)\n";
        let mut child = std::process::Command::new("python3")
            .args(["-c", script])
            .spawn()
            .expect("python3 runs");
        let record = ProcessRecord::of(child.id()).expect("its /proc entry");
        let began = std::time::Instant::now();
        while read_stat(record.pid).map(|s| s.state) != Some('Z') {
            assert!(
                began.elapsed() < std::time::Duration::from_secs(5),
                "the main thread never exited"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(other_threads(record.pid));
        assert!(record.is_alive(), "a thread still runs");
        let status = child.wait().expect("it ends");
        assert!(status.success(), "{status}");
        assert!(!record.is_alive(), "reaped: gone");
    }

    #[test]
    fn proc_stat_parsing_and_identity() {
        let line =
            "1234 (a) b) (c) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                state: 'S',
                start_time: 987654
            })
        );
        assert_eq!(parse_stat("1234 (x) S 1 2"), None);
        let me = ProcessRecord::this_process().expect("this process");
        assert!(me.is_alive());
        assert!(me.cmdline.iter().any(|arg| !arg.is_empty()));
        let older = ProcessRecord {
            start_time: me.start_time.wrapping_add(1),
            ..me.clone()
        };
        assert!(
            !older.is_alive(),
            "a different start time is another process"
        );
    }
}
