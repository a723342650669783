//! The openraft type configuration of the metadata quorum: entries carry [`Command`]s,
//! applying one yields its [`CommandResult`], nodes are brokers (by id, reached at their
//! metadata address). Everything else in `raft/` names these aliases, not openraft's
//! generic types.

use std::io::Cursor;

use crate::metadata::{Command, CommandResult};
use crate::replica::BrokerId;

openraft::declare_raft_types!(
    /// The metadata quorum's Raft types.
    pub TypeConfig:
        D = Command,
        // `None` for an entry that carries no command (blank, membership) and for a
        // replayed one; `Some` with the command's result otherwise.
        R = Option<CommandResult>,
        NodeId = BrokerId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

pub type NodeId = BrokerId;
pub type Node = openraft::BasicNode;
pub type Entry = openraft::Entry<TypeConfig>;
pub type LogId = openraft::LogId<NodeId>;
pub type Vote = openraft::Vote<NodeId>;
pub type StoredMembership = openraft::StoredMembership<NodeId, Node>;
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, Node>;
pub type Snapshot = openraft::Snapshot<TypeConfig>;
pub type StorageError = openraft::StorageError<NodeId>;
pub type Raft = openraft::Raft<TypeConfig>;
