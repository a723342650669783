//! The cluster under test: the broker binary, one `node.toml` per node, the broker
//! processes started through a [`Backend`], and the wait until the cluster serves.
//!
//! Every node gets the same three ports on its own address (client 9092, replication
//! 9093, metadata 9094), its files under `<root>/<node>/` on the node (`node.toml`,
//! `data/`, `broker.log`), and the settings of `--broker-config KEY=VALUE`, where a
//! dotted key names a table (`metadata.session_timeout_ms=3000`).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use backend::{Backend, BackendError, Signal};
use workloads::{Target, TargetNode};

pub const CLIENT_PORT: u16 = 9092;
pub const REPLICATION_PORT: u16 = 9093;
pub const METADATA_PORT: u16 = 9094;

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("cannot build the broker ({command}): {reason}")]
    Build { command: String, reason: String },
    #[error("--broker-config {setting:?}: {reason}")]
    Setting { setting: String, reason: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    NotServing(String),
}

/// How the cluster is made.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    /// The broker binary to run on every node.
    pub broker_bin: PathBuf,
    /// `KAFKA-nnnn` switches to turn on.
    pub bugs: Vec<String>,
    /// `KEY=VALUE` settings for every node.toml.
    pub settings: Vec<String>,
    /// `KEY=VALUE` settings of single nodes (by name), applied after `settings`.
    pub node_settings: BTreeMap<String, Vec<String>>,
    /// Where each node's files go on the node (a folder per node is made inside).
    pub root: PathBuf,
    /// The run folder's `nodes/` on this machine: files on their way to the nodes are
    /// staged here, and each node's log comes back to `<local_dir>/<node>/`. The same
    /// folder as `root` when the nodes share this machine's file system (netns).
    pub local_dir: PathBuf,
    /// Copy `broker_bin` to every node (`<node dir>/broker`) and run that copy: for nodes
    /// on other machines (ssh). Otherwise every node runs `broker_bin` itself.
    pub install_broker: bool,
}

/// One broker node.
#[derive(Debug, Clone)]
pub struct ClusterNode {
    /// `n1`, `n2`, ...
    pub name: String,
    pub broker_id: u32,
    pub address: IpAddr,
    /// The node's folder on the node.
    pub dir: PathBuf,
}

impl ClusterNode {
    pub fn client(&self) -> SocketAddr {
        SocketAddr::new(self.address, CLIENT_PORT)
    }

    pub fn client_url(&self) -> String {
        format!("http://{}", self.client())
    }

    pub fn log_file(&self) -> PathBuf {
        self.dir.join("broker.log")
    }

    /// The broker's data directory (`data_dir` of its node.toml).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }
}

/// The brokers of a test and how to act on them.
///
/// Shared (`&self` throughout, e.g. in an `Arc`) by the workload phase, the nemesis and
/// the runner: the pids of the running brokers sit behind a lock of their own, held only
/// to read or record a pid, never across an await.
pub struct Cluster {
    pub backend: Arc<dyn Backend>,
    pub spec: ClusterSpec,
    pub nodes: Vec<ClusterNode>,
    /// Node name → the pid of its broker, while it runs (as far as the harness knows:
    /// a broker that exits on its own keeps its entry; see [`Cluster::is_running`]).
    pids: Mutex<BTreeMap<String, u32>>,
    http: reqwest::Client,
}

/// Builds the broker of this workspace with its failpoints compiled in, in the profile
/// the harness itself was built with, and returns the binary's path.
pub fn build_broker() -> Result<PathBuf, ClusterError> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let release = !cfg!(debug_assertions);
    let mut args = vec![
        "build",
        "-p",
        "broker",
        "--features",
        "failpoints",
        "--message-format=json-render-diagnostics",
    ];
    if release {
        args.push("--release");
    }
    let command = format!("cargo {}", args.join(" "));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let output = Command::new(cargo)
        .args(&args)
        .current_dir(&workspace)
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| ClusterError::Build {
            command: command.clone(),
            reason: format!("{e} (run from a checkout of the project, or pass --broker-bin PATH)"),
        })?;
    if !output.status.success() {
        return Err(ClusterError::Build {
            command,
            reason: format!("exit status {}", output.status),
        });
    }
    // The last artifact message for the broker binary names the executable.
    let text = String::from_utf8_lossy(&output.stdout);
    let executable = text
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|m| {
            m["reason"] == json!("compiler-artifact")
                && m["target"]["name"] == json!("broker")
                && m["target"]["kind"]
                    .as_array()
                    .is_some_and(|k| k.contains(&json!("bin")))
        })
        .filter_map(|m| m["executable"].as_str().map(PathBuf::from))
        .next_back();
    executable.ok_or_else(|| ClusterError::Build {
        command,
        reason: "cargo named no broker executable".into(),
    })
}

/// Checks `--broker-config` settings without starting anything.
pub fn validate_settings(settings: &[String]) -> Result<(), ClusterError> {
    let mut table = toml::Table::new();
    for setting in settings {
        apply_setting(&mut table, setting)?;
    }
    Ok(())
}

/// One `--broker-config KEY=VALUE` applied to a node.toml table. The value is read as
/// TOML (`3000`, `true`, `"os_only"`, `[1, 2]`) and, failing that, as a string.
pub fn apply_setting(table: &mut toml::Table, setting: &str) -> Result<(), ClusterError> {
    let refuse = |reason: &str| ClusterError::Setting {
        setting: setting.to_string(),
        reason: reason.to_string(),
    };
    let (key, value) = setting
        .split_once('=')
        .ok_or_else(|| refuse("expected KEY=VALUE"))?;
    let key = key.trim();
    let value_text = value.trim();
    if key.is_empty() || key.split('.').any(str::is_empty) {
        return Err(refuse("empty key"));
    }
    let value: toml::Value = match format!("v = {value_text}").parse::<toml::Table>() {
        Ok(mut parsed) => parsed
            .remove("v")
            .unwrap_or_else(|| toml::Value::String(value_text.to_string())),
        Err(_) => toml::Value::String(value_text.to_string()),
    };
    let mut parts: Vec<&str> = key.split('.').collect();
    let last = parts.pop().unwrap_or_default();
    let mut current = table;
    for part in parts {
        let entry = current
            .entry(part.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        current = entry
            .as_table_mut()
            .ok_or_else(|| refuse(&format!("`{part}` is not a table")))?;
    }
    if matches!(
        last,
        "broker_id" | "data_dir" | "listeners" | "brokers" | "bugs"
    ) {
        return Err(refuse(
            "set by the harness (use --bug for bug switches, --nodes for the cluster)",
        ));
    }
    current.insert(last.to_string(), value);
    Ok(())
}

impl Cluster {
    /// Describes the nodes of `backend`; nothing is started yet.
    pub fn new(backend: Arc<dyn Backend>, spec: ClusterSpec) -> Result<Cluster, ClusterError> {
        let mut nodes = Vec::new();
        for (i, name) in backend.nodes().into_iter().enumerate() {
            let address = backend.address(&name)?;
            nodes.push(ClusterNode {
                dir: spec.root.join(&name),
                name,
                broker_id: u32::try_from(i + 1).unwrap_or(u32::MAX),
                address,
            });
        }
        Ok(Cluster {
            backend,
            spec,
            nodes,
            pids: Mutex::new(BTreeMap::new()),
            http: reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(5))
                .build()
                .map_err(|e| ClusterError::NotServing(format!("HTTP client: {e}")))?,
        })
    }

    /// The workload's view of the cluster.
    pub fn target(&self, topic: &str, partitions: u32) -> Target {
        Target {
            nodes: self
                .nodes
                .iter()
                .map(|n| TargetNode {
                    name: n.name.clone(),
                    broker_id: n.broker_id,
                    client_url: n.client_url(),
                })
                .collect(),
            topic: topic.to_string(),
            partitions,
        }
    }

    pub fn node(&self, name: &str) -> Option<&ClusterNode> {
        self.nodes.iter().find(|n| n.name == name)
    }

    fn pids(&self) -> MutexGuard<'_, BTreeMap<String, u32>> {
        // The map stays consistent whatever panicked while holding the lock.
        self.pids
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The pid of `name`'s broker, if the harness started it and has not killed or
    /// stopped it since.
    pub fn pid(&self, name: &str) -> Option<u32> {
        self.pids().get(name).copied()
    }

    /// Whether `name`'s broker runs: started, not killed, and not exited on its own (a
    /// paused broker runs).
    pub async fn is_running(&self, name: &str) -> bool {
        match self.pid(name) {
            Some(pid) => self.backend.is_running(name, pid).await.unwrap_or(false),
            None => false,
        }
    }

    /// The node.toml of `node`.
    pub fn node_config(&self, node: &ClusterNode) -> Result<String, ClusterError> {
        let mut table = toml::Table::new();
        table.insert(
            "broker_id".into(),
            toml::Value::Integer(node.broker_id.into()),
        );
        table.insert(
            "data_dir".into(),
            toml::Value::String(node.dir.join("data").display().to_string()),
        );
        table.insert(
            "bugs".into(),
            toml::Value::Array(
                self.spec
                    .bugs
                    .iter()
                    .map(|b| toml::Value::String(b.clone()))
                    .collect(),
            ),
        );
        let own = self.spec.node_settings.get(&node.name);
        for setting in self.spec.settings.iter().chain(own.into_iter().flatten()) {
            apply_setting(&mut table, setting)?;
        }
        let mut listeners = toml::Table::new();
        for (name, port) in [
            ("client", CLIENT_PORT),
            ("replication", REPLICATION_PORT),
            ("metadata", METADATA_PORT),
        ] {
            listeners.insert(
                name.into(),
                toml::Value::String(SocketAddr::new(node.address, port).to_string()),
            );
        }
        table.insert("listeners".into(), toml::Value::Table(listeners));
        let brokers = self
            .nodes
            .iter()
            .map(|peer| {
                let mut entry = toml::Table::new();
                entry.insert("id".into(), toml::Value::Integer(peer.broker_id.into()));
                entry.insert(
                    "replication".into(),
                    toml::Value::String(
                        SocketAddr::new(peer.address, REPLICATION_PORT).to_string(),
                    ),
                );
                entry.insert(
                    "metadata".into(),
                    toml::Value::String(SocketAddr::new(peer.address, METADATA_PORT).to_string()),
                );
                toml::Value::Table(entry)
            })
            .collect();
        table.insert("brokers".into(), toml::Value::Array(brokers));
        toml::to_string(&table).map_err(|e| ClusterError::Setting {
            setting: self.spec.settings.join(" "),
            reason: e.to_string(),
        })
    }

    /// Writes every node's configuration and starts every broker.
    pub async fn start(&self) -> Result<(), ClusterError> {
        self.install_configs().await?;
        for i in 0..self.nodes.len() {
            let name = self.nodes[i].name.clone();
            self.start_node(&name).await?;
        }
        Ok(())
    }

    /// Writes every node's folder and `node.toml`; starts nothing.
    pub async fn install_configs(&self) -> Result<(), ClusterError> {
        for i in 0..self.nodes.len() {
            let node = self.nodes[i].clone();
            let config = self.node_config(&node)?;
            let local = self
                .spec
                .local_dir
                .join(format!(".{}-node.toml", node.name));
            std::fs::create_dir_all(&self.spec.local_dir).map_err(|source| ClusterError::Io {
                what: format!("cannot create {}", self.spec.local_dir.display()),
                source,
            })?;
            std::fs::write(&local, config).map_err(|source| ClusterError::Io {
                what: format!("cannot write {}", local.display()),
                source,
            })?;
            self.backend
                .exec(
                    &node.name,
                    &["mkdir".into(), "-p".into(), node.dir.display().to_string()],
                )
                .await?;
            self.backend
                .upload(&local, &node.name, &node.dir.join("node.toml"))
                .await?;
            let _ = std::fs::remove_file(&local);
        }
        if self.spec.install_broker {
            self.install_broker_everywhere().await?;
        }
        Ok(())
    }

    /// Copies the broker binary to every node at once (tens of MB each over ssh).
    async fn install_broker_everywhere(&self) -> Result<(), ClusterError> {
        let mut copies = tokio::task::JoinSet::new();
        for node in &self.nodes {
            let backend = Arc::clone(&self.backend);
            let local = self.spec.broker_bin.clone();
            let remote = self.broker_path(node);
            let name = node.name.clone();
            copies.spawn(async move {
                backend.upload(&local, &name, &remote).await?;
                let chmod = ["chmod".into(), "755".into(), remote.display().to_string()];
                backend.exec(&name, &chmod).await.map(|_| ())
            });
        }
        while let Some(copied) = copies.join_next().await {
            copied.map_err(|e| ClusterError::NotServing(format!("copying the broker: {e}")))??;
        }
        Ok(())
    }

    /// The broker binary a node runs: its own copy when the spec installs one.
    fn broker_path(&self, node: &ClusterNode) -> PathBuf {
        if self.spec.install_broker {
            node.dir.join("broker")
        } else {
            self.spec.broker_bin.clone()
        }
    }

    /// Starts (or restarts) one node's broker on its existing files. The caller makes sure
    /// it is not running already (two brokers cannot share the node's ports).
    pub async fn start_node(&self, name: &str) -> Result<u32, ClusterError> {
        let node = self
            .node(name)
            .cloned()
            .ok_or_else(|| ClusterError::NotServing(format!("no node {name}")))?;
        let argv = vec![
            self.broker_path(&node).display().to_string(),
            "--config".to_string(),
            node.dir.join("node.toml").display().to_string(),
        ];
        let pid = self
            .backend
            .spawn_daemon(&node.name, &argv, &node.log_file())
            .await?;
        self.pids().insert(node.name, pid);
        Ok(pid)
    }

    /// Sends `signal` to a node's broker.
    pub async fn signal(&self, name: &str, signal: Signal) -> Result<(), ClusterError> {
        if self.node(name).is_none() {
            return Err(ClusterError::NotServing(format!("no node {name}")));
        }
        if let Some(pid) = self.pid(name) {
            self.backend.signal(name, pid, signal).await?;
        }
        Ok(())
    }

    /// SIGKILL; the node keeps its files. The broker is forgotten at once (a
    /// [`Cluster::start_node`] may follow as soon as [`Cluster::is_running`] of the old
    /// pid is false: see [`Cluster::wait_exited`]).
    pub async fn kill_node(&self, name: &str) -> Result<(), ClusterError> {
        self.signal(name, Signal::Kill).await?;
        self.pids().remove(name);
        Ok(())
    }

    /// Waits (up to `timeout`) until the process `pid` of `name` is gone; whether it is.
    pub async fn wait_exited(&self, name: &str, pid: u32, timeout: Duration) -> bool {
        let start = Instant::now();
        loop {
            match self.backend.is_running(name, pid).await {
                Ok(false) | Err(_) => return true,
                Ok(true) if start.elapsed() >= timeout => return false,
                Ok(true) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }

    /// Stops every broker: SIGTERM, then SIGKILL for any still running after `grace`.
    pub async fn stop(&self, grace: Duration) -> Result<(), ClusterError> {
        let running: Vec<(String, u32)> = self
            .pids()
            .iter()
            .map(|(name, pid)| (name.clone(), *pid))
            .collect();
        for (name, pid) in &running {
            let _ = self.backend.signal(name, *pid, Signal::Cont).await;
            let _ = self.backend.signal(name, *pid, Signal::Term).await;
        }
        let deadline = Instant::now() + grace;
        for (name, pid) in running {
            while Instant::now() < deadline
                && self.backend.is_running(&name, pid).await.unwrap_or(false)
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            if self.backend.is_running(&name, pid).await.unwrap_or(false) {
                let _ = self.backend.signal(&name, pid, Signal::Kill).await;
            }
            let mut pids = self.pids();
            if pids.get(&name) == Some(&pid) {
                pids.remove(&name);
            }
        }
        Ok(())
    }

    /// `GET /v1/metadata` from the first node that answers.
    pub async fn metadata(&self) -> Option<Value> {
        for node in &self.nodes {
            let url = format!("{}/v1/metadata", node.client_url());
            if let Ok(response) = self.http.get(url).send().await {
                if response.status().is_success() {
                    if let Ok(body) = response.json::<Value>().await {
                        return Some(body);
                    }
                }
            }
        }
        None
    }

    /// Whether `name`'s client listener answers `GET /v1/metadata?consistency=local`
    /// (the broker runs, is not paused, and its control plane is up).
    pub async fn node_answers(&self, name: &str) -> bool {
        let Some(node) = self.node(name) else {
            return false;
        };
        let url = format!("{}/v1/metadata?consistency=local", node.client_url());
        matches!(self.http.get(url).send().await, Ok(r) if r.status().is_success())
    }

    /// Waits until a controller is elected and every node is registered.
    pub async fn wait_formed(&self, timeout: Duration) -> Result<Duration, ClusterError> {
        let start = Instant::now();
        let want = self.nodes.len();
        let mut last = String::from("no node answered");
        while start.elapsed() < timeout {
            // A broker the harness started that exited on its own will not join: say why
            // at once rather than after the timeout.
            for node in &self.nodes {
                if let Some(pid) = self.pid(&node.name) {
                    if let Ok(false) = self.backend.is_running(&node.name, pid).await {
                        return Err(ClusterError::NotServing(format!(
                            "the broker of {} exited: {}",
                            node.name,
                            self.log_tail(&node.name).await
                        )));
                    }
                }
            }
            if let Some(metadata) = self.metadata().await {
                let brokers = metadata["brokers"].as_array().map_or(0, Vec::len);
                if !metadata["controller"].is_null() && brokers == want {
                    return Ok(start.elapsed());
                }
                last = format!(
                    "controller {}, {brokers} of {want} brokers registered",
                    metadata["controller"]
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(ClusterError::NotServing(format!(
            "the cluster did not form within {timeout:?}: {last}"
        )))
    }

    /// Creates `topic` (retrying while no controller answers) and waits until every
    /// partition has a leader that serves reads.
    pub async fn create_topic(
        &self,
        topic: &str,
        partitions: u32,
        replication_factor: u32,
        timeout: Duration,
    ) -> Result<(), ClusterError> {
        let body = json!({"topic": topic, "partitions": partitions, "replication_factor": replication_factor});
        self.create_topic_with(topic, partitions, body, timeout)
            .await
    }

    /// Creates `topic` with the given replicas of each partition (node names, the first
    /// the preferred leader), as [`Cluster::create_topic`].
    pub async fn create_topic_assigned(
        &self,
        topic: &str,
        assignment: &[Vec<String>],
        timeout: Duration,
    ) -> Result<(), ClusterError> {
        let ids = assignment
            .iter()
            .map(|replicas| {
                replicas
                    .iter()
                    .map(|name| {
                        self.node(name)
                            .map(|n| n.broker_id)
                            .ok_or_else(|| ClusterError::NotServing(format!("no node {name}")))
                    })
                    .collect::<Result<Vec<u32>, ClusterError>>()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let partitions = u32::try_from(ids.len()).unwrap_or(u32::MAX);
        let body = json!({"topic": topic, "assignment": ids});
        self.create_topic_with(topic, partitions, body, timeout)
            .await
    }

    async fn create_topic_with(
        &self,
        topic: &str,
        partitions: u32,
        body: Value,
        timeout: Duration,
    ) -> Result<(), ClusterError> {
        let start = Instant::now();
        let mut last = String::new();
        'create: while start.elapsed() < timeout {
            for node in &self.nodes {
                let url = format!("{}/v1/topics", node.client_url());
                match self.http.post(url).json(&body).send().await {
                    Ok(response) => {
                        let status = response.status();
                        let answer: Value = response.json().await.unwrap_or(Value::Null);
                        if status.is_success() || answer["error"] == json!("topic_exists") {
                            break 'create;
                        }
                        if status.is_client_error() && answer["error"] != json!("not_controller") {
                            return Err(ClusterError::NotServing(format!(
                                "creating topic {topic}: {status} {answer}"
                            )));
                        }
                        last = format!("{status} {answer}");
                    }
                    Err(e) => last = e.to_string(),
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        while start.elapsed() < timeout {
            if self.all_partitions_led(topic, partitions).await {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(ClusterError::NotServing(format!(
            "topic {topic} not served within {timeout:?} {last}"
        )))
    }

    /// Whether every partition of `topic` has a leader that answers a read.
    pub async fn all_partitions_led(&self, topic: &str, partitions: u32) -> bool {
        let Some(metadata) = self.metadata().await else {
            return false;
        };
        let Some(entry) = metadata["topics"]
            .as_array()
            .and_then(|ts| ts.iter().find(|t| t["topic"] == json!(topic)))
        else {
            return false;
        };
        for p in 0..partitions {
            let Some(leader) = entry["partitions"]
                .as_array()
                .and_then(|ps| ps.iter().find(|s| s["partition"] == json!(p)))
                .and_then(|s| s["leader"].as_u64())
            else {
                return false;
            };
            let Some(node) = self.nodes.iter().find(|n| u64::from(n.broker_id) == leader) else {
                return false;
            };
            let url = format!(
                "{}/v1/topics/{topic}/partitions/{p}/records?offset=0&max=1",
                node.client_url()
            );
            match self.http.get(url).send().await {
                Ok(response) if response.status().is_success() => {}
                _ => return false,
            }
        }
        true
    }

    /// Whether the leader of every partition has its high watermark at its log end (its
    /// followers caught up), from each leader's `GET /v1/debug/replicas`.
    pub async fn leaders_caught_up(&self, topic: &str, partitions: u32) -> bool {
        let mut views = Vec::new();
        for node in &self.nodes {
            let url = format!("{}/v1/debug/replicas", node.client_url());
            if let Ok(response) = self.http.get(url).send().await {
                if let Ok(body) = response.json::<Value>().await {
                    views.extend(body["replicas"].as_array().cloned().unwrap_or_default());
                }
            }
        }
        (0..partitions).all(|p| {
            views.iter().any(|r| {
                r["topic"] == json!(topic)
                    && r["partition"] == json!(p)
                    && r["role"] == json!("leader")
                    && r["high_watermark"] == r["log_end_offset"]
            })
        })
    }

    /// The broker's fatal error from the end of a node's `broker.log` (a line starting
    /// `Error: `), else its last lines; with the log's path.
    pub async fn log_tail(&self, name: &str) -> String {
        let Some(path) = self.node(name).map(ClusterNode::log_file) else {
            return String::new();
        };
        let argv = [
            "tail".to_string(),
            "-n".to_string(),
            "200".to_string(),
            path.display().to_string(),
        ];
        match self.backend.exec(name, &argv).await {
            Ok(out) => {
                let text = out.stdout;
                let said = match text.lines().rev().find(|l| l.starts_with("Error: ")) {
                    Some(error) => error.to_string(),
                    None => {
                        let lines: Vec<&str> =
                            text.lines().filter(|l| !l.trim().is_empty()).collect();
                        lines[lines.len().saturating_sub(3)..].join(" | ")
                    }
                };
                format!("{said} (in {name}:{})", path.display())
            }
            Err(_) => format!("see {name}:{}", path.display()),
        }
    }

    /// Copies every node's log into `<into>/<node>/broker.log`, with a listing of its
    /// data directory, for the run folder.
    pub async fn collect_logs(&self, into: &Path) -> Vec<String> {
        let mut problems = Vec::new();
        for node in &self.nodes {
            let dir = into.join(&node.name);
            if let Err(e) = std::fs::create_dir_all(&dir) {
                problems.push(format!("{}: {e}", dir.display()));
                continue;
            }
            let log = dir.join("broker.log");
            if log != node.log_file() {
                if let Err(e) = self
                    .backend
                    .download(&node.name, &node.log_file(), &log)
                    .await
                {
                    problems.push(format!("{}: {e}", node.name));
                }
            }
            let listing = self
                .backend
                .exec(
                    &node.name,
                    &[
                        "ls".into(),
                        "-lR".into(),
                        node.dir.join("data").display().to_string(),
                    ],
                )
                .await;
            let text = match listing {
                Ok(out) => out.stdout,
                Err(e) => format!("cannot list: {e}\n"),
            };
            if let Err(e) = std::fs::write(dir.join("data-listing.txt"), text) {
                problems.push(format!("{}: {e}", node.name));
            }
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_land_in_their_tables_as_typed_values() {
        let mut table = toml::Table::new();
        apply_setting(&mut table, "min_insync_replicas=2").unwrap();
        apply_setting(&mut table, "metadata.session_timeout_ms = 3000").unwrap();
        apply_setting(&mut table, "storage.flush_policy=every_append").unwrap();
        apply_setting(&mut table, "unclean_leader_election=true").unwrap();
        let text = toml::to_string(&table).unwrap();
        assert!(text.contains("min_insync_replicas = 2"), "{text}");
        assert!(text.contains("unclean_leader_election = true"), "{text}");
        assert!(
            text.contains("[metadata]\nsession_timeout_ms = 3000"),
            "{text}"
        );
        assert!(text.contains("flush_policy = \"every_append\""), "{text}");
        for bad in ["novalue", "=3", "a..b=1", "broker_id=4", "bugs=[]"] {
            assert!(apply_setting(&mut table, bad).is_err(), "{bad}");
        }
        apply_setting(&mut table, "x=1").unwrap();
        assert!(
            apply_setting(&mut table, "x.y=1").is_err(),
            "x is not a table"
        );
    }
}
