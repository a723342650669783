//! Broker registration: on every new session, the ephemeral `/brokers/ids/N` node that
//! tells the controller this broker is alive (Kafka's `KafkaHealthcheck`). It goes with
//! the session, which is how the controller learns of the broker's death.
//!
//! A `NodeExists` is a race to sort out, not success: the node may be ours (an earlier,
//! unanswered attempt on this session applied), or a previous incarnation's whose session
//! has not expired yet (a broker restarted within the TTL), which must be waited out, or
//! the controller would take this broker for dead when that session expires.

use std::time::Duration;

use tokio::sync::watch;

use crate::config::NodeConfig;
use crate::metadata::layout::{self, BrokerRegistration, LogFailure, BASE_PATHS};
use crate::metadata::{Command, Op, SessionId, StoreError, WatchTarget};
use crate::quorum::session::{SessionClient, SessionEvent, SessionListener};
use crate::quorum::{MetadataClient, QuorumError};

use super::write::QUORUM_RETRY_BACKOFF;

/// Creates the persistent base paths that do not exist yet (any broker may be first).
pub async fn ensure_base_paths(metadata: &MetadataClient) -> Result<(), QuorumError> {
    for path in BASE_PATHS {
        if metadata.read_local(|state, _| state.exists(path)) {
            continue;
        }
        let create = Command::Op(Op::Create {
            path: path.to_string(),
            data: Vec::new(),
            ephemeral_session: None,
        });
        match metadata.propose(create).await {
            Ok(_) | Err(QuorumError::Store(StoreError::NodeExists { .. })) => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

/// Registers this broker on every session the client opens, and keeps the
/// registration's log failures up to date; runs until aborted.
pub async fn run(
    config: NodeConfig,
    metadata: MetadataClient,
    session: SessionClient,
    mut listener: SessionListener,
    mut log_failures: watch::Receiver<Vec<LogFailure>>,
) {
    let mut registration = BrokerRegistration {
        id: config.broker_id,
        replication: config.listeners.replication,
        metadata: config.listeners.metadata,
        log_failures: log_failures.borrow_and_update().clone(),
    };
    let mut registered: Option<SessionId> = None;
    let mut failures_open = true;
    loop {
        tokio::select! {
            event = listener.next() => match event {
                Some(SessionEvent::Opened(id)) => {
                    registration.log_failures = log_failures.borrow_and_update().clone();
                    register(&metadata, &session, &registration, id).await;
                    registered = Some(id);
                }
                Some(SessionEvent::Expired { ack, .. }) => {
                    registered = None;
                    ack.done();
                }
                None => return,
            },
            changed = log_failures.changed(), if failures_open => {
                if changed.is_err() {
                    // The partitions are gone (the broker is stopping): nothing more to say.
                    failures_open = false;
                    continue;
                }
                registration.log_failures = log_failures.borrow_and_update().clone();
                if let Some(id) = registered {
                    update(&metadata, &session, &registration, id).await;
                }
            }
        }
    }
}

/// Rewrites the registration on `session` with its new log failures, retrying until
/// written or the session is no longer current (a new session registers it whole).
async fn update(
    metadata: &MetadataClient,
    client: &SessionClient,
    registration: &BrokerRegistration,
    session: SessionId,
) {
    let path = layout::broker_path(registration.id);
    let broker = registration.id;
    while client.current() == Some(session) {
        let owner =
            metadata.read_local(|state, _| state.stat(&path).and_then(|stat| stat.ephemeral_owner));
        if owner != Some(session) {
            // Not (yet) ours on this session: the next registration carries the failures.
            return;
        }
        let set = Command::Op(Op::Set {
            path: path.clone(),
            data: layout::encode(registration),
            expected_version: None,
        });
        match metadata.propose(set).await {
            Ok(_) => {
                tracing::info!(broker, failures = ?registration.log_failures,
                    "log failures published in the registration");
                return;
            }
            Err(error) if error.is_session_expired() => return,
            Err(error) => {
                tracing::debug!(broker, %error, "cannot publish the log failures yet");
                tokio::time::sleep(QUORUM_RETRY_BACKOFF).await;
            }
        }
    }
}

/// Creates the registration on `session`, retrying until it exists on it or the
/// session is no longer current.
async fn register(
    metadata: &MetadataClient,
    client: &SessionClient,
    registration: &BrokerRegistration,
    session: SessionId,
) {
    let path = layout::broker_path(registration.id);
    let broker = registration.id;
    let wait_out = Duration::from_millis(client.config().ttl_ms);
    while client.current() == Some(session) {
        if let Err(error) = ensure_base_paths(metadata).await {
            tracing::debug!(broker, %error, "cannot create the base paths yet");
            tokio::time::sleep(QUORUM_RETRY_BACKOFF).await;
            continue;
        }
        let create = Command::Op(Op::Create {
            path: path.clone(),
            data: layout::encode(registration),
            ephemeral_session: Some(session),
        });
        match metadata.propose(create).await {
            Ok(_) => {
                tracing::info!(broker, %session, "broker registered");
                return;
            }
            Err(QuorumError::Store(StoreError::NodeExists { .. })) => {
                let (owner, seen) = metadata.read_local(|state, index| {
                    (
                        state.stat(&path).and_then(|stat| stat.ephemeral_owner),
                        index,
                    )
                });
                if owner == Some(session) {
                    tracing::info!(broker, %session, "broker registered (by an earlier attempt)");
                    return;
                }
                tracing::info!(broker, %session, previous = ?owner,
                    "a previous registration is still there; waiting for its session to end");
                metadata
                    .watch(&WatchTarget::Node(path.clone()), seen, wait_out)
                    .await;
            }
            Err(error) if error.is_session_expired() => return,
            Err(error) => {
                tracing::debug!(broker, %error, "cannot register yet");
                tokio::time::sleep(QUORUM_RETRY_BACKOFF).await;
            }
        }
    }
}
