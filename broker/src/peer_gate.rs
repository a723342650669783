//! The door of the peer listeners (replication, metadata) and of the failpoint endpoints:
//! on a cluster with a secret (`cluster_secret` in node.toml), a request passes only when
//! it is signed with it ([`peer_auth`]) by a sender the door admits; the request then
//! carries the sender it proved ([`Authenticated`]), for the handlers that check what a
//! peer says about itself (a Raft vote names its candidate). On a cluster without a
//! secret every request passes, marked unauthenticated.
//!
//! Refusals: `401 unauthenticated` (no signature, a bad one, or a malformed sender) and
//! `403 not_a_peer` (signed, by a sender this door does not admit), each with the reason;
//! a body over [`MAX_SIGNED_BODY_BYTES`] is `413`.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use peer_auth::{ClusterSecret, Sender, Signer, MAC_HEADER, SENDER_HEADER};
use serde_json::json;

use crate::config::NodeConfig;

/// The largest body the door reads to check its signature (a Raft snapshot chunk or an
/// append batch fits, as on the metadata listener).
pub const MAX_SIGNED_BODY_BYTES: usize = 64 << 20;

/// The sender a request proved, `None` on a cluster without a secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Authenticated(pub Option<Sender>);

impl Authenticated {
    /// Whether the request may speak for broker `id`: it proved to be that broker, or the
    /// cluster has no secret (nobody proves anything there).
    pub fn may_speak_for(&self, id: u32) -> bool {
        match self.0 {
            None => true,
            Some(Sender::Broker(sender)) => sender == id,
            Some(Sender::Harness) => false,
        }
    }
}

/// Who a door admits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admits {
    /// The cluster's brokers (the peer listeners).
    Brokers,
    /// The cluster's brokers and the harness (failpoints).
    BrokersAndHarness,
}

/// One listener's door.
#[derive(Debug, Clone)]
pub struct PeerGate {
    listener: &'static str,
    secret: Option<ClusterSecret>,
    brokers: Arc<BTreeSet<u32>>,
    admits: Admits,
    /// When a refusal was last logged (ms since `started`), so that a flood of forged
    /// requests costs a line a second, not a line each.
    last_logged_ms: Arc<AtomicU64>,
    started: Instant,
}

impl PeerGate {
    /// The door of `listener` of the broker configured by `config`.
    pub fn new(config: &NodeConfig, listener: &'static str, admits: Admits) -> PeerGate {
        PeerGate {
            listener,
            secret: config.cluster_secret.clone(),
            brokers: Arc::new(config.brokers.iter().map(|p| p.id).collect()),
            admits,
            last_logged_ms: Arc::new(AtomicU64::new(u64::MAX)),
            started: Instant::now(),
        }
    }

    /// The middleware that guards a router (`Router::layer`) or a route (`route_layer`).
    pub async fn check(State(gate): State<PeerGate>, request: Request, next: Next) -> Response {
        let Some(secret) = &gate.secret else {
            let mut request = request;
            request.extensions_mut().insert(Authenticated(None));
            return next.run(request).await;
        };
        let (mut parts, body) = request.into_parts();
        let body = match axum::body::to_bytes(body, MAX_SIGNED_BODY_BYTES).await {
            Ok(body) => body,
            Err(error) => {
                return refuse(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "body_unreadable",
                    format!("the body could not be read whole (at most {MAX_SIGNED_BODY_BYTES} bytes): {error}"),
                )
            }
        };
        let path_and_query = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let verdict = peer_auth::verify(
            secret,
            parts.headers.get(SENDER_HEADER).map(|v| v.as_bytes()),
            parts.headers.get(MAC_HEADER).map(|v| v.as_bytes()),
            parts.method.as_str(),
            path_and_query,
            &body,
        );
        match verdict {
            Ok(sender) if gate.admits(sender) => {
                parts.extensions.insert(Authenticated(Some(sender)));
                next.run(Request::from_parts(parts, Body::from(body))).await
            }
            Ok(sender) => {
                let reason = format!(
                    "{sender} is not a peer of this cluster on the {} listener",
                    gate.listener
                );
                gate.log_refusal(&reason);
                refuse(StatusCode::FORBIDDEN, "not_a_peer", reason)
            }
            Err(error) => {
                let reason = error.to_string();
                gate.log_refusal(&reason);
                refuse(StatusCode::UNAUTHORIZED, "unauthenticated", reason)
            }
        }
    }

    fn admits(&self, sender: Sender) -> bool {
        match sender {
            Sender::Broker(id) => self.brokers.contains(&id),
            Sender::Harness => self.admits == Admits::BrokersAndHarness,
        }
    }

    fn log_refusal(&self, reason: &str) {
        let now = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        let last = self.last_logged_ms.load(Ordering::Relaxed);
        let due = last == u64::MAX || now.saturating_sub(last) >= 1_000;
        if due
            && self
                .last_logged_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(
                listener = self.listener,
                reason,
                "request refused at the peer door (at most one such line a second)"
            );
        }
    }
}

fn refuse(status: StatusCode, code: &str, message: String) -> Response {
    (status, Json(json!({ "error": code, "message": message }))).into_response()
}

/// What this broker signs its requests to its peers with.
pub fn signer(config: &NodeConfig) -> Signer {
    Signer::new(
        config.cluster_secret.clone(),
        Sender::Broker(config.broker_id),
    )
}

/// Says once, at start, that the peer listeners answer anyone.
pub fn warn_if_open(config: &NodeConfig) {
    if config.cluster_secret.is_none() {
        tracing::warn!(
            broker = config.broker_id,
            "no cluster_secret in the configuration: the replication and metadata listeners and the failpoint endpoints accept requests from anyone"
        );
    }
}
