//! `cargo bench -p checkers`: the register checker on a generated history of 1,000,000
//! operations (2,000,000 entries) on one key: 20 concurrent processes, half the ops
//! writes of unique values, a fifth of those (10% of all ops) indeterminate — half of
//! which take effect some time after their completion, half never. Targets for the zone
//! check (`auto` picks it): under 5 s and under 1 GiB. Then the same history with the
//! Wing–Gong search, under a budget, for comparison.
//!
//! Memory is counted by this bench's allocator: the peak of bytes allocated during the
//! check, above what the history itself holds; the process's VmHWM (from /proc) is
//! printed too.

use checkers::linear::{check_linearizable, AlgorithmChoice, LinearOptions, ModelKind};
use history::{History, Op, OpType, Process};
use serde_json::json;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const OPERATIONS: usize = 1_000_000;
const PROCESSES: u64 = 20;
const MIB: f64 = 1024.0 * 1024.0;

/// The system allocator, counting the bytes held now and their peak.
struct Counting;

static HELD: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged to the system allocator.
        let block = unsafe { System.alloc(layout) };
        if !block.is_null() {
            let held = HELD.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(held, Ordering::Relaxed);
        }
        block
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        // SAFETY: `block` came from `alloc` with this layout.
        unsafe { System.dealloc(block, layout) };
        HELD.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Peak resident memory of this process so far, in MiB, from /proc (Linux).
fn vm_hwm_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// What a worker is waiting for.
#[derive(Clone, Copy)]
enum Pending {
    Read,
    Write(i64),
}

/// A linearizable history: reads return the register's value at their completion, `ok`
/// writes take effect at their completion, indeterminate ones later or never.
fn generate(seed: u64) -> History {
    let mut rng = rng::Rng::new(seed);
    let mut ops = Vec::with_capacity(2 * OPERATIONS);
    // Per worker: its process id and its pending op.
    let mut workers: Vec<(u64, Option<Pending>)> = (0..PROCESSES).map(|p| (p, None)).collect();
    let mut register: Option<i64> = None;
    let mut next_value = 0i64;
    // Indeterminate writes still to take effect.
    let mut deferred: Vec<i64> = Vec::new();
    let mut invoked = 0;
    let value = |v: Option<i64>| json!({"key": "r", "value": v});
    while ops.len() < 2 * OPERATIONS {
        if !deferred.is_empty() && rng.percent(2) {
            let at = rng.below(deferred.len() as u64) as usize;
            register = Some(deferred.swap_remove(at));
        }
        let worker = rng.below(PROCESSES) as usize;
        let index = ops.len() as u64;
        let (process, pending) = &mut workers[worker];
        let client = Process::Client(*process);
        let (kind, f, argument) = match pending.take() {
            None if invoked < OPERATIONS => {
                invoked += 1;
                if rng.percent(50) {
                    next_value += 1;
                    *pending = Some(Pending::Write(next_value));
                    (OpType::Invoke, "write", Some(next_value))
                } else {
                    *pending = Some(Pending::Read);
                    (OpType::Invoke, "read", None)
                }
            }
            None => continue,
            Some(Pending::Read) => (OpType::Ok, "read", register),
            Some(Pending::Write(v)) if rng.percent(20) => {
                if rng.percent(50) {
                    deferred.push(v);
                }
                // Jepsen: a process whose op is indeterminate continues under a new id.
                *process += PROCESSES;
                (OpType::Info, "write", Some(v))
            }
            Some(Pending::Write(v)) => {
                register = Some(v);
                (OpType::Ok, "write", Some(v))
            }
        };
        let mut op = Op::new(index, client, kind, f, value(argument));
        op.time = index * 1_000;
        ops.push(op);
    }
    History::from_ops(ops)
}

fn options(algorithm: AlgorithmChoice) -> LinearOptions {
    let mut options = LinearOptions::new(ModelKind::Register);
    options.algorithm = algorithm;
    options.time_limit = Some(Duration::from_secs(60));
    options.memory_budget_bytes = 1 << 30;
    options
}

fn run(history: &History, algorithm: AlgorithmChoice) {
    let baseline = HELD.load(Ordering::Relaxed);
    PEAK.store(baseline, Ordering::Relaxed);
    let started = Instant::now();
    let outcome = check_linearizable(history, &options(algorithm));
    let took = started.elapsed();
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(baseline) as f64 / MIB;
    match outcome {
        Ok(report) => {
            let judged: Vec<String> = report
                .algorithms
                .iter()
                .map(|p| format!("{} ops judged by {}", p.operations, p.algorithm))
                .collect();
            println!(
                "{algorithm}: {} in {:.2} s, peak {peak:.0} MiB allocated during the check ({}){}",
                report.verdict,
                took.as_secs_f64(),
                judged.join(", "),
                report.reason.map(|r| format!(": {r}")).unwrap_or_default()
            );
        }
        Err(error) => println!(
            "{algorithm}: error after {:.2} s: {error}",
            took.as_secs_f64()
        ),
    }
}

fn main() {
    let started = Instant::now();
    let history = generate(20);
    let infos = history
        .ops
        .iter()
        .filter(|op| op.kind == OpType::Info)
        .count();
    println!(
        "history: {OPERATIONS} operations ({} entries, {infos} indeterminate writes, \
         {PROCESSES} concurrent processes, one key) generated in {:.2} s, holding {:.0} MiB",
        history.len(),
        started.elapsed().as_secs_f64(),
        HELD.load(Ordering::Relaxed) as f64 / MIB
    );
    run(&history, AlgorithmChoice::Auto);
    println!("(target for auto: under 5 s and under 1024 MiB)");
    run(&history, AlgorithmChoice::Wgl);
    match vm_hwm_mib() {
        Some(mib) => println!("process peak resident (VmHWM, history included): {mib:.0} MiB"),
        None => println!("process peak resident: unknown (no /proc/self/status)"),
    }
}
