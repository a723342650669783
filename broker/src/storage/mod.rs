//! A replica's log on disk: [`SegmentLog`], the [`crate::log::ReplicaLog`] the broker runs.
//!
//! # Layout of a log directory
//!
//! - `00000000000000000042.log`: a segment, named by the offset of its first record
//!   (20 digits, so names sort as offsets). Segments hold consecutive offsets with no gap
//!   between one and the next; the last one is appended to and is rolled (a new one
//!   started) when the next record would take it past [`StorageConfig::segment_bytes`]
//!   (a segment only exceeds that when one record alone does).
//! - `log-start-offset`, `replication-offset-checkpoint` (the high watermark),
//!   `leader-epoch-checkpoint`: small text files, each replaced atomically (temp file,
//!   fsync, rename, fsync the directory). Each has a version line `0`; then the offset
//!   (`0\n<offset>\n`), or for the epoch cache the entry count and one
//!   `<epoch> <start offset>` line per entry. A missing file reads as 0 / empty; a
//!   malformed one fails `open` with [`LogError::Corrupt`](crate::log::LogError) naming
//!   it, since an atomically written file can only be malformed if edited by hand.
//!
//! # Record frame
//!
//! Little-endian: `length u32` (bytes after it), `offset u64`, `leader_epoch u32`,
//! `value_len u32`, the value, then `crc32c u32` over everything before it in the frame
//! (header and value). [`FRAME_OVERHEAD`] is the 24 bytes a frame adds to its value.
//!
//! # Recovery (on open)
//!
//! Every segment is scanned in offset order. The first record that is torn (the file
//! ends inside it), has a bad length, a bad CRC, or an offset that is not the next one
//! (also: a segment whose base offset is not where the previous one ended) cuts the
//! log there: that file is truncated at the end of the last valid record and every later
//! segment file is deleted, with a `tracing::warn!` naming the file, the offset and the
//! reason. Corruption is repaired, never fatal; only I/O errors and malformed checkpoints
//! fail [`SegmentLog::open`]. Segments wholly below the log start offset are deleted.
//!
//! # Durability
//!
//! Every append reaches the OS with pwrite(2) before it returns, so killing the process
//! loses nothing acknowledged; [`FlushPolicy`] says when appends are also fsynced.
//! Truncations, deletions and checkpoint writes are fsynced (file and directory) before
//! they return. Multi-file changes delete from the highest offset down, so a crash
//! part-way leaves a prefix of the old log, never a log with a hole.

mod checkpoint;
pub(crate) mod crc;
mod flush;
mod frame;
mod segment;
mod segment_log;

pub use flush::FlushPolicy;
pub use frame::FRAME_OVERHEAD;
pub use segment::segment_file_name;
pub use segment_log::SegmentLog;

use serde::{Deserialize, Serialize};

/// How a [`SegmentLog`] lays out and flushes its files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct StorageConfig {
    /// A segment is rolled when the next record would take it past this many bytes.
    pub segment_bytes: u64,
    pub flush_policy: FlushPolicy,
}

impl StorageConfig {
    /// 1 MiB segments: small enough that tests roll, large enough that files stay few.
    pub const DEFAULT_SEGMENT_BYTES: u64 = 1 << 20;
}

impl Default for StorageConfig {
    fn default() -> StorageConfig {
        StorageConfig {
            segment_bytes: StorageConfig::DEFAULT_SEGMENT_BYTES,
            flush_policy: FlushPolicy::OsOnly,
        }
    }
}
