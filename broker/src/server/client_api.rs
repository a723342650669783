//! The client listener: produce and read (DESIGN.md §2), plus the debug endpoints of
//! [`super::debug_api`].
//!
//! - `POST /v1/topics/{topic}/partitions/{p}/records` with [`ProduceBody`]:
//!   `{"value": v}` → [`ProduceReply`] `{"offset": n}`; `{"values": [..]}` →
//!   [`ProduceBatchReply`] `{"offsets": [..]}` (one batch, consecutive offsets).
//!   `acks=0` is answered `202 {}` once appended.
//! - `GET /v1/topics/{topic}/partitions/{p}/records?offset=&max=&consistency=` →
//!   [`ReadReply`]: records below the HW, from the leader only. `offset` defaults to the
//!   log start, `max` to 1000 (at most 10000). `consistency=linearizable` first checks
//!   in the metadata store that this broker still leads at its epoch, and that its HW
//!   has reached the epoch's start offset.
//!
//! Error codes, and which produce failures are definite, are in [`super::wire`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

use super::replication_api::{partition_error, validate_topic};
use super::wire::{
    parse_body, ApiError, ClientRecord, ProduceBatchReply, ProduceBody, ProduceReply, ReadReply,
};
use super::Node;
use crate::metadata::layout;
use crate::replica::metadata::TopicPartition;
use crate::replica::{Acks, ProduceError, ProduceOutcome, ProduceRequest, ReplicationError};

/// How long an acks=all produce may wait for replication unless it says otherwise.
const DEFAULT_PRODUCE_TIMEOUT_MS: u64 = 10_000;
const MAX_PRODUCE_TIMEOUT_MS: u64 = 300_000;
const DEFAULT_READ_MAX: usize = 1_000;
const READ_MAX_LIMIT: usize = 10_000;
/// Value bytes a read returns by default, and at most (Kafka's `max.partition.fetch.bytes`
/// and `fetch.max.bytes`): the first record goes out whatever its size.
const DEFAULT_READ_MAX_BYTES: usize = 1 << 20;
const READ_MAX_BYTES_LIMIT: usize = 64 << 20;
/// Values per batch; bounds one request's hold on the partition.
const MAX_BATCH: usize = 10_000;

/// The client listener's limits: as every listener's, but a request may wait for its
/// answer as long as the longest produce timeout a client may ask for, plus the produce's
/// own guard and some room.
pub fn listener_limits() -> serving::Limits {
    serving::Limits {
        request_timeout: Duration::from_millis(MAX_PRODUCE_TIMEOUT_MS) + Duration::from_secs(30),
        ..super::listener_limits()
    }
}

pub fn router(node: Arc<Node>) -> Router {
    // A batch may carry many values of up to max_value_bytes each; the bound only keeps a
    // single request from exhausting memory.
    let body_limit = node.config.max_value_bytes.saturating_mul(4).max(64 << 20);
    Router::new()
        .route(
            "/v1/topics/{topic}/partitions/{partition}/records",
            post(produce).get(read),
        )
        .merge(super::debug_api::routes(&node.config))
        .merge(super::admin_api::routes())
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(node)
}

fn parse_partition(topic: &str, partition: &str) -> Result<TopicPartition, ApiError> {
    validate_topic(topic)?;
    let partition = partition.parse::<u32>().map_err(|_| {
        ApiError::bad_request(format!(
            "partition {partition:?} is not a partition number (0 to {})",
            u32::MAX
        ))
    })?;
    Ok(TopicPartition::new(topic, partition))
}

/// The partition if it is local; otherwise `not_leader` with the stored leader as a hint
/// if the metadata store knows the partition, else `unknown_topic_or_partition`.
fn find(node: &Node, tp: &TopicPartition) -> Result<Arc<super::partitions::Partition>, ApiError> {
    if let Some(partition) = node.partitions.get(tp) {
        return Ok(partition);
    }
    // This node's view of the metadata, possibly stale: only a hint.
    let stored = node
        .metadata
        .read_local(|state, _| layout::partition_state(state, tp));
    match stored {
        Ok(Some(state)) => Err(ApiError::not_leader(state.state.leader)),
        Ok(None) => Err(ApiError::unknown_partition(&tp.topic, tp.partition)),
        Err(error) => Err(ApiError::storage(error.to_string())),
    }
}

/// A produce request's body, checked: the values as the JSON text stored, whether it was
/// a batch (`values`) or one `value`, its acks and its timeout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProduceBatch {
    pub values: Vec<Vec<u8>>,
    pub batch: bool,
    pub acks: Acks,
    pub timeout_ms: u64,
}

impl ProduceBatch {
    /// Checks `body`: one of `value` and `values`, at most [`MAX_BATCH`] values, each at
    /// most `max_value_bytes` as JSON text, a known `acks`, a `timeout_ms` within bounds.
    pub fn from_body(body: ProduceBody, max_value_bytes: usize) -> Result<ProduceBatch, ApiError> {
        let (values, batch) = match (body.value, body.values) {
            (Some(value), None) => (vec![value], false),
            (None, Some(values)) => (values, true),
            (Some(_), Some(_)) => {
                return Err(ApiError::bad_request(
                    "give either \"value\" or \"values\", not both",
                ))
            }
            (None, None) => {
                return Err(ApiError::bad_request(
                    "the body needs \"value\" (one record) or \"values\" (a batch)",
                ))
            }
        };
        if values.is_empty() {
            return Err(ApiError::bad_request("\"values\" is empty"));
        }
        if values.len() > MAX_BATCH {
            return Err(ApiError::bad_request(format!(
                "a batch holds at most {MAX_BATCH} values, this one has {}",
                values.len()
            )));
        }
        let acks = parse_acks(body.acks.as_ref())?;
        let timeout_ms = match &body.timeout_ms {
            None => DEFAULT_PRODUCE_TIMEOUT_MS,
            Some(value) => value
                .as_u64()
                .filter(|ms| (1..=MAX_PRODUCE_TIMEOUT_MS).contains(ms))
                .ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "timeout_ms must be an integer between 1 and {MAX_PRODUCE_TIMEOUT_MS}, not {value}"
                    ))
                })?,
        };
        let mut encoded = Vec::with_capacity(values.len());
        for (i, value) in values.iter().enumerate() {
            let bytes = serde_json::to_vec(value)
                .map_err(|e| ApiError::bad_request(format!("value {i} cannot be encoded: {e}")))?;
            if bytes.len() > max_value_bytes {
                return Err(ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "value_too_large",
                    format!(
                        "value {i} is {} bytes as JSON text; max_value_bytes is {max_value_bytes}",
                        bytes.len()
                    ),
                ));
            }
            encoded.push(bytes);
        }
        Ok(ProduceBatch {
            values: encoded,
            batch,
            acks,
            timeout_ms,
        })
    }
}

fn parse_acks(acks: Option<&Value>) -> Result<Acks, ApiError> {
    let Some(acks) = acks else {
        return Ok(Acks::All);
    };
    match acks {
        Value::String(s) if s == "all" || s == "-1" => Ok(Acks::All),
        Value::String(s) if s == "1" => Ok(Acks::Leader),
        Value::String(s) if s == "0" => Ok(Acks::None),
        Value::Number(n) if n.as_i64() == Some(-1) => Ok(Acks::All),
        Value::Number(n) if n.as_i64() == Some(1) => Ok(Acks::Leader),
        Value::Number(n) if n.as_i64() == Some(0) => Ok(Acks::None),
        other => Err(ApiError::bad_request(format!(
            "acks must be \"all\" (or -1), 1 or 0, not {other}"
        ))),
    }
}

fn produce_error(error: ProduceError) -> ApiError {
    let unavailable = StatusCode::SERVICE_UNAVAILABLE;
    match error {
        ProduceError::NotLeader { leader } => ApiError::not_leader(leader),
        ProduceError::NotEnoughReplicas { .. } => {
            ApiError::new(unavailable, "not_enough_replicas", error.to_string())
        }
        ProduceError::Empty => ApiError::bad_request("the batch has no values"),
        ProduceError::NotEnoughReplicasAfterAppend(_) => ApiError::new(
            unavailable,
            "not_enough_replicas_after_append",
            error.to_string(),
        ),
        ProduceError::RequestTimedOut(_) => {
            ApiError::new(StatusCode::GATEWAY_TIMEOUT, "timeout", error.to_string())
        }
        ProduceError::LeadershipLost(_) => {
            ApiError::new(unavailable, "leadership_lost", error.to_string())
        }
    }
}

async fn produce(
    State(node): State<Arc<Node>>,
    Path((topic, partition)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let tp = parse_partition(&topic, &partition)?;
    let body: ProduceBody = parse_body(&body)?;
    let ProduceBatch {
        values: encoded,
        batch,
        acks,
        timeout_ms,
    } = ProduceBatch::from_body(body, node.config.max_value_bytes)?;
    let partition = find(&node, &tp)?;
    let (waiting, completion) = node.partitions.register_produce();
    let request = ProduceRequest {
        request_id: waiting.request_id,
        values: encoded,
        acks,
        timeout_ms,
    };
    let now = node.now_ms();
    let output = partition
        .with(|r| r.produce(request, now))
        .map_err(partition_error)?;
    node.apply(&partition, output.effects);
    let result = match output.reply {
        ProduceOutcome::Done(result) => result,
        ProduceOutcome::Pending(appended) => {
            // The core times the request out on its own clock; this bound only guards
            // against a completion that can never come.
            let bound = Duration::from_millis(timeout_ms + 5_000);
            tokio::select! {
                completed = tokio::time::timeout(bound, completion) => match completed {
                    Ok(Ok(result)) => result,
                    _ => Err(ProduceError::RequestTimedOut(appended)),
                },
                // Stopping: the write may still survive on the followers, so the answer
                // is the indeterminate one.
                _ = node.stopping() => Err(ProduceError::RequestTimedOut(appended)),
            }
        }
    };
    drop(waiting);
    let appended = result.map_err(produce_error)?;
    if acks == Acks::None {
        return Ok((StatusCode::ACCEPTED, Json(json!({}))).into_response());
    }
    Ok(if batch {
        Json(ProduceBatchReply {
            offsets: (appended.base_offset..appended.end_offset()).collect(),
        })
        .into_response()
    } else {
        Json(ProduceReply {
            offset: appended.base_offset,
        })
        .into_response()
    })
}

fn parse_query_number<T: std::str::FromStr>(
    query: &HashMap<String, String>,
    key: &str,
    what: &str,
) -> Result<Option<T>, ApiError> {
    match query.get(key) {
        None => Ok(None),
        Some(text) => text
            .parse::<T>()
            .map(Some)
            .map_err(|_| ApiError::bad_request(format!("{key}={text:?} is not {what}"))),
    }
}

async fn read(
    State(node): State<Arc<Node>>,
    Path((topic, partition)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<ReadReply>, ApiError> {
    let tp = parse_partition(&topic, &partition)?;
    if let Some(key) = query
        .keys()
        .find(|k| !matches!(k.as_str(), "offset" | "max" | "max_bytes" | "consistency"))
    {
        return Err(ApiError::bad_request(format!(
            "unknown query parameter {key:?} (known: offset, max, max_bytes, consistency)"
        )));
    }
    let offset: Option<u64> =
        parse_query_number(&query, "offset", "an offset (an integer from 0 to 2^64-1)")?;
    let max: usize =
        parse_query_number(&query, "max", "a record count")?.unwrap_or(DEFAULT_READ_MAX);
    if max == 0 || max > READ_MAX_LIMIT {
        return Err(ApiError::bad_request(format!(
            "max must be between 1 and {READ_MAX_LIMIT}"
        )));
    }
    let max_bytes: usize =
        parse_query_number(&query, "max_bytes", "a byte count")?.unwrap_or(DEFAULT_READ_MAX_BYTES);
    if max_bytes == 0 || max_bytes > READ_MAX_BYTES_LIMIT {
        return Err(ApiError::bad_request(format!(
            "max_bytes must be between 1 and {READ_MAX_BYTES_LIMIT}"
        )));
    }
    let linearizable = match query.get("consistency").map(String::as_str) {
        None | Some("default") => false,
        Some("linearizable") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "consistency={other:?}: known values are \"default\" and \"linearizable\""
            )))
        }
    };
    let partition = find(&node, &tp)?;
    // The log is read from disk under the partition's lock: on a blocking thread, so that
    // a large read stalls no runtime thread (other partitions, heartbeats, the fetchers).
    let (read, leader_epoch, epoch_start, high_watermark, hint, from) =
        tokio::task::spawn_blocking(move || {
            partition.with(|r| {
                let from = offset.unwrap_or_else(|| r.log_start_offset());
                let read = r.read_committed(from, max, max_bytes)?;
                let hint = match r.role() {
                    crate::replica::RoleKind::Follower { leader } => Some(leader),
                    _ => None,
                };
                Ok((
                    read,
                    r.leader_epoch().unwrap_or(0),
                    r.leader_epoch_start_offset(),
                    r.high_watermark(),
                    hint,
                    from,
                ))
            })
        })
        .await
        .map_err(|error| ApiError::storage(format!("the read did not finish: {error}")))?
        .map_err(partition_error)?;
    let data = read.map_err(|error| match error {
        ReplicationError::OffsetOutOfRange => ApiError::new(
            StatusCode::RANGE_NOT_SATISFIABLE,
            "offset_out_of_range",
            format!(
                "offset {} is outside the readable range [log start, high watermark {high_watermark}]",
                offset.unwrap_or(0)
            ),
        ),
        ReplicationError::NotLeader => ApiError::not_leader(hint),
        other => ApiError::replication(other, hint),
    })?;
    if linearizable {
        // Read after the HW above was captured: if the quorum still names this broker
        // leader at the epoch the read was served in, no other leader can have
        // acknowledged a write this read misses.
        let stored = node
            .metadata
            .read_linearizable(|state| layout::partition_state(state, &tp))
            .await
            .map_err(|error| {
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "metadata_unavailable",
                    format!("cannot confirm leadership through the metadata quorum: {error}"),
                )
            })?
            .map_err(|error| ApiError::storage(error.to_string()))?;
        let still_leader = stored.as_ref().is_some_and(|s| {
            s.state.leader == Some(node.broker_id()) && s.state.leader_epoch == leader_epoch
        });
        if !still_leader {
            return Err(ApiError::not_leader(stored.and_then(|s| s.state.leader)));
        }
        if epoch_start.is_none_or(|start| high_watermark < start) {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "not_ready",
                "the high watermark has not yet reached this leader epoch's start offset",
            ));
        }
    }
    // Fewer records than both `max` and the committed records from `from` on: the byte
    // limit cut the reply (a checker must not take it for records withheld).
    let committed = usize::try_from(data.high_watermark.saturating_sub(from)).unwrap_or(usize::MAX);
    let truncated = data.records.len() < max.min(committed);
    let records = data
        .records
        .into_iter()
        .map(|record| ClientRecord {
            offset: record.offset,
            // Values were written as JSON text; anything else is shown as a string.
            value: serde_json::from_slice(&record.value).unwrap_or_else(|_| {
                Value::String(String::from_utf8_lossy(&record.value).into_owned())
            }),
        })
        .collect();
    Ok(Json(ReadReply {
        records,
        high_watermark: data.high_watermark,
        log_start_offset: data.log_start_offset,
        leader_epoch,
        max,
        max_bytes,
        truncated,
    }))
}
