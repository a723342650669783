//! [`WatchRegistry`]: one-shot watches on a node or a subtree, the pure core of the long
//! poll. Local to the node serving the poll (any replica that applies the log can serve
//! one), never replicated: a client whose server fails re-registers elsewhere with the
//! index it has seen, and registration catches up with what it missed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::command::{PathChange, StoreError};
use super::path;
use super::store::MetadataState;
use super::LogIndex;

/// What a watch is interested in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum WatchTarget {
    /// Creation, data change or deletion (including ephemeral removal) of one node.
    Node(String),
    /// Any change to the node or a node below it, segment-wise: `/brokers/ids` covers
    /// `/brokers/ids/1` but not `/brokers/ids2`. Child creation and deletion included.
    Subtree(String),
}

impl WatchTarget {
    fn path(&self) -> &str {
        match self {
            WatchTarget::Node(p) | WatchTarget::Subtree(p) => p,
        }
    }

    fn matches(&self, changed: &str) -> bool {
        match self {
            WatchTarget::Node(p) => p == changed,
            WatchTarget::Subtree(p) => path::in_subtree(p, changed),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct WatchId(pub u64);

/// The outcome of registering a watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registration {
    /// Nothing changed since the client's index: the watch waits for the next change.
    Pending(WatchId),
    /// Something the watch covers changed after the client's index, at `index`: answer
    /// the poll at once (the client re-reads; this may be a sibling's change, see
    /// [`MetadataState::last_change`]).
    AlreadyChanged { index: LogIndex },
}

/// A watch that fired, with the first change it matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fired {
    pub id: WatchId,
    pub change: PathChange,
}

/// The pending watches. Each fires at most once and is then removed, as ZooKeeper's.
#[derive(Debug, Clone, Default)]
pub struct WatchRegistry {
    next_id: u64,
    watches: BTreeMap<WatchId, WatchTarget>,
}

impl WatchRegistry {
    pub fn new() -> WatchRegistry {
        WatchRegistry::default()
    }

    /// Registers interest in `target` for a client that has seen the state as of
    /// `seen_index`. If `state` already shows a later change, nothing is registered and
    /// the client is told at once, so that no change between its read and its watch is
    /// lost.
    pub fn register(
        &mut self,
        target: WatchTarget,
        seen_index: LogIndex,
        state: &MetadataState,
    ) -> Result<Registration, StoreError> {
        path::validate(target.path())?;
        let last = state.last_change(&target);
        if last > seen_index {
            return Ok(Registration::AlreadyChanged { index: last });
        }
        let id = WatchId(self.next_id);
        self.next_id += 1;
        self.watches.insert(id, target);
        Ok(Registration::Pending(id))
    }

    /// Drops a watch (its long poll timed out or the client left); false if it had fired
    /// or never existed.
    pub fn cancel(&mut self, id: WatchId) -> bool {
        self.watches.remove(&id).is_some()
    }

    /// The watches the changes of one applied entry fire, in id order; they are removed.
    pub fn fire(&mut self, changes: &[PathChange]) -> Vec<Fired> {
        if changes.is_empty() {
            return Vec::new();
        }
        let mut fired = Vec::new();
        self.watches.retain(|id, target| {
            match changes.iter().find(|change| target.matches(&change.path)) {
                Some(change) => {
                    fired.push(Fired {
                        id: *id,
                        change: change.clone(),
                    });
                    false
                }
                None => true,
            }
        });
        fired
    }

    pub fn len(&self) -> usize {
        self.watches.len()
    }

    pub fn is_empty(&self) -> bool {
        self.watches.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::command::ChangeKind;

    fn change(path: &str) -> PathChange {
        PathChange {
            path: path.to_string(),
            kind: ChangeKind::Created,
            index: 7,
        }
    }

    fn pending(registry: &mut WatchRegistry, target: WatchTarget) -> WatchId {
        match registry.register(target, 0, &MetadataState::new()) {
            Ok(Registration::Pending(id)) => id,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn watches_fire_once_in_id_order_and_can_be_cancelled() {
        let mut registry = WatchRegistry::new();
        let root = pending(&mut registry, WatchTarget::Subtree("/".to_string()));
        let node = pending(&mut registry, WatchTarget::Node("/a/b".to_string()));
        let other = pending(&mut registry, WatchTarget::Node("/a".to_string()));
        let fired = registry.fire(&[change("/a/b")]);
        assert_eq!(
            fired.iter().map(|f| f.id).collect::<Vec<_>>(),
            vec![root, node]
        );
        assert!(registry.fire(&[change("/a/b")]).is_empty());
        assert!(registry.cancel(other));
        assert!(!registry.cancel(other));
        assert!(registry.is_empty());
    }

    #[test]
    fn an_invalid_path_is_refused() {
        let mut registry = WatchRegistry::new();
        assert!(matches!(
            registry.register(
                WatchTarget::Node("brokers".to_string()),
                0,
                &MetadataState::new()
            ),
            Err(StoreError::InvalidPath { .. })
        ));
        assert!(registry.is_empty());
    }
}
