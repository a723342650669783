//! How a controller writes to the metadata store, and how a deposed controller is kept
//! from writing: the [`Fencing`] its tenure was elected with.
//!
//! - [`Fencing::ControllerEpoch`] (fixed, KAFKA-6082): every write is one multi-op whose
//!   first op checks `/controller_epoch` at the version this controller set when it was
//!   elected. A newer controller has bumped it, so a deposed controller's write fails as a
//!   whole ([`WriteError::ControllerMoved`]) and it resigns. A write is also refused once
//!   the session client has said the session expired ([`WriteError::SessionLost`]),
//!   as KAFKA-5642's client fails requests on an expired session.
//! - [`Fencing::PartitionVersionOnly`] (KAFKA-3083, Kafka 0.10): a partition-state write
//!   is a set conditioned on that state's own version, after a read-check that the
//!   state's `controller_epoch` field is not newer than ours. A new controller does not
//!   rewrite partition states at failover, so a deposed controller passes both checks.
//!
//! Writes the quorum did not answer are retried (they may have been applied: the caller
//! re-reads on a version conflict). Every partition-state write first passes the
//! `controller_before_state_write` failpoint.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::metadata::layout::{self, LayoutError, CONTROLLER_EPOCH};
use crate::metadata::{Command, Op, OpReply, Reply, StoreError, Version};
use crate::quorum::{MetadataClient, QuorumError};
use crate::replica::metadata::{ControllerEpoch, PartitionState, TopicPartition, VersionedState};
use crate::replica::BrokerId;
use crate::server::failpoints;

/// Pause between attempts when the quorum does not answer.
pub const QUORUM_RETRY_BACKOFF: Duration = Duration::from_millis(100);

/// What fences a controller tenure's writes; see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fencing {
    /// Every write checks `/controller_epoch` at this version.
    ControllerEpoch { epoch_version: Version },
    /// Writes check only the partition state's version and its `controller_epoch` field.
    PartitionVersionOnly,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    #[error("another controller was elected: /controller_epoch moved past this controller's")]
    ControllerMoved,
    #[error("this controller's session expired")]
    SessionLost,
    #[error("the partition state was written by controller epoch {stored}, newer than this controller's {ours}")]
    NewerControllerEpoch {
        stored: ControllerEpoch,
        ours: ControllerEpoch,
    },
    /// The node changed since it was read (or an unanswered earlier attempt applied).
    #[error("the state changed since it was read")]
    Conflict,
    #[error(
        "failpoint {} refused the write",
        failpoints::CONTROLLER_BEFORE_STATE_WRITE
    )]
    Failpoint,
    #[error(transparent)]
    Store(StoreError),
    #[error(transparent)]
    Corrupt(#[from] LayoutError),
}

impl WriteError {
    /// This controller must resign.
    pub fn is_fenced(&self) -> bool {
        matches!(self, WriteError::ControllerMoved | WriteError::SessionLost)
    }
}

/// One controller tenure's writer.
#[derive(Clone)]
pub struct Writer {
    pub broker_id: BrokerId,
    pub epoch: ControllerEpoch,
    pub fencing: Fencing,
    metadata: MetadataClient,
    /// Set by the session listener when the session client reports an expiry.
    session_lost: Arc<AtomicBool>,
}

impl Writer {
    pub fn new(
        broker_id: BrokerId,
        epoch: ControllerEpoch,
        fencing: Fencing,
        metadata: MetadataClient,
        session_lost: Arc<AtomicBool>,
    ) -> Writer {
        Writer {
            broker_id,
            epoch,
            fencing,
            metadata,
            session_lost,
        }
    }

    /// Refuses to go on once the session is known lost (fixed behaviour only: under
    /// KAFKA-3083 the flag is never set).
    pub fn check_session(&self) -> Result<(), WriteError> {
        if self.session_lost.load(Ordering::SeqCst) {
            Err(WriteError::SessionLost)
        } else {
            Ok(())
        }
    }

    /// A linearizable read, retried while the quorum does not answer.
    pub async fn read<T>(
        &self,
        f: impl Fn(&crate::metadata::MetadataState) -> T,
    ) -> Result<T, WriteError> {
        loop {
            self.check_session()?;
            match self.metadata.read_linearizable(&f).await {
                Ok(value) => return Ok(value),
                Err(QuorumError::Store(error)) => return Err(WriteError::Store(error)),
                Err(error) => {
                    tracing::debug!(broker = self.broker_id, %error, "controller read unanswered; retrying");
                    tokio::time::sleep(QUORUM_RETRY_BACKOFF).await;
                }
            }
        }
    }

    /// Writes `next` over `current` (as read), returning the new version.
    pub async fn write_state(
        &self,
        tp: &TopicPartition,
        current: &VersionedState,
        next: &PartitionState,
    ) -> Result<Version, WriteError> {
        if let Fencing::PartitionVersionOnly = self.fencing {
            // KAFKA-3083: Kafka 0.10's only guard against another controller, a check of
            // the epoch recorded in the state it just read. A new controller does not
            // rewrite states at failover, so this passes for a deposed controller.
            if current.state.controller_epoch > self.epoch {
                return Err(WriteError::NewerControllerEpoch {
                    stored: current.state.controller_epoch,
                    ours: self.epoch,
                });
            }
        }
        self.gate().await?;
        let op = Op::Set {
            path: layout::partition_state_path(tp),
            data: layout::encode(next),
            expected_version: Some(current.version),
        };
        match self.propose(vec![op]).await?.last() {
            Some(OpReply::Set { version }) => Ok(*version),
            other => Err(WriteError::Store(StoreError::InvalidPath {
                path: layout::partition_state_path(tp),
                reason: format!("unexpected reply to a set: {other:?}"),
            })),
        }
    }

    /// Creates a topic's nodes (ops from [`layout::create_topic_ops`]).
    pub async fn create(&self, ops: Vec<Op>) -> Result<(), WriteError> {
        self.gate().await?;
        self.propose(ops).await.map(|_| ())
    }

    async fn gate(&self) -> Result<(), WriteError> {
        failpoints::hit(failpoints::CONTROLLER_BEFORE_STATE_WRITE, self.broker_id)
            .await
            .map_err(|_| WriteError::Failpoint)
    }

    /// Proposes `ops` fenced as this tenure is, retrying while the quorum does not
    /// answer. Returns the replies of `ops` (without the fence's).
    async fn propose(&self, ops: Vec<Op>) -> Result<Vec<OpReply>, WriteError> {
        let (command, fence_ops) = match self.fencing {
            Fencing::ControllerEpoch { epoch_version } => {
                let mut fenced = vec![Op::Check {
                    path: CONTROLLER_EPOCH.to_string(),
                    version: epoch_version,
                }];
                fenced.extend(ops);
                (Command::Multi(fenced), 1)
            }
            Fencing::PartitionVersionOnly => match <[Op; 1]>::try_from(ops) {
                Ok([op]) => (Command::Op(op), 0),
                Err(ops) => (Command::Multi(ops), 0),
            },
        };
        loop {
            self.check_session()?;
            match self.metadata.propose(command.clone()).await {
                Ok(Reply::Multi(replies)) => {
                    return Ok(replies.into_iter().skip(fence_ops).collect())
                }
                Ok(Reply::Op(reply)) => return Ok(vec![reply]),
                Ok(other) => {
                    return Err(WriteError::Store(StoreError::InvalidPath {
                        path: CONTROLLER_EPOCH.to_string(),
                        reason: format!("unexpected reply to a multi-op: {other:?}"),
                    }))
                }
                Err(QuorumError::Store(StoreError::MultiFailed { op_index, error })) => {
                    if op_index < fence_ops {
                        return Err(WriteError::ControllerMoved);
                    }
                    return Err(match *error {
                        StoreError::BadVersion { .. } => WriteError::Conflict,
                        other => WriteError::Store(other),
                    });
                }
                Err(QuorumError::Store(StoreError::BadVersion { .. })) => {
                    return Err(WriteError::Conflict)
                }
                Err(QuorumError::Store(error)) => return Err(WriteError::Store(error)),
                Err(error) => {
                    tracing::debug!(broker = self.broker_id, %error, "controller write unanswered; retrying");
                    tokio::time::sleep(QUORUM_RETRY_BACKOFF).await;
                }
            }
        }
    }
}
