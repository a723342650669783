//! When appended records are fsynced.
//!
//! Every append reaches the OS (write(2)) before it returns whatever the policy, so a
//! killed process loses nothing it acknowledged; the policy only decides what a machine
//! crash or power loss may take with it.

use serde::{Deserialize, Serialize};

/// When a [`super::SegmentLog`] fsyncs its active segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlushPolicy {
    /// After every append.
    EveryAppend,
    /// Once this many records are unflushed (0 behaves as `EveryAppend`).
    EveryRecords(u64),
    /// Only on `flush()`, segment roll and close: Kafka's default, which leaves
    /// durability across machine crashes to replication.
    OsOnly,
}

impl FlushPolicy {
    /// Whether `unflushed` records call for an fsync after an append.
    pub(crate) fn due(self, unflushed: u64) -> bool {
        match self {
            FlushPolicy::EveryAppend => unflushed > 0,
            FlushPolicy::EveryRecords(limit) => unflushed > 0 && unflushed >= limit,
            FlushPolicy::OsOnly => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::FlushPolicy;

    #[test]
    fn each_policy_fsyncs_when_it_says() {
        assert!(FlushPolicy::EveryAppend.due(1));
        assert!(!FlushPolicy::EveryAppend.due(0));
        assert!(!FlushPolicy::EveryRecords(3).due(2));
        assert!(FlushPolicy::EveryRecords(3).due(3));
        assert!(FlushPolicy::EveryRecords(3).due(4));
        assert!(FlushPolicy::EveryRecords(0).due(1));
        assert!(!FlushPolicy::OsOnly.due(u64::MAX));
    }

    #[test]
    fn serializes_in_config_form() {
        let text = serde_json::to_string(&FlushPolicy::EveryRecords(5)).unwrap();
        assert_eq!(text, r#"{"every_records":5}"#);
        let back: FlushPolicy = serde_json::from_str(r#""os_only""#).unwrap();
        assert_eq!(back, FlushPolicy::OsOnly);
    }
}
