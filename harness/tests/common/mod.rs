//! Helpers shared by the real-cluster tests (`mod common;` in each): the prerequisite
//! checks and what a run may leave behind on the host. Each test binary uses some of them.
#![allow(dead_code)]

use backend::netns::TEST_RANGE;
use backend::state::{self, ProcessRecord, STATE_DIR};
use backend::tools;
use std::collections::BTreeSet;
use std::path::Path;

/// Whether the tests run as root (the netns backend needs it; otherwise each test that
/// needs it fails through [`missing_root`]).
pub fn is_root() -> bool {
    matches!(tools::effective_uid(), Ok(0))
}

/// Fails the calling test: its prerequisite `what` is missing ("needs X (how to get it)").
/// A test that needs something beyond the workspace is named after it
/// (`needs_root__`, `needs_python3__`, `needs_sshd__`, `needs_chromium__`,
/// `needs_fixtures__`; see `scripts/test`), so that `scripts/test --skip-missing` can
/// leave it out and report it as not run, instead of a test that passes without testing.
#[track_caller]
pub fn missing(what: &str) -> ! {
    panic!(
        "{what}; or run `scripts/test --skip-missing`, which does not run the tests whose \
         prerequisites are missing and reports them as skipped"
    )
}

/// Fails the calling test, which needs root.
#[track_caller]
pub fn missing_root() -> ! {
    let uid = tools::effective_uid()
        .map(|uid| uid.to_string())
        .unwrap_or_else(|error| format!("unknown ({error})"));
    missing(&format!(
        "needs root (network namespaces, routes, iptables; running as uid {uid}): run the tests as root"
    ))
}

fn output(argv: &[&str]) -> String {
    let argv: Vec<String> = argv.iter().map(|arg| arg.to_string()).collect();
    tools::run(&argv).unwrap_or_else(|error| panic!("{error}"))
}

/// The route of the test range, when no run is live: it is shared, so it must be gone
/// only once no run is (another session's `harness test` may be running here).
fn route_leftover() -> Option<String> {
    if !state::live_runs(Path::new(STATE_DIR)).is_empty() {
        return None;
    }
    let route = output(&["ip", "route", "show", "exact", TEST_RANGE]);
    (!route.trim().is_empty()).then(|| format!("route {}", route.trim()))
}

/// What the run `prefix` left: namespaces, links, its state file and subnet claim, the
/// given processes still alive, and the shared route when no run is live.
pub fn run_leftovers(prefix: &str, processes: &[ProcessRecord]) -> Vec<String> {
    let mut found = Vec::new();
    for line in output(&["ip", "netns", "list"]).lines() {
        if line.starts_with(prefix) {
            found.push(format!("namespace {line}"));
        }
    }
    for line in output(&["ip", "-o", "link", "show"]).lines() {
        if line.contains(&format!(" {prefix}-")) {
            found.push(format!("link {line}"));
        }
    }
    if Path::new(STATE_DIR).join(format!("{prefix}.json")).exists() {
        found.push(format!("state file of {prefix}"));
    }
    for (subnet, _, owner) in state::claims(Path::new(STATE_DIR)) {
        if owner.as_deref() == Some(prefix) {
            found.push(format!("claim of 10.77.{subnet}.0/24"));
        }
    }
    for process in processes {
        if process.is_alive() {
            found.push(format!("process {} {:?}", process.pid, process.cmdline));
        }
    }
    found.extend(route_leftover());
    found
}

/// What runs that are over left on the host: namespaces, links and state files of any
/// run prefix whose harness no longer runs, and the shared route when no run is live.
/// Runs of harnesses still running (other sessions' tests) are not counted.
pub fn leftovers() -> Vec<String> {
    let live: BTreeSet<String> = state::live_runs(Path::new(STATE_DIR))
        .into_iter()
        .map(|run| run.prefix)
        .collect();
    let over = |name: &str| state::prefix_of(name).is_some_and(|prefix| !live.contains(prefix));
    let mut found = Vec::new();
    for line in output(&["ip", "netns", "list"]).lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        if over(name) {
            found.push(format!("namespace {line}"));
        }
    }
    for line in output(&["ip", "-o", "link", "show"]).lines() {
        // `<index>: <name>[@<peer>]: ...`
        let name = line
            .split(": ")
            .nth(1)
            .map(|name| name.split('@').next().unwrap_or(name))
            .unwrap_or_default();
        if over(name) {
            found.push(format!("link {line}"));
        }
    }
    for (path, run) in state::read_all(Path::new(STATE_DIR)) {
        match run {
            Ok(run) if live.contains(&run.prefix) => {}
            _ => found.push(format!("state file {}", path.display())),
        }
    }
    found.extend(route_leftover());
    found
}

/// A scratch folder for one test (in the system temp dir, named after the test and this
/// process), removed when dropped.
pub struct Scratch(pub std::path::PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("harness-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
