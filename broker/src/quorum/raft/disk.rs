//! The metadata quorum's files under `data_dir/metadata/`, their framing, and the one
//! thread that writes them.
//!
//! # Files
//!
//! - `log`: append-only. A header frame (`{"purged": <log id or null>}`: the last entry
//!   removed by a purge) then one frame per Raft entry (its JSON), in index order with no
//!   gap. Appends go to the end and are fsynced before openraft hears they are flushed;
//!   a truncation cuts the file (`ftruncate`, fsync); a purge replaces the whole file
//!   (header and the entries kept) atomically.
//! - `vote`: the last vote, replaced atomically and fsynced before `save_vote` returns.
//! - `committed`: the last committed log id, one frame rewritten in place without fsync:
//!   it only lets a restarted node re-apply its committed entries before hearing from a
//!   leader, so a lost or torn one (read as "unknown") costs nothing but that.
//! - `snapshot`: a frame of the snapshot's metadata (JSON) and a frame of the state
//!   ([`crate::metadata::MetadataState::to_snapshot`]), replaced atomically.
//!
//! "Atomically" means: write `<name>.tmp`, fsync it, rename it over `<name>`, fsync the
//! directory; a crash leaves the old file or the new one. A `.tmp` left by a crash is
//! ignored and overwritten.
//!
//! # Frame
//!
//! `length u32` (of the payload), `!length u32`, `crc32c u32` (of the payload), the
//! payload; integers little-endian. The length is written twice so that a damaged length
//! is told from a record cut short: only the latter may be repaired by cutting.
//!
//! # The writer thread
//!
//! Every write is made by one thread ([`Disk::spawn`]), in the order the operations were
//! queued, so a crash leaves on disk a prefix of the operation sequence. (openraft 0.9
//! waits for each append to be flushed before it appends again, so appends are never
//! queued together and each costs one fsync.) A [`Fence`]
//! stops all writing at once: [`Fence::kill`] returns only when no write is in progress
//! and none will start, which is what an in-process kill -9 needs.

use crate::storage::crc::crc32c;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;

use openraft::storage::LogFlushed;
use tokio::sync::oneshot;

use super::types::TypeConfig;

pub(super) const LOG_FILE: &str = "log";
pub(super) const VOTE_FILE: &str = "vote";
pub(super) const COMMITTED_FILE: &str = "committed";
pub(super) const SNAPSHOT_FILE: &str = "snapshot";
const TEMP_SUFFIX: &str = ".tmp";

/// Bytes a frame adds to its payload.
pub(super) const FRAME_OVERHEAD: usize = 12;

/// Why bytes are not a frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum FrameError {
    /// The bytes end inside the frame: a write cut short.
    #[error("torn frame: {needed} bytes needed, {available} present")]
    Torn { needed: u64, available: u64 },
    #[error("bad length field {length:#010x} (check {check:#010x})")]
    BadLength { length: u32, check: u32 },
    #[error("bad CRC: stored {stored:#010x}, computed {computed:#010x}")]
    BadCrc { stored: u32, computed: u32 },
}

/// Appends the frame of `payload` to `out`. Payloads are entries and snapshots of the
/// metadata store, far below the 4 GiB a `u32` length can say; a larger one is an error.
pub(super) fn encode_frame(payload: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
    let length = u32::try_from(payload.len()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a {} byte payload does not fit a frame", payload.len()),
        )
    })?;
    out.extend_from_slice(&length.to_le_bytes());
    out.extend_from_slice(&(!length).to_le_bytes());
    out.extend_from_slice(&crc32c(payload).to_le_bytes());
    out.extend_from_slice(payload);
    Ok(())
}

/// Decodes the frame at the start of `bytes`: its payload and the bytes it occupies.
pub(super) fn decode_frame(bytes: &[u8]) -> Result<(&[u8], usize), FrameError> {
    let available = bytes.len() as u64;
    if bytes.len() < FRAME_OVERHEAD {
        return Err(FrameError::Torn {
            needed: FRAME_OVERHEAD as u64,
            available,
        });
    }
    let field =
        |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    let (length, check, stored) = (field(0), field(4), field(8));
    if check != !length {
        return Err(FrameError::BadLength { length, check });
    }
    let needed = FRAME_OVERHEAD as u64 + u64::from(length);
    if needed > available {
        return Err(FrameError::Torn { needed, available });
    }
    // `needed <= bytes.len()`, so it fits a usize.
    let end = needed as usize;
    let payload = &bytes[FRAME_OVERHEAD..end];
    let computed = crc32c(payload);
    if stored != computed {
        return Err(FrameError::BadCrc { stored, computed });
    }
    Ok((payload, end))
}

/// Makes renames and creations in `dir` durable.
pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Replaces `dir/name` with `contents` so that a crash leaves the old or the new file.
pub(super) fn write_atomic(dir: &Path, name: &str, contents: &[u8]) -> io::Result<()> {
    let temp = dir.join(format!("{name}{TEMP_SUFFIX}"));
    let mut file = File::create(&temp)?;
    file.write_all(contents)?;
    file.sync_all()?;
    drop(file);
    fs::rename(&temp, dir.join(name))?;
    sync_dir(dir)
}

/// Opens the log for appending.
pub(super) fn open_log_for_append(dir: &Path) -> io::Result<File> {
    OpenOptions::new().append(true).open(dir.join(LOG_FILE))
}

/// Opens (creating it if needed) the committed-id file for in-place rewrites.
pub(super) fn open_committed(dir: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.join(COMMITTED_FILE))
}

/// Stops every write to the node's files, for an in-process kill -9.
#[derive(Default)]
pub(super) struct Fence {
    killed: AtomicBool,
    /// Held by the writer for the whole of each operation.
    io: Mutex<()>,
}

impl Fence {
    /// From now on nothing is written; returns once the write in progress (if any) ends.
    pub(super) fn kill(&self) {
        self.killed.store(true, Ordering::SeqCst);
        drop(self.lock());
    }

    /// Stops writes without waiting for the one in progress (for a drop without kill).
    pub(super) fn kill_without_waiting(&self) {
        self.killed.store(true, Ordering::SeqCst);
    }

    /// Held by the writer for the whole of each operation.
    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.io
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn is_killed(&self) -> bool {
        self.killed.load(Ordering::SeqCst)
    }
}

type Done = oneshot::Sender<io::Result<()>>;

/// One write, queued to the writer thread.
enum DiskOp {
    /// Frames to append to the log; `flushed` is told once they are fsynced.
    Append {
        frames: Vec<u8>,
        flushed: LogFlushed<TypeConfig>,
    },
    /// Cuts the log file to `len` bytes.
    TruncateLog {
        len: u64,
        done: Done,
    },
    /// Replaces the whole log file (a purge).
    ReplaceLog {
        contents: Vec<u8>,
        done: Done,
    },
    SaveVote {
        contents: Vec<u8>,
        done: Done,
    },
    SaveCommitted {
        contents: Vec<u8>,
    },
    SaveSnapshot {
        contents: Vec<u8>,
        done: Done,
    },
}

/// The handle through which the log store and the state machine write; cheap to clone.
/// The writer thread ends when every handle is gone.
#[derive(Clone)]
pub(super) struct Disk {
    tx: mpsc::Sender<DiskOp>,
}

fn stopped() -> io::Error {
    io::Error::other("the metadata disk writer has stopped")
}

impl Disk {
    /// Starts the writer thread of `dir`, appending to `log` and rewriting `committed`.
    pub(super) fn spawn(
        dir: PathBuf,
        log: File,
        committed: File,
        fence: Arc<Fence>,
        name: String,
    ) -> io::Result<(Disk, thread::JoinHandle<()>)> {
        let (tx, rx) = mpsc::channel();
        let writer = Writer {
            dir,
            log,
            committed,
            fence,
            failed: None,
        };
        let handle = thread::Builder::new()
            .name(name)
            .spawn(move || writer.run(rx))?;
        Ok((Disk { tx }, handle))
    }

    /// Queues `frames` for the end of the log; `flushed` hears when they are durable.
    pub(super) fn append(&self, frames: Vec<u8>, flushed: LogFlushed<TypeConfig>) {
        if let Err(mpsc::SendError(DiskOp::Append { flushed, .. })) =
            self.tx.send(DiskOp::Append { frames, flushed })
        {
            flushed.log_io_completed(Err(stopped()));
        }
    }

    pub(super) async fn truncate_log(&self, len: u64) -> io::Result<()> {
        self.call(|done| DiskOp::TruncateLog { len, done }).await
    }

    pub(super) async fn replace_log(&self, contents: Vec<u8>) -> io::Result<()> {
        self.call(|done| DiskOp::ReplaceLog { contents, done })
            .await
    }

    pub(super) async fn save_vote(&self, contents: Vec<u8>) -> io::Result<()> {
        self.call(|done| DiskOp::SaveVote { contents, done }).await
    }

    /// Queues the committed id; not waited for (see the module doc).
    pub(super) fn save_committed(&self, contents: Vec<u8>) -> io::Result<()> {
        self.tx
            .send(DiskOp::SaveCommitted { contents })
            .map_err(|_| stopped())
    }

    pub(super) async fn save_snapshot(&self, contents: Vec<u8>) -> io::Result<()> {
        self.call(|done| DiskOp::SaveSnapshot { contents, done })
            .await
    }

    async fn call(&self, op: impl FnOnce(Done) -> DiskOp) -> io::Result<()> {
        let (done, result) = oneshot::channel();
        self.tx.send(op(done)).map_err(|_| stopped())?;
        result.await.map_err(|_| stopped())?
    }
}

struct Writer {
    dir: PathBuf,
    log: File,
    committed: File,
    fence: Arc<Fence>,
    /// After a failed log write the file may end in a partial frame: every later log
    /// write is refused (openraft stops the node on the first error anyway).
    failed: Option<String>,
}

impl Writer {
    fn run(mut self, rx: mpsc::Receiver<DiskOp>) {
        while let Ok(op) = rx.recv() {
            self.execute(op);
        }
    }

    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.check_log()?;
        let result = self
            .log
            .write_all(bytes)
            .and_then(|()| self.log.sync_data());
        self.note_log_failure(&result);
        result
    }

    fn execute(&mut self, op: DiskOp) {
        let fence = self.fence.clone();
        let _io = fence.lock();
        if fence.is_killed() {
            return;
        }
        match op {
            DiskOp::Append { frames, flushed } => {
                let result = self.append(&frames);
                flushed.log_io_completed(result);
            }
            DiskOp::TruncateLog { len, done } => {
                let result = self.check_log().and_then(|()| {
                    self.log.set_len(len)?;
                    self.log.sync_all()
                });
                self.note_log_failure(&result);
                let _ = done.send(result);
            }
            DiskOp::ReplaceLog { contents, done } => {
                let result = self.check_log().and_then(|()| {
                    write_atomic(&self.dir, LOG_FILE, &contents)?;
                    self.log = open_log_for_append(&self.dir)?;
                    Ok(())
                });
                self.note_log_failure(&result);
                let _ = done.send(result);
            }
            DiskOp::SaveVote { contents, done } => {
                let _ = done.send(write_atomic(&self.dir, VOTE_FILE, &contents));
            }
            DiskOp::SaveCommitted { contents } => {
                if let Err(error) = self.committed.write_all_at(&contents, 0) {
                    tracing::warn!(%error, "cannot record the committed log id");
                }
            }
            DiskOp::SaveSnapshot { contents, done } => {
                let _ = done.send(write_atomic(&self.dir, SNAPSHOT_FILE, &contents));
            }
        }
    }

    fn check_log(&self) -> io::Result<()> {
        match &self.failed {
            Some(reason) => Err(io::Error::other(format!(
                "the metadata log is unusable after an earlier failure: {reason}"
            ))),
            None => Ok(()),
        }
    }

    fn note_log_failure(&mut self, result: &io::Result<()>) {
        if let Err(error) = result {
            tracing::error!(%error, "metadata log write failed");
            if self.failed.is_none() {
                self.failed = Some(error.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_standard_check_value() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn frames_round_trip_and_every_cut_is_torn() {
        let mut bytes = Vec::new();
        encode_frame(b"hello", &mut bytes).unwrap();
        encode_frame(b"", &mut bytes).unwrap();
        let (first, used) = decode_frame(&bytes).unwrap();
        assert_eq!((first, used), (&b"hello"[..], 17));
        let (second, rest) = decode_frame(&bytes[used..]).unwrap();
        assert_eq!((second, rest), (&b""[..], 12));
        for cut in 0..17 {
            assert!(
                matches!(decode_frame(&bytes[..cut]), Err(FrameError::Torn { .. })),
                "cut at {cut}"
            );
        }
        for (at, damage) in [(0, "length"), (5, "check"), (9, "crc"), (14, "payload")] {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x40;
            let error = decode_frame(&flipped).unwrap_err();
            if at < 8 {
                assert!(
                    matches!(error, FrameError::BadLength { .. }),
                    "{damage}: {error}"
                );
            } else {
                assert!(
                    matches!(error, FrameError::BadCrc { .. }),
                    "{damage}: {error}"
                );
            }
        }
    }
}
