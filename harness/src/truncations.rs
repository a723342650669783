//! The truncation oracle: judges the truncations the nodes' logs record
//! ([`sut::Db::truncations`]) by one rule of a replicated log, "a replica never discards
//! a record it knows to be committed while its leader still holds it":
//! `truncated-committed` when a replica cut its log below its own high watermark (and,
//! when it decided on the leader's log end, below that too).
//!
//! The one truncation below a high watermark a correct log makes is following a leader
//! that was elected uncleanly and is shorter: with the leader's log end known that is
//! not below both bounds; with unclean elections allowed and the leader's end unknown it
//! cannot be told apart, and is counted as not judged. Nothing here reads which bug
//! switch is on: the rule is the protocol's (KIP-101: committed records survive every
//! leader change).

use std::collections::BTreeMap;
use std::path::Path;

use checkers::{Results, Verdict};
use serde_json::{json, Value};
use sut::{Db, Truncation};

/// Every node's truncations, read from the logs under `nodes_dir` (`<node>/*.log`, as
/// the run collected them), by node name.
pub fn read(db: &dyn Db, nodes_dir: &Path) -> BTreeMap<String, Vec<Truncation>> {
    read_logs(nodes_dir, |log| db.truncations(log))
}

/// What `parse` finds in each node's logs under `nodes_dir` (`<node>/*.log`), by node
/// name: every node with a folder has an entry.
pub fn read_logs<T>(nodes_dir: &Path, parse: impl Fn(&str) -> Vec<T>) -> BTreeMap<String, Vec<T>> {
    let mut found = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(nodes_dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let node = entry.file_name().to_string_lossy().to_string();
        let Ok(files) = std::fs::read_dir(entry.path()) else {
            continue;
        };
        let mut events = Vec::new();
        for file in files.flatten() {
            let path = file.path();
            if path.extension().and_then(|e| e.to_str()) != Some("log") {
                continue;
            }
            // A log that cannot be read (or is not text) records nothing we can judge.
            if let Ok(bytes) = std::fs::read(&path) {
                events.extend(parse(&String::from_utf8_lossy(&bytes)));
            }
        }
        found.insert(node, events);
    }
    found
}

/// The anomaly of one truncation, if it discarded records it knew committed; `None`
/// also for one that cannot be judged (see the module).
pub fn anomaly(node: &str, t: &Truncation) -> Option<Value> {
    if t.unclean_leader_election && t.leader_log_end.is_none() {
        return None;
    }
    let bound = match t.leader_log_end {
        Some(end) => t.high_watermark.min(end),
        None => t.high_watermark,
    };
    if t.to >= bound {
        return None;
    }
    let leader = match t.leader_log_end {
        Some(end) => format!(", and its leader's log end was {end}"),
        None => String::new(),
    };
    Some(json!({
        "kind": "truncated-committed",
        "node": node,
        "key": format!("{}/{}", t.topic, t.partition),
        "truncation": t,
        "explanation": format!(
            "{node} cut its log of {}/{} from {} to {} ({}), below its own high watermark {}{leader}: \
             it discarded {} record(s) it knew to be committed",
            t.topic,
            t.partition,
            t.from,
            t.to,
            t.reason,
            t.high_watermark,
            bound - t.to
        ),
    }))
}

/// Adds the `truncation` checker to `results`.
pub fn add(results: &mut Results, truncations: &BTreeMap<String, Vec<Truncation>>) {
    let mut anomalies = Vec::new();
    let mut judged = 0u64;
    let mut not_judged = 0u64;
    for (node, events) in truncations {
        for t in events {
            if t.unclean_leader_election && t.leader_log_end.is_none() {
                not_judged += 1;
                continue;
            }
            judged += 1;
            anomalies.extend(anomaly(node, t));
        }
    }
    let verdict = if anomalies.is_empty() {
        Verdict::Valid
    } else {
        Verdict::Invalid
    };
    results.add(
        "truncation",
        verdict,
        &json!({
            "truncations": judged + not_judged,
            "judged": judged,
            "not_judged": not_judged,
            "anomalies": anomalies,
        }),
    );
}

/// The terminal's lines for the `truncation` checker of `results`: one per anomaly (at
/// most five, then a count), or one saying how many truncations were judged; none when
/// the checker did not run.
pub fn summary_lines(results: &Results) -> Vec<String> {
    let Some(result) = results.checkers.get("truncation") else {
        return Vec::new();
    };
    let report = &result.report;
    let anomalies = report["anomalies"].as_array().cloned().unwrap_or_default();
    if anomalies.is_empty() {
        return vec![format!(
            "truncation: {} truncation(s) of records, none below what a replica knew committed",
            report["truncations"].as_u64().unwrap_or(0)
        )];
    }
    let mut lines = vec![format!(
        "truncation: truncated-committed: {} found",
        anomalies.len()
    )];
    for anomaly in anomalies.iter().take(5) {
        lines.push(format!(
            "  {}",
            anomaly["explanation"]
                .as_str()
                .unwrap_or("(no explanation)")
        ));
    }
    if anomalies.len() > 5 {
        lines.push(format!(
            "  ... and {} more (see results.json)",
            anomalies.len() - 5
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(from: u64, to: u64, hw: u64, leader: Option<u64>, unclean: bool) -> Truncation {
        Truncation {
            topic: "p".into(),
            partition: 0,
            reason: "epoch".into(),
            from,
            to,
            high_watermark: hw,
            leader_log_end: leader,
            unclean_leader_election: unclean,
        }
    }

    #[test]
    fn only_cuts_below_what_the_replica_knew_committed_count() {
        // An uncommitted tail, to the high watermark or above it: what truncation is for.
        assert!(anomaly("n1", &cut(20, 15, 15, None, false)).is_none());
        assert!(anomaly("n1", &cut(20, 18, 15, None, false)).is_none());
        // KAFKA-7040's shape: a stale answer cuts committed records.
        let found = anomaly("n3", &cut(15, 10, 15, None, false)).expect("an anomaly");
        assert_eq!(found["kind"], "truncated-committed");
        assert_eq!(found["key"], "p/0");
        assert!(found["explanation"]
            .as_str()
            .unwrap()
            .contains("discarded 5 record(s)"));
        // Following a shorter, uncleanly elected leader: not below its log end.
        assert!(anomaly("n1", &cut(15, 13, 15, Some(13), true)).is_none());
        // KAFKA-2143's shape: the whole log, though the leader held more.
        let found = anomaly("n1", &cut(15, 0, 15, Some(18), true)).expect("an anomaly");
        assert!(found["explanation"]
            .as_str()
            .unwrap()
            .contains("leader's log end was 18"));
        // Unclean elections on and the leader's end unknown: cannot be told apart.
        assert!(anomaly("n1", &cut(15, 10, 15, None, true)).is_none());
    }

    #[test]
    fn the_checker_counts_what_it_judged() {
        let mut results = Results::default();
        let mut events = BTreeMap::new();
        events.insert(
            "n1".to_string(),
            vec![cut(20, 15, 15, None, false), cut(15, 10, 15, None, true)],
        );
        events.insert("n2".to_string(), vec![cut(15, 10, 15, None, false)]);
        add(&mut results, &events);
        let counted = results.counted_anomalies();
        assert_eq!(counted.get("truncated-committed"), Some(&1));
        let lines = summary_lines(&results);
        assert_eq!(lines[0], "truncation: truncated-committed: 1 found");
        assert!(
            lines[1].contains("n2 cut its log of p/0 from 15 to 10"),
            "{lines:?}"
        );
        let mut clean = Results::default();
        add(&mut clean, &BTreeMap::new());
        assert!(clean.counted_anomalies().is_empty());
        assert!(summary_lines(&Results::default()).is_empty());
    }
}
