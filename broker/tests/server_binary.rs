//! The `broker` binary: refuses bad configuration with a message, serves, turns away
//! forged peer requests, stops on SIGTERM, and refuses to start over partition data whose
//! metadata is gone.

mod cluster_support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use cluster_support::free_port;
use serde_json::json;

fn broker() -> Command {
    Command::new(env!("CARGO_BIN_EXE_broker"))
}

/// The config file and the client, replication and metadata ports (the binary takes its
/// addresses from node.toml).
fn write_config(dir: &std::path::Path) -> (std::path::PathBuf, u16, u16, u16) {
    let (client, replication, metadata) = (free_port(), free_port(), free_port());
    let text = format!(
        "broker_id = 1\ndata_dir = \"{}\"\n\n[listeners]\nclient = \"127.0.0.1:{client}\"\nreplication = \"127.0.0.1:{replication}\"\nmetadata = \"127.0.0.1:{metadata}\"\n\n[[brokers]]\nid = 1\nreplication = \"127.0.0.1:{replication}\"\nmetadata = \"127.0.0.1:{metadata}\"\n",
        dir.join("data").display()
    );
    let path = dir.join("node.toml");
    std::fs::write(&path, text).expect("write config");
    (path, client, replication, metadata)
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("broker-binary-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[test]
fn bad_configuration_and_unknown_bugs_are_refused_with_a_message() {
    let output = broker()
        .args(["--config", "/nonexistent/node.toml"])
        .output()
        .expect("run broker");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("/nonexistent/node.toml: cannot read"),
        "{stderr}"
    );

    let dir = temp_dir("bad");
    let (path, _, _, _) = write_config(&dir);
    let output = broker()
        .arg("--config")
        .arg(&path)
        .args(["--bug", "KAFKA-9999"])
        .output()
        .expect("run broker");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("unknown bug switch \"KAFKA-9999\""),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_serves_and_stops_on_sigterm() {
    let dir = temp_dir("serve");
    let (path, client, replication, metadata) = write_config(&dir);
    let mut child = broker()
        .arg("--config")
        .arg(&path)
        .args(["--bug", "KAFKA-7128"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn broker");
    let line = wait_listening(&mut child).await;
    assert!(line.starts_with("broker 1 listening"), "{line}");

    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    // A hostile Raft vote (a non-member, every number at its maximum) is turned away
    // before openraft sees it: once granted, it was saved and panicked the Raft thread.
    let response = http
        .post(format!("http://127.0.0.1:{metadata}/raft/vote"))
        .json(&json!({"vote": {"leader_id": {"term": u64::MAX, "node_id": 99}, "committed": false},
                      "last_log_id": {"leader_id": {"term": u64::MAX, "node_id": 99}, "index": u64::MAX}}))
        .send()
        .await
        .expect("vote");
    assert_eq!(response.status().as_u16(), 403);
    let reason = response.text().await.expect("reason");
    assert!(
        reason.contains("node 99 is not a broker of this cluster"),
        "{reason}"
    );
    // Its config does not enable failpoints: none can be armed, whatever the build.
    let listed: serde_json::Value = http
        .get(format!("http://127.0.0.1:{client}/v1/debug/failpoints"))
        .send()
        .await
        .expect("list failpoints")
        .json()
        .await
        .expect("json");
    let response = http
        .put(format!(
            "http://127.0.0.1:{client}/v1/debug/failpoints/before_isr_write"
        ))
        .json(&json!({"actions": "return"}))
        .send()
        .await
        .expect("arm");
    let refused = if listed["enabled"] == json!(true) {
        403
    } else {
        501
    };
    assert_eq!(response.status().as_u16(), refused);
    // A LeaderAndIsr for a partition the metadata quorum does not have creates nothing.
    let response = http
        .post(format!(
            "http://127.0.0.1:{replication}/v1/replication/leader-and-isr"
        ))
        .json(
            &json!({"topic": "ghost", "partition": 0, "controller_epoch": 4294967295u32, "leader": 1,
                      "leader_epoch": 1, "isr": [1], "version": 0, "replicas": [1]}),
        )
        .send()
        .await
        .expect("LeaderAndIsr");
    assert_eq!(response.status().as_u16(), 409);
    assert!(!dir.join("data/ghost-0").exists());

    // The node still works: a topic created through the admin API takes a write (once
    // the controller told the new leader).
    let created = create_topic(&http, client, "t").await;
    assert!(
        created.is_some_and(|status| (200..300).contains(&status)),
        "create topic: {created:?}"
    );
    let records = format!("http://127.0.0.1:{client}/v1/topics/t/partitions/0/records");
    let mut produced = None;
    for _ in 0..100 {
        let response = http
            .post(&records)
            .json(&json!({"value": "hello"}))
            .send()
            .await
            .expect("produce");
        if response.status().is_success() {
            produced = Some(response.status().as_u16());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        produced,
        Some(200),
        "the new topic took no write within 10 s"
    );
    let read: serde_json::Value = http
        .get(format!("{records}?offset=0"))
        .send()
        .await
        .expect("read")
        .json()
        .await
        .expect("json");
    assert_eq!(read["records"], json!([{"offset": 0, "value": "hello"}]));

    stop_with_sigterm(child).await;
    // A clean stop checkpoints the high watermark.
    let checkpoint = std::fs::read_to_string(dir.join("data/t-0/replication-offset-checkpoint"))
        .expect("HW checkpoint");
    assert_eq!(checkpoint, "0\n1\n");

    // Without its metadata folder, the same data folder is refused at start, by name.
    std::fs::remove_dir_all(dir.join("data/metadata")).expect("remove metadata/");
    let output = broker()
        .arg("--config")
        .arg(&path)
        .output()
        .expect("run broker");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("holds partition data (t-0) but no metadata/ folder"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_cannot_take_the_descriptors_the_logs_need() {
    // 256 descriptors, 300 idle connections to the client listener: with no cap the
    // broker ran out, its checkpoint writes failed with "Too many open files" and the
    // partition stayed offline after the connections were gone.
    let dir = temp_dir("descriptors");
    let (path, client, _, _) = write_config(&dir);
    let log = std::fs::File::create(dir.join("broker.log")).expect("log file");
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("ulimit -n 256 && exec \"$0\" --config \"$1\"")
        .arg(env!("CARGO_BIN_EXE_broker"))
        .arg(&path)
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("spawn broker");
    let stdout = child.stdout.take().expect("stdout");
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    });
    let line = tokio::time::timeout(Duration::from_secs(10), line)
        .await
        .expect("startup line in time")
        .expect("join")
        .expect("read stdout");
    assert!(line.starts_with("broker 1 listening"), "{line}");

    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let mut created = None;
    for _ in 0..100 {
        match http
            .post(format!("http://127.0.0.1:{client}/v1/topics"))
            .json(&json!({"topic": "f", "partitions": 1, "replication_factor": 1}))
            .send()
            .await
        {
            Ok(response) if response.status().as_u16() != 503 => {
                created = Some(response.status().as_u16());
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    assert!(
        created.is_some_and(|status| (200..300).contains(&status)),
        "create topic: {created:?}"
    );
    let records = format!("http://127.0.0.1:{client}/v1/topics/f/partitions/0/records");
    let produce = |count: usize, from: usize| {
        let (http, records) = (http.clone(), records.clone());
        async move {
            let mut acknowledged = 0;
            for attempt in 0..400 {
                let sent = http
                    .post(&records)
                    .json(&json!({"value": from + acknowledged}))
                    .send()
                    .await;
                if sent.is_ok_and(|r| r.status().is_success()) {
                    acknowledged += 1;
                    if acknowledged == count {
                        break;
                    }
                } else if attempt % 10 == 9 {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            acknowledged
        }
    };
    assert_eq!(produce(10, 0).await, 10);

    let idle: Vec<std::net::TcpStream> = (0..300)
        .filter_map(|_| std::net::TcpStream::connect(("127.0.0.1", client)).ok())
        .collect();
    assert!(idle.len() >= 64, "{} connections opened", idle.len());
    // Held long enough for the broker to accept them all (closing those over its cap)
    // and to checkpoint its logs meanwhile.
    tokio::time::sleep(Duration::from_secs(6)).await;
    drop(idle);

    assert_eq!(
        produce(10, 10).await,
        10,
        "the partition takes writes again"
    );
    let read: serde_json::Value = http
        .get(format!("{records}?offset=0"))
        .send()
        .await
        .expect("read")
        .json()
        .await
        .expect("json");
    assert_eq!(read["records"].as_array().map(Vec::len), Some(20), "{read}");

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let exit = tokio::task::spawn_blocking(move || child.wait());
    let exit = tokio::time::timeout(Duration::from_secs(10), exit)
        .await
        .expect("broker exits in time")
        .expect("join")
        .expect("wait");
    assert!(exit.success(), "{exit:?}");
    let log = std::fs::read_to_string(dir.join("broker.log")).expect("broker log");
    assert!(!log.contains("Too many open files"), "{log}");
    assert!(
        log.contains("the listener is at its cap"),
        "the cap was reached: {log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Creates `topic` (one partition, RF 1) through broker's client listener at `port`,
/// asking again while the new node has no controller yet (503): the last status.
async fn create_topic(http: &reqwest::Client, port: u16, topic: &str) -> Option<u16> {
    for _ in 0..100 {
        let response = http
            .post(format!("http://127.0.0.1:{port}/v1/topics"))
            .json(&json!({"topic": topic, "partitions": 1, "replication_factor": 1}))
            .send()
            .await
            .expect("create topic");
        if response.status().as_u16() != 503 {
            return Some(response.status().as_u16());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// SIGTERM, and a clean exit within 10 s.
async fn stop_with_sigterm(mut child: std::process::Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let exit = tokio::task::spawn_blocking(move || child.wait());
    let exit = tokio::time::timeout(Duration::from_secs(10), exit)
        .await
        .expect("broker exits in time")
        .expect("join")
        .expect("wait");
    assert!(exit.success(), "{exit:?}");
}

/// Waits for the binary's first line on stdout (`broker N listening ...`).
async fn wait_listening(child: &mut std::process::Child) -> String {
    let stdout = child.stdout.take().expect("stdout");
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    });
    tokio::time::timeout(Duration::from_secs(10), line)
        .await
        .expect("startup line in time")
        .expect("join")
        .expect("read stdout")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_cluster_secret_only_the_signing_broker_reaches_raft() {
    use peer_auth::{ClusterSecret, Sender, Signer};
    let dir = temp_dir("secret");
    let secret = ClusterSecret::draw().expect("secret");
    let (client, replication, metadata) = (free_port(), free_port(), free_port());
    // Broker 2 is configured (a member) but never started; broker 1 is the only voter.
    let text = format!(
        "broker_id = 1\ndata_dir = \"{}\"\ncluster_secret = \"{}\"\ncluster_id = \"c-one\"\n\n[listeners]\nclient = \"127.0.0.1:{client}\"\nreplication = \"127.0.0.1:{replication}\"\nmetadata = \"127.0.0.1:{metadata}\"\n\n[[brokers]]\nid = 1\nreplication = \"127.0.0.1:{replication}\"\nmetadata = \"127.0.0.1:{metadata}\"\n\n[[brokers]]\nid = 2\nreplication = \"127.0.0.1:{}\"\nmetadata = \"127.0.0.1:{}\"\n\n[metadata]\nvoters = [1]\n",
        dir.join("data").display(),
        secret.to_hex(),
        free_port(),
        free_port(),
    );
    let path = dir.join("node.toml");
    std::fs::write(&path, text).expect("write config");
    let start = || {
        broker()
            .arg("--config")
            .arg(&path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn broker")
    };
    let mut child = start();
    let line = wait_listening(&mut child).await;
    assert!(line.starts_with("broker 1 listening"), "{line}");

    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let vote_url = format!("http://127.0.0.1:{metadata}/raft/vote");
    let vote = |node_id: u32, term: u64| {
        json!({"vote": {"leader_id": {"term": term, "node_id": node_id}, "committed": false},
               "last_log_id": {"leader_id": {"term": term, "node_id": node_id}, "index": 0}})
    };
    let send = |signer: Option<Signer>, body: serde_json::Value| {
        let request = http.post(&vote_url).json(&body);
        let http = http.clone();
        async move {
            let response = match signer {
                Some(signer) => signer.send(&http, request).await.expect("send"),
                None => request.send().await.expect("send"),
            };
            let status = response.status().as_u16();
            (status, response.text().await.unwrap_or_default())
        }
    };
    let as_sender = |sender| Some(Signer::new(Some(secret.clone()), sender));

    // The bug report's vote, unsigned: refused at the door.
    let (status, reason) = send(None, vote(99, u64::MAX)).await;
    assert_eq!(status, 401, "{reason}");
    assert!(reason.contains("unauthenticated"), "{reason}");
    // Broker 2, with the secret, voting in broker 1's name.
    let (status, reason) = send(as_sender(Sender::Broker(2)), vote(1, 7)).await;
    assert_eq!(status, 403, "{reason}");
    assert!(
        reason.contains("speaks for node 1 but was signed by broker-2"),
        "{reason}"
    );
    // Broker 2 in its own name, but with a term no cluster reaches.
    let (status, reason) = send(as_sender(Sender::Broker(2)), vote(2, u64::MAX)).await;
    assert_eq!(status, 403, "{reason}");
    assert!(reason.contains("term"), "{reason}");
    // The harness has no business on the metadata listener.
    let (status, reason) = send(as_sender(Sender::Harness), vote(1, 7)).await;
    assert_eq!(status, 403, "{reason}");
    assert!(reason.contains("not_a_peer"), "{reason}");

    // The node still works, and comes back after a restart (nothing was saved).
    for round in 0..2 {
        if round == 1 {
            stop_with_sigterm(child).await;
            child = start();
            let line = wait_listening(&mut child).await;
            assert!(line.starts_with("broker 1 listening"), "{line}");
        }
        let created = create_topic(&http, client, &format!("t{round}")).await;
        assert!(
            created.is_some_and(|status| (200..300).contains(&status)),
            "round {round}: create topic: {created:?}"
        );
    }
    let _ = Command::new("kill")
        .args(["-KILL", &child.id().to_string()])
        .status();
    let _ = child.wait();

    // The same data folder under another cluster's id is refused at start, by name.
    let other = std::fs::read_to_string(&path)
        .expect("config")
        .replace("cluster_id = \"c-one\"", "cluster_id = \"c-two\"");
    std::fs::write(&path, other).expect("write config");
    let output = broker()
        .arg("--config")
        .arg(&path)
        .output()
        .expect("run broker");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("belongs to cluster \"c-one\"")
            && stderr.contains("cluster_id = \"c-two\""),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
