//! `harness repro`: play scenarios and compare the checkers' verdicts with what each
//! scenario expects — one in one mode, or (`--all`) every one in both modes with a table.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::lifecycle::Broker;
use crate::scenario::run::{play, Mode, PlayOutcome};
use crate::scenario::{self, Scenario};
use clap::Args;

#[derive(Debug, Args)]
pub struct ReproArgs {
    /// The scenario: a name in the scenarios folder (`KAFKA-7128`) or a `.toml` file.
    #[arg(
        value_name = "NAME",
        required_unless_present = "all",
        conflicts_with = "all"
    )]
    pub name: Option<String>,

    /// Turn the scenario's bug switch on (expect the checkers to catch the bug);
    /// without it the fix is on and the verdict must be valid.
    #[arg(long)]
    pub buggy: bool,

    /// Play every scenario in both modes and print a table.
    #[arg(long, conflicts_with = "buggy")]
    pub all: bool,

    /// With --all: also write the table as JSON to this file.
    #[arg(long, value_name = "OUT", requires = "all")]
    pub json: Option<PathBuf>,

    /// Only read and validate the scenario file(s); start nothing.
    #[arg(long)]
    pub check: bool,

    /// Where scenario files are (default: `scenarios/` of this workspace).
    #[arg(long, value_name = "DIR")]
    pub scenarios: Option<PathBuf>,

    /// Where runs are stored: `<store>/<scenario>-<mode>/<time>/`.
    #[arg(long, default_value = "store", value_name = "DIR")]
    pub store: PathBuf,

    /// A broker binary to run instead of building this workspace's (with failpoints).
    #[arg(long, value_name = "PATH")]
    pub broker_bin: Option<PathBuf>,
}

/// Runs `harness repro`; returns the exit code: 0 when every expectation held, 1 when
/// one did not.
pub fn run(args: &ReproArgs) -> Result<i32> {
    let dir = args.scenarios.clone().unwrap_or_else(scenario::default_dir);
    let scenarios = if args.all {
        scenario::load_all(&dir)?
    } else {
        let name = args.name.as_deref().unwrap_or_default();
        vec![Scenario::load(&scenario_path(&dir, name)?)?]
    };
    if args.check {
        for s in &scenarios {
            println!(
                "{}: ok ({} nodes, {} steps) {}",
                s.path.display(),
                s.cluster.nodes.len(),
                s.steps.len(),
                s.title
            );
        }
        return Ok(0);
    }
    let broker = Broker::resolve(args.broker_bin.as_deref())?;
    let plays: Vec<(&Scenario, Mode)> = if args.all {
        scenarios
            .iter()
            .flat_map(|s| [(s, Mode::Buggy), (s, Mode::Fixed)])
            .collect()
    } else {
        let mode = if args.buggy { Mode::Buggy } else { Mode::Fixed };
        scenarios.iter().map(|s| (s, mode)).collect()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let began = Instant::now();
    let mut outcomes = Vec::new();
    for (i, (scenario, mode)) in plays.iter().enumerate() {
        if plays.len() > 1 {
            eprintln!(
                "\n[{}/{}] {} {}",
                i + 1,
                plays.len(),
                scenario.name,
                mode.as_str()
            );
        }
        let outcome = runtime.block_on(play(scenario, *mode, &args.store, &broker))?;
        print_outcome(&outcome);
        outcomes.push(outcome);
    }
    if args.all {
        println!();
        print_table(&outcomes);
        let met = outcomes.iter().filter(|o| o.met).count();
        println!(
            "{met} of {} expectations held in {:.0} s",
            outcomes.len(),
            began.elapsed().as_secs_f64()
        );
        if let Some(out) = &args.json {
            write_table(out, &outcomes)?;
        }
    }
    Ok(if outcomes.iter().all(|o| o.met) { 0 } else { 1 })
}

/// `name` as a file: a path to a `.toml`, or a scenario of `dir`.
fn scenario_path(dir: &Path, name: &str) -> Result<PathBuf> {
    if name.ends_with(".toml") {
        return Ok(PathBuf::from(name));
    }
    let path = dir.join(format!("{name}.toml"));
    if path.is_file() {
        return Ok(path);
    }
    let known: Vec<String> = scenario::load_all(dir)
        .map(|all| all.into_iter().map(|s| s.name).collect())
        .unwrap_or_default();
    bail!(
        "no scenario {name:?} in {} (there are: {})",
        dir.display(),
        known.join(", ")
    )
}

fn print_outcome(outcome: &PlayOutcome) {
    println!(
        "{} {}: verdict {}; expectation {}: {}",
        outcome.scenario,
        outcome.mode.as_str(),
        outcome.verdict.map_or("none", |v| v.as_str()),
        if outcome.met { "met" } else { "NOT met" },
        outcome.reason
    );
    println!("run: {}", outcome.run_dir.display());
}

fn anomaly_list(outcome: &PlayOutcome) -> String {
    if outcome.anomalies.is_empty() {
        "-".into()
    } else {
        outcome
            .anomalies
            .keys()
            .cloned()
            .collect::<Vec<_>>()
            .join(",")
    }
}

fn print_table(outcomes: &[PlayOutcome]) {
    let width = outcomes
        .iter()
        .map(|o| o.scenario.len())
        .max()
        .unwrap_or(8)
        .max(8);
    let anomalies_width = outcomes
        .iter()
        .map(|o| anomaly_list(o).len())
        .max()
        .unwrap_or(9)
        .max(9);
    println!(
        "{:width$}  {:5}  {:7}  {:anomalies_width$}  {:8}  {:>8}",
        "scenario", "mode", "verdict", "anomalies", "expected", "duration"
    );
    for o in outcomes {
        println!(
            "{:width$}  {:5}  {:7}  {:anomalies_width$}  {:8}  {:>7.1}s",
            o.scenario,
            o.mode.as_str(),
            o.verdict.map_or("none", |v| v.as_str()),
            anomaly_list(o),
            if o.met { "met" } else { "NOT MET" },
            o.secs
        );
    }
}

#[derive(Serialize)]
struct Table<'a> {
    all_met: bool,
    runs: &'a [PlayOutcome],
}

fn write_table(out: &Path, outcomes: &[PlayOutcome]) -> Result<()> {
    let table = Table {
        all_met: outcomes.iter().all(|o| o.met),
        runs: outcomes,
    };
    Ok(spec::folder::write_json(out, &table)?)
}
