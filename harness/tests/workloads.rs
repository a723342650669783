//! The workers, workloads, recorder and final reads against fake brokers in this process
//! (axum on 127.0.0.1:0), judged by the real checkers.
//!
//! The fake cluster has three nodes (broker ids 1, 2, 3) sharing one state. Modes:
//! - `Correct`: a correct single leader per partition; with `move_leader_every`, the
//!   leadership of every partition moves to the next node after that many produces, and
//!   the old leader answers `not_leader` with a hint, as the broker does.
//! - `Lossy`: correct, except that one acknowledged append is never stored.
//! - `Stale`: correct writes, but reads see the log only up to a multiple of 8 records.
//! - `Errors`: node 1 leads partition 0 and answers by a script that cycles through every
//!   error class; node 2 "leads" partition 1 and closes each connection after reading the
//!   request; nothing listens at node 3, which "leads" partition 2. `heal` ends all that.
//!
//! Batches (`{"values": [...]}`) are appended together and answered with their offsets;
//! in `Errors` mode they follow the same script as single appends.

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use checkers::linear::{check_linearizable, LinearOptions, ModelKind};
use checkers::log::{check_log, AnomalyKind};
use checkers::Verdict;
use driver::{BrokerConnector, ClientNode};
use history::{pair, read_history, History, OpType, Outcome, Process};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use workloads::recorder::Recorder;
use workloads::{
    final_reads, run_workload, stop_signal, Consistency, Target, WorkloadKind, WorkloadOptions,
};

const TOPIC: &str = "t";
const NODES: u32 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Correct { move_leader_every: Option<u64> },
    Lossy { lose_produce: u64 },
    Stale,
    Errors,
}

struct FakeState {
    /// Per partition; `None` is an acknowledged append that was lost.
    logs: Vec<Vec<Option<Value>>>,
    leaders: Vec<u32>,
    produces: u64,
    leader_moves: u64,
    produce_script: u64,
    read_script: u64,
    healed: bool,
    /// The values of every batch request that reached a leader, in arrival order.
    batches: Vec<Vec<Value>>,
}

struct Fake {
    mode: Mode,
    state: Mutex<FakeState>,
    /// Connections the resetting node (Errors mode) accepted and closed.
    resets: AtomicU64,
}

impl Fake {
    fn lock(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn error(status: StatusCode, code: &str, leader: Option<u32>) -> Response {
    (
        status,
        Json(json!({"error": code, "message": format!("fake says {code}"), "leader": leader})),
    )
        .into_response()
}

type NodeState = (Arc<Fake>, u32);

async fn metadata(State((fake, _)): State<NodeState>) -> Response {
    let state = fake.lock();
    let partitions: Vec<Value> = state
        .leaders
        .iter()
        .enumerate()
        .map(|(p, leader)| {
            json!({"partition": p, "replicas": [1, 2, 3], "leader": leader, "leader_epoch": 1,
                   "isr": [1, 2, 3], "controller_epoch": 1, "version": 1})
        })
        .collect();
    Json(json!({
        "brokers": (1..=NODES).map(|id| json!({"id": id})).collect::<Vec<_>>(),
        "controller": {"id": 1, "epoch": 1},
        "metadata_leader": 1,
        "topics": [{"topic": TOPIC, "partitions": partitions}],
    }))
    .into_response()
}

/// What a fake node does with a request: answer now, or never within a client's timeout.
enum Answer {
    Now(Response),
    Hang,
}

/// Longer than any client's timeout in these tests.
const HANG: Duration = Duration::from_secs(30);

async fn answer(answer: Answer) -> Response {
    match answer {
        Answer::Now(response) => response,
        Answer::Hang => {
            tokio::time::sleep(HANG).await;
            error(StatusCode::GATEWAY_TIMEOUT, "timeout", None)
        }
    }
}

async fn produce(
    State((fake, me)): State<NodeState>,
    UrlPath((topic, partition)): UrlPath<(String, u32)>,
    body: Bytes,
) -> Response {
    let decided = match serde_json::from_slice::<Value>(&body) {
        Ok(body) => produce_now(&fake, me, &topic, partition, &body),
        Err(_) => Answer::Now(error(StatusCode::BAD_REQUEST, "bad_request", None)),
    };
    answer(decided).await
}

fn produce_now(fake: &Fake, me: u32, topic: &str, partition: u32, body: &Value) -> Answer {
    assert_eq!(body["acks"], json!("all"), "appends must ask for acks=all");
    assert!(body["timeout_ms"].as_u64().is_some_and(|ms| ms > 0));
    let batch = body.get("values").and_then(Value::as_array).cloned();
    let values = batch.clone().unwrap_or_else(|| vec![body["value"].clone()]);
    let p = partition as usize;
    let mut state = fake.lock();
    if topic != TOPIC || p >= state.logs.len() {
        return Answer::Now(error(
            StatusCode::NOT_FOUND,
            "unknown_topic_or_partition",
            None,
        ));
    }
    let leader = state.leaders[p];
    if leader != me {
        return Answer::Now(error(
            StatusCode::MISDIRECTED_REQUEST,
            "not_leader",
            Some(leader),
        ));
    }
    let offset = state.logs[p].len();
    if let Some(batch) = &batch {
        state.batches.push(batch.clone());
    }
    let append_all = |state: &mut FakeState| {
        for value in &values {
            state.logs[p].push(Some(value.clone()));
        }
    };
    if fake.mode == Mode::Errors && !state.healed && p == 0 {
        let step = state.produce_script % 10;
        state.produce_script += 1;
        let unavailable = StatusCode::SERVICE_UNAVAILABLE;
        match step {
            1 => {
                return Answer::Now(error(
                    StatusCode::MISDIRECTED_REQUEST,
                    "not_leader",
                    Some(1),
                ))
            }
            2 => return Answer::Now(error(unavailable, "not_enough_replicas", Some(1))),
            3 => {
                append_all(&mut state);
                return Answer::Now(error(StatusCode::GATEWAY_TIMEOUT, "timeout", Some(1)));
            }
            4 => {
                return Answer::Now(error(
                    unavailable,
                    "not_enough_replicas_after_append",
                    Some(1),
                ))
            }
            5 => {
                append_all(&mut state);
                return Answer::Now(error(unavailable, "leadership_lost", None));
            }
            6 => {
                return Answer::Now(error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "storage_error",
                    None,
                ))
            }
            7 => {
                append_all(&mut state);
                return Answer::Hang;
            }
            8 => return Answer::Now((StatusCode::INTERNAL_SERVER_ERROR, "oops").into_response()),
            9 => {
                append_all(&mut state);
                return Answer::Now((StatusCode::OK, "{\"offs").into_response());
            }
            _ => {}
        }
    }
    state.produces += 1;
    let lose = matches!(fake.mode, Mode::Lossy { lose_produce } if lose_produce == state.produces);
    for (i, value) in values.iter().enumerate() {
        let lost = lose && i == 0;
        state.logs[p].push(if lost { None } else { Some(value.clone()) });
    }
    if let Mode::Correct {
        move_leader_every: Some(every),
    } = fake.mode
    {
        if state.produces.is_multiple_of(every) {
            state.leader_moves += 1;
            for leader in &mut state.leaders {
                *leader = *leader % NODES + 1;
            }
        }
    }
    let answer = match batch {
        Some(batch) => json!({"offsets": (offset..offset + batch.len()).collect::<Vec<_>>()}),
        None => json!({"offset": offset}),
    };
    Answer::Now(Json(answer).into_response())
}

async fn read(
    State((fake, me)): State<NodeState>,
    UrlPath((topic, partition)): UrlPath<(String, u32)>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let decided = read_now(&fake, me, &topic, partition, &query);
    answer(decided).await
}

fn read_now(
    fake: &Fake,
    me: u32,
    topic: &str,
    partition: u32,
    query: &HashMap<String, String>,
) -> Answer {
    let p = partition as usize;
    let offset: usize = match query.get("offset").map(|o| o.parse()) {
        None => 0,
        Some(Ok(o)) => o,
        Some(Err(_)) => return Answer::Now(error(StatusCode::BAD_REQUEST, "bad_request", None)),
    };
    let max: usize = match query.get("max").map(|m| m.parse()) {
        None => 1000,
        Some(Ok(m)) if (1..=10_000).contains(&m) => m,
        _ => return Answer::Now(error(StatusCode::BAD_REQUEST, "bad_request", None)),
    };
    let mut state = fake.lock();
    if topic != TOPIC || p >= state.logs.len() {
        return Answer::Now(error(
            StatusCode::NOT_FOUND,
            "unknown_topic_or_partition",
            None,
        ));
    }
    let leader = state.leaders[p];
    if leader != me {
        return Answer::Now(error(
            StatusCode::MISDIRECTED_REQUEST,
            "not_leader",
            Some(leader),
        ));
    }
    if fake.mode == Mode::Errors && !state.healed && p == 0 {
        let step = state.read_script % 7;
        state.read_script += 1;
        let unavailable = StatusCode::SERVICE_UNAVAILABLE;
        match step {
            1 => {
                return Answer::Now(error(
                    StatusCode::MISDIRECTED_REQUEST,
                    "not_leader",
                    Some(1),
                ))
            }
            2 => return Answer::Now(error(unavailable, "not_ready", Some(1))),
            3 => return Answer::Now(error(unavailable, "metadata_unavailable", Some(1))),
            4 => {
                return Answer::Now(error(
                    StatusCode::RANGE_NOT_SATISFIABLE,
                    "offset_out_of_range",
                    None,
                ))
            }
            5 => return Answer::Hang,
            6 => return Answer::Now((StatusCode::OK, "[").into_response()),
            _ => {}
        }
    }
    let log = &state.logs[p];
    let visible = match fake.mode {
        Mode::Stale => log.len() / 8 * 8,
        _ => log.len(),
    };
    if offset > visible {
        return Answer::Now(error(
            StatusCode::RANGE_NOT_SATISFIABLE,
            "offset_out_of_range",
            None,
        ));
    }
    let records: Vec<Value> = (offset..visible)
        .filter_map(|o| log[o].as_ref().map(|v| json!({"offset": o, "value": v})))
        .take(max)
        .collect();
    Answer::Now(
        Json(json!({
            "records": records,
            "high_watermark": visible,
            "log_start_offset": 0,
            "leader_epoch": 1,
            "max": max,
        }))
        .into_response(),
    )
}

/// A node that reads each request and closes the connection without answering.
async fn closing_node(listener: TcpListener, fake: Arc<Fake>) {
    while let Ok((stream, _)) = listener.accept().await {
        fake.resets.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            let mut buffer = [0u8; 4096];
            if stream.readable().await.is_ok() {
                let _ = stream.try_read(&mut buffer);
            }
            drop(stream);
        });
    }
}

struct FakeCluster {
    fake: Arc<Fake>,
    /// The workers' clients of the fake nodes (our broker's client).
    connector: Arc<BrokerConnector>,
    tasks: Vec<JoinHandle<()>>,
}

impl FakeCluster {
    async fn start(mode: Mode, partitions: u32) -> FakeCluster {
        let leaders = (0..partitions)
            .map(|p| match mode {
                Mode::Errors => (p % NODES) + 1,
                _ => 1,
            })
            .collect();
        let fake = Arc::new(Fake {
            mode,
            state: Mutex::new(FakeState {
                logs: vec![Vec::new(); partitions as usize],
                leaders,
                produces: 0,
                leader_moves: 0,
                produce_script: 0,
                read_script: 0,
                healed: false,
                batches: Vec::new(),
            }),
            resets: AtomicU64::new(0),
        });
        let mut nodes = Vec::new();
        let mut tasks = Vec::new();
        for id in 1..=NODES {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let address = listener.local_addr().expect("address");
            let task = match (mode, id) {
                (Mode::Errors, 2) => tokio::spawn(closing_node(listener, Arc::clone(&fake))),
                // Nothing listens: connections are refused.
                (Mode::Errors, 3) => {
                    drop(listener);
                    tokio::spawn(async {})
                }
                _ => {
                    let router = Router::new()
                        .route("/v1/metadata", get(metadata))
                        .route(
                            "/v1/topics/{topic}/partitions/{partition}/records",
                            post(produce).get(read),
                        )
                        .with_state((Arc::clone(&fake), id));
                    tokio::spawn(async move {
                        let _ = axum::serve(listener, router).await;
                    })
                }
            };
            tasks.push(task);
            nodes.push(ClientNode {
                broker_id: id,
                url: format!("http://{address}"),
            });
        }
        let names = (1..=NODES).map(|id| format!("n{id}")).collect();
        let target = Target::new(names, TOPIC, partitions).expect("target");
        let connector = BrokerConnector::new(target, nodes).expect("connector");
        FakeCluster {
            fake,
            connector: Arc::new(connector),
            tasks,
        }
    }

    /// Errors mode: every partition led by node 1, no more scripted errors.
    fn heal(&self) {
        let mut state = self.fake.lock();
        state.healed = true;
        for leader in &mut state.leaders {
            *leader = 1;
        }
    }
}

impl Drop for FakeCluster {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// A scratch folder for one test, removed when the test is done with it.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("harness-workloads-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Scratch(dir)
    }

    fn history(&self) -> PathBuf {
        self.0.join("history.jsonl")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn options(workload: WorkloadKind, seed: u64) -> WorkloadOptions {
    WorkloadOptions {
        concurrency: 4,
        rate: 0.0,
        time_limit: Duration::from_secs(60),
        ops_per_worker: Some(120),
        request_timeout: Duration::from_secs(5),
        read_max: 20,
        ..WorkloadOptions::new(workload, seed)
    }
}

/// Runs the workload to its op limit, then the final reads; the history read back.
async fn run(cluster: &FakeCluster, options: &WorkloadOptions, path: &Path) -> History {
    let recorder = Recorder::create(path).expect("recorder");
    let (_stopper, stop) = stop_signal();
    let stats = run_workload(&*cluster.connector, options, &recorder, &stop)
        .await
        .expect("workload runs");
    let per_worker = options.ops_per_worker.expect("an op limit");
    if options.batch_fraction == 0.0 {
        assert_eq!(stats.ops, per_worker * options.concurrency as u64);
    } else {
        // A batch is one planned operation and one recorded operation per value.
        assert!(stats.ops > per_worker * options.concurrency as u64);
    }
    let finals = final_reads(
        &*cluster.connector,
        options,
        &recorder,
        Duration::from_secs(20),
    )
    .await
    .expect("final reads run");
    assert!(finals.complete(), "{finals:?}");
    let counts = recorder.finish().expect("history finished");
    let (history, _) = read_history(path, None).expect("history reads back");
    assert_eq!(history.len() as u64, counts.entries);
    assert_eq!(history.torn_tail, None);
    for (i, op) in history.ops.iter().enumerate() {
        assert_eq!(op.index, i as u64);
    }
    assert!(history.ops.windows(2).all(|w| w[0].time <= w[1].time));
    let operations = pair(&history).expect("history pairs");
    assert!(operations.iter().all(|o| o.completion.is_some()));
    history
}

fn keys_of(value: &Value) -> BTreeSet<&str> {
    value
        .as_object()
        .map(|m| m.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

fn set(keys: &[&'static str]) -> BTreeSet<&'static str> {
    keys.iter().copied().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_on_a_correct_leader_is_valid_and_shaped_as_designed() {
    let cluster = FakeCluster::start(
        Mode::Correct {
            move_leader_every: Some(40),
        },
        3,
    )
    .await;
    let scratch = Scratch::new("log-correct");
    let path = scratch.history();
    let history = run(&cluster, &options(WorkloadKind::Log, 1), &path).await;
    let report = check_log(&history).expect("well-formed log history");
    assert_eq!(report.verdict, Verdict::Valid, "{:#?}", report.anomalies);
    assert!(report.stats.appends_ok > 100, "{:?}", report.stats);
    assert!(report.stats.reads_ok > 100, "{:?}", report.stats);
    assert!(report.stats.final_reads_marked);
    assert_eq!(report.stats.values_read, report.stats.appends_ok);
    assert_eq!(report.stats.appends_info, 0, "{:?}", report.stats);
    // Leadership moved, the workers were told and followed the hints.
    assert!(cluster.fake.lock().leader_moves >= 5);
    let not_leader = history
        .ops
        .iter()
        .filter(|op| op.error == Some(json!("not_leader")))
        .count();
    assert!(not_leader > 0);
    assert!(history
        .ops
        .iter()
        .filter(|op| op.error == Some(json!("not_leader")))
        .all(|op| op.kind == OpType::Fail));
    // The shapes of DESIGN.md §4.
    let mut seen = HashSet::new();
    for op in &history.ops {
        let shape = keys_of(&op.value);
        let marked_final = op.value.get("final") == Some(&json!(true));
        let expected = match (op.f.as_str(), op.kind, marked_final) {
            ("append", OpType::Ok, _) => set(&["key", "value", "offset"]),
            ("append", _, _) => set(&["key", "value"]),
            ("read", OpType::Ok, false) => set(&[
                "key",
                "offset",
                "records",
                "high_watermark",
                "log_start_offset",
                "max",
            ]),
            ("read", _, false) => set(&["key", "offset"]),
            ("read", OpType::Ok, true) => set(&[
                "key",
                "offset",
                "consistency",
                "final",
                "records",
                "high_watermark",
                "log_start_offset",
                "max",
            ]),
            ("read", _, true) => set(&["key", "offset", "consistency", "final"]),
            (f, kind, _) => panic!("unexpected {f} {kind}"),
        };
        assert_eq!(shape, expected, "{op:?}");
        assert!(matches!(op.node.as_deref(), Some("n1" | "n2" | "n3")));
        seen.insert((op.f.clone(), op.kind, marked_final));
    }
    assert!(seen.contains(&("read".to_string(), OpType::Ok, true)));
    // Every final read is linearizable and the last of each key was not cut short.
    let read_ok = history
        .ops
        .iter()
        .find(|op| op.f == "read" && op.kind == OpType::Ok)
        .expect("a read");
    assert!(read_ok.value["records"].is_array());
    assert_eq!(read_ok.value["max"], json!(20));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_on_a_lossy_leader_shows_the_lost_write() {
    let cluster = FakeCluster::start(Mode::Lossy { lose_produce: 30 }, 3).await;
    let scratch = Scratch::new("log-lossy");
    let path = scratch.history();
    let history = run(&cluster, &options(WorkloadKind::Log, 2), &path).await;
    let report = check_log(&history).expect("well-formed log history");
    assert_eq!(report.verdict, Verdict::Invalid);
    assert!(
        report.found(AnomalyKind::LostWrite) >= 1,
        "{:#?}",
        report.anomalies
    );
    assert!(report
        .anomalies
        .iter()
        .any(|a| a.kind == AnomalyKind::LostWrite && a.counts_against_validity));
}

fn register_check(history: &History) -> checkers::linear::LinearReport {
    let mut options = LinearOptions::new(ModelKind::Register);
    options.time_limit = Some(Duration::from_secs(60));
    check_linearizable(history, &options).expect("well-formed register history")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_on_a_correct_leader_is_linearizable() {
    let cluster = FakeCluster::start(
        Mode::Correct {
            move_leader_every: Some(40),
        },
        2,
    )
    .await;
    let scratch = Scratch::new("register-correct");
    let path = scratch.history();
    let options = WorkloadOptions {
        ops_per_worker: Some(100),
        ..options(WorkloadKind::Register, 3)
    };
    let history = run(&cluster, &options, &path).await;
    let report = register_check(&history);
    let failure = report.failure.as_ref().map(|f| &f.unplaced_description);
    assert_eq!(report.verdict, Verdict::Valid, "{failure:?}");
    assert_eq!(report.partitions, 2);
    // Shapes: {"key", "value"} everywhere but acknowledged writes, which also say where
    // the log put them ("offset"); reads invoked with null.
    let mut reads_with_values = 0;
    for op in &history.ops {
        if (op.f.as_str(), op.kind) == ("write", OpType::Ok) {
            assert_eq!(
                keys_of(&op.value),
                set(&["key", "value", "offset"]),
                "{op:?}"
            );
            assert!(op.value["offset"].is_u64(), "{op:?}");
        } else {
            assert_eq!(keys_of(&op.value), set(&["key", "value"]), "{op:?}");
        }
        assert!(op.value["key"] == json!("t/0") || op.value["key"] == json!("t/1"));
        match (op.f.as_str(), op.kind) {
            ("read", OpType::Invoke) => assert_eq!(op.value["value"], Value::Null),
            ("read", OpType::Ok) => reads_with_values += usize::from(op.value["value"].is_i64()),
            ("write", _) => assert!(op.value["value"].is_i64()),
            ("read", _) => {}
            (f, _) => panic!("unexpected f {f}"),
        }
    }
    assert!(
        reads_with_values > 50,
        "{reads_with_values} reads saw a value"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_on_a_stale_leader_is_not_linearizable() {
    let cluster = FakeCluster::start(Mode::Stale, 2).await;
    let scratch = Scratch::new("register-stale");
    let path = scratch.history();
    let history = run(&cluster, &options(WorkloadKind::Register, 4), &path).await;
    let report = register_check(&history);
    assert_eq!(report.verdict, Verdict::Invalid, "{:?}", report.reason);
    assert!(report.failure.is_some());
}

/// How checking.md classifies each error this test's fake produces.
fn expected_outcome(f: &str, error: &str) -> Outcome {
    if f == "read" {
        return Outcome::Fail;
    }
    match error {
        "not_leader" | "not_enough_replicas" | "connect_failed" => Outcome::Fail,
        "timeout"
        | "not_enough_replicas_after_append"
        | "leadership_lost"
        | "storage_error"
        | "client_timeout"
        | "connection_error"
        | "http_500"
        | "bad_response" => Outcome::Info,
        other => panic!("the fake never answers {other}"),
    }
}

/// Polls `condition` every 20 ms until it holds or `timeout` passes.
async fn wait_until(timeout: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_classified_and_info_moves_the_worker_to_a_new_process() {
    let cluster = FakeCluster::start(Mode::Errors, 3).await;
    let scratch = Scratch::new("errors");
    let path = scratch.history();
    let recorder = Recorder::create(&path).expect("recorder");
    let concurrency = 3;
    let options = WorkloadOptions {
        concurrency,
        rate: 0.0,
        time_limit: Duration::from_secs(60),
        ops_per_worker: None,
        request_timeout: Duration::from_millis(300),
        read_max: 10,
        read_consistency: Consistency::Linearizable,
        ..WorkloadOptions::new(WorkloadKind::Log, 5)
    };
    let (stopper, stop) = stop_signal();
    let run = {
        let (connector, options, recorder) = (
            Arc::clone(&cluster.connector),
            options.clone(),
            recorder.clone(),
        );
        tokio::spawn(async move { run_workload(&*connector, &options, &recorder, &stop).await })
    };
    // Two whole cycles of both scripts, and several closed connections.
    wait_until(Duration::from_secs(30), "every error class", || {
        let state = cluster.fake.lock();
        state.produce_script >= 20
            && state.read_script >= 14
            && cluster.fake.resets.load(Ordering::Relaxed) >= 6
    })
    .await;
    stopper.stop();
    let stats = run.await.expect("run task").expect("workload runs");
    assert!(
        stats.info > 0 && stats.fail > 0 && stats.ok > 0,
        "{stats:?}"
    );
    assert_eq!(stats.processes, concurrency as u64 + stats.info);
    cluster.heal();
    let finals = final_reads(
        &*cluster.connector,
        &options,
        &recorder,
        Duration::from_secs(20),
    )
    .await
    .expect("final reads");
    assert!(finals.complete(), "{finals:?}");
    recorder.finish().expect("finished");
    let (history, _) = read_history(&path, None).expect("history reads back");
    pair(&history).expect("history pairs");

    // Each completion's type is what checking.md says for its error.
    let mut codes: BTreeMap<(String, String), usize> = BTreeMap::new();
    for op in history.ops.iter().filter(|op| op.kind != OpType::Invoke) {
        let expected_kind = match &op.error {
            None => OpType::Ok,
            Some(error) => {
                let error = error.as_str().expect("errors are strings");
                *codes.entry((op.f.clone(), error.to_string())).or_default() += 1;
                match expected_outcome(&op.f, error) {
                    Outcome::Fail => OpType::Fail,
                    Outcome::Info | Outcome::Ok => OpType::Info,
                }
            }
        };
        assert_eq!(op.kind, expected_kind, "{op:?}");
    }
    let seen = |f: &str, code: &str| codes.contains_key(&(f.to_string(), code.to_string()));
    for code in [
        "not_leader",
        "not_enough_replicas",
        "connect_failed",
        "timeout",
        "not_enough_replicas_after_append",
        "leadership_lost",
        "storage_error",
        "client_timeout",
        "connection_error",
        "http_500",
        "bad_response",
    ] {
        assert!(
            seen("append", code),
            "no append ended with {code}: {codes:?}"
        );
    }
    for code in [
        "not_leader",
        "not_ready",
        "metadata_unavailable",
        "offset_out_of_range",
        "client_timeout",
        "bad_response",
        "connection_error",
        "connect_failed",
    ] {
        assert!(seen("read", code), "no read ended with {code}: {codes:?}");
    }

    // After an info, the process never invokes again; its worker goes on as p + 3.
    let workers: Vec<_> = history
        .ops
        .iter()
        .filter(|op| op.value.get("final").is_none())
        .collect();
    let mut continued = 0;
    for (i, op) in workers.iter().enumerate() {
        let Process::Client(p) = op.process else {
            continue;
        };
        if op.kind != OpType::Info {
            continue;
        }
        let later_invokes = || {
            workers[i + 1..]
                .iter()
                .filter(|o| o.kind == OpType::Invoke)
                .filter_map(|o| match o.process {
                    Process::Client(q) => Some(q),
                    Process::Nemesis => None,
                })
        };
        assert!(
            later_invokes().all(|q| q != p),
            "process {p} invoked after its info"
        );
        if let Some(next) =
            later_invokes().find(|q| q % concurrency as u64 == p % concurrency as u64)
        {
            assert_eq!(next, p + concurrency as u64);
            continued += 1;
        }
    }
    assert!(continued >= 5, "{continued} continuations");

    // Sound classification: the history, indeterminate appends included, is valid.
    let report = check_log(&history).expect("well-formed log history");
    assert_eq!(report.verdict, Verdict::Valid, "{:#?}", report.anomalies);
    assert!(report.stats.values_info_seen > 0, "{:?}", report.stats);
}

/// The invocations of each worker (process mod concurrency), as (f, key, appended value),
/// leaving out what depends on answers (read offsets).
fn planned_by_worker(
    history: &History,
    concurrency: u64,
) -> BTreeMap<u64, Vec<(String, Value, Value)>> {
    let mut by_worker: BTreeMap<u64, Vec<(String, Value, Value)>> = BTreeMap::new();
    for op in history.ops.iter().filter(|op| op.kind == OpType::Invoke) {
        let Process::Client(p) = op.process else {
            continue;
        };
        if op.value.get("final").is_some() {
            continue;
        }
        let value = if op.f == "append" {
            op.value["value"].clone()
        } else {
            Value::Null
        };
        by_worker.entry(p % concurrency).or_default().push((
            op.f.clone(),
            op.value["key"].clone(),
            value,
        ));
    }
    by_worker
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_seed_gives_the_same_operations_per_worker() {
    let options = |seed| WorkloadOptions {
        concurrency: 3,
        ops_per_worker: Some(60),
        ..options(WorkloadKind::Log, seed)
    };
    let mut runs = Vec::new();
    for (name, seed) in [("seed-a", 11), ("seed-b", 11), ("seed-c", 12)] {
        let cluster = FakeCluster::start(
            Mode::Correct {
                move_leader_every: Some(25),
            },
            3,
        )
        .await;
        let scratch = Scratch::new(name);
        let history = run(&cluster, &options(seed), &scratch.history()).await;
        runs.push(planned_by_worker(&history, 3));
    }
    assert_eq!(runs[0].len(), 3);
    for (worker, ops) in &runs[0] {
        assert_eq!(ops.len(), 60);
        assert_eq!(Some(ops), runs[1].get(worker), "worker {worker}");
        assert_ne!(Some(ops), runs[2].get(worker), "worker {worker}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_reads_back_after_the_recorder_is_dropped_mid_run() {
    let cluster = FakeCluster::start(
        Mode::Correct {
            move_leader_every: None,
        },
        2,
    )
    .await;
    let scratch = Scratch::new("dropped");
    let path = scratch.history();
    let recorder = Recorder::create(&path).expect("recorder");
    let options = WorkloadOptions {
        ops_per_worker: None,
        ..options(WorkloadKind::Log, 6)
    };
    let (_stopper, stop) = stop_signal();
    let run = {
        let (connector, options, recorder) = (
            Arc::clone(&cluster.connector),
            options.clone(),
            recorder.clone(),
        );
        tokio::spawn(async move { run_workload(&*connector, &options, &recorder, &stop).await })
    };
    wait_until(Duration::from_secs(30), "200 ok ops", || {
        recorder.counts().total().ok >= 200
    })
    .await;
    // The run is cut off mid-operation: its future and every worker task are dropped.
    run.abort();
    assert!(run.await.is_err_and(|e| e.is_cancelled()));
    let recorded = recorder.counts().entries;
    drop(recorder);
    let mut history = History::default();
    wait_until(
        Duration::from_secs(10),
        "the recorded entries in the file",
        || {
            history = read_history(&path, None).expect("history reads back").0;
            history.len() as u64 >= recorded
        },
    )
    .await;
    assert_eq!(history.torn_tail, None);
    let operations = pair(&history).expect("history pairs");
    assert!(operations.len() >= 200);
    let report = check_log(&history).expect("well-formed log history");
    assert_eq!(report.verdict, Verdict::Valid, "{:#?}", report.anomalies);
}

/// A worker's appends in invocation order: (process, value) of each invoke, and its
/// completion (type, error, offset).
type Append = (u64, i64, OpType, Option<Value>, Option<u64>);

fn appends_by_worker(history: &History, concurrency: u64) -> BTreeMap<u64, Vec<Append>> {
    let operations = pair(history).expect("history pairs");
    let mut by_worker: BTreeMap<u64, Vec<Append>> = BTreeMap::new();
    for operation in operations {
        let invoke = &history.ops[operation.invoke];
        let Process::Client(p) = invoke.process else {
            continue;
        };
        if invoke.f != "append" || invoke.value.get("value").is_none() {
            continue;
        }
        let Some(value) = invoke.value["value"].as_i64() else {
            continue;
        };
        if value < 0 {
            continue;
        }
        let done = &history.ops[operation.completion.expect("completed")];
        by_worker.entry(p % concurrency).or_default().push((
            p,
            value,
            done.kind,
            done.error.clone(),
            done.value["offset"].as_u64(),
        ));
    }
    by_worker
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_and_hot_partitions_record_one_append_per_value_and_stay_valid() {
    let cluster = FakeCluster::start(
        Mode::Correct {
            move_leader_every: Some(40),
        },
        4,
    )
    .await;
    let scratch = Scratch::new("log-batches");
    let options = WorkloadOptions {
        hot_partitions: true,
        batch_fraction: 0.4,
        batch_max: 6,
        ..options(WorkloadKind::Log, 21)
    };
    let history = run(&cluster, &options, &scratch.history()).await;
    let report = check_log(&history).expect("well-formed log history");
    assert_eq!(report.verdict, Verdict::Valid, "{:#?}", report.anomalies);

    // Every value is appended once, in one append op of its own.
    let mut values = HashSet::new();
    let mut per_key: BTreeMap<String, u64> = BTreeMap::new();
    for op in history
        .ops
        .iter()
        .filter(|op| op.f == "append" && op.kind == OpType::Invoke)
    {
        let value = op.value["value"].as_i64().expect("an integer");
        if value >= 0 {
            assert!(values.insert(value), "{value} appended twice");
            *per_key
                .entry(op.value["key"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
    }
    // Each batch the fake received is that many appends of its values, by processes
    // p, p + 4, p + 8, ... of one worker, completed ok at consecutive offsets.
    let batches = cluster.fake.lock().batches.clone();
    assert!(batches.len() > 20, "{} batches", batches.len());
    assert!(batches.iter().all(|b| (2..=6).contains(&b.len())));
    let appends = appends_by_worker(&history, 4);
    for batch in &batches {
        let first = batch[0].as_i64().unwrap();
        let ops = &appends[&((first % 4) as u64)];
        let at = ops
            .iter()
            .position(|a| a.1 == first)
            .expect("batch recorded");
        let recorded = &ops[at..at + batch.len()];
        for (i, (process, value, kind, error, offset)) in recorded.iter().enumerate() {
            assert_eq!(json!(value), batch[i]);
            assert_eq!(*process, recorded[0].0 + 4 * i as u64);
            assert_eq!((*kind, error), (OpType::Ok, &None));
            assert_eq!(*offset, recorded[0].4.map(|o| o + i as u64));
        }
    }
    // Hot partitions: partition 0 takes the most appends, partition 3 the fewest.
    let count = |p: u32| per_key.get(&format!("t/{p}")).copied().unwrap_or(0);
    assert!(
        count(0) > count(1) && count(1) > count(3),
        "appends per key: {per_key:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_batch_gives_each_of_its_appends_the_error() {
    let cluster = FakeCluster::start(Mode::Errors, 3).await;
    let scratch = Scratch::new("batch-errors");
    let path = scratch.history();
    let recorder = Recorder::create(&path).expect("recorder");
    let concurrency = 3;
    // Every write a batch of exactly two: each worker's appends pair up in order.
    let options = WorkloadOptions {
        concurrency,
        rate: 0.0,
        time_limit: Duration::from_secs(60),
        ops_per_worker: None,
        request_timeout: Duration::from_millis(300),
        read_fraction: 0.0,
        batch_fraction: 1.0,
        batch_max: 2,
        ..WorkloadOptions::new(WorkloadKind::Log, 8)
    };
    let (stopper, stop) = stop_signal();
    let run = {
        let (connector, options, recorder) = (
            Arc::clone(&cluster.connector),
            options.clone(),
            recorder.clone(),
        );
        tokio::spawn(async move { run_workload(&*connector, &options, &recorder, &stop).await })
    };
    wait_until(Duration::from_secs(30), "two cycles of the script", || {
        cluster.fake.lock().produce_script >= 20
    })
    .await;
    stopper.stop();
    let stats = run.await.expect("run task").expect("workload runs");
    assert!(
        stats.info > 0 && stats.fail > 0 && stats.ok > 0,
        "{stats:?}"
    );
    assert_eq!(stats.processes, concurrency as u64 + stats.info);
    cluster.heal();
    let finals = final_reads(
        &*cluster.connector,
        &options,
        &recorder,
        Duration::from_secs(20),
    )
    .await
    .expect("final reads");
    assert!(finals.complete(), "{finals:?}");
    recorder.finish().expect("finished");
    let (history, _) = read_history(&path, None).expect("history reads back");
    let c = concurrency as u64;
    let mut codes = BTreeSet::new();
    for (worker, appends) in appends_by_worker(&history, c) {
        let mut expected_process = worker;
        for pair in appends.chunks_exact(2) {
            let [(p0, v0, k0, e0, o0), (p1, v1, k1, e1, o1)] = pair else {
                unreachable!("chunks of two");
            };
            assert_eq!((*p0, *p1), (expected_process, expected_process + c));
            assert_eq!(*v1, v0 + c as i64, "a batch takes consecutive values");
            assert_eq!((k0, e0), (k1, e1), "one outcome for the whole batch");
            match e0 {
                None => assert_eq!(o1, &o0.map(|o| o + 1)),
                Some(error) => {
                    let code = error.as_str().unwrap();
                    codes.insert(code.to_string());
                    let kind = match expected_outcome("append", code) {
                        Outcome::Fail => OpType::Fail,
                        _ => OpType::Info,
                    };
                    assert_eq!(*k0, kind, "{code}");
                    assert_eq!((o0, o1), (&None, &None));
                }
            }
            if *k0 == OpType::Info {
                expected_process += 2 * c;
            }
        }
    }
    for code in ["not_leader", "timeout", "connect_failed", "bad_response"] {
        assert!(
            codes.contains(code),
            "no batch ended with {code}: {codes:?}"
        );
    }
    let report = check_log(&history).expect("well-formed log history");
    assert_eq!(report.verdict, Verdict::Valid, "{:#?}", report.anomalies);
}
