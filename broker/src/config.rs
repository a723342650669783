//! A broker's node configuration (`broker --config node.toml`): parsed strictly, then
//! validated, so that a malformed or inconsistent file is refused at start with the file,
//! the key and the reason, never half-applied.
//!
//! ```toml
//! broker_id = 1
//! data_dir = "/var/lib/broker"
//! bugs = ["KAFKA-7128"]            # historical behaviours to restore; default none
//! truncation_mode = "epoch"        # or "hw" (before KIP-101)
//! unclean_leader_election = false
//! min_insync_replicas = 2
//! replica_lag_time_max_ms = 10000
//! replica_fetch_wait_max_ms = 500
//! replica_fetch_max_records = 500  # at most this many records per follower fetch (1..=10000)
//! max_value_bytes = 1048576
//! enable_failpoints = false        # serve PUT/DELETE /v1/debug/failpoints (a failpoints build only)
//! cluster_secret = "5f1c…"         # hex, 16+ bytes: peers sign every request with it; default none
//! cluster_id = "a1b2c3"            # refuse a data_dir of another cluster (data_dir/cluster-id); default none
//!
//! [listeners]                      # this broker's three ports, one per kind of traffic
//! client = "10.77.0.1:9092"
//! replication = "10.77.0.1:9093"
//! metadata = "10.77.0.1:9094"
//!
//! [[brokers]]                      # every broker of the cluster, this one included
//! id = 1
//! replication = "10.77.0.1:9093"
//! metadata = "10.77.0.1:9094"
//!
//! [storage]
//! segment_bytes = 1048576
//! flush_policy = "os_only"         # or "every_append", or { every_records = 100 }
//!
//! [metadata]                       # the metadata quorum (Raft) and sessions
//! voters = [1, 2, 3]               # default: the first three brokers by id
//! session_timeout_ms = 6000        # a broker's session expires this long after its last heartbeat
//! raft_heartbeat_ms = 100
//! election_timeout_min_ms = 800
//! election_timeout_max_ms = 1600
//! snapshot_every = 1000            # log entries between snapshots
//!
//! [controller]
//! auto_leader_rebalance = false    # move leadership back to preferred replicas periodically
//! leader_imbalance_check_interval_ms = 300000
//! eligible = true                  # may this broker become controller
//! ```

use crate::replica::{BrokerId, BugSwitches, TruncationMode};
use crate::storage::{FlushPolicy, StorageConfig};
use peer_auth::ClusterSecret;
use serde::Deserialize;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Why a configuration was refused: the file, the key (when one is to blame), the reason.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {}{reason}", key.as_ref().map(|k| format!("key `{k}`: ")).unwrap_or_default())]
pub struct ConfigError {
    pub file: String,
    pub key: Option<String>,
    pub reason: String,
}

/// The three listeners of one broker, each on its own port so that the nemesis can cut
/// one kind of traffic.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Listeners {
    pub client: SocketAddr,
    pub replication: SocketAddr,
    pub metadata: SocketAddr,
}

/// Another broker (or this one) as its peers reach it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Peer {
    pub id: BrokerId,
    pub replication: SocketAddr,
    pub metadata: SocketAddr,
}

/// The file as written; see [`NodeConfig`] for the validated form.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    broker_id: BrokerId,
    data_dir: PathBuf,
    listeners: Listeners,
    brokers: Vec<Peer>,
    #[serde(default)]
    bugs: Vec<String>,
    #[serde(default = "default_truncation_mode")]
    truncation_mode: String,
    #[serde(default)]
    unclean_leader_election: bool,
    #[serde(default = "default_min_insync_replicas")]
    min_insync_replicas: usize,
    #[serde(default = "default_replica_lag_time_max_ms")]
    replica_lag_time_max_ms: u64,
    #[serde(default = "default_replica_fetch_wait_max_ms")]
    replica_fetch_wait_max_ms: u64,
    #[serde(default = "default_replica_fetch_max_records")]
    replica_fetch_max_records: usize,
    #[serde(default = "default_max_value_bytes")]
    max_value_bytes: usize,
    #[serde(default)]
    enable_failpoints: bool,
    #[serde(default)]
    cluster_secret: Option<String>,
    #[serde(default)]
    cluster_id: Option<String>,
    #[serde(default)]
    storage: StorageConfig,
    #[serde(default)]
    metadata: RawMetadataConfig,
    #[serde(default)]
    controller: ControllerConfig,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMetadataConfig {
    voters: Option<Vec<BrokerId>>,
    #[serde(default = "default_session_timeout_ms")]
    session_timeout_ms: u64,
    #[serde(default = "default_raft_heartbeat_ms")]
    raft_heartbeat_ms: u64,
    #[serde(default = "default_election_timeout_min_ms")]
    election_timeout_min_ms: u64,
    #[serde(default = "default_election_timeout_max_ms")]
    election_timeout_max_ms: u64,
    #[serde(default = "default_snapshot_every")]
    snapshot_every: u64,
}

impl Default for RawMetadataConfig {
    fn default() -> Self {
        RawMetadataConfig {
            voters: None,
            session_timeout_ms: default_session_timeout_ms(),
            raft_heartbeat_ms: default_raft_heartbeat_ms(),
            election_timeout_min_ms: default_election_timeout_min_ms(),
            election_timeout_max_ms: default_election_timeout_max_ms(),
            snapshot_every: default_snapshot_every(),
        }
    }
}

fn default_session_timeout_ms() -> u64 {
    6_000
}
fn default_raft_heartbeat_ms() -> u64 {
    100
}
fn default_election_timeout_min_ms() -> u64 {
    800
}
fn default_election_timeout_max_ms() -> u64 {
    1_600
}
fn default_snapshot_every() -> u64 {
    1_000
}

/// The metadata quorum's settings, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataConfig {
    /// The Raft voters, sorted; every other broker is a learner (it replicates the
    /// metadata log and serves local reads, but does not vote).
    pub voters: Vec<BrokerId>,
    pub session_timeout_ms: u64,
    pub raft_heartbeat_ms: u64,
    pub election_timeout_min_ms: u64,
    pub election_timeout_max_ms: u64,
    pub snapshot_every: u64,
}

/// The controller's settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControllerConfig {
    /// Kafka's `auto.leader.rebalance.enable`; off by default here (on in Kafka).
    #[serde(default)]
    pub auto_leader_rebalance: bool,
    #[serde(default = "default_leader_imbalance_check_interval_ms")]
    pub leader_imbalance_check_interval_ms: u64,
    /// Whether this broker may become controller (default true). A scenario that needs
    /// a given controller, or a node that only hosts the metadata quorum (as ZooKeeper
    /// had its own nodes), turns it off on the others.
    #[serde(default = "default_true")]
    pub eligible: bool,
}

fn default_true() -> bool {
    true
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            auto_leader_rebalance: false,
            leader_imbalance_check_interval_ms: default_leader_imbalance_check_interval_ms(),
            eligible: true,
        }
    }
}

fn default_leader_imbalance_check_interval_ms() -> u64 {
    300_000
}

fn default_truncation_mode() -> String {
    "epoch".into()
}
fn default_min_insync_replicas() -> usize {
    1
}
fn default_replica_lag_time_max_ms() -> u64 {
    10_000
}
fn default_replica_fetch_wait_max_ms() -> u64 {
    500
}
fn default_replica_fetch_max_records() -> usize {
    500
}
/// The most records a leader returns to one fetch, whatever a follower asks for.
pub const MAX_FETCH_RECORDS: usize = 10_000;
fn default_max_value_bytes() -> usize {
    1 << 20
}

/// A validated node configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeConfig {
    pub broker_id: BrokerId,
    pub data_dir: PathBuf,
    pub listeners: Listeners,
    /// Every broker of the cluster, sorted by id; this broker is among them.
    pub brokers: Vec<Peer>,
    pub bugs: BugSwitches,
    pub truncation_mode: TruncationMode,
    pub unclean_leader_election: bool,
    pub min_insync_replicas: usize,
    pub replica_lag_time_max_ms: u64,
    pub replica_fetch_wait_max_ms: u64,
    /// At most this many records per follower fetch (Kafka bounds a fetch by bytes,
    /// `replica.fetch.max.bytes`; records are this broker's unit). Small values make a
    /// follower catch up in many rounds, each with its own high watermark.
    pub replica_fetch_max_records: usize,
    pub max_value_bytes: usize,
    /// Whether the failpoint endpoints may arm and disarm anything (they exist only in a
    /// build with the `failpoints` feature): a test harness turns them on, a deployment
    /// leaves them off.
    pub enable_failpoints: bool,
    /// The secret every request to the peer listeners (and every failpoint request) is
    /// signed with ([`peer_auth`]); without one, those listeners answer anyone, as a Kafka
    /// `PLAINTEXT` listener does, and the broker says so when it starts.
    pub cluster_secret: Option<ClusterSecret>,
    /// The cluster this node's data belongs to: a data folder marked with another id is
    /// refused at start (Kafka's `meta.properties`); without one nothing is checked.
    pub cluster_id: Option<String>,
    pub storage: StorageConfig,
    pub metadata: MetadataConfig,
    pub controller: ControllerConfig,
}

impl NodeConfig {
    /// Reads and validates `path`.
    pub fn load(path: &Path) -> Result<NodeConfig, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: file.clone(),
            key: None,
            reason: format!("cannot read: {e}"),
        })?;
        NodeConfig::parse(&file, &text)
    }

    /// Parses and validates `text`; `file` names it in errors.
    pub fn parse(file: &str, text: &str) -> Result<NodeConfig, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError {
            file: file.to_string(),
            key: None,
            reason: match e.span() {
                Some(span) => format!("{}: {}", line_and_column(text, span.start), e.message()),
                None => e.message().to_string(),
            },
        })?;
        validate(file, raw)
    }

    /// This broker's entry in `brokers`.
    pub fn this_broker(&self) -> Option<&Peer> {
        self.brokers.iter().find(|p| p.id == self.broker_id)
    }
}

/// `line L, column C` (1-based) of a byte position in `text`, with that line quoted: it
/// names the key and shows the value where a value is wrong.
fn line_and_column(text: &str, position: usize) -> String {
    let before = text.get(..position).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    let quoted = text.lines().nth(line - 1).unwrap_or_default().trim();
    format!("line {line}, column {column} (`{quoted}`)")
}

fn validate(file: &str, raw: RawConfig) -> Result<NodeConfig, ConfigError> {
    let refuse = |key: &str, reason: String| ConfigError {
        file: file.to_string(),
        key: Some(key.to_string()),
        reason,
    };
    let names: Vec<&str> = raw.bugs.iter().map(String::as_str).collect();
    let bugs = BugSwitches::from_names(&names).map_err(|e| refuse("bugs", e.to_string()))?;
    let truncation_mode = match raw.truncation_mode.as_str() {
        "epoch" => TruncationMode::Epoch,
        "hw" => TruncationMode::Hw,
        other => {
            return Err(refuse(
                "truncation_mode",
                format!("{other:?} is not one of \"epoch\", \"hw\""),
            ))
        }
    };
    if raw.min_insync_replicas == 0 {
        return Err(refuse("min_insync_replicas", "must be at least 1".into()));
    }
    if raw.replica_lag_time_max_ms == 0 {
        return Err(refuse("replica_lag_time_max_ms", "must be positive".into()));
    }
    // As Kafka insists: a follower's long poll must end well before the leader would
    // call it out of sync, or an idle partition shrinks its ISR.
    if raw.replica_fetch_wait_max_ms >= raw.replica_lag_time_max_ms {
        return Err(refuse(
            "replica_fetch_wait_max_ms",
            format!(
                "{} must be less than replica_lag_time_max_ms ({})",
                raw.replica_fetch_wait_max_ms, raw.replica_lag_time_max_ms
            ),
        ));
    }
    if !(1..=MAX_FETCH_RECORDS).contains(&raw.replica_fetch_max_records) {
        return Err(refuse(
            "replica_fetch_max_records",
            format!(
                "{} is not between 1 and {MAX_FETCH_RECORDS} (a leader's most records per fetch)",
                raw.replica_fetch_max_records
            ),
        ));
    }
    if raw.max_value_bytes == 0 {
        return Err(refuse("max_value_bytes", "must be positive".into()));
    }
    if raw.storage.segment_bytes == 0 {
        return Err(refuse("storage.segment_bytes", "must be positive".into()));
    }
    if let FlushPolicy::EveryRecords(0) = raw.storage.flush_policy {
        return Err(refuse(
            "storage.flush_policy",
            "every_records must be at least 1".into(),
        ));
    }
    let ports = [
        raw.listeners.client,
        raw.listeners.replication,
        raw.listeners.metadata,
    ];
    if ports.iter().collect::<HashSet<_>>().len() != ports.len() {
        return Err(refuse(
            "listeners",
            "client, replication and metadata need three different addresses".into(),
        ));
    }
    if raw.brokers.is_empty() {
        return Err(refuse("brokers", "lists no broker".into()));
    }
    let mut ids = HashSet::new();
    for peer in &raw.brokers {
        if !ids.insert(peer.id) {
            return Err(refuse(
                "brokers",
                format!("broker id {} appears twice", peer.id),
            ));
        }
    }
    let mut brokers = raw.brokers;
    brokers.sort_by_key(|p| p.id);
    let Some(me) = brokers.iter().find(|p| p.id == raw.broker_id) else {
        return Err(refuse(
            "broker_id",
            format!("{} is not among the [[brokers]] entries", raw.broker_id),
        ));
    };
    if me.replication != raw.listeners.replication || me.metadata != raw.listeners.metadata {
        return Err(refuse(
            "brokers",
            format!(
                "the entry for this broker ({}) disagrees with [listeners]",
                raw.broker_id
            ),
        ));
    }
    if raw.min_insync_replicas > brokers.len() {
        return Err(refuse(
            "min_insync_replicas",
            format!(
                "{} is more than the {} brokers of the cluster",
                raw.min_insync_replicas,
                brokers.len()
            ),
        ));
    }
    let metadata = validate_metadata(&refuse, raw.metadata, &brokers)?;
    if raw.controller.leader_imbalance_check_interval_ms == 0 {
        return Err(refuse(
            "controller.leader_imbalance_check_interval_ms",
            "must be positive".into(),
        ));
    }
    let cluster_secret = raw
        .cluster_secret
        .as_deref()
        .map(ClusterSecret::from_hex)
        .transpose()
        .map_err(|e| refuse("cluster_secret", e.to_string()))?;
    if let Some(id) = &raw.cluster_id {
        let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_');
        if id.is_empty() || id.len() > 64 || !id.chars().all(legal) {
            return Err(refuse(
                "cluster_id",
                format!("{id:?} must be 1 to 64 ASCII letters, digits, '-' or '_'"),
            ));
        }
    }
    Ok(NodeConfig {
        broker_id: raw.broker_id,
        data_dir: raw.data_dir,
        listeners: raw.listeners,
        brokers,
        bugs,
        truncation_mode,
        unclean_leader_election: raw.unclean_leader_election,
        min_insync_replicas: raw.min_insync_replicas,
        replica_lag_time_max_ms: raw.replica_lag_time_max_ms,
        replica_fetch_wait_max_ms: raw.replica_fetch_wait_max_ms,
        replica_fetch_max_records: raw.replica_fetch_max_records,
        max_value_bytes: raw.max_value_bytes,
        enable_failpoints: raw.enable_failpoints,
        cluster_secret,
        cluster_id: raw.cluster_id,
        storage: raw.storage,
        metadata,
        controller: raw.controller,
    })
}

fn validate_metadata(
    refuse: &impl Fn(&str, String) -> ConfigError,
    raw: RawMetadataConfig,
    brokers: &[Peer],
) -> Result<MetadataConfig, ConfigError> {
    let voters = match raw.voters {
        None => brokers.iter().take(3).map(|p| p.id).collect::<Vec<_>>(),
        Some(mut voters) => {
            voters.sort_unstable();
            if voters.is_empty() {
                return Err(refuse("metadata.voters", "lists no voter".into()));
            }
            if voters.windows(2).any(|w| w[0] == w[1]) {
                return Err(refuse("metadata.voters", "lists a broker twice".into()));
            }
            if let Some(unknown) = voters.iter().find(|v| !brokers.iter().any(|p| p.id == **v)) {
                return Err(refuse(
                    "metadata.voters",
                    format!("{unknown} is not among the [[brokers]] entries"),
                ));
            }
            voters
        }
    };
    for (key, value) in [
        ("metadata.session_timeout_ms", raw.session_timeout_ms),
        ("metadata.raft_heartbeat_ms", raw.raft_heartbeat_ms),
        ("metadata.snapshot_every", raw.snapshot_every),
    ] {
        if value == 0 {
            return Err(refuse(key, "must be positive".into()));
        }
    }
    if raw.election_timeout_min_ms <= raw.raft_heartbeat_ms
        || raw.election_timeout_max_ms <= raw.election_timeout_min_ms
    {
        return Err(refuse(
            "metadata.election_timeout_min_ms",
            format!(
                "need raft_heartbeat_ms ({}) < election_timeout_min_ms ({}) < election_timeout_max_ms ({})",
                raw.raft_heartbeat_ms, raw.election_timeout_min_ms, raw.election_timeout_max_ms
            ),
        ));
    }
    Ok(MetadataConfig {
        voters,
        session_timeout_ms: raw.session_timeout_ms,
        raft_heartbeat_ms: raw.raft_heartbeat_ms,
        election_timeout_min_ms: raw.election_timeout_min_ms,
        election_timeout_max_ms: raw.election_timeout_max_ms,
        snapshot_every: raw.snapshot_every,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
broker_id = 2
data_dir = "/tmp/b2"
bugs = ["KAFKA-7128", "kafka-2143"]
truncation_mode = "hw"
min_insync_replicas = 2

[listeners]
client = "127.0.0.1:9192"
replication = "127.0.0.1:9193"
metadata = "127.0.0.1:9194"

[[brokers]]
id = 1
replication = "127.0.0.1:9093"
metadata = "127.0.0.1:9094"

[[brokers]]
id = 2
replication = "127.0.0.1:9193"
metadata = "127.0.0.1:9194"

[storage]
flush_policy = { every_records = 100 }
"#;

    fn refused(text: &str) -> String {
        NodeConfig::parse("node.toml", text)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn parses_a_good_file_with_defaults() {
        let config = NodeConfig::parse("node.toml", GOOD).unwrap();
        assert_eq!(config.broker_id, 2);
        assert!(config.bugs.kafka_7128 && config.bugs.kafka_2143 && !config.bugs.kafka_7040);
        assert_eq!(config.truncation_mode, TruncationMode::Hw);
        assert_eq!(config.replica_lag_time_max_ms, 10_000);
        assert_eq!(config.replica_fetch_max_records, 500);
        let small = GOOD.replace(
            "min_insync_replicas = 2",
            "min_insync_replicas = 2\nreplica_fetch_max_records = 1",
        );
        assert_eq!(
            NodeConfig::parse("node.toml", &small)
                .unwrap()
                .replica_fetch_max_records,
            1
        );
        assert_eq!(config.storage.flush_policy, FlushPolicy::EveryRecords(100));
        assert_eq!(config.this_broker().map(|p| p.id), Some(2));
        assert_eq!(config.metadata.voters, vec![1, 2], "first three brokers");
        assert_eq!(config.metadata.session_timeout_ms, 6_000);
        assert!(!config.controller.auto_leader_rebalance);
        assert_eq!(config.cluster_secret, None);
    }

    #[test]
    fn a_cluster_secret_is_hex_of_sixteen_bytes_or_more() {
        let with = |secret: &str| {
            GOOD.replace(
                "min_insync_replicas = 2",
                &format!("min_insync_replicas = 2\ncluster_secret = \"{secret}\""),
            )
        };
        let hex = "00112233445566778899aabbccddeeff";
        let config = NodeConfig::parse("node.toml", &with(hex)).unwrap();
        assert_eq!(
            config.cluster_secret.map(|s| s.to_hex()),
            Some(hex.to_string())
        );
        for bad in ["00112233", "not hex at all, not hex at all!!", ""] {
            let error = refused(&with(bad));
            assert!(error.contains("key `cluster_secret`"), "{error}");
        }
        let id = |id: &str| {
            GOOD.replace(
                "truncation_mode",
                &format!("cluster_id = \"{id}\"\ntruncation_mode"),
            )
        };
        assert_eq!(
            NodeConfig::parse("node.toml", &id("run-20261207_a"))
                .unwrap()
                .cluster_id
                .as_deref(),
            Some("run-20261207_a")
        );
        for bad in ["", "a/b", "../x", &"x".repeat(65)] {
            let error = refused(&id(bad));
            assert!(error.contains("key `cluster_id`"), "{error}");
        }
    }

    #[test]
    fn refusals_name_the_file_the_key_and_the_reason() {
        let cases = [
            (
                GOOD.replace("\"hw\"", "\"zk\""),
                "key `truncation_mode`: \"zk\" is not one of",
            ),
            (
                GOOD.replace("KAFKA-7128", "KAFKA-9999"),
                "key `bugs`: unknown bug switch \"KAFKA-9999\"",
            ),
            (
                GOOD.replace("min_insync_replicas = 2", "min_insync_replicas = 0"),
                "key `min_insync_replicas`: must be at least 1",
            ),
            (
                GOOD.replace("min_insync_replicas = 2", "min_insync_replicas = 3"),
                "key `min_insync_replicas`: 3 is more than the 2 brokers",
            ),
            (
                GOOD.replace("broker_id = 2", "broker_id = 7"),
                "key `broker_id`: 7 is not among",
            ),
            (
                GOOD.replace("9192", "9193"),
                "key `listeners`: client, replication and metadata need three different",
            ),
            (
                GOOD.replace("id = 1", "id = 2"),
                "key `brokers`: broker id 2 appears twice",
            ),
            (
                format!("{GOOD}\n[metadata]\nvoters = [1, 5]\n"),
                "key `metadata.voters`: 5 is not among",
            ),
            (
                format!("{GOOD}\n[metadata]\nelection_timeout_min_ms = 50\n"),
                "key `metadata.election_timeout_min_ms`: need raft_heartbeat_ms",
            ),
            (
                GOOD.replace(
                    "min_insync_replicas = 2",
                    "min_insync_replicas = 2\nreplica_fetch_wait_max_ms = 20000",
                ),
                "key `replica_fetch_wait_max_ms`: 20000 must be less than",
            ),
            (
                GOOD.replace(
                    "min_insync_replicas = 2",
                    "min_insync_replicas = 2\nreplica_fetch_max_records = 0",
                ),
                "key `replica_fetch_max_records`: 0 is not between 1 and 10000",
            ),
            (
                GOOD.replace(
                    "min_insync_replicas = 2",
                    "min_insync_replicas = 2\nreplica_fetch_max_records = 10001",
                ),
                "key `replica_fetch_max_records`: 10001 is not between 1 and 10000",
            ),
            (
                GOOD.replace("{ every_records = 100 }", "{ every_records = 0 }"),
                "key `storage.flush_policy`",
            ),
        ];
        for (text, expected) in cases {
            let message = refused(&text);
            assert!(message.starts_with("node.toml: "), "{message}");
            assert!(
                message.contains(expected),
                "{message}\n  expected: {expected}"
            );
        }
    }

    #[test]
    fn syntax_errors_and_unknown_keys_are_refused_with_their_place() {
        let message = refused(&GOOD.replace("broker_id = 2", "broker_id = "));
        assert!(
            message.starts_with("node.toml: line 2, column 13 (`broker_id =`): "),
            "{message}"
        );
        let message = refused(&GOOD.replace("min_insync_replicas = 2", "min_insync_replica = 2"));
        assert!(
            message.starts_with(
                "node.toml: line 6, column 1 (`min_insync_replica = 2`): unknown field `min_insync_replica`"
            ),
            "{message}"
        );
        let message = refused(&GOOD.replace("broker_id = 2", "broker_id = -2"));
        assert!(message.contains("broker_id"), "{message}");
        let message = refused(&GOOD.replace(
            "127.0.0.1:9193\"\nmetadata = \"127.0.0.1:9194\"\n\n[[brokers]]",
            "nowhere\"\nmetadata = \"127.0.0.1:9194\"\n\n[[brokers]]",
        ));
        assert!(
            message.contains("replication") || message.contains("address"),
            "{message}"
        );
    }

    #[test]
    fn a_missing_file_is_named() {
        let message = NodeConfig::load(Path::new("/nonexistent/node.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            message.starts_with("/nonexistent/node.toml: cannot read"),
            "{message}"
        );
    }
}
