//! `harness shrink`: a run folder lifts into a scenario file that validates (`--lift-only`,
//! no cluster needed), runs that cannot be shrunk are refused with the reason, and — for
//! real, as root — a lifted run plays its workload, its faults (an aimed strike among
//! them) and a test's end on a fresh cluster, valid on the fixed broker.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use checkers::{Results, Verdict};
use common::{is_root, leftovers};
use harness::scenario::{Scenario, StepKind};
use harness::shrink::lift::{self, Provenance};
use history::Op;
use serde_json::{json, Value};

fn harness() -> Command {
    Command::new(env!("CARGO_BIN_EXE_harness"))
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("harness-shrink-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch folder");
    dir
}

fn text(output: &Output) -> String {
    format!(
        "{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The run folder a command's output names last (`run: <dir>`).
fn run_folder(out: &str) -> PathBuf {
    out.lines()
        .filter_map(|l| l.strip_prefix("run:"))
        .map(|l| PathBuf::from(l.trim()))
        .next_back()
        .expect("a run line")
}

fn failing() -> Results {
    let mut results = Results::default();
    results.add(
        "settle",
        Verdict::Invalid,
        &json!({"anomalies": [{"kind": "roles-not-converged"}]}),
    );
    results
}

/// A run folder of a 3-node log test with a kill, its restart and a strike.
fn synthetic_run(dir: &Path, results: &Results) {
    let test = json!({
        "spec": {
            "name": "log", "store": "store", "seed": 7,
            "backend": {"kind": "netns"}, "broker_bin": null,
            "brokers": {"bugs": ["KAFKA-3083"], "config": ["min_insync_replicas=2"]},
            "plan": {
                "kind": "workload", "nodes": 3, "workload": "log",
                "nemesis": {"packages": ["kill", "aimed"], "interval": 2.0, "targets": ["one"], "wipe": false},
                "time_limit": 20.0, "concurrency": 4, "rate": 100.0,
                "partitions": 2, "replication_factor": 3
            }
        },
        "command": "harness test", "broker_bin": "broker", "topic": "jepsen",
        "started": "2026-12-07T20:00:00+00:00", "harness_version": "0.1.0", "scenario": null
    });
    std::fs::write(dir.join("test.json"), test.to_string()).expect("test.json");
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string(results).expect("results"),
    )
    .expect("results.json");
    let lines = [
        json!({"index": 0, "time": 1_000_000_000u64, "process": "nemesis", "type": "info", "f": "kill", "value": {"package": "kill", "targets": "one"}}),
        json!({"index": 1, "time": 1_100_000_000u64, "process": "nemesis", "type": "info", "f": "kill", "value": {"package": "kill", "targets": "one", "nodes": ["n2"]}}),
        json!({"index": 2, "time": 3_000_000_000u64, "process": "nemesis", "type": "info", "f": "start", "value": {"package": "kill"}}),
        json!({"index": 3, "time": 3_500_000_000u64, "process": "nemesis", "type": "info", "f": "start", "value": {"package": "kill", "nodes": ["n2"]}}),
        json!({"index": 4, "time": 5_000_000_000u64, "process": "nemesis", "type": "info", "f": "start-aimed", "value": {"package": "aimed", "aim": {"aim": "after-change", "strike": "pause", "watch_ms": 3000}}}),
        json!({"index": 5, "time": 6_000_000_000u64, "process": "nemesis", "type": "info", "f": "start-aimed", "value": {"package": "aimed", "aim": {"aim": "after-change", "strike": "pause", "watch_ms": 3000}}}),
    ];
    let history: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(dir.join("history.jsonl"), history).expect("history");
}

#[test]
fn lift_only_writes_a_scenario_with_every_fault_that_validates() {
    let dir = scratch("lift-only");
    let run = dir.join("run");
    std::fs::create_dir_all(&run).expect("run folder");
    synthetic_run(&run, &failing());
    let out = dir.join("lifted.toml");
    let output = harness()
        .arg("shrink")
        .arg(&run)
        .arg("--lift-only")
        .arg("--out")
        .arg(&out)
        .arg("--store")
        .arg(dir.join("store"))
        .output()
        .expect("harness shrink");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    assert!(text(&output).contains("2 fault(s)"), "{}", text(&output));
    let scenario = Scenario::load(&out).unwrap_or_else(|e| panic!("{e}"));
    let kinds: Vec<&str> = scenario.steps.iter().map(|s| s.kind.name()).collect();
    assert_eq!(
        kinds,
        vec!["workload", "sleep", "kill", "sleep", "start", "sleep", "strike"],
        "{kinds:?}"
    );
    assert_eq!(scenario.expect.buggy, vec!["roles-not-converged"]);
    assert_eq!(scenario.switch.bugs, vec!["KAFKA-3083"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn runs_that_cannot_be_shrunk_are_refused_with_the_reason() {
    let dir = scratch("refused");
    let valid = dir.join("valid");
    std::fs::create_dir_all(&valid).expect("run folder");
    synthetic_run(&valid, &Results::default());
    let not_a_run = dir.join("empty");
    std::fs::create_dir_all(&not_a_run).expect("folder");
    for (run, says) in [
        (&valid, "was not found invalid"),
        (&not_a_run, "not a run folder"),
    ] {
        let output = harness()
            .arg("shrink")
            .arg(run)
            .arg("--lift-only")
            .output()
            .expect("harness shrink");
        assert_eq!(output.status.code(), Some(3), "{}", text(&output));
        assert!(text(&output).contains(says), "{}", text(&output));
    }
    let output = harness()
        .arg("shrink")
        .arg(&valid)
        .args(["--tries", "0"])
        .output()
        .expect("harness shrink");
    assert_eq!(output.status.code(), Some(3), "{}", text(&output));
    let _ = std::fs::remove_dir_all(&dir);
}

fn nemesis_fs(history: &str) -> Vec<(String, Value)> {
    history
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|op| op["process"] == "nemesis")
        .map(|op| {
            (
                op["f"].as_str().unwrap_or_default().to_string(),
                op["value"].clone(),
            )
        })
        .collect()
}

#[test]
#[allow(non_snake_case)]
fn needs_root__a_lifted_run_plays_its_workload_faults_and_a_tests_end() {
    if !is_root() {
        common::missing_root();
    }
    let dir = scratch("play");
    // A short real test with kills and aimed strikes (the fixed broker: valid).
    let output = harness()
        .args([
            "test",
            "--nodes",
            "3",
            "--partitions",
            "2",
            "--concurrency",
            "4",
            "--rate",
            "100",
            "--time-limit",
            "15",
            "--nemesis",
            "kill,aimed",
            "--nemesis-interval",
            "2",
            "--seed",
            "11",
            "--store",
        ])
        .arg(dir.join("store"))
        .output()
        .expect("harness test");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let run = run_folder(&String::from_utf8_lossy(&output.stdout));
    // Lifted as though it had failed (the lifting does not depend on the verdict beyond
    // refusing a valid run), every fault kept.
    let record: spec::TestRecord =
        serde_json::from_str(&std::fs::read_to_string(run.join("test.json")).expect("test.json"))
            .expect("a test record");
    let history_text = std::fs::read_to_string(run.join("history.jsonl")).expect("history");
    let ops: Vec<Op> = history_text
        .lines()
        .map(|line| serde_json::from_str(line).expect("an op"))
        .collect();
    let lifted = lift::lift_parts(&run, &record, &failing(), &ops).expect("lifted");
    assert!(
        !lifted.faults.is_empty(),
        "no faults lifted: {:?}",
        lifted.skipped
    );
    let all: Vec<usize> = (0..lifted.faults.len()).collect();
    let file = dir.join("lifted.toml");
    std::fs::write(
        &file,
        lifted.render(&all, &["lost-write".to_string()], &Provenance::default()),
    )
    .expect("scenario file");
    let scenario = Scenario::load(&file).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(scenario.steps[0].kind, StepKind::Workload(_)));
    // Played with the fix on: the steps play out and the verdict is valid.
    let played = harness()
        .arg("repro")
        .arg(&file)
        .arg("--store")
        .arg(dir.join("plays"))
        .output()
        .expect("harness repro");
    assert_eq!(played.status.code(), Some(0), "{}", text(&played));
    let all_text = text(&played);
    let play_dir = run_folder(&all_text);
    let history = std::fs::read_to_string(play_dir.join("history.jsonl")).expect("history");
    let writes = history
        .lines()
        .filter(|l| l.contains("\"f\":\"append\"") && l.contains("\"type\":\"ok\""))
        .count();
    assert!(
        writes > 100,
        "the workload wrote {writes} values\n{all_text}"
    );
    let fs = nemesis_fs(&history);
    let lifted_kills = lifted
        .faults
        .iter()
        .flat_map(|f| &f.steps)
        .filter(|s| {
            s.keys
                .first()
                .is_some_and(|(_, v)| v.as_str() == Some("kill"))
        })
        .count();
    let played_kills = fs
        .iter()
        .filter(|(f, v)| f == "kill" && v.get("phase").is_none())
        .count();
    // Each kill is an invocation and a completion.
    assert_eq!(played_kills, 2 * lifted_kills, "{all_text}");
    assert!(
        fs.iter()
            .any(|(_, v)| v.get("phase").and_then(Value::as_str) == Some("one-down")),
        "no one-down probe\n{all_text}"
    );
    assert!(leftovers().is_empty(), "left behind: {:?}", leftovers());
    let _ = std::fs::remove_dir_all(&dir);
}
