//! The harness: a thin command line over the library crates.
//!
//! - [`cli`]: the command line as plain data.
//! - [`check`]: `harness check`, offline checking of stored histories.
//! - [`export`]: `harness export`, a history as Jepsen EDN for Knossos/Elle.
//! - [`backend`]: where a test's nodes live (the `Backend` trait; netns and ssh).
//! - [`clean`]: `harness clean`, removing what crashed runs left behind.
//! - [`cluster`]: the brokers of a test: binary, `node.toml`s, start, stop, logs.
//! - [`duration`]: the one duration grammar of flags and scenario keys (`90s`, `1m30s`).
//! - [`faults`]: the nemesis's hold on a real test: its `ClusterControl` on the cluster
//!   and backend, its `Journal` on the history recorder.
//! - [`test_run`]: `harness test`: cluster, workload, final reads, checks, the run folder.
//! - [`scenario`]: scenario files (a bug report as a script of faults and an
//!   expectation) and playing one on a cluster; [`repro`]: `harness repro`.
//! - [`nightly`]: `harness nightly`: random tests and every reproduction until a budget
//!   is spent, compared with the night before; `--detect`: time to find each bug switch.
//!
//! Architecture invariant: judging lives in `checkers`, formats in `history`; this crate
//! wires them to files, the terminal and exit codes.

pub mod backend;
pub mod check;
pub mod clean;
pub mod cli;
pub mod cluster;
pub mod duration;
pub mod export;
pub mod faults;
pub mod generator;
pub mod nightly;
pub mod recorder;
pub mod report_cmd;
pub mod repro;
pub mod scenario;
pub mod serve;
pub mod test_run;
pub mod workload;

/// Exit code for an error of the harness itself (bad input, unreadable file, ...).
pub const EXIT_TOOL_ERROR: i32 = 3;

/// An error and its sources on one line, each cause once (`reqwest` and `std::io` keep
/// the reason, e.g. a timeout or a refused connection, in the sources; an error's own
/// message is often only the outermost).
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
