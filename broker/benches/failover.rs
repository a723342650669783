//! `cargo bench -p broker --bench failover`: time from kill -9 of a partition leader to
//! the first acknowledged acks=all write on its successor, in a cluster of real broker
//! processes on loopback with the default session timeout (6 s). The target is
//! under session timeout + 2 s. A writer retries every 20 ms, as a client would.

#[path = "../tests/cluster_support/mod.rs"]
mod cluster_support;

use std::time::{Duration, Instant};

use cluster_support::{wait_until, ProcessCluster};
use serde_json::json;

const ROUNDS: usize = 5;
const SESSION_TIMEOUT_MS: u64 = 6_000;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run());
}

async fn run() {
    let settings = format!(
        "min_insync_replicas = 2\nreplica_lag_time_max_ms = 10000\n\n[metadata]\nsession_timeout_ms = {SESSION_TIMEOUT_MS}\n"
    );
    let mut cluster = ProcessCluster::start(4, &settings, &[]);
    cluster.create_topic("bench", 4, 3).await;
    cluster
        .wait_serving("bench", 4, Duration::from_secs(60))
        .await;
    let mut samples = Vec::new();
    for round in 0..ROUNDS {
        let (controller, _) = cluster.controller().await.expect("controller");
        let meta_leader = cluster.metadata_leader().await;
        // A partition led by neither the controller nor the quorum leader: the
        // data-plane failover alone.
        let mut target = None;
        for p in 0..4 {
            let leader = cluster.leader("bench", p).await;
            if let Some(l) = leader {
                if l != controller && Some(l) != meta_leader {
                    target = Some((p, l));
                    break;
                }
            }
        }
        let Some((partition, leader)) = target else {
            println!("round {round}: every leader is the controller or the quorum leader; skipped");
            continue;
        };
        cluster
            .produce_until_acked("bench", partition, &json!("warm"), Duration::from_secs(30))
            .await;
        let killed = Instant::now();
        cluster.kill(leader);
        let mut first_ack = None;
        while killed.elapsed() < Duration::from_secs(60) {
            if cluster
                .produce("bench", partition, &json!(round))
                .await
                .is_ok()
            {
                first_ack = Some(killed.elapsed());
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let Some(elapsed) = first_ack else {
            println!(
                "round {round}: no acknowledged write within 60 s\n{}",
                cluster.logs_tail()
            );
            return;
        };
        println!(
            "round {round}: killed leader {leader} of bench/{partition}; first acknowledged write after {:.2} s",
            elapsed.as_secs_f64()
        );
        samples.push(elapsed);
        cluster.restart(leader);
        wait_until(
            Duration::from_secs(60),
            "the killed broker back in every ISR",
            || async {
                let Some(metadata) = cluster.metadata().await else {
                    return false;
                };
                metadata["topics"][0]["partitions"]
                    .as_array()
                    .is_some_and(|ps| {
                        ps.iter()
                            .all(|p| p["isr"].as_array().map(Vec::len) == Some(3))
                    })
            },
        )
        .await;
    }
    samples.sort();
    if let (Some(min), Some(max)) = (samples.first(), samples.last()) {
        let median = samples[samples.len() / 2];
        println!(
            "failover (kill -9 of a partition leader -> first acks=all write acknowledged), {} rounds: min {:.2} s, median {:.2} s, max {:.2} s; target < {:.1} s (session timeout + 2 s)",
            samples.len(),
            min.as_secs_f64(),
            median.as_secs_f64(),
            max.as_secs_f64(),
            (SESSION_TIMEOUT_MS as f64 / 1000.0) + 2.0
        );
    }
}
