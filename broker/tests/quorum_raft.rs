//! The Raft metadata quorum ([`RaftQuorum`]) with in-process nodes on 127.0.0.1: forming
//! from configurations alone, forwarding from followers and learners, linearizable reads,
//! leader failover, restarts (one node, every node, a torn log tail), catching up by
//! snapshot after the log was purged, session expiry through the real reaper, and a
//! bounded failure without a quorum.
//!
//! Every wait polls its condition up to a generous deadline; nothing sleeps and hopes.

use std::collections::BTreeMap;
use std::future::Future;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use broker::config::NodeConfig;
use broker::metadata::{Command, Op, OpReply, Reply, SessionId, StoreError, WatchTarget};
use broker::quorum::raft::{RaftQuorum, RaftRole, RaftStatus};
use broker::quorum::{MetadataClient, QuorumError};
use broker::replica::BrokerId;
use tokio::net::TcpListener;

/// How long any one condition may take to come true.
const PATIENCE: Duration = Duration::from_secs(30);

static NEXT_CLUSTER: AtomicU64 = AtomicU64::new(0);

struct Cluster {
    root: PathBuf,
    configs: BTreeMap<BrokerId, NodeConfig>,
    nodes: BTreeMap<BrokerId, (RaftQuorum, MetadataClient)>,
    /// The client and replication ports named in the configurations, held so that no
    /// one else takes them.
    _unused: Vec<TcpListener>,
}

impl Cluster {
    /// Configures brokers `1..=voters + learners` (the first `voters` vote) and starts
    /// every one of them.
    async fn start(voters: u32, learners: u32, snapshot_every: u64) -> Cluster {
        let root = std::env::temp_dir().join(format!(
            "broker-quorum-raft-{}-{}",
            std::process::id(),
            NEXT_CLUSTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&root);
        let ids: Vec<BrokerId> = (1..=voters + learners).collect();
        let mut unused = Vec::new();
        let mut bound = BTreeMap::new();
        for &id in &ids {
            let mut ports = Vec::new();
            for _ in 0..3 {
                let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
                ports.push(listener.local_addr().expect("local addr"));
                unused.push(listener);
            }
            bound.insert(id, ports);
        }
        let peers: String = bound
            .iter()
            .map(|(id, p)| {
                format!(
                    "[[brokers]]\nid = {id}\nreplication = \"{}\"\nmetadata = \"{}\"\n\n",
                    p[1], p[2]
                )
            })
            .collect();
        let voter_list = (1..=voters)
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let mut configs = BTreeMap::new();
        for (id, p) in &bound {
            let text = format!(
                "broker_id = {id}\ndata_dir = \"{}\"\n\n[listeners]\nclient = \"{}\"\nreplication = \"{}\"\nmetadata = \"{}\"\n\n{peers}\
                 [metadata]\nvoters = [{voter_list}]\nraft_heartbeat_ms = 50\nelection_timeout_min_ms = 300\n\
                 election_timeout_max_ms = 600\nsnapshot_every = {snapshot_every}\n",
                root.join(format!("b{id}")).display(),
                p[0],
                p[1],
                p[2],
            );
            configs.insert(
                *id,
                NodeConfig::parse("node.toml", &text).expect("test config"),
            );
        }
        // The metadata ports are freed for the nodes to bind.
        unused.retain(|l| {
            let addr = l.local_addr().expect("local addr");
            !bound.values().any(|p| p[2] == addr)
        });
        let mut cluster = Cluster {
            root,
            configs,
            nodes: BTreeMap::new(),
            _unused: unused,
        };
        for id in ids {
            cluster.start_node(id).await;
        }
        cluster
    }

    fn metadata_addr(&self, id: BrokerId) -> SocketAddr {
        self.configs[&id].listeners.metadata
    }

    /// Starts (or restarts) broker `id` on its configured port and data directory.
    async fn start_node(&mut self, id: BrokerId) {
        init_logs();
        let addr = self.metadata_addr(id);
        let listener = eventually("the metadata port is free", || async move {
            TcpListener::bind(addr).await.ok()
        })
        .await;
        let started = RaftQuorum::start(&self.configs[&id], listener)
            .await
            .unwrap_or_else(|e| panic!("broker {id} does not start: {e}"));
        self.nodes.insert(id, started);
    }

    async fn shutdown(&mut self, id: BrokerId) {
        let (quorum, _) = self.nodes.remove(&id).expect("node is up");
        quorum.shutdown().await;
    }

    async fn kill(&mut self, id: BrokerId) {
        let (quorum, _) = self.nodes.remove(&id).expect("node is up");
        quorum.kill().await;
    }

    fn client(&self, id: BrokerId) -> &MetadataClient {
        &self.nodes[&id].1
    }

    fn status(&self, id: BrokerId) -> RaftStatus {
        self.nodes[&id].0.status()
    }

    fn up(&self) -> Vec<BrokerId> {
        self.nodes.keys().copied().collect()
    }

    /// Waits until one running node leads and every running voter agrees on it.
    async fn leader(&self) -> BrokerId {
        eventually("a leader every running voter agrees on", || async {
            let statuses: Vec<RaftStatus> = self.up().iter().map(|id| self.status(*id)).collect();
            let leader = statuses.iter().find(|s| s.role == RaftRole::Leader)?;
            statuses
                .iter()
                .filter(|s| s.voters.contains(&s.id))
                .all(|s| s.leader == Some(leader.id))
                .then_some(leader.id)
        })
        .await
    }

    /// Waits until broker `id` has applied `index`.
    async fn applied(&self, id: BrokerId, index: u64) {
        let client = self.client(id);
        eventually(&format!("broker {id} applies index {index}"), || async {
            (client.applied_index() >= index).then_some(())
        })
        .await;
    }

    fn data_dir(&self, id: BrokerId) -> PathBuf {
        self.configs[&id].data_dir.clone()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.nodes.clear();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Logs go to the test's output (shown when it fails); `RUST_LOG` filters them.
fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("broker=info")),
        )
        .with_test_writer()
        .try_init();
}

/// Polls `check` until it gives a value, panicking after [`PATIENCE`].
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn create(path: &str, data: &str, session: Option<SessionId>) -> Command {
    Command::Op(Op::Create {
        path: path.to_string(),
        data: data.as_bytes().to_vec(),
        ephemeral_session: session,
    })
}

/// Creates `path` through `client`, retrying while the quorum is unavailable (a leader
/// change). A retry after an indeterminate failure may find the node already created by
/// the first try, which is the same success.
async fn create_retrying(client: &MetadataClient, path: &str, data: &str) {
    let mut retried = false;
    eventually(&format!("creating {path}"), || {
        let was_retry = retried;
        retried = true;
        async move {
            match client.propose(create(path, data, None)).await {
                Ok(Reply::Op(OpReply::Created)) => Some(()),
                Err(QuorumError::Store(StoreError::NodeExists { .. })) if was_retry => Some(()),
                Err(QuorumError::Unavailable(_)) => None,
                other => panic!("creating {path}: {other:?}"),
            }
        }
    })
    .await
}

fn data_at(client: &MetadataClient, path: &str) -> Option<String> {
    client.read_local(|state, _| {
        state
            .get(path)
            .map(|(data, _)| String::from_utf8_lossy(data).into_owned())
    })
}

#[tokio::test]
async fn three_voters_and_a_learner_form_a_quorum_from_their_configs() {
    let cluster = Cluster::start(3, 1, 1000).await;
    let leader = cluster.leader().await;
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");
    eventually("the leader adds broker 4 as a learner", || async {
        let status = cluster.status(leader);
        (status.voters == vec![1, 2, 3] && status.learners == vec![4]).then_some(())
    })
    .await;
    eventually("broker 4 follows as a learner", || async {
        let status = cluster.status(4);
        (status.role == RaftRole::Learner && status.leader == Some(leader)).then_some(())
    })
    .await;
    assert_eq!(cluster.client(follower).leader(), Some(leader));

    // Proposals from a follower and from the learner are forwarded to the leader.
    let reply = cluster
        .client(follower)
        .propose(create("/from-follower", "f", None))
        .await;
    assert_eq!(reply, Ok(Reply::Op(OpReply::Created)));
    let reply = cluster
        .client(4)
        .propose(create("/from-learner", "l", None))
        .await;
    assert_eq!(reply, Ok(Reply::Op(OpReply::Created)));
    // A refusal comes back as the store's error, wherever the call was made.
    let reply = cluster
        .client(4)
        .propose(create("/from-follower", "again", None))
        .await;
    assert_eq!(
        reply,
        Err(QuorumError::Store(StoreError::NodeExists {
            path: "/from-follower".into()
        }))
    );

    // A linearizable read on the learner sees what was just written through the leader.
    let reply = cluster
        .client(leader)
        .propose(create("/from-leader", "x", None))
        .await;
    assert_eq!(reply, Ok(Reply::Op(OpReply::Created)));
    let seen = cluster
        .client(4)
        .read_linearizable(|state| {
            ["/from-leader", "/from-follower", "/from-learner"]
                .iter()
                .all(|p| state.exists(p))
        })
        .await;
    assert_eq!(seen, Ok(true));
    assert_eq!(
        data_at(cluster.client(4), "/from-leader").as_deref(),
        Some("x")
    );
    // And on the follower, for a write made through the learner.
    let reply = cluster
        .client(4)
        .propose(create("/learner-again", "y", None))
        .await;
    assert_eq!(reply, Ok(Reply::Op(OpReply::Created)));
    let seen = cluster
        .client(follower)
        .read_linearizable(|state| state.get("/learner-again").map(|(d, _)| d.to_vec()))
        .await;
    assert_eq!(seen, Ok(Some(b"y".to_vec())));

    // A graceful stop and a restart on the same port: the node serves again.
    let mut cluster = cluster;
    cluster.shutdown(follower).await;
    create_retrying(cluster.client(4), "/while-stopped", "s").await;
    cluster.start_node(follower).await;
    create_retrying(cluster.client(follower), "/after-stop", "a").await;
    let seen = cluster
        .client(follower)
        .read_linearizable(|s| s.exists("/while-stopped") && s.exists("/after-stop"))
        .await;
    assert_eq!(seen, Ok(true));
}

#[tokio::test]
async fn a_killed_leader_is_replaced_and_catches_up_after_restart_with_a_torn_tail() {
    let mut cluster = Cluster::start(3, 0, 1000).await;
    let first = cluster.leader().await;
    for i in 0..5 {
        create_retrying(cluster.client(first), &format!("/before-{i}"), "b").await;
    }
    cluster.kill(first).await;

    let second = cluster.leader().await;
    assert_ne!(second, first);
    let other = cluster
        .up()
        .into_iter()
        .find(|id| *id != second)
        .expect("a follower");
    for i in 0..5 {
        create_retrying(cluster.client(other), &format!("/after-{i}"), "a").await;
    }
    let target = cluster.client(second).applied_index();

    // A crash in the middle of an append leaves a partial record at the end of the log:
    // a whole header (length 200, its complement, a checksum) and a few payload bytes.
    let log = cluster.data_dir(first).join("metadata").join("log");
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .expect("open the log");
    let mut torn = 200u32.to_le_bytes().to_vec();
    torn.extend_from_slice(&(!200u32).to_le_bytes());
    torn.extend_from_slice(&[1, 2, 3, 4, b'{', b'"']);
    file.write_all(&torn).expect("tear the log");
    drop(file);

    cluster.start_node(first).await;
    cluster.applied(first, target).await;
    let client = cluster.client(first);
    for i in 0..5 {
        assert_eq!(
            data_at(client, &format!("/before-{i}")).as_deref(),
            Some("b")
        );
        assert_eq!(
            data_at(client, &format!("/after-{i}")).as_deref(),
            Some("a")
        );
    }
    // The restarted node serves proposals again (as a follower, forwarding).
    create_retrying(client, "/after-restart", "r").await;
    assert_eq!(
        cluster
            .client(second)
            .read_linearizable(|s| s.exists("/after-restart"))
            .await,
        Ok(true)
    );
    // The cut left a clean log: appends after it reopen without complaint.
    cluster.kill(first).await;
    cluster.start_node(first).await;
    let target = cluster.client(second).applied_index();
    cluster.applied(first, target).await;
    assert_eq!(
        data_at(cluster.client(first), "/after-restart").as_deref(),
        Some("r")
    );
}

#[tokio::test]
async fn every_committed_write_survives_killing_every_node() {
    let mut cluster = Cluster::start(3, 0, 1000).await;
    let leader = cluster.leader().await;
    let client = cluster.client(leader).clone();
    let Ok(Reply::SessionOpened(session)) = client
        .propose(Command::OpenSession { ttl_ms: 60_000 })
        .await
    else {
        panic!("no session")
    };
    let reply = client
        .propose(create("/ephemeral", "e", Some(session)))
        .await;
    assert_eq!(reply, Ok(Reply::Op(OpReply::Created)));
    for i in 0..20 {
        let reply = client
            .propose(create(&format!("/key-{i}"), &i.to_string(), None))
            .await;
        assert_eq!(reply, Ok(Reply::Op(OpReply::Created)));
    }
    let renewed_before = client
        .read_local(|s, _| s.session(session).map(|s| s.renewed_index))
        .expect("the session is live");
    drop(client);

    for id in [1, 2, 3] {
        cluster.kill(id).await;
    }
    for id in [1, 2, 3] {
        cluster.start_node(id).await;
    }
    let leader = cluster.leader().await;
    for id in [1, 2, 3] {
        let client = cluster.client(id);
        let keys = client
            .read_linearizable(|s| (0..20).filter(|i| s.exists(&format!("/key-{i}"))).count())
            .await;
        assert_eq!(keys, Ok(20), "broker {id}");
        assert_eq!(data_at(client, "/key-7").as_deref(), Some("7"));
        assert_eq!(data_at(client, "/ephemeral").as_deref(), Some("e"));
    }
    // The new leader renewed every session: it lives, with a fresh TTL.
    let renewed_after = eventually("the new leader renews the sessions", || async {
        cluster
            .client(leader)
            .read_linearizable(|s| s.session(session).map(|s| s.renewed_index))
            .await
            .ok()
            .flatten()
            .filter(|renewed| *renewed > renewed_before)
    })
    .await;
    assert!(renewed_after > renewed_before);
    assert_eq!(
        cluster
            .client(leader)
            .propose(Command::Heartbeat { session })
            .await,
        Ok(Reply::Done)
    );
}

#[tokio::test]
async fn a_node_behind_the_purged_log_catches_up_by_snapshot() {
    let mut cluster = Cluster::start(3, 0, 10).await;
    let leader = cluster.leader().await;
    let down = (1..=3).find(|id| *id != leader).expect("a follower");
    create_retrying(cluster.client(leader), "/first", "1").await;
    cluster
        .applied(down, cluster.client(leader).applied_index())
        .await;
    let behind = cluster.status(down).last_log_index.expect("a log");
    cluster.kill(down).await;

    let up = cluster.up();
    for i in 0..120 {
        let via = up[i % up.len()];
        create_retrying(cluster.client(via), &format!("/while-down-{i}"), "w").await;
    }
    let leader = cluster.leader().await;
    let purged = eventually("the leader purges its log past the down node", || async {
        let status = cluster.status(leader);
        status.purged_index.filter(|p| *p > behind + 50)
    })
    .await;
    assert!(cluster.status(leader).snapshot_index >= Some(purged));

    cluster.start_node(down).await;
    let target = cluster.client(leader).applied_index();
    cluster.applied(down, target).await;
    assert!(
        cluster.status(down).snapshots_installed >= 1,
        "caught up by snapshot: {:?}",
        cluster.status(down)
    );
    // Nothing is written now: every node reaches the same index, with identical state.
    let states = eventually("every node at the same applied index", || async {
        let states: Vec<(u64, Vec<u8>)> = cluster
            .up()
            .iter()
            .map(|id| {
                cluster
                    .client(*id)
                    .read_local(|s, index| (index, s.to_snapshot().expect("serialize")))
            })
            .collect();
        states
            .windows(2)
            .all(|w| w[0].0 == w[1].0)
            .then_some(states)
    })
    .await;
    assert!(states.windows(2).all(|w| w[0].1 == w[1].1), "states differ");
    assert_eq!(
        data_at(cluster.client(down), "/while-down-119").as_deref(),
        Some("w")
    );
}

#[tokio::test]
async fn an_ephemeral_node_goes_when_its_session_stops_heartbeating() {
    let cluster = Cluster::start(3, 0, 1000).await;
    let leader = cluster.leader().await;
    let followers: Vec<BrokerId> = (1..=3).filter(|id| *id != leader).collect();
    let owner = cluster.client(followers[0]);
    let watcher = cluster.client(followers[1]);
    let Ok(Reply::SessionOpened(session)) =
        owner.propose(Command::OpenSession { ttl_ms: 1_000 }).await
    else {
        panic!("no session")
    };
    let reply = owner.propose(create("/owned", "o", Some(session))).await;
    assert_eq!(reply, Ok(Reply::Op(OpReply::Created)));

    // Heartbeats keep it alive well past its TTL.
    let alive_until = Instant::now() + Duration::from_millis(2_500);
    while Instant::now() < alive_until {
        assert_eq!(
            owner.propose(Command::Heartbeat { session }).await,
            Ok(Reply::Done)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        watcher.read_linearizable(|s| s.exists("/owned")).await,
        Ok(true)
    );

    // Without them, the leader's reaper expires the session; a watch elsewhere fires.
    let seen = watcher
        .read_linearizable(|_| ())
        .await
        .map(|()| watcher.applied_index())
        .expect("read");
    let fired = watcher
        .watch(
            &WatchTarget::Node("/owned".into()),
            seen,
            Duration::from_secs(20),
        )
        .await;
    assert!(fired.is_some(), "the watch fired");
    assert_eq!(
        watcher.read_linearizable(|s| s.exists("/owned")).await,
        Ok(false)
    );
    assert_eq!(
        owner.propose(Command::Heartbeat { session }).await,
        Err(QuorumError::Store(StoreError::SessionExpired { session }))
    );
}

#[tokio::test]
async fn without_a_quorum_calls_fail_within_the_client_timeout() {
    let mut cluster = Cluster::start(3, 0, 1000).await;
    let leader = cluster.leader().await;
    create_retrying(cluster.client(leader), "/before", "b").await;
    let committed = cluster.client(leader).applied_index();
    for id in 1..=3 {
        cluster.applied(id, committed).await;
    }
    let survivor = (1..=3).find(|id| *id != leader).expect("a follower");
    let other = (1..=3)
        .find(|id| *id != leader && *id != survivor)
        .expect("another follower");
    cluster.kill(leader).await;
    cluster.kill(other).await;

    let timeout = Duration::from_secs(2);
    let client = cluster.client(survivor).clone().with_timeout(timeout);
    for attempt in 0..2 {
        let started = Instant::now();
        let result = client.propose(create("/lost", "x", None)).await;
        let took = started.elapsed();
        assert!(
            matches!(result, Err(QuorumError::Unavailable(_))),
            "attempt {attempt}: {result:?}"
        );
        assert!(took < timeout + Duration::from_secs(1), "took {took:?}");
        let started = Instant::now();
        let read = client.read_linearizable(|s| s.exists("/before")).await;
        assert!(matches!(read, Err(QuorumError::Unavailable(_))), "{read:?}");
        assert!(started.elapsed() < timeout + Duration::from_secs(1));
    }
    // What was committed before is still there to read locally.
    assert_eq!(
        data_at(cluster.client(survivor), "/before").as_deref(),
        Some("b")
    );
}
