//! An in-process cluster for the server tests: brokers on `127.0.0.1:0`, a shared
//! in-memory metadata quorum ([`LocalQuorum`]), and the test acting as controller (it
//! writes the partition state to the quorum and sends LeaderAndIsr to the replication
//! listeners).

#![allow(dead_code)] // each test file uses part of this

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use broker::config::NodeConfig;
use broker::metadata::{layout, Command, Op, OpReply, Reply};
use broker::quorum::local::{LocalLink, LocalQuorum};
use broker::quorum::MetadataClient;
use broker::replica::metadata::{PartitionState, TopicPartition, VersionedState};
use broker::replica::BrokerId;
use broker::server::wire::{LeaderAndIsrBody, ReplicaView, ReplicasReply};
use broker::server::{BoundListeners, Broker};
use serde_json::Value;
use tokio::net::TcpListener;

pub struct TestCluster {
    pub quorum: Arc<LocalQuorum>,
    /// The test's own client of the quorum (it plays controller).
    pub metadata: MetadataClient,
    /// Each broker's link to the quorum, to cut it off.
    pub links: BTreeMap<BrokerId, LocalLink>,
    /// Brokers that run their own control plane.
    control_planes: std::collections::BTreeSet<BrokerId>,
    root: PathBuf,
    pub configs: BTreeMap<BrokerId, NodeConfig>,
    brokers: BTreeMap<BrokerId, Broker>,
    pub http: reqwest::Client,
    /// Signs what the test sends to the replication listeners as the controller (broker
    /// 1), with the cluster secret of `settings` if they name one.
    pub signer: peer_auth::Signer,
    pub controller_epoch: u32,
}

/// Per-process unique directory names, so parallel tests never share a data dir.
static NEXT_CLUSTER: AtomicU64 = AtomicU64::new(0);

impl TestCluster {
    /// Starts `n` brokers (ids 1..=n); `settings` are extra top-level node.toml lines.
    pub async fn start(n: u32, settings: &str) -> TestCluster {
        let root = std::env::temp_dir().join(format!(
            "broker-server-test-{}-{}",
            std::process::id(),
            NEXT_CLUSTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&root);
        let mut listeners = BTreeMap::new();
        for id in 1..=n {
            let client = TcpListener::bind("127.0.0.1:0").await.expect("bind client");
            let replication = TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind replication");
            listeners.insert(id, (client, replication));
        }
        let addr = |l: &TcpListener| l.local_addr().expect("local addr");
        let peers: String = listeners
            .iter()
            .map(|(id, (_, r))| {
                format!(
                    "[[brokers]]\nid = {id}\nreplication = \"{}\"\nmetadata = \"127.0.0.1:0\"\n\n",
                    addr(r)
                )
            })
            .collect();
        let quorum = LocalQuorum::start();
        let (metadata, _) = quorum.client();
        for path in layout::BASE_PATHS {
            let create = Command::Op(Op::Create {
                path: path.to_string(),
                data: Vec::new(),
                ephemeral_session: None,
            });
            metadata.propose(create).await.expect("create base path");
        }
        let mut cluster = TestCluster {
            quorum,
            metadata,
            links: BTreeMap::new(),
            control_planes: Default::default(),
            root: root.clone(),
            configs: BTreeMap::new(),
            brokers: BTreeMap::new(),
            http: reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(30))
                .build()
                .expect("http client"),
            signer: peer_auth::Signer::new(None, peer_auth::Sender::Broker(1)),
            controller_epoch: 1,
        };
        for (id, (client, replication)) in listeners {
            let text = format!(
                "broker_id = {id}\ndata_dir = \"{}\"\nenable_failpoints = true\n{settings}\n\n[listeners]\nclient = \"{}\"\nreplication = \"{}\"\nmetadata = \"127.0.0.1:0\"\n\n{peers}",
                root.join(format!("b{id}")).display(),
                addr(&client),
                addr(&replication),
            );
            let config = NodeConfig::parse("node.toml", &text).expect("test config");
            cluster.signer =
                peer_auth::Signer::new(config.cluster_secret.clone(), peer_auth::Sender::Broker(1));
            cluster.configs.insert(id, config.clone());
            let (metadata, link) = cluster.quorum.client();
            cluster.links.insert(id, link);
            let broker = Broker::start_on(
                config,
                metadata,
                BoundListeners {
                    client,
                    replication,
                },
            )
            .await
            .expect("start broker");
            cluster.brokers.insert(id, broker);
        }
        cluster
    }

    /// Starts broker `id`'s control plane (session, registration, controller) on its
    /// link to the quorum, instead of the test playing controller; a restart starts it
    /// again.
    pub fn start_control_plane(&mut self, id: BrokerId) {
        self.control_planes.insert(id);
        if let Some(broker) = self.brokers.get(&id) {
            broker.start_control_plane();
        }
    }

    /// The controller and its epoch, as the quorum holds them.
    pub fn controller(&self) -> Option<(BrokerId, u32)> {
        self.metadata.read_local(|state, _| {
            let id = layout::controller(state).ok().flatten()?;
            let (epoch, _) = layout::controller_epoch(state).ok()?;
            Some((id, epoch))
        })
    }

    pub fn is_up(&self, id: BrokerId) -> bool {
        self.brokers.contains_key(&id)
    }

    pub fn client_addr(&self, id: BrokerId) -> SocketAddr {
        self.configs[&id].listeners.client
    }

    pub fn replication_addr(&self, id: BrokerId) -> SocketAddr {
        self.configs[&id].listeners.replication
    }

    pub async fn kill(&mut self, id: BrokerId) {
        if let Some(broker) = self.brokers.remove(&id) {
            broker.kill().await;
        }
    }

    pub async fn shutdown(&mut self, id: BrokerId) {
        if let Some(broker) = self.brokers.remove(&id) {
            broker.shutdown().await;
        }
    }

    /// Starts `id` again on its old addresses and data directory.
    pub async fn restart(&mut self, id: BrokerId) {
        assert!(!self.is_up(id), "broker {id} is running");
        let config = self.configs[&id].clone();
        let mut attempts = 0;
        let listeners = loop {
            match BoundListeners::bind(&config).await {
                Ok(listeners) => break listeners,
                // The old sockets may take a moment to be released.
                Err(error) if attempts < 50 => {
                    attempts += 1;
                    let _ = error;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(error) => panic!("rebind broker {id}: {error}"),
            }
        };
        let (client, link) = self.quorum.client();
        self.links.insert(id, link);
        let broker = Broker::start_on(config, client, listeners)
            .await
            .expect("restart broker");
        if self.control_planes.contains(&id) {
            broker.start_control_plane();
        }
        self.brokers.insert(id, broker);
    }

    /// Stops every broker (gracefully) and removes the data directories.
    pub async fn stop(mut self) {
        let ids: Vec<_> = self.brokers.keys().copied().collect();
        for id in ids {
            self.shutdown(id).await;
        }
    }

    // ----- the controller -----------------------------------------------------------

    pub fn stored(&self, tp: &TopicPartition) -> Option<VersionedState> {
        self.metadata
            .read_local(|state, _| layout::partition_state(state, tp))
            .expect("partition state decodes")
    }

    pub fn stored_isr(&self, tp: &TopicPartition) -> Vec<BrokerId> {
        self.stored(tp).map(|s| s.state.isr).unwrap_or_default()
    }

    /// Creates the partition (first replica leads, all in the ISR) and tells the replicas.
    pub async fn create_partition(&self, tp: &TopicPartition, replicas: &[BrokerId]) {
        let state = PartitionState {
            leader: replicas.first().copied(),
            leader_epoch: 0,
            isr: replicas.to_vec(),
            controller_epoch: self.controller_epoch,
            replicas: replicas.to_vec(),
        };
        let parent = format!("{}/{}", layout::PARTITIONS, tp.topic);
        let mut ops = Vec::new();
        if !self.metadata.read_local(|s, _| s.exists(&parent)) {
            ops.push(Op::Create {
                path: parent.clone(),
                data: Vec::new(),
                ephemeral_session: None,
            });
        }
        ops.push(Op::Create {
            path: format!("{parent}/{}", tp.partition),
            data: Vec::new(),
            ephemeral_session: None,
        });
        ops.push(Op::Create {
            path: layout::partition_state_path(tp),
            data: layout::encode(&state),
            ephemeral_session: None,
        });
        self.metadata
            .propose(Command::Multi(ops))
            .await
            .expect("create partition");
        let version = 0;
        self.announce(tp, &VersionedState { state, version }, None)
            .await;
    }

    /// A new leader and ISR, with the epoch bumped, written and announced.
    pub async fn elect(&self, tp: &TopicPartition, leader: BrokerId, isr: &[BrokerId]) {
        let elected = self.write_election(tp, leader, isr).await;
        self.announce(tp, &elected, None).await;
    }

    /// Elects like [`Self::elect`] but tells only the brokers in `to`.
    pub async fn elect_telling(
        &self,
        tp: &TopicPartition,
        leader: BrokerId,
        isr: &[BrokerId],
        to: &[BrokerId],
    ) {
        let elected = self.write_election(tp, leader, isr).await;
        for &id in to {
            self.announce(tp, &elected, Some(id)).await;
        }
    }

    /// Writes a new leader and ISR with the leader epoch bumped, conditionally on the
    /// stored version, as a controller does.
    async fn write_election(
        &self,
        tp: &TopicPartition,
        leader: BrokerId,
        isr: &[BrokerId],
    ) -> VersionedState {
        let current = self.stored(tp).expect("partition exists");
        let state = PartitionState {
            leader: Some(leader),
            leader_epoch: current.state.leader_epoch + 1,
            isr: isr.to_vec(),
            controller_epoch: self.controller_epoch,
            replicas: current.state.replicas.clone(),
        };
        let set = Command::Op(Op::Set {
            path: layout::partition_state_path(tp),
            data: layout::encode(&state),
            expected_version: Some(current.version),
        });
        match self.metadata.propose(set).await {
            Ok(Reply::Op(OpReply::Set { version })) => VersionedState { state, version },
            other => panic!("write partition state: {other:?}"),
        }
    }

    /// Sends the stored state to one broker (as a controller does when it comes back).
    pub async fn resend_leader_and_isr(&self, tp: &TopicPartition, to: BrokerId) {
        let current = self.stored(tp).expect("partition exists");
        self.announce(tp, &current, Some(to)).await;
    }

    async fn announce(&self, tp: &TopicPartition, state: &VersionedState, only: Option<BrokerId>) {
        let Some(leader) = state.state.leader else {
            return;
        };
        let body = LeaderAndIsrBody {
            topic: tp.topic.clone(),
            partition: tp.partition,
            controller_epoch: state.state.controller_epoch,
            leader,
            leader_epoch: state.state.leader_epoch,
            isr: state.state.isr.clone(),
            version: state.version,
            replicas: state.state.replicas.clone(),
        };
        for &id in &state.state.replicas {
            if only.is_some_and(|o| o != id) || !self.is_up(id) {
                continue;
            }
            let url = format!(
                "http://{}/v1/replication/leader-and-isr",
                self.replication_addr(id)
            );
            let response = self
                .signer
                .send(&self.http, self.http.post(url).json(&body))
                .await
                .expect("send LeaderAndIsr");
            assert!(
                response.status().is_success(),
                "LeaderAndIsr to {id}: {} {:?}",
                response.status(),
                response.text().await
            );
        }
    }

    // ----- clients --------------------------------------------------------------------

    pub fn records_url(&self, id: BrokerId, tp: &TopicPartition) -> String {
        format!(
            "http://{}/v1/topics/{}/partitions/{}/records",
            self.client_addr(id),
            tp.topic,
            tp.partition
        )
    }

    /// POSTs `body` (raw text) to the records endpoint: (status, JSON answer).
    pub async fn post_records(
        &self,
        id: BrokerId,
        tp: &TopicPartition,
        body: &str,
    ) -> (u16, Value) {
        let response = self
            .http
            .post(self.records_url(id, tp))
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .await
            .expect("produce request");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub async fn get(&self, url: &str) -> (u16, Value) {
        let response = self.http.get(url).send().await.expect("GET");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// Reads from the leader `id`: (status, answer).
    pub async fn read(&self, id: BrokerId, tp: &TopicPartition, query: &str) -> (u16, Value) {
        self.get(&format!("{}?{query}", self.records_url(id, tp)))
            .await
    }

    /// The values below the HW on `id` from offset 0 (all of them, up to 10000).
    pub async fn committed_values(&self, id: BrokerId, tp: &TopicPartition) -> Vec<Value> {
        let (status, body) = self.read(id, tp, "offset=0&max=10000").await;
        assert_eq!(status, 200, "read from {id}: {body}");
        body["records"]
            .as_array()
            .expect("records")
            .iter()
            .map(|r| r["value"].clone())
            .collect()
    }

    pub async fn replica(&self, id: BrokerId, tp: &TopicPartition) -> Option<ReplicaView> {
        let url = format!("http://{}/v1/debug/replicas", self.client_addr(id));
        let reply: ReplicasReply = self.http.get(url).send().await.ok()?.json().await.ok()?;
        reply
            .replicas
            .into_iter()
            .find(|r| r.topic == tp.topic && r.partition == tp.partition)
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
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
