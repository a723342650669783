//! The broker's control plane above the metadata quorum (DESIGN.md §2 "Controller",
//! kafka-replication.md §2): the session, the broker's registration, and the controller
//! that every broker runs and one broker at a time activates.
//!
//! [`ControlPlane::start`] spawns, on the current tokio runtime:
//! - the [`SessionClient`] (quorum/session.rs), keeping this broker's session alive;
//! - [`registration`], creating `/brokers/ids/N` on every new session;
//! - the controller's session listener, turning session events into controller events;
//! - watchers on `/controller`, `/brokers/ids` and `/partitions` (long polls), and the
//!   auto-rebalance ticker when enabled, each feeding the event queue;
//! - the event loop (`event_loop.rs`), the controller itself, one event at a time.
//!
//! Modules, one job each: [`decisions`] (pure: who leads, what the ISR becomes),
//! [`admin`] (admin requests, replies and errors as data), `events` (the queue),
//! `event_loop` (election, failover, broker changes, admin operations), [`write`] (how
//! writes are fenced), [`sender`] (LeaderAndIsr delivery), [`registration`],
//! [`describe`] (the `GET /v1/metadata` view) and [`http`] (the admin HTTP handlers).
//!
//! The KAFKA-3083 switch is read here and in `event_loop`, nowhere else: it makes the
//! session client reopen sessions silently (so a deposed controller's queued work runs
//! on the new session) and the controller's writes fenced only by the partition state's
//! version (see [`write`]). With it off, the controller resigns and drops its queue
//! before a new session is opened (KAFKA-5642) and every write checks
//! `/controller_epoch` (KAFKA-6082).

pub mod admin;
pub mod decisions;
pub mod describe;
mod event_loop;
mod events;
pub mod http;
pub mod registration;
pub mod sender;
pub mod write;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::config::NodeConfig;
use crate::metadata::layout::{self, LogFailure, BROKER_IDS, CONTROLLER, PARTITIONS};
use crate::metadata::{SessionId, WatchTarget};
use crate::quorum::session::{
    ExpiryPolicy, SessionClient, SessionConfig, SessionEvent, SessionListener,
};
use crate::quorum::MetadataClient;
use crate::replica::metadata::ControllerEpoch;
use crate::replica::BrokerId;

pub use admin::{AdminError, AdminReply, AdminRequest};
use events::{Event, EventQueue};

/// How long a graceful shutdown waits for the event in progress.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// How long one watcher long poll lasts before it is renewed; a poll that ends without a
/// change queues its event anyway, so the controller re-syncs at least this often.
const WATCH_POLL: Duration = Duration::from_secs(2);

/// A snapshot of this broker's control plane, for tests and debugging
/// (`GET /v1/debug/controller` answers with it).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ControlPlaneStatus {
    /// The controller epoch while this broker is the (or believes itself the) controller.
    pub controller_epoch: Option<ControllerEpoch>,
    /// While controller: the brokers it considers alive (its cache of registrations).
    pub live_brokers: Vec<BrokerId>,
    /// How many times this broker became controller.
    pub elections_won: u64,
    /// How many times it stopped being controller.
    pub resignations: u64,
    /// How many of its writes were refused because it had been deposed (the
    /// `/controller_epoch` check failed, or its session was known lost).
    pub fenced_writes: u64,
}

/// What the event loop and the tasks around it share.
pub(crate) struct Shared {
    queue: EventQueue,
    status: watch::Sender<ControlPlaneStatus>,
    /// Set when the session client reports an expiry (fixed behaviour), cleared when a
    /// new session opens: the controller's writes stop at once.
    session_lost: Arc<AtomicBool>,
}

impl Shared {
    fn set_controller(&self, epoch: Option<ControllerEpoch>) {
        self.status.send_modify(|status| {
            if epoch.is_some() {
                status.elections_won += 1;
            }
            status.controller_epoch = epoch;
            status.live_brokers.clear();
        });
    }

    fn set_live_brokers(&self, live: Vec<BrokerId>) {
        self.status.send_modify(|status| status.live_brokers = live);
    }

    fn count_resignation(&self) {
        self.status.send_modify(|status| status.resignations += 1);
    }

    fn count_fenced_write(&self) {
        self.status.send_modify(|status| status.fenced_writes += 1);
    }

    fn session_lost_flag(&self) -> Arc<AtomicBool> {
        self.session_lost.clone()
    }

    fn clear_session_lost(&self) {
        self.session_lost.store(false, Ordering::SeqCst);
    }
}

/// This broker's control plane: a handle, cheap to clone, on tasks that run until
/// [`ControlPlane::shutdown`] or [`ControlPlane::kill`] (dropping the handles does not
/// stop them).
#[derive(Clone)]
pub struct ControlPlane {
    inner: Arc<Inner>,
}

struct Inner {
    config: NodeConfig,
    metadata: MetadataClient,
    session: SessionClient,
    shared: Arc<Shared>,
    http: Option<reqwest::Client>,
    /// Signs the admin requests forwarded to the controller.
    signer: peer_auth::Signer,
    event_loop: Mutex<Option<JoinHandle<()>>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl ControlPlane {
    /// Starts the session, the registration and the controller of broker
    /// `config.broker_id` on the current tokio runtime (it must be called from one).
    ///
    /// `log_failures` are the partitions whose log failed on this broker, published in its
    /// registration for the controller (see [`crate::metadata::layout::LogFailure`]).
    pub fn start(
        config: NodeConfig,
        metadata: MetadataClient,
        log_failures: watch::Receiver<Vec<LogFailure>>,
    ) -> ControlPlane {
        let on_expiry = if config.bugs.kafka_3083 {
            // KAFKA-3083: ZkClient reconnects with a new session by itself and tells the
            // controller nothing about the expiry; its queued work runs on.
            ExpiryPolicy::ReopenSilently
        } else {
            // KAFKA-5642: the controller resigns and drops its queue first.
            ExpiryPolicy::NotifyAndWait
        };
        let session = SessionClient::new(
            metadata.clone(),
            SessionConfig {
                ttl_ms: config.metadata.session_timeout_ms,
                on_expiry,
            },
        );
        let shared = Arc::new(Shared {
            queue: EventQueue::default(),
            status: watch::channel(ControlPlaneStatus::default()).0,
            session_lost: Arc::new(AtomicBool::new(false)),
        });
        let registration_listener = session.subscribe();
        let controller_listener = session.subscribe();
        let broker = config.broker_id;
        let mut tasks = vec![
            tokio::spawn(session.clone().run()),
            tokio::spawn(registration::run(
                config.clone(),
                metadata.clone(),
                session.clone(),
                registration_listener,
                log_failures,
            )),
            tokio::spawn(forward_session_events(shared.clone(), controller_listener)),
        ];
        let watches: [(WatchTarget, fn() -> Event); 3] = [
            (WatchTarget::Node(CONTROLLER.into()), || {
                Event::ControllerChange
            }),
            (WatchTarget::Subtree(BROKER_IDS.into()), || {
                Event::BrokerChange
            }),
            (WatchTarget::Subtree(PARTITIONS.into()), || {
                Event::PartitionsChanged
            }),
        ];
        for (target, event) in watches {
            tasks.push(tokio::spawn(watch_changes(
                metadata.clone(),
                target,
                shared.clone(),
                event,
            )));
        }
        if config.controller.auto_leader_rebalance {
            let period =
                Duration::from_millis(config.controller.leader_imbalance_check_interval_ms);
            tasks.push(tokio::spawn(tick(shared.clone(), period)));
        }
        let controller =
            event_loop::Controller::new(shared.clone(), config.clone(), metadata.clone());
        let event_loop = tokio::spawn(controller.run());
        let http = match reqwest::Client::builder()
            .no_proxy()
            .pool_idle_timeout(crate::server::CLIENT_POOL_IDLE)
            .build()
        {
            Ok(client) => Some(client),
            Err(error) => {
                tracing::error!(broker, %error, "cannot build the admin forwarding HTTP client");
                None
            }
        };
        let signer = crate::peer_gate::signer(&config);
        tracing::info!(broker, bugs = %config.bugs, "control plane started");
        ControlPlane {
            inner: Arc::new(Inner {
                config,
                metadata,
                session,
                shared,
                http,
                signer,
                event_loop: Mutex::new(Some(event_loop)),
                tasks: Mutex::new(tasks),
            }),
        }
    }

    pub fn broker_id(&self) -> BrokerId {
        self.inner.config.broker_id
    }

    pub fn config(&self) -> &NodeConfig {
        &self.inner.config
    }

    pub fn metadata(&self) -> &MetadataClient {
        &self.inner.metadata
    }

    /// The current session, if one is open and not known to have expired.
    pub fn session(&self) -> Option<SessionId> {
        self.inner.session.current()
    }

    /// The controller epoch while this broker is the controller.
    pub fn is_controller(&self) -> Option<ControllerEpoch> {
        self.inner.shared.status.borrow().controller_epoch
    }

    pub fn status(&self) -> ControlPlaneStatus {
        self.inner.shared.status.borrow().clone()
    }

    /// Follows [`ControlPlane::status`].
    pub fn watch_status(&self) -> watch::Receiver<ControlPlaneStatus> {
        self.inner.shared.status.subscribe()
    }

    /// Runs an admin operation on this broker's controller. A broker that is not the
    /// controller answers [`AdminError::NotController`] naming the controller it knows
    /// of (the HTTP layer forwards there).
    pub async fn admin(&self, request: AdminRequest) -> Result<AdminReply, AdminError> {
        if self.is_controller().is_none() {
            let controller = self
                .inner
                .metadata
                .read_local(|state, _| layout::controller(state).ok().flatten());
            return Err(AdminError::NotController { controller });
        }
        let (tx, rx) = oneshot::channel();
        self.inner.shared.queue.put(Event::Admin(request, tx));
        rx.await.unwrap_or(Err(AdminError::ControllerMoved))
    }

    /// The HTTP client the admin API forwards requests with.
    /// What this broker signs the requests it forwards with.
    pub fn signer(&self) -> &peer_auth::Signer {
        &self.inner.signer
    }

    pub fn http_client(&self) -> Option<&reqwest::Client> {
        self.inner.http.as_ref()
    }

    /// Graceful stop: the controller finishes its current event (bounded) and resigns,
    /// queued admin requests are answered, every task stops, and the session is closed so
    /// that the registration and `/controller` go at once rather than after the TTL.
    pub async fn shutdown(&self) {
        self.inner.shared.queue.clear_and_put(Event::Shutdown);
        let event_loop = self.lock_event_loop().take();
        if let Some(mut handle) = event_loop {
            if tokio::time::timeout(SHUTDOWN_GRACE, &mut handle)
                .await
                .is_err()
            {
                handle.abort();
            }
        }
        self.abort_tasks();
        self.inner.shared.queue.close();
        if let Err(error) = self.inner.session.close().await {
            tracing::warn!(broker = self.broker_id(), %error, "cannot close the session");
        }
        tracing::info!(broker = self.broker_id(), "control plane stopped");
    }

    /// Abrupt stop, as `kill -9` would: every task aborted at once, nothing written; the
    /// session expires after its TTL.
    pub fn kill(&self) {
        if let Some(handle) = self.lock_event_loop().take() {
            handle.abort();
        }
        self.abort_tasks();
        self.inner.shared.queue.close();
        self.inner
            .shared
            .status
            .send_modify(|status| status.controller_epoch = None);
        tracing::info!(broker = self.broker_id(), "control plane killed");
    }

    fn abort_tasks(&self) {
        let tasks = std::mem::take(
            &mut *self
                .inner
                .tasks
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for task in tasks {
            task.abort();
        }
    }

    fn lock_event_loop(&self) -> std::sync::MutexGuard<'_, Option<JoinHandle<()>>> {
        self.inner
            .event_loop
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Turns the session client's events into controller events. Under the fixed behaviour
/// an expiry fences the controller's writes at once and replaces the whole queue with
/// the expiry (KAFKA-5642's `clearAndPut(Expire)`); the event loop acknowledges it once
/// it has resigned, which lets the session client open the next session.
async fn forward_session_events(shared: Arc<Shared>, mut listener: SessionListener) {
    while let Some(event) = listener.next().await {
        match event {
            SessionEvent::Opened(session) => shared.queue.put(Event::SessionOpened(session)),
            SessionEvent::Expired { session, ack } => {
                shared.session_lost.store(true, Ordering::SeqCst);
                shared
                    .queue
                    .clear_and_put(Event::SessionExpired(session, ack));
            }
        }
    }
}

/// Long-polls `target` and queues `event()` after each change, and after every poll
/// that saw none: a periodic re-sync, so that a notification lost anywhere between the
/// store and the event loop delays the controller by one poll at most (the handlers
/// compare with what they know and do nothing when nothing changed). Once seen in CI:
/// a controller that missed two registrations for 20 s; the cause was not found.
async fn watch_changes(
    metadata: MetadataClient,
    target: WatchTarget,
    shared: Arc<Shared>,
    event: fn() -> Event,
) {
    let mut seen = metadata.applied_index();
    loop {
        if let Some(changed) = metadata.watch(&target, seen, WATCH_POLL).await {
            seen = changed;
        }
        shared.queue.put(event());
    }
}

async fn tick(shared: Arc<Shared>, period: Duration) {
    let mut interval = tokio::time::interval(period);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    interval.tick().await;
    loop {
        interval.tick().await;
        shared.queue.put(Event::AutoRebalance);
    }
}
