//! Bad input gets a 4xx with a clear message, and the broker keeps serving.

mod server_support;

use broker::replica::metadata::TopicPartition;
use serde_json::json;
use server_support::TestCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_a_4xx_with_a_clear_message_and_the_broker_keeps_serving() {
    // max_value_bytes = 64: "value over max_value_bytes" without megabyte bodies.
    let cluster = TestCluster::start(3, "min_insync_replicas = 2\nmax_value_bytes = 64").await;
    let tp = TopicPartition::new("bad", 0);
    cluster.create_partition(&tp, &[1, 2, 3]).await;
    let (status, body) = cluster
        .post_records(1, &tp, &json!({"value": "first"}).to_string())
        .await;
    assert_eq!((status, body), (200, json!({"offset": 0})));

    let produce_cases: Vec<(TopicPartition, String, u16, &str, &str)> = vec![
        (
            tp.clone(),
            "{\"value\": ".into(),
            400,
            "bad_request",
            "malformed JSON",
        ),
        (
            tp.clone(),
            "not json".into(),
            400,
            "bad_request",
            "malformed JSON",
        ),
        (
            tp.clone(),
            "{\"valeu\": 1}".into(),
            400,
            "bad_request",
            "unknown field",
        ),
        (
            tp.clone(),
            "{}".into(),
            400,
            "bad_request",
            "needs \"value\"",
        ),
        (
            tp.clone(),
            "{\"values\": []}".into(),
            400,
            "bad_request",
            "empty",
        ),
        (
            tp.clone(),
            "{\"value\": 1, \"values\": [2]}".into(),
            400,
            "bad_request",
            "not both",
        ),
        (
            tp.clone(),
            "{\"value\": 1, \"acks\": 2}".into(),
            400,
            "bad_request",
            "acks must be",
        ),
        (
            tp.clone(),
            "{\"value\": 1, \"timeout_ms\": -5}".into(),
            400,
            "bad_request",
            "timeout_ms",
        ),
        (
            tp.clone(),
            json!({"value": "x".repeat(100)}).to_string(),
            413,
            "value_too_large",
            "max_value_bytes is 64",
        ),
        (
            tp.clone(),
            json!({"values": ["ok", "y".repeat(70)]}).to_string(),
            413,
            "value_too_large",
            "value 1",
        ),
        (
            TopicPartition::new("nope", 0),
            json!({"value": 1}).to_string(),
            404,
            "unknown_topic_or_partition",
            "nope/0",
        ),
        (
            TopicPartition::new("bad", 7),
            json!({"value": 1}).to_string(),
            404,
            "unknown_topic_or_partition",
            "bad/7",
        ),
        (
            TopicPartition::new("b@d", 0),
            json!({"value": 1}).to_string(),
            400,
            "bad_request",
            "illegal character",
        ),
    ];
    for (target, body, status, code, message) in produce_cases {
        let (got, answer) = cluster.post_records(1, &target, &body).await;
        assert_eq!(got, status, "{body} -> {answer}");
        assert_eq!(answer["error"], json!(code), "{body} -> {answer}");
        let text = answer["message"].as_str().unwrap_or_default();
        assert!(
            text.contains(message),
            "{body} -> {text:?}, expected {message:?}"
        );
    }

    let base = cluster.records_url(1, &tp);
    let read_cases = [
        (
            format!("{base}?offset=-1"),
            400,
            "bad_request",
            "offset=\"-1\" is not an offset",
        ),
        (
            format!("{base}?offset=abc"),
            400,
            "bad_request",
            "is not an offset",
        ),
        (
            format!("{base}?offset=99999999999999999999999"),
            400,
            "bad_request",
            "is not an offset",
        ),
        (
            format!("{base}?offset=1000000"),
            416,
            "offset_out_of_range",
            "high watermark 1",
        ),
        (
            format!("{base}?offset=0&max=0"),
            400,
            "bad_request",
            "max must be",
        ),
        (
            format!("{base}?offset=0&max=-3"),
            400,
            "bad_request",
            "not a record count",
        ),
        (
            format!("{base}?offest=0"),
            400,
            "bad_request",
            "unknown query parameter",
        ),
        (
            format!("{base}?consistency=strong"),
            400,
            "bad_request",
            "consistency",
        ),
        (
            format!(
                "http://{}/v1/topics/bad/partitions/x/records",
                cluster.client_addr(1)
            ),
            400,
            "bad_request",
            "not a partition number",
        ),
        (
            format!(
                "http://{}/v1/topics/bad/partitions/-1/records",
                cluster.client_addr(1)
            ),
            400,
            "bad_request",
            "not a partition number",
        ),
        (
            format!(
                "http://{}/v1/topics/none/partitions/0/records",
                cluster.client_addr(1)
            ),
            404,
            "unknown_topic_or_partition",
            "none/0",
        ),
    ];
    for (url, status, code, message) in read_cases {
        let (got, answer) = cluster.get(&url).await;
        assert_eq!(got, status, "{url} -> {answer}");
        assert_eq!(answer["error"], json!(code), "{url} -> {answer}");
        let text = answer["message"].as_str().unwrap_or_default();
        assert!(
            text.contains(message),
            "{url} -> {text:?}, expected {message:?}"
        );
    }

    // The replication listener validates too.
    let url = format!(
        "http://{}/v1/replication/leader-and-isr",
        cluster.replication_addr(2)
    );
    for body in ["{", "{\"topic\": \"bad\"}", "[]"] {
        let response = cluster
            .http
            .post(&url)
            .body(body)
            .send()
            .await
            .expect("post");
        assert_eq!(response.status().as_u16(), 400, "{body}");
        let answer: serde_json::Value = response.json().await.expect("json");
        assert_eq!(answer["error"], json!("bad_request"));
    }
    let leader_and_isr = |epoch: u32, leader: u32, isr: Vec<u32>, replicas: Vec<u32>| {
        json!({"topic": "bad", "partition": 0, "controller_epoch": 1, "leader": leader,
               "leader_epoch": epoch, "isr": isr, "version": 0, "replicas": replicas})
    };
    let cases = [
        (
            leader_and_isr(0, 1, vec![1, 2, 3], vec![1, 2, 3]),
            409,
            "stale_leader_epoch",
        ),
        (
            leader_and_isr(5, 1, vec![1], vec![1, 3]),
            409,
            "not_assigned",
        ),
        (
            leader_and_isr(5, 1, vec![1, 9], vec![1, 2, 9]),
            400,
            "bad_request",
        ),
        (
            leader_and_isr(5, 2, vec![1], vec![1, 2]),
            400,
            "bad_request",
        ),
    ];
    for (body, status, code) in cases {
        let response = cluster
            .http
            .post(&url)
            .json(&body)
            .send()
            .await
            .expect("post");
        assert_eq!(response.status().as_u16(), status, "{body}");
        let answer: serde_json::Value = response.json().await.expect("json");
        assert_eq!(answer["error"], json!(code), "{body} -> {answer}");
    }
    let url = format!(
        "http://{}/v1/replication/fetch",
        cluster.replication_addr(1)
    );
    let response = cluster
        .http
        .post(&url)
        .json(&json!({"topic": "bad", "partition": 0, "replica_id": 2,
                      "fetch_offset": u64::MAX, "current_leader_epoch": 0, "max_records": 10}))
        .send()
        .await
        .expect("post");
    assert_eq!(response.status().as_u16(), 416);

    // Still serving, and nothing was written by the refused requests.
    let (status, body) = cluster
        .post_records(1, &tp, &json!({"value": "second"}).to_string())
        .await;
    assert_eq!((status, body), (200, json!({"offset": 1})));
    assert_eq!(
        cluster.committed_values(1, &tp).await,
        vec![json!("first"), json!("second")]
    );
    cluster.stop().await;
}
