//! An armed delay failpoint (`return(<ms>)`) delays only its own path: the task that
//! reached the point waits, the runtime's threads do not. The `fail` registry is per
//! process, so this file holds one test (points are targeted with `@<broker>`).
//!
//! The brokers run on the test's runtime of two worker threads. Broker 1 leads six
//! replicated partitions, each followed by broker 2, whose fetches are all held at the
//! leader's `leader_fetch_response` point at once; if a held fetch held a thread, both
//! workers would be taken most of the time and every request of the process would wait.
//! Needs `--features failpoints` (without it this file has no tests).
#![cfg(feature = "failpoints")]

mod server_support;

use std::time::{Duration, Instant};

use broker::replica::metadata::TopicPartition;
use serde_json::json;
use server_support::{wait_until, TestCluster};

/// The delay armed on the leader's fetch responses. With `replica_fetch_wait_max_ms =
/// 100` an idle fetch takes 100 + 700 ms, within the follower's 1100 ms request timeout.
const DELAY: Duration = Duration::from_millis(700);

/// Produces `count` single records with acks=all to broker 1, one after the other; the
/// latency of each.
async fn produce_latencies(
    cluster: &TestCluster,
    tp: &TopicPartition,
    count: usize,
) -> Vec<Duration> {
    let mut latencies = Vec::with_capacity(count);
    for i in 0..count {
        let body = json!({"value": format!("{}-{i}", tp.topic), "acks": "all"}).to_string();
        let began = Instant::now();
        let (status, answer) = cluster.post_records(1, tp, &body).await;
        latencies.push(began.elapsed());
        assert_eq!(status, 200, "produce to {tp:?}: {answer}");
    }
    latencies
}

fn median(latencies: &[Duration]) -> Duration {
    let mut sorted = latencies.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}

fn shown(latencies: &[Duration]) -> String {
    let ms: Vec<String> = latencies
        .iter()
        .map(|l| format!("{}", l.as_millis()))
        .collect();
    format!("[{}] ms", ms.join(", "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delay_failpoint_delays_its_own_path_only() {
    let settings =
        "min_insync_replicas = 1\nreplica_lag_time_max_ms = 10000\nreplica_fetch_wait_max_ms = 100";
    let cluster = TestCluster::start(2, settings).await;
    // The unreplicated partition: acks=all needs nothing but broker 1's own append.
    let fast = TopicPartition::new("fast", 0);
    cluster.create_partition(&fast, &[1]).await;
    // Replicated partitions: acks=all waits for broker 2 to fetch, through the point.
    let slow: Vec<TopicPartition> = (0..6).map(|p| TopicPartition::new("slow", p)).collect();
    for tp in &slow {
        cluster.create_partition(tp, &[1, 2]).await;
    }
    for tp in &slow {
        wait_until(
            Duration::from_secs(10),
            "broker 2 to follow every slow partition",
            || async {
                cluster
                    .replica(2, tp)
                    .await
                    .is_some_and(|r| r.role == "follower")
            },
        )
        .await;
    }

    let before_fast = produce_latencies(&cluster, &fast, 10).await;
    let before_slow = produce_latencies(&cluster, &slow[0], 10).await;
    eprintln!(
        "unarmed: fast partition {}, replicated partition {}",
        shown(&before_fast),
        shown(&before_slow)
    );

    let points = format!("http://{}/v1/debug/failpoints", cluster.client_addr(1));
    let response = cluster
        .http
        .put(format!("{points}/leader_fetch_response@1"))
        .json(&json!({"actions": "return(soon)"}))
        .send()
        .await
        .expect("put");
    assert_eq!(
        response.status().as_u16(),
        400,
        "a return argument that is no delay is refused"
    );
    let response = cluster
        .http
        .put(format!("{points}/leader_fetch_response@1"))
        .json(&json!({"actions": format!("return({})", DELAY.as_millis())}))
        .send()
        .await
        .expect("arm");
    assert_eq!(response.status().as_u16(), 200);
    // Let every partition's fetch reach the point: the six are held there together.
    tokio::time::sleep(DELAY * 2).await;

    let armed_fast = produce_latencies(&cluster, &fast, 20).await;
    let armed_slow = produce_latencies(&cluster, &slow[0], 5).await;
    eprintln!(
        "armed return({}) on leader_fetch_response@1: fast partition {} (median {:?}), \
         replicated partition {} (median {:?})",
        DELAY.as_millis(),
        shown(&armed_fast),
        median(&armed_fast),
        shown(&armed_slow),
        median(&armed_slow),
    );

    // The delayed path is delayed: an acks=all write waits for a fetch answered through
    // the point (at least one whole delay).
    let shortest_slow = armed_slow.iter().min().copied().unwrap_or_default();
    assert!(
        shortest_slow >= DELAY * 7 / 10,
        "replicated acks=all writes should wait for a delayed fetch: {}",
        shown(&armed_slow)
    );
    // The other partition on the same broker is not: its writes stay far below the delay.
    assert!(
        median(&armed_fast) < Duration::from_millis(100),
        "the unreplicated partition's writes slowed down: {}",
        shown(&armed_fast)
    );
    let longest_fast = armed_fast.iter().max().copied().unwrap_or_default();
    assert!(
        longest_fast < DELAY / 2,
        "an unreplicated write waited as long as a delayed fetch: {}",
        shown(&armed_fast)
    );
    assert!(
        median(&armed_slow) > median(&armed_fast) * 4,
        "fast {} slow {}",
        shown(&armed_fast),
        shown(&armed_slow)
    );

    let (status, listing) = cluster.get(&points).await;
    assert_eq!(status, 200);
    assert_eq!(
        listing["armed"]["leader_fetch_response@1"],
        json!(format!("return({})", DELAY.as_millis()))
    );
    let delayed = listing["delayed"]["leader_fetch_response@1"]
        .as_u64()
        .unwrap_or(0);
    assert!(
        delayed >= 6,
        "every partition's fetches went through the point: {listing}"
    );

    // Released: the replicated partition is fast again.
    let response = cluster
        .http
        .delete(format!("{points}/leader_fetch_response@1"))
        .send()
        .await
        .expect("disarm");
    assert_eq!(response.status().as_u16(), 200);
    tokio::time::sleep(DELAY * 2).await;
    let after_slow = produce_latencies(&cluster, &slow[0], 10).await;
    eprintln!("released: replicated partition {}", shown(&after_slow));
    assert!(
        median(&after_slow) < DELAY / 2,
        "still delayed after the release: {}",
        shown(&after_slow)
    );
    for tp in &slow {
        assert_eq!(cluster.stored_isr(tp), vec![1, 2], "{tp:?} kept its ISR");
    }
    cluster.stop().await;
}
