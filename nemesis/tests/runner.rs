//! The runner against an in-memory cluster ([`FakeControl`]) and history
//! ([`FakeJournal`]): what each action does and records, the undoing of faults, the
//! run's concurrency and stop, and determinism.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nemesis::schedule::{Schedule, ScheduleOptions};
use nemesis::slow::Delay;
use nemesis::{
    Action, AdminAction, AdminKind, BoxFuture, ClusterControl, ControlError, DeregistrationWait,
    Grudge, Journal, JournalError, Nemesis, NemesisOptions, PackageKind, PartitionRoles, Ports,
    Roles, Shape, Step, TargetSpec,
};
use rng::Rng;
use serde_json::{json, Value};
use tokio::sync::watch;

// ---------------------------------------------------------------------------------------
// The fake cluster.

#[derive(Debug, Clone, PartialEq, Eq)]
struct FakePartition {
    topic: String,
    partition: u32,
    replicas: Vec<String>,
    leader: String,
}

#[derive(Debug, Default)]
struct Cluster {
    /// Running brokers: node → pid.
    running: BTreeMap<String, u32>,
    next_pid: u32,
    paused: BTreeSet<String>,
    /// Cuts in place, a multiset.
    cuts: Vec<(Grudge, Ports)>,
    heals: u32,
    /// When each killed node was killed: it stays registered for `deregistration`.
    killed_at: BTreeMap<String, Instant>,
    deregistration: Duration,
    /// Armed failpoints: (node, point) → actions.
    failpoints: BTreeMap<(String, String), String>,
    /// Nodes every ISR keeps naming while they are down (the last member of an ISR
    /// whose other members died).
    kept_in_isr: BTreeSet<String>,
    controller: Option<String>,
    meta_leader: Option<String>,
    partitions: Vec<FakePartition>,
    /// Whether `roles` answers.
    answers: bool,
    /// Calls that fail: (`kill`, `n2`), (`cut`, `*`), ...
    failing: BTreeSet<(String, String)>,
    admin_log: Vec<AdminAction>,
    /// Every `start`: node, wipe, whether the node was still registered.
    starts: Vec<(String, bool, bool)>,
    /// Every signal or cut call, in order (`kill n1`, `cut`, ...).
    calls: Vec<String>,
    in_flight: usize,
    most_in_flight: usize,
}

struct FakeControl {
    nodes: Vec<String>,
    latency: Duration,
    cluster: Mutex<Cluster>,
}

fn names(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("n{i}")).collect()
}

fn s(items: &[&str]) -> Vec<String> {
    items.iter().map(|i| i.to_string()).collect()
}

fn original_partitions() -> Vec<FakePartition> {
    [
        ("t", 0, ["n1", "n2", "n3"]),
        ("t", 1, ["n2", "n3", "n4"]),
        ("u", 0, ["n3", "n4", "n5"]),
    ]
    .into_iter()
    .map(|(topic, partition, replicas)| FakePartition {
        topic: topic.into(),
        partition,
        replicas: s(&replicas),
        leader: replicas[0].into(),
    })
    .collect()
}

impl FakeControl {
    /// Five running nodes, n1 the controller, n2 the quorum leader, three partitions of
    /// three replicas; answers at once, deregisters a killed node at once.
    fn new() -> Arc<FakeControl> {
        FakeControl::with_latency(Duration::ZERO)
    }

    fn with_latency(latency: Duration) -> Arc<FakeControl> {
        let nodes = names(5);
        let mut cluster = Cluster {
            controller: Some("n1".into()),
            meta_leader: Some("n2".into()),
            partitions: original_partitions(),
            answers: true,
            next_pid: 100,
            ..Cluster::default()
        };
        for node in &nodes {
            cluster.next_pid += 1;
            cluster.running.insert(node.clone(), cluster.next_pid);
        }
        Arc::new(FakeControl {
            nodes,
            latency,
            cluster: Mutex::new(cluster),
        })
    }

    fn cluster(&self) -> MutexGuard<'_, Cluster> {
        self.cluster.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn fail(&self, call: &str, node: &str) {
        self.cluster().failing.insert((call.into(), node.into()));
    }

    fn unfail_all(&self) {
        self.cluster().failing.clear();
    }

    /// Whether nothing is broken: every node running and not stopped, no cut, the
    /// original assignment.
    fn assert_healed(&self) {
        let cluster = self.cluster();
        assert_eq!(
            cluster.running.keys().cloned().collect::<Vec<_>>(),
            self.nodes,
            "every node runs"
        );
        assert!(cluster.paused.is_empty(), "paused: {:?}", cluster.paused);
        assert!(cluster.cuts.is_empty(), "cuts: {:?}", cluster.cuts);
        assert!(
            cluster.failpoints.is_empty(),
            "failpoints: {:?}",
            cluster.failpoints
        );
        let assignment: Vec<Vec<String>> = cluster
            .partitions
            .iter()
            .map(|p| p.replicas.clone())
            .collect();
        let original: Vec<Vec<String>> = original_partitions()
            .into_iter()
            .map(|p| p.replicas)
            .collect();
        assert_eq!(assignment, original, "assignments restored");
    }

    fn registered(cluster: &Cluster, node: &str) -> bool {
        cluster.running.contains_key(node)
            || cluster
                .killed_at
                .get(node)
                .is_some_and(|at| at.elapsed() < cluster.deregistration)
    }

    /// Enters a call: checks injected failures, counts concurrency, waits the latency.
    async fn enter(&self, call: &str, node: &str) -> Result<(), ControlError> {
        {
            let mut cluster = self.cluster();
            cluster.in_flight += 1;
            cluster.most_in_flight = cluster.most_in_flight.max(cluster.in_flight);
        }
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        let mut cluster = self.cluster();
        cluster.in_flight -= 1;
        if cluster
            .failing
            .contains(&(call.to_string(), node.to_string()))
            || cluster
                .failing
                .contains(&(call.to_string(), "*".to_string()))
        {
            return Err(ControlError(format!(
                "injected failure of {call} on {node}"
            )));
        }
        Ok(())
    }
}

impl ClusterControl for FakeControl {
    fn nodes(&self) -> Vec<String> {
        self.nodes.clone()
    }

    fn roles(&self) -> BoxFuture<'_, Option<Roles>> {
        Box::pin(async move {
            self.enter("roles", "*").await.ok()?;
            let cluster = self.cluster();
            if !cluster.answers {
                return None;
            }
            let partitions = cluster
                .partitions
                .iter()
                .map(|p| {
                    let isr: Vec<String> = p
                        .replicas
                        .iter()
                        .filter(|n| {
                            cluster.running.contains_key(*n) || cluster.kept_in_isr.contains(*n)
                        })
                        .cloned()
                        .collect();
                    let leader = if isr.contains(&p.leader) {
                        Some(p.leader.clone())
                    } else {
                        isr.first().cloned()
                    };
                    PartitionRoles {
                        leader_epoch: None,
                        topic: p.topic.clone(),
                        partition: p.partition,
                        leader,
                        replicas: p.replicas.clone(),
                        isr,
                    }
                })
                .collect();
            Some(Roles {
                controller_epoch: 0,
                nodes: self.nodes.clone(),
                registered: self
                    .nodes
                    .iter()
                    .filter(|n| FakeControl::registered(&cluster, n))
                    .cloned()
                    .collect(),
                controller: cluster.controller.clone(),
                meta_leader: cluster.meta_leader.clone(),
                partitions,
            })
        })
    }

    fn kill<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Result<Option<u32>, ControlError>> {
        Box::pin(async move {
            self.enter("kill", node).await?;
            let mut cluster = self.cluster();
            cluster.calls.push(format!("kill {node}"));
            cluster.paused.remove(node);
            // A broker's failpoints live in its process.
            cluster
                .failpoints
                .retain(|(armed_on, _), _| armed_on != node);
            let pid = cluster.running.remove(node);
            if pid.is_some() {
                cluster.killed_at.insert(node.into(), Instant::now());
            }
            Ok(pid)
        })
    }

    fn start<'a>(&'a self, node: &'a str, wipe: bool) -> BoxFuture<'a, Result<u32, ControlError>> {
        Box::pin(async move {
            self.enter("start", node).await?;
            let mut cluster = self.cluster();
            cluster.calls.push(format!("start {node}"));
            let registered = FakeControl::registered(&cluster, node);
            cluster.starts.push((node.into(), wipe, registered));
            if let Some(pid) = cluster.running.get(node) {
                return Ok(*pid);
            }
            cluster.next_pid += 1;
            let pid = cluster.next_pid;
            cluster.running.insert(node.into(), pid);
            cluster.killed_at.remove(node);
            Ok(pid)
        })
    }

    fn pause<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Result<Option<u32>, ControlError>> {
        Box::pin(async move {
            self.enter("pause", node).await?;
            let mut cluster = self.cluster();
            cluster.calls.push(format!("pause {node}"));
            let pid = cluster.running.get(node).copied();
            if pid.is_some() {
                cluster.paused.insert(node.into());
            }
            Ok(pid)
        })
    }

    fn resume<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Result<Option<u32>, ControlError>> {
        Box::pin(async move {
            self.enter("resume", node).await?;
            let mut cluster = self.cluster();
            cluster.calls.push(format!("resume {node}"));
            cluster.paused.remove(node);
            Ok(cluster.running.get(node).copied())
        })
    }

    fn cut<'a>(
        &'a self,
        grudge: &'a Grudge,
        ports: Ports,
    ) -> BoxFuture<'a, Result<(), ControlError>> {
        Box::pin(async move {
            self.enter("cut", "*").await?;
            let mut cluster = self.cluster();
            cluster.calls.push("cut".into());
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
            self.enter("uncut", "*").await?;
            let mut cluster = self.cluster();
            cluster.calls.push("uncut".into());
            let at = cluster
                .cuts
                .iter()
                .position(|(g, p)| g == grudge && *p == ports)
                .ok_or_else(|| ControlError("no such cut".into()))?;
            cluster.cuts.remove(at);
            Ok(())
        })
    }

    fn heal(&self) -> BoxFuture<'_, Result<(), ControlError>> {
        Box::pin(async move {
            self.enter("heal", "*").await?;
            let mut cluster = self.cluster();
            cluster.calls.push("heal".into());
            cluster.cuts.clear();
            cluster.heals += 1;
            Ok(())
        })
    }

    fn admin<'a>(&'a self, action: &'a AdminAction) -> BoxFuture<'a, Result<Value, ControlError>> {
        Box::pin(async move {
            self.enter("admin", "*").await?;
            let mut cluster = self.cluster();
            cluster.admin_log.push(action.clone());
            let running: BTreeSet<String> = cluster.running.keys().cloned().collect();
            match action {
                AdminAction::TransferLeader {
                    topic,
                    partition,
                    to,
                } => {
                    let p = cluster
                        .partitions
                        .iter_mut()
                        .find(|p| &p.topic == topic && p.partition == *partition)
                        .ok_or_else(|| ControlError("unknown partition".into()))?;
                    if !p.replicas.contains(to) || !running.contains(to) {
                        return Err(ControlError(format!("{to} is not in the ISR")));
                    }
                    p.leader = to.clone();
                    Ok(json!({"leader": to}))
                }
                AdminAction::ElectPreferred => {
                    for p in &mut cluster.partitions {
                        p.leader = p.replicas[0].clone();
                    }
                    Ok(json!({"elected": cluster.partitions.len()}))
                }
                AdminAction::Reassign {
                    topic,
                    partition,
                    replicas,
                } => {
                    let p = cluster
                        .partitions
                        .iter_mut()
                        .find(|p| &p.topic == topic && p.partition == *partition)
                        .ok_or_else(|| ControlError("unknown partition".into()))?;
                    p.replicas = replicas.clone();
                    if !p.replicas.contains(&p.leader) {
                        p.leader = p.replicas[0].clone();
                    }
                    Ok(json!({"replicas": replicas}))
                }
            }
        })
    }

    fn failpoint<'a>(
        &'a self,
        node: &'a str,
        point: &'a str,
        actions: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Value, ControlError>> {
        Box::pin(async move {
            self.enter("failpoint", node).await?;
            let mut cluster = self.cluster();
            if !cluster.running.contains_key(node) {
                return Err(ControlError(format!("{node} does not answer")));
            }
            let key = (node.to_string(), point.to_string());
            match actions {
                Some(actions) => {
                    cluster.failpoints.insert(key, actions.to_string());
                }
                None => {
                    cluster.failpoints.remove(&key);
                }
            }
            Ok(json!({"name": point}))
        })
    }
}

// ---------------------------------------------------------------------------------------
// The fake history.

#[derive(Debug, Clone, PartialEq)]
enum Entry {
    Invoke {
        token: u64,
        f: String,
        value: Value,
    },
    Complete {
        token: u64,
        f: String,
        value: Value,
        error: Option<String>,
    },
}

#[derive(Default)]
struct FakeJournal {
    entries: Mutex<Vec<Entry>>,
    /// Fails every invoke of this `f` (and only those).
    failing_f: Option<&'static str>,
}

impl FakeJournal {
    fn new() -> Arc<FakeJournal> {
        Arc::new(FakeJournal::default())
    }

    fn entries(&self) -> Vec<Entry> {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Every operation, in order of invocation, checked well formed: each invoke
    /// completed exactly once with the same `f`, the completion keeping the invoke's
    /// fields.
    fn ops(&self) -> Vec<Op> {
        let entries = self.entries();
        let mut ops = Vec::new();
        for (at, entry) in entries.iter().enumerate() {
            let Entry::Invoke { token, f, value } = entry else {
                continue;
            };
            let completions: Vec<&Entry> = entries[at..]
                .iter()
                .filter(|e| matches!(e, Entry::Complete { token: t, .. } if t == token))
                .collect();
            assert_eq!(completions.len(), 1, "one completion of {f} {value}");
            let Entry::Complete {
                f: cf,
                value: cv,
                error,
                ..
            } = completions[0]
            else {
                unreachable!()
            };
            assert_eq!(cf, f, "same f");
            for (field, intent) in value.as_object().expect("an object") {
                assert_eq!(&cv[field], intent, "{f}: completion keeps {field}");
            }
            ops.push(Op {
                f: f.clone(),
                invoke: value.clone(),
                value: cv.clone(),
                error: error.clone(),
            });
        }
        let completions = entries
            .iter()
            .filter(|e| matches!(e, Entry::Complete { .. }))
            .count();
        assert_eq!(completions, ops.len(), "no completion without an invoke");
        ops
    }
}

impl Journal for FakeJournal {
    fn invoke(&self, f: &str, value: Value) -> Result<u64, JournalError> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if self.failing_f == Some(f) {
            return Err(JournalError("disk full".into()));
        }
        let token = entries.len() as u64 + 1000;
        entries.push(Entry::Invoke {
            token,
            f: f.into(),
            value,
        });
        Ok(token)
    }

    fn complete(
        &self,
        token: u64,
        f: &str,
        value: Value,
        error: Option<String>,
    ) -> Result<(), JournalError> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.push(Entry::Complete {
            token,
            f: f.into(),
            value,
            error,
        });
        Ok(())
    }
}

#[derive(Debug, Clone)]
struct Op {
    f: String,
    invoke: Value,
    value: Value,
    error: Option<String>,
}

// ---------------------------------------------------------------------------------------
// Helpers.

fn options(
    packages: &[PackageKind],
    seed: u64,
    interval: Duration,
    targets: Vec<TargetSpec>,
    wipe: bool,
) -> NemesisOptions {
    NemesisOptions {
        packages: packages.to_vec(),
        schedule: ScheduleOptions {
            seed,
            interval,
            targets,
            wipe,
            unclean_elections: false,
            asks_divergence: true,
        },
        swarm: None,
    }
}

fn nemesis(control: &Arc<FakeControl>, journal: &Arc<FakeJournal>) -> Nemesis {
    let opts = options(
        &PackageKind::ALL,
        1,
        Duration::from_millis(10),
        Vec::new(),
        true,
    );
    Nemesis::new(opts, control.clone(), journal.clone()).with_deregistration_wait(
        DeregistrationWait {
            poll: Duration::from_millis(10),
            limit: Duration::from_secs(5),
        },
    )
}

fn step(package: PackageKind, action: Action, seed: u64) -> Step {
    Step {
        package,
        index: 0,
        delay: Duration::ZERO,
        action,
        seed,
    }
}

fn nodes_target(nodes: &[&str]) -> TargetSpec {
    TargetSpec::Nodes(s(nodes))
}

fn kill(nodes: &[&str], wipe: bool) -> Step {
    step(
        PackageKind::Kill,
        Action::Kill {
            target: nodes_target(nodes),
            wipe,
        },
        1,
    )
}

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

/// n1, n2 against n3, n4, n5.
fn halves() -> Grudge {
    grudge(&[
        ("n1", &["n3", "n4", "n5"]),
        ("n2", &["n3", "n4", "n5"]),
        ("n3", &["n1", "n2"]),
        ("n4", &["n1", "n2"]),
        ("n5", &["n1", "n2"]),
    ])
}

/// n5 alone.
fn lone_n5() -> Grudge {
    grudge(&[
        ("n5", &["n1", "n2", "n3", "n4"]),
        ("n1", &["n5"]),
        ("n2", &["n5"]),
        ("n3", &["n5"]),
        ("n4", &["n5"]),
    ])
}

fn last(journal: &FakeJournal) -> Op {
    journal.ops().pop().expect("an operation")
}

// ---------------------------------------------------------------------------------------
// (1) Every action kind: an invoke/complete pair of one f, with the documented fields.

#[tokio::test]
async fn every_action_records_a_pair_with_its_fields() {
    let control = FakeControl::new();
    let journal = FakeJournal::new();
    let nemesis = nemesis(&control, &journal);
    let old_pid = control.cluster().running["n2"];

    nemesis.execute(&kill(&["n2"], false)).await.unwrap();
    let op = last(&journal);
    assert_eq!(op.f, "kill");
    assert_eq!(
        op.invoke,
        json!({"package": "kill", "targets": "n2", "wipe": false})
    );
    assert_eq!(op.value["nodes"], json!(["n2"]));
    assert_eq!(op.value["pids"], json!({"n2": old_pid}));
    assert_eq!(op.error, None);
    assert!(!control.cluster().running.contains_key("n2"));

    let value = nemesis
        .execute(&step(PackageKind::Kill, Action::Start, 2))
        .await
        .unwrap();
    let op = last(&journal);
    assert_eq!(op.f, "start");
    assert_eq!(op.invoke, json!({"package": "kill"}));
    assert_eq!(op.value, value, "execute returns the completion's value");
    assert_eq!(op.value["nodes"], json!(["n2"]));
    let new_pid = control.cluster().running["n2"];
    assert_ne!(new_pid, old_pid);
    assert_eq!(op.value["pids"], json!({"n2": new_pid}));

    let pause = Action::Pause {
        target: nodes_target(&["n3"]),
    };
    nemesis
        .execute(&step(PackageKind::Pause, pause, 3))
        .await
        .unwrap();
    let op = last(&journal);
    assert_eq!(
        (op.f.as_str(), &op.invoke),
        ("pause", &json!({"package": "pause", "targets": "n3"}))
    );
    assert_eq!(op.value["nodes"], json!(["n3"]));
    assert_eq!(
        op.value["pids"]["n3"],
        json!(control.cluster().running["n3"])
    );
    assert!(control.cluster().paused.contains("n3"));

    nemesis
        .execute(&step(PackageKind::Pause, Action::Resume, 4))
        .await
        .unwrap();
    let op = last(&journal);
    assert_eq!(op.f, "resume");
    assert_eq!(op.value["nodes"], json!(["n3"]));
    assert!(control.cluster().paused.is_empty());

    let partition = Action::Partition {
        shape: Shape::Explicit(halves()),
    };
    nemesis
        .execute(&step(PackageKind::Partition, partition, 5))
        .await
        .unwrap();
    let op = last(&journal);
    assert_eq!(op.f, "start-partition");
    assert_eq!(
        op.invoke,
        json!({"package": "partition", "targets": "grudge", "shape": "grudge"})
    );
    assert_eq!(op.value["grudge"], serde_json::to_value(halves()).unwrap());
    assert_eq!(op.value["grudge"]["n1"], json!(["n3", "n4", "n5"]));
    assert_eq!(op.value["ports"], json!("all"));
    assert_eq!(control.cluster().cuts, vec![(halves(), Ports::All)]);

    nemesis
        .execute(&step(PackageKind::Partition, Action::StopPartition, 6))
        .await
        .unwrap();
    let op = last(&journal);
    assert_eq!(op.f, "stop-partition");
    assert_eq!(op.value, json!({"package": "partition", "healed": 1}));
    assert!(control.cluster().cuts.is_empty());

    let ports = Action::PartitionPorts {
        shape: Shape::Explicit(lone_n5()),
        ports: Ports::Replication,
        one_way: false,
    };
    nemesis
        .execute(&step(PackageKind::PartitionPorts, ports, 7))
        .await
        .unwrap();
    let op = last(&journal);
    assert_eq!(op.f, "start-partition-ports");
    assert_eq!(
        op.invoke,
        json!({"package": "partition-ports", "targets": "grudge", "shape": "grudge", "ports": "replication", "one_way": false})
    );
    assert_eq!(op.value["grudge"], serde_json::to_value(lone_n5()).unwrap());
    assert_eq!(
        control.cluster().cuts,
        vec![(lone_n5(), Ports::Replication)]
    );

    nemesis
        .execute(&step(
            PackageKind::PartitionPorts,
            Action::StopPartitionPorts,
            8,
        ))
        .await
        .unwrap();
    let op = last(&journal);
    assert_eq!(
        (op.f.as_str(), &op.value["healed"]),
        ("stop-partition-ports", &json!(1))
    );
    assert!(control.cluster().cuts.is_empty());

    nemesis
        .execute(&step(
            PackageKind::Admin,
            Action::Admin(AdminKind::TransferStorm),
            9,
        ))
        .await
        .unwrap();
    let op = last(&journal);
    assert_eq!(op.f, "transfer-leaders");
    assert_eq!(
        op.invoke,
        json!({"package": "admin", "targets": "partitions", "kind": "transfer-storm"})
    );
    let transfers = op.value["transfers"].as_array().unwrap().clone();
    assert!((3..=6).contains(&transfers.len()), "{transfers:?}");
    assert_eq!(op.error, None);
    let requested = control.cluster().admin_log.len();
    assert_eq!(requested, transfers.len(), "one request per transfer");
    for transfer in &transfers {
        assert_ne!(transfer["from"], transfer["to"]);
        assert!(
            transfer["key"].is_string() && transfer["ok"].is_object(),
            "{transfer}"
        );
    }

    nemesis
        .execute(&step(
            PackageKind::Admin,
            Action::Admin(AdminKind::ElectPreferred),
            10,
        ))
        .await
        .unwrap();
    let op = last(&journal);
    assert_eq!(
        (op.f.as_str(), &op.invoke["kind"]),
        ("elect-preferred", &json!("elect-preferred"))
    );
    assert_eq!(op.value["answer"], json!({"elected": 3}));
    assert_eq!(
        control.cluster().admin_log.last(),
        Some(&AdminAction::ElectPreferred)
    );

    let reassign = step(PackageKind::Admin, Action::Admin(AdminKind::Reassign), 11);
    nemesis.execute(&reassign).await.unwrap();
    let added = last(&journal);
    assert_eq!(
        (added.f.as_str(), &added.invoke["kind"]),
        ("reassign", &json!("reassign"))
    );
    let from: Vec<String> = serde_json::from_value(added.value["from"].clone()).unwrap();
    let to: Vec<String> = serde_json::from_value(added.value["to"].clone()).unwrap();
    let new = added.value["added"].as_str().unwrap().to_string();
    assert!(!from.contains(&new));
    // The added replica is the new preferred (first) one.
    assert_eq!(to, [vec![new], from.clone()].concat());
    assert!(added.value["answer"].is_object());
    let key = added.value["key"].as_str().unwrap().to_string();
    assert_eq!(
        nemesis.state().reassigned,
        BTreeMap::from([(key.clone(), from.clone())])
    );
    let changed = control
        .cluster()
        .partitions
        .iter()
        .find(|p| format!("{}/{}", p.topic, p.partition) == key)
        .unwrap()
        .replicas
        .clone();
    assert_eq!(changed, to);

    nemesis.execute(&reassign).await.unwrap();
    let restored = last(&journal);
    assert_eq!(restored.f, "reassign");
    assert_eq!(restored.value["restore"], json!(true));
    assert_eq!(restored.value["key"], json!(key));
    assert_eq!(restored.value["from"], json!(to));
    assert_eq!(restored.value["to"], json!(from));
    assert!(nemesis.state().reassigned.is_empty());

    assert_eq!(journal.ops().len(), 12);
    assert!(nemesis.state().is_healed());
    control.assert_healed();
}

#[tokio::test]
async fn one_way_port_cut_drops_one_direction_only() {
    let control = FakeControl::new();
    let journal = FakeJournal::new();
    let nemesis = nemesis(&control, &journal);
    let ports = Action::PartitionPorts {
        shape: Shape::Explicit(halves()),
        ports: Ports::Metadata,
        one_way: true,
    };
    nemesis
        .execute(&step(PackageKind::PartitionPorts, ports, 1))
        .await
        .unwrap();
    // The smaller side (n1, n2) drops the rest; the rest still hears it.
    let expected = grudge(&[("n1", &["n3", "n4", "n5"]), ("n2", &["n3", "n4", "n5"])]);
    assert_eq!(
        control.cluster().cuts,
        vec![(expected.clone(), Ports::Metadata)]
    );
    let op = last(&journal);
    assert_eq!(op.value["grudge"], serde_json::to_value(&expected).unwrap());
    assert_eq!(op.value["one_way"], json!(true));
    assert_eq!(
        nemesis.state().cuts[&PackageKind::PartitionPorts],
        vec![(expected, Ports::Metadata)]
    );
}

#[tokio::test]
async fn start_with_nothing_killed_is_still_recorded() {
    let control = FakeControl::new();
    let journal = FakeJournal::new();
    let nemesis = nemesis(&control, &journal);
    for (package, action, f) in [
        (PackageKind::Kill, Action::Start, "start"),
        (PackageKind::Pause, Action::Resume, "resume"),
        (
            PackageKind::Partition,
            Action::StopPartition,
            "stop-partition",
        ),
    ] {
        nemesis.execute(&step(package, action, 1)).await.unwrap();
        let op = last(&journal);
        assert_eq!((op.f.as_str(), op.error), (f, None));
    }
    let ops = journal.ops();
    assert_eq!(ops[0].value["nodes"], json!([]));
    assert_eq!(ops[1].value["nodes"], json!([]));
    assert_eq!(ops[2].value["healed"], json!(0));
    assert!(
        control.cluster().calls.is_empty(),
        "{:?}",
        control.cluster().calls
    );
}

// ---------------------------------------------------------------------------------------
// (2) Kill then start restarts exactly the killed nodes; a wipe waits for deregistration.

#[tokio::test]
async fn start_restarts_exactly_the_killed_nodes() {
    let control = FakeControl::new();
    let journal = FakeJournal::new();
    let nemesis = nemesis(&control, &journal);
    nemesis.execute(&kill(&["n1", "n3"], true)).await.unwrap();
    let op = last(&journal);
    assert_eq!(
        op.value["wipe_on_start"],
        json!(false),
        "no wipe of more than one node"
    );
    assert_eq!(
        nemesis.state().killed,
        BTreeMap::from([("n1".into(), false), ("n3".into(), false)])
    );
    assert_eq!(
        control
            .cluster()
            .running
            .keys()
            .cloned()
            .collect::<Vec<_>>(),
        s(&["n2", "n4", "n5"])
    );

    nemesis
        .execute(&step(PackageKind::Kill, Action::Start, 2))
        .await
        .unwrap();
    let starts = control.cluster().starts.clone();
    assert_eq!(
        starts,
        vec![("n1".into(), false, false), ("n3".into(), false, false)]
    );
    assert_eq!(last(&journal).value["nodes"], json!(["n1", "n3"]));
    assert!(nemesis.state().killed.is_empty());
    control.assert_healed();

    // A second start has nothing to restart.
    nemesis
        .execute(&step(PackageKind::Kill, Action::Start, 3))
        .await
        .unwrap();
    assert_eq!(control.cluster().starts.len(), 2);
}

#[tokio::test]
async fn a_wipe_waits_for_deregistration() {
    let control = FakeControl::new();
    control.cluster().deregistration = Duration::from_millis(300);
    let journal = FakeJournal::new();
    let nemesis = nemesis(&control, &journal);
    nemesis.execute(&kill(&["n2"], true)).await.unwrap();
    assert_eq!(last(&journal).value["wipe_on_start"], json!(true));
    assert_eq!(
        nemesis.state().killed,
        BTreeMap::from([("n2".into(), true)])
    );

    let began = Instant::now();
    nemesis
        .execute(&step(PackageKind::Kill, Action::Start, 2))
        .await
        .unwrap();
    assert!(
        began.elapsed() >= Duration::from_millis(250),
        "{:?}",
        began.elapsed()
    );
    assert_eq!(
        control.cluster().starts,
        vec![("n2".into(), true, false)],
        "started with the wipe, once no longer registered"
    );
    let op = last(&journal);
    assert_eq!(op.error, None);
    assert!(
        op.value["waited_deregistration_ms"]["n2"].as_u64().unwrap() >= 250,
        "{}",
        op.value
    );
    assert_eq!(op.value["wiped"], json!(["n2"]));
    assert!(nemesis.state().is_healed());
}

#[tokio::test]
async fn a_reassignment_is_undone_to_the_replicas_the_test_last_set() {
    let control = FakeControl::new();
    let journal = FakeJournal::new();
    let nemesis = nemesis(&control, &journal);
    let reassign = step(PackageKind::Admin, Action::Admin(AdminKind::Reassign), 1);
    nemesis.execute(&reassign).await.unwrap();
    let state = nemesis.state();
    let (key, original) = state.reassigned.iter().next().expect("one reassigned");
    let (topic, partition) = key.split_once('/').unwrap();
    let partition: u32 = partition.parse().unwrap();
    let now = |control: &FakeControl| {
        control
            .cluster()
            .partitions
            .iter()
            .find(|p| p.topic == topic && p.partition == partition)
            .map(|p| p.replicas.clone())
            .unwrap()
    };
    assert_ne!(&now(&control), original);
    // The test grows the partition itself (RF-1-then-grow): that is what to restore.
    let grown = now(&control);
    nemesis.rebase_replicas(key, &grown);
    assert_eq!(nemesis.state().reassigned.get(key.as_str()), Some(&grown));
    assert!(nemesis.heal_all().await.unwrap().is_healed());
    assert_eq!(now(&control), grown, "not shrunk back to {original:?}");
    // A key the nemesis did not reassign is left alone.
    nemesis.rebase_replicas("t/9", &s(&["n1"]));
    assert!(nemesis.state().reassigned.is_empty());
}

#[tokio::test]
async fn a_node_an_isr_still_names_is_restarted_with_its_data() {
    let control = FakeControl::new();
    control.cluster().deregistration = Duration::from_millis(50);
    control.cluster().kept_in_isr.insert("n4".into());
    let journal = FakeJournal::new();
    let nemesis = nemesis(&control, &journal);
    nemesis.execute(&kill(&["n4"], true)).await.unwrap();
    // The other members of its ISRs are gone too: n4 is the last one of t/1 and u/0.
    for gone in ["n2", "n3", "n5"] {
        control.cluster().running.remove(gone);
    }
    nemesis
        .execute(&step(PackageKind::Kill, Action::Start, 2))
        .await
        .unwrap();
    assert_eq!(
        control.cluster().starts,
        vec![("n4".into(), false, false)],
        "deregistered, but no wipe: the ISR of t/1 and u/0 still names it"
    );
    let op = last(&journal);
    assert_eq!(op.error, None);
    assert_eq!(op.value["wiped"], json!([]));
    assert_eq!(
        op.value["wipe_skipped_in_sync"],
        json!({"n4": ["t/1", "u/0"]})
    );
    assert!(nemesis.state().is_healed());
}

#[tokio::test]
async fn a_wipe_that_outwaits_the_limit_restarts_without_it() {
    let control = FakeControl::new();
    control.cluster().deregistration = Duration::from_secs(3600);
    let journal = FakeJournal::new();
    let nemesis = nemesis(&control, &journal).with_deregistration_wait(DeregistrationWait {
        poll: Duration::from_millis(10),
        limit: Duration::from_millis(80),
    });
    nemesis.execute(&kill(&["n4"], true)).await.unwrap();
    nemesis
        .execute(&step(PackageKind::Kill, Action::Start, 2))
        .await
        .unwrap();
    assert_eq!(control.cluster().starts, vec![("n4".into(), false, true)]);
    let op = last(&journal);
    assert_eq!(op.value["deregistration_timeout"], json!(["n4"]));
    assert_eq!(op.value["wiped"], json!([]));
    assert!(op.value["waited_deregistration_ms"]["n4"].as_u64().unwrap() >= 80);
    assert!(nemesis.state().is_healed());
}

// ---------------------------------------------------------------------------------------
// (3) A stop removes its own package's cuts only.

#[tokio::test]
async fn stop_partition_removes_only_its_own_cuts() {
    let control = FakeControl::new();
    let journal = FakeJournal::new();
    let nemesis = nemesis(&control, &journal);
    // The same grudge in both packages: only the ports tell the cuts apart.
    let partition = Action::Partition {
        shape: Shape::Explicit(halves()),
    };
    let ports = Action::PartitionPorts {
        shape: Shape::Explicit(halves()),
        ports: Ports::Metadata,
        one_way: false,
    };
    nemesis
        .execute(&step(PackageKind::Partition, partition, 1))
        .await
        .unwrap();
    nemesis
        .execute(&step(PackageKind::PartitionPorts, ports, 2))
        .await
        .unwrap();
    assert_eq!(control.cluster().cuts.len(), 2);

    nemesis
        .execute(&step(PackageKind::Partition, Action::StopPartition, 3))
        .await
        .unwrap();
    assert_eq!(last(&journal).value["healed"], json!(1));
    assert_eq!(control.cluster().cuts, vec![(halves(), Ports::Metadata)]);
    let state = nemesis.state();
    assert!(state
        .cuts
        .get(&PackageKind::Partition)
        .is_none_or(Vec::is_empty));
    assert_eq!(
        state.cuts[&PackageKind::PartitionPorts],
        vec![(halves(), Ports::Metadata)]
    );

    nemesis
        .execute(&step(
            PackageKind::PartitionPorts,
            Action::StopPartitionPorts,
            4,
        ))
        .await
        .unwrap();
    assert!(control.cluster().cuts.is_empty());
    assert!(nemesis.state().is_healed());
}

// ---------------------------------------------------------------------------------------
// (4) heal_all heals everything and records it; a second call records nothing.

#[tokio::test]
async fn heal_all_heals_everything_after_a_random_run() {
    let control = FakeControl::with_latency(Duration::from_millis(1));
    control.cluster().deregistration = Duration::from_millis(30);
    let journal = FakeJournal::new();
    // `aimed` keeps its own pace (its first strike comes 0.5 s or more after the start):
    // its heal is tested below.
    let packages: Vec<PackageKind> = PackageKind::ALL
        .into_iter()
        .filter(|p| *p != PackageKind::Aimed)
        .collect();
    let opts = options(&packages, 99, Duration::from_millis(5), Vec::new(), true);
    let nemesis = Nemesis::new(opts, control.clone(), journal.clone()).with_deregistration_wait(
        DeregistrationWait {
            poll: Duration::from_millis(10),
            limit: Duration::from_secs(5),
        },
    );
    let (stop_tx, stop_rx) = watch::channel(false);
    let (summary, ()) = tokio::join!(nemesis.run(stop_rx), async {
        tokio::time::sleep(Duration::from_millis(400)).await;
        stop_tx.send(true).unwrap();
    });
    let summary = summary.unwrap();
    assert!(summary.by_f.values().sum::<u64>() >= 10, "{summary:?}");

    // Make sure something of every kind is broken.
    let killed: BTreeSet<String> = nemesis.state().killed.keys().cloned().collect();
    let alive: Vec<&str> = ["n1", "n2", "n3", "n4", "n5"]
        .into_iter()
        .filter(|n| !killed.contains(*n))
        .collect();
    nemesis.execute(&kill(&[alive[0]], false)).await.unwrap();
    let pause = Action::Pause {
        target: nodes_target(&[alive[1]]),
    };
    nemesis
        .execute(&step(PackageKind::Pause, pause, 2))
        .await
        .unwrap();
    nemesis
        .execute(&step(
            PackageKind::Partition,
            Action::Partition {
                shape: Shape::Explicit(halves()),
            },
            3,
        ))
        .await
        .unwrap();
    let ports = Action::PartitionPorts {
        shape: Shape::Explicit(lone_n5()),
        ports: Ports::Replication,
        one_way: true,
    };
    nemesis
        .execute(&step(PackageKind::PartitionPorts, ports, 4))
        .await
        .unwrap();
    let reassign = step(PackageKind::Admin, Action::Admin(AdminKind::Reassign), 5);
    nemesis.execute(&reassign).await.unwrap();
    if nemesis.state().reassigned.is_empty() {
        nemesis.execute(&reassign).await.unwrap();
    }
    let slow = Action::Slow {
        target: nodes_target(&[alive[2]]),
        delays: vec![Delay {
            point: "leader_fetch_response".into(),
            delay_ms: 500,
            percent: 100,
        }],
    };
    nemesis
        .execute(&step(PackageKind::Slow, slow, 6))
        .await
        .unwrap();
    // A node stopped behind the nemesis's back.
    control.cluster().paused.insert(alive[2].to_string());
    let broken = nemesis.state();
    assert!(
        !broken.killed.is_empty()
            && !broken.paused.is_empty()
            && !broken.reassigned.is_empty()
            && !broken.slowed.is_empty()
    );
    assert!(!control.cluster().cuts.is_empty());
    let before = journal.ops().len();

    let state = nemesis.heal_all().await.unwrap();
    assert!(state.is_healed(), "{state:?}");
    assert!(nemesis.state().is_healed());
    control.assert_healed();
    let healing: Vec<Op> = journal.ops().split_off(before);
    let fs: BTreeSet<&str> = healing.iter().map(|op| op.f.as_str()).collect();
    assert_eq!(
        fs,
        BTreeSet::from([
            "stop-partition",
            "stop-partition-ports",
            "stop-slow",
            "resume",
            "start",
            "reassign"
        ])
    );
    assert_eq!(healing.len(), 5 + broken.reassigned.len());
    for op in &healing {
        assert_eq!(op.invoke["final"], json!(true), "{op:?}");
        assert_eq!(op.error, None, "{op:?}");
    }
    let start = healing.iter().find(|op| op.f == "start").unwrap();
    assert_eq!(
        start.value["nodes"],
        json!(broken.killed.keys().collect::<Vec<_>>())
    );
    let network = healing.iter().find(|op| op.f == "stop-partition").unwrap();
    assert_eq!(network.value["healed"], json!("all"));

    let heals = control.cluster().heals;
    let again = nemesis.heal_all().await.unwrap();
    assert!(again.is_healed());
    assert_eq!(
        journal.ops().len(),
        before + healing.len(),
        "nothing new recorded"
    );
    assert_eq!(
        control.cluster().heals,
        heals + 1,
        "the network is healed anyway"
    );
    control.assert_healed();
}

#[tokio::test]
async fn heal_all_of_a_healed_cluster_records_nothing_but_heals_anyway() {
    let control = FakeControl::new();
    let journal = FakeJournal::new();
    let nemesis = nemesis(&control, &journal);
    control.cluster().paused.insert("n3".into());
    control.cluster().cuts.push((halves(), Ports::All));
    let state = nemesis.heal_all().await.unwrap();
    assert!(state.is_healed());
    assert!(journal.entries().is_empty());
    control.assert_healed();
}

// ---------------------------------------------------------------------------------------
// (5) run: packages concurrently, a prompt stop.

#[tokio::test]
async fn run_runs_packages_concurrently_and_stops_promptly() {
    let control = FakeControl::with_latency(Duration::from_millis(15));
    let journal = FakeJournal::new();
    let targets = vec![TargetSpec::One, TargetSpec::Minority];
    let opts = options(
        &[PackageKind::Kill, PackageKind::Partition],
        5,
        Duration::from_millis(20),
        targets,
        false,
    );
    let nemesis = Arc::new(Nemesis::new(opts, control.clone(), journal.clone()));
    let (stop_tx, stop_rx) = watch::channel(false);
    let running = tokio::spawn({
        let nemesis = nemesis.clone();
        async move { nemesis.run(stop_rx).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The state is readable while the run goes on.
    let _ = nemesis.state();
    let stopped_at = Instant::now();
    stop_tx.send(true).unwrap();
    let summary = tokio::time::timeout(Duration::from_secs(2), running)
        .await
        .expect("run stops")
        .unwrap()
        .unwrap();
    assert!(
        stopped_at.elapsed() < Duration::from_millis(250),
        "{:?}",
        stopped_at.elapsed()
    );

    let ops = journal.ops();
    let recorded = journal.entries().len();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(journal.entries().len(), recorded, "nothing after the stop");

    let packages: BTreeSet<&str> = ops
        .iter()
        .map(|op| op.invoke["package"].as_str().unwrap())
        .collect();
    assert_eq!(packages, BTreeSet::from(["kill", "partition"]));
    assert!(
        control.cluster().most_in_flight >= 2,
        "the packages' calls overlapped"
    );
    // The summary counts what the journal holds.
    let mut by_f = BTreeMap::new();
    let mut errors = BTreeMap::new();
    for op in &ops {
        *by_f.entry(op.f.clone()).or_insert(0u64) += 1;
        if op.error.is_some() {
            *errors.entry(op.f.clone()).or_insert(0u64) += 1;
        }
    }
    assert_eq!(summary.by_f, by_f);
    assert_eq!(summary.errors, errors);
    // Both packages made several steps within 500 ms of 20 ms intervals.
    assert!(
        ops.iter()
            .filter(|op| op.invoke["package"] == "kill")
            .count()
            >= 4
    );
    assert!(
        ops.iter()
            .filter(|op| op.invoke["package"] == "partition")
            .count()
            >= 4
    );
}

#[tokio::test]
async fn run_stops_when_the_sender_is_dropped_or_was_already_stopped() {
    let control = FakeControl::new();
    let journal = FakeJournal::new();
    let opts = options(
        &[PackageKind::Pause],
        5,
        Duration::from_secs(60),
        Vec::new(),
        false,
    );
    let nemesis = Nemesis::new(opts, control.clone(), journal.clone());

    let (stop_tx, stop_rx) = watch::channel(true);
    let summary = tokio::time::timeout(Duration::from_secs(1), nemesis.run(stop_rx))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(summary, Default::default());
    drop(stop_tx);

    let (stop_tx, stop_rx) = watch::channel(false);
    let (summary, ()) = tokio::join!(
        tokio::time::timeout(Duration::from_secs(1), nemesis.run(stop_rx)),
        async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            drop(stop_tx);
        }
    );
    assert_eq!(
        summary.expect("stops on a dropped sender").unwrap(),
        Default::default()
    );
    assert!(journal.entries().is_empty());
}

#[tokio::test]
async fn a_failing_journal_aborts_the_run() {
    let control = FakeControl::new();
    // Only the kill package's records fail: the admin package must be stopped by the
    // runner, or the run would never end.
    let journal = Arc::new(FakeJournal {
        failing_f: Some("kill"),
        ..FakeJournal::default()
    });
    let opts = options(
        &[PackageKind::Kill, PackageKind::Admin],
        5,
        Duration::from_millis(2),
        vec![TargetSpec::One],
        false,
    );
    let nemesis = Nemesis::new(opts, control.clone(), journal.clone());
    let (_stop_tx, stop_rx) = watch::channel(false);
    let result = tokio::time::timeout(Duration::from_secs(5), nemesis.run(stop_rx))
        .await
        .expect("aborts");
    assert_eq!(result, Err(JournalError("disk full".into())));
    let recorded = journal.entries().len();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(journal.entries().len(), recorded, "every package stopped");
}

// ---------------------------------------------------------------------------------------
// (6) The same seed gives the same faults.

/// The first steps of every package's schedule, executed in turn against fresh fakes;
/// the (f, targets, nodes, grudge) of each operation.
async fn faults_of(seed: u64) -> Vec<(String, Value, Value, Value)> {
    let control = FakeControl::new();
    let journal = FakeJournal::new();
    let targets = vec![
        TargetSpec::One,
        TargetSpec::Minority,
        TargetSpec::Majority,
        TargetSpec::All,
    ];
    let packages = [
        PackageKind::Kill,
        PackageKind::Pause,
        PackageKind::Partition,
        PackageKind::PartitionPorts,
    ];
    let opts = options(&packages, seed, Duration::from_secs(1), targets, true);
    let nemesis = nemesis(&control, &journal);
    let mut schedules: Vec<Schedule> = packages
        .iter()
        .map(|p| Schedule::new(*p, opts.schedule.clone()))
        .collect();
    for _ in 0..8 {
        for schedule in &mut schedules {
            let step = schedule.next().expect("endless");
            nemesis.execute(&step).await.unwrap();
        }
    }
    journal
        .ops()
        .into_iter()
        .map(|op| {
            (
                op.f,
                op.invoke["targets"].clone(),
                op.value["nodes"].clone(),
                op.value["grudge"].clone(),
            )
        })
        .collect()
}

#[tokio::test]
async fn the_same_seed_gives_the_same_faults() {
    let a = faults_of(7).await;
    let b = faults_of(7).await;
    assert_eq!(a.len(), 32);
    assert_eq!(a, b);
    assert!(a
        .iter()
        .any(|(_, _, nodes, _)| nodes.as_array().is_some_and(|n| !n.is_empty())));
    assert!(a.iter().any(|(_, _, _, grudge)| grudge.is_object()));
    assert_ne!(a, faults_of(8).await, "another seed, other faults");
}

/// A step's choices are those of `Rng::new(step.seed)`, whatever its index: the harness
/// (and a reader of the history) can redo them from the step alone.
#[tokio::test]
async fn choices_come_from_the_steps_seed() {
    let roles = Roles::unknown(&names(5));
    let mut killed = BTreeSet::new();
    for seed in 0..20u64 {
        let control = FakeControl::new();
        let journal = FakeJournal::new();
        let nemesis = nemesis(&control, &journal);
        let target = TargetSpec::Minority;
        let mut kill = step(
            PackageKind::Kill,
            Action::Kill {
                target: target.clone(),
                wipe: false,
            },
            seed,
        );
        kill.index = 1000 + seed * 7;
        nemesis.execute(&kill).await.unwrap();
        let expected = target.resolve(&roles, &mut Rng::new(seed)).unwrap();
        assert_eq!(
            last(&journal).value["nodes"],
            json!(expected),
            "seed {seed}"
        );
        killed.insert(expected);
        let shape = Shape::Halves;
        let mut partition = step(
            PackageKind::Partition,
            Action::Partition {
                shape: shape.clone(),
            },
            seed,
        );
        partition.index = seed;
        nemesis.execute(&partition).await.unwrap();
        let expected = shape.grudge(&roles, &mut Rng::new(seed)).unwrap();
        assert_eq!(
            last(&journal).value["grudge"],
            serde_json::to_value(&expected).unwrap(),
            "seed {seed}"
        );
    }
    assert!(killed.len() > 3, "seeds choose differently: {killed:?}");
}

// ---------------------------------------------------------------------------------------
// (7) A role nobody holds: an error, nothing done.

#[tokio::test]
async fn a_role_without_holder_completes_with_an_error_and_changes_nothing() {
    let control = FakeControl::new();
    control.cluster().controller = None;
    control.cluster().meta_leader = None;
    let journal = FakeJournal::new();
    let nemesis = nemesis(&control, &journal);
    let steps = [
        step(
            PackageKind::Kill,
            Action::Kill {
                target: TargetSpec::Controller,
                wipe: true,
            },
            1,
        ),
        step(
            PackageKind::Pause,
            Action::Pause {
                target: TargetSpec::MetaLeader,
            },
            2,
        ),
        step(
            PackageKind::Partition,
            Action::Partition {
                shape: Shape::Isolate(TargetSpec::Controller),
            },
            3,
        ),
        step(
            PackageKind::PartitionPorts,
            Action::PartitionPorts {
                shape: Shape::Isolate(TargetSpec::MetaLeader),
                ports: Ports::Metadata,
                one_way: true,
            },
            4,
        ),
    ];
    for step in &steps {
        nemesis.execute(step).await.unwrap();
    }
    // No node answers: no leaders, no partitions to transfer.
    control.cluster().answers = false;
    nemesis
        .execute(&step(
            PackageKind::Kill,
            Action::Kill {
                target: TargetSpec::Leaders,
                wipe: false,
            },
            5,
        ))
        .await
        .unwrap();
    nemesis
        .execute(&step(
            PackageKind::Admin,
            Action::Admin(AdminKind::TransferStorm),
            6,
        ))
        .await
        .unwrap();
    nemesis
        .execute(&step(
            PackageKind::Admin,
            Action::Admin(AdminKind::Reassign),
            7,
        ))
        .await
        .unwrap();

    let ops = journal.ops();
    assert_eq!(ops.len(), 7);
    for op in &ops {
        let error = op.error.as_deref().unwrap_or_default();
        assert!(error.starts_with("no-target: "), "{op:?}");
    }
    assert!(ops[0].error.as_deref().unwrap().contains("controller"));
    assert!(
        control.cluster().calls.is_empty(),
        "{:?}",
        control.cluster().calls
    );
    assert!(control.cluster().admin_log.is_empty());
    assert!(nemesis.state().is_healed());
    control.assert_healed();
}

// ---------------------------------------------------------------------------------------
// (8) Failed commands are recorded, never a panic.

#[tokio::test]
async fn control_errors_are_recorded() {
    let control = FakeControl::new();
    let journal = FakeJournal::new();
    let nemesis = nemesis(&control, &journal);

    control.fail("kill", "n2");
    nemesis.execute(&kill(&["n1", "n2"], false)).await.unwrap();
    let op = last(&journal);
    let error = op.error.expect("an error");
    assert!(
        error.contains("n2") && error.contains("injected failure of kill on n2"),
        "{error}"
    );
    assert!(!error.contains("n1"), "{error}");
    assert_eq!(
        op.value["errors"],
        json!({"n2": "injected failure of kill on n2"})
    );
    assert!(op.value["pids"]["n1"].is_u64());
    // The failed kill may have happened: n2 is to be started (without a wipe) too.
    assert_eq!(
        nemesis.state().killed,
        BTreeMap::from([("n1".into(), false), ("n2".into(), false)])
    );

    control.unfail_all();
    control.fail("start", "n1");
    nemesis
        .execute(&step(PackageKind::Kill, Action::Start, 2))
        .await
        .unwrap();
    let op = last(&journal);
    assert!(
        op.error.as_deref().unwrap().contains("start failed on n1"),
        "{op:?}"
    );
    assert!(op.value["pids"]["n2"].is_u64());
    assert_eq!(
        nemesis.state().killed,
        BTreeMap::from([("n1".into(), false)]),
        "n1 stays killed"
    );

    control.fail("pause", "n3");
    nemesis
        .execute(&step(
            PackageKind::Pause,
            Action::Pause {
                target: nodes_target(&["n3"]),
            },
            3,
        ))
        .await
        .unwrap();
    assert!(last(&journal).error.unwrap().contains("pause failed on n3"));
    control.fail("resume", "n3");
    nemesis
        .execute(&step(PackageKind::Pause, Action::Resume, 4))
        .await
        .unwrap();
    assert!(last(&journal)
        .error
        .unwrap()
        .contains("resume failed on n3"));
    assert!(
        nemesis.state().paused.contains("n3"),
        "a failed resume keeps n3 to be resumed"
    );

    control.fail("cut", "*");
    nemesis
        .execute(&step(
            PackageKind::Partition,
            Action::Partition {
                shape: Shape::Explicit(halves()),
            },
            5,
        ))
        .await
        .unwrap();
    assert!(last(&journal)
        .error
        .unwrap()
        .starts_with("cut failed: injected failure"));
    assert!(nemesis.state().cuts.values().all(Vec::is_empty));
    control.unfail_all();
    nemesis
        .execute(&step(
            PackageKind::Partition,
            Action::Partition {
                shape: Shape::Explicit(halves()),
            },
            6,
        ))
        .await
        .unwrap();
    control.fail("uncut", "*");
    nemesis
        .execute(&step(PackageKind::Partition, Action::StopPartition, 7))
        .await
        .unwrap();
    let op = last(&journal);
    assert!(op.error.unwrap().starts_with("uncut failed"));
    assert_eq!(op.value["healed"], json!(0));
    assert_eq!(
        nemesis.state().cuts[&PackageKind::Partition].len(),
        1,
        "the cut is still in place"
    );

    control.fail("admin", "*");
    nemesis
        .execute(&step(
            PackageKind::Admin,
            Action::Admin(AdminKind::ElectPreferred),
            8,
        ))
        .await
        .unwrap();
    assert!(last(&journal)
        .error
        .unwrap()
        .starts_with("elect-preferred failed"));
    nemesis
        .execute(&step(
            PackageKind::Admin,
            Action::Admin(AdminKind::TransferStorm),
            9,
        ))
        .await
        .unwrap();
    let op = last(&journal);
    assert_eq!(op.error, None, "transfers were attempted");
    for transfer in op.value["transfers"].as_array().unwrap() {
        assert_eq!(transfer["error"], json!("injected failure of admin on *"));
    }
    nemesis
        .execute(&step(
            PackageKind::Admin,
            Action::Admin(AdminKind::Reassign),
            10,
        ))
        .await
        .unwrap();
    let op = last(&journal);
    assert!(op.error.unwrap().starts_with("reassign failed"));
    assert_eq!(
        nemesis.state().reassigned.len(),
        1,
        "a failed reassignment may be in progress: restored at the end"
    );

    // heal_all with the network heal, the start and the admin failing: the node stays
    // killed, the assignment changed, the errors recorded.
    control.fail("heal", "*");
    control.fail("start", "n1");
    let state = nemesis.heal_all().await.unwrap();
    assert_eq!(state.killed, BTreeMap::from([("n1".into(), false)]));
    assert!(!state.cuts.is_empty(), "the heal failed");
    let errors: Vec<String> = journal
        .ops()
        .into_iter()
        .rev()
        .take(4)
        .filter_map(|op| op.error)
        .collect();
    assert!(
        errors.iter().any(|e| e.starts_with("heal failed")),
        "{errors:?}"
    );
    assert!(
        errors.iter().any(|e| e.contains("start failed on n1")),
        "{errors:?}"
    );
    assert!(
        errors.iter().any(|e| e.starts_with("reassign failed")),
        "{errors:?}"
    );
    assert_eq!(state.reassigned.len(), 1);
    assert!(state.paused.is_empty(), "the resume went through");

    control.unfail_all();
    let state = nemesis.heal_all().await.unwrap();
    assert!(state.is_healed(), "{state:?}");
    control.assert_healed();
}

/// The exact actions of scripted scenarios: start and resume of named nodes only, one
/// admin request with its answer, a failpoint on a control without failpoints refused
/// and recorded so; `execute_checked` hands back the error.
#[tokio::test]
async fn scripted_actions_act_on_exactly_what_they_name() {
    let control = FakeControl::new();
    let journal = FakeJournal::new();
    let nemesis = nemesis(&control, &journal);
    nemesis.execute(&kill(&["n1", "n2"], false)).await.unwrap();
    assert!(!control.cluster().running.contains_key("n1"));

    let start = Action::StartNodes { nodes: s(&["n2"]) };
    let (value, error) = nemesis
        .execute_checked(&step(PackageKind::Kill, start, 2))
        .await
        .unwrap();
    assert_eq!(error, None);
    let op = last(&journal);
    assert_eq!(op.f, "start");
    assert_eq!(op.invoke["targets"], json!("n2"));
    assert_eq!(value["nodes"], json!(["n2"]));
    assert!(control.cluster().running.contains_key("n2"));
    assert!(
        !control.cluster().running.contains_key("n1"),
        "n1 was not named"
    );
    assert_eq!(nemesis.state().killed.keys().collect::<Vec<_>>(), ["n1"]);

    let pause = Action::Pause {
        target: nodes_target(&["n3", "n4"]),
    };
    nemesis
        .execute(&step(PackageKind::Pause, pause, 3))
        .await
        .unwrap();
    let resume = Action::ResumeNodes { nodes: s(&["n4"]) };
    nemesis
        .execute(&step(PackageKind::Pause, resume, 4))
        .await
        .unwrap();
    assert_eq!(last(&journal).f, "resume");
    assert!(control.cluster().paused.contains("n3"));
    assert!(!control.cluster().paused.contains("n4"));
    assert_eq!(nemesis.state().paused.iter().collect::<Vec<_>>(), ["n3"]);

    let request = AdminAction::TransferLeader {
        topic: "t".into(),
        partition: 0,
        to: "n3".into(),
    };
    let (value, error) = nemesis
        .execute_checked(&step(
            PackageKind::Admin,
            Action::AdminRequest(request.clone()),
            5,
        ))
        .await
        .unwrap();
    assert_eq!(error, None);
    let op = last(&journal);
    assert_eq!(op.f, "transfer-leader");
    assert_eq!(op.invoke["request"]["to"], json!("n3"));
    assert_eq!(value["answer"], json!({"leader": "n3"}));
    assert_eq!(control.cluster().admin_log.last(), Some(&request));

    let arm = Action::Failpoint {
        node: "n2".into(),
        point: "before_isr_write".into(),
        actions: Some("pause".into()),
    };
    let (_, error) = nemesis
        .execute_checked(&step(PackageKind::Admin, arm.clone(), 6))
        .await
        .unwrap();
    let op = last(&journal);
    assert_eq!(op.f, "failpoint");
    assert_eq!(op.invoke["point"], json!("before_isr_write"));
    assert_eq!(op.invoke["actions"], json!("pause"));
    assert_eq!(error, None);
    let armed = ("n2".to_string(), "before_isr_write".to_string());
    assert_eq!(
        control.cluster().failpoints.get(&armed).map(String::as_str),
        Some("pause")
    );
    // A failpoint request that fails is recorded with its error.
    control
        .cluster()
        .failing
        .insert(("failpoint".into(), "n2".into()));
    let (_, error) = nemesis
        .execute_checked(&step(PackageKind::Admin, arm, 7))
        .await
        .unwrap();
    let error = error.expect("the failpoint request fails");
    assert_eq!(last(&journal).error.as_deref(), Some(error.as_str()));
}
