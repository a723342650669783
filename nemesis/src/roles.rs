//! Who does what in the cluster at one moment: the roles the role-aware targets name,
//! taken from one `GET /v1/metadata` answer. Node names throughout (`n1`, ...): the
//! harness gives the broker id of each node.

use std::collections::BTreeSet;

use serde_json::Value;

/// One partition's roles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionRoles {
    pub topic: String,
    pub partition: u32,
    pub leader: Option<String>,
    pub replicas: Vec<String>,
    pub isr: Vec<String>,
}

impl PartitionRoles {
    /// `topic/partition`, the history's key.
    pub fn key(&self) -> String {
        format!("{}/{}", self.topic, self.partition)
    }
}

/// The cluster's roles.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Roles {
    /// Every node of the test, in order (whether or not it answers).
    pub nodes: Vec<String>,
    /// The nodes whose broker is registered (has a live session).
    pub registered: BTreeSet<String>,
    pub controller: Option<String>,
    /// The metadata quorum's leader.
    pub meta_leader: Option<String>,
    pub partitions: Vec<PartitionRoles>,
}

impl Roles {
    /// Roles nobody is known to hold: only the nodes (when no node answered).
    pub fn unknown(nodes: &[String]) -> Roles {
        Roles {
            nodes: nodes.to_vec(),
            ..Roles::default()
        }
    }

    /// Reads a `/v1/metadata` answer (`brokers[].id`, `controller.id`,
    /// `metadata_leader`, `topics[].partitions[].{partition, leader, replicas, isr}`);
    /// `nodes` pairs each node with its broker id. Ids of no node are dropped; a
    /// malformed answer gives what could be read.
    pub fn from_metadata(nodes: &[(String, u32)], metadata: &Value) -> Roles {
        let name = |id: &Value| -> Option<String> {
            let id = id.as_u64()?;
            nodes
                .iter()
                .find(|(_, broker)| u64::from(*broker) == id)
                .map(|(node, _)| node.clone())
        };
        let names = |ids: &Value| -> Vec<String> {
            ids.as_array()
                .map(|ids| ids.iter().filter_map(name).collect())
                .unwrap_or_default()
        };
        let registered = metadata["brokers"]
            .as_array()
            .map(|brokers| {
                brokers
                    .iter()
                    .filter_map(|b| name(&b["id"]).or_else(|| name(b)))
                    .collect()
            })
            .unwrap_or_default();
        let mut partitions = Vec::new();
        for topic in metadata["topics"].as_array().into_iter().flatten() {
            let Some(topic_name) = topic["topic"].as_str() else {
                continue;
            };
            for p in topic["partitions"].as_array().into_iter().flatten() {
                let Some(partition) = p["partition"].as_u64().and_then(|p| u32::try_from(p).ok())
                else {
                    continue;
                };
                partitions.push(PartitionRoles {
                    topic: topic_name.to_string(),
                    partition,
                    leader: name(&p["leader"]),
                    replicas: names(&p["replicas"]),
                    isr: names(&p["isr"]),
                });
            }
        }
        Roles {
            nodes: nodes.iter().map(|(node, _)| node.clone()).collect(),
            registered,
            controller: name(&metadata["controller"]["id"]),
            meta_leader: name(&metadata["metadata_leader"]),
            partitions,
        }
    }

    /// The nodes leading at least one partition.
    pub fn leaders(&self) -> BTreeSet<String> {
        self.partitions
            .iter()
            .filter_map(|p| p.leader.clone())
            .collect()
    }
}
