//! The Raft log and vote ([`LogStore`], openraft's `RaftLogStorage`): durable in the
//! files of [`super::disk`], with an in-memory copy of every entry not yet purged, which
//! replication and re-application read from ([`LogReader`]).
//!
//! Opening ([`load`]) scans the log file. A last record cut short by a crash (kill -9 in
//! the middle of a write), or whose checksum fails with nothing but zeros after it, is
//! cut off and logged with a warning: it was never acknowledged, since acknowledgement
//! waits for the fsync. Any other damage (a bad record followed by more data, entries
//! out of order, a malformed header, vote or snapshot) refuses to start the node: cutting
//! there could drop entries this node acknowledged, which Raft's safety relies on.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{self, OpenOptions};
use std::io;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{AnyError, LogIdOptionExt, OptionalSend, RaftLogReader, StorageIOError};
use serde::{Deserialize, Serialize};

use super::disk::{
    decode_frame, encode_frame, write_atomic, Disk, FrameError, COMMITTED_FILE, FRAME_OVERHEAD,
    LOG_FILE, VOTE_FILE,
};
use super::types::{Entry, LogId, StorageError, TypeConfig, Vote};
use super::RaftStartError;

/// The first frame of the log file.
#[derive(Debug, Serialize, Deserialize)]
struct LogHeader {
    /// The last entry removed by a purge; the file's entries follow it.
    purged: Option<LogId>,
}

/// The entries after the last purge, as the log file holds them once every queued write
/// is done.
pub(super) struct LogCache {
    purged: Option<LogId>,
    /// Each entry with the byte offset of its frame in the log file.
    entries: BTreeMap<u64, (Entry, u64)>,
    /// The log file's length.
    len: u64,
}

impl LogCache {
    fn last_log_id(&self) -> Option<LogId> {
        self.entries
            .last_key_value()
            .map(|(_, (entry, _))| entry.log_id)
            .or(self.purged)
    }
}

/// What [`load`] found in the directory.
pub(super) struct LoadedLog {
    cache: LogCache,
    vote: Option<Vote>,
    committed: Option<LogId>,
}

impl LoadedLog {
    /// No vote and no entry ever written: a node's first start.
    pub(super) fn is_pristine(&self) -> bool {
        self.vote.is_none() && self.cache.purged.is_none() && self.cache.entries.is_empty()
    }

    pub(super) fn purged(&self) -> Option<LogId> {
        self.cache.purged
    }
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> RaftStartError + '_ {
    move |source| RaftStartError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn corrupt(path: &Path, reason: impl Into<String>) -> RaftStartError {
    RaftStartError::Corrupt {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Reads the log, the vote and the committed id of `dir`, repairing a torn log tail.
pub(super) fn load(dir: &Path) -> Result<LoadedLog, RaftStartError> {
    let cache = load_log(dir)?;
    let vote_path = dir.join(VOTE_FILE);
    let vote = match fs::read(&vote_path) {
        Ok(bytes) => {
            let (payload, _) =
                decode_frame(&bytes).map_err(|e| corrupt(&vote_path, e.to_string()))?;
            Some(
                serde_json::from_slice::<Vote>(payload)
                    .map_err(|e| corrupt(&vote_path, e.to_string()))?,
            )
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_error(&vote_path)(e)),
    };
    let committed = load_committed(dir, &cache)?;
    Ok(LoadedLog {
        cache,
        vote,
        committed,
    })
}

/// The committed id, if the file holds a whole one that this log can back.
fn load_committed(dir: &Path, cache: &LogCache) -> Result<Option<LogId>, RaftStartError> {
    let path = dir.join(COMMITTED_FILE);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(&path)(e)),
    };
    if bytes.is_empty() {
        return Ok(None);
    }
    let committed = match decode_frame(&bytes).map_err(|e| e.to_string()).and_then(
        |(payload, _)| serde_json::from_slice::<Option<LogId>>(payload).map_err(|e| e.to_string()),
    ) {
        Ok(committed) => committed,
        Err(reason) => {
            tracing::warn!(path = %path.display(), %reason, "ignoring an unreadable committed log id");
            return Ok(None);
        }
    };
    let Some(committed) = committed else {
        return Ok(None);
    };
    // Committed entries are never truncated: the entry at that index must be this one.
    if let Some((entry, _)) = cache.entries.get(&committed.index) {
        if entry.log_id != committed {
            tracing::warn!(%committed, held = %entry.log_id, "ignoring a committed log id the log contradicts");
            return Ok(None);
        }
        return Ok(Some(committed));
    }
    if cache.purged.is_some_and(|p| p.index >= committed.index) {
        // Covered by the snapshot, which openraft starts from anyway.
        return Ok(Some(committed));
    }
    // Beyond the end of the log: only a lost write (power loss) can do that, since the
    // writer saves the committed id after the entries queued before it. Every entry the
    // log still holds was committed, so re-applying stops at its end.
    let last = cache.last_log_id();
    tracing::warn!(%committed, last = ?last, "the committed log id is beyond the log; re-applying up to its end");
    Ok(last)
}

fn load_log(dir: &Path) -> Result<LogCache, RaftStartError> {
    let path = dir.join(LOG_FILE);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let contents = log_contents(None, std::iter::empty())
                .map_err(io_error(&path))?
                .0;
            write_atomic(dir, LOG_FILE, &contents).map_err(io_error(&path))?;
            contents
        }
        Err(e) => return Err(io_error(&path)(e)),
    };
    let (header, mut position) =
        decode_frame(&bytes).map_err(|e| corrupt(&path, format!("header: {e}")))?;
    let header: LogHeader =
        serde_json::from_slice(header).map_err(|e| corrupt(&path, format!("header: {e}")))?;
    let mut entries = BTreeMap::new();
    let mut next_index = header.purged.next_index();
    let mut cut: Option<String> = None;
    while position < bytes.len() {
        let rest = &bytes[position..];
        let (reason, frame_end) = match decode_frame(rest) {
            Ok((payload, used)) => match serde_json::from_slice::<Entry>(payload) {
                Ok(entry) if entry.log_id.index == next_index => {
                    entries.insert(next_index, (entry, position as u64));
                    next_index += 1;
                    position += used;
                    continue;
                }
                Ok(entry) => {
                    return Err(corrupt(
                        &path,
                        format!(
                            "entry {} at byte {position} where entry {next_index} was expected",
                            entry.log_id
                        ),
                    ))
                }
                Err(e) => (format!("undecodable entry: {e}"), used),
            },
            Err(e @ FrameError::Torn { .. }) => (e.to_string(), rest.len()),
            // Where the frame would end is unknown: judge by what follows its header.
            Err(e @ FrameError::BadLength { .. }) => (e.to_string(), FRAME_OVERHEAD),
            Err(e @ FrameError::BadCrc { .. }) => {
                let length = rest
                    .get(0..4)
                    .and_then(|b| b.try_into().ok())
                    .map(u32::from_le_bytes)
                    .map_or(rest.len(), |l| FRAME_OVERHEAD + l as usize);
                (e.to_string(), length.min(rest.len()))
            }
        };
        // Only the last record can be torn by a crash; zeros after it are a file extended
        // but not written.
        if rest[frame_end..].iter().all(|b| *b == 0) {
            cut = Some(reason);
            break;
        }
        return Err(corrupt(
            &path,
            format!("bad record at byte {position} with data after it: {reason}"),
        ));
    }
    if let Some(reason) = cut {
        tracing::warn!(
            path = %path.display(),
            offset = position,
            removed_bytes = bytes.len() - position,
            %reason,
            "cutting a torn record off the end of the metadata log"
        );
        let file = OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(io_error(&path))?;
        file.set_len(position as u64).map_err(io_error(&path))?;
        file.sync_all().map_err(io_error(&path))?;
    }
    Ok(LogCache {
        purged: header.purged,
        entries,
        len: position as u64,
    })
}

/// The bytes of a whole log file: the header, then `entries` (with each one's offset).
fn log_contents<'a>(
    purged: Option<LogId>,
    entries: impl Iterator<Item = &'a Entry>,
) -> io::Result<(Vec<u8>, Vec<u64>)> {
    let mut contents = Vec::new();
    encode_frame(&serde_json::to_vec(&LogHeader { purged })?, &mut contents)?;
    let mut offsets = Vec::new();
    for entry in entries {
        offsets.push(contents.len() as u64);
        encode_frame(&serde_json::to_vec(entry)?, &mut contents)?;
    }
    Ok((contents, offsets))
}

/// Reads entries for openraft (replication, re-application); cheap to clone.
#[derive(Clone)]
pub(super) struct LogReader {
    cache: Arc<Mutex<LogCache>>,
}

fn lock(cache: &Mutex<LogCache>) -> MutexGuard<'_, LogCache> {
    cache
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl RaftLogReader<TypeConfig> for LogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        Ok(lock(&self.cache)
            .entries
            .range(range)
            .map(|(_, (entry, _))| entry.clone())
            .collect())
    }
}

/// openraft's log storage: the log, the vote and the committed id.
pub(super) struct LogStore {
    reader: LogReader,
    vote: Option<Vote>,
    committed: Option<LogId>,
    disk: Disk,
}

impl LogStore {
    pub(super) fn new(loaded: LoadedLog, disk: Disk) -> LogStore {
        LogStore {
            reader: LogReader {
                cache: Arc::new(Mutex::new(loaded.cache)),
            },
            vote: loaded.vote,
            committed: loaded.committed,
            disk,
        }
    }
}

fn write_logs_error(error: &(impl std::error::Error + 'static)) -> StorageError {
    StorageIOError::write_logs(AnyError::new(error)).into()
}

/// `value` as a frame of its JSON.
fn framed_json(value: &impl Serialize) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    encode_frame(&serde_json::to_vec(value)?, &mut out)?;
    Ok(out)
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        self.reader.try_get_log_entries(range).await
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let cache = lock(&self.reader.cache);
        Ok(LogState {
            last_purged_log_id: cache.purged,
            last_log_id: cache.last_log_id(),
        })
    }

    async fn get_log_reader(&mut self) -> LogReader {
        self.reader.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        let contents =
            framed_json(vote).map_err(|e| StorageIOError::write_vote(AnyError::new(&e)))?;
        self.disk
            .save_vote(contents)
            .await
            .map_err(|e| StorageIOError::write_vote(AnyError::new(&e)))?;
        self.vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        Ok(self.vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        let contents = framed_json(&committed).map_err(|e| write_logs_error(&e))?;
        self.disk
            .save_committed(contents)
            .map_err(|e| write_logs_error(&e))?;
        self.committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut frames = Vec::new();
        let mut framed = Vec::new();
        for entry in entries {
            let offset = frames.len() as u64;
            let payload = serde_json::to_vec(&entry).map_err(|e| write_logs_error(&e))?;
            encode_frame(&payload, &mut frames).map_err(|e| write_logs_error(&e))?;
            framed.push((entry, offset));
        }
        {
            let mut cache = lock(&self.reader.cache);
            let base = cache.len;
            for (entry, offset) in framed {
                cache
                    .entries
                    .insert(entry.log_id.index, (entry, base + offset));
            }
            cache.len = base + frames.len() as u64;
        }
        self.disk.append(frames, callback);
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let len = {
            let mut cache = lock(&self.reader.cache);
            let Some(&(_, offset)) = cache.entries.get(&log_id.index) else {
                return Ok(());
            };
            cache.entries.split_off(&log_id.index);
            cache.len = offset;
            offset
        };
        tracing::debug!(since = %log_id, "truncating the metadata log");
        self.disk
            .truncate_log(len)
            .await
            .map_err(|e| write_logs_error(&e))
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let contents = {
            let mut cache = lock(&self.reader.cache);
            if cache.purged >= Some(log_id) {
                return Ok(());
            }
            let kept = cache.entries.split_off(&(log_id.index + 1));
            cache.entries = kept;
            cache.purged = Some(log_id);
            let (contents, offsets) =
                log_contents(cache.purged, cache.entries.values().map(|(entry, _)| entry))
                    .map_err(|e| write_logs_error(&e))?;
            for ((_, offset), new) in cache.entries.values_mut().zip(offsets) {
                *offset = new;
            }
            cache.len = contents.len() as u64;
            contents
        };
        tracing::debug!(upto = %log_id, "purging the metadata log");
        self.disk
            .replace_log(contents)
            .await
            .map_err(|e| write_logs_error(&e))
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicU64, Ordering};

    use openraft::storage::RaftLogStorageExt;
    use openraft::{CommittedLeaderId, EntryPayload};

    use super::*;
    use crate::metadata::Command;
    use crate::quorum::raft::disk::{open_committed, open_log_for_append, Fence};

    static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> TempDir {
            let dir = std::env::temp_dir().join(format!(
                "broker-raft-log-{}-{}",
                std::process::id(),
                NEXT_DIR.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn log_id(term: u64, index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(term, 1), index)
    }

    fn entry(term: u64, index: u64) -> Entry {
        Entry {
            log_id: log_id(term, index),
            payload: EntryPayload::Normal(Command::RenewAllSessions),
        }
    }

    /// Opens `dir` as a node does, runs `f` on the store, and waits for the writer.
    async fn with_store<F, Fut>(dir: &Path, f: F)
    where
        F: FnOnce(LogStore) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let loaded = load(dir).unwrap();
        let (disk, writer) = Disk::spawn(
            dir.to_path_buf(),
            open_log_for_append(dir).unwrap(),
            open_committed(dir).unwrap(),
            Arc::new(Fence::default()),
            "test-disk".into(),
        )
        .unwrap();
        f(LogStore::new(loaded, disk)).await;
        writer.join().unwrap();
    }

    fn indexes(loaded: &LoadedLog) -> Vec<(u64, u64)> {
        loaded
            .cache
            .entries
            .values()
            .map(|(e, _)| (e.log_id.leader_id.term, e.log_id.index))
            .collect()
    }

    #[tokio::test]
    async fn appends_truncations_purges_and_the_vote_survive_reopening() {
        let dir = TempDir::new();
        with_store(&dir.0, |mut store| async move {
            store
                .blocking_append((0..10).map(|i| entry(1, i)))
                .await
                .unwrap();
            store.truncate(log_id(1, 7)).await.unwrap();
            store
                .blocking_append((7..9).map(|i| entry(2, i)))
                .await
                .unwrap();
            store.purge(log_id(1, 3)).await.unwrap();
            store.blocking_append([entry(2, 9)]).await.unwrap();
            let vote = Vote::new(2, 1);
            store.save_vote(&vote).await.unwrap();
            store.save_committed(Some(log_id(2, 8))).await.unwrap();
            let state = store.get_log_state().await.unwrap();
            assert_eq!(state.last_purged_log_id, Some(log_id(1, 3)));
            assert_eq!(state.last_log_id, Some(log_id(2, 9)));
            let mut reader = store.get_log_reader().await;
            let read = reader.try_get_log_entries(5..8).await.unwrap();
            assert_eq!(
                read.iter().map(|e| e.log_id).collect::<Vec<_>>(),
                vec![log_id(1, 5), log_id(1, 6), log_id(2, 7)]
            );
        })
        .await;
        let loaded = load(&dir.0).unwrap();
        assert_eq!(
            indexes(&loaded),
            vec![(1, 4), (1, 5), (1, 6), (2, 7), (2, 8), (2, 9)]
        );
        assert_eq!(loaded.purged(), Some(log_id(1, 3)));
        assert_eq!(loaded.vote, Some(Vote::new(2, 1)));
        assert_eq!(loaded.committed, Some(log_id(2, 8)));
        assert!(!loaded.is_pristine());
        // The offsets kept in memory are the file's: a truncation after reopening cuts
        // exactly there.
        with_store(&dir.0, |mut store| async move {
            store.truncate(log_id(2, 8)).await.unwrap();
        })
        .await;
        assert_eq!(
            indexes(&load(&dir.0).unwrap()),
            vec![(1, 4), (1, 5), (1, 6), (2, 7)]
        );
    }

    #[tokio::test]
    async fn a_torn_tail_is_cut_and_any_other_damage_is_refused() {
        let dir = TempDir::new();
        assert!(load(&dir.0).unwrap().is_pristine());
        with_store(&dir.0, |mut store| async move {
            store
                .blocking_append((0..5).map(|i| entry(1, i)))
                .await
                .unwrap();
        })
        .await;
        let path = dir.0.join(LOG_FILE);
        let whole = fs::read(&path).unwrap();
        let expected: Vec<(u64, u64)> = (0..5).map(|i| (1, i)).collect();

        // A record cut short, and a file extended with zeros: cut off, the rest kept.
        let mut torn = whole.clone();
        let mut frame = Vec::new();
        encode_frame(&serde_json::to_vec(&entry(1, 5)).unwrap(), &mut frame).unwrap();
        for tail in [
            frame[..frame.len() - 3].to_vec(),
            frame[..5].to_vec(),
            vec![0; 40],
        ] {
            torn.truncate(whole.len());
            torn.extend_from_slice(&tail);
            fs::write(&path, &torn).unwrap();
            assert_eq!(indexes(&load(&dir.0).unwrap()), expected);
            assert_eq!(fs::read(&path).unwrap(), whole, "the tail was cut on disk");
        }
        // A last record whose checksum fails is torn too.
        let mut bad_last = whole.clone();
        let last = bad_last.len() - 2;
        bad_last[last] ^= 0x20;
        fs::write(&path, &bad_last).unwrap();
        assert_eq!(indexes(&load(&dir.0).unwrap()), expected[..4].to_vec());

        // A damaged record with more after it is not a crash's doing: refused, whether
        // the damage is in its payload, its checksum, or its length (which could make it
        // look cut short).
        fs::write(&path, &whole).unwrap();
        let third = load(&dir.0).unwrap().cache.entries[&2].1 as usize;
        for at in [
            third,
            third + 1,
            third + 6,
            third + 9,
            third + FRAME_OVERHEAD + 3,
        ] {
            let mut damaged = whole.clone();
            damaged[at] ^= 0x20;
            fs::write(&path, &damaged).unwrap();
            assert!(
                matches!(load(&dir.0), Err(RaftStartError::Corrupt { .. })),
                "damage at byte {at} of the frame at {third}"
            );
        }
        // As is a gap in the indexes.
        let mut gap = whole.clone();
        encode_frame(&serde_json::to_vec(&entry(1, 7)).unwrap(), &mut gap).unwrap();
        fs::write(&path, &gap).unwrap();
        assert!(matches!(load(&dir.0), Err(RaftStartError::Corrupt { .. })));
    }

    #[tokio::test]
    async fn a_committed_id_the_log_cannot_back_is_clamped_or_dropped() {
        let dir = TempDir::new();
        with_store(&dir.0, |mut store| async move {
            store
                .blocking_append((0..3).map(|i| entry(1, i)))
                .await
                .unwrap();
            store.save_committed(Some(log_id(1, 9))).await.unwrap();
        })
        .await;
        assert_eq!(load(&dir.0).unwrap().committed, Some(log_id(1, 2)));
        with_store(&dir.0, |mut store| async move {
            store.save_committed(Some(log_id(3, 1))).await.unwrap();
        })
        .await;
        assert_eq!(load(&dir.0).unwrap().committed, None);
        fs::write(dir.0.join(COMMITTED_FILE), b"\x05\0\0\0junk").unwrap();
        assert_eq!(load(&dir.0).unwrap().committed, None);
    }
}
