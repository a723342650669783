//! The partition driver: owns each local `Replica<SegmentLog>`, calls it with the clock's
//! `now_ms`, and carries out the [`Effect`]s it returns, as `replica::sim` does for its
//! in-memory cluster: produce completions go to the waiting HTTP handler, ISR writes to
//! the metadata store (their result back to the replica), requests to the leader's
//! fetcher.
//!
//! A storage failure is not forever. The replica is rebuilt at once from what its log
//! holds on disk (with no role until the next LeaderAndIsr); if even that fails, the
//! partition is offline and [`Node::tick_all`] tries to reopen it again, backing off from
//! [`REOPEN_BACKOFF_MIN`] to [`REOPEN_BACKOFF_MAX`]. Either way the failure is published
//! through [`LogHealth`] in this broker's registration, as Kafka's log-dir failure
//! notification: the controller moves the partition's leadership to another replica of
//! the ISR and, once the log is open again, sends this broker its new role.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};

use super::failpoints;
use super::fetcher::Outgoing;
use super::Node;
use crate::config::NodeConfig;
use crate::metadata::layout::LogFailure;
use crate::metadata::{layout, Command, Op, OpReply, Reply, StoreError};
use crate::quorum::QuorumError;
use crate::replica::metadata::{MetadataError, PartitionState, StateVersion, TopicPartition};
use crate::replica::{
    BrokerId, Effect, LeaderAndIsr, LeaderAndIsrError, ProduceResult, Replica, ReplicaConfig,
    ReplicaError, ReplicaEvent,
};
use crate::storage::SegmentLog;

/// Why a partition could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PartitionError {
    #[error("partition is offline: {0}")]
    Offline(String),
    #[error("storage failed: {0}")]
    Storage(String),
}

enum Slot {
    Open(Box<Replica<SegmentLog>>),
    /// The log failed and could not be reopened.
    Offline(Offline),
    /// The broker stopped.
    Closed,
}

/// A partition whose log could not be reopened, and when to try again.
struct Offline {
    reason: String,
    config: ReplicaConfig,
    retry_at: Instant,
    backoff: Duration,
}

/// The first wait before reopening a log that failed to reopen; it doubles at each
/// failed attempt up to [`REOPEN_BACKOFF_MAX`].
pub const REOPEN_BACKOFF_MIN: Duration = Duration::from_millis(500);
pub const REOPEN_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// The partitions whose log failed on this broker, for its registration (see
/// [`LogFailure`]): the registration task publishes every change.
pub struct LogHealth {
    failures: watch::Sender<Vec<LogFailure>>,
}

impl Default for LogHealth {
    fn default() -> LogHealth {
        LogHealth {
            failures: watch::channel(Vec::new()).0,
        }
    }
}

impl LogHealth {
    /// The log of `tp` failed; `offline` when it could not be reopened.
    pub fn failed(&self, tp: &TopicPartition, offline: bool) {
        self.failures.send_modify(|failures| {
            match failures
                .iter_mut()
                .find(|f| f.topic == tp.topic && f.partition == tp.partition)
            {
                Some(failure) => {
                    failure.failures += 1;
                    failure.offline = offline;
                }
                None => failures.push(LogFailure {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    failures: 1,
                    offline,
                }),
            }
        });
    }

    /// The log of `tp` is open again.
    pub fn reopened(&self, tp: &TopicPartition) {
        self.failures.send_modify(|failures| {
            for failure in failures.iter_mut() {
                if failure.topic == tp.topic && failure.partition == tp.partition {
                    failure.offline = false;
                }
            }
        });
    }

    /// The failures so far, and every change after.
    pub fn subscribe(&self) -> watch::Receiver<Vec<LogFailure>> {
        self.failures.subscribe()
    }
}

/// One local partition replica.
pub struct Partition {
    pub(crate) tp: TopicPartition,
    broker: BrokerId,
    dir: PathBuf,
    health: Arc<LogHealth>,
    storage: crate::storage::StorageConfig,
    slot: Mutex<Slot>,
    /// Bumped whenever the log end offset or the leader epoch changes, or the partition
    /// closes: wakes long-polling fetches. Only new data (or a role change) wakes them,
    /// not a HW move alone, as in Kafka.
    changed: watch::Sender<u64>,
}

fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves the replica as the panicking call left it;
    // the other partitions and requests should still be served.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Partition {
    /// Runs `f` on the replica; a storage error takes the log offline and rebuilds the
    /// replica from disk.
    pub fn with<T>(
        &self,
        f: impl FnOnce(&mut Replica<SegmentLog>) -> Result<T, ReplicaError>,
    ) -> Result<T, PartitionError> {
        let mut slot = lock(&self.slot);
        let replica = match &mut *slot {
            Slot::Open(replica) => replica,
            Slot::Offline(offline) => return Err(PartitionError::Offline(offline.reason.clone())),
            Slot::Closed => return Err(PartitionError::Offline("broker is stopping".into())),
        };
        let before = (replica.log_end_offset(), replica.leader_epoch());
        match f(replica) {
            Ok(value) => {
                for event in replica.take_events() {
                    log_replica_event(replica.broker_id(), &self.tp, &event);
                }
                if (replica.log_end_offset(), replica.leader_epoch()) != before {
                    self.changed.send_modify(|generation| *generation += 1);
                }
                Ok(value)
            }
            Err(error) => {
                let message = error.to_string();
                tracing::error!(partition = ?self.tp, %error, "replica log failed; reopening it");
                let config = replica.config().clone();
                *slot = self.reopen(config, REOPEN_BACKOFF_MIN);
                self.health
                    .failed(&self.tp, matches!(*slot, Slot::Offline(_)));
                self.changed.send_modify(|generation| *generation += 1);
                Err(PartitionError::Storage(message))
            }
        }
    }

    /// Reads the replica without changing it.
    pub fn inspect<T>(&self, f: impl FnOnce(&Replica<SegmentLog>) -> T) -> Result<T, String> {
        match &*lock(&self.slot) {
            Slot::Open(replica) => Ok(f(replica)),
            Slot::Offline(offline) => Err(offline.reason.clone()),
            Slot::Closed => Err("broker is stopping".into()),
        }
    }

    /// Reopens the log of an offline partition when its retry time has come; `true`
    /// when it is open again (with no role: the controller sends it one).
    pub fn retry_reopen(&self) -> bool {
        let mut slot = lock(&self.slot);
        let Slot::Offline(offline) = &*slot else {
            return false;
        };
        if Instant::now() < offline.retry_at {
            return false;
        }
        let backoff = (offline.backoff * 2).min(REOPEN_BACKOFF_MAX);
        *slot = self.reopen(offline.config.clone(), backoff);
        let reopened = matches!(*slot, Slot::Open(_));
        if reopened {
            tracing::info!(partition = ?self.tp, "partition log reopened");
            self.health.reopened(&self.tp);
            self.changed.send_modify(|generation| *generation += 1);
        }
        reopened
    }

    /// Opens the log again after a failure: the slot to hold, offline (retried after
    /// `backoff`) when it cannot be opened.
    fn reopen(&self, config: ReplicaConfig, backoff: Duration) -> Slot {
        match self.open(config.clone()) {
            Ok(replica) => Slot::Open(Box::new(replica)),
            Err(reason) => {
                tracing::error!(partition = ?self.tp, error = %reason, retry_in = ?backoff,
                    "partition offline: its log cannot be reopened");
                Slot::Offline(Offline {
                    reason,
                    config,
                    retry_at: Instant::now() + backoff,
                    backoff,
                })
            }
        }
    }

    /// A receiver woken when the log end offset or leader epoch changes, or the
    /// partition closes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    fn open(&self, config: ReplicaConfig) -> Result<Replica<SegmentLog>, String> {
        if failpoints::fires(failpoints::LOG_OPEN, self.broker) {
            return Err(format!(
                "{}: failpoint {} fired",
                self.dir.display(),
                failpoints::LOG_OPEN
            ));
        }
        let log = SegmentLog::open(&self.dir, self.storage)
            .map_err(|e| e.to_string())?
            .with_failpoint_owner(self.broker);
        Replica::new(config, log).map_err(|e| e.to_string())
    }

    fn close(&self, checkpoint: bool) {
        let mut slot = lock(&self.slot);
        if let (true, Slot::Open(replica)) = (checkpoint, &mut *slot) {
            if let Err(error) = replica.checkpoint_high_watermark() {
                tracing::warn!(partition = ?self.tp, %error, "HW checkpoint at shutdown failed");
            }
        }
        *slot = Slot::Closed;
        self.changed.send_modify(|generation| *generation += 1);
    }
}

/// The local partitions and the acks=all produce requests waiting for replication.
#[derive(Default)]
pub struct Partitions {
    map: RwLock<BTreeMap<TopicPartition, Arc<Partition>>>,
    pub(crate) health: Arc<LogHealth>,
    waiting: Mutex<HashMap<u64, oneshot::Sender<ProduceResult>>>,
    next_request_id: AtomicU64,
}

impl Partitions {
    pub fn get(&self, tp: &TopicPartition) -> Option<Arc<Partition>> {
        self.map
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(tp)
            .cloned()
    }

    pub fn all(&self) -> Vec<Arc<Partition>> {
        self.map
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    /// Registers a produce request before it reaches the replica, so that a completion
    /// racing with the handler (another thread's fetch moving the HW) is not lost. The
    /// registration ends when the returned guard is dropped (answered, or the client
    /// went away).
    pub fn register_produce(&self) -> (WaitingProduce<'_>, oneshot::Receiver<ProduceResult>) {
        let request_id = self.next_request_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.waiting).insert(request_id, tx);
        (
            WaitingProduce {
                partitions: self,
                request_id,
            },
            rx,
        )
    }

    fn complete_produce(&self, request_id: u64, result: ProduceResult) {
        if let Some(tx) = lock(&self.waiting).remove(&request_id) {
            // The handler may have given up (client gone); nothing else to tell.
            let _ = tx.send(result);
        }
    }

    pub(crate) fn close_all(&self, checkpoint: bool) {
        for partition in self.all() {
            partition.close(checkpoint);
        }
        // Dropping the senders answers every waiting produce handler with "no answer".
        lock(&self.waiting).clear();
    }
}

/// A produce request's registration for its completion; see
/// [`Partitions::register_produce`].
pub struct WaitingProduce<'a> {
    partitions: &'a Partitions,
    pub request_id: u64,
}

impl Drop for WaitingProduce<'_> {
    fn drop(&mut self) {
        lock(&self.partitions.waiting).remove(&self.request_id);
    }
}

/// The core's configuration for a replica of this node.
pub fn replica_config(config: &NodeConfig, replicas: Vec<BrokerId>) -> ReplicaConfig {
    let mut replica = ReplicaConfig::new(config.broker_id, replicas);
    replica.replica_lag_time_max_ms = config.replica_lag_time_max_ms;
    replica.min_insync_replicas = config.min_insync_replicas;
    replica.truncation_mode = config.truncation_mode;
    replica.unclean_leader_election = config.unclean_leader_election;
    replica.bugs = config.bugs;
    replica.fetch_max_records = config.replica_fetch_max_records;
    // A fetch legitimately takes up to replica_fetch_wait_max_ms at the leader; a request
    // with no answer a second after that is taken as lost and re-sent. Transport errors
    // are not fed to the core, so this is also how soon a follower retries a dead leader.
    replica.request_timeout_ms = config.replica_fetch_wait_max_ms + 1_000;
    // Short, so that a follower that asked before its leader heard the LeaderAndIsr is
    // back well within replica_lag_time_max_ms.
    replica.retry_backoff_ms = 100.min(config.replica_lag_time_max_ms / 4).max(1);
    replica
}

impl Node {
    /// Applies a LeaderAndIsr, creating the replica (or reopening it from
    /// `data_dir/<topic>-<partition>/`) if this broker has none yet.
    pub(crate) fn leader_and_isr(
        self: &Arc<Self>,
        tp: TopicPartition,
        request: LeaderAndIsr,
    ) -> Result<Result<(), LeaderAndIsrError>, PartitionError> {
        let partition = {
            let mut map = self
                .partitions
                .map
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match map.get(&tp) {
                Some(partition) => partition.clone(),
                None => {
                    if !request.replicas.contains(&self.broker_id()) {
                        return Ok(Err(LeaderAndIsrError::NotAssigned));
                    }
                    let (changed, _) = watch::channel(0);
                    let partition = Partition {
                        broker: self.broker_id(),
                        health: self.partitions.health.clone(),
                        dir: self
                            .config
                            .data_dir
                            .join(format!("{}-{}", tp.topic, tp.partition)),
                        storage: self.config.storage,
                        tp: tp.clone(),
                        slot: Mutex::new(Slot::Closed),
                        changed,
                    };
                    let replica = partition
                        .open(replica_config(&self.config, request.replicas.clone()))
                        .map_err(PartitionError::Storage)?;
                    *lock(&partition.slot) = Slot::Open(Box::new(replica));
                    let partition = Arc::new(partition);
                    map.insert(tp.clone(), partition.clone());
                    tracing::info!(broker = self.broker_id(), partition = ?tp, "replica created");
                    partition
                }
            }
        };
        let now = self.now_ms();
        let output = partition.with(|r| r.handle_leader_and_isr(request, now))?;
        self.apply(&partition, output.effects);
        Ok(output.reply)
    }

    /// Ticks every replica.
    pub(crate) fn tick_all(self: &Arc<Self>) {
        let now = self.now_ms();
        for partition in self.partitions.all() {
            partition.retry_reopen();
            match partition.with(|r| r.tick(now)) {
                Ok(effects) => self.apply(&partition, effects),
                Err(PartitionError::Offline(_)) => {}
                Err(error) => tracing::warn!(partition = ?partition.tp, %error, "tick failed"),
            }
        }
    }

    /// Carries out a replica's effects. Called with no lock held.
    pub(crate) fn apply(self: &Arc<Self>, partition: &Arc<Partition>, effects: Vec<Effect>) {
        if self.is_stopping() {
            return;
        }
        for effect in effects {
            match effect {
                Effect::ProduceCompleted { request_id, result } => {
                    self.partitions.complete_produce(request_id, result)
                }
                Effect::WritePartitionState(write) => {
                    let node = self.clone();
                    let partition = partition.clone();
                    tokio::spawn(async move { node.write_partition_state(partition, write).await });
                }
                Effect::SendFetch(request) => {
                    self.fetchers
                        .send(self, request.leader, partition, Outgoing::Fetch(request))
                }
                Effect::SendOffsetsForLeaderEpoch(request) => self.fetchers.send(
                    self,
                    request.leader,
                    partition,
                    Outgoing::OffsetsForLeaderEpoch(request),
                ),
                Effect::SendListOffsets(request) => self.fetchers.send(
                    self,
                    request.leader,
                    partition,
                    Outgoing::ListOffsets(request),
                ),
                Effect::TruncationNotAllowed {
                    leader_end_offset,
                    log_end_offset,
                } => {
                    // Kafka halts the broker here; we stop only this replica's fetching
                    // (the core does) and say so loudly: the operator must decide.
                    tracing::error!(
                        broker = self.broker_id(),
                        partition = ?partition.tp,
                        leader_end_offset,
                        log_end_offset,
                        "follower is ahead of its leader and may not truncate; fetching stopped"
                    );
                }
            }
        }
    }

    /// Kafka's conditional `setData` on the partition-state znode: replaces the stored
    /// state if its version is still `expected_version`, returning the new version.
    async fn write_state_if_version(
        &self,
        tp: &TopicPartition,
        state: &PartitionState,
        expected_version: StateVersion,
    ) -> Result<StateVersion, MetadataError> {
        let command = Command::Op(Op::Set {
            path: layout::partition_state_path(tp),
            data: layout::encode(state),
            expected_version: Some(expected_version),
        });
        match self.metadata.propose(command).await {
            Ok(Reply::Op(OpReply::Set { version })) => Ok(version),
            Ok(other) => Err(MetadataError::Unavailable(format!(
                "unexpected reply to a set: {other:?}"
            ))),
            Err(QuorumError::Store(StoreError::BadVersion { actual, .. })) => {
                self.resolve_version_conflict(tp, state, expected_version, actual)
                    .await
            }
            Err(QuorumError::Store(StoreError::NoNode { .. })) => {
                Err(MetadataError::VersionConflict {
                    expected: expected_version,
                    actual: None,
                })
            }
            Err(error) => Err(MetadataError::Unavailable(error.to_string())),
        }
    }

    /// A conditional ISR write found another version in the store. Two causes are our
    /// own earlier attempt, whose answer was lost (the quorum leader died after
    /// committing it):
    /// - the store holds exactly what we meant to write, one version on: the write
    ///   happened (Kafka's `checkLeaderAndIsrZkData`, KAFKA-1382);
    /// - the store holds another ISR of ours at our leader epoch: only this leader writes
    ///   at its epoch (every controller write bumps it), so that version is our lost
    ///   attempt, which we never acted on; we write our current ISR over it, once.
    ///
    /// Anything else (a controller moved the partition on) is a real conflict.
    async fn resolve_version_conflict(
        &self,
        tp: &TopicPartition,
        state: &PartitionState,
        expected_version: StateVersion,
        actual: StateVersion,
    ) -> Result<StateVersion, MetadataError> {
        let conflict = MetadataError::VersionConflict {
            expected: expected_version,
            actual: Some(actual),
        };
        let stored = match self
            .metadata
            .read_linearizable(|s| layout::partition_state(s, tp))
            .await
        {
            Ok(Ok(Some(stored))) => stored,
            _ => return Err(conflict),
        };
        if stored.state == *state && stored.version == expected_version + 1 {
            return Ok(stored.version);
        }
        let ours = stored.state.leader == state.leader
            && stored.state.leader_epoch == state.leader_epoch
            && stored.state.replicas == state.replicas;
        if !ours {
            return Err(conflict);
        }
        tracing::info!(
            broker = self.broker_id(),
            partition = ?tp,
            stored = ?stored.state.isr,
            version = stored.version,
            "a lost ISR write of ours is in the store; writing over it"
        );
        let command = Command::Op(Op::Set {
            path: layout::partition_state_path(tp),
            data: layout::encode(state),
            expected_version: Some(stored.version),
        });
        match self.metadata.propose(command).await {
            Ok(Reply::Op(OpReply::Set { version })) => Ok(version),
            _ => Err(conflict),
        }
    }

    /// The leader's conditional ISR write, then its result back to the replica.
    async fn write_partition_state(
        self: Arc<Self>,
        partition: Arc<Partition>,
        write: crate::replica::PartitionStateWrite,
    ) {
        let result = match failpoints::hit(failpoints::BEFORE_ISR_WRITE, self.broker_id()).await {
            Err(failpoints::Triggered) => Err(MetadataError::Unavailable(
                "failpoint before_isr_write".into(),
            )),
            Ok(()) => {
                let state = PartitionState {
                    leader: Some(write.leader),
                    leader_epoch: write.leader_epoch,
                    isr: write.isr.clone(),
                    controller_epoch: write.controller_epoch,
                    replicas: write.replicas.clone(),
                };
                self.write_state_if_version(&partition.tp, &state, write.expected_version)
                    .await
            }
        };
        match &result {
            Ok(version) => tracing::info!(
                broker = self.broker_id(),
                partition = ?partition.tp,
                isr = ?write.isr,
                version,
                "ISR written"
            ),
            Err(error) => tracing::warn!(
                broker = self.broker_id(),
                partition = ?partition.tp,
                %error,
                "ISR write failed"
            ),
        }
        match partition.with(|r| Ok(r.on_partition_state_written(&write, result))) {
            Ok(effects) => self.apply(&partition, effects),
            Err(error) => {
                tracing::warn!(partition = ?partition.tp, %error, "ISR write result lost")
            }
        }
    }
}

/// The broker log's record of a replica event: one line whose last field,
/// `replica_event`, is the event as JSON (topic, partition and the wall-clock time in ms
/// since the Unix epoch added, taken under the partition's lock, so after the decision
/// and before anything the next request on the partition does), for oracles outside the
/// broker (the harness's driver reads it back).
fn log_replica_event(broker: u32, tp: &TopicPartition, event: &ReplicaEvent) {
    let unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let mut json = serde_json::to_value(event).unwrap_or_default();
    if let Some(fields) = json.as_object_mut() {
        fields.insert("topic".into(), tp.topic.clone().into());
        fields.insert("partition".into(), tp.partition.into());
        fields.insert("unix_ms".into(), unix_ms.into());
    }
    match event {
        ReplicaEvent::Truncated(_) => {
            tracing::warn!(broker, replica_event = %json, "replica discarded records")
        }
        ReplicaEvent::IsrExpanded(_) => {
            tracing::info!(broker, replica_event = %json, "ISR expansion")
        }
    }
}
