//! The metadata listener's HTTP API (axum, JSON bodies, all `POST`):
//!
//! | path | body | answer |
//! |---|---|---|
//! | `/raft/append` | openraft `AppendEntriesRequest` | `Result<AppendEntriesResponse, RaftError>` |
//! | `/raft/vote` | `VoteRequest` | `Result<VoteResponse, RaftError>` |
//! | `/raft/snapshot` | `InstallSnapshotRequest` (one chunk) | `Result<InstallSnapshotResponse, RaftError>` |
//! | `/v1/quorum/propose` | a [`Command`] | [`ProposeAnswer`] |
//! | `/v1/quorum/read-index` | none | [`ReadIndexAnswer`] |
//!
//! Every request first passes the listener's door ([`crate::peer_gate`]): on a cluster
//! with a secret, it must be signed by one of the cluster's brokers. The three Raft RPCs
//! then pass [`super::admit`]: from a node that is not one of this cluster's brokers, in
//! the name of a broker other than the one that signed it, or with a term or index no
//! cluster reaches, they are answered `403` with the reason and never reach openraft.
//!
//! The two client calls are answered by this node only: a leader proposes (or confirms
//! its lead for a read index), any other node says who leads. Forwarding and retrying
//! are the caller's ([`super::node::RaftNode`]).

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Extension;
use axum::{Json, Router};
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};

use super::admit::{admit_append, admit_snapshot, admit_vote, Refused};
use super::node::RaftNode;
use super::types::{NodeId, TypeConfig};
use crate::metadata::{Command, LogIndex, Reply, StoreError};
use crate::peer_gate::{Authenticated, PeerGate};

pub(super) const APPEND_PATH: &str = "/raft/append";
pub(super) const VOTE_PATH: &str = "/raft/vote";
pub(super) const SNAPSHOT_PATH: &str = "/raft/snapshot";
pub(super) const PROPOSE_PATH: &str = "/v1/quorum/propose";
pub(super) const READ_INDEX_PATH: &str = "/v1/quorum/read-index";

/// Snapshot chunks (1 MiB of bytes, a JSON array of numbers) and append batches fit.
const MAX_BODY_BYTES: usize = 64 << 20;

/// A node's answer to a proposal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum ProposeAnswer {
    /// Committed and applied: the store's reply or refusal.
    Applied(Result<Reply, StoreError>),
    /// Not proposed here: this node does not lead (`leader` is who does, if known). The
    /// command was not applied and may be sent again.
    NotLeader { leader: Option<NodeId> },
    /// Proposed, outcome unknown (no commit within the bound, or the node stopping).
    Unavailable(String),
}

/// A node's answer to a read-index request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum ReadIndexAnswer {
    /// The leader confirmed its lead with a quorum: reads must wait for this index.
    Index(LogIndex),
    NotLeader {
        leader: Option<NodeId>,
    },
    Unavailable(String),
}

/// The routes, over `node`.
pub(super) fn router(node: Arc<RaftNode>, door: PeerGate) -> Router {
    Router::new()
        .route(APPEND_PATH, post(append))
        .route(VOTE_PATH, post(vote))
        .route(SNAPSHOT_PATH, post(snapshot))
        .route(PROPOSE_PATH, post(propose))
        .route(READ_INDEX_PATH, post(read_index))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(door, PeerGate::check))
        .with_state(node)
}

async fn append(
    State(node): State<Arc<RaftNode>>,
    sender: Option<Extension<Authenticated>>,
    Json(rpc): Json<AppendEntriesRequest<TypeConfig>>,
) -> Response {
    if let Err(refused) = admit_append(|id| node.is_member(id), &rpc)
        .and_then(|()| admit_sender(sender, rpc.vote.leader_id.node_id))
    {
        return refuse(&node, "append", &refused);
    }
    let answer: Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>> =
        node.raft.append_entries(rpc).await;
    Json(answer).into_response()
}

async fn vote(
    State(node): State<Arc<RaftNode>>,
    sender: Option<Extension<Authenticated>>,
    Json(rpc): Json<VoteRequest<NodeId>>,
) -> Response {
    if let Err(refused) = admit_vote(|id| node.is_member(id), &rpc)
        .and_then(|()| admit_sender(sender, rpc.vote.leader_id.node_id))
    {
        return refuse(&node, "vote", &refused);
    }
    let answer: Result<VoteResponse<NodeId>, RaftError<NodeId>> = node.raft.vote(rpc).await;
    Json(answer).into_response()
}

async fn snapshot(
    State(node): State<Arc<RaftNode>>,
    sender: Option<Extension<Authenticated>>,
    Json(rpc): Json<InstallSnapshotRequest<TypeConfig>>,
) -> Response {
    if let Err(refused) = admit_snapshot(|id| node.is_member(id), &rpc)
        .and_then(|()| admit_sender(sender, rpc.vote.leader_id.node_id))
    {
        return refuse(&node, "snapshot", &refused);
    }
    let answer: Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>> =
        node.raft.install_snapshot(rpc).await;
    Json(answer).into_response()
}

/// The candidate or leader an RPC names must be the broker that signed it (on a cluster
/// with a secret): a broker cannot vote or lead in another's name.
fn admit_sender(sender: Option<Extension<Authenticated>>, named: NodeId) -> Result<(), Refused> {
    let sender = sender.map_or(Authenticated(None), |Extension(sender)| sender);
    if sender.may_speak_for(named) {
        Ok(())
    } else {
        Err(Refused::NotTheSender {
            named,
            sender: sender.0.map_or_else(String::new, |s| s.to_string()),
        })
    }
}

fn refuse(node: &RaftNode, rpc: &'static str, refused: &Refused) -> Response {
    tracing::warn!(broker = node.id, rpc, %refused, "Raft RPC refused");
    (StatusCode::FORBIDDEN, format!("{refused}\n")).into_response()
}

async fn propose(
    State(node): State<Arc<RaftNode>>,
    Json(command): Json<Command>,
) -> Json<ProposeAnswer> {
    Json(node.propose_here(command).await)
}

async fn read_index(State(node): State<Arc<RaftNode>>) -> Json<ReadIndexAnswer> {
    Json(node.read_index_here().await)
}
