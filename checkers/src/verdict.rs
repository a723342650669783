//! The three-valued verdict every checker returns, and how verdicts compose.

use serde::{Deserialize, Serialize};
use std::fmt;

/// `valid`: no anomaly; `invalid`: anomalies found; `unknown`: the checker could not
/// decide within its bounds (time or memory), with a reason alongside.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Valid,
    Invalid,
    Unknown,
}

impl Verdict {
    /// Invalid if any is invalid, else unknown if any is unknown, else valid (also for none).
    pub fn compose(verdicts: impl IntoIterator<Item = Verdict>) -> Verdict {
        let mut result = Verdict::Valid;
        for verdict in verdicts {
            match verdict {
                Verdict::Invalid => return Verdict::Invalid,
                Verdict::Unknown => result = Verdict::Unknown,
                Verdict::Valid => {}
            }
        }
        result
    }

    /// Exit code as Jepsen: 0 valid, 1 invalid, 2 unknown.
    pub fn exit_code(self) -> i32 {
        match self {
            Verdict::Valid => 0,
            Verdict::Invalid => 1,
            Verdict::Unknown => 2,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Valid => "valid",
            Verdict::Invalid => "invalid",
            Verdict::Unknown => "unknown",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::Verdict::*;
    use super::*;

    #[test]
    fn composes_invalid_over_unknown_over_valid() {
        assert_eq!(Verdict::compose([]), Valid);
        assert_eq!(Verdict::compose([Valid, Valid]), Valid);
        assert_eq!(Verdict::compose([Valid, Unknown]), Unknown);
        assert_eq!(Verdict::compose([Unknown, Invalid, Valid]), Invalid);
        assert_eq!(Invalid.exit_code(), 1);
    }
}
