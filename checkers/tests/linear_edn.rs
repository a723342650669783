//! Our hand-written Jepsen EDN histories (tests/data/*.edn) get the verdicts their
//! comments claim. Each file states its claim in header comments, which this test reads:
//! `; model: <name>`, optionally `; init: <json>`, `; expect: valid|invalid`, and for
//! invalid ones `; unplaced: <index>` (the op the checker must report as unplaceable).

use checkers::linear::{check_linearizable, LinearOptions, ModelKind};
use checkers::Verdict;
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
    let report = check_linearizable(&history, &LinearOptions::new(ModelKind::Register))
        .unwrap_or_else(|e| panic!("{e}"));
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
    // Ops that were never placed have an empty partial linearization; the others the
    // longest they were part of, which contains them.
    for partial in &failure.partial_linearizations {
        assert!(
            partial.linearization.is_empty() || partial.linearization.contains(&partial.op),
            "{partial:?}"
        );
    }
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
