//! `harness check`: judge stored histories offline.
//!
//! One file prints a summary (anomalies, or the op that could not be linearized); several
//! print one `PATH<TAB>verdict<TAB>MILLISECONDS` line each, in the order given, checked in
//! parallel. Exit code: 0 all valid, 1 any invalid, 2 any unknown (none invalid), 3 when a
//! file could not be read or checked at all (a file with no op in it is no history), or
//! when standard output could not be written (a full disk). A closed standard output
//! (`harness check … | head`) only silences the rest of the output: the checks go on and
//! the exit code is still their verdict.

use anyhow::{bail, Context, Result};
use checkers::linear::{
    check_linearizable, Algorithm, AlgorithmChoice, LinearOptions, LinearReport, ModelKind,
};
use checkers::log::{check_log, AnomalyKind, LogReport};
use checkers::{Results, Verdict};
use clap::Args;
use history::{read_history, Format, History};
use serde::Serialize;
use std::collections::BTreeSet;
use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// History files, or run folders holding `history.jsonl` (results are then written
    /// to the folder's `results.json`).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,

    /// Input format; guessed from each file when not given.
    #[arg(long, value_name = "jsonl|jepsen-edn|porcupine-etcd|porcupine-kv", value_parser = parse_format)]
    pub format: Option<Format>,

    /// What to check against; guessed from the format and the ops' functions when not given.
    #[arg(
        long,
        value_name = "log|register|cas-register|multi-register|etcd|kv",
        value_parser = parse_model
    )]
    pub model: Option<CheckModel>,

    /// The history is a Jepsen `independent` one: every client op's value is a
    /// `[key value]` tuple; check each key on its own.
    #[arg(long)]
    pub independent: bool,

    /// The model's initial value as JSON, e.g. `0`, `null`, `{"x":0,"y":0}`.
    #[arg(long, value_name = "JSON")]
    pub init: Option<String>,

    /// Give up with `unknown` after this many seconds per file (linearizability search).
    #[arg(long, value_name = "SECS", default_value = "300", value_parser = parse_time_limit)]
    pub time_limit: Duration,

    /// Linearizability: the zone check for plain registers whose read values are each
    /// written once (`zones`, O(n log n)), the Wing–Gong search (`wgl`), or each where it
    /// applies (`auto`: zones, else the search).
    #[arg(long, value_name = "auto|wgl|zones", default_value = "auto", value_parser = parse_algorithm)]
    pub algorithm: AlgorithmChoice,

    /// Give up with `unknown` when the search's memory estimate passes this many MiB.
    #[arg(long, value_name = "MIB", default_value_t = 4096, value_parser = parse_memory_limit)]
    pub memory_limit: usize,

    /// Also write the full results as JSON to this file.
    #[arg(long, value_name = "OUT")]
    pub json: Option<PathBuf>,
}

pub(crate) fn parse_format(name: &str) -> Result<Format, String> {
    name.parse()
}

/// The longest `--time-limit`: a year, far beyond any useful search.
const MAX_TIME_LIMIT_SECS: f64 = 365.0 * 24.0 * 3600.0;

fn parse_time_limit(text: &str) -> Result<Duration, String> {
    let secs: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !(secs.is_finite() && secs > 0.0 && secs <= MAX_TIME_LIMIT_SECS) {
        return Err(format!(
            "{text:?}: expected seconds above 0 and at most {MAX_TIME_LIMIT_SECS} (a year)"
        ));
    }
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{text:?}: {e}"))
}

/// The largest `--memory-limit` in MiB: 1 PiB, so that the byte count cannot overflow.
const MAX_MEMORY_LIMIT_MIB: usize = 1 << 30;

fn parse_memory_limit(text: &str) -> Result<usize, String> {
    let mib: usize = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a whole number of MiB"))?;
    if mib == 0 || mib > MAX_MEMORY_LIMIT_MIB {
        return Err(format!(
            "{text:?}: expected MiB from 1 to {MAX_MEMORY_LIMIT_MIB}"
        ));
    }
    Ok(mib)
}

fn parse_algorithm(name: &str) -> Result<AlgorithmChoice, String> {
    name.parse()
        .map_err(|e: checkers::linear::UnknownAlgorithm| e.to_string())
}

fn parse_model(name: &str) -> Result<CheckModel, String> {
    CheckModel::parse(name).map_err(|e| e.to_string())
}

/// What a history is judged against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckModel {
    /// The Kafka log checker (append/read with offsets).
    Log,
    /// The linearizability checker with a model.
    Linear(ModelKind),
}

impl CheckModel {
    pub fn parse(name: &str) -> Result<CheckModel> {
        if name == "log" {
            return Ok(CheckModel::Log);
        }
        name.parse::<ModelKind>().map(CheckModel::Linear).map_err(|_| {
            anyhow::anyhow!(
                "unknown model {name:?}: expected log, register, cas-register, multi-register, etcd or kv"
            )
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            CheckModel::Log => "log",
            CheckModel::Linear(kind) => kind.name(),
        }
    }

    /// The model a history most likely wants: Porcupine formats name theirs; otherwise the
    /// functions of its client ops decide.
    pub fn guess(format: Format, history: &History) -> Option<CheckModel> {
        match format {
            Format::PorcupineEtcd => return Some(CheckModel::Linear(ModelKind::Etcd)),
            Format::PorcupineKv => return Some(CheckModel::Linear(ModelKind::Kv)),
            Format::Jsonl | Format::JepsenEdn => {}
        }
        let fs: BTreeSet<&str> = history
            .ops
            .iter()
            .filter(|op| op.process.is_client())
            .map(|op| op.f.as_str())
            .collect();
        let only = |allowed: &[&str]| !fs.is_empty() && fs.iter().all(|f| allowed.contains(f));
        if only(&["append", "read"])
            && history
                .ops
                .iter()
                .any(|op| op.f == "append" && op.key().is_some())
        {
            Some(CheckModel::Log)
        } else if only(&["txn"]) {
            Some(CheckModel::Linear(ModelKind::MultiRegister))
        } else if only(&["read", "write", "cas"]) && fs.contains("cas") {
            Some(CheckModel::Linear(ModelKind::CasRegister))
        } else if only(&["read", "write"]) {
            Some(CheckModel::Linear(ModelKind::Register))
        } else if only(&["get", "put", "append"]) {
            Some(CheckModel::Linear(ModelKind::Kv))
        } else {
            None
        }
    }
}

/// Everything one file's check produced.
#[derive(Debug, Serialize)]
pub struct FileOutcome {
    pub path: PathBuf,
    pub format: String,
    pub model: String,
    pub ops: usize,
    pub millis: u128,
    pub results: Results,
    #[serde(skip)]
    pub log: Option<LogReport>,
    #[serde(skip)]
    pub linear: Option<LinearReport>,
}

/// Options shared by every file of one `harness check`.
#[derive(Debug, Clone)]
pub struct CheckSettings {
    pub format: Option<Format>,
    pub model: Option<CheckModel>,
    pub init: Option<serde_json::Value>,
    /// Client values are Jepsen `[key value]` tuples (`--independent`).
    pub independent: bool,
    pub time_limit: Duration,
    pub memory_budget_bytes: usize,
    /// Threads one file's linearizability search may use.
    pub threads: usize,
    /// Which linearizability algorithm judges each key.
    pub algorithm: AlgorithmChoice,
    /// A file with no op in it is an error rather than an empty (valid) history: what
    /// `harness check` wants of files a user names; a test judging its own run does not.
    pub require_ops: bool,
}

impl CheckSettings {
    pub fn from_args(args: &CheckArgs) -> Result<CheckSettings> {
        let init = match &args.init {
            Some(text) => Some(
                serde_json::from_str(text)
                    .with_context(|| format!("--init {text:?} is not JSON"))?,
            ),
            None => None,
        };
        if init.is_some() && args.model == Some(CheckModel::Log) {
            bail!("--init does not apply to --model log");
        }
        Ok(CheckSettings {
            format: args.format,
            model: args.model,
            init,
            independent: args.independent,
            time_limit: args.time_limit,
            memory_budget_bytes: args.memory_limit.saturating_mul(1 << 20),
            threads: available_threads(),
            algorithm: args.algorithm,
            require_ops: true,
        })
    }
}

fn available_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A history file, or the `history.jsonl` of a run folder.
pub fn history_path(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join("history.jsonl")
    } else {
        path.to_path_buf()
    }
}

/// Reads and checks one file.
pub fn check_file(path: &Path, settings: &CheckSettings) -> Result<FileOutcome> {
    let started = Instant::now();
    let file = history_path(path);
    let (mut history, format) = read_history(&file, settings.format)?;
    if settings.require_ops && history.is_empty() {
        bail!(
            "{}: no operation in it: not a history (an empty file, or only blank lines)",
            file.display()
        );
    }
    if settings.independent {
        history = history::independent::lift_independent(&history)?;
    }
    if let Some(torn) = &history.torn_tail {
        // A closed standard error is no reason to stop checking.
        let _ = writeln!(
            io::stderr().lock(),
            "warning: {torn}: incomplete last line dropped (the writer was killed mid-write); \
             checking the {} complete ops before it",
            history.len()
        );
    }
    let model = match settings.model {
        Some(model) => model,
        None => CheckModel::guess(format, &history).with_context(|| {
            format!(
                "{}: cannot tell which model to check against; pass --model log|register|cas-register|multi-register|etcd|kv",
                file.display()
            )
        })?,
    };
    let mut results = Results::default();
    let (mut log, mut linear) = (None, None);
    match model {
        CheckModel::Log => {
            let report = check_log(&history)?;
            results.add("log", report.verdict, &report);
            log = Some(report);
        }
        CheckModel::Linear(kind) => {
            let mut options = LinearOptions::new(kind);
            options.init = settings.init.clone();
            options.time_limit = Some(settings.time_limit);
            options.memory_budget_bytes = settings.memory_budget_bytes;
            options.threads = settings.threads.max(1);
            options.algorithm = settings.algorithm;
            let report = check_linearizable(&history, &options)?;
            results.add("linearizable", report.verdict, &report);
            linear = Some(report);
        }
    }
    // Only a history whose nemesis made settle checks is judged on them.
    let settle = checkers::settle::check_settle(&history);
    if settle.judged + settle.undecided + settle.skipped > 0 {
        results.add("settle", settle.verdict, &settle);
    }
    let ops = history.len();
    let millis = started.elapsed().as_millis();
    release_in_background(history);
    Ok(FileOutcome {
        path: path.to_path_buf(),
        format: format.name().to_string(),
        model: model.name().to_string(),
        ops,
        millis,
        results,
        log,
        linear,
    })
}

/// Histories at least this long are freed on a thread of their own.
const BACKGROUND_FREE_OPS: usize = 100_000;

/// Freeing a million-op history (millions of small JSON values) takes most of a second;
/// a large one is freed on its own thread, overlapping the next file's work, and a
/// process that exits first simply hands the memory back to the OS.
fn release_in_background(history: History) {
    if history.len() < BACKGROUND_FREE_OPS {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("free-history".into())
        .spawn(move || drop(history));
    // If no thread can be had, the history was moved into the failed closure and is
    // freed right here instead.
    drop(spawned);
}

/// Checker results measured while a test ran rather than derived from its history (the
/// availability and one-down probes of `harness test`, the truncations and ISR
/// expansions its brokers logged): a re-check of a run folder keeps them from the folder's `results.json`, and
/// applies the durability waiver its history checker had again, so that it gives the
/// same verdict.
const LIVE_CHECKERS: &[&str] = &["availability", "one-down", "truncation", "isr"];

fn keep_live_results(previous: &Path, results: &mut Results) {
    let Ok(text) = std::fs::read_to_string(previous) else {
        return;
    };
    let Ok(previous) = serde_json::from_str::<Results>(&text) else {
        return;
    };
    for name in LIVE_CHECKERS {
        if let Some(kept) = previous.checkers.get(*name) {
            results.add(name, kept.verdict, &kept.report);
        }
    }
    // The live checkers' verdicts were judged under their waivers already.
    for (name, kept) in previous
        .checkers
        .iter()
        .filter(|(name, _)| !LIVE_CHECKERS.contains(&name.as_str()))
    {
        let Some(waived) = kept.report.get("waived") else {
            continue;
        };
        let reason = waived.get("reason").and_then(|r| r.as_str()).unwrap_or("");
        let kinds: Option<Vec<&str>> = waived
            .get("kinds")
            .and_then(|k| k.as_array())
            .map(|kinds| kinds.iter().filter_map(|k| k.as_str()).collect());
        results.waive(name, kinds.as_deref(), reason);
    }
}

/// Runs `harness check`; returns the exit code.
pub fn run(args: &CheckArgs) -> Result<i32> {
    let settings = CheckSettings::from_args(args)?;
    let mut stdout = Stdout::default();
    let code = if let [path] = args.files.as_slice() {
        let mut outcome = check_file(path, &settings)?;
        if path.is_dir() {
            keep_live_results(&path.join("results.json"), &mut outcome.results);
        }
        write_summary(&mut stdout, &outcome);
        if path.is_dir() {
            spec::folder::write_json(&path.join("results.json"), &outcome.results)?;
        }
        if let Some(out) = &args.json {
            spec::folder::write_json(out, &outcome.results)?;
        }
        outcome.results.verdict.exit_code()
    } else {
        check_many(&mut stdout, &args.files, &settings, args.json.as_deref())?
    };
    stdout.finish().context("writing to standard output")?;
    Ok(code)
}

/// Standard output for reports that must not panic when it cannot be written (as
/// `println!` does): once a reader closed the pipe (`| head`), the rest is dropped in
/// silence; any other error (a full disk) is kept for [`Stdout::finish`], and nothing more
/// is written after it.
#[derive(Default)]
pub(crate) struct Stdout {
    closed: bool,
    error: Option<io::Error>,
}

impl Stdout {
    /// Writes one line.
    pub(crate) fn line(&mut self, text: fmt::Arguments<'_>) {
        if self.closed || self.error.is_some() {
            return;
        }
        let mut out = io::stdout().lock();
        let written = out
            .write_fmt(text)
            .and_then(|()| out.write_all(b"\n"))
            .and_then(|()| out.flush());
        match written {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => self.closed = true,
            Err(e) => self.error = Some(e),
        }
    }

    /// The first write error other than a closed pipe.
    pub(crate) fn finish(self) -> io::Result<()> {
        match self.error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

#[derive(Serialize)]
struct ManyFiles<'a> {
    verdict: Verdict,
    files: Vec<&'a FileOutcome>,
    errors: Vec<FileError>,
}

#[derive(Serialize)]
struct FileError {
    path: PathBuf,
    error: String,
}

/// Checks files in parallel (one search thread per file), calling `on_done` in input
/// order as soon as every earlier file is done. Returns every file's outcome, in order.
pub fn check_files(
    files: &[PathBuf],
    settings: &CheckSettings,
    mut on_done: impl FnMut(&Path, &Result<FileOutcome>),
) -> Vec<Result<FileOutcome>> {
    let per_file = CheckSettings {
        threads: 1,
        ..settings.clone()
    };
    let next = AtomicUsize::new(0);
    let (sender, receiver) = mpsc::channel::<(usize, Result<FileOutcome>)>();
    let mut outcomes: Vec<Option<Result<FileOutcome>>> = (0..files.len()).map(|_| None).collect();
    std::thread::scope(|scope| {
        for _ in 0..settings.threads.clamp(1, files.len().max(1)) {
            let sender = sender.clone();
            let (next, per_file) = (&next, &per_file);
            scope.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(path) = files.get(i) else { return };
                if sender.send((i, check_file(path, per_file))).is_err() {
                    return;
                }
            });
        }
        drop(sender);
        let mut reported = 0;
        for (i, outcome) in receiver {
            outcomes[i] = Some(outcome);
            while let (Some(Some(done)), Some(path)) = (outcomes.get(reported), files.get(reported))
            {
                on_done(path, done);
                reported += 1;
            }
        }
    });
    outcomes.into_iter().flatten().collect()
}

fn check_many(
    stdout: &mut Stdout,
    files: &[PathBuf],
    settings: &CheckSettings,
    json: Option<&Path>,
) -> Result<i32> {
    let outcomes = check_files(files, settings, |path, outcome| match outcome {
        Ok(o) => stdout.line(format_args!(
            "{}\t{}\t{}",
            path.display(),
            o.results.verdict,
            o.millis
        )),
        Err(e) => {
            let _ = writeln!(io::stderr().lock(), "error: {}: {e:#}", path.display());
        }
    });
    let mut verdicts = Vec::new();
    let mut ok_outcomes = Vec::new();
    let mut errors = Vec::new();
    for (path, outcome) in files.iter().zip(outcomes.iter()) {
        match outcome {
            Ok(o) => {
                verdicts.push(o.results.verdict);
                ok_outcomes.push(o);
            }
            Err(e) => errors.push(FileError {
                path: path.clone(),
                error: format!("{e:#}"),
            }),
        }
    }
    let verdict = Verdict::compose(verdicts);
    let exit_code = if errors.is_empty() {
        verdict.exit_code()
    } else {
        crate::EXIT_TOOL_ERROR
    };
    if let Some(out) = json {
        let files = ok_outcomes;
        spec::folder::write_json(
            out,
            &ManyFiles {
                verdict,
                files,
                errors,
            },
        )?;
    }
    Ok(exit_code)
}

/// How many instances of one anomaly kind the terminal summary shows.
const SHOWN_PER_KIND: usize = 5;

/// Prints a file's summary to standard output (a closed or full one is not an error of
/// the caller: its results are in its files).
pub(crate) fn print_summary(outcome: &FileOutcome) {
    write_summary(&mut Stdout::default(), outcome);
}

fn write_summary(out: &mut Stdout, outcome: &FileOutcome) {
    out.line(format_args!(
        "history: {} ({}, {} ops)",
        outcome.path.display(),
        outcome.format,
        outcome.ops
    ));
    out.line(format_args!("model: {}", outcome.model));
    if let Some(report) = &outcome.log {
        write_log_summary(out, report);
    }
    if let Some(report) = &outcome.linear {
        write_linear_summary(out, report);
    }
    out.line(format_args!("checked in {} ms", outcome.millis));
    out.line(format_args!("verdict: {}", outcome.results.verdict));
}

fn write_log_summary(out: &mut Stdout, report: &LogReport) {
    if report.anomalies.is_empty() {
        out.line(format_args!("anomalies: none"));
        return;
    }
    for kind in AnomalyKind::ALL {
        let found = report.found(kind);
        if found == 0 {
            continue;
        }
        let counted = report.counted(kind);
        let note = match counted {
            0 => " (reported, not counted against validity)".to_string(),
            c if c == found => String::new(),
            c => format!(" ({c} counted against validity)"),
        };
        out.line(format_args!("{kind}: {found} found{note}"));
        let shown = report.anomalies.iter().filter(|a| a.kind == kind);
        for anomaly in shown.take(SHOWN_PER_KIND) {
            let ops: Vec<String> = anomaly.ops.iter().map(u64::to_string).collect();
            out.line(format_args!(
                "  {} [ops {}]",
                anomaly.explanation,
                ops.join(", ")
            ));
        }
        if found > SHOWN_PER_KIND {
            out.line(format_args!(
                "  ... and {} more (see --json)",
                found - SHOWN_PER_KIND
            ));
        }
    }
}

fn write_linear_summary(out: &mut Stdout, report: &LinearReport) {
    out.line(format_args!(
        "operations: {} in {} partition(s), {} checked",
        report.operations, report.partitions, report.partitions_checked
    ));
    let by_zones = report
        .algorithms
        .iter()
        .filter(|p| p.algorithm == Algorithm::Zones)
        .count();
    out.line(format_args!(
        "algorithms: {by_zones} partition(s) by zones, {} by wgl",
        report.algorithms.len() - by_zones
    ));
    if let Some(reason) = &report.reason {
        out.line(format_args!("undecided: {reason}"));
    }
    if let Some(failure) = &report.failure {
        if let Some(key) = &failure.key {
            out.line(format_args!(
                "not linearizable: key {key} ({})",
                failure.algorithm
            ));
        } else {
            out.line(format_args!("not linearizable ({})", failure.algorithm));
        }
        if failure.conflict.is_some() {
            out.line(format_args!("  {}", failure.unplaced_description));
            return;
        }
        out.line(format_args!(
            "  longest linearizable prefix: {} ops{}",
            failure.longest_prefix.len(),
            prefix_preview(&failure.longest_prefix)
        ));
        out.line(format_args!(
            "  could not place op {}: {}",
            failure.unplaced, failure.unplaced_description
        ));
    }
}

fn prefix_preview(indices: &[u64]) -> String {
    const SHOWN: usize = 12;
    if indices.is_empty() {
        return String::new();
    }
    let start = indices.len().saturating_sub(SHOWN);
    let tail: Vec<String> = indices[start..].iter().map(u64::to_string).collect();
    format!(
        " (ends {}{})",
        if start > 0 { "... " } else { "" },
        tail.join(" ")
    )
}
