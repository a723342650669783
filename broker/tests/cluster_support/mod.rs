//! A cluster of real `broker` processes on loopback, forming by itself from their
//! configuration files (metadata quorum, controller), for the control-plane tests and the
//! failover benchmark. `kill` is SIGKILL: nothing is flushed or checkpointed.

#![allow(dead_code)] // each test file uses part of this

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub type BrokerId = u32;

/// Settings short enough for tests; the failover bench overrides the session timeout.
pub const FAST_SETTINGS: &str = "min_insync_replicas = 2\nreplica_lag_time_max_ms = 2000\nreplica_fetch_wait_max_ms = 200\n\n[metadata]\nsession_timeout_ms = 3000\nraft_heartbeat_ms = 100\nelection_timeout_min_ms = 600\nelection_timeout_max_ms = 1200\n";

static NEXT_CLUSTER: AtomicU64 = AtomicU64::new(0);

pub struct Node {
    pub client: String,
    pub replication: String,
    pub metadata: String,
    pub config: PathBuf,
    pub log: PathBuf,
    child: Option<Child>,
}

pub struct ProcessCluster {
    pub root: PathBuf,
    pub nodes: BTreeMap<BrokerId, Node>,
    pub http: reqwest::Client,
    bugs: Vec<String>,
}

/// Ports this process has handed out, so that two clusters of one test binary never share.
static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());

/// A port that was free a moment ago, below the kernel's ephemeral range. A port the
/// kernel hands out with `bind(0)` is an ephemeral one: between our release and the
/// broker's bind, any outgoing connection (the brokers of other clusters talk a lot) can
/// take it, and the broker then fails with "Address already in use".
pub fn free_port() -> u16 {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (low, high) = (10_000u16, ephemeral_low.max(10_001));
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    // Spread concurrent test processes over the range: start from a point that depends on
    // the pid and the time, then walk.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let span = u32::from(high - low);
    let mut offset = (std::process::id().wrapping_mul(7919) ^ nanos) % span;
    for _ in 0..span {
        let port = low + offset as u16;
        offset = (offset + 97) % span;
        if handed_out.contains(&port) {
            continue;
        }
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed_out.push(port);
            return port;
        }
    }
    panic!("no free port in {low}..{high}")
}

impl ProcessCluster {
    /// Starts `n` brokers (ids 1..=n); `settings` is node.toml text before the
    /// `[listeners]` table (top-level keys, then optionally `[metadata]` etc.).
    pub fn start(n: u32, settings: &str, bugs: &[&str]) -> ProcessCluster {
        let root = std::env::temp_dir().join(format!(
            "broker-cluster-{}-{}",
            std::process::id(),
            NEXT_CLUSTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).expect("cluster dir");
        let ports: BTreeMap<BrokerId, (u16, u16, u16)> = (1..=n)
            .map(|id| (id, (free_port(), free_port(), free_port())))
            .collect();
        let peers: String = ports
            .iter()
            .map(|(id, (_, r, m))| {
                format!(
                    "[[brokers]]\nid = {id}\nreplication = \"127.0.0.1:{r}\"\nmetadata = \"127.0.0.1:{m}\"\n\n"
                )
            })
            .collect();
        // Top-level keys must come before any table; split the caller's settings.
        let (top, tables) = match settings.find("\n[") {
            Some(at) => settings.split_at(at),
            None => (settings, ""),
        };
        let mut nodes = BTreeMap::new();
        for (&id, &(c, r, m)) in &ports {
            let dir = root.join(format!("n{id}"));
            std::fs::create_dir_all(&dir).expect("node dir");
            let text = format!(
                "broker_id = {id}\ndata_dir = \"{}\"\n{top}\n\n[listeners]\nclient = \"127.0.0.1:{c}\"\nreplication = \"127.0.0.1:{r}\"\nmetadata = \"127.0.0.1:{m}\"\n\n{peers}{tables}\n",
                dir.join("data").display()
            );
            let config = dir.join("node.toml");
            std::fs::write(&config, text).expect("write node.toml");
            nodes.insert(
                id,
                Node {
                    client: format!("127.0.0.1:{c}"),
                    replication: format!("127.0.0.1:{r}"),
                    metadata: format!("127.0.0.1:{m}"),
                    config,
                    log: dir.join("broker.log"),
                    child: None,
                },
            );
        }
        let mut cluster = ProcessCluster {
            root,
            nodes,
            http: reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(15))
                .build()
                .expect("http client"),
            bugs: bugs.iter().map(|b| b.to_string()).collect(),
        };
        let ids: Vec<BrokerId> = cluster.nodes.keys().copied().collect();
        for id in ids {
            cluster.spawn(id);
        }
        cluster
    }

    fn spawn(&mut self, id: BrokerId) {
        let node = self.nodes.get_mut(&id).expect("known node");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)
            .expect("broker log");
        let mut command = Command::new(env!("CARGO_BIN_EXE_broker"));
        command.arg("--config").arg(&node.config);
        for bug in &self.bugs {
            command.args(["--bug", bug]);
        }
        let child = command
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn broker");
        node.child = Some(child);
    }

    pub fn ids(&self) -> Vec<BrokerId> {
        self.nodes.keys().copied().collect()
    }

    pub fn is_up(&self, id: BrokerId) -> bool {
        self.nodes[&id].child.is_some()
    }

    pub fn live(&self) -> Vec<BrokerId> {
        self.ids()
            .into_iter()
            .filter(|id| self.is_up(*id))
            .collect()
    }

    /// SIGKILL: the process gets no chance to flush or checkpoint anything.
    pub fn kill(&mut self, id: BrokerId) {
        if let Some(mut child) = self.nodes.get_mut(&id).and_then(|n| n.child.take()) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a killed broker again on its old ports and data directory.
    pub fn restart(&mut self, id: BrokerId) {
        assert!(!self.is_up(id), "broker {id} is running");
        self.spawn(id);
    }

    pub fn url(&self, id: BrokerId, path: &str) -> String {
        format!("http://{}{path}", self.nodes[&id].client)
    }

    pub async fn get(&self, id: BrokerId, path: &str) -> Option<(u16, Value)> {
        let response = self.http.get(self.url(id, path)).send().await.ok()?;
        let status = response.status().as_u16();
        Some((status, response.json().await.unwrap_or(Value::Null)))
    }

    pub async fn post(&self, id: BrokerId, path: &str, body: &Value) -> Option<(u16, Value)> {
        let response = self
            .http
            .post(self.url(id, path))
            .json(body)
            .send()
            .await
            .ok()?;
        let status = response.status().as_u16();
        Some((status, response.json().await.unwrap_or(Value::Null)))
    }

    /// `GET /v1/metadata` from the first live broker that answers 200.
    pub async fn metadata(&self) -> Option<Value> {
        for id in self.live() {
            if let Some((200, body)) = self.get(id, "/v1/metadata").await {
                return Some(body);
            }
        }
        None
    }

    /// Waits until every broker of the cluster is registered (listed in `/v1/metadata`):
    /// brokers register with the controller on their own schedule, a learner of the
    /// quorum possibly after the topic already serves. Fails after `timeout` with the last
    /// metadata seen and the brokers' logs.
    pub async fn wait_registered(&self, timeout: Duration) {
        let want: Vec<BrokerId> = self.ids();
        let deadline = Instant::now() + timeout;
        loop {
            let metadata = self.metadata().await;
            let registered: Vec<BrokerId> = metadata
                .as_ref()
                .and_then(|m| m["brokers"].as_array())
                .map(|brokers| {
                    let mut ids: Vec<BrokerId> = brokers
                        .iter()
                        .filter_map(|b| b["id"].as_u64())
                        .filter_map(|id| BrokerId::try_from(id).ok())
                        .collect();
                    ids.sort_unstable();
                    ids
                })
                .unwrap_or_default();
            if registered == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "brokers {want:?} not all registered within {timeout:?}: registered {registered:?}; last metadata: {}\n{}",
                metadata.map_or_else(|| "none answered".to_string(), |m| m.to_string()),
                self.logs_tail()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The partition's entry in `/v1/metadata`.
    pub async fn partition(&self, topic: &str, partition: u32) -> Option<Value> {
        let metadata = self.metadata().await?;
        metadata["topics"]
            .as_array()?
            .iter()
            .find(|t| t["topic"] == json!(topic))?["partitions"]
            .as_array()?
            .iter()
            .find(|p| p["partition"] == json!(partition))
            .cloned()
    }

    pub async fn controller(&self) -> Option<(BrokerId, u64)> {
        let metadata = self.metadata().await?;
        let id = metadata["controller"]["id"].as_u64()?;
        let epoch = metadata["controller"]["epoch"].as_u64()?;
        Some((u32::try_from(id).ok()?, epoch))
    }

    pub async fn metadata_leader(&self) -> Option<BrokerId> {
        let metadata = self.metadata().await?;
        u32::try_from(metadata["metadata_leader"].as_u64()?).ok()
    }

    pub async fn leader(&self, topic: &str, partition: u32) -> Option<BrokerId> {
        let state = self.partition(topic, partition).await?;
        u32::try_from(state["leader"].as_u64()?).ok()
    }

    /// Creates a topic through any live broker (retrying until one accepts).
    pub async fn create_topic(&self, topic: &str, partitions: u32, replication_factor: u32) {
        let body = json!({"topic": topic, "partitions": partitions, "replication_factor": replication_factor});
        wait_until(Duration::from_secs(30), "topic created", || async {
            for id in self.live() {
                match self.post(id, "/v1/topics", &body).await {
                    Some((200, _)) => return true,
                    Some((_, answer)) if answer["error"] == json!("topic_exists") => return true,
                    _ => {}
                }
            }
            false
        })
        .await;
    }

    /// Waits until a controller is elected and every partition of `topic` has a live
    /// leader that accepts reads.
    pub async fn wait_serving(&self, topic: &str, partitions: u32, timeout: Duration) {
        wait_until(timeout, "cluster serving", || async {
            if self.controller().await.is_none() {
                return false;
            }
            for p in 0..partitions {
                let Some(leader) = self.leader(topic, p).await else {
                    return false;
                };
                if !self.is_up(leader) {
                    return false;
                }
                let path = format!("/v1/topics/{topic}/partitions/{p}/records?offset=0&max=1");
                if !matches!(self.get(leader, &path).await, Some((200, _))) {
                    return false;
                }
            }
            true
        })
        .await;
    }

    /// Waits until every partition of `topic` has all its replicas in the ISR.
    pub async fn wait_full_isr(&self, topic: &str, partitions: u32, timeout: Duration) {
        wait_until(timeout, "every replica back in its ISR", || async {
            let Some(metadata) = self.metadata().await else {
                return false;
            };
            let Some(topic) = metadata["topics"]
                .as_array()
                .and_then(|ts| ts.iter().find(|t| t["topic"] == json!(topic)))
            else {
                return false;
            };
            let states = topic["partitions"].as_array().cloned().unwrap_or_default();
            states.len() == partitions as usize
                && states.iter().all(|p| {
                    p["isr"].as_array().map(Vec::len) == p["replicas"].as_array().map(Vec::len)
                })
        })
        .await;
    }

    /// One acks=all produce to the partition's current leader: `Ok(offset)`, or the
    /// error (status and body, or "no leader" / transport failure).
    pub async fn produce(&self, topic: &str, partition: u32, value: &Value) -> Result<u64, String> {
        let leader = self
            .leader(topic, partition)
            .await
            .ok_or_else(|| "no leader".to_string())?;
        if !self.is_up(leader) {
            return Err(format!("leader {leader} is down"));
        }
        let path = format!("/v1/topics/{topic}/partitions/{partition}/records");
        match self
            .post(
                leader,
                &path,
                &json!({"value": value, "acks": "all", "timeout_ms": 3000}),
            )
            .await
        {
            Some((200, body)) => body["offset"]
                .as_u64()
                .ok_or_else(|| format!("no offset in {body}")),
            Some((status, body)) => Err(format!("{status} {body}")),
            None => Err("no answer".into()),
        }
    }

    /// Produces until one write is acknowledged or `timeout` passes; the time it took.
    pub async fn produce_until_acked(
        &self,
        topic: &str,
        partition: u32,
        value: &Value,
        timeout: Duration,
    ) -> Duration {
        let start = Instant::now();
        loop {
            if self.produce(topic, partition, value).await.is_ok() {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < timeout,
                "no acknowledged write within {timeout:?}\n{}",
                self.logs_tail()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the leader of every partition of `topic` has its high watermark at its
    /// log end (its followers caught up): after a restart the HW starts from its last
    /// checkpoint and a read would see only part of the committed records until then.
    pub async fn wait_caught_up(&self, topic: &str, partitions: u32, timeout: Duration) {
        wait_until(timeout, "every leader's HW at its log end", || async {
            for p in 0..partitions {
                let Some(leader) = self.leader(topic, p).await else {
                    return false;
                };
                let Some((200, body)) = self.get(leader, "/v1/debug/replicas").await else {
                    return false;
                };
                let caught_up = body["replicas"].as_array().is_some_and(|rs| {
                    rs.iter().any(|r| {
                        r["topic"] == json!(topic)
                            && r["partition"] == json!(p)
                            && r["role"] == json!("leader")
                            && r["high_watermark"] == r["log_end_offset"]
                    })
                });
                if !caught_up {
                    return false;
                }
            }
            true
        })
        .await;
    }

    /// Every committed value of the partition, read from its leader from offset 0.
    pub async fn committed_values(&self, topic: &str, partition: u32) -> Vec<Value> {
        let mut values = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(leader) = self.leader(topic, partition).await {
                let path = format!(
                    "/v1/topics/{topic}/partitions/{partition}/records?offset={}&max=10000",
                    values.len()
                );
                if let Some((200, body)) = self.get(leader, &path).await {
                    let records = body["records"].as_array().cloned().unwrap_or_default();
                    if records.is_empty() {
                        return values;
                    }
                    values.extend(records.into_iter().map(|r| r["value"].clone()));
                    continue;
                }
            }
            assert!(Instant::now() < deadline, "cannot read {topic}/{partition}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The last lines of every broker's log, for assertion messages.
    pub fn logs_tail(&self) -> String {
        let mut out = String::new();
        for (id, node) in &self.nodes {
            let text = std::fs::read_to_string(&node.log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let from = lines.len().saturating_sub(15);
            out.push_str(&format!(
                "--- broker {id} ---\n{}\n",
                lines[from..].join("\n")
            ));
        }
        out
    }
}

impl Drop for ProcessCluster {
    fn drop(&mut self) {
        for id in self.ids() {
            self.kill(id);
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

/// Polls `check` every 50 ms until it holds or `timeout` passes.
pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
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
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
