//! Where the broker keeps what in the metadata store, and the JSON of each node: the
//! paths ZooKeeper held for Kafka of the JIRAs' era, renamed for clarity.
//!
//! | path | data | kind |
//! |---|---|---|
//! | `/brokers/ids/N` | [`BrokerRegistration`] (with its [`LogFailure`]s) | ephemeral, on broker N's session |
//! | `/controller` | [`ControllerRegistration`] | ephemeral, on the controller's session |
//! | `/controller_epoch` | the epoch, a JSON number | persistent; its version fences controller writes |
//! | `/topics/T` | [`TopicConfig`] | persistent |
//! | `/partitions/T/P/state` | [`PartitionState`] | persistent; its version is the leader's cached zkVersion |
//!
//! Decoding never panics: a node whose data does not parse is reported as
//! [`LayoutError::Corrupt`] with its path.

use std::net::SocketAddr;

use serde::{de::DeserializeOwned, Deserialize, Serialize};

use super::command::Op;
use super::store::MetadataState;
use crate::replica::metadata::{ControllerEpoch, PartitionState, TopicPartition, VersionedState};
use crate::replica::BrokerId;

pub const BROKERS: &str = "/brokers";
pub const BROKER_IDS: &str = "/brokers/ids";
pub const CONTROLLER: &str = "/controller";
pub const CONTROLLER_EPOCH: &str = "/controller_epoch";
pub const TOPICS: &str = "/topics";
pub const PARTITIONS: &str = "/partitions";

/// The persistent nodes every cluster has; created once, by whoever gets there first.
pub const BASE_PATHS: &[&str] = &[BROKERS, BROKER_IDS, TOPICS, PARTITIONS];

pub fn broker_path(id: BrokerId) -> String {
    format!("{BROKER_IDS}/{id}")
}

pub fn topic_path(topic: &str) -> String {
    format!("{TOPICS}/{topic}")
}

pub fn partition_state_path(tp: &TopicPartition) -> String {
    format!("{PARTITIONS}/{}/{}/state", tp.topic, tp.partition)
}

/// What `/brokers/ids/N` holds: how to reach broker N.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRegistration {
    pub id: BrokerId,
    pub replication: SocketAddr,
    pub metadata: SocketAddr,
    /// The partitions whose log failed on this broker since it registered (Kafka's
    /// log-dir failure notification): the controller moves leadership away from a replica
    /// at each new failure, and announces the partition to it again once it is back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log_failures: Vec<LogFailure>,
}

/// A partition whose log failed on a broker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogFailure {
    pub topic: String,
    pub partition: u32,
    /// How many times the log failed: each new failure is news to the controller, even
    /// when the log reopened before the controller looked.
    pub failures: u64,
    /// The log could not be reopened yet: this replica can neither lead nor follow.
    pub offline: bool,
}

impl LogFailure {
    pub fn tp(&self) -> TopicPartition {
        TopicPartition::new(self.topic.clone(), self.partition)
    }
}

/// What `/controller` holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerRegistration {
    pub broker_id: BrokerId,
}

/// What `/topics/T` holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicConfig {
    pub partitions: u32,
    pub replication_factor: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("metadata node {path} holds data that does not decode: {reason}")]
    Corrupt { path: String, reason: String },
}

pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    // Serializing these plain structs to a Vec cannot fail.
    serde_json::to_vec(value).unwrap_or_default()
}

pub fn decode<T: DeserializeOwned>(path: &str, data: &[u8]) -> Result<T, LayoutError> {
    serde_json::from_slice(data).map_err(|e| LayoutError::Corrupt {
        path: path.to_string(),
        reason: e.to_string(),
    })
}

/// The node at `path` decoded, with its version; `None` if there is no node.
pub fn read<T: DeserializeOwned>(
    state: &MetadataState,
    path: &str,
) -> Result<Option<(T, u64)>, LayoutError> {
    match state.get(path) {
        None => Ok(None),
        Some((data, version)) => Ok(Some((decode(path, data)?, version))),
    }
}

/// A partition's stored state and its version.
pub fn partition_state(
    state: &MetadataState,
    tp: &TopicPartition,
) -> Result<Option<VersionedState>, LayoutError> {
    Ok(read::<PartitionState>(state, &partition_state_path(tp))?
        .map(|(state, version)| VersionedState { state, version }))
}

/// The live brokers' registrations, by id.
pub fn live_brokers(state: &MetadataState) -> Result<Vec<BrokerRegistration>, LayoutError> {
    let mut brokers = Vec::new();
    for name in state.children(BROKER_IDS).unwrap_or_default() {
        let path = format!("{BROKER_IDS}/{name}");
        if let Some((registration, _)) = read::<BrokerRegistration>(state, &path)? {
            brokers.push(registration);
        }
    }
    brokers.sort_by_key(|b| b.id);
    Ok(brokers)
}

/// The controller's id, if there is one.
pub fn controller(state: &MetadataState) -> Result<Option<BrokerId>, LayoutError> {
    Ok(read::<ControllerRegistration>(state, CONTROLLER)?.map(|(c, _)| c.broker_id))
}

/// `/controller_epoch`'s value and version; `(0, None)` before any controller.
pub fn controller_epoch(
    state: &MetadataState,
) -> Result<(ControllerEpoch, Option<u64>), LayoutError> {
    Ok(match read::<ControllerEpoch>(state, CONTROLLER_EPOCH)? {
        Some((epoch, version)) => (epoch, Some(version)),
        None => (0, None),
    })
}

/// Every topic and its configuration, by name.
pub fn topics(state: &MetadataState) -> Result<Vec<(String, TopicConfig)>, LayoutError> {
    let mut topics = Vec::new();
    for name in state.children(TOPICS).unwrap_or_default() {
        if let Some((config, _)) = read::<TopicConfig>(state, &topic_path(&name))? {
            topics.push((name, config));
        }
    }
    topics.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(topics)
}

/// The ops creating a topic's nodes and each partition's initial state, for one
/// all-or-nothing multi-op (it fails with `NodeExists` if the topic exists).
pub fn create_topic_ops(topic: &str, config: &TopicConfig, states: &[PartitionState]) -> Vec<Op> {
    let create = |path: String, data: Vec<u8>| Op::Create {
        path,
        data,
        ephemeral_session: None,
    };
    let mut ops = vec![
        create(topic_path(topic), encode(config)),
        create(format!("{PARTITIONS}/{topic}"), Vec::new()),
    ];
    for (partition, state) in states.iter().enumerate() {
        let tp = TopicPartition::new(topic, partition as u32);
        ops.push(create(
            format!("{PARTITIONS}/{topic}/{partition}"),
            Vec::new(),
        ));
        ops.push(create(partition_state_path(&tp), encode(state)));
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::command::{Command, Reply};

    #[test]
    fn a_created_topic_reads_back() {
        let mut state = MetadataState::new();
        for (i, path) in BASE_PATHS.iter().enumerate() {
            let op = Op::Create {
                path: path.to_string(),
                data: Vec::new(),
                ephemeral_session: None,
            };
            assert!(state.apply(i as u64 + 1, Command::Op(op)).outcome.is_ok());
        }
        let config = TopicConfig {
            partitions: 2,
            replication_factor: 2,
        };
        let states: Vec<PartitionState> = (0..2)
            .map(|p| PartitionState {
                leader: Some(p + 1),
                leader_epoch: 0,
                isr: vec![p + 1, 2 - p],
                controller_epoch: 1,
                replicas: vec![p + 1, 2 - p],
            })
            .collect();
        let applied = state.apply(10, Command::Multi(create_topic_ops("t", &config, &states)));
        assert!(
            matches!(applied.outcome, Ok(Reply::Multi(_))),
            "{applied:?}"
        );
        assert_eq!(
            topics(&state).unwrap(),
            vec![("t".to_string(), config.clone())]
        );
        let tp = TopicPartition::new("t", 1);
        assert_eq!(
            partition_state(&state, &tp).unwrap(),
            Some(VersionedState {
                state: states[1].clone(),
                version: 0
            })
        );
        let again = state.apply(11, Command::Multi(create_topic_ops("t", &config, &states)));
        assert!(again.outcome.is_err());
    }

    #[test]
    fn corrupt_data_is_an_error_naming_the_path() {
        let mut state = MetadataState::new();
        let op = Op::Create {
            path: CONTROLLER.to_string(),
            data: b"not json".to_vec(),
            ephemeral_session: None,
        };
        assert!(state.apply(1, Command::Op(op)).outcome.is_ok());
        let error = controller(&state).unwrap_err();
        assert!(error.to_string().contains("/controller"), "{error}");
    }
}
