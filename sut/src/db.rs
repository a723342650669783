//! The door to a node (Jepsen's `db`): what a node of the system needs on disk, the
//! command that runs it, where its log and data live, which ports its listeners use, and
//! the [`Api`] of the running cluster. Everything here is plain: the harness writes the
//! files, runs the command and sends the signals through its backend.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::api::Api;
use crate::ClusterSecret;

/// One node of the cluster, as the backend made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// `n1`, `n2`, ...
    pub name: String,
    /// The node's address, where its listeners bind.
    pub address: IpAddr,
    /// The node's own folder on the node: its files, data and log go inside.
    pub dir: PathBuf,
}

/// A file a node needs before it starts, relative to its folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFile {
    pub name: String,
    pub contents: String,
}

/// A node that cannot be configured as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DbError {
    /// A `KEY=VALUE` setting the system refuses.
    #[error("--broker-config {setting:?}: {reason}")]
    Setting { setting: String, reason: String },
    #[error("{0}")]
    Other(String),
}

/// How the nodes of one system are configured and run.
pub trait Db: Send + Sync {
    /// Checks `KEY=VALUE` settings (the user's `--broker-config`) without starting
    /// anything.
    fn check_settings(&self, settings: &[String]) -> Result<(), DbError>;

    /// The files node `node` (an index into `nodes`) needs before it starts, with the
    /// bug switches and settings given (`settings` in order, later ones winning) and the
    /// cluster's secret (the nodes authenticate each other with it).
    fn node_files(
        &self,
        nodes: &[NodeInfo],
        node: usize,
        bugs: &[String],
        settings: &[String],
        secret: &ClusterSecret,
    ) -> Result<Vec<NodeFile>, DbError>;

    /// The command line that runs `node` with `program`, on its files.
    fn start_command(&self, program: &Path, node: &NodeInfo) -> Vec<String>;

    /// Where the node's process writes its log (standard output and error).
    fn log_file(&self, node: &NodeInfo) -> PathBuf;

    /// The node's data folder.
    fn data_dir(&self, node: &NodeInfo) -> PathBuf;

    /// The entries of the data folder a wipe keeps (the consensus state: wiping a
    /// voter's log is no fault any real system survives); everything else is removed.
    fn wipe_keeps(&self) -> &[&'static str];

    /// The port of the listener called `listener` (the nemesis's port cuts name
    /// `metadata` and `replication`), `None` for a listener the system lacks.
    fn listener_port(&self, listener: &str) -> Option<u16>;

    /// The process's fatal error in the end of its log, if it says one.
    fn fatal_error<'a>(&self, log_tail: &'a str) -> Option<&'a str>;

    /// The API of a cluster of `nodes` (running or not: it only sends requests), proving
    /// itself with the cluster's `secret` where the nodes ask it to.
    fn api(&self, nodes: &[NodeInfo], secret: &ClusterSecret) -> Result<Arc<dyn Api>, DbError>;

    /// How many of its replicas a partition of `replication_factor` may lose with
    /// acknowledged (acks=all) writes still accepted, under `settings` (Kafka: the
    /// replication factor less `min.insync.replicas`). 0, the default, when the system
    /// cannot say: then no check relies on it.
    fn failures_tolerated(&self, settings: &[String], replication_factor: u32) -> u32 {
        let _ = (settings, replication_factor);
        0
    }

    /// Whether a node under `settings` may be elected leader while outside the in-sync
    /// set (Kafka: `unclean_leader_election`). The nemesis aims faults that only such
    /// an election completes at clusters where it may happen. `false`, the default.
    fn elects_out_of_sync(&self, settings: &[String]) -> bool {
        let _ = settings;
        false
    }

    /// Whether a follower under `settings` asks its leader where their logs diverge after
    /// a leadership change (Kafka: OffsetsForLeaderEpoch, KIP-101) rather than cutting
    /// its log to its own high watermark. The nemesis holds and delays that round trip
    /// only at clusters where it happens. `true`, the default.
    fn asks_divergence(&self, settings: &[String]) -> bool {
        let _ = settings;
        true
    }

    /// Why a node under `settings` may lose acknowledged writes by design, if it may
    /// (Kafka: unclean leader elections, pre-KIP-101 truncation to the high watermark).
    /// A run with such a node still has its history's durability anomalies reported, but
    /// they do not count against validity; what the system promises even then (the
    /// truncation oracle's rule) still does. `None`, the default: every acknowledged
    /// write is promised.
    fn durability_waiver(&self, settings: &[String]) -> Option<String> {
        let _ = settings;
        None
    }

    /// The truncations that discarded records which a node's log (its text, as
    /// collected after the run) records, oldest first; none, the default, for a system
    /// that does not record them.
    fn truncations(&self, log: &str) -> Vec<Truncation> {
        let _ = log;
        Vec::new()
    }

    /// The ISR expansions (a leader letting a follower in) which a node's log records,
    /// oldest first; none, the default, for a system that does not record them.
    fn isr_expansions(&self, log: &str) -> Vec<IsrExpansion> {
        let _ = log;
        Vec::new()
    }
}

/// A leader letting a follower into its in-sync set, as the leader recorded it: at the
/// decision, and again when the new set took effect. From then on the follower may be
/// elected cleanly, so it must hold every write acknowledged before that moment.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IsrExpansion {
    pub topic: String,
    pub partition: u32,
    /// The system's name for the follower (our broker: its broker id).
    pub follower: String,
    /// What the leader knew the follower to hold: every record below this offset.
    pub follower_log_end: u64,
    /// When, in ms since the Unix epoch by the node's wall clock.
    pub unix_ms: u64,
    /// Whether the new set had taken effect; `false`: decided, being written.
    pub written: bool,
    pub leader_epoch: u64,
    /// The leader's high watermark then.
    pub high_watermark: u64,
    /// The leader's log end when it took the epoch.
    #[serde(default)]
    pub epoch_start_offset: Option<u64>,
}

/// A replica's truncation that discarded records, as the node recorded it at that
/// moment: what an oracle outside needs to judge whether committed records went.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Truncation {
    pub topic: String,
    pub partition: u32,
    /// The system's name for why (our broker: `hw`, `epoch`, `ahead-of-leader`,
    /// `out-of-range`).
    pub reason: String,
    /// The log end before.
    pub from: u64,
    /// The log end after.
    pub to: u64,
    /// The replica's high watermark before: what it knew to be committed.
    pub high_watermark: u64,
    /// The leader's log end, when the truncation was decided on it.
    #[serde(default)]
    pub leader_log_end: Option<u64>,
    /// Whether unclean elections were allowed (a follower may then have to discard
    /// committed records to follow a shorter leader).
    #[serde(default)]
    pub unclean_leader_election: bool,
}
