//! `harness test` for real: broker clusters in network namespaces (needs root; CI runs as
//! root, elsewhere each test prints `skipped: needs root`). Short runs of both workloads
//! end `valid` and leave nothing behind; a stored run re-checks to the same verdict; a
//! harness killed with SIGKILL mid-run leaves a checkable history, and `harness clean`
//! removes what it left; bad options are refused before anything starts.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The tests set up namespaces and build the broker: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

fn harness() -> Command {
    Command::new(env!("CARGO_BIN_EXE_harness"))
}

fn store(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("harness-test-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn text(output: &Output) -> String {
    format!(
        "{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Namespaces, links and routes of harness runs still on the host.
fn leftovers() -> Vec<String> {
    let mut found = Vec::new();
    for args in [vec!["netns", "list"], vec!["-o", "link"], vec!["route"]] {
        if let Ok(out) = Command::new("ip").args(&args).output() {
            found.extend(
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .filter(|l| l.contains("jh") || l.contains("10.77."))
                    .map(str::to_string),
            );
        }
    }
    found
}

/// The line `key: value` of the output.
fn line<'a>(out: &'a str, key: &str) -> Option<&'a str> {
    out.lines()
        .filter_map(|l| l.strip_prefix(key))
        .map(str::trim)
        .next_back()
}

fn run_test(store: &Path, extra: &[&str]) -> (Output, String) {
    let output = harness()
        .args([
            "test",
            "--nodes",
            "3",
            "--partitions",
            "2",
            "--concurrency",
            "4",
        ])
        .args(extra)
        .arg("--store")
        .arg(store)
        .output()
        .expect("run harness test");
    let all = text(&output);
    (output, all)
}

fn history_lines(run: &Path) -> usize {
    std::fs::read_to_string(run.join("history.jsonl"))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

#[test]
fn short_tests_of_both_workloads_end_valid_and_leave_nothing_behind() {
    if !is_root() {
        println!("skipped: needs root");
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let store = store("valid");
    for workload in ["log", "register"] {
        let (output, all) = run_test(&store, &["--workload", workload, "--time-limit", "5"]);
        assert_eq!(output.status.code(), Some(0), "{all}");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let last: Vec<&str> = stdout.lines().rev().take(2).collect();
        assert!(last[0].starts_with("verdict: valid"), "{all}");
        assert!(last[1].starts_with("run: "), "{all}");
        let run = PathBuf::from(line(&stdout, "run:").expect("run line"));
        assert!(
            history_lines(&run) > 100,
            "{workload}: too few ops recorded\n{all}"
        );
        for file in [
            "test.json",
            "results.json",
            "nodes/n1/broker.log",
            "nodes/n3/node.toml",
        ] {
            assert!(run.join(file).exists(), "{workload}: no {file}");
        }
        assert!(store.join(workload).join("latest").exists());
        // A stored run re-checks to the same verdict.
        let recheck = harness().arg("check").arg(&run).output().expect("check");
        assert_eq!(recheck.status.code(), Some(0), "{}", text(&recheck));
        assert!(leftovers().is_empty(), "left behind: {:?}", leftovers());
    }
    let _ = std::fs::remove_dir_all(&store);
}

#[test]
fn a_harness_killed_mid_run_leaves_a_checkable_history_and_clean_removes_the_rest() {
    if !is_root() {
        println!("skipped: needs root");
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let store = store("killed");
    let mut child = harness()
        .args([
            "test",
            "--nodes",
            "3",
            "--partitions",
            "2",
            "--time-limit",
            "120",
        ])
        .arg("--store")
        .arg(&store)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn harness test");
    // Wait until the run is recording, then kill it without a chance to clean up.
    let deadline = Instant::now() + Duration::from_secs(600);
    let history = loop {
        let found = std::fs::read_dir(store.join("log"))
            .ok()
            .and_then(|mut dirs| dirs.find_map(|d| d.ok()))
            .map(|d| d.path().join("history.jsonl"));
        if let Some(path) = found {
            if std::fs::read_to_string(&path).is_ok_and(|t| t.lines().count() > 200) {
                break path;
            }
        }
        assert!(Instant::now() < deadline, "the run never started recording");
        assert!(
            child.try_wait().ok().flatten().is_none(),
            "harness test exited early"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    child.kill().expect("SIGKILL the harness");
    let _ = child.wait();
    assert!(
        !leftovers().is_empty(),
        "a killed run leaves its namespaces"
    );

    let run = history.parent().expect("run folder").to_path_buf();
    let check = harness().arg("check").arg(&run).output().expect("check");
    let checked = text(&check);
    assert!(
        matches!(check.status.code(), Some(0..=2)),
        "the history of a killed run must be checkable:\n{checked}"
    );
    assert!(checked.contains("verdict:"), "{checked}");

    let clean = harness().arg("clean").output().expect("clean");
    assert_eq!(clean.status.code(), Some(0), "{}", text(&clean));
    assert!(leftovers().is_empty(), "left behind: {:?}", leftovers());
    let _ = std::fs::remove_dir_all(&store);
}

#[test]
fn bad_options_are_refused_before_anything_starts() {
    let store = store("bad");
    for (args, message) in [
        (
            vec!["--nodes", "3", "--replication-factor", "4"],
            "--replication-factor 4 is more than the 3 nodes",
        ),
        (vec!["--nemesis", "kill"], "--nemesis \"kill\""),
        (vec!["--backend", "ssh"], "--backend \"ssh\""),
        (vec!["--broker-config", "broker_id=3"], "set by the harness"),
        (vec!["--workload", "queue"], "queue"),
    ] {
        let output = harness()
            .arg("test")
            .args(&args)
            .arg("--store")
            .arg(&store)
            .output()
            .expect("run harness");
        let all = text(&output);
        assert_eq!(output.status.code(), Some(3), "{args:?}: {all}");
        assert!(all.contains(message), "{args:?}: {all}");
    }
    assert!(
        !store.exists(),
        "nothing may be created for refused options"
    );
}
