//! `harness clean`: remove what crashed runs left behind.
//!
//! Two kinds of runs: ssh runs ([`backend::ssh::clean_leftovers`]: every run recorded in
//! a control folder of the temp dir whose harness is no longer running is torn down on
//! its hosts — its daemons and the processes naming its run folder, its cut chain, its
//! run folder — and its leftover ssh masters and control folder here), then netns runs
//! ([`backend::netns::clean_leftovers`]: every run recorded in `/run/harness/` whose
//! harness is no longer running is torn down (its daemons, namespaces, bridge, veths,
//! `FORWARD` rule, subnet claim and state file), then namespaces and links that carry a
//! run prefix but have no state file, and the test range's `unreachable` route when no
//! live run remains). The netns part needs root; without root it is refused after the
//! ssh part (which needs none here), saying so. This prints one line per thing removed;
//! exit code 0 when everything is clean, [`crate::EXIT_TOOL_ERROR`] when something could
//! not be removed or root was needed (each failure is printed).

use crate::EXIT_TOOL_ERROR;
use backend::netns::{clean_leftovers, CleanReport};
use backend::BackendError;

/// Runs `harness clean`; returns the exit code.
pub fn run() -> anyhow::Result<i32> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut report = runtime.block_on(backend::ssh::clean_leftovers());
    match clean_leftovers() {
        Ok(netns) => merge(&mut report, netns),
        // The ssh runs are done; the netns ones are refused, saying why.
        Err(error @ BackendError::NotRoot { .. }) => report
            .failures
            .push(format!("network-namespace runs: {error}")),
        Err(error) => return Err(error.into()),
    }
    for removed in &report.removed {
        println!("removed {removed}");
    }
    for skipped in &report.skipped {
        println!("skipped {skipped}");
    }
    for failure in &report.failures {
        eprintln!("error: {failure}");
    }
    if report.removed.is_empty() && report.failures.is_empty() {
        println!("nothing to clean");
    }
    Ok(if report.failures.is_empty() {
        0
    } else {
        EXIT_TOOL_ERROR
    })
}

fn merge(into: &mut CleanReport, from: CleanReport) {
    into.removed.extend(from.removed);
    into.skipped.extend(from.skipped);
    into.failures.extend(from.failures);
}
