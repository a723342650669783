//! [`SegmentLog`]: segments, checkpoints and recovery put together behind `ReplicaLog`.

use super::checkpoint::{
    self, io_error, sync_dir, HIGH_WATERMARK_FILE, LOG_START_OFFSET_FILE, TEMP_SUFFIX,
};
use super::frame::{self, MAX_VALUE_LEN};
use super::segment::{parse_segment_file_name, Segment};
use super::StorageConfig;
use crate::log::{check_consecutive, EpochEntry, LogError, ReplicaLog};
use crate::record::{LeaderEpoch, Offset, Record};
use crate::replica::BrokerId;
use crate::server::failpoints;
use std::fs;
use std::path::{Path, PathBuf};

/// A replica's log in a directory of segment files (see the [module docs](super) for the
/// layout, frame format, recovery rules and durability).
///
/// One `SegmentLog` per directory: two opened on the same directory would overwrite
/// each other's segments.
#[derive(Debug)]
pub struct SegmentLog {
    dir: PathBuf,
    config: StorageConfig,
    /// In offset order, each starting where the previous one ends; the last is active.
    segments: Vec<Segment>,
    log_start_offset: Offset,
    high_watermark: Offset,
    epochs: Vec<EpochEntry>,
    /// Records written to the active segment since it was last fsynced.
    unflushed_records: u64,
    /// A segment file was created since the directory was last fsynced.
    dir_unsynced: bool,
    /// The broker whose `log_append` failpoint applies to this log.
    failpoint_owner: BrokerId,
}

impl SegmentLog {
    /// Makes the `log_append` failpoint armed for `broker` (`log_append@<broker>`) apply
    /// to this log; the plain point applies to every log.
    pub fn with_failpoint_owner(mut self, broker: BrokerId) -> SegmentLog {
        self.failpoint_owner = broker;
        self
    }

    /// Opens the log in `dir`, creating the directory if missing and otherwise
    /// recovering it: segments are scanned and cut at the first bad record, and segments
    /// wholly below the log start offset are deleted. Fails only on I/O errors and on
    /// malformed checkpoints.
    pub fn open(dir: &Path, config: StorageConfig) -> Result<SegmentLog, LogError> {
        let existed = dir.is_dir();
        fs::create_dir_all(dir).map_err(io_error(dir))?;
        if !existed {
            sync_dir(parent_dir(dir))?;
        }
        let mut changed_dir = false;
        let mut files = Vec::new();
        for entry in fs::read_dir(dir).map_err(io_error(dir))? {
            let entry = entry.map_err(io_error(dir))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                continue;
            };
            if name.ends_with(TEMP_SUFFIX) {
                // An interrupted checkpoint write; the checkpoint itself is intact.
                fs::remove_file(entry.path()).map_err(io_error(&entry.path()))?;
                changed_dir = true;
            } else if let Some(base_offset) = parse_segment_file_name(name) {
                files.push((base_offset, entry.path()));
            }
        }
        files.sort_by_key(|(base_offset, _)| *base_offset);

        let start_checkpoint = checkpoint::read_offset(dir, LOG_START_OFFSET_FILE)?;
        let high_watermark = checkpoint::read_offset(dir, HIGH_WATERMARK_FILE)?;
        let epochs = checkpoint::read_epochs(dir)?;

        let (mut segments, after_cut) = recover_segments(files)?;
        // Highest first, so a crash part-way leaves a prefix (see the module docs).
        for path in after_cut.iter().rev() {
            tracing::warn!(
                file = %path.display(),
                "deleting segment after the recovery cut"
            );
            fs::remove_file(path).map_err(io_error(path))?;
            changed_dir = true;
        }
        let below_start = segments
            .iter()
            .take_while(|segment| segment.end_offset() <= start_checkpoint)
            .count();
        for segment in &segments[..below_start] {
            segment.delete()?;
            changed_dir = true;
        }
        segments.drain(..below_start);
        if changed_dir {
            sync_dir(dir)?;
        }
        // Segments below the checkpoint were deleted; one may still straddle it, whose
        // records below the start stay hidden. If the first segment starts above the
        // checkpoint (its predecessors were removed by hand), the log starts there.
        let log_start_offset = segments.first().map_or(start_checkpoint, |first| {
            first.base_offset().max(start_checkpoint)
        });
        if log_start_offset != start_checkpoint {
            checkpoint::write_offset(dir, LOG_START_OFFSET_FILE, log_start_offset)?;
        }
        Ok(SegmentLog {
            dir: dir.to_path_buf(),
            config,
            segments,
            log_start_offset,
            high_watermark,
            epochs,
            unflushed_records: 0,
            dir_unsynced: false,
            failpoint_owner: 0,
        })
    }

    /// Flushes and closes, reporting what dropping the log could only log.
    pub fn close(mut self) -> Result<(), LogError> {
        self.sync()
    }

    /// Fsyncs every unflushed record (and the directory, after a segment was created or
    /// deleted) whatever the flush policy: for close, shutdown and segment rolls.
    pub fn sync(&mut self) -> Result<(), LogError> {
        if self.unflushed_records > 0 {
            if let Some(active) = self.segments.last() {
                active.sync()?;
            }
            self.unflushed_records = 0;
        }
        if self.dir_unsynced {
            self.sync_dir_now()?;
        }
        Ok(())
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn config(&self) -> StorageConfig {
        self.config
    }

    /// The base offset of each segment file, in order.
    pub fn segment_base_offsets(&self) -> Vec<Offset> {
        self.segments.iter().map(Segment::base_offset).collect()
    }

    /// Records written to the OS but not yet fsynced.
    pub fn unflushed_records(&self) -> u64 {
        self.unflushed_records
    }

    /// The segment holding `offset`, if any holds it.
    fn segment_index(&self, offset: Offset) -> Option<usize> {
        let after = self
            .segments
            .partition_point(|segment| segment.base_offset() <= offset);
        let index = after.checked_sub(1)?;
        (offset < self.segments[index].end_offset()).then_some(index)
    }

    /// The active segment if a frame of `frame_len` bytes fits in it, else a new one.
    fn segment_with_room_for(&mut self, frame_len: u64) -> Result<&mut Segment, LogError> {
        let segment_bytes = self.config.segment_bytes;
        let has_room = self.segments.last().is_some_and(|active| {
            active.size() == 0 || active.size().saturating_add(frame_len) <= segment_bytes
        });
        if has_room {
            let active = self.segments.len() - 1;
            return Ok(&mut self.segments[active]);
        }
        self.start_segment()
    }

    /// Starts a segment at the LEO. Rolling fsyncs the segment left behind and the
    /// directory, so only the active segment ever holds unflushed records.
    fn start_segment(&mut self) -> Result<&mut Segment, LogError> {
        let rolling = match self.segments.last() {
            Some(previous) => {
                previous.sync()?;
                self.unflushed_records = 0;
                true
            }
            None => false,
        };
        let segment = Segment::create(&self.dir, self.log_end_offset())?;
        self.segments.push(segment);
        self.dir_unsynced = true;
        if rolling {
            sync_dir(&self.dir)?;
            self.dir_unsynced = false;
        }
        let active = self.segments.len() - 1;
        Ok(&mut self.segments[active])
    }

    /// Deletes the segments from `first` on, highest first, so a failure or crash
    /// part-way leaves a prefix of the log. Returns whether any was deleted; the caller
    /// fsyncs the directory.
    fn delete_segments_from(&mut self, first: usize) -> Result<bool, LogError> {
        let mut deleted = false;
        while self.segments.len() > first {
            if let Some(last) = self.segments.last() {
                last.delete()?;
            }
            self.segments.pop();
            deleted = true;
        }
        Ok(deleted)
    }

    fn sync_dir_now(&mut self) -> Result<(), LogError> {
        sync_dir(&self.dir)?;
        self.dir_unsynced = false;
        Ok(())
    }
}

/// Where a new directory's entry lives, so that creating it can be made durable.
fn parent_dir(dir: &Path) -> &Path {
    match dir.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

/// Scans the segment files in offset order up to the first cut. Returns the segments
/// kept and the files after the cut, which the caller deletes.
fn recover_segments(
    files: Vec<(Offset, PathBuf)>,
) -> Result<(Vec<Segment>, Vec<PathBuf>), LogError> {
    let mut segments: Vec<Segment> = Vec::new();
    let mut files = files.into_iter();
    while let Some((base_offset, path)) = files.next() {
        if let Some(previous) = segments.last() {
            let expected = previous.end_offset();
            if base_offset != expected {
                tracing::warn!(
                    file = %path.display(),
                    offset = expected,
                    reason = %format!(
                        "segment starts at offset {base_offset} where offset {expected} is next"
                    ),
                    "log cut during recovery: records from this offset on are dropped"
                );
                let after_cut = std::iter::once(path)
                    .chain(files.map(|(_, path)| path))
                    .collect();
                return Ok((segments, after_cut));
            }
        }
        let (segment, cut) = Segment::recover(path, base_offset)?;
        segments.push(segment);
        if cut.is_some() {
            return Ok((segments, files.map(|(_, path)| path).collect()));
        }
    }
    Ok((segments, Vec::new()))
}

impl ReplicaLog for SegmentLog {
    fn log_start_offset(&self) -> Offset {
        self.log_start_offset
    }

    fn log_end_offset(&self) -> Offset {
        self.segments
            .last()
            .map_or(self.log_start_offset, Segment::end_offset)
    }

    fn append(&mut self, records: &[Record]) -> Result<(), LogError> {
        if failpoints::fires(failpoints::LOG_APPEND, self.failpoint_owner) {
            return Err(LogError::Io {
                path: self.dir.clone(),
                source: std::io::Error::other("failpoint log_append fired"),
            });
        }
        check_consecutive(self.log_end_offset(), records)?;
        for record in records {
            if record.value.len() > MAX_VALUE_LEN {
                return Err(LogError::Contract(format!(
                    "record at offset {} has a {}-byte value; at most {MAX_VALUE_LEN} fit",
                    record.offset,
                    record.value.len()
                )));
            }
        }
        let segment_bytes = self.config.segment_bytes;
        let mut rest = records;
        while let Some(first) = rest.first() {
            let active = self.segment_with_room_for(frame::frame_len(first.value.len()))?;
            let mut used = active.size();
            let fitting = rest
                .iter()
                .take_while(|record| {
                    let len = frame::frame_len(record.value.len());
                    let fits = used == 0 || used.saturating_add(len) <= segment_bytes;
                    if fits {
                        used += len;
                    }
                    fits
                })
                .count();
            active.append(&rest[..fitting])?;
            self.unflushed_records += fitting as u64;
            rest = &rest[fitting..];
        }
        self.flush()
    }

    fn read(&self, from: Offset, max_records: usize) -> Result<Vec<Record>, LogError> {
        let end = self.log_end_offset();
        if from < self.log_start_offset || from > end {
            return Err(LogError::Contract(format!(
                "read from {from} outside [{}, {end}]",
                self.log_start_offset
            )));
        }
        let Some(first) = self.segment_index(from) else {
            return Ok(Vec::new());
        };
        let mut records = Vec::new();
        let mut next = from;
        for segment in &self.segments[first..] {
            if records.len() >= max_records {
                break;
            }
            let batch = segment.read(next, max_records - records.len())?;
            next += batch.len() as Offset;
            records.extend(batch);
        }
        Ok(records)
    }

    fn read_bounded(
        &self,
        from: Offset,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<Vec<Record>, LogError> {
        let end = self.log_end_offset();
        if from < self.log_start_offset || from > end {
            return Err(LogError::Contract(format!(
                "read from {from} outside [{}, {end}]",
                self.log_start_offset
            )));
        }
        let Some(first) = self.segment_index(from) else {
            return Ok(Vec::new());
        };
        let mut records = Vec::new();
        let mut next = from;
        let mut bytes_left = max_bytes;
        for segment in &self.segments[first..] {
            if records.len() >= max_records {
                break;
            }
            let (mut count, bytes, stopped) =
                segment.count_within(next, max_records - records.len(), bytes_left);
            if stopped && count == 0 && records.is_empty() {
                // The first record goes out whatever its size.
                count = 1;
            }
            let batch = segment.read(next, count)?;
            next += batch.len() as Offset;
            records.extend(batch);
            bytes_left = bytes_left.saturating_sub(bytes);
            if stopped {
                break;
            }
        }
        Ok(records)
    }

    fn epoch_at(&self, offset: Offset) -> Option<LeaderEpoch> {
        if offset < self.log_start_offset {
            return None;
        }
        let index = self.segment_index(offset)?;
        self.segments[index].epoch_at(offset)
    }

    fn truncate_to(&mut self, offset: Offset) -> Result<(), LogError> {
        if offset >= self.log_end_offset() {
            return Ok(());
        }
        let (keep_segments, cut_inside) = if offset <= self.log_start_offset {
            (0, false)
        } else {
            match self.segment_index(offset) {
                Some(index) if self.segments[index].base_offset() < offset => (index + 1, true),
                Some(index) => (index, false),
                // The segments cover [start, LEO) without gaps, so this would be a bug
                // here; refusing beats a truncation that silently does nothing.
                None => {
                    return Err(LogError::Contract(format!(
                        "no segment holds offset {offset} in [{}, {})",
                        self.log_start_offset,
                        self.log_end_offset()
                    )))
                }
            }
        };
        let deleted = self.delete_segments_from(keep_segments)?;
        if cut_inside {
            if let Some(active) = self.segments.last_mut() {
                active.truncate_to(offset)?;
            }
        }
        if deleted {
            self.sync_dir_now()?;
        }
        // What is left was fsynced by a roll or by the truncation itself.
        self.unflushed_records = 0;
        Ok(())
    }

    fn truncate_fully_and_start_at(&mut self, offset: Offset) -> Result<(), LogError> {
        // Segments go first: a crash before the checkpoint is written leaves an empty log
        // at the old start, where the other order would serve old records above `offset`.
        if self.delete_segments_from(0)? {
            self.sync_dir_now()?;
        }
        self.unflushed_records = 0;
        checkpoint::write_offset(&self.dir, LOG_START_OFFSET_FILE, offset)?;
        self.log_start_offset = offset;
        Ok(())
    }

    /// Fsyncs only when the flush policy says it is due: with `OsOnly` the OS decides
    /// (a kill -9 still loses nothing it already had), so callers may flush after every
    /// append without paying an fsync each time.
    fn flush(&mut self) -> Result<(), LogError> {
        if self.config.flush_policy.due(self.unflushed_records) {
            self.sync()?;
        }
        Ok(())
    }

    fn high_watermark_checkpoint(&self) -> Offset {
        self.high_watermark
    }

    fn write_high_watermark_checkpoint(&mut self, high_watermark: Offset) -> Result<(), LogError> {
        checkpoint::write_offset(&self.dir, HIGH_WATERMARK_FILE, high_watermark)?;
        self.high_watermark = high_watermark;
        Ok(())
    }

    fn epoch_checkpoint(&self) -> Vec<EpochEntry> {
        self.epochs.clone()
    }

    fn write_epoch_checkpoint(&mut self, entries: &[EpochEntry]) -> Result<(), LogError> {
        checkpoint::write_epochs(&self.dir, entries)?;
        self.epochs = entries.to_vec();
        Ok(())
    }
}

impl Drop for SegmentLog {
    fn drop(&mut self) {
        if let Err(error) = self.sync() {
            tracing::warn!(
                dir = %self.dir.display(),
                %error,
                "flushing the log on close failed; unflushed records may not survive a crash"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{segment_file_name, FlushPolicy, FRAME_OVERHEAD};
    use super::*;

    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> TempDir {
            let dir = std::env::temp_dir()
                .join(format!("broker-segment-log-{name}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn config(segment_bytes: u64, flush_policy: FlushPolicy) -> StorageConfig {
        StorageConfig {
            segment_bytes,
            flush_policy,
        }
    }

    /// A record whose frame is exactly 100 bytes.
    fn hundred_byte_frame(offset: Offset) -> Record {
        Record::new(offset, 1, vec![offset as u8; 100 - FRAME_OVERHEAD as usize])
    }

    fn file_sizes(dir: &Path, log: &SegmentLog) -> Vec<u64> {
        log.segment_base_offsets()
            .iter()
            .map(|&base| {
                fs::metadata(dir.join(segment_file_name(base)))
                    .unwrap()
                    .len()
            })
            .collect()
    }

    #[test]
    fn rolls_when_the_next_record_would_pass_segment_bytes() {
        let dir = TempDir::new("roll");
        let mut log = SegmentLog::open(&dir.0, config(300, FlushPolicy::OsOnly)).unwrap();
        assert!(log.segment_base_offsets().is_empty());
        // One batch spanning three segments: three 100-byte frames fill one exactly.
        let records: Vec<Record> = (0..7).map(hundred_byte_frame).collect();
        log.append(&records).unwrap();
        assert_eq!(log.segment_base_offsets(), vec![0, 3, 6]);
        assert_eq!(file_sizes(&dir.0, &log), vec![300, 300, 100]);
        // A record larger than a segment gets a segment of its own.
        let big = Record::new(7, 1, vec![7u8; 1000]);
        log.append(&[big.clone(), hundred_byte_frame(8)]).unwrap();
        assert_eq!(log.segment_base_offsets(), vec![0, 3, 6, 7, 8]);
        assert_eq!(log.read(0, usize::MAX).unwrap()[7], big);
        drop(log);
        let log = SegmentLog::open(&dir.0, config(300, FlushPolicy::OsOnly)).unwrap();
        assert_eq!(log.segment_base_offsets(), vec![0, 3, 6, 7, 8]);
        assert_eq!(log.log_end_offset(), 9);
    }

    #[test]
    fn reads_span_segments_and_respect_max_records() {
        let dir = TempDir::new("read");
        let mut log = SegmentLog::open(&dir.0, config(250, FlushPolicy::OsOnly)).unwrap();
        let records: Vec<Record> = (0..10).map(hundred_byte_frame).collect();
        log.append(&records).unwrap();
        assert_eq!(log.read(1, 5).unwrap(), records[1..6]);
        assert_eq!(log.read(0, usize::MAX).unwrap(), records);
        assert!(log.read(10, 3).unwrap().is_empty());
        assert!(log.read(4, 0).unwrap().is_empty());
        assert!(matches!(log.read(11, 1), Err(LogError::Contract(_))));
        assert_eq!(log.epoch_at(9), Some(1));
        assert_eq!(log.epoch_at(10), None);
    }

    #[test]
    fn bounded_reads_stop_at_the_byte_limit_across_segments() {
        let dir = TempDir::new("bounded");
        // 250-byte segments: two or three 100-byte frames each.
        let mut log = SegmentLog::open(&dir.0, config(250, FlushPolicy::OsOnly)).unwrap();
        let mut records: Vec<Record> = (0..10).map(hundred_byte_frame).collect();
        // One large record in the middle.
        records[5] = Record::new(5, 1, vec![5; 1000]);
        log.append(&records).unwrap();
        let value = 100 - FRAME_OVERHEAD as usize;
        for (from, max, max_bytes) in [
            (0, 10, usize::MAX),
            (0, 10, 3 * value),
            (0, 10, 3 * value - 1),
            (1, 3, 10 * value),
            (4, 10, value),
            (5, 10, 10),
            (6, 10, 4 * value),
            (10, 10, 10),
            (0, 0, 10),
        ] {
            let mut expected = log.read(from, max).unwrap();
            expected.truncate(crate::log::records_within(&expected, max_bytes));
            assert_eq!(
                log.read_bounded(from, max, max_bytes).unwrap(),
                expected,
                "from {from} max {max} max_bytes {max_bytes}"
            );
        }
        // The large record alone goes out whole; a limit below it takes only it.
        assert_eq!(log.read_bounded(5, 10, 10).unwrap(), records[5..6]);
        assert_eq!(log.read_bounded(4, 10, value).unwrap(), records[4..5]);
        assert!(matches!(
            log.read_bounded(11, 1, 10),
            Err(LogError::Contract(_))
        ));
    }

    #[test]
    fn flush_policies_fsync_when_they_say() {
        let dir = TempDir::new("flush");
        let mut log =
            SegmentLog::open(&dir.0, config(1 << 20, FlushPolicy::EveryRecords(3))).unwrap();
        log.append(&[hundred_byte_frame(0), hundred_byte_frame(1)])
            .unwrap();
        assert_eq!(log.unflushed_records(), 2);
        log.flush().unwrap();
        assert_eq!(log.unflushed_records(), 2, "not due until 3");
        log.append(&[hundred_byte_frame(2)]).unwrap();
        assert_eq!(log.unflushed_records(), 0);
        drop(log);

        let mut log = SegmentLog::open(&dir.0, config(1 << 20, FlushPolicy::OsOnly)).unwrap();
        log.append(&[hundred_byte_frame(3)]).unwrap();
        assert_eq!(log.unflushed_records(), 1);
        log.flush().unwrap();
        assert_eq!(
            log.unflushed_records(),
            1,
            "OsOnly: flush leaves it to the OS"
        );
        log.sync().unwrap();
        assert_eq!(log.unflushed_records(), 0);
        drop(log);

        let mut log = SegmentLog::open(&dir.0, config(1 << 20, FlushPolicy::EveryAppend)).unwrap();
        log.append(&[hundred_byte_frame(4)]).unwrap();
        assert_eq!(log.unflushed_records(), 0);
        log.close().unwrap();
    }

    #[test]
    fn a_roll_fsyncs_the_segment_it_leaves() {
        let dir = TempDir::new("roll-flush");
        let mut log = SegmentLog::open(&dir.0, config(200, FlushPolicy::OsOnly)).unwrap();
        log.append(&[hundred_byte_frame(0), hundred_byte_frame(1)])
            .unwrap();
        assert_eq!(log.unflushed_records(), 2);
        log.append(&[hundred_byte_frame(2)]).unwrap();
        assert_eq!(
            log.unflushed_records(),
            1,
            "only the new segment is unflushed"
        );
    }

    #[test]
    fn truncation_deletes_later_segments_and_survives_reopen() {
        let dir = TempDir::new("truncate");
        let mut log = SegmentLog::open(&dir.0, config(200, FlushPolicy::OsOnly)).unwrap();
        let records: Vec<Record> = (0..7).map(hundred_byte_frame).collect();
        log.append(&records).unwrap();
        assert_eq!(log.segment_base_offsets(), vec![0, 2, 4, 6]);
        log.truncate_to(3).unwrap();
        assert_eq!(log.segment_base_offsets(), vec![0, 2]);
        assert_eq!(file_sizes(&dir.0, &log), vec![200, 100]);
        log.truncate_to(2).unwrap();
        assert_eq!(log.segment_base_offsets(), vec![0]);
        assert!(!dir.0.join(segment_file_name(2)).exists());
        log.append(&[Record::new(2, 5, "after")]).unwrap();
        drop(log);
        let log = SegmentLog::open(&dir.0, config(200, FlushPolicy::OsOnly)).unwrap();
        assert_eq!(log.log_end_offset(), 3);
        assert_eq!(log.epoch_at(2), Some(5));
        assert_eq!(log.read(0, 2).unwrap(), records[..2]);
    }

    #[test]
    fn log_start_offset_survives_reopen_and_old_segments_go() {
        let dir = TempDir::new("start");
        let mut log = SegmentLog::open(&dir.0, config(200, FlushPolicy::OsOnly)).unwrap();
        log.append(&(0..5).map(hundred_byte_frame).collect::<Vec<_>>())
            .unwrap();
        log.truncate_fully_and_start_at(42).unwrap();
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (42, 42));
        assert!(log.segment_base_offsets().is_empty());
        drop(log);
        let mut log = SegmentLog::open(&dir.0, config(200, FlushPolicy::OsOnly)).unwrap();
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (42, 42));
        log.append(&[hundred_byte_frame(42)]).unwrap();
        assert_eq!(log.segment_base_offsets(), vec![42]);
        assert!(dir.0.join("00000000000000000042.log").exists());
        // truncate_to below the start empties the log but keeps the start.
        log.truncate_to(10).unwrap();
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (42, 42));
    }

    #[test]
    fn segments_wholly_below_a_checkpointed_start_are_deleted_on_open() {
        // A crash could only leave these by hand editing; recovery must still not serve
        // records below the start.
        let dir = TempDir::new("below-start");
        let mut log = SegmentLog::open(&dir.0, config(200, FlushPolicy::OsOnly)).unwrap();
        let records: Vec<Record> = (0..6).map(hundred_byte_frame).collect();
        log.append(&records).unwrap();
        drop(log);
        checkpoint::write_offset(&dir.0, LOG_START_OFFSET_FILE, 3).unwrap();
        let log = SegmentLog::open(&dir.0, config(200, FlushPolicy::OsOnly)).unwrap();
        assert_eq!(log.segment_base_offsets(), vec![2, 4]);
        assert!(!dir.0.join(segment_file_name(0)).exists());
        assert_eq!(log.log_start_offset(), 3);
        assert_eq!(log.epoch_at(2), None);
        assert!(log.read(2, 1).is_err());
        assert_eq!(log.read(3, usize::MAX).unwrap(), records[3..]);
    }

    #[test]
    fn malformed_checkpoints_fail_open_and_leftover_temp_files_go() {
        let dir = TempDir::new("bad-checkpoint");
        drop(SegmentLog::open(&dir.0, StorageConfig::default()).unwrap());
        fs::write(dir.0.join("replication-offset-checkpoint.tmp"), "0\n").unwrap();
        drop(SegmentLog::open(&dir.0, StorageConfig::default()).unwrap());
        assert!(!dir.0.join("replication-offset-checkpoint.tmp").exists());
        fs::write(dir.0.join("leader-epoch-checkpoint"), "0\n1\n").unwrap();
        match SegmentLog::open(&dir.0, StorageConfig::default()) {
            Err(LogError::Corrupt { path, .. }) => {
                assert_eq!(path, dir.0.join("leader-epoch-checkpoint"))
            }
            other => panic!("opened: {other:?}"),
        }
    }

    #[test]
    fn contract_errors_write_nothing() {
        let dir = TempDir::new("contract");
        let mut log = SegmentLog::open(&dir.0, StorageConfig::default()).unwrap();
        log.append(&[hundred_byte_frame(0)]).unwrap();
        let gap = [hundred_byte_frame(1), hundred_byte_frame(3)];
        assert!(matches!(log.append(&gap), Err(LogError::Contract(_))));
        assert_eq!(log.log_end_offset(), 1);
        assert_eq!(file_sizes(&dir.0, &log), vec![100]);
    }
}
