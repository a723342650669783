//! The cluster under test: one process of the system per node, started through a
//! [`Backend`] with the files and command line its [`Db`] gives, and the wait until the
//! cluster serves. What the nodes run and how they are asked is the `sut` doors' (our
//! broker's: the `driver` crate); this module only places files and runs processes.
//!
//! Every node's files go under `<root>/<node>/` on the node; its log (standard output
//! and error) where the [`Db`] says.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use backend::{Backend, BackendError, Signal};
use sut::{Api, ClusterSecret, Connector, Db, DbError, NodeInfo, Target};

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error(transparent)]
    Db(#[from] DbError),
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
    /// The program to run on every node (the broker binary).
    pub program: PathBuf,
    /// Bug switches to turn on (`KAFKA-nnnn`).
    pub bugs: Vec<String>,
    /// `KEY=VALUE` settings for every node.
    pub settings: Vec<String>,
    /// `KEY=VALUE` settings of single nodes (by name), applied after `settings`.
    pub node_settings: BTreeMap<String, Vec<String>>,
    /// Where each node's files go on the node (a folder per node is made inside).
    pub root: PathBuf,
    /// The run folder's `nodes/` on this machine: files on their way to the nodes are
    /// staged here, and each node's log comes back to `<local_dir>/<node>/`. The same
    /// folder as `root` when the nodes share this machine's file system (netns).
    pub local_dir: PathBuf,
    /// Copy `program` to every node (`<node dir>/<program's file name>`) and run that
    /// copy: for nodes on other machines (ssh). Otherwise every node runs `program`.
    pub install_program: bool,
}

/// The processes of a test and how to act on them.
///
/// Shared (`&self` throughout, e.g. in an `Arc`) by the workload phase, the nemesis and
/// the runner: the pids of the running processes sit behind a lock of their own, held
/// only to read or record a pid, never across an await.
pub struct Cluster {
    pub backend: Arc<dyn Backend>,
    /// How a node is configured and run.
    pub db: Arc<dyn Db>,
    /// The running cluster's API.
    pub api: Arc<dyn Api>,
    pub spec: ClusterSpec,
    pub nodes: Vec<NodeInfo>,
    /// Drawn for this cluster alone: its nodes authenticate each other (and the
    /// harness's failpoint requests) with it.
    secret: ClusterSecret,
    /// Node name → the pid of its process, while it runs (as far as the harness knows:
    /// a process that exits on its own keeps its entry; see [`Cluster::is_running`]).
    pids: Mutex<BTreeMap<String, u32>>,
}

impl Cluster {
    /// Describes the nodes of `backend`; nothing is started yet.
    pub fn new(
        backend: Arc<dyn Backend>,
        db: Arc<dyn Db>,
        spec: ClusterSpec,
    ) -> Result<Cluster, ClusterError> {
        let mut nodes = Vec::new();
        for name in backend.nodes() {
            let address = backend.address(&name)?;
            nodes.push(NodeInfo {
                dir: spec.root.join(&name),
                name,
                address,
            });
        }
        let secret =
            ClusterSecret::draw().map_err(|e| ClusterError::Db(DbError::Other(e.to_string())))?;
        let api = db.api(&nodes, &secret)?;
        Ok(Cluster {
            backend,
            db,
            api,
            spec,
            nodes,
            secret,
            pids: Mutex::new(BTreeMap::new()),
        })
    }

    /// What a workload writes to: every partition of `topic`, on every node.
    pub fn target(&self, topic: &str, partitions: u32) -> Target {
        Target {
            nodes: self.node_names(),
            topic: topic.to_string(),
            partitions,
        }
    }

    /// The clients of `target`.
    pub fn connector(&self, target: &Target) -> Result<Arc<dyn Connector>, ClusterError> {
        self.api
            .connector(target)
            .map_err(|e| ClusterError::NotServing(e.to_string()))
    }

    /// Every node's name, in order.
    pub fn node_names(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.name.clone()).collect()
    }

    pub fn node(&self, name: &str) -> Option<&NodeInfo> {
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

    /// Writes every node's configuration and starts every broker.
    pub async fn start(&self) -> Result<(), ClusterError> {
        self.install_configs().await?;
        for i in 0..self.nodes.len() {
            let name = self.nodes[i].name.clone();
            self.start_node(&name).await?;
        }
        Ok(())
    }

    /// Writes every node's folder and the files its [`Db`] asks for; starts nothing.
    pub async fn install_configs(&self) -> Result<(), ClusterError> {
        std::fs::create_dir_all(&self.spec.local_dir).map_err(|source| ClusterError::Io {
            what: format!("cannot create {}", self.spec.local_dir.display()),
            source,
        })?;
        for (i, node) in self.nodes.iter().enumerate() {
            let own = self.spec.node_settings.get(&node.name);
            let settings: Vec<String> = self
                .spec
                .settings
                .iter()
                .chain(own.into_iter().flatten())
                .cloned()
                .collect();
            let files =
                self.db
                    .node_files(&self.nodes, i, &self.spec.bugs, &settings, &self.secret)?;
            self.backend
                .exec(
                    &node.name,
                    &["mkdir".into(), "-p".into(), node.dir.display().to_string()],
                )
                .await?;
            for file in files {
                let local = self
                    .spec
                    .local_dir
                    .join(format!(".{}-{}", node.name, file.name));
                // Owner-only: a node's files carry the cluster's secret (the netns
                // backend's copy keeps the mode).
                write_private(&local, &file.contents).map_err(|source| ClusterError::Io {
                    what: format!("cannot write {}", local.display()),
                    source,
                })?;
                let uploaded = self
                    .backend
                    .upload(&local, &node.name, &node.dir.join(&file.name))
                    .await;
                let _ = std::fs::remove_file(&local);
                uploaded?;
            }
        }
        if self.spec.install_program {
            self.install_program_everywhere().await?;
        }
        Ok(())
    }

    /// Copies the program to every node at once (tens of MB each over ssh).
    async fn install_program_everywhere(&self) -> Result<(), ClusterError> {
        let mut copies = tokio::task::JoinSet::new();
        for node in &self.nodes {
            let backend = Arc::clone(&self.backend);
            let local = self.spec.program.clone();
            let remote = self.program_path(node);
            let name = node.name.clone();
            copies.spawn(async move {
                backend.upload(&local, &name, &remote).await?;
                let chmod = ["chmod".into(), "755".into(), remote.display().to_string()];
                backend.exec(&name, &chmod).await.map(|_| ())
            });
        }
        while let Some(copied) = copies.join_next().await {
            copied.map_err(|e| ClusterError::NotServing(format!("copying the program: {e}")))??;
        }
        Ok(())
    }

    /// The program a node runs: its own copy when the spec installs one.
    fn program_path(&self, node: &NodeInfo) -> PathBuf {
        match self.spec.program.file_name() {
            Some(file) if self.spec.install_program => node.dir.join(file),
            _ => self.spec.program.clone(),
        }
    }

    /// Starts (or restarts) one node's process on its existing files. The caller makes
    /// sure it is not running already (two cannot share the node's ports).
    pub async fn start_node(&self, name: &str) -> Result<u32, ClusterError> {
        let node = self
            .node(name)
            .cloned()
            .ok_or_else(|| ClusterError::NotServing(format!("no node {name}")))?;
        let argv = self.db.start_command(&self.program_path(&node), &node);
        let pid = self
            .backend
            .spawn_daemon(&node.name, &argv, &self.db.log_file(&node))
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
            if let Some(roles) = self.api.roles(&self.node_names()).await {
                if roles.formed_with(&self.node_names()) {
                    return Ok(start.elapsed());
                }
                last = format!(
                    "controller {}, {} of {want} registered",
                    roles.controller.as_deref().unwrap_or("none"),
                    roles.registered.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(ClusterError::NotServing(format!(
            "the cluster did not form within {timeout:?}: {last}"
        )))
    }

    /// The process's fatal error from the end of a node's log (as its [`Db`] reads
    /// it), else the log's last lines; with the log's path.
    pub async fn log_tail(&self, name: &str) -> String {
        let Some(path) = self.node(name).map(|n| self.db.log_file(n)) else {
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
                let said = match self.db.fatal_error(&text) {
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

    /// Copies every node's log into `<into>/<node>/` (under its own name), with a listing of its
    /// data directory, for the run folder.
    pub async fn collect_logs(&self, into: &Path) -> Vec<String> {
        let mut problems = Vec::new();
        for node in &self.nodes {
            let dir = into.join(&node.name);
            if let Err(e) = std::fs::create_dir_all(&dir) {
                problems.push(format!("{}: {e}", dir.display()));
                continue;
            }
            let node_log = self.db.log_file(node);
            let log = dir.join(node_log.file_name().unwrap_or_default());
            if log != node_log {
                if let Err(e) = self.backend.download(&node.name, &node_log, &log).await {
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
                        self.db.data_dir(node).display().to_string(),
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

/// Writes `contents` to `path`, readable and writable by its owner only.
fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    // A file left from before keeps its mode through `open`.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(contents.as_bytes())
}
