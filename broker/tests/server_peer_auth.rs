//! Brokers of a cluster with a secret: they replicate to each other with signed requests,
//! and their replication listeners and failpoint endpoints turn away whoever does not
//! hold the secret (a forged LeaderAndIsr or fetch), a signer that is not one of the
//! cluster's brokers, and a request altered after it was signed. The client listener
//! serves no peer endpoint at all.

mod server_support;

use std::time::Duration;

use broker::replica::metadata::TopicPartition;
use peer_auth::{ClusterSecret, Sender, Signer};
use serde_json::{json, Value};
use server_support::{wait_until, TestCluster};

const SECRET: &str = "9f3a61c2e4b5d7f8091a2b3c4d5e6f708192a3b4c5d6e7f8";

fn settings() -> String {
    format!(
        "min_insync_replicas = 2\nreplica_fetch_wait_max_ms = 200\ncluster_secret = \"{SECRET}\""
    )
}

fn signer(secret: &str, sender: Sender) -> Signer {
    Signer::new(
        Some(ClusterSecret::from_hex(secret).expect("secret")),
        sender,
    )
}

/// Sends `request`, signed by `signer` if one is given: (status, JSON answer).
async fn send(
    cluster: &TestCluster,
    signer: Option<&Signer>,
    request: reqwest::RequestBuilder,
) -> (u16, Value) {
    let response = match signer {
        Some(signer) => signer.send(&cluster.http, request).await.expect("send"),
        None => request.send().await.expect("send"),
    };
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn forged_leader_and_isr() -> Value {
    json!({"topic": "ghost", "partition": 0, "controller_epoch": u32::MAX, "leader": 1,
           "leader_epoch": 1, "isr": [1], "version": 0, "replicas": [1]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_with_the_secret_replicate_and_nobody_else_is_heard() {
    let cluster = TestCluster::start(2, &settings()).await;
    let tp = TopicPartition::new("signed", 0);
    // The test, as controller, signs its LeaderAndIsr as broker 1 (the support asserts
    // each is accepted).
    cluster.create_partition(&tp, &[1, 2]).await;
    // acks=all with min ISR 2 is acknowledged only once broker 2's signed fetches reached
    // the leader.
    for i in 0..3 {
        let (status, body) = cluster
            .post_records(1, &tp, &json!({"value": i, "acks": "all"}).to_string())
            .await;
        assert_eq!(status, 200, "{body}");
    }
    wait_until(
        Duration::from_secs(5),
        "broker 2 holds every record",
        || async {
            cluster
                .replica(2, &tp)
                .await
                .is_some_and(|r| r.log_end_offset == 3)
        },
    )
    .await;

    let leader_and_isr = format!(
        "http://{}/v1/replication/leader-and-isr",
        cluster.replication_addr(1)
    );
    let fetch = format!(
        "http://{}/v1/replication/fetch",
        cluster.replication_addr(1)
    );
    let fetch_body = json!({"topic": "signed", "partition": 0, "replica_id": 2,
                            "fetch_offset": 0, "current_leader_epoch": 0, "max_records": 10});
    let post = |url: &str, body: &Value| cluster.http.post(url).json(body);

    // No signature at all: the bug report's forged LeaderAndIsr, and a fetch.
    for (url, body) in [
        (&leader_and_isr, forged_leader_and_isr()),
        (&fetch, fetch_body.clone()),
    ] {
        let (status, answer) = send(&cluster, None, post(url, &body)).await;
        assert_eq!(status, 401, "{url}: {answer}");
        assert_eq!(answer["error"], json!("unauthenticated"), "{answer}");
    }
    // Signed with another cluster's secret.
    let stranger = signer(&"ab".repeat(24), Sender::Broker(1));
    let (status, answer) = send(
        &cluster,
        Some(&stranger),
        post(&leader_and_isr, &forged_leader_and_isr()),
    )
    .await;
    assert_eq!(
        (status, answer["error"].clone()),
        (401, json!("unauthenticated")),
        "{answer}"
    );
    // Signed with the secret, but by a broker id the cluster does not have, or by the
    // harness (which has no business on a peer listener).
    for sender in [Sender::Broker(99), Sender::Harness] {
        let (status, answer) = send(
            &cluster,
            Some(&signer(SECRET, sender)),
            post(&fetch, &fetch_body),
        )
        .await;
        assert_eq!(
            (status, answer["error"].clone()),
            (403, json!("not_a_peer")),
            "{sender}: {answer}"
        );
    }
    // Signed properly, then altered on the way (another body under the same headers).
    let mut request = post(&leader_and_isr, &forged_leader_and_isr())
        .build()
        .expect("request");
    signer(SECRET, Sender::Broker(2))
        .sign(&mut request)
        .expect("sign");
    *request.body_mut() = Some(
        json!({"topic": "ghost", "partition": 0, "controller_epoch": 1, "leader": 1,
               "leader_epoch": 1, "isr": [1], "version": 0, "replicas": [1]})
        .to_string()
        .into(),
    );
    let response = cluster.http.execute(request).await.expect("send");
    assert_eq!(response.status().as_u16(), 401);
    assert!(
        !cluster.configs[&1].data_dir.join("ghost-0").exists(),
        "nothing refused at the door created a partition"
    );

    // The client listener has no peer endpoint to reach.
    let on_client = format!("http://{}/v1/replication/fetch", cluster.client_addr(1));
    let (status, _) = send(
        &cluster,
        Some(&signer(SECRET, Sender::Broker(2))),
        post(&on_client, &fetch_body),
    )
    .await;
    assert_eq!(status, 404);

    // Failpoints: listed to anyone, armed only with the secret (then as the build allows).
    let points = format!("http://{}/v1/debug/failpoints", cluster.client_addr(1));
    let (status, _) = send(&cluster, None, cluster.http.get(&points)).await;
    assert_eq!(status, 200);
    let arm = |c: &TestCluster| {
        c.http
            .put(format!("{points}/before_isr_write"))
            .json(&json!({"actions": "return"}))
    };
    let (status, answer) = send(&cluster, None, arm(&cluster)).await;
    assert_eq!(
        (status, answer["error"].clone()),
        (401, json!("unauthenticated")),
        "{answer}"
    );
    let harness = signer(SECRET, Sender::Harness);
    let (status, answer) = send(&cluster, Some(&harness), arm(&cluster)).await;
    let armed = if cfg!(feature = "failpoints") {
        200
    } else {
        501
    };
    assert_eq!(status, armed, "{answer}");
    let disarm = cluster.http.delete(format!("{points}/before_isr_write"));
    let (status, answer) = send(&cluster, Some(&harness), disarm).await;
    assert_eq!(status, armed, "{answer}");

    // Every acknowledged record is still there, from either replica's view.
    let values: Vec<Value> = cluster.committed_values(1, &tp).await;
    assert_eq!(values, vec![json!(0), json!(1), json!(2)]);
    cluster.stop().await;
}
