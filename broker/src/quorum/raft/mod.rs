//! The real metadata-quorum backend: an `openraft` group of every broker of the cluster
//! (the configured voters vote, every other broker is a learner), talking JSON over HTTP
//! on the metadata listener, with its log, vote and snapshots on disk under
//! `data_dir/metadata/`. This is the only module that names `openraft`.
//!
//! - `types`: the openraft type configuration (entries carry [`Command`]s).
//! - `disk`: the files, their framing, and the one thread that writes them.
//! - `log_store`: the durable log and vote; recovery of a torn log tail.
//! - `state_machine`: applies entries into the node's [`AppliedState`]; snapshots.
//! - `network`: Raft RPCs to the other nodes; `api`: the HTTP routes that serve them and
//!   the client calls (propose, read index).
//! - `node`: proposals and read indexes, forwarded to the leader from any node.
//!
//! [`RaftQuorum::start`] opens the directory (a node with nothing on disk and a voter's
//! seat initializes the group with the configured voters: safe on several nodes with the
//! same configuration), starts Raft and serves the listener. While this node leads, it
//! runs the session [`reaper`] and adds every configured broker missing from the
//! membership as a learner.
//!
//! Each node runs on its own small tokio runtime, so that [`RaftQuorum::kill`] can stop
//! everything it runs at once, openraft's own tasks included, as kill -9 would: together
//! with the disk writer's fence, nothing more is sent or written after it returns.

mod admit;
mod api;
mod disk;
mod log_store;
mod network;
mod node;
mod state_machine;
mod types;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{InitializeError, RaftError};
use openraft::{ServerState, SnapshotPolicy};
use tokio::net::TcpListener;
use tokio::runtime::Runtime;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use self::disk::{Disk, Fence};
use self::log_store::{LoadedLog, LogStore};
use self::network::Network;
use self::node::RaftNode;
use self::state_machine::{Snapshots, StateMachine, StoredSnapshot};
use self::types::{Node, NodeId, Raft};
use super::applied::AppliedState;
use super::{reaper, Backend, BoxFuture, MetadataClient, QuorumError, DEFAULT_CALL_TIMEOUT};
use crate::config::{MetadataConfig, NodeConfig};
use crate::metadata::{Command, LogIndex, MetadataState, Reply};
use crate::replica::BrokerId;

/// The directory under `data_dir` that holds the quorum's files.
pub const METADATA_DIR: &str = "metadata";

/// How long a graceful shutdown waits for Raft and in-flight requests to finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Why the quorum could not start on this node.
#[derive(Debug, thiserror::Error)]
pub enum RaftStartError {
    #[error("broker {0} is not among the configured brokers")]
    NotABroker(BrokerId),
    #[error("invalid Raft configuration: {0}")]
    Config(String),
    #[error("cannot create {path}: {source}")]
    DataDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file is damaged in a way that cannot be a crash's torn write.
    #[error("{path} is corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("cannot start the quorum's runtime or threads: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("cannot use the metadata listener: {0}")]
    Listener(#[source] std::io::Error),
    #[error("cannot build the HTTP client: {0}")]
    Http(#[source] reqwest::Error),
    #[error("Raft failed to start: {0}")]
    Raft(String),
}

/// A node's role in the quorum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RaftRole {
    Leader,
    Candidate,
    Follower,
    Learner,
    Shutdown,
}

/// A node's view of the quorum, from its Raft metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaftStatus {
    pub id: BrokerId,
    pub role: RaftRole,
    pub term: u64,
    pub leader: Option<BrokerId>,
    /// The membership as this node last saw it (possibly not yet committed).
    pub voters: Vec<BrokerId>,
    pub learners: Vec<BrokerId>,
    pub last_log_index: Option<LogIndex>,
    pub applied_index: Option<LogIndex>,
    /// The last entry the current snapshot covers.
    pub snapshot_index: Option<LogIndex>,
    /// The last entry removed from the log.
    pub purged_index: Option<LogIndex>,
    /// Snapshots installed from a leader since this node started.
    pub snapshots_installed: u64,
    /// Why the Raft core stopped, when it did on its own (a storage error, a panic);
    /// `None` while it runs or after a shutdown asked for.
    pub fatal: Option<String>,
}

/// One node's Raft member of the metadata quorum. Stop it with [`RaftQuorum::shutdown`]
/// or [`RaftQuorum::kill`]; dropping it kills it without waiting.
pub struct RaftQuorum {
    node: Arc<RaftNode>,
    runtime: Option<Runtime>,
    fence: Arc<Fence>,
    writer: Option<std::thread::JoinHandle<()>>,
    stop_server: watch::Sender<bool>,
    server: Option<JoinHandle<()>>,
    snapshots_installed: Arc<AtomicU64>,
}

/// What opening the directory found, and the files the writer keeps open.
struct Opened {
    log: LoadedLog,
    snapshot: Option<(StoredSnapshot, MetadataState)>,
    log_file: File,
    committed_file: File,
}

fn open_dir(dir: PathBuf) -> Result<Opened, RaftStartError> {
    // The directory's own entry is made durable too: a node that lost it would start
    // as new and could initialize the group again.
    std::fs::create_dir_all(&dir)
        .and_then(|()| match dir.parent() {
            Some(parent) => disk::sync_dir(parent),
            None => Ok(()),
        })
        .map_err(|source| RaftStartError::DataDir {
            path: dir.clone(),
            source,
        })?;
    let log = log_store::load(&dir)?;
    let snapshot = state_machine::load_snapshot(&dir)?;
    let covered = snapshot.as_ref().and_then(|(s, _)| s.meta.last_log_id);
    if log.purged() > covered {
        return Err(RaftStartError::Corrupt {
            path: dir.join(disk::LOG_FILE),
            reason: format!(
                "purged up to {:?} but the snapshot covers only up to {covered:?}",
                log.purged()
            ),
        });
    }
    let io = |path: &str| {
        let path = dir.join(path);
        move |source| RaftStartError::Io { path, source }
    };
    let log_file = disk::open_log_for_append(&dir).map_err(io(disk::LOG_FILE))?;
    let committed_file = disk::open_committed(&dir).map_err(io(disk::COMMITTED_FILE))?;
    Ok(Opened {
        log,
        snapshot,
        log_file,
        committed_file,
    })
}

fn raft_config(metadata: &MetadataConfig) -> Result<openraft::Config, RaftStartError> {
    openraft::Config {
        cluster_name: "metadata".to_string(),
        heartbeat_interval: metadata.raft_heartbeat_ms,
        election_timeout_min: metadata.election_timeout_min_ms,
        election_timeout_max: metadata.election_timeout_max_ms,
        // One snapshot chunk (at most 1 MiB) per call.
        install_snapshot_timeout: metadata
            .election_timeout_max_ms
            .saturating_mul(4)
            .max(2_000),
        snapshot_max_chunk_size: 1 << 20,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(metadata.snapshot_every),
        // Purge everything a snapshot covers: a node that far behind gets the snapshot.
        max_in_snapshot_log_to_keep: 0,
        purge_batch_size: 1,
        replication_lag_threshold: metadata.snapshot_every.saturating_mul(2).max(5_000),
        ..openraft::Config::default()
    }
    .validate()
    .map_err(|e| RaftStartError::Config(e.to_string()))
}

/// Everything the node's runtime needs to start Raft.
struct Launch {
    id: NodeId,
    config: openraft::Config,
    addresses: Arc<BTreeMap<NodeId, SocketAddr>>,
    voters: BTreeMap<NodeId, Node>,
    learners: Vec<(NodeId, Node)>,
    pristine: bool,
    log_store: LogStore,
    state_machine: StateMachine,
    listener: std::net::TcpListener,
    retry_pause: Duration,
    /// Signs this node's RPCs and forwarded calls.
    signer: peer_auth::Signer,
    /// Guards the metadata listener.
    door: crate::peer_gate::PeerGate,
}

struct Launched {
    node: Arc<RaftNode>,
    server: JoinHandle<()>,
    stop_server: watch::Sender<bool>,
    applied: Arc<AppliedState>,
}

impl RaftQuorum {
    /// Starts this broker's Raft node on `listener` (its metadata listener, bound by the
    /// caller), and returns it with a client over it.
    pub async fn start(
        config: &NodeConfig,
        listener: TcpListener,
    ) -> Result<(RaftQuorum, MetadataClient), RaftStartError> {
        let id = config.broker_id;
        if config.this_broker().is_none() {
            return Err(RaftStartError::NotABroker(id));
        }
        let raft_config = raft_config(&config.metadata)?;
        let addresses: Arc<BTreeMap<NodeId, SocketAddr>> =
            Arc::new(config.brokers.iter().map(|p| (p.id, p.metadata)).collect());
        let voter_ids: BTreeSet<NodeId> = config.metadata.voters.iter().copied().collect();
        let mut voters = BTreeMap::new();
        let mut learners = Vec::new();
        for peer in &config.brokers {
            let node = Node::new(peer.metadata);
            if voter_ids.contains(&peer.id) {
                voters.insert(peer.id, node);
            } else {
                learners.push((peer.id, node));
            }
        }

        let dir = config.data_dir.join(METADATA_DIR);
        let opened = {
            let dir = dir.clone();
            tokio::task::spawn_blocking(move || open_dir(dir))
                .await
                .map_err(|e| RaftStartError::Runtime(std::io::Error::other(e.to_string())))??
        };
        let pristine = opened.log.is_pristine() && opened.snapshot.is_none();
        let (snapshot, state) = match opened.snapshot {
            Some((snapshot, state)) => (Some(snapshot), state),
            None => (None, MetadataState::new()),
        };
        let snapshot_index = snapshot
            .as_ref()
            .and_then(|s| s.meta.last_log_id)
            .map_or(0, |l| l.index);
        let applied = Arc::new(AppliedState::new(state, snapshot_index));

        let fence = Arc::new(Fence::default());
        let (disk, writer) = Disk::spawn(
            dir,
            opened.log_file,
            opened.committed_file,
            fence.clone(),
            format!("metadata-disk-{id}"),
        )
        .map_err(RaftStartError::Runtime)?;
        let snapshots_installed = Arc::new(AtomicU64::new(0));
        let snapshots = Arc::new(Snapshots::new(
            snapshot.clone(),
            disk.clone(),
            snapshots_installed.clone(),
        ));
        let launch = Launch {
            id,
            config: raft_config,
            addresses,
            voters,
            learners,
            pristine,
            log_store: LogStore::new(opened.log, disk),
            state_machine: StateMachine::new(applied.clone(), snapshot.as_ref(), snapshots),
            listener: listener.into_std().map_err(RaftStartError::Listener)?,
            retry_pause: Duration::from_millis(config.metadata.raft_heartbeat_ms.clamp(10, 100)),
            signer: crate::peer_gate::signer(config),
            door: crate::peer_gate::PeerGate::new(
                config,
                "metadata",
                crate::peer_gate::Admits::Brokers,
            ),
        };

        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(format!("metadata-raft-{id}"))
            .enable_all()
            .build()
            .map_err(RaftStartError::Runtime)?;
        let launched = match runtime.spawn(launch_node(launch, applied)).await {
            Ok(Ok(launched)) => launched,
            Ok(Err(error)) => {
                fence.kill_without_waiting();
                runtime.shutdown_background();
                return Err(error);
            }
            Err(error) => {
                fence.kill_without_waiting();
                runtime.shutdown_background();
                return Err(RaftStartError::Raft(error.to_string()));
            }
        };
        let backend = RaftBackend {
            node: launched.node.clone(),
            runtime: runtime.handle().clone(),
        };
        let client = MetadataClient::new(Arc::new(backend), launched.applied);
        tracing::info!(broker = id, pristine, "metadata quorum node started");
        Ok((
            RaftQuorum {
                node: launched.node,
                runtime: Some(runtime),
                fence,
                writer: Some(writer),
                stop_server: launched.stop_server,
                server: Some(launched.server),
                snapshots_installed,
            },
            client,
        ))
    }

    /// This node's broker id.
    pub fn id(&self) -> BrokerId {
        self.node.id
    }

    /// The quorum's leader as this node knows it.
    pub fn leader(&self) -> Option<BrokerId> {
        self.node.leader()
    }

    /// This node's view of the quorum.
    pub fn status(&self) -> RaftStatus {
        let metrics = self.node.raft.metrics().borrow().clone();
        let membership = metrics.membership_config.membership();
        RaftStatus {
            id: self.node.id,
            role: match metrics.state {
                ServerState::Leader => RaftRole::Leader,
                ServerState::Candidate => RaftRole::Candidate,
                ServerState::Follower => RaftRole::Follower,
                ServerState::Learner => RaftRole::Learner,
                ServerState::Shutdown => RaftRole::Shutdown,
            },
            term: metrics.current_term,
            leader: metrics.current_leader,
            voters: membership.voter_ids().collect(),
            learners: membership.learner_ids().collect(),
            last_log_index: metrics.last_log_index,
            applied_index: metrics.last_applied.map(|l| l.index),
            snapshot_index: metrics.snapshot.map(|l| l.index),
            purged_index: metrics.purged.map(|l| l.index),
            snapshots_installed: self.snapshots_installed.load(Ordering::SeqCst),
            fatal: match &metrics.running_state {
                Ok(()) | Err(openraft::error::Fatal::Stopped) => None,
                Err(fatal) => Some(fatal.to_string()),
            },
        }
    }

    /// Stops the node gracefully: Raft shuts down, in-flight requests finish (within a
    /// grace period), every queued write reaches the disk.
    pub async fn shutdown(mut self) {
        self.node.stop();
        let Some(runtime) = self.runtime.take() else {
            return;
        };
        let node = self.node.clone();
        let stop_server = self.stop_server.clone();
        let server = self.server.take();
        let graceful = runtime.spawn(async move {
            if tokio::time::timeout(SHUTDOWN_GRACE, node.raft.shutdown())
                .await
                .is_err()
            {
                tracing::warn!(broker = node.id, "Raft did not shut down in time");
            }
            let _ = stop_server.send(true);
            if let Some(server) = server {
                if tokio::time::timeout(SHUTDOWN_GRACE, server).await.is_err() {
                    tracing::warn!(broker = node.id, "metadata listener did not drain in time");
                }
            }
        });
        let _ = graceful.await;
        stop_runtime(runtime).await;
        // Every handle on the writer lived in the runtime's tasks: it drains and ends.
        if let Some(writer) = self.writer.take() {
            let joined = tokio::task::spawn_blocking(move || writer.join());
            if tokio::time::timeout(SHUTDOWN_GRACE, joined).await.is_err() {
                tracing::warn!(
                    broker = self.node.id,
                    "metadata disk writer did not finish in time"
                );
            }
        }
        tracing::info!(broker = self.node.id, "metadata quorum node stopped");
    }

    /// Stops the node at once, as kill -9 would: no write starts after this returns and
    /// nothing is flushed beyond what already was; every task (openraft's included) and
    /// connection is dropped, and the listener is closed.
    pub async fn kill(mut self) {
        self.node.stop();
        let fence = self.fence.clone();
        let _ = tokio::task::spawn_blocking(move || fence.kill()).await;
        if let Some(runtime) = self.runtime.take() {
            stop_runtime(runtime).await;
        }
        tracing::info!(broker = self.node.id, "metadata quorum node killed");
    }
}

/// Drops every task of `runtime` and waits (briefly) until its threads have let go of
/// them, so that its sockets are closed when this returns.
async fn stop_runtime(runtime: Runtime) {
    let stopped =
        tokio::task::spawn_blocking(move || runtime.shutdown_timeout(Duration::from_secs(2)));
    let _ = stopped.await;
}

impl Drop for RaftQuorum {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            self.node.stop();
            self.fence.kill_without_waiting();
            runtime.shutdown_background();
        }
    }
}

/// Starts Raft and the node's tasks; runs on the node's runtime.
async fn launch_node(
    launch: Launch,
    applied: Arc<AppliedState>,
) -> Result<Launched, RaftStartError> {
    let id = launch.id;
    let listener = TcpListener::from_std(launch.listener).map_err(RaftStartError::Listener)?;
    let http = reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(Duration::from_millis(launch.config.election_timeout_min))
        .pool_idle_timeout(crate::server::CLIENT_POOL_IDLE)
        .build()
        .map_err(RaftStartError::Http)?;
    let network = Network {
        client: http.clone(),
        signer: launch.signer.clone(),
        addresses: launch.addresses.clone(),
        backoff: launch.retry_pause * 2,
    };
    let raft = Raft::new(
        id,
        Arc::new(launch.config),
        network,
        launch.log_store,
        launch.state_machine,
    )
    .await
    .map_err(|e| RaftStartError::Raft(e.to_string()))?;
    let node = Arc::new(RaftNode::new(
        id,
        raft,
        launch.addresses,
        http,
        launch.signer,
        DEFAULT_CALL_TIMEOUT,
        launch.retry_pause,
    ));

    let (stop_server, stop_rx) = watch::channel(false);
    let server = tokio::spawn(serve(
        listener,
        api::router(node.clone(), launch.door),
        stop_rx,
    ));

    if launch.pristine && launch.voters.contains_key(&id) {
        match node.raft.initialize(launch.voters.clone()).await {
            Ok(()) => {
                tracing::info!(broker = id, voters = ?launch.voters.keys().collect::<Vec<_>>(), "initialized the metadata quorum")
            }
            Err(RaftError::APIError(InitializeError::NotAllowed(e))) => {
                tracing::info!(broker = id, %e, "metadata quorum already initialized")
            }
            Err(error) => {
                server.abort();
                return Err(RaftStartError::Raft(format!("initialize: {error}")));
            }
        }
    }

    let (leadership_tx, leadership_rx) = watch::channel(None);
    let reaper_client = MetadataClient::new(
        Arc::new(RaftBackend {
            node: node.clone(),
            runtime: tokio::runtime::Handle::current(),
        }),
        applied.clone(),
    );
    tokio::spawn(reaper::run(reaper_client, leadership_rx));
    tokio::spawn(watch_leadership(
        node.clone(),
        leadership_tx,
        launch.learners,
        launch.retry_pause,
    ));
    Ok(Launched {
        node,
        server,
        stop_server,
        applied,
    })
}

async fn serve(listener: TcpListener, router: axum::Router, mut stop: watch::Receiver<bool>) {
    let stopping = async move {
        let _ = stop.wait_for(|stopping| *stopping).await;
    };
    serving::serve(listener, router, crate::server::listener_limits(), stopping).await;
}

/// Publishes `Some(term)` on `leadership` exactly while this node leads (the reaper runs
/// then), and adds the missing learners each time it takes the lead.
async fn watch_leadership(
    node: Arc<RaftNode>,
    leadership: watch::Sender<Option<u64>>,
    learners: Vec<(NodeId, Node)>,
    retry_pause: Duration,
) {
    let mut metrics = node.raft.metrics();
    let mut adding: Option<AbortOnDrop<()>> = None;
    loop {
        let now = {
            let m = metrics.borrow_and_update();
            (m.state == ServerState::Leader && m.current_leader == Some(node.id))
                .then_some(m.current_term)
        };
        let changed = leadership.send_if_modified(|current| {
            let changed = *current != now;
            *current = now;
            changed
        });
        if changed {
            adding = now.map(|term| {
                tracing::info!(broker = node.id, term, "leading the metadata quorum");
                AbortOnDrop(tokio::spawn(add_learners(
                    node.clone(),
                    learners.clone(),
                    term,
                    retry_pause,
                )))
            });
        }
        if metrics.changed().await.is_err() {
            break;
        }
    }
    drop(adding);
    leadership.send_replace(None);
}

/// Adds every broker of `learners` missing from the membership, while this node leads in
/// `term`.
async fn add_learners(
    node: Arc<RaftNode>,
    learners: Vec<(NodeId, Node)>,
    term: u64,
    retry_pause: Duration,
) {
    loop {
        let missing: Vec<(NodeId, Node)> = {
            let metrics = node.raft.metrics();
            let m = metrics.borrow();
            if m.state != ServerState::Leader || m.current_term != term {
                return;
            }
            let membership = m.membership_config.membership();
            learners
                .iter()
                .filter(|(id, _)| membership.get_node(id).is_none())
                .cloned()
                .collect()
        };
        if missing.is_empty() {
            return;
        }
        for (id, address) in missing {
            match node.raft.add_learner(id, address, false).await {
                Ok(_) => tracing::info!(learner = id, "added a learner to the metadata quorum"),
                Err(error) => {
                    if error.forward_to_leader::<Node>().is_some() {
                        return;
                    }
                    // Typically the previous membership change is not committed yet.
                    tracing::debug!(learner = id, %error, "cannot add the learner yet");
                    break;
                }
            }
        }
        tokio::time::sleep(retry_pause).await;
    }
}

/// Aborts the task when dropped.
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The [`Backend`] over a [`RaftNode`]: every call runs on the node's runtime (where its
/// connections live) and ends with [`QuorumError::Stopped`] once the node is stopped.
struct RaftBackend {
    node: Arc<RaftNode>,
    runtime: tokio::runtime::Handle,
}

impl RaftBackend {
    fn run<T, Fut>(
        &self,
        call: impl FnOnce(Arc<RaftNode>) -> Fut,
    ) -> BoxFuture<'_, Result<T, QuorumError>>
    where
        T: Send + 'static,
        Fut: std::future::Future<Output = Result<T, QuorumError>> + Send + 'static,
    {
        if self.node.is_stopped() {
            return Box::pin(async { Err(QuorumError::Stopped) });
        }
        let mut task = AbortOnDrop(self.runtime.spawn(call(self.node.clone())));
        Box::pin(async move { (&mut task.0).await.unwrap_or(Err(QuorumError::Stopped)) })
    }
}

impl Backend for RaftBackend {
    fn propose(&self, command: Command) -> BoxFuture<'_, Result<Reply, QuorumError>> {
        self.run(|node| async move { node.propose(command).await })
    }

    fn read_index(&self) -> BoxFuture<'_, Result<LogIndex, QuorumError>> {
        self.run(|node| async move { node.read_index().await })
    }

    fn leader(&self) -> Option<BrokerId> {
        self.node.leader()
    }
}
