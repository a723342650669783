//! `harness check` driven as a user runs it: the real binary, real files, exit codes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn harness(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(args)
        .output()
        .expect("the harness binary runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A scratch folder for one test, removed at the end.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("harness-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        Scratch(dir)
    }
    fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).expect("write scratch file");
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Porcupine's fixtures in `../shared/fixtures` beside the checkout; fails the calling
/// test (named `needs_fixtures__`) when they are absent.
fn fixtures() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/porcupine");
    assert!(
        dir.is_dir(),
        "needs ../shared/fixtures beside the checkout (not found: {}): put the project's `shared` folder (with fixtures/porcupine) beside the checkout; \
             or run `scripts/test --skip-missing`, which does not run the tests whose \
             prerequisites are missing and reports them as skipped",
        dir.display()
    );
    dir
}

fn generated_log_history(seed: u64) -> String {
    let history = checkers::log::simulate::generate_history(seed, 2_000, 3, 4);
    history::jsonl::to_jsonl(&history.ops)
}

#[test]
fn a_valid_log_history_exits_zero_and_says_so() {
    let scratch = Scratch::new("valid-log");
    let path = scratch.file("history.jsonl", &generated_log_history(1));
    let out = harness(&["check", path.to_str().unwrap()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(text.contains("model: log"), "{text}");
    assert_eq!(text.lines().last(), Some("verdict: valid"), "{text}");
}

#[test]
fn a_lost_write_exits_one_and_names_the_ops() {
    // Process 0 appends 5 (acked at offset 0); the final read from 0 returns nothing
    // although the high watermark says offset 0 exists.
    let scratch = Scratch::new("lost");
    let lines = [
        r#"{"index":0,"time":1,"process":0,"type":"invoke","f":"append","value":{"key":"t/0","value":5}}"#,
        r#"{"index":1,"time":2,"process":0,"type":"ok","f":"append","value":{"key":"t/0","value":5,"offset":0}}"#,
        r#"{"index":2,"time":3,"process":1,"type":"invoke","f":"append","value":{"key":"t/0","value":6}}"#,
        r#"{"index":3,"time":4,"process":1,"type":"ok","f":"append","value":{"key":"t/0","value":6,"offset":1}}"#,
        r#"{"index":4,"time":5,"process":1,"type":"invoke","f":"read","value":{"key":"t/0","offset":0}}"#,
        r#"{"index":5,"time":6,"process":1,"type":"ok","f":"read","value":{"key":"t/0","offset":0,"records":[[1,6]],"high_watermark":2}}"#,
    ];
    let path = scratch.file("lost.jsonl", &(lines.join("\n") + "\n"));
    let out = harness(&["check", path.to_str().unwrap(), "--model", "log"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}{}", stderr(&out));
    assert!(text.contains("lost-write"), "{text}");
    assert_eq!(text.lines().last(), Some("verdict: invalid"), "{text}");
}

#[test]
fn malformed_input_exits_three_naming_file_and_line() {
    let scratch = Scratch::new("malformed");
    let good = r#"{"index":0,"process":0,"type":"invoke","f":"read","value":null}"#;
    let bad_type = scratch.file(
        "bad-type.jsonl",
        &format!("{good}\n{}\n", good.replace("invoke", "begin")),
    );
    let out = harness(&["check", bad_type.to_str().unwrap(), "--model", "register"]);
    assert_eq!(out.status.code(), Some(3));
    let err = stderr(&out);
    assert!(
        err.contains("bad-type.jsonl:2") && err.contains("unknown op type"),
        "{err}"
    );

    // A line broken anywhere but at the very end is an error.
    let broken = scratch.file("broken.jsonl", &format!("{}\n{good}\n", &good[..20]));
    let out = harness(&["check", broken.to_str().unwrap(), "--model", "register"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out).contains("broken.jsonl:1: bad history line"),
        "{}",
        stderr(&out)
    );

    let edn = scratch.file(
        "bad.edn",
        "[{:process 0, :type :invoke, :f :read, :value nil}\n {:process 0 :type :ok",
    );
    let out = harness(&["check", edn.to_str().unwrap(), "--model", "register"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(stderr(&out).contains("bad.edn"), "{}", stderr(&out));

    let out = harness(&["check", "/nonexistent/history.jsonl"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out).contains("/nonexistent/history.jsonl"),
        "{}",
        stderr(&out)
    );

    let out = harness(&["check", bad_type.to_str().unwrap(), "--init", "{not json"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(stderr(&out).contains("--init"), "{}", stderr(&out));
}

#[test]
fn a_torn_last_line_is_reported_and_the_rest_checked() {
    // What a harness killed mid-write leaves: the last line cut short, no newline.
    let scratch = Scratch::new("torn");
    let mut text = generated_log_history(4);
    let complete = text.lines().count() - 1;
    text.truncate(text.len() - 30);
    let path = scratch.file("history.jsonl", &text);
    let out = harness(&["check", path.to_str().unwrap(), "--model", "log"]);
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "history.jsonl:{}: incomplete last line dropped",
            complete + 1
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!("checking the {complete} complete ops")),
        "{err}"
    );
    assert!(
        stdout(&out).contains(&format!("(jsonl, {complete} ops)")),
        "{}",
        stdout(&out)
    );
    // The verdict is the checker's on what remains; a correct simulated log stays valid.
    assert_eq!(out.status.code(), Some(0), "{}{err}", stdout(&out));
}

#[test]
fn independent_histories_are_checked_per_key() {
    // Jepsen's independent tuples: [key value], and [key [old new]] for cas.
    let scratch = Scratch::new("independent");
    let valid = "[{:process 0 :type :invoke :f :write :value [1 1]}
 {:process 0 :type :ok :f :write :value [1 1]}
 {:process 2 :type :invoke :f :write :value [2 7]}
 {:process 2 :type :ok :f :write :value [2 7]}
 {:process 1 :type :invoke :f :cas :value [1 [1 2]]}
 {:process 1 :type :ok :f :cas :value [1 [1 2]]}
 {:process 0 :type :invoke :f :read :value [1 nil]}
 {:process 0 :type :ok :f :read :value [1 2]}
 {:process 2 :type :invoke :f :read :value [2 nil]}
 {:process 2 :type :ok :f :read :value [2 7]}]
";
    let path = scratch.file("indep.edn", valid);
    let file = path.to_str().unwrap();
    let out = harness(&["check", file, "--independent", "--model", "cas-register"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stdout(&out).contains("in 2 partition(s)"),
        "{}",
        stdout(&out)
    );
    // Key 2 reads a value never written to it (7 went to key 2, 1 to key 1).
    let invalid = valid.replace(":value [2 7]}]", ":value [2 1]}]");
    let path = scratch.file("indep-bad.edn", &invalid);
    let out = harness(&[
        "check",
        path.to_str().unwrap(),
        "--independent",
        "--model",
        "cas-register",
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stdout(&out).contains("not linearizable: key 2"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn a_run_folder_gets_its_results_json() {
    let scratch = Scratch::new("run-dir");
    scratch.file("history.jsonl", &generated_log_history(2));
    let json_out = scratch.0.join("copy.json");
    let out = harness(&[
        "check",
        scratch.0.to_str().unwrap(),
        "--json",
        json_out.to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(scratch.0.join("results.json")).unwrap())
            .unwrap();
    assert_eq!(results["verdict"], "valid");
    assert_eq!(results["checkers"]["log"]["verdict"], "valid");
    let copy: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json_out).unwrap()).unwrap();
    assert_eq!(copy, results);
}

#[test]
fn a_rechecked_run_folder_keeps_its_live_checkers_and_its_waiver() {
    let scratch = Scratch::new("run-dir-waived");
    // An acknowledged write at offset 0 that the final read does not show: lost.
    let history = [
        r#"{"index":0,"time":1,"process":0,"type":"invoke","f":"append","value":{"key":"p/0","value":7}}"#,
        r#"{"index":1,"time":2,"process":0,"type":"ok","f":"append","value":{"key":"p/0","offset":0,"value":7}}"#,
        r#"{"index":2,"time":3,"process":1,"type":"invoke","f":"read","value":{"key":"p/0","offset":0,"final":true}}"#,
        r#"{"index":3,"time":4,"process":1,"type":"ok","f":"read","value":{"key":"p/0","offset":0,"final":true,"high_watermark":1,"max":1000,"records":[]}}"#,
    ]
    .join("\n");
    scratch.file("history.jsonl", &format!("{history}\n"));
    let recheck = || {
        let out = harness(&["check", scratch.0.to_str().unwrap()]);
        let results: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(scratch.0.join("results.json")).unwrap())
                .unwrap();
        (out.status.code(), results)
    };
    let (code, results) = recheck();
    assert_eq!(code, Some(1), "a lost write: {results}");
    assert_eq!(results["checkers"]["log"]["verdict"], "invalid");
    // As the run left it: the log checker's losses waived (unclean elections), the
    // truncation oracle valid.
    let mut waived = results.clone();
    waived["checkers"]["log"]["report"]["waived"] = serde_json::json!({"reason": "unclean elections", "kinds": ["lost-write", "inconsistent-offsets"]});
    waived["checkers"]["truncation"] =
        serde_json::json!({"verdict": "valid", "report": {"anomalies": [], "truncations": 2}});
    scratch.file("results.json", &waived.to_string());
    let (code, results) = recheck();
    assert_eq!(code, Some(0), "{results}");
    assert_eq!(results["verdict"], "valid");
    assert_eq!(
        results["checkers"]["truncation"]["report"]["truncations"],
        2
    );
    assert_eq!(
        results["checkers"]["log"]["report"]["waived"]["reason"],
        "unclean elections"
    );
    let anomalies = results["checkers"]["log"]["report"]["anomalies"]
        .as_array()
        .unwrap();
    assert!(!anomalies.is_empty(), "still reported");
    assert!(anomalies
        .iter()
        .all(|a| a["counts_against_validity"] == serde_json::json!(false)));
    // A live checker judged under the waiver keeps its verdict: the ISR oracle's
    // admission below the leader's epoch start still counts, the other one not.
    let mut isr = waived.clone();
    isr["checkers"]["isr"] = serde_json::json!({"verdict": "invalid", "report": {
    "found": 2, "counted": 1,
    "waived": {"reason": "not counted: unclean elections; …", "kinds": ["isr-admitted-behind"]},
    "anomalies": [
        {"kind": "isr-admitted-behind", "below_epoch_start": true, "counts_against_validity": true},
        {"kind": "isr-admitted-behind", "below_epoch_start": false, "counts_against_validity": false}
    ]}});
    scratch.file("results.json", &isr.to_string());
    let (code, results) = recheck();
    assert_eq!(code, Some(1), "{results}");
    assert_eq!(results["checkers"]["isr"]["verdict"], "invalid");
    assert_eq!(
        results["checkers"]["isr"]["report"]["anomalies"][0]["counts_against_validity"],
        true
    );
    assert_eq!(results["checkers"]["log"]["verdict"], "valid");
}

#[test]
#[allow(non_snake_case)]
fn needs_fixtures__every_etcd_history_gets_its_expected_verdict_in_one_process() {
    let dir = fixtures();
    let expected_tsv = std::fs::read_to_string(dir.join("EXPECTED.tsv")).unwrap();
    let mut expected = HashMap::new();
    let mut files = Vec::new();
    for line in expected_tsv.lines().filter(|l| !l.starts_with('#')) {
        let fields: Vec<&str> = line.split('\t').collect();
        if fields.len() < 2 || !fields[0].starts_with("jepsen/") {
            continue;
        }
        let verdict = match fields[1] {
            "linearizable" => "valid",
            "not-linearizable" => "invalid",
            _ => continue,
        };
        let path = dir.join(fields[0]);
        expected.insert(path.display().to_string(), verdict);
        files.push(path.display().to_string());
    }
    assert_eq!(files.len(), 102);
    let mut args = vec!["check", "--model", "etcd"];
    args.extend(files.iter().map(String::as_str));
    let out = harness(&args);
    let text = stdout(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "some are invalid: {}",
        stderr(&out)
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), files.len(), "{text}");
    for (line, file) in lines.iter().zip(&files) {
        let fields: Vec<&str> = line.split('\t').collect();
        assert_eq!(fields.len(), 3, "{line}");
        assert_eq!(fields[0], file, "lines come in input order");
        assert_eq!(fields[1], expected[file.as_str()], "{line}");
        assert!(fields[2].parse::<u64>().is_ok(), "{line}");
    }
}

#[test]
#[allow(non_snake_case)]
fn needs_fixtures__kv_histories_are_guessed_and_judged() {
    let dir = fixtures();
    for (name, code) in [("c01-ok.txt", 0), ("c01-bad.txt", 1), ("c10-bad.txt", 1)] {
        let path = dir.join("kv").join(name);
        let out = harness(&["check", path.to_str().unwrap()]);
        let text = stdout(&out);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{name}: {text}{}",
            stderr(&out)
        );
        assert!(
            text.contains("model: kv") && text.contains("porcupine-kv"),
            "{text}"
        );
    }
}

#[test]
fn export_writes_edn_that_checks_the_same() {
    let scratch = Scratch::new("export");
    let jsonl = scratch.file("history.jsonl", &generated_log_history(3));
    let edn = scratch.0.join("history.edn");
    let out = harness(&[
        "export",
        jsonl.to_str().unwrap(),
        "--out",
        edn.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = std::fs::read_to_string(&edn).unwrap();
    assert!(
        text.starts_with('[') && text.contains(":type :invoke"),
        "{}",
        &text[..200.min(text.len())]
    );
    let out = harness(&["check", edn.to_str().unwrap(), "--model", "log"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(stdout(&out).contains("(jepsen-edn,"), "{}", stdout(&out));

    // A history that does not pair up is refused, naming the line.
    let bad = scratch.file(
        "bad.jsonl",
        r#"{"index":0,"process":0,"type":"ok","f":"read","value":null}
"#,
    );
    let out = harness(&["export", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3));
    assert!(stderr(&out).contains("bad.jsonl:1"), "{}", stderr(&out));
}

#[test]
fn usage_errors_exit_three_not_the_unknown_verdicts_two() {
    let out = harness(&["check", "x.jsonl", "--model", "bogus"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out).contains("expected log, register"),
        "{}",
        stderr(&out)
    );
    let out = harness(&["check"]);
    assert_eq!(out.status.code(), Some(3));
    let out = harness(&["check", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).contains("--model"));
}

#[test]
fn an_undecidable_search_exits_two_with_its_reason() {
    // 25 writes of distinct values that never complete (so may happen any time), then a
    // read of a value nobody wrote: refuting it means trying every subset of the writes.
    let scratch = Scratch::new("unknown");
    let mut edn = String::from("; hard for any linearizability search\n[\n");
    for p in 0..25 {
        edn.push_str(&format!(
            "{{:process {p}, :type :invoke, :f :write, :value {p}}}\n"
        ));
    }
    edn.push_str("{:process 99, :type :invoke, :f :read, :value nil}\n");
    edn.push_str("{:process 99, :type :ok, :f :read, :value 999}\n]\n");
    let path = scratch.file("hard.edn", &edn);
    let out = harness(&[
        "check",
        path.to_str().unwrap(),
        "--model",
        "register",
        "--time-limit",
        "0.2",
        "--algorithm",
        "wgl",
    ]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(2), "{text}{}", stderr(&out));
    assert!(text.contains("undecided: time limit"), "{text}");
    assert_eq!(text.lines().last(), Some("verdict: unknown"), "{text}");
    // Every value is written once, so the zone check (`auto`'s choice) decides at once.
    let out = harness(&["check", path.to_str().unwrap(), "--model", "register"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}{}", stderr(&out));
    assert!(text.contains("not linearizable (zones)"), "{text}");
    assert!(
        text.contains("returned 999, and no write wrote it"),
        "{text}"
    );
}

#[test]
fn files_that_are_no_history_are_errors_never_valid() {
    let scratch = Scratch::new("hostile");
    let cases = [
        // Garbage with no newline once passed as "a torn last line" of an empty history.
        (
            scratch.file("g.jsonl", "this is total garbage, not json"),
            "g.jsonl:1: not a history line (no complete op line before it)",
        ),
        (
            scratch.file("empty.jsonl", "\n\n"),
            "empty.jsonl: no operation in it",
        ),
        (
            scratch.file(
                "dup.jsonl",
                concat!(
                    r#"{"index":0,"process":0,"type":"invoke","f":"read","value":null}"#,
                    "\n",
                    r#"{"index":1,"process":0,"type":"ok","f":"read","value":null}"#,
                    "\n",
                    r#"{"index":1,"process":1,"type":"invoke","f":"read","value":null}"#,
                    "\n",
                ),
            ),
            "dup.jsonl:3: op index 1 repeats the index 1",
        ),
        (
            scratch.file(
                "down.edn",
                "{:index 5 :process 0 :type :invoke :f :read :value nil}\n{:index 2 :process 0 :type :ok :f :read :value nil}\n",
            ),
            "down.edn:2: op index 2 is below the index 5",
        ),
        // An endless device: refused once a line passes the limit, not read until killed.
        (PathBuf::from("/dev/zero"), "/dev/zero:1: line longer than"),
    ];
    for (path, expected) in &cases {
        let out = harness(&["check", path.to_str().unwrap(), "--model", "register"]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(3), "{}: {err}", path.display());
        assert!(err.contains(expected), "{}: {err}", path.display());
        assert!(!stdout(&out).contains("verdict"), "{}", stdout(&out));
    }
}

#[test]
fn numeric_flags_are_checked_when_parsed() {
    let scratch = Scratch::new("flags");
    let path = scratch.file("history.jsonl", &generated_log_history(2));
    let path = path.to_str().unwrap();
    for (flag, value) in [
        ("--time-limit", "1e300"),
        ("--time-limit", "NaN"),
        ("--time-limit", "-1"),
        ("--time-limit", "0"),
        ("--time-limit", "soon"),
        ("--memory-limit", "0"),
        ("--memory-limit", "99999999999999999999"),
    ] {
        // `--flag=value`: a value like `-1` is then the flag's, not an option of its own.
        let out = harness(&["check", path, &format!("{flag}={value}")]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(3), "{flag} {value}: {err}");
        assert!(err.contains(flag), "{flag} {value}: {err}");
        assert!(!err.contains("panicked"), "{flag} {value}: {err}");
    }
    let out = harness(&["check", path, "--time-limit", "0.5", "--memory-limit", "1"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn a_closed_or_full_stdout_ends_without_a_panic() {
    let scratch = Scratch::new("stdout");
    let path = scratch.file("history.jsonl", &generated_log_history(3));
    let path = path.to_str().unwrap().to_string();
    let mut args = vec!["check".to_string()];
    args.extend((0..40).map(|_| path.clone()));

    // A reader that went away (`| head -1`): the output stops, the verdict stays.
    let mut child = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the harness binary runs");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("waits");
    let err = stderr(&out);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(0), "{err}");

    // A full disk: a tool error that says what failed, for one file and for many.
    for args in [vec!["check".to_string(), path.clone()], args] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full");
        let out = Command::new(env!("CARGO_BIN_EXE_harness"))
            .args(&args)
            .stdout(full)
            .output()
            .expect("the harness binary runs");
        let err = stderr(&out);
        assert!(!err.contains("panicked"), "{err}");
        assert_eq!(out.status.code(), Some(3), "{err}");
        assert!(err.contains("writing to standard output"), "{err}");
    }
}
