//! `replica_fetch_max_records` bounds what one follower fetch carries: a follower that is
//! 30 records behind with a limit of 3 catches up in at least ten rounds, never more than
//! three records at a time. The follower's fetch responses are delayed (a `return(<ms>)`
//! failpoint on its side), so each round's append is seen on its own by the test
//! sampling the follower's log end. The `fail` registry is per process: this file holds
//! one test. Needs `--features failpoints` (without it this file has no tests).
#![cfg(feature = "failpoints")]

mod server_support;

use std::time::{Duration, Instant};

use broker::replica::metadata::TopicPartition;
use serde_json::json;
use server_support::{wait_until, TestCluster};

const LIMIT: u64 = 3;
const RECORDS: u64 = 30;
/// Each fetch response waits this long at the follower before it is applied, so that
/// two appends are far apart compared with the test's sampling.
const DELAY_MS: u64 = 250;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_fetch_carries_at_most_replica_fetch_max_records() {
    let settings = format!(
        "min_insync_replicas = 1\nreplica_lag_time_max_ms = 10000\n\
         replica_fetch_wait_max_ms = 100\nreplica_fetch_max_records = {LIMIT}"
    );
    let cluster = TestCluster::start(2, &settings).await;
    let tp = TopicPartition::new("events", 0);
    cluster.create_partition(&tp, &[1, 2]).await;
    wait_until(Duration::from_secs(10), "broker 2 to follow", || async {
        cluster
            .replica(2, &tp)
            .await
            .is_some_and(|r| r.role == "follower")
    })
    .await;

    let point = format!(
        "http://{}/v1/debug/failpoints/follower_fetch_response@2",
        cluster.client_addr(2)
    );
    let response = cluster
        .http
        .put(&point)
        .json(&json!({"actions": format!("return({DELAY_MS})")}))
        .send()
        .await
        .expect("arm");
    assert_eq!(response.status().as_u16(), 200);

    // One produce of 30 records, acknowledged by the leader alone: the follower is then
    // 30 records behind at once.
    let values: Vec<u64> = (0..RECORDS).collect();
    let (status, body) = cluster
        .post_records(1, &tp, &json!({"values": values, "acks": "1"}).to_string())
        .await;
    assert_eq!(status, 200, "{body}");

    // The follower's log end, sampled far more often than it can change.
    let mut seen = vec![0u64];
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.last() != Some(&RECORDS) {
        assert!(
            Instant::now() < deadline,
            "broker 2 did not catch up: log ends seen {seen:?}"
        );
        if let Some(view) = cluster.replica(2, &tp).await {
            if seen.last() != Some(&view.log_end_offset) {
                seen.push(view.log_end_offset);
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let steps: Vec<u64> = seen.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        steps.iter().all(|&step| step <= LIMIT),
        "a fetch carried more than {LIMIT} records: log ends seen {seen:?}"
    );
    assert!(
        steps.len() as u64 >= RECORDS / LIMIT,
        "fewer rounds than the limit allows: log ends seen {seen:?}"
    );
    let _ = cluster.http.delete(&point).send().await;
    cluster.stop().await;
}
