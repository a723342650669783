//! [`SessionTracker`]: which sessions the Raft leader should expire. Leader-local, never
//! replicated: deadlines are instants of the leader's own monotonic clock, which no other
//! node shares.

use std::collections::BTreeMap;

use super::command::Command;
use super::store::MetadataState;
use super::{LogIndex, SessionId};

#[derive(Debug, Clone, PartialEq, Eq)]
struct Tracked {
    ttl_ms: u64,
    /// The renewal this deadline counts from; a different index in the state means the
    /// session was renewed since.
    renewed_index: LogIndex,
    deadline_ms: u64,
}

/// The leader's view of session deadlines, driven by `now_ms` from its monotonic clock.
///
/// A deadline is `now + ttl` taken when the leader *applies* a renewal (not when the
/// client sent it), so a session never expires earlier than its TTL allows; it can only
/// live somewhat longer. A new leader starts every session afresh ([`Self::become_leader`]),
/// because it cannot know how long ago the old leader last saw each heartbeat: this is
/// the "fresh TTL for every session after a leader change".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionTracker {
    sessions: BTreeMap<SessionId, Tracked>,
}

impl SessionTracker {
    /// The tracker of a node that has just become Raft leader over `state`: every session
    /// gets a full TTL from `now_ms`. The leader should also propose
    /// [`Command::RenewAllSessions`], so that an expiry a deposed leader decided is refused.
    pub fn become_leader(state: &MetadataState, now_ms: u64) -> SessionTracker {
        let sessions = state
            .sessions()
            .map(|(id, s)| {
                (
                    id,
                    Tracked {
                        ttl_ms: s.ttl_ms,
                        renewed_index: s.renewed_index,
                        deadline_ms: now_ms.saturating_add(s.ttl_ms),
                    },
                )
            })
            .collect();
        SessionTracker { sessions }
    }

    /// Brings the tracker up to date after the leader applied entries: a session opened or
    /// renewed since the last call gets a full TTL from `now_ms`; a session that is gone
    /// is forgotten; the others keep their deadlines.
    pub fn observe(&mut self, state: &MetadataState, now_ms: u64) {
        self.sessions.retain(|id, _| state.session(*id).is_some());
        for (id, session) in state.sessions() {
            let renewed = match self.sessions.get(&id) {
                Some(tracked) => tracked.renewed_index != session.renewed_index,
                None => true,
            };
            if renewed {
                self.sessions.insert(
                    id,
                    Tracked {
                        ttl_ms: session.ttl_ms,
                        renewed_index: session.renewed_index,
                        deadline_ms: now_ms.saturating_add(session.ttl_ms),
                    },
                );
            }
        }
    }

    /// Sessions whose deadline has passed at `now_ms` (a session lives exactly its TTL
    /// after its last renewal), in id order.
    pub fn expired(&self, now_ms: u64) -> Vec<SessionId> {
        self.sessions
            .iter()
            .filter(|(_, t)| now_ms >= t.deadline_ms)
            .map(|(id, _)| *id)
            .collect()
    }

    /// The [`Command::ExpireSession`]s to propose at `now_ms`, each naming the renewal its
    /// deadline counted from. Proposing one twice is harmless: the second is refused with
    /// `SessionExpired`.
    pub fn expiry_commands(&self, now_ms: u64) -> Vec<Command> {
        self.sessions
            .iter()
            .filter(|(_, t)| now_ms >= t.deadline_ms)
            .map(|(id, t)| Command::ExpireSession {
                session: *id,
                renewed_index: t.renewed_index,
            })
            .collect()
    }

    /// The session's deadline on the leader's clock, if tracked.
    pub fn deadline(&self, session: SessionId) -> Option<u64> {
        self.sessions.get(&session).map(|t| t.deadline_ms)
    }

    /// The earliest deadline, for the leader's timer.
    pub fn next_deadline(&self) -> Option<u64> {
        self.sessions.values().map(|t| t.deadline_ms).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::command::Reply;

    fn open(state: &mut MetadataState, index: LogIndex, ttl_ms: u64) -> SessionId {
        match state.apply(index, Command::OpenSession { ttl_ms }).outcome {
            Ok(Reply::SessionOpened(id)) => id,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn observe_times_new_and_renewed_sessions_and_forgets_ended_ones() {
        let mut state = MetadataState::new();
        let a = open(&mut state, 1, 100);
        let mut tracker = SessionTracker::become_leader(&state, 0);
        let b = open(&mut state, 2, 50);
        tracker.observe(&state, 10);
        assert_eq!(
            tracker.deadline(a),
            Some(100),
            "unchanged session keeps its deadline"
        );
        assert_eq!(
            tracker.deadline(b),
            Some(60),
            "a new session gets a full TTL"
        );
        assert_eq!(tracker.next_deadline(), Some(60));

        let _ = state.apply(3, Command::Heartbeat { session: a });
        tracker.observe(&state, 90);
        assert_eq!(tracker.deadline(a), Some(190));
        assert_eq!(tracker.expired(60), vec![b]);
        assert_eq!(
            tracker.expiry_commands(60),
            vec![Command::ExpireSession {
                session: b,
                renewed_index: 2
            }]
        );

        let _ = state.apply(4, Command::CloseSession { session: b });
        tracker.observe(&state, 91);
        assert_eq!(tracker.deadline(b), None);
        assert_eq!(tracker.expired(u64::MAX), vec![a]);
    }

    #[test]
    fn a_huge_ttl_saturates_instead_of_wrapping() {
        let mut state = MetadataState::new();
        let a = open(&mut state, 1, u64::MAX);
        let tracker = SessionTracker::become_leader(&state, 5);
        assert_eq!(tracker.deadline(a), Some(u64::MAX));
        assert_eq!(tracker.expired(u64::MAX - 1), vec![]);
    }
}
