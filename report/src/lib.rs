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
//!   linearizable prefix and the op that could not be placed.
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
