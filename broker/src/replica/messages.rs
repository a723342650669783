//! What goes into the replica core and what comes out: requests, responses and effects.
//! Plain data; a driver (the broker's network layer, or [`super::sim`]) carries them.

use super::config::BrokerId;
use super::epoch_cache::EpochEndOffset;
use super::metadata::{ControllerEpoch, StateVersion};
use crate::record::{LeaderEpoch, Offset, Record};

/// Chosen by the driver to match a produce request with its completion.
pub type RequestId = u64;

/// How many replicas must have a write before it is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Acks {
    /// Not answered on the wire; the outcome is still reported to the driver.
    None,
    /// Answered after the leader's local append.
    Leader,
    /// Answered once the high watermark passes the last record (acks=-1).
    All,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProduceRequest {
    pub request_id: RequestId,
    pub values: Vec<Vec<u8>>,
    pub acks: Acks,
    /// acks=all only: how long the request may wait for replication.
    pub timeout_ms: u64,
}

/// Where a produce request's records landed: `[base_offset, base_offset + count)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Appended {
    pub base_offset: Offset,
    pub count: u64,
}

impl Appended {
    pub fn end_offset(&self) -> Offset {
        self.base_offset + self.count
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProduceError {
    /// Definite: nothing was appended.
    #[error("not the leader (leader is {leader:?})")]
    NotLeader { leader: Option<BrokerId> },
    /// Definite: refused before the append because |ISR| < min.insync.replicas.
    #[error("not enough replicas: ISR has {isr_size}, {min_insync_replicas} required")]
    NotEnoughReplicas {
        isr_size: usize,
        min_insync_replicas: usize,
    },
    /// Definite: the request had no records.
    #[error("empty produce request")]
    Empty,
    /// Indeterminate: appended and replicated to the HW, but the ISR shrank below
    /// min.insync.replicas meanwhile.
    #[error("not enough replicas after append at {0:?}")]
    NotEnoughReplicasAfterAppend(Appended),
    /// Indeterminate: appended, not replicated in time.
    #[error("request timed out after append at {0:?}")]
    RequestTimedOut(Appended),
    /// Indeterminate: appended, then this replica stopped leading before the HW passed.
    #[error("leadership lost after append at {0:?}")]
    LeadershipLost(Appended),
}

impl ProduceError {
    /// Did the records certainly not get written? (The checker counts the others as
    /// `info`: they may or may not survive.)
    pub fn is_definite(&self) -> bool {
        matches!(
            self,
            ProduceError::NotLeader { .. }
                | ProduceError::NotEnoughReplicas { .. }
                | ProduceError::Empty
        )
    }
}

pub type ProduceResult = Result<Appended, ProduceError>;

/// What `produce` returns at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProduceOutcome {
    /// The request is answered now.
    Done(ProduceResult),
    /// acks=all, appended; the answer comes later as [`Effect::ProduceCompleted`].
    Pending(Appended),
}

/// A follower's fetch (KIP-320 form).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    /// The follower that sends it.
    pub replica_id: BrokerId,
    /// The leader it is sent to.
    pub leader: BrokerId,
    /// The follower's LEO: everything below it is proven held by the follower.
    pub fetch_offset: Offset,
    /// The follower's current leader epoch, for the leader to validate; `None` when
    /// KAFKA-7040's switch removes the field (pre-KIP-320 requests).
    pub current_leader_epoch: Option<LeaderEpoch>,
    pub max_records: usize,
    /// The follower's epoch when it built the request. Not sent on the wire: the driver
    /// hands the request back with its response so the follower can tell stale answers.
    pub built_in_epoch: LeaderEpoch,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum ReplicationError {
    #[error("not the leader")]
    NotLeader,
    /// The requester's epoch is older than the leader's.
    #[error("fenced leader epoch")]
    FencedLeaderEpoch,
    /// The requester's epoch is newer than the leader's: the leader has not heard yet.
    #[error("unknown leader epoch")]
    UnknownLeaderEpoch,
    #[error("offset out of range")]
    OffsetOutOfRange,
    /// The requester is not in the partition's assignment.
    #[error("unknown replica")]
    UnknownReplica,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchData {
    pub records: Vec<Record>,
    /// The leader's HW as of the read, before this fetch's progress moved it.
    pub high_watermark: Offset,
    pub log_start_offset: Offset,
}

pub type FetchResponse = Result<FetchData, ReplicationError>;

/// OffsetsForLeaderEpoch (v2, KIP-320 form).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetsForLeaderEpochRequest {
    pub replica_id: BrokerId,
    pub leader: BrokerId,
    /// The follower's latest epoch: "where does it end in your log?"
    pub requested_epoch: LeaderEpoch,
    /// As in [`FetchRequest::current_leader_epoch`].
    pub current_leader_epoch: Option<LeaderEpoch>,
    /// As in [`FetchRequest::built_in_epoch`].
    pub built_in_epoch: LeaderEpoch,
}

/// `Ok(None)` is UNDEFINED: the leader holds no epoch `<=` the requested one.
pub type OffsetsForLeaderEpochResponse = Result<Option<EpochEndOffset>, ReplicationError>;

/// ListOffsets for the earliest and latest offsets, which a follower asks after
/// OffsetOutOfRange (pre-KIP-101 handling, KAFKA-2143).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListOffsetsRequest {
    pub replica_id: BrokerId,
    pub leader: BrokerId,
    pub current_leader_epoch: Option<LeaderEpoch>,
    pub built_in_epoch: LeaderEpoch,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LogOffsets {
    pub log_start_offset: Offset,
    pub log_end_offset: Offset,
}

pub type ListOffsetsResponse = Result<LogOffsets, ReplicationError>;

/// The controller's decision for this partition (one partition of a LeaderAndIsr request).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderAndIsr {
    pub controller_epoch: ControllerEpoch,
    pub leader: BrokerId,
    pub leader_epoch: LeaderEpoch,
    pub isr: Vec<BrokerId>,
    /// The partition state's version in the store, for the leader's conditional writes.
    pub version: StateVersion,
    pub replicas: Vec<BrokerId>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum LeaderAndIsrError {
    #[error("stale controller epoch {request} < {current}")]
    StaleControllerEpoch {
        request: ControllerEpoch,
        current: ControllerEpoch,
    },
    #[error("stale leader epoch {request} <= {current}")]
    StaleLeaderEpoch {
        request: LeaderEpoch,
        current: LeaderEpoch,
    },
    #[error("this broker is not among the partition's replicas")]
    NotAssigned,
}

/// A conditional write of the partition state that the leader asks for (ISR change).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionStateWrite {
    pub leader: BrokerId,
    pub leader_epoch: LeaderEpoch,
    pub isr: Vec<BrokerId>,
    pub expected_version: StateVersion,
    pub controller_epoch: ControllerEpoch,
    pub replicas: Vec<BrokerId>,
}

/// Something the driver must do for the core.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Answer an acks=all produce request parked earlier.
    ProduceCompleted {
        request_id: RequestId,
        result: ProduceResult,
    },
    /// Write the partition state conditionally, then report the result with
    /// `Replica::on_partition_state_written`. At most one is outstanding.
    WritePartitionState(PartitionStateWrite),
    SendFetch(FetchRequest),
    SendOffsetsForLeaderEpoch(OffsetsForLeaderEpochRequest),
    SendListOffsets(ListOffsetsRequest),
    /// The follower is ahead of its leader and may not truncate (unclean election off):
    /// Kafka halts the broker here. The replica stops fetching until the next LeaderAndIsr.
    TruncationNotAllowed {
        leader_end_offset: Offset,
        log_end_offset: Offset,
    },
}
