//! A replica's configuration: plain data, read by the core and never changed by it.

use std::fmt;

/// A broker's id; also the id of the replica it hosts.
pub type BrokerId = u32;

/// How a replica that becomes a follower finds the point where its log may diverge
/// from the new leader's (kafka-replication.md §2, "Truncation on becoming follower").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TruncationMode {
    /// Pre-KIP-101: truncate to the local high watermark at once, then fetch from there.
    /// Known to lose committed data after fast failovers; kept to reproduce KAFKA-2143.
    Hw,
    /// KIP-101/279/320: ask the leader for the end offset of our latest epoch
    /// (OffsetsForLeaderEpoch) and truncate to where the logs agree.
    #[default]
    Epoch,
}

/// The historical bugs this core can restore. Each flag, when set, replaces exactly one
/// fixed rule by the buggy rule of kafka-replication.md §2's switch table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct BugSwitches {
    /// ISR expansion needs only `follower LEO >= leader HW`, not also
    /// `fetch offset >= leader epoch start offset`.
    pub kafka_7128: bool,
    /// No current leader epoch in Fetch and OffsetsForLeaderEpoch requests (the leader
    /// cannot fence), and an OffsetsForLeaderEpoch response is applied whenever the
    /// partition is still truncating, even if its epoch changed while it was in flight.
    pub kafka_7040: bool,
    /// acks=all is answered right after the local append when the replication factor
    /// cached at creation is 1; LeaderAndIsr never updates that cache.
    pub kafka_1561: bool,
    /// On OffsetOutOfRange with `leader LEO >= follower LEO`, the follower deletes its whole
    /// log and restarts at the leader's log start offset.
    pub kafka_2143: bool,
    /// Read by the controller, not by the replica core: on session expiry the session
    /// client silently opens a new session and the controller's queued work runs on it,
    /// and controller writes are checked only against the partition state's own version
    /// plus a read-check of its `controller_epoch` field.
    pub kafka_3083: bool,
}

/// A bug name that is not one of the switches this core knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown bug switch {0:?} (known: KAFKA-7128, KAFKA-7040, KAFKA-1561, KAFKA-3083, KAFKA-2143)"
)]
pub struct UnknownBug(pub String);

impl BugSwitches {
    /// Every switch on: the oldest behaviour this core can show.
    pub const ALL: BugSwitches = BugSwitches {
        kafka_7128: true,
        kafka_7040: true,
        kafka_1561: true,
        kafka_2143: true,
        kafka_3083: true,
    };

    /// Parses names such as `"KAFKA-7128"` (case-insensitive), as a config's `bugs = [...]`
    /// list or `--bug` flags give them.
    pub fn from_names(names: &[&str]) -> Result<BugSwitches, UnknownBug> {
        let mut switches = BugSwitches::default();
        for name in names {
            match name.trim().to_ascii_uppercase().as_str() {
                "KAFKA-7128" => switches.kafka_7128 = true,
                "KAFKA-7040" => switches.kafka_7040 = true,
                "KAFKA-1561" => switches.kafka_1561 = true,
                "KAFKA-2143" => switches.kafka_2143 = true,
                "KAFKA-3083" => switches.kafka_3083 = true,
                _ => return Err(UnknownBug((*name).to_owned())),
            }
        }
        Ok(switches)
    }

    /// The JIRA names of the switches that are on, in a fixed order.
    pub fn names(&self) -> Vec<&'static str> {
        [
            (self.kafka_7128, "KAFKA-7128"),
            (self.kafka_7040, "KAFKA-7040"),
            (self.kafka_1561, "KAFKA-1561"),
            (self.kafka_3083, "KAFKA-3083"),
            (self.kafka_2143, "KAFKA-2143"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect()
    }
}

impl fmt::Display for BugSwitches {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = self.names();
        if names.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&names.join(","))
        }
    }
}

/// Everything a replica needs to know that does not come from the controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaConfig {
    /// This replica's broker.
    pub broker_id: BrokerId,
    /// The assignment this replica was created with. The current assignment comes with
    /// every LeaderAndIsr; this one only feeds the replication factor KAFKA-1561 caches.
    pub replicas: Vec<BrokerId>,
    /// A follower that has not caught up to the leader's LEO for this long leaves the ISR.
    pub replica_lag_time_max_ms: u64,
    /// acks=all needs at least this many ISR members, before and after the append.
    pub min_insync_replicas: usize,
    pub truncation_mode: TruncationMode,
    /// May a follower truncate below its own LEO when the leader is shorter (the trace of
    /// an unclean election)? When not, such a follower halts instead, as Kafka does.
    pub unclean_leader_election: bool,
    pub bugs: BugSwitches,
    /// A follower re-sends a request that got no usable answer after this long.
    pub request_timeout_ms: u64,
    /// A follower waits this long before retrying a request that was answered with an error.
    pub retry_backoff_ms: u64,
    /// How often `tick` writes the high-watermark checkpoint.
    pub high_watermark_checkpoint_interval_ms: u64,
    /// At most this many records per follower fetch.
    pub fetch_max_records: usize,
}

impl ReplicaConfig {
    /// The defaults of the fixed broker: every fix on, epoch truncation, no unclean
    /// election, Kafka's default timings.
    pub fn new(broker_id: BrokerId, replicas: Vec<BrokerId>) -> ReplicaConfig {
        ReplicaConfig {
            broker_id,
            replicas,
            replica_lag_time_max_ms: 10_000,
            min_insync_replicas: 1,
            truncation_mode: TruncationMode::Epoch,
            unclean_leader_election: false,
            bugs: BugSwitches::default(),
            request_timeout_ms: 30_000,
            retry_backoff_ms: 1_000,
            high_watermark_checkpoint_interval_ms: 5_000,
            fetch_max_records: 500,
        }
    }

    /// The replication factor as the replica learnt it at creation; only KAFKA-1561's
    /// buggy ack path reads it, which is the bug.
    pub fn creation_replication_factor(&self) -> usize {
        self.replicas.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bug_names_parse_and_print() {
        let bugs = BugSwitches::from_names(&["KAFKA-7128", "kafka-2143"]).unwrap();
        assert!(bugs.kafka_7128 && bugs.kafka_2143 && !bugs.kafka_7040 && !bugs.kafka_1561);
        assert_eq!(bugs.to_string(), "KAFKA-7128,KAFKA-2143");
        assert_eq!(BugSwitches::default().to_string(), "none");
        assert_eq!(
            BugSwitches::from_names(&["KAFKA-9999"]),
            Err(UnknownBug("KAFKA-9999".into()))
        );
        assert_eq!(
            BugSwitches::from_names(&[
                "KAFKA-7128",
                "KAFKA-7040",
                "KAFKA-1561",
                "KAFKA-3083",
                "KAFKA-2143"
            ]),
            Ok(BugSwitches::ALL)
        );
    }
}
