//! `cargo bench -p harness`: the checkers' speed and memory targets, printed as figures.
//!
//! Each scenario runs in a child process of this bench so that its peak memory (VmHWM)
//! is its own. Scenarios:
//! - `etcd`: all Porcupine etcd histories in one `harness check` process (the real binary);
//!   target under 0.3 s.
//! - `kv`: each Porcupine kv history checked alone; the worst is reported.
//! - `log-1m`: a generated 1,000,000-op log history written as JSONL, then read and checked
//!   as `harness check` does; target under 5 s and 2 GiB peak.
//!
//! `cargo bench -p harness -- SCENARIO` runs one. The Porcupine scenarios need
//! `../shared/fixtures` beside the checkout and say they skipped otherwise.

use checkers::linear::ModelKind;
use harness::check::{check_file, check_files, CheckModel, CheckSettings};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const SCENARIOS: [&str; 3] = ["etcd", "kv", "log-1m"];

fn fixtures() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/porcupine");
    dir.is_dir().then_some(dir)
}

fn settings(model: CheckModel) -> CheckSettings {
    CheckSettings {
        format: None,
        model: Some(model),
        init: None,
        independent: false,
        time_limit: Duration::from_secs(300),
        memory_budget_bytes: 4 << 30,
        threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        algorithm: Default::default(),
        require_ops: true,
    }
}

/// Peak resident memory of this process so far, in MiB, from /proc (Linux).
fn peak_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    vm_hwm_kb(&status).map_or(f64::NAN, |kb| kb / 1024.0)
}

fn etcd_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("jepsen"))
        .map(|entries| entries.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "log"));
    files.sort();
    files
}

fn run_etcd() {
    let Some(dir) = fixtures() else {
        println!("etcd: skipped: ../shared/fixtures not found");
        return;
    };
    let files = etcd_files(&dir);
    // The real binary, as a user runs it: one process for every file.
    let mut runs = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let output = Command::new(env!("CARGO_BIN_EXE_harness"))
            .arg("check")
            .args(&files)
            .args(["--model", "etcd"])
            .output();
        let elapsed = started.elapsed();
        match output {
            Ok(out) => {
                let lines = String::from_utf8_lossy(&out.stdout).lines().count();
                if lines != files.len() {
                    println!(
                        "etcd: harness check printed {lines} lines for {} files",
                        files.len()
                    );
                    return;
                }
            }
            Err(e) => {
                println!("etcd: could not run harness: {e}");
                return;
            }
        }
        runs.push(elapsed);
    }
    runs.sort();
    println!(
        "etcd: {} histories in one `harness check` process: best {:.3} s, median {:.3} s (target < 0.3 s)",
        files.len(),
        runs[0].as_secs_f64(),
        runs[runs.len() / 2].as_secs_f64()
    );
    // In-process, without process start-up, for comparison.
    let started = Instant::now();
    let outcomes = check_files(
        &files,
        &settings(CheckModel::Linear(ModelKind::Etcd)),
        |_, _| {},
    );
    let failed = outcomes.iter().filter(|o| o.is_err()).count();
    println!(
        "etcd: in-process check_files: {:.3} s ({failed} errors), peak {:.0} MiB",
        started.elapsed().as_secs_f64(),
        peak_mib()
    );
}

fn run_kv() {
    let Some(dir) = fixtures() else {
        println!("kv: skipped: ../shared/fixtures not found");
        return;
    };
    let mut worst: Option<(String, Duration)> = None;
    for name in [
        "c01-ok", "c01-bad", "c10-ok", "c10-bad", "c50-ok", "c50-bad",
    ] {
        let path = dir.join("kv").join(format!("{name}.txt"));
        let started = Instant::now();
        let outcome = check_file(&path, &settings(CheckModel::Linear(ModelKind::Kv)));
        let elapsed = started.elapsed();
        match outcome {
            Ok(o) => println!(
                "kv: {name}: {} in {:.1} ms",
                o.results.verdict,
                elapsed.as_secs_f64() * 1e3
            ),
            Err(e) => println!("kv: {name}: error: {e:#}"),
        }
        if worst.as_ref().is_none_or(|(_, t)| elapsed > *t) {
            worst = Some((name.to_string(), elapsed));
        }
    }
    if let Some((name, t)) = worst {
        println!(
            "kv: worst file {name}: {:.1} ms, peak {:.0} MiB",
            t.as_secs_f64() * 1e3,
            peak_mib()
        );
    }
}

fn run_log() {
    const OPS: usize = 1_000_000;
    let dir = std::env::temp_dir().join(format!("harness-bench-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        println!("log-1m: cannot create {}: {e}", dir.display());
        return;
    }
    let path = dir.join("history.jsonl");
    let history = checkers::log::simulate::generate_history(7, OPS, 8, 10);
    let written = std::fs::write(&path, history::jsonl::to_jsonl(&history.ops));
    let ops = history.len();
    drop(history);
    if let Err(e) = written {
        println!("log-1m: cannot write {}: {e}", path.display());
        return;
    }
    let size_mib = std::fs::metadata(&path).map_or(0.0, |m| m.len() as f64 / (1 << 20) as f64);
    println!("log-1m: generated {ops} ops, {size_mib:.0} MiB of JSONL");
    // The real binary, as a user runs it; its peak memory polled from /proc.
    let started = Instant::now();
    match Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["check", "--model", "log"])
        .arg(&path)
        .stdout(std::process::Stdio::piped())
        .spawn()
    {
        Ok(mut child) => {
            let status_file = format!("/proc/{}/status", child.id());
            let mut peak = 0.0f64;
            let status = loop {
                if let Some(kb) = std::fs::read_to_string(&status_file)
                    .ok()
                    .and_then(|s| vm_hwm_kb(&s))
                {
                    peak = peak.max(kb / 1024.0);
                }
                match child.try_wait() {
                    Ok(Some(status)) => break Some(status),
                    Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                    Err(_) => break None,
                }
            };
            let verdict = child
                .stdout
                .take()
                .map(|mut out| {
                    let mut text = String::new();
                    let _ = std::io::Read::read_to_string(&mut out, &mut text);
                    text.lines().last().unwrap_or_default().to_string()
                })
                .unwrap_or_default();
            println!(
                "log-1m: `harness check --model log` process: {:.2} s wall, {verdict}, exit {:?} (target < 5 s); \
                 peak memory {peak:.0} MiB (target < 2048)",
                started.elapsed().as_secs_f64(),
                status.and_then(|s| s.code())
            );
        }
        Err(e) => println!("log-1m: could not run harness: {e}"),
    }
    // In a fresh process, so that its peak memory is that of reading and checking alone.
    match std::env::current_exe() {
        Ok(me) => match Command::new(me)
            .arg("--child")
            .arg("log-check")
            .arg(&path)
            .status()
        {
            Ok(status) if status.success() => {}
            Ok(status) => println!("log-1m: checker exited with {status}"),
            Err(e) => println!("log-1m: could not start the checker: {e}"),
        },
        Err(e) => println!("log-1m: cannot find the bench executable: {e}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn vm_hwm_kb(status: &str) -> Option<f64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        })
}

fn run_log_check(path: &Path) {
    let started = Instant::now();
    let outcome = check_file(path, &settings(CheckModel::Log));
    let elapsed = started.elapsed();
    match outcome {
        Ok(o) => println!(
            "log-1m: in-process check_file: {:.2} s: {}; peak memory {:.0} MiB",
            elapsed.as_secs_f64(),
            o.results.verdict,
            peak_mib()
        ),
        Err(e) => println!("log-1m: error: {e:#}"),
    }
    // Where the time goes: the same two steps again, timed apart.
    let started = Instant::now();
    let read = history::read_history(path, Some(history::Format::Jsonl));
    let reading = started.elapsed();
    if let Ok((history, _)) = read {
        let started = Instant::now();
        let checked = checkers::log::check_log(&history);
        let checking = started.elapsed();
        let started = Instant::now();
        drop(history);
        println!(
            "log-1m: second run: reading JSONL {:.2} s, log checker {:.2} s ({}), freeing the history {:.2} s",
            reading.as_secs_f64(),
            checking.as_secs_f64(),
            if checked.is_ok() { "ok" } else { "error" },
            started.elapsed().as_secs_f64()
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    if let Some(pos) = std::env::args().position(|a| a == "--child") {
        match std::env::args().nth(pos + 1).as_deref() {
            Some("etcd") => run_etcd(),
            Some("kv") => run_kv(),
            Some("log-1m") => run_log(),
            Some("log-check") => match std::env::args().nth(pos + 2) {
                Some(path) => run_log_check(Path::new(&path)),
                None => println!("log-check needs a path"),
            },
            other => println!("unknown scenario {other:?}"),
        }
        return;
    }
    let chosen: Vec<&str> = SCENARIOS
        .into_iter()
        .filter(|s| args.is_empty() || args.iter().any(|a| s.contains(a.as_str())))
        .collect();
    let Ok(me) = std::env::current_exe() else {
        println!("cannot find the bench executable");
        return;
    };
    for scenario in chosen {
        match Command::new(&me).args(["--child", scenario]).status() {
            Ok(status) if status.success() => {}
            Ok(status) => println!("{scenario}: exited with {status}"),
            Err(e) => println!("{scenario}: could not start: {e}"),
        }
    }
}
