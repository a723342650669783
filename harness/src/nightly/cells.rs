//! One random test of the night: a matrix cell as a [`TestSpec`], run, and what it came
//! to as a row of the summary.

use std::time::Instant;

use anyhow::Result;
use checkers::Verdict;
use report::nightly::{NightlyRun, RunKind, Status};
use spec::{BrokerSettings, Plan, TestSpec};

use super::args::NightlyArgs;
use super::matrix::Cell;
use super::night::Night;
use crate::lifecycle::Broker;
use crate::test_run::{self, TestOutcome};

/// The test of a cell in this night's store and backend, with these bug switches.
pub fn cell_spec(args: &NightlyArgs, cell: &Cell, bugs: &[String]) -> Result<TestSpec> {
    let spec = TestSpec {
        name: format!("nightly-{}", cell.workload),
        store: args.store.clone(),
        seed: cell.seed,
        backend: args.backend.to_spec()?,
        broker_bin: args.broker_bin.clone(),
        brokers: BrokerSettings {
            bugs: bugs.to_vec(),
            config: cell.broker_config(),
        },
        plan: Plan::Workload(cell.plan().map_err(anyhow::Error::msg)?),
    };
    spec.validate()?;
    crate::system::check_settings(&spec.brokers.config)?;
    Ok(spec)
}

/// Runs one cell as a test and says what it came to.
pub fn run_cell(
    args: &NightlyArgs,
    night: &mut Night,
    runtime: &tokio::runtime::Runtime,
    broker: &Broker,
    id: String,
    cell: &Cell,
    bugs: &[String],
) -> Result<NightlyRun> {
    let spec = cell_spec(args, cell, bugs)?;
    eprintln!("\n[{id}] harness test {}", cell.description());
    let began = Instant::now();
    let outcome = runtime.block_on(test_run::execute(&spec, broker));
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
        shrunk: None,
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
