//! The composed result of all checkers of one run: what `results.json` holds.

use crate::verdict::Verdict;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One checker's verdict and its full report (the checker's own serialized type).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckerResult {
    pub verdict: Verdict,
    pub report: serde_json::Value,
}

/// All checkers' results and the composed verdict: invalid if any checker is invalid,
/// else unknown if any is unknown, else valid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Results {
    pub verdict: Verdict,
    #[serde(default)]
    pub checkers: BTreeMap<String, CheckerResult>,
}

impl Default for Results {
    fn default() -> Self {
        Results {
            verdict: Verdict::Valid,
            checkers: BTreeMap::new(),
        }
    }
}

impl Results {
    /// Adds (or replaces) one checker's result and recomposes the verdict.
    pub fn add(&mut self, name: &str, verdict: Verdict, report: &impl Serialize) {
        // Reports are plain data (strings, numbers, vectors); serializing cannot fail,
        // but should it, the result still records the verdict and says why details are missing.
        let report = serde_json::to_value(report).unwrap_or_else(
            |e| serde_json::json!({ "error": format!("report not serializable: {e}") }),
        );
        self.checkers
            .insert(name.to_string(), CheckerResult { verdict, report });
        self.verdict = Verdict::compose(self.checkers.values().map(|c| c.verdict));
    }

    /// Every anomaly kind that counts against validity in any checker's report, with the
    /// number of instances listed (an anomaly without `counts_against_validity`, like
    /// availability's, counts).
    pub fn counted_anomalies(&self) -> BTreeMap<String, u64> {
        let mut found = BTreeMap::new();
        for checker in self.checkers.values() {
            for anomaly in checker.anomalies() {
                if anomaly.counts_against_validity {
                    *found.entry(anomaly.kind).or_insert(0) += 1;
                }
            }
        }
        found
    }
}

/// One anomaly as every checker lists it in its report's `anomalies`: the fields the
/// pages and the summaries read; a checker's own fields stay in [`Anomaly::rest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Anomaly {
    #[serde(default = "unnamed_kind")]
    pub kind: String,
    #[serde(default = "counts_by_default")]
    pub counts_against_validity: bool,
    #[serde(default)]
    pub explanation: Option<String>,
    /// The key it is about.
    #[serde(default)]
    pub key: Option<serde_json::Value>,
    /// The partition it is about (the availability checker names partitions).
    #[serde(default)]
    pub partition: Option<serde_json::Value>,
    /// Indexes of the ops that show it.
    #[serde(default)]
    pub ops: Vec<serde_json::Value>,
    #[serde(flatten)]
    pub rest: serde_json::Map<String, serde_json::Value>,
}

fn unnamed_kind() -> String {
    "anomaly".to_string()
}

fn counts_by_default() -> bool {
    true
}

/// A found/counted pair of the log checker's `stats.anomalies`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnomalyCount {
    pub kind: String,
    pub found: u64,
    /// How many count against validity (all of them when absent).
    #[serde(default)]
    pub counted: Option<u64>,
}

/// The parts of a checker report that every reader shares.
#[derive(Debug, Default, Deserialize)]
struct ReportView {
    #[serde(default)]
    anomalies: Vec<serde_json::Value>,
    #[serde(default)]
    reason: Option<serde_json::Value>,
    #[serde(default)]
    error: Option<serde_json::Value>,
    #[serde(default)]
    stats: StatsView,
}

#[derive(Debug, Default, Deserialize)]
struct StatsView {
    #[serde(default)]
    anomalies: Vec<AnomalyCount>,
}

impl CheckerResult {
    fn view(&self) -> ReportView {
        // A report that is not an object (or lists anomalies of another shape) has none
        // of these parts.
        ReportView::deserialize(&self.report).unwrap_or_default()
    }

    /// The anomalies the report lists, in its order (an entry that is not an anomaly
    /// object is left out).
    pub fn anomalies(&self) -> Vec<Anomaly> {
        self.view()
            .anomalies
            .iter()
            .filter_map(|entry| Anomaly::deserialize(entry).ok())
            .collect()
    }

    /// The report as the linearizability checker writes it, if it is one.
    pub fn linear_report(&self) -> Option<crate::linear::LinearReport> {
        crate::linear::LinearReport::deserialize(&self.report).ok()
    }

    /// Why the checker could not decide, if its report says (`reason`, else `error`).
    pub fn reason(&self) -> Option<String> {
        let view = self.view();
        [view.reason, view.error]
            .into_iter()
            .flatten()
            .find_map(|value| value.as_str().map(str::to_string))
    }

    /// The report's found/counted figures per kind (the log checker lists at most a
    /// sample of each kind, and counts them all here).
    pub fn anomaly_counts(&self) -> Vec<AnomalyCount> {
        self.view().stats.anomalies
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn composes_and_round_trips() {
        let mut results = Results::default();
        results.add("log", Verdict::Valid, &json!({"anomalies": []}));
        assert_eq!(results.verdict, Verdict::Valid);
        results.add(
            "linearizable",
            Verdict::Unknown,
            &json!({"reason": "time limit"}),
        );
        assert_eq!(results.verdict, Verdict::Unknown);
        results.add("availability", Verdict::Invalid, &json!({}));
        assert_eq!(results.verdict, Verdict::Invalid);
        let text = serde_json::to_string(&results).unwrap();
        let back: Results = serde_json::from_str(&text).unwrap();
        assert_eq!(back, results);
        assert!(text.starts_with("{\"verdict\":\"invalid\""));
    }

    #[test]
    fn counted_anomalies_skip_those_that_do_not_count() {
        let mut results = Results::default();
        results.add(
            "log",
            Verdict::Invalid,
            &json!({"anomalies": [
                {"kind": "lost-write", "ops": [1, 2]},
                {"kind": "lost-write", "counts_against_validity": true},
                {"kind": "unseen", "counts_against_validity": false},
            ], "stats": {"anomalies": [{"kind": "lost-write", "found": 7, "counted": 7}]}}),
        );
        results.add(
            "availability",
            Verdict::Invalid,
            &json!({"anomalies": [{"kind": "unavailable-after-heal", "partition": 3}]}),
        );
        results.add("odd", Verdict::Valid, &json!("not an object"));
        let counted = results.counted_anomalies();
        assert_eq!(counted.get("lost-write"), Some(&2));
        assert_eq!(counted.get("unavailable-after-heal"), Some(&1));
        assert_eq!(counted.get("unseen"), None);
        let availability = results.checkers["availability"].anomalies();
        assert_eq!(availability[0].partition, Some(json!(3)));
        let counts = results.checkers["log"].anomaly_counts();
        assert_eq!(counts[0].found, 7);
    }
}
