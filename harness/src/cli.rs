//! The command line, parsed into plain data (clap); `main.rs` dispatches on it.

use crate::check::CheckArgs;
use crate::export::ExportArgs;
use crate::nightly::NightlyArgs;
use crate::options::TestArgs;
use crate::report_cmd::ReportArgs;
use crate::repro::ReproArgs;
use crate::serve::ServeArgs;
use crate::shrink::ShrinkArgs;
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "harness",
    version,
    about = "Jepsen-style fault-injection test harness for replicated logs",
    after_help = "Exit codes: 0 valid, 1 invalid (anomalies found), 2 unknown (the checker could not decide \
                  within its bounds), 3 an error of the harness itself."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a test: a broker cluster, concurrent clients, a recorded history, a verdict.
    Test(TestArgs),
    /// Check stored histories offline: our JSONL, Jepsen EDN, or Porcupine's formats.
    Check(CheckArgs),
    /// Reproduce a reported bug: play a scenario from `scenarios/` and say whether the
    /// checkers' verdict is what the scenario expects (exit 0 if so, 1 if not).
    Repro(ReproArgs),
    /// Turn a failing run into a minimal scenario file: lift its faults into steps, then
    /// drop faults by delta debugging while the failure still reproduces.
    Shrink(ShrinkArgs),
    /// Write a history as Jepsen EDN, for Knossos or Elle.
    Export(ExportArgs),
    /// (Re)write a run folder's report.html and timeline.html.
    Report(ReportArgs),
    /// Serve the store: a page listing every run, newest first, and each run's files.
    Serve(ServeArgs),
    /// A night of random tests (workloads × faults × cluster sizes) plus every bug
    /// reproduction, until a time budget is spent; writes `summary.html` and `junit.xml`.
    /// `--detect`: how long random faults take to find each bug switch.
    Nightly(NightlyArgs),
    /// Remove what crashed runs left behind: namespaces, bridges, routes, rules, daemons
    /// (needs root); and what ssh runs left on their hosts (folders, chains, daemons).
    Clean,
}
