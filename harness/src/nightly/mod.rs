//! `harness nightly`: a night of random tests against one broker, plus every bug
//! reproduction, with a summary people read in the morning.
//!
//! A night (`store/nightly/<time>/`) runs `repro --all` first (every scenario in both
//! modes), then random cells of the [`matrix`] until `--budget` is spent, each a full
//! `harness test` stored like any other (`store/nightly-<workload>/<time>/`). After every
//! run it rewrites `summary.json`, `summary.html` and `junit.xml`, so a night cut short
//! still leaves a summary. Runs are compared with the previous night of the same store
//! (by matrix cell or scenario and mode): new failures are listed first.
//!
//! `--detect` ([`detect`]) instead measures, for each bug switch, how long random cells
//! with that switch on take until the checkers first flag a run.

pub mod detect;
pub mod matrix;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use checkers::Verdict;
use clap::Args;
use report::nightly::{self as summary, NightlyRun, NightlySummary, RunKind, Status};

use crate::options::BackendArgs;
use crate::scenario::run::{play, Mode, PlayOutcome};
use crate::scenario::{self, Scenario};
use crate::test_run::{self, TestOutcome};
use matrix::Cell;
use rng::Rng;
use store::duration::parse_duration;
use store::{BackendSpec, BrokerSettings, HostsSource, Plan, SshSpec, TestSpec};

/// `harness nightly`.
#[derive(Debug, Args)]
pub struct NightlyArgs {
    /// Wall-clock time for the whole night (`90s`, `10m`, `2h`, `1h30m`): the
    /// reproductions first, then random tests while a run still fits.
    #[arg(long, value_parser = positive_duration, value_name = "DURATION")]
    pub budget: Duration,

    /// Where runs and nights are stored (`<store>/nightly/<time>/`).
    #[arg(long, default_value = "store", value_name = "DIR")]
    pub store: PathBuf,

    /// All randomness of the night comes from it (random when not given).
    #[arg(long)]
    pub seed: Option<u64>,

    /// Instead of a night: for each bug switch, run random cells with it on until the
    /// checkers flag a run, over several seeds, and report the time it took.
    #[arg(long)]
    pub detect: bool,

    /// With --detect: the bug switches to measure (comma-separated; default all five).
    #[arg(long, value_name = "LIST", requires = "detect")]
    pub bugs: Option<String>,

    /// With --detect: seeds per bug switch.
    #[arg(long, default_value_t = 5, requires = "detect")]
    pub seeds: u32,

    /// With --detect: how long one seed searches before giving up.
    #[arg(long, value_parser = positive_duration, default_value = "10m", value_name = "DURATION", requires = "detect")]
    pub detect_limit: Duration,

    /// Skip the reproductions (only random tests).
    #[arg(long)]
    pub no_repro: bool,

    /// Where scenario files are (default: `scenarios/` of this workspace).
    #[arg(long, value_name = "DIR")]
    pub scenarios: Option<PathBuf>,

    /// A broker binary to run instead of building this workspace's (with failpoints).
    #[arg(long, value_name = "PATH")]
    pub broker_bin: Option<PathBuf>,

    /// Turn a bug switch on in every random test (to see what a regression looks like
    /// in the summary); repeatable. The reproductions set their own switches.
    #[arg(long = "bug", value_name = "JIRA", conflicts_with = "detect")]
    pub regressions: Vec<String>,

    /// Where the random tests' nodes live (the reproductions always use netns).
    #[command(flatten)]
    pub backend: BackendArgs,
}

/// The bug switches the broker has.
pub const BUG_SWITCHES: &[&str] = &[
    "KAFKA-7128",
    "KAFKA-7040",
    "KAFKA-1561",
    "KAFKA-3083",
    "KAFKA-2143",
];

/// Seconds a test takes beyond its client phase before anything was measured (cluster
/// start, heal, recovery, final reads, checking); replaced by the night's own mean.
const FIRST_OVERHEAD_GUESS_SECS: f64 = 35.0;

/// A `--budget` or `--detect-limit`: a duration ([`parse_duration`]'s grammar: `90`, `90s`,
/// `10m`, `2h`, `1h30m`), above zero and below a billion seconds.
fn positive_duration(text: &str) -> Result<Duration, String> {
    let duration = parse_duration(text)?;
    if duration.is_zero() || duration.as_secs_f64() >= 1e9 {
        return Err(format!("{:?}: must be a positive duration", text.trim()));
    }
    Ok(duration)
}

/// Runs `harness nightly`; the exit code: 0 when every run passed, 1 when one failed or
/// erred, 2 when none failed but one was unknown.
pub fn run(args: &NightlyArgs) -> Result<i32> {
    if args.detect && args.no_repro {
        // Harmless, but say that it means nothing.
        eprintln!("note: --detect runs no reproductions anyway");
    }
    if args.seeds == 0 {
        bail!("--seeds must be at least 1");
    }
    let bugs = detect_bugs(args)?;
    for bug in &args.regressions {
        if !BUG_SWITCHES.contains(&bug.as_str()) {
            bail!("--bug {bug:?}: one of {}", BUG_SWITCHES.join(", "));
        }
    }
    // Check the shared test options once (a bad --nodes-file is found now, not per run).
    let max_nodes = available_nodes(args)?;
    let probe = Cell::draw(&mut Rng::new(1), 30.0, max_nodes);
    cell_spec(args, &probe, &args.regressions, Path::new("/nonexistent"))?;
    let scenarios = if args.detect || args.no_repro {
        Vec::new()
    } else {
        let dir = args.scenarios.clone().unwrap_or_else(scenario::default_dir);
        scenario::load_all(&dir)?
    };
    let broker_bin = crate::lifecycle::broker_binary(args.broker_bin.as_deref())?;
    let seed = args.seed.unwrap_or_else(crate::lifecycle::random_seed);
    let night_dir = create_night_dir(&args.store)?;
    let mut night = Night::new(args, seed, &broker_bin, night_dir)?;
    night.max_nodes = max_nodes;
    println!("night: {}", night.dir.display());
    println!("seed: {seed}");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    if args.detect {
        detect::run(args, &bugs, &mut night, &runtime, &broker_bin)?;
    } else {
        run_reproductions(&scenarios, &mut night, &runtime, &broker_bin, &args.store)?;
        run_matrix(args, &mut night, &runtime, &broker_bin)?;
    }
    night.finish()?;
    Ok(night.exit_code())
}

/// How many nodes the tests may have: 5 on namespaces and with `--vagrant` (the
/// Vagrantfile's machines), the hosts of `--nodes-file` (at least 3) otherwise.
fn available_nodes(args: &NightlyArgs) -> Result<u32> {
    let BackendSpec::Ssh(SshSpec {
        hosts: HostsSource::NodesFile(file),
        ..
    }) = args.backend.to_spec()?
    else {
        return Ok(5);
    };
    let file = &file;
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("--nodes-file {}", file.display()))?;
    let hosts = backend::ssh::parse_nodes_file(&text)
        .with_context(|| format!("--nodes-file {}", file.display()))?;
    if hosts.len() < 3 {
        bail!(
            "--nodes-file {}: the nightly matrix needs at least 3 hosts, it names {}",
            file.display(),
            hosts.len()
        );
    }
    Ok(hosts.len().min(5) as u32)
}

fn detect_bugs(args: &NightlyArgs) -> Result<Vec<String>> {
    let Some(list) = &args.bugs else {
        return Ok(BUG_SWITCHES.iter().map(|b| b.to_string()).collect());
    };
    let mut bugs = Vec::new();
    for bug in list.split(',').map(str::trim).filter(|b| !b.is_empty()) {
        if !BUG_SWITCHES.contains(&bug) {
            bail!(
                "--bugs: {bug:?} is not a bug switch (there are {})",
                BUG_SWITCHES.join(", ")
            );
        }
        if !bugs.iter().any(|b| b == bug) {
            bugs.push(bug.to_string());
        }
    }
    if bugs.is_empty() {
        bail!("--bugs {list:?} names no bug switch");
    }
    Ok(bugs)
}

/// A night in progress: its folder, the summary so far, the previous night.
pub struct Night {
    pub dir: PathBuf,
    pub summary: NightlySummary,
    previous: Option<(String, NightlySummary)>,
    started: Instant,
    budget: Duration,
    /// Seconds tests took beyond their client phase, to plan the next one.
    overheads: Vec<f64>,
    /// The most nodes a test may have (the hosts there are).
    pub max_nodes: u32,
}

impl Night {
    fn new(args: &NightlyArgs, seed: u64, broker_bin: &Path, dir: PathBuf) -> Result<Night> {
        let mode = if args.detect { "detect" } else { "nightly" };
        let previous = previous_night(&args.store, &dir, mode);
        if let Some((name, _)) = &previous {
            println!("compared with the night of {name}");
        }
        let summary = NightlySummary {
            mode: mode.to_string(),
            started: chrono::Local::now().to_rfc3339(),
            finished: None,
            budget_secs: args.budget.as_secs_f64(),
            seed,
            command: std::env::args().collect::<Vec<_>>().join(" "),
            broker_bin: broker_bin.display().to_string(),
            runs: Vec::new(),
            detect: Vec::new(),
        };
        let night = Night {
            dir,
            summary,
            previous,
            started: Instant::now(),
            budget: args.budget,
            overheads: Vec::new(),
            max_nodes: 5,
        };
        night.write()?;
        Ok(night)
    }

    /// Time left of the budget.
    pub fn remaining(&self) -> Duration {
        self.budget.saturating_sub(self.started.elapsed())
    }

    /// The overhead to plan with: the mean so far, or a guess.
    pub fn overhead_secs(&self) -> f64 {
        if self.overheads.is_empty() {
            FIRST_OVERHEAD_GUESS_SECS
        } else {
            self.overheads.iter().sum::<f64>() / self.overheads.len() as f64
        }
    }

    pub fn record_overhead(&mut self, secs: f64) {
        if secs.is_finite() && secs > 0.0 {
            self.overheads.push(secs);
        }
    }

    /// Adds a run and rewrites the summary files.
    pub fn add(&mut self, run: NightlyRun) -> Result<()> {
        println!(
            "[{}] {} {}: {}{} ({:.0} s)",
            run.id,
            match run.kind {
                RunKind::Matrix => "test",
                RunKind::Repro => "repro",
            },
            run.key,
            status_name(run.status),
            anomaly_suffix(&run),
            run.secs
        );
        self.summary.runs.push(run);
        self.write()
    }

    /// Rewrites `summary.json`, `summary.html` and `junit.xml`.
    pub fn write(&self) -> Result<()> {
        let changes = summary::compare(self.previous.as_ref().map(|(_, s)| s), &self.summary);
        crate::check::write_json(&self.dir.join("summary.json"), &self.summary)?;
        let html = summary::render_html(
            &self.summary,
            &changes,
            self.previous.as_ref().map(|(name, _)| name.as_str()),
            &self.dir,
        );
        write_file(&self.dir.join("summary.html"), html.as_bytes())?;
        write_file(
            &self.dir.join("junit.xml"),
            summary::junit_xml(&self.summary).as_bytes(),
        )?;
        Ok(())
    }

    fn finish(&mut self) -> Result<()> {
        self.summary.finished = Some(chrono::Local::now().to_rfc3339());
        self.write()?;
        let changes = summary::compare(self.previous.as_ref().map(|(_, s)| s), &self.summary);
        let count = |status: Status| {
            self.summary
                .runs
                .iter()
                .filter(|r| r.status == status)
                .count()
        };
        let new_failures = changes
            .iter()
            .filter(|c| **c == summary::Change::NewFailure)
            .count();
        println!();
        println!(
            "{} runs in {:.0} s: {} passed, {} failed, {} errors, {} unknown; {} new failures",
            self.summary.runs.len(),
            self.started.elapsed().as_secs_f64(),
            count(Status::Pass),
            count(Status::Fail),
            count(Status::Error),
            count(Status::Unknown),
            new_failures
        );
        for index in summary::listing_order(&changes) {
            let run = &self.summary.runs[index];
            if run.status != Status::Pass {
                println!(
                    "  {:13} {} {}: {}{}",
                    change_name(changes[index]),
                    run.id,
                    run.key,
                    status_name(run.status),
                    anomaly_suffix(run)
                );
            }
        }
        println!("summary: {}", self.dir.join("summary.html").display());
        println!("junit: {}", self.dir.join("junit.xml").display());
        Ok(())
    }

    /// A night: 0 when every run passed, 1 when one failed or erred, 2 when the worst was
    /// unknown. `--detect`: 0 when every bug switch was found with a median time within
    /// [`summary::DETECT_LIMIT_SECS`], 1 otherwise (its runs are meant to fail).
    fn exit_code(&self) -> i32 {
        if self.summary.mode == "detect" {
            let all_found = self.summary.detect.iter().all(|result| {
                result
                    .median_secs
                    .is_some_and(|median| median <= summary::DETECT_LIMIT_SECS)
            });
            return if all_found { 0 } else { 1 };
        }
        let statuses: Vec<Status> = self.summary.runs.iter().map(|r| r.status).collect();
        if statuses
            .iter()
            .any(|s| matches!(s, Status::Fail | Status::Error))
        {
            1
        } else if statuses.contains(&Status::Unknown) {
            2
        } else {
            0
        }
    }
}

fn status_name(status: Status) -> &'static str {
    match status {
        Status::Pass => "pass",
        Status::Fail => "FAIL",
        Status::Error => "ERROR",
        Status::Unknown => "unknown",
    }
}

fn change_name(change: summary::Change) -> &'static str {
    match change {
        summary::Change::NewFailure => "NEW FAILURE",
        summary::Change::StillFailing => "still failing",
        summary::Change::Unknown => "unknown",
        summary::Change::Fixed => "fixed",
        summary::Change::Passing => "passing",
    }
}

fn anomaly_suffix(run: &NightlyRun) -> String {
    if run.anomalies.is_empty() {
        match &run.error {
            Some(error) => format!(": {error}"),
            None => String::new(),
        }
    } else {
        let kinds: Vec<String> = run
            .anomalies
            .iter()
            .map(|(kind, n)| format!("{kind}×{n}"))
            .collect();
        format!(" ({})", kinds.join(", "))
    }
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    // Written whole and renamed, so a reader never sees half a summary.
    let partial = path.with_extension("partial");
    std::fs::write(&partial, bytes)
        .with_context(|| format!("cannot write {}", partial.display()))?;
    std::fs::rename(&partial, path).with_context(|| format!("cannot write {}", path.display()))
}

/// `<store>/nightly/<YYYYMMDDTHHMMSS>/`.
fn create_night_dir(store: &Path) -> Result<PathBuf> {
    Ok(store::RunFolder::create(store, "nightly")?
        .dir()
        .to_path_buf())
}

/// The latest earlier night of `mode` in the store (its folder name and summary).
fn previous_night(store: &Path, current: &Path, mode: &str) -> Option<(String, NightlySummary)> {
    let mut nights: Vec<PathBuf> = std::fs::read_dir(store.join("nightly"))
        .ok()?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.is_dir() && !path.is_symlink())
        .filter(|path| path.file_name() != current.file_name())
        .collect();
    nights.sort();
    nights.into_iter().rev().find_map(|path| {
        let text = std::fs::read_to_string(path.join("summary.json")).ok()?;
        let summary: NightlySummary = serde_json::from_str(&text).ok()?;
        if summary.mode != mode {
            return None;
        }
        let name = path.file_name()?.to_string_lossy().into_owned();
        // Nights are named by their start time; only earlier ones count.
        (name.as_str() < current.file_name()?.to_string_lossy().as_ref()).then_some((name, summary))
    })
}

/// The test of a cell in this night's store and backend, with these bug switches.
pub fn cell_spec(
    args: &NightlyArgs,
    cell: &Cell,
    bugs: &[String],
    broker_bin: &Path,
) -> Result<TestSpec> {
    let spec = TestSpec {
        name: format!("nightly-{}", cell.workload),
        store: args.store.clone(),
        seed: cell.seed,
        backend: args.backend.to_spec()?,
        broker_bin: Some(broker_bin.to_path_buf()),
        brokers: BrokerSettings {
            bugs: bugs.to_vec(),
            config: cell.broker_config(),
        },
        plan: Plan::Workload(cell.plan().map_err(anyhow::Error::msg)?),
    };
    spec.validate()?;
    crate::cluster::validate_settings(&spec.brokers.config)?;
    Ok(spec)
}

/// Runs one cell as a test and says what it came to.
pub fn run_cell(
    args: &NightlyArgs,
    night: &mut Night,
    runtime: &tokio::runtime::Runtime,
    broker_bin: &Path,
    id: String,
    cell: &Cell,
    bugs: &[String],
) -> Result<NightlyRun> {
    let spec = cell_spec(args, cell, bugs, broker_bin)?;
    eprintln!("\n[{id}] harness test {}", cell.description());
    let began = Instant::now();
    let outcome = runtime.block_on(test_run::execute(&spec));
    let secs = began.elapsed().as_secs_f64();
    night.record_overhead(secs - cell.time_limit_secs);
    Ok(matrix_run(id, cell, &spec, outcome, secs))
}

fn matrix_run(
    id: String,
    cell: &Cell,
    spec: &TestSpec,
    outcome: Result<TestOutcome>,
    secs: f64,
) -> NightlyRun {
    let mut run = NightlyRun {
        id,
        kind: RunKind::Matrix,
        key: cell.key(),
        description: cell.description(),
        seed: Some(cell.seed),
        status: Status::Error,
        verdict: None,
        anomalies: Default::default(),
        expectation: None,
        command: spec.command_line(),
        run_dir: None,
        secs,
        error: None,
    };
    match outcome {
        Ok(outcome) => {
            run.status = match outcome.verdict {
                Verdict::Valid => Status::Pass,
                Verdict::Invalid => Status::Fail,
                Verdict::Unknown => Status::Unknown,
            };
            run.verdict = Some(outcome.verdict.as_str().to_string());
            run.anomalies = outcome.anomalies;
            run.run_dir = Some(outcome.run_dir);
        }
        Err(error) => {
            eprintln!("error: {error:#}");
            run.error = Some(format!("{error:#}"));
        }
    }
    run
}

/// Every scenario in both modes, as `repro --all` plays them.
fn run_reproductions(
    scenarios: &[Scenario],
    night: &mut Night,
    runtime: &tokio::runtime::Runtime,
    broker_bin: &Path,
    store: &Path,
) -> Result<()> {
    for scenario in scenarios {
        for mode in [Mode::Buggy, Mode::Fixed] {
            let id = format!("repro-{}-{}", scenario.name, mode.as_str());
            eprintln!("\n[{id}]");
            let began = Instant::now();
            let played = runtime.block_on(play(scenario, mode, store, broker_bin));
            let secs = began.elapsed().as_secs_f64();
            night.add(repro_run(id, scenario, mode, played, secs))?;
        }
    }
    Ok(())
}

fn repro_run(
    id: String,
    scenario: &Scenario,
    mode: Mode,
    played: Result<PlayOutcome>,
    secs: f64,
) -> NightlyRun {
    let mut run = NightlyRun {
        id,
        kind: RunKind::Repro,
        key: format!("{} {}", scenario.name, mode.as_str()),
        description: scenario.title.clone(),
        seed: None,
        status: Status::Error,
        verdict: None,
        anomalies: Default::default(),
        expectation: None,
        command: format!(
            "harness repro {}{}",
            scenario.name,
            if mode == Mode::Buggy { " --buggy" } else { "" }
        ),
        run_dir: None,
        secs,
        error: None,
    };
    match played {
        Ok(outcome) => {
            run.status = if outcome.met {
                Status::Pass
            } else {
                Status::Fail
            };
            run.verdict = outcome.verdict.map(|v| v.as_str().to_string());
            run.anomalies = outcome.anomalies;
            run.expectation = Some(format!(
                "expectation {}: {}",
                if outcome.met { "met" } else { "NOT met" },
                outcome.reason
            ));
            run.run_dir = Some(outcome.run_dir);
        }
        Err(error) => {
            eprintln!("error: {error:#}");
            run.error = Some(format!("{error:#}"));
        }
    }
    run
}

/// Random cells until the budget is spent: a cell is started only while its shortest
/// client phase plus the expected overhead still fits.
fn run_matrix(
    args: &NightlyArgs,
    night: &mut Night,
    runtime: &tokio::runtime::Runtime,
    broker_bin: &Path,
) -> Result<()> {
    let mut rng = Rng::new(night.summary.seed);
    let mut number = 0;
    loop {
        let room = night.remaining().as_secs_f64() - night.overhead_secs();
        if room < matrix::MIN_TIME_LIMIT_SECS {
            if number == 0 {
                println!(
                    "no time left for a random test (budget {:.0} s, {:.0} s left)",
                    args.budget.as_secs_f64(),
                    night.remaining().as_secs_f64()
                );
            }
            return Ok(());
        }
        number += 1;
        let cell = Cell::draw(&mut rng, room, night.max_nodes);
        let run = run_cell(
            args,
            night,
            runtime,
            broker_bin,
            format!("m{number:03}"),
            &cell,
            &args.regressions,
        )?;
        night.add(run)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_are_positive_durations() {
        assert_eq!(positive_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(positive_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(positive_duration("1.5m"), Ok(Duration::from_secs(90)));
        for bad in [
            "",
            "m",
            "10x",
            "10m5",
            "0",
            "-5",
            "0s",
            "ten",
            "1000000000s",
        ] {
            assert!(positive_duration(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            positive_duration("0s"),
            Err("\"0s\": must be a positive duration".into())
        );
    }

    #[test]
    fn the_previous_night_is_the_latest_earlier_one_of_the_same_mode() {
        let dir = std::env::temp_dir().join(format!("nightly-prev-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let nights = dir.join("nightly");
        let write = |name: &str, mode: &str| {
            let night = nights.join(name);
            std::fs::create_dir_all(&night).unwrap();
            let summary = NightlySummary {
                mode: mode.into(),
                started: String::new(),
                finished: None,
                budget_secs: 1.0,
                seed: 1,
                command: String::new(),
                broker_bin: String::new(),
                runs: Vec::new(),
                detect: Vec::new(),
            };
            std::fs::write(
                night.join("summary.json"),
                serde_json::to_string(&summary).unwrap(),
            )
            .unwrap();
            night
        };
        write("20261101T010000", "nightly");
        write("20261102T010000", "detect");
        let current = write("20261103T010000", "nightly");
        write("20261104T010000", "nightly");
        std::fs::create_dir_all(nights.join("20261102T120000")).unwrap(); // no summary
        let found = previous_night(&dir, &current, "nightly").map(|(name, _)| name);
        assert_eq!(found.as_deref(), Some("20261101T010000"));
        let first = nights.join("20261101T010000");
        assert!(previous_night(&dir, &first, "nightly").is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
