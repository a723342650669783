//! Failpoints armed over HTTP. The `fail` registry is per process, so everything that
//! arms points lives in this one test (points are targeted with `@<broker>`).

mod server_support;

use serde_json::json;
use server_support::TestCluster;

#[cfg(not(feature = "failpoints"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_feature_failpoints_cannot_be_armed() {
    use serde_json::Value;

    let cluster = TestCluster::start(1, "").await;
    let url = format!(
        "http://{}/v1/debug/failpoints/before_isr_write",
        cluster.client_addr(1)
    );
    let response = cluster
        .http
        .put(&url)
        .body("return")
        .send()
        .await
        .expect("put");
    assert_eq!(response.status().as_u16(), 501);
    let answer: Value = response.json().await.expect("json");
    assert_eq!(answer["error"], json!("failpoints_disabled"));
    let (status, answer) = cluster
        .get(&format!(
            "http://{}/v1/debug/failpoints",
            cluster.client_addr(1)
        ))
        .await;
    assert_eq!((status, &answer["enabled"]), (200, &json!(false)));
    cluster.stop().await;
}

#[cfg(feature = "failpoints")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn armed_failpoints_stall_replication_isr_writes_and_truncation() {
    use std::time::Duration;

    use broker::replica::metadata::TopicPartition;
    use server_support::wait_until;

    let settings =
        "min_insync_replicas = 1\nreplica_lag_time_max_ms = 1000\nreplica_fetch_wait_max_ms = 200";
    let mut cluster = TestCluster::start(3, settings).await;
    let tp = TopicPartition::new("fp", 0);
    cluster.create_partition(&tp, &[1, 2, 3]).await;
    let points = format!("http://{}/v1/debug/failpoints", cluster.client_addr(1));
    let http = cluster.http.clone();
    let arm = |name: &str, actions: &str| {
        let request = http
            .put(format!("{points}/{name}"))
            .json(&json!({"actions": actions}));
        async move {
            let response = request.send().await.expect("arm");
            assert_eq!(
                response.status().as_u16(),
                200,
                "arm {:?}",
                response.text().await
            );
        }
    };
    let disarm = |name: &str| {
        let request = http.delete(format!("{points}/{name}"));
        async move {
            let response = request.send().await.expect("disarm");
            assert_eq!(response.status().as_u16(), 200);
        }
    };

    let (status, listing) = cluster.get(&points).await;
    assert_eq!(status, 200);
    assert_eq!(listing["enabled"], json!(true));
    for point in [
        "before_offsets_for_leader_epoch",
        "after_offsets_for_leader_epoch",
        "leader_fetch_response",
        "follower_fetch_response",
        "before_isr_write",
        "leader_offsets_for_leader_epoch",
        "before_list_offsets",
        "controller_before_state_write",
        "controller_leader_and_isr_send",
    ] {
        assert!(listing["points"]
            .as_array()
            .expect("points")
            .contains(&json!(point)));
    }
    let response = cluster
        .http
        .put(format!("{points}/no_such_point"))
        .body("return")
        .send()
        .await
        .expect("put");
    assert_eq!(response.status().as_u16(), 404);
    let response = cluster
        .http
        .put(format!("{points}/before_isr_write"))
        .body("explode(")
        .send()
        .await
        .expect("put");
    assert_eq!(response.status().as_u16(), 400);

    // 1. Fetch responses dropped on broker 3: it falls behind while 2 keeps up.
    arm("follower_fetch_response@3", "return").await;
    let (status, body) = cluster
        .post_records(1, &tp, &json!({"values": [0, 1, 2], "acks": 1}).to_string())
        .await;
    assert_eq!(status, 200, "{body}");
    wait_until(Duration::from_secs(5), "broker 2 at 3", || async {
        cluster
            .replica(2, &tp)
            .await
            .is_some_and(|r| r.log_end_offset == 3)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        cluster.replica(3, &tp).await.map(|r| r.log_end_offset),
        Some(0)
    );
    disarm("follower_fetch_response@3").await;
    wait_until(Duration::from_secs(5), "broker 3 caught up", || async {
        cluster
            .replica(3, &tp)
            .await
            .is_some_and(|r| r.log_end_offset == 3)
    })
    .await;

    // On a loaded machine step 1 can outlast the lag time, so the leader shrank broker 3
    // out and takes it back once caught up: wait for that before refusing ISR writes.
    wait_until(
        Duration::from_secs(5),
        "broker 3 back in the ISR",
        || async { cluster.stored_isr(&tp) == vec![1, 2, 3] },
    )
    .await;

    // 2. ISR writes refused: the leader cannot shrink the ISR until the point is off.
    arm("before_isr_write@1", "return").await;
    cluster.kill(3).await;
    let (status, body) = cluster
        .post_records(1, &tp, &json!({"value": 3, "acks": 1}).to_string())
        .await;
    assert_eq!(status, 200, "{body}");
    tokio::time::sleep(Duration::from_millis(1_800)).await;
    assert_eq!(cluster.stored_isr(&tp), vec![1, 2, 3]);
    disarm("before_isr_write@1").await;
    wait_until(Duration::from_secs(5), "the ISR to shrink", || async {
        cluster.stored_isr(&tp) == vec![1, 2]
    })
    .await;

    // 3. OffsetsForLeaderEpoch held back: the restarted follower cannot truncate, so it
    //    does not fetch, until the point is off.
    arm("before_offsets_for_leader_epoch@3", "return").await;
    cluster.restart(3).await;
    cluster.resend_leader_and_isr(&tp, 3).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        cluster.replica(3, &tp).await.map(|r| r.log_end_offset),
        Some(3)
    );
    disarm("before_offsets_for_leader_epoch@3").await;
    wait_until(
        Duration::from_secs(5),
        "broker 3 back in the ISR",
        || async { cluster.stored_isr(&tp).contains(&3) },
    )
    .await;

    // 4. Fetches answered with an error by the leader: followers stall.
    arm("leader_fetch_response@1", "return").await;
    let (status, body) = cluster
        .post_records(1, &tp, &json!({"value": 4, "acks": 1}).to_string())
        .await;
    assert_eq!(status, 200, "{body}");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        cluster.replica(2, &tp).await.map(|r| r.log_end_offset),
        Some(4)
    );
    disarm("leader_fetch_response@1").await;
    wait_until(Duration::from_secs(5), "broker 2 caught up", || async {
        cluster
            .replica(2, &tp)
            .await
            .is_some_and(|r| r.log_end_offset == 5)
    })
    .await;
    let (_, listing) = cluster.get(&points).await;
    assert_eq!(listing["armed"], json!({}));
    cluster.stop().await;
}
