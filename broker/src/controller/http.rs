//! The admin HTTP API's handlers (DESIGN.md §2), generic over whatever holds the
//! [`ControlPlane`] ([`ControlPlaneHost`]): the broker's `Node` (`server/admin_api.rs`
//! mounts them) or a test's stand-in.
//!
//! On any broker's client listener ([`admin_routes`]):
//! - `POST /v1/topics` `{"topic","partitions","replication_factor","assignment"?}`
//! - `POST /v1/admin/elect-preferred` `{"topic"?,"partition"?}`
//! - `POST /v1/admin/reassign` `{"topic","partition","replicas","timeout_ms"?}`
//! - `POST /v1/admin/transfer-leader` `{"topic","partition","leader"}`
//! - `GET /v1/metadata[?consistency=local]` → [`ClusterMetadata`], from a linearizable
//!   read unless `local` is asked for.
//!
//! A broker that is not the controller forwards an admin request once, to the
//! controller's replication listener ([`controller_routes`]: `POST /v1/controller/admin`
//! with the [`AdminRequest`]), and passes the answer through; the controller's listener
//! never forwards again. Errors are `{"error": code, "message": ..., "leader": ...}`
//! ([`ApiError`]) with [`AdminError::code`]; for `not_controller`, `leader` names the
//! controller this broker knows of.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};

use super::admin::{
    AdminError, AdminRequest, CreateTopic, ElectPreferred, Reassign, TransferLeader,
};
use super::describe::{describe, ClusterMetadata};
use super::ControlPlane;
use crate::replica::BrokerId;
use crate::server::wire::{parse_body, ApiError};

/// Where a non-controller forwards admin requests, on the controller's replication
/// listener.
pub const FORWARD_PATH: &str = "/v1/controller/admin";
/// Bounds a forwarded request (a reassignment: its own timeout plus this).
const FORWARD_TIMEOUT: Duration = Duration::from_secs(30);

/// Whatever holds this broker's control plane.
pub trait ControlPlaneHost: Send + Sync + 'static {
    /// `None` while the broker runs without one (it then answers 503).
    fn control_plane(&self) -> Option<ControlPlane>;
}

/// The routes of every broker's client listener.
pub fn admin_routes<S: ControlPlaneHost>() -> Router<Arc<S>> {
    Router::new()
        .route("/v1/topics", post(create_topic::<S>))
        .route("/v1/admin/elect-preferred", post(elect_preferred::<S>))
        .route("/v1/admin/reassign", post(reassign::<S>))
        .route("/v1/admin/transfer-leader", post(transfer_leader::<S>))
        .route("/v1/metadata", get(metadata::<S>))
}

/// The route of every broker's replication listener that receives forwarded requests.
pub fn controller_routes<S: ControlPlaneHost>() -> Router<Arc<S>> {
    Router::new().route(FORWARD_PATH, post(forwarded::<S>))
}

fn no_control_plane() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "not_ready",
        "this broker's control plane is not running",
    )
}

/// An [`AdminError`] as an HTTP error.
pub fn admin_error(error: AdminError) -> ApiError {
    let status = StatusCode::from_u16(error.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let leader = match &error {
        AdminError::NotController { controller } => *controller,
        _ => None,
    };
    ApiError::new(status, error.code(), error.to_string()).with_leader(leader)
}

async fn create_topic<S: ControlPlaneHost>(State(host): State<Arc<S>>, body: Bytes) -> Response {
    match parse_body::<CreateTopic>(&body) {
        Ok(request) => submit(&*host, AdminRequest::CreateTopic(request)).await,
        Err(error) => error.into_response(),
    }
}

async fn elect_preferred<S: ControlPlaneHost>(State(host): State<Arc<S>>, body: Bytes) -> Response {
    // An empty body asks for every partition.
    let parsed = if body.iter().all(u8::is_ascii_whitespace) {
        Ok(ElectPreferred::default())
    } else {
        parse_body::<ElectPreferred>(&body)
    };
    match parsed {
        Ok(request) => submit(&*host, AdminRequest::ElectPreferred(request)).await,
        Err(error) => error.into_response(),
    }
}

async fn reassign<S: ControlPlaneHost>(State(host): State<Arc<S>>, body: Bytes) -> Response {
    match parse_body::<Reassign>(&body) {
        Ok(request) => submit(&*host, AdminRequest::Reassign(request)).await,
        Err(error) => error.into_response(),
    }
}

async fn transfer_leader<S: ControlPlaneHost>(State(host): State<Arc<S>>, body: Bytes) -> Response {
    match parse_body::<TransferLeader>(&body) {
        Ok(request) => submit(&*host, AdminRequest::TransferLeader(request)).await,
        Err(error) => error.into_response(),
    }
}

/// Runs `request` here if this broker is the controller, else forwards it once.
async fn submit(host: &impl ControlPlaneHost, request: AdminRequest) -> Response {
    let Some(control_plane) = host.control_plane() else {
        return no_control_plane().into_response();
    };
    match control_plane.admin(request.clone()).await {
        Ok(reply) => Json(reply).into_response(),
        Err(AdminError::NotController {
            controller: Some(id),
        }) if id != control_plane.broker_id() => forward(&control_plane, id, &request).await,
        Err(error) => admin_error(error).into_response(),
    }
}

async fn forward(
    control_plane: &ControlPlane,
    controller: BrokerId,
    request: &AdminRequest,
) -> Response {
    let unreachable = |reason: String| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_controller",
            format!("this broker is not the controller, and cannot forward to broker {controller}: {reason}"),
        )
        .with_leader(Some(controller))
        .into_response()
    };
    let Some(peer) = control_plane
        .config()
        .brokers
        .iter()
        .find(|peer| peer.id == controller)
    else {
        return unreachable("it is not among the configured brokers".into());
    };
    let Some(client) = control_plane.http_client() else {
        return unreachable("no HTTP client".into());
    };
    let timeout = match request {
        AdminRequest::Reassign(reassign) => {
            Duration::from_millis(reassign.timeout_ms()) + FORWARD_TIMEOUT
        }
        _ => FORWARD_TIMEOUT,
    };
    tracing::debug!(
        broker = control_plane.broker_id(),
        controller,
        ?request,
        "forwarding an admin request"
    );
    let forward = client
        .post(format!("http://{}{FORWARD_PATH}", peer.replication))
        .json(request)
        .timeout(timeout);
    let answer = control_plane.signer().send(client, forward).await;
    let response = match answer {
        Ok(response) => response,
        Err(error) => return unreachable(error.to_string()),
    };
    let status =
        StatusCode::from_u16(response.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    match response.bytes().await {
        Ok(body) => (status, [(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(error) => unreachable(error.to_string()),
    }
}

/// The controller's side of forwarding: runs the request, never forwards again.
async fn forwarded<S: ControlPlaneHost>(State(host): State<Arc<S>>, body: Bytes) -> Response {
    let Some(control_plane) = host.control_plane() else {
        return no_control_plane().into_response();
    };
    let request = match parse_body::<AdminRequest>(&body) {
        Ok(request) => request,
        Err(error) => return error.into_response(),
    };
    match control_plane.admin(request).await {
        Ok(reply) => Json(reply).into_response(),
        Err(error) => admin_error(error).into_response(),
    }
}

/// `consistency=local|linearizable` from the query string.
fn local_consistency(query: Option<&str>) -> Result<bool, ApiError> {
    let mut local = false;
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        match pair.split_once('=') {
            Some(("consistency", "local")) => local = true,
            Some(("consistency", "linearizable")) => local = false,
            _ => {
                return Err(ApiError::bad_request(format!(
                    "unknown query parameter {pair:?} (allowed: consistency=local or consistency=linearizable)"
                )))
            }
        }
    }
    Ok(local)
}

async fn metadata<S: ControlPlaneHost>(
    State(host): State<Arc<S>>,
    RawQuery(query): RawQuery,
) -> Result<Json<ClusterMetadata>, ApiError> {
    let local = local_consistency(query.as_deref())?;
    let control_plane = host.control_plane().ok_or_else(no_control_plane)?;
    let client = control_plane.metadata();
    let leader = client.leader();
    let described = if local {
        client.read_local(|state, _| describe(state, leader))
    } else {
        client
            .read_linearizable(|state| describe(state, leader))
            .await
            .map_err(|error| {
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "metadata_unavailable",
                    format!("{error} (?consistency=local reads this broker's possibly stale copy)"),
                )
            })?
    };
    described.map(Json).map_err(|error| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "corrupt_metadata",
            error.to_string(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_consistency_parameter_is_parsed_strictly() {
        assert_eq!(local_consistency(None), Ok(false));
        assert_eq!(local_consistency(Some("consistency=local")), Ok(true));
        assert_eq!(
            local_consistency(Some("consistency=linearizable")),
            Ok(false)
        );
        let error = local_consistency(Some("consistency=eventual")).unwrap_err();
        assert_eq!(error.body.error, "bad_request");
    }

    #[test]
    fn admin_errors_map_to_their_status_and_code() {
        let error = admin_error(AdminError::NotController {
            controller: Some(3),
        });
        assert_eq!(error.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            (error.body.error.as_str(), error.body.leader),
            ("not_controller", Some(3))
        );
        let error = admin_error(AdminError::TopicExists("t".into()));
        assert_eq!(error.status, StatusCode::CONFLICT);
    }
}
