//! The leader-epoch cache: for each leader epoch the log has seen, the offset of its
//! first record (or, for a leader's own epoch, the LEO when it became leader).
//!
//! Pure data; the replica persists it through `ReplicaLog::write_epoch_checkpoint` after
//! every change.

use crate::log::EpochEntry;
use crate::record::{LeaderEpoch, Offset};

/// The answer to "where does epoch E end in this log?" (OffsetsForLeaderEpoch, §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EpochEndOffset {
    /// The largest epoch held that is `<=` the requested one.
    pub leader_epoch: LeaderEpoch,
    /// One past the last offset of that epoch: the start of the next epoch, or the LEO.
    pub end_offset: Offset,
}

/// Entries in strictly increasing epoch and non-decreasing start offset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EpochCache {
    entries: Vec<EpochEntry>,
}

impl EpochCache {
    /// Rebuilds the cache from a checkpoint, dropping entries that would break the order
    /// (a checkpoint is a file: trust it no further than its shape) and entries at or past
    /// `log_end_offset`, which a crash may have cut off the log.
    pub fn from_checkpoint(entries: &[EpochEntry], log_end_offset: Offset) -> EpochCache {
        let mut cache = EpochCache::default();
        for entry in entries {
            cache.assign(entry.epoch, entry.start_offset);
        }
        cache.truncate_from_end(log_end_offset);
        cache
    }

    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    pub fn latest_epoch(&self) -> Option<LeaderEpoch> {
        self.entries.last().map(|e| e.epoch)
    }

    /// Records that `epoch` starts at `start_offset`. Returns whether the cache changed.
    /// An epoch older than the latest is ignored (a record from a deposed leader cannot
    /// follow a newer one in a consistent log); a newer epoch starting before the latest
    /// entry's start replaces the entries it overlaps.
    pub fn assign(&mut self, epoch: LeaderEpoch, start_offset: Offset) -> bool {
        if let Some(last) = self.entries.last() {
            if epoch < last.epoch || (epoch == last.epoch && start_offset >= last.start_offset) {
                return false;
            }
        }
        self.entries
            .retain(|e| e.epoch < epoch && e.start_offset < start_offset);
        self.entries.push(EpochEntry {
            epoch,
            start_offset,
        });
        true
    }

    /// Forgets every epoch that starts at or after `offset` (the log was truncated there).
    pub fn truncate_from_end(&mut self, offset: Offset) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| e.start_offset < offset);
        self.entries.len() != before
    }

    pub fn clear(&mut self) -> bool {
        let changed = !self.entries.is_empty();
        self.entries.clear();
        changed
    }

    /// Kafka's `LeaderEpochFileCache.endOffsetFor`: the latest epoch ends at the LEO; an
    /// older epoch ends where the first larger epoch starts, paired with the largest epoch
    /// `<=` the requested one. `None` (UNDEFINED) when the cache is empty or the request is
    /// newer than anything held.
    pub fn end_offset_for(
        &self,
        requested: LeaderEpoch,
        log_end_offset: Offset,
    ) -> Option<EpochEndOffset> {
        let latest = self.latest_epoch()?;
        if requested == latest {
            return Some(EpochEndOffset {
                leader_epoch: latest,
                end_offset: log_end_offset,
            });
        }
        let next = self.entries.iter().find(|e| e.epoch > requested)?;
        let previous = self.entries.iter().rev().find(|e| e.epoch <= requested);
        Some(EpochEndOffset {
            leader_epoch: previous.map_or(requested, |e| e.epoch),
            end_offset: next.start_offset,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(epoch: LeaderEpoch, start_offset: Offset) -> EpochEntry {
        EpochEntry {
            epoch,
            start_offset,
        }
    }

    #[test]
    fn assign_keeps_order_and_ignores_stale_epochs() {
        let mut cache = EpochCache::default();
        assert!(cache.assign(1, 0));
        assert!(cache.assign(3, 5));
        assert!(
            !cache.assign(2, 7),
            "an older epoch never follows a newer one"
        );
        assert!(!cache.assign(3, 6), "an epoch's start only moves back");
        assert!(
            cache.assign(4, 5),
            "a newer epoch at the same offset replaces the empty one"
        );
        assert_eq!(cache.entries(), &[entry(1, 0), entry(4, 5)]);
    }

    #[test]
    fn end_offsets_follow_kafka() {
        let mut cache = EpochCache::default();
        cache.assign(1, 0);
        cache.assign(3, 10);
        cache.assign(5, 20);
        let answer = |epoch| cache.end_offset_for(epoch, 25);
        assert_eq!(
            answer(5),
            Some(EpochEndOffset {
                leader_epoch: 5,
                end_offset: 25
            })
        );
        assert_eq!(
            answer(3),
            Some(EpochEndOffset {
                leader_epoch: 3,
                end_offset: 20
            })
        );
        // A missing epoch ends where the next held epoch starts, paired with the largest
        // epoch below it: the follower then knows where the logs can still agree.
        assert_eq!(
            answer(4),
            Some(EpochEndOffset {
                leader_epoch: 3,
                end_offset: 20
            })
        );
        assert_eq!(
            answer(2),
            Some(EpochEndOffset {
                leader_epoch: 1,
                end_offset: 10
            })
        );
        assert_eq!(
            answer(0),
            Some(EpochEndOffset {
                leader_epoch: 0,
                end_offset: 0
            })
        );
        assert_eq!(answer(6), None, "newer than anything held is UNDEFINED");
        assert_eq!(EpochCache::default().end_offset_for(1, 0), None);
    }

    #[test]
    fn truncation_and_checkpoint_reload_drop_entries_past_the_log() {
        let mut cache = EpochCache::default();
        cache.assign(1, 0);
        cache.assign(2, 10);
        cache.assign(4, 15);
        assert!(cache.truncate_from_end(15));
        assert_eq!(cache.latest_epoch(), Some(2));
        let reloaded = EpochCache::from_checkpoint(&[entry(1, 0), entry(2, 10), entry(4, 15)], 12);
        assert_eq!(reloaded.entries(), &[entry(1, 0), entry(2, 10)]);
        let garbled = EpochCache::from_checkpoint(&[entry(3, 0), entry(2, 10)], 12);
        assert_eq!(garbled.entries(), &[entry(3, 0)]);
    }
}
