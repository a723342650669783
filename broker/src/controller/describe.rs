//! The cluster as the metadata store holds it (`GET /v1/metadata`): live brokers, the
//! controller and its epoch, and every partition's stored state. Pure: built from a
//! [`MetadataState`] the caller read.

use serde::{Deserialize, Serialize};

use super::admin::PartitionMetadata;
use crate::metadata::layout::{self, BrokerRegistration, LayoutError};
use crate::metadata::MetadataState;
use crate::replica::metadata::{ControllerEpoch, TopicPartition};
use crate::replica::BrokerId;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterMetadata {
    /// The registered (live) brokers, by id.
    pub brokers: Vec<BrokerRegistration>,
    /// The broker holding `/controller`, with `/controller_epoch`; `None` between
    /// controllers.
    pub controller: Option<ControllerInfo>,
    /// The metadata quorum's leader as the answering broker knows it.
    pub metadata_leader: Option<BrokerId>,
    pub topics: Vec<TopicMetadata>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerInfo {
    pub id: BrokerId,
    pub epoch: ControllerEpoch,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicMetadata {
    pub topic: String,
    /// The partitions whose state exists, in order.
    pub partitions: Vec<PartitionMetadata>,
}

/// Describes the cluster from `state`.
pub fn describe(
    state: &MetadataState,
    metadata_leader: Option<BrokerId>,
) -> Result<ClusterMetadata, LayoutError> {
    let brokers = layout::live_brokers(state)?;
    let controller = match layout::controller(state)? {
        Some(id) => Some(ControllerInfo {
            id,
            epoch: layout::controller_epoch(state)?.0,
        }),
        None => None,
    };
    let mut topics = Vec::new();
    for (topic, config) in layout::topics(state)? {
        let mut partitions = Vec::new();
        for partition in 0..config.partitions {
            let tp = TopicPartition::new(topic.clone(), partition);
            if let Some(stored) = layout::partition_state(state, &tp)? {
                partitions.push(PartitionMetadata::new(
                    partition,
                    &stored.state,
                    stored.version,
                ));
            }
        }
        topics.push(TopicMetadata { topic, partitions });
    }
    Ok(ClusterMetadata {
        brokers,
        controller,
        metadata_leader,
        topics,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::layout::{TopicConfig, BASE_PATHS, CONTROLLER, CONTROLLER_EPOCH};
    use crate::metadata::{Command, Op};
    use crate::replica::metadata::PartitionState;

    fn create(state: &mut MetadataState, index: u64, path: &str, data: Vec<u8>) {
        let op = Op::Create {
            path: path.into(),
            data,
            ephemeral_session: None,
        };
        assert!(
            state.apply(index, Command::Op(op)).outcome.is_ok(),
            "{path}"
        );
    }

    #[test]
    fn describes_brokers_controller_and_partitions() {
        let mut state = MetadataState::new();
        let mut index = 0;
        let mut next = || {
            index += 1;
            index
        };
        for path in BASE_PATHS {
            create(&mut state, next(), path, Vec::new());
        }
        let registration = BrokerRegistration {
            id: 2,
            replication: "127.0.0.1:9093".parse().unwrap_or_else(|_| unreachable!()),
            metadata: "127.0.0.1:9094".parse().unwrap_or_else(|_| unreachable!()),
            log_failures: Vec::new(),
        };
        create(
            &mut state,
            next(),
            &layout::broker_path(2),
            layout::encode(&registration),
        );
        assert_eq!(describe(&state, None).map(|m| m.controller), Ok(None));
        create(&mut state, next(), CONTROLLER_EPOCH, layout::encode(&3u32));
        create(
            &mut state,
            next(),
            CONTROLLER,
            layout::encode(&layout::ControllerRegistration { broker_id: 2 }),
        );
        let partition = PartitionState {
            leader: Some(2),
            leader_epoch: 1,
            isr: vec![2],
            controller_epoch: 3,
            replicas: vec![2],
        };
        let config = TopicConfig {
            partitions: 1,
            replication_factor: 1,
        };
        let result = state.apply(
            next(),
            Command::Multi(layout::create_topic_ops("t", &config, &[partition])),
        );
        assert!(result.outcome.is_ok());
        let described = describe(&state, Some(1)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            serde_json::to_value(&described).unwrap_or_default(),
            serde_json::json!({
                "brokers": [{"id": 2, "replication": "127.0.0.1:9093", "metadata": "127.0.0.1:9094"}],
                "controller": {"id": 2, "epoch": 3},
                "metadata_leader": 1,
                "topics": [{"topic": "t", "partitions": [{"partition": 0, "replicas": [2],
                    "leader": 2, "leader_epoch": 1, "isr": [2], "controller_epoch": 3, "version": 0}]}]
            })
        );
    }
}
