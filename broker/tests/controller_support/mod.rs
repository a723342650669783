//! An in-process cluster of control planes for the controller tests: one [`LocalQuorum`],
//! and per broker a [`ControlPlane`] with its own cuttable [`LocalLink`], a client
//! listener serving the admin HTTP API, and a stub replication listener that records
//! every LeaderAndIsr it receives and answers as the real replica does (stale controller
//! epoch, not assigned, stale leader epoch, else accepted), besides serving the
//! controller's forwarded-admin endpoint.

#![allow(dead_code)] // each test file uses part of this

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use broker::config::NodeConfig;
use broker::controller::http::{admin_routes, controller_routes, ControlPlaneHost};
use broker::controller::{AdminError, AdminReply, AdminRequest, ControlPlane};
use broker::metadata::layout::{self, CONTROLLER_EPOCH};
use broker::metadata::{Command, MetadataState, Op, Reply, StoreError};
use broker::quorum::local::{LocalLink, LocalQuorum};
use broker::quorum::{MetadataClient, QuorumError};
use broker::replica::metadata::{ControllerEpoch, PartitionState, TopicPartition, VersionedState};
use broker::replica::BrokerId;
use broker::server::wire::LeaderAndIsrBody;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// One LeaderAndIsr as a stub received it, with the code it answered (`None`: accepted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub body: LeaderAndIsrBody,
    pub rejected: Option<String>,
}

/// What a stub remembers of one partition, as a replica would.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StubPartition {
    pub controller_epoch: ControllerEpoch,
    /// The last accepted request (its leader epoch, ISR and state version are what a
    /// leader would cache).
    pub accepted: Option<LeaderAndIsrBody>,
}

/// Stands for broker `id`'s data plane and holds its control plane.
pub struct Host {
    pub id: BrokerId,
    control_plane: RwLock<Option<ControlPlane>>,
    received: Mutex<Vec<Received>>,
    partitions: Mutex<BTreeMap<(String, u32), StubPartition>>,
}

impl ControlPlaneHost for Host {
    fn control_plane(&self) -> Option<ControlPlane> {
        self.control_plane
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl Host {
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().expect("received").clone()
    }

    pub fn partition(&self, tp: &TopicPartition) -> StubPartition {
        self.partitions
            .lock()
            .expect("partitions")
            .get(&(tp.topic.clone(), tp.partition))
            .cloned()
            .unwrap_or_default()
    }

    /// Applies a LeaderAndIsr as `Replica::handle_leader_and_isr` does.
    fn leader_and_isr(&self, body: LeaderAndIsrBody) -> Result<(), String> {
        let mut partitions = self.partitions.lock().expect("partitions");
        let stub = partitions
            .entry((body.topic.clone(), body.partition))
            .or_default();
        let outcome = if body.controller_epoch < stub.controller_epoch {
            Err("stale_controller_epoch".to_string())
        } else {
            stub.controller_epoch = body.controller_epoch;
            if !body.replicas.contains(&self.id) {
                Err("not_assigned".to_string())
            } else if stub
                .accepted
                .as_ref()
                .is_some_and(|a| body.leader_epoch <= a.leader_epoch)
            {
                Err("stale_leader_epoch".to_string())
            } else {
                stub.accepted = Some(body.clone());
                Ok(())
            }
        };
        self.received.lock().expect("received").push(Received {
            body,
            rejected: outcome.clone().err(),
        });
        outcome
    }
}

async fn stub_leader_and_isr(
    State(host): State<Arc<Host>>,
    Json(body): Json<LeaderAndIsrBody>,
) -> Response {
    match host.leader_and_isr(body) {
        Ok(()) => Json(json!({})).into_response(),
        Err(code) => (
            StatusCode::CONFLICT,
            Json(json!({"error": code, "message": code, "leader": null})),
        )
            .into_response(),
    }
}

pub struct Member {
    pub config: NodeConfig,
    pub host: Arc<Host>,
    link: Option<LocalLink>,
    servers: Vec<JoinHandle<()>>,
}

pub struct Cluster {
    pub quorum: Arc<LocalQuorum>,
    /// A client whose link is never cut: the test's own view of the store.
    pub store: MetadataClient,
    pub members: BTreeMap<BrokerId, Member>,
    pub http: reqwest::Client,
    pub ttl_ms: u64,
}

/// The session TTL the tests run with. A live session expires if the process stalls for
/// longer than TTL − TTL/3 (the reaper then runs before the heartbeat), which a loaded
/// two-core machine does for hundreds of milliseconds at times: 1 s keeps that out.
pub const TTL_MS: u64 = 1_000;
/// How long a test waits for anything.
pub const WAIT: Duration = Duration::from_secs(20);

impl Cluster {
    /// Binds listeners for brokers `1..=n` and starts their servers, but no control
    /// plane. `top` are extra top-level node.toml lines, `sections` extra tables.
    pub async fn new(n: BrokerId, top: &str, sections: &str) -> Cluster {
        init_tracing();
        let quorum = LocalQuorum::start();
        let (store, _) = quorum.client();
        let mut bound = BTreeMap::new();
        for id in 1..=n {
            let client = TcpListener::bind("127.0.0.1:0").await.expect("bind client");
            let replication = TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind replication");
            let metadata = TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind metadata");
            bound.insert(id, (client, replication, metadata));
        }
        let addr = |l: &TcpListener| l.local_addr().expect("local addr");
        let peers: String = bound
            .iter()
            .map(|(id, (_, r, m))| {
                format!(
                    "[[brokers]]\nid = {id}\nreplication = \"{}\"\nmetadata = \"{}\"\n\n",
                    addr(r),
                    addr(m)
                )
            })
            .collect();
        let mut members = BTreeMap::new();
        for (id, (client, replication, metadata)) in bound {
            let text = format!(
                "broker_id = {id}\ndata_dir = \"/nonexistent/controller-test/b{id}\"\n{top}\n\n\
                 [listeners]\nclient = \"{}\"\nreplication = \"{}\"\nmetadata = \"{}\"\n\n\
                 [metadata]\nsession_timeout_ms = {TTL_MS}\n\n{sections}\n\n{peers}",
                addr(&client),
                addr(&replication),
                addr(&metadata),
            );
            let config = NodeConfig::parse("node.toml", &text).expect("test config");
            let host = Arc::new(Host {
                id,
                control_plane: RwLock::new(None),
                received: Mutex::new(Vec::new()),
                partitions: Mutex::new(BTreeMap::new()),
            });
            let replication_router = Router::new()
                .route("/v1/replication/leader-and-isr", post(stub_leader_and_isr))
                .merge(controller_routes::<Host>())
                .with_state(host.clone());
            let client_router = admin_routes::<Host>().with_state(host.clone());
            let servers = vec![
                tokio::spawn(async move {
                    let _ = axum::serve(replication, replication_router).await;
                }),
                tokio::spawn(async move {
                    let _ = axum::serve(client, client_router).await;
                }),
            ];
            drop(metadata);
            members.insert(
                id,
                Member {
                    config,
                    host,
                    link: None,
                    servers,
                },
            );
        }
        Cluster {
            quorum,
            store,
            members,
            http: reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(60))
                .build()
                .expect("http client"),
            ttl_ms: TTL_MS,
        }
    }

    /// A cluster of `n` brokers with every control plane started.
    pub async fn start(n: BrokerId, top: &str, sections: &str) -> Cluster {
        let mut cluster = Cluster::new(n, top, sections).await;
        for id in 1..=n {
            cluster.start_broker(id);
        }
        cluster
    }

    /// Starts (or restarts) broker `id`'s control plane with a fresh quorum link.
    pub fn start_broker(&mut self, id: BrokerId) {
        let member = self.members.get_mut(&id).expect("no such broker");
        let (client, link) = self.quorum.client();
        // These brokers host no partitions: no log ever fails.
        let (_, no_log_failures) = tokio::sync::watch::channel(Vec::new());
        let control_plane = ControlPlane::start(member.config.clone(), client, no_log_failures);
        *member
            .host
            .control_plane
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(control_plane);
        member.link = Some(link);
    }

    /// Kills broker `id`'s control plane (as kill -9); its stub listeners stay up.
    pub fn kill(&mut self, id: BrokerId) {
        let member = self.members.get_mut(&id).expect("no such broker");
        let taken = member
            .host
            .control_plane
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(control_plane) = taken {
            control_plane.kill();
        }
    }

    /// Stops broker `id`'s control plane gracefully.
    pub async fn shutdown(&mut self, id: BrokerId) {
        let member = self.members.get_mut(&id).expect("no such broker");
        let taken = member
            .host
            .control_plane
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(control_plane) = taken {
            control_plane.shutdown().await;
        }
    }

    pub fn control_plane(&self, id: BrokerId) -> ControlPlane {
        self.members[&id]
            .host
            .control_plane()
            .expect("broker is running")
    }

    pub fn host(&self, id: BrokerId) -> &Arc<Host> {
        &self.members[&id].host
    }

    pub fn link(&self, id: BrokerId) -> &LocalLink {
        self.members[&id].link.as_ref().expect("broker was started")
    }

    pub fn client_addr(&self, id: BrokerId) -> SocketAddr {
        self.members[&id].config.listeners.client
    }

    // ----- the store, as the test sees it ---------------------------------------------

    pub fn read<T>(&self, f: impl FnOnce(&MetadataState) -> T) -> T {
        self.store.read_local(|state, _| f(state))
    }

    /// `/controller`'s broker and `/controller_epoch`.
    pub fn controller(&self) -> Option<(BrokerId, ControllerEpoch)> {
        self.read(|state| {
            let id = layout::controller(state).expect("decodes")?;
            Some((id, layout::controller_epoch(state).expect("decodes").0))
        })
    }

    pub fn controller_epoch_version(&self) -> Option<u64> {
        self.read(|state| state.get(CONTROLLER_EPOCH).map(|(_, version)| version))
    }

    pub fn registered(&self) -> Vec<BrokerId> {
        self.read(|state| {
            layout::live_brokers(state)
                .expect("decodes")
                .into_iter()
                .map(|b| b.id)
                .collect()
        })
    }

    pub fn partition(&self, tp: &TopicPartition) -> Option<VersionedState> {
        self.read(|state| layout::partition_state(state, tp).expect("decodes"))
    }

    /// Writes a partition state conditionally, as a leader records its ISR changes.
    pub async fn leader_write(
        &self,
        tp: &TopicPartition,
        state: &PartitionState,
        expected_version: u64,
    ) -> Result<u64, QuorumError> {
        let op = Op::Set {
            path: layout::partition_state_path(tp),
            data: layout::encode(state),
            expected_version: Some(expected_version),
        };
        match self.store.propose(Command::Op(op)).await? {
            Reply::Op(broker::metadata::OpReply::Set { version }) => Ok(version),
            other => Err(QuorumError::Store(StoreError::InvalidPath {
                path: layout::partition_state_path(tp),
                reason: format!("unexpected reply {other:?}"),
            })),
        }
    }

    // ----- waiting ----------------------------------------------------------------------

    /// Waits until broker `id` is the controller (in the store and in its own view) and
    /// considers exactly `live` alive; returns its epoch.
    pub async fn wait_for_controller(&self, id: BrokerId, live: &[BrokerId]) -> ControllerEpoch {
        let mut epoch = 0;
        wait_until(
            WAIT,
            &format!("broker {id} controller with live {live:?}"),
            || {
                let control_plane = self.control_plane(id);
                let status = control_plane.status();
                let stored = self.controller();
                let holds = match (status.controller_epoch, stored) {
                    (Some(mine), Some((holder, stored))) => holder == id && mine == stored,
                    _ => false,
                };
                if holds {
                    epoch = status.controller_epoch.unwrap_or_default();
                }
                async move { holds && status.live_brokers == live }
            },
        )
        .await;
        epoch
    }

    /// Waits until some broker is controller with exactly `live` alive; returns it.
    pub async fn wait_for_any_controller(&self, live: &[BrokerId]) -> (BrokerId, ControllerEpoch) {
        let mut found = (0, 0);
        wait_until(WAIT, &format!("a controller with live {live:?}"), || {
            let result = self.controller().filter(|(id, epoch)| {
                self.members[id].host.control_plane().is_some_and(|cp| {
                    let status = cp.status();
                    status.controller_epoch == Some(*epoch) && status.live_brokers == live
                })
            });
            if let Some(result) = result {
                found = result;
            }
            async move { result.is_some() }
        })
        .await;
        found
    }

    /// Waits until the stub of `id` has received a LeaderAndIsr matching `pred`.
    pub async fn wait_received(
        &self,
        id: BrokerId,
        what: &str,
        pred: impl Fn(&Received) -> bool,
    ) -> Received {
        let mut found = None;
        wait_until(WAIT, &format!("broker {id} to receive {what}"), || {
            found = self.host(id).received().into_iter().find(|r| pred(r));
            let done = found.is_some();
            async move { done }
        })
        .await;
        found.expect("found")
    }

    pub async fn wait_partition(
        &self,
        tp: &TopicPartition,
        what: &str,
        pred: impl Fn(&VersionedState) -> bool,
    ) -> VersionedState {
        let mut found = None;
        wait_until(WAIT, &format!("{tp:?} to become {what}"), || {
            found = self.partition(tp).filter(|s| pred(s));
            let done = found.is_some();
            async move { done }
        })
        .await;
        found.expect("found")
    }

    // ----- admin ------------------------------------------------------------------------

    pub async fn admin(
        &self,
        id: BrokerId,
        request: AdminRequest,
    ) -> Result<AdminReply, AdminError> {
        self.control_plane(id).admin(request).await
    }

    pub async fn post(&self, id: BrokerId, path: &str, body: Value) -> (u16, Value) {
        let url = format!("http://{}{path}", self.client_addr(id));
        let response = self.http.post(url).json(&body).send().await.expect("POST");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub async fn get(&self, id: BrokerId, path: &str) -> (u16, Value) {
        let url = format!("http://{}{path}", self.client_addr(id));
        let response = self.http.get(url).send().await.expect("GET");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// Kills every control plane and stops the servers.
    pub fn stop(mut self) {
        let ids: Vec<_> = self.members.keys().copied().collect();
        for id in ids {
            self.kill(id);
        }
        for member in self.members.values() {
            for server in &member.servers {
                server.abort();
            }
        }
        self.quorum.stop();
    }
}

/// Logs to the test's captured output (shown when it fails); `RUST_LOG` overrides the
/// default level.
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("broker=info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

/// Polls `check` every 20 ms until it holds or `timeout` passes.
pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if check().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn tp(topic: &str, partition: u32) -> TopicPartition {
    TopicPartition::new(topic, partition)
}

pub fn state(
    leader: Option<BrokerId>,
    leader_epoch: u32,
    isr: &[BrokerId],
    controller_epoch: ControllerEpoch,
    replicas: &[BrokerId],
) -> PartitionState {
    PartitionState {
        leader,
        leader_epoch,
        isr: isr.to_vec(),
        controller_epoch,
        replicas: replicas.to_vec(),
    }
}
