//! Session expiry, run on the node that leads the metadata quorum: on taking the lead it
//! renews every session ([`Command::RenewAllSessions`]) and starts a fresh
//! [`SessionTracker`]; then, from its own monotonic clock, it proposes an
//! [`Command::ExpireSession`] for every session that outlived its TTL. It stops when the
//! node loses the lead; the next leader starts over.

use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::{MetadataClient, QuorumError};
use crate::metadata::{Command, SessionTracker, StoreError};

/// How often the leader looks for expired sessions: the granularity of session expiry.
pub const CHECK_INTERVAL: Duration = Duration::from_millis(50);

/// Leadership as the backend reports it: `Some(term)` while this node leads in `term`.
pub type Leadership = watch::Receiver<Option<u64>>;

/// Runs until `leadership`'s sender is dropped.
pub async fn run(client: MetadataClient, mut leadership: Leadership) {
    let clock = Instant::now();
    let now_ms = move || u64::try_from(clock.elapsed().as_millis()).unwrap_or(u64::MAX);
    loop {
        let term = match leadership.wait_for(Option::is_some).await {
            Ok(term) => *term,
            Err(_) => return,
        };
        tokio::select! {
            _ = lead(&client, now_ms) => {}
            changed = leadership.wait_for(|t| *t != term) => {
                if changed.is_err() {
                    return;
                }
            }
        }
    }
}

/// Expires sessions until cancelled (by a change of leadership).
async fn lead(client: &MetadataClient, now_ms: impl Fn() -> u64) {
    // A deposed leader may have proposed expiries from its own clock; renewing every
    // session first makes them stale, and gives every session a full TTL under us.
    loop {
        match client.propose(Command::RenewAllSessions).await {
            Ok(_) => break,
            Err(error) => {
                tracing::debug!(%error, "cannot renew sessions yet");
                tokio::time::sleep(CHECK_INTERVAL).await;
            }
        }
    }
    let mut tracker = client.read_local(|state, _| SessionTracker::become_leader(state, now_ms()));
    let mut interval = tokio::time::interval(CHECK_INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let now = now_ms();
        client.read_local(|state, _| tracker.observe(state, now));
        for command in tracker.expiry_commands(now) {
            let Command::ExpireSession { session, .. } = &command else {
                continue;
            };
            let session = *session;
            match client.propose(command).await {
                Ok(_) => tracing::info!(%session, "session expired"),
                // Renewed since, or already gone: nothing to do.
                Err(QuorumError::Store(
                    StoreError::StaleExpiry { .. } | StoreError::SessionExpired { .. },
                )) => {}
                Err(error) => tracing::warn!(%session, %error, "cannot expire session"),
            }
        }
    }
}
