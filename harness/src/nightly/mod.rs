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

pub mod args;
pub mod cells;
pub mod detect;
pub mod matrix;
pub mod night;

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use report::nightly::{NightlyRun, RunKind, Shrunk, Status};

use crate::lifecycle::Broker;
use crate::scenario::run::{play, Mode, PlayOutcome};
use crate::scenario::{self, Scenario};
use crate::shrink::ShrinkOptions;
pub use args::{NightlyArgs, BUG_SWITCHES};
use cells::{cell_spec, run_cell};
use matrix::Cell;
use night::{create_night_dir, Night};
use rng::Rng;
use spec::{BackendSpec, HostsSource, SshSpec};

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
    cell_spec(args, &probe, &args.regressions)?;
    let scenarios = if args.detect || args.no_repro {
        Vec::new()
    } else {
        let dir = args.scenarios.clone().unwrap_or_else(scenario::default_dir);
        scenario::load_all(&dir)?
    };
    let broker = Broker::resolve(args.broker_bin.as_deref())?;
    let seed = args.seed.unwrap_or_else(crate::lifecycle::random_seed);
    let night_dir = create_night_dir(&args.store)?;
    let mut night = Night::new(args, seed, &broker.path, night_dir)?;
    night.max_nodes = max_nodes;
    println!("night: {}", night.dir.display());
    println!("seed: {seed}");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    if args.detect {
        detect::run(args, &bugs, &mut night, &runtime, &broker)?;
    } else {
        run_reproductions(&scenarios, &mut night, &runtime, &broker, &args.store)?;
        run_matrix(args, &mut night, &runtime, &broker)?;
    }
    shrink_new_failures(args, &mut night, &runtime, &broker)?;
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

/// Every scenario in both modes, as `repro --all` plays them.
fn run_reproductions(
    scenarios: &[Scenario],
    night: &mut Night,
    runtime: &tokio::runtime::Runtime,
    broker: &Broker,
    store: &Path,
) -> Result<()> {
    for scenario in scenarios {
        for mode in [Mode::Buggy, Mode::Fixed] {
            let id = format!("repro-{}-{}", scenario.name, mode.as_str());
            eprintln!("\n[{id}]");
            let began = Instant::now();
            let played = runtime.block_on(play(scenario, mode, store, broker));
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
        shrunk: None,
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

/// Each new failure of a random run shrunk into a scenario file, newest-first as the
/// summary lists them, while `--shrink-budget` lasts (the last one gets what is left).
/// A run that cannot be shrunk (a register run, say) is said and skipped.
fn shrink_new_failures(
    args: &NightlyArgs,
    night: &mut Night,
    runtime: &tokio::runtime::Runtime,
    broker: &Broker,
) -> Result<()> {
    if args.shrink_budget.is_zero() {
        return Ok(());
    }
    let began = Instant::now();
    let changes = night.changes();
    for index in report::nightly::listing_order(&changes) {
        let run = &night.summary.runs[index];
        let new_failure = changes[index] == report::nightly::Change::NewFailure;
        let (RunKind::Matrix, Status::Fail, true, Some(dir)) =
            (run.kind, run.status, new_failure, run.run_dir.clone())
        else {
            continue;
        };
        let left = args.shrink_budget.saturating_sub(began.elapsed());
        if left < MIN_SHRINK {
            println!("shrink budget spent: {} not shrunk", run.id);
            continue;
        }
        println!("\n[shrink {}] {}", run.id, dir.display());
        let options = ShrinkOptions {
            run: dir,
            budget: left,
            tries: args.shrink_tries,
            out: None,
            store: args.store.clone(),
        };
        match crate::shrink::shrink_run(&options, runtime, broker) {
            Ok(report) => {
                let shrunk = Shrunk {
                    scenario: report.scenario,
                    folder: report.folder,
                    faults_before: report.original_faults,
                    faults_after: report.final_faults,
                    reproduced: report.final_reproduced,
                    tries: report.tries,
                    secs: report.secs,
                };
                println!(
                    "[shrink {}] {}",
                    night.summary.runs[index].id,
                    shrunk.line()
                );
                night.summary.runs[index].shrunk = Some(shrunk);
                night.write()?;
            }
            Err(error) => eprintln!(
                "[shrink {}] not shrunk: {error:#}",
                night.summary.runs[index].id
            ),
        }
    }
    Ok(())
}

/// A shrink needs at least this long to measure the lifted run.
const MIN_SHRINK: std::time::Duration = std::time::Duration::from_secs(120);

/// Random cells until the budget is spent: a cell is started only while its shortest
/// client phase plus the expected overhead still fits.
fn run_matrix(
    args: &NightlyArgs,
    night: &mut Night,
    runtime: &tokio::runtime::Runtime,
    broker: &Broker,
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
            broker,
            format!("m{number:03}"),
            &cell,
            &args.regressions,
        )?;
        night.add(run)?;
    }
}
