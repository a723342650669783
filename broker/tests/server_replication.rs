//! Three in-process brokers on loopback, the test acting as controller: replication,
//! reads below the HW, ISR shrink and rejoin, truncation on a leadership move, restart
//! from the data directories.

mod server_support;

use std::time::Duration;

use broker::replica::metadata::TopicPartition;
use serde_json::{json, Value};
use server_support::{wait_until, TestCluster};

const SETTINGS: &str =
    "min_insync_replicas = 2\nreplica_lag_time_max_ms = 1000\nreplica_fetch_wait_max_ms = 200";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_all_records_replicate_and_read_back_below_the_hw() {
    let cluster = TestCluster::start(3, SETTINGS).await;
    let tp = TopicPartition::new("events", 0);
    cluster.create_partition(&tp, &[1, 2, 3]).await;

    for i in 0..5 {
        let (status, body) = cluster
            .post_records(
                1,
                &tp,
                &json!({"value": {"n": i}, "acks": "all"}).to_string(),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body, json!({"offset": i}));
    }
    let (status, body) = cluster
        .post_records(1, &tp, &json!({"values": ["a", "b", "c"]}).to_string())
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({"offsets": [5, 6, 7]}));

    let (status, body) = cluster.read(1, &tp, "offset=0").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["high_watermark"], json!(8));
    assert_eq!(body["log_start_offset"], json!(0));
    assert_eq!(body["leader_epoch"], json!(0));
    // The limit it used, so that a checker can tell a capped read from a withholding one.
    assert_eq!(body["max"], json!(1000));
    let (status, capped) = cluster.read(1, &tp, "offset=0&max=3").await;
    assert_eq!(status, 200, "{capped}");
    assert_eq!(
        (
            capped["max"].clone(),
            capped["records"].as_array().map(Vec::len)
        ),
        (json!(3), Some(3))
    );
    let values: Vec<Value> = body["records"]
        .as_array()
        .expect("records")
        .iter()
        .map(|r| r["value"].clone())
        .collect();
    assert_eq!(
        values,
        vec![
            json!({"n": 0}),
            json!({"n": 1}),
            json!({"n": 2}),
            json!({"n": 3}),
            json!({"n": 4}),
            json!("a"),
            json!("b"),
            json!("c")
        ]
    );
    let (status, body) = cluster
        .read(1, &tp, "offset=7&consistency=linearizable")
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["records"], json!([{"offset": 7, "value": "c"}]));
    let (status, body) = cluster.read(1, &tp, "offset=6&max=1").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["records"], json!([{"offset": 6, "value": "b"}]));

    // Every replica holds everything (acks=all), and followers learn the HW.
    for id in [2, 3] {
        wait_until(Duration::from_secs(5), "followers at the HW", || async {
            cluster
                .replica(id, &tp)
                .await
                .is_some_and(|r| r.log_end_offset == 8 && r.role == "follower")
        })
        .await;
        // A follower refuses reads and names the leader.
        let (status, body) = cluster.read(id, &tp, "offset=0").await;
        assert_eq!(status, 421, "{body}");
        assert_eq!(body["error"], json!("not_leader"));
        assert_eq!(body["leader"], json!(1));
        let (status, body) = cluster
            .post_records(id, &tp, &json!({"value": 1}).to_string())
            .await;
        assert_eq!(
            (status, &body["error"], &body["leader"]),
            (421, &json!("not_leader"), &json!(1))
        );
    }
    assert_eq!(cluster.stored_isr(&tp), vec![1, 2, 3]);
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_follower_leaves_the_isr_and_rejoins_after_restart() {
    let mut cluster = TestCluster::start(3, SETTINGS).await;
    let tp = TopicPartition::new("isr", 0);
    cluster.create_partition(&tp, &[1, 2, 3]).await;
    for i in 0..3 {
        let (status, body) = cluster
            .post_records(1, &tp, &json!({"value": i}).to_string())
            .await;
        assert_eq!(status, 200, "{body}");
    }

    cluster.kill(3).await;
    // A follower at the leader's LEO is in sync however long it is silent (Kafka's rule),
    // so the ISR shrinks only once there is something new to replicate: this acks=all
    // request waits until broker 3 has been dropped, then completes with 1 and 2.
    let (status, body) = cluster
        .post_records(1, &tp, &json!({"values": [3, 4]}).to_string())
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(cluster.stored_isr(&tp), vec![1, 2]);
    let leader = cluster.replica(1, &tp).await.expect("leader view");
    assert_eq!(leader.isr, vec![1, 2]);
    assert_eq!(leader.high_watermark, 5);

    cluster.restart(3).await;
    cluster.resend_leader_and_isr(&tp, 3).await;
    wait_until(
        Duration::from_secs(10),
        "broker 3 back in the ISR",
        || async { cluster.stored_isr(&tp).contains(&3) },
    )
    .await;
    wait_until(Duration::from_secs(5), "broker 3 caught up", || async {
        cluster
            .replica(3, &tp)
            .await
            .is_some_and(|r| r.log_end_offset == 5)
    })
    .await;

    // With two followers gone the leader refuses acks=all before appending (definite).
    cluster.kill(2).await;
    cluster.kill(3).await;
    let (status, body) = cluster
        .post_records(1, &tp, &json!({"value": 5, "acks": 1}).to_string())
        .await;
    assert_eq!(status, 200, "{body}");
    wait_until(
        Duration::from_secs(5),
        "the ISR to shrink to [1]",
        || async { cluster.stored_isr(&tp) == vec![1] },
    )
    .await;
    let (status, body) = cluster
        .post_records(1, &tp, &json!({"value": "refused"}).to_string())
        .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"], json!("not_enough_replicas"));
    let leader = cluster.replica(1, &tp).await.expect("leader view");
    assert_eq!(leader.log_end_offset, 6, "nothing appended");
    cluster.stop().await;
}

/// Broker 3 misses records that 1 and 2 hold above the HW; 1 dies and 3 (still in the
/// stored ISR) is elected: 2, then the restarted 1, must truncate those records, and
/// everything acknowledged with acks=all survives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leadership_move_truncates_the_followers_uncommitted_tail() {
    // A long lag time: the stored ISR must still hold 3 when 1 dies.
    let settings =
        "min_insync_replicas = 2\nreplica_lag_time_max_ms = 20000\nreplica_fetch_wait_max_ms = 200";
    let mut cluster = TestCluster::start(3, settings).await;
    let tp = TopicPartition::new("move", 0);
    cluster.create_partition(&tp, &[1, 2, 3]).await;
    let (status, body) = cluster
        .post_records(1, &tp, &json!({"values": [0, 1, 2, 3, 4]}).to_string())
        .await;
    assert_eq!(status, 200, "{body}");
    wait_until(Duration::from_secs(5), "broker 3 caught up", || async {
        cluster
            .replica(3, &tp)
            .await
            .is_some_and(|r| r.log_end_offset == 5)
    })
    .await;

    cluster.kill(3).await;
    let (status, body) = cluster
        .post_records(
            1,
            &tp,
            &json!({"values": ["x", "y", "z"], "acks": 1}).to_string(),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    wait_until(
        Duration::from_secs(5),
        "broker 2 has the acks=1 records",
        || async {
            cluster
                .replica(2, &tp)
                .await
                .is_some_and(|r| r.log_end_offset == 8)
        },
    )
    .await;
    let leader = cluster.replica(1, &tp).await.expect("leader view");
    assert_eq!(leader.high_watermark, 5, "3 holds the HW back");

    cluster.kill(1).await;
    cluster.restart(3).await;
    assert_eq!(cluster.stored_isr(&tp), vec![1, 2, 3]);
    cluster.elect(&tp, 3, &[2, 3]).await;
    wait_until(
        Duration::from_secs(5),
        "broker 2 truncated to 5",
        || async {
            cluster
                .replica(2, &tp)
                .await
                .is_some_and(|r| r.log_end_offset == 5 && r.leader == Some(3))
        },
    )
    .await;
    let (status, body) = cluster
        .post_records(3, &tp, &json!({"value": "after"}).to_string())
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({"offset": 5}));

    cluster.restart(1).await;
    cluster.resend_leader_and_isr(&tp, 1).await;
    wait_until(
        Duration::from_secs(10),
        "broker 1 truncated and rejoined",
        || async { cluster.stored_isr(&tp).contains(&1) },
    )
    .await;
    let old_leader = cluster.replica(1, &tp).await.expect("broker 1 view");
    assert_eq!(old_leader.log_end_offset, 6);
    assert_eq!(
        old_leader
            .epoch_cache
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect::<Vec<_>>(),
        vec![(0, 0), (1, 5)]
    );
    assert_eq!(
        cluster.committed_values(3, &tp).await,
        vec![
            json!(0),
            json!(1),
            json!(2),
            json!(3),
            json!(4),
            json!("after")
        ]
    );
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_from_the_data_directories_loses_nothing_acknowledged() {
    let mut cluster = TestCluster::start(3, SETTINGS).await;
    let tp = TopicPartition::new("durable", 0);
    cluster.create_partition(&tp, &[1, 2, 3]).await;
    let mut acked = Vec::new();
    for i in 0..10 {
        let (status, body) = cluster
            .post_records(1, &tp, &json!({"value": i}).to_string())
            .await;
        assert_eq!(status, 200, "{body}");
        acked.push(json!(i));
    }
    let batch: Vec<Value> = (10..30).map(|i| json!(i)).collect();
    let (status, body) = cluster
        .post_records(1, &tp, &json!({"values": batch}).to_string())
        .await;
    assert_eq!(status, 200, "{body}");
    acked.extend(batch);

    // The leader dies hard; the followers stop cleanly.
    cluster.kill(1).await;
    cluster.shutdown(2).await;
    cluster.shutdown(3).await;
    for id in [1, 2, 3] {
        cluster.restart(id).await;
    }
    // Brokers come back with their logs but no role until the controller speaks.
    let view = cluster.replica(1, &tp).await;
    assert!(view.is_none(), "no replica before LeaderAndIsr: {view:?}");
    cluster.elect(&tp, 2, &[1, 2, 3]).await;
    wait_until(
        Duration::from_secs(10),
        "the new leader's HW at 30",
        || async {
            cluster
                .replica(2, &tp)
                .await
                .is_some_and(|r| r.high_watermark == 30)
        },
    )
    .await;
    assert_eq!(cluster.committed_values(2, &tp).await, acked);
    let (status, body) = cluster
        .post_records(2, &tp, &json!({"value": "more"}).to_string())
        .await;
    assert_eq!((status, body), (200, json!({"offset": 30})));
    cluster.stop().await;
}

/// A leader deposed while cut off from the quorum still serves Kafka's default reads
/// (stale: it misses what the new leader acknowledged) but refuses linearizable ones,
/// whether or not it can reach the quorum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_serves_stale_default_reads_but_refuses_linearizable_ones() {
    let cluster = TestCluster::start(3, SETTINGS).await;
    let tp = TopicPartition::new("events", 0);
    cluster.create_partition(&tp, &[1, 2, 3]).await;
    for value in ["a", "b"] {
        let (status, body) = cluster
            .post_records(1, &tp, &json!({"value": value}).to_string())
            .await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = cluster
        .read(1, &tp, "offset=0&consistency=linearizable")
        .await;
    assert_eq!(
        status, 200,
        "a current leader serves linearizable reads: {body}"
    );

    // Broker 1 is cut off (from the quorum, and it is not told); 2 takes over and
    // acknowledges a write that 1 never sees.
    cluster.links[&1].cut();
    cluster.elect_telling(&tp, 2, &[2, 3], &[2, 3]).await;
    wait_until(Duration::from_secs(10), "2 accepts writes", || async {
        cluster
            .post_records(2, &tp, &json!({"value": "c"}).to_string())
            .await
            .0
            == 200
    })
    .await;

    let (status, body) = cluster.read(1, &tp, "offset=0").await;
    assert_eq!(
        status, 200,
        "the deposed leader still serves default reads: {body}"
    );
    let stale: Vec<Value> = body["records"]
        .as_array()
        .expect("records")
        .iter()
        .map(|r| r["value"].clone())
        .collect();
    assert_eq!(stale, vec![json!("a"), json!("b")], "stale: misses c");

    let (status, body) = cluster
        .read(1, &tp, "offset=0&consistency=linearizable")
        .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"], json!("metadata_unavailable"));

    // Reconnected to the quorum, it learns it is no longer leader and says who is.
    cluster.links[&1].heal();
    let (status, body) = cluster
        .read(1, &tp, "offset=0&consistency=linearizable")
        .await;
    assert_eq!(status, 421, "{body}");
    assert_eq!(body["error"], json!("not_leader"));
    assert_eq!(body["leader"], json!(2));
    let (status, body) = cluster
        .read(2, &tp, "offset=0&consistency=linearizable")
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["records"].as_array().map(Vec::len), Some(3));
    cluster.stop().await;
}
