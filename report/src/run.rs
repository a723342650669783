//! What a run folder holds, loaded once: `history.jsonl` (required), `test.json`,
//! `results.json`, `stats.json`, `expectation.json` (each optional) and the names of the
//! folders in `nodes/`; plus what the page derives from the history alone: per-f op
//! counts and per-partition summaries (final log length, leader changes).
//!
//! A report should still be written for a damaged run: an optional file that cannot be
//! read or parsed becomes a note in [`RunData::problems`], and a history that does not
//! pair leaves [`RunData::operations`] empty with the reason in
//! [`RunData::pairing_error`]. Only an unreadable history is an error.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use history::{History, OpType};

use spec::{Expectation, RunFolder, RunStats, TestRecord};
use workloads::log::ReadValue;

use crate::ReportError;

/// What a run folder holds, loaded once.
pub struct RunData {
    pub dir: PathBuf,
    /// `test.json`.
    pub test: Option<TestRecord>,
    pub results: Option<checkers::Results>,
    pub stats: Option<RunStats>,
    pub expectation: Option<Expectation>,
    pub history: history::History,
    /// The history's operations, paired (empty when pairing failed).
    pub operations: Vec<history::Operation>,
    /// Names of the folders in `nodes/`, in natural order (`n2` before `n10`).
    pub nodes: Vec<String>,
    /// Why the history could not be paired, if it could not.
    pub pairing_error: Option<String>,
    /// Optional files that were present but unreadable, one sentence each.
    pub problems: Vec<String>,
}

impl RunData {
    pub fn load(dir: &Path) -> Result<RunData, ReportError> {
        let mut problems = Vec::new();
        let folder = RunFolder::open(dir);
        let test = folder
            .read_test()
            .unwrap_or_else(|e| note(&mut problems, e));
        let results = folder
            .read_results()
            .unwrap_or_else(|e| note(&mut problems, e));
        let stats = folder
            .read_stats()
            .unwrap_or_else(|e| note(&mut problems, e));
        let expectation = folder
            .read_expectation()
            .unwrap_or_else(|e| note(&mut problems, e));
        let history = history::jsonl::read_jsonl(&folder.history())?;
        if let Some(torn) = &history.torn_tail {
            problems.push(format!(
                "the history's last line ({torn}) was cut short, as by a killed writer; it was dropped"
            ));
        }
        let (operations, pairing_error) = match history::pair(&history) {
            Ok(operations) => (operations, None),
            Err(e) => (Vec::new(), Some(e.to_string())),
        };
        let nodes = list_nodes(&folder.nodes());
        Ok(RunData {
            dir: dir.to_path_buf(),
            test,
            results,
            stats,
            expectation,
            history,
            operations,
            nodes,
            pairing_error,
            problems,
        })
    }

    /// The run's name: `test.json`'s `name`, else the folder's parent's name.
    pub fn name(&self) -> String {
        if let Some(test) = &self.test {
            return test.name().to_string();
        }
        let canonical = self.dir.canonicalize().unwrap_or_else(|_| self.dir.clone());
        canonical
            .parent()
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "run".to_string())
    }

    /// Whether `relative` (a path inside the run folder) exists.
    pub fn has_file(&self, relative: &str) -> bool {
        self.dir.join(relative).is_file()
    }
}

/// A run-folder file that is there but cannot be used becomes a note; the page goes on
/// without it.
pub(crate) fn note<T>(problems: &mut Vec<String>, error: spec::FolderError) -> Option<T> {
    problems.push(error.to_string());
    None
}

/// The sub-folders of `nodes`, in natural order; none when it does not exist.
fn list_nodes(nodes: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(nodes) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .flatten()
        .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort_by(|a, b| natural_key(a).cmp(&natural_key(b)));
    names
}

/// Sorts `n2` before `n10`: the name without its trailing digits, then their value.
fn natural_key(name: &str) -> (&str, u64, &str) {
    let stem = name.trim_end_matches(|c: char| c.is_ascii_digit());
    let number = name[stem.len()..].parse().unwrap_or(0);
    (stem, number, name)
}

/// How many client entries of one `f` the history holds, by type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpCounts {
    pub f: String,
    pub invoke: u64,
    pub ok: u64,
    pub fail: u64,
    pub info: u64,
}

impl OpCounts {
    /// Invocations that never completed.
    pub fn pending(&self) -> u64 {
        self.invoke.saturating_sub(self.ok + self.fail + self.info)
    }
}

/// Client entries per `f` (sorted by `f`), from the raw history so that it works even
/// when the history does not pair.
pub fn op_counts(history: &History) -> Vec<OpCounts> {
    let mut by_f: BTreeMap<&str, OpCounts> = BTreeMap::new();
    for op in history.ops.iter().filter(|op| op.process.is_client()) {
        let counts = by_f.entry(op.f.as_str()).or_insert_with(|| OpCounts {
            f: op.f.clone(),
            ..OpCounts::default()
        });
        match op.kind {
            OpType::Invoke => counts.invoke += 1,
            OpType::Ok => counts.ok += 1,
            OpType::Fail => counts.fail += 1,
            OpType::Info => counts.info += 1,
        }
    }
    by_f.into_values().collect()
}

/// The longest node sequence kept in a [`PartitionSummary`].
pub const MAX_SERVING: usize = 12;

/// What the history shows of one partition (key).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionSummary {
    pub key: String,
    /// Highest offset + 1 over the records of the key's ok final reads (reads marked
    /// `"final": true`); `None` when there was no such read.
    pub final_length: Option<u64>,
    /// Ok client ops on the key.
    pub ok_ops: u64,
    /// How many times the node serving the key's ok ops changed, in history order.
    pub leader_changes: u64,
    /// The serving nodes in order, repeats merged; the first [`MAX_SERVING`] only.
    pub serving: Vec<String>,
}

/// One summary per key (sorted by key) from the ok client ops that name a key.
pub fn partitions(history: &History) -> Vec<PartitionSummary> {
    // Per key: its summary and the node that served its last ok op.
    let mut by_key: BTreeMap<String, (PartitionSummary, String)> = BTreeMap::new();
    for op in &history.ops {
        if op.kind != OpType::Ok || !op.process.is_client() {
            continue;
        }
        let Some(key) = op.key_text() else { continue };
        let (summary, last) = match by_key.get_mut(key.as_ref()) {
            Some(entry) => entry,
            None => by_key.entry(key.to_string()).or_insert_with(|| {
                let summary = PartitionSummary {
                    key: key.to_string(),
                    ..PartitionSummary::default()
                };
                (summary, String::new())
            }),
        };
        summary.ok_ops += 1;
        if op.f == "read" {
            if let Some(read) = ReadValue::of(&op.value).filter(|r| r.is_final) {
                let length = read.end();
                summary.final_length = Some(summary.final_length.unwrap_or(0).max(length));
            }
        }
        let Some(node) = op.node.as_deref() else {
            continue;
        };
        if node == last.as_str() {
            continue;
        }
        if !last.is_empty() {
            summary.leader_changes += 1;
        }
        node.clone_into(last);
        if summary.serving.len() < MAX_SERVING {
            summary.serving.push(node.to_string());
        }
    }
    by_key.into_values().map(|(summary, _)| summary).collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use history::{Op, Process};
    use serde_json::json;
    use serde_json::Value;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A fresh empty folder under the system's temp dir.
    pub(crate) fn temp_dir(name: &str) -> PathBuf {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "report-test-{}-{}-{name}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn ok(index: u64, f: &str, key: &str, node: &str, value: Value) -> Op {
        let mut value = value;
        value["key"] = json!(key);
        let mut op = Op::new(index, Process::Client(0), OpType::Ok, f, value);
        op.node = Some(node.to_string());
        op
    }

    #[test]
    fn leader_changes_count_switches_of_the_serving_node() {
        let h = History::from_ops(vec![
            ok(0, "append", "p/0", "n1", json!({"offset": 0})),
            ok(1, "append", "p/0", "n1", json!({"offset": 1})),
            ok(2, "append", "p/1", "n3", json!({"offset": 0})),
            ok(3, "append", "p/0", "n2", json!({"offset": 2})),
            ok(4, "read", "p/0", "n2", json!({"records": []})),
            ok(5, "append", "p/0", "n1", json!({"offset": 3})),
            ok(
                6,
                "read",
                "p/0",
                "n1",
                json!({"final": true, "records": [[0, 1], [1, 2], [5, 9]]}),
            ),
        ]);
        let p = partitions(&h);
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].key, "p/0");
        assert_eq!(p[0].leader_changes, 2);
        assert_eq!(p[0].serving, vec!["n1", "n2", "n1"]);
        assert_eq!(p[0].final_length, Some(6));
        assert_eq!(p[0].ok_ops, 6);
        assert_eq!(p[1].key, "p/1");
        assert_eq!(p[1].leader_changes, 0);
        assert_eq!(p[1].final_length, None);
    }

    #[test]
    fn failed_ops_and_the_nemesis_do_not_count() {
        let mut failed = ok(1, "append", "p/0", "n2", json!({}));
        failed.kind = OpType::Fail;
        let mut nemesis = ok(2, "kill", "p/0", "n3", json!({}));
        nemesis.process = Process::Nemesis;
        let h = History::from_ops(vec![
            ok(0, "append", "p/0", "n1", json!({})),
            failed,
            nemesis,
        ]);
        let p = partitions(&h);
        assert_eq!((p[0].ok_ops, p[0].leader_changes), (1, 0));
    }

    #[test]
    fn op_counts_by_f_and_type() {
        let invoke = |i, f: &str| Op::new(i, Process::Client(0), OpType::Invoke, f, json!({}));
        let mut h = History::from_ops(vec![
            invoke(0, "append"),
            ok(1, "append", "k", "n1", json!({})),
            invoke(2, "read"),
        ]);
        h.ops.push(Op::new(
            3,
            Process::Nemesis,
            OpType::Info,
            "kill",
            json!({}),
        ));
        let counts = op_counts(&h);
        assert_eq!(counts.len(), 2);
        assert_eq!((counts[0].f.as_str(), counts[0].ok), ("append", 1));
        assert_eq!((counts[1].f.as_str(), counts[1].pending()), ("read", 1));
    }

    #[test]
    fn loads_a_folder_whose_history_does_not_pair() {
        let dir = temp_dir("unpaired");
        std::fs::write(
            dir.join("history.jsonl"),
            "{\"index\":0,\"time\":1,\"process\":0,\"type\":\"ok\",\"f\":\"read\",\"value\":null}\n",
        )
        .unwrap();
        std::fs::write(dir.join("results.json"), "{not json").unwrap();
        std::fs::create_dir_all(dir.join("nodes/n10")).unwrap();
        std::fs::create_dir_all(dir.join("nodes/n2")).unwrap();
        let data = RunData::load(&dir).unwrap();
        assert!(data.operations.is_empty());
        let why = data.pairing_error.as_deref().unwrap();
        assert!(why.contains("no invocation"), "{why}");
        assert!(data.results.is_none());
        assert!(data.problems[0].starts_with("results.json is not a valid checker result"));
        assert_eq!(data.nodes, vec!["n2", "n10"]);
        assert!(data.test.is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_history_is_an_error() {
        let dir = temp_dir("empty");
        assert!(RunData::load(&dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
