//! Which algorithm judges a partition: the zone check where it applies (plain registers
//! whose read values are each written once), the Wing–Gong search otherwise.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The algorithm that judged a partition.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Algorithm {
    /// Wing & Gong's search with Lowe's cache: any model, exponential at worst.
    #[default]
    Wgl,
    /// Gibbons & Korach's zones: plain registers with unique values, O(n log n).
    Zones,
}

impl Algorithm {
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Wgl => "wgl",
            Algorithm::Zones => "zones",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which algorithm to use (`LinearOptions::algorithm`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AlgorithmChoice {
    /// The zones for every partition they apply to, the search for the others.
    #[default]
    Auto,
    /// The search everywhere.
    Wgl,
    /// The zones everywhere; a partition they do not apply to is an error.
    Zones,
}

impl AlgorithmChoice {
    pub const ALL: [AlgorithmChoice; 3] = [
        AlgorithmChoice::Auto,
        AlgorithmChoice::Wgl,
        AlgorithmChoice::Zones,
    ];

    pub fn name(self) -> &'static str {
        match self {
            AlgorithmChoice::Auto => "auto",
            AlgorithmChoice::Wgl => "wgl",
            AlgorithmChoice::Zones => "zones",
        }
    }
}

impl fmt::Display for AlgorithmChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An algorithm name that is none of [`AlgorithmChoice`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown algorithm {0:?}: expected auto, wgl or zones")]
pub struct UnknownAlgorithm(pub String);

impl FromStr for AlgorithmChoice {
    type Err = UnknownAlgorithm;

    fn from_str(s: &str) -> Result<AlgorithmChoice, UnknownAlgorithm> {
        AlgorithmChoice::ALL
            .into_iter()
            .find(|choice| choice.name() == s)
            .ok_or_else(|| UnknownAlgorithm(s.to_string()))
    }
}

/// One partition of a report: its key, how many ops entered the check, and what judged
/// it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionAlgorithm {
    pub key: Option<String>,
    pub operations: usize,
    pub algorithm: Algorithm,
    /// Why the zones did not apply, when the search judged a register partition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zones_not_applicable: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_errors() {
        for choice in AlgorithmChoice::ALL {
            assert_eq!(choice.name().parse::<AlgorithmChoice>(), Ok(choice));
            assert_eq!(
                serde_json::to_value(choice).unwrap(),
                serde_json::json!(choice.name())
            );
        }
        assert_eq!(
            serde_json::to_value(Algorithm::Zones).unwrap(),
            serde_json::json!("zones")
        );
        let err = "gk".parse::<AlgorithmChoice>().unwrap_err().to_string();
        assert_eq!(err, "unknown algorithm \"gk\": expected auto, wgl or zones");
    }
}
