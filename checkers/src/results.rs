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

    /// Waives `kinds` of `checker`'s anomalies (every kind: `None`) for `reason`: a
    /// configuration that gives up a guarantee by design (unclean elections lose
    /// acknowledged writes in Kafka too) still has them reported, marked as not counting,
    /// and the report says why (`waived`). The checker's `invalid` becomes `valid` when
    /// nothing that counts is left; `unknown` stays. Nothing happens when `checker` did
    /// not run or its report is not an object.
    pub fn waive(&mut self, checker: &str, kinds: Option<&[&str]>, reason: &str) {
        let Some(result) = self.checkers.get_mut(checker) else {
            return;
        };
        let Some(report) = result.report.as_object_mut() else {
            return;
        };
        let waived = |kind: Option<&str>| match (kinds, kind) {
            (None, _) => true,
            (Some(kinds), Some(kind)) => kinds.contains(&kind),
            (Some(_), None) => false,
        };
        if let Some(serde_json::Value::Array(anomalies)) = report.get_mut("anomalies") {
            for anomaly in anomalies.iter_mut().filter_map(|a| a.as_object_mut()) {
                let kind = anomaly.get("kind").and_then(|k| k.as_str());
                if waived(kind) {
                    anomaly.insert("counts_against_validity".into(), false.into());
                }
            }
        }
        let counts = report
            .get_mut("stats")
            .and_then(|stats| stats.get_mut("anomalies"))
            .and_then(|counts| counts.as_array_mut());
        for count in counts
            .into_iter()
            .flatten()
            .filter_map(|c| c.as_object_mut())
        {
            let kind = count.get("kind").and_then(|k| k.as_str());
            if waived(kind) {
                count.insert("counted".into(), 0.into());
            }
        }
        report.insert(
            "waived".into(),
            serde_json::json!({ "reason": reason, "kinds": kinds }),
        );
        if result.verdict == Verdict::Invalid && !result.counts_anything(kinds.is_none()) {
            result.verdict = Verdict::Valid;
        }
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

    /// [`Results::counted_anomalies`], plus `not-<checker>` (count 1) for each checker
    /// judged invalid that lists no anomaly that counts: a history the linearizability
    /// checker found no linearization for lists none, and a summary of kinds would
    /// otherwise say nothing of why the run failed.
    pub fn failure_kinds(&self) -> BTreeMap<String, u64> {
        let mut found = self.counted_anomalies();
        for (name, checker) in &self.checkers {
            let listed = checker
                .anomalies()
                .iter()
                .any(|anomaly| anomaly.counts_against_validity);
            if checker.verdict == Verdict::Invalid && !listed {
                found.entry(format!("not-{name}")).or_insert(1);
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

    /// Whether anything in the report still counts against validity. A report that
    /// lists nothing (a non-linearizable history has no anomaly list) counts unless all
    /// of it was waived (`all_waived`).
    fn counts_anything(&self, all_waived: bool) -> bool {
        let anomalies = self.anomalies();
        let counts = self.anomaly_counts();
        if anomalies.is_empty() && counts.is_empty() {
            return !all_waived;
        }
        anomalies.iter().any(|a| a.counts_against_validity)
            || counts.iter().any(|c| c.counted.unwrap_or(c.found) > 0)
    }

    /// Why some of the report's anomalies do not count, when they were waived
    /// ([`Results::waive`]).
    pub fn waived(&self) -> Option<String> {
        self.report
            .get("waived")
            .and_then(|w| w.get("reason"))
            .and_then(|r| r.as_str())
            .map(str::to_string)
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

    fn lossy_log() -> Results {
        let mut results = Results::default();
        results.add(
            "log",
            Verdict::Invalid,
            &json!({"anomalies": [
                {"kind": "lost-write", "ops": [1]},
                {"kind": "inconsistent-offsets", "ops": [2]},
            ], "stats": {"anomalies": [
                {"kind": "lost-write", "found": 140, "counted": 140},
                {"kind": "inconsistent-offsets", "found": 1, "counted": 1},
            ]}}),
        );
        results.add("truncation", Verdict::Valid, &json!({"anomalies": []}));
        results
    }

    #[test]
    fn waiving_every_kind_found_makes_the_checker_valid_and_says_why() {
        let mut results = lossy_log();
        results.waive(
            "log",
            Some(&["lost-write", "inconsistent-offsets", "stale-read"]),
            "unclean elections",
        );
        assert_eq!(results.verdict, Verdict::Valid);
        assert!(results.counted_anomalies().is_empty());
        let log = &results.checkers["log"];
        assert_eq!(log.anomalies().len(), 2, "still reported");
        assert!(log.anomaly_counts().iter().all(|c| c.counted == Some(0)));
        assert_eq!(log.report["waived"]["reason"], "unclean elections");
        assert_eq!(log.waived().as_deref(), Some("unclean elections"));
        assert_eq!(results.checkers["truncation"].waived(), None);
    }

    #[test]
    fn a_kind_left_unwaived_keeps_the_checker_invalid() {
        let mut results = lossy_log();
        results.waive("log", Some(&["lost-write"]), "unclean elections");
        assert_eq!(results.verdict, Verdict::Invalid);
        let counted = results.counted_anomalies();
        assert_eq!(counted.keys().collect::<Vec<_>>(), ["inconsistent-offsets"]);
        // Another checker's verdict is never waived by a waiver of this one.
        let mut results = lossy_log();
        results.add(
            "truncation",
            Verdict::Invalid,
            &json!({"anomalies": [{"kind": "truncated-committed"}]}),
        );
        results.waive("log", None, "unclean elections");
        assert_eq!(results.checkers["log"].verdict, Verdict::Valid);
        assert_eq!(results.verdict, Verdict::Invalid);
    }

    #[test]
    fn a_report_listing_nothing_is_valid_only_when_all_of_it_is_waived() {
        let mut results = Results::default();
        results.add(
            "linearizable",
            Verdict::Invalid,
            &json!({"final_paths": []}),
        );
        results.waive("linearizable", Some(&["lost-write"]), "r");
        assert_eq!(results.verdict, Verdict::Invalid);
        results.waive("linearizable", None, "r");
        assert_eq!(results.verdict, Verdict::Valid);
        let mut unknown = Results::default();
        unknown.add("linearizable", Verdict::Unknown, &json!({}));
        unknown.waive("linearizable", None, "r");
        unknown.waive("absent", None, "r");
        assert_eq!(unknown.verdict, Verdict::Unknown);
    }

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

    #[test]
    fn a_failing_checker_without_listed_anomalies_names_itself_among_the_kinds() {
        let mut results = Results::default();
        results.add("linearizable", Verdict::Invalid, &json!({"op_count": 10}));
        results.add(
            "log",
            Verdict::Invalid,
            &json!({"anomalies": [{"kind": "lost-write"}]}),
        );
        results.add("register", Verdict::Valid, &json!({}));
        let kinds = results.failure_kinds();
        assert_eq!(
            kinds.keys().collect::<Vec<_>>(),
            ["lost-write", "not-linearizable"]
        );
        assert!(!results.counted_anomalies().contains_key("not-linearizable"));
        // Waived as a whole, it is no longer invalid and names nothing.
        results.waive("linearizable", None, "lossy");
        assert!(!results.failure_kinds().contains_key("not-linearizable"));
    }
}
