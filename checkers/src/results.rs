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
}
