//! The `broker` binary: refuses bad configuration with a message, serves, and stops on
//! SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;

fn broker() -> Command {
    Command::new(env!("CARGO_BIN_EXE_broker"))
}

/// A port that was free a moment ago (the binary takes its addresses from node.toml).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

fn write_config(dir: &std::path::Path) -> (std::path::PathBuf, u16, u16) {
    let (client, replication, metadata) = (free_port(), free_port(), free_port());
    let text = format!(
        "broker_id = 1\ndata_dir = \"{}\"\n\n[listeners]\nclient = \"127.0.0.1:{client}\"\nreplication = \"127.0.0.1:{replication}\"\nmetadata = \"127.0.0.1:{metadata}\"\n\n[[brokers]]\nid = 1\nreplication = \"127.0.0.1:{replication}\"\nmetadata = \"127.0.0.1:{metadata}\"\n",
        dir.join("data").display()
    );
    let path = dir.join("node.toml");
    std::fs::write(&path, text).expect("write config");
    (path, client, replication)
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
    let (path, _, _) = write_config(&dir);
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
    let (path, client, replication) = write_config(&dir);
    let mut child = broker()
        .arg("--config")
        .arg(&path)
        .args(["--bug", "KAFKA-7128"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
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
    let response = http
        .post(format!(
            "http://127.0.0.1:{replication}/v1/replication/leader-and-isr"
        ))
        .json(
            &json!({"topic": "t", "partition": 0, "controller_epoch": 1, "leader": 1,
                      "leader_epoch": 0, "isr": [1], "version": 0, "replicas": [1]}),
        )
        .send()
        .await
        .expect("LeaderAndIsr");
    assert_eq!(response.status().as_u16(), 200);
    let records = format!("http://127.0.0.1:{client}/v1/topics/t/partitions/0/records");
    let response = http
        .post(&records)
        .json(&json!({"value": "hello"}))
        .send()
        .await
        .expect("produce");
    assert_eq!(response.status().as_u16(), 200);
    let read: serde_json::Value = http
        .get(format!("{records}?offset=0"))
        .send()
        .await
        .expect("read")
        .json()
        .await
        .expect("json");
    assert_eq!(read["records"], json!([{"offset": 0, "value": "hello"}]));

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
    // A clean stop checkpoints the high watermark.
    let checkpoint = std::fs::read_to_string(dir.join("data/t-0/replication-offset-checkpoint"))
        .expect("HW checkpoint");
    assert_eq!(checkpoint, "0\n1\n");
    let _ = std::fs::remove_dir_all(&dir);
}
