//! The controller's admin operations as data: [`AdminRequest`] (also the JSON a
//! non-controller forwards to the controller), [`AdminReply`] (the JSON the client gets),
//! [`AdminError`] (with its HTTP status and error code), and the checks a request must
//! pass before the controller looks at the store. No I/O.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::decisions::Refusal;
use crate::metadata::Version;
use crate::record::LeaderEpoch;
use crate::replica::metadata::{ControllerEpoch, PartitionState, TopicPartition};
use crate::replica::BrokerId;

/// At most this many partitions per topic: a typo should not create a million nodes.
pub const MAX_PARTITIONS: u32 = 10_000;
/// How long a reassignment waits for its new replicas to join the ISR unless told.
pub const DEFAULT_REASSIGN_TIMEOUT_MS: u64 = 30_000;
/// The longest wait a reassignment may ask for.
pub const MAX_REASSIGN_TIMEOUT_MS: u64 = 600_000;

/// An admin operation. Serialized with an `"op"` tag when forwarded to the controller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum AdminRequest {
    CreateTopic(CreateTopic),
    ElectPreferred(ElectPreferred),
    Reassign(Reassign),
    TransferLeader(TransferLeader),
}

/// `POST /v1/topics`. With an `assignment` (one replica list per partition),
/// `partitions` and `replication_factor` may be left out; if given they must match it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateTopic {
    pub topic: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_factor: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assignment: Option<Vec<Vec<BrokerId>>>,
}

/// `POST /v1/admin/elect-preferred`: every partition, a topic's, or one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ElectPreferred {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<u32>,
}

/// `POST /v1/admin/reassign`: the partition's new replica list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reassign {
    pub topic: String,
    pub partition: u32,
    pub replicas: Vec<BrokerId>,
    /// How long to wait for the new replicas to join the ISR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// `POST /v1/admin/transfer-leader`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransferLeader {
    pub topic: String,
    pub partition: u32,
    pub leader: BrokerId,
}

/// A partition as stored: the `/v1/metadata` shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionMetadata {
    pub partition: u32,
    pub replicas: Vec<BrokerId>,
    pub leader: Option<BrokerId>,
    pub leader_epoch: LeaderEpoch,
    pub isr: Vec<BrokerId>,
    pub controller_epoch: ControllerEpoch,
    /// The state's version in the metadata store (the leader's zkVersion).
    pub version: Version,
}

impl PartitionMetadata {
    pub fn new(partition: u32, state: &PartitionState, version: Version) -> PartitionMetadata {
        PartitionMetadata {
            partition,
            replicas: state.replicas.clone(),
            leader: state.leader,
            leader_epoch: state.leader_epoch,
            isr: state.isr.clone(),
            controller_epoch: state.controller_epoch,
            version,
        }
    }
}

/// A partition named by its topic, as admin replies give it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionInfo {
    pub topic: String,
    #[serde(flatten)]
    pub state: PartitionMetadata,
}

impl PartitionInfo {
    pub fn new(tp: &TopicPartition, state: &PartitionState, version: Version) -> PartitionInfo {
        PartitionInfo {
            topic: tp.topic.clone(),
            state: PartitionMetadata::new(tp.partition, state, version),
        }
    }
}

/// What a successful admin operation answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AdminReply {
    TopicCreated(TopicCreated),
    Elected(ElectionReport),
    /// A reassignment completed, or a transfer took effect: the partition's new state.
    Partition(PartitionInfo),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicCreated {
    pub topic: String,
    pub partitions: Vec<PartitionMetadata>,
}

/// Preferred election's answer: one outcome per partition considered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ElectionReport {
    pub partitions: Vec<ElectionOutcome>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ElectionOutcome {
    pub topic: String,
    pub partition: u32,
    pub result: ElectionResult,
    /// The leader after the operation.
    pub leader: Option<BrokerId>,
    pub leader_epoch: LeaderEpoch,
    /// Why the preferred replica was not elected, when it was not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ElectionResult {
    Elected,
    AlreadyPreferred,
    PreferredNotAvailable,
}

/// Why an admin operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdminError {
    #[error("{0}")]
    InvalidRequest(String),
    #[error("topic {0:?} already exists")]
    TopicExists(String),
    #[error("no topic {0:?}")]
    UnknownTopic(String),
    #[error("no partition {topic}/{partition}")]
    UnknownPartition { topic: String, partition: u32 },
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error("a reassignment of {topic}/{partition} is already in progress")]
    ReassignmentInProgress { topic: String, partition: u32 },
    /// The new replicas did not join the ISR in time. The assignment stays the union of
    /// old and new replicas (nothing is lost); the same request may be sent again.
    #[error("replicas {missing:?} of {topic}/{partition} did not join the ISR within {timeout_ms} ms; its assignment stays the union of old and new replicas")]
    ReassignmentTimeout {
        topic: String,
        partition: u32,
        missing: Vec<BrokerId>,
        timeout_ms: u64,
    },
    #[error("this broker is not the controller ({})", match .controller { Some(id) => format!("broker {id} is"), None => "no controller is known".to_owned() })]
    NotController { controller: Option<BrokerId> },
    /// The controller resigned while the operation was queued or running: it may or may
    /// not have taken effect.
    #[error("the controller resigned before the operation completed; it may or may not have taken effect")]
    ControllerMoved,
    #[error("metadata quorum unavailable: {0}")]
    Unavailable(String),
    #[error("{0}")]
    CorruptMetadata(String),
}

impl AdminError {
    /// The error code of the HTTP error body.
    pub fn code(&self) -> &'static str {
        match self {
            AdminError::InvalidRequest(_) => "bad_request",
            AdminError::TopicExists(_) => "topic_exists",
            AdminError::UnknownTopic(_) | AdminError::UnknownPartition { .. } => {
                "unknown_topic_or_partition"
            }
            AdminError::Refused(refusal) => match refusal {
                Refusal::NotAReplica { .. } => "not_a_replica",
                Refusal::NotInIsr { .. } => "not_in_isr",
                Refusal::NotLive { .. } => "broker_not_available",
                Refusal::PreferredNotAvailable { .. } => "preferred_leader_not_available",
                Refusal::ReplicationFactorTooLarge { .. } => "invalid_replication_factor",
                Refusal::InvalidAssignment(_) => "invalid_replica_assignment",
                Refusal::NoLiveReplica { .. } => "no_live_replica",
                Refusal::NotInSync { .. } => "not_in_sync",
            },
            AdminError::ReassignmentInProgress { .. } => "reassignment_in_progress",
            AdminError::ReassignmentTimeout { .. } => "timeout",
            AdminError::NotController { .. } => "not_controller",
            AdminError::ControllerMoved => "controller_moved",
            AdminError::Unavailable(_) => "metadata_unavailable",
            AdminError::CorruptMetadata(_) => "corrupt_metadata",
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> u16 {
        match self {
            AdminError::InvalidRequest(_) => 400,
            AdminError::Refused(
                Refusal::ReplicationFactorTooLarge { .. } | Refusal::InvalidAssignment(_),
            ) => 400,
            AdminError::UnknownTopic(_) | AdminError::UnknownPartition { .. } => 404,
            AdminError::TopicExists(_)
            | AdminError::Refused(_)
            | AdminError::ReassignmentInProgress { .. } => 409,
            AdminError::ReassignmentTimeout { .. } => 504,
            AdminError::NotController { .. }
            | AdminError::ControllerMoved
            | AdminError::Unavailable(_) => 503,
            AdminError::CorruptMetadata(_) => 500,
        }
    }
}

/// A topic name usable as a directory name component (Kafka's legal characters).
pub fn validate_topic_name(topic: &str) -> Result<(), AdminError> {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if topic.is_empty() || topic.len() > 249 || topic == "." || topic == ".." {
        return Err(AdminError::InvalidRequest(format!(
            "topic name {topic:?} must be 1 to 249 characters, and not \".\" or \"..\""
        )));
    }
    if let Some(c) = topic.chars().find(|&c| !legal(c)) {
        return Err(AdminError::InvalidRequest(format!(
            "topic name {topic:?} has the illegal character {c:?} (allowed: ASCII letters, digits, '.', '_', '-')"
        )));
    }
    Ok(())
}

/// How a topic's replicas are to be placed, once its request is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    Explicit(Vec<Vec<BrokerId>>),
    RoundRobin {
        partitions: u32,
        replication_factor: u32,
    },
}

impl CreateTopic {
    /// Checks what can be checked without the store (name, counts, explicit assignment
    /// against the configured brokers).
    pub fn placement(&self, configured: &BTreeSet<BrokerId>) -> Result<Placement, AdminError> {
        validate_topic_name(&self.topic)?;
        if let Some(partitions) = self.partitions {
            if partitions == 0 || partitions > MAX_PARTITIONS {
                return Err(AdminError::InvalidRequest(format!(
                    "partitions must be between 1 and {MAX_PARTITIONS}, not {partitions}"
                )));
            }
        }
        if self.replication_factor == Some(0) {
            return Err(AdminError::InvalidRequest(
                "replication_factor must be at least 1".into(),
            ));
        }
        match &self.assignment {
            Some(assignment) => {
                super::decisions::validate_assignment(assignment, configured)?;
                if assignment.len() > MAX_PARTITIONS as usize {
                    return Err(AdminError::InvalidRequest(format!(
                        "at most {MAX_PARTITIONS} partitions"
                    )));
                }
                if let Some(partitions) = self.partitions {
                    if partitions as usize != assignment.len() {
                        return Err(AdminError::InvalidRequest(format!(
                            "partitions is {partitions} but the assignment lists {}",
                            assignment.len()
                        )));
                    }
                }
                let rf = assignment.first().map_or(0, Vec::len);
                if let Some(replication_factor) = self.replication_factor {
                    if replication_factor as usize != rf {
                        return Err(AdminError::InvalidRequest(format!(
                            "replication_factor is {replication_factor} but the assignment has {rf} replicas per partition"
                        )));
                    }
                }
                Ok(Placement::Explicit(assignment.clone()))
            }
            None => match (self.partitions, self.replication_factor) {
                (Some(partitions), Some(replication_factor)) => Ok(Placement::RoundRobin {
                    partitions,
                    replication_factor,
                }),
                _ => Err(AdminError::InvalidRequest(
                    "partitions and replication_factor are required without an assignment".into(),
                )),
            },
        }
    }
}

impl ElectPreferred {
    pub fn check(&self) -> Result<(), AdminError> {
        match (&self.topic, self.partition) {
            (None, Some(_)) => Err(AdminError::InvalidRequest(
                "a partition needs its topic".into(),
            )),
            (Some(topic), _) => validate_topic_name(topic),
            (None, None) => Ok(()),
        }
    }

    /// Whether `tp` is among the partitions asked for.
    pub fn covers(&self, tp: &TopicPartition) -> bool {
        self.topic.as_ref().is_none_or(|t| *t == tp.topic)
            && self.partition.is_none_or(|p| p == tp.partition)
    }
}

impl Reassign {
    pub fn check(&self) -> Result<(), AdminError> {
        validate_topic_name(&self.topic)?;
        match self.timeout_ms {
            Some(0) => Err(AdminError::InvalidRequest(
                "timeout_ms must be positive".into(),
            )),
            Some(t) if t > MAX_REASSIGN_TIMEOUT_MS => Err(AdminError::InvalidRequest(format!(
                "timeout_ms must be at most {MAX_REASSIGN_TIMEOUT_MS}"
            ))),
            _ => Ok(()),
        }
    }

    pub fn timeout_ms(&self) -> u64 {
        self.timeout_ms.unwrap_or(DEFAULT_REASSIGN_TIMEOUT_MS)
    }
}

impl TransferLeader {
    pub fn check(&self) -> Result<(), AdminError> {
        validate_topic_name(&self.topic)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configured() -> BTreeSet<BrokerId> {
        [1, 2, 3].into_iter().collect()
    }

    fn create(json: &str) -> CreateTopic {
        serde_json::from_str(json).unwrap_or_else(|e| panic!("{json}: {e}"))
    }

    #[test]
    fn create_topic_requests_are_checked_before_the_store_is_read() {
        assert_eq!(
            create(r#"{"topic":"t","partitions":2,"replication_factor":3}"#)
                .placement(&configured()),
            Ok(Placement::RoundRobin {
                partitions: 2,
                replication_factor: 3
            })
        );
        assert_eq!(
            create(r#"{"topic":"t","assignment":[[1,2],[2,3]]}"#).placement(&configured()),
            Ok(Placement::Explicit(vec![vec![1, 2], vec![2, 3]]))
        );
        let refused = [
            (
                r#"{"topic":"","partitions":1,"replication_factor":1}"#,
                "bad_request",
            ),
            (
                r#"{"topic":"a/b","partitions":1,"replication_factor":1}"#,
                "bad_request",
            ),
            (
                r#"{"topic":"t","partitions":0,"replication_factor":1}"#,
                "bad_request",
            ),
            (
                r#"{"topic":"t","partitions":1,"replication_factor":0}"#,
                "bad_request",
            ),
            (r#"{"topic":"t","partitions":1}"#, "bad_request"),
            (
                r#"{"topic":"t","assignment":[[1,9]]}"#,
                "invalid_replica_assignment",
            ),
            (
                r#"{"topic":"t","assignment":[[1,2]],"partitions":2}"#,
                "bad_request",
            ),
            (
                r#"{"topic":"t","assignment":[[1,2]],"replication_factor":3}"#,
                "bad_request",
            ),
        ];
        for (json, code) in refused {
            let error = create(json).placement(&configured()).unwrap_err();
            assert_eq!(error.code(), code, "{json}: {error}");
            assert_eq!(error.status(), 400, "{json}");
        }
        assert!(serde_json::from_str::<CreateTopic>(r#"{"topic":"t","bogus":1}"#).is_err());
    }

    #[test]
    fn elect_preferred_scopes() {
        let tp = TopicPartition::new("t", 1);
        assert!(ElectPreferred::default().covers(&tp));
        let topic = ElectPreferred {
            topic: Some("t".into()),
            partition: None,
        };
        assert!(topic.covers(&tp) && !topic.covers(&TopicPartition::new("u", 1)));
        let one = ElectPreferred {
            topic: Some("t".into()),
            partition: Some(0),
        };
        assert!(!one.covers(&tp) && one.covers(&TopicPartition::new("t", 0)));
        assert!(ElectPreferred {
            topic: None,
            partition: Some(0)
        }
        .check()
        .is_err());
    }

    #[test]
    fn requests_round_trip_with_their_tag_and_replies_have_the_client_shape() {
        let request = AdminRequest::TransferLeader(TransferLeader {
            topic: "t".into(),
            partition: 0,
            leader: 2,
        });
        let json = serde_json::to_value(&request).unwrap_or_default();
        assert_eq!(
            json,
            serde_json::json!({"op": "transfer_leader", "topic": "t", "partition": 0, "leader": 2})
        );
        assert_eq!(
            serde_json::from_value::<AdminRequest>(json).ok(),
            Some(request)
        );
        let state = PartitionState {
            leader: Some(2),
            leader_epoch: 3,
            isr: vec![2, 1],
            controller_epoch: 4,
            replicas: vec![1, 2],
        };
        let reply =
            AdminReply::Partition(PartitionInfo::new(&TopicPartition::new("t", 0), &state, 7));
        assert_eq!(
            serde_json::to_value(&reply).unwrap_or_default(),
            serde_json::json!({"topic": "t", "partition": 0, "replicas": [1, 2], "leader": 2,
                "leader_epoch": 3, "isr": [2, 1], "controller_epoch": 4, "version": 7})
        );
    }

    #[test]
    fn errors_have_codes_and_statuses() {
        let cases = [
            (AdminError::TopicExists("t".into()), "topic_exists", 409),
            (
                AdminError::UnknownPartition {
                    topic: "t".into(),
                    partition: 3,
                },
                "unknown_topic_or_partition",
                404,
            ),
            (
                AdminError::Refused(Refusal::NotInIsr {
                    target: 3,
                    isr: vec![1],
                }),
                "not_in_isr",
                409,
            ),
            (
                AdminError::NotController {
                    controller: Some(2),
                },
                "not_controller",
                503,
            ),
        ];
        for (error, code, status) in cases {
            assert_eq!((error.code(), error.status()), (code, status), "{error}");
        }
        assert_eq!(
            AdminError::NotController {
                controller: Some(2)
            }
            .to_string(),
            "this broker is not the controller (broker 2 is)"
        );
    }
}
