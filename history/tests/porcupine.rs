//! Porcupine's formats: every fixture imports and pairs, and each error path names the
//! line.

use history::jepsen::{parse_jepsen_edn, to_jepsen_edn};
use history::porcupine::{parse_etcd_log, parse_kv, read_etcd_log, read_kv};
use history::{pair, History, OpType, Process};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Instant;

const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/fixtures/porcupine"
);

/// The fixture files in `folder` with extension `ext`, sorted; fails the calling test
/// (named `needs_fixtures__`) where the shared fixtures are absent.
fn fixtures(folder: &str, ext: &str) -> Vec<PathBuf> {
    let dir = Path::new(FIXTURES).join(folder);
    assert!(
        Path::new(FIXTURES).is_dir(),
        "needs ../shared/fixtures beside the checkout (not found: {FIXTURES}): put the project's `shared` folder (with fixtures/porcupine) beside the checkout; \
             or run `scripts/test --skip-missing`, which does not run the tests whose \
             prerequisites are missing and reports them as skipped"
    );
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == ext))
        .collect();
    files.sort();
    files
}

/// Checks that the history pairs and that its counts agree with the pairing.
fn check_counts(h: &History, path: &Path) {
    let operations = pair(h).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let invocations = h.ops.iter().filter(|op| op.kind == OpType::Invoke).count();
    let completions = h.len() - invocations;
    assert_eq!(operations.len(), invocations, "{}", path.display());
    let completed = operations.iter().filter(|o| o.completion.is_some()).count();
    assert_eq!(completed, completions, "{}", path.display());
}

fn non_blank_lines(path: &Path) -> usize {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines().filter(|l| !l.trim().is_empty()).count()
}

#[test]
#[allow(non_snake_case)]
fn needs_fixtures__every_etcd_log_imports_and_pairs() {
    let files = fixtures("jepsen", "log");
    assert_eq!(files.len(), 103);
    let mut total = 0;
    let mut timed_out = 0;
    for path in &files {
        let h = read_etcd_log(path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(h.len(), non_blank_lines(path), "{}", path.display());
        check_counts(&h, path);
        for op in &h.ops {
            assert!(op.process.is_client(), "{}", path.display());
            assert!(["read", "write", "cas"].contains(&op.f.as_str()));
            if op.error.is_some() {
                assert_eq!(op.error, Some(json!("timed-out")));
                assert_eq!(op.value, json!(null));
                assert!(matches!(op.kind, OpType::Info | OpType::Fail));
                timed_out += 1;
            }
        }
        total += h.len();
    }
    assert!(total > 10_000, "{total}");
    assert!(timed_out > 0);
}

#[test]
#[allow(non_snake_case)]
fn needs_fixtures__empty_etcd_log_is_an_empty_history() {
    let files = fixtures("jepsen", "log");
    let empty = files.iter().find(|p| p.ends_with("etcd_095.log")).unwrap();
    assert!(read_etcd_log(empty).unwrap().is_empty());
    assert!(parse_etcd_log("e.log", "").unwrap().is_empty());
    assert!(parse_etcd_log("e.log", "\n  \n").unwrap().is_empty());
}

#[test]
#[allow(non_snake_case)]
fn needs_fixtures__etcd_logs_import_quickly() {
    let files = fixtures("jepsen", "log");
    let texts: Vec<(String, String)> = files
        .iter()
        .map(|p| (p.display().to_string(), std::fs::read_to_string(p).unwrap()))
        .collect();
    // The best of a few rounds, printed, not asserted: a debug build on a loaded
    // machine is no benchmark.
    let mut best = None;
    let mut ops = 0;
    for _ in 0..5 {
        let start = Instant::now();
        ops = 0;
        for (source, text) in &texts {
            ops += parse_etcd_log(source, text).unwrap().len();
        }
        let elapsed = start.elapsed();
        best = Some(best.map_or(elapsed, |b: std::time::Duration| b.min(elapsed)));
    }
    println!(
        "parsed {ops} ops of {} etcd logs in {best:?} (best of 5)",
        texts.len()
    );
}

#[test]
#[allow(non_snake_case)]
fn needs_fixtures__every_kv_history_imports_and_pairs() {
    let files = fixtures("kv", "txt");
    assert_eq!(files.len(), 6);
    for path in &files {
        let h = read_kv(path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(h.len(), non_blank_lines(path), "{}", path.display());
        check_counts(&h, path);
        for op in &h.ops {
            assert!(op.key().is_some(), "{}: {op:?}", path.display());
            assert!(["get", "put", "append"].contains(&op.f.as_str()));
        }
        let exported = to_jepsen_edn(&h);
        let again = parse_kv("exported.edn", &exported).unwrap();
        assert_eq!(again.ops, h.ops, "{}", path.display());
    }
}

#[test]
#[allow(non_snake_case)]
fn needs_fixtures__etcd_log_round_trips_through_jepsen_edn() {
    let files = fixtures("jepsen", "log");
    for path in files.iter().take(5) {
        let h = read_etcd_log(path).unwrap();
        let again = parse_jepsen_edn("exported.edn", &to_jepsen_edn(&h)).unwrap();
        assert_eq!(again.ops, h.ops, "{}", path.display());
    }
}

#[test]
fn etcd_values_convert() {
    let text = "INFO  jepsen.util - 0\t:invoke\t:read\tnil\n\
                INFO  jepsen.util - 0\t:ok\t:read\t3\n\
                INFO  jepsen.util - 12  :invoke  :cas  [3 0]\n\
                INFO  jepsen.util - 12\t:info\t:cas\t:timed-out\n\
                INFO  jepsen.util - :nemesis\t:info\t:start\tnil\r\n";
    let h = parse_etcd_log("e.log", text).unwrap();
    assert_eq!(h.ops[0].value, json!(null));
    assert_eq!(h.ops[1].value, json!(3));
    assert_eq!(h.ops[2].process, Process::Client(12));
    assert_eq!(h.ops[2].value, json!([3, 0]));
    assert_eq!(h.ops[3].kind, OpType::Info);
    assert_eq!(h.ops[3].error, Some(json!("timed-out")));
    assert_eq!(h.ops[4].process, Process::Nemesis);
    let indexes: Vec<u64> = h.ops.iter().map(|op| op.index).collect();
    assert_eq!(indexes, vec![0, 1, 2, 3, 4]);
}

fn etcd_error(text: &str) -> String {
    match parse_etcd_log("e.log", text) {
        Ok(h) => panic!("{text:?} parsed as {h:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn etcd_errors_name_the_line() {
    let good = "INFO  jepsen.util - 0\t:invoke\t:read\tnil\n";
    for (bad, needle) in [
        ("garbage", "not a Jepsen op line"),
        ("INFO  jepsen.core - Run complete", "not a Jepsen op line"),
        ("INFO  jepsen.util - 0\t:invoke", "not a Jepsen op line"),
        (
            "INFO  jepsen.util - p0\t:invoke\t:read\tnil",
            "bad process \"p0\"",
        ),
        (
            "INFO  jepsen.util - -1\t:invoke\t:read\tnil",
            "bad process \"-1\"",
        ),
        (
            "INFO  jepsen.util - 0\t:okay\t:read\tnil",
            "unknown op type \":okay\"",
        ),
        (
            "INFO  jepsen.util - 0\tok\t:read\tnil",
            "unknown op type \"ok\"",
        ),
        ("INFO  jepsen.util - 0\t:ok\tread\tnil", "bad f \"read\""),
        ("INFO  jepsen.util - 0\t:ok\t:read", "no value"),
        ("INFO  jepsen.util - 0\t:ok\t:cas\t[1 2", "unclosed '['"),
        ("INFO  jepsen.util - 0\t:ok\t:read\t1 2", "after the value"),
    ] {
        let err = etcd_error(&format!("{good}\n{bad}\n{good}"));
        assert!(err.starts_with("e.log:3: "), "{bad:?}: {err}");
        assert!(err.contains(needle), "{bad:?}: {err}");
    }
}

#[test]
fn kv_ops_need_a_key() {
    let text = "{:process 0, :type :invoke, :f :get, :key \"0\", :value nil}\n\
                {:process 0, :type :ok, :f :get, :value \"x\"}\n";
    let err = parse_kv("kv.txt", text).unwrap_err().to_string();
    assert!(
        err.starts_with("kv.txt:2: client op ok get has no :key"),
        "{err}"
    );
    // The nemesis has no key to give.
    let nemesis = "{:process :nemesis, :type :info, :f :start, :value nil}\n";
    assert_eq!(parse_kv("kv.txt", nemesis).unwrap().len(), 1);
}

#[test]
fn kv_errors_name_the_line() {
    let err = parse_kv(
        "kv.txt",
        "{:process 0, :type :invoke, :f :get, :key \"0\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.starts_with("kv.txt:1: bad EDN: line 1, column 1: unclosed '{'"),
        "{err}"
    );
    let err = parse_kv(
        "kv.txt",
        "\n{:process x, :type :invoke, :f :get, :key \"0\"}\n",
    )
    .unwrap_err()
    .to_string();
    assert!(err.starts_with("kv.txt:2: bad :process x"), "{err}");
}

#[test]
fn missing_files_are_io_errors() {
    let err = read_kv(Path::new("/nonexistent/kv.txt"))
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("/nonexistent/kv.txt: "), "{err}");
    let err = read_etcd_log(Path::new("/nonexistent/e.log"))
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("/nonexistent/e.log: "), "{err}");
}
