//! The Raft state machine ([`StateMachine`], openraft's `RaftStateMachine`): applies
//! committed entries into the node's shared [`AppliedState`] (commands through
//! `apply`, blank and membership entries through `skip`), and keeps the snapshot, on
//! disk and in memory.
//!
//! The applied state itself is not persisted: a restarted node loads its snapshot
//! ([`load_snapshot`]) and openraft re-applies the log after it. Snapshots are built from
//! a copy taken between two applies, written atomically, and replace the current one
//! only if they are newer, so a slow build can never overwrite a snapshot installed from
//! the leader meanwhile.

use std::fs;
use std::io::{self, Cursor};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use openraft::storage::RaftStateMachine;
use openraft::{AnyError, EntryPayload, OptionalSend, RaftSnapshotBuilder, StorageIOError};

use super::disk::{decode_frame, encode_frame, Disk, SNAPSHOT_FILE};
use super::types::{
    Entry, LogId, Snapshot, SnapshotMeta, StorageError, StoredMembership, TypeConfig,
};
use super::RaftStartError;
use crate::metadata::{CommandResult, MetadataState};
use crate::quorum::applied::AppliedState;

/// A snapshot as this node holds it.
#[derive(Clone)]
pub(super) struct StoredSnapshot {
    pub(super) meta: SnapshotMeta,
    /// [`MetadataState::to_snapshot`] bytes.
    pub(super) data: Vec<u8>,
}

/// Reads `dir`'s snapshot, checking that it decodes into a consistent state.
pub(super) fn load_snapshot(
    dir: &Path,
) -> Result<Option<(StoredSnapshot, MetadataState)>, RaftStartError> {
    let path = dir.join(SNAPSHOT_FILE);
    let corrupt = |reason: String| RaftStartError::Corrupt {
        path: path.clone(),
        reason,
    };
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(RaftStartError::Io {
                path: path.clone(),
                source,
            })
        }
    };
    let (meta, used) = decode_frame(&bytes).map_err(|e| corrupt(format!("metadata: {e}")))?;
    let meta: SnapshotMeta =
        serde_json::from_slice(meta).map_err(|e| corrupt(format!("metadata: {e}")))?;
    let (data, _) = decode_frame(&bytes[used..]).map_err(|e| corrupt(format!("state: {e}")))?;
    let state = MetadataState::from_snapshot(data).map_err(|e| corrupt(format!("state: {e}")))?;
    Ok(Some((
        StoredSnapshot {
            meta,
            data: data.to_vec(),
        },
        state,
    )))
}

fn snapshot_file(snapshot: &StoredSnapshot) -> io::Result<Vec<u8>> {
    let mut contents = Vec::with_capacity(snapshot.data.len() + 256);
    encode_frame(&serde_json::to_vec(&snapshot.meta)?, &mut contents)?;
    encode_frame(&snapshot.data, &mut contents)?;
    Ok(contents)
}

fn write_snapshot_error(
    meta: &SnapshotMeta,
    error: &(impl std::error::Error + 'static),
) -> StorageError {
    StorageIOError::write_snapshot(Some(meta.signature()), AnyError::new(error)).into()
}

/// The current snapshot, shared by the state machine and its builders.
pub(super) struct Snapshots {
    current: tokio::sync::Mutex<Option<StoredSnapshot>>,
    disk: Disk,
    /// Snapshots installed from a leader since this node started.
    installed: Arc<AtomicU64>,
}

impl Snapshots {
    pub(super) fn new(
        current: Option<StoredSnapshot>,
        disk: Disk,
        installed: Arc<AtomicU64>,
    ) -> Snapshots {
        Snapshots {
            current: tokio::sync::Mutex::new(current),
            disk,
            installed,
        }
    }

    /// Makes `snapshot` durable and current, unless the current one is as new (`force`
    /// for one installed from the leader, which openraft has already judged newer).
    async fn store(&self, snapshot: StoredSnapshot, force: bool) -> Result<(), StorageError> {
        let mut current = self.current.lock().await;
        if !force
            && current
                .as_ref()
                .is_some_and(|c| c.meta.last_log_id >= snapshot.meta.last_log_id)
        {
            return Ok(());
        }
        let contents =
            snapshot_file(&snapshot).map_err(|e| write_snapshot_error(&snapshot.meta, &e))?;
        self.disk
            .save_snapshot(contents)
            .await
            .map_err(|e| write_snapshot_error(&snapshot.meta, &e))?;
        tracing::info!(snapshot = %snapshot.meta, bytes = snapshot.data.len(), "metadata snapshot stored");
        *current = Some(snapshot);
        Ok(())
    }
}

/// Applies entries into the node's [`AppliedState`].
pub(super) struct StateMachine {
    applied: Arc<AppliedState>,
    last_applied: Option<LogId>,
    membership: StoredMembership,
    snapshots: Arc<Snapshots>,
}

impl StateMachine {
    /// A state machine whose `applied` state was loaded from `snapshot` (or is empty).
    pub(super) fn new(
        applied: Arc<AppliedState>,
        snapshot: Option<&StoredSnapshot>,
        snapshots: Arc<Snapshots>,
    ) -> StateMachine {
        StateMachine {
            applied,
            last_applied: snapshot.and_then(|s| s.meta.last_log_id),
            membership: snapshot
                .map(|s| s.meta.last_membership.clone())
                .unwrap_or_default(),
            snapshots,
        }
    }
}

/// Builds one snapshot from the state as it was when the builder was made.
pub(super) struct SnapshotBuilder {
    data: Result<Vec<u8>, String>,
    last_applied: Option<LogId>,
    membership: StoredMembership,
    snapshots: Arc<Snapshots>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot, StorageError> {
        let data = std::mem::replace(&mut self.data, Err("snapshot already built".into()))
            .map_err(|reason| StorageIOError::read_state_machine(AnyError::error(reason)))?;
        // Unique across restarts and leaders: a receiver tells transfers apart by it.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let meta = SnapshotMeta {
            last_log_id: self.last_applied,
            last_membership: self.membership.clone(),
            snapshot_id: format!(
                "{}-{nanos}",
                self.last_applied
                    .map_or_else(|| "none".to_string(), |l| l.to_string())
            ),
        };
        let snapshot = StoredSnapshot { meta, data };
        self.snapshots.store(snapshot.clone(), false).await?;
        Ok(Snapshot {
            meta: snapshot.meta,
            snapshot: Box::new(Cursor::new(snapshot.data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Option<CommandResult>>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut results = Vec::new();
        for entry in entries {
            let index = entry.log_id.index;
            self.last_applied = Some(entry.log_id);
            results.push(match entry.payload {
                EntryPayload::Normal(command) => self.applied.apply(index, command),
                EntryPayload::Blank => {
                    self.applied.skip(index);
                    None
                }
                EntryPayload::Membership(membership) => {
                    self.membership = StoredMembership::new(Some(entry.log_id), membership);
                    self.applied.skip(index);
                    None
                }
            });
        }
        Ok(results)
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        SnapshotBuilder {
            data: self
                .applied
                .read(|state, _| state.to_snapshot())
                .map_err(|e| e.to_string()),
            last_applied: self.last_applied,
            membership: self.membership.clone(),
            snapshots: self.snapshots.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        let state = MetadataState::from_snapshot(&data).map_err(|e| {
            StorageError::from(StorageIOError::read_snapshot(
                Some(meta.signature()),
                AnyError::new(&e),
            ))
        })?;
        self.snapshots
            .store(
                StoredSnapshot {
                    meta: meta.clone(),
                    data,
                },
                true,
            )
            .await?;
        let index = meta.last_log_id.map_or(0, |l| l.index);
        self.applied.install(state, index);
        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        self.snapshots.installed.fetch_add(1, Ordering::SeqCst);
        tracing::info!(snapshot = %meta, "installed a metadata snapshot from the leader");
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, StorageError> {
        Ok(self
            .snapshots
            .current
            .lock()
            .await
            .as_ref()
            .map(|s| Snapshot {
                meta: s.meta.clone(),
                snapshot: Box::new(Cursor::new(s.data.clone())),
            }))
    }
}
