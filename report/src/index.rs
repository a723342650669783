//! The store's index page (`harness serve`): every run folder `<store>/<name>/<time>/`,
//! newest first, with its verdict, the anomalies that count, the seed and workload, and
//! links to its reports and files; plus the plain directory listing the server shows for
//! folders inside a run.
//!
//! [`scan`] never fails on a run folder: a run still in progress, or one that crashed
//! before `results.json` was written, shows with verdict `none` and what is missing or
//! unreadable. Only an unreadable store is an error.
//!
//! Links are relative to the store (the index is served at the store's root) and each
//! path segment is percent-encoded, so a hostile run name can neither break the markup
//! (maud escapes it) nor the URL.
use std::collections::BTreeMap;
use std::path::Path;

use checkers::Verdict;
use maud::{html, Markup, PreEscaped, DOCTYPE};
use spec::folder as files;
use spec::{Plan, RunFolder, TestRecord};

use crate::assets;
use crate::run::note;
use crate::ReportError;

/// A run's overall verdict; `None` when there is no (readable) `results.json` yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunVerdict {
    Valid,
    Invalid,
    Unknown,
    None,
}

impl RunVerdict {
    /// The word used in the page and in `data-verdict`.
    pub fn as_str(self) -> &'static str {
        match self {
            RunVerdict::Valid => "valid",
            RunVerdict::Invalid => "invalid",
            RunVerdict::Unknown => "unknown",
            RunVerdict::None => "none",
        }
    }
}

/// One run folder, as the index shows it.
#[derive(Debug, Clone)]
pub struct RunSummary {
    /// The test or scenario name (`<name>` folder).
    pub name: String,
    /// The `<time>` folder's name (`%Y%m%dT%H%M%S`, maybe with a `-n` suffix).
    pub time: String,
    /// `test.json`'s `started`, when there.
    pub started: Option<String>,
    /// `<name>/<time>`, relative to the store.
    pub path: String,
    pub verdict: RunVerdict,
    /// Anomalies that count against validity, by kind, over all checkers.
    pub anomalies: BTreeMap<String, u64>,
    pub seed: Option<u64>,
    /// `test.json`'s `workload`, or `<scenario> (<mode>)` for a scenario run.
    pub workload: Option<String>,
    /// `test.json`'s `nemesis` (harness test runs).
    pub nemesis: Option<String>,
    /// `test.json`'s `title` (scenario runs).
    pub title: Option<String>,
    /// The command that runs it again.
    pub command: Option<String>,
    /// `expectation.json`'s `met` (scenario runs).
    pub expectation_met: Option<bool>,
    pub has_report: bool,
    pub has_timeline: bool,
    pub has_history: bool,
    pub has_results: bool,
    /// What is missing or unreadable (a run in progress or crashed, a damaged file).
    pub problems: Vec<String>,
}

/// Every run folder of `store`, newest first. Skips `latest` links (and any other
/// symlink), plain files, and folders holding neither `test.json` nor `history.jsonl`.
pub fn scan(store: &Path) -> Result<Vec<RunSummary>, ReportError> {
    let io = |source| ReportError::Io {
        path: store.to_path_buf(),
        source,
    };
    let mut runs = Vec::new();
    for name_entry in std::fs::read_dir(store).map_err(io)? {
        let Some((name, name_dir)) = real_dir(name_entry) else {
            continue;
        };
        // A name folder that vanished or cannot be read is just not listed.
        let Ok(times) = std::fs::read_dir(&name_dir) else {
            continue;
        };
        for time_entry in times {
            let Some((time, dir)) = real_dir(time_entry) else {
                continue;
            };
            if dir.join("test.json").is_file() || dir.join("history.jsonl").is_file() {
                runs.push(summarize(&dir, &name, &time));
            }
        }
    }
    runs.sort_by(|a, b| {
        time_key(&b.time)
            .cmp(&time_key(&a.time))
            .then_with(|| a.name.cmp(&b.name))
    });
    Ok(runs)
}

/// The entry's name and path when it is a real folder (not a symlink) other than `latest`.
fn real_dir(entry: std::io::Result<std::fs::DirEntry>) -> Option<(String, std::path::PathBuf)> {
    let entry = entry.ok()?;
    let name = entry.file_name().to_string_lossy().into_owned();
    let is_dir = entry.file_type().ok()?.is_dir(); // does not follow symlinks
    (is_dir && name != "latest").then(|| (name, entry.path()))
}

/// Sorts `20261130T052541-10` after `20261130T052541-9`: the stamp, then the suffix as
/// a number.
fn time_key(time: &str) -> (&str, u64) {
    match time.split_once('-') {
        Some((stamp, n)) => match n.parse() {
            Ok(n) => (stamp, n),
            Err(_) => (time, 0),
        },
        None => (time, 0),
    }
}

/// Reads what the index shows of one run folder; never fails, records problems instead.
fn summarize(dir: &Path, name: &str, time: &str) -> RunSummary {
    let mut problems = Vec::new();
    let folder = RunFolder::open(dir);
    let test: Option<TestRecord> = folder
        .read_test()
        .unwrap_or_else(|e| note(&mut problems, e));
    let results = folder
        .read_results()
        .unwrap_or_else(|e| note(&mut problems, e));
    let expectation = folder
        .read_expectation()
        .unwrap_or_else(|e| note(&mut problems, e));
    let workload = test.as_ref().map(|t| match &t.spec.plan {
        Plan::Workload(plan) => plan.workload.to_string(),
        Plan::Scenario(plan) => format!("{} ({})", plan.scenario, plan.mode.as_str()),
    });
    let nemesis = test.as_ref().and_then(|t| match &t.spec.plan {
        Plan::Workload(plan) => Some(plan.nemesis.list()),
        Plan::Scenario(_) => None,
    });
    let has_history = folder.history().is_file();
    let has_results = folder.path(files::RESULTS).is_file();
    if test.is_none() && !folder.path(files::TEST).exists() {
        problems.push("no test.json".into());
    }
    if !has_results {
        problems.push(if has_history {
            "no results.json: still running, or stopped before checking".into()
        } else {
            "no history.jsonl nor results.json: still starting, or crashed".into()
        });
    }
    let verdict = match results.as_ref().map(|r| r.verdict) {
        Some(Verdict::Valid) => RunVerdict::Valid,
        Some(Verdict::Invalid) => RunVerdict::Invalid,
        Some(Verdict::Unknown) => RunVerdict::Unknown,
        None => RunVerdict::None,
    };
    RunSummary {
        name: name.to_string(),
        time: time.to_string(),
        started: test.as_ref().map(|t| t.started.clone()),
        path: format!("{name}/{time}"),
        verdict,
        anomalies: results
            .as_ref()
            .map(checkers::Results::counted_anomalies)
            .unwrap_or_default(),
        seed: test.as_ref().map(|t| t.spec.seed),
        workload,
        nemesis,
        title: test.as_ref().and_then(|t| t.title().map(str::to_string)),
        command: test.as_ref().map(|t| t.command.clone()),
        expectation_met: expectation.as_ref().map(|e| e.met),
        has_report: folder.path(files::REPORT).is_file(),
        has_timeline: folder.path(files::TIMELINE).is_file(),
        has_history,
        has_results,
        problems,
    }
}

/// Percent-encodes each segment of a `/`-separated relative path for use in an href
/// (everything but unreserved characters), so no name can become a scheme, query or
/// fragment.
pub fn href(path: &str) -> String {
    format!("./{}", crate::percent_encode(path))
}

/// `20261130T052541` as `2026-11-30 05:25:41` (the suffix kept); other names as they are.
fn display_time(time: &str) -> String {
    let (stamp, rest) = time.split_at(time.find('-').unwrap_or(time.len()));
    let b = stamp.as_bytes();
    if b.len() == 15 && b[8] == b'T' && stamp.is_ascii() {
        let digits = |r: std::ops::Range<usize>| &stamp[r];
        format!(
            "{}-{}-{} {}:{}:{}{rest}",
            digits(0..4),
            digits(4..6),
            digits(6..8),
            digits(9..11),
            digits(11..13),
            digits(13..15)
        )
    } else {
        time.to_string()
    }
}

/// The index page of `store` listing `runs` (as [`scan`] returns them, newest first).
pub fn render(store: &Path, runs: &[RunSummary]) -> String {
    let tally = |v: RunVerdict| runs.iter().filter(|r| r.verdict == v).count();
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "Runs in " (store.display()) }
                style { (PreEscaped(assets::INDEX_CSS)) }
            }
            body {
                h1 { "Runs in " code { (store.display()) } }
                p.summary {
                    (runs.len()) " runs: "
                    span.valid { (tally(RunVerdict::Valid)) " valid" } ", "
                    span.invalid { (tally(RunVerdict::Invalid)) " invalid" } ", "
                    span.unknown { (tally(RunVerdict::Unknown)) " unknown" } ", "
                    span.none { (tally(RunVerdict::None)) " without results" }
                }
                div.filters {
                    input #filter-text type="search" placeholder="filter: name, workload, seed, anomaly…";
                    select #filter-verdict {
                        option value="" { "any verdict" }
                        @for v in [RunVerdict::Valid, RunVerdict::Invalid, RunVerdict::Unknown, RunVerdict::None] {
                            option value=(v.as_str()) { (v.as_str()) }
                        }
                    }
                    span { span #shown { (runs.len()) } " shown" }
                }
                table #runs {
                    thead {
                        tr { th { "time" } th { "name" } th { "workload" } th { "seed" } th { "verdict" } th { "anomalies" } th { "files" } }
                    }
                    tbody {
                        @for run in runs { (row(run)) }
                    }
                }
                @if runs.is_empty() {
                    p.problem { "No run folders (" code { "<name>/<time>/" } " with test.json or history.jsonl) in this store." }
                }
                script { (PreEscaped(assets::INDEX_JS)) }
            }
        }
    };
    page.into_string()
}

/// One run's table row.
fn row(run: &RunSummary) -> Markup {
    let base = href(&run.path);
    let link = |present: bool, file: &str| {
        html! {
            @if present { a href={ (base) "/" (file) } { (file) } } @else { span title="not written" { (file) } }
        }
    };
    html! {
        tr data-verdict=(run.verdict.as_str()) {
            td title=[run.started.as_deref()] { (display_time(&run.time)) }
            td title=[run.command.as_deref()] {
                a href={ (base) "/" } { (run.name) }
                @if let Some(title) = &run.title { div.sub { (title) } }
            }
            td {
                (run.workload.as_deref().unwrap_or("?"))
                @if let Some(nemesis) = &run.nemesis { div.sub { "nemesis " (nemesis) } }
            }
            td { @if let Some(seed) = run.seed { code { (seed) } } }
            td {
                span class={ "verdict " (run.verdict.as_str()) } { (run.verdict.as_str()) }
                @match run.expectation_met {
                    Some(true) => div.sub { "expectation met" },
                    Some(false) => div.sub.invalid { "expectation NOT met" },
                    None => {},
                }
                @for problem in &run.problems { div.problem { (problem) } }
            }
            td {
                @for (i, (kind, count)) in run.anomalies.iter().enumerate() {
                    @if i > 0 { ", " }
                    span.anomaly { (kind) " ×" (count) }
                }
            }
            td.links {
                (link(run.has_report, "report.html"))
                (link(run.has_timeline, "timeline.html"))
                (link(run.has_history, "history.jsonl"))
                (link(run.has_results, "results.json"))
                a href={ (base) "/" } { "folder" }
            }
        }
    }
}

/// One entry of a directory listing.
#[derive(Debug, Clone)]
pub struct ListingEntry {
    pub name: String,
    pub is_dir: bool,
    /// Size in bytes of a file.
    pub size: Option<u64>,
}

/// A plain listing of the folder `path` (relative to the store, shown as its title) with
/// links relative to it (the URL must end in `/`), and a link back to the index.
pub fn render_listing(path: &str, entries: &[ListingEntry]) -> String {
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "/" (path) }
                style { (PreEscaped(assets::INDEX_CSS)) }
            }
            body {
                h1 { code { "/" (path) } }
                p { a href="/" { "all runs" } @if !path.is_empty() { " · " a href="../" { "parent folder" } } }
                table #listing {
                    thead { tr { th { "name" } th { "size" } } }
                    tbody {
                        @for entry in entries {
                            tr {
                                @if entry.is_dir {
                                    td { a href={ (href(&entry.name)) "/" } { (entry.name) "/" } }
                                } @else {
                                    td { a href=(href(&entry.name)) { (entry.name) } }
                                }
                                td { @if let Some(size) = entry.size { (size) } }
                            }
                        }
                    }
                }
            }
        }
    };
    page.into_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A fresh folder under the system temp folder, removed on drop.
    struct TempStore(PathBuf);

    impl TempStore {
        fn new(tag: &str) -> TempStore {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let dir = std::env::temp_dir()
                .join(format!("report-index-{tag}-{}-{nanos}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            TempStore(dir)
        }

        fn file(&self, rel: &str, content: &str) {
            let path = self.0.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }
    }

    impl Drop for TempStore {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const HOSTILE: &str = "<img src=x onerror=alert(1)>&\"'#?";

    fn sample_store() -> TempStore {
        let store = TempStore::new("sample");
        store.file(
            "good/20260101T000000/test.json",
            &crate::testing::workload_record("good", 42, "harness test --seed 42", None),
        );
        store.file("good/20260101T000000/history.jsonl", "");
        store.file(
            "good/20260101T000000/results.json",
            r#"{"verdict":"valid","checkers":{"log":{"verdict":"valid","report":{"anomalies":[]}}}}"#,
        );
        store.file("good/20260101T000000/report.html", "<html></html>");
        store.file(
            "bad/20260102T000000/test.json",
            &crate::testing::scenario_record("bad", "KAFKA-1561", "lost <writes>"),
        );
        store.file("bad/20260102T000000/history.jsonl", "");
        store.file(
            "bad/20260102T000000/results.json",
            r#"{"verdict":"invalid","checkers":{
                "log":{"verdict":"invalid","report":{"anomalies":[
                    {"kind":"lost-write","counts_against_validity":true},
                    {"kind":"lost-write","counts_against_validity":true},
                    {"kind":"duplicate","counts_against_validity":false}]}},
                "availability":{"verdict":"invalid","report":{"anomalies":[
                    {"kind":"unavailable-after-heal"}]}}}}"#,
        );
        store.file(
            "bad/20260102T000000/expectation.json",
            &crate::testing::expectation(true, "caught"),
        );
        // Crashed: damaged test.json, a history, no results.
        store.file("broken/20260103T000000/test.json", "{\"name\": ");
        store.file("broken/20260103T000000/history.jsonl", "{}\n");
        // Ordering of suffixes: -10 is newer than -9.
        store.file("multi/20251230T000000-9/test.json", "{}");
        store.file("multi/20251230T000000-10/test.json", "{}");
        store.file(&format!("{HOSTILE}/20251231T000000/test.json"), "{}");
        // Not runs: a folder with neither file, a store-level file, `latest` links.
        store.file("good/notes/readme.txt", "x");
        store.file("repro.json", "{}");
        let run = store.0.join("good/20260101T000000");
        std::os::unix::fs::symlink(&run, store.0.join("latest")).unwrap();
        std::os::unix::fs::symlink(&run, store.0.join("good/latest")).unwrap();
        store
    }

    #[test]
    fn scan_orders_newest_first_and_reads_verdicts_and_counts() {
        let store = sample_store();
        let runs = scan(&store.0).unwrap();
        let order: Vec<_> = runs.iter().map(|r| r.path.as_str()).collect();
        let hostile = format!("{HOSTILE}/20251231T000000");
        assert_eq!(
            order,
            [
                "broken/20260103T000000",
                "bad/20260102T000000",
                "good/20260101T000000",
                hostile.as_str(),
                "multi/20251230T000000-10",
                "multi/20251230T000000-9",
            ]
        );
        let [broken, bad, good, ..] = &runs[..] else {
            panic!("too few runs");
        };
        assert_eq!(good.verdict, RunVerdict::Valid);
        assert_eq!(good.seed, Some(42));
        assert_eq!(good.workload.as_deref(), Some("log"));
        assert!(good.anomalies.is_empty());
        assert!(good.has_report && !good.has_timeline && good.has_results);
        assert!(good.problems.is_empty(), "{:?}", good.problems);

        assert_eq!(bad.verdict, RunVerdict::Invalid);
        assert_eq!(bad.workload.as_deref(), Some("KAFKA-1561 (buggy)"));
        assert_eq!(bad.expectation_met, Some(true));
        let counts: Vec<_> = bad
            .anomalies
            .iter()
            .map(|(k, n)| (k.as_str(), *n))
            .collect();
        assert_eq!(counts, [("lost-write", 2), ("unavailable-after-heal", 1)]);

        assert_eq!(broken.verdict, RunVerdict::None);
        assert!(broken.has_history && !broken.has_results);
        assert!(broken
            .problems
            .iter()
            .any(|p| p.starts_with("test.json is not a valid test record")));
        assert!(broken
            .problems
            .iter()
            .any(|p| p.starts_with("no results.json")));
    }

    #[test]
    fn scan_of_a_missing_store_is_an_error() {
        let store = TempStore::new("missing");
        assert!(matches!(
            scan(&store.0.join("nope")),
            Err(ReportError::Io { .. })
        ));
    }

    #[test]
    fn render_escapes_names_and_links_every_run() {
        let store = sample_store();
        let runs = scan(&store.0).unwrap();
        let page = render(&store.0, &runs);
        assert!(page.contains(r#"<table id="runs">"#));
        assert!(!page.contains("<img"), "hostile name not escaped");
        assert!(page.contains("&lt;img src=x onerror=alert(1)&gt;&amp;&quot;'#?"));
        assert!(page.contains(
            r#"href="./%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E%26%22%27%23%3F/20251231T000000/""#
        ));
        assert!(page.contains("lost &lt;writes&gt;"));
        assert_eq!(page.matches("<tr data-verdict=").count(), 6);
        assert!(page.contains(r#"<tr data-verdict="invalid">"#));
        assert!(page.contains(r#"<span class="verdict valid">valid</span>"#));
        assert!(page.contains(
            r#"<span class="anomaly">lost-write ×2</span>, <span class="anomaly">unavailable-after-heal ×1</span>"#
        ));
        assert!(page.contains(r#"<a href="./good/20260101T000000/report.html">report.html</a>"#));
        assert!(page.contains(r#"<span title="not written">timeline.html</span>"#));
        assert!(page.contains("2026-01-03 00:00:00"));
        assert!(page.contains("document.body.dataset.scriptErrors"));
        assert!(!page.contains("http://") && !page.contains("https://"));
    }

    #[test]
    fn listing_escapes_and_encodes_names() {
        let page = render_listing(
            "a/b",
            &[
                ListingEntry {
                    name: "n1".into(),
                    is_dir: true,
                    size: None,
                },
                ListingEntry {
                    name: "<b>.log".into(),
                    is_dir: false,
                    size: Some(7),
                },
            ],
        );
        assert!(page.contains(r#"<a href="./n1/">n1/</a>"#));
        assert!(page.contains(r#"<a href="./%3Cb%3E.log">&lt;b&gt;.log</a>"#));
        assert!(page.contains(r#"<a href="../">"#));
        assert!(!page.contains("<b>"));
    }

    #[test]
    fn times_display_readably() {
        assert_eq!(display_time("20261130T052541"), "2026-11-30 05:25:41");
        assert_eq!(display_time("20261130T052541-2"), "2026-11-30 05:25:41-2");
        assert_eq!(display_time("odd"), "odd");
        assert_eq!(display_time("ééééééé"), "ééééééé");
    }
}
