//! Scenario files: every shipped one is valid, and a file with a mistake is refused with
//! its line and the reason — by the library, and by `harness repro` before anything
//! starts (no run folder, no broker build, no namespace).

mod common;

use common::Scratch;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use harness::scenario::{self, Acks, Scenario, Sending, StepKind};

/// A small valid scenario; tests break one line of it.
const GOOD: &str = r#"title = "A test scenario"
jira = "https://example.invalid/JIRA-1"
summary = "What goes wrong."

[cluster]
nodes = 3
voters = ["n3"]
start = [["n3"], ["n1", "n2"]]
settings = { min_insync_replicas = 1, metadata = { session_timeout_ms = 3000 } }

[cluster.node.n3]
settings = { "controller.eligible" = false }

[topic]
name = "p"
assignment = [["n1", "n2"]]

[switch]
bugs = ["KAFKA-7128"]

[expect]
buggy = ["lost-write"]
fixed = "valid"
availability_bound = "10s"

[[step]]
do = "wait-until"
until = "leader(p/0) == n1 and isr(p/0) == {n1, n2}"
timeout = "20s"

[[step]]
do = "produce"
partition = "p/0"
count = 5
acks = "1"
batch = true

[[step]]
do = "kill"
nodes = "n1"
wipe = true

[[step]]
do = "partition"
drop = { n2 = ["n1"] }
ports = "replication"

[[step]]
do = "failpoint"
node = "n2"
point = "follower_fetch_response"
action = "sleep(200)"

[[step]]
do = "transfer-leader"
partition = "p/0"
to = "n2"
may_fail = true

[[step]]
do = "sleep"
for = "500ms"
"#;

fn parse(text: &str) -> Result<Scenario, scenario::ScenarioError> {
    Scenario::parse(Path::new("test.toml"), text)
}

/// GOOD with `from` replaced by `to` (once; it must occur).
fn broken(from: &str, to: &str) -> String {
    assert!(GOOD.contains(from), "{from:?} is not in the scenario");
    GOOD.replacen(from, to, 1)
}

/// The 1-based line of GOOD where `needle` first occurs.
fn line_of(needle: &str) -> usize {
    GOOD.lines()
        .position(|line| line.contains(needle))
        .map(|i| i + 1)
        .unwrap_or_else(|| panic!("{needle:?} not in the scenario"))
}

fn refused(text: &str) -> scenario::ScenarioError {
    match parse(text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(error) => error,
    }
}

#[test]
fn a_valid_file_is_read_completely() {
    let s = parse(GOOD).expect("valid");
    assert_eq!(s.name, "test");
    assert_eq!(s.cluster.nodes, ["n1", "n2", "n3"]);
    assert_eq!(s.cluster.start, [vec!["n3"], vec!["n1", "n2"]]);
    assert!(s
        .cluster
        .settings
        .contains(&"metadata.voters=[3]".to_string()));
    assert!(s
        .cluster
        .settings
        .contains(&"metadata.session_timeout_ms=3000".to_string()));
    assert_eq!(
        s.cluster.node_settings["n3"],
        ["controller.eligible=false".to_string()]
    );
    assert_eq!(s.switch.bugs, ["KAFKA-7128"]);
    assert_eq!(s.expect.buggy, ["lost-write"]);
    assert_eq!(s.expect.availability_bound.as_secs(), 10);
    assert_eq!(s.steps.len(), 7);
    assert_eq!(s.steps[1].line, line_of("do = \"produce\"") - 1);
    match &s.steps[1].kind {
        StepKind::Produce {
            count,
            acks,
            sending,
            ..
        } => {
            assert_eq!(*count, 5);
            assert_eq!(*acks, Acks::Leader);
            assert_eq!(*sending, Sending::Batch);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(s.steps[2].kind, StepKind::Kill { wipe: true, .. }));
    assert!(matches!(
        s.steps[5].kind,
        StepKind::Admin { may_fail: true, .. }
    ));
}

#[test]
fn an_unknown_step_is_refused_with_its_line() {
    let error = refused(&broken("do = \"kill\"", "do = \"kil\""));
    // The line of the step's [[step]].
    assert_eq!(error.line, Some(line_of("do = \"kill\"") - 1), "{error}");
    assert!(
        error.reason.contains("step 3 (kil): unknown variant `kil`"),
        "{error}"
    );
    assert!(error.to_string().starts_with("test.toml:"), "{error}");
}

#[test]
fn an_unknown_key_in_a_step_is_refused() {
    let error = refused(&broken("wipe = true", "wype = true"));
    let step_line = line_of("do = \"kill\"") - 1;
    assert_eq!(error.line, Some(step_line), "{error}");
    assert!(
        error.reason.contains("step 3 (kill): unknown field `wype`"),
        "{error}"
    );
}

#[test]
fn an_unknown_node_is_refused_with_the_step_and_its_line() {
    let error = refused(&broken("nodes = \"n1\"", "nodes = \"n7\""));
    assert_eq!(error.line, Some(line_of("do = \"kill\"") - 1), "{error}");
    assert!(
        error
            .reason
            .contains("step 3 (kill): nodes: unknown node \"n7\" (the cluster has n1, n2, n3)"),
        "{error}"
    );
    for (from, to, says) in [
        (
            "to = \"n2\"",
            "to = \"n4\"",
            "step 6 (transfer-leader): to: unknown node \"n4\"",
        ),
        (
            "drop = { n2 = [\"n1\"] }",
            "drop = { n2 = [\"n9\"] }",
            "step 4 (partition): drop: unknown node \"n9\"",
        ),
        (
            "node = \"n2\"",
            "node = \"n0\"",
            "step 5 (failpoint): node: unknown node \"n0\"",
        ),
        (
            "assignment = [[\"n1\", \"n2\"]]",
            "assignment = [[\"n1\", \"n5\"]]",
            "[topic]: assignment: unknown node \"n5\"",
        ),
        (
            "voters = [\"n3\"]",
            "voters = [\"n6\"]",
            "[cluster]: voters: unknown node \"n6\"",
        ),
    ] {
        let error = refused(&broken(from, to));
        assert!(error.reason.contains(says), "{error} (wanted {says})");
        assert!(error.line.is_some(), "{error}");
    }
}

#[test]
fn a_bad_predicate_is_refused_with_its_line_and_column() {
    let error = refused(&broken(
        "until = \"leader(p/0) == n1 and",
        "until = \"leader(p/0) > n1 and",
    ));
    assert_eq!(
        error.line,
        Some(line_of("do = \"wait-until\"") - 1),
        "{error}"
    );
    assert!(
        error
            .reason
            .starts_with("step 1 (wait-until): until: column "),
        "{error}"
    );
    for bad in [
        "until = \"leadr(p/0) == n1 and",
        "until = \"leader(q/0) == n1 and",
        "until = \"leader(p/0) == n8 and",
        "until = \"leader(p/0) == and",
    ] {
        let error = refused(&broken("until = \"leader(p/0) == n1 and", bad));
        assert!(
            error.reason.contains("step 1 (wait-until): until: "),
            "{bad}: {error}"
        );
    }
}

#[test]
fn other_mistakes_are_refused_with_a_reason() {
    for (from, to, says) in [
        ("timeout = \"20s\"", "timeout = \"20 parsecs\"", "timeout:"),
        ("for = \"500ms\"", "for = \"soon\"", "for:"),
        (
            "partition = \"p/0\"\ncount",
            "partition = \"p/3\"\ncount",
            "the topic has 1 partition",
        ),
        (
            "partition = \"p/0\"\ncount",
            "partition = \"q/0\"\ncount",
            "the scenario's topic is \"p\"",
        ),
        ("acks = \"1\"", "acks = \"2\"", "acks = \"2\""),
        (
            "buggy = [\"lost-write\"]",
            "buggy = [\"lost-wrte\"]",
            "unknown anomaly \"lost-wrte\"",
        ),
        (
            "fixed = \"valid\"",
            "fixed = \"invalid\"",
            "with the switch off the expectation is \"valid\"",
        ),
        (
            "start = [[\"n3\"], [\"n1\", \"n2\"]]",
            "start = [[\"n3\"], [\"n1\"]]",
            "start: n2 is in no group",
        ),
        ("nodes = 3", "nodes = 12", "a scenario has 1 to 9 nodes"),
        (
            "bugs = [\"KAFKA-7128\"]",
            "bugs = [\"7128\"]",
            "not a switch name",
        ),
        (
            "min_insync_replicas = 1,",
            "broker_id = 1,",
            "set by the harness",
        ),
        (
            "nodes = \"n1\"\nwipe",
            "nodes = \"one\"\nwipe",
            "not a random choice",
        ),
        (
            "point = \"follower_fetch_response\"",
            "point = \"Follower Fetch\"",
            "failpoint name",
        ),
        (
            "drop = { n2 = [\"n1\"] }",
            "drop = { n2 = [\"n2\"] }",
            "cannot drop itself",
        ),
    ] {
        let error = refused(&broken(from, to));
        assert!(error.reason.contains(says), "{error} (wanted {says})");
        assert!(error.line.is_some(), "{error}");
    }
    let error = refused(&GOOD.replace("[[step]]", "[[stepp]]"));
    assert!(error.reason.contains("stepp"), "{error}");
    let error = refused(GOOD.split("[[step]]").next().unwrap_or_default());
    assert!(error.reason.contains("no steps"), "{error}");
}

#[test]
fn every_shipped_scenario_is_valid() {
    let dir = scenario::default_dir();
    let all = scenario::load_all(&dir).expect("every file in scenarios/ is valid");
    let names: Vec<&str> = all.iter().map(|s| s.name.as_str()).collect();
    assert!(names.contains(&"unclean-election"), "{names:?}");
    for s in &all {
        assert!(!s.summary.trim().is_empty(), "{}: no summary", s.name);
        assert!(!s.switch.bugs.is_empty() || !s.switch.settings.is_empty());
    }
}

#[test]
fn harness_repro_refuses_a_bad_file_before_anything_starts() {
    let scratch = Scratch::new("bad");
    let file = scratch.0.join("bad.toml");
    std::fs::write(&file, broken("nodes = \"n1\"", "nodes = \"n7\"")).expect("write");
    let store = scratch.0.join("store");
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .arg("repro")
        .arg(&file)
        .arg("--buggy")
        .arg("--store")
        .arg(&store)
        // Would be refused as a broker, but the file is refused first.
        .args(["--broker-bin", "/nonexistent/broker"])
        .output()
        .expect("the harness binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let expected = format!(
        "{}:{}: step 3 (kill): nodes: unknown node \"n7\"",
        file.display(),
        line_of("do = \"kill\"") - 1
    );
    assert!(stderr.contains(&expected), "{stderr}\nwanted {expected}");
    assert!(!store.exists(), "a run folder was made for a refused file");

    // --check on a good file says ok and starts nothing either.
    let good = scratch.0.join("good.toml");
    std::fs::write(&good, GOOD).expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .arg("repro")
        .arg(&good)
        .arg("--check")
        .arg("--store")
        .arg(&store)
        .output()
        .expect("the harness binary runs");
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok (3 nodes, 7 steps)"));
    assert!(!store.exists());

    // An unknown scenario name lists the known ones.
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["repro", "KAFKA-0000", "--check"])
        .output()
        .expect("the harness binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("no scenario \"KAFKA-0000\"") && stderr.contains("unclean-election"),
        "{stderr}"
    );
}

#[test]
fn the_expectation_is_judged_on_the_checkers_verdict_and_anomalies() {
    use checkers::{Results, Verdict};
    use harness::scenario::run::{judge, Mode};
    use serde_json::json;

    let s = parse(GOOD).expect("valid");
    let mut results = Results::default();
    results.add(
        "log",
        Verdict::Invalid,
        &json!({"anomalies": [
            {"kind": "lost-write", "counts_against_validity": true},
            {"kind": "lost-write", "counts_against_validity": true},
            {"kind": "stale-read", "counts_against_validity": false},
        ]}),
    );
    let found = results.counted_anomalies();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found["lost-write"], 2);

    // Bug on: invalid with every expected kind.
    assert!(judge(&s, Mode::Buggy, Verdict::Invalid, &found, None).0);
    // ... but not when the steps did not play out, whatever the verdict.
    let (met, why) = judge(
        &s,
        Mode::Buggy,
        Verdict::Invalid,
        &found,
        Some("wait timed out"),
    );
    assert!(!met && why.contains("wait timed out"), "{why}");
    // A missing kind, or a valid verdict, is not the bug caught.
    let other = BTreeMap::from([("duplicate".to_string(), 1)]);
    let (met, why) = judge(&s, Mode::Buggy, Verdict::Invalid, &other, None);
    assert!(!met && why.contains("missing: lost-write"), "{why}");
    assert!(!judge(&s, Mode::Buggy, Verdict::Valid, &BTreeMap::new(), None).0);
    // Bug off: valid and only valid.
    assert!(judge(&s, Mode::Fixed, Verdict::Valid, &BTreeMap::new(), None).0);
    assert!(!judge(&s, Mode::Fixed, Verdict::Invalid, &found, None).0);
    assert!(!judge(&s, Mode::Fixed, Verdict::Unknown, &BTreeMap::new(), None).0);
}

/// GOOD without its produce step (a workload may not sit beside one).
fn without_produce() -> String {
    broken(
        "[[step]]\ndo = \"produce\"\npartition = \"p/0\"\ncount = 5\nacks = \"1\"\nbatch = true\n\n",
        "",
    )
}

#[test]
fn a_lifted_runs_steps_end_and_judgement_are_read() {
    let text = without_produce()
        + r#"
[[step]]
do = "workload"
for = "20s"
rate = 200.0
concurrency = 4
seed = "12345678901234567890"
hot_partitions = true
batch_fraction = 0.2
batch_max = 5
linearizable_reads = true

[[step]]
do = "strike"
aim = "controller-cut"
request = "transfer-leader"
request_after_ms = 0
gated = true

[[step]]
do = "stop-strike"

[end]
restart = true
one_down = true
"#;
    let text = text.replace(
        "availability_bound = \"10s\"",
        "availability_bound = \"10s\"\nwaive_durability = true",
    );
    let scenario = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(scenario.end.restart && scenario.end.one_down);
    assert!(scenario.expect.waive_durability);
    let n = scenario.steps.len();
    let StepKind::Workload(options) = &scenario.steps[n - 3].kind else {
        panic!("{:?}", scenario.steps[n - 3].kind);
    };
    assert_eq!(options.seed, 12_345_678_901_234_567_890);
    assert_eq!(options.concurrency, 4);
    assert_eq!(options.rate, 200.0);
    assert!(options.hot_partitions);
    assert_eq!(options.batch_max, 5);
    assert_eq!(options.time_limit.as_secs(), 20);
    let StepKind::Strike(aim) = &scenario.steps[n - 2].kind else {
        panic!("{:?}", scenario.steps[n - 2].kind);
    };
    assert_eq!(
        *aim,
        nemesis::aimed::Aim::ControllerCut {
            request: nemesis::aimed::CutRequest::TransferLeader,
            request_after_ms: 0,
            gated: true
        }
    );
    assert_eq!(scenario.steps[n - 1].kind.name(), "stop-strike");
    assert!(scenario.steps.iter().all(|s| !s.may_fail));
    // Without [end] and waive_durability, a scenario ends and is judged as before.
    let plain = parse(GOOD).expect("GOOD");
    assert!(!plain.end.restart && !plain.end.one_down && !plain.expect.waive_durability);
}

#[test]
fn a_bad_workload_or_strike_is_refused_with_its_line() {
    let workload = "\n[[step]]\ndo = \"workload\"\nfor = \"20s\"\n";
    // Beside a produce step, twice, or with bad keys.
    let error = refused(&(GOOD.to_string() + workload));
    assert!(error.reason.contains("values would collide"), "{error}");
    let error = refused(&(without_produce() + workload + workload));
    assert!(error.reason.contains("a second workload"), "{error}");
    for (keys, says) in [
        ("for = \"0s\"", "above zero"),
        ("for = \"20s\"\nconcurrency = 0", "concurrency = 0"),
        ("for = \"20s\"\nread_fraction = 1.5", "1.5"),
        ("for = \"20s\"\nseed = -3", "seed = -3"),
        ("for = \"20s\"\nrats = 3", "rats"),
    ] {
        let text = without_produce() + &format!("\n[[step]]\ndo = \"workload\"\n{keys}\n");
        let error = refused(&text);
        assert!(error.reason.contains(says), "{error} (wanted {says})");
        assert!(error.line.is_some(), "{error}");
    }
    for (keys, says) in [
        ("aim = \"controller-chop\"", "controller-chop"),
        ("aim = \"after-change\"\nstrike = \"kill\"", "watch_ms"),
    ] {
        let text = without_produce() + &format!("\n[[step]]\ndo = \"strike\"\n{keys}\n");
        let error = refused(&text);
        assert!(error.reason.contains(says), "{error} (wanted {says})");
        assert!(error.line.is_some(), "{error}");
    }
}

#[test]
fn an_expectation_may_name_any_oracles_kind_and_no_unknown_one() {
    for kind in [
        "roles-not-converged",
        "isr-not-restored",
        "truncated-committed",
        "not-linearizable",
    ] {
        let text = broken("buggy = [\"lost-write\"]", &format!("buggy = [\"{kind}\"]"));
        parse(&text).unwrap_or_else(|e| panic!("{kind}: {e}"));
    }
    for kind in ["not-", "not-Linear", "roles-converged"] {
        let text = broken("buggy = [\"lost-write\"]", &format!("buggy = [\"{kind}\"]"));
        let error = refused(&text);
        assert!(error.reason.contains("unknown anomaly"), "{error}");
    }
}

#[test]
fn a_fault_step_may_fail_and_says_so_in_its_step() {
    let scenario = parse(&broken(
        "nodes = \"n1\"\nwipe = true",
        "nodes = \"n1\"\nwipe = true\nmay_fail = true",
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let kill = scenario
        .steps
        .iter()
        .find(|s| s.kind.name() == "kill")
        .expect("the kill step");
    assert!(kill.may_fail);
    assert!(scenario.steps.iter().filter(|s| s.may_fail).count() == 1);
    let error = refused(&broken(
        "ports = \"replication\"",
        "ports = \"replication\"\nmay_fail = \"yes\"",
    ));
    assert!(error.reason.contains("true or false"), "{error}");
    // Not a key of steps that have no fault to fail.
    let error = refused(&broken(
        "for = \"500ms\"",
        "for = \"500ms\"\nmay_fail = true",
    ));
    assert!(error.reason.contains("may_fail"), "{error}");
}
