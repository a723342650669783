//! acks=all produce throughput and latency on a three-broker loopback cluster, RF 3,
//! everything in this one process (brokers and clients share the machine's cores). The
//! brokers share a cluster secret, as the harness's clusters do, so every fetch and
//! LeaderAndIsr between them is signed and checked; `BENCH_NO_SECRET=1` runs them
//! without one.
//!
//! `cargo bench -p broker --bench produce`; `BENCH_SECONDS` (default 5) sets the length
//! of each phase, `BENCH_CLIENTS` (default 16 single, 8 batch) the concurrent clients. Prints, for single-value and batch produce: acknowledged records per
//! second, requests per second, and p50/p99 request latency.

#[path = "../tests/server_support/mod.rs"]
mod server_support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use broker::replica::metadata::TopicPartition;
use serde_json::json;
use server_support::TestCluster;

struct Phase {
    name: &'static str,
    clients: usize,
    batch: usize,
}

fn main() {
    let seconds: u64 = std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let clients: Option<usize> = std::env::var("BENCH_CLIENTS")
        .ok()
        .and_then(|s| s.parse().ok());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run(Duration::from_secs(seconds), clients));
}

async fn run(length: Duration, clients: Option<usize>) {
    let mut settings =
        "min_insync_replicas = 2\nreplica_lag_time_max_ms = 10000\nreplica_fetch_wait_max_ms = 500"
            .to_string();
    let signed = std::env::var_os("BENCH_NO_SECRET").is_none();
    if signed {
        let secret = peer_auth::ClusterSecret::draw().expect("a cluster secret");
        settings.push_str(&format!("\ncluster_secret = \"{}\"", secret.to_hex()));
    }
    let cluster = Arc::new(TestCluster::start(3, &settings).await);
    let phases = [
        Phase {
            name: "single",
            clients: clients.unwrap_or(16),
            batch: 1,
        },
        Phase {
            name: "batch",
            clients: clients.unwrap_or(8),
            batch: 100,
        },
    ];
    println!(
        "three brokers on loopback, RF 3, acks=all, min_insync_replicas 2, peer requests {}, {}s per phase",
        if signed { "signed" } else { "unsigned (no cluster secret)" },
        length.as_secs()
    );
    for (i, phase) in phases.iter().enumerate() {
        let tp = TopicPartition::new(format!("bench-{}", phase.name), i as u32);
        cluster.create_partition(&tp, &[1, 2, 3]).await;
        let url = Arc::new(cluster.records_url(1, &tp));
        let started = Instant::now();
        let mut tasks = Vec::new();
        for client in 0..phase.clients {
            let http = cluster.http.clone();
            let url = url.clone();
            let batch = phase.batch;
            tasks.push(tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut records = 0u64;
                let mut failures = 0u64;
                let mut n = 0u64;
                while started.elapsed() < length {
                    let body = if batch == 1 {
                        json!({"value": {"client": client, "n": n}, "acks": "all"})
                    } else {
                        let values: Vec<_> = (0..batch as u64)
                            .map(|k| json!({"client": client, "n": n + k}))
                            .collect();
                        json!({"values": values, "acks": "all"})
                    };
                    n += batch as u64;
                    let sent = Instant::now();
                    let ok = match http.post(url.as_str()).json(&body).send().await {
                        Ok(response) => response.status().is_success(),
                        Err(_) => false,
                    };
                    latencies.push(sent.elapsed());
                    if ok {
                        records += batch as u64;
                    } else {
                        failures += 1;
                    }
                }
                (latencies, records, failures)
            }));
        }
        let mut latencies = Vec::new();
        let mut records = 0;
        let mut failures = 0;
        for task in tasks {
            let (l, r, f) = task.await.expect("client task");
            latencies.extend(l);
            records += r;
            failures += f;
        }
        let elapsed = started.elapsed().as_secs_f64();
        latencies.sort();
        let percentile = |p: f64| {
            let index = ((latencies.len() as f64 * p).ceil() as usize).saturating_sub(1);
            latencies.get(index).copied().unwrap_or_default()
        };
        println!(
            "{:>6}: {} clients x {} record(s)/request: {:.0} records/s acked, {:.0} requests/s, p50 {:.2} ms, p99 {:.2} ms, {} failed requests",
            phase.name,
            phase.clients,
            phase.batch,
            records as f64 / elapsed,
            latencies.len() as f64 / elapsed,
            percentile(0.50).as_secs_f64() * 1e3,
            percentile(0.99).as_secs_f64() * 1e3,
            failures
        );
    }
    match Arc::try_unwrap(cluster) {
        Ok(cluster) => cluster.stop().await,
        Err(_) => eprintln!("cluster still shared; not stopped cleanly"),
    }
}
