//! [`MetadataState`]: the tree of nodes and the sessions, and the one way to change them,
//! [`MetadataState::apply`].

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use serde::{Deserialize, Serialize};

use super::command::StoreError;
use super::command::{ChangeKind, Command, CommandResult, Op, OpReply, PathChange, Reply};
use super::path::{self, ROOT};
use super::watch::WatchTarget;
use super::{LogIndex, SessionId, Version};

/// One node of the tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Node {
    data: Vec<u8>,
    version: Version,
    ephemeral_owner: Option<SessionId>,
    created_index: LogIndex,
    modified_index: LogIndex,
    /// The index that last added or removed a child (ZooKeeper's pzxid): a deletion leaves
    /// no node behind, so this is what records that it happened.
    children_index: LogIndex,
    /// Child names, kept so that listing and the not-empty check need no scan.
    children: BTreeSet<String>,
}

impl Node {
    fn new(data: Vec<u8>, ephemeral_owner: Option<SessionId>, index: LogIndex) -> Node {
        Node {
            data,
            version: 0,
            ephemeral_owner,
            created_index: index,
            modified_index: index,
            children_index: index,
            children: BTreeSet::new(),
        }
    }
}

/// A live session as the replicated state records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    pub ttl_ms: u64,
    pub opened_index: LogIndex,
    /// The index of the session's last renewal: its opening, its last heartbeat, or the
    /// last [`Command::RenewAllSessions`]. The leader's deadline counts from when it saw
    /// this index applied; an expiry names it to prove no renewal came since.
    pub renewed_index: LogIndex,
}

/// What the read API reports about a node besides its data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stat {
    pub version: Version,
    pub ephemeral_owner: Option<SessionId>,
    pub created_index: LogIndex,
    pub modified_index: LogIndex,
    pub children_index: LogIndex,
    pub num_children: usize,
}

/// A snapshot could not be restored.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot is not valid JSON for the metadata state: {0}")]
    Decode(#[from] serde_json::Error),
    #[error("snapshot breaks a state invariant: {0}")]
    Inconsistent(String),
}

/// The replicated state: serde-serializable as a whole so that it is its own snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataState {
    /// Keyed by full path; ordered, so that iteration (and hence apply) is deterministic.
    nodes: BTreeMap<String, Node>,
    sessions: BTreeMap<SessionId, Session>,
    next_session: u64,
}

impl Default for MetadataState {
    fn default() -> MetadataState {
        MetadataState::new()
    }
}

/// The original value of every node a multi-op touched, to undo it if a later op fails.
#[derive(Default)]
struct Journal {
    saved: BTreeMap<String, Option<Node>>,
}

impl Journal {
    fn save(&mut self, nodes: &BTreeMap<String, Node>, path: &str) {
        if !self.saved.contains_key(path) {
            self.saved
                .insert(path.to_string(), nodes.get(path).cloned());
        }
    }

    fn restore(self, nodes: &mut BTreeMap<String, Node>) {
        for (path, original) in self.saved {
            match original {
                Some(node) => nodes.insert(path, node),
                None => nodes.remove(&path),
            };
        }
    }
}

impl MetadataState {
    /// An empty tree (just the root) with no sessions.
    pub fn new() -> MetadataState {
        let mut nodes = BTreeMap::new();
        nodes.insert(ROOT.to_string(), Node::new(Vec::new(), None, 0));
        MetadataState {
            nodes,
            sessions: BTreeMap::new(),
            next_session: 1,
        }
    }

    /// Applies the log entry at `index`. Pure: the result depends only on the state, the
    /// index and the command. A refused command leaves the state unchanged.
    pub fn apply(&mut self, index: LogIndex, command: Command) -> CommandResult {
        let mut changes = Vec::new();
        let outcome = match command {
            Command::OpenSession { ttl_ms } => self.open_session(index, ttl_ms),
            Command::Heartbeat { session } => match self.sessions.get_mut(&session) {
                Some(s) => {
                    s.renewed_index = index;
                    Ok(Reply::Done)
                }
                None => Err(StoreError::SessionExpired { session }),
            },
            Command::ExpireSession {
                session,
                renewed_index,
            } => match self.sessions.get(&session) {
                None => Err(StoreError::SessionExpired { session }),
                Some(s) if s.renewed_index != renewed_index => Err(StoreError::StaleExpiry {
                    session,
                    expected: renewed_index,
                    actual: s.renewed_index,
                }),
                Some(_) => {
                    self.end_session(index, session, &mut changes);
                    Ok(Reply::Done)
                }
            },
            Command::RenewAllSessions => {
                for s in self.sessions.values_mut() {
                    s.renewed_index = index;
                }
                Ok(Reply::Done)
            }
            Command::CloseSession { session } => {
                if self.sessions.contains_key(&session) {
                    self.end_session(index, session, &mut changes);
                    Ok(Reply::Done)
                } else {
                    Err(StoreError::SessionExpired { session })
                }
            }
            Command::Op(op) => self.apply_op(index, op, &mut changes).map(Reply::Op),
            Command::Multi(ops) => self.multi(index, ops, &mut changes),
        };
        if outcome.is_err() {
            changes.clear();
        }
        CommandResult { outcome, changes }
    }

    fn open_session(&mut self, index: LogIndex, ttl_ms: u64) -> Result<Reply, StoreError> {
        if ttl_ms == 0 {
            return Err(StoreError::InvalidTtl);
        }
        let id = SessionId(self.next_session);
        self.next_session += 1;
        self.sessions.insert(
            id,
            Session {
                ttl_ms,
                opened_index: index,
                renewed_index: index,
            },
        );
        Ok(Reply::SessionOpened(id))
    }

    /// Removes a session and every node it owns. Ephemeral nodes are leaves (they cannot
    /// have children), so they can be removed in any order.
    fn end_session(&mut self, index: LogIndex, session: SessionId, changes: &mut Vec<PathChange>) {
        self.sessions.remove(&session);
        for path in self.ephemerals_of(session) {
            self.remove_node(index, &path);
            changes.push(PathChange {
                path,
                kind: ChangeKind::Deleted,
                index,
            });
        }
    }

    fn remove_node(&mut self, index: LogIndex, path: &str) {
        self.nodes.remove(path);
        if let Some(parent) = path::parent(path).and_then(|p| self.nodes.get_mut(p)) {
            parent.children.remove(path::name(path));
            parent.children_index = index;
        }
    }

    fn multi(
        &mut self,
        index: LogIndex,
        ops: Vec<Op>,
        changes: &mut Vec<PathChange>,
    ) -> Result<Reply, StoreError> {
        let mut journal = Journal::default();
        let mut replies = Vec::with_capacity(ops.len());
        for (op_index, op) in ops.into_iter().enumerate() {
            // An op changes at most its own node and its parent.
            let target = match &op {
                Op::Create { path, .. } | Op::Set { path, .. } | Op::Delete { path, .. } => {
                    Some(path.clone())
                }
                Op::Check { .. } => None,
            };
            if let Some(target) = target {
                journal.save(&self.nodes, &target);
                if let Some(parent) = path::parent(&target) {
                    journal.save(&self.nodes, parent);
                }
            }
            match self.apply_op(index, op, changes) {
                Ok(reply) => replies.push(reply),
                Err(error) => {
                    journal.restore(&mut self.nodes);
                    return Err(StoreError::MultiFailed {
                        op_index,
                        error: Box::new(error),
                    });
                }
            }
        }
        Ok(Reply::Multi(replies))
    }

    /// Applies one op. Each op checks everything before it mutates anything, so a failed
    /// op changes nothing on its own; a multi-op undoes the ops before it.
    fn apply_op(
        &mut self,
        index: LogIndex,
        op: Op,
        changes: &mut Vec<PathChange>,
    ) -> Result<OpReply, StoreError> {
        match op {
            Op::Create {
                path,
                data,
                ephemeral_session,
            } => {
                path::validate(&path)?;
                let parent_path = match path::parent(&path) {
                    Some(p) if !self.nodes.contains_key(&path) => p,
                    _ => return Err(StoreError::NodeExists { path }),
                };
                let parent = match self.nodes.get(parent_path) {
                    Some(parent) => parent,
                    None => return Err(StoreError::NoParent { path }),
                };
                if parent.ephemeral_owner.is_some() {
                    return Err(StoreError::EphemeralParent { path });
                }
                if let Some(session) = ephemeral_session {
                    if !self.sessions.contains_key(&session) {
                        return Err(StoreError::SessionExpired { session });
                    }
                }
                let name = path::name(&path).to_string();
                if let Some(parent) = self.nodes.get_mut(parent_path) {
                    parent.children.insert(name);
                    parent.children_index = index;
                }
                self.nodes
                    .insert(path.clone(), Node::new(data, ephemeral_session, index));
                changes.push(PathChange {
                    path,
                    kind: ChangeKind::Created,
                    index,
                });
                Ok(OpReply::Created)
            }
            Op::Set {
                path,
                data,
                expected_version,
            } => {
                path::validate(&path)?;
                let node = match self.nodes.get_mut(&path) {
                    Some(node) => node,
                    None => return Err(StoreError::NoNode { path }),
                };
                check_version(&path, node, expected_version)?;
                node.data = data;
                node.version += 1;
                node.modified_index = index;
                let version = node.version;
                changes.push(PathChange {
                    path,
                    kind: ChangeKind::DataChanged,
                    index,
                });
                Ok(OpReply::Set { version })
            }
            Op::Delete {
                path,
                expected_version,
            } => {
                path::validate(&path)?;
                if path == ROOT {
                    return Err(StoreError::InvalidPath {
                        path,
                        reason: "the root cannot be deleted".to_string(),
                    });
                }
                let node = match self.nodes.get(&path) {
                    Some(node) => node,
                    None => return Err(StoreError::NoNode { path }),
                };
                check_version(&path, node, expected_version)?;
                if !node.children.is_empty() {
                    return Err(StoreError::NotEmpty { path });
                }
                self.remove_node(index, &path);
                changes.push(PathChange {
                    path,
                    kind: ChangeKind::Deleted,
                    index,
                });
                Ok(OpReply::Deleted)
            }
            Op::Check { path, version } => {
                path::validate(&path)?;
                match self.nodes.get(&path) {
                    Some(node) => check_version(&path, node, Some(version))?,
                    None => return Err(StoreError::NoNode { path }),
                }
                Ok(OpReply::Checked)
            }
        }
    }

    /// The node's data and version.
    pub fn get(&self, path: &str) -> Option<(&[u8], Version)> {
        self.nodes
            .get(path)
            .map(|node| (node.data.as_slice(), node.version))
    }

    pub fn stat(&self, path: &str) -> Option<Stat> {
        self.nodes.get(path).map(|node| Stat {
            version: node.version,
            ephemeral_owner: node.ephemeral_owner,
            created_index: node.created_index,
            modified_index: node.modified_index,
            children_index: node.children_index,
            num_children: node.children.len(),
        })
    }

    pub fn exists(&self, path: &str) -> bool {
        self.nodes.contains_key(path)
    }

    /// The names (last segments) of a node's children, sorted; `None` if there is no node.
    pub fn children(&self, path: &str) -> Option<Vec<String>> {
        self.nodes
            .get(path)
            .map(|node| node.children.iter().cloned().collect())
    }

    pub fn session(&self, session: SessionId) -> Option<&Session> {
        self.sessions.get(&session)
    }

    /// Live sessions in id order.
    pub fn sessions(&self) -> impl Iterator<Item = (SessionId, &Session)> {
        self.sessions.iter().map(|(id, s)| (*id, s))
    }

    /// The paths of the nodes `session` owns, sorted.
    pub fn ephemerals_of(&self, session: SessionId) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|(_, node)| node.ephemeral_owner == Some(session))
            .map(|(path, _)| path.clone())
            .collect()
    }

    /// The latest index that changed anything `target` watches, conservatively: a
    /// deletion leaves no node, so for a missing node this is the nearest existing
    /// ancestor's `children_index`, which may also count unrelated siblings. A watcher
    /// that saw the state at `seen` has missed a change iff this is greater than `seen`
    /// (or, for a missing node's sibling change, gets a spurious but harmless wake-up).
    pub fn last_change(&self, target: &WatchTarget) -> LogIndex {
        let root = match target {
            WatchTarget::Node(p) | WatchTarget::Subtree(p) => p.as_str(),
        };
        if !self.nodes.contains_key(root) {
            let mut ancestor = path::parent(root);
            while let Some(p) = ancestor {
                if let Some(node) = self.nodes.get(p) {
                    return node.children_index;
                }
                ancestor = path::parent(p);
            }
            return 0;
        }
        match target {
            WatchTarget::Node(p) => self.nodes.get(p).map_or(0, |node| node.modified_index),
            WatchTarget::Subtree(p) => {
                let own = self
                    .nodes
                    .get(p)
                    .map_or(0, |node| node.modified_index.max(node.children_index));
                // Descendants sort contiguously after `p/`; `p-x` (which sorts between
                // `p` and `p/`) is not in the subtree.
                let prefix = if p == ROOT {
                    ROOT.to_string()
                } else {
                    format!("{p}/")
                };
                self.nodes
                    .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
                    .take_while(|(path, _)| path.starts_with(&prefix))
                    .map(|(_, node)| node.modified_index.max(node.children_index))
                    .fold(own, LogIndex::max)
            }
        }
    }

    /// Serializes the whole state (the Raft snapshot).
    pub fn to_snapshot(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(self)
    }

    /// Restores a state from [`MetadataState::to_snapshot`], refusing one that breaks the
    /// invariants `apply` maintains (a corrupt or hand-edited file), since apply relies on
    /// them.
    pub fn from_snapshot(bytes: &[u8]) -> Result<MetadataState, SnapshotError> {
        let state: MetadataState = serde_json::from_slice(bytes)?;
        state
            .check_invariants()
            .map_err(SnapshotError::Inconsistent)?;
        Ok(state)
    }

    /// The structural invariants: the root exists; every other node's parent exists and
    /// lists it, and every listed child exists; ephemeral nodes belong to live sessions and
    /// have no children; session ids are below the next one to allocate.
    pub fn check_invariants(&self) -> Result<(), String> {
        if !self.nodes.contains_key(ROOT) {
            return Err("no root node".to_string());
        }
        for (path, node) in &self.nodes {
            path::validate(path).map_err(|e| e.to_string())?;
            if let Some(parent) = path::parent(path) {
                match self.nodes.get(parent) {
                    Some(p) if p.children.contains(path::name(path)) => {}
                    Some(_) => return Err(format!("{parent} does not list its child {path}")),
                    None => return Err(format!("{path} has no parent")),
                }
            }
            for child in &node.children {
                if !self.nodes.contains_key(&path::join(path, child)) {
                    return Err(format!("{path} lists a missing child {child}"));
                }
            }
            if let Some(owner) = node.ephemeral_owner {
                if !self.sessions.contains_key(&owner) {
                    return Err(format!("{path} is owned by the dead {owner}"));
                }
                if !node.children.is_empty() {
                    return Err(format!("ephemeral {path} has children"));
                }
            }
        }
        if let Some((id, _)) = self.sessions.last_key_value() {
            if id.0 >= self.next_session {
                return Err(format!(
                    "{id} is not below the next id {}",
                    self.next_session
                ));
            }
        }
        Ok(())
    }
}

fn check_version(path: &str, node: &Node, expected: Option<Version>) -> Result<(), StoreError> {
    match expected {
        Some(expected) if expected != node.version => Err(StoreError::BadVersion {
            path: path.to_string(),
            expected,
            actual: node.version,
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(path: &str) -> Command {
        Command::Op(Op::Create {
            path: path.to_string(),
            data: Vec::new(),
            ephemeral_session: None,
        })
    }

    #[test]
    fn indexes_record_creation_modification_and_child_changes() {
        let mut state = MetadataState::new();
        assert!(state.apply(3, create("/a")).outcome.is_ok());
        assert!(state.apply(5, create("/a/b")).outcome.is_ok());
        let set = Command::Op(Op::Set {
            path: "/a".to_string(),
            data: b"d".to_vec(),
            expected_version: None,
        });
        assert!(state.apply(8, set).outcome.is_ok());
        let delete = Command::Op(Op::Delete {
            path: "/a/b".to_string(),
            expected_version: None,
        });
        assert!(state.apply(9, delete).outcome.is_ok());
        assert_eq!(
            state.stat("/a"),
            Some(Stat {
                version: 1,
                ephemeral_owner: None,
                created_index: 3,
                modified_index: 8,
                children_index: 9,
                num_children: 0,
            })
        );
        assert_eq!(state.last_change(&WatchTarget::Node("/a/b".to_string())), 9);
        assert_eq!(
            state.last_change(&WatchTarget::Subtree("/a".to_string())),
            9
        );
        assert_eq!(state.last_change(&WatchTarget::Node("/x/y".to_string())), 3);
    }

    #[test]
    fn a_subtree_change_index_ignores_lookalike_siblings() {
        let mut state = MetadataState::new();
        assert!(state.apply(1, create("/a")).outcome.is_ok());
        assert!(state.apply(2, create("/a/b")).outcome.is_ok());
        // `/a-b` sorts between `/a` and `/a/b`; `/ab` after them.
        assert!(state.apply(3, create("/a-b")).outcome.is_ok());
        assert!(state.apply(4, create("/ab")).outcome.is_ok());
        assert_eq!(
            state.last_change(&WatchTarget::Subtree("/a".to_string())),
            2
        );
        assert_eq!(state.last_change(&WatchTarget::Subtree("/".to_string())), 4);
    }

    #[test]
    fn sessions_need_a_positive_ttl_and_get_increasing_ids() {
        let mut state = MetadataState::new();
        assert_eq!(
            state.apply(1, Command::OpenSession { ttl_ms: 0 }).outcome,
            Err(StoreError::InvalidTtl)
        );
        assert_eq!(
            state.apply(2, Command::OpenSession { ttl_ms: 10 }).outcome,
            Ok(Reply::SessionOpened(SessionId(1)))
        );
        assert_eq!(
            state.apply(3, Command::OpenSession { ttl_ms: 10 }).outcome,
            Ok(Reply::SessionOpened(SessionId(2)))
        );
        assert_eq!(
            state.session(SessionId(2)),
            Some(&Session {
                ttl_ms: 10,
                opened_index: 3,
                renewed_index: 3
            })
        );
    }
}
