//! `harness clean`: remove what crashed runs left behind.
//!
//! The work is [`backend::netns::clean_leftovers`]: every run recorded in
//! `/run/harness/` whose harness is no longer running is torn down (its daemons, namespaces,
//! bridge, veths, `FORWARD` rule, subnet claim and state file), then namespaces and links
//! that carry a run prefix but have no state file, and the test range's `unreachable`
//! route when no live run remains. This prints one line per thing removed; exit code 0
//! when everything is clean, [`crate::EXIT_TOOL_ERROR`] when something could not be
//! removed (each failure is printed) or when not running as root.

use crate::EXIT_TOOL_ERROR;
use backend::netns::clean_leftovers;

/// Runs `harness clean`; returns the exit code.
pub fn run() -> anyhow::Result<i32> {
    let report = clean_leftovers()?;
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
