//! A deterministic in-memory cluster for one partition: replicas over [`MemoryLog`]s, a
//! message queue the test delivers, drops or reorders, a fake clock, and the test acting
//! as controller (elections, ISR changes on broker failure, reassignment), writing an
//! [`InMemoryMetadataStore`] and sending LeaderAndIsr through the same queue.
//!
//! Nothing happens by itself: every step is a method call, so a test (or a property
//! test's generated schedule) fully decides the interleaving.
//!
//! After every step the cluster checks its own safety properties and records
//! [`Violation`]s: a record seen below any replica's high watermark that later changes,
//! a leader missing such a record, and the TLA+ spec's StrongIsr (every member of the
//! stored ISR holds every presumed leader's records below that leader's HW).

use std::collections::{BTreeMap, BTreeSet};

use super::metadata::{
    InMemoryMetadataStore, MetadataStore, PartitionState, TopicPartition, VersionedState,
};
use super::{
    Acks, BrokerId, ControllerEpoch, Effect, FetchRequest, FetchResponse, LeaderAndIsr,
    LeaderAndIsrError, ListOffsetsRequest, ListOffsetsResponse, OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse, ProduceOutcome, ProduceRequest, ProduceResult, Replica,
    ReplicaConfig, ReplicaError, ReplicationError::NotLeader, RequestId,
};
use crate::log::{MemoryLog, ReplicaLog};
use crate::record::{Offset, Record};

/// Identifies a message in flight.
pub type MessageId = u64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    LeaderAndIsr(LeaderAndIsr),
    Fetch(FetchRequest),
    FetchResponse(FetchRequest, FetchResponse),
    OffsetsForLeaderEpoch(OffsetsForLeaderEpochRequest),
    OffsetsForLeaderEpochResponse(OffsetsForLeaderEpochRequest, OffsetsForLeaderEpochResponse),
    ListOffsets(ListOffsetsRequest),
    ListOffsetsResponse(ListOffsetsRequest, ListOffsetsResponse),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    pub id: MessageId,
    /// `None` for the controller.
    pub from: Option<BrokerId>,
    pub to: BrokerId,
    pub message: Message,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// A record seen below some replica's HW was later seen different at that offset.
    CommittedChanged {
        broker: BrokerId,
        was: Record,
        now: Record,
    },
    /// The partition's leader (per the store) lacks a record once seen below a HW.
    CommittedLost { leader: BrokerId, record: Record },
    /// An ISR member (per the store) lacks or differs from a presumed leader's record
    /// below that leader's HW.
    StrongIsr {
        leader: BrokerId,
        member: BrokerId,
        offset: Offset,
    },
}

impl Violation {
    pub fn offset(&self) -> Offset {
        match self {
            Violation::CommittedChanged { was, .. } => was.offset,
            Violation::CommittedLost { record, .. } => record.offset,
            Violation::StrongIsr { offset, .. } => *offset,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("broker {broker}: {source}")]
    Replica {
        broker: BrokerId,
        #[source]
        source: ReplicaError,
    },
    #[error("broker {0} is not in the cluster")]
    UnknownBroker(BrokerId),
    #[error("broker {0} is down")]
    BrokerDown(BrokerId),
    #[error("broker {0} is up")]
    BrokerUp(BrokerId),
    #[error("broker {0} holds no replica of the partition")]
    NoReplica(BrokerId),
    #[error("no message {0} in flight")]
    NoMessage(MessageId),
    #[error("the partition has not been created")]
    NoPartition,
    #[error("broker {0} cannot be elected: {1}")]
    NotElectable(BrokerId, &'static str),
    #[error("metadata store: {0}")]
    Metadata(#[from] super::metadata::MetadataError),
}

/// How the simulated cluster is set up.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Every broker of the cluster, assigned or not.
    pub brokers: Vec<BrokerId>,
    /// The configuration each replica is created with; `broker_id` and `replicas` are
    /// filled in per replica.
    pub replica: ReplicaConfig,
    /// Timeout of acks=all produce requests.
    pub produce_timeout_ms: u64,
}

impl SimConfig {
    pub fn new(brokers: Vec<BrokerId>) -> SimConfig {
        SimConfig {
            brokers,
            replica: ReplicaConfig::new(0, Vec::new()),
            produce_timeout_ms: 30_000,
        }
    }
}

enum Slot {
    /// No replica of the partition on this broker.
    Empty,
    Live(Box<Replica<MemoryLog>>),
    /// A crashed replica: what its log kept, and the config to restart it with.
    Stored {
        config: Box<ReplicaConfig>,
        log: MemoryLog,
    },
}

struct Node {
    alive: bool,
    slot: Slot,
}

/// A produce request the cluster has seen, and its answer once there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProduceRecord {
    pub broker: BrokerId,
    pub values: Vec<Vec<u8>>,
    pub acks: Acks,
    pub result: Option<ProduceResult>,
}

/// See the module documentation.
pub struct Cluster {
    config: SimConfig,
    partition: TopicPartition,
    now_ms: u64,
    store: InMemoryMetadataStore,
    controller_epoch: ControllerEpoch,
    nodes: BTreeMap<BrokerId, Node>,
    network: Vec<Envelope>,
    blocked: BTreeSet<(BrokerId, BrokerId)>,
    next_message_id: MessageId,
    next_request_id: RequestId,
    produced: BTreeMap<RequestId, ProduceRecord>,
    halts: Vec<(BrokerId, Effect)>,
    /// Every record ever seen below some replica's HW, by offset.
    committed: BTreeMap<Offset, Record>,
    violations: Vec<Violation>,
}

impl Cluster {
    pub fn new(config: SimConfig) -> Cluster {
        let nodes = config
            .brokers
            .iter()
            .map(|&id| {
                (
                    id,
                    Node {
                        alive: true,
                        slot: Slot::Empty,
                    },
                )
            })
            .collect();
        Cluster {
            config,
            partition: TopicPartition::new("t", 0),
            now_ms: 0,
            store: InMemoryMetadataStore::new(),
            controller_epoch: 1,
            nodes,
            network: Vec::new(),
            blocked: BTreeSet::new(),
            next_message_id: 0,
            next_request_id: 0,
            produced: BTreeMap::new(),
            halts: Vec::new(),
            committed: BTreeMap::new(),
            violations: Vec::new(),
        }
    }

    // ----- observation -------------------------------------------------------------

    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    pub fn state(&self) -> Option<VersionedState> {
        self.store.read(&self.partition)
    }

    /// The leader per the store.
    pub fn leader(&self) -> Option<BrokerId> {
        self.state().and_then(|s| s.state.leader)
    }

    /// The ISR per the store.
    pub fn isr(&self) -> Vec<BrokerId> {
        self.state().map(|s| s.state.isr).unwrap_or_default()
    }

    pub fn is_alive(&self, broker: BrokerId) -> bool {
        self.nodes.get(&broker).is_some_and(|n| n.alive)
    }

    /// A running replica.
    pub fn replica(&self, broker: BrokerId) -> Option<&Replica<MemoryLog>> {
        match self.nodes.get(&broker).map(|n| &n.slot) {
            Some(Slot::Live(replica)) => Some(replica),
            _ => None,
        }
    }

    /// A replica's log, running or crashed.
    pub fn log(&self, broker: BrokerId) -> Option<&MemoryLog> {
        match self.nodes.get(&broker).map(|n| &n.slot) {
            Some(Slot::Live(replica)) => Some(replica.log()),
            Some(Slot::Stored { log, .. }) => Some(log),
            _ => None,
        }
    }

    pub fn messages(&self) -> &[Envelope] {
        &self.network
    }

    /// The first message in flight that `matches`.
    pub fn find(&self, matches: impl Fn(&Envelope) -> bool) -> Option<MessageId> {
        self.network.iter().find(|e| matches(e)).map(|e| e.id)
    }

    pub fn produce_record(&self, request_id: RequestId) -> Option<&ProduceRecord> {
        self.produced.get(&request_id)
    }

    /// Records whose acks=all request was answered with success, as (offset, value).
    pub fn acked_records(&self) -> Vec<(Offset, Vec<u8>)> {
        self.produced
            .values()
            .filter(|p| p.acks == Acks::All)
            .filter_map(|p| match &p.result {
                Some(Ok(appended)) => Some((appended.base_offset.., p.values.clone())),
                _ => None,
            })
            .flat_map(|(offsets, values)| offsets.zip(values))
            .collect()
    }

    /// Committed records as a consumer of the current leader reads them: below its HW.
    pub fn committed(&self) -> Option<Vec<Record>> {
        let leader = self.replica(self.leader()?)?;
        match leader.read_committed(leader.log_start_offset(), usize::MAX, usize::MAX) {
            Ok(Ok(data)) => Some(data.records),
            _ => None,
        }
    }

    /// acks=all successes the current leader's log does not hold as acknowledged.
    pub fn lost_acked_records(&self) -> Vec<(Offset, Vec<u8>)> {
        let Some(log) = self.leader().and_then(|l| self.log(l)) else {
            return self.acked_records();
        };
        self.acked_records()
            .into_iter()
            .filter(|(offset, value)| {
                let held = log.read(*offset, 1).ok().and_then(|r| r.into_iter().next());
                held.is_none_or(|r| r.value != *value)
            })
            .collect()
    }

    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }

    /// Followers that stopped because they were ahead of the leader (unclean election off).
    pub fn halts(&self) -> &[(BrokerId, Effect)] {
        &self.halts
    }

    // ----- the network -------------------------------------------------------------

    /// Messages from `from` to `to` are dropped when delivered, until unblocked.
    pub fn block(&mut self, from: BrokerId, to: BrokerId) {
        self.blocked.insert((from, to));
    }

    pub fn unblock(&mut self, from: BrokerId, to: BrokerId) {
        self.blocked.remove(&(from, to));
    }

    pub fn drop_message(&mut self, id: MessageId) -> Result<Envelope, SimError> {
        let index = self.position(id)?;
        Ok(self.network.remove(index))
    }

    /// Delivers one message; its handler's effects (answers, next requests) join the queue.
    pub fn deliver(&mut self, id: MessageId) -> Result<(), SimError> {
        let index = self.position(id)?;
        let envelope = self.network.remove(index);
        let result = self.handle(envelope);
        self.observe();
        result
    }

    /// Delivers every message in flight now, oldest first; messages they cause wait for the
    /// next round.
    pub fn deliver_round(&mut self) -> Result<(), SimError> {
        let ids: Vec<_> = self.network.iter().map(|e| e.id).collect();
        for id in ids {
            if self.position(id).is_ok() {
                self.deliver(id)?;
            }
        }
        Ok(())
    }

    pub fn deliver_rounds(&mut self, rounds: usize) -> Result<(), SimError> {
        for _ in 0..rounds {
            self.deliver_round()?;
        }
        Ok(())
    }

    /// Advances the clock and ticks every running replica.
    pub fn advance(&mut self, ms: u64) -> Result<(), SimError> {
        self.now_ms += ms;
        let live: Vec<_> = self.live_replicas();
        for broker in live {
            let now = self.now_ms;
            let effects = self.with_replica(broker, |r| r.tick(now))?;
            self.apply(broker, effects)?;
        }
        self.observe();
        Ok(())
    }

    // ----- clients -----------------------------------------------------------------

    /// Sends a produce request to `broker`; the answer is in [`Cluster::produce_record`]
    /// (now, or once replication or the clock completes it).
    pub fn produce(
        &mut self,
        broker: BrokerId,
        values: Vec<Vec<u8>>,
        acks: Acks,
    ) -> Result<(RequestId, ProduceOutcome), SimError> {
        let request_id = self.next_request_id;
        self.next_request_id += 1;
        self.produced.insert(
            request_id,
            ProduceRecord {
                broker,
                values: values.clone(),
                acks,
                result: None,
            },
        );
        let request = ProduceRequest {
            request_id,
            values,
            acks,
            timeout_ms: self.config.produce_timeout_ms,
        };
        let now = self.now_ms;
        let output = self.with_replica(broker, |r| r.produce(request, now))?;
        if let ProduceOutcome::Done(result) = &output.reply {
            if let Some(p) = self.produced.get_mut(&request_id) {
                p.result = Some(result.clone());
            }
        }
        self.apply(broker, output.effects)?;
        self.observe();
        Ok((request_id, output.reply))
    }

    // ----- the controller ----------------------------------------------------------

    /// Creates the partition with `replicas` (the first is the leader, all in the ISR) and
    /// sends LeaderAndIsr to every replica.
    pub fn create_partition(&mut self, replicas: Vec<BrokerId>) -> Result<(), SimError> {
        let leader = replicas.first().copied();
        let state = PartitionState {
            leader,
            leader_epoch: 0,
            isr: replicas.clone(),
            controller_epoch: self.controller_epoch,
            replicas,
        };
        let version = self.store.create(&self.partition, state.clone())?;
        self.send_leader_and_isr(&VersionedState { state, version }, None);
        Ok(())
    }

    /// A clean election (preferred election, leadership transfer): `candidate` must be up
    /// and in the stored ISR. Bumps the leader epoch.
    pub fn elect(&mut self, candidate: BrokerId) -> Result<(), SimError> {
        let current = self.state().ok_or(SimError::NoPartition)?;
        if !self.is_alive(candidate) {
            return Err(SimError::NotElectable(candidate, "down"));
        }
        if !current.state.isr.contains(&candidate) {
            return Err(SimError::NotElectable(candidate, "not in the ISR"));
        }
        let state = PartitionState {
            leader: Some(candidate),
            ..current.state.clone()
        };
        self.write_and_announce(current, state)
    }

    /// An unclean election: `candidate` (up, assigned) leads with ISR = {candidate}.
    pub fn elect_unclean(&mut self, candidate: BrokerId) -> Result<(), SimError> {
        let current = self.state().ok_or(SimError::NoPartition)?;
        if !self.is_alive(candidate) || !current.state.replicas.contains(&candidate) {
            return Err(SimError::NotElectable(candidate, "down or not assigned"));
        }
        let state = PartitionState {
            leader: Some(candidate),
            isr: vec![candidate],
            ..current.state.clone()
        };
        self.write_and_announce(current, state)
    }

    /// Adds replicas to the assignment (reassignment steps 1-2: AR = OAR ∪ RAR, epoch bump,
    /// LeaderAndIsr to all).
    pub fn add_replicas(&mut self, added: &[BrokerId]) -> Result<(), SimError> {
        let current = self.state().ok_or(SimError::NoPartition)?;
        let mut replicas = current.state.replicas.clone();
        for id in added {
            if !replicas.contains(id) {
                replicas.push(*id);
            }
        }
        let state = PartitionState {
            replicas,
            ..current.state.clone()
        };
        self.write_and_announce(current, state)
    }

    /// The controller learns that `broker` died (its session expired) and acts as Kafka's
    /// does: a dead leader is replaced by the first live ISR member (or, with unclean
    /// election enabled, any live replica; else the partition goes offline); a dead
    /// follower leaves the ISR. The last ISR member stays (KAFKA-5083).
    pub fn controller_handle_failure(&mut self, broker: BrokerId) -> Result<(), SimError> {
        let current = self.state().ok_or(SimError::NoPartition)?;
        let mut state = current.state.clone();
        let remaining: Vec<_> = state
            .isr
            .iter()
            .copied()
            .filter(|&id| id != broker)
            .collect();
        if state.leader == Some(broker) {
            let live_isr = remaining.iter().copied().find(|&id| self.is_alive(id));
            let unclean = self.config.replica.unclean_leader_election;
            if let Some(next) = live_isr {
                state.leader = Some(next);
                state.isr = remaining;
            } else if let Some(next) = state
                .replicas
                .iter()
                .copied()
                .find(|&id| unclean && id != broker && self.is_alive(id))
            {
                state.leader = Some(next);
                state.isr = vec![next];
            } else {
                state.leader = None;
                if !remaining.is_empty() {
                    state.isr = remaining;
                }
            }
        } else if state.isr.contains(&broker) && !remaining.is_empty() {
            state.isr = remaining;
        } else {
            return Ok(());
        }
        self.write_and_announce(current, state)
    }

    // ----- faults ------------------------------------------------------------------

    /// Kills `broker`: its log loses what was not flushed, messages to and from it vanish
    /// (connections reset). The controller is not told; see
    /// [`Cluster::controller_handle_failure`] and [`Cluster::fail`].
    pub fn crash(&mut self, broker: BrokerId) -> Result<(), SimError> {
        let node = self
            .nodes
            .get_mut(&broker)
            .ok_or(SimError::UnknownBroker(broker))?;
        if !node.alive {
            return Err(SimError::BrokerDown(broker));
        }
        node.alive = false;
        node.slot = match std::mem::replace(&mut node.slot, Slot::Empty) {
            Slot::Live(replica) => {
                let config = Box::new(replica.config().clone());
                let mut log = replica.into_log();
                log.crash();
                Slot::Stored { config, log }
            }
            other => other,
        };
        self.network
            .retain(|e| e.to != broker && e.from != Some(broker));
        self.observe();
        Ok(())
    }

    /// Crash plus the controller's reaction.
    pub fn fail(&mut self, broker: BrokerId) -> Result<(), SimError> {
        self.crash(broker)?;
        self.controller_handle_failure(broker)
    }

    /// Crashes `broker` and throws its data away, as a wiped disk does.
    pub fn wipe(&mut self, broker: BrokerId) -> Result<(), SimError> {
        if self.is_alive(broker) {
            self.crash(broker)?;
        }
        if let Some(node) = self.nodes.get_mut(&broker) {
            node.slot = Slot::Empty;
        }
        Ok(())
    }

    /// Restarts `broker`: its replica is rebuilt from its log, and the controller sends it
    /// the current LeaderAndIsr, electing it (epoch bump) if the partition is offline and
    /// it is in the ISR, or if it still is the leader.
    pub fn restart(&mut self, broker: BrokerId) -> Result<(), SimError> {
        let node = self
            .nodes
            .get_mut(&broker)
            .ok_or(SimError::UnknownBroker(broker))?;
        if node.alive {
            return Err(SimError::BrokerUp(broker));
        }
        node.alive = true;
        if let Slot::Stored { config, log } = std::mem::replace(&mut node.slot, Slot::Empty) {
            let replica = Replica::new(*config, log)
                .map_err(|source| SimError::Replica { broker, source })?;
            node.slot = Slot::Live(Box::new(replica));
        }
        if let Some(current) = self.state() {
            let offline_and_electable =
                current.state.leader.is_none() && current.state.isr.contains(&broker);
            // A leader back before the controller noticed its death gets a new epoch, as
            // Kafka's controller does on seeing a new broker epoch (KIP-380): its followers
            // must truncate against what the restarted log holds.
            let was_leader = current.state.leader == Some(broker);
            if offline_and_electable || was_leader {
                let state = PartitionState {
                    leader: Some(broker),
                    ..current.state.clone()
                };
                self.write_and_announce(current, state)?;
            } else {
                self.send_leader_and_isr(&current, Some(broker));
            }
        }
        self.observe();
        Ok(())
    }

    // ----- internals ---------------------------------------------------------------

    fn position(&self, id: MessageId) -> Result<usize, SimError> {
        self.network
            .iter()
            .position(|e| e.id == id)
            .ok_or(SimError::NoMessage(id))
    }

    fn live_replicas(&self) -> Vec<BrokerId> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.alive && matches!(n.slot, Slot::Live(_)))
            .map(|(&id, _)| id)
            .collect()
    }

    fn send(&mut self, from: Option<BrokerId>, to: BrokerId, message: Message) {
        let id = self.next_message_id;
        self.next_message_id += 1;
        self.network.push(Envelope {
            id,
            from,
            to,
            message,
        });
    }

    fn write_and_announce(
        &mut self,
        current: VersionedState,
        mut state: PartitionState,
    ) -> Result<(), SimError> {
        state.leader_epoch = current.state.leader_epoch + 1;
        state.controller_epoch = self.controller_epoch;
        let version =
            self.store
                .write_if_version(&self.partition, state.clone(), current.version)?;
        self.send_leader_and_isr(&VersionedState { state, version }, None);
        self.observe();
        Ok(())
    }

    /// LeaderAndIsr for `state` to one broker, or to every live assigned broker.
    fn send_leader_and_isr(&mut self, state: &VersionedState, only: Option<BrokerId>) {
        let Some(leader) = state.state.leader else {
            return;
        };
        let request = LeaderAndIsr {
            controller_epoch: state.state.controller_epoch,
            leader,
            leader_epoch: state.state.leader_epoch,
            isr: state.state.isr.clone(),
            version: state.version,
            replicas: state.state.replicas.clone(),
        };
        let targets: Vec<_> = state
            .state
            .replicas
            .iter()
            .copied()
            .filter(|&id| only.is_none_or(|o| o == id) && self.is_alive(id))
            .collect();
        for to in targets {
            self.send(None, to, Message::LeaderAndIsr(request.clone()));
        }
    }

    fn with_replica<T>(
        &mut self,
        broker: BrokerId,
        f: impl FnOnce(&mut Replica<MemoryLog>) -> Result<T, ReplicaError>,
    ) -> Result<T, SimError> {
        let node = self
            .nodes
            .get_mut(&broker)
            .ok_or(SimError::UnknownBroker(broker))?;
        if !node.alive {
            return Err(SimError::BrokerDown(broker));
        }
        match &mut node.slot {
            Slot::Live(replica) => {
                f(replica).map_err(|source| SimError::Replica { broker, source })
            }
            _ => Err(SimError::NoReplica(broker)),
        }
    }

    fn handle(&mut self, envelope: Envelope) -> Result<(), SimError> {
        let to = envelope.to;
        if !self.is_alive(to)
            || envelope
                .from
                .is_some_and(|from| self.blocked.contains(&(from, to)))
        {
            return Ok(());
        }
        let now = self.now_ms;
        let from = envelope.from;
        let has_replica = self
            .nodes
            .get(&to)
            .is_some_and(|n| matches!(n.slot, Slot::Live(_)));
        if !has_replica && !matches!(envelope.message, Message::LeaderAndIsr(_)) {
            // A broker without the partition answers requests as not the leader (Kafka's
            // UNKNOWN_TOPIC_OR_PARTITION) and has no use for responses.
            if let Some(from) = from {
                let answer = match envelope.message {
                    Message::Fetch(r) => Some(Message::FetchResponse(r, Err(NotLeader))),
                    Message::OffsetsForLeaderEpoch(r) => {
                        Some(Message::OffsetsForLeaderEpochResponse(r, Err(NotLeader)))
                    }
                    Message::ListOffsets(r) => {
                        Some(Message::ListOffsetsResponse(r, Err(NotLeader)))
                    }
                    _ => None,
                };
                if let Some(answer) = answer {
                    self.send(Some(to), from, answer);
                }
            }
            return Ok(());
        }
        match envelope.message {
            Message::LeaderAndIsr(request) => {
                if let Some(node) = self.nodes.get_mut(&to) {
                    if matches!(node.slot, Slot::Empty) {
                        let mut config = self.config.replica.clone();
                        config.broker_id = to;
                        config.replicas.clone_from(&request.replicas);
                        let replica = Replica::new(config, MemoryLog::new())
                            .map_err(|source| SimError::Replica { broker: to, source })?;
                        node.slot = Slot::Live(Box::new(replica));
                    }
                }
                let output = self.with_replica(to, |r| r.handle_leader_and_isr(request, now))?;
                self.note_leader_and_isr(to, output.reply);
                self.apply(to, output.effects)
            }
            Message::Fetch(request) => {
                let output = self.with_replica(to, |r| r.handle_fetch(&request, now))?;
                if let Some(from) = from {
                    self.send(
                        Some(to),
                        from,
                        Message::FetchResponse(request, output.reply),
                    );
                }
                self.apply(to, output.effects)
            }
            Message::FetchResponse(request, response) => {
                let effects =
                    self.with_replica(to, |r| r.on_fetch_response(&request, response, now))?;
                self.apply(to, effects)
            }
            Message::OffsetsForLeaderEpoch(request) => {
                let response =
                    self.with_replica(to, |r| Ok(r.handle_offsets_for_leader_epoch(&request)))?;
                if let Some(from) = from {
                    self.send(
                        Some(to),
                        from,
                        Message::OffsetsForLeaderEpochResponse(request, response),
                    );
                }
                Ok(())
            }
            Message::OffsetsForLeaderEpochResponse(request, response) => {
                let effects = self.with_replica(to, |r| {
                    r.on_offsets_for_leader_epoch_response(&request, response, now)
                })?;
                self.apply(to, effects)
            }
            Message::ListOffsets(request) => {
                let response = self.with_replica(to, |r| Ok(r.handle_list_offsets(&request)))?;
                if let Some(from) = from {
                    self.send(
                        Some(to),
                        from,
                        Message::ListOffsetsResponse(request, response),
                    );
                }
                Ok(())
            }
            Message::ListOffsetsResponse(request, response) => {
                let effects =
                    self.with_replica(to, |r| r.on_list_offsets_response(&request, response, now))?;
                self.apply(to, effects)
            }
        }
    }

    fn note_leader_and_isr(&self, broker: BrokerId, reply: Result<(), LeaderAndIsrError>) {
        if let Err(error) = reply {
            tracing::debug!(broker, %error, "LeaderAndIsr rejected");
        }
    }

    /// Carries out a replica's effects: requests join the queue, ISR writes go to the
    /// store at once and their results back to the replica.
    fn apply(&mut self, broker: BrokerId, effects: Vec<Effect>) -> Result<(), SimError> {
        let mut queue = effects;
        while !queue.is_empty() {
            let mut next = Vec::new();
            for effect in queue {
                match effect {
                    Effect::ProduceCompleted { request_id, result } => {
                        if let Some(p) = self.produced.get_mut(&request_id) {
                            p.result = Some(result);
                        }
                    }
                    Effect::WritePartitionState(write) => {
                        let state = PartitionState {
                            leader: Some(write.leader),
                            leader_epoch: write.leader_epoch,
                            isr: write.isr.clone(),
                            controller_epoch: write.controller_epoch,
                            replicas: write.replicas.clone(),
                        };
                        let result = self.store.write_if_version(
                            &self.partition,
                            state,
                            write.expected_version,
                        );
                        next.extend(self.with_replica(broker, |r| {
                            Ok(r.on_partition_state_written(&write, result))
                        })?);
                    }
                    Effect::SendFetch(request) => {
                        self.send(Some(broker), request.leader, Message::Fetch(request))
                    }
                    Effect::SendOffsetsForLeaderEpoch(request) => self.send(
                        Some(broker),
                        request.leader,
                        Message::OffsetsForLeaderEpoch(request),
                    ),
                    Effect::SendListOffsets(request) => {
                        self.send(Some(broker), request.leader, Message::ListOffsets(request))
                    }
                    halt @ Effect::TruncationNotAllowed { .. } => self.halts.push((broker, halt)),
                }
            }
            queue = next;
        }
        Ok(())
    }

    /// Updates the record of committed data and checks the safety properties.
    fn observe(&mut self) {
        let mut found = Vec::new();
        let brokers: Vec<_> = self.nodes.keys().copied().collect();
        for &broker in &brokers {
            let Some(log) = self.log(broker) else {
                continue;
            };
            let high_watermark = match self.replica(broker) {
                Some(replica) => replica.high_watermark(),
                None => log.high_watermark_checkpoint().min(log.log_end_offset()),
            };
            for record in records_below(log, high_watermark) {
                match self.committed.get(&record.offset) {
                    Some(was) if *was != record => found.push(Violation::CommittedChanged {
                        broker,
                        was: was.clone(),
                        now: record,
                    }),
                    Some(_) => {}
                    None => {
                        self.committed.insert(record.offset, record);
                    }
                }
            }
        }
        if let Some(leader) = self.leader().filter(|&l| self.replica(l).is_some()) {
            if let Some(log) = self.log(leader) {
                for record in self.committed.values() {
                    let held = log
                        .read(record.offset, 1)
                        .ok()
                        .and_then(|r| r.into_iter().next());
                    if held.is_none() {
                        found.push(Violation::CommittedLost {
                            leader,
                            record: record.clone(),
                        });
                    }
                }
            }
        }
        let isr = self.isr();
        for &leader in &brokers {
            let Some(replica) = self.replica(leader).filter(|r| r.is_leader()) else {
                continue;
            };
            let high_watermark = replica.high_watermark();
            let leader_records = records_below(replica.log(), high_watermark);
            for &member in isr.iter().filter(|&&m| m != leader) {
                let Some(log) = self.log(member) else {
                    if let Some(first) = leader_records.first() {
                        found.push(Violation::StrongIsr {
                            leader,
                            member,
                            offset: first.offset,
                        });
                    }
                    continue;
                };
                let mismatch = leader_records.iter().find(|record| {
                    let held = log
                        .read(record.offset, 1)
                        .ok()
                        .and_then(|r| r.into_iter().next());
                    held.as_ref() != Some(*record)
                });
                if let Some(record) = mismatch {
                    found.push(Violation::StrongIsr {
                        leader,
                        member,
                        offset: record.offset,
                    });
                }
            }
        }
        for violation in found {
            if !self.violations.contains(&violation) {
                tracing::warn!(?violation, "safety violation");
                self.violations.push(violation);
            }
        }
    }
}

fn records_below(log: &MemoryLog, high_watermark: Offset) -> Vec<Record> {
    log.records()
        .iter()
        .filter(|r| r.offset < high_watermark)
        .cloned()
        .collect()
}
