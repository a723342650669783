//! What the nemesis needs from the outside: a [`ClusterControl`] to act on the nodes and
//! read their roles, and a [`Journal`] to record its operations. The harness implements
//! both (on its backend + cluster, and on its history recorder); tests use fakes.
//!
//! Both are object safe; async methods return boxed futures polled on tokio.

use serde::Deserialize;
use serde_json::Value;

use crate::grudge::{Grudge, Ports};
use crate::roles::Roles;

pub use sut::{AdminAction, BoxFuture, ControllerView, ReplicaView};

/// A failed action on the cluster, with a message that says what and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ControlError(pub String);

/// The cluster as the nemesis acts on it. Node names are `n1..nN`.
pub trait ClusterControl: Send + Sync {
    /// Every node of the test, in order.
    fn nodes(&self) -> Vec<String>;

    /// The roles now, from the first node that answers (`sut::Api::roles`); `None`
    /// when none does.
    fn roles(&self) -> BoxFuture<'_, Option<Roles>>;

    /// SIGKILL the node's broker; the pid killed, `None` if it was not running.
    fn kill<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Result<Option<u32>, ControlError>>;

    /// Start the node's broker (if not running) on its files; with `wipe`, the
    /// partition data is removed first (the metadata quorum's files are kept: wiping a
    /// Raft voter's log is not a fault any real system survives). Returns the new pid, or
    /// the running one.
    fn start<'a>(&'a self, node: &'a str, wipe: bool) -> BoxFuture<'a, Result<u32, ControlError>>;

    /// SIGSTOP; the pid, `None` if not running.
    fn pause<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Result<Option<u32>, ControlError>>;

    /// SIGCONT; the pid, `None` if not running.
    fn resume<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Result<Option<u32>, ControlError>>;

    /// Drop the traffic of `grudge` (only to the given listener's port unless
    /// [`Ports::All`]), in addition to cuts in place.
    fn cut<'a>(
        &'a self,
        grudge: &'a Grudge,
        ports: Ports,
    ) -> BoxFuture<'a, Result<(), ControlError>>;

    /// Remove exactly the cuts an earlier [`ClusterControl::cut`] with the same arguments
    /// made, leaving other cuts in place.
    fn uncut<'a>(
        &'a self,
        grudge: &'a Grudge,
        ports: Ports,
    ) -> BoxFuture<'a, Result<(), ControlError>>;

    /// Remove every cut.
    fn heal(&self) -> BoxFuture<'_, Result<(), ControlError>>;

    /// An admin request; the broker's JSON answer, or its error.
    fn admin<'a>(&'a self, action: &'a AdminAction) -> BoxFuture<'a, Result<Value, ControlError>>;

    /// The admin request sent to `node` alone (which handles it, or forwards it to the
    /// controller it knows), never retried at another node: a request aimed at one
    /// broker, such as one the controller must take while it is cut off. The default
    /// is [`ClusterControl::admin`], for a cluster that cannot aim.
    fn admin_at<'a>(
        &'a self,
        action: &'a AdminAction,
        node: &'a str,
    ) -> BoxFuture<'a, Result<Value, ControlError>> {
        let _ = node;
        self.admin(action)
    }

    /// Arms (`Some(actions)`) or releases (`None`) failpoint `point` of `node`'s broker;
    /// the broker's answer. A cluster without failpoints refuses.
    fn failpoint<'a>(
        &'a self,
        node: &'a str,
        point: &'a str,
        actions: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Value, ControlError>> {
        let _ = (point, actions);
        Box::pin(async move {
            Err(ControlError(format!(
                "{node}: this cluster has no failpoints"
            )))
        })
    }

    /// What `node` knows of each of its replicas (`sut::Api::replicas`); `None` when it
    /// does not answer, or the cluster cannot tell (the default).
    fn replicas<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Option<Vec<ReplicaView>>> {
        let _ = node;
        Box::pin(async { None })
    }

    /// What `node` knows of its own control plane (`sut::Api::controller_view`): whether
    /// it acts as controller now; `None` when it does not answer, or the cluster cannot
    /// tell (the default).
    fn controller_view<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Option<ControllerView>> {
        let _ = node;
        Box::pin(async { None })
    }

    /// How often each armed failpoint of `node` was reached since its broker started
    /// (`sut::Api::failpoint_hits`); `None` when it does not answer, or the cluster has
    /// no failpoints (the default).
    fn failpoint_hits<'a>(
        &'a self,
        node: &'a str,
    ) -> BoxFuture<'a, Option<std::collections::BTreeMap<String, u64>>> {
        let _ = node;
        Box::pin(async { None })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot record a nemesis operation: {0}")]
pub struct JournalError(pub String);

/// The history as the nemesis writes it: `info` operations of process `nemesis`.
pub trait Journal: Send + Sync {
    /// Records the start of an operation; returns a token for its completion.
    fn invoke(&self, f: &str, value: Value) -> Result<u64, JournalError>;

    /// Records its completion: what was done in `value`, `error` if it could not be.
    fn complete(
        &self,
        token: u64,
        f: &str,
        value: Value,
        error: Option<String>,
    ) -> Result<(), JournalError>;
}

/// The parts of a nemesis op's value that readers of a history use: the package whose
/// step it is and, for failpoint steps, the failpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
pub struct FaultValue {
    #[serde(default)]
    pub package: Option<String>,
    #[serde(default)]
    pub point: Option<String>,
}

impl FaultValue {
    /// What `value` says (nothing, for a value of another shape).
    pub fn of(value: &serde_json::Value) -> FaultValue {
        FaultValue::deserialize(value).unwrap_or_default()
    }
}
