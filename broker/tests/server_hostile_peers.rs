//! A peer that forges replication requests: a LeaderAndIsr that the metadata quorum does
//! not back is refused, adopts nothing and creates nothing, and the real controller is
//! still heard afterwards.

mod server_support;

use broker::metadata::{layout, Command, Op};
use broker::replica::metadata::TopicPartition;
use serde_json::{json, Value};
use server_support::TestCluster;

async fn send(cluster: &TestCluster, to: u32, body: &Value) -> (u16, Value) {
    let url = format!(
        "http://{}/v1/replication/leader-and-isr",
        cluster.replication_addr(to)
    );
    let response = cluster
        .http
        .post(url)
        .json(body)
        .send()
        .await
        .expect("post");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn leader_and_isr(topic: &str, controller_epoch: u32, leader_epoch: u32) -> Value {
    json!({"topic": topic, "partition": 0, "controller_epoch": controller_epoch,
           "leader": 1, "leader_epoch": leader_epoch, "isr": [1], "version": 0,
           "replicas": [1]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_leader_and_isr_is_refused_and_the_controller_still_heard() {
    let cluster = TestCluster::start(3, "").await;
    // The quorum names controller epoch 1, as a real controller's election writes it.
    cluster
        .metadata
        .propose(Command::Op(Op::Create {
            path: layout::CONTROLLER_EPOCH.to_string(),
            data: layout::encode(&1u32),
            ephemeral_session: None,
        }))
        .await
        .expect("write the controller epoch");
    let tp = TopicPartition::new("real", 0);
    cluster.create_partition(&tp, &[1, 2, 3]).await;

    // The bug report's: an epoch from nowhere, for a partition nobody created; then the
    // same with a plausible epoch; then the epoch from nowhere on a real partition.
    for body in [
        leader_and_isr("ghost", u32::MAX, 1),
        leader_and_isr("ghost", 1, 1),
        leader_and_isr("real", u32::MAX, 0),
    ] {
        let (status, answer) = send(&cluster, 1, &body).await;
        assert_eq!(status, 409, "{body} -> {answer}");
        assert_eq!(answer["error"], json!("not_in_metadata"), "{answer}");
    }
    let data_dir = &cluster.configs[&1].data_dir;
    assert!(
        !data_dir.join("ghost-0").exists(),
        "no partition folder for a partition the quorum does not have"
    );

    // No epoch was adopted: the controller's next election reaches every replica (the
    // support asserts each answer is a success), and the new leader takes writes.
    cluster.elect(&tp, 2, &[1, 2, 3]).await;
    let (status, answer) = cluster
        .post_records(2, &tp, &json!({"value": "after"}).to_string())
        .await;
    assert_eq!(status, 200, "{answer}");
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_reads_are_bounded_in_bytes_and_say_when_they_were_cut() {
    let cluster = TestCluster::start(1, "").await;
    let tp = TopicPartition::new("large", 0);
    cluster.create_partition(&tp, &[1]).await;
    // Five values of 400,000 bytes (their JSON text, as stored).
    let big = "x".repeat(400_000 - 2);
    for _ in 0..5 {
        let (status, answer) = cluster
            .post_records(1, &tp, &json!({ "value": big }).to_string())
            .await;
        assert_eq!(status, 200, "{answer}");
    }
    let read = |query: &'static str| cluster.read(1, &tp, query);
    // The default: 1 MiB of values, so two records, and the reply says it was cut.
    let (status, answer) = read("offset=0").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["records"].as_array().map(Vec::len), Some(2));
    assert_eq!(answer["truncated"], json!(true));
    assert_eq!(answer["max_bytes"], json!(1 << 20));
    // A record larger than the limit still goes out, alone.
    let (_, answer) = read("offset=1&max_bytes=100").await;
    assert_eq!(answer["records"].as_array().map(Vec::len), Some(1));
    assert_eq!(answer["records"][0]["offset"], json!(1));
    assert_eq!(answer["truncated"], json!(true));
    // Room for all of them: not cut; a record limit is not a byte cut either.
    let (_, answer) = read("offset=0&max_bytes=4000000").await;
    assert_eq!(answer["records"].as_array().map(Vec::len), Some(5));
    assert_eq!(answer["truncated"], json!(false));
    let (_, answer) = read("offset=0&max=1&max_bytes=4000000").await;
    assert_eq!(answer["records"].as_array().map(Vec::len), Some(1));
    assert_eq!(answer["truncated"], json!(false));
    for query in ["offset=0&max_bytes=0", "offset=0&max_bytes=67108865"] {
        let (status, answer) = read(query).await;
        assert_eq!(status, 400, "{query}: {answer}");
        assert_eq!(answer["error"], json!("bad_request"));
    }
    cluster.stop().await;
}
