//! The metadata quorum as the rest of the broker sees it: a [`MetadataClient`] that
//! proposes [`Command`]s, reads the applied [`MetadataState`] (locally, or linearizably),
//! and long-polls for changes; and the broker's own [`session::SessionClient`].
//!
//! Two backends sit behind the client:
//! - [`raft`]: the real one, an `openraft` group over HTTP on the metadata listener with
//!   a durable log and snapshots. It is the only module that names `openraft`.
//! - [`local`]: one in-memory state shared by every broker of a test process, with a cut
//!   switch per broker to simulate losing the quorum. Fast and deterministic; for
//!   in-process tests only.
//!
//! Both apply commands through [`applied::AppliedState`] and expire sessions with the
//! same [`reaper`], so everything above this module is tested against the same semantics.

pub mod applied;
pub mod local;
pub mod raft;
pub mod reaper;
pub mod session;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::metadata::{Command, LogIndex, MetadataState, Reply, StoreError, WatchTarget};
use crate::replica::BrokerId;

use applied::AppliedState;

/// A boxed future, for the object-safe [`Backend`].
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a quorum call did not give an answer from the store.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuorumError {
    /// The command was applied and refused: nothing changed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No answer from a quorum (no leader, a cut link, a timeout). For a proposal this is
    /// indeterminate: the command may still be applied later.
    #[error("metadata quorum unavailable: {0}")]
    Unavailable(String),
    /// This node is shutting down.
    #[error("metadata quorum client stopped")]
    Stopped,
}

impl QuorumError {
    /// The store refused the command because the session is gone.
    pub fn is_session_expired(&self) -> bool {
        matches!(self, QuorumError::Store(StoreError::SessionExpired { .. }))
    }
}

/// What a backend must provide; everything else the client does over [`AppliedState`].
pub trait Backend: Send + Sync + 'static {
    /// Replicates `command` and returns its result once applied (on the leader, wherever
    /// the call was made: a follower forwards).
    fn propose(&self, command: Command) -> BoxFuture<'_, Result<Reply, QuorumError>>;
    /// The index a linearizable read must wait for: the leader's commit index, confirmed
    /// by a quorum after this call began (Raft's ReadIndex).
    fn read_index(&self) -> BoxFuture<'_, Result<LogIndex, QuorumError>>;
    /// The current metadata-quorum leader as this node knows it.
    fn leader(&self) -> Option<BrokerId>;
}

/// A node's handle on the metadata quorum; cheap to clone.
#[derive(Clone)]
pub struct MetadataClient {
    backend: Arc<dyn Backend>,
    applied: Arc<AppliedState>,
    /// Bounds every call, so that no caller waits on a lost quorum forever.
    timeout: Duration,
}

/// How long a quorum call waits unless the caller says otherwise.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(5);

impl MetadataClient {
    pub fn new(backend: Arc<dyn Backend>, applied: Arc<AppliedState>) -> MetadataClient {
        MetadataClient {
            backend,
            applied,
            timeout: DEFAULT_CALL_TIMEOUT,
        }
    }

    /// The same client with another per-call timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> MetadataClient {
        self.timeout = timeout;
        self
    }

    /// Replicates `command`; `Err(Store(..))` if applying it refused it (nothing changed),
    /// `Err(Unavailable(..))` if the outcome is unknown.
    pub async fn propose(&self, command: Command) -> Result<Reply, QuorumError> {
        match tokio::time::timeout(self.timeout, self.backend.propose(command)).await {
            Ok(result) => result,
            Err(_) => Err(QuorumError::Unavailable(format!(
                "no answer within {} ms",
                self.timeout.as_millis()
            ))),
        }
    }

    /// Runs `f` on a state that reflects every command committed before this call began.
    pub async fn read_linearizable<T>(
        &self,
        f: impl FnOnce(&MetadataState) -> T,
    ) -> Result<T, QuorumError> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let index = match tokio::time::timeout_at(deadline, self.backend.read_index()).await {
            Ok(result) => result?,
            Err(_) => {
                return Err(QuorumError::Unavailable(format!(
                    "no read index within {} ms",
                    self.timeout.as_millis()
                )))
            }
        };
        if tokio::time::timeout_at(deadline, self.applied.wait_applied(index))
            .await
            .is_err()
        {
            return Err(QuorumError::Unavailable(format!(
                "index {index} not applied here within {} ms",
                self.timeout.as_millis()
            )));
        }
        Ok(self.applied.read(|state, _| f(state)))
    }

    /// Runs `f` on this node's applied state as it is now (possibly stale), with the
    /// index it reflects.
    pub fn read_local<T>(&self, f: impl FnOnce(&MetadataState, LogIndex) -> T) -> T {
        self.applied.read(f)
    }

    /// The index of the last entry applied on this node.
    pub fn applied_index(&self) -> LogIndex {
        self.applied.applied_index()
    }

    /// Long poll: resolves with the index of a change to `target` applied here after
    /// `seen`, or `None` if none came within `wait`.
    pub async fn watch(
        &self,
        target: &WatchTarget,
        seen: LogIndex,
        wait: Duration,
    ) -> Option<LogIndex> {
        self.applied.wait_change(target, seen, wait).await
    }

    /// The metadata-quorum leader as this node knows it.
    pub fn leader(&self) -> Option<BrokerId> {
        self.backend.leader()
    }

    /// The state this client reads; backends apply into it.
    pub fn applied(&self) -> &Arc<AppliedState> {
        &self.applied
    }
}
