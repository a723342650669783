//! [`SessionClient`]: this broker's session with the metadata quorum, the role of
//! ZooKeeper's client session. It opens a session (TTL = `session_timeout_ms`), keeps it
//! alive with a heartbeat every TTL/3, notices that it expired when a heartbeat is
//! answered [`StoreError::SessionExpired`](crate::metadata::StoreError::SessionExpired),
//! and then opens a new one. Everything tied to the session (the broker's registration,
//! the controller's `/controller` node) listens for [`SessionEvent`]s.
//!
//! What happens between the expiry and the new session is the [`ExpiryPolicy`]:
//! - [`ExpiryPolicy::NotifyAndWait`] (Kafka 1.1, KAFKA-5642): every listener gets
//!   [`SessionEvent::Expired`] and the client waits until each has acknowledged it (the
//!   controller acknowledges once it has resigned and dropped its queued work); only then
//!   is a new session opened.
//! - [`ExpiryPolicy::ReopenSilently`] (ZkClient before 1.1): the new session is opened at
//!   once and listeners only hear [`SessionEvent::Opened`], as ZkClient's no-op
//!   `handleStateChanged` told Kafka's controller nothing about the expiry.
//!
//! A heartbeat that gets no answer (the quorum is unreachable) is not an expiry: the
//! client keeps trying, and learns the verdict when it reaches the quorum again, as a
//! ZooKeeper client learns it on reconnection.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};

use super::{MetadataClient, QuorumError};
use crate::metadata::{Command, Reply, SessionId};

/// What the client does when its session has expired; see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpiryPolicy {
    /// Tell every listener and wait for each to acknowledge, then open a new session.
    NotifyAndWait,
    /// Open a new session at once; listeners hear only that a new session was opened.
    ReopenSilently,
}

/// The session's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionConfig {
    /// The session's TTL: it expires this long after its last heartbeat.
    pub ttl_ms: u64,
    pub on_expiry: ExpiryPolicy,
}

/// What a listener hears.
#[derive(Debug)]
pub enum SessionEvent {
    /// A session was opened; ephemeral nodes must now be created on it.
    Opened(SessionId),
    /// The session expired (only with [`ExpiryPolicy::NotifyAndWait`]): no new session
    /// is opened until `ack` is acknowledged or dropped.
    Expired { session: SessionId, ack: ExpiryAck },
}

/// The acknowledgement of an expiry; dropping it acknowledges too, so a listener that
/// goes away cannot hold the client up.
#[derive(Debug)]
pub struct ExpiryAck(Option<oneshot::Sender<()>>);

impl ExpiryAck {
    /// The listener is done with the expired session.
    pub fn done(mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

/// One listener's stream of events, in the order they happened.
pub struct SessionListener {
    rx: mpsc::UnboundedReceiver<SessionEvent>,
}

impl SessionListener {
    /// The next event; `None` once the client is gone.
    pub async fn next(&mut self) -> Option<SessionEvent> {
        self.rx.recv().await
    }
}

/// The session client. Create it, subscribe the listeners, then [`SessionClient::run`] it
/// (usually on its own task); it is cheap to clone.
#[derive(Clone)]
pub struct SessionClient {
    shared: Arc<Shared>,
}

struct Shared {
    metadata: MetadataClient,
    config: SessionConfig,
    listeners: Mutex<Vec<mpsc::UnboundedSender<SessionEvent>>>,
    current: watch::Sender<Option<SessionId>>,
}

impl SessionClient {
    pub fn new(metadata: MetadataClient, config: SessionConfig) -> SessionClient {
        SessionClient {
            shared: Arc::new(Shared {
                metadata,
                config,
                listeners: Mutex::new(Vec::new()),
                current: watch::channel(None).0,
            }),
        }
    }

    /// A new listener; it hears every event from now on.
    pub fn subscribe(&self) -> SessionListener {
        let (tx, rx) = mpsc::unbounded_channel();
        self.lock_listeners().push(tx);
        SessionListener { rx }
    }

    /// The session believed live (opened and not yet found expired), if any.
    pub fn current(&self) -> Option<SessionId> {
        *self.shared.current.borrow()
    }

    /// Follows [`SessionClient::current`].
    pub fn watch_current(&self) -> watch::Receiver<Option<SessionId>> {
        self.shared.current.subscribe()
    }

    pub fn config(&self) -> SessionConfig {
        self.shared.config
    }

    /// The heartbeat period: a third of the TTL, as ZooKeeper clients ping.
    pub fn heartbeat_interval(&self) -> Duration {
        Duration::from_millis((self.shared.config.ttl_ms / 3).max(1))
    }

    /// Keeps a session open forever: open, heartbeat until expired, handle the expiry,
    /// open again. Stops only when its task is aborted.
    pub async fn run(self) {
        loop {
            let session = self.open().await;
            self.shared.current.send_replace(Some(session));
            tracing::info!(%session, ttl_ms = self.shared.config.ttl_ms, "session opened");
            self.broadcast(|| SessionEvent::Opened(session));
            self.heartbeat_until_expired(session).await;
            self.shared.current.send_replace(None);
            tracing::warn!(%session, "session expired");
            match self.shared.config.on_expiry {
                ExpiryPolicy::NotifyAndWait => self.notify_expiry_and_wait(session).await,
                ExpiryPolicy::ReopenSilently => {}
            }
        }
    }

    /// Closes the current session (a graceful stop): its ephemeral nodes go at once
    /// instead of after the TTL. Call it after stopping [`SessionClient::run`].
    pub async fn close(&self) -> Result<(), QuorumError> {
        let Some(session) = self.shared.current.send_replace(None) else {
            return Ok(());
        };
        match self
            .shared
            .metadata
            .propose(Command::CloseSession { session })
            .await
        {
            Ok(_) => Ok(()),
            Err(error) if error.is_session_expired() => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// Opens a session, retrying until the quorum answers.
    async fn open(&self) -> SessionId {
        let command = Command::OpenSession {
            ttl_ms: self.shared.config.ttl_ms,
        };
        loop {
            match self.shared.metadata.propose(command.clone()).await {
                Ok(Reply::SessionOpened(session)) => return session,
                Ok(other) => {
                    tracing::error!(reply = ?other, "unexpected answer to OpenSession")
                }
                // An unanswered open may still be applied: that session is never
                // renewed and expires by itself.
                Err(error) => tracing::debug!(%error, "cannot open a session yet"),
            }
            tokio::time::sleep(self.heartbeat_interval()).await;
        }
    }

    /// Heartbeats every TTL/3 until a heartbeat is answered that the session is gone.
    async fn heartbeat_until_expired(&self, session: SessionId) {
        let interval_length = self.heartbeat_interval();
        // A heartbeat that cannot be answered within its period is as good as lost; the
        // next one is due anyway.
        let metadata = self.shared.metadata.clone().with_timeout(interval_length);
        let mut interval = tokio::time::interval(interval_length);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        interval.tick().await;
        loop {
            interval.tick().await;
            match metadata.propose(Command::Heartbeat { session }).await {
                Ok(_) => {}
                Err(error) if error.is_session_expired() => return,
                Err(error) => tracing::debug!(%session, %error, "heartbeat unanswered"),
            }
        }
    }

    async fn notify_expiry_and_wait(&self, session: SessionId) {
        let mut acks = Vec::new();
        self.broadcast(|| {
            let (tx, rx) = oneshot::channel();
            acks.push(rx);
            SessionEvent::Expired {
                session,
                ack: ExpiryAck(Some(tx)),
            }
        });
        for ack in acks {
            // An error means the listener dropped its acknowledgement: done as well.
            let _ = ack.await;
        }
        tracing::info!(%session, "every listener is done with the expired session");
    }

    /// Sends one event to every listener still listening, forgetting the others.
    fn broadcast(&self, mut event: impl FnMut() -> SessionEvent) {
        self.lock_listeners()
            .retain(|listener| listener.send(event()).is_ok());
    }

    fn lock_listeners(
        &self,
    ) -> std::sync::MutexGuard<'_, Vec<mpsc::UnboundedSender<SessionEvent>>> {
        self.shared
            .listeners
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quorum::local::LocalQuorum;

    /// Long enough that a stalled test process does not expire a heartbeating session.
    const TTL_MS: u64 = 1_000;

    async fn next(listener: &mut SessionListener) -> SessionEvent {
        tokio::time::timeout(Duration::from_secs(10), listener.next())
            .await
            .expect("an event within 10 s")
            .expect("the client is running")
    }

    fn live(client: &MetadataClient, session: SessionId) -> bool {
        client.read_local(|state, _| state.session(session).is_some())
    }

    #[tokio::test]
    async fn heartbeats_keep_the_session_alive_past_its_ttl() {
        let quorum = LocalQuorum::start();
        let (metadata, _link) = quorum.client();
        let client = SessionClient::new(
            metadata.clone(),
            SessionConfig {
                ttl_ms: TTL_MS,
                on_expiry: ExpiryPolicy::NotifyAndWait,
            },
        );
        let mut listener = client.subscribe();
        let task = tokio::spawn(client.clone().run());
        let SessionEvent::Opened(session) = next(&mut listener).await else {
            panic!("first event is not Opened")
        };
        assert_eq!(client.current(), Some(session));
        // Two TTLs pass: the session lives on.
        let start = tokio::time::Instant::now();
        while start.elapsed() < Duration::from_millis(2 * TTL_MS) {
            assert!(live(&metadata, session), "expired while heartbeating");
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        task.abort();
        client.close().await.expect("close");
        assert!(!live(&metadata, session));
    }

    #[tokio::test]
    async fn an_expiry_is_announced_and_no_session_opens_until_it_is_acknowledged() {
        let quorum = LocalQuorum::start();
        let (metadata, link) = quorum.client();
        let client = SessionClient::new(
            metadata.clone(),
            SessionConfig {
                ttl_ms: TTL_MS,
                on_expiry: ExpiryPolicy::NotifyAndWait,
            },
        );
        let mut listener = client.subscribe();
        let mut other = client.subscribe();
        let task = tokio::spawn(client.clone().run());
        let SessionEvent::Opened(first) = next(&mut listener).await else {
            panic!("first event is not Opened")
        };
        assert!(matches!(next(&mut other).await, SessionEvent::Opened(s) if s == first));
        link.cut();
        let mut gone = client.watch_current();
        tokio::time::timeout(Duration::from_secs(10), async {
            while live(&metadata, first) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the quorum expires the cut session");
        link.heal();
        tokio::time::timeout(Duration::from_secs(10), gone.wait_for(Option::is_none))
            .await
            .expect("the client notices the expiry")
            .expect("client alive");
        let SessionEvent::Expired { session, ack } = next(&mut listener).await else {
            panic!("expected Expired")
        };
        assert_eq!(session, first);
        // The other listener drops its acknowledgement, which counts as done; ours is
        // still outstanding, so no new session may be opened.
        drop(next(&mut other).await);
        let sessions_before = metadata.read_local(|state, _| state.sessions().count());
        let deadline = tokio::time::Instant::now() + Duration::from_millis(TTL_MS);
        while tokio::time::Instant::now() < deadline {
            assert_eq!(client.current(), None, "opened before the acknowledgement");
            assert_eq!(
                metadata.read_local(|state, _| state.sessions().count()),
                sessions_before
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        ack.done();
        let SessionEvent::Opened(second) = next(&mut listener).await else {
            panic!("expected Opened")
        };
        assert_ne!(second, first);
        assert_eq!(client.current(), Some(second));
        task.abort();
    }

    #[tokio::test]
    async fn silent_reopening_announces_only_the_new_session() {
        let quorum = LocalQuorum::start();
        let (metadata, link) = quorum.client();
        let client = SessionClient::new(
            metadata.clone(),
            SessionConfig {
                ttl_ms: TTL_MS,
                on_expiry: ExpiryPolicy::ReopenSilently,
            },
        );
        let mut listener = client.subscribe();
        let task = tokio::spawn(client.clone().run());
        let SessionEvent::Opened(first) = next(&mut listener).await else {
            panic!("first event is not Opened")
        };
        link.cut();
        tokio::time::timeout(Duration::from_secs(10), async {
            while live(&metadata, first) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the quorum expires the cut session");
        link.heal();
        match next(&mut listener).await {
            SessionEvent::Opened(second) => assert_ne!(second, first),
            SessionEvent::Expired { .. } => panic!("the expiry was announced"),
        }
        task.abort();
    }
}
