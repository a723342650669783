//! The port between the replica core and storage: what a partition replica's log can do.
//!
//! The replica core (`replica`) decides *what* to append, truncate and checkpoint; a
//! `ReplicaLog` does it. `storage::SegmentLog` keeps it in segment files on disk;
//! [`MemoryLog`] keeps it in memory for tests of the core and as a reference model for
//! property tests of storage.

use crate::record::{LeaderEpoch, Offset, Record};

/// An entry of the leader-epoch cache: `epoch` began at `start_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EpochEntry {
    pub epoch: LeaderEpoch,
    pub start_offset: Offset,
}

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A caller broke the log's contract (e.g. appended at an offset other than the LEO).
    #[error("{0}")]
    Contract(String),
    /// The data on disk cannot be used (and was not silently repaired).
    #[error("{path}: corrupt: {message}")]
    Corrupt {
        path: std::path::PathBuf,
        message: String,
    },
}

/// How many of `records`, from the first, fit in `max_bytes` of values (at least one
/// when there is one).
pub fn records_within(records: &[Record], max_bytes: usize) -> usize {
    let mut total = 0usize;
    records
        .iter()
        .position(|record| {
            total = total.saturating_add(record.value.len());
            total > max_bytes
        })
        .map_or(records.len(), |over| over.max(1))
}

/// A partition replica's log: records in `[log_start_offset, log_end_offset)`, plus the
/// two checkpoints Kafka keeps beside it (high watermark, leader-epoch cache).
pub trait ReplicaLog {
    /// First offset still held.
    fn log_start_offset(&self) -> Offset;
    /// One past the last record (LEO).
    fn log_end_offset(&self) -> Offset;
    /// Appends records whose offsets are exactly `log_end_offset()`, `+1`, ... in order.
    fn append(&mut self, records: &[Record]) -> Result<(), LogError>;
    /// Records from `from` on, at most `max_records` of them. `from` outside
    /// `[log_start_offset, log_end_offset]` is a contract error (callers check first).
    fn read(&self, from: Offset, max_records: usize) -> Result<Vec<Record>, LogError>;
    /// As [`read`](Self::read), stopping before the record that would take the sum of
    /// the values' lengths past `max_bytes`; the first record is always returned, however
    /// large (as Kafka's `fetch.max.bytes`: a record larger than the limit must still get
    /// through). A log that knows its records' sizes before reading them overrides this,
    /// so that a bounded read costs only what it returns.
    fn read_bounded(
        &self,
        from: Offset,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<Vec<Record>, LogError> {
        let mut records = self.read(from, max_records)?;
        records.truncate(records_within(&records, max_bytes));
        Ok(records)
    }
    /// The leader epoch of the record at `offset`, if held.
    fn epoch_at(&self, offset: Offset) -> Option<LeaderEpoch>;
    /// Removes every record at or above `offset` (no-op when `offset >= LEO`).
    fn truncate_to(&mut self, offset: Offset) -> Result<(), LogError>;
    /// Removes every record and restarts the log at `offset`: log start = LEO = `offset`.
    fn truncate_fully_and_start_at(&mut self, offset: Offset) -> Result<(), LogError>;
    /// Makes appended records durable as far as the log's flush policy asks now: callers
    /// may call it after every append; a policy that leaves syncing to the OS makes it a
    /// no-op. (Appended records are with the OS as soon as `append` returns, so a killed
    /// process loses none of them; the policy is about machine crashes.)
    fn flush(&mut self) -> Result<(), LogError>;
    /// The high watermark last checkpointed (0 when none).
    fn high_watermark_checkpoint(&self) -> Offset;
    fn write_high_watermark_checkpoint(&mut self, high_watermark: Offset) -> Result<(), LogError>;
    /// The leader-epoch cache last checkpointed, in increasing epoch order.
    fn epoch_checkpoint(&self) -> Vec<EpochEntry>;
    fn write_epoch_checkpoint(&mut self, entries: &[EpochEntry]) -> Result<(), LogError>;
}

/// Checks the append contract: `records` carry offsets `next`, `next + 1`, ... in order.
pub fn check_consecutive(next: Offset, records: &[Record]) -> Result<(), LogError> {
    for (expected, record) in (next..).zip(records) {
        if record.offset != expected {
            return Err(LogError::Contract(format!(
                "append at offset {} where offset {expected} is next",
                record.offset
            )));
        }
    }
    Ok(())
}

/// A log held in memory. "Unflushed" records can be dropped with [`MemoryLog::crash`],
/// which models a machine losing what the OS had not yet written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryLog {
    start: Offset,
    records: Vec<Record>,
    flushed_len: usize,
    high_watermark: Offset,
    epochs: Vec<EpochEntry>,
}

impl MemoryLog {
    pub fn new() -> MemoryLog {
        MemoryLog::default()
    }

    /// Loses every record appended since the last flush (checkpoints are kept: they are
    /// written synchronously).
    pub fn crash(&mut self) {
        self.records.truncate(self.flushed_len);
    }

    /// All records held, in order.
    pub fn records(&self) -> &[Record] {
        &self.records
    }

    fn position(&self, offset: Offset) -> Option<usize> {
        let index = offset.checked_sub(self.start)?;
        usize::try_from(index)
            .ok()
            .filter(|&i| i < self.records.len())
    }
}

impl ReplicaLog for MemoryLog {
    fn log_start_offset(&self) -> Offset {
        self.start
    }

    fn log_end_offset(&self) -> Offset {
        self.start + self.records.len() as Offset
    }

    fn append(&mut self, records: &[Record]) -> Result<(), LogError> {
        check_consecutive(self.log_end_offset(), records)?;
        self.records.extend_from_slice(records);
        Ok(())
    }

    fn read(&self, from: Offset, max_records: usize) -> Result<Vec<Record>, LogError> {
        if from < self.start || from > self.log_end_offset() {
            return Err(LogError::Contract(format!(
                "read from {from} outside [{}, {}]",
                self.start,
                self.log_end_offset()
            )));
        }
        let first = (from - self.start) as usize;
        let last = first.saturating_add(max_records).min(self.records.len());
        Ok(self.records[first..last].to_vec())
    }

    fn epoch_at(&self, offset: Offset) -> Option<LeaderEpoch> {
        self.position(offset).map(|i| self.records[i].leader_epoch)
    }

    fn truncate_to(&mut self, offset: Offset) -> Result<(), LogError> {
        let keep = offset
            .saturating_sub(self.start)
            .min(self.records.len() as Offset) as usize;
        self.records.truncate(keep);
        self.flushed_len = self.flushed_len.min(keep);
        Ok(())
    }

    fn truncate_fully_and_start_at(&mut self, offset: Offset) -> Result<(), LogError> {
        self.records.clear();
        self.flushed_len = 0;
        self.start = offset;
        Ok(())
    }

    fn flush(&mut self) -> Result<(), LogError> {
        self.flushed_len = self.records.len();
        Ok(())
    }

    fn high_watermark_checkpoint(&self) -> Offset {
        self.high_watermark
    }

    fn write_high_watermark_checkpoint(&mut self, high_watermark: Offset) -> Result<(), LogError> {
        self.high_watermark = high_watermark;
        Ok(())
    }

    fn epoch_checkpoint(&self) -> Vec<EpochEntry> {
        self.epochs.clone()
    }

    fn write_epoch_checkpoint(&mut self, entries: &[EpochEntry]) -> Result<(), LogError> {
        self.epochs = entries.to_vec();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_reads_truncates_and_crashes() {
        let mut log = MemoryLog::new();
        log.append(&[Record::new(0, 1, "a"), Record::new(1, 1, "b")])
            .unwrap();
        assert!(log.append(&[Record::new(5, 1, "x")]).is_err());
        log.flush().unwrap();
        log.append(&[Record::new(2, 2, "c")]).unwrap();
        assert_eq!(log.read(1, 10).unwrap().len(), 2);
        assert_eq!(log.epoch_at(2), Some(2));
        log.crash();
        assert_eq!(log.log_end_offset(), 2);
        log.truncate_to(1).unwrap();
        assert_eq!(log.log_end_offset(), 1);
        log.truncate_fully_and_start_at(7).unwrap();
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (7, 7));
        assert!(log.read(6, 1).is_err());
        assert!(log.read(7, 1).unwrap().is_empty());
    }
}
