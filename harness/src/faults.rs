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
//! - Admin and failpoints: through the system's [`sut::Api`], asking first the nodes
//!   this control has neither killed nor paused, and of those the ones cut off from the
//!   fewest other nodes ([`CutLinks`]).
//! - Roles: [`sut::Api::roles`], every node asked at once; each node's replica views
//!   (for the `aimed` package's high-watermark lags): [`sut::Api::replicas`].
//!
//! Architecture invariant: no shell. Commands on the nodes are argv lists; values never
//! become part of a command string.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nemesis::{
    AdminAction, BoxFuture, ClusterControl, ControlError, Grudge, Journal, JournalError, Ports,
    ReplicaView, Roles,
};
use serde_json::Value;

use crate::cluster::{Cluster, ClusterError};
use backend::{BackendError, Cut, Signal};
use workloads::recorder::{NemesisInvocation, Recorder};

/// How long a killed process may take to be gone before `kill` reports a failure.
const KILL_WAIT: Duration = Duration::from_secs(15);

/// The nemesis's hands on the cluster of one test.
///
/// Shares the [`Cluster`] with the workload phase and the runner. Process changes of a
/// node (kill, start) are serialized by one lock, so that two of them never race on the
/// node's pid. Roles are asked of every node at once; admin requests go to nodes this
/// control has neither killed nor paused first: a paused process accepts connections
/// (the kernel does) but never answers, and asking it first would cost a whole timeout.
pub struct ClusterFaults {
    cluster: Arc<Cluster>,
    lifecycle: tokio::sync::Mutex<()>,
    /// Nodes this control paused and has not resumed (or killed) since.
    paused: Mutex<BTreeSet<String>>,
    /// The links this control's cuts hold down.
    links: Mutex<CutLinks>,
}

/// The links between nodes that cuts in place hold down, on any port: a grudge's
/// edges counted once per cut (two cuts of the same edge on different ports need two
/// uncuts), all forgotten by a heal. A node cut off from others is a poor node to send
/// an admin request to: a broker that is not the controller forwards it to the
/// controller, and a cut between them holds the request for a whole timeout.
#[derive(Debug, Default)]
pub struct CutLinks {
    /// `(from, to)` → how many cuts in place drop `from`'s packets at `to`.
    edges: BTreeMap<(String, String), usize>,
}

impl CutLinks {
    /// Counts `grudge`'s edges as cut.
    pub fn cut(&mut self, grudge: &Grudge) {
        for edge in grudge.edges() {
            *self.edges.entry(edge).or_default() += 1;
        }
    }

    /// Counts `grudge`'s edges as healed once.
    pub fn uncut(&mut self, grudge: &Grudge) {
        for edge in grudge.edges() {
            if let Some(count) = self.edges.get_mut(&edge) {
                *count -= 1;
                if *count == 0 {
                    self.edges.remove(&edge);
                }
            }
        }
    }

    /// Every link healed.
    pub fn heal(&mut self) {
        self.edges.clear();
    }

    /// How many other nodes `node` has a link cut with, either way.
    pub fn cut_peers(&self, node: &str) -> usize {
        let peers: BTreeSet<&str> = self
            .edges
            .keys()
            .filter_map(|(from, to)| {
                if from == node {
                    Some(to.as_str())
                } else if to == node {
                    Some(from.as_str())
                } else {
                    None
                }
            })
            .collect();
        peers.len()
    }
}

/// `nodes` in the order to ask them: those `up` says are neither paused nor down
/// first, and within each group the ones cut off from the fewest other nodes first
/// (otherwise in the given order).
pub fn ask_order(
    mut nodes: Vec<String>,
    up: impl Fn(&str) -> bool,
    links: &CutLinks,
) -> Vec<String> {
    nodes.sort_by_key(|name| (!up(name), links.cut_peers(name)));
    nodes
}

impl ClusterFaults {
    pub fn new(cluster: Arc<Cluster>) -> ClusterFaults {
        ClusterFaults {
            cluster,
            lifecycle: tokio::sync::Mutex::new(()),
            paused: Mutex::new(BTreeSet::new()),
            links: Mutex::new(CutLinks::default()),
        }
    }

    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    fn paused(&self) -> MutexGuard<'_, BTreeSet<String>> {
        self.paused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn links(&self) -> MutexGuard<'_, CutLinks> {
        self.links
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn known(&self, node: &str) -> Result<(), ControlError> {
        match self.cluster.node(node) {
            Some(_) => Ok(()),
            None => Err(ControlError(format!("no node {node:?} in this test"))),
        }
    }

    /// The nodes to ask, those likely to answer first ([`ask_order`]): neither paused
    /// nor known to be down, the least cut off first, then the others.
    fn ask_order(&self) -> Vec<String> {
        let paused = self.paused().clone();
        let up = |name: &str| !paused.contains(name) && self.cluster.pid(name).is_some();
        ask_order(self.cluster.node_names(), up, &self.links())
    }

    /// Removes the data of `node`'s process (which must not run), keeping what its
    /// [`sut::Db::wipe_keeps`] names (our broker: the metadata quorum's folder): `find
    /// <data_dir> -mindepth 1 -maxdepth 1 ! -name <kept> ... -print -exec rm -rf -- {} +`
    /// on the node.
    async fn wipe_partition_data(&self, node: &str) -> Result<Vec<String>, ControlError> {
        let data_dir = self
            .cluster
            .node(node)
            .map(|n| self.cluster.db.data_dir(n))
            .ok_or_else(|| ControlError(format!("no node {node:?} in this test")))?;
        let mut argv: Vec<String> = vec![
            "find".into(),
            data_dir.display().to_string(),
            "-mindepth".into(),
            "1".into(),
            "-maxdepth".into(),
            "1".into(),
        ];
        for kept in self.cluster.db.wipe_keeps() {
            argv.extend(["!".into(), "-name".into(), (*kept).to_string()]);
        }
        argv.extend(
            ["-print", "-exec", "rm", "-rf", "--", "{}", "+"]
                .into_iter()
                .map(String::from),
        );
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

    /// The listener ports a cut of `ports` drops (`None`: every packet).
    fn ports(&self, ports: Ports) -> Result<Option<Vec<u16>>, ControlError> {
        match ports {
            Ports::All => Ok(None),
            listener => self
                .cluster
                .db
                .listener_port(listener.name())
                .map(|port| Some(vec![port]))
                .ok_or_else(|| {
                    ControlError(format!("the system has no {} listener", listener.name()))
                }),
        }
    }

    /// The backend cuts of `grudge`: one cut per pair of nodes that drop each other
    /// (both ways: on a port, that also drops the answers of each one's listener, so a
    /// request already in flight gets no answer through), one one-way cut per other edge.
    fn cuts(grudge: &Grudge, ports: Option<Vec<u16>>) -> Vec<Cut> {
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
}

impl ClusterControl for ClusterFaults {
    fn nodes(&self) -> Vec<String> {
        self.cluster.nodes.iter().map(|n| n.name.clone()).collect()
    }

    fn roles(&self) -> BoxFuture<'_, Option<Roles>> {
        Box::pin(async move { self.cluster.api.roles(&self.ask_order()).await })
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
            let cuts = Self::cuts(grudge, self.ports(ports)?);
            self.cluster
                .backend
                .cut(&cuts)
                .await
                .map_err(|e| ControlError(e.to_string()))?;
            self.links().cut(grudge);
            Ok(())
        })
    }

    fn uncut<'a>(
        &'a self,
        grudge: &'a Grudge,
        ports: Ports,
    ) -> BoxFuture<'a, Result<(), ControlError>> {
        Box::pin(async move {
            let cuts = Self::cuts(grudge, self.ports(ports)?);
            self.cluster
                .backend
                .uncut(&cuts)
                .await
                .map_err(|e| ControlError(e.to_string()))?;
            self.links().uncut(grudge);
            Ok(())
        })
    }

    fn heal(&self) -> BoxFuture<'_, Result<(), ControlError>> {
        Box::pin(async move {
            self.cluster
                .backend
                .heal()
                .await
                .map_err(|e| ControlError(e.to_string()))?;
            self.links().heal();
            Ok(())
        })
    }

    fn admin<'a>(&'a self, action: &'a AdminAction) -> BoxFuture<'a, Result<Value, ControlError>> {
        Box::pin(async move {
            self.cluster
                .api
                .admin(action, &self.ask_order())
                .await
                .map_err(|e| ControlError(e.0))
        })
    }

    fn admin_at<'a>(
        &'a self,
        action: &'a AdminAction,
        node: &'a str,
    ) -> BoxFuture<'a, Result<Value, ControlError>> {
        Box::pin(async move {
            self.cluster
                .api
                .admin(action, &[node.to_string()])
                .await
                .map_err(|e| ControlError(e.0))
        })
    }

    fn failpoint<'a>(
        &'a self,
        node: &'a str,
        point: &'a str,
        actions: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Value, ControlError>> {
        Box::pin(async move {
            self.known(node)?;
            self.cluster
                .api
                .failpoint(node, point, actions)
                .await
                .map_err(|e| ControlError(e.0))
        })
    }

    fn replicas<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Option<Vec<ReplicaView>>> {
        Box::pin(async move {
            self.known(node).ok()?;
            self.cluster.api.replicas(node).await
        })
    }

    fn failpoint_hits<'a>(
        &'a self,
        node: &'a str,
    ) -> BoxFuture<'a, Option<std::collections::BTreeMap<String, u64>>> {
        Box::pin(async move {
            self.known(node).ok()?;
            self.cluster.api.failpoint_hits(node).await
        })
    }

    fn controller_view<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Option<sut::ControllerView>> {
        Box::pin(async move {
            self.known(node).ok()?;
            self.cluster.api.controller_view(node).await
        })
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
    use serde_json::json;

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
        let cuts = ClusterFaults::cuts(&g, Some(vec![9094]));
        let mut shown: Vec<String> = cuts
            .iter()
            .map(|c| format!("{}->{} {:?} {}", c.from, c.to, c.ports, c.one_way))
            .collect();
        shown.sort();
        assert_eq!(
            shown,
            vec!["n1->n2 Some([9094]) false", "n3->n1 Some([9094]) true",]
        );
        assert!(ClusterFaults::cuts(&g, None)
            .iter()
            .all(|c| c.ports.is_none()));
    }

    #[test]
    fn admin_requests_go_first_to_live_nodes_cut_off_from_the_fewest_others() {
        let names = |v: &[&str]| v.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let nodes = names(&["n1", "n2", "n3"]);
        let mut links = CutLinks::default();
        let all_up = |_: &str| true;
        assert_eq!(
            ask_order(nodes.clone(), all_up, &links),
            nodes,
            "nothing cut"
        );
        // n1 isolated (KAFKA-7128's replica put behind): asked last.
        let isolate_n1 = grudge(&[("n1", &["n2", "n3"]), ("n2", &["n1"]), ("n3", &["n1"])]);
        links.cut(&isolate_n1);
        assert_eq!(links.cut_peers("n1"), 2);
        assert_eq!(links.cut_peers("n2"), 1);
        assert_eq!(
            ask_order(nodes.clone(), all_up, &links),
            names(&["n2", "n3", "n1"])
        );
        // A node down goes after every live one, however cut off the others are.
        let n2_down = |n: &str| n != "n2";
        assert_eq!(
            ask_order(nodes.clone(), n2_down, &links),
            names(&["n3", "n1", "n2"])
        );
        // The same edge cut twice (two ports) needs two uncuts.
        let one_way = grudge(&[("n3", &["n1"])]);
        links.cut(&one_way);
        links.uncut(&isolate_n1);
        assert_eq!(links.cut_peers("n1"), 1, "n3 -> n1 still cut once");
        assert_eq!(links.cut_peers("n2"), 0);
        assert_eq!(
            ask_order(nodes.clone(), all_up, &links),
            names(&["n2", "n1", "n3"])
        );
        links.heal();
        assert_eq!(ask_order(nodes.clone(), all_up, &links), nodes);
        // An uncut of what was never cut changes nothing.
        links.uncut(&one_way);
        assert_eq!(links.cut_peers("n3"), 0);
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
