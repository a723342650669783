//! Plain data the doors answer with: who holds which role, what one node knows of its
//! replicas, an admin request, and what a workload writes to. Node names throughout
//! (`n1`, ...); an implementation maps its own identifiers to them.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// One partition's roles, as the cluster's metadata says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PartitionRoles {
    pub topic: String,
    pub partition: u32,
    pub leader: Option<String>,
    /// The epoch of the current leadership (`None`: none yet).
    pub leader_epoch: Option<u64>,
    /// In assignment order, the preferred leader first.
    pub replicas: Vec<String>,
    pub isr: Vec<String>,
}

impl PartitionRoles {
    /// `topic/partition`, the history's key.
    pub fn key(&self) -> String {
        format!("{}/{}", self.topic, self.partition)
    }
}

/// Who does what in the cluster at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Roles {
    /// Every node of the test, in order (whether or not it answers).
    pub nodes: Vec<String>,
    /// The nodes that are registered members (have a live session).
    pub registered: BTreeSet<String>,
    pub controller: Option<String>,
    /// The controller's epoch (0 without a controller).
    pub controller_epoch: u64,
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

    /// The nodes leading at least one partition.
    pub fn leaders(&self) -> BTreeSet<String> {
        self.partitions
            .iter()
            .filter_map(|p| p.leader.clone())
            .collect()
    }

    /// `topic/partition`'s roles, if the metadata has it.
    pub fn partition(&self, topic: &str, partition: u32) -> Option<&PartitionRoles> {
        self.partitions
            .iter()
            .find(|p| p.topic == topic && p.partition == partition)
    }

    /// Whether a controller is elected and every node of `nodes` is registered.
    pub fn formed_with(&self, nodes: &[String]) -> bool {
        self.controller.is_some() && nodes.iter().all(|n| self.registered.contains(n))
    }
}

/// What one node knows of its replica of a partition (its own view, which may lag the
/// metadata's).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReplicaView {
    pub topic: String,
    pub partition: u32,
    /// Whether this node leads the partition, in its own view.
    pub leading: bool,
    pub leader: Option<String>,
    pub leader_epoch: Option<u64>,
    pub isr: Vec<String>,
    pub log_start_offset: u64,
    pub log_end_offset: u64,
    pub high_watermark: u64,
    /// The epoch of the last controller it heard from.
    pub controller_epoch: Option<u64>,
}

/// What one node knows of its own control plane: whether it acts as the cluster's
/// controller now. The metadata may still name a node controller that stopped acting as
/// one (a restarted node whose old session has not expired yet); this is its own word.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ControllerView {
    /// The controller epoch while it acts as controller; `None` while it does not.
    pub acting_epoch: Option<u64>,
    /// How many times it became controller since it started.
    pub elections_won: u64,
    /// How many times it stopped being controller since it started.
    pub resignations: u64,
}

/// An admin request (nodes by name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum AdminAction {
    /// Move a partition's leadership to `to`.
    TransferLeader {
        topic: String,
        partition: u32,
        to: String,
    },
    /// Give every partition back to its preferred (first) replica.
    ElectPreferred,
    /// The partition's new replica list.
    Reassign {
        topic: String,
        partition: u32,
        replicas: Vec<String>,
    },
}

impl AdminAction {
    /// The history's `f` of this request.
    pub fn f(&self) -> &'static str {
        match self {
            AdminAction::TransferLeader { .. } => "transfer-leader",
            AdminAction::ElectPreferred => "elect-preferred",
            AdminAction::Reassign { .. } => "reassign",
        }
    }
}

/// A target that cannot be written to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad target: {0}")]
pub struct TargetError(pub String);

/// What a workload writes to: every partition of one topic, on the named nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    /// The nodes' names, in the history's `node` field: `n1`, `n2`, ...
    pub nodes: Vec<String>,
    pub topic: String,
    /// Partitions `0..partitions` of `topic`; each is a key of the history.
    pub partitions: u32,
}

impl Target {
    /// A validated target (see [`Target::validate`]).
    pub fn new(nodes: Vec<String>, topic: &str, partitions: u32) -> Result<Target, TargetError> {
        let target = Target {
            nodes,
            topic: topic.to_string(),
            partitions,
        };
        target.validate()?;
        Ok(target)
    }

    /// At least one node, distinct names, a topic name of ASCII letters, digits, `.`,
    /// `_` and `-`, at least one partition.
    pub fn validate(&self) -> Result<(), TargetError> {
        let bad = |message: String| Err(TargetError(message));
        if self.nodes.is_empty() {
            return bad("no nodes".into());
        }
        for (i, node) in self.nodes.iter().enumerate() {
            if self.nodes[..i].contains(node) {
                return bad(format!("node name {node:?} appears twice"));
            }
        }
        let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if self.topic.is_empty() || !self.topic.chars().all(legal) {
            return bad(format!(
                "topic {:?} must be ASCII letters, digits, '.', '_' or '-'",
                self.topic
            ));
        }
        if self.partitions == 0 {
            return bad("no partitions".into());
        }
        Ok(())
    }

    /// The history key of a partition: `topic/partition`, e.g. `t/0`.
    pub fn key(&self, partition: u32) -> String {
        format!("{}/{partition}", self.topic)
    }

    /// The name of node `node` (an index into `nodes`), `""` for none.
    pub fn node_name(&self, node: usize) -> &str {
        self.nodes.get(node).map_or("", String::as_str)
    }

    /// The index of the node named `name`.
    pub fn node_index(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_names_its_nodes_once_and_its_topic_legally() {
        let nodes = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert!(Target::new(nodes(&["n1", "n2"]), "t-1.x_y", 3).is_ok());
        assert!(Target::new(nodes(&[]), "t", 1).is_err());
        assert!(Target::new(nodes(&["n1", "n1"]), "t", 1).is_err());
        assert!(Target::new(nodes(&["n1"]), "t/0", 1).is_err());
        assert!(Target::new(nodes(&["n1"]), "", 1).is_err());
        assert!(Target::new(nodes(&["n1"]), "t", 0).is_err());
        let target = Target::new(nodes(&["n1", "n2"]), "t", 2).unwrap();
        assert_eq!(target.key(1), "t/1");
        assert_eq!(target.node_name(1), "n2");
        assert_eq!(target.node_name(7), "");
        assert_eq!(target.node_index("n2"), Some(1));
    }

    #[test]
    fn formed_means_a_controller_and_every_node_registered() {
        let nodes = vec!["n1".to_string(), "n2".to_string()];
        let mut roles = Roles::unknown(&nodes);
        assert!(!roles.formed_with(&nodes));
        roles.registered = nodes.iter().cloned().collect();
        assert!(!roles.formed_with(&nodes), "no controller yet");
        roles.controller = Some("n2".into());
        assert!(roles.formed_with(&nodes));
        roles.registered.remove("n1");
        assert!(!roles.formed_with(&nodes));
    }
}
