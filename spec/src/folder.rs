//! The run folder, `<store>/<name>/<time>/`: the one place that knows its file names and
//! the types of the files in it. The harness writes these types and the report reads the
//! same ones.
//!
//! - `test.json`: [`TestRecord`] — the [`TestSpec`], the command that runs it again, when.
//! - `history.jsonl`: every operation, streamed as the test runs (`history`'s format).
//! - `stats.json`: [`RunStats`] — timings, op counts, availability, what the nemesis did.
//! - `results.json`: [`checkers::Results`] — each checker's verdict and report.
//! - `expectation.json`: [`Expectation`] — a scenario's expectation and whether it held.
//! - `nodes/<node>/`: each broker's `node.toml`, `broker.log` and data.
//! - `report.html`, `timeline.html`: the pages.
//!
//! `<store>/latest` and `<store>/<name>/latest` point at the newest run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use checkers::{Results, Verdict};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::spec::{Mode, TestSpec};
pub use workloads::availability::PartitionAvailability;

pub const TEST: &str = "test.json";
pub const HISTORY: &str = "history.jsonl";
pub const RESULTS: &str = "results.json";
pub const STATS: &str = "stats.json";
pub const EXPECTATION: &str = "expectation.json";
pub const NODES: &str = "nodes";
pub const REPORT: &str = "report.html";
pub const TIMELINE: &str = "timeline.html";
/// The link to the newest run, in the store and in each name's folder.
pub const LATEST: &str = "latest";

/// A run folder's file that could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FolderError {
    #[error("{path}: {source}", path = path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{name} is not a valid {what}: {source}", name = file_name(path))]
    Parse {
        path: PathBuf,
        what: &'static str,
        source: serde_json::Error,
    },
    #[error("cannot find a free run folder name under {}", .0.display())]
    NoFreeName(PathBuf),
}

/// A file's name as errors say it (the whole path when it has none).
fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |name| name.to_string_lossy().into_owned(),
    )
}

/// `test.json`: the test as it was run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestRecord {
    pub spec: TestSpec,
    /// The command that runs it again ([`TestSpec::command_line`]).
    pub command: String,
    /// The broker binary that ran.
    pub broker_bin: String,
    pub topic: String,
    /// Local time, RFC 3339.
    pub started: String,
    pub harness_version: String,
    /// What the scenario file said, for a scenario's run.
    pub scenario: Option<ScenarioInfo>,
}

impl TestRecord {
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// A scenario's title, if the run played one.
    pub fn title(&self) -> Option<&str> {
        self.scenario.as_ref().map(|s| s.title.as_str())
    }
}

/// The parts of a scenario file a page shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScenarioInfo {
    pub name: String,
    pub title: String,
    pub jira: Option<String>,
    pub file: String,
    pub nodes: usize,
    /// Settings of single nodes, by node.
    pub node_settings: BTreeMap<String, Vec<String>>,
    /// Replicas of each partition, preferred first.
    pub assignment: Vec<Vec<String>>,
}

/// `stats.json`: figures of the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunStats {
    /// Seconds from the start of the brokers until the topic served.
    pub serving_secs: f64,
    pub workload_secs: f64,
    pub ops: u64,
    pub ok: u64,
    pub fail: u64,
    pub info: u64,
    pub ops_per_sec: f64,
    pub recovery_secs: f64,
    /// Whether the cluster served again after the final heal in time.
    pub recovered: bool,
    /// What was still wrong when it did not.
    pub recovery_problem: Option<String>,
    pub availability: Vec<PartitionAvailability>,
    pub final_reads_complete: bool,
    /// What the nemesis did (absent without faults).
    pub nemesis: Option<NemesisTally>,
    /// Faults the final heal could not undo (empty when it healed everything).
    pub nemesis_unhealed: Vec<String>,
    /// The one-down probe after the availability probe (absent: not a fault test, or a
    /// run from before the probe).
    #[serde(default)]
    pub one_down: Option<OneDownProbe>,
    /// The history's `time` 0 by the wall clock, in ms since the Unix epoch (absent: a
    /// run from before it was kept): what the ISR oracle lines the nodes' logs up with.
    #[serde(default)]
    pub history_unix_ms: Option<u64>,
    /// The same origin read again when the recording ended (wall clock less the
    /// monotonic time elapsed). The two differ when the wall clock was set during the run
    /// (a step, as NTP or a VM's clock sync makes); see [`RunStats::history_origin_ms`].
    #[serde(default)]
    pub history_unix_ms_at_end: Option<u64>,
}

impl RunStats {
    /// The history's time 0 by the wall clock as the ISR oracle should use it: the later
    /// of the two readings. A step of the wall clock during the run moves the nodes'
    /// timestamps after it but not the history's; the later origin never makes a write
    /// acknowledged after an event look acknowledged before it, whichever way the clock
    /// was set (it only makes the oracle less sensitive by the step's size).
    pub fn history_origin_ms(&self) -> Option<u64> {
        match (self.history_unix_ms, self.history_unix_ms_at_end) {
            (Some(start), Some(end)) => Some(start.max(end)),
            (start, end) => start.or(end),
        }
    }
}

/// The one-down probe: once the cluster has healed and every partition is fully in
/// sync again, one node is killed, and every partition must still take an acks=all
/// write within the bound, as the settings promise when they tolerate a failure
/// (Kafka: replication factor above `min.insync.replicas`). A cluster that healed into
/// an inconsistent state (a leader and the metadata disagreeing on the ISR, say) shows
/// it here, and nowhere else, since every node is back by the end of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OneDownProbe {
    /// The node killed (restarted with its data afterwards); `None` when the probe did
    /// not run.
    pub node: Option<String>,
    /// Why it did not run.
    pub skipped: Option<String>,
    pub bound_secs: f64,
    /// Each partition's first acknowledged write with the node down.
    pub availability: Vec<PartitionAvailability>,
    /// Partitions still not fully in sync on the healed, idle cluster that it cannot be
    /// catching up on (looked at before the kill).
    #[serde(default)]
    pub not_restored: Vec<NotRestored>,
}

/// A partition that the healed cluster does not bring back in sync: its leader's own ISR
/// differs from the metadata's, or a replica that holds the leader's whole log stays
/// outside the ISR.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotRestored {
    /// `topic/partition`.
    pub key: String,
    pub leader: String,
    /// The replica left out, when that is what is wrong.
    pub replica: Option<String>,
    pub why: String,
}

/// What the nemesis did, by `f`: the one-line summary of a test and its `stats.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NemesisTally {
    /// Completed operations by `f` (the final heal's included).
    pub by_f: BTreeMap<String, u64>,
    /// Those that completed with an error, by `f`.
    pub errors: BTreeMap<String, u64>,
    /// Operations invoked and never completed (the run ended in between).
    pub open: u64,
}

impl NemesisTally {
    pub fn total(&self) -> u64 {
        self.by_f.values().sum()
    }

    /// `nemesis: 14 ops (kill 2, start 2, ...); 1 error (reassign 1)`.
    pub fn summary_line(&self) -> String {
        let list = |counts: &BTreeMap<String, u64>| {
            counts
                .iter()
                .map(|(f, n)| format!("{f} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let total = self.total();
        let mut line = format!("nemesis: {total} ops");
        if total > 0 {
            line.push_str(&format!(" ({})", list(&self.by_f)));
        }
        let errors: u64 = self.errors.values().sum();
        match errors {
            0 => line.push_str("; no errors"),
            1 => line.push_str(&format!("; 1 error ({})", list(&self.errors))),
            n => line.push_str(&format!("; {n} errors ({})", list(&self.errors))),
        }
        if self.open > 0 {
            line.push_str(&format!("; {} never completed", self.open));
        }
        line
    }
}

/// `expectation.json`: what a scenario expected in its mode, and whether it held.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Expectation {
    pub scenario: String,
    pub mode: Mode,
    /// The checkers' composed verdict; `None` when the history could not be checked.
    pub verdict: Option<Verdict>,
    /// Anomaly kinds that count against validity, with how many of each were reported.
    pub anomalies: BTreeMap<String, u64>,
    pub met: bool,
    /// Why it did or did not.
    pub reason: String,
    pub secs: f64,
    pub run_dir: PathBuf,
    /// The steps could not play out as written (a wait-until timed out, a fault failed).
    pub problem: Option<String>,
}

/// One run's folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFolder {
    dir: PathBuf,
}

impl RunFolder {
    /// A folder that exists (a run to read or re-check).
    pub fn open(dir: &Path) -> RunFolder {
        RunFolder {
            dir: dir.to_path_buf(),
        }
    }

    /// `<store>/<name>/<YYYYMMDDTHHMMSS>/`, suffixed `-1`, `-2`, ... if that exists;
    /// made absolute.
    pub fn create(store: &Path, name: &str) -> Result<RunFolder, FolderError> {
        let stamp = chrono::Local::now().format("%Y%m%dT%H%M%S").to_string();
        let base = store.join(name);
        std::fs::create_dir_all(&base).map_err(|source| FolderError::Io {
            path: base.clone(),
            source,
        })?;
        for n in 0..1000 {
            let candidate = if n == 0 {
                base.join(&stamp)
            } else {
                base.join(format!("{stamp}-{n}"))
            };
            match std::fs::create_dir(&candidate) {
                Ok(()) => {
                    let dir = candidate.canonicalize().map_err(|source| FolderError::Io {
                        path: candidate.clone(),
                        source,
                    })?;
                    return Ok(RunFolder { dir });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(source) => {
                    return Err(FolderError::Io {
                        path: candidate,
                        source,
                    })
                }
            }
        }
        Err(FolderError::NoFreeName(base))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A file or folder of the run, by one of this module's names.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    pub fn history(&self) -> PathBuf {
        self.path(HISTORY)
    }

    pub fn nodes(&self) -> PathBuf {
        self.path(NODES)
    }

    pub fn write_test(&self, record: &TestRecord) -> Result<(), FolderError> {
        self.write(TEST, record)
    }

    pub fn write_stats(&self, stats: &RunStats) -> Result<(), FolderError> {
        self.write(STATS, stats)
    }

    pub fn write_results(&self, results: &Results) -> Result<(), FolderError> {
        self.write(RESULTS, results)
    }

    pub fn write_expectation(&self, expectation: &Expectation) -> Result<(), FolderError> {
        self.write(EXPECTATION, expectation)
    }

    /// `test.json`, `None` when absent.
    pub fn read_test(&self) -> Result<Option<TestRecord>, FolderError> {
        self.read(TEST, "test record")
    }

    pub fn read_stats(&self) -> Result<Option<RunStats>, FolderError> {
        self.read(STATS, "run's statistics")
    }

    pub fn read_results(&self) -> Result<Option<Results>, FolderError> {
        self.read(RESULTS, "checker result")
    }

    pub fn read_expectation(&self) -> Result<Option<Expectation>, FolderError> {
        self.read(EXPECTATION, "scenario expectation")
    }

    /// Points `<store>/<name>/latest` and `<store>/latest` at this run; what could not
    /// be linked, one sentence each (a missing link costs the run nothing).
    pub fn update_latest(&self, store: &Path, name: &str) -> Vec<String> {
        let mut problems = Vec::new();
        for link in [store.join(name).join(LATEST), store.join(LATEST)] {
            let _ = std::fs::remove_file(&link);
            if let Err(e) = std::os::unix::fs::symlink(&self.dir, &link) {
                problems.push(format!("cannot link {}: {e}", link.display()));
            }
        }
        problems
    }

    /// Writes `value` as pretty JSON to the run's file `name`.
    pub fn write(&self, name: &str, value: &impl Serialize) -> Result<(), FolderError> {
        write_json(&self.path(name), value)
    }

    fn read<T: DeserializeOwned>(
        &self,
        name: &str,
        what: &'static str,
    ) -> Result<Option<T>, FolderError> {
        let path = self.path(name);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(FolderError::Io { path, source }),
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|source| FolderError::Parse { path, what, source })
    }
}

/// A path as records and pages show it: relative to the current folder when it is
/// inside it (a checkout's `target/release/broker` or `store/<name>/<time>` reads the
/// same on every machine), as given otherwise.
pub fn shown_path(path: &Path) -> String {
    std::env::current_dir()
        .ok()
        .and_then(|here| here.canonicalize().ok())
        .and_then(|here| {
            let full = path.canonicalize().ok()?;
            full.strip_prefix(&here).ok().map(Path::to_path_buf)
        })
        .unwrap_or_else(|| path.to_path_buf())
        .display()
        .to_string()
}

/// Writes `value` as pretty JSON, a newline at the end.
pub fn write_json(path: &Path, value: &impl Serialize) -> Result<(), FolderError> {
    let text = serde_json::to_string_pretty(value).map_err(|source| FolderError::Parse {
        path: path.to_path_buf(),
        what: "JSON value",
        source,
    })?;
    std::fs::write(path, text + "\n").map_err(|source| FolderError::Io {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_fixture_reads_as_typed_files() {
        let dir = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../harness/tests/data/run-KAFKA-1561-buggy"
        ));
        let folder = RunFolder::open(dir);
        let test = folder.read_test().expect("test.json").expect("present");
        assert_eq!(test.name(), "KAFKA-1561-buggy");
        assert_eq!(test.spec.command_line(), test.command);
        let expectation = folder.read_expectation().expect("expectation.json");
        assert!(expectation.expect("present").met);
        let results = folder
            .read_results()
            .expect("results.json")
            .expect("present");
        assert!(results.counted_anomalies().contains_key("lost-write"));
    }

    #[test]
    fn the_history_origin_is_the_later_reading() {
        let stats = |start, end| RunStats {
            history_unix_ms: start,
            history_unix_ms_at_end: end,
            ..RunStats::default()
        };
        assert_eq!(stats(Some(100), Some(100)).history_origin_ms(), Some(100));
        assert_eq!(stats(Some(100), Some(350)).history_origin_ms(), Some(350));
        assert_eq!(stats(Some(400), Some(350)).history_origin_ms(), Some(400));
        // A run from before the second reading keeps its one origin.
        assert_eq!(stats(Some(100), None).history_origin_ms(), Some(100));
        assert_eq!(stats(None, None).history_origin_ms(), None);
    }

    #[test]
    fn a_record_round_trips_through_its_file() {
        let dir = std::env::temp_dir().join(format!("spec-folder-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let folder = RunFolder::create(&dir, "t").expect("created");
        let stats = RunStats {
            ops: 3,
            nemesis: Some(NemesisTally::default()),
            ..RunStats::default()
        };
        folder.write_stats(&stats).expect("written");
        assert_eq!(folder.read_stats().expect("read"), Some(stats));
        assert_eq!(folder.read_test().expect("absent is fine"), None);
        std::fs::write(folder.path(TEST), "{").expect("written");
        let error = folder.read_test().expect_err("a torn file");
        assert!(
            error
                .to_string()
                .starts_with("test.json is not a valid test record"),
            "{error}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_tally_says_what_the_nemesis_did() {
        let mut tally = NemesisTally::default();
        assert_eq!(tally.summary_line(), "nemesis: 0 ops; no errors");
        tally.by_f.insert("kill".into(), 2);
        tally.errors.insert("kill".into(), 1);
        tally.open = 1;
        assert_eq!(
            tally.summary_line(),
            "nemesis: 2 ops (kill 2); 1 error (kill 1); 1 never completed"
        );
    }
}
