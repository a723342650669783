//! The nightly summary (`harness nightly`): what every run of a night came to, compared
//! with the night before, as `summary.json` (the [`NightlySummary`], serde),
//! `summary.html` ([`render_html`]) and `junit.xml` ([`junit_xml`]).
//!
//! The data types are the contract with `harness/src/nightly/`, which runs the night and
//! fills them; this module only compares and renders, and does no I/O except asking
//! whether a run folder holds its `report.html` and `timeline.html`.
//!
//! Stable hooks of `summary.html` for tests: `#verdict[data-verdict]` (`fail` or `pass`),
//! `span.count[data-count]`, `#comparison`, one `tr#run-<id>[data-change][data-status]`
//! per run in [`listing_order`], `#anomalies tr[data-kind][data-new]`,
//! `#detect tr[data-bug]`, and `body[data-script-errors]` ("0" once loaded without a
//! script error, as in the other pages).

use maud::{html, Markup, PreEscaped, DOCTYPE};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};

use crate::assets;

/// Where a run came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunKind {
    /// A random cell of the matrix (workload × nemesis × cluster size × ...).
    Matrix,
    /// A scenario of `harness repro --all`, in one mode.
    Repro,
}

impl RunKind {
    /// The word used in the page and in `junit.xml` (the test suite's name).
    pub fn as_str(self) -> &'static str {
        match self {
            RunKind::Matrix => "matrix",
            RunKind::Repro => "repro",
        }
    }
}

/// What a run came to, for the night's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Matrix: invalid. Repro: the expectation did not hold.
    Fail,
    /// The harness or the cluster failed: no verdict.
    Error,
    /// Matrix: the checkers could not decide within their bounds.
    Unknown,
    /// Matrix: valid. Repro: the expectation held.
    Pass,
}

impl Status {
    /// The word used in the page (`data-status`), as serde spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Fail => "fail",
            Status::Error => "error",
            Status::Unknown => "unknown",
            Status::Pass => "pass",
        }
    }

    /// Whether the run counts against the night: it failed or erred.
    pub fn is_failing(self) -> bool {
        matches!(self, Status::Fail | Status::Error)
    }
}

/// One run of the night.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NightlyRun {
    /// Unique within the night, in order: `m001`, `m002`, ... for matrix runs,
    /// `repro-KAFKA-7128-buggy` for repro runs.
    pub id: String,
    pub kind: RunKind,
    /// What is compared across nights: the matrix cell (`log nemesis=kill,partition
    /// nodes=5 rf=3 min-isr=2`) or the scenario and mode (`KAFKA-7128 buggy`).
    pub key: String,
    /// The run's options in a line, for people.
    pub description: String,
    pub seed: Option<u64>,
    pub status: Status,
    /// The checkers' composed verdict (`valid`, `invalid`, `unknown`), when there is one.
    pub verdict: Option<String>,
    /// Anomaly kinds that count against validity → how many.
    pub anomalies: BTreeMap<String, u64>,
    /// Repro runs: why the expectation held or did not.
    pub expectation: Option<String>,
    /// The command that runs it again.
    pub command: String,
    /// The run folder (absolute), when one was made.
    pub run_dir: Option<PathBuf>,
    pub secs: f64,
    /// What went wrong when the status is `error`.
    pub error: Option<String>,
    /// A failing matrix run shrunk into a scenario file (`--shrink-budget`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shrunk: Option<Shrunk>,
}

/// A failing run shrunk into a scenario file (`harness shrink`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Shrunk {
    /// The scenario file written (reproduces nothing when `reproduced` is 0: the run as
    /// lifted).
    pub scenario: PathBuf,
    /// The shrink's folder (`shrink.md`: every candidate and its plays).
    pub folder: PathBuf,
    pub faults_before: usize,
    pub faults_after: usize,
    /// Plays of the written file that reproduced the failure, of `tries`.
    pub reproduced: u32,
    pub tries: u32,
    pub secs: f64,
}

impl Shrunk {
    /// A line for people: `3 of 14 faults, reproduces 5/5: <file>`.
    pub fn line(&self) -> String {
        if self.reproduced == 0 {
            format!(
                "the lifted run ({} faults) did not reproduce in {} plays: {}",
                self.faults_before,
                self.tries,
                self.scenario.display()
            )
        } else {
            format!(
                "{} of {} faults, reproduces {}/{}: {}",
                self.faults_after,
                self.faults_before,
                self.reproduced,
                self.tries,
                self.scenario.display()
            )
        }
    }
}

/// `--detect`: how long random faults took to find one bug switch, per seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DetectSeed {
    pub seed: u64,
    /// Whether a run the checkers judged invalid ended within the seed's limit.
    pub found: bool,
    /// Whether the run that found it ended only after the seed's limit (it began within
    /// it): not counted as found, though `run_id` and the rest name it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub late: bool,
    /// Seconds from the start of this seed's search to the verdict of the first run the
    /// checkers judged invalid (when found), else the seconds searched.
    pub secs: f64,
    /// Runs made (including the one that found it).
    pub runs: usize,
    /// The id of the run that found it.
    pub run_id: Option<String>,
    /// Its anomaly kinds.
    pub anomalies: Vec<String>,
    /// The seed of the run that found it (the seed above is the search's).
    #[serde(default)]
    pub run_seed: Option<u64>,
    /// The faults the nemesis made in that run: its operations by `f`, with counts
    /// (`kill ×3`, `start-slow ×2`, ...).
    #[serde(default)]
    pub faults: Vec<String>,
    /// The command that runs that test again.
    #[serde(default)]
    pub command: Option<String>,
}

/// `--detect`: one bug switch over every seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DetectResult {
    /// `KAFKA-7128`, ...
    pub bug: String,
    pub seeds: Vec<DetectSeed>,
    /// The median time to detect over the seeds, counting a seed that did not find it as
    /// "more than its search time"; `None` when fewer than half the seeds found it.
    pub median_secs: Option<f64>,
}

/// A whole night.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NightlySummary {
    /// `nightly` or `detect`.
    pub mode: String,
    /// RFC 3339.
    pub started: String,
    pub finished: Option<String>,
    pub budget_secs: f64,
    pub seed: u64,
    /// The command line of the night.
    pub command: String,
    /// The broker binary that ran.
    pub broker_bin: String,
    pub runs: Vec<NightlyRun>,
    /// `--detect` only.
    pub detect: Vec<DetectResult>,
}

/// How a run compares with the previous night.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Change {
    /// Fails (or errs) now; its key passed, or was not run, the night before.
    NewFailure,
    /// Failed the night before too.
    StillFailing,
    /// Unknown now.
    Unknown,
    /// Passes now; failed the night before.
    Fixed,
    /// Passes now, as before (or no previous night ran its key).
    Passing,
}

impl Change {
    /// Every change, in the order the summary lists them.
    pub const LISTING: [Change; 5] = [
        Change::NewFailure,
        Change::StillFailing,
        Change::Unknown,
        Change::Fixed,
        Change::Passing,
    ];

    /// The token used in `data-change` and as a CSS class, as serde spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Change::NewFailure => "new-failure",
            Change::StillFailing => "still-failing",
            Change::Unknown => "unknown",
            Change::Fixed => "fixed",
            Change::Passing => "passing",
        }
    }

    /// The words on the badge.
    pub fn label(self) -> &'static str {
        match self {
            Change::NewFailure => "new failure",
            Change::StillFailing => "still failing",
            Change::Unknown => "unknown",
            Change::Fixed => "fixed",
            Change::Passing => "passing",
        }
    }

    /// The position of the change's group in the listing.
    fn rank(self) -> usize {
        Change::LISTING
            .iter()
            .position(|c| *c == self)
            .unwrap_or(Change::LISTING.len())
    }

    /// What a run's status comes to when nothing is known of the night before.
    fn without_history(status: Status) -> Change {
        match status {
            Status::Fail | Status::Error => Change::NewFailure,
            Status::Unknown => Change::Unknown,
            Status::Pass => Change::Passing,
        }
    }
}

/// The median time to detect past which the `detect` suite of `junit.xml` fails a bug,
/// and the summary page marks it slow: ten minutes.
pub const DETECT_LIMIT_SECS: f64 = 600.0;

/// The median of `seeds` as [`DetectResult::median_secs`] defines it.
///
/// Seeds that found the bug are ordered by their seconds; seeds that did not come after
/// all of them (their time to detect is unbounded, whatever they searched). The median is
/// the middle seed's seconds, or the mean of the two middle ones for an even count. It is
/// `None` when a median seed is one that did not find the bug: fewer than half found it,
/// or (even count) exactly half did, so the upper middle time is unbounded too. `None`
/// for no seeds.
pub fn detect_median(seeds: &[DetectSeed]) -> Option<f64> {
    let mut found: Vec<f64> = seeds.iter().filter(|s| s.found).map(|s| s.secs).collect();
    found.sort_by(f64::total_cmp);
    let n = seeds.len();
    if n == 0 {
        return None;
    }
    // Indices into the full ordering (found first); an index past `found` is a not-found
    // seed.
    let (low, high) = if n % 2 == 1 {
        (n / 2, n / 2)
    } else {
        (n / 2 - 1, n / 2)
    };
    let low = *found.get(low)?;
    let high = *found.get(high)?;
    Some((low + high) / 2.0)
}

/// Compares every run of `current` with `previous` (by key; when a key ran several
/// times, the night failed it if any of its runs failed). One entry per run of
/// `current`, in its order.
pub fn compare(previous: Option<&NightlySummary>, current: &NightlySummary) -> Vec<Change> {
    let mut failed_before: HashMap<&str, bool> = HashMap::new();
    for run in previous.into_iter().flat_map(|p| &p.runs) {
        *failed_before.entry(run.key.as_str()).or_insert(false) |= run.status.is_failing();
    }
    current
        .runs
        .iter()
        .map(|run| {
            let failed = failed_before.get(run.key.as_str()).copied() == Some(true);
            match (run.status, failed) {
                (Status::Fail | Status::Error, true) => Change::StillFailing,
                (Status::Fail | Status::Error, false) => Change::NewFailure,
                (Status::Unknown, _) => Change::Unknown,
                (Status::Pass, true) => Change::Fixed,
                (Status::Pass, false) => Change::Passing,
            }
        })
        .collect()
}

/// The run indices of `current` in the order the summary lists them: new failures
/// first, then still failing, unknown, fixed, passing; within a group, in run order.
pub fn listing_order(changes: &[Change]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..changes.len()).collect();
    // Stable: run order within a group.
    order.sort_by_key(|&i| changes[i].rank());
    order
}

/// One change per run of `summary`: `changes` as given, runs past its end compared with
/// no previous night (a caller handing fewer changes than runs still gets every run).
fn changes_per_run(summary: &NightlySummary, changes: &[Change]) -> Vec<Change> {
    summary
        .runs
        .iter()
        .enumerate()
        .map(|(i, run)| {
            changes
                .get(i)
                .copied()
                .unwrap_or_else(|| Change::without_history(run.status))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Formatting shared by the page and junit.xml.

/// `secs` as `mm:ss` (minutes unbounded), `?` when not a time.
fn mm_ss(secs: f64) -> String {
    if !secs.is_finite() || secs < 0.0 {
        return "?".into();
    }
    let total = secs.round() as u64;
    format!("{:02}:{:02}", total / 60, total % 60)
}

/// A run's duration: `12.3 s` under a minute, else `mm:ss`.
fn duration(secs: f64) -> String {
    if secs.is_finite() && (0.0..60.0).contains(&secs) {
        format!("{secs:.1} s")
    } else {
        mm_ss(secs)
    }
}

/// The night's budget as `h:mm:ss`.
fn h_mm_ss(secs: f64) -> String {
    if !secs.is_finite() || secs < 0.0 {
        return "?".into();
    }
    let total = secs.round() as u64;
    format!("{}:{:02}:{:02}", total / 3600, total / 60 % 60, total % 60)
}

/// `lost-write×3, duplicate×1`; empty for none.
fn anomaly_list(anomalies: &BTreeMap<String, u64>) -> String {
    anomalies
        .iter()
        .map(|(kind, count)| format!("{kind}×{count}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How many of a bug's seeds found it.
fn found_count(result: &DetectResult) -> usize {
    result.seeds.iter().filter(|s| s.found).count()
}

/// Why a bug's detection counts as a failure (not found in half the seeds, or a median
/// over [`DETECT_LIMIT_SECS`]), if it does.
fn detect_problem(result: &DetectResult) -> Option<String> {
    let (found, n) = (found_count(result), result.seeds.len());
    match result.median_secs {
        None => Some(format!(
            "not found in half the seeds: found in {found} of {n}"
        )),
        Some(median) if median > DETECT_LIMIT_SECS => Some(format!(
            "median time to detect {} exceeds {} (found in {found} of {n})",
            mm_ss(median),
            mm_ss(DETECT_LIMIT_SECS)
        )),
        Some(_) => None,
    }
}

// ---------------------------------------------------------------------------------------
// Links.

/// The components of `path` with `.` dropped and `..` applied (lexically: the page is
/// read later, possibly elsewhere, so the file system is not asked).
fn normalized(path: &Path) -> Vec<Component<'_>> {
    let mut parts: Vec<Component> = Vec::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                if matches!(parts.last(), Some(Component::Normal(_))) {
                    parts.pop();
                }
            }
            other => parts.push(other),
        }
    }
    parts
}

/// The href of the folder `target` (ending in `/`) from a page in the folder `dir`:
/// relative through their common prefix when both are absolute and share a root;
/// otherwise `file://` and `target`'s absolute path, or `target` as given when it is
/// relative itself.
fn folder_href(dir: &Path, target: &Path) -> String {
    let from = normalized(dir);
    let to = normalized(target);
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    if !dir.is_absolute() || !target.is_absolute() || common == 0 {
        let path = crate::percent_encode(&target.to_string_lossy());
        let path = path.trim_end_matches('/');
        return if target.is_absolute() {
            format!("file://{path}/")
        } else {
            format!("{path}/")
        };
    }
    let mut href = String::from("./");
    for _ in common..from.len() {
        href.push_str("../");
    }
    for part in &to[common..] {
        href.push_str(&crate::percent_encode(&part.as_os_str().to_string_lossy()));
        href.push('/');
    }
    href
}

/// The in-page link to a run's row.
fn row_href(id: &str) -> String {
    format!("#run-{}", crate::percent_encode(id))
}

// ---------------------------------------------------------------------------------------
// summary.html

/// `summary.html`, written into `dir` (the night's folder: links to run folders are made
/// relative to it). `previous` is the folder name of the night compared with, if any.
///
/// `changes` holds one entry per run (from [`compare`]); a run without one is shown as
/// compared with no previous night.
pub fn render_html(
    summary: &NightlySummary,
    changes: &[Change],
    previous: Option<&str>,
    dir: &Path,
) -> String {
    let changes = changes_per_run(summary, changes);
    let verdict = night_verdict(summary);
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (verdict) " · " (title(summary)) " " (summary.started) }
                style { (PreEscaped(assets::BASE_CSS)) (PreEscaped(assets::NIGHTLY_CSS)) }
            }
            body {
                script { (PreEscaped(assets::ONERROR_JS)) }
                (header(summary, &changes, previous, verdict))
                // A detection night is read for its time-to-detect table first.
                @if summary.mode == "detect" && !summary.detect.is_empty() {
                    (detect_section(summary))
                }
                (runs_section(summary, &changes, dir))
                (anomalies_section(summary, &changes))
                @if summary.mode != "detect" && !summary.detect.is_empty() {
                    (detect_section(summary))
                }
            }
        }
    }
    .into_string()
}

/// `fail` when any run failed or erred, else `pass`. A detection night (whose runs are
/// meant to fail) passes when every bug switch was found with a median within
/// [`DETECT_LIMIT_SECS`].
fn night_verdict(summary: &NightlySummary) -> &'static str {
    if summary.mode == "detect" {
        let all_found = !summary.detect.is_empty()
            && summary.detect.iter().all(|r| detect_problem(r).is_none());
        return if all_found { "pass" } else { "fail" };
    }
    if summary.runs.iter().any(|r| r.status.is_failing()) {
        "fail"
    } else {
        "pass"
    }
}

/// The page's heading by the night's mode.
fn title(summary: &NightlySummary) -> &'static str {
    if summary.mode == "detect" {
        "Nightly detection"
    } else {
        "Nightly"
    }
}

fn header(
    summary: &NightlySummary,
    changes: &[Change],
    previous: Option<&str>,
    verdict: &str,
) -> Markup {
    let with_status = |s: Status| summary.runs.iter().filter(|r| r.status == s).count();
    let new_failures = changes.iter().filter(|c| **c == Change::NewFailure).count();
    let counts = [
        ("runs", summary.runs.len(), "runs"),
        ("passed", with_status(Status::Pass), "passed"),
        ("failed", with_status(Status::Fail), "failed"),
        ("errors", with_status(Status::Error), "errors"),
        ("unknown", with_status(Status::Unknown), "unknown"),
        ("new-failures", new_failures, "new failures"),
    ];
    html! {
        h1 { (title(summary)) " " (summary.started) }
        div #verdict .verdict .(verdict) data-verdict=(verdict) {
            span.word { (verdict) }
            @for (token, count, words) in counts {
                span.count data-count=(token) { b { (count) } " " (words) }
            }
        }
        p #comparison {
            @match previous {
                Some(night) => { "Compared with the night of " code { (night) } "." }
                None => { "No previous night: every failure counts as new." }
            }
        }
        table.facts {
            tr { th { "mode" } td { (summary.mode) } }
            tr { th { "started" } td { (summary.started) } }
            tr { th { "finished" } td { (summary.finished.as_deref().unwrap_or("not finished")) } }
            tr { th { "budget" } td { (h_mm_ss(summary.budget_secs)) } }
            tr { th { "seed" } td { code { (summary.seed) } } }
            tr { th { "command" } td { code { (summary.command) } } }
            tr { th { "broker" } td { code { (summary.broker_bin) } } }
        }
    }
}

fn runs_section(summary: &NightlySummary, changes: &[Change], dir: &Path) -> Markup {
    html! {
        section #runs-section {
            h2 { "Runs" }
            @if summary.runs.is_empty() {
                p.muted { "No run was made." }
            } @else {
                table #runs {
                    thead {
                        tr {
                            th { "change" } th { "run" } th { "description" } th { "seed" }
                            th { "status" } th { "anomalies" } th { "time" } th { "files" }
                            th { "reproduce" }
                        }
                    }
                    tbody {
                        @for i in listing_order(changes) {
                            (run_row(&summary.runs[i], changes[i], dir))
                        }
                    }
                }
            }
        }
    }
}

fn run_row(run: &NightlyRun, change: Change, dir: &Path) -> Markup {
    html! {
        tr id={ "run-" (run.id) } class=(change.as_str()) data-change=(change.as_str()) data-status=(run.status.as_str()) {
            td { span class={ "badge " (change.as_str()) } { (change.label()) } }
            td { code.id { (run.id) } div.sub { (run.kind.as_str()) } }
            td {
                (run.description)
                @if run.key != run.description { div.sub { "key: " (run.key) } }
                @if let Some(why) = &run.expectation { div.sub.expectation { "expectation: " (why) } }
                @if let Some(shrunk) = &run.shrunk { div.sub.shrunk { "shrunk: " (shrunk.line()) } }
                @if let Some(error) = &run.error { div.err { (error) } }
            }
            td { @if let Some(seed) = run.seed { code { (seed) } } }
            td {
                span class={ "status " (run.status.as_str()) } { (run.status.as_str()) }
                @if let Some(verdict) = run.verdict.as_deref().filter(|v| *v != run.status.as_str()) {
                    div.sub { (verdict) }
                }
            }
            td {
                @for (i, (kind, count)) in run.anomalies.iter().enumerate() {
                    @if i > 0 { ", " }
                    span.anomaly { (kind) " ×" (count) }
                }
            }
            td.n { (duration(run.secs)) }
            td.links { (run_links(run, dir)) }
            td { code { (run.command) } }
        }
    }
}

/// `report.html`, `timeline.html` (a link when written) and the run folder.
fn run_links(run: &NightlyRun, dir: &Path) -> Markup {
    let Some(run_dir) = &run.run_dir else {
        return html! { span title="the run made no folder" { "no folder" } };
    };
    let base = folder_href(dir, run_dir);
    let link = |file: &str| {
        html! {
            @if run_dir.join(file).is_file() {
                a href={ (base) (file) } { (file) }
            } @else {
                span title="not written" { (file) }
            }
        }
    };
    html! {
        (link("report.html"))
        (link("timeline.html"))
        a href=(base) title=(run_dir.display()) { "folder" }
    }
}

/// One anomaly kind over the night.
struct KindTally<'a> {
    kind: &'a str,
    total: u64,
    /// The runs it appeared in, with their counts, in listing order.
    runs: Vec<(&'a str, u64)>,
    /// It appeared only in runs that newly fail.
    new: bool,
}

/// Every anomaly kind of the night: new ones first, then by total, then by name.
fn kind_tallies<'a>(summary: &'a NightlySummary, changes: &[Change]) -> Vec<KindTally<'a>> {
    let mut kinds: BTreeMap<&str, KindTally> = BTreeMap::new();
    for i in listing_order(changes) {
        let run = &summary.runs[i];
        for (kind, count) in &run.anomalies {
            let tally = kinds.entry(kind.as_str()).or_insert_with(|| KindTally {
                kind,
                total: 0,
                runs: Vec::new(),
                new: true,
            });
            tally.total += count;
            tally.runs.push((run.id.as_str(), *count));
            tally.new &= changes[i] == Change::NewFailure;
        }
    }
    let mut tallies: Vec<KindTally> = kinds.into_values().collect();
    tallies.sort_by(|a, b| b.new.cmp(&a.new).then(b.total.cmp(&a.total)));
    tallies
}

fn anomalies_section(summary: &NightlySummary, changes: &[Change]) -> Markup {
    let tallies = kind_tallies(summary, changes);
    html! {
        section #anomalies {
            h2 { "Anomalies" }
            @if tallies.is_empty() {
                p.muted { "No run found an anomaly that counts against validity." }
            } @else {
                p.muted { "A kind is new when it appears only in runs that newly fail." }
                table {
                    thead { tr { th { "kind" } th { "total" } th { "runs" } th { "new?" } } }
                    tbody {
                        @for tally in &tallies {
                            tr data-kind=(tally.kind) data-new=(tally.new) {
                                td { code { (tally.kind) } }
                                td.n { (tally.total) }
                                td {
                                    @for (i, (id, count)) in tally.runs.iter().enumerate() {
                                        @if i > 0 { ", " }
                                        a href=(row_href(id)) { (id) } " ×" (count)
                                    }
                                }
                                td {
                                    @if tally.new {
                                        span class="badge new-failure" { "new" }
                                    } @else {
                                        span.muted { "seen before" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn detect_section(summary: &NightlySummary) -> Markup {
    html! {
        section #detect {
            h2 { "Time to detect" }
            p.muted {
                "Per bug switch: how long random faults took to make the checkers judge a run invalid, per seed. "
                "A seed that did not find the bug counts as more than its search time; the median is over every seed."
            }
            table #detect-summary {
                thead { tr { th { "bug" } th { "found" } th { "median" } } }
                tbody {
                    @for result in &summary.detect {
                        tr data-bug=(result.bug) data-found=(found_count(result)) {
                            td { a href={ "#detect-" (crate::percent_encode(&result.bug)) } { (result.bug) } }
                            td { (found_count(result)) " of " (result.seeds.len()) " seeds" }
                            td {
                                @match result.median_secs {
                                    Some(median) if median > DETECT_LIMIT_SECS => span.slow { (mm_ss(median)) },
                                    Some(median) => { (mm_ss(median)) },
                                    None => span.slow { "not found in half the seeds" },
                                }
                            }
                        }
                    }
                }
            }
            @for result in &summary.detect {
                h3 id={ "detect-" (result.bug) } { (result.bug) }
                table {
                    thead { tr { th { "seed" } th { "found" } th { "time" } th { "runs" } th { "anomalies" } th { "run" } th { "its seed" } th { "its faults" } th { "run it again" } } }
                    tbody {
                        @for seed in &result.seeds {
                            tr data-found=(seed.found) {
                                td { code { (seed.seed) } }
                                td {
                                    @if seed.found { "found" }
                                    @else if seed.late { span.muted { "found after the limit" } }
                                    @else { span.muted { "not found" } }
                                }
                                td.n {
                                    @if !seed.found { "> " }
                                    (mm_ss(seed.secs))
                                }
                                td.n { (seed.runs) }
                                td { (seed.anomalies.join(", ")) }
                                td { @if let Some(id) = &seed.run_id { a href=(row_href(id)) { (id) } } }
                                td { @if let Some(run_seed) = seed.run_seed { code { (run_seed) } } }
                                td.faults { (seed.faults.join(", ")) }
                                td { @if let Some(command) = &seed.command { code.command { (command) } } }
                            }
                        }
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// junit.xml

/// `text` for a double- or single-quoted XML 1.0 attribute value: `& < > " '` as
/// entities, tab, newline and carriage return as character references (a parser would
/// turn them into spaces otherwise), other characters XML 1.0 does not allow (control
/// characters, U+FFFE, U+FFFF) dropped.
fn xml_escape(text: &str) -> String {
    escape_xml(text, true)
}

/// `text` for XML 1.0 character data: as [`xml_escape`], but tabs and newlines kept as
/// they are, so the file stays readable (a carriage return still becomes `&#13;`, which a
/// parser would otherwise turn into a newline).
fn xml_escape_text(text: &str) -> String {
    escape_xml(text, false)
}

fn escape_xml(text: &str, attribute: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' if !attribute => out.push(c),
            '\t' => out.push_str("&#9;"),
            '\n' => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            c if xml_char_allowed(c) => out.push(c),
            _ => {}
        }
    }
    out
}

/// The characters XML 1.0 allows (Rust's `char` already excludes surrogates).
fn xml_char_allowed(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

/// Seconds for a `time` attribute.
fn xml_secs(secs: f64) -> String {
    let secs = if secs.is_finite() && secs > 0.0 {
        secs
    } else {
        0.0
    };
    format!("{secs:.3}")
}

/// How a test case ended, for its child element.
enum Outcome {
    Passed,
    Failure {
        message: String,
        kind: String,
        body: String,
    },
    Error {
        message: String,
        body: String,
    },
    Skipped {
        message: String,
    },
}

/// One `<testcase>`.
struct Case {
    classname: String,
    name: String,
    secs: f64,
    outcome: Outcome,
}

/// One `<testsuite>`.
struct Suite {
    name: &'static str,
    cases: Vec<Case>,
}

impl Suite {
    fn count(&self, pred: impl Fn(&Outcome) -> bool) -> usize {
        self.cases.iter().filter(|c| pred(&c.outcome)).count()
    }
    fn failures(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Failure { .. }))
    }
    fn errors(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Error { .. }))
    }
    fn skipped(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Skipped { .. }))
    }
    fn secs(&self) -> f64 {
        self.cases.iter().map(|c| xml_secs_value(c.secs)).sum()
    }
}

/// `secs` as counted in the totals (what [`xml_secs`] writes).
fn xml_secs_value(secs: f64) -> f64 {
    if secs.is_finite() && secs > 0.0 {
        secs
    } else {
        0.0
    }
}

/// What a failing or erring run's case says in its body: how to run it again and where
/// its files are.
fn run_details(run: &NightlyRun) -> String {
    let mut body = format!("{}\ncommand: {}\n", run.description, run.command);
    if let Some(seed) = run.seed {
        let _ = writeln!(body, "seed: {seed}");
    }
    if let Some(dir) = &run.run_dir {
        let _ = writeln!(body, "run folder: {}", dir.display());
    }
    if let Some(why) = &run.expectation {
        let _ = writeln!(body, "expectation: {why}");
    }
    if let Some(shrunk) = &run.shrunk {
        let _ = writeln!(body, "shrunk: {}", shrunk.line());
    }
    if let Some(error) = &run.error {
        let _ = writeln!(body, "error: {error}");
    }
    if !run.anomalies.is_empty() {
        let _ = writeln!(body, "anomalies: {}", anomaly_list(&run.anomalies));
    }
    body
}

/// A run's test case.
fn run_case(run: &NightlyRun) -> Case {
    let anomalies = match anomaly_list(&run.anomalies) {
        list if list.is_empty() => "no anomalies".to_string(),
        list => list,
    };
    let verdict = run.verdict.clone();
    let outcome = match run.status {
        Status::Pass => Outcome::Passed,
        Status::Fail => {
            let kind = verdict.unwrap_or_else(|| "fail".into());
            let message = match (run.kind, &run.expectation) {
                (RunKind::Repro, Some(why)) => {
                    format!("expectation not met: {why} ({kind}: {anomalies})")
                }
                _ => format!("{kind}: {anomalies}"),
            };
            Outcome::Failure {
                message,
                kind,
                body: run_details(run),
            }
        }
        Status::Error => Outcome::Error {
            message: run.error.clone().unwrap_or_else(|| "error".into()),
            body: run_details(run),
        },
        Status::Unknown => {
            let why = run
                .error
                .as_deref()
                .or(run.expectation.as_deref())
                .unwrap_or("the checkers could not decide within their bounds");
            Outcome::Skipped {
                message: format!("unknown: {why}"),
            }
        }
    };
    Case {
        classname: format!("nightly.{}", run.kind.as_str()),
        name: format!("{} {}", run.id, run.key),
        secs: run.secs,
        outcome,
    }
}

/// A bug switch's test case of the `detect` suite.
fn detect_case(result: &DetectResult) -> Case {
    let outcome = match detect_problem(result) {
        None => Outcome::Passed,
        Some(message) => {
            let mut body = String::new();
            for seed in &result.seeds {
                let found = if seed.found {
                    Some("found")
                } else if seed.late {
                    Some("found only after the limit,")
                } else {
                    None
                };
                let _ = match found {
                    Some(found) => writeln!(
                        body,
                        "seed {}: {found} after {} in {} runs (run {}; {})",
                        seed.seed,
                        mm_ss(seed.secs),
                        seed.runs,
                        seed.run_id.as_deref().unwrap_or("?"),
                        seed.anomalies.join(", ")
                    ),
                    None => writeln!(
                        body,
                        "seed {}: not found in {} of search ({} runs)",
                        seed.seed,
                        mm_ss(seed.secs),
                        seed.runs
                    ),
                };
            }
            let kind = if result.median_secs.is_none() {
                "not-detected"
            } else {
                "slow-detection"
            };
            Outcome::Failure {
                message,
                kind: kind.into(),
                body,
            }
        }
    };
    Case {
        classname: "nightly.detect".into(),
        name: result.bug.clone(),
        secs: result.seeds.iter().map(|s| xml_secs_value(s.secs)).sum(),
        outcome,
    }
}

/// The night's suites, empty ones left out.
fn suites(summary: &NightlySummary) -> Vec<Suite> {
    let of_kind = |kind: RunKind| Suite {
        name: kind.as_str(),
        cases: summary
            .runs
            .iter()
            .filter(|r| r.kind == kind)
            .map(run_case)
            .collect(),
    };
    let detect = Suite {
        name: "detect",
        cases: summary.detect.iter().map(detect_case).collect(),
    };
    [of_kind(RunKind::Matrix), of_kind(RunKind::Repro), detect]
        .into_iter()
        .filter(|s| !s.cases.is_empty())
        .collect()
}

fn write_case(out: &mut String, case: &Case) {
    let _ = write!(
        out,
        "    <testcase classname=\"{}\" name=\"{}\" time=\"{}\"",
        xml_escape(&case.classname),
        xml_escape(&case.name),
        xml_secs(case.secs)
    );
    let _ = match &case.outcome {
        Outcome::Passed => writeln!(out, "/>"),
        Outcome::Failure {
            message,
            kind,
            body,
        } => writeln!(
            out,
            ">\n      <failure message=\"{}\" type=\"{}\">{}</failure>\n    </testcase>",
            xml_escape(message),
            xml_escape(kind),
            xml_escape_text(body)
        ),
        Outcome::Error { message, body } => writeln!(
            out,
            ">\n      <error message=\"{}\" type=\"error\">{}</error>\n    </testcase>",
            xml_escape(message),
            xml_escape_text(body)
        ),
        Outcome::Skipped { message } => writeln!(
            out,
            ">\n      <skipped message=\"{}\"/>\n    </testcase>",
            xml_escape(message)
        ),
    };
}

/// `junit.xml` for CI systems: a test suite per kind, a test case per run; failures
/// and errors with their anomalies / reasons.
///
/// Suites `matrix` and `repro` (left out when empty) hold a case per run, named
/// `<id> <key>`: a failing run is a `<failure>` (its verdict and anomalies, or the unmet
/// expectation, in the message; the command, run folder and expectation in the body), an
/// erring one an `<error>`, an unknown one `<skipped>`. A `detect` suite, when the night
/// detected, holds a case per bug switch that fails when fewer than half the seeds found
/// it or the median time to detect exceeds [`DETECT_LIMIT_SECS`].
pub fn junit_xml(summary: &NightlySummary) -> String {
    let suites = suites(summary);
    let total = |f: &dyn Fn(&Suite) -> usize| suites.iter().map(f).sum::<usize>();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"harness nightly\" tests=\"{}\" failures=\"{}\" errors=\"{}\" time=\"{}\">",
        total(&|s| s.cases.len()),
        total(&Suite::failures),
        total(&Suite::errors),
        xml_secs(suites.iter().map(Suite::secs).sum())
    );
    for suite in &suites {
        let _ = writeln!(
            out,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{}\">",
            suite.name,
            suite.cases.len(),
            suite.failures(),
            suite.errors(),
            suite.skipped(),
            xml_secs(suite.secs())
        );
        for case in &suite.cases {
            write_case(&mut out, case);
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run of `key` with `status` and nothing else of note.
    fn run(id: &str, key: &str, status: Status) -> NightlyRun {
        NightlyRun {
            id: id.into(),
            kind: RunKind::Matrix,
            key: key.into(),
            description: format!("{key} time-limit=60"),
            seed: Some(7),
            status,
            // An erring run has no verdict.
            verdict: match status {
                Status::Fail => Some("invalid".into()),
                Status::Pass => Some("valid".into()),
                Status::Unknown => Some("unknown".into()),
                Status::Error => None,
            },
            anomalies: BTreeMap::new(),
            expectation: None,
            command: format!("harness test --seed 7 --workload {key}"),
            run_dir: None,
            secs: 12.5,
            error: (status == Status::Error).then(|| "cluster did not start".into()),
            shrunk: None,
        }
    }

    fn night(runs: Vec<NightlyRun>) -> NightlySummary {
        NightlySummary {
            mode: "nightly".into(),
            started: "2026-03-02T02:00:00+00:00".into(),
            finished: Some("2026-03-02T06:00:00+00:00".into()),
            budget_secs: 4.0 * 3600.0,
            seed: 99,
            command: "harness nightly --budget 4h".into(),
            broker_bin: "/work/bin/broker".into(),
            runs,
            detect: Vec::new(),
        }
    }

    fn seed(seed: u64, found: bool, secs: f64) -> DetectSeed {
        DetectSeed {
            seed,
            found,
            late: false,
            secs,
            runs: 3,
            run_id: found.then(|| format!("d{seed:03}")),
            anomalies: if found {
                vec!["lost-write".into()]
            } else {
                Vec::new()
            },
            run_seed: found.then_some(seed + 1000),
            faults: if found {
                vec!["kill ×2".into(), "start-slow ×1".into()]
            } else {
                Vec::new()
            },
            command: found.then(|| format!("harness test --seed {} --bug KAFKA-7128", seed + 1000)),
        }
    }

    // --- compare / listing_order ----------------------------------------------------

    #[test]
    fn compare_without_a_previous_night_makes_every_failure_new() {
        let current = night(vec![
            run("m001", "a", Status::Fail),
            run("m002", "b", Status::Error),
            run("m003", "c", Status::Unknown),
            run("m004", "d", Status::Pass),
        ]);
        assert_eq!(
            compare(None, &current),
            [
                Change::NewFailure,
                Change::NewFailure,
                Change::Unknown,
                Change::Passing
            ]
        );
    }

    #[test]
    fn compare_by_key_with_the_previous_night() {
        let previous = night(vec![
            run("m001", "passed", Status::Pass),
            // A key that ran twice fails the night if either run failed.
            run("m002", "twice", Status::Pass),
            run("m003", "twice", Status::Fail),
            run("m004", "erred", Status::Error),
            run("m005", "was-unknown", Status::Unknown),
            run("m006", "failed", Status::Fail),
            run("m007", "still-fine", Status::Pass),
        ]);
        let current = night(vec![
            run("m001", "passed", Status::Fail),
            run("m002", "twice", Status::Error),
            run("m003", "erred", Status::Pass),
            run("m004", "was-unknown", Status::Fail),
            run("m005", "absent", Status::Pass),
            run("m006", "absent-failing", Status::Fail),
            run("m007", "failed", Status::Unknown),
            run("m008", "still-fine", Status::Pass),
        ]);
        assert_eq!(
            compare(Some(&previous), &current),
            [
                Change::NewFailure,
                Change::StillFailing,
                Change::Fixed,
                Change::NewFailure,
                Change::Passing,
                Change::NewFailure,
                Change::Unknown,
                Change::Passing,
            ]
        );
    }

    #[test]
    fn listing_puts_new_failures_first_and_keeps_run_order_within_a_group() {
        let changes = [
            Change::Passing,
            Change::Fixed,
            Change::NewFailure,
            Change::Unknown,
            Change::StillFailing,
            Change::NewFailure,
            Change::Passing,
        ];
        assert_eq!(listing_order(&changes), [2, 5, 4, 3, 1, 0, 6]);
        assert!(listing_order(&[]).is_empty());
    }

    // --- detect_median ----------------------------------------------------------------

    #[test]
    fn median_of_an_odd_count() {
        let seeds = [
            seed(1, true, 300.0),
            seed(2, true, 100.0),
            seed(3, true, 200.0),
        ];
        assert_eq!(detect_median(&seeds), Some(200.0));
        // A seed that did not find it sorts after every found one, even with a short
        // search.
        let seeds = [
            seed(1, true, 300.0),
            seed(2, false, 5.0),
            seed(3, true, 100.0),
        ];
        assert_eq!(detect_median(&seeds), Some(300.0));
    }

    #[test]
    fn median_of_an_even_count_averages_the_middle_two() {
        let seeds = [
            seed(1, true, 40.0),
            seed(2, true, 10.0),
            seed(3, true, 30.0),
            seed(4, false, 20.0),
        ];
        assert_eq!(detect_median(&seeds), Some(35.0));
        let seeds = [seed(1, true, 40.0), seed(2, true, 10.0)];
        assert_eq!(detect_median(&seeds), Some(25.0));
    }

    #[test]
    fn median_is_none_when_a_median_seed_did_not_find_it() {
        assert_eq!(detect_median(&[]), None);
        assert_eq!(detect_median(&[seed(1, false, 600.0)]), None);
        // Fewer than half.
        let seeds = [
            seed(1, true, 10.0),
            seed(2, false, 600.0),
            seed(3, false, 600.0),
        ];
        assert_eq!(detect_median(&seeds), None);
        // Exactly half of an even count: the upper middle time is unbounded.
        let seeds = [
            seed(1, true, 10.0),
            seed(2, true, 20.0),
            seed(3, false, 600.0),
            seed(4, false, 600.0),
        ];
        assert_eq!(detect_median(&seeds), None);
        // Just over half of an odd count.
        let seeds = [
            seed(1, true, 10.0),
            seed(2, true, 20.0),
            seed(3, false, 1.0),
        ];
        assert_eq!(detect_median(&seeds), Some(20.0));
    }

    // --- links ------------------------------------------------------------------------

    #[test]
    fn folder_links_are_relative_through_the_common_prefix() {
        let night = Path::new("/srv/store/nightly/20260302T020000");
        assert_eq!(
            folder_href(night, Path::new("/srv/store/log/20260302T020105")),
            "./../../log/20260302T020105/"
        );
        assert_eq!(
            folder_href(
                night,
                Path::new("/srv/store/nightly/20260302T020000/runs/m001")
            ),
            "./runs/m001/"
        );
        assert_eq!(folder_href(night, night), "./");
        // `.` and `..` are applied before comparing.
        assert_eq!(
            folder_href(
                Path::new("/srv/store/./nightly/x/../20260302T020000"),
                Path::new("/srv/store/log/../log/r1")
            ),
            "./../../log/r1/"
        );
        // Only the root in common still is a relative link.
        assert_eq!(
            folder_href(night, Path::new("/tmp/r1")),
            "./../../../../tmp/r1/"
        );
        // Names are percent-encoded.
        assert_eq!(
            folder_href(Path::new("/s"), Path::new("/s/a b#?/<c>")),
            "./a%20b%23%3F/%3Cc%3E/"
        );
    }

    #[test]
    fn folder_links_without_a_common_root_are_absolute() {
        assert_eq!(
            folder_href(Path::new("relative/night"), Path::new("/srv/store/r 1")),
            "file:///srv/store/r%201/"
        );
        assert_eq!(
            folder_href(Path::new("/srv/night"), Path::new("store/r1")),
            "store/r1/"
        );
    }

    // --- summary.html -----------------------------------------------------------------

    /// A fresh folder under the system temp folder, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> TempDir {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let dir = std::env::temp_dir().join(format!(
                "report-nightly-{tag}-{}-{nanos}",
                std::process::id()
            ));
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const HOSTILE: &str = "<script>alert('x')</script>&\"";

    /// A previous and a current night with a run of every change; the current one's
    /// runs have folders under `store` (the first with its reports written).
    fn nights(store: &Path) -> (NightlySummary, NightlySummary) {
        let previous = night(vec![
            run("m001", "fixed-key", Status::Fail),
            run("m002", "still-key", Status::Fail),
            run("m003", "new-key", Status::Pass),
        ]);
        let mut passing = run("m001", "passing-key", Status::Pass);
        passing.description = HOSTILE.into();
        let mut fixed = run("m002", "fixed-key", Status::Pass);
        fixed.run_dir = Some(store.join("log/20260302T020500"));
        let mut still = run("m003", "still-key", Status::Fail);
        still.anomalies = BTreeMap::from([("lost-write".to_string(), 2)]);
        let mut unknown = run("m004", "unknown-key", Status::Unknown);
        unknown.run_dir = Some(store.join("log/20260302T021000"));
        let mut new = run("m005", "new-key", Status::Fail);
        new.anomalies =
            BTreeMap::from([("lost-write".to_string(), 1), ("duplicate".to_string(), 4)]);
        new.run_dir = Some(store.join("log/20260302T021500"));
        let mut repro = run("repro-KAFKA-7128-buggy", "KAFKA-7128 buggy", Status::Error);
        repro.kind = RunKind::Repro;
        repro.expectation = Some("expected invalid <lost-write>".into());
        let current = night(vec![passing, fixed, still, unknown, new, repro]);
        for run in &current.runs {
            if let Some(dir) = &run.run_dir {
                std::fs::create_dir_all(dir).unwrap();
            }
        }
        std::fs::write(store.join("log/20260302T021500/report.html"), "<html/>").unwrap();
        (previous, current)
    }

    #[test]
    fn a_shrunk_failure_shows_its_scenario_and_rate_and_older_summaries_still_read() {
        let mut failing = run("m001", "log", Status::Fail);
        failing.shrunk = Some(Shrunk {
            scenario: PathBuf::from("/store/shrink/20261207T210000/shrunk.toml"),
            folder: PathBuf::from("/store/shrink/20261207T210000"),
            faults_before: 9,
            faults_after: 2,
            reproduced: 3,
            tries: 3,
            secs: 600.0,
        });
        let current = night(vec![failing]);
        let changes = compare(None, &current);
        let page = render_html(&current, &changes, None, Path::new("/store/nightly/x"));
        assert!(
            page.contains(
                "shrunk: 2 of 9 faults, reproduces 3/3: /store/shrink/20261207T210000/shrunk.toml"
            ),
            "{page}"
        );
        assert!(junit_xml(&current).contains("shrunk: 2 of 9 faults"));
        let text = serde_json::to_string(&current).unwrap();
        let read: NightlySummary = serde_json::from_str(&text).unwrap();
        assert_eq!(read, current);
        // A summary written before shrinking existed has no `shrunk`.
        let older = text.replace(
            &format!(
                ",\"shrunk\":{}",
                serde_json::to_string(&current.runs[0].shrunk).unwrap()
            ),
            "",
        );
        assert!(!older.contains("shrunk"), "{older}");
        let read: NightlySummary = serde_json::from_str(&older).unwrap();
        assert_eq!(read.runs[0].shrunk, None);
        // A lifted run that did not reproduce says so.
        let mut none = current.runs[0].shrunk.clone().unwrap();
        none.reproduced = 0;
        assert!(none
            .line()
            .starts_with("the lifted run (9 faults) did not reproduce in 3 plays"));
    }

    #[test]
    fn html_lists_runs_by_change_with_relative_links() {
        let store = TempDir::new("html");
        let (previous, current) = nights(&store.0);
        let changes = compare(Some(&previous), &current);
        let dir = store.0.join("nightly/20260302T020000");
        let page = render_html(&current, &changes, Some("20260301T020000"), &dir);

        assert!(page.contains(r#"data-verdict="fail""#));
        assert!(page.contains(r#"<span class="count" data-count="runs"><b>6</b> runs</span>"#));
        assert!(page.contains(r#"data-count="new-failures"><b>2</b> new failures"#));
        assert!(page.contains(r#"data-count="errors"><b>1</b> errors"#));
        assert!(page.contains("Compared with the night of <code>20260301T020000</code>"));

        let rows = [
            r#"<tr id="run-m005" class="new-failure" data-change="new-failure" data-status="fail">"#,
            r#"<tr id="run-repro-KAFKA-7128-buggy" class="new-failure" data-change="new-failure" data-status="error">"#,
            r#"<tr id="run-m003" class="still-failing" data-change="still-failing""#,
            r#"<tr id="run-m004" class="unknown" data-change="unknown""#,
            r#"<tr id="run-m002" class="fixed" data-change="fixed""#,
            r#"<tr id="run-m001" class="passing" data-change="passing""#,
        ];
        let positions: Vec<usize> = rows
            .iter()
            .map(|row| page.find(row).unwrap_or_else(|| panic!("no row {row}")))
            .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
        assert_eq!(page.matches("<tr id=\"run-").count(), 6);

        // Links relative to the night's folder; a report not written is not linked.
        assert!(
            page.contains(r#"<a href="./../../log/20260302T021500/report.html">report.html</a>"#)
        );
        assert!(page.contains(r#"<span title="not written">timeline.html</span>"#));
        assert!(page.contains(r#"<a href="./../../log/20260302T021000/" title="#));
        assert!(page.contains(r#"<span title="the run made no folder">no folder</span>"#));
        assert!(!page.contains("file://"));

        assert!(page.contains("expectation: expected invalid &lt;lost-write&gt;"));
        assert!(page.contains("cluster did not start"));
        assert!(page.contains("<code>harness test --seed 7 --workload new-key</code>"));
        assert!(
            page.contains(crate::assets::ONERROR_JS),
            "the error hook is inlined"
        );
        assert!(!page.contains("http://") && !page.contains("https://"));
    }

    #[test]
    fn html_escapes_a_hostile_description() {
        let store = TempDir::new("hostile");
        let (_, current) = nights(&store.0);
        let changes = compare(None, &current);
        let page = render_html(&current, &changes, None, &store.0);
        assert!(!page.contains("<script>alert"), "description not escaped");
        assert!(page.contains("&lt;script&gt;alert('x')&lt;/script&gt;&amp;&quot;"));
        // Only the error hook is a script.
        assert_eq!(page.matches("<script>").count(), 1);
        assert!(page.contains("No previous night"));
    }

    #[test]
    fn html_anomaly_kinds_are_new_only_in_new_failures() {
        let store = TempDir::new("kinds");
        let (previous, current) = nights(&store.0);
        let changes = compare(Some(&previous), &current);
        let page = render_html(&current, &changes, Some("prev"), &store.0);
        let duplicate = page
            .find(r#"<tr data-kind="duplicate" data-new="true">"#)
            .expect("duplicate is new");
        let lost = page
            .find(r#"<tr data-kind="lost-write" data-new="false">"#)
            .expect("lost-write was seen in a still-failing run");
        assert!(duplicate < lost, "new kinds first");
        // lost-write: 1 in m005 (listed first) and 2 in m003.
        assert!(page.contains(
            r##"<td class="n">3</td><td><a href="#run-m005">m005</a> ×1, <a href="#run-m003">m003</a> ×2</td>"##
        ));
    }

    #[test]
    fn html_of_a_clean_night_passes_without_detect_section() {
        let current = night(vec![run("m001", "a", Status::Pass)]);
        let page = render_html(&current, &compare(None, &current), None, Path::new("/s/n"));
        assert!(page.contains(r#"data-verdict="pass""#));
        assert!(page.contains("No run found an anomaly"));
        assert!(!page.contains("Time to detect"));
        // Fewer changes than runs: the rest are compared with no night.
        let current = night(vec![
            run("m001", "a", Status::Pass),
            run("m002", "b", Status::Fail),
        ]);
        let page = render_html(&current, &[Change::Passing], None, Path::new("/s/n"));
        assert!(page.contains(r#"id="run-m002" class="new-failure""#));
    }

    fn detect_night() -> NightlySummary {
        let mut summary = night(vec![run("d001", "log nemesis=kill", Status::Fail)]);
        summary.mode = "detect".into();
        let quick = vec![
            seed(1, true, 65.0),
            seed(2, true, 125.0),
            seed(3, false, 900.0),
        ];
        let missed = vec![
            seed(4, false, 900.0),
            seed(5, true, 10.0),
            seed(6, false, 900.0),
        ];
        let slow = vec![seed(7, true, 700.0)];
        summary.detect = vec![
            DetectResult {
                bug: "KAFKA-7128".into(),
                median_secs: detect_median(&quick),
                seeds: quick,
            },
            DetectResult {
                bug: "KAFKA-<1561>".into(),
                median_secs: detect_median(&missed),
                seeds: missed,
            },
            DetectResult {
                bug: "KAFKA-2143".into(),
                median_secs: detect_median(&slow),
                seeds: slow,
            },
        ];
        summary
    }

    #[test]
    fn html_shows_time_to_detect() {
        let summary = detect_night();
        let page = render_html(&summary, &compare(None, &summary), None, Path::new("/s"));
        assert!(page.contains("Time to detect"));
        assert!(page.contains(
            r##"<tr data-bug="KAFKA-7128" data-found="2"><td><a href="#detect-KAFKA-7128">KAFKA-7128</a></td><td>2 of 3 seeds</td><td>02:05</td></tr>"##
        ));
        assert!(page.contains("not found in half the seeds"));
        assert!(page.contains(r#"<span class="slow">11:40</span>"#));
        assert!(page.contains(r##"<a href="#run-d001">d001</a>"##));
        assert!(page.contains("&gt; 15:00"));
        assert!(page.contains(r#"<h3 id="detect-KAFKA-&lt;1561&gt;">"#));
    }

    #[test]
    fn a_detection_night_passes_only_when_every_switch_is_found_in_time() {
        let mut summary = detect_night();
        // Its runs fail (that is what finding a bug is), yet two switches were missed.
        let page = render_html(&summary, &compare(None, &summary), None, Path::new("/s"));
        assert!(page.contains(r#"data-verdict="fail""#));
        let table = page.find("Time to detect").expect("the table");
        let runs = page.find(r#"id="runs-section""#).expect("the runs");
        assert!(table < runs, "a detection night shows its table first");
        // The run that caught a switch: its seed, its faults and how to run it again.
        let caught = summary.detect[0]
            .seeds
            .iter()
            .find(|s| s.found)
            .expect("a find");
        let run_seed = caught.run_seed.expect("its seed").to_string();
        assert!(page[table..runs].contains(&format!("<code>{run_seed}</code>")));
        assert!(page[table..runs].contains("kill ×2, start-slow ×1"));
        assert!(page[table..runs].contains(&format!("harness test --seed {run_seed}")));
        summary.detect.truncate(1);
        let page = render_html(&summary, &compare(None, &summary), None, Path::new("/s"));
        assert!(
            page.contains(r#"data-verdict="pass""#),
            "KAFKA-7128 found, median 02:05"
        );
    }

    // --- junit.xml ----------------------------------------------------------------------

    /// Checks that `xml` is well-formed as a JUnit consumer reads it: the declaration, one
    /// root element, balanced tags, quoted attribute values without `<` and without
    /// duplicates, `&` only starting an entity or character reference, and only
    /// characters XML 1.0 allows.
    fn check_xml(xml: &str) -> Result<(), String> {
        if let Some(bad) = xml.chars().find(|c| !xml_char_allowed(*c)) {
            return Err(format!("illegal character {bad:?}"));
        }
        let rest = xml
            .strip_prefix("<?xml version=\"1.0\" encoding=\"UTF-8\"?>")
            .ok_or("no declaration")?;
        let bytes = rest.as_bytes();
        let mut stack: Vec<&str> = Vec::new();
        let mut roots = 0;
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] != b'<' {
                let end = rest[i..].find('<').map_or(rest.len(), |n| i + n);
                let text = &rest[i..end];
                if stack.is_empty() && !text.trim().is_empty() {
                    return Err(format!("text outside the root: {text:?}"));
                }
                check_references(text)?;
                if text.contains('>') {
                    return Err(format!("raw > in text {text:?}"));
                }
                i = end;
                continue;
            }
            let close = rest[i..].find('>').ok_or("unclosed tag")? + i;
            let tag = &rest[i + 1..close];
            i = close + 1;
            if let Some(name) = tag.strip_prefix('/') {
                match stack.pop() {
                    Some(open) if open == name => {}
                    other => return Err(format!("</{name}> closes {other:?}")),
                }
                continue;
            }
            let (tag, empty) = match tag.strip_suffix('/') {
                Some(t) => (t, true),
                None => (tag, false),
            };
            let name_end = tag.find(char::is_whitespace).unwrap_or(tag.len());
            let name = &tag[..name_end];
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
                return Err(format!("bad element name {name:?}"));
            }
            check_attributes(&tag[name_end..])?;
            if stack.is_empty() {
                roots += 1;
            }
            if !empty {
                stack.push(name);
            }
        }
        match (roots, stack.is_empty()) {
            (1, true) => Ok(()),
            (1, false) => Err(format!("unclosed {stack:?}")),
            (n, _) => Err(format!("{n} root elements")),
        }
    }

    /// `name="value"` pairs separated by white space.
    fn check_attributes(mut attrs: &str) -> Result<(), String> {
        let mut seen = Vec::new();
        loop {
            let trimmed = attrs.trim_start();
            if trimmed.is_empty() {
                return Ok(());
            }
            if trimmed.len() == attrs.len() {
                return Err(format!("no space before attribute {attrs:?}"));
            }
            let (name, after) = trimmed.split_once("=\"").ok_or("attribute without =\"")?;
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric()) {
                return Err(format!("bad attribute name {name:?}"));
            }
            if seen.contains(&name) {
                return Err(format!("duplicate attribute {name}"));
            }
            seen.push(name);
            let (value, after) = after.split_once('"').ok_or("unterminated value")?;
            if value.contains('<') {
                return Err(format!("raw < in attribute {value:?}"));
            }
            check_references(value)?;
            attrs = after;
        }
    }

    /// Every `&` starts `&amp;`, `&lt;`, `&gt;`, `&quot;`, `&apos;` or `&#<digits>;`.
    fn check_references(text: &str) -> Result<(), String> {
        let mut rest = text;
        while let Some(at) = rest.find('&') {
            let after = &rest[at + 1..];
            let end = after
                .find(';')
                .ok_or_else(|| format!("bare & in {text:?}"))?;
            let name = &after[..end];
            let known = matches!(name, "amp" | "lt" | "gt" | "quot" | "apos")
                || name
                    .strip_prefix('#')
                    .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
            if !known {
                return Err(format!("bad reference &{name}; in {text:?}"));
            }
            rest = &after[end + 1..];
        }
        Ok(())
    }

    #[test]
    fn the_xml_checker_rejects_broken_documents() {
        let decl = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>";
        assert!(check_xml(&format!("{decl}<a><b/></a>")).is_ok());
        for bad in [
            "<a><b></a>",
            "<a></a><a></a>",
            "<a x=\"1<2\"></a>",
            "<a x=\"&\"></a>",
            "<a>Tom & Jerry</a>",
            "<a x=\"1\" x=\"2\"></a>",
            "<a>\u{1}</a>",
            "<a>",
            "text<a></a>",
        ] {
            assert!(check_xml(&format!("{decl}{bad}")).is_err(), "{bad}");
        }
        assert!(check_xml("<a></a>").is_err());
    }

    #[test]
    fn xml_escape_covers_markup_quotes_and_illegal_characters() {
        assert_eq!(
            xml_escape("a&b<c>d\"e'f\tg\nh\ri\u{0}j\u{1b}k\u{FFFE}l×"),
            "a&amp;b&lt;c&gt;d&quot;e&apos;f&#9;g&#10;h&#13;ijkl×"
        );
        assert_eq!(
            xml_escape_text("a&b<c>\td\ne\rf\u{8}\"'"),
            "a&amp;b&lt;c&gt;\td\ne&#13;f&quot;&apos;"
        );
    }

    #[test]
    fn junit_counts_cases_by_outcome_and_parses() {
        let mut previous_fail = run("m002", "log nemesis=kill", Status::Fail);
        previous_fail.anomalies =
            BTreeMap::from([("lost-write".to_string(), 3), ("duplicate".to_string(), 1)]);
        previous_fail.run_dir = Some(PathBuf::from("/srv/store/log/20260302T020500"));
        let mut repro = run("repro-KAFKA-7128-fixed", "KAFKA-7128 fixed", Status::Fail);
        repro.kind = RunKind::Repro;
        repro.verdict = Some("invalid".into());
        repro.expectation = Some("expected valid, found truncation".into());
        let summary = night(vec![
            run("m001", "a", Status::Pass),
            previous_fail,
            run("m003", "c", Status::Error),
            run("m004", "d", Status::Unknown),
            repro,
        ]);
        let xml = junit_xml(&summary);
        check_xml(&xml).unwrap_or_else(|e| panic!("{e}\n{xml}"));
        assert!(xml.contains(
            r#"<testsuites name="harness nightly" tests="5" failures="2" errors="1" time="62.500">"#
        ));
        assert!(xml.contains(
            r#"<testsuite name="matrix" tests="4" failures="1" errors="1" skipped="1" time="50.000">"#
        ));
        assert!(xml.contains(
            r#"<testsuite name="repro" tests="1" failures="1" errors="0" skipped="0" time="12.500">"#
        ));
        assert!(!xml.contains(r#"name="detect""#));
        assert!(
            xml.contains(r#"<testcase classname="nightly.matrix" name="m001 a" time="12.500"/>"#)
        );
        assert!(xml
            .contains(r#"<failure message="invalid: duplicate×1, lost-write×3" type="invalid">"#));
        assert!(xml.contains("run folder: /srv/store/log/20260302T020500\n"));
        assert!(xml.contains(
            r#"<failure message="expectation not met: expected valid, found truncation (invalid: no anomalies)" type="invalid">"#
        ));
        assert!(xml.contains(r#"<error message="cluster did not start" type="error">"#));
        assert!(xml.contains(
            r#"<skipped message="unknown: the checkers could not decide within their bounds"/>"#
        ));
        assert_eq!(xml.matches("<testcase ").count(), 5);
    }

    #[test]
    fn junit_escapes_hostile_text() {
        let mut hostile = run("m001", "k\"<&>'", Status::Fail);
        hostile.anomalies = BTreeMap::from([("a<b>&\u{7}".to_string(), 1)]);
        hostile.command = "harness test --name ']]></failure><x>'\u{0}".into();
        let mut erring = run("m002", "k", Status::Error);
        erring.error = Some("line one\nline \"two\" & <three>".into());
        let xml = junit_xml(&night(vec![hostile, erring]));
        check_xml(&xml).unwrap_or_else(|e| panic!("{e}\n{xml}"));
        assert!(xml.contains(r#"name="m001 k&quot;&lt;&amp;&gt;&apos;""#));
        assert!(xml.contains(r#"message="invalid: a&lt;b&gt;&amp;×1""#));
        assert!(xml.contains("harness test --name &apos;]]&gt;&lt;/failure&gt;&lt;x&gt;&apos;\n"));
        assert!(xml.contains(
            r#"<error message="line one&#10;line &quot;two&quot; &amp; &lt;three&gt;" type="error">"#
        ));
    }

    #[test]
    fn junit_detect_suite_fails_missed_and_slow_bugs() {
        let xml = junit_xml(&detect_night());
        check_xml(&xml).unwrap_or_else(|e| panic!("{e}\n{xml}"));
        assert!(xml.contains(
            r#"<testsuite name="detect" tests="3" failures="2" errors="0" skipped="0" time="3600.000">"#
        ));
        assert!(xml.contains(
            r#"<testcase classname="nightly.detect" name="KAFKA-7128" time="1090.000"/>"#
        ));
        assert!(xml.contains(
            r#"<failure message="not found in half the seeds: found in 1 of 3" type="not-detected">"#
        ));
        assert!(xml.contains("name=\"KAFKA-&lt;1561&gt;\""));
        assert!(xml.contains(
            "<failure message=\"median time to detect 11:40 exceeds 10:00 (found in 1 of 1)\" \
             type=\"slow-detection\">seed 7: found after 11:40 in 3 runs (run d007; lost-write)\n</failure>"
        ));
        assert!(xml.contains(
            r#"<testsuites name="harness nightly" tests="4" failures="3" errors="0" time="3612.500">"#
        ));
    }

    #[test]
    fn summary_round_trips_through_json() {
        let mut summary = detect_night();
        summary.runs[0].run_dir = Some(PathBuf::from("/srv/store/r"));
        let json = serde_json::to_string(&summary).unwrap();
        assert!(json.contains(r#""status":"fail""#) && json.contains(r#""kind":"matrix""#));
        let back: NightlySummary = serde_json::from_str(&json).unwrap();
        assert_eq!(back, summary);
        assert_eq!(
            serde_json::to_string(&Change::NewFailure).unwrap(),
            format!("\"{}\"", Change::NewFailure.as_str())
        );
    }
}
