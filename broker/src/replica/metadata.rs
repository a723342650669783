//! Where partition state (leader, leader epoch, ISR) is recorded: the role ZooKeeper's
//! `/brokers/topics/T/partitions/P/state` znode played. Writes are conditional on the
//! state's version, so a leader with a stale view cannot overwrite a newer decision.
//!
//! The real store (the metadata quorum) arrives with the control plane; the in-memory one
//! here serves the core's tests and the simulator.

use std::collections::BTreeMap;

use super::config::BrokerId;
use crate::record::LeaderEpoch;

/// A controller's generation; bumped on every controller election.
pub type ControllerEpoch = u32;
/// The version of a partition's state in the store (ZooKeeper's zkVersion).
pub type StateVersion = u64;

/// Names a partition in the store.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: u32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: u32) -> TopicPartition {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

/// The stored partition state, as Kafka's znode holds it (stored as this struct's JSON in
/// the metadata quorum, see `metadata::layout`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PartitionState {
    /// `None` while the partition is offline (no electable replica).
    pub leader: Option<BrokerId>,
    pub leader_epoch: LeaderEpoch,
    pub isr: Vec<BrokerId>,
    /// The epoch of the controller that wrote it, or whose state the leader last saw.
    pub controller_epoch: ControllerEpoch,
    /// The assignment.
    pub replicas: Vec<BrokerId>,
}

/// A state together with the version it has in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionedState {
    pub state: PartitionState,
    pub version: StateVersion,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    /// The state changed since the writer read it (ZooKeeper's BadVersion).
    #[error("partition state version is {actual:?}, the write expected {expected}")]
    VersionConflict {
        expected: StateVersion,
        actual: Option<StateVersion>,
    },
    #[error("partition state already exists")]
    AlreadyExists,
    /// The store could not be reached or did not answer; the write may or may not apply.
    #[error("metadata store unavailable: {0}")]
    Unavailable(String),
}

/// A store of versioned partition states.
pub trait MetadataStore {
    fn read(&self, partition: &TopicPartition) -> Option<VersionedState>;
    /// Creates the state at version 0; fails if it exists.
    fn create(
        &mut self,
        partition: &TopicPartition,
        state: PartitionState,
    ) -> Result<StateVersion, MetadataError>;
    /// Replaces the state if its version is still `expected_version`, returning the new
    /// version.
    fn write_if_version(
        &mut self,
        partition: &TopicPartition,
        state: PartitionState,
        expected_version: StateVersion,
    ) -> Result<StateVersion, MetadataError>;
}

/// A [`MetadataStore`] in memory: versions count writes from 0, as znode versions do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InMemoryMetadataStore {
    states: BTreeMap<TopicPartition, VersionedState>,
}

impl InMemoryMetadataStore {
    pub fn new() -> InMemoryMetadataStore {
        InMemoryMetadataStore::default()
    }
}

impl MetadataStore for InMemoryMetadataStore {
    fn read(&self, partition: &TopicPartition) -> Option<VersionedState> {
        self.states.get(partition).cloned()
    }

    fn create(
        &mut self,
        partition: &TopicPartition,
        state: PartitionState,
    ) -> Result<StateVersion, MetadataError> {
        if self.states.contains_key(partition) {
            return Err(MetadataError::AlreadyExists);
        }
        self.states
            .insert(partition.clone(), VersionedState { state, version: 0 });
        Ok(0)
    }

    fn write_if_version(
        &mut self,
        partition: &TopicPartition,
        state: PartitionState,
        expected_version: StateVersion,
    ) -> Result<StateVersion, MetadataError> {
        match self.states.get_mut(partition) {
            Some(current) if current.version == expected_version => {
                current.version += 1;
                current.state = state;
                Ok(current.version)
            }
            current => Err(MetadataError::VersionConflict {
                expected: expected_version,
                actual: current.map(|c| c.version),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_conditional_on_the_version() {
        let tp = TopicPartition::new("t", 0);
        let state = PartitionState {
            leader: Some(1),
            leader_epoch: 0,
            isr: vec![1, 2],
            controller_epoch: 1,
            replicas: vec![1, 2],
        };
        let mut store = InMemoryMetadataStore::new();
        assert_eq!(
            store.write_if_version(&tp, state.clone(), 0),
            Err(MetadataError::VersionConflict {
                expected: 0,
                actual: None
            })
        );
        assert_eq!(store.create(&tp, state.clone()), Ok(0));
        assert_eq!(
            store.create(&tp, state.clone()),
            Err(MetadataError::AlreadyExists)
        );
        let shrunk = PartitionState {
            isr: vec![1],
            ..state.clone()
        };
        assert_eq!(store.write_if_version(&tp, shrunk.clone(), 0), Ok(1));
        assert_eq!(
            store.write_if_version(&tp, state, 0),
            Err(MetadataError::VersionConflict {
                expected: 0,
                actual: Some(1)
            })
        );
        assert_eq!(
            store.read(&tp),
            Some(VersionedState {
                state: shrunk,
                version: 1
            })
        );
    }
}
