//! Whole clusters of real `broker` processes that form by themselves from their
//! configuration files (metadata quorum on Raft, controller, topics), under kill -9:
//! of a partition leader, of the controller and of the metadata-quorum leader (apart and
//! together), and of every node at once.

mod cluster_support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cluster_support::{wait_until, BrokerId, ProcessCluster, FAST_SETTINGS};
use serde_json::{json, Value};

const READY: Duration = Duration::from_secs(60);

/// Writes consecutive integers to one partition until stopped, one acks=all write at a
/// time, and returns the values that were acknowledged.
fn spawn_writer(
    cluster: Arc<tokio::sync::RwLock<ProcessCluster>>,
    topic: &'static str,
    partition: u32,
    stop: Arc<AtomicBool>,
    first: u64,
) -> tokio::task::JoinHandle<Vec<u64>> {
    tokio::spawn(async move {
        let mut acked = Vec::new();
        let mut next = first;
        while !stop.load(Ordering::SeqCst) {
            let result = cluster
                .read()
                .await
                .produce(topic, partition, &json!(next))
                .await;
            if result.is_ok() {
                acked.push(next);
            } else {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            next += 1;
        }
        acked
    })
}

fn as_numbers(values: &[Value]) -> BTreeSet<u64> {
    values.iter().filter_map(Value::as_u64).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_partition_leader_is_replaced_and_no_acknowledged_write_is_lost() {
    // Voters 1-3 (the default: the first three), broker 4 a learner of the quorum.
    let cluster = ProcessCluster::start(4, FAST_SETTINGS, &[]);
    // Every broker registered before the topic is created, so that its replicas are
    // placed over all four (the learner registers on its own schedule, possibly last).
    cluster.wait_registered(READY).await;
    cluster.create_topic("events", 4, 3).await;
    cluster.wait_serving("events", 4, READY).await;

    // A partition whose leader is neither the controller nor the quorum leader, so that
    // only the data plane fails over (when there is one).
    let (controller, _) = cluster.controller().await.expect("controller");
    let meta_leader = cluster.metadata_leader().await;
    let mut partition = 0;
    for p in 0..4 {
        let leader = cluster.leader("events", p).await;
        if leader != Some(controller) && leader != meta_leader {
            partition = p;
            break;
        }
    }
    let old_leader = cluster.leader("events", partition).await.expect("leader");

    let cluster = Arc::new(tokio::sync::RwLock::new(cluster));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = spawn_writer(cluster.clone(), "events", partition, stop.clone(), 0);
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster.write().await.kill(old_leader);
    let waited = {
        let cluster = cluster.read().await;
        wait_until(Duration::from_secs(30), "a new leader", || async {
            cluster
                .leader("events", partition)
                .await
                .is_some_and(|l| l != old_leader)
        })
        .await;
        cluster
            .produce_until_acked("events", partition, &json!(-1), Duration::from_secs(30))
            .await
    };
    println!("after kill -9 of leader {old_leader}: a new leader acknowledged a write {waited:?} after it was elected");
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::SeqCst);
    let acked = writer.await.expect("writer");
    assert!(
        acked.len() > 5,
        "the writer got few acknowledgements: {acked:?}"
    );
    let cluster = cluster.read().await;
    cluster.wait_caught_up("events", 4, READY).await;
    let committed = as_numbers(&cluster.committed_values("events", partition).await);
    let lost: Vec<u64> = acked
        .iter()
        .filter(|v| !committed.contains(v))
        .copied()
        .collect();
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
}

/// The controller and the metadata-quorum leader, killed apart and then together; each
/// time a controller with a higher epoch takes over and every partition serves writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_recovers_from_losing_its_controller_and_its_quorum_leader() {
    // Five voters, so that any two may die and a quorum remains.
    let settings = FAST_SETTINGS.replace("min_insync_replicas = 2", "min_insync_replicas = 1")
        + "voters = [1, 2, 3, 4, 5]\n";
    let mut cluster = ProcessCluster::start(5, &settings, &[]);
    cluster.create_topic("t", 5, 3).await;
    cluster.wait_serving("t", 5, READY).await;

    async fn recovered(cluster: &ProcessCluster, after_epoch: u64, what: &str) -> u64 {
        wait_until(READY, what, || async {
            cluster
                .controller()
                .await
                .is_some_and(|(id, epoch)| epoch > after_epoch && cluster.is_up(id))
        })
        .await;
        cluster.wait_serving("t", 5, READY).await;
        for p in 0..5 {
            cluster
                .produce_until_acked("t", p, &json!(what), Duration::from_secs(30))
                .await;
        }
        cluster.controller().await.expect("controller").1
    }

    // Each broker's own view of its control plane: only the controller the metadata
    // names acts as one, with the metadata's epoch.
    async fn acting(cluster: &ProcessCluster, id: BrokerId) -> Option<u64> {
        let (status, answer) = cluster.get(id, "/v1/debug/controller").await?;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["broker_id"], json!(id), "{answer}");
        answer["controller_epoch"].as_u64()
    }
    async fn assert_only_controller_acts(cluster: &ProcessCluster) {
        let (controller, epoch) = cluster.controller().await.expect("controller");
        for id in 1..=5 {
            let expected = (id == controller).then_some(epoch);
            assert_eq!(acting(cluster, id).await, expected, "broker {id}");
        }
    }

    // Apart: the controller...
    assert_only_controller_acts(&cluster).await;
    let (controller, epoch) = cluster.controller().await.expect("controller");
    cluster.kill(controller);
    let epoch = recovered(&cluster, epoch, "after killing the controller").await;
    cluster.restart(controller);
    cluster.wait_full_isr("t", 5, READY).await;
    assert_only_controller_acts(&cluster).await;
    // ... then the quorum leader (the controller's epoch moves only if it was also
    // controller, so wait for the quorum instead).
    let meta_leader = cluster.metadata_leader().await.expect("quorum leader");
    cluster.kill(meta_leader);
    wait_until(READY, "a new quorum leader", || async {
        cluster
            .metadata_leader()
            .await
            .is_some_and(|l| l != meta_leader && cluster.is_up(l))
    })
    .await;
    cluster.wait_serving("t", 5, READY).await;
    for p in 0..5 {
        cluster
            .produce_until_acked(
                "t",
                p,
                &json!("after killing the quorum leader"),
                Duration::from_secs(30),
            )
            .await;
    }
    cluster.restart(meta_leader);
    cluster.wait_full_isr("t", 5, READY).await;

    // Together (one kill if one broker holds both roles).
    let (controller, epoch2) = cluster.controller().await.expect("controller");
    let meta_leader = cluster.metadata_leader().await.expect("quorum leader");
    assert!(epoch2 >= epoch);
    let victims: BTreeSet<BrokerId> = [controller, meta_leader].into_iter().collect();
    for &victim in &victims {
        cluster.kill(victim);
    }
    recovered(
        &cluster,
        epoch2,
        "after killing the controller and the quorum leader",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_kill_9_of_every_node_all_metadata_and_data_are_back() {
    let mut cluster = ProcessCluster::start(3, FAST_SETTINGS, &[]);
    cluster.create_topic("kept", 2, 3).await;
    cluster.wait_serving("kept", 2, READY).await;
    let mut acked: [Vec<u64>; 2] = [Vec::new(), Vec::new()];
    for i in 0..40u64 {
        let p = (i % 2) as u32;
        cluster
            .produce_until_acked("kept", p, &json!(i), Duration::from_secs(30))
            .await;
        acked[p as usize].push(i);
    }
    let before = cluster.metadata().await.expect("metadata");
    for id in cluster.ids() {
        cluster.kill(id);
    }
    for id in cluster.ids() {
        cluster.restart(id);
    }
    cluster.wait_serving("kept", 2, READY).await;
    cluster.wait_caught_up("kept", 2, READY).await;
    let after = cluster.metadata().await.expect("metadata");
    let replicas = |m: &Value| {
        m["topics"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| {
                (
                    t["topic"].clone(),
                    t["partitions"]
                        .as_array()
                        .map(|ps| ps.iter().map(|p| p["replicas"].clone()).collect::<Vec<_>>()),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        replicas(&after),
        replicas(&before),
        "topics and assignments survive"
    );
    for p in 0..2u32 {
        let committed = as_numbers(&cluster.committed_values("kept", p).await);
        let lost: Vec<u64> = acked[p as usize]
            .iter()
            .filter(|v| !committed.contains(v))
            .copied()
            .collect();
        assert!(
            lost.is_empty(),
            "partition {p} lost acknowledged writes {lost:?}"
        );
    }
}
