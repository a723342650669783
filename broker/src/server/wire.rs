//! The JSON bodies of the broker's HTTP API (DESIGN.md §2), and its error shape
//! `{"error": code, "message": ..., "leader": ...}`.
//!
//! Error codes and whether a failed produce may still have been written:
//!
//! | code | HTTP | produce outcome |
//! |---|---|---|
//! | `bad_request` | 400 | definite: nothing written |
//! | `unknown_topic_or_partition` | 404 | definite |
//! | `value_too_large` | 413 | definite |
//! | `offset_out_of_range` | 416 | (reads only) |
//! | `not_leader` (with `leader`, the hint) | 421 | definite |
//! | `not_enough_replicas` | 503 | definite (refused before the append) |
//! | `not_enough_replicas_after_append` | 503 | indeterminate |
//! | `timeout` | 504 | indeterminate |
//! | `leadership_lost` | 503 | indeterminate (appended, then the leader stepped down) |
//! | `storage_error` | 500 | indeterminate |
//! | `stale_controller_epoch`, `stale_leader_epoch`, `not_assigned` | 409 | (LeaderAndIsr) |
//! | `fenced_leader_epoch`, `unknown_leader_epoch`, `unknown_replica` | 409 | (replication) |
//! | `not_ready` | 503 | (linearizable read: the HW has not reached the epoch's start) |
//! | `metadata_unavailable` | 503 | (linearizable read: the metadata quorum could not confirm leadership; retry) |
//! | `failpoint` | 503 | a failpoint armed with `return` refused the request |
//! | `unknown_failpoint` | 404 | (debug endpoints) |
//! | `failpoints_disabled` | 501 | (debug endpoints, built without the feature) |

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::record::{LeaderEpoch, Offset, Record};
use crate::replica::{
    BrokerId, ControllerEpoch, EpochEndOffset, FetchData, FetchRequest, LeaderAndIsr,
    ListOffsetsRequest, LogOffsets, OffsetsForLeaderEpochRequest, ReplicationError, StateVersion,
};

/// The error body every endpoint answers with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
    pub message: String,
    /// The leader as this broker knows it (a hint for `not_leader`), else `null`.
    pub leader: Option<BrokerId>,
}

/// An error on its way to becoming an HTTP response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub body: ErrorBody,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            body: ErrorBody {
                error: code.to_owned(),
                message: message.into(),
                leader: None,
            },
        }
    }

    pub fn with_leader(mut self, leader: Option<BrokerId>) -> ApiError {
        self.body.leader = leader;
        self
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub fn unknown_partition(topic: &str, partition: u32) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_topic_or_partition",
            format!("this broker knows no partition {topic}/{partition}"),
        )
    }

    pub fn not_leader(leader: Option<BrokerId>) -> ApiError {
        let message = match leader {
            Some(id) => format!("this broker is not the partition's leader; broker {id} is"),
            None => "this broker is not the partition's leader, and knows no leader".to_owned(),
        };
        ApiError::new(StatusCode::MISDIRECTED_REQUEST, "not_leader", message).with_leader(leader)
    }

    pub fn storage(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "storage_error", message)
    }

    pub fn failpoint(name: &str) -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "failpoint",
            format!("failpoint {name} refused the request"),
        )
    }

    /// A replication protocol error as the leader answers it.
    pub fn replication(error: ReplicationError, leader: Option<BrokerId>) -> ApiError {
        let (status, code) = replication_error_code(error);
        ApiError::new(status, code, error.to_string()).with_leader(leader)
    }
}

fn replication_error_code(error: ReplicationError) -> (StatusCode, &'static str) {
    match error {
        ReplicationError::NotLeader => (StatusCode::MISDIRECTED_REQUEST, "not_leader"),
        ReplicationError::FencedLeaderEpoch => (StatusCode::CONFLICT, "fenced_leader_epoch"),
        ReplicationError::UnknownLeaderEpoch => (StatusCode::CONFLICT, "unknown_leader_epoch"),
        ReplicationError::OffsetOutOfRange => {
            (StatusCode::RANGE_NOT_SATISFIABLE, "offset_out_of_range")
        }
        ReplicationError::UnknownReplica => (StatusCode::CONFLICT, "unknown_replica"),
    }
}

/// The follower's reading of an error code from its leader; `None` for codes that are not
/// a protocol answer (the request is then treated as lost, and re-sent on the core's timer).
pub fn replication_error_from_code(code: &str) -> Option<ReplicationError> {
    Some(match code {
        // A broker without the partition answers as not the leader, as Kafka's
        // UNKNOWN_TOPIC_OR_PARTITION does for a fetcher.
        "not_leader" | "unknown_topic_or_partition" => ReplicationError::NotLeader,
        "fenced_leader_epoch" => ReplicationError::FencedLeaderEpoch,
        "unknown_leader_epoch" => ReplicationError::UnknownLeaderEpoch,
        "offset_out_of_range" => ReplicationError::OffsetOutOfRange,
        "unknown_replica" => ReplicationError::UnknownReplica,
        _ => return None,
    })
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body)).into_response()
    }
}

// ----- client API ------------------------------------------------------------------

/// `POST /v1/topics/{topic}/partitions/{p}/records`: one `value`, or a batch of `values`
/// appended together at consecutive offsets. `acks` is `"all"` (default, also `-1`),
/// `1` or `0`; `timeout_ms` bounds an acks=all wait for replication (default 10 s).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProduceBody {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<Vec<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acks: Option<Value>,
    /// Checked by the handler, so that a bad one is named in the error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<Value>,
}

/// The answer to a single-value produce.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProduceReply {
    pub offset: Offset,
}

/// The answer to a batch produce: each value's offset, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProduceBatchReply {
    pub offsets: Vec<Offset>,
}

/// One record as a client reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientRecord {
    pub offset: Offset,
    pub value: Value,
}

/// `GET /v1/topics/{topic}/partitions/{p}/records?offset=&max=`: records below the HW.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadReply {
    pub records: Vec<ClientRecord>,
    pub high_watermark: Offset,
    pub log_start_offset: Offset,
    pub leader_epoch: LeaderEpoch,
    /// The record limit this read used (the request's `max`, or the default): a reply of
    /// exactly `max` records may have stopped short of the high watermark because of it,
    /// which a checker must know to tell a capped read from one withholding records.
    pub max: usize,
    /// The value-byte limit this read used (the request's `max_bytes`, or the default).
    pub max_bytes: usize,
    /// The byte limit stopped the reply before `max` records and before the high
    /// watermark: the next record is there, it did not fit.
    pub truncated: bool,
}

// ----- replication API -------------------------------------------------------------

/// `POST /v1/replication/leader-and-isr`: the controller's decision for one partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaderAndIsrBody {
    pub topic: String,
    pub partition: u32,
    pub controller_epoch: ControllerEpoch,
    pub leader: BrokerId,
    pub leader_epoch: LeaderEpoch,
    pub isr: Vec<BrokerId>,
    /// The partition state's version in the metadata store.
    pub version: StateVersion,
    pub replicas: Vec<BrokerId>,
}

impl LeaderAndIsrBody {
    /// What a decision must be to be considered at all, whoever sent it: a legal topic
    /// name, its leader in its ISR, its ISR among its replicas, and every replica one of
    /// `brokers` (the configured ones). Whether it is current is the metadata's and the
    /// core's to say.
    pub fn check_shape(&self, brokers: &[BrokerId]) -> Result<(), ApiError> {
        super::replication_api::validate_topic(&self.topic)?;
        if !self.isr.contains(&self.leader) {
            return Err(ApiError::bad_request(format!(
                "leader {} is not in the ISR {:?}",
                self.leader, self.isr
            )));
        }
        if let Some(unknown) = self
            .replicas
            .iter()
            .chain(&self.isr)
            .find(|id| !brokers.contains(id))
        {
            return Err(ApiError::bad_request(format!(
                "broker {unknown} is not among the configured [[brokers]]"
            )));
        }
        if let Some(stray) = self.isr.iter().find(|id| !self.replicas.contains(id)) {
            return Err(ApiError::bad_request(format!(
                "ISR member {stray} is not among the replicas {:?}",
                self.replicas
            )));
        }
        Ok(())
    }

    /// The core's request.
    pub fn to_request(&self) -> LeaderAndIsr {
        LeaderAndIsr {
            controller_epoch: self.controller_epoch,
            leader: self.leader,
            leader_epoch: self.leader_epoch,
            isr: self.isr.clone(),
            version: self.version,
            replicas: self.replicas.clone(),
        }
    }
}

/// A record on the replication wire. Values are the JSON text clients wrote, so they
/// travel as strings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireRecord {
    pub offset: Offset,
    pub leader_epoch: LeaderEpoch,
    pub value: String,
}

impl WireRecord {
    /// `None` if the value is not UTF-8, which the client API never writes.
    pub fn from_record(record: Record) -> Option<WireRecord> {
        Some(WireRecord {
            offset: record.offset,
            leader_epoch: record.leader_epoch,
            value: String::from_utf8(record.value).ok()?,
        })
    }

    pub fn into_record(self) -> Record {
        Record::new(self.offset, self.leader_epoch, self.value.into_bytes())
    }
}

/// `POST /v1/replication/fetch` (KIP-320 form).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FetchBody {
    pub topic: String,
    pub partition: u32,
    pub replica_id: BrokerId,
    pub fetch_offset: Offset,
    pub current_leader_epoch: Option<LeaderEpoch>,
    pub max_records: usize,
}

impl FetchBody {
    /// The core's request, as received by `leader` (`max_records` within 1 and
    /// [`crate::config::MAX_FETCH_RECORDS`]).
    pub fn to_request(&self, leader: BrokerId) -> FetchRequest {
        FetchRequest {
            replica_id: self.replica_id,
            leader,
            fetch_offset: self.fetch_offset,
            current_leader_epoch: self.current_leader_epoch,
            max_records: self.max_records.clamp(1, crate::config::MAX_FETCH_RECORDS),
            built_in_epoch: self.current_leader_epoch.unwrap_or(0),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FetchReply {
    pub records: Vec<WireRecord>,
    pub high_watermark: Offset,
    pub log_start_offset: Offset,
}

impl FetchReply {
    /// What the follower's core is given.
    pub fn into_data(self) -> FetchData {
        FetchData {
            records: self
                .records
                .into_iter()
                .map(WireRecord::into_record)
                .collect(),
            high_watermark: self.high_watermark,
            log_start_offset: self.log_start_offset,
        }
    }
}

/// `POST /v1/replication/offsets-for-leader-epoch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OffsetsForLeaderEpochBody {
    pub topic: String,
    pub partition: u32,
    pub replica_id: BrokerId,
    pub requested_epoch: LeaderEpoch,
    pub current_leader_epoch: Option<LeaderEpoch>,
}

impl OffsetsForLeaderEpochBody {
    /// The core's request, as received by `leader`.
    pub fn to_request(&self, leader: BrokerId) -> OffsetsForLeaderEpochRequest {
        OffsetsForLeaderEpochRequest {
            replica_id: self.replica_id,
            leader,
            requested_epoch: self.requested_epoch,
            current_leader_epoch: self.current_leader_epoch,
            built_in_epoch: self.current_leader_epoch.unwrap_or(0),
        }
    }
}

/// `epoch_end_offset` is `null` for UNDEFINED (no epoch `<=` the requested one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffsetsForLeaderEpochReply {
    pub epoch_end_offset: Option<EpochEndOffsetWire>,
}

impl OffsetsForLeaderEpochReply {
    /// What the follower's core is given.
    pub fn into_end_offset(self) -> Option<EpochEndOffset> {
        self.epoch_end_offset.map(|e| EpochEndOffset {
            leader_epoch: e.leader_epoch,
            end_offset: e.end_offset,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpochEndOffsetWire {
    pub leader_epoch: LeaderEpoch,
    pub end_offset: Offset,
}

/// `POST /v1/replication/list-offsets`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListOffsetsBody {
    pub topic: String,
    pub partition: u32,
    pub replica_id: BrokerId,
    pub current_leader_epoch: Option<LeaderEpoch>,
}

impl ListOffsetsBody {
    /// The core's request, as received by `leader`.
    pub fn to_request(&self, leader: BrokerId) -> ListOffsetsRequest {
        ListOffsetsRequest {
            replica_id: self.replica_id,
            leader,
            current_leader_epoch: self.current_leader_epoch,
            built_in_epoch: self.current_leader_epoch.unwrap_or(0),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListOffsetsReply {
    pub log_start_offset: Offset,
    pub log_end_offset: Offset,
}

impl ListOffsetsReply {
    /// What the follower's core is given.
    pub fn into_offsets(self) -> LogOffsets {
        LogOffsets {
            log_start_offset: self.log_start_offset,
            log_end_offset: self.log_end_offset,
        }
    }
}

// ----- debug API ---------------------------------------------------------------------

/// `GET /v1/debug/replicas`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicasReply {
    pub broker_id: BrokerId,
    pub replicas: Vec<ReplicaView>,
}

/// One local replica as this broker sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaView {
    pub topic: String,
    pub partition: u32,
    /// `leader`, `follower`, `unassigned` (no LeaderAndIsr since start), or `offline`
    /// (its log failed and could not be reopened).
    pub role: String,
    pub leader: Option<BrokerId>,
    pub leader_epoch: Option<LeaderEpoch>,
    pub isr: Vec<BrokerId>,
    pub partition_state_version: Option<StateVersion>,
    pub controller_epoch: ControllerEpoch,
    pub log_start_offset: Offset,
    pub log_end_offset: Offset,
    pub high_watermark: Offset,
    pub epoch_cache: Vec<EpochEndOffsetStart>,
    /// Why the replica is offline, when it is.
    pub error: Option<String>,
}

/// An entry of the leader-epoch cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpochEndOffsetStart {
    pub epoch: LeaderEpoch,
    pub start_offset: Offset,
}

/// `PUT /v1/debug/failpoints/{name}` body (a bare text body of actions is accepted too).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailpointBody {
    /// `fail` crate syntax: `sleep(100)`, `pause`, `return`, `50%return`, `off`, ...
    pub actions: String,
}

/// Parses a request body, turning serde's complaint into a 400 that says what is wrong.
pub fn parse_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("malformed JSON body: {e}")))
}
