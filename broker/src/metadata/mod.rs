//! The metadata store: the replicated state machine of the metadata quorum, playing the
//! role ZooKeeper played for Kafka of the JIRAs' era (DESIGN.md §2, kafka-replication.md
//! §2 "Controller").
//!
//! - [`store`]: [`MetadataState`], a tree of versioned nodes plus the sessions that own
//!   ephemeral nodes, changed only by [`MetadataState::apply`]; the read API; snapshots.
//! - [`command`]: the replicated [`Command`]s, their [`Reply`]s and typed [`StoreError`]s,
//!   and the [`PathChange`]s an applied command reports.
//! - [`session`]: [`SessionTracker`], the Raft leader's local decision of which sessions
//!   have expired, from its monotonic clock.
//! - [`watch`]: [`WatchRegistry`], one-shot watches on a node or a subtree, fired by the
//!   changes `apply` reports.
//! - [`layout`]: where the broker keeps what (`/brokers/ids/N`, `/controller`,
//!   `/partitions/T/P/state`, ...) and the JSON of each node.
//! - [`path`]: path syntax (`/brokers/ids/1`) and parent/name helpers.
//!
//! Architecture invariant: everything here is pure and deterministic. `apply` reads no
//! clock, no randomness and no environment, and iterates only ordered maps, so every Raft
//! replica applying the same log reaches byte-identical state. Time enters only as the
//! `now_ms` argument of the leader-local [`SessionTracker`], and leaves as an
//! [`Command::ExpireSession`] the leader proposes through the log.
//!
//! Semantics choices (ZooKeeper's unless said otherwise):
//! - Node data is opaque bytes; the controller stores JSON it serializes itself.
//! - A node's version is 0 at creation and +1 per set. Each node records the log index that
//!   created it, that last modified it, and that last added or removed one of its children
//!   (ZooKeeper's czxid, mzxid, pzxid); watches use them to catch up.
//! - Create requires the parent to exist (no automatic parents): a multi-op creates a path
//!   and its parents atomically when needed. Ephemeral nodes cannot have children. The root
//!   `/` always exists and cannot be created or deleted.
//! - Session ids come from a counter in the state, so they are the same on every replica.
//! - Expiry is conditional: [`Command::ExpireSession`] names the renewal (log index of the
//!   session's last heartbeat, opening or [`Command::RenewAllSessions`]) the leader's
//!   deadline was computed from, and is refused if the session was renewed since. A
//!   heartbeat racing with an expiry, or an expiry decided by a deposed leader before the
//!   new leader's renewal, therefore cannot remove a live session.

pub mod command;
pub mod layout;
pub mod path;
pub mod session;
pub mod store;
pub mod watch;

use serde::{Deserialize, Serialize};

pub use command::{ChangeKind, Command, CommandResult, Op, OpReply, PathChange, Reply, StoreError};
pub use session::SessionTracker;
pub use store::{MetadataState, Session, SnapshotError, Stat};
pub use watch::{Fired, Registration, WatchId, WatchRegistry, WatchTarget};

/// Identifies a client session; allocated by the state in the order sessions are opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SessionId(pub u64);

impl std::fmt::Display for SessionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "session {}", self.0)
    }
}

/// A node's data version (ZooKeeper's zkVersion): 0 at creation, +1 per set.
pub type Version = u64;

/// The Raft log index of the entry whose application made a change.
pub type LogIndex = u64;
