//! [`AppliedState`]: the metadata state as applied on this node, shared between the
//! backend that applies entries and the readers and long-polls that wait for them.

use std::sync::RwLock;
use std::time::Duration;

use tokio::sync::watch;

use crate::metadata::{Command, CommandResult, LogIndex, MetadataState, WatchTarget};

/// The applied [`MetadataState`] and the index of the last entry applied to it.
pub struct AppliedState {
    state: RwLock<MetadataState>,
    /// The last applied index; every apply or install publishes it, waking waiters.
    index: watch::Sender<LogIndex>,
}

impl Default for AppliedState {
    fn default() -> Self {
        AppliedState::new(MetadataState::new(), 0)
    }
}

impl AppliedState {
    pub fn new(state: MetadataState, index: LogIndex) -> AppliedState {
        AppliedState {
            state: RwLock::new(state),
            index: watch::channel(index).0,
        }
    }

    /// Applies the entry at `index`. Entries must come in log order; an index at or below
    /// the applied one is a replay and is not applied again.
    pub fn apply(&self, index: LogIndex, command: Command) -> Option<CommandResult> {
        let result = {
            let mut state = self
                .state
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if index <= *self.index.borrow() {
                return None;
            }
            let result = state.apply(index, command);
            self.index.send_replace(index);
            result
        };
        Some(result)
    }

    /// Records that the entry at `index` carried no command (a Raft blank or membership
    /// entry): readers waiting for it may go on.
    pub fn skip(&self, index: LogIndex) {
        let _guard = self
            .state
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if index > *self.index.borrow() {
            self.index.send_replace(index);
        }
    }

    /// Replaces the whole state (a snapshot installed) as of `index`.
    pub fn install(&self, state: MetadataState, index: LogIndex) {
        let mut current = self
            .state
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *current = state;
        self.index.send_replace(index);
    }

    /// Runs `f` on the state and the index it reflects.
    pub fn read<T>(&self, f: impl FnOnce(&MetadataState, LogIndex) -> T) -> T {
        let state = self
            .state
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&state, *self.index.borrow())
    }

    pub fn applied_index(&self) -> LogIndex {
        *self.index.borrow()
    }

    /// Resolves once the entry at `index` has been applied.
    pub async fn wait_applied(&self, index: LogIndex) {
        let mut rx = self.index.subscribe();
        // The sender lives as long as self, so this cannot fail while we borrow self.
        let _ = rx.wait_for(|applied| *applied >= index).await;
    }

    /// Resolves with the index of a change to `target` after `seen`, or `None` after
    /// `wait` without one.
    pub async fn wait_change(
        &self,
        target: &WatchTarget,
        seen: LogIndex,
        wait: Duration,
    ) -> Option<LogIndex> {
        let mut rx = self.index.subscribe();
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            rx.borrow_and_update();
            let changed = self.read(|state, _| state.last_change(target));
            if changed > seen {
                return Some(changed);
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => continue,
                Ok(Err(_)) | Err(_) => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::Op;

    fn create(path: &str) -> Command {
        Command::Op(Op::Create {
            path: path.into(),
            data: Vec::new(),
            ephemeral_session: None,
        })
    }

    #[tokio::test]
    async fn a_watch_wakes_on_a_change_and_not_on_a_replay() {
        let applied = std::sync::Arc::new(AppliedState::default());
        assert!(applied.apply(1, create("/a")).is_some());
        assert!(applied.apply(1, create("/a")).is_none(), "replay ignored");
        let target = WatchTarget::Subtree("/a".into());
        assert_eq!(
            applied
                .wait_change(&target, 1, Duration::from_millis(20))
                .await,
            None
        );
        let waiter = {
            let applied = applied.clone();
            let target = target.clone();
            tokio::spawn(async move {
                applied
                    .wait_change(&target, 1, Duration::from_secs(10))
                    .await
            })
        };
        applied.skip(2);
        applied.apply(3, create("/a/b"));
        assert_eq!(waiter.await.unwrap(), Some(3));
        applied.wait_applied(3).await;
        assert_eq!(applied.applied_index(), 3);
    }
}
