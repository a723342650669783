//! The netns backend on this machine: namespaces, daemons, cuts and uncuts, signals,
//! teardown on every path, and `harness clean` after a SIGKILLed run. Needs root (CI runs
//! as root) and, for the `needs_python3__` tests, `python3`, whose small servers stand in
//! for brokers; a missing one fails the test with the reason. The tests run one at a time
//! (they assert on the machine's shared route), and only ever send traffic to the
//! namespaces they create.

mod common;

use backend::netns::{NetnsBackend, TEST_RANGE};
use backend::state::{self, ProcessRecord, STATE_DIR};
use backend::{tools, Backend, BackendError, Cut, Signal};
use common::{is_root, run_leftovers};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());

/// Every test holds this: one at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|item| item.to_string()).collect()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A stand-in broker: TCP servers on 8000 and 8001 that answer each connection with the
/// node's name, and a UDP socket on 9000 that logs every datagram (`udp <token> <from>`).
const SERVER: &str = r#"
import socket, sys, threading
ip, name = sys.argv[1], sys.argv[2]
def listen(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((ip, port))
    s.listen(64)
    return s
def serve(s):
    while True:
        c, _ = s.accept()
        try:
            c.sendall((name + "\n").encode())
        finally:
            c.close()
for s in [listen(8000), listen(8001)]:
    threading.Thread(target=serve, args=(s,), daemon=True).start()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind((ip, 9000))
print("ready", flush=True)
while True:
    data, addr = u.recvfrom(256)
    print("udp", data.decode(), addr[0], flush=True)
"#;

/// Connects to every `host:port` argument at once; prints `<target> <reply or ->`. Only a
/// connection attempt can time out quickly (1 s: on a veth a handshake takes well under
/// a millisecond, and the kernel answers even for a busy server); the reply gets 5 s.
const PROBE: &str = r#"
import socket, sys, concurrent.futures
def probe(target):
    host, port = target.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1.0) as c:
            c.settimeout(5.0)
            return target + " " + (c.recv(64).decode().strip() or "-")
    except OSError:
        return target + " -"
with concurrent.futures.ThreadPoolExecutor(len(sys.argv) - 1) as pool:
    for line in pool.map(probe, sys.argv[1:]):
        print(line)
"#;

const SEND_UDP: &str = r#"
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.sendto(sys.argv[3].encode(), (sys.argv[1], int(sys.argv[2])))
"#;

const ROOT: &str = "root";

/// The python3 interpreter itself (not a wrapper such as pyenv's shim, which costs a
/// shell start on every probe).
fn python() -> &'static str {
    static PYTHON: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PYTHON.get_or_init(|| {
        let argv = strings(&["python3", "-c", "import sys; print(sys.executable)"]);
        match tools::run(&argv) {
            Ok(path) if !path.trim().is_empty() => path.trim().to_string(),
            Ok(_) => "python3".to_string(),
            Err(error) => {
                common::missing(&format!("needs python3 (apt-get install python3): {error}"))
            }
        }
    })
}

/// Whether the harness's side (the root namespace) gets `node`'s name back from port.
fn root_reaches(address: IpAddr, port: u16, node: &str) -> bool {
    root_gets_reply(address, port, node, Duration::from_secs(5))
}

/// Whether the root namespace connects to `address:port` (1 s) and gets `node`'s name
/// back within `reply_timeout`.
fn root_gets_reply(address: IpAddr, port: u16, node: &str, reply_timeout: Duration) -> bool {
    let Ok(mut stream) =
        TcpStream::connect_timeout(&SocketAddr::new(address, port), Duration::from_secs(1))
    else {
        return false;
    };
    if stream.set_read_timeout(Some(reply_timeout)).is_err() {
        return false;
    }
    let mut reply = String::new();
    let _ = stream.read_to_string(&mut reply);
    reply.trim() == node
}

/// Who reaches whom on `port`: every pair (source, target) of the root namespace and
/// the nodes, true when the target's server answered with its name.
async fn reachability(backend: &NetnsBackend, port: u16) -> BTreeMap<(String, String), bool> {
    let nodes = backend.nodes();
    let address = |node: &str| backend.address(node).expect("node address");
    let mut result = BTreeMap::new();
    let from_root: Vec<(String, bool)> = std::thread::scope(|scope| {
        let handles: Vec<_> = nodes
            .iter()
            .map(|node| {
                let ip = address(node);
                (
                    node.clone(),
                    scope.spawn(move || root_reaches(ip, port, node)),
                )
            })
            .collect();
        handles
            .into_iter()
            .map(|(node, handle)| (node, handle.join().unwrap_or(false)))
            .collect()
    });
    for (node, reached) in from_root {
        result.insert((ROOT.to_string(), node), reached);
    }
    let probes = nodes.iter().map(|source| {
        let mut argv = strings(&[python(), "-c", PROBE]);
        let targets: Vec<String> = nodes
            .iter()
            .filter(|target| *target != source)
            .cloned()
            .collect();
        argv.extend(
            targets
                .iter()
                .map(|target| format!("{}:{port}", address(target))),
        );
        (source.clone(), targets, argv)
    });
    let probes: Vec<_> = probes.collect();
    let outputs = futures_join(backend, &probes).await;
    for ((source, targets, _), output) in probes.iter().zip(outputs) {
        let lines: Vec<&str> = output.lines().collect();
        assert_eq!(lines.len(), targets.len(), "probe from {source}: {output}");
        for (target, line) in targets.iter().zip(lines) {
            let reply = line.rsplit(' ').next().unwrap_or("-");
            result.insert((source.clone(), target.clone()), reply == target);
        }
    }
    result
}

/// Runs the probes of every node at the same time.
async fn futures_join(
    backend: &NetnsBackend,
    probes: &[(String, Vec<String>, Vec<String>)],
) -> Vec<String> {
    use std::task::Poll;
    let mut futures: Vec<_> = probes
        .iter()
        .map(|(source, _, argv)| backend.exec(source, argv))
        .collect();
    let mut results: Vec<Option<Result<_, BackendError>>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, slot) in futures.iter_mut().zip(results.iter_mut()) {
            if slot.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(result) => *slot = Some(result),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    results
        .into_iter()
        .map(|result| match result {
            Some(Ok(output)) => output.stdout,
            Some(Err(error)) => panic!("probe failed: {error}"),
            None => panic!("probe never finished"),
        })
        .collect()
}

/// The pairs that do not reach each other.
fn blocked(matrix: &BTreeMap<(String, String), bool>) -> BTreeSet<(String, String)> {
    matrix
        .iter()
        .filter(|(_, reached)| !**reached)
        .map(|(pair, _)| pair.clone())
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    list.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

async fn assert_blocked(backend: &NetnsBackend, port: u16, expected: &[(&str, &str)], when: &str) {
    let matrix = reachability(backend, port).await;
    let nodes = backend.nodes().len();
    assert_eq!(matrix.len(), nodes * nodes, "{matrix:?}");
    assert_eq!(blocked(&matrix), pairs(expected), "port {port}, {when}");
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Sends one datagram holding `token` from `from` to `to`'s `port`.
async fn send_udp(backend: &NetnsBackend, from: &str, to: &str, port: u16, token: &str) {
    let ip = backend.address(to).expect("address").to_string();
    let mut argv = strings(&[python(), "-c", SEND_UDP]);
    argv.extend([ip, port.to_string(), token.to_string()]);
    if let Err(error) = backend.exec(from, &argv).await {
        panic!("sending UDP from {from}: {error}");
    }
}

fn log_has(log: &Path, token: &str) -> bool {
    std::fs::read_to_string(log).is_ok_and(|text| {
        text.lines()
            .any(|line| line.split(' ').nth(1) == Some(token))
    })
}

/// The packet counts of the DROP rules in `node`'s cut chain, summed by source address
/// and protocol (`all`, `tcp`, `udp`; `-n` prints them as 0, 6, 17).
async fn drop_counts(backend: &NetnsBackend, node: &str) -> BTreeMap<(String, String), u64> {
    let argv = strings(&[
        "iptables",
        "-w",
        "10",
        "-L",
        &format!("{}-cuts", backend.prefix()),
        "-v",
        "-x",
        "-n",
    ]);
    let listing = match backend.exec(node, &argv).await {
        Ok(output) => output.stdout,
        Err(error) => panic!("listing the cuts on {node}: {error}"),
    };
    let mut counts = BTreeMap::new();
    for line in listing.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() >= 8 && fields[2] == "DROP" {
            let packets: u64 = fields[0].parse().expect("packet count");
            let protocol = match fields[3] {
                "0" => "all",
                "6" => "tcp",
                "17" => "udp",
                other => other,
            };
            *counts
                .entry((fields[7].to_string(), protocol.to_string()))
                .or_default() += packets;
        }
    }
    counts
}

/// How many packets of `protocol` from `source` `node`'s cuts dropped.
async fn dropped(backend: &NetnsBackend, node: &str, source: &str, protocol: &str) -> u64 {
    let key = (source.to_string(), protocol.to_string());
    drop_counts(backend, node)
        .await
        .get(&key)
        .copied()
        .unwrap_or(0)
}

fn assert_gone(prefix: &str, processes: &[ProcessRecord], when: &str) {
    let left = run_leftovers(prefix, processes);
    assert!(left.is_empty(), "{when}: left behind: {left:?}");
}

fn route_installed() -> bool {
    tools::run(&strings(&["ip", "route", "show", "exact", TEST_RANGE])).is_ok_and(|route| {
        route
            .trim_start()
            .starts_with(&format!("unreachable {TEST_RANGE}"))
    })
}

fn log_dir(prefix: &str) -> PathBuf {
    std::env::temp_dir().join(format!("harness-netns-test-{prefix}"))
}

/// Starts the stand-in server on every node and waits until the root namespace reaches
/// each; returns node → (pid, log file).
async fn start_servers(backend: &NetnsBackend) -> BTreeMap<String, (u32, PathBuf)> {
    let mut servers = BTreeMap::new();
    for node in backend.nodes() {
        let ip = backend.address(&node).expect("address");
        let log = log_dir(backend.prefix()).join(&node).join("server.log");
        let mut argv = strings(&[python(), "-u", "-c", SERVER]);
        argv.extend([ip.to_string(), node.clone()]);
        let pid = match backend.spawn_daemon(&node, &argv, &log).await {
            Ok(pid) => pid,
            Err(error) => panic!("starting the server on {node}: {error}"),
        };
        servers.insert(node, (pid, log));
    }
    for (node, (pid, _)) in &servers {
        let ip = backend.address(node).expect("address");
        wait_until(&format!("{node} serves"), || {
            root_reaches(ip, 8000, node) && root_reaches(ip, 8001, node)
        })
        .await;
        // The pid is the server's own, not `ip netns exec`'s.
        let cmdline = state::cmdline(*pid).unwrap_or_default();
        assert!(
            cmdline.first().map(String::as_str) == Some(python())
                && cmdline.iter().any(|arg| arg == SERVER),
            "pid {pid}: {cmdline:?}"
        );
    }
    servers
}

fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

#[test]
#[allow(non_snake_case)]
fn needs_python3__three_nodes_cuts_signals_and_teardown() {
    if !is_root() {
        common::missing_root();
    }
    python();
    let _serial = serial();
    let started = Instant::now();
    let runtime = runtime();
    let backend = match NetnsBackend::new(3) {
        Ok(backend) => backend,
        Err(error) => panic!("creating the backend: {error}"),
    };
    let prefix = backend.prefix().to_string();
    println!("run {prefix}: set up in {:?}", started.elapsed());
    let mut processes = Vec::new();
    runtime.block_on(async {
        assert_eq!(backend.kind(), "netns");
        assert_eq!(backend.nodes(), ["n1", "n2", "n3"]);
        assert!(
            route_installed(),
            "the unreachable route for {TEST_RANGE} is installed"
        );
        let subnet = backend.subnet();
        for (i, node) in backend.nodes().iter().enumerate() {
            assert_eq!(
                backend.address(node).expect("address").to_string(),
                format!("10.77.{subnet}.{}", i + 1)
            );
        }
        assert!(matches!(
            backend.address("n4"),
            Err(BackendError::UnknownNode { .. })
        ));
        let state_text = std::fs::read_to_string(backend.state_file()).expect("state file");
        assert!(state_text.contains(&format!("{prefix}-n3")), "{state_text}");

        let servers = start_servers(&backend).await;
        for (pid, _) in servers.values() {
            processes.push(ProcessRecord::of(*pid).expect("server running"));
        }
        let state_text = std::fs::read_to_string(backend.state_file()).expect("state file");
        for (pid, _) in servers.values() {
            assert!(
                state_text.contains(&format!("\"pid\": {pid}")),
                "daemons are recorded: {state_text}"
            );
        }
        let log = |node: &str| servers[node].1.clone();

        // Everyone reaches everyone, on both ports, from the root namespace and between nodes.
        assert_blocked(&backend, 8000, &[], "before any cut").await;
        assert_blocked(&backend, 8001, &[], "before any cut").await;

        // One way, n1 → n2: n2 drops what n1 sends. A TCP connection needs both ways, so
        // both directions fail for TCP; UDP shows the direction: n2 → n1 arrives, n1 → n2
        // is dropped (the rule's counter sees it, and a later datagram from n3 overtakes it).
        let n1 = backend.address("n1").expect("address").to_string();
        let n2 = backend.address("n2").expect("address").to_string();
        let n3 = backend.address("n3").expect("address").to_string();
        backend
            .cut(&[Cut::between("n1", "n2").one_way()])
            .await
            .expect("one-way cut");
        assert_blocked(
            &backend,
            8000,
            &[("n1", "n2"), ("n2", "n1")],
            "n1 → n2 cut one way",
        )
        .await;
        send_udp(&backend, "n2", "n1", 9000, "back-1").await;
        wait_until("n1 hears n2", || log_has(&log("n1"), "back-1")).await;
        // (The whole-node rule's counter also sees n1's retransmitted TCP SYN-ACKs to
        // the probes above, so it grows by at least one.)
        let before = dropped(&backend, "n2", &n1, "all").await;
        send_udp(&backend, "n1", "n2", 9000, "lost-1").await;
        send_udp(&backend, "n3", "n2", 9000, "after-1").await;
        wait_until("n2 hears n3", || log_has(&log("n2"), "after-1")).await;
        assert!(!log_has(&log("n2"), "lost-1"), "n1 → n2 must be dropped");
        assert!(
            dropped(&backend, "n2", &n1, "all").await > before,
            "n2 dropped it"
        );
        assert!(
            drop_counts(&backend, "n1").await.is_empty(),
            "nothing is cut at n1"
        );
        backend.heal().await.expect("heal");
        assert_blocked(&backend, 8000, &[], "after heal").await;

        // Both ways, n1 ↔ n3: UDP is dropped in both directions too.
        backend
            .cut(&[Cut::between("n1", "n3")])
            .await
            .expect("two-way cut");
        assert_blocked(&backend, 8000, &[("n1", "n3"), ("n3", "n1")], "n1 ↔ n3 cut").await;
        assert_blocked(&backend, 8001, &[("n1", "n3"), ("n3", "n1")], "n1 ↔ n3 cut").await;
        let before = (
            dropped(&backend, "n1", &n3, "all").await,
            dropped(&backend, "n3", &n1, "all").await,
        );
        send_udp(&backend, "n3", "n1", 9000, "lost-2").await;
        send_udp(&backend, "n1", "n3", 9000, "lost-3").await;
        send_udp(&backend, "n2", "n1", 9000, "after-2").await;
        send_udp(&backend, "n2", "n3", 9000, "after-3").await;
        wait_until("n1 and n3 hear n2", || {
            log_has(&log("n1"), "after-2") && log_has(&log("n3"), "after-3")
        })
        .await;
        assert!(!log_has(&log("n1"), "lost-2") && !log_has(&log("n3"), "lost-3"));
        let after = (
            dropped(&backend, "n1", &n3, "all").await,
            dropped(&backend, "n3", &n1, "all").await,
        );
        assert!(
            after.0 > before.0 && after.1 > before.1,
            "both sides dropped"
        );
        backend.heal().await.expect("heal");
        assert_blocked(&backend, 8000, &[], "after heal").await;
        assert_blocked(&backend, 8001, &[], "after heal").await;

        // Ports: n2 → n3 on 8001 one way (n3 still reaches n2:8001, since n2's replies come
        // from port 8001, not to it), and n1 ↔ n2 on 8000 both ways; cuts add up.
        backend
            .cut(&[Cut::between("n2", "n3").ports(&[8001]).one_way()])
            .await
            .expect("port cut");
        backend
            .cut(&[Cut::between("n1", "n2").ports(&[8000])])
            .await
            .expect("port cut");
        assert_blocked(&backend, 8001, &[("n2", "n3")], "n2 → n3 :8001 cut").await;
        assert_blocked(
            &backend,
            8000,
            &[("n1", "n2"), ("n2", "n1")],
            "n1 ↔ n2 :8000 cut",
        )
        .await;
        // UDP to a cut port is dropped too; to other ports it passes.
        let before = dropped(&backend, "n3", &n2, "udp").await;
        send_udp(&backend, "n2", "n3", 8001, "port-udp-cut").await;
        send_udp(&backend, "n2", "n3", 9000, "port-udp").await;
        wait_until("n3 hears n2 on 9000", || log_has(&log("n3"), "port-udp")).await;
        assert_eq!(
            dropped(&backend, "n3", &n2, "udp").await,
            before + 1,
            "exactly the datagram to 8001"
        );
        backend.heal().await.expect("heal");
        assert_blocked(&backend, 8000, &[], "after heal").await;
        assert_blocked(&backend, 8001, &[], "after heal").await;
        assert!(
            drop_counts(&backend, "n3").await.is_empty(),
            "heal leaves no rule"
        );

        // Bad cuts are refused before any rule is added.
        let bad = backend
            .cut(&[Cut::between("n1", "n2"), Cut::between("n1", "n7")])
            .await;
        assert!(
            matches!(bad, Err(BackendError::InvalidCut { .. })),
            "{bad:?}"
        );
        assert_blocked(&backend, 8000, &[], "after a refused cut").await;

        // Signals reach the server itself: stopped, it accepts (the kernel does) but
        // never answers; continued, it answers; killed, it is gone.
        let (pid, _) = servers["n1"];
        let ip = backend.address("n1").expect("address");
        backend.signal("n1", pid, Signal::Stop).await.expect("stop");
        wait_until("n1's server is stopped", || process_state(pid) == Some('T')).await;
        assert!(
            !root_gets_reply(ip, 8000, "n1", Duration::from_secs(1)),
            "a stopped server does not answer"
        );
        assert!(
            backend.is_running("n1", pid).await.expect("is_running"),
            "stopped is running"
        );
        backend.signal("n1", pid, Signal::Cont).await.expect("cont");
        wait_until("n1's server answers again", || root_reaches(ip, 8000, "n1")).await;
        backend.signal("n1", pid, Signal::Kill).await.expect("kill");
        let mut gone = false;
        let deadline = Instant::now() + Duration::from_secs(20);
        while !gone && Instant::now() < deadline {
            gone = !backend.is_running("n1", pid).await.expect("is_running");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(gone, "killed server still running");
        assert!(!root_reaches(ip, 8000, "n1"));
        let again = backend.signal("n1", pid, Signal::Term).await;
        assert!(
            matches!(again, Err(BackendError::ProcessGone { .. })),
            "{again:?}"
        );
        let foreign = backend.signal("n1", std::process::id(), Signal::Term).await;
        assert!(
            matches!(foreign, Err(BackendError::NotOurProcess { .. })),
            "{foreign:?}"
        );
        let wrong_node = backend.is_running("n2", servers["n3"].0).await;
        assert!(
            matches!(wrong_node, Err(BackendError::NotOurProcess { .. })),
            "{wrong_node:?}"
        );
        assert!(backend
            .is_running("n3", servers["n3"].0)
            .await
            .expect("is_running"));

        // exec: output, and failures naming the command and its stderr.
        let argv = strings(&[
            "sh",
            "-c",
            "ip -o -4 addr show dev eth0 | wc -l; echo note >&2",
        ]);
        let output = backend.exec("n2", &argv).await.expect("exec");
        assert_eq!(output.stdout.trim(), "1");
        assert_eq!(output.stderr.trim(), "note");
        let failing = backend
            .exec("n2", &strings(&["sh", "-c", "echo broken >&2; exit 4"]))
            .await;
        match failing {
            Err(error @ BackendError::Command { .. }) => {
                let text = error.to_string();
                assert!(
                    text.contains(&format!("netns exec {prefix}-n2 sh -c")),
                    "{text}"
                );
                assert!(text.contains("exit 4") && text.contains("broken"), "{text}");
            }
            other => panic!("expected a command error, got {other:?}"),
        }
        let started_daemon = backend
            .spawn_daemon(
                "n2",
                &strings(&["/nonexistent/broker"]),
                &log_dir(&prefix).join("n2/bad.log"),
            )
            .await;
        match started_daemon {
            Err(BackendError::DaemonStart { reason, .. }) => {
                assert!(reason.contains("exited at once"), "{reason}")
            }
            other => panic!("expected a start error, got {other:?}"),
        }

        // upload / download are copies here.
        let local = log_dir(&prefix).join("local/config.toml");
        std::fs::create_dir_all(local.parent().expect("parent")).expect("dir");
        std::fs::write(&local, "id = 1\n").expect("write");
        let remote = log_dir(&prefix).join("n1/etc/config.toml");
        backend.upload(&local, "n1", &remote).await.expect("upload");
        let back = log_dir(&prefix).join("back/n1");
        backend
            .download("n1", remote.parent().expect("parent"), &back)
            .await
            .expect("download");
        assert_eq!(
            std::fs::read_to_string(back.join("config.toml")).expect("read"),
            "id = 1\n"
        );

        // Teardown, twice; afterwards nothing is left and the backend refuses work.
        let before = Instant::now();
        backend.teardown().await.expect("teardown");
        println!("teardown in {:?}", before.elapsed());
        backend.teardown().await.expect("teardown again");
        let after = backend.exec("n1", &strings(&["true"])).await;
        assert!(matches!(after, Err(BackendError::TornDown)), "{after:?}");
        assert!(matches!(backend.heal().await, Err(BackendError::TornDown)));
    });
    assert_gone(&prefix, &processes, "after teardown");
    drop(backend);
    assert_gone(&prefix, &processes, "after drop");
    let _ = std::fs::remove_dir_all(log_dir(&prefix));
    println!("whole test in {:?}", started.elapsed());
}

/// The rules of `node`'s cut chain as `iptables -S` prints them (`-A <chain> ...`).
async fn cut_rules_on(backend: &NetnsBackend, node: &str) -> Vec<String> {
    let chain = format!("{}-cuts", backend.prefix());
    let argv = strings(&["iptables", "-w", "10", "-S", &chain]);
    match backend.exec(node, &argv).await {
        Ok(output) => output
            .stdout
            .lines()
            .filter(|line| line.starts_with("-A "))
            .map(|line| line.replace(&chain, "<chain>"))
            .collect(),
        Err(error) => panic!("listing the cuts on {node}: {error}"),
    }
}

/// Every node's cut rules, nodes without any left out.
async fn all_cut_rules(backend: &NetnsBackend) -> BTreeMap<String, Vec<String>> {
    let mut all = BTreeMap::new();
    for node in backend.nodes() {
        let rules = cut_rules_on(backend, &node).await;
        if !rules.is_empty() {
            all.insert(node, rules);
        }
    }
    all
}

#[test]
#[allow(non_snake_case)]
fn needs_python3__uncut_removes_exactly_the_rules_of_its_cuts() {
    if !is_root() {
        common::missing_root();
    }
    python();
    let _serial = serial();
    let runtime = runtime();
    let backend = match NetnsBackend::new(3) {
        Ok(backend) => backend,
        Err(error) => panic!("creating the backend: {error}"),
    };
    let prefix = backend.prefix().to_string();
    let processes: Vec<ProcessRecord> = runtime.block_on(async {
        let servers = start_servers(&backend).await;
        let address = |node: &str| backend.address(node).expect("address").to_string();
        let (n1, n2) = (address("n1"), address("n2"));
        let both_ways = [Cut::between("n1", "n2")];
        let port_one_way = [Cut::between("n1", "n3").ports(&[8000]).one_way()];
        backend.cut(&both_ways).await.expect("cut");
        backend.cut(&port_one_way).await.expect("cut");
        // The same cut again: in place twice.
        backend.cut(&both_ways).await.expect("cut again");
        let whole = |source: &str| format!("-A <chain> -s {source}/32 -j DROP");
        let port = |protocol: &str, side: &str| {
            format!("-A <chain> -s {n1}/32 -p {protocol} -m {protocol} --{side} 8000 -j DROP")
        };
        let with_both_ways = |times: usize| {
            let mut expected = BTreeMap::new();
            if times > 0 {
                expected.insert("n1".to_string(), vec![whole(&n2); times]);
                expected.insert("n2".to_string(), vec![whole(&n1); times]);
            }
            expected.insert(
                "n3".to_string(),
                vec![port("tcp", "dport"), port("udp", "dport")],
            );
            expected
        };
        assert_eq!(all_cut_rules(&backend).await, with_both_ways(2));

        // One uncut removes one instance: n1 and n2 are still cut from each other.
        backend.uncut(&both_ways).await.expect("uncut");
        assert_eq!(all_cut_rules(&backend).await, with_both_ways(1));
        assert_blocked(
            &backend,
            8000,
            &[("n1", "n2"), ("n2", "n1"), ("n1", "n3")],
            "one of two n1 ↔ n2 cuts removed",
        )
        .await;

        // The second removes the other; the port cut stays.
        backend.uncut(&both_ways).await.expect("uncut again");
        assert_eq!(all_cut_rules(&backend).await, with_both_ways(0));
        assert_blocked(&backend, 8000, &[("n1", "n3")], "n1 ↔ n2 uncut").await;
        assert_blocked(&backend, 8001, &[], "only port 8000 is cut").await;

        // A cut that is not in place cannot be removed, and removing it touches nothing.
        let missing = backend.uncut(&both_ways).await;
        assert!(
            matches!(missing, Err(BackendError::Command { .. })),
            "{missing:?}"
        );
        assert_eq!(all_cut_rules(&backend).await, with_both_ways(0));
        let bad = backend.uncut(&[Cut::between("n1", "n9")]).await;
        assert!(
            matches!(bad, Err(BackendError::InvalidCut { .. })),
            "{bad:?}"
        );

        backend
            .uncut(&port_one_way)
            .await
            .expect("uncut the port cut");
        assert!(all_cut_rules(&backend).await.is_empty());
        assert_blocked(&backend, 8000, &[], "everything uncut").await;
        servers
            .values()
            .map(|(pid, _)| ProcessRecord::of(*pid).expect("running"))
            .collect()
    });
    runtime.block_on(backend.teardown()).expect("teardown");
    assert_gone(&prefix, &processes, "after teardown");
    let _ = std::fs::remove_dir_all(log_dir(&prefix));
}

#[test]
#[allow(non_snake_case)]
fn needs_python3__dropping_the_backend_tears_it_down() {
    if !is_root() {
        common::missing_root();
    }
    python();
    let _serial = serial();
    let runtime = runtime();
    let backend = match NetnsBackend::new(2) {
        Ok(backend) => backend,
        Err(error) => panic!("creating the backend: {error}"),
    };
    let prefix = backend.prefix().to_string();
    let processes: Vec<ProcessRecord> = runtime.block_on(async {
        let servers = start_servers(&backend).await;
        // A command still running inside a namespace is removed too.
        let sleeper = backend
            .spawn_daemon(
                "n2",
                &strings(&["sleep", "600"]),
                &log_dir(&prefix).join("n2/sleep.log"),
            )
            .await
            .expect("sleep");
        backend.cut(&[Cut::between("n1", "n2")]).await.expect("cut");
        servers
            .values()
            .map(|(pid, _)| *pid)
            .chain([sleeper])
            .map(|pid| ProcessRecord::of(pid).expect("running"))
            .collect()
    });
    assert!(run_leftovers(&prefix, &[])
        .iter()
        .any(|left| left.starts_with("namespace")));
    drop(backend);
    assert_gone(&prefix, &processes, "after drop");
    let _ = std::fs::remove_dir_all(log_dir(&prefix));
}

#[test]
#[allow(non_snake_case)]
fn needs_python3__a_panic_in_the_test_body_tears_down() {
    if !is_root() {
        common::missing_root();
    }
    python();
    let _serial = serial();
    let runtime = runtime();
    let seen: Mutex<Option<(String, Vec<ProcessRecord>)>> = Mutex::new(None);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let backend = match NetnsBackend::new(2) {
            Ok(backend) => backend,
            Err(error) => panic!("creating the backend: {error}"),
        };
        runtime.block_on(async {
            let servers = start_servers(&backend).await;
            let processes = servers
                .values()
                .map(|(pid, _)| ProcessRecord::of(*pid).expect("running"))
                .collect();
            *seen.lock().unwrap_or_else(|p| p.into_inner()) =
                Some((backend.prefix().to_string(), processes));
            panic!("the test body fails with the backend up");
        })
    }));
    assert!(outcome.is_err(), "the body panicked");
    let (prefix, processes) = seen
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .expect("the body got as far as its servers");
    assert_gone(&prefix, &processes, "after a panic");
    let _ = std::fs::remove_dir_all(log_dir(&prefix));
}

/// Which helper a child process runs (see [`helper`]).
const HELPER_ENV: &str = "HARNESS_NETNS_HELPER";
const ANNOUNCE: &str = "HELPER-RUN ";

/// Whether this process is the child that runs helper `name`.
fn is_helper(name: &str) -> bool {
    std::env::var(HELPER_ENV).is_ok_and(|wanted| wanted == name)
}

/// Runs the ignored test `name` of this binary in a child process (under `wrapper`, if
/// given: a command that runs its arguments), and returns it with the text after the
/// first `HELPER-RUN ` it prints.
fn helper(name: &str, wrapper: &[String]) -> (std::process::Child, String) {
    let exe = std::env::current_exe().expect("test binary");
    let mut argv: Vec<String> = wrapper.to_vec();
    argv.push(exe.display().to_string());
    argv.extend(strings(&[
        "--exact",
        name,
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]));
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .env(HELPER_ENV, name)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("helper");
    let stdout = child.stdout.take().expect("helper stdout");
    // libtest prints `test <name> ... ` before the helper's own output.
    let (lines, announcements) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(at) = line.find(ANNOUNCE) {
                let _ = lines.send(line[at + ANNOUNCE.len()..].to_string());
            }
        }
    });
    match announcements.recv_timeout(Duration::from_secs(120)) {
        Ok(announced) => (child, announced),
        Err(_) => {
            let _ = child.kill();
            let status = child.wait();
            panic!("helper {name} announced nothing (it ended: {status:?})");
        }
    }
}

/// Starts a 2-node backend with a `sleep` daemon on n1 and a cut; announces
/// `<prefix> <daemon pid>`.
fn start_helper_run(runtime: &tokio::runtime::Runtime) -> NetnsBackend {
    let backend = match NetnsBackend::new(2) {
        Ok(backend) => backend,
        Err(error) => panic!("creating the backend: {error}"),
    };
    let prefix = backend.prefix().to_string();
    let started = runtime.block_on(async {
        let log = log_dir(&prefix).join("n1/sleep.log");
        let pid = backend
            .spawn_daemon("n1", &strings(&["sleep", "600"]), &log)
            .await?;
        backend.cut(&[Cut::between("n1", "n2")]).await?;
        Ok::<u32, BackendError>(pid)
    });
    match started {
        Ok(pid) => println!("{ANNOUNCE}{prefix} {pid}"),
        Err(error) => panic!("starting the run: {error}"),
    }
    backend
}

/// Not a test of its own: `needs_root__a_sigkilled_run_is_removed_by_harness_clean` runs
/// it in a child process that it then SIGKILLs. Does nothing unless run as that child.
#[test]
#[ignore = "helper, run in a child process by needs_root__a_sigkilled_run_is_removed_by_harness_clean"]
fn crashed_run_helper() {
    if !is_helper("crashed_run_helper") {
        return;
    }
    let runtime = runtime();
    let backend = start_helper_run(&runtime);
    // A crash: no teardown, ever.
    std::mem::forget(backend);
    // Wait to be killed (the parent never writes to our stdin).
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

/// Not a test of its own: `needs_root__ctrl_c_tears_down` runs it in a child process and sends it
/// SIGINT. Does nothing unless run as that child.
#[test]
#[ignore = "helper, run in a child process by needs_root__ctrl_c_tears_down"]
fn signalled_run_helper() {
    if !is_helper("signalled_run_helper") {
        return;
    }
    let runtime = runtime();
    runtime.block_on(async {
        if let Err(error) = backend::netns::install_signal_teardown() {
            panic!("installing the handler: {error}");
        }
    });
    let backend = start_helper_run(&runtime);
    // Wait for the signal; the handler tears down and exits 130.
    runtime.block_on(std::future::pending::<()>());
    drop(backend);
}

#[test]
#[allow(non_snake_case)]
fn needs_root__ctrl_c_tears_down() {
    if !is_root() {
        common::missing_root();
    }
    let _serial = serial();
    let (mut child, announced) = helper("signalled_run_helper", &[]);
    let (prefix, pid) = announced.split_once(' ').expect("prefix and pid");
    let pid: u32 = pid.parse().expect("pid");
    let daemon = ProcessRecord::of(pid).expect("the run's daemon");
    assert!(!run_leftovers(prefix, &[]).is_empty(), "the run is up");
    let interrupt = tools::run(&strings(&["kill", "-s", "INT", &child.id().to_string()]));
    assert!(interrupt.is_ok(), "{interrupt:?}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("helper status") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the helper did not exit after SIGINT");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(status.code(), Some(130), "exit code after SIGINT");
    assert_gone(prefix, &[daemon], "after Ctrl-C");
    let _ = std::fs::remove_dir_all(log_dir(prefix));
}

#[test]
#[allow(non_snake_case)]
fn needs_root__a_sigkilled_run_is_removed_by_harness_clean() {
    if !is_root() {
        common::missing_root();
    }
    let _serial = serial();
    let harness = env!("CARGO_BIN_EXE_harness");
    let (mut child, announced) = helper("crashed_run_helper", &[]);
    // SIGKILL: no destructor, no handler runs.
    let _ = child.kill();
    let _ = child.wait();
    let (prefix, pid) = announced.split_once(' ').expect("prefix and pid");
    let pid: u32 = pid.parse().expect("pid");
    let daemon = ProcessRecord::of(pid).expect("the crashed run's daemon outlives it");
    let left = run_leftovers(prefix, std::slice::from_ref(&daemon));
    assert!(
        left.iter().any(|item| item.starts_with("namespace"))
            && left.iter().any(|item| item.starts_with("process")),
        "the crash left things to clean: {left:?}"
    );

    let output = Command::new(harness)
        .arg("clean")
        .output()
        .expect("harness clean");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(0),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    for expected in [
        format!("removed daemon {pid} `sleep 600` on n1"),
        format!("removed namespace {prefix}-n1"),
        format!("removed namespace {prefix}-n2"),
        format!("removed bridge {prefix}-br"),
        format!("removed file {STATE_DIR}/{prefix}.json"),
    ] {
        assert!(
            stdout.lines().any(|line| line == expected),
            "no `{expected}` in:\n{stdout}"
        );
    }
    assert_gone(prefix, &[daemon], "after harness clean");

    let again = Command::new(harness)
        .arg("clean")
        .output()
        .expect("harness clean");
    let stdout = String::from_utf8_lossy(&again.stdout);
    assert_eq!(again.status.code(), Some(0), "{stdout}");
    assert!(
        !stdout.contains(prefix),
        "a second clean finds nothing of {prefix}: {stdout}"
    );
    let _ = std::fs::remove_dir_all(log_dir(prefix));

    // Without root it refuses at once, saying why.
    if let Some(setpriv) = tools::find_binary("setpriv") {
        let output = Command::new(setpriv)
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                harness,
                "clean",
            ])
            .output()
            .expect("setpriv");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(3), "{stderr}");
        assert!(stderr.contains("needs root"), "{stderr}");
    }
}

/// Deletes a namespace when dropped.
struct ScratchNamespace(String);

impl Drop for ScratchNamespace {
    fn drop(&mut self) {
        let _ = tools::run(&strings(&["ip", "netns", "del", &self.0]));
    }
}

/// Not a test of its own: `needs_python3__bridged_traffic_passes_a_dropping_forward_chain`
/// runs it inside a namespace whose FORWARD chain drops everything. Does nothing unless run as that child.
#[test]
#[ignore = "helper, run inside a namespace by needs_python3__bridged_traffic_passes_a_dropping_forward_chain"]
fn forward_helper() {
    if !is_helper("forward_helper") {
        return;
    }
    let runtime = runtime();
    let backend = match NetnsBackend::new(2) {
        Ok(backend) => backend,
        Err(error) => panic!("creating the backend: {error}"),
    };
    let prefix = backend.prefix().to_string();
    let state = state::RunState::read(&backend.state_file()).expect("state file");
    let rule = state
        .forward_rule
        .clone()
        .expect("a FORWARD rule is recorded");
    let iptables = |args: &[&str], rule: &[String]| {
        let mut argv = strings(&["iptables", "-w", "10"]);
        argv.extend(strings(args));
        argv.extend(rule.iter().cloned());
        tools::run(&argv)
    };
    runtime.block_on(async {
        start_servers(&backend).await;
        assert_blocked(&backend, 8000, &[], "with the bridge's FORWARD rule").await;
        // Without the rule, the chain's DROP policy stops bridged traffic between nodes
        // (not the harness's own, which is not forwarded).
        iptables(&["-D", "FORWARD"], &rule).expect("removing the rule");
        assert_blocked(&backend, 8000, &[("n1", "n2"), ("n2", "n1")], "without it").await;
        iptables(&["-I", "FORWARD", "1"], &rule).expect("putting it back");
        assert_blocked(&backend, 8000, &[], "with it again").await;
        backend.teardown().await.expect("teardown");
    });
    let forward = iptables(&["-S", "FORWARD"], &[]).expect("listing FORWARD");
    assert_eq!(
        forward.trim(),
        "-P FORWARD DROP",
        "teardown removed the rule"
    );
    let _ = std::fs::remove_dir_all(log_dir(&prefix));
    println!("{ANNOUNCE}{prefix} done");
}

#[test]
#[allow(non_snake_case)]
fn needs_python3__bridged_traffic_passes_a_dropping_forward_chain() {
    if !is_root() {
        common::missing_root();
    }
    python();
    let _serial = serial();
    // A stand-in for a machine where Docker set the FORWARD policy to DROP: a namespace
    // (named like a run, so `harness clean` would remove it) that the helper sees as its
    // root namespace.
    let host = ScratchNamespace(format!("{}-host", state::random_prefix().expect("prefix")));
    for argv in [
        vec!["ip", "netns", "add", &host.0],
        vec!["ip", "-n", &host.0, "link", "set", "lo", "up"],
        vec![
            "ip", "netns", "exec", &host.0, "iptables", "-w", "10", "-P", "FORWARD", "DROP",
        ],
    ] {
        if let Err(error) = tools::run(&strings(&argv)) {
            panic!("{error}");
        }
    }
    let (mut child, announced) = helper(
        "forward_helper",
        &strings(&["ip", "netns", "exec", &host.0]),
    );
    let status = child.wait().expect("helper");
    assert!(status.success(), "the helper failed: {status}");
    let prefix = announced.strip_suffix(" done").expect("prefix");
    assert_gone(prefix, &[], "after the nested run");
    let host_prefix = state::prefix_of(&host.0).expect("prefix").to_string();
    drop(host);
    assert_gone(&host_prefix, &[], "after removing the scratch namespace");
}
