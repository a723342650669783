//! One partition replica as a pure state machine (style.md, openraft's "engine").
//!
//! [`Replica`] owns its log (any [`ReplicaLog`]) and its in-memory state: role, leader
//! epoch, ISR, partition-state version, controller epoch, high watermark, leader-epoch
//! cache, and, as leader, each follower's progress and the produce requests waiting for
//! replication (purgatory). It reads no clock and opens no socket: every input is a method
//! call (carrying `now_ms` where time matters), every output a return value or an
//! [`Effect`] for the driver to carry out: send a request, answer a produce request, write
//! the partition state to the [`metadata::MetadataStore`].
//!
//! - [`config`]: [`ReplicaConfig`], [`TruncationMode`], the [`BugSwitches`].
//! - [`messages`]: requests, responses, effects.
//! - [`epoch_cache`]: the leader-epoch cache and Kafka's OffsetsForLeaderEpoch answer.
//! - [`metadata`]: the versioned partition-state store and an in-memory one.
//! - [`sim`]: a deterministic in-memory cluster of replicas with a test-driven controller,
//!   network and clock.
//!
//! The protocol is Kafka's of the ZooKeeper era with KIP-101/279/320 truncation
//! (kafka-replication.md §2). Where each bug switch flips its rule, the code says
//! `KAFKA-nnnn` next to the branch; nowhere else reads the switches.
//!
//! Storage failures abort the call with [`ReplicaError`]; the replica's in-memory state may
//! then be ahead of its log, so a driver must treat the replica as failed (Kafka takes the
//! log directory offline) and rebuild it from its log.

pub mod config;
pub mod epoch_cache;
mod follower;
mod leader;
pub mod messages;
pub mod metadata;
pub mod sim;

use std::collections::BTreeMap;

use crate::log::{EpochEntry, LogError, ReplicaLog};
use crate::record::{LeaderEpoch, Offset};

pub use config::{BrokerId, BugSwitches, ReplicaConfig, TruncationMode, UnknownBug};
pub use epoch_cache::{EpochCache, EpochEndOffset};
pub use messages::*;
pub use metadata::{ControllerEpoch, StateVersion};

/// The log failed under the replica; see the module documentation.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    #[error("replica log: {0}")]
    Storage(#[from] LogError),
}

/// A reply together with the effects the same event caused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output<T> {
    pub reply: T,
    pub effects: Vec<Effect>,
}

/// The replica's role as seen from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RoleKind {
    /// No LeaderAndIsr applied since creation or restart.
    Unassigned,
    Leader,
    Follower {
        leader: BrokerId,
    },
}

/// The controller's decision as last applied here (the leader keeps `isr` and `version`
/// current with its own conditional writes).
#[derive(Debug, Clone, PartialEq, Eq)]
struct PartitionView {
    leader_epoch: LeaderEpoch,
    leader: BrokerId,
    isr: Vec<BrokerId>,
    version: StateVersion,
    replicas: Vec<BrokerId>,
}

/// The role a LeaderAndIsr gave, with the view it came with: a replica without one has
/// neither.
struct Assignment {
    view: PartitionView,
    role: ActiveRole,
}

enum ActiveRole {
    Leader(leader::LeaderState),
    Follower(follower::FollowerState),
}

/// One partition replica. See the module documentation.
pub struct Replica<L: ReplicaLog> {
    config: ReplicaConfig,
    log: L,
    /// `None` until the first LeaderAndIsr is applied.
    partition: Option<Assignment>,
    /// The highest controller epoch seen; older controllers are ignored.
    controller_epoch: ControllerEpoch,
    high_watermark: Offset,
    epochs: EpochCache,
    last_hw_checkpoint_ms: Option<u64>,
    /// Decisions an outside oracle judges, since the caller last took them
    /// ([`Replica::take_events`]).
    events: Vec<ReplicaEvent>,
}

/// A decision of the replica that an outside oracle needs to judge its promises, as the
/// replica saw it at that moment (the broker logs each one with the time; it judges
/// nothing itself).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind")]
pub enum ReplicaEvent {
    #[serde(rename = "truncated")]
    Truncated(Truncated),
    #[serde(rename = "isr-expanded")]
    IsrExpanded(IsrExpansion),
}

/// A leader letting a follower into the ISR, at the decision (`written` false) and when
/// the write of the new ISR succeeded and it took effect (`written` true). From then on
/// the follower may be elected cleanly, so it must hold every committed record: the
/// oracle compares `follower_log_end` with the writes acknowledged before this moment.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct IsrExpansion {
    pub follower: BrokerId,
    /// What the leader knows the follower to hold: its last fetch offset.
    pub follower_log_end: Offset,
    pub leader_epoch: LeaderEpoch,
    /// The leader's high watermark and log end at that moment.
    pub high_watermark: Offset,
    pub log_end_offset: Offset,
    /// The leader's LEO when it took the epoch.
    pub epoch_start_offset: Offset,
    pub written: bool,
}

/// A truncation that discarded records, as the replica saw it at that moment: what an
/// outside oracle needs to judge whether committed records went (the broker logs each
/// one; it judges nothing itself).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Truncated {
    /// Why: `hw` (to the high watermark), `epoch` (to where the leader's epoch ends),
    /// `ahead-of-leader` (to a shorter leader's log end), `out-of-range` (the whole log,
    /// to start at the leader's log start).
    pub reason: &'static str,
    /// The log end before.
    pub from: Offset,
    /// The log end after.
    pub to: Offset,
    /// This replica's high watermark before: what it knew to be committed.
    pub high_watermark: Offset,
    /// The leader's log end, when the truncation was decided on it.
    pub leader_log_end: Option<Offset>,
    /// Whether unclean elections are allowed (a follower may then have to discard
    /// committed records to follow a shorter leader).
    pub unclean_leader_election: bool,
}

impl<L: ReplicaLog> Replica<L> {
    /// A replica over `log` as a restart finds it: high watermark and epoch cache from the
    /// checkpoints (cut back to what the log still holds), no role until the controller
    /// sends a LeaderAndIsr.
    pub fn new(config: ReplicaConfig, mut log: L) -> Result<Replica<L>, ReplicaError> {
        let log_end_offset = log.log_end_offset();
        let checkpoint = log.epoch_checkpoint();
        let epochs = EpochCache::from_checkpoint(&checkpoint, log_end_offset);
        if epochs.entries() != checkpoint.as_slice() {
            log.write_epoch_checkpoint(epochs.entries())?;
        }
        let high_watermark = log
            .high_watermark_checkpoint()
            .clamp(log.log_start_offset(), log_end_offset);
        Ok(Replica {
            config,
            log,
            partition: None,
            controller_epoch: 0,
            high_watermark,
            epochs,
            last_hw_checkpoint_ms: None,
            events: Vec::new(),
        })
    }

    pub fn config(&self) -> &ReplicaConfig {
        &self.config
    }

    pub fn broker_id(&self) -> BrokerId {
        self.config.broker_id
    }

    pub fn log(&self) -> &L {
        &self.log
    }

    /// Gives the log back, e.g. to rebuild the replica after a simulated crash.
    pub fn into_log(self) -> L {
        self.log
    }

    pub fn role(&self) -> RoleKind {
        match self.partition.as_ref().map(|a| &a.role) {
            None => RoleKind::Unassigned,
            Some(ActiveRole::Leader(_)) => RoleKind::Leader,
            Some(ActiveRole::Follower(f)) => RoleKind::Follower { leader: f.leader },
        }
    }

    pub fn is_leader(&self) -> bool {
        self.role() == RoleKind::Leader
    }

    pub fn leader_epoch(&self) -> Option<LeaderEpoch> {
        self.partition.as_ref().map(|a| a.view.leader_epoch)
    }

    pub fn controller_epoch(&self) -> ControllerEpoch {
        self.controller_epoch
    }

    /// The ISR as this replica knows it (a leader's own, else the controller's last word).
    pub fn isr(&self) -> &[BrokerId] {
        self.partition
            .as_ref()
            .map_or(&[], |a| a.view.isr.as_slice())
    }

    pub fn partition_state_version(&self) -> Option<StateVersion> {
        self.partition.as_ref().map(|a| a.view.version)
    }

    pub fn high_watermark(&self) -> Offset {
        self.high_watermark
    }

    pub fn log_end_offset(&self) -> Offset {
        self.log.log_end_offset()
    }

    pub fn log_start_offset(&self) -> Offset {
        self.log.log_start_offset()
    }

    pub fn epoch_entries(&self) -> &[EpochEntry] {
        self.epochs.entries()
    }

    /// As leader: the LEO when this replica took its current epoch (KAFKA-7128's guard).
    pub fn leader_epoch_start_offset(&self) -> Option<Offset> {
        match self.partition.as_ref().map(|a| &a.role) {
            Some(ActiveRole::Leader(l)) => Some(l.epoch_start_offset),
            _ => None,
        }
    }

    /// Applies the controller's decision for this partition, with controller-epoch and
    /// leader-epoch fencing: a request from an older controller, or for a leader epoch
    /// not newer than the current one, changes nothing.
    pub fn handle_leader_and_isr(
        &mut self,
        request: LeaderAndIsr,
        now_ms: u64,
    ) -> Result<Output<Result<(), LeaderAndIsrError>>, ReplicaError> {
        let rejected = |error| {
            Ok(Output {
                reply: Err(error),
                effects: Vec::new(),
            })
        };
        if request.controller_epoch < self.controller_epoch {
            return rejected(LeaderAndIsrError::StaleControllerEpoch {
                request: request.controller_epoch,
                current: self.controller_epoch,
            });
        }
        self.controller_epoch = request.controller_epoch;
        if !request.replicas.contains(&self.config.broker_id) {
            return rejected(LeaderAndIsrError::NotAssigned);
        }
        if let Some(current) = self.leader_epoch() {
            if request.leader_epoch <= current {
                return rejected(LeaderAndIsrError::StaleLeaderEpoch {
                    request: request.leader_epoch,
                    current,
                });
            }
        }
        let view = PartitionView {
            leader_epoch: request.leader_epoch,
            leader: request.leader,
            isr: request.isr,
            version: request.version,
            replicas: request.replicas,
        };
        let previous = self.partition.take().map(|a| a.role);
        let effects = if view.leader == self.config.broker_id {
            self.become_leader(view, previous, now_ms)?
        } else {
            self.become_follower(view, previous, now_ms)?
        };
        Ok(Output {
            reply: Ok(()),
            effects,
        })
    }

    /// Time passes: the leader shrinks the ISR of followers that lag too long and times out
    /// parked produce requests; a follower re-sends requests that got no usable answer;
    /// the high watermark is checkpointed every `high_watermark_checkpoint_interval_ms`.
    pub fn tick(&mut self, now_ms: u64) -> Result<Vec<Effect>, ReplicaError> {
        let effects = match self.role() {
            RoleKind::Leader => self.leader_tick(now_ms)?,
            RoleKind::Follower { .. } => self.follower_tick(now_ms)?,
            RoleKind::Unassigned => Vec::new(),
        };
        let due = self.last_hw_checkpoint_ms.is_none_or(|last| {
            now_ms.saturating_sub(last) >= self.config.high_watermark_checkpoint_interval_ms
        });
        if due {
            self.checkpoint_high_watermark()?;
            self.last_hw_checkpoint_ms = Some(now_ms);
        }
        Ok(effects)
    }

    /// Writes the HW checkpoint now (also what a clean shutdown does).
    pub fn checkpoint_high_watermark(&mut self) -> Result<(), ReplicaError> {
        if self.log.high_watermark_checkpoint() != self.high_watermark {
            self.log
                .write_high_watermark_checkpoint(self.high_watermark)?;
        }
        Ok(())
    }

    fn persist_epochs(&mut self, changed: bool) -> Result<(), ReplicaError> {
        if changed {
            self.log.write_epoch_checkpoint(self.epochs.entries())?;
        }
        Ok(())
    }

    /// Removes records from `offset` on, with the epochs they started and the HW above.
    /// The events (truncations that discarded records, ISR expansions) since the last
    /// call, oldest first.
    pub fn take_events(&mut self) -> Vec<ReplicaEvent> {
        std::mem::take(&mut self.events)
    }

    fn record_truncation(
        &mut self,
        reason: &'static str,
        to: Offset,
        leader_log_end: Option<Offset>,
    ) {
        self.events.push(ReplicaEvent::Truncated(Truncated {
            reason,
            from: self.log.log_end_offset(),
            to,
            high_watermark: self.high_watermark,
            leader_log_end,
            unclean_leader_election: self.config.unclean_leader_election,
        }));
    }

    fn truncate_to(
        &mut self,
        offset: Offset,
        reason: &'static str,
        leader_log_end: Option<Offset>,
    ) -> Result<(), ReplicaError> {
        if offset < self.log.log_end_offset() {
            tracing::info!(
                broker = self.config.broker_id,
                offset,
                log_end_offset = self.log.log_end_offset(),
                "truncating"
            );
            self.record_truncation(reason, offset, leader_log_end);
        }
        self.log.truncate_to(offset)?;
        let changed = self.epochs.truncate_from_end(offset);
        self.persist_epochs(changed)?;
        self.high_watermark = self.high_watermark.min(self.log.log_end_offset());
        Ok(())
    }

    fn truncate_fully_and_start_at(
        &mut self,
        offset: Offset,
        leader_log_end: Offset,
    ) -> Result<(), ReplicaError> {
        tracing::warn!(
            broker = self.config.broker_id,
            offset,
            log_end_offset = self.log.log_end_offset(),
            "deleting the whole log"
        );
        if self.log.log_end_offset() > self.log.log_start_offset() {
            self.record_truncation("out-of-range", offset, Some(leader_log_end));
        }
        self.log.truncate_fully_and_start_at(offset)?;
        let changed = self.epochs.clear();
        self.persist_epochs(changed)?;
        self.high_watermark = offset;
        Ok(())
    }
}

/// Per-follower progress as the leader tracks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FollowerProgress {
    /// The fetch offset of the follower's last fetch in this leader epoch: it holds
    /// everything below. `None` until it has fetched in this epoch.
    log_end_offset: Option<Offset>,
    last_caught_up_ms: u64,
    last_fetch_ms: u64,
    leader_log_end_offset_at_last_fetch: Offset,
}

fn follower_progress_map(
    replicas: &[BrokerId],
    isr: &[BrokerId],
    me: BrokerId,
    now_ms: u64,
) -> BTreeMap<BrokerId, FollowerProgress> {
    replicas
        .iter()
        .filter(|&&id| id != me)
        .map(|&id| {
            let progress = FollowerProgress {
                log_end_offset: None,
                // An ISR member gets a full lag period to show up in the new epoch.
                last_caught_up_ms: if isr.contains(&id) { now_ms } else { 0 },
                last_fetch_ms: 0,
                leader_log_end_offset_at_last_fetch: Offset::MAX,
            };
            (id, progress)
        })
        .collect()
}
