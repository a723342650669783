//! Recovery on open: a torn or corrupt record cuts the log at the last whole record,
//! later segments are deleted, and the log is usable afterwards.

use broker::log::ReplicaLog;
use broker::record::{Offset, Record};
use broker::storage::{segment_file_name, FlushPolicy, SegmentLog, StorageConfig, FRAME_OVERHEAD};
use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};

/// Value bytes per record, so every frame is exactly `FRAME` bytes.
const VALUE_BYTES: usize = 76;
const FRAME: u64 = FRAME_OVERHEAD + VALUE_BYTES as u64;
/// Four records per segment.
const CONFIG: StorageConfig = StorageConfig {
    segment_bytes: 4 * FRAME,
    flush_policy: FlushPolicy::OsOnly,
};

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "broker-storage-recovery-{name}-{}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        TempDir(dir)
    }

    fn segment(&self, base_offset: Offset) -> PathBuf {
        self.0.join(segment_file_name(base_offset))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn record(offset: Offset) -> Record {
    let value: Vec<u8> = (0..VALUE_BYTES)
        .map(|i| (offset as usize * 31 + i) as u8)
        .collect();
    Record::new(offset, (offset / 3) as u32, value)
}

/// A log of `count` records, closed; segments start at 0, 4, 8, ...
fn write_log(dir: &Path, count: u64) -> Vec<Record> {
    let records: Vec<Record> = (0..count).map(record).collect();
    let mut log = SegmentLog::open(dir, CONFIG).unwrap();
    log.append(&records).unwrap();
    log.close().unwrap();
    records
}

fn flip_byte(path: &Path, position: u64) {
    let mut bytes = fs::read(path).unwrap();
    bytes[position as usize] ^= 0x5A;
    fs::write(path, bytes).unwrap();
}

/// The log holds exactly `expected`, serves nothing past it, and takes appends again.
fn assert_recovered_to(dir: &Path, expected: &[Record]) {
    let mut log = SegmentLog::open(dir, CONFIG).unwrap();
    let end = expected.len() as Offset;
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(log.read(0, usize::MAX).unwrap(), expected);
    assert!(log.read(end, 10).unwrap().is_empty());
    assert!(log.read(end + 1, 1).is_err());
    assert_eq!(log.epoch_at(end), None);
    let next = Record::new(end, 99, "after recovery");
    log.append(std::slice::from_ref(&next)).unwrap();
    drop(log);
    let log = SegmentLog::open(dir, CONFIG).unwrap();
    assert_eq!(log.log_end_offset(), end + 1);
    assert_eq!(log.read(end, 10).unwrap(), vec![next]);
    assert_eq!(log.epoch_at(end), Some(99));
}

#[test]
fn storage_recovery_torn_tail_ends_at_the_last_whole_record() {
    for cut_into_last in [1, FRAME_OVERHEAD - 5, FRAME - 1] {
        let dir = TempDir::new(&format!("torn-{cut_into_last}"));
        let records = write_log(&dir.0, 7);
        let last = dir.segment(4);
        let file = OpenOptions::new().write(true).open(&last).unwrap();
        file.set_len(2 * FRAME + cut_into_last).unwrap();
        drop(file);
        drop(SegmentLog::open(&dir.0, CONFIG).unwrap());
        assert_eq!(fs::metadata(&last).unwrap().len(), 2 * FRAME, "cut on open");
        assert_recovered_to(&dir.0, &records[..6]);
    }
}

#[test]
fn storage_recovery_flipped_byte_in_the_last_record_cuts_it() {
    // In the length field, the offset, the value and the CRC.
    for within in [0, 6, 40, FRAME - 1] {
        let dir = TempDir::new(&format!("flip-last-{within}"));
        let records = write_log(&dir.0, 7);
        flip_byte(&dir.segment(4), 2 * FRAME + within);
        assert_recovered_to(&dir.0, &records[..6]);
    }
}

#[test]
fn storage_recovery_flipped_byte_in_an_earlier_segment_cuts_there_and_drops_later_ones() {
    let dir = TempDir::new("flip-middle");
    let records = write_log(&dir.0, 14);
    assert!(dir.segment(8).exists() && dir.segment(12).exists());
    // Record 6: the third record of the second segment.
    flip_byte(&dir.segment(4), 2 * FRAME + 30);
    assert_recovered_to(&dir.0, &records[..6]);
    assert!(!dir.segment(8).exists());
    assert!(!dir.segment(12).exists());
}

#[test]
fn storage_recovery_garbage_after_the_last_record_is_cut() {
    let dir = TempDir::new("garbage");
    let records = write_log(&dir.0, 6);
    let last = dir.segment(4);
    let mut bytes = fs::read(&last).unwrap();
    bytes.extend_from_slice(&[0xAB; 57]);
    fs::write(&last, bytes).unwrap();
    drop(SegmentLog::open(&dir.0, CONFIG).unwrap());
    assert_eq!(fs::metadata(&last).unwrap().len(), 2 * FRAME, "cut on open");
    assert_recovered_to(&dir.0, &records);
}

#[test]
fn storage_recovery_zeroed_tail_is_cut() {
    // What a file system can leave after a crash: the length grew, the data never came.
    let dir = TempDir::new("zeroes");
    let records = write_log(&dir.0, 5);
    let last = dir.segment(4);
    let file = OpenOptions::new().write(true).open(&last).unwrap();
    file.set_len(FRAME + 4096).unwrap();
    drop(file);
    assert_recovered_to(&dir.0, &records);
}

#[test]
fn storage_recovery_record_with_a_wrong_offset_is_cut() {
    // A whole, CRC-valid frame of another segment copied in: its offset is not the next.
    let dir = TempDir::new("wrong-offset");
    let records = write_log(&dir.0, 6);
    let first_frame = fs::read(dir.segment(0)).unwrap()[..FRAME as usize].to_vec();
    let last = dir.segment(4);
    let mut bytes = fs::read(&last).unwrap();
    bytes.extend_from_slice(&first_frame);
    fs::write(&last, bytes).unwrap();
    assert_recovered_to(&dir.0, &records);
}

#[test]
fn storage_recovery_gap_between_segments_drops_the_later_ones() {
    let dir = TempDir::new("gap");
    let records = write_log(&dir.0, 12);
    fs::remove_file(dir.segment(4)).unwrap();
    assert_recovered_to(&dir.0, &records[..4]);
    assert!(!dir.segment(8).exists());
}

#[test]
fn storage_recovery_empty_active_segment_is_kept_and_appended_to() {
    // A crash right after a roll leaves an empty segment file at the LEO.
    let dir = TempDir::new("empty-active");
    let records = write_log(&dir.0, 4);
    fs::write(dir.segment(4), b"").unwrap();
    assert_recovered_to(&dir.0, &records);
}

#[test]
fn storage_recovery_whole_first_segment_corrupt_leaves_an_empty_log() {
    let dir = TempDir::new("all-corrupt");
    write_log(&dir.0, 6);
    flip_byte(&dir.segment(0), 3);
    assert_recovered_to(&dir.0, &[]);
    assert!(!dir.segment(4).exists());
}
