//! Debug endpoints on the client listener (DESIGN.md §2):
//!
//! - `GET /v1/debug/replicas` → [`ReplicasReply`]: each local replica's role, leader,
//!   epoch, ISR, LEO, HW, log start, epoch cache.
//! - `GET /v1/debug/controller` → `{"broker_id", "controller_epoch", "live_brokers",
//!   "elections_won", "resignations", "fenced_writes"}`: this broker's control plane in its
//!   own view ([`crate::controller::ControlPlaneStatus`]); `controller_epoch` is set only
//!   while it acts as controller, which the metadata's `/controller` node may still name
//!   it after it stopped (a session not yet expired). 503 while it runs no control plane.
//! - `GET /v1/debug/failpoints` → `{"enabled": bool, "points": [..], "armed": {name: actions},
//!   "hits": {name: times reached while armed}, "delayed": {name: times it delayed its
//!   site}}`
//! - `PUT /v1/debug/failpoints/{name}` with `{"actions": "return(300)"}` (or the actions
//!   as a plain-text body) arms a point; `DELETE` disarms it. `name` is a point of
//!   `points`, or `<point>@<broker id>`. The actions are `fail` crate actions, except
//!   that `return(<ms>)` is ours: the site waits that many milliseconds without holding a
//!   thread, then carries on (`25%return(300)`: a quarter of the hits); plain `return`
//!   drops or refuses; `sleep(ms)` and `pause` block a blocking-pool thread. A `return`
//!   argument that is not a delay in milliseconds is refused (400). See
//!   [`super::failpoints`]. Arming and disarming need a build with the `failpoints` feature
//!   (else `501`), `enable_failpoints = true` in the node's config (else `403`), and, on
//!   a cluster with a secret, a request signed by the harness or a broker of the cluster
//!   (else `401`/`403`, [`crate::peer_gate`]).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, put};
use axum::{Json, Router};
use serde_json::{json, Value};

use super::failpoints;
use super::wire::{ApiError, EpochEndOffsetStart, FailpointBody, ReplicaView, ReplicasReply};
use super::Node;
use crate::config::NodeConfig;
use crate::peer_gate::{Admits, PeerGate};
use crate::replica::RoleKind;

/// The debug routes; arming and disarming pass the peer door (signed by the harness or
/// a broker of the cluster, when it has a secret).
pub fn routes(config: &NodeConfig) -> Router<Arc<Node>> {
    let door = PeerGate::new(config, "client", Admits::BrokersAndHarness);
    Router::new()
        .route("/v1/debug/replicas", get(replicas))
        .route("/v1/debug/controller", get(controller))
        .route("/v1/debug/failpoints", get(list_failpoints))
        .route(
            "/v1/debug/failpoints/{name}",
            put(arm_failpoint)
                .delete(disarm_failpoint)
                .route_layer(axum::middleware::from_fn_with_state(door, PeerGate::check)),
        )
}

async fn replicas(State(node): State<Arc<Node>>) -> Json<ReplicasReply> {
    let replicas = node
        .partitions
        .all()
        .into_iter()
        .map(|partition| {
            let tp = partition.tp.clone();
            partition
                .inspect(|r| {
                    let (role, leader) = match r.role() {
                        RoleKind::Unassigned => ("unassigned", None),
                        RoleKind::Leader => ("leader", Some(r.broker_id())),
                        RoleKind::Follower { leader } => ("follower", Some(leader)),
                    };
                    ReplicaView {
                        topic: tp.topic.clone(),
                        partition: tp.partition,
                        role: role.into(),
                        leader,
                        leader_epoch: r.leader_epoch(),
                        isr: r.isr().to_vec(),
                        partition_state_version: r.partition_state_version(),
                        controller_epoch: r.controller_epoch(),
                        log_start_offset: r.log_start_offset(),
                        log_end_offset: r.log_end_offset(),
                        high_watermark: r.high_watermark(),
                        epoch_cache: r
                            .epoch_entries()
                            .iter()
                            .map(|e| EpochEndOffsetStart {
                                epoch: e.epoch,
                                start_offset: e.start_offset,
                            })
                            .collect(),
                        error: None,
                    }
                })
                .unwrap_or_else(|reason| ReplicaView {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    role: "offline".into(),
                    leader: None,
                    leader_epoch: None,
                    isr: Vec::new(),
                    partition_state_version: None,
                    controller_epoch: 0,
                    log_start_offset: 0,
                    log_end_offset: 0,
                    high_watermark: 0,
                    epoch_cache: Vec::new(),
                    error: Some(reason),
                })
        })
        .collect();
    Json(ReplicasReply {
        broker_id: node.broker_id(),
        replicas,
    })
}

async fn controller(State(node): State<Arc<Node>>) -> Result<Json<Value>, ApiError> {
    let Some(control_plane) = node.control_plane() else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_ready",
            "this broker's control plane is not running",
        ));
    };
    let mut answer = serde_json::to_value(control_plane.status()).map_err(|error| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            error.to_string(),
        )
    })?;
    if let Value::Object(fields) = &mut answer {
        fields.insert("broker_id".into(), json!(node.broker_id()));
    }
    Ok(Json(answer))
}

fn require_failpoints(node: &Node) -> Result<(), ApiError> {
    if !failpoints::enabled() {
        return Err(ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "failpoints_disabled",
            "this broker was built without the `failpoints` feature",
        ));
    }
    if !node.config.enable_failpoints {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "failpoints_not_enabled",
            "this node's config does not enable failpoints (`enable_failpoints = true`)",
        ));
    }
    Ok(())
}

async fn list_failpoints() -> Json<Value> {
    let armed: serde_json::Map<String, Value> = failpoints::armed()
        .into_iter()
        .filter(|(_, actions)| !actions.is_empty())
        .map(|(name, actions)| (name, Value::String(actions)))
        .collect();
    Json(json!({
        "enabled": failpoints::enabled(),
        "points": failpoints::ALL,
        "armed": armed,
        "hits": failpoints::hit_counts()
            .into_iter()
            .map(|(name, count)| (name, Value::from(count)))
            .collect::<serde_json::Map<_, _>>(),
        "delayed": failpoints::delay_counts()
            .into_iter()
            .map(|(name, count)| (name, Value::from(count)))
            .collect::<serde_json::Map<_, _>>(),
    }))
}

/// The point name without a `@<broker>` target must be one the broker has.
fn check_name(name: &str) -> Result<(), ApiError> {
    let point = name.split_once('@').map_or(name, |(point, _)| point);
    if failpoints::ALL.contains(&point) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_failpoint",
            format!(
                "no failpoint {point:?}; the broker has {}",
                failpoints::ALL.join(", ")
            ),
        ))
    }
}

async fn arm_failpoint(
    State(node): State<Arc<Node>>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    require_failpoints(&node)?;
    check_name(&name)?;
    let actions = match serde_json::from_slice::<FailpointBody>(&body) {
        Ok(body) => body.actions,
        Err(_) => std::str::from_utf8(&body)
            .map_err(|_| ApiError::bad_request("the actions are not UTF-8 text"))?
            .trim()
            .to_owned(),
    };
    failpoints::arm(&name, &actions)
        .map_err(|e| ApiError::bad_request(format!("bad actions {actions:?}: {e}")))?;
    tracing::info!(failpoint = name, actions, "failpoint armed");
    Ok(Json(json!({"name": name, "actions": actions})))
}

async fn disarm_failpoint(
    State(node): State<Arc<Node>>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    require_failpoints(&node)?;
    check_name(&name)?;
    failpoints::disarm(&name);
    tracing::info!(failpoint = name, "failpoint disarmed");
    Ok(Json(json!({"name": name})))
}
