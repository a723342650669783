//! The controller proper: one task that takes [`Event`]s off the queue and processes each
//! to the end before the next (Kafka 1.1's `ControllerEventThread`). Every broker runs
//! one; it is active while this broker holds `/controller`.
//!
//! - Election: create the ephemeral `/controller` and bump `/controller_epoch` in one
//!   multi-op (conditional on the epoch's version); losing the race means waiting for the
//!   `/controller` watch to fire.
//! - Failover (on winning): cache the live brokers, elect leaders for partitions whose
//!   leader is not alive (Kafka's online-partition transition), and send every live
//!   broker a LeaderAndIsr with the new controller epoch for every partition it hosts.
//!   As in Kafka, other partition states are not rewritten, and dead brokers are not
//!   shrunk out of ISRs: that happens only for brokers whose death a later broker-change
//!   event reports.
//! - Broker change: the registrations are compared with the cached ones (a changed
//!   creation index is a bounce: a death and a start). Deaths: every partition that had a
//!   dead leader or ISR member gets a new state, written conditionally, announced to its
//!   live replicas. Starts: the new broker gets a LeaderAndIsr for each partition it
//!   hosts, and leaderless partitions get a leader if one can now be elected.
//! - Admin operations, the reassignment's wait for new replicas (finished on a partition
//!   state change or failed by a timer), and the periodic auto leader rebalance.
//! - Resignation: on a fenced write, a session change, `/controller` moving elsewhere,
//!   or shutdown; senders stop, pending reassignments are answered.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;

use super::admin::{
    AdminError, AdminReply, AdminRequest, CreateTopic, ElectPreferred, ElectionOutcome,
    ElectionReport, ElectionResult, PartitionInfo, PartitionMetadata, Placement, Reassign,
    TopicCreated, TransferLeader,
};
use super::decisions::{self, Refusal};
use super::events::{AdminResponder, Event};
use super::registration::ensure_base_paths;
use super::sender::{await_deliveries, Delivery, Senders, FLUSH_WAIT};
use super::write::{Fencing, WriteError, Writer, QUORUM_RETRY_BACKOFF};
use super::Shared;
use crate::config::NodeConfig;
use crate::metadata::layout::{
    self, ControllerRegistration, LayoutError, TopicConfig, CONTROLLER, CONTROLLER_EPOCH,
};
use crate::metadata::{
    Command, LogIndex, MetadataState, Op, OpReply, Reply, SessionId, StoreError, Version,
};
use crate::quorum::{MetadataClient, QuorumError};
use crate::replica::metadata::{ControllerEpoch, PartitionState, TopicPartition, VersionedState};
use crate::replica::BrokerId;
use crate::server::wire::LeaderAndIsrBody;

/// Kafka's `leader.imbalance.per.broker.percentage`.
pub const LEADER_IMBALANCE_PERCENT: u32 = 10;
/// How many times a partition update re-reads after a version conflict (the leader
/// writing its ISR at the same time) before giving up on that partition for this event.
const MAX_CONFLICTS: usize = 10;

/// Why an event's processing stopped short.
#[derive(Debug, thiserror::Error)]
enum ControllerError {
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error("partition {0:?} has no state in the metadata store")]
    NoPartition(TopicPartition),
    #[error("partition {0:?} kept changing under the controller")]
    TooManyConflicts(TopicPartition),
}

impl From<LayoutError> for ControllerError {
    fn from(error: LayoutError) -> Self {
        ControllerError::Write(WriteError::Corrupt(error))
    }
}

impl ControllerError {
    fn is_fenced(&self) -> bool {
        matches!(self, ControllerError::Write(error) if error.is_fenced())
    }

    fn into_admin(self) -> AdminError {
        match self {
            ControllerError::Write(WriteError::ControllerMoved | WriteError::SessionLost) => {
                AdminError::ControllerMoved
            }
            ControllerError::Write(WriteError::Corrupt(error)) => {
                AdminError::CorruptMetadata(error.to_string())
            }
            ControllerError::NoPartition(tp) => AdminError::UnknownPartition {
                topic: tp.topic,
                partition: tp.partition,
            },
            other => AdminError::Unavailable(other.to_string()),
        }
    }
}

/// Why an admin operation failed: refused as asked, or the controller could not do it.
enum Failure {
    Refused(AdminError),
    Controller(ControllerError),
}

impl From<AdminError> for Failure {
    fn from(error: AdminError) -> Self {
        Failure::Refused(error)
    }
}

impl From<Refusal> for Failure {
    fn from(refusal: Refusal) -> Self {
        Failure::Refused(refusal.into())
    }
}

impl From<ControllerError> for Failure {
    fn from(error: ControllerError) -> Self {
        Failure::Controller(error)
    }
}

impl From<WriteError> for Failure {
    fn from(error: WriteError) -> Self {
        Failure::Controller(error.into())
    }
}

impl From<LayoutError> for Failure {
    fn from(error: LayoutError) -> Self {
        Failure::Controller(error.into())
    }
}

/// A broker as the controller knows it: its id and the creation index of its
/// registration (a broker epoch, as KIP-380's czxid).
type LiveBrokers = BTreeMap<BrokerId, LogIndex>;

/// The log failures the registrations report: (broker, partition) → (how many times
/// it failed, whether it is offline now).
type LogFailures = BTreeMap<(BrokerId, TopicPartition), (u64, bool)>;

/// The state of one controller tenure.
struct Active {
    writer: Writer,
    live: LiveBrokers,
    log_failures: LogFailures,
    senders: Senders,
    reassignments: BTreeMap<TopicPartition, PendingReassignment>,
}

impl Active {
    fn epoch(&self) -> ControllerEpoch {
        self.writer.epoch
    }

    fn live_set(&self) -> BTreeSet<BrokerId> {
        self.live.keys().copied().collect()
    }

    /// The live brokers whose replica of `tp` can serve: not offline after a log failure.
    fn live_for(&self, tp: &TopicPartition) -> BTreeSet<BrokerId> {
        self.live
            .keys()
            .copied()
            .filter(|&broker| serving(&self.log_failures, broker, tp))
            .collect()
    }
}

/// A reassignment waiting for its new replicas to join the ISR.
struct PendingReassignment {
    id: u64,
    target: Vec<BrokerId>,
    timeout_ms: u64,
    responder: AdminResponder,
}

/// LeaderAndIsr requests queued by one event, awaited together at its end.
type Outbox = Vec<(
    (BrokerId, TopicPartition),
    tokio::sync::oneshot::Receiver<Delivery>,
)>;

pub(super) struct Controller {
    shared: Arc<Shared>,
    config: NodeConfig,
    metadata: MetadataClient,
    session: Option<SessionId>,
    active: Option<Active>,
    timers: JoinSet<()>,
    next_reassignment: u64,
}

impl Controller {
    pub(super) fn new(shared: Arc<Shared>, config: NodeConfig, metadata: MetadataClient) -> Self {
        Controller {
            shared,
            config,
            metadata,
            session: None,
            active: None,
            timers: JoinSet::new(),
            next_reassignment: 0,
        }
    }

    fn broker_id(&self) -> BrokerId {
        self.config.broker_id
    }

    /// Processes events until [`Event::Shutdown`].
    pub(super) async fn run(mut self) {
        loop {
            let event = self.shared.queue.next().await;
            while self.timers.try_join_next().is_some() {}
            if let Event::Shutdown = event {
                self.resign("shutdown");
                return;
            }
            self.process(event).await;
        }
    }

    async fn process(&mut self, event: Event) {
        tracing::debug!(broker = self.broker_id(), ?event, "controller event");
        let result = match event {
            Event::SessionOpened(session) => {
                self.session = Some(session);
                self.shared.clear_session_lost();
                // Whatever this broker held belonged to the old session.
                self.resign("its session was replaced");
                self.elect().await
            }
            Event::SessionExpired(session, ack) => {
                if self.session == Some(session) {
                    self.session = None;
                }
                self.resign("its session expired");
                ack.done();
                Ok(())
            }
            Event::ControllerChange => self.on_controller_change().await,
            Event::BrokerChange => self.on_broker_change().await,
            Event::PartitionsChanged => self.check_reassignments().await,
            Event::Admin(request, responder) => {
                self.admin(request, responder).await;
                Ok(())
            }
            Event::ReassignTimeout(tp, id) => self.reassignment_timed_out(tp, id).await,
            Event::AutoRebalance => self.auto_rebalance().await,
            Event::Shutdown => Ok(()),
        };
        if let Err(error) = result {
            self.on_error(error);
        }
    }

    fn on_error(&mut self, error: ControllerError) {
        if error.is_fenced() {
            self.shared.count_fenced_write();
            self.resign(&error.to_string());
        } else {
            tracing::warn!(broker = self.broker_id(), %error, "controller event failed");
        }
    }

    // ----- election ----------------------------------------------------------------

    /// `/controller` changed: resign if it is no longer ours, elect if it is free.
    async fn on_controller_change(&mut self) -> Result<(), ControllerError> {
        let Some(session) = self.session else {
            return Ok(());
        };
        let owner = match self
            .metadata
            .read_linearizable(|state| state.stat(CONTROLLER).map(|s| s.ephemeral_owner))
            .await
        {
            Ok(owner) => owner,
            Err(error) => {
                tracing::debug!(broker = self.broker_id(), %error, "cannot read /controller");
                self.retry_later(Event::ControllerChange);
                return Ok(());
            }
        };
        match owner {
            Some(Some(owner)) if owner == session => Ok(()),
            Some(_) => {
                self.resign("another broker holds /controller");
                Ok(())
            }
            None => {
                self.resign("/controller is gone");
                self.elect().await
            }
        }
    }

    /// Tries to become controller on the current session (never, when this broker is
    /// not eligible).
    async fn elect(&mut self) -> Result<(), ControllerError> {
        let Some(session) = self.session else {
            return Ok(());
        };
        if !self.config.controller.eligible {
            return Ok(());
        }
        if self.active.is_some() {
            return Ok(());
        }
        if let Err(error) = ensure_base_paths(&self.metadata).await {
            tracing::debug!(broker = self.broker_id(), %error, "cannot create the base paths yet");
            self.retry_later(Event::ControllerChange);
            return Ok(());
        }
        loop {
            let read = self
                .metadata
                .read_linearizable(|state| {
                    let holder = state.stat(CONTROLLER).map(|s| s.ephemeral_owner);
                    layout::controller_epoch(state).map(|epoch| (holder, epoch))
                })
                .await;
            let (holder, (epoch, epoch_version)) = match read {
                Ok(Ok(read)) => read,
                Ok(Err(corrupt)) => return Err(corrupt.into()),
                Err(error) => {
                    tracing::debug!(broker = self.broker_id(), %error, "cannot read /controller");
                    self.retry_later(Event::ControllerChange);
                    return Ok(());
                }
            };
            match holder {
                // An earlier attempt of ours was applied without an answer.
                Some(Some(owner)) if owner == session => {
                    let version = epoch_version.unwrap_or(0);
                    return self.become_controller(epoch, version).await;
                }
                Some(_) => return Ok(()),
                None => {}
            }
            let new_epoch = epoch + 1;
            let bump = match epoch_version {
                Some(version) => Op::Set {
                    path: CONTROLLER_EPOCH.to_string(),
                    data: layout::encode(&new_epoch),
                    expected_version: Some(version),
                },
                None => Op::Create {
                    path: CONTROLLER_EPOCH.to_string(),
                    data: layout::encode(&new_epoch),
                    ephemeral_session: None,
                },
            };
            let create = Op::Create {
                path: CONTROLLER.to_string(),
                data: layout::encode(&ControllerRegistration {
                    broker_id: self.broker_id(),
                }),
                ephemeral_session: Some(session),
            };
            match self
                .metadata
                .propose(Command::Multi(vec![create, bump]))
                .await
            {
                Ok(Reply::Multi(replies)) => {
                    let version = match replies.get(1) {
                        Some(OpReply::Set { version }) => *version,
                        _ => 0,
                    };
                    return self.become_controller(new_epoch, version).await;
                }
                Ok(other) => {
                    tracing::error!(broker = self.broker_id(), reply = ?other, "unexpected answer to the election");
                    return Ok(());
                }
                Err(QuorumError::Store(StoreError::MultiFailed { op_index, error })) => {
                    match (op_index, *error) {
                        // Another broker won.
                        (0, StoreError::NodeExists { .. }) => return Ok(()),
                        // The session is gone; a new one will come with SessionOpened.
                        (0, StoreError::SessionExpired { .. }) => return Ok(()),
                        // The epoch moved between the read and the write: read again.
                        (1, StoreError::BadVersion { .. } | StoreError::NodeExists { .. }) => {
                            continue
                        }
                        (_, error) => {
                            tracing::error!(broker = self.broker_id(), %error, "election refused");
                            return Ok(());
                        }
                    }
                }
                Err(error) => {
                    tracing::debug!(broker = self.broker_id(), %error, "election unanswered");
                    self.retry_later(Event::ControllerChange);
                    return Ok(());
                }
            }
        }
    }

    /// Kafka's `onControllerFailover`.
    async fn become_controller(
        &mut self,
        epoch: ControllerEpoch,
        epoch_version: Version,
    ) -> Result<(), ControllerError> {
        let fencing = if self.config.bugs.kafka_3083 {
            // KAFKA-3083: writes fenced only by the partition state's own version and a
            // read-check of its controller_epoch field (Kafka 0.10).
            Fencing::PartitionVersionOnly
        } else {
            // KAFKA-6082: every write checks /controller_epoch at the version we set.
            Fencing::ControllerEpoch { epoch_version }
        };
        let writer = Writer::new(
            self.broker_id(),
            epoch,
            fencing,
            self.metadata.clone(),
            self.shared.session_lost_flag(),
        );
        tracing::info!(
            broker = self.broker_id(),
            epoch,
            ?fencing,
            "elected controller"
        );
        self.active = Some(Active {
            writer,
            live: LiveBrokers::new(),
            log_failures: LogFailures::new(),
            senders: Senders::new(&self.config, self.metadata.clone()),
            reassignments: BTreeMap::new(),
        });
        self.shared.set_controller(Some(epoch));
        self.failover().await
    }

    async fn failover(&mut self) -> Result<(), ControllerError> {
        let Some(active) = self.active.as_mut() else {
            return Ok(());
        };
        let (live, failures, partitions) = active
            .writer
            .read(|state| {
                Ok::<_, LayoutError>((
                    live_brokers(state)?,
                    log_failures(state)?,
                    all_partitions(state)?,
                ))
            })
            .await??;
        for &broker in live.keys() {
            active.senders.start(broker);
        }
        active.live = live;
        active.log_failures = failures;
        let all_live = active.live_set();
        let serving: BTreeMap<&TopicPartition, BTreeSet<BrokerId>> = partitions
            .keys()
            .map(|tp| (tp, active.live_for(tp)))
            .collect();
        let epoch = active.epoch();
        self.shared
            .set_live_brokers(all_live.iter().copied().collect());
        let live = all_live;
        let unclean = self.config.unclean_leader_election;
        let mut outbox = Outbox::new();
        let mut announced = BTreeSet::new();
        for (tp, current) in &partitions {
            let live = serving.get(tp).unwrap_or(&live);
            if current.state.leader.is_some_and(|l| live.contains(&l)) {
                continue;
            }
            if let Some(written) = self
                .update_partition(tp, |state| {
                    decisions::elect_leaderless(state, live, unclean, epoch)
                })
                .await?
            {
                self.announce(tp, &written, written.state.replicas.clone(), &mut outbox);
                announced.insert(tp.clone());
            }
        }
        for (tp, current) in &partitions {
            if !announced.contains(tp) {
                self.announce(tp, current, current.state.replicas.clone(), &mut outbox);
            }
        }
        tracing::info!(
            broker = self.broker_id(),
            epoch,
            live = ?live,
            partitions = partitions.len(),
            requests = outbox.len(),
            "controller failover: announcing every partition"
        );
        self.flush(outbox).await;
        Ok(())
    }

    /// Stops being controller, if this broker was.
    fn resign(&mut self, reason: &str) {
        let Some(active) = self.active.take() else {
            return;
        };
        tracing::warn!(
            broker = self.broker_id(),
            epoch = active.epoch(),
            reason,
            "controller resigned"
        );
        for (_, pending) in active.reassignments {
            let _ = pending.responder.send(Err(AdminError::ControllerMoved));
        }
        // Dropping the senders stops them and their queued requests.
        drop(active.senders);
        self.shared.set_controller(None);
        self.shared.count_resignation();
    }

    fn retry_later(&mut self, event: Event) {
        let shared = self.shared.clone();
        self.timers.spawn(async move {
            tokio::time::sleep(QUORUM_RETRY_BACKOFF).await;
            shared.queue.put(event);
        });
    }

    // ----- brokers -----------------------------------------------------------------

    /// Kafka's `BrokerChange`: diff the registrations against the cache.
    async fn on_broker_change(&mut self) -> Result<(), ControllerError> {
        let Some(active) = self.active.as_mut() else {
            return Ok(());
        };
        let (current, failures) = active
            .writer
            .read(|state| Ok::<_, LayoutError>((live_brokers(state)?, log_failures(state)?)))
            .await??;
        let dead: BTreeSet<BrokerId> = active
            .live
            .iter()
            .filter(|(id, index)| current.get(id) != Some(index))
            .map(|(id, _)| *id)
            .collect();
        let born: BTreeSet<BrokerId> = current
            .iter()
            .filter(|(id, index)| active.live.get(id) != Some(index))
            .map(|(id, _)| *id)
            .collect();
        let previous = std::mem::replace(&mut active.log_failures, failures);
        let (failed, back) = log_failure_news(&previous, &active.log_failures, &current, &born);
        if dead.is_empty() && born.is_empty() {
            if !failed.is_empty() || !back.is_empty() {
                self.on_log_failures(&failed, &back).await?;
            }
            return Ok(());
        }
        tracing::info!(
            broker = self.config.broker_id,
            ?dead,
            ?born,
            "brokers changed"
        );
        for id in &dead {
            active.senders.stop(*id);
        }
        for id in &born {
            active.senders.start(*id);
        }
        active.live = current;
        self.shared
            .set_live_brokers(active.live.keys().copied().collect());
        if !dead.is_empty() {
            self.on_brokers_failed(&dead).await?;
        }
        if !born.is_empty() {
            self.on_brokers_started(&born).await?;
        }
        if !failed.is_empty() || !back.is_empty() {
            self.on_log_failures(&failed, &back).await?;
        }
        Ok(())
    }

    /// Kafka's log-dir failure handling: the replicas of `failed` lost their log, so
    /// each partition's leadership moves away from them (and they leave its ISR) as if
    /// their brokers had died for it alone; the replicas of `back` have their log open
    /// again, with no role, and are told the partition's state (a leader is elected if it
    /// has none).
    async fn on_log_failures(
        &mut self,
        failed: &BTreeMap<TopicPartition, BTreeSet<BrokerId>>,
        back: &BTreeMap<TopicPartition, BTreeSet<BrokerId>>,
    ) -> Result<(), ControllerError> {
        let Some(active) = self.active.as_ref() else {
            return Ok(());
        };
        let partitions = active.writer.read(all_partitions).await??;
        let epoch = active.epoch();
        let unclean = self.config.unclean_leader_election;
        let affected: BTreeSet<&TopicPartition> = failed.keys().chain(back.keys()).collect();
        let serving: BTreeMap<&TopicPartition, BTreeSet<BrokerId>> = affected
            .iter()
            .map(|&tp| (tp, active.live_for(tp)))
            .collect();
        let mut outbox = Outbox::new();
        for tp in affected {
            let Some(current) = partitions.get(tp) else {
                continue;
            };
            let live = serving.get(tp).cloned().unwrap_or_default();
            let mut latest = current.clone();
            let mut told_all = false;
            if let Some(failing) = failed.get(tp) {
                let others: BTreeSet<BrokerId> = live.difference(failing).copied().collect();
                match self
                    .update_partition(tp, |state| {
                        decisions::after_broker_failure(state, failing, &others, unclean, epoch)
                    })
                    .await
                {
                    Ok(Some(written)) => {
                        tracing::info!(broker = self.broker_id(), partition = ?tp, failing = ?failing,
                            state = ?written.state, "partition state changed after a log failure");
                        self.announce(tp, &written, written.state.replicas.clone(), &mut outbox);
                        latest = written;
                        told_all = true;
                    }
                    Ok(None) => {}
                    Err(error) if error.is_fenced() => {
                        self.flush(outbox).await;
                        return Err(error);
                    }
                    Err(error) => {
                        tracing::warn!(broker = self.broker_id(), partition = ?tp, %error,
                            "cannot handle the log failure for this partition");
                    }
                }
            }
            let Some(returning) = back.get(tp) else {
                continue;
            };
            match self
                .update_partition(tp, |state| {
                    decisions::elect_leaderless(state, &live, unclean, epoch)
                })
                .await
            {
                Ok(Some(written)) => {
                    tracing::info!(broker = self.broker_id(), partition = ?tp, state = ?written.state,
                        "leader elected once a failed log was back");
                    self.announce(tp, &written, written.state.replicas.clone(), &mut outbox);
                    continue;
                }
                Ok(None) => {}
                Err(error) if error.is_fenced() => {
                    self.flush(outbox).await;
                    return Err(error);
                }
                Err(error) => {
                    tracing::warn!(broker = self.broker_id(), partition = ?tp, %error, "cannot elect a leader");
                }
            }
            if !told_all {
                self.announce(
                    tp,
                    &latest,
                    returning.iter().copied().collect(),
                    &mut outbox,
                );
            }
        }
        self.flush(outbox).await;
        Ok(())
    }

    /// Kafka's `onBrokerFailure`.
    async fn on_brokers_failed(
        &mut self,
        dead: &BTreeSet<BrokerId>,
    ) -> Result<(), ControllerError> {
        let Some(active) = self.active.as_ref() else {
            return Ok(());
        };
        let partitions = active.writer.read(all_partitions).await??;
        let live = active.live_set();
        let active_failures = active.log_failures.clone();
        let epoch = active.epoch();
        let unclean = self.config.unclean_leader_election;
        let mut outbox = Outbox::new();
        for (tp, current) in &partitions {
            let state = &current.state;
            let affected = state.leader.is_some_and(|l| dead.contains(&l))
                || state.isr.iter().any(|id| dead.contains(id));
            if !affected {
                continue;
            }
            let live: BTreeSet<BrokerId> = live
                .iter()
                .copied()
                .filter(|broker| serving(&active_failures, *broker, tp))
                .collect();
            let written = self
                .update_partition(tp, |state| {
                    decisions::after_broker_failure(state, dead, &live, unclean, epoch)
                })
                .await;
            match written {
                Ok(Some(written)) => {
                    tracing::info!(broker = self.broker_id(), partition = ?tp, state = ?written.state,
                        version = written.version, "partition state changed after broker failure");
                    self.announce(tp, &written, written.state.replicas.clone(), &mut outbox);
                }
                Ok(None) => {}
                Err(error) if error.is_fenced() => {
                    self.flush(outbox).await;
                    return Err(error);
                }
                Err(error) => {
                    tracing::warn!(broker = self.broker_id(), partition = ?tp, %error, "cannot handle the broker failure for this partition")
                }
            }
        }
        self.flush(outbox).await;
        Ok(())
    }

    /// Kafka's `onBrokerStartup`.
    async fn on_brokers_started(
        &mut self,
        born: &BTreeSet<BrokerId>,
    ) -> Result<(), ControllerError> {
        let Some(active) = self.active.as_ref() else {
            return Ok(());
        };
        let partitions = active.writer.read(all_partitions).await??;
        let live = active.live_set();
        let active_failures = active.log_failures.clone();
        let epoch = active.epoch();
        let unclean = self.config.unclean_leader_election;
        let mut outbox = Outbox::new();
        for (tp, current) in &partitions {
            let state = &current.state;
            let live: BTreeSet<BrokerId> = live
                .iter()
                .copied()
                .filter(|broker| serving(&active_failures, *broker, tp))
                .collect();
            if !state.leader.is_some_and(|l| live.contains(&l)) {
                match self
                    .update_partition(tp, |state| {
                        decisions::elect_leaderless(state, &live, unclean, epoch)
                    })
                    .await
                {
                    Ok(Some(written)) => {
                        tracing::info!(broker = self.broker_id(), partition = ?tp, state = ?written.state,
                            "leader elected for a leaderless partition");
                        self.announce(tp, &written, written.state.replicas.clone(), &mut outbox);
                        continue;
                    }
                    Ok(None) => {}
                    Err(error) if error.is_fenced() => {
                        self.flush(outbox).await;
                        return Err(error);
                    }
                    Err(error) => {
                        tracing::warn!(broker = self.broker_id(), partition = ?tp, %error, "cannot elect a leader");
                    }
                }
            }
            let hosts: Vec<BrokerId> = state
                .replicas
                .iter()
                .copied()
                .filter(|id| born.contains(id))
                .collect();
            if !hosts.is_empty() {
                self.announce(tp, current, hosts, &mut outbox);
            }
        }
        self.flush(outbox).await;
        Ok(())
    }

    // ----- partition writes and LeaderAndIsr ----------------------------------------

    /// Reads the partition's state, asks `decide` for its next one, writes it
    /// conditionally; on a version conflict (the leader wrote its ISR meanwhile) reads
    /// and decides again. `None` if `decide` wants no change.
    async fn update_partition(
        &self,
        tp: &TopicPartition,
        mut decide: impl FnMut(&PartitionState) -> Option<PartitionState>,
    ) -> Result<Option<VersionedState>, ControllerError> {
        let Some(active) = self.active.as_ref() else {
            return Err(WriteError::ControllerMoved.into());
        };
        let mut attempted: Option<PartitionState> = None;
        for _ in 0..MAX_CONFLICTS {
            let current = active
                .writer
                .read(|state| layout::partition_state(state, tp))
                .await??
                .ok_or_else(|| ControllerError::NoPartition(tp.clone()))?;
            if attempted.as_ref() == Some(&current.state) {
                // An attempt the quorum did not answer was applied after all.
                return Ok(Some(current));
            }
            let Some(next) = decide(&current.state) else {
                return Ok(None);
            };
            match active.writer.write_state(tp, &current, &next).await {
                Ok(version) => {
                    return Ok(Some(VersionedState {
                        state: next,
                        version,
                    }))
                }
                Err(WriteError::Conflict) => attempted = Some(next),
                Err(error) => return Err(error.into()),
            }
        }
        Err(ControllerError::TooManyConflicts(tp.clone()))
    }

    /// Queues a LeaderAndIsr for `state` to each of `to` that is alive. Nothing is sent
    /// for a partition without a leader (the request cannot say "no leader").
    fn announce(
        &mut self,
        tp: &TopicPartition,
        state: &VersionedState,
        to: Vec<BrokerId>,
        outbox: &mut Outbox,
    ) {
        let Some(active) = self.active.as_mut() else {
            return;
        };
        let Some(leader) = state.state.leader else {
            return;
        };
        let body = LeaderAndIsrBody {
            topic: tp.topic.clone(),
            partition: tp.partition,
            controller_epoch: active.epoch(),
            leader,
            leader_epoch: state.state.leader_epoch,
            isr: state.state.isr.clone(),
            version: state.version,
            replicas: state.state.replicas.clone(),
        };
        for broker in to {
            if active.live.contains_key(&broker) {
                let rx = active.senders.send(broker, body.clone());
                outbox.push(((broker, tp.clone()), rx));
            }
        }
    }

    /// Waits (bounded) for an event's LeaderAndIsr requests and logs the refusals.
    async fn flush(&self, outbox: Outbox) {
        if outbox.is_empty() {
            return;
        }
        for ((broker, tp), outcome) in await_deliveries(outbox, FLUSH_WAIT).await {
            match outcome {
                Some(Delivery::Accepted) => {}
                // Expected at failover, which re-announces unchanged leader epochs (the
                // broker still adopts the new controller epoch).
                Some(Delivery::Rejected { code, .. }) if code == "stale_leader_epoch" => {
                    tracing::debug!(controller = self.broker_id(), broker, partition = ?tp,
                        "LeaderAndIsr: leader epoch already known")
                }
                Some(Delivery::Rejected { code, message }) => tracing::info!(
                    controller = self.broker_id(), broker, partition = ?tp, code, message,
                    "LeaderAndIsr rejected"
                ),
                Some(Delivery::Abandoned(reason)) => tracing::info!(
                    controller = self.broker_id(), broker, partition = ?tp, reason,
                    "LeaderAndIsr abandoned"
                ),
                None => tracing::info!(
                    controller = self.broker_id(), broker, partition = ?tp,
                    "LeaderAndIsr still unanswered; its sender keeps trying"
                ),
            }
        }
    }

    // ----- admin --------------------------------------------------------------------

    async fn admin(&mut self, request: AdminRequest, responder: AdminResponder) {
        if self.active.is_none() {
            let controller = self
                .metadata
                .read_local(|state, _| layout::controller(state).ok().flatten());
            let _ = responder.send(Err(AdminError::NotController { controller }));
            return;
        }
        let result = match request {
            AdminRequest::CreateTopic(request) => self.create_topic(request).await,
            AdminRequest::ElectPreferred(request) => self.elect_preferred(request).await,
            AdminRequest::TransferLeader(request) => self.transfer_leader(request).await,
            AdminRequest::Reassign(request) => {
                // Answered when the reassignment completes or times out.
                return self.start_reassignment(request, responder).await;
            }
        };
        let _ = responder.send(self.admin_result(result));
    }

    /// Turns a failure into the admin error, resigning if the controller was fenced.
    fn admin_result(
        &mut self,
        result: Result<AdminReply, Failure>,
    ) -> Result<AdminReply, AdminError> {
        match result {
            Ok(reply) => Ok(reply),
            Err(Failure::Refused(error)) => Err(error),
            Err(Failure::Controller(error)) => {
                let fenced = error.is_fenced();
                let admin = error.into_admin();
                if fenced {
                    self.shared.count_fenced_write();
                    self.resign("fenced while serving an admin request");
                }
                Err(admin)
            }
        }
    }

    fn configured(&self) -> BTreeSet<BrokerId> {
        self.config.brokers.iter().map(|peer| peer.id).collect()
    }

    async fn create_topic(&mut self, request: CreateTopic) -> Result<AdminReply, Failure> {
        let placement = request.placement(&self.configured())?;
        let Some(active) = self.active.as_ref() else {
            return Err(WriteError::ControllerMoved.into());
        };
        let topic = request.topic.clone();
        let epoch = active.epoch();
        let path = layout::topic_path(&topic);
        let (exists, topic_count) = active
            .writer
            .read(|state| {
                (
                    state.exists(&path),
                    state.children(layout::TOPICS).map_or(0, |c| c.len()),
                )
            })
            .await?;
        if exists {
            return Err(AdminError::TopicExists(topic).into());
        }
        let live = active.live_set();
        let assignment = match placement {
            Placement::Explicit(assignment) => assignment,
            Placement::RoundRobin {
                partitions,
                replication_factor,
            } => {
                let brokers: Vec<BrokerId> = live.iter().copied().collect();
                decisions::assign_round_robin(
                    &brokers,
                    partitions,
                    replication_factor,
                    topic_count,
                )?
            }
        };
        let states = assignment
            .iter()
            .map(|replicas| decisions::initial_state(replicas, &live, epoch))
            .collect::<Result<Vec<_>, Refusal>>()?;
        let config = TopicConfig {
            partitions: states.len() as u32,
            replication_factor: assignment.first().map_or(0, |r| r.len() as u32),
        };
        let ops = layout::create_topic_ops(&topic, &config, &states);
        match active.writer.create(ops).await {
            Ok(()) => {}
            Err(WriteError::Store(StoreError::NodeExists { .. })) => {
                return Err(AdminError::TopicExists(topic).into())
            }
            Err(error) => return Err(error.into()),
        }
        tracing::info!(
            broker = self.broker_id(),
            topic,
            ?assignment,
            "topic created"
        );
        let mut outbox = Outbox::new();
        let mut partitions = Vec::new();
        for (partition, state) in states.into_iter().enumerate() {
            let tp = TopicPartition::new(topic.clone(), partition as u32);
            let stored = VersionedState { state, version: 0 };
            self.announce(&tp, &stored, stored.state.replicas.clone(), &mut outbox);
            partitions.push(PartitionMetadata::new(tp.partition, &stored.state, 0));
        }
        self.flush(outbox).await;
        Ok(AdminReply::TopicCreated(TopicCreated { topic, partitions }))
    }

    async fn elect_preferred(&mut self, request: ElectPreferred) -> Result<AdminReply, Failure> {
        request.check()?;
        let Some(active) = self.active.as_ref() else {
            return Err(WriteError::ControllerMoved.into());
        };
        let partitions = active.writer.read(all_partitions).await??;
        let chosen: Vec<(TopicPartition, VersionedState)> = partitions
            .into_iter()
            .filter(|(tp, _)| request.covers(tp))
            .collect();
        if chosen.is_empty() {
            if let Some(topic) = &request.topic {
                return Err(match request.partition {
                    Some(partition) => AdminError::UnknownPartition {
                        topic: topic.clone(),
                        partition,
                    },
                    None => AdminError::UnknownTopic(topic.clone()),
                }
                .into());
            }
        }
        let live = active.live_set();
        let epoch = active.epoch();
        let mut outbox = Outbox::new();
        let mut outcomes = Vec::new();
        for (tp, current) in chosen {
            let mut refusal = None;
            let written = self
                .update_partition(&tp, |state| {
                    match decisions::preferred_election(state, &live, epoch) {
                        Ok(next) => next,
                        Err(why) => {
                            refusal = Some(why);
                            None
                        }
                    }
                })
                .await?;
            let (result, state, message) = match (written, refusal) {
                (Some(written), _) => {
                    self.announce(&tp, &written, written.state.replicas.clone(), &mut outbox);
                    (ElectionResult::Elected, written.state, None)
                }
                (None, Some(why)) => (
                    ElectionResult::PreferredNotAvailable,
                    current.state,
                    Some(why.to_string()),
                ),
                (None, None) => (ElectionResult::AlreadyPreferred, current.state, None),
            };
            outcomes.push(ElectionOutcome {
                topic: tp.topic.clone(),
                partition: tp.partition,
                result,
                leader: state.leader,
                leader_epoch: state.leader_epoch,
                message,
            });
        }
        self.flush(outbox).await;
        Ok(AdminReply::Elected(ElectionReport {
            partitions: outcomes,
        }))
    }

    async fn transfer_leader(&mut self, request: TransferLeader) -> Result<AdminReply, Failure> {
        request.check()?;
        let Some(active) = self.active.as_ref() else {
            return Err(WriteError::ControllerMoved.into());
        };
        let tp = TopicPartition::new(request.topic.clone(), request.partition);
        let live = active.live_set();
        let epoch = active.epoch();
        let mut refusal = None;
        let written = self
            .update_partition(&tp, |state| {
                match decisions::transfer_leadership(state, request.leader, &live, epoch) {
                    Ok(next) => Some(next),
                    Err(why) => {
                        refusal = Some(why);
                        None
                    }
                }
            })
            .await?;
        let Some(written) = written else {
            return Err(match refusal {
                Some(why) => why.into(),
                None => WriteError::ControllerMoved.into(),
            });
        };
        tracing::info!(broker = self.broker_id(), partition = ?tp, leader = request.leader,
            leader_epoch = written.state.leader_epoch, "leadership transferred");
        let mut outbox = Outbox::new();
        self.announce(&tp, &written, written.state.replicas.clone(), &mut outbox);
        self.flush(outbox).await;
        Ok(AdminReply::Partition(PartitionInfo::new(
            &tp,
            &written.state,
            written.version,
        )))
    }

    /// Steps 1–3 of Kafka 1.1's reassignment; the rest runs in
    /// [`Controller::check_reassignments`] once the new replicas are in the ISR.
    async fn start_reassignment(&mut self, request: Reassign, responder: AdminResponder) {
        let result = self.begin_reassignment(&request).await;
        let tp = TopicPartition::new(request.topic.clone(), request.partition);
        match result {
            Ok(Some(reply)) => {
                let _ = responder.send(Ok(reply));
            }
            Ok(None) => {
                let Some(active) = self.active.as_mut() else {
                    let _ = responder.send(Err(AdminError::ControllerMoved));
                    return;
                };
                self.next_reassignment += 1;
                let id = self.next_reassignment;
                let timeout_ms = request.timeout_ms();
                active.reassignments.insert(
                    tp.clone(),
                    PendingReassignment {
                        id,
                        target: request.replicas.clone(),
                        timeout_ms,
                        responder,
                    },
                );
                let shared = self.shared.clone();
                let timer_tp = tp.clone();
                self.timers.spawn(async move {
                    tokio::time::sleep(Duration::from_millis(timeout_ms)).await;
                    shared.queue.put(Event::ReassignTimeout(timer_tp, id));
                });
                // The new replicas may already be in sync (a shrinking reassignment).
                if let Err(error) = self.check_reassignments().await {
                    self.on_error(error);
                }
            }
            Err(error) => {
                let _ = responder.send(self.admin_result(Err(error)));
            }
        }
    }

    /// Validates and writes AR = RAR + (OAR − RAR). `Some(reply)` when there is nothing
    /// to wait for (the assignment already is the target).
    async fn begin_reassignment(
        &mut self,
        request: &Reassign,
    ) -> Result<Option<AdminReply>, Failure> {
        request.check()?;
        let configured = self.configured();
        let Some(active) = self.active.as_ref() else {
            return Err(WriteError::ControllerMoved.into());
        };
        let tp = TopicPartition::new(request.topic.clone(), request.partition);
        if active.reassignments.contains_key(&tp) {
            return Err(AdminError::ReassignmentInProgress {
                topic: tp.topic,
                partition: tp.partition,
            }
            .into());
        }
        let live = active.live_set();
        decisions::validate_reassignment(&request.replicas, &configured, &live)?;
        let epoch = active.epoch();
        let current = active
            .writer
            .read(|state| layout::partition_state(state, &tp))
            .await??
            .ok_or_else(|| AdminError::UnknownPartition {
                topic: tp.topic.clone(),
                partition: tp.partition,
            })?;
        if current.state.replicas == request.replicas {
            return Ok(Some(AdminReply::Partition(PartitionInfo::new(
                &tp,
                &current.state,
                current.version,
            ))));
        }
        let written = self
            .update_partition(&tp, |state| {
                decisions::reassignment_start(state, &request.replicas, epoch)
            })
            .await?;
        if let Some(written) = written {
            tracing::info!(broker = self.broker_id(), partition = ?tp, target = ?request.replicas,
                replicas = ?written.state.replicas, "reassignment started");
            let mut outbox = Outbox::new();
            self.announce(&tp, &written, written.state.replicas.clone(), &mut outbox);
            self.flush(outbox).await;
        }
        Ok(None)
    }

    /// Finishes every pending reassignment whose new replicas are all in the ISR.
    async fn check_reassignments(&mut self) -> Result<(), ControllerError> {
        let Some(active) = self.active.as_ref() else {
            return Ok(());
        };
        if active.reassignments.is_empty() {
            return Ok(());
        }
        let pending: Vec<(TopicPartition, Vec<BrokerId>)> = active
            .reassignments
            .iter()
            .map(|(tp, p)| (tp.clone(), p.target.clone()))
            .collect();
        let live = active.live_set();
        let epoch = active.epoch();
        for (tp, target) in pending {
            let Some(active) = self.active.as_ref() else {
                return Ok(());
            };
            let current = active
                .writer
                .read(|state| layout::partition_state(state, &tp))
                .await??;
            let Some(current) = current else {
                self.answer_reassignment(
                    &tp,
                    Err(AdminError::UnknownPartition {
                        topic: tp.topic.clone(),
                        partition: tp.partition,
                    }),
                );
                continue;
            };
            if !decisions::reassignment_missing(&current.state, &target).is_empty() {
                continue;
            }
            let old = current.state.replicas.clone();
            let mut refusal = None;
            let written = self
                .update_partition(&tp, |state| {
                    match decisions::reassignment_finish(state, &target, &live, epoch) {
                        Ok(next) => Some(next),
                        Err(why) => {
                            refusal = Some(why);
                            None
                        }
                    }
                })
                .await?;
            match written {
                Some(written) => {
                    tracing::info!(broker = self.broker_id(), partition = ?tp, state = ?written.state,
                        "reassignment completed");
                    // The union assignment: the new replicas and the removed ones.
                    let mut outbox = Outbox::new();
                    self.announce(&tp, &written, old, &mut outbox);
                    self.flush(outbox).await;
                    let reply = AdminReply::Partition(PartitionInfo::new(
                        &tp,
                        &written.state,
                        written.version,
                    ));
                    self.answer_reassignment(&tp, Ok(reply));
                }
                None => {
                    if let Some(why) = refusal {
                        self.answer_reassignment(&tp, Err(why.into()));
                    }
                }
            }
        }
        Ok(())
    }

    async fn reassignment_timed_out(
        &mut self,
        tp: TopicPartition,
        id: u64,
    ) -> Result<(), ControllerError> {
        let Some(active) = self.active.as_ref() else {
            return Ok(());
        };
        let Some(pending) = active.reassignments.get(&tp).filter(|p| p.id == id) else {
            return Ok(());
        };
        let target = pending.target.clone();
        let timeout_ms = pending.timeout_ms;
        let missing = match active
            .writer
            .read(|state| layout::partition_state(state, &tp))
            .await?
        {
            Ok(Some(current)) => decisions::reassignment_missing(&current.state, &target),
            _ => target.clone(),
        };
        tracing::warn!(broker = self.broker_id(), partition = ?tp, ?missing, timeout_ms,
            "reassignment timed out");
        self.answer_reassignment(
            &tp,
            Err(AdminError::ReassignmentTimeout {
                topic: tp.topic.clone(),
                partition: tp.partition,
                missing,
                timeout_ms,
            }),
        );
        Ok(())
    }

    fn answer_reassignment(&mut self, tp: &TopicPartition, result: Result<AdminReply, AdminError>) {
        if let Some(pending) = self
            .active
            .as_mut()
            .and_then(|a| a.reassignments.remove(tp))
        {
            let _ = pending.responder.send(result);
        }
    }

    // ----- auto leader rebalance ------------------------------------------------------

    async fn auto_rebalance(&mut self) -> Result<(), ControllerError> {
        let Some(active) = self.active.as_ref() else {
            return Ok(());
        };
        let partitions = active.writer.read(all_partitions).await??;
        let live = active.live_set();
        let epoch = active.epoch();
        let states: BTreeMap<TopicPartition, PartitionState> = partitions
            .into_iter()
            .filter(|(tp, _)| !active.reassignments.contains_key(tp))
            .map(|(tp, s)| (tp, s.state))
            .collect();
        let due = decisions::imbalanced_partitions(&states, &live, LEADER_IMBALANCE_PERCENT);
        if due.is_empty() {
            return Ok(());
        }
        tracing::info!(broker = self.broker_id(), partitions = ?due, "auto leader rebalance");
        let mut outbox = Outbox::new();
        for tp in due {
            let written = self
                .update_partition(&tp, |state| {
                    decisions::preferred_election(state, &live, epoch)
                        .ok()
                        .flatten()
                })
                .await;
            match written {
                Ok(Some(written)) => {
                    self.announce(&tp, &written, written.state.replicas.clone(), &mut outbox)
                }
                Ok(None) => {}
                Err(error) if error.is_fenced() => {
                    self.flush(outbox).await;
                    return Err(error);
                }
                Err(error) => {
                    tracing::warn!(broker = self.broker_id(), partition = ?tp, %error, "preferred election failed")
                }
            }
        }
        self.flush(outbox).await;
        Ok(())
    }
}

/// The registered brokers and the creation index of each registration.
fn live_brokers(state: &MetadataState) -> Result<LiveBrokers, LayoutError> {
    Ok(layout::live_brokers(state)?
        .into_iter()
        .map(|registration| {
            let created = state
                .stat(&layout::broker_path(registration.id))
                .map_or(0, |stat| stat.created_index);
            (registration.id, created)
        })
        .collect())
}

/// Every registered broker's log failures.
fn log_failures(state: &MetadataState) -> Result<LogFailures, LayoutError> {
    let mut failures = LogFailures::new();
    for registration in layout::live_brokers(state)? {
        for failure in &registration.log_failures {
            failures.insert(
                (registration.id, failure.tp()),
                (failure.failures, failure.offline),
            );
        }
    }
    Ok(failures)
}

/// Whether `broker`'s replica of `tp` can serve, as `failures` say (not offline).
fn serving(failures: &LogFailures, broker: BrokerId, tp: &TopicPartition) -> bool {
    !failures
        .get(&(broker, tp.clone()))
        .is_some_and(|&(_, offline)| offline)
}

/// What changed between two readings of the log failures, for brokers registered in
/// both (a newly registered broker is announced everything anyway): per partition, the
/// brokers whose log failed again, and those whose log is open again (after a failure
/// seen now, or one that had it offline).
#[allow(clippy::type_complexity)]
fn log_failure_news(
    before: &LogFailures,
    now: &LogFailures,
    live: &LiveBrokers,
    born: &BTreeSet<BrokerId>,
) -> (
    BTreeMap<TopicPartition, BTreeSet<BrokerId>>,
    BTreeMap<TopicPartition, BTreeSet<BrokerId>>,
) {
    let mut failed: BTreeMap<TopicPartition, BTreeSet<BrokerId>> = BTreeMap::new();
    let mut back: BTreeMap<TopicPartition, BTreeSet<BrokerId>> = BTreeMap::new();
    for ((broker, tp), &(count, offline)) in now {
        if born.contains(broker) || !live.contains_key(broker) {
            continue;
        }
        let (count_before, offline_before) = before
            .get(&(*broker, tp.clone()))
            .copied()
            .unwrap_or((0, false));
        let failed_again = count > count_before;
        if failed_again {
            failed.entry(tp.clone()).or_default().insert(*broker);
        }
        if !offline && (failed_again || offline_before) {
            back.entry(tp.clone()).or_default().insert(*broker);
        }
    }
    (failed, back)
}

/// Every partition's stored state.
fn all_partitions(
    state: &MetadataState,
) -> Result<BTreeMap<TopicPartition, VersionedState>, LayoutError> {
    let mut partitions = BTreeMap::new();
    for (topic, config) in layout::topics(state)? {
        for partition in 0..config.partitions {
            let tp = TopicPartition::new(topic.clone(), partition);
            if let Some(stored) = layout::partition_state(state, &tp)? {
                partitions.insert(tp, stored);
            }
        }
    }
    Ok(partitions)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(partition: u32) -> TopicPartition {
        TopicPartition::new("t", partition)
    }

    #[test]
    fn log_failure_news_sees_new_failures_and_returns_of_registered_brokers() {
        let live: LiveBrokers = [(1, 10), (2, 11), (3, 12)].into_iter().collect();
        let before: LogFailures = [((1, tp(0)), (1, true)), ((2, tp(0)), (1, false))]
            .into_iter()
            .collect();
        let now: LogFailures = [
            // Back: was offline, is not.
            ((1, tp(0)), (1, false)),
            // Failed again and reopened before the controller looked: both.
            ((2, tp(0)), (2, false)),
            // A first failure, still offline: failed only.
            ((2, tp(1)), (1, true)),
            // A newly registered broker is announced everything anyway.
            ((3, tp(1)), (4, true)),
            // Not registered (any more): nothing.
            ((4, tp(1)), (1, false)),
        ]
        .into_iter()
        .collect();
        let born: BTreeSet<BrokerId> = [3].into_iter().collect();
        let (failed, back) = log_failure_news(&before, &now, &live, &born);
        let set = |ids: &[BrokerId]| ids.iter().copied().collect::<BTreeSet<_>>();
        assert_eq!(
            failed,
            [(tp(0), set(&[2])), (tp(1), set(&[2]))]
                .into_iter()
                .collect()
        );
        assert_eq!(back, [(tp(0), set(&[1, 2]))].into_iter().collect());
        // Nothing new: nothing to do.
        let (failed, back) = log_failure_news(&now, &now, &live, &BTreeSet::new());
        assert!(failed.is_empty() && back.is_empty());
    }
}
