//! `SegmentLog` behaves exactly like the in-memory reference `MemoryLog` under random
//! sequences of every operation, including closing and reopening the log from disk.

use broker::log::{EpochEntry, LogError, MemoryLog, ReplicaLog};
use broker::record::{Offset, Record};
use broker::storage::{FlushPolicy, SegmentLog, StorageConfig};
use proptest::prelude::*;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Clone)]
enum Op {
    /// Records of these (epoch, value) at the LEO.
    Append(Vec<(u32, Vec<u8>)>),
    /// An append that skips an offset: both logs must refuse it and change nothing.
    AppendWithGap(u64),
    /// `truncate_to(start + pick % (LEO - start + 3))`: below, inside and past the log.
    TruncateTo(u64),
    /// `truncate_fully_and_start_at(LEO + shift - 20)` (clamped at 0): lower or higher.
    TruncateFully(u64),
    Flush,
    WriteHighWatermark(u64),
    /// Strictly increasing epochs with non-decreasing start offsets.
    WriteEpochs(Vec<(u32, u64)>),
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    let record = (0u32..4, prop::collection::vec(any::<u8>(), 0..=300));
    prop_oneof![
        8 => prop::collection::vec(record, 1..=5).prop_map(Op::Append),
        1 => (1u64..4).prop_map(Op::AppendWithGap),
        2 => any::<u64>().prop_map(Op::TruncateTo),
        1 => (0u64..40).prop_map(Op::TruncateFully),
        1 => Just(Op::Flush),
        1 => (0u64..1000).prop_map(Op::WriteHighWatermark),
        1 => prop::collection::vec((1u32..5, 0u64..50), 0..5).prop_map(Op::WriteEpochs),
        2 => Just(Op::Reopen),
    ]
}

fn flush_policy() -> impl Strategy<Value = FlushPolicy> {
    prop_oneof![
        Just(FlushPolicy::OsOnly),
        Just(FlushPolicy::EveryAppend),
        (1u64..6).prop_map(FlushPolicy::EveryRecords),
    ]
}

struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "broker-storage-model-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn epoch_entries(raw: &[(u32, u64)]) -> Vec<EpochEntry> {
    let mut epoch = 0;
    let mut start_offset = 0;
    raw.iter()
        .map(|&(epoch_step, offset_step)| {
            epoch += epoch_step;
            start_offset += offset_step;
            EpochEntry {
                epoch,
                start_offset,
            }
        })
        .collect()
}

fn same_outcome(
    what: &str,
    disk: Result<(), LogError>,
    memory: Result<(), LogError>,
) -> Result<(), TestCaseError> {
    match (disk, memory) {
        (Ok(()), Ok(())) | (Err(LogError::Contract(_)), Err(LogError::Contract(_))) => Ok(()),
        (disk, memory) => Err(TestCaseError::fail(format!(
            "{what}: disk {disk:?}, memory {memory:?}"
        ))),
    }
}

fn assert_same_state(disk: &SegmentLog, memory: &MemoryLog) -> Result<(), TestCaseError> {
    let start = memory.log_start_offset();
    let end = memory.log_end_offset();
    prop_assert_eq!(disk.log_start_offset(), start);
    prop_assert_eq!(disk.log_end_offset(), end);
    prop_assert_eq!(
        disk.read(start, usize::MAX).map_err(fail)?,
        memory.read(start, usize::MAX).map_err(fail)?
    );
    for offset in start.saturating_sub(2)..=end + 2 {
        prop_assert_eq!(
            disk.epoch_at(offset),
            memory.epoch_at(offset),
            "epoch_at({})",
            offset
        );
    }
    // Reads from every offset in range, a few records at a time, and refusals outside.
    for from in start..=end {
        prop_assert_eq!(
            disk.read(from, 3).map_err(fail)?,
            memory.read(from, 3).map_err(fail)?
        );
    }
    prop_assert!(disk.read(end + 1, 1).is_err());
    if start > 0 {
        prop_assert!(disk.read(start - 1, 1).is_err());
    }
    prop_assert_eq!(
        disk.high_watermark_checkpoint(),
        memory.high_watermark_checkpoint()
    );
    prop_assert_eq!(disk.epoch_checkpoint(), memory.epoch_checkpoint());
    Ok(())
}

fn fail(error: LogError) -> TestCaseError {
    TestCaseError::fail(error.to_string())
}

fn run(ops: Vec<Op>, config: StorageConfig) -> Result<(), TestCaseError> {
    let dir = TempDir::new();
    let mut disk = Some(SegmentLog::open(&dir.0, config).map_err(fail)?);
    let mut memory = MemoryLog::new();
    for op in ops {
        let Some(log) = disk.as_mut() else {
            return Err(TestCaseError::fail("log not open"));
        };
        let end = memory.log_end_offset();
        let start = memory.log_start_offset();
        match op {
            Op::Append(records) => {
                let records: Vec<Record> = records
                    .into_iter()
                    .zip(end..)
                    .map(|((epoch, value), offset)| Record::new(offset, epoch, value))
                    .collect();
                same_outcome("append", log.append(&records), memory.append(&records))?;
            }
            Op::AppendWithGap(skip) => {
                let records = [
                    Record::new(end, 1, "a"),
                    Record::new(end + skip + 1, 1, "b"),
                ];
                same_outcome("append", log.append(&records), memory.append(&records))?;
            }
            Op::TruncateTo(pick) => {
                let offset: Offset = start + pick % (end - start + 3);
                let offset = offset.saturating_sub(1);
                same_outcome(
                    "truncate_to",
                    log.truncate_to(offset),
                    memory.truncate_to(offset),
                )?;
            }
            Op::TruncateFully(shift) => {
                let offset = (end + shift).saturating_sub(20);
                same_outcome(
                    "truncate_fully_and_start_at",
                    log.truncate_fully_and_start_at(offset),
                    memory.truncate_fully_and_start_at(offset),
                )?;
            }
            Op::Flush => same_outcome("flush", log.flush(), memory.flush())?,
            Op::WriteHighWatermark(high_watermark) => same_outcome(
                "write_high_watermark_checkpoint",
                log.write_high_watermark_checkpoint(high_watermark),
                memory.write_high_watermark_checkpoint(high_watermark),
            )?,
            Op::WriteEpochs(raw) => {
                let entries = epoch_entries(&raw);
                same_outcome(
                    "write_epoch_checkpoint",
                    log.write_epoch_checkpoint(&entries),
                    memory.write_epoch_checkpoint(&entries),
                )?;
            }
            Op::Reopen => {
                // Dropping closes the files; everything was written to the OS, so a
                // reopen (unlike a machine crash) loses nothing.
                drop(disk.take());
                disk = Some(SegmentLog::open(&dir.0, config).map_err(fail)?);
            }
        }
        if let Some(log) = disk.as_ref() {
            assert_same_state(log, &memory)?;
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn storage_segment_log_matches_memory_log(
        ops in prop::collection::vec(op(), 1..40),
        segment_bytes in prop_oneof![Just(512u64), Just(64u64), Just(4096u64)],
        flush_policy in flush_policy(),
    ) {
        run(ops, StorageConfig { segment_bytes, flush_policy })?;
    }
}
