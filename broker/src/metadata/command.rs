//! What the metadata log carries ([`Command`]) and what applying an entry returns
//! ([`CommandResult`]).

use serde::{Deserialize, Serialize};

use super::{LogIndex, SessionId, Version};

/// One replicated entry of the metadata log. Every variant is applied identically on
/// every replica by [`super::MetadataState::apply`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Opens a session that lives while it is renewed within `ttl_ms`.
    OpenSession { ttl_ms: u64 },
    /// Renews a session (a client's keep-alive).
    Heartbeat { session: SessionId },
    /// Proposed by the Raft leader when its [`super::SessionTracker`] says the session
    /// outlived its TTL. `renewed_index` is the session's renewal the leader's deadline was
    /// computed from; if the session was renewed since, the expiry is refused
    /// ([`StoreError::StaleExpiry`]). Removes the session and its ephemeral nodes.
    ExpireSession {
        session: SessionId,
        renewed_index: LogIndex,
    },
    /// Proposed by a new Raft leader: renews every session, so that no session expires
    /// before a full TTL has passed under the new leader, and any expiry an earlier leader
    /// decided becomes stale.
    RenewAllSessions,
    /// Ends a session at the client's request, removing its ephemeral nodes.
    CloseSession { session: SessionId },
    /// One node operation (create, set, delete, check), as in a multi-op of one.
    Op(Op),
    /// Applies every op in order, each seeing the effects of the ones before it, or none
    /// of them: the first failing op is reported and the state is left as it was.
    Multi(Vec<Op>),
}

/// One node operation: alone as [`Command::Op`], or one of a [`Command::Multi`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    Create {
        path: String,
        data: Vec<u8>,
        ephemeral_session: Option<SessionId>,
    },
    Set {
        path: String,
        data: Vec<u8>,
        expected_version: Option<Version>,
    },
    Delete {
        path: String,
        expected_version: Option<Version>,
    },
    Check {
        path: String,
        version: Version,
    },
}

/// What a successful command returns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    SessionOpened(SessionId),
    /// A session command that succeeded.
    Done,
    Op(OpReply),
    /// One reply per op, in order.
    Multi(Vec<OpReply>),
}

/// What a successful [`Op`] returns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpReply {
    Created,
    /// The node's new version.
    Set {
        version: Version,
    },
    Deleted,
    Checked,
}

/// How a node changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChangeKind {
    Created,
    DataChanged,
    /// Deleted explicitly or removed with its ephemeral owner's session.
    Deleted,
}

/// A node changed by the entry at `index`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathChange {
    pub path: String,
    pub kind: ChangeKind,
    pub index: LogIndex,
}

/// The result of applying one entry: the reply for the proposer, and the nodes that
/// changed (empty when the command failed, since a failed command changes nothing), for
/// the [`super::WatchRegistry`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandResult {
    pub outcome: Result<Reply, StoreError>,
    pub changes: Vec<PathChange>,
}

/// Why a command was refused. A refused command changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum StoreError {
    #[error("invalid path {path:?}: {reason}")]
    InvalidPath { path: String, reason: String },
    #[error("no node {path}")]
    NoNode { path: String },
    #[error("node {path} already exists")]
    NodeExists { path: String },
    #[error("the parent of {path} does not exist")]
    NoParent { path: String },
    /// ZooKeeper's NoChildrenForEphemerals: an ephemeral node would outlive its children's
    /// meaning when its session ends, so it may not have any.
    #[error("the parent of {path} is ephemeral and cannot have children")]
    EphemeralParent { path: String },
    #[error("node {path} has children")]
    NotEmpty { path: String },
    /// The node changed since the writer read it.
    #[error("node {path} is at version {actual}, the command expected {expected}")]
    BadVersion {
        path: String,
        expected: Version,
        actual: Version,
    },
    /// No live session with this id: it expired, was closed, or never existed. The client
    /// must open a new session.
    #[error("{session} has expired or does not exist")]
    SessionExpired { session: SessionId },
    /// The session was renewed after the leader computed its deadline.
    #[error("{session} was renewed at index {actual}, the expiry was computed from {expected}")]
    StaleExpiry {
        session: SessionId,
        expected: LogIndex,
        actual: LogIndex,
    },
    /// A zero TTL would expire the session before its first heartbeat could arrive.
    #[error("a session TTL must be positive")]
    InvalidTtl,
    /// The op at `op_index` failed, so no op of the multi was applied.
    #[error("multi-op {op_index} failed: {error}")]
    MultiFailed {
        op_index: usize,
        error: Box<StoreError>,
    },
}
