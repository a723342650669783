//! `harness nightly` for real (needs root: it runs broker clusters in network namespaces;
//! elsewhere it fails saying so). A short night whose scenarios folder holds
//! one scenario with a wrong expectation: that run fails, is a new failure against the
//! previous night (where it passed), is listed first in `summary.html`, counted in
//! `junit.xml`, and the night exits 1; the random test that fits in the rest of the budget
//! passes, and nothing is left on the host.

mod common;

use common::{is_root, leftovers, Scratch};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// KAFKA-1561 (two seconds a mode), its buggy expectation changed to an anomaly the bug
/// does not cause: the buggy run's expectation cannot hold.
fn wrong_scenario(dir: &Path) {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/KAFKA-1561.toml");
    let text = std::fs::read_to_string(&source).expect("KAFKA-1561.toml");
    let start = text.find("buggy = [").expect("a buggy expectation");
    let end = start + text[start..].find(']').expect("its end") + 1;
    let changed = format!(
        "{}buggy = [\"unavailable-after-heal\"]{}",
        &text[..start],
        &text[end..]
    );
    std::fs::create_dir_all(dir).expect("scenarios dir");
    std::fs::write(dir.join("KAFKA-1561.toml"), changed).expect("scenario");
}

/// A previous night in which both modes of KAFKA-1561 passed.
fn previous_night(store: &Path) {
    let night = store.join("nightly/20200101T000000");
    std::fs::create_dir_all(&night).expect("night dir");
    let run = |mode: &str| {
        serde_json::json!({
            "id": format!("repro-KAFKA-1561-{mode}"), "kind": "repro",
            "key": format!("KAFKA-1561 {mode}"), "description": "", "seed": null,
            "status": "pass", "verdict": null, "anomalies": {}, "expectation": null,
            "command": "", "run_dir": null, "secs": 2.0, "error": null
        })
    };
    let summary = serde_json::json!({
        "mode": "nightly", "started": "2020-01-01T00:00:00+00:00", "finished": null,
        "budget_secs": 60.0, "seed": 1, "command": "", "broker_bin": "",
        "runs": [run("buggy"), run("fixed")], "detect": []
    });
    std::fs::write(night.join("summary.json"), summary.to_string()).expect("summary");
}

#[test]
#[allow(non_snake_case)]
fn needs_root__a_failing_run_is_a_new_failure_at_the_top_of_the_summary() {
    if !is_root() {
        common::missing_root();
    }
    let scratch = Scratch::new("nightly-cli");
    let scenarios = scratch.0.join("scenarios");
    let store = scratch.0.join("store");
    wrong_scenario(&scenarios);
    previous_night(&store);
    let output = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["nightly", "--budget", "75s", "--seed", "5"])
        .arg("--scenarios")
        .arg(&scenarios)
        .arg("--store")
        .arg(&store)
        .output()
        .expect("harness runs");
    let out = String::from_utf8_lossy(&output.stdout).into_owned();
    let err = String::from_utf8_lossy(&output.stderr).into_owned();
    let shown = format!("{out}\n--- stderr ---\n{err}");
    assert_eq!(output.status.code(), Some(1), "{shown}");
    assert!(
        out.contains("compared with the night of 20200101T000000"),
        "{shown}"
    );
    assert!(out.contains("NEW FAILURE"), "{shown}");

    let night = out
        .lines()
        .find_map(|l| l.strip_prefix("night: "))
        .map(|p| Path::new(p.trim()).to_path_buf())
        .expect("the night's folder is printed");
    let summary: Value = serde_json::from_str(
        &std::fs::read_to_string(night.join("summary.json")).expect("summary.json"),
    )
    .expect("summary.json parses");
    let runs = summary["runs"].as_array().expect("runs");
    let status = |id: &str| {
        runs.iter()
            .find(|r| r["id"] == id)
            .map(|r| r["status"].as_str().unwrap_or_default().to_string())
    };
    assert_eq!(
        status("repro-KAFKA-1561-buggy").as_deref(),
        Some("fail"),
        "{shown}"
    );
    assert_eq!(
        status("repro-KAFKA-1561-fixed").as_deref(),
        Some("pass"),
        "{shown}"
    );
    let matrix: Vec<&Value> = runs.iter().filter(|r| r["kind"] == "matrix").collect();
    assert!(
        !matrix.is_empty(),
        "a random test fits in the budget: {shown}"
    );
    for run in &matrix {
        let dir = Path::new(run["run_dir"].as_str().expect("run folder"));
        // A false alarm is rare and its folder is gone with the test's: say what the
        // checkers found, and the clock readings the ISR oracle used.
        assert_eq!(
            run["status"],
            "pass",
            "a correct broker stays valid: {run}\nresults: {}\nstats: {}",
            std::fs::read_to_string(dir.join("results.json")).unwrap_or_default(),
            std::fs::read_to_string(dir.join("stats.json"))
                .ok()
                .and_then(|s| serde_json::from_str::<Value>(&s).ok())
                .map(|s| format!(
                    "history_unix_ms {} history_unix_ms_at_end {}",
                    s["history_unix_ms"], s["history_unix_ms_at_end"]
                ))
                .unwrap_or_default(),
        );
        assert!(dir.join("report.html").is_file(), "{}", dir.display());
    }

    let html = std::fs::read_to_string(night.join("summary.html")).expect("summary.html");
    let first_row = html.find("<tr id=\"run-").expect("run rows");
    assert!(
        html[first_row..].starts_with("<tr id=\"run-repro-KAFKA-1561-buggy\""),
        "the failing run comes first: {}",
        &html[first_row..first_row + 200.min(html.len() - first_row)]
    );
    assert!(
        html.contains("data-change=\"new-failure\""),
        "new failure marked"
    );

    let junit = std::fs::read_to_string(night.join("junit.xml")).expect("junit.xml");
    assert!(junit.starts_with("<?xml"), "{junit}");
    assert!(junit.contains("failures=\"1\""), "{junit}");
    assert!(junit.contains("<failure"), "{junit}");

    let left = leftovers();
    assert!(left.is_empty(), "left behind: {left:?}");
}
