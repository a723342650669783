//! Our hand-written Jepsen EDN histories (tests/data/*.edn) get the verdicts their
//! comments claim. Each file states its claim in header comments, which this test reads:
//! `; model: <name>`, optionally `; init: <json>`, `; expect: valid|invalid`, and for
//! invalid ones `; unplaced: <index>` (the op the checker must report as unplaceable).

use checkers::linear::{check_linearizable, Algorithm, AlgorithmChoice, LinearOptions, ModelKind};
use checkers::Verdict;
use serde_json::json;
use std::path::{Path, PathBuf};

struct Claim {
    model: ModelKind,
    init: Option<serde_json::Value>,
    verdict: Verdict,
    unplaced: Option<u64>,
}

fn claim(path: &Path) -> Claim {
    let text = std::fs::read_to_string(path).expect("test data is readable");
    let header = |name: &str| {
        text.lines()
            .filter_map(|line| line.strip_prefix(';'))
            .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix(':'))
            .map(|value| value.trim().to_string())
    };
    let name = path.display();
    let model = header("model")
        .unwrap_or_else(|| panic!("{name}: no `; model:` line"))
        .parse()
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let init = header("init").map(|init| {
        serde_json::from_str(&init).unwrap_or_else(|e| panic!("{name}: bad init {init:?}: {e}"))
    });
    let verdict = match header("expect").as_deref() {
        Some("valid") => Verdict::Valid,
        Some("invalid") => Verdict::Invalid,
        other => panic!("{name}: `; expect:` must be valid or invalid, not {other:?}"),
    };
    let unplaced = header("unplaced").map(|index| {
        index
            .parse()
            .unwrap_or_else(|e| panic!("{name}: bad unplaced {index:?}: {e}"))
    });
    assert_eq!(
        verdict == Verdict::Invalid,
        unplaced.is_some(),
        "{name}: invalid histories (only) name their unplaced op"
    );
    Claim {
        model,
        init,
        verdict,
        unplaced,
    }
}

fn data_files() -> Vec<PathBuf> {
    let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("tests/data exists")
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "edn"))
        .collect();
    files.sort();
    files
}

#[test]
fn linear_edn_histories_get_the_verdicts_their_comments_claim() {
    let files = data_files();
    let mut covered = Vec::new();
    for path in &files {
        let name = path.display();
        let claim = claim(path);
        let history = history::jepsen::read_jepsen_edn(path).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            history.ops.iter().any(|op| !op.process.is_client()),
            "{name}: has nemesis ops"
        );
        let mut options = LinearOptions::new(claim.model);
        options.init = claim.init.clone();
        // The zones judge the register histories (every value is written once), and
        // agree with the search, whose unplaced op the claim names.
        let auto = check_linearizable(&history, &options).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(auto.verdict, claim.verdict, "{name}: {auto:?}");
        let zones_judged = auto
            .algorithms
            .iter()
            .all(|partition| partition.algorithm == Algorithm::Zones);
        assert_eq!(zones_judged, claim.model == ModelKind::Register, "{name}");
        options.algorithm = AlgorithmChoice::Wgl;
        let report = check_linearizable(&history, &options).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(report.verdict, claim.verdict, "{name}: {report:?}");
        if let Some(unplaced) = claim.unplaced {
            let failure = report
                .failure
                .as_ref()
                .expect("invalid reports name a failure");
            assert_eq!(
                failure.unplaced, unplaced,
                "{name}: {}",
                failure.unplaced_description
            );
            assert!(!failure.longest_prefix.contains(&unplaced), "{name}");
        }
        covered.push((claim.model, claim.verdict));
    }
    for model in [
        ModelKind::Register,
        ModelKind::CasRegister,
        ModelKind::MultiRegister,
    ] {
        for verdict in [Verdict::Valid, Verdict::Invalid] {
            assert!(
                covered.contains(&(model, verdict)),
                "no {verdict} {model} history in tests/data"
            );
        }
    }
}

#[test]
fn linear_failure_report_of_the_stale_read_names_the_prefix_and_state() {
    let path = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/register-invalid.edn"
    ));
    let history = history::jepsen::read_jepsen_edn(path).unwrap_or_else(|e| panic!("{e}"));
    let mut options = LinearOptions::new(ModelKind::Register);
    options.algorithm = AlgorithmChoice::Wgl;
    let report = check_linearizable(&history, &options).unwrap_or_else(|e| panic!("{e}"));
    let failure = report.failure.expect("not linearizable");
    assert_eq!(failure.key, None);
    // The writes of 1 and 2 in real-time order, with the timed-out write of 7 somewhere.
    let mut prefix = failure.longest_prefix.clone();
    prefix.retain(|&index| index != 2);
    assert_eq!(prefix, vec![0, 5]);
    assert!(
        failure
            .unplaced_description
            .starts_with("process 0 read -> 1 at "),
        "{}",
        failure.unplaced_description
    );
    assert!(failure
        .unplaced_description
        .contains("register-invalid.edn:"));
    // Ops of the longest prefix were part of a partial linearization at least that long;
    // the unplaced read never was.
    for partial in &failure.partial_linearizations {
        let in_prefix = failure.longest_prefix.contains(&partial.op);
        assert!(
            !in_prefix || partial.length >= failure.longest_prefix.len(),
            "{partial:?}"
        );
        assert!(
            partial.op != failure.unplaced || partial.length == 0,
            "{partial:?}"
        );
    }
}

#[test]
fn linear_zones_explain_the_stale_read_by_the_write_that_overwrote_it() {
    let path = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/register-invalid.edn"
    ));
    let history = history::jepsen::read_jepsen_edn(path).unwrap_or_else(|e| panic!("{e}"));
    let report = check_linearizable(&history, &LinearOptions::new(ModelKind::Register))
        .unwrap_or_else(|e| panic!("{e}"));
    let failure = report.failure.expect("not linearizable");
    assert_eq!(failure.algorithm, Algorithm::Zones);
    // 1 must hold the register from the write of 1's completion (op 0) until the read of
    // it is invoked (op 10); 2 from the write of 2's completion (op 5) until the read of
    // it (op 12). The two stretches overlap.
    let conflict = serde_json::to_value(failure.conflict.expect("a conflict")).unwrap();
    assert_eq!(conflict["kind"], "overlapping-zones");
    let (first, second) = (&conflict["first"], &conflict["second"]);
    assert_eq!((&first["value"], &first["write"]), (&json!(1), &json!(0)));
    assert_eq!(first["reads"], json!([10]));
    assert_eq!(first["earliest_completion"], 0);
    assert_eq!(first["latest_invocation"], 10);
    assert_eq!((&second["value"], &second["write"]), (&json!(2), &json!(5)));
    assert_eq!(second["earliest_completion"], 5);
    assert_eq!(second["latest_invocation"], 12);
    assert_eq!(second["forward"], true);
    assert_eq!(failure.unplaced, 5);
    assert_eq!(
        failure.unplaced_description,
        "1 had to hold the register from the completion of op 0 (process 0 write 1) until \
         the invocation of op 10 (process 0 read -> 1), and 2 from the completion of op 5 \
         (process 2 write 2) until the invocation of op 12 (process 2 read -> 2); the two \
         stretches overlap, but the register holds one value at a time and, as every value \
         is written once, never returns to an overwritten one"
    );
}

#[test]
fn linear_multi_register_failure_names_the_component() {
    let path = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/multi-register-invalid.edn"
    ));
    let history = history::jepsen::read_jepsen_edn(path).unwrap_or_else(|e| panic!("{e}"));
    let report = check_linearizable(&history, &LinearOptions::new(ModelKind::MultiRegister))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.partitions, 2);
    assert_eq!(
        report.failure.expect("torn read").key.as_deref(),
        Some("x,y")
    );
}
