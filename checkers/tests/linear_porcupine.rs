//! Porcupine's etcd and kv histories get the verdicts Porcupine's own tests assert for
//! them (the fixtures' EXPECTED.tsv).

use checkers::linear::{check_linearizable, LinearOptions, ModelKind};
use checkers::Verdict;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Porcupine's fixtures in `../shared/fixtures` beside the checkout; fails the calling
/// test (named `needs_fixtures__`) when they are absent.
fn fixtures() -> PathBuf {
    let dir = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/fixtures/porcupine"
    ));
    assert!(
        dir.join("EXPECTED.tsv").is_file(),
        "needs ../shared/fixtures beside the checkout (not found: {}): put the project's `shared` folder (with fixtures/porcupine) beside the checkout; \
             or run `scripts/test --skip-missing`, which does not run the tests whose \
             prerequisites are missing and reports them as skipped",
        dir.join("EXPECTED.tsv").display()
    );
    dir.to_path_buf()
}

struct Expected {
    file: String,
    verdict: Verdict,
}

fn expected(dir: &Path) -> Vec<Expected> {
    let text = std::fs::read_to_string(dir.join("EXPECTED.tsv")).expect("EXPECTED.tsv is readable");
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .filter_map(|line| {
            let mut fields = line.split('\t');
            let file = fields.next()?.to_string();
            let verdict = match fields.next()? {
                "linearizable" => Verdict::Valid,
                "not-linearizable" => Verdict::Invalid,
                // etcd_095.log is empty: Porcupine asserts nothing for it.
                "none" => return None,
                other => panic!("EXPECTED.tsv: unknown verdict {other:?} for {file}"),
            };
            Some(Expected { file, verdict })
        })
        .collect()
}

fn check_all(prefix: &str, model: ModelKind, threads: usize) -> usize {
    let dir = fixtures();
    let mut wrong = Vec::new();
    let mut checked = 0;
    let mut slowest = (0.0f64, String::new());
    let started = Instant::now();
    for case in expected(&dir).iter().filter(|c| c.file.starts_with(prefix)) {
        let path = dir.join(&case.file);
        let history = match model {
            ModelKind::Etcd => history::porcupine::read_etcd_log(&path),
            _ => history::porcupine::read_kv(&path),
        }
        .unwrap_or_else(|e| panic!("{}: {e}", case.file));
        let mut options = LinearOptions::new(model);
        options.threads = threads;
        let one = Instant::now();
        let report =
            check_linearizable(&history, &options).unwrap_or_else(|e| panic!("{}: {e}", case.file));
        let seconds = one.elapsed().as_secs_f64();
        if seconds > slowest.0 {
            slowest = (seconds, case.file.clone());
        }
        if report.verdict != case.verdict {
            wrong.push(format!(
                "{}: expected {}, got {} ({:?})",
                case.file, case.verdict, report.verdict, report.reason
            ));
        }
        if report.verdict == Verdict::Invalid {
            let failure = report
                .failure
                .as_ref()
                .expect("an invalid report names its failure");
            let unplaced = history
                .ops
                .iter()
                .position(|op| op.index == failure.unplaced)
                .expect("the unplaced op is in the history");
            assert!(
                !failure.longest_prefix.contains(&failure.unplaced),
                "{}: the unplaced op is not in the prefix",
                case.file
            );
            assert!(
                failure
                    .unplaced_description
                    .contains(&history.locate(unplaced).to_string()),
                "{}: {}",
                case.file,
                failure.unplaced_description
            );
        }
        checked += 1;
    }
    println!(
        "{checked} {prefix} histories in {:.3}s; slowest {} in {:.3}s",
        started.elapsed().as_secs_f64(),
        slowest.1,
        slowest.0
    );
    assert!(wrong.is_empty(), "wrong verdicts:\n{}", wrong.join("\n"));
    checked
}

#[test]
#[allow(non_snake_case)]
fn needs_fixtures__linear_etcd_histories_get_porcupines_verdicts() {
    let checked = check_all("jepsen/etcd_", ModelKind::Etcd, 2);
    assert_eq!(checked, 102, "checked {checked} etcd histories");
}

#[test]
#[allow(non_snake_case)]
fn needs_fixtures__linear_kv_histories_get_porcupines_verdicts() {
    let checked = check_all("kv/", ModelKind::Kv, 2);
    assert_eq!(checked, 6, "checked {checked} kv histories");
}
