//! The nemesis's faults on a real broker cluster in network namespaces (needs root;
//! otherwise each test fails saying so). Faults are acted out through the
//! `nemesis` crate ([`Nemesis::execute`], [`Nemesis::heal_all`]) on the harness's
//! [`ClusterFaults`], and recorded in a history through [`HistoryJournal`].
//!
//! - Cutting one node's metadata port only (both ways) leaves its replication port open:
//!   records written after the cut still reach its replica. Its session expires all the
//!   same, and the controller deregisters it and drops it from the ISR. Healed, it
//!   registers again and catches up.
//!
//!   (Once deregistered, the replica stops advancing: the controller's ISR shrink bumps
//!   the leader epoch, as ZooKeeper-era Kafka's `removeReplicasFromIsr` does, and tells
//!   only live brokers, so the node's fetches carry a fenced epoch (KIP-320).)
//! - A kill that wipes restarts the node without its partitions' logs but with the
//!   metadata quorum's files; the empty replica copies its partitions afresh.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use backend::netns::NetnsBackend;
use backend::Backend;
use common::{is_root, run_leftovers};
use harness::cluster::{Cluster, ClusterSpec};
use harness::faults::{ClusterFaults, HistoryJournal};
use nemesis::schedule::ScheduleOptions;
use nemesis::{
    Action, AdminAction, ClusterControl, Nemesis, NemesisOptions, PackageKind, Ports, Roles, Shape,
    Step, TargetSpec,
};
use serde_json::{json, Value};
use sut::{TopicLayout, TopicSpec};
use tokio::sync::watch;
use workloads::recorder::Recorder;

const TOPIC: &str = "faults";
const PARTITIONS: u32 = 2;
const NODES: usize = 4;
/// Generous: the machine is small and other builds run beside the tests.
const FORM_BOUND: Duration = Duration::from_secs(240);
const EXPIRY_BOUND: Duration = Duration::from_secs(90);
const CATCH_UP_BOUND: Duration = Duration::from_secs(90);

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "harness-nemesis-faults-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch folder");
    dir
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Talks to the brokers directly, as a client would: produce, metadata, replica views.
struct Probe {
    cluster: Arc<Cluster>,
    http: reqwest::Client,
}

impl Probe {
    fn new(cluster: Arc<Cluster>) -> Probe {
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(5))
            .build()
            .expect("HTTP client");
        Probe { cluster, http }
    }

    fn url(&self, node: &str) -> String {
        let address = self
            .cluster
            .node(node)
            .unwrap_or_else(|| panic!("no node {node}"))
            .address;
        format!(
            "http://{}",
            std::net::SocketAddr::new(address, driver::CLIENT_PORT)
        )
    }

    /// Our broker's id of `node`.
    fn broker_id(&self, node: &str) -> u32 {
        let index = self.cluster.nodes.iter().position(|n| n.name == node);
        driver::BrokerDb::broker_id(index.unwrap_or_else(|| panic!("no node {node}")))
    }

    /// The registered brokers as `node`'s `/v1/metadata` names them; `None` when it
    /// does not answer.
    async fn registered(&self, asked: &str) -> Option<BTreeSet<String>> {
        let url = format!("{}/v1/metadata", self.url(asked));
        let response = self.http.get(url).send().await.ok()?;
        if !response.status().is_success() {
            return None;
        }
        let metadata: Value = response.json().await.ok()?;
        let ids = driver::views::BrokerIds(
            self.cluster
                .nodes
                .iter()
                .map(|n| (n.name.clone(), self.broker_id(&n.name)))
                .collect(),
        );
        Some(driver::views::roles(&ids, &metadata)?.registered)
    }

    /// Appends `value` with acks=1 through `leader`; its offset.
    async fn produce(&self, leader: &str, partition: u32, value: i64) -> Result<u64, String> {
        let url = format!(
            "{}/v1/topics/{TOPIC}/partitions/{partition}/records",
            self.url(leader)
        );
        let response = self
            .http
            .post(url)
            .json(&json!({"value": value, "acks": 1}))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let body: Value = response.json().await.map_err(|e| e.to_string())?;
        match body["offset"].as_u64() {
            Some(offset) if status.is_success() => Ok(offset),
            _ => Err(format!("{status} {body}")),
        }
    }

    /// `node`'s replica of `partition` as its `/v1/debug/replicas` shows it.
    async fn replica(&self, node: &str, partition: u32) -> Option<Value> {
        let url = format!("{}/v1/debug/replicas", self.url(node));
        let body: Value = self.http.get(url).send().await.ok()?.json().await.ok()?;
        body["replicas"]
            .as_array()?
            .iter()
            .find(|r| r["topic"] == json!(TOPIC) && r["partition"] == json!(partition))
            .cloned()
    }

    async fn log_end(&self, node: &str, partition: u32) -> Option<u64> {
        self.replica(node, partition).await?["log_end_offset"].as_u64()
    }
}

/// Polls `check` every 200 ms until it gives a value, or panics after `bound`.
async fn eventually<T, F, Fut>(what: &str, bound: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            start.elapsed() < bound,
            "timed out after {bound:?} waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Roles once every partition has a leader and all four replicas in sync, and the
/// controller and the quorum's leader are known.
async fn settled_roles(control: &ClusterFaults) -> Roles {
    eventually("every replica is in sync", FORM_BOUND, || async {
        let roles = control.roles().await?;
        let settled = roles.controller.is_some()
            && roles.meta_leader.is_some()
            && roles.registered.len() == NODES
            && roles.partitions.len() == PARTITIONS as usize
            && roles
                .partitions
                .iter()
                .all(|p| p.leader.is_some() && p.isr.len() == NODES);
        settled.then_some(roles)
    })
    .await
}

/// Appends consecutive values with acks=1 through `leader` every 50 ms until `stop`;
/// keeps in `acked` the offset after the last acknowledged record. Returns how many were
/// acknowledged (errors are retried: a client sees some during faults).
async fn produce_until_stopped(
    probe: Arc<Probe>,
    leader: String,
    partition: u32,
    acked: Arc<AtomicU64>,
    mut stop: watch::Receiver<bool>,
) -> u64 {
    let mut value = 0i64;
    let mut written = 0u64;
    while !*stop.borrow_and_update() {
        match probe.produce(&leader, partition, value).await {
            Ok(offset) => {
                acked.fetch_max(offset + 1, Ordering::SeqCst);
                written += 1;
            }
            Err(error) => println!("produce {value}: {error}"),
        }
        value += 1;
        tokio::select! {
            _ = stop.changed() => {}
            () = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
    }
    written
}

/// The history file's entries.
fn history(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .expect("history")
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

/// A cluster of [`NODES`] brokers in namespaces with a nemesis on it, recording to a
/// history in a scratch folder. Sessions expire after 3 s, to be quick.
struct Rig {
    runtime: tokio::runtime::Runtime,
    backend: Arc<NetnsBackend>,
    prefix: String,
    dir: PathBuf,
    cluster: Arc<Cluster>,
}

/// What the test body works with, once the cluster serves the topic.
struct Faulted {
    control: Arc<ClusterFaults>,
    recorder: Recorder,
    nemesis: Nemesis,
    probe: Arc<Probe>,
}

impl Rig {
    fn new(name: &str) -> Rig {
        let broker_bin = driver::build_broker().expect("building the broker");
        let dir = scratch(name);
        let runtime = runtime();
        let backend = Arc::new(
            runtime
                .block_on(NetnsBackend::start(NODES))
                .expect("setting up the nodes"),
        );
        let prefix = backend.prefix().to_string();
        let spec = ClusterSpec {
            program: broker_bin,
            bugs: Vec::new(),
            settings: vec!["metadata.session_timeout_ms=3000".into()],
            node_settings: Default::default(),
            root: dir.join("nodes"),
            local_dir: dir.join("nodes"),
            install_program: false,
        };
        let dyn_backend: Arc<dyn Backend> = backend.clone();
        let db = Arc::new(driver::BrokerDb);
        let cluster = Arc::new(Cluster::new(dyn_backend, db, spec).expect("cluster"));
        Rig {
            runtime,
            backend,
            prefix,
            dir,
            cluster,
        }
    }

    fn history_path(&self) -> PathBuf {
        self.dir.join("history.jsonl")
    }

    /// Starts the brokers, creates the topic (every node a replica of every partition).
    async fn up(&self) -> Faulted {
        let cluster = &self.cluster;
        cluster.start().await.expect("starting the brokers");
        cluster.wait_formed(FORM_BOUND).await.expect("formed");
        let topic = TopicSpec {
            name: TOPIC.into(),
            layout: TopicLayout::Spread {
                partitions: PARTITIONS,
                replication_factor: NODES as u32,
            },
        };
        cluster
            .api
            .create_topic(&topic, FORM_BOUND)
            .await
            .expect("topic");
        let control = Arc::new(ClusterFaults::new(Arc::clone(cluster)));
        let recorder = Recorder::create(&self.history_path()).expect("recorder");
        let journal = Arc::new(HistoryJournal::new(recorder.clone()));
        let options = NemesisOptions {
            packages: Vec::new(),
            schedule: ScheduleOptions {
                seed: 1,
                interval: Duration::from_secs(10),
                targets: TargetSpec::defaults(),
                wipe: false,
                unclean_elections: false,
                asks_divergence: true,
            },
            swarm: None,
        };
        let nemesis = Nemesis::new(options, control.clone(), journal);
        let probe = Arc::new(Probe::new(Arc::clone(cluster)));
        Faulted {
            control,
            recorder,
            nemesis,
            probe,
        }
    }

    /// Tears the nodes down and checks that nothing is left.
    fn finish(self) {
        self.runtime
            .block_on(self.backend.teardown())
            .expect("teardown");
        let left = run_leftovers(&self.prefix, &[]);
        assert!(left.is_empty(), "left behind: {left:?}");
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A node that holds no role a fault of it would disturb: not the controller, not the
/// quorum's leader (the last node first: it is no voter).
fn roleless(roles: &Roles) -> String {
    roles
        .nodes
        .iter()
        .rev()
        .find(|n| roles.controller.as_ref() != Some(*n) && roles.meta_leader.as_ref() != Some(*n))
        .cloned()
        .expect("a node without a role")
}

#[test]
#[allow(non_snake_case)]
fn needs_root__a_metadata_port_cut_expires_the_session_but_leaves_replication_open() {
    if !is_root() {
        common::missing_root();
    }
    let rig = Rig::new("metadata-port");
    let cluster = Arc::clone(&rig.cluster);
    let history_path = rig.history_path();
    let (node, peers) = rig.runtime.block_on(async {
        let Faulted {
            control,
            recorder,
            nemesis,
            probe,
        } = rig.up().await;

        // The node to cut: no role, and not the leader of the partition watched
        // (leadership is moved away if needed).
        let roles = settled_roles(&control).await;
        let node = roleless(&roles);
        let peers: Vec<String> = roles
            .nodes
            .iter()
            .filter(|n| **n != node)
            .cloned()
            .collect();
        let (partition, leader) = match roles
            .partitions
            .iter()
            .find(|p| p.leader.as_ref() != Some(&node))
        {
            Some(p) => (p.partition, p.leader.clone().expect("settled")),
            None => {
                let to = peers[0].clone();
                control
                    .admin(&AdminAction::TransferLeader {
                        topic: TOPIC.into(),
                        partition: 0,
                        to: to.clone(),
                    })
                    .await
                    .expect("moving leadership away");
                (0, to)
            }
        };
        println!(
            "cutting {node}'s metadata port; watching {TOPIC}/{partition} led by {leader} \
             (controller {:?}, quorum leader {:?})",
            roles.controller, roles.meta_leader
        );
        // A client writes through the leader with acks=1 all along.
        let (stop_producing, producing) = watch::channel(false);
        let acked = Arc::new(AtomicU64::new(0));
        let producer = tokio::spawn(produce_until_stopped(
            Arc::clone(&probe),
            leader.clone(),
            partition,
            Arc::clone(&acked),
            producing,
        ));
        // Whether `node`'s replica holds every record acknowledged before the look.
        let caught_up = |what: &'static str, bound: Duration| {
            let probe = Arc::clone(&probe);
            let acked = Arc::clone(&acked);
            let node = node.clone();
            async move {
                eventually(what, bound, || async {
                    let end = acked.load(Ordering::SeqCst);
                    let leo = probe.log_end(&node, partition).await?;
                    (end > 0 && leo >= end).then_some(leo)
                })
                .await
            }
        };
        caught_up("the replica follows before the cut", CATCH_UP_BOUND).await;

        // Cut the node's metadata port, both ways.
        let step = Step {
            package: PackageKind::PartitionPorts,
            index: 0,
            delay: Duration::ZERO,
            action: Action::PartitionPorts {
                shape: Shape::Isolate(TargetSpec::Nodes(vec![node.clone()])),
                ports: Ports::Metadata,
                one_way: false,
            },
            seed: 7,
        };
        let done = nemesis.execute(&step).await.expect("journal");
        let cut_at = Instant::now();
        let acked_at_cut = acked.load(Ordering::SeqCst);
        println!("start-partition-ports: {done}");
        let grudge = &done["grudge"];
        let dropped_by_node: BTreeSet<String> =
            serde_json::from_value(grudge[&node].clone()).expect("the node's grudge");
        assert_eq!(
            dropped_by_node,
            peers.iter().cloned().collect::<BTreeSet<_>>(),
            "{done}"
        );
        for peer in &peers {
            assert!(
                grudge[peer]
                    .as_array()
                    .is_some_and(|dropped| dropped.contains(&json!(node))),
                "{peer} drops {node}: {done}"
            );
        }
        assert!(!nemesis.state().is_healed(), "the cut is in place");

        // The replication port stays open: records written after the cut reach the
        // node. Its session expires all the same: the controller deregisters it.
        let asked = roles.controller.clone().expect("settled");
        let mut replicated_after_cut = None;
        let mut deregistered_after = None;
        while deregistered_after.is_none() || replicated_after_cut.is_none() {
            if replicated_after_cut.is_none() {
                let leo = probe.log_end(&node, partition).await.unwrap_or(0);
                if leo >= acked_at_cut + 5 {
                    replicated_after_cut = Some((cut_at.elapsed(), leo));
                }
            }
            if deregistered_after.is_none() {
                let registered = probe.registered(&asked).await;
                if registered.is_some_and(|r| !r.contains(&node)) {
                    deregistered_after = Some(cut_at.elapsed());
                }
            }
            assert!(
                cut_at.elapsed() < EXPIRY_BOUND,
                "after {EXPIRY_BOUND:?}: replicated after the cut {replicated_after_cut:?}, \
                 deregistered after {deregistered_after:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (replicated, leo) = replicated_after_cut.expect("checked");
        let deregistered = deregistered_after.expect("checked");
        println!(
            "{node}: log end {acked_at_cut} at the cut, {leo} after {replicated:?} (records \
             written after the cut); deregistered after {deregistered:?}"
        );

        // Deregistered, it is out of the partition's ISR.
        let leader_id = probe.broker_id(&leader);
        let node_id = probe.broker_id(&node);
        let leader_view = eventually(
            "the leader drops the node from its ISR",
            CATCH_UP_BOUND,
            || {
                let probe = Arc::clone(&probe);
                let leader = leader.clone();
                async move {
                    let view = probe.replica(&leader, partition).await?;
                    let isr = view["isr"].as_array()?.clone();
                    (!isr.contains(&json!(node_id))).then_some(view)
                }
            },
        )
        .await;
        assert_eq!(leader_view["leader"], json!(leader_id), "{leader_view}");
        let node_view = probe.replica(&node, partition).await.expect("replica view");
        println!("while deregistered: the leader's view {leader_view}; {node}'s view {node_view}");

        // Healed, it registers again and catches up.
        let left = nemesis.heal_all().await.expect("journal");
        assert!(left.is_healed(), "{left:?}");
        eventually("the node registers again", EXPIRY_BOUND, || {
            let probe = &probe;
            let asked = asked.clone();
            let node = node.clone();
            async move {
                let registered = probe.registered(&asked).await?;
                registered.contains(&node).then_some(())
            }
        })
        .await;
        let leo = caught_up("the replica catches up after the heal", CATCH_UP_BOUND).await;
        println!("{node} registered again; its log end {leo}");
        let _ = stop_producing.send(true);
        let written = producer.await.expect("producer task");
        assert!(written > 20, "only {written} records acknowledged");
        recorder.finish().expect("history");
        cluster.stop(Duration::from_secs(10)).await.expect("stop");
        (node, peers)
    });

    // The history holds the fault as a nemesis pair with its grudge, and its heal.
    let entries = history(&history_path);
    let cuts: Vec<&Value> = entries
        .iter()
        .filter(|e| e["f"] == json!("start-partition-ports"))
        .collect();
    assert_eq!(cuts.len(), 2, "{cuts:?}");
    for entry in &cuts {
        assert_eq!(entry["process"], json!("nemesis"));
        assert_eq!(entry["type"], json!("info"));
        assert_eq!(entry["value"]["package"], json!("partition-ports"));
        assert_eq!(entry["value"]["ports"], json!("metadata"));
        assert_eq!(entry["value"]["targets"], json!(format!("isolate-{node}")));
    }
    let grudge = &cuts[1]["value"]["grudge"];
    assert_eq!(grudge[&node], json!(peers), "{grudge}");
    assert!(cuts[1]["error"].is_null(), "{:?}", cuts[1]);
    let heals: Vec<&Value> = entries
        .iter()
        .filter(|e| e["f"] == json!("stop-partition-ports"))
        .collect();
    assert_eq!(heals.len(), 2, "{heals:?}");
    assert!(heals.iter().all(|e| e["value"]["final"] == json!(true)));

    rig.finish();
}

/// The inode of a path, to tell a folder from one removed and made again.
fn inode(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| m.ino())
}

#[test]
#[allow(non_snake_case)]
fn needs_root__a_wiping_kill_restarts_the_node_without_its_partitions_but_with_its_quorum_files() {
    if !is_root() {
        common::missing_root();
    }
    let rig = Rig::new("wipe");
    let cluster = Arc::clone(&rig.cluster);
    rig.runtime.block_on(async {
        let Faulted {
            control,
            recorder,
            nemesis,
            probe,
        } = rig.up().await;
        let roles = settled_roles(&control).await;
        let node = roleless(&roles);
        let asked = roles.controller.clone().expect("settled");
        let partition = 0;
        let leader = roles.partitions[0].leader.clone().expect("settled");
        let leader = if leader == node {
            // Written through another leader while the node is down: move it now.
            let to = roles.nodes.iter().find(|n| **n != node).expect("a peer");
            control
                .admin(&AdminAction::TransferLeader {
                    topic: TOPIC.into(),
                    partition,
                    to: to.clone(),
                })
                .await
                .expect("moving leadership away");
            to.clone()
        } else {
            leader
        };
        let mut last = 0;
        for value in 0..20 {
            last = probe
                .produce(&leader, partition, value)
                .await
                .expect("acks=1 produce");
        }
        eventually("the replica catches up", CATCH_UP_BOUND, || {
            let probe = &probe;
            let node = node.clone();
            async move {
                probe
                    .log_end(&node, partition)
                    .await
                    .filter(|leo| *leo > last)
            }
        })
        .await;
        // A stray entry beside the partitions' folders goes with them; the quorum's
        // folder stays (the very folder: same inode).
        let data_dir = cluster.db.data_dir(cluster.node(&node).expect("node"));
        let stray = data_dir.join("stray-entry");
        std::fs::write(&stray, "wiped with the partitions\n").expect("stray entry");
        let quorum_dir = data_dir.join("metadata");
        let quorum_inode = inode(&quorum_dir);
        assert!(quorum_inode.is_some(), "{} exists", quorum_dir.display());
        assert!(data_dir.join(format!("{TOPIC}-{partition}")).is_dir());

        let step = |index: u64, action: Action| Step {
            package: PackageKind::Kill,
            index,
            delay: Duration::ZERO,
            action,
            seed: index,
        };
        let target = TargetSpec::Nodes(vec![node.clone()]);
        let killed = nemesis
            .execute(&step(0, Action::Kill { target, wipe: true }))
            .await
            .expect("journal");
        println!("kill: {killed}");
        assert_eq!(killed["wipe_on_start"], json!(true), "{killed}");
        assert!(killed["pids"][&node].is_u64(), "{killed}");
        assert!(!cluster.is_running(&node).await);
        // Written while the node is down: it must copy them from the leader afresh.
        for value in 20..40 {
            last = probe
                .produce(&leader, partition, value)
                .await
                .expect("acks=1 produce");
        }
        let started = nemesis
            .execute(&step(1, Action::Start))
            .await
            .expect("journal");
        println!("start: {started}");
        assert_eq!(started["wiped"], json!([node]), "{started}");
        assert!(cluster.is_running(&node).await);
        assert_eq!(
            inode(&quorum_dir),
            quorum_inode,
            "the quorum's files are kept"
        );
        assert!(
            !stray.exists(),
            "the wipe removed every entry but the quorum's"
        );
        // The empty replica registers again and copies the whole partition.
        eventually("the node registers again", EXPIRY_BOUND, || {
            let probe = &probe;
            let asked = asked.clone();
            let node = node.clone();
            async move {
                let registered = probe.registered(&asked).await?;
                registered.contains(&node).then_some(())
            }
        })
        .await;
        // Its quorum member restarted on its kept files.
        let log = std::fs::read_to_string(cluster.db.log_file(cluster.node(&node).expect("node")))
            .expect("broker log");
        assert!(
            log.contains("pristine=false"),
            "the restarted quorum member found its files"
        );

        let leo = eventually("the wiped replica catches up", CATCH_UP_BOUND, || {
            let probe = &probe;
            let node = node.clone();
            async move {
                probe
                    .log_end(&node, partition)
                    .await
                    .filter(|leo| *leo > last)
            }
        })
        .await;
        println!("{node} wiped, restarted and caught up to {leo}");
        let left = nemesis.heal_all().await.expect("journal");
        assert!(left.is_healed(), "{left:?}");
        recorder.finish().expect("history");
        cluster.stop(Duration::from_secs(10)).await.expect("stop");
    });
    rig.finish();
}
