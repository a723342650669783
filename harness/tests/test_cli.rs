//! `harness test` for real: broker clusters in network namespaces (needs root; CI runs as
//! root, elsewhere each `needs_root__` test fails saying so). Short runs of both workloads
//! end `valid` and leave nothing behind; a stored run re-checks to the same verdict; a
//! harness killed with SIGKILL mid-run leaves a checkable history, and `harness clean`
//! removes what it left; bad options are refused before anything starts; with every
//! nemesis package, the same seed gives the same fault schedule.

mod common;

use common::{is_root, leftovers};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The tests set up namespaces and build the broker: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

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
#[allow(non_snake_case)]
fn needs_root__short_tests_of_both_workloads_end_valid_and_leave_nothing_behind() {
    if !is_root() {
        common::missing_root();
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
#[allow(non_snake_case)]
fn needs_root__a_harness_killed_mid_run_leaves_a_checkable_history_and_clean_removes_the_rest() {
    if !is_root() {
        common::missing_root();
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
        (vec!["--nemesis", "clock"], "unknown nemesis \"clock\""),
        (vec!["--nemesis", "kill,clock"], "unknown nemesis \"clock\""),
        (
            vec!["--nemesis-targets", "nobody"],
            "--nemesis-targets \"nobody\"",
        ),
        (
            vec!["--nodes", "3", "--nemesis-targets", "one,n4"],
            "no node n4",
        ),
        (vec!["--nemesis-interval", "0"], "--nemesis-interval 0"),
        (vec!["--nemesis-interval=-2"], "--nemesis-interval -2"),
        (vec!["--nemesis-wipe", "maybe"], "maybe"),
        (vec!["--backend", "docker"], "--backend \"docker\""),
        (vec!["--backend", "ssh"], "--nodes-file FILE or --vagrant"),
        (vec!["--nodes-file", "hosts.txt"], "need --backend ssh"),
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

/// The nemesis entries of a history that are not the final heal's, by package: the
/// `(f, targets)` of each invocation. A package's steps run one at a time, so its
/// entries alternate invocation, completion (packages interleave with each other).
fn nemesis_invocations(run: &Path) -> BTreeMap<String, Vec<(String, Value)>> {
    let text = std::fs::read_to_string(run.join("history.jsonl")).expect("history");
    let mut by_package: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for line in text.lines() {
        let entry: Value = serde_json::from_str(line).expect("a JSON line");
        // The one-down probe's kill and restart come after the schedule (and the heal).
        if entry["process"] == json!("nemesis") && entry["value"]["phase"] != json!("one-down") {
            let package = entry["value"]["package"]
                .as_str()
                .unwrap_or_else(|| panic!("a nemesis entry without a package: {entry}"))
                .to_string();
            by_package.entry(package).or_default().push(entry);
        }
    }
    by_package
        .into_iter()
        .map(|(package, entries)| {
            let mut invocations = Vec::new();
            for pair in entries.chunks(2) {
                let invoke = &pair[0];
                assert_eq!(invoke["type"], json!("info"), "{invoke}");
                if let Some(completion) = pair.get(1) {
                    assert_eq!(completion["f"], invoke["f"], "{invoke} / {completion}");
                }
                if invoke["value"]["final"] != json!(true) {
                    let f = invoke["f"].as_str().unwrap_or_default().to_string();
                    invocations.push((f, invoke["value"]["targets"].clone()));
                }
            }
            (package, invocations)
        })
        .collect()
}

#[test]
#[allow(non_snake_case)]
fn needs_root__the_same_seed_gives_the_same_fault_schedule() {
    if !is_root() {
        common::missing_root();
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let store = store("nemesis-seed");
    let packages = ["kill", "pause", "partition", "partition-ports", "admin"];
    let mut runs = Vec::new();
    for attempt in 0..2 {
        let (output, all) = run_test(
            &store,
            &[
                "--nemesis",
                &packages.join(","),
                "--nemesis-interval",
                "2",
                "--time-limit",
                "15",
                "--seed",
                "20261130",
                "--name",
                &format!("seed-{attempt}"),
            ],
        );
        assert_eq!(output.status.code(), Some(0), "run {attempt}:\n{all}");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            stdout.lines().any(|l| l.starts_with("nemesis: ")),
            "a nemesis summary line\n{all}"
        );
        let run = PathBuf::from(line(&stdout, "run:").expect("run line"));
        let folder = spec::RunFolder::open(&run);
        let record = folder.read_test().expect("test.json").expect("present");
        let spec::Plan::Workload(plan) = &record.spec.plan else {
            panic!("a workload test: {record:?}");
        };
        assert_eq!(plan.nemesis.list(), packages.join(","), "{record:?}");
        assert_eq!(plan.nemesis.interval, Duration::from_secs(2), "{record:?}");
        assert!(
            record.command.contains("--nemesis-interval 2s")
                && record.command.contains("--seed 20261130"),
            "{record:?}"
        );
        let stats = folder.read_stats().expect("stats.json").expect("present");
        assert!(stats.recovered, "{stats:?}");
        assert!(stats.nemesis.is_some(), "{stats:?}");
        runs.push(nemesis_invocations(&run));
        assert!(leftovers().is_empty(), "left behind: {:?}", leftovers());
    }
    // Steps take as long as their faults do (an admin storm, a wiped node's wait for its
    // deregistration), so how many fit in the time limit varies: compare the common
    // prefix of each package, at least one step each and two on average.
    let mut compared = 0;
    for package in packages {
        let first = runs[0].get(package).cloned().unwrap_or_default();
        let second = runs[1].get(package).cloned().unwrap_or_default();
        let common = first.len().min(second.len());
        println!(
            "{package}: {} and {} steps, the first {common} compared: {:?}",
            first.len(),
            second.len(),
            &first[..common]
        );
        assert!(
            common >= 1,
            "{package}: no step to compare: {first:?} / {second:?}"
        );
        assert_eq!(first[..common], second[..common], "{package}");
        compared += common;
    }
    assert!(
        compared >= 2 * packages.len(),
        "only {compared} steps compared over {} packages",
        packages.len()
    );
    let _ = std::fs::remove_dir_all(&store);
}

#[test]
#[allow(non_snake_case)]
fn needs_root__ctrl_c_during_faults_leaves_nothing_behind() {
    if !is_root() {
        common::missing_root();
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let store = store("nemesis-ctrl-c");
    let mut child = harness()
        .args([
            "test",
            "--nodes",
            "3",
            "--partitions",
            "2",
            "--time-limit",
            "300",
            "--nemesis",
            "all",
            "--nemesis-interval",
            "1",
            "--nemesis-wipe",
            "false",
        ])
        .arg("--store")
        .arg(&store)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn harness test");
    // Wait until faults are in place (a pause or a cut among them), then Ctrl-C.
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let history = std::fs::read_dir(store.join("log"))
            .ok()
            .and_then(|mut dirs| dirs.find_map(|d| d.ok()))
            .map(|d| d.path().join("history.jsonl"));
        let faults = history
            .and_then(|path| std::fs::read_to_string(path).ok())
            .map_or(0, |text| {
                text.lines()
                    .filter(|l| {
                        l.contains("\"f\":\"pause\"") || l.contains("\"f\":\"start-partition")
                    })
                    .count()
            });
        if faults >= 4 {
            break;
        }
        assert!(Instant::now() < deadline, "no faults were injected");
        assert!(
            child.try_wait().ok().flatten().is_none(),
            "harness test exited early"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let interrupted = Command::new("kill")
        .args(["-s", "INT", &child.id().to_string()])
        .status()
        .expect("kill -s INT");
    assert!(interrupted.success());
    let status = child.wait().expect("wait for the harness");
    assert_eq!(status.code(), Some(130), "exit status after Ctrl-C");
    assert!(leftovers().is_empty(), "left behind: {:?}", leftovers());
    let _ = std::fs::remove_dir_all(&store);
}
