//! The `aimed` package and swarm runs against a scripted in-memory cluster
//! ([`Scripted`]): whom each trigger aims at, that the step's seed makes the choices,
//! that the undo and `heal_all` restore everything, and that a swarm run acts only in
//! the periods that let a package act and leaves calm periods calm.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nemesis::aimed::{
    Aim, CutRequest, FlapDelay, FlapSlowed, LagTarget, Strike, LAG_WIDEN_POINT, STALE_ANSWER_POINT,
};
use nemesis::schedule::ScheduleOptions;
use nemesis::{
    Action, AdminAction, BoxFuture, ClusterControl, ControlError, ControllerView, Grudge, Journal,
    JournalError, Nemesis, NemesisOptions, PackageKind, PartitionRoles, Ports, ReplicaView, Roles,
    Step, SwarmDraw,
};
use serde_json::{json, Value};
use tokio::sync::watch;

// ---------------------------------------------------------------------------------------
// A cluster whose roles and replica views the test scripts.

#[derive(Default)]
struct Cluster {
    running: BTreeSet<String>,
    paused: BTreeSet<String>,
    cuts: Vec<(Grudge, Ports)>,
    /// What successive reads of the roles answer; the last one is answered from then on.
    roles: Vec<Roles>,
    reads: usize,
    views: BTreeMap<String, Vec<ReplicaView>>,
    /// What a node's first reads of its replica views answer, in order, before `views`.
    first_views: BTreeMap<String, VecDeque<Vec<ReplicaView>>>,
    admin: Vec<AdminAction>,
    /// Every signal, start and cut, in order.
    calls: Vec<String>,
    /// With `Some`, the cluster has failpoints: those armed, by node and point, with
    /// their actions (and arming and releasing them are calls too).
    failpoints: Option<BTreeMap<(String, String), String>>,
    /// How often each point was reached, by node and point.
    hits: BTreeMap<(String, String), u64>,
    /// Leader transfers move the replica views' leadership (a new epoch each), and a
    /// leading view's high watermark grows at every read (writes being committed).
    moving: bool,
    /// A healed replication cut lets the node it isolated back into the ISR of every
    /// partition it is a replica of (in every scripted read of the roles).
    rejoining: bool,
    /// An admin request makes this node reach this point (a controller deciding).
    hits_on_admin: Option<(String, String)>,
    /// Nodes that the roles may name controller but that do not act as one in their own
    /// view (restarted while their old session lives on); any other node the last read
    /// of the roles named controller acts as one, at that read's epoch.
    idle: BTreeSet<String>,
    /// The next this many admin requests are refused, as a controller refuses a transfer
    /// to a broker restarted a moment ago and not registered again yet.
    refusals: u32,
}

struct Scripted {
    nodes: Vec<String>,
    cluster: Mutex<Cluster>,
}

fn s(items: &[&str]) -> Vec<String> {
    items.iter().map(|i| i.to_string()).collect()
}

/// Five nodes; n1 the controller, n2 the quorum leader; `t/0` led by n1 (ISR n1 n2
/// n3), `t/1` led by n2 (ISR n2 n3), both at leader epoch 1.
fn base_roles() -> Roles {
    Roles {
        nodes: s(&["n1", "n2", "n3", "n4", "n5"]),
        registered: s(&["n1", "n2", "n3", "n4", "n5"]).into_iter().collect(),
        controller: Some("n1".into()),
        controller_epoch: 3,
        meta_leader: Some("n2".into()),
        partitions: vec![
            partition(0, "n1", 1, &["n1", "n2", "n3"]),
            partition(1, "n2", 1, &["n2", "n3"]),
        ],
    }
}

fn partition(number: u32, leader: &str, epoch: u64, isr: &[&str]) -> PartitionRoles {
    PartitionRoles {
        topic: "t".into(),
        partition: number,
        leader: Some(leader.into()),
        leader_epoch: Some(epoch),
        replicas: s(&["n1", "n2", "n3"]),
        isr: s(isr),
    }
}

fn view(partition: u32, leading: bool, hw: u64) -> ReplicaView {
    ReplicaView {
        topic: "t".into(),
        partition,
        leading,
        high_watermark: hw,
        log_end_offset: 20,
        ..ReplicaView::default()
    }
}

impl Scripted {
    fn new() -> Arc<Scripted> {
        let nodes = s(&["n1", "n2", "n3", "n4", "n5"]);
        Arc::new(Scripted {
            cluster: Mutex::new(Cluster {
                running: nodes.iter().cloned().collect(),
                roles: vec![base_roles()],
                ..Cluster::default()
            }),
            nodes,
        })
    }

    fn cluster(&self) -> MutexGuard<'_, Cluster> {
        self.cluster.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn script_roles(&self, roles: Vec<Roles>) {
        let mut cluster = self.cluster();
        cluster.roles = roles;
        cluster.reads = 0;
    }

    fn assert_healed(&self) {
        let cluster = self.cluster();
        assert_eq!(
            cluster.running.iter().cloned().collect::<Vec<_>>(),
            self.nodes,
            "every node runs"
        );
        assert!(cluster.paused.is_empty(), "paused: {:?}", cluster.paused);
        assert!(cluster.cuts.is_empty(), "cuts: {:?}", cluster.cuts);
    }
}

impl ClusterControl for Scripted {
    fn nodes(&self) -> Vec<String> {
        self.nodes.clone()
    }

    fn roles(&self) -> BoxFuture<'_, Option<Roles>> {
        Box::pin(async move {
            let mut cluster = self.cluster();
            let at = cluster.reads.min(cluster.roles.len().saturating_sub(1));
            cluster.reads += 1;
            cluster.roles.get(at).cloned()
        })
    }

    fn kill<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Result<Option<u32>, ControlError>> {
        Box::pin(async move {
            let mut cluster = self.cluster();
            cluster.calls.push(format!("kill {node}"));
            cluster.paused.remove(node);
            Ok(cluster.running.remove(node).then_some(7))
        })
    }

    fn start<'a>(&'a self, node: &'a str, wipe: bool) -> BoxFuture<'a, Result<u32, ControlError>> {
        Box::pin(async move {
            let mut cluster = self.cluster();
            assert!(!wipe, "aimed strikes never wipe");
            cluster.calls.push(format!("start {node}"));
            cluster.running.insert(node.into());
            Ok(8)
        })
    }

    fn pause<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Result<Option<u32>, ControlError>> {
        Box::pin(async move {
            let mut cluster = self.cluster();
            cluster.calls.push(format!("pause {node}"));
            let running = cluster.running.contains(node);
            if running {
                cluster.paused.insert(node.into());
            }
            Ok(running.then_some(7))
        })
    }

    fn resume<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Result<Option<u32>, ControlError>> {
        Box::pin(async move {
            let mut cluster = self.cluster();
            cluster.calls.push(format!("resume {node}"));
            cluster.paused.remove(node);
            Ok(cluster.running.contains(node).then_some(7))
        })
    }

    fn cut<'a>(
        &'a self,
        grudge: &'a Grudge,
        ports: Ports,
    ) -> BoxFuture<'a, Result<(), ControlError>> {
        Box::pin(async move {
            let mut cluster = self.cluster();
            cluster.calls.push(format!("cut {}", ports.name()));
            cluster.cuts.push((grudge.clone(), ports));
            Ok(())
        })
    }

    fn uncut<'a>(
        &'a self,
        grudge: &'a Grudge,
        ports: Ports,
    ) -> BoxFuture<'a, Result<(), ControlError>> {
        Box::pin(async move {
            let mut cluster = self.cluster();
            cluster.calls.push(format!("uncut {}", ports.name()));
            let at = cluster
                .cuts
                .iter()
                .position(|(g, p)| g == grudge && *p == ports)
                .ok_or_else(|| ControlError("no such cut".into()))?;
            cluster.cuts.remove(at);
            if cluster.rejoining && ports == Ports::Replication {
                cluster.rejoin(grudge);
            }
            Ok(())
        })
    }

    fn heal(&self) -> BoxFuture<'_, Result<(), ControlError>> {
        Box::pin(async move {
            self.cluster().cuts.clear();
            Ok(())
        })
    }

    fn admin<'a>(&'a self, action: &'a AdminAction) -> BoxFuture<'a, Result<Value, ControlError>> {
        Box::pin(async move {
            let mut cluster = self.cluster();
            cluster.admin.push(action.clone());
            if cluster.refusals > 0 {
                cluster.refusals -= 1;
                return Err(ControlError(
                    "409 Conflict: broker_not_available: broker 2 is not alive".into(),
                ));
            }
            if let Some(key) = cluster.hits_on_admin.clone() {
                *cluster.hits.entry(key).or_default() += 1;
            }
            // While the controller is cut off, it cannot write its decision.
            if cluster
                .cuts
                .iter()
                .any(|(_, ports)| *ports == Ports::Metadata)
            {
                return Err(ControlError(
                    "503: the controller cannot reach the quorum".into(),
                ));
            }
            if let (true, AdminAction::TransferLeader { partition, to, .. }) =
                (cluster.moving, action)
            {
                cluster.transfer(*partition, to);
            }
            Ok(json!({"ok": true}))
        })
    }

    fn replicas<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Option<Vec<ReplicaView>>> {
        Box::pin(async move {
            let mut cluster = self.cluster();
            if let Some(first) = cluster
                .first_views
                .get_mut(node)
                .and_then(|q| q.pop_front())
            {
                return Some(first);
            }
            if cluster.moving {
                for view in cluster.views.get_mut(node).into_iter().flatten() {
                    if view.leading {
                        view.high_watermark += 5;
                        view.log_end_offset = view.log_end_offset.max(view.high_watermark);
                    }
                }
            }
            cluster.views.get(node).cloned()
        })
    }

    fn failpoint<'a>(
        &'a self,
        node: &'a str,
        point: &'a str,
        actions: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Value, ControlError>> {
        Box::pin(async move {
            let mut guard = self.cluster();
            let cluster = &mut *guard;
            let key = (node.to_string(), point.to_string());
            let Some(armed) = cluster.failpoints.as_mut() else {
                return Err(ControlError(format!("{node}: no failpoints")));
            };
            match actions {
                Some(actions) => {
                    armed.insert(key, actions.to_string());
                    cluster.calls.push(format!("arm {node} {point}"));
                }
                None => {
                    armed.remove(&key);
                    cluster.calls.push(format!("release {node} {point}"));
                    // A question let go is answered, and the answer reaches its point.
                    let answer = (node.to_string(), HELD_ANSWER.to_string());
                    if point == HELD_QUESTION && armed.contains_key(&answer) {
                        *cluster.hits.entry(answer).or_default() += 1;
                    }
                }
            }
            Ok(json!({"ok": true}))
        })
    }

    fn controller_view<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Option<ControllerView>> {
        Box::pin(async move {
            let cluster = self.cluster();
            if !cluster.running.contains(node) || cluster.paused.contains(node) {
                return None;
            }
            let last = cluster
                .reads
                .saturating_sub(1)
                .min(cluster.roles.len().saturating_sub(1));
            let roles = cluster.roles.get(last)?;
            let acting = roles.controller.as_deref() == Some(node) && !cluster.idle.contains(node);
            Some(ControllerView {
                acting_epoch: acting.then_some(roles.controller_epoch),
                ..ControllerView::default()
            })
        })
    }

    fn failpoint_hits<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Option<BTreeMap<String, u64>>> {
        Box::pin(async move {
            let cluster = self.cluster();
            cluster.failpoints.as_ref()?;
            Some(
                cluster
                    .hits
                    .iter()
                    .filter(|((n, _), _)| n == node)
                    .map(|((_, point), count)| (point.clone(), *count))
                    .collect(),
            )
        })
    }
}

const HELD_QUESTION: &str = "before_offsets_for_leader_epoch";
const HELD_ANSWER: &str = "after_offsets_for_leader_epoch";

impl Cluster {
    /// Leadership of `t/<number>` to `to` in every node's view, at the next epoch; a
    /// node that stops leading asks its question (reaching the question point if armed).
    /// The node `grudge` isolates (the one that drops the most others) back in the ISR of
    /// each of its partitions.
    fn rejoin(&mut self, grudge: &Grudge) {
        let Some(isolated) = grudge
            .0
            .iter()
            .max_by_key(|(_, dropped)| dropped.len())
            .map(|(node, _)| node.clone())
        else {
            return;
        };
        for roles in self.roles.iter_mut() {
            for p in roles.partitions.iter_mut() {
                if p.replicas.contains(&isolated) && !p.isr.contains(&isolated) {
                    p.isr.push(isolated.clone());
                }
            }
        }
    }

    fn transfer(&mut self, number: u32, to: &str) {
        let mut asked = Vec::new();
        for (node, views) in self.views.iter_mut() {
            for view in views.iter_mut().filter(|v| v.partition == number) {
                if view.leading && node != to {
                    asked.push(node.clone());
                }
                view.leading = node == to;
                view.leader = Some(to.to_string());
                view.leader_epoch = Some(view.leader_epoch.unwrap_or(1) + 1);
            }
        }
        // The metadata names the new leader too.
        for roles in self.roles.iter_mut() {
            for p in roles
                .partitions
                .iter_mut()
                .filter(|p| p.partition == number)
            {
                p.leader = Some(to.to_string());
                p.leader_epoch = Some(p.leader_epoch.unwrap_or(1) + 1);
            }
        }
        for node in asked {
            let key = (node, HELD_QUESTION.to_string());
            if self
                .failpoints
                .as_ref()
                .is_some_and(|armed| armed.contains_key(&key))
            {
                *self.hits.entry(key).or_default() += 1;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// A history in memory.

#[derive(Debug, Clone)]
struct Entry {
    invoke: bool,
    f: String,
    value: Value,
    error: Option<String>,
}

/// What was broken in the cluster when a swarm period's draw was recorded: the nodes
/// down, the nodes paused, the number of cuts.
type Snapshot = (BTreeSet<String>, BTreeSet<String>, usize);

#[derive(Default)]
struct Memory {
    entries: Mutex<Vec<Entry>>,
    /// The cluster to take a [`Snapshot`] of at each `swarm` operation.
    watched: Option<Arc<Scripted>>,
    snapshots: Mutex<Vec<(u64, Snapshot)>>,
}

impl Memory {
    fn entries(&self) -> Vec<Entry> {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn completions(&self) -> Vec<Entry> {
        self.entries().into_iter().filter(|e| !e.invoke).collect()
    }
}

impl Journal for Memory {
    fn invoke(&self, f: &str, value: Value) -> Result<u64, JournalError> {
        if let (Some(control), "swarm") = (&self.watched, f) {
            let cluster = control.cluster();
            let down = control
                .nodes
                .iter()
                .filter(|n| !cluster.running.contains(*n))
                .cloned()
                .collect();
            let snapshot = (down, cluster.paused.clone(), cluster.cuts.len());
            let period = value["period"].as_u64().unwrap_or(u64::MAX);
            self.snapshots
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((period, snapshot));
        }
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.push(Entry {
            invoke: true,
            f: f.into(),
            value,
            error: None,
        });
        Ok(entries.len() as u64)
    }

    fn complete(
        &self,
        _token: u64,
        f: &str,
        value: Value,
        error: Option<String>,
    ) -> Result<(), JournalError> {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Entry {
                invoke: false,
                f: f.into(),
                value,
                error,
            });
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Helpers.

fn options(packages: &[PackageKind], seed: u64, swarm: Option<Duration>) -> NemesisOptions {
    NemesisOptions {
        packages: packages.to_vec(),
        schedule: ScheduleOptions {
            seed,
            interval: Duration::from_millis(5),
            targets: Vec::new(),
            wipe: false,
            unclean_elections: false,
            asks_divergence: true,
        },
        swarm,
    }
}

fn nemesis(control: &Arc<Scripted>, journal: &Arc<Memory>) -> Nemesis {
    Nemesis::new(
        options(&[PackageKind::Aimed], 1, None),
        control.clone(),
        journal.clone(),
    )
}

/// A flap of `moves` moves 10 ms apart, with no delay and no replica put behind; held
/// or not.
fn flap(moves: u64, held: bool) -> Aim {
    Aim::Flap {
        moves,
        gap_ms: 10,
        slow: None,
        behind_ms: None,
        held,
    }
}

fn aim_step(aim: Aim, seed: u64) -> Step {
    Step {
        package: PackageKind::Aimed,
        index: 0,
        delay: Duration::ZERO,
        action: Action::Aim(aim),
        seed,
    }
}

fn stop_step() -> Step {
    Step {
        package: PackageKind::Aimed,
        index: 1,
        delay: Duration::ZERO,
        action: Action::StopAim,
        seed: 0,
    }
}

/// The strike's undo run: every node running, nothing paused or cut, and every
/// failpoint the strike armed released.
async fn undo_and_assert_released(nemesis: &Nemesis, control: &Scripted) {
    nemesis.execute_checked(&stop_step()).await.unwrap();
    control.assert_healed();
    let cluster = control.cluster();
    assert!(
        cluster.failpoints.as_ref().is_some_and(BTreeMap::is_empty),
        "released at the undo: {:?}",
        cluster.failpoints
    );
}

fn isolation(node: &str) -> Grudge {
    let others: BTreeSet<String> = ["n1", "n2", "n3", "n4", "n5"]
        .into_iter()
        .filter(|n| *n != node)
        .map(String::from)
        .collect();
    let mut edges = BTreeMap::new();
    edges.insert(node.to_string(), others.clone());
    for other in others {
        edges.insert(other, BTreeSet::from([node.to_string()]));
    }
    Grudge(edges)
}

// ---------------------------------------------------------------------------------------
// (1) Each trigger aims at the right node.

#[tokio::test]
async fn a_controller_cut_isolates_its_metadata_port_and_asks_while_it_is_cut() {
    let control = Scripted::new();
    // After two reads another node is controller: the cut is held until then.
    let mut successor = base_roles();
    successor.controller = Some("n3".into());
    control.script_roles(vec![base_roles(), base_roles(), successor.clone()]);
    let journal = Arc::new(Memory::default());
    let nemesis = nemesis(&control, &journal);
    let aim = Aim::ControllerCut {
        request: CutRequest::ElectPreferred,
        request_after_ms: 50,
        gated: false,
    };
    let (value, error) = nemesis.execute_checked(&aim_step(aim, 5)).await.unwrap();
    assert_eq!(error, None, "{value}");
    assert_eq!(value["node"], json!("n1"), "the controller");
    assert_eq!(value["meta_leader"], json!("n2"));
    assert_eq!(value["trigger"], json!("controller"));
    assert_eq!(value["ports"], json!("metadata"));
    assert_eq!(value["request"], json!({"action": "elect-preferred"}));
    assert!(
        value["request_error"].as_str().unwrap().contains("503"),
        "the request was sent while the cut was in place: {value}"
    );
    assert_eq!(
        control.cluster().cuts,
        vec![(isolation("n1"), Ports::Metadata)]
    );
    assert!(nemesis.state().holds(PackageKind::Aimed));
    assert_eq!(value["successor"], json!("n3"), "{value}");

    // A transfer goes to an in-sync follower of a partition that has one.
    control.script_roles(vec![base_roles(), base_roles(), base_roles(), successor]);
    let transfer = Aim::ControllerCut {
        request: CutRequest::TransferLeader,
        request_after_ms: 0,
        gated: false,
    };
    let (value, _) = nemesis
        .execute_checked(&aim_step(transfer, 6))
        .await
        .unwrap();
    let request = &value["request"];
    assert_eq!(request["action"], json!("transfer-leader"), "{value}");
    match request["partition"].as_u64() {
        Some(0) => assert!(["n2", "n3"].contains(&request["to"].as_str().unwrap())),
        Some(1) => assert_eq!(request["to"], json!("n3")),
        other => panic!("{other:?}"),
    }

    let (value, error) = nemesis.execute_checked(&stop_step()).await.unwrap();
    assert_eq!(error, None, "{value}");
    assert_eq!(value["uncut"]["healed"], json!(2));
    control.assert_healed();
    assert!(nemesis.state().is_healed());
}

#[tokio::test]
async fn a_gated_controller_cut_holds_the_controller_at_its_write_until_its_cut_healed() {
    let control = Scripted::new();
    control.cluster().failpoints = Some(BTreeMap::new());
    // The controller reaches its gate at the request; a successor is elected on the
    // third read of the roles.
    control.cluster().hits_on_admin = Some(("n1".into(), "controller_before_state_write".into()));
    let mut successor = base_roles();
    successor.controller = Some("n3".into());
    control.script_roles(vec![base_roles(), base_roles(), base_roles(), successor]);
    let journal = Arc::new(Memory::default());
    let nemesis = nemesis(&control, &journal);
    let aim = Aim::ControllerCut {
        request: CutRequest::TransferLeader,
        request_after_ms: 0,
        gated: true,
    };
    let (value, error) = nemesis.execute_checked(&aim_step(aim, 5)).await.unwrap();
    assert_eq!(error, None, "{value}");
    assert_eq!(value["node"], json!("n1"), "the controller");
    assert_eq!(value["gate_reached"], json!(true), "{value}");
    assert_eq!(value["successor"], json!("n3"), "{value}");
    assert_eq!(
        value["request"]["action"],
        json!("transfer-leader"),
        "{value}"
    );
    // Gate, request, cut, heal, release: in that order.
    let calls = control.cluster().calls.clone();
    assert_eq!(
        calls,
        vec![
            "arm n1 controller_before_state_write",
            "cut metadata",
            "uncut metadata",
            "release n1 controller_before_state_write",
        ],
        "{value}"
    );
    assert_eq!(control.cluster().admin.len(), 1);
    // Nothing is left for the undo.
    let (value, error) = nemesis.execute_checked(&stop_step()).await.unwrap();
    assert_eq!(error, None, "{value}");
    control.assert_healed();
    assert!(nemesis.state().is_healed(), "{:?}", nemesis.state());
}

/// Views of `t/0` (led by n1) and `t/1` (led by n2) as `base_roles` has them, except
/// that with `parted` n2 does not lead `t/1` in its own view.
fn leaders_views(parted: bool) -> BTreeMap<String, Vec<ReplicaView>> {
    let lead = |number: u32, leader: &str, isr: &[&str], leading: bool| ReplicaView {
        leading,
        leader: Some(if leading { leader } else { "n3" }.into()),
        leader_epoch: Some(1),
        isr: s(isr),
        ..view(number, leading, 20)
    };
    BTreeMap::from([
        (
            "n1".to_string(),
            vec![lead(0, "n1", &["n1", "n2", "n3"], true)],
        ),
        (
            "n2".to_string(),
            vec![lead(1, "n2", &["n2", "n3"], !parted)],
        ),
    ])
}

#[tokio::test(start_paused = true)]
async fn after_a_gated_cut_the_cluster_must_settle_and_the_strike_says_whether_it_did() {
    for parted in [false, true] {
        let control = Scripted::new();
        control.cluster().failpoints = Some(BTreeMap::new());
        control.cluster().hits_on_admin =
            Some(("n1".into(), "controller_before_state_write".into()));
        control.cluster().views = leaders_views(parted);
        let mut successor = base_roles();
        successor.controller = Some("n2".into());
        successor.controller_epoch = 4;
        control.script_roles(vec![base_roles(), base_roles(), successor]);
        let journal = Arc::new(Memory::default());
        let nemesis = nemesis(&control, &journal);
        let aim = Aim::ControllerCut {
            request: CutRequest::ElectPreferred,
            request_after_ms: 0,
            gated: true,
        };
        let (value, error) = nemesis.execute_checked(&aim_step(aim, 5)).await.unwrap();
        assert_eq!(error, None, "{value}");
        let settled = &value["settled"];
        if parted {
            assert_eq!(settled["converged"], json!(false), "{value}");
            assert_eq!(settled["diverged"][0]["key"], json!("t/1"), "{value}");
            let why = settled["diverged"][0]["why"].as_str().unwrap();
            assert!(why.contains("n2 follows n3"), "{why}");
            assert!(
                settled["waited_ms"].as_u64().unwrap()
                    >= nemesis::settle::SETTLE_WAIT.as_millis() as u64,
                "{value}"
            );
        } else {
            assert_eq!(settled["converged"], json!(true), "{value}");
            assert!(
                settled["waited_ms"].as_u64().unwrap()
                    >= nemesis::settle::SETTLE_MIN.as_millis() as u64,
                "{value}"
            );
        }
        control.assert_healed();
    }
}

/// A gated leader-transfer cut of the controller n1 (its gate reached at the request),
/// drawn with `seed`, on a cluster whose roles read `roles` in turn: the cluster and the
/// strike's value (the strike must succeed).
async fn gated_transfer_cut(roles: Vec<Roles>, seed: u64) -> (Arc<Scripted>, Value) {
    let control = Scripted::new();
    control.cluster().failpoints = Some(BTreeMap::new());
    control.cluster().hits_on_admin = Some(("n1".into(), "controller_before_state_write".into()));
    control.script_roles(roles);
    let journal = Arc::new(Memory::default());
    let nemesis = nemesis(&control, &journal);
    let aim = Aim::ControllerCut {
        request: CutRequest::TransferLeader,
        request_after_ms: 0,
        gated: true,
    };
    let (value, error) = nemesis.execute_checked(&aim_step(aim, seed)).await.unwrap();
    assert_eq!(error, None, "{value}");
    (control, value)
}

#[tokio::test]
async fn a_gated_cut_makes_its_controller_decide_about_a_partition_it_holds_no_replica_of() {
    for seed in 0..6 {
        let mut roles = base_roles();
        roles.partitions.push(PartitionRoles {
            replicas: s(&["n4", "n5", "n3"]),
            ..partition(2, "n4", 1, &["n4", "n5", "n3"])
        });
        let mut successor = roles.clone();
        successor.controller = Some("n3".into());
        let (_, value) =
            gated_transfer_cut(vec![roles.clone(), roles.clone(), roles, successor], seed).await;
        let request = &value["request"];
        assert_eq!(request["partition"], json!(2), "seed {seed}: {value}");
        assert!(
            ["n5", "n3"].contains(&request["to"].as_str().unwrap()),
            "{value}"
        );
    }
}

#[tokio::test]
async fn a_gated_cut_prefers_a_partition_its_controller_follows_to_one_it_leads() {
    // n1, the controller, is a replica of both partitions and leads t/0: its successor
    // would elect a new leader for t/0 and rewrite it under the held write.
    for seed in 0..6 {
        let mut successor = base_roles();
        successor.controller = Some("n3".into());
        let roles = vec![base_roles(), base_roles(), base_roles(), successor];
        let (_, value) = gated_transfer_cut(roles, seed).await;
        assert_eq!(
            value["request"]["partition"],
            json!(1),
            "seed {seed}: {value}"
        );
        assert_eq!(value["request"]["to"], json!("n3"), "seed {seed}: {value}");
    }
}

#[tokio::test]
async fn a_gated_cut_first_moves_leadership_off_a_controller_that_leads_every_partition() {
    for only_led in [true, false] {
        let mut roles = base_roles();
        if only_led {
            // t/0 alone, led by n1 with n2 its one in-sync follower; the metadata shows
            // the move at the second read after it.
            roles.partitions = vec![partition(0, "n1", 1, &["n1", "n2"])];
        }
        let mut moved = roles.clone();
        if only_led {
            moved.partitions = vec![partition(0, "n2", 2, &["n1", "n2"])];
        }
        let mut successor = moved.clone();
        successor.controller = Some("n3".into());
        let script = vec![
            roles.clone(),
            roles.clone(),
            roles,
            moved.clone(),
            moved,
            successor,
        ];
        let (control, value) = gated_transfer_cut(script, 3).await;
        let admin = control.cluster().admin.len();
        if only_led {
            assert_eq!(value["led_away"]["to"], json!("n2"), "{value}");
            assert_eq!(value["led_away"]["shown"], json!(true), "{value}");
            assert_eq!(admin, 2, "the move and the gated request: {value}");
            // Asked about the partition it now follows: to take it back.
            assert_eq!(value["request"]["partition"], json!(0), "{value}");
            assert_eq!(value["request"]["to"], json!("n1"), "{value}");
        } else {
            assert_eq!(value.get("led_away"), None, "{value}");
            assert_eq!(admin, 1, "{value}");
        }
    }
}

#[tokio::test]
async fn a_controller_cut_passes_over_a_named_controller_that_does_not_act_as_one() {
    let control = Scripted::new();
    control.cluster().failpoints = Some(BTreeMap::new());
    control.cluster().hits_on_admin = Some(("n3".into(), "controller_before_state_write".into()));
    // n1 is still named (its old session lives on) but no longer acts as controller;
    // after three reads n3 is elected, at the next epoch, and acts as one; after three
    // more, n4 succeeds it while it is cut off.
    control.cluster().idle.insert("n1".into());
    let mut elected = base_roles();
    elected.controller = Some("n3".into());
    elected.controller_epoch = 4;
    let mut successor = elected.clone();
    successor.controller = Some("n4".into());
    successor.controller_epoch = 5;
    control.script_roles(vec![
        base_roles(),
        base_roles(),
        base_roles(),
        elected.clone(),
        elected.clone(),
        elected,
        successor,
    ]);
    let journal = Arc::new(Memory::default());
    let nemesis = nemesis(&control, &journal);
    let aim = Aim::ControllerCut {
        request: CutRequest::ElectPreferred,
        request_after_ms: 0,
        gated: true,
    };
    let (value, error) = nemesis.execute_checked(&aim_step(aim, 5)).await.unwrap();
    assert_eq!(error, None, "{value}");
    assert_eq!(value["node"], json!("n3"), "the acting controller: {value}");
    assert_eq!(value["controller_epoch"], json!(4));
    assert_eq!(value["named_idle"], json!(3), "{value}");
    assert_eq!(value["gate_reached"], json!(true), "{value}");
    assert_eq!(value["successor"], json!("n4"), "{value}");
    assert_eq!(
        control.cluster().calls,
        vec![
            "arm n3 controller_before_state_write",
            "cut metadata",
            "uncut metadata",
            "release n3 controller_before_state_write",
        ]
    );
    let (value, error) = nemesis.execute_checked(&stop_step()).await.unwrap();
    assert_eq!(error, None, "{value}");
    control.assert_healed();
}

#[tokio::test(start_paused = true)]
async fn a_controller_cut_without_an_acting_controller_cuts_nothing() {
    let control = Scripted::new();
    control.cluster().idle.insert("n1".into());
    let journal = Arc::new(Memory::default());
    let nemesis = nemesis(&control, &journal);
    let aim = Aim::ControllerCut {
        request: CutRequest::ElectPreferred,
        request_after_ms: 0,
        gated: false,
    };
    let (value, error) = nemesis.execute_checked(&aim_step(aim, 5)).await.unwrap();
    let error = error.expect("no target");
    assert!(
        error.contains("no-target") && error.contains("n1"),
        "{error}"
    );
    assert!(value["named_idle"].as_u64().unwrap() > 10, "{value}");
    assert!(control.cluster().cuts.is_empty());
    assert!(control.cluster().admin.is_empty());
    control.assert_healed();
}

#[tokio::test]
async fn after_an_isr_expansion_its_leader_is_killed() {
    let control = Scripted::new();
    let mut expanded = base_roles();
    expanded.partitions[1].isr = s(&["n2", "n3", "n1"]);
    control.script_roles(vec![base_roles(), base_roles(), base_roles(), expanded]);
    let journal = Arc::new(Memory::default());
    let nemesis = nemesis(&control, &journal);
    let aim = Aim::AfterChange {
        strike: Strike::Kill,
        watch_ms: 3_000,
    };
    let (value, error) = nemesis.execute_checked(&aim_step(aim, 1)).await.unwrap();
    assert_eq!(error, None, "{value}");
    assert_eq!(value["trigger"], json!("isr-expansion"));
    assert_eq!(value["node"], json!("n2"), "t/1's leader");
    assert_eq!(value["change"]["key"], json!("t/1"));
    assert_eq!(value["change"]["added"], json!(["n1"]));
    assert_eq!(value["strike"], json!("kill"));
    assert_eq!(control.cluster().calls, vec!["kill n2"]);
    assert!(nemesis.state().aimed_killed.contains("n2"));

    let (value, error) = nemesis.execute_checked(&stop_step()).await.unwrap();
    assert_eq!(error, None, "{value}");
    assert_eq!(value["nodes"], json!(["n2"]));
    assert_eq!(control.cluster().calls, vec!["kill n2", "start n2"]);
    control.assert_healed();
    assert!(nemesis.state().is_healed());
}

#[tokio::test]
async fn after_a_leadership_move_the_new_leader_is_isolated() {
    let control = Scripted::new();
    let mut moved = base_roles();
    moved.partitions[0] = partition(0, "n3", 2, &["n3", "n2"]);
    control.script_roles(vec![base_roles(), moved]);
    let journal = Arc::new(Memory::default());
    let nemesis = nemesis(&control, &journal);
    let aim = Aim::AfterChange {
        strike: Strike::Isolate,
        watch_ms: 3_000,
    };
    let (value, error) = nemesis.execute_checked(&aim_step(aim, 1)).await.unwrap();
    assert_eq!(error, None, "{value}");
    assert_eq!(value["trigger"], json!("leader-move"));
    assert_eq!(value["node"], json!("n3"), "the new leader");
    assert_eq!(value["change"]["leader_before"], json!("n1"));
    assert_eq!(control.cluster().cuts, vec![(isolation("n3"), Ports::All)]);
    nemesis.execute_checked(&stop_step()).await.unwrap();
    control.assert_healed();
}

#[tokio::test]
async fn without_a_change_nothing_is_struck() {
    let control = Scripted::new();
    let journal = Arc::new(Memory::default());
    let nemesis = nemesis(&control, &journal);
    let aim = Aim::AfterChange {
        strike: Strike::Kill,
        watch_ms: 400,
    };
    let (value, error) = nemesis.execute_checked(&aim_step(aim, 1)).await.unwrap();
    let error = error.expect("no moment");
    assert!(error.starts_with("no-target"), "{error}");
    assert!(value["polls"].as_u64().unwrap() >= 2, "{value}");
    assert!(control.cluster().calls.is_empty());
    assert!(nemesis.state().is_healed());
}

fn lagging_views(control: &Scripted) {
    let mut cluster = control.cluster();
    // t/0: n1 leads at 10, n2 at 10, n3 at 7 (lags by 3). t/1: n2 leads at 5, n3 at 5.
    cluster
        .views
        .insert("n1".into(), vec![view(0, true, 10), view(1, false, 5)]);
    cluster
        .views
        .insert("n2".into(), vec![view(0, false, 10), view(1, true, 5)]);
    cluster
        .views
        .insert("n3".into(), vec![view(0, false, 7), view(1, false, 5)]);
}

#[tokio::test]
async fn on_a_lag_the_follower_or_the_leader_is_struck() {
    let control = Scripted::new();
    lagging_views(&control);
    let journal = Arc::new(Memory::default());
    let nemesis = nemesis(&control, &journal);
    let follower = Aim::Lagging {
        strike: Strike::Pause,
        whom: LagTarget::Follower,
        watch_ms: 1_000,
    };
    let (value, error) = nemesis
        .execute_checked(&aim_step(follower, 1))
        .await
        .unwrap();
    assert_eq!(error, None, "{value}");
    assert_eq!(value["trigger"], json!("hw-lag"));
    assert_eq!(value["node"], json!("n3"), "the lagging follower");
    assert_eq!(value["lag"]["leader"], json!("n1"));
    assert_eq!(value["lag"]["follower_hw"], json!(7));
    assert_eq!(control.cluster().paused, BTreeSet::from(["n3".to_string()]));
    nemesis.execute_checked(&stop_step()).await.unwrap();
    control.assert_healed();

    let leader = Aim::Lagging {
        strike: Strike::Kill,
        whom: LagTarget::Leader,
        watch_ms: 1_000,
    };
    let (value, error) = nemesis.execute_checked(&aim_step(leader, 1)).await.unwrap();
    assert_eq!(error, None, "{value}");
    assert_eq!(value["node"], json!("n1"), "the leader of the lag");
    assert!(!control.cluster().running.contains("n1"));
    nemesis.execute_checked(&stop_step()).await.unwrap();
    control.assert_healed();
}

#[tokio::test]
async fn a_lag_move_makes_the_lagging_follower_leader_after_delaying_the_leaders_answer() {
    let control = Scripted::new();
    lagging_views(&control);
    control.cluster().failpoints = Some(BTreeMap::new());
    let journal = Arc::new(Memory::default());
    let nemesis = nemesis(&control, &journal);
    let aim = Aim::LagMove {
        watch_ms: 1_000,
        answer_delay_ms: Some(800),
        behind_ms: None,
        widen_ms: None,
    };
    let (value, error) = nemesis.execute_checked(&aim_step(aim, 1)).await.unwrap();
    assert_eq!(error, None, "{value}");
    assert_eq!(value["trigger"], json!("hw-lag"));
    assert_eq!(value["node"], json!("n3"), "the lagging follower leads");
    assert_eq!(value["strike"], json!("transfer"));
    assert_eq!(value["targets"], json!("lagging-follower-leads"));
    {
        let cluster = control.cluster();
        assert_eq!(
            cluster.admin,
            vec![AdminAction::TransferLeader {
                topic: "t".into(),
                partition: 0,
                to: "n3".into(),
            }]
        );
        let armed = cluster.failpoints.as_ref().expect("failpoints");
        let key = ("n1".to_string(), STALE_ANSWER_POINT.to_string());
        assert!(
            armed.contains_key(&key),
            "the old leader's answer: {armed:?}"
        );
        let position = |call: &str| cluster.calls.iter().position(|c| c == call);
        assert!(position("arm n1 after_offsets_for_leader_epoch").is_some());
    }
    undo_and_assert_released(&nemesis, &control).await;
}

/// Transfers take effect in the roles (the metadata names the new leader), a healed
/// replica behind is back in the ISR, and failpoints can be armed.
fn moving_and_rejoining(control: &Scripted) {
    let mut cluster = control.cluster();
    cluster.moving = true;
    cluster.rejoining = true;
    cluster.failpoints = Some(BTreeMap::new());
}

/// One partition, t/0: n1 leads (HW 10), n2 in its ISR (HW 8: lags by 2), n3 a live
/// replica out of the ISR.
fn one_partition_with_a_third_replica(control: &Scripted) {
    let mut roles = base_roles();
    roles.partitions = vec![partition(0, "n1", 1, &["n1", "n2"])];
    control.script_roles(vec![roles]);
    let mut cluster = control.cluster();
    cluster.views.insert("n1".into(), vec![view(0, true, 10)]);
    cluster.views.insert("n2".into(), vec![view(0, false, 8)]);
    cluster.views.insert("n3".into(), vec![view(0, false, 3)]);
}

#[tokio::test]
async fn a_lag_move_with_a_third_replica_behind_heals_its_cut_right_after_the_move() {
    let control = Scripted::new();
    one_partition_with_a_third_replica(&control);
    moving_and_rejoining(&control);
    let journal = Arc::new(Memory::default());
    let nemesis = nemesis(&control, &journal);
    let aim = Aim::LagMove {
        watch_ms: 1_000,
        answer_delay_ms: None,
        behind_ms: Some(100),
        widen_ms: None,
    };
    let (value, error) = nemesis.execute_checked(&aim_step(aim, 1)).await.unwrap();
    assert_eq!(error, None, "{value}");
    // n3 is the only replica that leaves an in-sync follower beside the leader.
    assert_eq!(value["behind"]["replica"], json!("n3"), "{value}");
    assert_eq!(value["behind"]["left_isr"], json!(true), "{value}");
    assert_eq!(value["node"], json!("n2"), "the lagging follower leads");
    assert_eq!(value["lag"]["leader"], json!("n1"));
    assert_eq!(
        value["behind_healed_at_move"],
        json!(true),
        "healed once the roles named n2: {value}"
    );
    {
        let cluster = control.cluster();
        assert!(
            cluster.cuts.is_empty(),
            "healed at the move: {:?}",
            cluster.cuts
        );
        assert_eq!(cluster.admin.len(), 1, "{:?}", cluster.admin);
        let position = |call: &str| cluster.calls.iter().position(|c| c == call);
        let (cut, uncut) = (position("cut replication"), position("uncut replication"));
        assert!(cut.is_some() && cut < uncut, "{:?}", cluster.calls);
        // The old leader's answer was held from before the move until n3 was back in
        // the ISR, and released by the strike itself.
        let held = format!("arm n1 {STALE_ANSWER_POINT}");
        let released = format!("release n1 {STALE_ANSWER_POINT}");
        let (held, released) = (position(&held), position(&released));
        assert!(held.is_some() && held < uncut, "{:?}", cluster.calls);
        assert!(uncut < released, "{:?}", cluster.calls);
        assert!(
            cluster.failpoints.as_ref().is_some_and(BTreeMap::is_empty),
            "{:?}",
            cluster.failpoints
        );
    }
    assert_eq!(value["held"]["actions"], json!("pause"), "{value}");
    assert_eq!(value["rejoined"], json!(true), "{value}");
    assert!(
        value["held_ms"].as_u64().is_some_and(|ms| ms < 4_000),
        "released once n3 was back, not at the wait's end: {value}"
    );
    nemesis.execute_checked(&stop_step()).await.unwrap();
    control.assert_healed();
}

#[tokio::test]
async fn a_lag_move_puts_a_replica_out_of_the_isr_behind_before_one_in_it() {
    // Four seeds at once (each strike ends with a settle check the scripted cluster
    // never passes): a pick among both candidates would take n4 in one of them with
    // chance 15/16.
    let strikes: Vec<_> = (1..=4)
        .map(|seed| tokio::spawn(out_of_isr_behind(seed)))
        .collect();
    for strike in strikes {
        strike.await.expect("the strike's task");
    }
}

/// One lag move with a replica behind where t/0 (on n1..n4: n1 leads, n2 and n4 in its
/// ISR, n3 out of it; n1 the controller) could put n3 or n4 behind: n3, which needs no
/// wait, is the one.
async fn out_of_isr_behind(seed: u64) {
    let control = Scripted::new();
    {
        let mut roles = base_roles();
        let mut four = partition(0, "n1", 1, &["n1", "n2", "n4"]);
        four.replicas = s(&["n1", "n2", "n3", "n4"]);
        roles.partitions = vec![four];
        control.script_roles(vec![roles]);
        let mut cluster = control.cluster();
        cluster.views.insert("n1".into(), vec![view(0, true, 10)]);
        cluster.views.insert("n2".into(), vec![view(0, false, 8)]);
        cluster.views.insert("n4".into(), vec![view(0, false, 8)]);
        cluster.views.insert("n3".into(), vec![view(0, false, 3)]);
    }
    moving_and_rejoining(&control);
    let journal = Arc::new(Memory::default());
    let nemesis = nemesis(&control, &journal);
    let aim = Aim::LagMove {
        watch_ms: 300,
        answer_delay_ms: None,
        behind_ms: Some(10),
        widen_ms: None,
    };
    let (value, error) = nemesis.execute_checked(&aim_step(aim, seed)).await.unwrap();
    assert_eq!(error, None, "{value}");
    assert_eq!(
        value["behind"]["replica"],
        json!("n3"),
        "seed {seed}: {value}"
    );
    assert_eq!(value["behind"]["left_isr"], json!(true), "{value}");
    assert_eq!(value["rejoined"], json!(true), "{value}");
    nemesis.execute_checked(&stop_step()).await.unwrap();
    control.assert_healed();
}

#[tokio::test]
async fn a_lag_move_behind_watches_only_its_partition_and_heals_when_it_does_not_lag() {
    let control = Scripted::new();
    one_partition_with_a_third_replica(&control);
    // t/0 does not lag now; t/1 (replicas n2 n3 only, so no third replica) lags by 8.
    {
        let mut roles = base_roles();
        let mut other = partition(1, "n2", 1, &["n2", "n3"]);
        other.replicas = s(&["n2", "n3"]);
        roles.partitions = vec![partition(0, "n1", 1, &["n1", "n2"]), other];
        control.script_roles(vec![roles]);
        let mut cluster = control.cluster();
        cluster
            .views
            .insert("n2".into(), vec![view(0, false, 10), view(1, true, 10)]);
        cluster.views.insert("n3".into(), vec![view(1, false, 2)]);
    }
    let journal = Arc::new(Memory::default());
    let nemesis = nemesis(&control, &journal);
    let aim = Aim::LagMove {
        watch_ms: 400,
        answer_delay_ms: None,
        behind_ms: Some(50),
        widen_ms: None,
    };
    let (value, error) = nemesis.execute_checked(&aim_step(aim, 5)).await.unwrap();
    assert_eq!(value["behind"]["replica"], json!("n3"), "{value}");
    let error = error.expect("t/1's lag is not the partition put behind");
    assert!(error.starts_with("no-target"), "{error}");
    {
        let cluster = control.cluster();
        assert!(cluster.admin.is_empty(), "{:?}", cluster.admin);
        assert!(cluster.cuts.is_empty(), "healed: {value}");
        assert!(cluster.calls.iter().any(|c| c == "uncut replication"));
    }
    nemesis.execute_checked(&stop_step()).await.unwrap();
    control.assert_healed();
}

#[tokio::test]
async fn a_lag_move_behind_goes_on_without_a_replica_behind_where_there_is_no_third_one() {
    let control = Scripted::new();
    {
        // Two copies: t/0 on n1 (leads, HW 10) and n3 (in its ISR, HW 7).
        let mut roles = base_roles();
        let mut two = partition(0, "n1", 1, &["n1", "n3"]);
        two.replicas = s(&["n1", "n3"]);
        roles.partitions = vec![two];
        control.script_roles(vec![roles]);
        let mut cluster = control.cluster();
        cluster.views.insert("n1".into(), vec![view(0, true, 10)]);
        cluster.views.insert("n3".into(), vec![view(0, false, 7)]);
    }
    let journal = Arc::new(Memory::default());
    let nemesis = nemesis(&control, &journal);
    let aim = Aim::LagMove {
        watch_ms: 1_000,
        answer_delay_ms: None,
        behind_ms: Some(50),
        widen_ms: None,
    };
    let (value, error) = nemesis.execute_checked(&aim_step(aim, 1)).await.unwrap();
    assert_eq!(error, None, "{value}");
    assert!(value["behind_skipped"].is_string(), "{value}");
    assert!(value.get("behind").is_none(), "{value}");
    assert_eq!(value["node"], json!("n3"), "the lagging follower leads");
    {
        let cluster = control.cluster();
        assert!(
            cluster.calls.iter().all(|c| !c.starts_with("cut")),
            "{:?}",
            cluster.calls
        );
        assert_eq!(cluster.admin.len(), 1, "{:?}", cluster.admin);
    }
    nemesis.execute_checked(&stop_step()).await.unwrap();
    control.assert_healed();
}

#[tokio::test]
async fn a_lag_move_never_puts_the_controller_behind() {
    let control = Scripted::new();
    one_partition_with_a_third_replica(&control);
    {
        // n3, t/0's only third replica, is the controller: cutting its replication port
        // would also hold back the move's LeaderAndIsr.
        let mut roles = base_roles();
        roles.partitions = vec![partition(0, "n1", 1, &["n1", "n2"])];
        roles.controller = Some("n3".into());
        control.script_roles(vec![roles]);
    }
    let journal = Arc::new(Memory::default());
    let nemesis = nemesis(&control, &journal);
    let aim = Aim::LagMove {
        watch_ms: 1_000,
        answer_delay_ms: None,
        behind_ms: Some(50),
        widen_ms: None,
    };
    let (value, error) = nemesis.execute_checked(&aim_step(aim, 1)).await.unwrap();
    assert_eq!(error, None, "{value}");
    assert!(value["behind_skipped"].is_string(), "{value}");
    assert_eq!(value["node"], json!("n2"), "the lagging follower leads");
    assert!(
        control
            .cluster()
            .calls
            .iter()
            .all(|c| !c.starts_with("cut")),
        "{:?}",
        control.cluster().calls
    );
    nemesis.execute_checked(&stop_step()).await.unwrap();
    control.assert_healed();
}

#[tokio::test]
async fn a_widened_lag_move_slows_the_in_sync_follower_of_the_partition_put_behind() {
    let control = Scripted::new();
    one_partition_with_a_third_replica(&control);
    control.cluster().failpoints = Some(BTreeMap::new());
    control.cluster().rejoining = true;
    let journal = Arc::new(Memory::default());
    let nemesis = nemesis(&control, &journal);
    let aim = Aim::LagMove {
        watch_ms: 1_000,
        answer_delay_ms: None,
        behind_ms: Some(50),
        widen_ms: Some(700),
    };
    let (value, error) = nemesis.execute_checked(&aim_step(aim, 1)).await.unwrap();
    assert_eq!(error, None, "{value}");
    assert_eq!(value["widened"]["partition"], json!("t/0"), "{value}");
    assert_eq!(value["node"], json!("n2"), "the lagging follower leads");
    {
        let cluster = control.cluster();
        let armed = cluster.failpoints.as_ref().expect("failpoints");
        let widened =
            |node: &str| armed.contains_key(&(node.to_string(), LAG_WIDEN_POINT.to_string()));
        assert!(widened("n2"), "the in-sync follower: {armed:?}");
        assert!(!widened("n3"), "not the replica put behind: {armed:?}");
        assert!(!widened("n1"), "not the leader: {armed:?}");
        let position = |call: &str| cluster.calls.iter().position(|c| c == call);
        assert!(
            position(&format!("arm n2 {LAG_WIDEN_POINT}")).is_some(),
            "{:?}",
            cluster.calls
        );
        assert_eq!(cluster.admin.len(), 1, "{:?}", cluster.admin);
    }
    undo_and_assert_released(&nemesis, &control).await;
}

#[tokio::test]
async fn a_widened_lag_move_without_a_replica_behind_watches_only_the_partition_it_slowed() {
    let control = Scripted::new();
    // t/0 (n1 leads, n2 in its ISR) lags nowhere; t/1 has no in-sync follower, so t/0
    // is the one partition to widen; n3's lag on t/1 (out of its ISR) does not count.
    {
        let mut roles = base_roles();
        roles.partitions = vec![
            partition(0, "n1", 1, &["n1", "n2"]),
            partition(1, "n2", 1, &["n2"]),
        ];
        control.script_roles(vec![roles]);
        let mut cluster = control.cluster();
        cluster.views.insert("n1".into(), vec![view(0, true, 10)]);
        cluster
            .views
            .insert("n2".into(), vec![view(0, false, 10), view(1, true, 9)]);
        cluster.views.insert("n3".into(), vec![view(1, false, 2)]);
        cluster.failpoints = Some(BTreeMap::new());
    }
    let journal = Arc::new(Memory::default());
    let nemesis = nemesis(&control, &journal);
    let aim = Aim::LagMove {
        watch_ms: 300,
        answer_delay_ms: None,
        behind_ms: None,
        widen_ms: Some(400),
    };
    let (value, error) = nemesis.execute_checked(&aim_step(aim, 3)).await.unwrap();
    assert_eq!(value["widened"]["partition"], json!("t/0"), "{value}");
    let error = error.expect("t/0 does not lag");
    assert!(error.starts_with("no-target"), "{error}");
    {
        let cluster = control.cluster();
        assert!(cluster.admin.is_empty(), "{:?}", cluster.admin);
        let armed = cluster.failpoints.as_ref().expect("failpoints");
        assert!(
            armed.contains_key(&("n2".to_string(), LAG_WIDEN_POINT.to_string())),
            "{armed:?}"
        );
    }
    undo_and_assert_released(&nemesis, &control).await;
}

#[tokio::test]
async fn without_replica_views_a_lag_strike_says_so() {
    let control = Scripted::new();
    let journal = Arc::new(Memory::default());
    let nemesis = nemesis(&control, &journal);
    let aim = Aim::Lagging {
        strike: Strike::Kill,
        whom: LagTarget::Leader,
        watch_ms: 200,
    };
    let (_, error) = nemesis.execute_checked(&aim_step(aim, 1)).await.unwrap();
    assert!(
        error.as_deref().unwrap_or("").contains("replica views"),
        "{error:?}"
    );
    assert!(control.cluster().calls.is_empty());
}

// ---------------------------------------------------------------------------------------
// (2) The step's seed makes the choices.

#[tokio::test]
async fn the_same_seed_strikes_the_same_node() {
    // Two followers lag equally (t/0: n2 and n3 at 7 behind n1 at 10).
    let struck = |seed: u64| async move {
        let control = Scripted::new();
        lagging_views(&control);
        control
            .cluster()
            .views
            .insert("n2".into(), vec![view(0, false, 7), view(1, true, 5)]);
        let journal = Arc::new(Memory::default());
        let nemesis = nemesis(&control, &journal);
        let aim = Aim::Lagging {
            strike: Strike::Pause,
            whom: LagTarget::Follower,
            watch_ms: 500,
        };
        let (value, _) = nemesis.execute_checked(&aim_step(aim, seed)).await.unwrap();
        value["node"].as_str().unwrap().to_string()
    };
    let mut seen = BTreeSet::new();
    for seed in 0..16 {
        let first = struck(seed).await;
        assert_eq!(first, struck(seed).await, "seed {seed}");
        seen.insert(first);
    }
    assert_eq!(
        seen,
        BTreeSet::from(["n2".to_string(), "n3".to_string()]),
        "seeds choose among the equal lags"
    );
}

// ---------------------------------------------------------------------------------------
// (3) heal_all restores everything the package left.

#[tokio::test]
async fn heal_all_restores_what_strikes_left() {
    let control = Scripted::new();
    lagging_views(&control);
    let journal = Arc::new(Memory::default());
    let nemesis = nemesis(&control, &journal);
    // A pause of the lagging follower n3; then (n2 lagging now) a kill of the leader n1;
    // then an isolation of t/1's re-elected leader n2.
    let pause = Aim::Lagging {
        strike: Strike::Pause,
        whom: LagTarget::Follower,
        watch_ms: 500,
    };
    let (value, error) = nemesis.execute_checked(&aim_step(pause, 3)).await.unwrap();
    assert_eq!((error, &value["node"]), (None, &json!("n3")), "{value}");
    control
        .cluster()
        .views
        .insert("n2".into(), vec![view(0, false, 8), view(1, true, 5)]);
    let kill = Aim::Lagging {
        strike: Strike::Kill,
        whom: LagTarget::Leader,
        watch_ms: 500,
    };
    let (value, error) = nemesis.execute_checked(&aim_step(kill, 3)).await.unwrap();
    assert_eq!((error, &value["node"]), (None, &json!("n1")), "{value}");
    let mut moved = base_roles();
    moved.partitions[1] = partition(1, "n2", 2, &["n2"]);
    control.script_roles(vec![base_roles(), moved]);
    let isolate = Aim::AfterChange {
        strike: Strike::Isolate,
        watch_ms: 2_000,
    };
    let (value, error) = nemesis
        .execute_checked(&aim_step(isolate, 3))
        .await
        .unwrap();
    assert_eq!(error, None, "{value}");
    {
        let cluster = control.cluster();
        assert_eq!(cluster.paused, BTreeSet::from(["n3".to_string()]));
        assert!(!cluster.running.contains("n1"));
        assert_eq!(cluster.cuts.len(), 1);
    }
    let before = journal.completions().len();
    let left = nemesis.heal_all().await.unwrap();
    assert!(left.is_healed(), "{left:?}");
    control.assert_healed();
    let healing: Vec<Entry> = journal.completions().split_off(before);
    assert!(
        healing.iter().all(|e| e.value["final"] == json!(true)),
        "{healing:?}"
    );
    let fs: Vec<&str> = healing.iter().map(|e| e.f.as_str()).collect();
    assert_eq!(
        fs,
        vec!["stop-aimed", "stop-aimed"],
        "the cut with the network, then the package's kill and pause"
    );
    assert_eq!(healing[1].value["nodes"], json!(["n1", "n3"]));
    assert!(healing.iter().all(|e| e.error.is_none()), "{healing:?}");
    // Nothing more to do.
    let again = journal.completions().len();
    nemesis.heal_all().await.unwrap();
    assert_eq!(journal.completions().len(), again);
}

// ---------------------------------------------------------------------------------------
// Swarm runs.

const START_FS: &[(&str, PackageKind)] = &[
    ("kill", PackageKind::Kill),
    ("pause", PackageKind::Pause),
    ("start-partition", PackageKind::Partition),
];

#[tokio::test]
async fn a_swarm_acts_only_in_periods_that_let_it_and_calm_periods_are_calm() {
    let packages = [
        PackageKind::Kill,
        PackageKind::Pause,
        PackageKind::Partition,
    ];
    let seed = 2024;
    let control = Scripted::new();
    let journal = Arc::new(Memory {
        watched: Some(control.clone()),
        ..Memory::default()
    });
    let nemesis = Nemesis::new(
        options(&packages, seed, Some(Duration::from_millis(60))),
        control.clone(),
        journal.clone(),
    );
    let (stop_tx, stop_rx) = watch::channel(false);
    let (summary, ()) = tokio::join!(nemesis.run(stop_rx), async {
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        stop_tx.send(true).unwrap();
    });
    let summary = summary.unwrap();
    nemesis.heal_all().await.unwrap();
    control.assert_healed();

    let entries = journal.entries();
    let draws: BTreeMap<u64, SwarmDraw> = entries
        .iter()
        .filter(|e| e.invoke && e.f == "swarm")
        .map(|e| {
            let period = e.value["period"].as_u64().expect("a period");
            let draw = SwarmDraw::draw(seed, period, &packages, false);
            assert_eq!(e.value, draw.value(), "the draw of the seed and period");
            (period, draw)
        })
        .collect();
    assert!(draws.len() >= 15, "{} periods", draws.len());
    assert_eq!(
        draws.keys().copied().collect::<Vec<_>>(),
        (0..draws.len() as u64).collect::<Vec<_>>()
    );
    assert!(draws.values().any(|d| d.calm), "some period is calm");
    assert!(draws.values().any(|d| !d.calm));
    assert!(summary.by_f.get("swarm").copied().unwrap_or(0) >= 15);

    // Every fault started in a period that lets its package act.
    let mut starts = BTreeMap::<PackageKind, u64>::new();
    for entry in entries.iter().filter(|e| e.invoke) {
        if let Some((_, package)) = START_FS.iter().find(|(f, _)| *f == entry.f) {
            let tagged = entry.value["swarm_period"].as_u64().expect("tagged");
            assert!(
                draws[&tagged].is_on(*package),
                "{} in period {tagged}: {:?}",
                entry.f,
                draws[&tagged]
            );
            *starts.entry(*package).or_default() += 1;
        }
    }
    assert_eq!(starts.len(), 3, "every package acted: {starts:?}");

    // When a period ends, every package off in it holds nothing in the cluster: a calm
    // period ends with nothing broken.
    let snapshots = journal
        .snapshots
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let mut calm_ends = 0;
    for (period, (down, paused, cuts)) in snapshots.iter().skip(1) {
        let ended = &draws[&(period - 1)];
        if !ended.is_on(PackageKind::Kill) {
            assert!(down.is_empty(), "period {}: down {down:?}", ended.period);
        }
        if !ended.is_on(PackageKind::Pause) {
            assert!(
                paused.is_empty(),
                "period {}: paused {paused:?}",
                ended.period
            );
        }
        if !ended.is_on(PackageKind::Partition) {
            assert_eq!(*cuts, 0, "period {}: cuts", ended.period);
        }
        calm_ends += usize::from(ended.calm);
    }
    assert!(calm_ends >= 1, "a calm period ended within the run");
}

#[tokio::test]
async fn a_swarm_of_calm_periods_starts_nothing() {
    // Seeds whose first periods are all calm: nothing starts.
    let packages = [PackageKind::Kill, PackageKind::Partition];
    let seed = (0..100_000u64)
        .find(|seed| (0..5).all(|p| SwarmDraw::draw(*seed, p, &packages, false).calm))
        .expect("a seed with five calm periods");
    let control = Scripted::new();
    let journal = Arc::new(Memory::default());
    let nemesis = Nemesis::new(
        options(&packages, seed, Some(Duration::from_millis(100))),
        control.clone(),
        journal.clone(),
    );
    let (stop_tx, stop_rx) = watch::channel(false);
    let (summary, ()) = tokio::join!(nemesis.run(stop_rx), async {
        tokio::time::sleep(Duration::from_millis(350)).await;
        stop_tx.send(true).unwrap();
    });
    summary.unwrap();
    let fs: Vec<String> = journal.completions().into_iter().map(|e| e.f).collect();
    assert!(
        (3..=5).contains(&fs.len()) && fs.iter().all(|f| f == "swarm"),
        "only the periods' draws: {fs:?}"
    );
    assert!(control.cluster().calls.is_empty());
    assert!(nemesis.state().is_healed());
}

#[tokio::test]
async fn a_flap_moves_leadership_away_and_back_and_its_undo_releases_its_delay() {
    let control = Scripted::new();
    let journal = Arc::new(Memory::default());
    let nemesis = nemesis(&control, &journal);
    let aim = flap(3, false);
    let (value, error) = nemesis.execute_checked(&aim_step(aim, 3)).await.unwrap();
    assert_eq!(error, None, "{value}");
    assert_eq!(value["trigger"], json!("flap"));
    let between = value["between"].as_array().expect("between").clone();
    let (follower, leader) = (between[0].clone(), between[1].clone());
    let moves: Vec<Value> = value["moves"]
        .as_array()
        .expect("moves")
        .iter()
        .map(|m| m["to"].clone())
        .collect();
    assert_eq!(
        moves,
        vec![follower.clone(), leader.clone(), follower.clone()]
    );
    let sent: Vec<AdminAction> = control.cluster().admin.clone();
    assert_eq!(sent.len(), 3);
    for action in &sent {
        assert!(
            matches!(action, AdminAction::TransferLeader { .. }),
            "{action:?}"
        );
    }
    match value["key"].as_str() {
        Some("t/0") => assert_eq!(leader, json!("n1")),
        Some("t/1") => assert_eq!((leader, follower), (json!("n2"), json!("n3"))),
        other => panic!("{other:?}"),
    }

    // A slow flap arms its delay on one replica first; this cluster has no failpoints,
    // so the arming fails, is said, and the undo forgets it.
    let slow = Aim::Flap {
        moves: 3,
        gap_ms: 10,
        slow: Some(FlapDelay {
            delay: nemesis::slow::Delay {
                point: "after_offsets_for_leader_epoch".into(),
                delay_ms: 800,
                percent: 100,
            },
            on: FlapSlowed::AnyReplica,
        }),
        behind_ms: None,
        held: false,
    };
    let (value, _) = nemesis.execute_checked(&aim_step(slow, 4)).await.unwrap();
    assert!(value["slow"]["error"].as_str().is_some(), "{value}");
    assert!(nemesis.state().holds(PackageKind::Aimed));
    let (value, _) = nemesis.execute_checked(&stop_step()).await.unwrap();
    assert!(value.get("released").is_some(), "{value}");
    assert!(nemesis.state().is_healed(), "{:?}", nemesis.state());
    control.assert_healed();
}

#[tokio::test]
async fn a_flap_that_puts_a_replica_behind_cuts_it_until_it_leaves_the_isr_and_heals_before_the_moves(
) {
    let control = Scripted::new();
    // t/1 has two replicas only, so the flap takes t/0 (n1 leads, ISR n1 n2 n3); once
    // cut, the leader's ISR is n1 alone in the roles read next.
    let mut first = base_roles();
    first.partitions[1].replicas = s(&["n2", "n3"]);
    let mut shrunk = first.clone();
    shrunk.partitions[0].isr = s(&["n1"]);
    control.script_roles(vec![first.clone(), first, shrunk]);
    let journal = Arc::new(Memory::default());
    let nemesis = nemesis(&control, &journal);
    let aim = Aim::Flap {
        moves: 3,
        gap_ms: 10,
        slow: Some(FlapDelay {
            delay: nemesis::slow::Delay {
                point: "after_offsets_for_leader_epoch".into(),
                delay_ms: 25,
                percent: 100,
            },
            on: FlapSlowed::SteppingDown,
        }),
        behind_ms: Some(20),
        held: false,
    };
    let (value, error) = nemesis.execute_checked(&aim_step(aim, 5)).await.unwrap();
    assert_eq!(error, None, "{value}");
    assert_eq!(value["key"], json!("t/0"), "{value}");
    let follower = value["between"][0]
        .as_str()
        .expect("a follower")
        .to_string();
    let behind = value["behind"]["replica"]
        .as_str()
        .expect("behind")
        .to_string();
    assert!(
        ["n2", "n3"].contains(&behind.as_str()) && behind != follower,
        "{value}"
    );
    assert_eq!(value["behind"]["left_isr"], json!(true), "{value}");
    assert_eq!(value["behind"]["ports"], json!("replication"));
    assert_eq!(value["behind_healed"]["healed"], json!(1), "{value}");
    // The cut is gone before the moves; only the delay waits for the undo.
    assert!(control.cluster().cuts.is_empty());
    assert_eq!(control.cluster().admin.len(), 3);
    // The delay is tried on the leader that steps down first, n1, alone (this cluster
    // has no failpoints: the arming fails and says where).
    let errors = value["slow"]["errors"].as_object().expect("errors").clone();
    assert_eq!(
        errors.keys().cloned().collect::<Vec<_>>(),
        vec!["n1 after_offsets_for_leader_epoch".to_string()],
        "{value}"
    );
    nemesis.execute_checked(&stop_step()).await.unwrap();
    assert!(nemesis.state().is_healed(), "{:?}", nemesis.state());
    control.assert_healed();
}

/// A cluster whose leader transfers take effect, with failpoints: t/0 led by n1 (n2, n3
/// follow), t/1 led by n2 (n3 follows).
fn moving_cluster() -> Arc<Scripted> {
    let control = Scripted::new();
    {
        let mut cluster = control.cluster();
        cluster.failpoints = Some(BTreeMap::new());
        cluster.moving = true;
        // t/0 led by n1 (n2, n3 follow), t/1 led by n2 (n3 follows).
        for node in ["n1", "n2", "n3"] {
            let mut views = vec![ReplicaView {
                leader: Some("n1".into()),
                leader_epoch: Some(1),
                ..view(0, node == "n1", 20)
            }];
            if node != "n1" {
                views.push(ReplicaView {
                    leader: Some("n2".into()),
                    leader_epoch: Some(1),
                    ..view(1, node == "n2", 20)
                });
            }
            cluster.views.insert(node.into(), views);
        }
    }
    control
}

#[tokio::test]
async fn a_held_flap_holds_the_stepping_down_leaders_answer_until_leadership_left_it_twice() {
    let control = moving_cluster();
    let journal = Arc::new(Memory::default());
    let nemesis = nemesis(&control, &journal);
    let aim = flap(4, true);
    let (value, error) = nemesis.execute_checked(&aim_step(aim, 3)).await.unwrap();
    assert_eq!(error, None, "{value}");
    let leader = value["between"][1].as_str().expect("a leader").to_string();
    let follower = value["between"][0]
        .as_str()
        .expect("a follower")
        .to_string();
    assert_eq!(
        value["held"]["reached"],
        json!([
            "away",
            "answered",
            "back",
            "committed",
            "away-again",
            "asked-again"
        ]),
        "{value}"
    );
    assert_eq!(value["held"]["missed"], json!([]), "{value}");
    assert_eq!(value["held"]["on"], json!(leader));
    assert!(
        value["held"]["committed_to"].as_u64() > value["held"]["committed_from"].as_u64(),
        "{value}"
    );
    // Away, back, away (paced), then one more after a gap.
    let moves: Vec<Value> = value["moves"]
        .as_array()
        .expect("moves")
        .iter()
        .map(|m| m["to"].clone())
        .collect();
    assert_eq!(
        moves,
        vec![
            json!(follower),
            json!(leader),
            json!(follower),
            json!(leader)
        ]
    );
    // The question is held before the first move and let go once the answer is held;
    // the answer is released only after the third move.
    let calls = control.cluster().calls.clone();
    let at = |call: String| {
        calls
            .iter()
            .position(|c| *c == call)
            .unwrap_or_else(|| panic!("{call} not in {calls:?}"))
    };
    let question = at(format!("arm {leader} {HELD_QUESTION}"));
    let answer = at(format!("arm {leader} {HELD_ANSWER}"));
    let question_released = at(format!("release {leader} {HELD_QUESTION}"));
    let answer_released = at(format!("release {leader} {HELD_ANSWER}"));
    assert!(question < answer && answer < question_released && question_released < answer_released);
    // The question it asks after the third move is held again, and let go only after
    // the answer: the stale answer is the first it gets in that epoch.
    let arms_of_question: Vec<usize> = (0..calls.len())
        .filter(|i| calls[*i] == format!("arm {leader} {HELD_QUESTION}"))
        .collect();
    let releases_of_question: Vec<usize> = (0..calls.len())
        .filter(|i| calls[*i] == format!("release {leader} {HELD_QUESTION}"))
        .collect();
    assert_eq!(arms_of_question.len(), 2, "{calls:?}");
    assert_eq!(releases_of_question.len(), 2, "{calls:?}");
    assert!(
        question_released < arms_of_question[1] && arms_of_question[1] < answer_released,
        "{calls:?}"
    );
    assert!(answer_released < releases_of_question[1], "{calls:?}");
    assert_eq!(
        value["held"]["question_again"]["actions"],
        json!("pause"),
        "{value}"
    );
    assert!(control.cluster().failpoints.as_ref().unwrap().is_empty());
    // Nothing is left for the undo.
    nemesis.execute_checked(&stop_step()).await.unwrap();
    assert!(nemesis.state().is_healed(), "{:?}", nemesis.state());
    control.assert_healed();
}

#[tokio::test]
async fn a_held_flap_tries_a_refused_move_again_until_it_is_taken() {
    let control = moving_cluster();
    control.cluster().refusals = 2;
    let journal = Arc::new(Memory::default());
    let nemesis = nemesis(&control, &journal);
    let aim = flap(3, true);
    let (value, error) = nemesis.execute_checked(&aim_step(aim, 3)).await.unwrap();
    assert_eq!(error, None, "{value}");
    assert_eq!(value["moves"][0]["tries"], json!(3), "{value}");
    assert!(value["moves"][0].get("error").is_none(), "{value}");
    assert!(value["moves"][1].get("tries").is_none(), "{value}");
    assert_eq!(value["held"]["missed"], json!([]), "{value}");
    // Two refused, then the three paced moves.
    assert_eq!(control.cluster().admin.len(), 5);
    nemesis.execute_checked(&stop_step()).await.unwrap();
    assert!(nemesis.state().is_healed(), "{:?}", nemesis.state());
    control.assert_healed();
}

#[tokio::test]
async fn a_held_flap_on_a_cluster_that_never_moves_says_which_stages_it_missed() {
    // The views never change and there are no failpoints: every stage is missed, the
    // moves are still sent, and nothing is left held.
    let control = Scripted::new();
    let journal = Arc::new(Memory::default());
    let nemesis = nemesis(&control, &journal);
    let aim = flap(3, true);
    let began = std::time::Instant::now();
    let (value, _) = nemesis.execute_checked(&aim_step(aim, 3)).await.unwrap();
    assert_eq!(value["held"]["reached"], json!([]), "{value}");
    assert_eq!(
        value["held"]["missed"],
        json!([
            "away",
            "answered",
            "back",
            "committed",
            "away-again",
            "asked-again"
        ]),
        "{value}"
    );
    assert!(value["held"]["question"]["error"].is_string(), "{value}");
    assert_eq!(control.cluster().admin.len(), 3);
    // Each stage gives up after its wait (four waits; "committed" needs "back").
    assert!(began.elapsed() < nemesis::aimed::HELD_STAGE_WAIT * 6);
    nemesis.execute_checked(&stop_step()).await.unwrap();
    assert!(nemesis.state().is_healed(), "{:?}", nemesis.state());
}

#[tokio::test]
async fn the_slow_package_neither_rearms_nor_releases_a_point_an_aimed_strike_holds() {
    let control = Scripted::new();
    control.cluster().failpoints = Some(BTreeMap::new());
    let journal = Arc::new(Memory::default());
    let nemesis = nemesis(&control, &journal);
    // A slow flap holds its stale answer on the leader that steps down (t/0: n1, or
    // t/1: n2) until the aimed undo.
    let aim = Aim::Flap {
        moves: 3,
        gap_ms: 10,
        slow: Some(FlapDelay {
            delay: nemesis::slow::Delay {
                point: HELD_ANSWER.into(),
                delay_ms: 25,
                percent: 100,
            },
            on: FlapSlowed::SteppingDown,
        }),
        behind_ms: None,
        held: false,
    };
    let (value, error) = nemesis.execute_checked(&aim_step(aim, 3)).await.unwrap();
    assert_eq!(error, None, "{value}");
    let leader = value["between"][1].as_str().expect("a leader").to_string();
    let held = (leader.clone(), HELD_ANSWER.to_string());
    assert_eq!(
        control.cluster().failpoints.as_ref().unwrap().get(&held),
        Some(&"return(25)".to_string())
    );
    // A slow period on the same node and point leaves the strike's arming alone...
    let slow = |action| Step {
        package: PackageKind::Slow,
        index: 0,
        delay: Duration::ZERO,
        action,
        seed: 1,
    };
    let (value, error) = nemesis
        .execute_checked(&slow(Action::Slow {
            target: nemesis::TargetSpec::Nodes(vec![leader.clone()]),
            delays: vec![
                nemesis::slow::Delay {
                    point: HELD_ANSWER.into(),
                    delay_ms: 900,
                    percent: 50,
                },
                nemesis::slow::Delay {
                    point: "leader_fetch_response".into(),
                    delay_ms: 300,
                    percent: 100,
                },
            ],
        }))
        .await
        .unwrap();
    assert_eq!(error, None, "{value}");
    assert_eq!(
        value["held_by_aimed"][0]["point"],
        json!(HELD_ANSWER),
        "{value}"
    );
    assert_eq!(
        control.cluster().failpoints.as_ref().unwrap().get(&held),
        Some(&"return(25)".to_string())
    );
    // ...and its stop releases only its own.
    let (value, error) = nemesis
        .execute_checked(&slow(Action::StopSlow))
        .await
        .unwrap();
    assert_eq!(error, None, "{value}");
    let armed = control.cluster().failpoints.clone().unwrap();
    assert_eq!(
        armed.keys().cloned().collect::<Vec<_>>(),
        vec![held.clone()]
    );
    // The strike's undo releases the hold.
    nemesis.execute_checked(&stop_step()).await.unwrap();
    assert!(control.cluster().failpoints.as_ref().unwrap().is_empty());
    assert!(nemesis.state().is_healed(), "{:?}", nemesis.state());
}

fn strand(alone_ms: u64) -> Aim {
    Aim::Strand { alone_ms }
}

/// The roles a strand of `t/0` reads: twice as it starts (its own read, the cut's), then
/// n1 alone in the ISR, then (with `elected`) n2 leading without it. `t/1`'s ISR is its
/// leader alone, so `t/0` is the only candidate.
fn strand_roles(elected: bool) -> Vec<Roles> {
    let mut first = base_roles();
    first.partitions[1].isr = s(&["n2"]);
    let mut alone = first.clone();
    alone.partitions[0].isr = s(&["n1"]);
    let mut roles = vec![first.clone(), first, alone.clone()];
    if elected {
        let mut moved = alone;
        moved.partitions[0].leader = Some("n2".into());
        moved.partitions[0].leader_epoch = Some(2);
        moved.partitions[0].isr = s(&["n2"]);
        roles.push(moved);
    }
    roles
}

/// n1's first read of its replica views says what the metadata of [`base_roles`] does:
/// it leads `t/0`, with n2 and n3 in its ISR (a strand looks for that before it cuts).
fn n1_says_it_leads(control: &Scripted) {
    let leads = ReplicaView {
        isr: s(&["n1", "n2", "n3"]),
        ..view(0, true, 20)
    };
    control
        .cluster()
        .first_views
        .insert("n1".into(), VecDeque::from([vec![leads]]));
}

/// Once stranded, n1 follows with its log at 30, and n2 leads `t/0` with its log at 30
/// too: the successor has reached the end the stranded replica kept.
fn successor_caught_up(control: &Scripted) {
    let mut cluster = control.cluster();
    cluster
        .views
        .insert("n1".into(), vec![log_end_view(0, false, 30)]);
    cluster
        .views
        .insert("n2".into(), vec![log_end_view(0, true, 30)]);
}

/// A strand of `alone_ms` (its strike drawn with `seed`) by a fresh nemesis on
/// `control`'s cluster: the nemesis (for the undo), the strike's value and its error.
async fn strike_strand(
    control: &Arc<Scripted>,
    alone_ms: u64,
    seed: u64,
) -> (Nemesis, Value, Option<String>) {
    let journal = Arc::new(Memory::default());
    let nemesis = nemesis(control, &journal);
    let (value, error) = nemesis
        .execute_checked(&aim_step(strand(alone_ms), seed))
        .await
        .unwrap();
    (nemesis, value, error)
}

fn log_end_view(partition: u32, leading: bool, end: u64) -> ReplicaView {
    ReplicaView {
        log_end_offset: end,
        ..view(partition, leading, end)
    }
}

#[tokio::test]
async fn a_strand_leaves_the_leader_alone_pauses_it_until_another_leads_and_brings_it_back_ahead() {
    let control = Scripted::new();
    n1_says_it_leads(&control);
    control.script_roles(strand_roles(true));
    // The successor's log has reached the stranded one's: released at once.
    successor_caught_up(&control);
    let (nemesis, value, error) = strike_strand(&control, 10, 6).await;
    assert_eq!(error, None, "{value}");
    assert_eq!(value["targets"], json!("stranded-leader"), "{value}");
    assert_eq!(value["key"], json!("t/0"), "{value}");
    assert_eq!(value["node"], json!("n1"), "{value}");
    assert_eq!(value["strike"], json!("pause"), "{value}");
    assert_eq!(value["alone"]["isr_alone"], json!(true), "{value}");
    assert_eq!(value["alone"]["ports"], json!("replication"), "{value}");
    assert_eq!(value["stranded"]["high_watermark"], json!(30), "{value}");
    assert_eq!(value["failover"]["leader"], json!("n2"), "{value}");
    assert_eq!(value["returned"]["kept_log_end"], json!(30), "{value}");
    assert_eq!(value["returned"]["successor_log_end"], json!(30), "{value}");
    assert_eq!(value["returned"]["uncut"]["healed"], json!(1), "{value}");
    // The point is held on the stranded leader (this cluster has no failpoints: the
    // arming fails and says so) and forgotten at the release.
    assert_eq!(value["held"]["node"], json!("n1"), "{value}");
    assert_eq!(
        value["held"]["point"],
        json!("before_list_offsets"),
        "{value}"
    );
    assert!(value["held"]["error"].as_str().is_some(), "{value}");
    assert!(nemesis.state().slowed.is_empty(), "{:?}", nemesis.state());
    // Cut, paused, then uncut before it is resumed: it comes back to a reachable leader.
    let calls = control.cluster().calls.clone();
    let at = |call: &str| calls.iter().position(|c| c == call).expect(call);
    assert!(at("cut replication") < at("pause n1"), "{calls:?}");
    assert!(at("pause n1") < at("uncut replication"), "{calls:?}");
    assert!(at("uncut replication") < at("resume n1"), "{calls:?}");
    // Nothing is left broken but the delay, which the undo releases.
    assert!(control.cluster().paused.is_empty());
    assert!(control.cluster().cuts.is_empty());
    nemesis.execute_checked(&stop_step()).await.unwrap();
    assert!(nemesis.state().is_healed(), "{:?}", nemesis.state());
    control.assert_healed();
}

#[tokio::test(start_paused = true)]
async fn a_strand_waits_until_the_leader_the_metadata_names_says_it_leads() {
    // The metadata names n1 leader of t/0 (its only candidate), but n1 was restarted a
    // moment ago: its first three reads say it follows, then it leads. (The roles are
    // read once more for each look.)
    let control = Scripted::new();
    let mut roles = strand_roles(true);
    roles.splice(0..0, vec![roles[0].clone(); 3]);
    control.script_roles(roles);
    let follows = vec![view(0, false, 10)];
    let leads = ReplicaView {
        isr: s(&["n1", "n2"]),
        ..view(0, true, 20)
    };
    {
        let mut cluster = control.cluster();
        cluster.first_views.insert(
            "n1".into(),
            VecDeque::from([follows.clone(), follows.clone(), follows, vec![leads]]),
        );
    }
    successor_caught_up(&control);
    let (nemesis, value, error) = strike_strand(&control, 10, 6).await;
    assert_eq!(error, None, "{value}");
    assert_eq!(value["picked"]["looked"], json!(4), "{value}");
    assert_eq!(value["node"], json!("n1"), "{value}");
    assert_eq!(value["alone"]["isr_alone"], json!(true), "{value}");
    nemesis.execute_checked(&stop_step()).await.unwrap();
    control.assert_healed();

    // A leader that never says so is no target: nothing is cut.
    let control = Scripted::new();
    control.script_roles(strand_roles(true));
    let (never, value, error) = strike_strand(&control, 10, 6).await;
    assert!(error.expect("an error").starts_with("no-target"), "{value}");
    assert!(
        value["picked"]["waited_ms"].as_u64().unwrap() >= 10_000,
        "{value}"
    );
    assert!(value.get("alone").is_none(), "{value}");
    assert!(
        control.cluster().calls.is_empty(),
        "{:?}",
        control.cluster().calls
    );
    never.execute_checked(&stop_step()).await.unwrap();
    control.assert_healed();
}

#[tokio::test(start_paused = true)]
async fn a_strand_whose_leader_is_never_alone_heals_its_cut_and_pauses_nothing() {
    // The roles never change: the ISR does not shrink. The wait runs out, the cut is
    // healed, nothing is paused.
    let control = Scripted::new();
    n1_says_it_leads(&control);
    let (nemesis, value, error) = strike_strand(&control, 1_000, 7).await;
    assert!(error.expect("an error").starts_with("no-target"), "{value}");
    assert_eq!(value["alone"]["isr_alone"], json!(false), "{value}");
    assert_eq!(value["alone"]["uncut"]["healed"], json!(1), "{value}");
    assert!(value.get("failover").is_none(), "{value}");
    let calls = control.cluster().calls.clone();
    assert!(!calls.iter().any(|c| c.starts_with("pause")), "{calls:?}");
    assert!(control.cluster().cuts.is_empty());
    nemesis.execute_checked(&stop_step()).await.unwrap();
    assert!(nemesis.state().is_healed(), "{:?}", nemesis.state());
    control.assert_healed();
}

#[tokio::test(start_paused = true)]
async fn a_strand_whose_partition_never_fails_over_still_brings_its_leader_back() {
    // The ISR shrinks, but nobody else is elected (the quorum never expires the
    // leader's session). The wait runs out; the leader is uncut and resumed.
    let control = Scripted::new();
    n1_says_it_leads(&control);
    control.script_roles(strand_roles(false));
    let (nemesis, value, error) = strike_strand(&control, 1_000, 7).await;
    assert_eq!(error, None, "{value}");
    assert_eq!(value["alone"]["isr_alone"], json!(true), "{value}");
    assert!(value["failover"]["leader"].is_null(), "{value}");
    assert!(value["failover"]["waited_ms"].as_u64().unwrap() >= 30_000);
    assert!(
        value["returned"].get("successor_log_end").is_none(),
        "{value}"
    );
    assert_eq!(
        value["returned"]["resume"]["nodes"],
        json!(["n1"]),
        "{value}"
    );
    assert!(control.cluster().paused.is_empty());
    assert!(control.cluster().cuts.is_empty());
    nemesis.execute_checked(&stop_step()).await.unwrap();
    assert!(nemesis.state().is_healed(), "{:?}", nemesis.state());
    control.assert_healed();
}

#[tokio::test(start_paused = true)]
async fn a_strand_waits_for_the_other_packages_faults_to_be_undone_and_holds_off_their_starts() {
    let control = Scripted::new();
    n1_says_it_leads(&control);
    successor_caught_up(&control);
    let journal = Arc::new(Memory::default());
    let nemesis = Arc::new(Nemesis::new(
        options(&[PackageKind::Aimed, PackageKind::Kill], 1, None),
        control.clone(),
        journal.clone(),
    ));
    let kill = |action: Action| Step {
        package: PackageKind::Kill,
        index: 0,
        delay: Duration::ZERO,
        action,
        seed: 3,
    };
    // The kill package's fault is in place when the strand begins.
    nemesis
        .execute_checked(&kill(Action::Kill {
            target: nemesis::TargetSpec::Nodes(s(&["n5"])),
            wipe: false,
        }))
        .await
        .unwrap();
    assert!(nemesis.state().holds(PackageKind::Kill));
    control.script_roles(strand_roles(true));
    let striking = {
        let nemesis = Arc::clone(&nemesis);
        tokio::spawn(async move { nemesis.execute_checked(&aim_step(strand(10), 8)).await })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Meanwhile the kill package may stop its fault, not start another.
    assert_eq!(nemesis.state().exclusive, Some(PackageKind::Aimed));
    assert!(nemesis.state().held_off(PackageKind::Kill));
    assert!(!nemesis.state().held_off(PackageKind::Aimed));
    nemesis.execute_checked(&kill(Action::Start)).await.unwrap();
    let (value, error) = striking.await.expect("joined").unwrap();
    assert_eq!(error, None, "{value}");
    assert_eq!(value["quiet"]["quiet"], json!(true), "{value}");
    let waited = value["quiet"]["waited_ms"].as_u64().unwrap();
    assert!((2_000..10_000).contains(&waited), "{value}");
    // Released when the strike ends.
    assert_eq!(nemesis.state().exclusive, None);
    nemesis.execute_checked(&stop_step()).await.unwrap();
    assert!(nemesis.state().is_healed(), "{:?}", nemesis.state());
    control.assert_healed();
}

#[tokio::test(start_paused = true)]
async fn a_strand_under_way_when_the_run_stops_brings_its_leader_back_at_once() {
    // The ISR shrinks but nobody else is elected; the run is told to stop 3 s into the
    // failover wait (the clients are done: no race is left to set up).
    let control = Scripted::new();
    n1_says_it_leads(&control);
    control.script_roles(strand_roles(false));
    let journal = Arc::new(Memory::default());
    let mut quiet = options(&[PackageKind::Admin], 1, None);
    quiet.schedule.interval = Duration::from_secs(3_600);
    let nemesis = Arc::new(Nemesis::new(quiet, control.clone(), journal.clone()));
    let (stop_tx, stop_rx) = watch::channel(false);
    let running = {
        let nemesis = Arc::clone(&nemesis);
        tokio::spawn(async move { nemesis.run(stop_rx).await })
    };
    let began = tokio::time::Instant::now();
    let striking = {
        let nemesis = Arc::clone(&nemesis);
        tokio::spawn(async move { nemesis.execute_checked(&aim_step(strand(10), 9)).await })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop_tx.send(true).expect("the run listens");
    let (value, error) = striking.await.expect("joined").unwrap();
    assert_eq!(error, None, "{value}");
    assert!(began.elapsed() < Duration::from_secs(5), "{value}");
    assert!(value["failover"]["leader"].is_null(), "{value}");
    assert_eq!(value["failover"]["run_ended"], json!(true), "{value}");
    assert_eq!(
        value["returned"]["resume"]["nodes"],
        json!(["n1"]),
        "{value}"
    );
    running.await.expect("joined").expect("the run ends");
    nemesis.execute_checked(&stop_step()).await.unwrap();
    assert!(nemesis.state().is_healed(), "{:?}", nemesis.state());
    control.assert_healed();
}

#[tokio::test(start_paused = true)]
async fn a_swarm_run_strikes_each_kind_it_drew_once_before_any_twice() {
    use nemesis::aimed::AimKind;
    use nemesis::swarm::{aim_order, run_aims};
    // A seed whose run draws four kinds or more, strands among them.
    let seed = (0..10_000u64)
        .find(|seed| {
            let kinds = run_aims(*seed, true);
            kinds.len() >= 4 && kinds.contains(&AimKind::Strand)
        })
        .expect("a seed with four kinds");
    let kinds = run_aims(seed, true);
    let order = aim_order(seed, &kinds);
    let control = Scripted::new();
    let journal = Arc::new(Memory::default());
    let mut options = options(&[PackageKind::Aimed], seed, Some(Duration::from_secs(30)));
    options.schedule.unclean_elections = true;
    let nemesis = Nemesis::new(options, control.clone(), journal.clone());
    let (stop_tx, stop_rx) = watch::channel(false);
    let (summary, ()) = tokio::join!(nemesis.run(stop_rx), async {
        tokio::time::sleep(Duration::from_secs(900)).await;
        stop_tx.send(true).unwrap();
    });
    summary.unwrap();
    nemesis.heal_all().await.unwrap();
    control.assert_healed();
    let struck: Vec<String> = journal
        .entries()
        .iter()
        .filter(|e| e.invoke && e.f == "start-aimed")
        .filter_map(|e| e.value["aim"]["aim"].as_str().map(str::to_string))
        .collect();
    assert!(struck.len() > kinds.len(), "{struck:?}");
    let names: Vec<&str> = order.iter().map(|kind| kind.name()).collect();
    assert_eq!(struck[..names.len()], names[..], "{struck:?}");
    let allowed: BTreeSet<&str> = kinds.iter().map(|kind| kind.name()).collect();
    for name in &struck {
        assert!(
            allowed.contains(name.as_str()),
            "{name} not among {allowed:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_swarm_strike_that_falls_in_a_calm_period_waits_for_its_end() {
    // A seed whose first two periods are calm and whose third is not: the run's first
    // strike, due within the first period, waits out both calms and strikes as the
    // third period begins, rather than being dropped and struck a gap or more later.
    let packages = [PackageKind::Aimed];
    let seed = (0..100_000u64)
        .find(|seed| {
            let calm = |p| SwarmDraw::draw(*seed, p, &packages, false).calm;
            calm(0) && calm(1) && !calm(2)
        })
        .expect("a seed with two calm periods first");
    let control = Scripted::new();
    let journal = Arc::new(Memory::default());
    let nemesis = Nemesis::new(
        options(&packages, seed, Some(Duration::from_secs(20))),
        control.clone(),
        journal.clone(),
    );
    let (stop_tx, stop_rx) = watch::channel(false);
    let (summary, ()) = tokio::join!(nemesis.run(stop_rx), async {
        // Just past the start of the third period: time for the calm to be seen over
        // (polled every aimed::POLL), not for another strike gap (at least 0.5 s).
        tokio::time::sleep(Duration::from_millis(40_400)).await;
        stop_tx.send(true).unwrap();
    });
    summary.unwrap();
    nemesis.heal_all().await.unwrap();
    control.assert_healed();
    let strikes: Vec<Entry> = journal
        .entries()
        .into_iter()
        .filter(|e| e.invoke && e.f == "start-aimed")
        .collect();
    assert_eq!(strikes.len(), 1, "{strikes:?}");
    assert_eq!(strikes[0].value["swarm_period"], json!(2), "{strikes:?}");
}
