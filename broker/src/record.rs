//! A record as every replica stores it: offset, the leader epoch that appended it, value.

/// Position of a record in a partition's log.
pub type Offset = u64;
/// A partition leader epoch; bumped by the controller on every leader change.
pub type LeaderEpoch = u32;

/// One record. `value` is the client's value, opaque to replication (JSON text in practice).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Record {
    pub offset: Offset,
    pub leader_epoch: LeaderEpoch,
    pub value: Vec<u8>,
}

impl Record {
    pub fn new(offset: Offset, leader_epoch: LeaderEpoch, value: impl Into<Vec<u8>>) -> Record {
        Record {
            offset,
            leader_epoch,
            value: value.into(),
        }
    }
}
