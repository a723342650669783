//! The door to a running cluster: what an operator asks of it (roles, topics, admin
//! requests, failpoints, each node's view of its replicas), and the workloads' clients.
//! Nodes by name. Every request is bounded in time; a node that does not answer is
//! `None` or an error, never a hang.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::client::Connector;
use crate::views::{AdminAction, ControllerView, ReplicaView, Roles, Target};
use crate::BoxFuture;

/// A request the cluster did not carry out, with what it said.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ApiError(pub String);

/// How a topic's partitions are placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicLayout {
    /// `partitions` partitions of `replication_factor` replicas, placed by the system.
    Spread {
        partitions: u32,
        replication_factor: u32,
    },
    /// Per partition, its replicas (node names, the preferred leader first).
    Assigned(Vec<Vec<String>>),
}

/// A topic to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSpec {
    pub name: String,
    pub layout: TopicLayout,
}

impl TopicSpec {
    pub fn partitions(&self) -> u32 {
        match &self.layout {
            TopicLayout::Spread { partitions, .. } => *partitions,
            TopicLayout::Assigned(replicas) => u32::try_from(replicas.len()).unwrap_or(u32::MAX),
        }
    }
}

/// The API of one running cluster.
pub trait Api: Send + Sync {
    /// The roles now, from the first of `ask` that answers (all are asked at once);
    /// `None` when none does.
    fn roles<'a>(&'a self, ask: &'a [String]) -> BoxFuture<'a, Option<Roles>>;

    /// Whether `node` answers at all (it runs, is not paused, and serves).
    fn answers<'a>(&'a self, node: &'a str) -> BoxFuture<'a, bool>;

    /// Creates `topic` (retrying while the cluster cannot take it yet) and waits until
    /// every partition has a leader that serves reads, up to `timeout`. A topic that
    /// exists already is taken as created.
    fn create_topic<'a>(
        &'a self,
        topic: &'a TopicSpec,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<(), ApiError>>;

    /// Whether every partition `0..partitions` of `topic` has a leader that answers a read.
    fn topic_served<'a>(&'a self, topic: &'a str, partitions: u32) -> BoxFuture<'a, bool>;

    /// Whether the leader of every partition has all it holds replicated (its followers
    /// caught up), in the leaders' own views.
    fn caught_up<'a>(&'a self, topic: &'a str, partitions: u32) -> BoxFuture<'a, bool>;

    /// An admin request, through the first of `ask` that takes it; the system's answer.
    fn admin<'a>(
        &'a self,
        action: &'a AdminAction,
        ask: &'a [String],
    ) -> BoxFuture<'a, Result<Value, ApiError>>;

    /// Arms (`Some(actions)`) or releases (`None`) failpoint `point` of `node`; the
    /// system's answer. A system without failpoints refuses.
    fn failpoint<'a>(
        &'a self,
        node: &'a str,
        point: &'a str,
        actions: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Value, ApiError>>;

    /// What `node` knows of each of its replicas; `None` when it does not answer.
    fn replicas<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Option<Vec<ReplicaView>>>;

    /// How often each armed failpoint of `node` was reached (plain and targeted names);
    /// `None` when it does not answer.
    fn failpoint_hits<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Option<BTreeMap<String, u64>>>;

    /// What `node` knows of its own control plane; `None` when it does not answer.
    fn controller_view<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Option<ControllerView>>;

    /// The clients of `target` (whose nodes must be nodes of this cluster).
    fn connector(&self, target: &Target) -> Result<Arc<dyn Connector>, ApiError>;
}
