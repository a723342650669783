//! The linearizability checker (checking.md): Wing & Gong's search with Lowe's cache, per
//! independent partition, bounded by time and memory.
//!
//! - `partition`: the history's ops mapped to compact model inputs and split by key
//!   (or, for multi-register, by connected components of keys).
//! - `models`: register, cas-register, etcd, kv and multi-register step functions.
//! - `wgl`: the search over one partition; `cache`: its bitset and memo table.
//! - `zones`: Gibbons & Korach's O(n log n) check for plain registers whose read values
//!   are each written once; `algorithm`: which of the two judges each partition
//!   ([`AlgorithmChoice::Auto`]: the zones wherever they apply).
//!
//! Semantics per model, as Knossos and Porcupine:
//! - Every model: `ok` ops take effect between invocation and completion; `info` ops (and
//!   invocations never completed) may take effect at any time after their invocation, so
//!   they stay open to the end of the history; `fail` ops did not happen and are dropped,
//!   except etcd's failed cas. Nemesis ops are ignored.
//! - `register` (read/write) and `cas-register` (also cas `[old, new]`), Knossos: initial
//!   value null unless given; a read of null is a read with unknown result and constrains
//!   nothing; `info` reads are dropped; an `info` cas is legal in every state.
//! - `etcd`, Porcupine: a cas register whose initial value is absent (null); a read of
//!   null means absent; a cas on the absent key fails; a `fail` cas is a cas whose compare
//!   was seen to fail (legal only when the state differs from `old`); a failed (timed-out)
//!   read has an unknown result and is dropped.
//! - `kv`, Porcupine: per key a string (initially "" unless given), `get` / `put` /
//!   `append`, values `{"key": K, "value": V}`; checked per key.
//! - `multi-register`, Knossos: `txn` of `[f, k, v]` micro-ops (r/read, w/write) applied in
//!   order; a read of nil is unknown; keys start null unless given in an `init` object.
//! - Register-family histories whose values are `{"key": K, "value": V}` are checked per
//!   key, every key starting from `init`.
//!
//! On failure, the report names the longest linearized sequence the search reached (the
//! first one of that length), and as `unplaced` the op that stopped it there: among the
//! ops not in that sequence, the one whose return comes first in the history, which had
//! to be linearized next and could not be in the state the sequence leaves. A failure
//! the zones found names instead the two clusters (or the read) in conflict
//! ([`ZoneConflict`]).

mod algorithm;
mod cache;
mod models;
mod partition;
mod wgl;
mod zones;

pub use algorithm::{Algorithm, AlgorithmChoice, PartitionAlgorithm, UnknownAlgorithm};
pub use zones::{ClusterZone, NotEligible, ZoneConflict, MAX_READS_SHOWN};

use crate::verdict::Verdict;
use history::{History, HistoryError, Location, Outcome};
use models::{KvModel, MultiModel, RegisterModel};
use partition::{PartOp, Partition, PartitionModel};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use wgl::{Limits, Search, SearchOutcome};

/// The sequential specification a history is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelKind {
    Register,
    CasRegister,
    MultiRegister,
    Etcd,
    Kv,
}

impl ModelKind {
    pub const ALL: [ModelKind; 5] = [
        ModelKind::Register,
        ModelKind::CasRegister,
        ModelKind::MultiRegister,
        ModelKind::Etcd,
        ModelKind::Kv,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Register => "register",
            ModelKind::CasRegister => "cas-register",
            ModelKind::MultiRegister => "multi-register",
            ModelKind::Etcd => "etcd",
            ModelKind::Kv => "kv",
        }
    }
}

impl fmt::Display for ModelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A model name that is none of [`ModelKind`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown model {0:?}: expected register, cas-register, multi-register, etcd or kv")]
pub struct UnknownModel(pub String);

impl FromStr for ModelKind {
    type Err = UnknownModel;

    fn from_str(s: &str) -> Result<ModelKind, UnknownModel> {
        ModelKind::ALL
            .into_iter()
            .find(|model| model.name() == s)
            .ok_or_else(|| UnknownModel(s.to_string()))
    }
}

/// What to check against, and the bounds of the search.
#[derive(Debug, Clone, PartialEq)]
pub struct LinearOptions {
    pub model: ModelKind,
    /// The model's initial value; `None` is the model's default: null for register and
    /// cas-register, absent for etcd, "" for every kv key (a string for every key, or an
    /// object of strings by key), null for every multi-register key (an object by key).
    pub init: Option<serde_json::Value>,
    /// Past this, the verdict is unknown. `None`: no limit.
    pub time_limit: Option<Duration>,
    /// Bytes the searches may hold at once (caches, stacks, model states), across all
    /// partitions; past this, the verdict is unknown.
    pub memory_budget_bytes: usize,
    /// Partitions checked at once.
    pub threads: usize,
    /// Which algorithm judges each partition.
    pub algorithm: AlgorithmChoice,
}

impl LinearOptions {
    pub const DEFAULT_MEMORY_BUDGET: usize = 1 << 30;

    /// No time limit, 1 GiB of memory, one thread per available core.
    pub fn new(model: ModelKind) -> LinearOptions {
        LinearOptions {
            model,
            init: None,
            time_limit: None,
            memory_budget_bytes: LinearOptions::DEFAULT_MEMORY_BUDGET,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            algorithm: AlgorithmChoice::Auto,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LinearError {
    /// The history is malformed (e.g. a completion without invocation).
    #[error(transparent)]
    History(#[from] HistoryError),
    /// An op does not fit the model: an unknown `f`, or a value of the wrong shape.
    #[error("{location}: {message}")]
    Op { location: Location, message: String },
    /// `LinearOptions::init` does not fit the model.
    #[error("initial value for the {model} model: {message}")]
    Init { model: ModelKind, message: String },
    #[error("history of {ops} ops is too large to check (at most {max})")]
    TooLarge { ops: usize, max: usize },
    /// The zone check was asked for a partition it does not apply to.
    #[error("the zone check does not apply to {}: {reason}", key.as_deref().map_or("the history".to_string(), |key| format!("key {key}")))]
    ZonesNotApplicable {
        key: Option<String>,
        reason: NotEligible,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LinearReport {
    pub verdict: Verdict,
    pub model: ModelKind,
    /// Why the verdict is unknown.
    pub reason: Option<String>,
    pub partitions: usize,
    /// Partitions whose search finished (found linearizable or not).
    pub partitions_checked: usize,
    /// Operations that entered the search: client operations, less those that constrain
    /// nothing (failed ops, reads with an unknown result).
    pub operations: usize,
    pub failure: Option<LinearFailure>,
    /// Per partition (largest first), the algorithm that judged it (or was to).
    #[serde(default)]
    pub algorithms: Vec<PartitionAlgorithm>,
}

/// Where a partition that is not linearizable got stuck.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LinearFailure {
    /// The partition's key (keyed histories) or keys joined by `,` (multi-register).
    pub key: Option<String>,
    /// What found it.
    #[serde(default)]
    pub algorithm: Algorithm,
    /// `Op.index` of the invocations, in linearization order, of the longest
    /// linearizable prefix found (empty when the zones found the failure).
    pub longest_prefix: Vec<u64>,
    /// `Op.index` of the invocation of the op that could not be placed after it (zones:
    /// the op the conflict is about first).
    pub unplaced: u64,
    /// Why, in words.
    pub unplaced_description: String,
    /// For up to [`MAX_PARTIALS`] ops of the partition, those invoked nearest the
    /// unplaced op: the length of the longest partial linearization that contained each.
    pub partial_linearizations: Vec<PartialLinearization>,
    /// Ops of the partition left out of `partial_linearizations`.
    #[serde(default)]
    pub partials_omitted: usize,
    /// The zones' finding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conflict: Option<ZoneConflict>,
}

/// Ops of a failing partition whose partial linearization the report keeps at most.
pub const MAX_PARTIALS: usize = 1000;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PartialLinearization {
    /// `Op.index` of the op's invocation.
    pub op: u64,
    /// Ops in the longest partial linearization that contained it (0: never linearized).
    #[serde(default)]
    pub length: usize,
    /// Reports written before `length` existed held the whole sequence here; read only
    /// so that their length is known.
    #[serde(default, skip_serializing)]
    pub linearization: Vec<u64>,
}

impl PartialLinearization {
    /// The length, from either form of the report.
    pub fn len(&self) -> usize {
        self.length.max(self.linearization.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Positions and op counts are `u32` inside the search.
const MAX_OPS: usize = (u32::MAX / 4) as usize;

/// Checks `history` against `options.model`. Errors only for a history that is malformed
/// or does not fit the model; running out of time or memory gives an unknown verdict.
pub fn check_linearizable(
    history: &History,
    options: &LinearOptions,
) -> Result<LinearReport, LinearError> {
    let started = Instant::now();
    if history.len() > MAX_OPS {
        return Err(LinearError::TooLarge {
            ops: history.len(),
            max: MAX_OPS,
        });
    }
    let operations = history::pair(history)?;
    let mut partitions =
        partition::prepare(history, &operations, options.model, options.init.as_ref())?;
    // Largest first, so that the longest searches start early and the threads finish
    // together.
    partitions.sort_by_key(|partition| std::cmp::Reverse(partition.ops.len()));
    let operation_count = partitions.iter().map(|p| p.ops.len()).sum();
    let partition_count = partitions.len();
    let judged = judge_by_zones(history, partitions, options)?;

    let stop = AtomicBool::new(false);
    if !judged.failures.is_empty() {
        // The answer is known: the searches need not run.
        stop.store(true, Ordering::Relaxed);
    }
    let memory_used = AtomicUsize::new(0);
    let limits = Limits {
        stop: &stop,
        deadline: options
            .time_limit
            .and_then(|limit| started.checked_add(limit)),
        memory_used: &memory_used,
        memory_budget: options.memory_budget_bytes,
    };
    let (infos, models): (Vec<PartitionInfo>, Vec<PartitionModel>) = judged
        .searched
        .into_iter()
        .map(|partition| ((partition.key, partition.ops), partition.model))
        .unzip();
    let results = run_partitions(&infos, models, &limits, options.threads.max(1));

    let mut report = LinearReport {
        verdict: Verdict::Valid,
        model: options.model,
        reason: None,
        partitions: partition_count,
        partitions_checked: judged.checked,
        operations: operation_count,
        failure: None,
        algorithms: judged.algorithms,
    };
    let mut timed_out = false;
    let mut out_of_memory = false;
    let mut invalid = !judged.failures.is_empty();
    let mut failures = judged.failures;
    for (slot, outcome) in results {
        match outcome {
            SearchOutcome::Linearizable => report.partitions_checked += 1,
            SearchOutcome::NotLinearizable(failure) => {
                report.partitions_checked += 1;
                invalid = true;
                if let Some(info) = infos.get(slot) {
                    failures.push(describe_failure(history, info, failure));
                }
            }
            SearchOutcome::Stopped => {}
            SearchOutcome::TimedOut => timed_out = true,
            SearchOutcome::OutOfMemory => out_of_memory = true,
        }
    }
    // Without a failure or a bound reached, a partition with no outcome means its checker
    // thread died.
    let crashed = report.partitions_checked < partition_count;
    if invalid {
        // Several partitions may have failed before the others stopped; report the one
        // whose stuck op comes first in the history.
        failures.sort_by_key(|failure| failure.unplaced);
        report.verdict = Verdict::Invalid;
        report.failure = failures.into_iter().next();
    } else if timed_out {
        report.verdict = Verdict::Unknown;
        report.reason = Some(format!(
            "time limit of {}s reached after {} partitions",
            options.time_limit.unwrap_or_default().as_secs_f64(),
            report.partitions_checked
        ));
    } else if out_of_memory {
        report.verdict = Verdict::Unknown;
        report.reason = Some(format!(
            "memory budget of {} MiB exceeded",
            options.memory_budget_bytes as f64 / (1024.0 * 1024.0)
        ));
    } else if crashed {
        report.verdict = Verdict::Unknown;
        report.reason = Some(format!(
            "{} of {} partitions were not checked: a checker thread panicked",
            partition_count - report.partitions_checked,
            partition_count
        ));
    }
    tracing::debug!(
        verdict = %report.verdict,
        partitions = report.partitions,
        checked = report.partitions_checked,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "linearizability check"
    );
    Ok(report)
}

/// The partitions the zones judged, and those left for the search.
struct Judged {
    /// Partitions the zones judged.
    checked: usize,
    failures: Vec<LinearFailure>,
    searched: Vec<Partition>,
    /// Per partition, in the order given, what judges it.
    algorithms: Vec<PartitionAlgorithm>,
}

/// Judges with the zones every partition `options.algorithm` gives them (all they apply
/// to, for `auto`); leaves the others to the search. An error when the zones were asked
/// for a partition they do not apply to.
fn judge_by_zones(
    history: &History,
    partitions: Vec<Partition>,
    options: &LinearOptions,
) -> Result<Judged, LinearError> {
    let mut judged = Judged {
        checked: 0,
        failures: Vec::new(),
        searched: Vec::new(),
        algorithms: Vec::with_capacity(partitions.len()),
    };
    for partition in partitions {
        let mut record = PartitionAlgorithm {
            key: partition.key.clone(),
            operations: partition.ops.len(),
            algorithm: Algorithm::Wgl,
            zones_not_applicable: None,
        };
        let verdict = match (&partition.model, options.algorithm) {
            (_, AlgorithmChoice::Wgl) => None,
            (PartitionModel::Register(model), _) if options.model == ModelKind::Register => {
                Some(zones::judge(model, &partition.ops).map(|finding| (model, finding)))
            }
            _ => Some(Err(NotEligible::Model)),
        };
        match verdict {
            Some(Ok((model, finding))) => {
                record.algorithm = Algorithm::Zones;
                judged.checked += 1;
                let naming = zones::Naming {
                    history,
                    key: partition.key.as_deref(),
                    ops: &partition.ops,
                    model,
                };
                if let Some(explained) = naming.explain(&finding) {
                    judged.failures.push(LinearFailure {
                        key: partition.key.clone(),
                        algorithm: Algorithm::Zones,
                        longest_prefix: Vec::new(),
                        unplaced: explained.unplaced,
                        unplaced_description: explained.description,
                        partial_linearizations: Vec::new(),
                        partials_omitted: 0,
                        conflict: Some(explained.conflict),
                    });
                }
            }
            Some(Err(reason)) if options.algorithm == AlgorithmChoice::Zones => {
                return Err(LinearError::ZonesNotApplicable {
                    key: partition.key,
                    reason,
                });
            }
            Some(Err(reason)) => {
                if options.model == ModelKind::Register {
                    record.zones_not_applicable = Some(reason.to_string());
                }
                judged.searched.push(partition);
            }
            None => judged.searched.push(partition),
        }
        judged.algorithms.push(record);
    }
    Ok(judged)
}

/// Steps a worker gives each of its searches in turn (a few milliseconds' worth).
const SLICE_STEPS: u64 = 1 << 16;

/// A partition's key and ops, kept to describe its failure once its model has moved into
/// the search.
type PartitionInfo = (Option<String>, Vec<PartOp>);

/// A search over any model (one history's partitions all share one model kind).
enum AnySearch<'a> {
    Register(Search<'a, RegisterModel>),
    Kv(Search<'a, KvModel>),
    Multi(Search<'a, MultiModel>),
}

impl<'a> AnySearch<'a> {
    fn new(model: PartitionModel, ops: &[PartOp], memory_used: &'a AtomicUsize) -> AnySearch<'a> {
        let spans: Vec<wgl::Span> = ops.iter().map(PartOp::span).collect();
        match model {
            PartitionModel::Register(model) => {
                AnySearch::Register(Search::new(model, &spans, memory_used))
            }
            PartitionModel::Kv(model) => AnySearch::Kv(Search::new(model, &spans, memory_used)),
            PartitionModel::Multi(model) => {
                AnySearch::Multi(Search::new(model, &spans, memory_used))
            }
        }
    }

    fn run(&mut self, limits: &Limits, slice: u64) -> Option<SearchOutcome> {
        match self {
            AnySearch::Register(search) => search.run(limits, slice),
            AnySearch::Kv(search) => search.run(limits, slice),
            AnySearch::Multi(search) => search.run(limits, slice),
        }
    }
}

/// The outcome a partition gets without being searched, when the check is already over.
fn before_start(limits: &Limits) -> Option<SearchOutcome> {
    if limits.stop.load(Ordering::Relaxed) {
        Some(SearchOutcome::Stopped)
    } else if limits.deadline.is_some_and(|d| Instant::now() >= d) {
        Some(SearchOutcome::TimedOut)
    } else {
        None
    }
}

/// Searches one worker keeps going at once: enough to take turns between a few hard
/// partitions, few enough that their caches do not crowd the memory budget.
const MAX_ACTIVE: usize = 16;

/// One worker: takes partitions from the shared queue and gives each a first slice of
/// `SLICE_STEPS` at once (most finish within it); those that need more take turns, a
/// slice each. A partition whose search explodes thus cannot delay the others, one of
/// which may fail in milliseconds and end the whole check.
fn work<'a>(
    infos: &[PartitionInfo],
    queue: &[Mutex<Option<PartitionModel>>],
    next: &AtomicUsize,
    limits: &Limits<'a>,
) -> Vec<(usize, SearchOutcome)> {
    let mut done = Vec::new();
    let mut active: Vec<(usize, AnySearch<'a>)> = Vec::new();
    let mut finish = |slot: usize, outcome: SearchOutcome| {
        if matches!(outcome, SearchOutcome::NotLinearizable(_)) {
            // The answer is known: the other partitions need not finish.
            limits.stop.store(true, Ordering::Relaxed);
        }
        done.push((slot, outcome));
    };
    let mut queue_drained = false;
    loop {
        if !queue_drained && active.len() < MAX_ACTIVE {
            let slot = next.fetch_add(1, Ordering::Relaxed);
            let Some(cell) = queue.get(slot) else {
                queue_drained = true;
                continue;
            };
            // Each slot is taken by exactly one worker, so the lock is never contended;
            // a poisoned lock still holds a usable model.
            let taken = cell.lock().unwrap_or_else(|e| e.into_inner()).take();
            let (Some(model), Some((_, ops))) = (taken, infos.get(slot)) else {
                continue;
            };
            if let Some(outcome) = before_start(limits) {
                finish(slot, outcome);
                continue;
            }
            let mut search = AnySearch::new(model, ops, limits.memory_used);
            match search.run(limits, SLICE_STEPS) {
                Some(outcome) => finish(slot, outcome),
                None => active.push((slot, search)),
            }
            continue;
        }
        if active.is_empty() {
            break;
        }
        let mut turn = 0;
        while turn < active.len() {
            match active[turn].1.run(limits, SLICE_STEPS) {
                None => turn += 1,
                Some(outcome) => {
                    // Dropping the search gives its memory back to the budget.
                    let (slot, _) = active.swap_remove(turn);
                    finish(slot, outcome);
                }
            }
        }
    }
    done
}

/// Checks the partitions on up to `threads` threads; returns, by partition position, the
/// outcome of each that was searched.
fn run_partitions(
    infos: &[PartitionInfo],
    models: Vec<PartitionModel>,
    limits: &Limits,
    threads: usize,
) -> Vec<(usize, SearchOutcome)> {
    let workers = threads.min(models.len());
    let queue: Vec<Mutex<Option<PartitionModel>>> =
        models.into_iter().map(|m| Mutex::new(Some(m))).collect();
    let next = AtomicUsize::new(0);
    if workers <= 1 {
        // As with worker threads below: a panic loses the outcomes (the verdict becomes
        // unknown) instead of aborting the caller. No thread is spawned for one worker.
        return std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            work(infos, &queue, &next, limits)
        }))
        .unwrap_or_default();
    }
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| scope.spawn(|| work(infos, &queue, &next, limits)))
            .collect();
        // A worker that panicked loses its partitions' outcomes; the caller reports the
        // verdict as unknown rather than propagating the panic.
        handles
            .into_iter()
            .filter_map(|handle| handle.join().ok())
            .flatten()
            .collect()
    })
}

fn describe_failure(
    history: &History,
    (key, ops): &PartitionInfo,
    failure: wgl::Failure,
) -> LinearFailure {
    let op_index = |local: u32| {
        ops.get(local as usize)
            .and_then(|op| history.ops.get(op.invoke))
            .map_or(0, |op| op.index)
    };
    let indices = |locals: &[u32]| locals.iter().map(|&local| op_index(local)).collect();
    let unplaced_description = match ops.get(failure.unplaced as usize) {
        Some(op) => format!(
            "{} at {}: cannot be linearized after the longest linearizable prefix ({} ops; state then: {})",
            describe_op(history, op),
            history.locate(op.invoke),
            failure.longest.len(),
            failure.state_after
        ),
        None => "no op could be linearized".to_string(),
    };
    let kept = nearest(ops, failure.unplaced, MAX_PARTIALS);
    LinearFailure {
        key: key.clone(),
        algorithm: Algorithm::Wgl,
        longest_prefix: indices(&failure.longest),
        unplaced: op_index(failure.unplaced),
        unplaced_description,
        partials_omitted: ops.len() - kept.len(),
        partial_linearizations: kept
            .into_iter()
            .map(|local| PartialLinearization {
                op: op_index(local),
                length: failure
                    .partials
                    .get(local as usize)
                    .map_or(0, |&n| n as usize),
                linearization: Vec::new(),
            })
            .collect(),
        conflict: None,
    }
}

/// Up to `count` of the ops (partition-local), those invoked nearest `around`, in
/// invocation order.
fn nearest(ops: &[PartOp], around: u32, count: usize) -> Vec<u32> {
    let Some(center) = ops.get(around as usize).map(|op| op.invoke) else {
        return (0..ops.len().min(count) as u32).collect();
    };
    let mut kept: Vec<u32> = (0..ops.len() as u32).collect();
    if kept.len() > count {
        kept.select_nth_unstable_by_key(count, |&op| ops[op as usize].invoke.abs_diff(center));
        kept.truncate(count);
        kept.sort_unstable();
    }
    kept
}

/// "process 3 read -> 4", "process 1 cas [1,2] (failed)", "process 9 get key \"2\" ->
/// \"xy\"".
pub(crate) fn describe_op(history: &History, op: &PartOp) -> String {
    let Some(invoke) = history.ops.get(op.invoke) else {
        return String::new();
    };
    // Keyed values print as their key and argument rather than as the wrapping object.
    let payload = |value: &serde_json::Value| match value.get("key") {
        Some(_) => value.get("value").cloned().unwrap_or_default(),
        None => value.clone(),
    };
    let mut text = format!("process {} {}", invoke.process, invoke.f);
    if let Some(key) = invoke.value.get("key") {
        text.push_str(&format!(" key {key}"));
    }
    let argument = payload(&invoke.value);
    if !argument.is_null() {
        text.push_str(&format!(" {argument}"));
    }
    let completion = op.completion.and_then(|c| history.ops.get(c));
    match (op.outcome, completion) {
        (Outcome::Ok, Some(done)) => {
            let result = payload(&done.value);
            if !result.is_null() && result != argument {
                text.push_str(&format!(" -> {result}"));
            }
        }
        (Outcome::Fail, _) => text.push_str(" (failed)"),
        (Outcome::Info, _) => text.push_str(" (indeterminate)"),
        (Outcome::Ok, None) => {}
    }
    text
}

#[cfg(test)]
mod tests;
