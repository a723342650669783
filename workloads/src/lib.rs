//! The client side of `harness test`: workers that run a workload against the broker
//! and record every operation, then the final reads (DESIGN.md §3 "Runner", §4).
//!
//! - [`run_workload`]: `concurrency` workers, each a tokio task with its own
//!   [`sut::Client`] (from the system's [`Connector`]), its deterministic op sequence and its pacing from
//!   [`crate::generator`], recording through one [`Recorder`], until the time limit, the
//!   op limit or the [`StopSignal`].
//! - [`final_reads`]: after the heal, every partition read to its end, one task per
//!   partition, retried until `timeout`.
//! - [`log`] and [`register`]: what an operation of each workload sends and records.
//!
//! Processes (checking.md): worker `w` starts as process `w`. An operation that ends `info`
//! may still take effect at any time, so that process never invokes again: the worker
//! continues as process `p + concurrency`, as Jepsen does. Reads never end `info` (they
//! have no effect, so an unanswered read is a `fail`).
//!
//! Batches ([`record_batch`]): a batch of `n` values is one request but `n` writes in the
//! history, invoked together and completed together, each with its own offset (or every
//! one with the request's error). A process has one operation open at a time, so the
//! worker's process `p` writes the first value and `p + i * concurrency` the `i`-th, the
//! processes `p` would become after `i` infos: still its own, never another worker's.
//! After an `info` batch the worker continues as `p + n * concurrency`, past every
//! process the batch left open.
//!
//! Every request has a timeout (`request_timeout`): a stop or the time limit ends a run
//! within about that long, each in-flight operation completing as `ok`, `fail` or `info`
//! rather than being left open.

pub mod availability;
pub mod generator;
pub mod log;
pub mod recorder;
pub mod register;

use generator::{Generator, GeneratorError, GeneratorOptions, Pacer, WorkerOps};
use history::Outcome;
use recorder::{Recorder, RecorderError};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};
pub use sut::{error_chain, Consistency, Target};
use sut::{Client, Connector};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// Records per read of the final phase (the broker's default and a tenth of its limit).
pub const FINAL_READ_MAX: u32 = 1000;

/// Which workload the workers run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkloadKind {
    /// Appends of unique integers and polling reads; checked by the log checker.
    Log,
    /// One register per partition: writes and linearizable reads of the latest value;
    /// checked with the linearizability checker's `register` model.
    Register,
}

impl WorkloadKind {
    pub fn name(self) -> &'static str {
        match self {
            WorkloadKind::Log => "log",
            WorkloadKind::Register => "register",
        }
    }
}

/// What judges a workload's history: a Jepsen workload is a generator plus a checker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checker {
    /// The log checker (`checkers::log`): lost writes, ordering, offsets.
    Log,
    /// The linearizability checker with this model.
    Linearizable(checkers::linear::ModelKind),
}

impl WorkloadKind {
    /// The checker of this workload's histories.
    pub fn checker(self) -> Checker {
        match self {
            WorkloadKind::Log => Checker::Log,
            WorkloadKind::Register => Checker::Linearizable(checkers::linear::ModelKind::Register),
        }
    }
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for WorkloadKind {
    type Err = String;

    fn from_str(s: &str) -> Result<WorkloadKind, String> {
        match s {
            "log" => Ok(WorkloadKind::Log),
            "register" => Ok(WorkloadKind::Register),
            other => Err(format!(
                "unknown workload {other:?}: expected log or register"
            )),
        }
    }
}

/// What the workers do, how fast and for how long.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadOptions {
    pub workload: WorkloadKind,
    /// All randomness of the op sequence comes from it.
    pub seed: u64,
    /// Workers.
    pub concurrency: usize,
    /// Operations per second over all workers; 0 = as fast as they go.
    pub rate: f64,
    /// Share of operations that are reads (0.0 to 1.0).
    pub read_fraction: f64,
    /// No operation starts after this.
    pub time_limit: Duration,
    /// Each worker stops after this many operations (`None`: only the time limit).
    pub ops_per_worker: Option<u64>,
    /// Every request's timeout; a register read's steps share one.
    pub request_timeout: Duration,
    /// `max` of the log workload's reads.
    pub read_max: u32,
    /// Consistency of the log workload's reads (register reads and final reads are always
    /// linearizable).
    pub read_consistency: Consistency,
    /// Partition `i` twice as likely as `i + 1` (default: uniform).
    #[serde(default)]
    pub hot_partitions: bool,
    /// Share of writes sent as batches of 2 to `batch_max` values (default 0: none).
    #[serde(default)]
    pub batch_fraction: f64,
    #[serde(default = "default_batch_max")]
    pub batch_max: u32,
}

/// The largest batch when none is named.
pub const DEFAULT_BATCH_MAX: u32 = 10;

fn default_batch_max() -> u32 {
    DEFAULT_BATCH_MAX
}

impl WorkloadOptions {
    /// Defaults: 10 workers, 500 ops/s, half reads, 60 s, 5 s request timeout, log reads
    /// of up to 100 records at default consistency.
    pub fn new(workload: WorkloadKind, seed: u64) -> WorkloadOptions {
        WorkloadOptions {
            workload,
            seed,
            concurrency: 10,
            rate: 500.0,
            read_fraction: 0.5,
            time_limit: Duration::from_secs(60),
            ops_per_worker: None,
            request_timeout: Duration::from_secs(5),
            read_max: 100,
            read_consistency: Consistency::Default,
            hot_partitions: false,
            batch_fraction: 0.0,
            batch_max: DEFAULT_BATCH_MAX,
        }
    }

    pub fn generator_options(&self, partitions: u32) -> GeneratorOptions {
        GeneratorOptions {
            seed: self.seed,
            concurrency: self.concurrency,
            rate: self.rate,
            read_fraction: self.read_fraction,
            time_limit: self.time_limit,
            partitions,
            ops_per_worker: self.ops_per_worker,
            hot_partitions: self.hot_partitions,
            batch_fraction: self.batch_fraction,
            batch_max: self.batch_max,
        }
    }

    fn validate(&self) -> Result<(), WorkloadError> {
        if self.request_timeout.is_zero() {
            return Err(WorkloadError::Options(
                "request timeout must be above 0".into(),
            ));
        }
        if !(1..=10_000).contains(&self.read_max) {
            return Err(WorkloadError::Options(format!(
                "read max must be between 1 and 10000 (the broker's limit), not {}",
                self.read_max
            )));
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error(transparent)]
    Target(#[from] sut::TargetError),
    #[error("bad workload options: {0}")]
    Options(String),
    #[error("bad workload options: {0}")]
    Generator(#[from] GeneratorError),
    #[error(transparent)]
    Record(#[from] RecorderError),
    #[error("a worker task failed: {0}")]
    Task(String),
}

/// Creates a stop signal: [`Stopper::stop`] (or dropping the [`Stopper`]) tells every
/// holder of the [`StopSignal`] to stop.
pub fn stop_signal() -> (Stopper, StopSignal) {
    let (sender, receiver) = watch::channel(false);
    (Stopper(sender), StopSignal(receiver))
}

/// The sending side of [`stop_signal`]. Dropping it stops too, so that no run outlives
/// whoever controls it.
#[derive(Debug)]
pub struct Stopper(watch::Sender<bool>);

impl Stopper {
    pub fn stop(&self) {
        self.0.send_replace(true);
    }
}

/// Tells workers to start no new operation.
#[derive(Debug, Clone)]
pub struct StopSignal(watch::Receiver<bool>);

impl StopSignal {
    pub fn is_stopped(&self) -> bool {
        *self.0.borrow() || self.0.has_changed().is_err()
    }

    /// Resolves once stopped.
    pub async fn stopped(&self) {
        let mut receiver = self.0.clone();
        // An error means the Stopper is gone: stopped as well.
        let _ = receiver.wait_for(|&stopped| stopped).await;
    }
}

/// What the workers did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct WorkloadStats {
    /// From the start of the workers to the end of the last one.
    pub elapsed: Duration,
    /// Operations invoked, and how they ended.
    pub ops: u64,
    pub ok: u64,
    pub fail: u64,
    pub info: u64,
    /// Process ids assigned (`concurrency`, plus one per `info`: the last may go unused).
    /// The extra processes of a batch count once it ends `info`.
    pub processes: u64,
}

impl WorkloadStats {
    fn add(&mut self, worker: &WorkloadStats) {
        self.ops += worker.ops;
        self.ok += worker.ok;
        self.fail += worker.fail;
        self.info += worker.info;
        self.processes += worker.processes;
    }

    /// `ops` operations that ended with `outcome` (a batch's writes all end alike).
    fn count(&mut self, outcome: Outcome, ops: u64) {
        self.ops += ops;
        match outcome {
            Outcome::Ok => self.ok += ops,
            Outcome::Fail => self.fail += ops,
            Outcome::Info => self.info += ops,
        }
    }
}

/// What one operation needs besides its plan.
pub(crate) struct OpContext<'a> {
    pub client: &'a mut dyn Client,
    pub recorder: &'a Recorder,
    pub options: &'a WorkloadOptions,
    pub process: u64,
}

enum WorkloadState {
    Log(log::Cursors),
    Register,
}

struct Worker {
    ops: WorkerOps,
    pacer: Pacer,
    client: Box<dyn Client>,
    recorder: Recorder,
    stop: StopSignal,
    options: Arc<WorkloadOptions>,
    process: u64,
    state: WorkloadState,
}

impl Worker {
    async fn run(mut self) -> Result<WorkloadStats, WorkloadError> {
        let mut stats = WorkloadStats {
            processes: 1,
            ..WorkloadStats::default()
        };
        let concurrency = self.options.concurrency as u64;
        loop {
            if self.stop.is_stopped() {
                break;
            }
            let Some(slot) = self.pacer.next_slot(Instant::now()) else {
                break;
            };
            if slot > Instant::now() {
                tokio::select! {
                    _ = tokio::time::sleep_until(tokio::time::Instant::from_std(slot)) => {}
                    _ = self.stop.stopped() => break,
                }
            }
            let op = self.ops.next_op();
            let writes = match op {
                generator::PlannedOp::Batch { values, .. } => u64::from(values.count),
                _ => 1,
            };
            let mut cx = OpContext {
                client: &mut *self.client,
                recorder: &self.recorder,
                options: &self.options,
                process: self.process,
            };
            let outcome = match &mut self.state {
                WorkloadState::Log(cursors) => log::execute(&mut cx, cursors, op).await?,
                WorkloadState::Register => register::execute(&mut cx, op).await?,
            };
            stats.count(outcome, writes);
            if outcome == Outcome::Info {
                self.process = self
                    .process
                    .saturating_add(concurrency.saturating_mul(writes));
                stats.processes += writes;
            }
        }
        Ok(stats)
    }
}

/// What a batch's write is called and how its `ok` completion reads.
pub(crate) struct BatchShape {
    /// `append` (log) or `write` (register).
    pub f: &'static str,
    /// Whether an `ok` completion carries the value's `offset`.
    pub with_offset: bool,
}

/// Sends `values` to `partition` in one acks=all request and records each as its own
/// `shape.f` operation: all invoked before the request (value `{"key", "value"}`, the `i`-th
/// by process `cx.process + i * concurrency`), all completed after it — `ok` with its
/// offset, or every one with the request's outcome and error code. An answer with a wrong
/// number of offsets leaves every write `info` (`bad_response`): whether it happened is
/// unknown.
pub(crate) async fn record_batch(
    cx: &mut OpContext<'_>,
    shape: BatchShape,
    partition: u32,
    values: &[i64],
) -> Result<Outcome, RecorderError> {
    let key = cx.client.target().key(partition);
    let node = cx.client.route(partition).await;
    let node_name = cx.client.target().node_name(node).to_string();
    let stride = cx.options.concurrency as u64;
    let mut invocations = Vec::with_capacity(values.len());
    for (i, value) in values.iter().enumerate() {
        let process = cx.process.saturating_add((i as u64).saturating_mul(stride));
        invocations.push(cx.recorder.invoke(
            process,
            shape.f,
            serde_json::json!({"key": key, "value": value}),
            Some(&node_name),
        )?);
    }
    let payload: Vec<serde_json::Value> = values.iter().map(|v| serde_json::json!(v)).collect();
    let result = cx
        .client
        .produce_batch(node, partition, &payload, sut::Acks::All)
        .await;
    let (outcome, offsets, error) = match result {
        Ok(offsets) if offsets.len() == values.len() => (Outcome::Ok, offsets, None),
        Ok(offsets) => (
            Outcome::Info,
            Vec::new(),
            Some(format!(
                "bad_response: {} offsets for {} values",
                offsets.len(),
                values.len()
            )),
        ),
        Err(error) => (error.write_outcome(), Vec::new(), Some(error.code())),
    };
    for (i, (invocation, value)) in invocations.into_iter().zip(values).enumerate() {
        let mut done = serde_json::json!({"key": key, "value": value});
        if let (true, Some(offset)) = (shape.with_offset, offsets.get(i)) {
            done["offset"] = serde_json::json!(offset);
        }
        cx.recorder
            .complete(invocation, outcome, done, error.clone())?;
    }
    Ok(outcome)
}

/// Runs the workload: `options.concurrency` workers against the connector's target, each
/// with a client of its own, every operation
/// recorded through `recorder`, until the time limit, the op limit or `stop`. Returns when
/// every worker has completed its last operation. A recording failure stops the run and is
/// returned (a history with a hole cannot be checked). Dropping the returned future stops
/// the workers at once, leaving their in-flight operations open (read as `info`).
pub async fn run_workload(
    connector: &dyn Connector,
    options: &WorkloadOptions,
    recorder: &Recorder,
    stop: &StopSignal,
) -> Result<WorkloadStats, WorkloadError> {
    let target = connector.target();
    target.validate()?;
    options.validate()?;
    let generator = Generator::new(options.generator_options(target.partitions))?;
    let shared_options = Arc::new(options.clone());
    let start = Instant::now();
    let mut workers = JoinSet::new();
    for w in 0..options.concurrency {
        let client = connector.connect(options.request_timeout, w);
        let state = match options.workload {
            WorkloadKind::Log => WorkloadState::Log(log::Cursors::new(target.partitions)),
            WorkloadKind::Register => WorkloadState::Register,
        };
        let worker = Worker {
            ops: generator.ops(w)?,
            pacer: generator.pacer(w, start)?,
            client,
            recorder: recorder.clone(),
            stop: stop.clone(),
            options: Arc::clone(&shared_options),
            process: w as u64,
            state,
        };
        workers.spawn(worker.run());
    }
    let mut stats = WorkloadStats::default();
    let mut failure = None;
    while let Some(joined) = workers.join_next().await {
        let result = joined
            .map_err(|e| WorkloadError::Task(e.to_string()))
            .and_then(|r| r);
        match result {
            Ok(worker) => stats.add(&worker),
            Err(error) => {
                // The others would fail the same way or record into a broken history.
                workers.abort_all();
                failure.get_or_insert(error);
            }
        }
    }
    stats.elapsed = start.elapsed();
    match failure {
        Some(error) => Err(error),
        None => Ok(stats),
    }
}

/// How the final reads of one partition went.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FinalPartition {
    pub partition: u32,
    pub key: String,
    /// The partition was read to its end (log), or its value read (register).
    pub complete: bool,
    /// Records returned by the final reads (log); 1 or 0 for a register's value.
    pub records: u64,
    /// The high watermark of the last successful read.
    pub high_watermark: Option<i64>,
    /// Read operations recorded (failed ones included).
    pub reads: u64,
    /// The last failure, if any.
    pub last_error: Option<String>,
}

/// The final phase's outcome per partition.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FinalReads {
    pub partitions: Vec<FinalPartition>,
}

impl FinalReads {
    /// Every partition was read to its end.
    pub fn complete(&self) -> bool {
        self.partitions.iter().all(|p| p.complete)
    }
}

/// The final phase: every partition of the connector's target read to its end (log workload: from
/// offset 0 in reads of [`FINAL_READ_MAX`] marked `"final": true`, until a read returns
/// fewer than its max; register: one linearizable read of the value), one task per
/// partition, each under a process id reserved from `recorder` (after every worker's).
/// Failed reads are recorded and retried with backoff until `timeout`; a partition not
/// finished by then is reported incomplete. Reads use `options.request_timeout` each.
pub async fn final_reads(
    connector: &dyn Connector,
    options: &WorkloadOptions,
    recorder: &Recorder,
    timeout: Duration,
) -> Result<FinalReads, WorkloadError> {
    let target = connector.target();
    target.validate()?;
    options.validate()?;
    let deadline = Instant::now() + timeout;
    let mut tasks = JoinSet::new();
    for partition in 0..target.partitions {
        let mut client = connector.connect(options.request_timeout, partition as usize);
        let recorder = recorder.clone();
        let process = recorder.reserve_process();
        let workload = options.workload;
        tasks.spawn(async move {
            match workload {
                WorkloadKind::Log => {
                    log::final_read(&mut *client, &recorder, process, partition, deadline).await
                }
                WorkloadKind::Register => {
                    register::final_read(&mut *client, &recorder, process, partition, deadline)
                        .await
                }
            }
        });
    }
    let mut partitions = Vec::with_capacity(target.partitions as usize);
    let mut failure = None;
    while let Some(joined) = tasks.join_next().await {
        match joined.map_err(|e| WorkloadError::Task(e.to_string())) {
            Ok(Ok(done)) => partitions.push(done),
            Ok(Err(error)) => {
                tasks.abort_all();
                failure.get_or_insert(WorkloadError::Record(error));
            }
            Err(error) => {
                tasks.abort_all();
                failure.get_or_insert(error);
            }
        }
    }
    if let Some(error) = failure {
        return Err(error);
    }
    partitions.sort_by_key(|p| p.partition);
    Ok(FinalReads { partitions })
}

/// Waits before retry `attempt` (from 0) of a final read: 50 ms doubling to 1 s, never
/// past `deadline`.
pub(crate) async fn backoff(attempt: u32, deadline: Instant) {
    let delay = Duration::from_millis(50)
        .saturating_mul(1 << attempt.min(5))
        .min(Duration::from_secs(1))
        .min(deadline.saturating_duration_since(Instant::now()));
    tokio::time::sleep(delay).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workload_names_round_trip() {
        for kind in [WorkloadKind::Log, WorkloadKind::Register] {
            assert_eq!(kind.name().parse::<WorkloadKind>(), Ok(kind));
        }
        assert!("queue".parse::<WorkloadKind>().is_err());
    }

    #[tokio::test]
    async fn a_dropped_stopper_stops() {
        let (stopper, signal) = stop_signal();
        assert!(!signal.is_stopped());
        let waiting = signal.clone();
        let waiter = tokio::spawn(async move { waiting.stopped().await });
        stopper.stop();
        waiter.await.unwrap();
        assert!(signal.is_stopped());
        let (stopper, signal) = stop_signal();
        drop(stopper);
        assert!(signal.is_stopped());
        signal.stopped().await;
    }
}
