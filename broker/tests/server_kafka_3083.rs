//! KAFKA-3083 end to end on four real in-process brokers (their replicas, control planes
//! and a shared in-memory quorum), as kafka-replication.md §5.4's deterministic schedule:
//! the controller's partition-state write is held at the `controller_before_state_write`
//! gate while it loses the quorum and another broker takes over. With the switch on, the
//! zombie's write lands, the leader's ISR disagrees with the store and its own ISR
//! updates fail, so acks=all produce stalls once a follower really dies. With it off,
//! the zombie is fenced, the leader shrinks the dead follower out and writes resume.
//!
//! Needs `--features failpoints` (without it this file has no tests).
#![cfg(feature = "failpoints")]

mod server_support;

use std::time::{Duration, Instant};

use broker::replica::metadata::TopicPartition;
use broker::server::failpoints;
use serde_json::json;
use server_support::{wait_until, TestCluster};

const WAIT: Duration = Duration::from_secs(30);
const LAG_MS: u64 = 2500;

fn settings(bug: bool) -> String {
    format!(
        "{}min_insync_replicas = 2\nreplica_lag_time_max_ms = {LAG_MS}\nreplica_fetch_wait_max_ms = 200\n\n[metadata]\nsession_timeout_ms = 1000\n",
        if bug { "bugs = [\"KAFKA-3083\"]\n" } else { "" }
    )
}

/// Holds the controller's write gate shut on broker 1; opened on drop.
struct Gate(String);

impl Drop for Gate {
    fn drop(&mut self) {
        failpoints::disarm(&self.0);
    }
}

/// One acks=all write to broker 3 (the leader) with a short timeout: whether it was
/// acknowledged.
async fn produce(cluster: &TestCluster, tp: &TopicPartition, value: i64) -> bool {
    let body = json!({"value": value, "acks": "all", "timeout_ms": 1000}).to_string();
    cluster.post_records(3, tp, &body).await.0 == 200
}

async fn leader_isr(cluster: &TestCluster, tp: &TopicPartition) -> Vec<u32> {
    cluster
        .replica(3, tp)
        .await
        .map(|r| r.isr)
        .unwrap_or_default()
}

async fn kafka_3083(bug: bool) {
    let mut cluster = TestCluster::start(4, &settings(bug)).await;
    // Broker 1 first, so that it is the controller.
    cluster.start_control_plane(1);
    wait_until(WAIT, "broker 1 to be controller", || async {
        cluster.controller().map(|c| c.0) == Some(1)
    })
    .await;
    for id in 2..=4 {
        cluster.start_control_plane(id);
    }
    let (_, epoch) = cluster.controller().expect("controller");
    let tp = TopicPartition::new("p", 0);
    let url = format!("http://{}/v1/topics", cluster.client_addr(1));
    wait_until(WAIT, "topic p created", || async {
        let reply = cluster
            .http
            .post(&url)
            .json(&json!({"topic": "p", "assignment": [[3, 4, 2]]}))
            .send()
            .await;
        matches!(reply, Ok(r) if r.status().is_success())
    })
    .await;
    wait_until(WAIT, "leader 3 to acknowledge a write", || async {
        produce(&cluster, &tp, 0).await
    })
    .await;
    let created = cluster.stored(&tp).expect("partition state");
    assert_eq!(created.state.isr, vec![3, 4, 2]);

    // 1. Broker 4 loses the quorum (it keeps replicating): its session expires, and
    //    controller 1 stops at the gate just before writing ISR {3,2}.
    let gate = Gate(format!("{}@1", failpoints::CONTROLLER_BEFORE_STATE_WRITE));
    failpoints::arm(&gate.0, "pause").expect("arm the gate");
    let before = failpoints::hit_count(&gate.0);
    cluster.links[&4].cut();
    wait_until(WAIT, "controller 1 at the gate", || async {
        failpoints::hit_count(&gate.0) > before
    })
    .await;

    // 2. Controller 1 loses the quorum past its session: another broker takes over.
    cluster.links[&1].cut();
    wait_until(WAIT, "a new controller", || async {
        cluster
            .controller()
            .is_some_and(|(id, e)| id != 1 && e == epoch + 1)
    })
    .await;

    // ... and has told the leader (its failover LeaderAndIsr carries the new epoch).
    wait_until(
        WAIT,
        "the leader to hear from the new controller",
        || async {
            cluster
                .replica(3, &tp)
                .await
                .is_some_and(|r| r.controller_epoch == epoch + 1)
        },
    )
    .await;

    // 3. Broker 1 is back and its queued write goes past the gate.
    cluster.links[&1].heal();
    drop(gate);
    if bug {
        let written = wait_for_store_isr(&cluster, &tp, &[3, 2]).await;
        assert_eq!(written.state.controller_epoch, epoch, "the zombie's epoch");
        assert_eq!(written.state.leader_epoch, created.state.leader_epoch + 1);
        assert_eq!(
            leader_isr(&cluster, &tp).await,
            vec![3, 4, 2],
            "the leader refused the zombie's LeaderAndIsr and keeps its ISR"
        );
    } else {
        // Fenced: the store keeps what the leader knows.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            cluster.stored(&tp).map(|s| s.state.isr),
            Some(vec![3, 4, 2])
        );
    }

    // 4. Broker 4 really dies.
    cluster.kill(4).await;

    // 5. acks=all writes to the leader, for several lag times.
    let start = Instant::now();
    let mut acknowledged = 0;
    let mut first_ack = None;
    let mut value = 1;
    while start.elapsed() < Duration::from_millis(4 * LAG_MS) {
        if produce(&cluster, &tp, value).await {
            acknowledged += 1;
            first_ack.get_or_insert(start.elapsed());
        }
        value += 1;
    }
    if bug {
        assert_eq!(
            acknowledged, 0,
            "the HW is frozen: the leader cannot shrink the dead 4"
        );
        assert_eq!(leader_isr(&cluster, &tp).await, vec![3, 4, 2]);
        assert_eq!(
            cluster.stored(&tp).map(|s| s.state.isr),
            Some(vec![3, 2]),
            "the store and the leader disagree"
        );
    } else {
        assert!(
            acknowledged > 0,
            "writes resume once the leader shrinks 4 out"
        );
        println!("writes resumed {first_ack:?} after broker 4 was killed");
        assert_eq!(leader_isr(&cluster, &tp).await, vec![3, 2]);
        assert_eq!(
            cluster.stored(&tp).map(|s| s.state.isr),
            Some(vec![3, 2]),
            "the store and the leader agree"
        );
    }
    cluster.stop().await;
}

async fn wait_for_store_isr(
    cluster: &TestCluster,
    tp: &TopicPartition,
    isr: &[u32],
) -> broker::replica::metadata::VersionedState {
    wait_until(WAIT, "the store's ISR", || async {
        cluster.stored(tp).is_some_and(|s| s.state.isr == isr)
    })
    .await;
    cluster.stored(tp).expect("partition state")
}

// The two modes share the process-wide failpoint registry: run them one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_3083_on_the_leader_and_the_store_disagree_and_produce_stalls() {
    let _serial = SERIAL.lock().await;
    kafka_3083(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_3083_off_the_zombie_is_fenced_and_writes_resume() {
    let _serial = SERIAL.lock().await;
    kafka_3083(false).await;
}
