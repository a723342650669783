//! Raft RPC bodies from arbitrary bytes, sent over loopback HTTP to a real metadata-quorum
//! node (one voter, two configured learners that are not running) started once per fuzzing
//! process: the input's first byte picks the RPC (vote, append, snapshot chunk), the rest
//! is its body. The node may answer anything (a 400 for a body that does not decode, a 403
//! for one the admission refuses, openraft's answer otherwise), but its Raft core must
//! still be running after it: no body may make it panic or stop.

#![no_main]

use std::cell::OnceCell;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use broker::config::NodeConfig;
use broker::quorum::raft::{RaftQuorum, RaftRole};
use libfuzzer_sys::fuzz_target;

const PATHS: [&str; 3] = ["/raft/vote", "/raft/append", "/raft/snapshot"];

struct Node {
    _runtime: tokio::runtime::Runtime,
    quorum: RaftQuorum,
    address: SocketAddr,
    /// The other ports of the configuration, bound and never answered: learners that
    /// never come.
    _unanswered: Vec<tokio::net::TcpListener>,
}

const DIR_PREFIX: &str = "fuzz-raft-rpcs-";

/// The node's data directory, named after this process. libFuzzer ends the process
/// without running destructors, so the directories of earlier processes that are gone
/// are removed here.
fn data_dir() -> std::path::PathBuf {
    let temp = std::env::temp_dir();
    if let Ok(entries) = std::fs::read_dir(&temp) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(pid) = name.strip_prefix(DIR_PREFIX) else {
                continue;
            };
            let gone = pid
                .parse::<u32>()
                .is_ok_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists());
            if gone {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    temp.join(format!("{DIR_PREFIX}{}", std::process::id()))
}

fn start() -> Node {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let dir = data_dir();
    let _ = std::fs::remove_dir_all(&dir);
    let (quorum, address, held) = runtime.block_on(async {
        let mut ports = Vec::new();
        let mut held = Vec::new();
        for _ in 0..7 {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            ports.push(listener.local_addr().expect("an address"));
            held.push(listener);
        }
        let metadata = held.remove(2);
        let text = format!(
            "broker_id = 1\ndata_dir = \"{}\"\n\n[listeners]\nclient = \"{}\"\nreplication = \"{}\"\nmetadata = \"{}\"\n\n\
             [[brokers]]\nid = 1\nreplication = \"{}\"\nmetadata = \"{}\"\n\n\
             [[brokers]]\nid = 2\nreplication = \"{}\"\nmetadata = \"{}\"\n\n\
             [[brokers]]\nid = 3\nreplication = \"{}\"\nmetadata = \"{}\"\n\n\
             [metadata]\nvoters = [1]\nraft_heartbeat_ms = 50\nelection_timeout_min_ms = 300\nelection_timeout_max_ms = 600\n",
            dir.display(),
            ports[0], ports[1], ports[2],
            ports[1], ports[2],
            ports[3], ports[4],
            ports[5], ports[6],
        );
        let config = NodeConfig::parse("node.toml", &text).expect("a node config");
        let (quorum, _client) = RaftQuorum::start(&config, metadata)
            .await
            .expect("the node starts");
        (quorum, ports[2], held)
    });
    Node {
        _runtime: runtime,
        quorum,
        address,
        _unanswered: held,
    }
}

/// POSTs `body` to `path` and reads the answer (whatever it is) until the node closes.
fn post(address: SocketAddr, path: &str, body: &[u8]) {
    let Ok(mut stream) = TcpStream::connect_timeout(&address, Duration::from_secs(5)) else {
        panic!("the metadata listener refuses connections");
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: fuzz\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    if stream.write_all(head.as_bytes()).is_err() || stream.write_all(body).is_err() {
        return;
    }
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
}

thread_local! {
    static NODE: OnceCell<Node> = const { OnceCell::new() };
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    NODE.with(|cell| {
        let node = cell.get_or_init(start);
        post(node.address, PATHS[usize::from(which) % PATHS.len()], body);
        let status = node.quorum.status();
        assert!(status.fatal.is_none(), "the Raft core stopped: {status:?}");
        assert_ne!(status.role, RaftRole::Shutdown, "{status:?}");
    });
});
