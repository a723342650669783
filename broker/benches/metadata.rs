//! The Raft metadata quorum on loopback: three voters in this process (each on its own
//! small runtime, sharing the machine's cores with the clients), the default timing of
//! `node.toml` (heartbeat 100 ms, election timeout 800-1600 ms), logs fsynced on a real
//! data directory under the system temp dir.
//!
//! `cargo bench -p broker --bench metadata`. Prints:
//! - propose latency p50/p99/max over `BENCH_WRITES` (default 2000) sequential creates,
//!   through the leader and through a follower (forwarded);
//! - throughput and latency with `BENCH_WRITERS` (default 16) concurrent writers;
//! - time from killing the leader until the survivors agree on a new one, and until a
//!   write commits again (three rounds; the killed node restarts between rounds).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use broker::config::NodeConfig;
use broker::metadata::{Command, Op, OpReply, Reply};
use broker::quorum::raft::{RaftQuorum, RaftRole};
use broker::quorum::{MetadataClient, QuorumError};
use broker::replica::BrokerId;
use tokio::net::TcpListener;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run(
        env_or("BENCH_WRITES", 2000),
        env_or("BENCH_WRITERS", 16),
    ));
}

struct Cluster {
    root: std::path::PathBuf,
    configs: BTreeMap<BrokerId, NodeConfig>,
    nodes: BTreeMap<BrokerId, (RaftQuorum, MetadataClient)>,
    _held: Vec<TcpListener>,
}

impl Cluster {
    async fn start() -> Cluster {
        let root =
            std::env::temp_dir().join(format!("broker-bench-metadata-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let mut ports = BTreeMap::new();
        let mut held = Vec::new();
        let mut metadata = BTreeMap::new();
        for id in 1..=3u32 {
            let mut addrs = Vec::new();
            for _ in 0..3 {
                let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
                addrs.push(listener.local_addr().expect("addr"));
                held.push(listener);
            }
            metadata.insert(id, held.pop().expect("metadata listener"));
            ports.insert(id, addrs);
        }
        let peers: String = ports
            .iter()
            .map(|(id, p)| {
                format!(
                    "[[brokers]]\nid = {id}\nreplication = \"{}\"\nmetadata = \"{}\"\n\n",
                    p[1], p[2]
                )
            })
            .collect();
        let mut cluster = Cluster {
            root: root.clone(),
            configs: BTreeMap::new(),
            nodes: BTreeMap::new(),
            _held: held,
        };
        for (id, p) in &ports {
            let text = format!(
                "broker_id = {id}\ndata_dir = \"{}\"\n\n[listeners]\nclient = \"{}\"\nreplication = \"{}\"\nmetadata = \"{}\"\n\n{peers}",
                root.join(format!("b{id}")).display(),
                p[0],
                p[1],
                p[2]
            );
            cluster
                .configs
                .insert(*id, NodeConfig::parse("node.toml", &text).expect("config"));
        }
        for (id, listener) in metadata {
            let started = RaftQuorum::start(&cluster.configs[&id], listener)
                .await
                .expect("start");
            cluster.nodes.insert(id, started);
        }
        cluster
    }

    async fn restart(&mut self, id: BrokerId) {
        let addr = self.configs[&id].listeners.metadata;
        let listener = loop {
            match TcpListener::bind(addr).await {
                Ok(listener) => break listener,
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        };
        let started = RaftQuorum::start(&self.configs[&id], listener)
            .await
            .expect("restart");
        self.nodes.insert(id, started);
    }

    /// The leader every running node agrees on.
    async fn leader(&self) -> BrokerId {
        loop {
            let statuses: Vec<_> = self.nodes.values().map(|(q, _)| q.status()).collect();
            if let Some(leader) = statuses.iter().find(|s| s.role == RaftRole::Leader) {
                if statuses.iter().all(|s| s.leader == Some(leader.id)) {
                    return leader.id;
                }
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    fn client(&self, id: BrokerId) -> MetadataClient {
        self.nodes[&id].1.clone()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.nodes.clear();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn create(path: String) -> Command {
    Command::Op(Op::Create {
        path,
        data: b"{\"broker\":1,\"epoch\":7}".to_vec(),
        ephemeral_session: None,
    })
}

async fn timed_create(client: &MetadataClient, path: String) -> Duration {
    let started = Instant::now();
    match client.propose(create(path)).await {
        Ok(Reply::Op(OpReply::Created)) => started.elapsed(),
        other => panic!("write failed: {other:?}"),
    }
}

fn summary(mut latencies: Vec<Duration>) -> String {
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    format!(
        "p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        at(0.50).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3,
        latencies[latencies.len() - 1].as_secs_f64() * 1e3
    )
}

async fn run(writes: usize, writers: usize) {
    let mut cluster = Cluster::start().await;
    let leader = cluster.leader().await;
    let follower = (1..=3).find(|id| *id != leader).expect("follower");
    println!("three voters on loopback, heartbeat 100 ms, election timeout 800-1600 ms");

    let client = cluster.client(leader);
    let mut latencies = Vec::with_capacity(writes);
    for i in 0..writes {
        latencies.push(timed_create(&client, format!("/seq-{i}")).await);
    }
    println!(
        "sequential via the leader ({writes} writes): {}",
        summary(latencies)
    );

    let client = cluster.client(follower);
    let mut latencies = Vec::with_capacity(writes);
    for i in 0..writes {
        latencies.push(timed_create(&client, format!("/fwd-{i}")).await);
    }
    println!(
        "sequential via a follower ({writes} writes): {}",
        summary(latencies)
    );

    let client = Arc::new(cluster.client(leader));
    let per_writer = writes.max(writers) / writers;
    let started = Instant::now();
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let client = client.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(per_writer);
                for i in 0..per_writer {
                    latencies.push(timed_create(&client, format!("/conc-{w}-{i}")).await);
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.expect("writer"));
    }
    let elapsed = started.elapsed();
    println!(
        "{writers} concurrent writers ({} writes): {:.0} writes/s, {}",
        latencies.len(),
        latencies.len() as f64 / elapsed.as_secs_f64(),
        summary(latencies)
    );

    for round in 1..=3 {
        let old = cluster.leader().await;
        let survivor = (1..=3).find(|id| *id != old).expect("survivor");
        let client = cluster.client(survivor);
        let (quorum, _) = cluster.nodes.remove(&old).expect("leader up");
        let killed = Instant::now();
        quorum.kill().await;
        let new = cluster.leader().await;
        let elected = killed.elapsed();
        let mut attempt = 0;
        loop {
            attempt += 1;
            match client
                .propose(create(format!("/failover-{round}-{attempt}")))
                .await
            {
                Ok(_) => break,
                Err(QuorumError::Unavailable(_)) => continue,
                Err(error) => panic!("write after failover: {error}"),
            }
        }
        let writing = killed.elapsed();
        println!(
            "failover {round}: leader {old} killed, {new} leads after {:.0} ms, first write committed after {:.0} ms",
            elapsed_ms(elected),
            elapsed_ms(writing)
        );
        cluster.restart(old).await;
        let target = cluster.client(new).applied_index();
        while cluster.client(old).applied_index() < target {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

fn elapsed_ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}
