//! Broker registration: on every new session, the ephemeral `/brokers/ids/N` node that
//! tells the controller this broker is alive (Kafka's `KafkaHealthcheck`). It goes with
//! the session, which is how the controller learns of the broker's death.
//!
//! A `NodeExists` is a race to sort out, not success: the node may be ours (an earlier,
//! unanswered attempt on this session applied), or a previous incarnation's whose session
//! has not expired yet (a broker restarted within the TTL), which must be waited out, or
//! the controller would take this broker for dead when that session expires.

use std::time::Duration;

use crate::config::NodeConfig;
use crate::metadata::layout::{self, BrokerRegistration, BASE_PATHS};
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

/// Registers this broker on every session the client opens; runs until aborted.
pub async fn run(
    config: NodeConfig,
    metadata: MetadataClient,
    session: SessionClient,
    mut listener: SessionListener,
) {
    let registration = BrokerRegistration {
        id: config.broker_id,
        replication: config.listeners.replication,
        metadata: config.listeners.metadata,
    };
    while let Some(event) = listener.next().await {
        match event {
            SessionEvent::Opened(id) => register(&metadata, &session, &registration, id).await,
            SessionEvent::Expired { ack, .. } => ack.done(),
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
