//! HTML reports of a run folder (DESIGN.md §6), self-contained (inline SVG, CSS and JS,
//! no network fetch), every text escaped (maud):
//!
//! - `assets` (private): the pages' scripts and stylesheets, files under `report/assets/`
//!   compiled in and inlined into each page.
//! - [`run`]: what a run folder holds (`test.json`, `history.jsonl`, `results.json`,
//!   `stats.json`, `expectation.json`, `nodes/<n>/`), loaded once.
//! - [`plots`]: SVG latency and throughput over time, fault periods shaded in their
//!   package's colour and labelled.
//! - [`page`]: `report.html`: verdict, options and seed, the reproducing command,
//!   anomalies with links into the timeline, plots, partitions, node logs.
//! - [`timeline`]: `timeline.html`: one column per process, one bar per op, windowed so
//!   that a million ops stay responsive; each op addressable as `#i<index>`.
//! - [`linear`]: a linearizability failure drawn: the failing key's ops, the longest
//!   linearizable prefix and the op that could not be placed; `zones`: one the zone
//!   check found, as the two conflicting clusters (or the read) and their zones.
//! - [`index`]: the store's index page (`harness serve`): every run, newest first.
//! - [`nightly`]: what `harness nightly` writes into `store/nightly/<time>/`: the night's
//!   runs as data (`summary.json`), each compared by key with the night before (new
//!   failure, still failing, unknown, fixed, passing); `summary.html` with the night's
//!   verdict, new failures first, the anomaly kinds and, for `--detect`, the time random
//!   faults took to find each bug switch; and `junit.xml` for CI systems.

mod assets;
pub mod index;
pub mod linear;
pub mod nightly;
pub mod page;
pub mod plots;
pub mod run;
pub mod timeline;
mod zones;

use std::path::{Path, PathBuf};

/// Percent-encodes `text` for a URL path or fragment: everything but unreserved
/// characters and `/`, so no name can become a scheme, query or fragment.
pub(crate) fn percent_encode(text: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                out.push(byte as char)
            }
            _ => {
                let _ = write!(out, "%{byte:02X}");
            }
        }
    }
    out
}

/// Why a report could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error(transparent)]
    History(#[from] history::HistoryError),
}

/// The files written for a run.
#[derive(Debug, Clone)]
pub struct Written {
    pub report: PathBuf,
    pub timeline: PathBuf,
    /// Bytes of both files together.
    pub bytes: u64,
}

/// Writes `report.html` and `timeline.html` into `run_dir` from what it holds.
pub fn write_run_reports(run_dir: &Path) -> Result<Written, ReportError> {
    let data = run::RunData::load(run_dir)?;
    let report = run_dir.join("report.html");
    let timeline = run_dir.join("timeline.html");
    // The two pages side by side: on a big history each takes seconds.
    let (page, timeline_bytes) = std::thread::scope(|scope| {
        let timeline_job = scope.spawn(|| timeline::write(&data.history, &timeline));
        let page = page::render(&data);
        let timeline_bytes = timeline_job.join().unwrap_or_else(|_| {
            Err(ReportError::Invalid {
                path: timeline.clone(),
                reason: "writing the timeline panicked".into(),
            })
        });
        (page, timeline_bytes)
    });
    write(&report, page.as_bytes())?;
    let timeline_bytes = timeline_bytes?;
    Ok(Written {
        report,
        timeline,
        bytes: page.len() as u64 + timeline_bytes,
    })
}

/// Writes `bytes` to `path`, naming the path on error.
pub fn write(path: &Path, bytes: &[u8]) -> Result<(), ReportError> {
    std::fs::write(path, bytes).map_err(|source| ReportError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Run-folder files for the tests, in the types the harness writes.
#[cfg(test)]
pub(crate) mod testing {
    use spec::{
        BackendSpec, BrokerSettings, Expectation, Mode, NemesisSpec, Plan, ScenarioInfo,
        ScenarioPlan, TestRecord, TestSpec, WorkloadPlan,
    };

    fn record(spec: TestSpec, command: &str, title: Option<&str>) -> String {
        let record = TestRecord {
            spec,
            command: command.to_string(),
            broker_bin: "broker".into(),
            topic: "jepsen".into(),
            started: "2026-01-01T00:00:00+00:00".into(),
            harness_version: "0.1.0".into(),
            scenario: title.map(|title| ScenarioInfo {
                name: "scenario".into(),
                title: title.into(),
                jira: None,
                file: "scenario.toml".into(),
                nodes: 3,
                node_settings: Default::default(),
                assignment: Vec::new(),
            }),
        };
        serde_json::to_string(&record).expect("a record serializes")
    }

    /// `test.json` of a log test with kills.
    pub fn workload_record(name: &str, seed: u64, command: &str, title: Option<&str>) -> String {
        let spec = TestSpec {
            name: name.into(),
            store: "store".into(),
            seed,
            backend: BackendSpec::Netns,
            broker_bin: None,
            brokers: BrokerSettings::default(),
            plan: Plan::Workload(WorkloadPlan {
                nodes: 3,
                workload: workloads::WorkloadKind::Log,
                nemesis: NemesisSpec {
                    packages: vec![nemesis::PackageKind::Kill],
                    ..NemesisSpec::default()
                },
                time_limit: std::time::Duration::from_secs(10),
                concurrency: 2,
                rate: 10.0,
                partitions: 1,
                replication_factor: 3,
                shape: Default::default(),
            }),
        };
        record(spec, command, title)
    }

    /// `test.json` of a scenario played with its bug switch on.
    pub fn scenario_record(name: &str, scenario: &str, title: &str) -> String {
        let spec = TestSpec {
            name: name.into(),
            store: "store".into(),
            seed: 0,
            backend: BackendSpec::Netns,
            broker_bin: None,
            brokers: BrokerSettings::default(),
            plan: Plan::Scenario(ScenarioPlan {
                scenario: scenario.into(),
                scenarios_dir: None,
                mode: Mode::Buggy,
            }),
        };
        record(spec, "harness repro", Some(title))
    }

    /// `expectation.json` of a buggy-mode play.
    pub fn expectation(met: bool, reason: &str) -> String {
        let expectation = Expectation {
            scenario: "scenario".into(),
            mode: Mode::Buggy,
            verdict: Some(checkers::Verdict::Invalid),
            anomalies: Default::default(),
            met,
            reason: reason.into(),
            secs: 1.0,
            run_dir: "run".into(),
            problem: None,
        };
        serde_json::to_string(&expectation).expect("an expectation serializes")
    }
}
