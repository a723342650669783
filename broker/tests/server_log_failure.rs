//! A storage error is not forever (issue 18): on three real in-process brokers with their
//! control planes, the leader's log fails in its write path (`log_append@2`). Its broker
//! publishes the failure in its registration and the controller moves the leadership to
//! another replica of the ISR; acknowledged records stay readable and writes go on. While
//! the log cannot be reopened (`log_open@2`) the replica stays offline and out of the
//! ISR; once it can, the broker reopens it on its own and the replica rejoins the ISR.
//!
//! Needs `--features failpoints` (without it this file has no tests).
#![cfg(feature = "failpoints")]

mod server_support;

use std::time::Duration;

use broker::replica::metadata::TopicPartition;
use broker::server::failpoints;
use serde_json::json;
use server_support::{wait_until, TestCluster};

const WAIT: Duration = Duration::from_secs(30);

const SETTINGS: &str = "min_insync_replicas = 2\nreplica_lag_time_max_ms = 2000\nreplica_fetch_wait_max_ms = 200\n\n[metadata]\nsession_timeout_ms = 2000\n";

/// Disarms its points when dropped, so that a failed assertion leaves none armed.
struct Armed(Vec<&'static str>);

impl Armed {
    fn arm(&mut self, name: &'static str, actions: &str) {
        failpoints::arm(name, actions).expect("arm");
        self.0.push(name);
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        for name in &self.0 {
            failpoints::disarm(name);
        }
    }
}

/// One acks=all write to `broker`: its status and answer.
async fn produce(
    cluster: &TestCluster,
    broker: u32,
    tp: &TopicPartition,
    value: i64,
) -> (u16, serde_json::Value) {
    let body = json!({"value": value, "acks": "all", "timeout_ms": 2000}).to_string();
    cluster.post_records(broker, tp, &body).await
}

fn leader(cluster: &TestCluster, tp: &TopicPartition) -> Option<u32> {
    cluster.stored(tp).and_then(|s| s.state.leader)
}

/// Writes `value` through whichever broker the store names leader, retrying while
/// leadership settles.
async fn produce_to_leader(cluster: &TestCluster, tp: &TopicPartition, value: i64) {
    wait_until(WAIT, &format!("{value} acknowledged"), || async {
        match leader(cluster, tp) {
            Some(leader) => produce(cluster, leader, tp, value).await.0 == 200,
            None => false,
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_log_moves_leadership_and_comes_back() {
    let mut cluster = TestCluster::start(3, SETTINGS).await;
    cluster.start_control_plane(1);
    wait_until(WAIT, "broker 1 to be controller", || async {
        cluster.controller().map(|c| c.0) == Some(1)
    })
    .await;
    for id in 2..=3 {
        cluster.start_control_plane(id);
    }
    let tp = TopicPartition::new("lf", 0);
    let url = format!("http://{}/v1/topics", cluster.client_addr(1));
    wait_until(WAIT, "topic lf created", || async {
        let reply = cluster
            .http
            .post(&url)
            .json(&json!({"topic": "lf", "assignment": [[2, 3, 1]]}))
            .send()
            .await;
        matches!(reply, Ok(r) if r.status().is_success())
    })
    .await;
    let mut acknowledged = Vec::new();
    for value in 0..5 {
        produce_to_leader(&cluster, &tp, value).await;
        acknowledged.push(value);
    }
    assert_eq!(leader(&cluster, &tp), Some(2));
    let epoch_before = cluster.stored(&tp).expect("stored").state.leader_epoch;

    // 1. A transient failure: one append fails, the log reopens at once. The leadership
    //    still moves (the reopened replica has no role), and broker 2 comes back as a
    //    follower.
    let mut armed = Armed(Vec::new());
    armed.arm("log_append@2", "1*return");
    let (status, answer) = produce(&cluster, 2, &tp, 100).await;
    assert_eq!(status, 500, "the failed append is an error: {answer}");
    assert_eq!(answer["error"], json!("storage_error"), "{answer}");
    wait_until(WAIT, "leadership to move off broker 2", || async {
        leader(&cluster, &tp).is_some_and(|l| l != 2)
    })
    .await;
    let moved = cluster.stored(&tp).expect("stored").state;
    assert!(moved.leader_epoch > epoch_before, "{moved:?}");
    for value in 5..8 {
        produce_to_leader(&cluster, &tp, value).await;
        acknowledged.push(value);
    }
    wait_until(WAIT, "broker 2 back in the ISR", || async {
        cluster.stored_isr(&tp).contains(&2)
    })
    .await;

    // 2. A lasting failure: the log cannot be reopened. The partition is offline on
    //    broker 2, which leaves the ISR (or leads no more), while the others serve.
    produce_to_leader(&cluster, &tp, 8).await;
    acknowledged.push(8);
    let current = leader(&cluster, &tp).expect("a leader");
    if current != 2 {
        // Make broker 2 lead again, so that its failure has a leadership to move.
        let transfer = format!("http://{}/v1/admin/transfer-leader", cluster.client_addr(1));
        wait_until(WAIT, "broker 2 to lead again", || async {
            let _ = cluster
                .http
                .post(&transfer)
                .json(&json!({"topic": "lf", "partition": 0, "leader": 2}))
                .send()
                .await;
            leader(&cluster, &tp) == Some(2)
        })
        .await;
    }
    armed.arm("log_open@2", "return");
    armed.arm("log_append@2", "return");
    wait_until(WAIT, "a failed append on broker 2", || async {
        produce(&cluster, 2, &tp, 200).await.0 == 500
    })
    .await;
    wait_until(WAIT, "broker 2 out of leadership and ISR", || async {
        let state = cluster.stored(&tp).map(|s| s.state);
        state.is_some_and(|s| s.leader.is_some_and(|l| l != 2) && !s.isr.contains(&2))
    })
    .await;
    let (status, answer) = cluster.read(2, &tp, "offset=0").await;
    assert_ne!(status, 200, "an offline replica serves nothing: {answer}");
    for value in 9..12 {
        produce_to_leader(&cluster, &tp, value).await;
        acknowledged.push(value);
    }

    // 3. The disk is back: broker 2 reopens the log by itself and rejoins the ISR.
    failpoints::disarm("log_open@2");
    failpoints::disarm("log_append@2");
    wait_until(WAIT, "broker 2 back in the ISR after reopening", || async {
        cluster.stored_isr(&tp).contains(&2)
    })
    .await;

    // Nothing acknowledged was lost, on the leader and on broker 2.
    let leader = leader(&cluster, &tp).expect("a leader");
    let on_leader = cluster.committed_values(leader, &tp).await;
    for value in &acknowledged {
        assert!(
            on_leader.contains(&json!(value)),
            "{value} missing on leader {leader}: {on_leader:?}"
        );
    }
    wait_until(
        WAIT,
        "broker 2's replica to hold every acknowledged record",
        || async {
            cluster
                .replica(2, &tp)
                .await
                .is_some_and(|r| r.log_end_offset >= on_leader.len() as u64)
        },
    )
    .await;
    drop(armed);
    cluster.stop().await;
}
