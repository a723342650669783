//! The replication listener: LeaderAndIsr from the controller, and the leader's side of
//! Fetch (long-poll), OffsetsForLeaderEpoch and ListOffsets.
//!
//! - `POST /v1/replication/leader-and-isr` [`LeaderAndIsrBody`] → `{}`
//! - `POST /v1/replication/fetch` [`FetchBody`] → [`FetchReply`]
//! - `POST /v1/replication/offsets-for-leader-epoch` → [`OffsetsForLeaderEpochReply`]
//! - `POST /v1/replication/list-offsets` → [`ListOffsetsReply`]
//!
//! A LeaderAndIsr from a controller epoch this broker has not seen yet, or for a partition
//! it does not host yet, is first checked against the metadata quorum
//! ([`confirm_in_metadata`]): a forged or garbled one is refused there instead of being
//! adopted (an adopted epoch from nowhere would make every real controller stale here).
//!
//! On a cluster with a secret, every request must be signed by one of its brokers
//! ([`crate::peer_gate`]); the admin requests forwarded to the controller too.
//!
//! A fetch that finds no new records waits up to `replica_fetch_wait_max_ms` for the
//! leader's log to grow (or its role to change), as Kafka's fetch purgatory does; the
//! fetch is recorded at once, so the follower's progress moves the HW without waiting.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

use super::failpoints;
use super::fetcher::fetch_reply;
use super::partitions::{Partition, PartitionError};
use super::wire::{
    parse_body, ApiError, EpochEndOffsetWire, FetchBody, FetchReply, LeaderAndIsrBody,
    ListOffsetsBody, ListOffsetsReply, OffsetsForLeaderEpochBody, OffsetsForLeaderEpochReply,
};
use super::Node;
use crate::metadata::layout;
use crate::peer_gate::{Admits, PeerGate};
use crate::replica::metadata::TopicPartition;
use crate::replica::{LeaderAndIsrError, ReplicationError};

pub fn router(node: Arc<Node>) -> Router {
    let door = PeerGate::new(&node.config, "replication", Admits::Brokers);
    Router::new()
        .route("/v1/replication/leader-and-isr", post(leader_and_isr))
        .route("/v1/replication/fetch", post(fetch))
        .route(
            "/v1/replication/offsets-for-leader-epoch",
            post(offsets_for_leader_epoch),
        )
        .route("/v1/replication/list-offsets", post(list_offsets))
        .merge(super::admin_api::controller_routes())
        .layer(axum::middleware::from_fn_with_state(door, PeerGate::check))
        .with_state(node)
}

/// A topic name usable as a directory name component (Kafka's legal characters).
pub fn validate_topic(topic: &str) -> Result<(), ApiError> {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if topic.is_empty() || topic.len() > 249 || topic == "." || topic == ".." {
        return Err(ApiError::bad_request(format!(
            "topic name {topic:?} must be 1 to 249 characters, and not \".\" or \"..\""
        )));
    }
    if let Some(c) = topic.chars().find(|&c| !legal(c)) {
        return Err(ApiError::bad_request(format!(
            "topic name {topic:?} has the illegal character {c:?} (allowed: ASCII letters, digits, '.', '_', '-')"
        )));
    }
    Ok(())
}

pub(crate) fn partition_error(error: PartitionError) -> ApiError {
    ApiError::storage(error.to_string())
}

fn local_partition(node: &Node, topic: &str, partition: u32) -> Result<Arc<Partition>, ApiError> {
    node.partitions
        .get(&TopicPartition::new(topic, partition))
        .ok_or_else(|| ApiError::unknown_partition(topic, partition))
}

async fn leader_and_isr(
    State(node): State<Arc<Node>>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let body: LeaderAndIsrBody = parse_body(&body)?;
    let brokers: Vec<_> = node.config.brokers.iter().map(|peer| peer.id).collect();
    body.check_shape(&brokers)?;
    let tp = TopicPartition::new(body.topic.clone(), body.partition);
    if body.controller_epoch > node.controller_epoch_seen() || node.partitions.get(&tp).is_none() {
        confirm_in_metadata(&node, &tp, &body).await?;
    }
    if let Err(current) = node.admit_controller_epoch(body.controller_epoch) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "stale_controller_epoch",
            format!(
                "controller epoch {} is older than {current}, the newest this broker has seen",
                body.controller_epoch
            ),
        ));
    }
    let request = body.to_request();
    tracing::info!(broker = node.broker_id(), partition = ?tp, ?request, "LeaderAndIsr");
    match node.leader_and_isr(tp, request).map_err(partition_error)? {
        Ok(()) => Ok(Json(json!({}))),
        Err(error) => {
            let code = match error {
                LeaderAndIsrError::StaleControllerEpoch { .. } => "stale_controller_epoch",
                LeaderAndIsrError::StaleLeaderEpoch { .. } => "stale_leader_epoch",
                LeaderAndIsrError::NotAssigned => "not_assigned",
            };
            Err(ApiError::new(StatusCode::CONFLICT, code, error.to_string()))
        }
    }
}

/// Checks a LeaderAndIsr against the metadata quorum (a linearizable read): a controller
/// writes a partition's state, then sends it, and `/controller_epoch` holds its epoch, so
/// a real request finds its partition stored, at its leader epoch and state version or
/// newer, and its controller epoch at most the stored one (while the quorum names one:
/// a test playing controller may not). What the quorum cannot confirm now is answered
/// `503` (the controller sends it again); what contradicts it, `409`.
async fn confirm_in_metadata(
    node: &Node,
    tp: &TopicPartition,
    body: &LeaderAndIsrBody,
) -> Result<(), ApiError> {
    let (controller_epoch, stored) = node
        .metadata
        .read_linearizable(|state| {
            let epoch = layout::controller_epoch(state)?;
            let stored = layout::partition_state(state, tp)?;
            Ok::<_, layout::LayoutError>((epoch, stored))
        })
        .await
        .map_err(|error| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "metadata_unavailable",
                format!("cannot check the request against the metadata quorum: {error}"),
            )
        })?
        .map_err(|error| ApiError::storage(error.to_string()))?;
    let conflict =
        |message: String| ApiError::new(StatusCode::CONFLICT, "not_in_metadata", message);
    let (quorum_epoch, epoch_version) = controller_epoch;
    if epoch_version.is_some() && body.controller_epoch > quorum_epoch {
        return Err(conflict(format!(
            "controller epoch {} is newer than {quorum_epoch}, the metadata quorum's",
            body.controller_epoch
        )));
    }
    let Some(stored) = stored else {
        return Err(conflict(format!(
            "partition {}/{} is not in the metadata quorum",
            tp.topic, tp.partition
        )));
    };
    if body.leader_epoch > stored.state.leader_epoch || body.version > stored.version {
        return Err(conflict(format!(
            "leader epoch {} and state version {} are newer than the metadata quorum's ({} and {})",
            body.leader_epoch, body.version, stored.state.leader_epoch, stored.version
        )));
    }
    Ok(())
}

async fn fetch(State(node): State<Arc<Node>>, body: Bytes) -> Result<Json<FetchReply>, ApiError> {
    let body: FetchBody = parse_body(&body)?;
    let partition = local_partition(&node, &body.topic, body.partition)?;
    let request = body.to_request(node.broker_id());
    let deadline =
        tokio::time::Instant::now() + Duration::from_millis(node.config.replica_fetch_wait_max_ms);
    let mut changed = partition.subscribe();
    let stopping = node.stopping();
    tokio::pin!(stopping);
    let data = loop {
        // Marked seen before the read, so an append after it wakes the wait below.
        changed.borrow_and_update();
        let now = node.now_ms();
        let output = partition
            .with(|r| r.handle_fetch(&request, now))
            .map_err(partition_error)?;
        node.apply(&partition, output.effects);
        let data = output
            .reply
            .map_err(|e| ApiError::replication(e, leader_hint(&partition)))?;
        if !data.records.is_empty() || tokio::time::Instant::now() >= deadline {
            break data;
        }
        tokio::select! {
            _ = &mut stopping => break data,
            woken = changed.changed() => if woken.is_err() { break data },
            _ = tokio::time::sleep_until(deadline) => {}
        }
    };
    if failpoints::hit(failpoints::LEADER_FETCH_RESPONSE, node.broker_id())
        .await
        .is_err()
    {
        return Err(ApiError::failpoint(failpoints::LEADER_FETCH_RESPONSE));
    }
    fetch_reply(limit_fetch_bytes(data))
        .map(Json)
        .ok_or_else(|| ApiError::storage("the log holds a record that is not UTF-8 text"))
}

/// A fetch response carries at most this many value bytes (but always one record), as
/// Kafka's `replica.fetch.max.bytes` bounds it: with large values, `max_records` alone
/// would let one response grow to gigabytes.
const FETCH_MAX_BYTES: usize = 8 << 20;

fn limit_fetch_bytes(mut data: crate::replica::FetchData) -> crate::replica::FetchData {
    let mut total = 0usize;
    let keep = data
        .records
        .iter()
        .position(|record| {
            total = total.saturating_add(record.value.len());
            total > FETCH_MAX_BYTES
        })
        .map_or(data.records.len(), |over| over.max(1));
    data.records.truncate(keep);
    data
}

fn leader_hint(partition: &Partition) -> Option<crate::replica::BrokerId> {
    partition
        .inspect(|r| match r.role() {
            crate::replica::RoleKind::Leader => Some(r.broker_id()),
            crate::replica::RoleKind::Follower { leader } => Some(leader),
            crate::replica::RoleKind::Unassigned => None,
        })
        .ok()
        .flatten()
}

async fn offsets_for_leader_epoch(
    State(node): State<Arc<Node>>,
    body: Bytes,
) -> Result<Json<OffsetsForLeaderEpochReply>, ApiError> {
    let body: OffsetsForLeaderEpochBody = parse_body(&body)?;
    let partition = local_partition(&node, &body.topic, body.partition)?;
    let request = body.to_request(node.broker_id());
    let reply = partition
        .inspect(|r| r.handle_offsets_for_leader_epoch(&request))
        .map_err(|e| partition_error(PartitionError::Offline(e)))?
        .map_err(|e| ApiError::replication(e, leader_hint(&partition)))?;
    // After the answer is computed: a delay here delivers it as of this epoch.
    if failpoints::hit(
        failpoints::LEADER_OFFSETS_FOR_LEADER_EPOCH,
        node.broker_id(),
    )
    .await
    .is_err()
    {
        return Err(ApiError::failpoint(
            failpoints::LEADER_OFFSETS_FOR_LEADER_EPOCH,
        ));
    }
    Ok(Json(OffsetsForLeaderEpochReply {
        epoch_end_offset: reply.map(|e| EpochEndOffsetWire {
            leader_epoch: e.leader_epoch,
            end_offset: e.end_offset,
        }),
    }))
}

async fn list_offsets(
    State(node): State<Arc<Node>>,
    body: Bytes,
) -> Result<Json<ListOffsetsReply>, ApiError> {
    let body: ListOffsetsBody = parse_body(&body)?;
    let partition = local_partition(&node, &body.topic, body.partition)?;
    let request = body.to_request(node.broker_id());
    let reply = partition
        .inspect(|r| r.handle_list_offsets(&request))
        .map_err(|e| partition_error(PartitionError::Offline(e)))?
        .map_err(|e: ReplicationError| ApiError::replication(e, leader_hint(&partition)))?;
    Ok(Json(ListOffsetsReply {
        log_start_offset: reply.log_start_offset,
        log_end_offset: reply.log_end_offset,
    }))
}
