//! `cargo bench -p harness --bench record`: the recording path alone, printed as figures.
//!
//! The real workers, broker client and recorder run against a trivial broker in this
//! process (axum on 127.0.0.1, one node leading every partition, answering produces and
//! reads at once from an in-memory log), with no rate limit, for a few seconds per
//! workload. The figure is operations completed and recorded per second, and the history
//! written. Target: at least 20,000 ops/s, so that the harness is never the bottleneck of a
//! test. The trivial broker shares the machine's cores with the clients here, so a real
//! test has more headroom than this shows.
//!
//! Scenarios:
//! - `recorder`: the recorder alone, two threads recording typical log operations.
//! - `http-floor`: bare produces by the workers' own broker client (`BrokerClient`: its
//!   own HTTP/1.1 on one kept-alive connection per task) against the trivial broker,
//!   nothing recorded: what HTTP on loopback costs by itself, the floor under the
//!   workloads' figures.
//! - `reqwest-floor` (only when named): the same produces by reqwest, the client the
//!   workers used before, for comparison.
//! - `log`, `register`: the workers and recorder against the trivial broker, which runs on
//!   a thread of its own so that the CPU time per operation of each side is printed too
//!   (a figure that depends much less than ops/s on what else the machine is running).
//!
//! `cargo bench -p harness --bench record -- log` runs one scenario; with no names, every
//! scenario but `reqwest-floor` runs.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use axum::{Json, Router};
use driver::{BrokerClient, BrokerConnector, ClientNode};
use history::Outcome;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::future::IntoFuture;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use workloads::recorder::Recorder;
use workloads::{run_workload, stop_signal, Target, WorkloadKind, WorkloadOptions};

const TOPIC: &str = "bench";
const PARTITIONS: u32 = 8;
const CONCURRENCY: usize = 32;
const RUN_FOR: Duration = Duration::from_secs(5);
const TARGET_OPS_PER_SECOND: f64 = 20_000.0;

type Logs = Arc<Vec<Mutex<Vec<i64>>>>;

// Typed answers: the trivial broker should cost as little as it can, since it stands in for
// brokers that run elsewhere.
#[derive(Serialize)]
struct Offset {
    offset: usize,
}

#[derive(Deserialize)]
struct ProduceBody {
    value: i64,
}

#[derive(Serialize)]
struct Record {
    offset: usize,
    value: i64,
}

#[derive(Serialize)]
struct ReadReply {
    records: Vec<Record>,
    high_watermark: usize,
    log_start_offset: usize,
    leader_epoch: u32,
    max: usize,
}

async fn metadata() -> Json<Value> {
    let partitions: Vec<Value> = (0..PARTITIONS)
        .map(|p| json!({"partition": p, "replicas": [1], "leader": 1, "leader_epoch": 1, "isr": [1]}))
        .collect();
    Json(json!({
        "brokers": [{"id": 1}],
        "controller": {"id": 1, "epoch": 1},
        "metadata_leader": 1,
        "topics": [{"topic": TOPIC, "partitions": partitions}],
    }))
}

async fn produce(
    State(logs): State<Logs>,
    UrlPath((_, partition)): UrlPath<(String, usize)>,
    body: Bytes,
) -> Response {
    let body = serde_json::from_slice::<ProduceBody>(&body).ok();
    let (Some(body), Some(log)) = (body, logs.get(partition)) else {
        return (StatusCode::BAD_REQUEST, "bad produce").into_response();
    };
    let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
    log.push(body.value);
    Json(Offset {
        offset: log.len() - 1,
    })
    .into_response()
}

async fn read(
    State(logs): State<Logs>,
    UrlPath((_, partition)): UrlPath<(String, usize)>,
    RawQuery(query): RawQuery,
) -> Response {
    // `name=number` pairs, looked up without building a map.
    let number = |name: &str, default: usize| {
        let pair = query
            .as_deref()
            .unwrap_or("")
            .split('&')
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='));
        pair.map_or(Some(default), |text| text.parse::<usize>().ok())
    };
    let (Some(offset), Some(max), Some(log)) = (
        number("offset", 0),
        number("max", 1000),
        logs.get(partition),
    ) else {
        return (StatusCode::BAD_REQUEST, "bad read").into_response();
    };
    let log = log.lock().unwrap_or_else(|e| e.into_inner());
    let end = log.len().min(offset.saturating_add(max));
    let records = (offset.min(end)..end)
        .map(|o| Record {
            offset: o,
            value: log[o],
        })
        .collect();
    Json(ReadReply {
        records,
        high_watermark: log.len(),
        log_start_offset: 0,
        leader_epoch: 1,
        max,
    })
    .into_response()
}

/// User plus system CPU seconds so far of this process (`/proc/self/stat`) or of the
/// calling thread (`/proc/thread-self/stat`), Linux; NaN elsewhere.
fn cpu_seconds(stat_file: &str) -> f64 {
    let stat = std::fs::read_to_string(stat_file).unwrap_or_default();
    // Fields after the command name (which is in parentheses and may hold spaces).
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after ')'.
    match (ticks(11), ticks(12)) {
        (Some(user), Some(system)) => (user + system) / 100.0,
        _ => f64::NAN,
    }
}

/// The trivial broker, on a thread and runtime of its own so that its CPU time can be told
/// apart from the clients'.
struct TrivialBroker {
    address: std::net::SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    /// Yields the CPU seconds the broker's thread used.
    thread: std::thread::JoinHandle<f64>,
}

fn start_trivial_broker() -> Result<TrivialBroker, String> {
    let (address_tx, address_rx) = std::sync::mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(e) => {
                let _ = address_tx.send(Err(format!("broker runtime: {e}")));
                return 0.0;
            }
        };
        let cpu_before = cpu_seconds("/proc/thread-self/stat");
        runtime.block_on(async move {
            let logs: Logs = Arc::new((0..PARTITIONS).map(|_| Mutex::new(Vec::new())).collect());
            let router = Router::new()
                .route("/v1/metadata", get(metadata))
                .route(
                    "/v1/topics/{topic}/partitions/{partition}/records",
                    post(produce).get(read),
                )
                .with_state(logs);
            let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
                Ok(listener) => listener,
                Err(e) => {
                    let _ = address_tx.send(Err(format!("bind: {e}")));
                    return;
                }
            };
            let _ = address_tx.send(listener.local_addr().map_err(|e| e.to_string()));
            // As a real server would: answers are not held back by Nagle's algorithm.
            let listener = listener.tap_io(|tcp| {
                let _ = tcp.set_nodelay(true);
            });
            tokio::select! {
                _ = axum::serve(listener, router).into_future() => {}
                _ = stopped => {}
            }
        });
        drop(runtime);
        cpu_seconds("/proc/thread-self/stat") - cpu_before
    });
    let address = address_rx
        .recv()
        .map_err(|_| "the broker thread ended early".to_string())??;
    Ok(TrivialBroker {
        address,
        stop,
        thread,
    })
}

/// The workers' clients of the trivial broker, as our broker's driver makes them.
fn connector_of(address: std::net::SocketAddr) -> Result<BrokerConnector, String> {
    let target = Target::new(vec!["n1".into()], TOPIC, PARTITIONS).map_err(|e| e.to_string())?;
    let node = ClientNode {
        broker_id: 1,
        url: format!("http://{address}"),
    };
    BrokerConnector::new(target, vec![node]).map_err(|e| e.to_string())
}

fn scratch(name: &str) -> Result<std::path::PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("harness-bench-record-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    Ok(dir.join(name))
}

/// Workers and recorder against the trivial broker.
fn bench_workload(runtime: &tokio::runtime::Runtime, workload: WorkloadKind) -> Result<(), String> {
    let broker = start_trivial_broker()?;
    let connector = connector_of(broker.address)?;
    let path = scratch(&format!("{workload}.jsonl"))?;
    let recorder = Recorder::create(&path).map_err(|e| e.to_string())?;
    let options = WorkloadOptions {
        concurrency: CONCURRENCY,
        rate: 0.0,
        read_fraction: 0.5,
        time_limit: RUN_FOR,
        read_max: 100,
        ..WorkloadOptions::new(workload, 1)
    };
    let (_stopper, stop) = stop_signal();
    let cpu_before = cpu_seconds("/proc/self/stat");
    let started = Instant::now();
    let stats = runtime
        .block_on(run_workload(&connector, &options, &recorder, &stop))
        .map_err(|e| e.to_string())?;
    let elapsed = started.elapsed().as_secs_f64();
    let counts = recorder.finish().map_err(|e| e.to_string())?;
    let _ = broker.stop.send(());
    let broker_cpu = broker
        .thread
        .join()
        .map_err(|_| "the broker thread panicked".to_string())?;
    let cpu = cpu_seconds("/proc/self/stat") - cpu_before;
    let client_cpu = cpu - broker_cpu;
    let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let _ = std::fs::remove_file(&path);
    let per_second = stats.ops as f64 / elapsed;
    let ops = stats.ops.max(1) as f64;
    println!(
        "{workload}: {} ops in {elapsed:.2} s = {per_second:.0} ops/s recorded (target {TARGET_OPS_PER_SECOND:.0}: {}); \
         ok {} fail {} info {}; history {} entries, {:.1} MiB ({:.0} bytes/entry); concurrency {CONCURRENCY}",
        stats.ops,
        if per_second >= TARGET_OPS_PER_SECOND { "met" } else { "MISSED" },
        stats.ok,
        stats.fail,
        stats.info,
        counts.entries,
        bytes as f64 / (1024.0 * 1024.0),
        bytes as f64 / counts.entries.max(1) as f64,
    );
    println!(
        "{workload}: CPU per op: workers + recorder {:.0} us, trivial broker {:.0} us; \
         the recording path alone would sustain {:.0} ops/s per core (load average {})",
        client_cpu * 1e6 / ops,
        broker_cpu * 1e6 / ops,
        ops / client_cpu,
        std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|l| l.split_whitespace().next().map(str::to_string))
            .unwrap_or_else(|| "unknown".into()),
    );
    Ok(())
}

/// The floor under the workloads: bare produces by the workers' own [`BrokerClient`]
/// (one per task, as each worker has its own) against the trivial broker, no history, by
/// as many tasks as the workloads have workers.
fn bench_http_floor(runtime: &tokio::runtime::Runtime) -> Result<(), String> {
    let broker = start_trivial_broker()?;
    let connector = connector_of(broker.address)?;
    let cpu_before = cpu_seconds("/proc/self/stat");
    let started = Instant::now();
    let requests = runtime.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for worker in 0..CONCURRENCY {
            let mut client: BrokerClient = connector.client(Duration::from_secs(5), worker);
            tasks.spawn(async move {
                let mut sent = 0i64;
                while started.elapsed() < RUN_FOR {
                    let value = json!(worker as i64 + sent * CONCURRENCY as i64);
                    client
                        .produce(0, 0, &value, sut::Acks::All)
                        .await
                        .map_err(|e| e.to_string())?;
                    sent += 1;
                }
                Ok::<u64, String>(sent as u64)
            });
        }
        let mut total = 0;
        while let Some(done) = tasks.join_next().await {
            total += done.map_err(|e| e.to_string())??;
        }
        Ok::<u64, String>(total)
    })?;
    let elapsed = started.elapsed().as_secs_f64();
    let _ = broker.stop.send(());
    let broker_cpu = broker
        .thread
        .join()
        .map_err(|_| "the broker thread panicked".to_string())?;
    let client_cpu = cpu_seconds("/proc/self/stat") - cpu_before - broker_cpu;
    let requests = requests.max(1) as f64;
    println!(
        "http-floor: {:.0} bare produces/s; CPU per request: broker client {:.0} us, trivial broker {:.0} us",
        requests / elapsed,
        client_cpu * 1e6 / requests,
        broker_cpu * 1e6 / requests,
    );
    Ok(())
}

/// [`bench_http_floor`] with reqwest instead of the workers' client: what the transport
/// the workers used before costs.
fn bench_reqwest_floor(runtime: &tokio::runtime::Runtime) -> Result<(), String> {
    let broker = start_trivial_broker()?;
    let url = reqwest::Url::parse(&format!(
        "http://{}/v1/topics/{TOPIC}/partitions/0/records",
        broker.address
    ))
    .map_err(|e| e.to_string())?;
    let cpu_before = cpu_seconds("/proc/self/stat");
    let started = Instant::now();
    let requests = runtime.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for worker in 0..CONCURRENCY as i64 {
            let url = url.clone();
            tasks.spawn(async move {
                let client = reqwest::Client::builder()
                    .no_proxy()
                    .tcp_nodelay(true)
                    .timeout(Duration::from_secs(5))
                    .build()
                    .map_err(|e| e.to_string())?;
                let mut sent = 0i64;
                while started.elapsed() < RUN_FOR {
                    let body = json!({"value": worker + sent * CONCURRENCY as i64, "acks": "all"});
                    let response = client.post(url.clone()).json(&body).send().await;
                    let response = response.map_err(|e| e.to_string())?;
                    response.bytes().await.map_err(|e| e.to_string())?;
                    sent += 1;
                }
                Ok::<u64, String>(sent as u64)
            });
        }
        let mut total = 0;
        while let Some(done) = tasks.join_next().await {
            total += done.map_err(|e| e.to_string())??;
        }
        Ok::<u64, String>(total)
    })?;
    let elapsed = started.elapsed().as_secs_f64();
    let _ = broker.stop.send(());
    let broker_cpu = broker
        .thread
        .join()
        .map_err(|_| "the broker thread panicked".to_string())?;
    let client_cpu = cpu_seconds("/proc/self/stat") - cpu_before - broker_cpu;
    let requests = requests.max(1) as f64;
    println!(
        "reqwest-floor: {:.0} bare produces/s; CPU per request: reqwest client {:.0} us, trivial broker {:.0} us",
        requests / elapsed,
        client_cpu * 1e6 / requests,
        broker_cpu * 1e6 / requests,
    );
    Ok(())
}

/// The recorder alone: two threads recording typical log operations (appends, and reads
/// of 30 records) as fast as they can.
fn bench_recorder() -> Result<(), String> {
    const THREADS: u64 = 2;
    const OPS_PER_THREAD: u64 = 200_000;
    let path = scratch("recorder.jsonl")?;
    let recorder = Recorder::create(&path).map_err(|e| e.to_string())?;
    let started = Instant::now();
    let results: Vec<Result<(), String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let recorder = recorder.clone();
                scope.spawn(move || -> Result<(), String> {
                    for i in 0..OPS_PER_THREAD {
                        let value = (i * THREADS + t) as i64;
                        let key = format!("{TOPIC}/{}", i % u64::from(PARTITIONS));
                        if i % 2 == 0 {
                            let inv = recorder
                                .invoke(
                                    t,
                                    "append",
                                    json!({"key": key, "value": value}),
                                    Some("n1"),
                                )
                                .map_err(|e| e.to_string())?;
                            let done = json!({"key": key, "value": value, "offset": i});
                            recorder
                                .complete(inv, Outcome::Ok, done, None)
                                .map_err(|e| e.to_string())?;
                        } else {
                            let invoke = json!({"key": key, "offset": i});
                            let inv = recorder
                                .invoke(t, "read", invoke, Some("n1"))
                                .map_err(|e| e.to_string())?;
                            let records: Vec<Value> =
                                (0..30).map(|o| json!([i + o, value + o as i64])).collect();
                            let done = json!({"key": key, "offset": i, "records": records,
                                "high_watermark": i + 30, "log_start_offset": 0, "max": 100});
                            recorder
                                .complete(inv, Outcome::Ok, done, None)
                                .map_err(|e| e.to_string())?;
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a thread panicked".into())))
            .collect()
    });
    results.into_iter().collect::<Result<Vec<()>, String>>()?;
    let counts = recorder.finish().map_err(|e| e.to_string())?;
    let elapsed = started.elapsed().as_secs_f64();
    let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let _ = std::fs::remove_file(&path);
    let ops = (THREADS * OPS_PER_THREAD) as f64;
    println!(
        "recorder: {} ops ({} entries, {:.1} MiB) recorded by {THREADS} threads in {elapsed:.2} s = {:.0} ops/s, no network",
        ops,
        counts.entries,
        bytes as f64 / (1024.0 * 1024.0),
        ops / elapsed,
    );
    Ok(())
}

fn main() {
    // `cargo bench` passes `--bench`; other words choose the scenarios.
    let chosen: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted = |name: &str| chosen.is_empty() || chosen.iter().any(|c| c == name);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("cannot start a tokio runtime: {e}");
            std::process::exit(1);
        }
    };
    let mut results = Vec::new();
    if wanted("recorder") {
        results.push(("recorder", bench_recorder()));
    }
    if wanted("http-floor") {
        results.push(("http-floor", bench_http_floor(&runtime)));
    }
    if chosen.iter().any(|c| c == "reqwest-floor") {
        results.push(("reqwest-floor", bench_reqwest_floor(&runtime)));
    }
    for workload in [WorkloadKind::Log, WorkloadKind::Register] {
        if wanted(workload.name()) {
            results.push((workload.name(), bench_workload(&runtime, workload)));
        }
    }
    // The scenarios remove their histories; the scratch folder goes too.
    if let Some(dir) = scratch("x")
        .ok()
        .and_then(|path| path.parent().map(std::path::Path::to_path_buf))
    {
        let _ = std::fs::remove_dir_all(dir);
    }
    for (name, result) in results {
        if let Err(e) = result {
            eprintln!("{name}: {e}");
            std::process::exit(1);
        }
    }
}
