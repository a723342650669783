//! The nemesis's hold on a real test: [`ClusterFaults`] implements
//! [`nemesis::ClusterControl`] on the test's [`Cluster`] and its
//! [`Backend`](backend::Backend), and [`HistoryJournal`] implements
//! [`nemesis::Journal`] on the history [`Recorder`].
//!
//! - Processes: kill (SIGKILL, then wait until the process is gone, so that a restart
//!   can bind the ports), start (optionally wiping the partition data first), pause
//!   (SIGSTOP) and resume (SIGCONT), through the cluster's pid bookkeeping and the
//!   backend's signals.
//! - Network: every edge `(from, to)` of a grudge (packets from `from` dropped at `to`)
//!   is one one-way backend [`Cut`], restricted to the listener's port for port cuts;
//!   `uncut` removes exactly those rules, `heal` every rule.
//! - Admin: requests through any broker's client API (a broker forwards admin requests
//!   to the controller), nodes named by name here and by broker id on the wire.
//!
//! Architecture invariant: no shell. Commands on the nodes are argv lists; values never
//! become part of a command string.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nemesis::{
    AdminAction, BoxFuture, ClusterControl, ControlError, Grudge, Journal, JournalError, Ports,
    Roles,
};
use serde_json::{json, Value};

use crate::cluster::{Cluster, ClusterError, METADATA_PORT, REPLICATION_PORT};
use backend::{BackendError, Cut, Signal};
use workloads::error_chain;
use workloads::recorder::{NemesisInvocation, Recorder};

/// The folder under a broker's `data_dir` that holds the metadata quorum's files
/// (`METADATA_DIR` in `broker/src/quorum/raft/mod.rs`); every other entry of `data_dir`
/// is a partition's log (`<topic>-<partition>/`, `broker/src/server/partitions.rs`).
pub const BROKER_METADATA_DIR: &str = "metadata";

/// How long a killed broker may take to be gone before `kill` reports a failure.
const KILL_WAIT: Duration = Duration::from_secs(15);
/// How long a reassignment asks the controller to wait for its new replicas (a few
/// seconds of records to copy; past it the assignment stays the union of old and new
/// replicas, and the nemesis's next `reassign` restores it).
const REASSIGN_TIMEOUT: Duration = Duration::from_secs(10);
/// Bounds one admin request to one broker (for a reassignment, on top of its timeout).
/// Short: during faults a broker may forward to a controller it cannot reach, and the
/// nemesis should keep its pace rather than wait out the broker's own 30 s bound; an
/// unanswered request is recorded with its error (it may still take effect).
const ADMIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Bounds one admin request over all the brokers tried and all rounds (for a
/// reassignment, on top of its timeout). A controller failover may take longer (the old
/// controller's session must expire first): the harness heals a second time once the
/// cluster serves again, for what the final heal could not do.
const ADMIN_BUDGET: Duration = Duration::from_secs(8);
/// The pause between two rounds of asking every broker.
const ADMIN_RETRY_PAUSE: Duration = Duration::from_millis(500);
/// Bounds one `GET /v1/metadata` of one broker (all are asked at once).
const METADATA_TIMEOUT: Duration = Duration::from_secs(5);

/// Errors of setting the nemesis's control up.
#[derive(Debug, thiserror::Error)]
pub enum FaultsError {
    #[error("cannot build the nemesis's HTTP client: {0}")]
    Http(String),
}

/// The nemesis's hands on the cluster of one test.
///
/// Shares the [`Cluster`] with the workload phase and the runner. Process changes of a
/// node (kill, start) are serialized by one lock, so that two of them never race on the
/// node's pid. Roles are asked of every node at once; admin requests go to nodes this
/// control has neither killed nor paused first: a paused broker accepts connections (the
/// kernel does) but never answers, and asking it first would cost a whole timeout.
pub struct ClusterFaults {
    cluster: Arc<Cluster>,
    http: reqwest::Client,
    lifecycle: tokio::sync::Mutex<()>,
    /// Nodes this control paused and has not resumed (or killed) since.
    paused: Mutex<BTreeSet<String>>,
}

impl ClusterFaults {
    pub fn new(cluster: Arc<Cluster>) -> Result<ClusterFaults, FaultsError> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(Duration::from_secs(2))
            .build()
            .map_err(|e| FaultsError::Http(e.to_string()))?;
        Ok(ClusterFaults {
            cluster,
            http,
            lifecycle: tokio::sync::Mutex::new(()),
            paused: Mutex::new(BTreeSet::new()),
        })
    }

    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    fn paused(&self) -> MutexGuard<'_, BTreeSet<String>> {
        self.paused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Node name and broker id of every node, for [`Roles::from_metadata`].
    fn broker_ids(&self) -> Vec<(String, u32)> {
        self.cluster
            .nodes
            .iter()
            .map(|n| (n.name.clone(), n.broker_id))
            .collect()
    }

    fn broker_id(&self, node: &str) -> Result<u32, ControlError> {
        self.cluster
            .node(node)
            .map(|n| n.broker_id)
            .ok_or_else(|| ControlError(format!("no node {node:?} in this test")))
    }

    fn known(&self, node: &str) -> Result<(), ControlError> {
        self.broker_id(node).map(drop)
    }

    /// The nodes to ask, those likely to answer first: neither paused nor known to be
    /// down, in node order, then the others.
    fn ask_order(&self) -> Vec<(String, String)> {
        let paused = self.paused().clone();
        let (mut first, later): (Vec<_>, Vec<_>) = self
            .cluster
            .nodes
            .iter()
            .map(|n| (n.name.clone(), n.client_url()))
            .partition(|(name, _)| !paused.contains(name) && self.cluster.pid(name).is_some());
        first.extend(later);
        first
    }

    /// Removes the partition data of `node`'s broker (which must not run), keeping the
    /// metadata quorum's folder: `find <data_dir> -mindepth 1 -maxdepth 1 ! -name
    /// metadata -print -exec rm -rf -- {} +` on the node.
    async fn wipe_partition_data(&self, node: &str) -> Result<Vec<String>, ControlError> {
        let data_dir = self
            .cluster
            .node(node)
            .map(|n| n.data_dir())
            .ok_or_else(|| ControlError(format!("no node {node:?} in this test")))?;
        let argv: Vec<String> = vec![
            "find".into(),
            data_dir.display().to_string(),
            "-mindepth".into(),
            "1".into(),
            "-maxdepth".into(),
            "1".into(),
            "!".into(),
            "-name".into(),
            BROKER_METADATA_DIR.into(),
            "-print".into(),
            "-exec".into(),
            "rm".into(),
            "-rf".into(),
            "--".into(),
            "{}".into(),
            "+".into(),
        ];
        let output = self
            .cluster
            .backend
            .exec(node, &argv)
            .await
            .map_err(|e| ControlError(format!("wiping the partition data of {node}: {e}")))?;
        let removed: Vec<String> = output.stdout.lines().map(str::to_string).collect();
        tracing::info!(%node, ?removed, "wiped the partition data");
        Ok(removed)
    }

    /// Sends `signal` to `node`'s broker; its pid, `None` when it does not run.
    async fn signal(&self, node: &str, signal: Signal) -> Result<Option<u32>, ControlError> {
        self.known(node)?;
        let Some(pid) = self.cluster.pid(node) else {
            return Ok(None);
        };
        match self.cluster.backend.signal(node, pid, signal).await {
            Ok(()) => Ok(Some(pid)),
            Err(BackendError::ProcessGone { .. }) => Ok(None),
            Err(e) => Err(ControlError(format!("SIG{} to {node}: {e}", signal.name()))),
        }
    }

    async fn kill_node(&self, node: &str) -> Result<Option<u32>, ControlError> {
        self.known(node)?;
        let _lifecycle = self.lifecycle.lock().await;
        let Some(pid) = self.cluster.pid(node) else {
            return Ok(None);
        };
        let killed = match self.cluster.kill_node(node).await {
            Ok(()) => Some(pid),
            // It exited on its own: nothing to kill, but it is down all the same.
            Err(ClusterError::Backend(BackendError::ProcessGone { .. })) => None,
            Err(e) => return Err(ControlError(format!("SIGKILL to {node}: {e}"))),
        };
        self.paused().remove(node);
        if !self.cluster.wait_exited(node, pid, KILL_WAIT).await {
            return Err(ControlError(format!(
                "{node}'s broker (pid {pid}) still runs {KILL_WAIT:?} after SIGKILL"
            )));
        }
        Ok(killed)
    }

    async fn start_node(&self, node: &str, wipe: bool) -> Result<u32, ControlError> {
        self.known(node)?;
        let _lifecycle = self.lifecycle.lock().await;
        if let Some(pid) = self.cluster.pid(node) {
            if self.cluster.is_running(node).await {
                return Ok(pid);
            }
        }
        if wipe {
            self.wipe_partition_data(node).await?;
        }
        let pid = self
            .cluster
            .start_node(node)
            .await
            .map_err(|e| ControlError(format!("starting {node}: {e}")))?;
        self.paused().remove(node);
        Ok(pid)
    }

    /// The backend cuts of `grudge`: one cut per pair of nodes that drop each other
    /// (both ways: on a port, that also drops the answers of each one's listener, so a
    /// request already in flight gets no answer through), one one-way cut per other edge.
    fn cuts(grudge: &Grudge, ports: Ports) -> Vec<Cut> {
        let ports = match ports {
            Ports::All => None,
            Ports::Metadata => Some(vec![METADATA_PORT]),
            Ports::Replication => Some(vec![REPLICATION_PORT]),
        };
        let edges = grudge.edges();
        edges
            .iter()
            .filter_map(|(from, to)| {
                let mutual = edges.iter().any(|(f, t)| f == to && t == from);
                // A mutual pair once, from its first node in name order.
                if mutual && from > to {
                    return None;
                }
                Some(Cut {
                    from: from.clone(),
                    to: to.clone(),
                    ports: ports.clone(),
                    one_way: !mutual,
                })
            })
            .collect()
    }

    /// The admin request's path and body, nodes as broker ids.
    fn admin_request(&self, action: &AdminAction) -> Result<(&'static str, Value), ControlError> {
        Ok(match action {
            AdminAction::TransferLeader {
                topic,
                partition,
                to,
            } => (
                "/v1/admin/transfer-leader",
                json!({"topic": topic, "partition": partition, "leader": self.broker_id(to)?}),
            ),
            AdminAction::ElectPreferred => ("/v1/admin/elect-preferred", json!({})),
            AdminAction::Reassign {
                topic,
                partition,
                replicas,
            } => {
                let ids = replicas
                    .iter()
                    .map(|node| self.broker_id(node))
                    .collect::<Result<Vec<u32>, ControlError>>()?;
                (
                    "/v1/admin/reassign",
                    json!({
                        "topic": topic,
                        "partition": partition,
                        "replicas": ids,
                        "timeout_ms": REASSIGN_TIMEOUT.as_millis() as u64,
                    }),
                )
            }
        })
    }

    /// POSTs the admin request to the first node that takes it. A node that cannot be
    /// reached, or answers 503 (it knows no controller to forward to, cannot reach it, or
    /// is the controller-elect not yet in charge: a controller failover), is passed over
    /// for the next; when every node was passed over, all are asked again after a short
    /// pause, until [`ADMIN_BUDGET`] is spent. Any other answer is the result.
    async fn post_admin(&self, action: &AdminAction) -> Result<Value, ControlError> {
        let (path, body) = self.admin_request(action)?;
        let extra = match action {
            AdminAction::Reassign { .. } => REASSIGN_TIMEOUT,
            _ => Duration::ZERO,
        };
        let deadline = tokio::time::Instant::now() + ADMIN_BUDGET + extra;
        let mut rounds = 0u32;
        loop {
            rounds += 1;
            let mut passed_over = Vec::new();
            for (node, url) in self.ask_order() {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                if left.is_zero() {
                    passed_over.push(format!("{node}: not asked (out of time)"));
                    continue;
                }
                let sent = self
                    .http
                    .post(format!("{url}{path}"))
                    .json(&body)
                    .timeout(left.min(ADMIN_TIMEOUT + extra))
                    .send()
                    .await;
                let response = match sent {
                    Ok(response) => response,
                    Err(e) => {
                        passed_over.push(format!("{node}: {}", error_chain(&e)));
                        continue;
                    }
                };
                let status = response.status();
                let text = response.text().await.unwrap_or_default();
                if status.is_success() {
                    return serde_json::from_str(&text).map_err(|e| {
                        ControlError(format!(
                            "{node} answered {path} with bad JSON ({e}): {text}"
                        ))
                    });
                }
                if status == reqwest::StatusCode::SERVICE_UNAVAILABLE {
                    passed_over.push(format!("{node}: {status} {text}"));
                    continue;
                }
                return Err(ControlError(format!("{node}: {status} {text}")));
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left < ADMIN_RETRY_PAUSE {
                return Err(ControlError(format!(
                    "no node took {path} ({rounds} rounds); last round: {}",
                    passed_over.join("; ")
                )));
            }
            tokio::time::sleep(ADMIN_RETRY_PAUSE).await;
        }
    }

    /// Asks every node at once (a linearizable read: any answer is current) and takes
    /// the first answer, so that a paused or cut-off node costs nothing.
    async fn read_roles(&self) -> Option<Roles> {
        let mut asked = tokio::task::JoinSet::new();
        for (_, url) in self.ask_order() {
            let http = self.http.clone();
            asked.spawn(async move {
                let response = http
                    .get(format!("{url}/v1/metadata"))
                    .timeout(METADATA_TIMEOUT)
                    .send()
                    .await
                    .ok()?;
                if !response.status().is_success() {
                    return None;
                }
                response.json::<Value>().await.ok()
            });
        }
        while let Some(answer) = asked.join_next().await {
            if let Ok(Some(metadata)) = answer {
                return Some(Roles::from_metadata(&self.broker_ids(), &metadata));
            }
        }
        None
    }
}

impl ClusterControl for ClusterFaults {
    fn nodes(&self) -> Vec<String> {
        self.cluster.nodes.iter().map(|n| n.name.clone()).collect()
    }

    fn roles(&self) -> BoxFuture<'_, Option<Roles>> {
        Box::pin(self.read_roles())
    }

    fn kill<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Result<Option<u32>, ControlError>> {
        Box::pin(self.kill_node(node))
    }

    fn start<'a>(&'a self, node: &'a str, wipe: bool) -> BoxFuture<'a, Result<u32, ControlError>> {
        Box::pin(self.start_node(node, wipe))
    }

    fn pause<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Result<Option<u32>, ControlError>> {
        Box::pin(async move {
            let pid = self.signal(node, Signal::Stop).await?;
            if pid.is_some() {
                self.paused().insert(node.to_string());
            }
            Ok(pid)
        })
    }

    fn resume<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Result<Option<u32>, ControlError>> {
        Box::pin(async move {
            let pid = self.signal(node, Signal::Cont).await?;
            self.paused().remove(node);
            Ok(pid)
        })
    }

    fn cut<'a>(
        &'a self,
        grudge: &'a Grudge,
        ports: Ports,
    ) -> BoxFuture<'a, Result<(), ControlError>> {
        Box::pin(async move {
            let cuts = Self::cuts(grudge, ports);
            self.cluster
                .backend
                .cut(&cuts)
                .await
                .map_err(|e| ControlError(e.to_string()))
        })
    }

    fn uncut<'a>(
        &'a self,
        grudge: &'a Grudge,
        ports: Ports,
    ) -> BoxFuture<'a, Result<(), ControlError>> {
        Box::pin(async move {
            let cuts = Self::cuts(grudge, ports);
            self.cluster
                .backend
                .uncut(&cuts)
                .await
                .map_err(|e| ControlError(e.to_string()))
        })
    }

    fn heal(&self) -> BoxFuture<'_, Result<(), ControlError>> {
        Box::pin(async move {
            self.cluster
                .backend
                .heal()
                .await
                .map_err(|e| ControlError(e.to_string()))
        })
    }

    fn admin<'a>(&'a self, action: &'a AdminAction) -> BoxFuture<'a, Result<Value, ControlError>> {
        Box::pin(self.post_admin(action))
    }

    fn failpoint<'a>(
        &'a self,
        node: &'a str,
        point: &'a str,
        actions: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Value, ControlError>> {
        Box::pin(self.set_failpoint(node, point, actions))
    }
}

impl ClusterFaults {
    /// `PUT /v1/debug/failpoints/{point}` with the actions, or `DELETE` to release it, on
    /// `node`'s broker; its JSON answer.
    async fn set_failpoint(
        &self,
        node: &str,
        point: &str,
        actions: Option<&str>,
    ) -> Result<Value, ControlError> {
        let url = self
            .cluster
            .node(node)
            .map(|n| format!("{}/v1/debug/failpoints/{point}", n.client_url()))
            .ok_or_else(|| ControlError(format!("no node {node:?} in this test")))?;
        let request = match actions {
            Some(actions) => self.http.put(url).json(&json!({ "actions": actions })),
            None => self.http.delete(url),
        };
        let response = request
            .timeout(ADMIN_TIMEOUT)
            .send()
            .await
            .map_err(|e| ControlError(format!("{node}: {}", workloads::error_chain(&e))))?;
        let status = response.status();
        let answer: Value = response.json().await.unwrap_or(Value::Null);
        if status.is_success() {
            Ok(answer)
        } else {
            Err(ControlError(format!("{node} answered {status}: {answer}")))
        }
    }
}

pub use spec::NemesisTally;

/// The history as the nemesis writes it: `nemesis` info entries of the [`Recorder`].
/// A token is the index of the invoke entry; it also keeps the [`NemesisTally`].
pub struct HistoryJournal {
    recorder: Recorder,
    state: Mutex<JournalState>,
}

#[derive(Default)]
struct JournalState {
    open: HashMap<u64, NemesisInvocation>,
    tally: NemesisTally,
}

impl HistoryJournal {
    pub fn new(recorder: Recorder) -> HistoryJournal {
        HistoryJournal {
            recorder,
            state: Mutex::new(JournalState::default()),
        }
    }

    fn state(&self) -> MutexGuard<'_, JournalState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What was recorded so far.
    pub fn tally(&self) -> NemesisTally {
        let state = self.state();
        let mut tally = state.tally.clone();
        tally.open = state.open.len() as u64;
        tally
    }
}

impl Journal for HistoryJournal {
    fn invoke(&self, f: &str, value: Value) -> Result<u64, JournalError> {
        let invocation = self
            .recorder
            .nemesis_invoke(f, value)
            .map_err(|e| JournalError(e.to_string()))?;
        let token = invocation.index();
        self.state().open.insert(token, invocation);
        Ok(token)
    }

    fn complete(
        &self,
        token: u64,
        f: &str,
        value: Value,
        error: Option<String>,
    ) -> Result<(), JournalError> {
        let invocation = {
            let mut state = self.state();
            let invocation = match state.open.remove(&token) {
                Some(open) if open.f() == f => open,
                Some(open) => {
                    let invoked = open.f().to_string();
                    state.open.insert(token, open);
                    return Err(JournalError(format!(
                        "operation {token} was invoked as {invoked:?}, completed as {f:?}"
                    )));
                }
                None => {
                    return Err(JournalError(format!(
                        "no open nemesis operation {token} to complete"
                    )))
                }
            };
            *state.tally.by_f.entry(f.to_string()).or_default() += 1;
            if error.is_some() {
                *state.tally.errors.entry(f.to_string()).or_default() += 1;
            }
            invocation
        };
        self.recorder
            .nemesis_complete(invocation, value, error)
            .map_err(|e| JournalError(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use history::{read_history, OpType, Process};

    fn grudge(edges: &[(&str, &[&str])]) -> Grudge {
        Grudge(
            edges
                .iter()
                .map(|(node, dropped)| {
                    (
                        node.to_string(),
                        dropped.iter().map(|d| d.to_string()).collect(),
                    )
                })
                .collect(),
        )
    }

    #[test]
    fn a_mutual_pair_is_one_two_way_cut_and_other_edges_one_way_cuts() {
        // n1 drops n2 and n3; n2 drops n1.
        let g = grudge(&[("n1", &["n2", "n3"]), ("n2", &["n1"])]);
        let cuts = ClusterFaults::cuts(&g, Ports::Metadata);
        let mut shown: Vec<String> = cuts
            .iter()
            .map(|c| format!("{}->{} {:?} {}", c.from, c.to, c.ports, c.one_way))
            .collect();
        shown.sort();
        assert_eq!(
            shown,
            vec!["n1->n2 Some([9094]) false", "n3->n1 Some([9094]) true",]
        );
        assert!(ClusterFaults::cuts(&g, Ports::All)
            .iter()
            .all(|c| c.ports.is_none()));
        assert!(ClusterFaults::cuts(&g, Ports::Replication)
            .iter()
            .all(|c| c.ports == Some(vec![REPLICATION_PORT])));
    }

    #[test]
    fn the_journal_pairs_tokens_and_tallies() {
        let dir = std::env::temp_dir().join(format!("harness-faults-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        let path = dir.join("history.jsonl");
        let recorder = Recorder::create(&path).expect("recorder");
        let journal = HistoryJournal::new(recorder.clone());
        let kill = journal
            .invoke("kill", json!({"package": "kill", "targets": "one"}))
            .expect("invoke");
        let cut = journal
            .invoke("start-partition", json!({"package": "partition"}))
            .expect("invoke");
        assert!(journal.complete(kill, "start", json!({}), None).is_err());
        journal
            .complete(
                cut,
                "start-partition",
                json!({"grudge": {}}),
                Some("no-target".into()),
            )
            .expect("complete");
        journal
            .complete(kill, "kill", json!({"nodes": ["n2"]}), None)
            .expect("complete");
        assert!(journal.complete(kill, "kill", json!({}), None).is_err());
        let tally = journal.tally();
        assert_eq!(tally.total(), 2);
        assert_eq!(tally.errors.get("start-partition"), Some(&1));
        assert_eq!(
            tally.summary_line(),
            "nemesis: 2 ops (kill 1, start-partition 1); 1 error (start-partition 1)"
        );
        recorder.finish().expect("finish");
        let (history, _) = read_history(&path, None).expect("history");
        assert_eq!(history.len(), 4);
        assert!(history
            .ops
            .iter()
            .all(|op| op.process == Process::Nemesis && op.kind == OpType::Info));
        assert_eq!(history.ops[2].f, "start-partition");
        assert_eq!(history.ops[2].error, Some(json!("no-target")));
        assert_eq!(history.ops[3].value["nodes"], json!(["n2"]));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
