//! The broker as a network service: HTTP servers on the client and replication
//! listeners around the pure replica core (DESIGN.md §2).
//!
//! - [`partitions`]: the driver. Owns each `Replica<SegmentLog>`, feeds it time and
//!   messages, and carries out its effects.
//! - [`client_api`]: produce (single and batch), read below the HW from the leader.
//! - [`replication_api`]: LeaderAndIsr, Fetch (long-poll), OffsetsForLeaderEpoch,
//!   ListOffsets.
//! - [`debug_api`]: `GET /v1/debug/replicas`, `PUT/DELETE/GET /v1/debug/failpoints`.
//! - [`fetcher`]: one fetcher per leader, sending the followers' requests.
//! - [`failpoints`]: the named failpoints.
//! - [`wire`]: JSON bodies and the error shape.
//!
//! Partition state lives in the metadata quorum, reached through the node's
//! [`MetadataClient`]: leaders write their ISR changes there (conditionally on the
//! version they were told), and read it back for linearizable reads. Whoever is
//! controller (the control plane, or an in-process test playing it) writes partition
//! states and sends LeaderAndIsr to the replication listener.
//!
//! Architecture invariant: the replica core is only ever called with a
//! `std::sync::Mutex` held and no `.await` in between; effects are carried out after the
//! lock is released.

pub mod admin_api;
pub mod client_api;
mod data_dir;
pub use data_dir::DataWithoutMetadata;
pub mod debug_api;
pub mod failpoints;
pub mod fetcher;
pub mod partitions;
pub mod replication_api;
pub mod wire;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::NodeConfig;
use crate::controller::ControlPlane;
use crate::quorum::raft::RaftQuorum;
use crate::quorum::MetadataClient;
use crate::replica::metadata::ControllerEpoch;

/// How often the driver ticks every replica (ISR shrink, produce timeouts, follower
/// re-sends, HW checkpoints): fine enough for millisecond-scale configuration.
const TICK_INTERVAL: Duration = Duration::from_millis(20);
/// How long a graceful shutdown waits for in-flight requests before dropping them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot bind the {listener} listener on {addr}: {source}")]
    Bind {
        listener: &'static str,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the metadata quorum: {0}")]
    Quorum(#[from] crate::quorum::raft::RaftStartError),
    #[error("cannot create the data directory {path}: {source}")]
    DataDir {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    DataWithoutMetadata(#[from] data_dir::DataWithoutMetadata),
    #[error(transparent)]
    ClusterId(#[from] data_dir::ClusterIdError),
}

/// What every handler and task shares: the configuration, the clock, the partitions.
pub struct Node {
    pub(crate) config: NodeConfig,
    started: Instant,
    pub(crate) metadata: MetadataClient,
    /// The highest controller epoch any LeaderAndIsr has carried: requests from an older
    /// controller are refused whole (STALE_CONTROLLER_EPOCH), even for partitions this
    /// broker has not seen yet.
    controller_epoch: AtomicU32,
    /// The session, registration and controller of this broker, once started; absent
    /// when a test plays controller.
    control_plane: std::sync::OnceLock<crate::controller::ControlPlane>,
    pub(crate) partitions: partitions::Partitions,
    pub(crate) fetchers: fetcher::Fetchers,
    shutdown: watch::Sender<bool>,
}

impl Node {
    /// Milliseconds on this process's monotonic clock: the only time the core sees.
    pub(crate) fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    pub(crate) fn broker_id(&self) -> crate::replica::BrokerId {
        self.config.broker_id
    }

    /// Resolves once shutdown has begun.
    pub(crate) fn stopping(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.shutdown.subscribe();
        async move {
            // An error means the sender is gone, which is shutdown too.
            let _ = rx.wait_for(|stopping| *stopping).await;
        }
    }

    pub(crate) fn is_stopping(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// The highest controller epoch a LeaderAndIsr has carried here.
    pub(crate) fn controller_epoch_seen(&self) -> ControllerEpoch {
        self.controller_epoch.load(Ordering::SeqCst)
    }

    /// Admits a controller request of `epoch`: `Err(current)` if a newer controller has
    /// already spoken to this broker.
    pub(crate) fn admit_controller_epoch(
        &self,
        epoch: ControllerEpoch,
    ) -> Result<(), ControllerEpoch> {
        let seen = self.controller_epoch.fetch_max(epoch, Ordering::SeqCst);
        if epoch < seen {
            Err(seen)
        } else {
            Ok(())
        }
    }

    /// The node's handle on the metadata quorum.
    pub fn metadata(&self) -> &MetadataClient {
        &self.metadata
    }

    /// This broker's control plane, if it runs one.
    pub fn control_plane(&self) -> Option<&crate::controller::ControlPlane> {
        self.control_plane.get()
    }
}

/// The two listeners this issue serves, already bound (tests bind `127.0.0.1:0` first so
/// that every broker's configuration can name every other's address).
pub struct BoundListeners {
    pub client: TcpListener,
    pub replication: TcpListener,
}

impl BoundListeners {
    /// Binds the client and replication listeners of `config`.
    pub async fn bind(config: &NodeConfig) -> Result<BoundListeners, StartError> {
        let bind = |listener: &'static str, addr: SocketAddr| async move {
            TcpListener::bind(addr)
                .await
                .map_err(|source| StartError::Bind {
                    listener,
                    addr,
                    source,
                })
        };
        Ok(BoundListeners {
            client: bind("client", config.listeners.client).await?,
            replication: bind("replication", config.listeners.replication).await?,
        })
    }
}

/// A running broker. Stop it with [`Broker::shutdown`] (graceful) or [`Broker::kill`].
pub struct Broker {
    node: Arc<Node>,
    client_addr: SocketAddr,
    replication_addr: SocketAddr,
    tasks: Vec<JoinHandle<()>>,
    /// This broker's Raft node, when it runs one (a whole broker, not a test's).
    quorum: Option<RaftQuorum>,
}

impl Broker {
    /// A whole broker, as the binary runs it: binds the three listeners of `config`, joins
    /// the metadata quorum (Raft, on the metadata listener), serves the data plane, and
    /// starts its control plane (session, registration, controller).
    pub async fn start_member(config: NodeConfig) -> Result<Broker, StartError> {
        let listeners = BoundListeners::bind(&config).await?;
        let metadata = TcpListener::bind(config.listeners.metadata)
            .await
            .map_err(|source| StartError::Bind {
                listener: "metadata",
                addr: config.listeners.metadata,
                source,
            })?;
        Broker::start_member_on(config, listeners, metadata).await
    }

    /// [`Broker::start_member`] on listeners bound by the caller.
    pub async fn start_member_on(
        config: NodeConfig,
        listeners: BoundListeners,
        metadata_listener: TcpListener,
    ) -> Result<Broker, StartError> {
        data_dir::check_cluster_id(&config.data_dir, config.cluster_id.as_deref())?;
        data_dir::check_metadata_present(&config.data_dir)?;
        std::fs::create_dir_all(&config.data_dir).map_err(|source| StartError::DataDir {
            path: config.data_dir.display().to_string(),
            source,
        })?;
        let (quorum, metadata) = RaftQuorum::start(&config, metadata_listener).await?;
        let mut broker = Broker::start_on(config, metadata, listeners).await?;
        broker.quorum = Some(quorum);
        broker.start_control_plane();
        Ok(broker)
    }

    /// Starts this broker's control plane over its metadata client (for a broker started
    /// with [`Broker::start_on`], e.g. on an in-process [`crate::quorum::local::LocalQuorum`]).
    /// Does nothing if it runs already.
    pub fn start_control_plane(&self) {
        if self.node.control_plane.get().is_none() {
            let control_plane = ControlPlane::start(
                self.node.config.clone(),
                self.node.metadata.clone(),
                self.node.partitions.health.subscribe(),
            );
            if let Err(extra) = self.node.control_plane.set(control_plane) {
                extra.kill();
            }
        }
    }

    /// The metadata-quorum member this broker runs, if any.
    pub fn quorum(&self) -> Option<&RaftQuorum> {
        self.quorum.as_ref()
    }

    /// The node (for in-process tests: its metadata client and control plane).
    pub fn node(&self) -> &Arc<Node> {
        &self.node
    }

    /// Binds the listeners of `config` and starts serving.
    pub async fn start(config: NodeConfig, metadata: MetadataClient) -> Result<Broker, StartError> {
        let listeners = BoundListeners::bind(&config).await?;
        Broker::start_on(config, metadata, listeners).await
    }

    /// Starts serving on listeners bound by the caller. Replicas are created (or reopened
    /// from `data_dir/<topic>-<partition>/`) by their first LeaderAndIsr.
    pub async fn start_on(
        config: NodeConfig,
        metadata: MetadataClient,
        listeners: BoundListeners,
    ) -> Result<Broker, StartError> {
        std::fs::create_dir_all(&config.data_dir).map_err(|source| StartError::DataDir {
            path: config.data_dir.display().to_string(),
            source,
        })?;
        crate::peer_gate::warn_if_open(&config);
        let client_addr = local_addr(&listeners.client, "client")?;
        let replication_addr = local_addr(&listeners.replication, "replication")?;
        let (shutdown, _) = watch::channel(false);
        let node = Arc::new(Node {
            config,
            started: Instant::now(),
            metadata,
            controller_epoch: AtomicU32::new(0),
            control_plane: std::sync::OnceLock::new(),
            partitions: partitions::Partitions::default(),
            fetchers: fetcher::Fetchers::default(),
            shutdown,
        });
        tracing::info!(
            broker = node.broker_id(),
            %client_addr,
            %replication_addr,
            bugs = %node.config.bugs,
            "broker started"
        );
        let tasks = vec![
            serve(
                &node,
                listeners.client,
                client_api::router(node.clone()),
                client_api::listener_limits(),
            ),
            serve(
                &node,
                listeners.replication,
                replication_api::router(node.clone()),
                listener_limits(),
            ),
            tokio::spawn(run_ticker(node.clone())),
        ];
        Ok(Broker {
            node,
            client_addr,
            replication_addr,
            tasks,
            quorum: None,
        })
    }

    pub fn broker_id(&self) -> crate::replica::BrokerId {
        self.node.broker_id()
    }

    pub fn client_addr(&self) -> SocketAddr {
        self.client_addr
    }

    pub fn replication_addr(&self) -> SocketAddr {
        self.replication_addr
    }

    /// Graceful stop: refuse new connections, let in-flight requests finish (bounded),
    /// stop fetching, checkpoint every high watermark, close every log.
    pub async fn shutdown(mut self) {
        // The control plane first: closing the session deregisters this broker at once,
        // so the controller moves leadership away without waiting for the session TTL.
        if let Some(control_plane) = self.node.control_plane.get() {
            control_plane.shutdown().await;
        }
        let _ = self.node.shutdown.send(true);
        let deadline = tokio::time::Instant::now() + SHUTDOWN_GRACE;
        for task in &mut self.tasks {
            if tokio::time::timeout_at(deadline, &mut *task).await.is_err() {
                task.abort();
            }
        }
        self.node.partitions.close_all(true);
        if let Some(quorum) = self.quorum.take() {
            quorum.shutdown().await;
        }
        tracing::info!(broker = self.node.broker_id(), "broker stopped");
    }

    /// Abrupt stop, as close to `kill -9` as a process can do to a part of itself: no
    /// checkpoints, in-flight requests dropped. What was appended stays (it reached the
    /// OS with every append, as after a real kill).
    pub async fn kill(mut self) {
        if let Some(control_plane) = self.node.control_plane.get() {
            control_plane.kill();
        }
        let _ = self.node.shutdown.send(true);
        for task in &self.tasks {
            task.abort();
        }
        for task in self.tasks {
            let _ = task.await;
        }
        self.node.partitions.close_all(false);
        if let Some(quorum) = self.quorum.take() {
            quorum.kill().await;
        }
        tracing::info!(broker = self.node.broker_id(), "broker killed");
    }
}

fn local_addr(listener: &TcpListener, name: &'static str) -> Result<SocketAddr, StartError> {
    listener.local_addr().map_err(|source| StartError::Bind {
        listener: name,
        addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        source,
    })
}

fn serve(
    node: &Arc<Node>,
    listener: TcpListener,
    router: axum::Router,
    limits: serving::Limits,
) -> JoinHandle<()> {
    let stopping = node.stopping();
    tokio::spawn(serving::serve(listener, router, limits, stopping))
}

/// How long the broker's own HTTP clients keep an idle connection: well within the 60 s
/// after which a listener closes one ([`serving::Limits::header_timeout`]), so that a
/// request never meets a connection the other side is closing.
pub const CLIENT_POOL_IDLE: Duration = Duration::from_secs(30);

/// What each listener allows its peers (the client listener waits longer for an answer:
/// [`client_api::listener_limits`]). Connections are capped at a share of the process's
/// file descriptors, so that peers holding connections open cannot leave the logs
/// without descriptors for their files.
pub fn listener_limits() -> serving::Limits {
    serving::Limits {
        max_connections: connection_cap(open_files_limit()),
        ..serving::Limits::default()
    }
}

/// Connections one listener may hold: a quarter of the descriptors a process may open
/// (three listeners take at most three quarters), between 16 and 1024.
fn connection_cap(open_files: Option<u64>) -> usize {
    let quarter = open_files.map_or(1024, |n| n / 4);
    usize::try_from(quarter).unwrap_or(1024).clamp(16, 1024)
}

/// The soft limit on open files (`ulimit -n`), from `/proc/self/limits`.
fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.trim_start_matches("Max open files")
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

async fn run_ticker(node: Arc<Node>) {
    let mut interval = tokio::time::interval(TICK_INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let stopping = node.stopping();
    tokio::pin!(stopping);
    loop {
        tokio::select! {
            _ = &mut stopping => return,
            _ = interval.tick() => node.tick_all(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_take_a_quarter_of_the_descriptors_within_bounds() {
        assert_eq!(connection_cap(Some(256)), 64);
        assert_eq!(connection_cap(Some(1024)), 256);
        assert_eq!(connection_cap(Some(20)), 16);
        assert_eq!(connection_cap(Some(1 << 20)), 1024);
        assert_eq!(connection_cap(None), 1024);
        // This process has a limit, and it is read.
        assert!(open_files_limit().is_some_and(|n| n > 0));
    }
}
