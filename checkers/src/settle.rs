//! The settle checker: judges what the nemesis saw after the strikes that had the
//! cluster to themselves (a nemesis entry whose value has `settled`, written by the
//! nemesis's settle check, `nemesis::settle`). Once such a strike has undone everything
//! it did, with no other fault in place, the metadata's roles and the leaders' own views
//! must come to agree; a partition that disagreed in every poll of the check
//! (`converged: false`) is a `roles-not-converged` anomaly. Checks that could not tell
//! (`converged: null`) or were skipped are counted, not judged.

use history::{History, Op, OpType, Process};
use serde::Serialize;
use serde_json::Value;

use crate::verdict::Verdict;

/// The settle checker's report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SettleReport {
    pub verdict: Verdict,
    /// Settle checks that reached a verdict.
    pub judged: u64,
    /// Of those, the ones that found the cluster settled.
    pub converged: u64,
    /// Checks that could not tell (too few polls, disagreements that came and went).
    pub undecided: u64,
    /// Checks not made (a fault still in place, no replica views).
    pub skipped: u64,
    pub anomalies: Vec<NotConverged>,
}

/// One check that found the cluster unsettled.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NotConverged {
    pub kind: &'static str,
    /// The index of the nemesis entry that records it.
    pub ops: Vec<u64>,
    /// The strike's `f` and trigger.
    pub strike: String,
    /// Each partition that disagreed throughout, and why.
    pub diverged: Vec<Value>,
    pub explanation: String,
}

/// Judges every settle check recorded in `history`.
pub fn check_settle(history: &History) -> SettleReport {
    let mut report = SettleReport {
        verdict: Verdict::Valid,
        judged: 0,
        converged: 0,
        undecided: 0,
        skipped: 0,
        anomalies: Vec::new(),
    };
    for op in history.ops.iter().filter(|op| is_nemesis_info(op)) {
        let Some(settled) = op.value.get("settled") else {
            continue;
        };
        if settled.get("skipped").is_some() {
            report.skipped += 1;
            continue;
        }
        match settled.get("converged").and_then(Value::as_bool) {
            Some(true) => {
                report.judged += 1;
                report.converged += 1;
            }
            Some(false) => {
                report.judged += 1;
                report.anomalies.push(not_converged(op, settled));
            }
            None => report.undecided += 1,
        }
    }
    report.verdict = if report.anomalies.is_empty() {
        Verdict::Valid
    } else {
        Verdict::Invalid
    };
    report
}

fn is_nemesis_info(op: &Op) -> bool {
    op.process == Process::Nemesis && op.kind == OpType::Info
}

fn not_converged(op: &Op, settled: &Value) -> NotConverged {
    let trigger = op.value.get("trigger").and_then(Value::as_str);
    let strike = match trigger {
        Some(trigger) => format!("{} ({trigger})", op.f),
        None => op.f.clone(),
    };
    let diverged: Vec<Value> = settled
        .get("diverged")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let reasons: Vec<String> = diverged
        .iter()
        .map(|d| {
            format!(
                "{}: {}",
                d.get("key").and_then(Value::as_str).unwrap_or("?"),
                d.get("why").and_then(Value::as_str).unwrap_or("?")
            )
        })
        .collect();
    let waited_ms = settled
        .get("waited_ms")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let polls = settled.get("polls").and_then(Value::as_u64).unwrap_or(0);
    NotConverged {
        kind: "roles-not-converged",
        ops: vec![op.index],
        explanation: format!(
            "after {strike} had undone everything it did, with no other fault in place, the \
             metadata and the leaders' own views still disagreed in each of {polls} polls over \
             {:.1} s: {}",
            waited_ms as f64 / 1000.0,
            if reasons.is_empty() {
                "(no partition named)".to_string()
            } else {
                reasons.join("; ")
            }
        ),
        strike,
        diverged,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nemesis(index: u64, value: Value) -> Op {
        Op::new(index, Process::Nemesis, OpType::Info, "start-aimed", value)
    }

    fn history(ops: Vec<Op>) -> History {
        History {
            ops,
            ..History::default()
        }
    }

    #[test]
    fn a_check_that_never_converged_is_an_anomaly_and_the_others_are_counted() {
        let diverged = json!({"converged": false, "waited_ms": 15000, "polls": 40,
            "diverged": [{"key": "t/1", "why": "n2 follows n3"}]});
        let report = check_settle(&history(vec![
            nemesis(0, json!({"aim": "controller-cut"})),
            nemesis(
                1,
                json!({"trigger": "controller", "settled": {"converged": true}}),
            ),
            nemesis(2, json!({"trigger": "controller", "settled": diverged})),
            nemesis(3, json!({"settled": {"converged": null, "polls": 2}})),
            nemesis(
                4,
                json!({"settled": {"skipped": "a fault is still in place"}}),
            ),
            // A client op carrying the field is no settle check.
            Op::new(
                5,
                Process::Client(1),
                OpType::Ok,
                "send",
                json!({"settled": {"converged": false}}),
            ),
        ]));
        assert_eq!(report.verdict, Verdict::Invalid);
        assert_eq!(
            (
                report.judged,
                report.converged,
                report.undecided,
                report.skipped
            ),
            (2, 1, 1, 1)
        );
        assert_eq!(report.anomalies.len(), 1);
        let anomaly = &report.anomalies[0];
        assert_eq!(anomaly.kind, "roles-not-converged");
        assert_eq!(anomaly.ops, vec![2]);
        assert_eq!(anomaly.strike, "start-aimed (controller)");
        assert!(
            anomaly.explanation.contains("t/1: n2 follows n3")
                && anomaly.explanation.contains("40 polls over 15.0 s"),
            "{}",
            anomaly.explanation
        );
    }

    #[test]
    fn without_settle_checks_or_with_malformed_ones_it_is_valid() {
        let report = check_settle(&history(vec![
            nemesis(0, json!({"settled": "junk"})),
            nemesis(1, json!({"settled": {"converged": "no"}})),
            nemesis(2, json!(null)),
        ]));
        assert_eq!(report.verdict, Verdict::Valid);
        assert_eq!((report.judged, report.undecided), (0, 2));
    }
}
