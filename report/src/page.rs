//! `report.html`: one self-contained page per run (inline CSS and SVG, the error-hook
//! script; both from `report/assets/`), every text escaped by maud. In order: the verdict banner with the anomaly
//! counts; the run (scenario and expectation for repro runs, the reproducing command,
//! the options and seed); each anomaly with its explanation and links to the ops that
//! show it in `timeline.html`; the linearizability failure drawn; latency and throughput
//! plots with the fault periods; per-partition final length and leader changes; op
//! counts; the harness's figures; links to every file of the run.
//!
//! Stable hooks for tests: `#verdict[data-verdict]`, `svg.plot[data-plot]`, `a.op-link`,
//! and `body[data-script-errors]` ("0" once loaded without a script error, else
//! `"<count>: <messages>"`, as in the timeline).

use std::collections::BTreeMap;

use checkers::{Anomaly, CheckerResult, Verdict};
use maud::{html, Markup, PreEscaped, DOCTYPE};
use serde_json::Value;
use spec::TestRecord;

use crate::assets;
use crate::plots;
use crate::run::{self, RunData};

/// Anomalies listed per kind; the rest are counted.
pub const MAX_LISTED_PER_KIND: usize = 100;
/// Partitions listed in the partition table.
const MAX_PARTITIONS: usize = 1000;
/// Longest JSON value shown in a table cell, in characters.
const MAX_CELL: usize = 400;

/// The whole `report.html`.
pub fn render(data: &RunData) -> String {
    let name = data.name();
    let verdict = data.results.as_ref().map(|r| r.verdict);
    let verdict_name = verdict.map_or("unknown", Verdict::as_str);
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (verdict_name) " · " (name) " · report" }
                style { (PreEscaped(assets::BASE_CSS)) (PreEscaped(assets::PAGE_CSS)) }
            }
            body {
                script { (PreEscaped(assets::ONERROR_JS)) }
                h1 { (name) }
                p.muted {
                    @if let Some(test) = &data.test { "started " (test.started) " · " }
                    "folder " code { (spec::folder::shown_path(&data.dir)) }
                }
                (banner(data, verdict))
                (warnings(data))
                (run_section(data))
                (anomalies_section(data))
                (linear_section(data))
                (plots_section(data))
                (partitions_section(data))
                (ops_section(data))
                (stats_section(data))
                (files_section(data))
            }
        }
    }
    .into_string()
}

/// Anomalies of one kind in one checker's report.
struct KindSummary {
    kind: String,
    /// How many the checker found (may exceed those listed in its report).
    found: u64,
    /// Whether they count against validity.
    counted: bool,
    listed: Vec<Anomaly>,
}

/// The anomalies of a checker's report by kind, in order of first appearance; counts
/// from the report's found/counted figures (the log checker's) when it has them.
fn kinds(result: &CheckerResult) -> Vec<KindSummary> {
    let mut kinds: Vec<KindSummary> = Vec::new();
    for anomaly in result.anomalies() {
        let counted = anomaly.counts_against_validity;
        match kinds.iter_mut().find(|k| k.kind == anomaly.kind) {
            Some(k) => {
                k.found += 1;
                k.counted |= counted;
                k.listed.push(anomaly);
            }
            None => kinds.push(KindSummary {
                kind: anomaly.kind.clone(),
                found: 1,
                counted,
                listed: vec![anomaly],
            }),
        }
    }
    for count in result.anomaly_counts() {
        if count.found == 0 {
            continue;
        }
        let counted = count.counted.unwrap_or(count.found) > 0;
        match kinds.iter_mut().find(|k| k.kind == count.kind) {
            Some(k) => {
                k.found = k.found.max(count.found);
                k.counted = counted;
            }
            None => kinds.push(KindSummary {
                kind: count.kind.clone(),
                found: count.found,
                counted,
                listed: Vec::new(),
            }),
        }
    }
    kinds
}

fn banner(data: &RunData, verdict: Option<Verdict>) -> Markup {
    let name = verdict.map_or("unknown", Verdict::as_str);
    html! {
        div #verdict .verdict .(name) data-verdict=(name) {
            span.word { (name) }
            @match &data.results {
                None => { "no results.json: the run was not checked" }
                Some(results) => {
                    @let all: Vec<(String, KindSummary)> = results.checkers.iter()
                        .flat_map(|(checker, r)| kinds(r).into_iter().map(move |k| (checker.clone(), k)))
                        .collect();
                    @if all.is_empty() {
                        "no anomalies"
                    } @else {
                        (all.iter().map(|(_, k)| k.found).sum::<u64>()) " anomalies"
                    }
                    ul {
                        @for (checker, result) in &results.checkers {
                            li {
                                b { (checker) } ": " (result.verdict.as_str())
                                @for (_, k) in all.iter().filter(|(c, _)| c == checker) {
                                    " · " (k.kind) " ×" (k.found)
                                    @if !k.counted { " (not counted)" }
                                }
                                @if result.verdict == Verdict::Unknown {
                                    @if let Some(why) = result.reason() { " · " (why) }
                                }
                                @if let Some(why) = result.waived() { " · waived, " (why) }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn warnings(data: &RunData) -> Markup {
    html! {
        @if let Some(why) = &data.pairing_error {
            div.warning.pairing {
                b { "The history does not pair" } ": " (why)
                ". The plots and op statistics that need paired operations are empty; the anomalies, partitions and files below are still shown."
            }
        }
        @for problem in &data.problems {
            div.warning { (problem) }
        }
    }
}

/// A JSON value for a table cell: strings as they are, the rest compact, cut short.
fn cell(value: &Value) -> String {
    let text = match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if text.chars().count() > MAX_CELL {
        let cut: String = text.chars().take(MAX_CELL).collect();
        format!("{cut}…")
    } else {
        text
    }
}

fn run_section(data: &RunData) -> Markup {
    let test = data.test.as_ref();
    let title = test.and_then(TestRecord::title);
    let seed = test
        .filter(|t| matches!(t.spec.plan, spec::Plan::Workload(_)))
        .map(|t| t.spec.seed);
    html! {
        section #run {
            h2 { "Run" }
            @if let Some(title) = title {
                p.scenario { b { "Scenario" } ": " (title) }
            }
            @if let Some(e) = &data.expectation {
                p #expectation data-met=(if e.met { "true" } else { "false" }) {
                    b { "Expectation" }
                    " (" (e.mode.as_str()) ")"
                    ": "
                    @if e.met { span.met { "met" } } @else { span.unmet { "not met" } }
                    " — " (e.reason)
                    @if let Some(problem) = &e.problem {
                        br; "problem: " (problem)
                    }
                }
            }
            @if let Some(test) = test {
                p { b { "Reproduce with" } @if let Some(seed) = seed { " (seed " (seed) ")" } ":" }
                pre #command { code { (test.command) } }
            }
            @match test {
                Some(test) => {
                    h3 { "Options (test.json)" }
                    table #options {
                        @for (key, value) in flatten(&serde_json::to_value(test).unwrap_or(Value::Null)) {
                            @if key != "command" {
                                tr { th { (key) } td { code { (cell(&value)) } } }
                            }
                        }
                    }
                }
                None => p.muted { "No test.json." }
            }
        }
    }
}

/// A serialized record as rows: nested objects' keys joined with dots
/// (`spec.plan.workload`), everything else a value.
fn flatten(value: &Value) -> Vec<(String, Value)> {
    fn walk(prefix: String, value: &Value, rows: &mut Vec<(String, Value)>) {
        match value {
            Value::Object(fields) if !fields.is_empty() => {
                for (key, field) in fields {
                    let name = if prefix.is_empty() {
                        key.clone()
                    } else {
                        format!("{prefix}.{key}")
                    };
                    walk(name, field, rows);
                }
            }
            other => rows.push((prefix, other.clone())),
        }
    }
    let mut rows = Vec::new();
    walk(String::new(), value, &mut rows);
    rows
}

/// The timeline link of an op index.
fn op_link(index: u64) -> Markup {
    html! { a.op-link href=(format!("timeline.html#i{index}")) { "op " (index) } }
}

fn anomaly_item(anomaly: &Anomaly) -> Markup {
    let key = anomaly
        .key
        .as_ref()
        .or(anomaly.partition.as_ref())
        .filter(|k| !k.is_null());
    html! {
        li.anomaly {
            @if let Some(key) = key { code { (cell(key)) } ": " }
            @match &anomaly.explanation {
                Some(text) => (text),
                None => code { (cell(&serde_json::to_value(anomaly).unwrap_or(Value::Null))) },
            }
            @if !anomaly.ops.is_empty() {
                " " span.ops { @for op in &anomaly.ops { @if let Some(i) = op.as_u64() { (op_link(i)) } } }
            }
        }
    }
}

fn anomalies_section(data: &RunData) -> Markup {
    let Some(results) = &data.results else {
        return html! {};
    };
    let checkers: Vec<(&String, Vec<KindSummary>)> = results
        .checkers
        .iter()
        .map(|(name, r)| (name, kinds(r)))
        .filter(|(_, k)| !k.is_empty())
        .collect();
    html! {
        section #anomalies {
            h2 { "Anomalies" }
            @if checkers.is_empty() {
                p { "None found." }
            }
            @for (checker, kinds) in &checkers {
                @for k in kinds {
                    h3 data-kind=(k.kind) {
                        (k.kind) " ×" (k.found) span.badge { (checker) }
                        @if !k.counted { span.badge { "informational: does not count against validity" } }
                    }
                    ul {
                        @for anomaly in k.listed.iter().take(MAX_LISTED_PER_KIND) {
                            (anomaly_item(anomaly))
                        }
                    }
                    @let shown = k.listed.len().min(MAX_LISTED_PER_KIND) as u64;
                    @if k.found > shown {
                        p.muted.more { "… and " (k.found - shown) " more not listed"
                            @if (k.listed.len() as u64) < k.found { " (the checker's report keeps " (k.listed.len()) ")" }
                            "." }
                    }
                }
            }
        }
    }
}

fn linear_section(data: &RunData) -> Markup {
    let Some(result) = data
        .results
        .as_ref()
        .and_then(|r| r.checkers.get("linearizable"))
        .filter(|c| c.verdict == Verdict::Invalid)
    else {
        return html! {};
    };
    let failure = result.linear_report().and_then(|report| report.failure);
    let drawing = crate::zones::draw_report(&data.history, &result.report)
        .or_else(|| crate::linear::draw(&data.history, &result.report));
    html! {
        section #linear {
            h2 { "Why it is not linearizable" }
            @if let Some(failure) = failure {
                p {
                    @if let Some(key) = &failure.key { "Key " code { (key) } ": " }
                    (op_link(failure.unplaced)) " could not be placed"
                    " (" (failure.unplaced_description) ")"
                    " after a linearizable prefix of " (failure.longest_prefix.len()) " ops"
                    "."
                }
            }
            @if let Some(drawing) = drawing { div.linear-drawing { (drawing) } }
        }
    }
}

fn plots_section(data: &RunData) -> Markup {
    let periods = plots::fault_periods(&data.history);
    let latency = plots::latency(&data.history, &data.operations, &periods);
    html! {
        section #plots {
            h2 { "Latency and throughput" }
            @if periods.is_empty() { p.muted { "No faults were injected." } }
            @else { p.muted { (periods.len()) " faults: periods shaded in their nemesis package's colour, instantaneous ones as thin marks, each kind in a labelled lane above the plot (hover for its ops)." } }
            (plots::legend(&periods))
            @if latency.total == 0 { p.muted { "No paired client operations to plot." } }
            @if latency.drawn < latency.total {
                p.muted { "Latency: " (latency.drawn) " of " (latency.total) " operations drawn (every fail and info kept, ok evenly thinned)." }
            }
            (latency.markup)
            (plots::throughput(&data.history, &data.operations, &periods))
        }
    }
}

fn partitions_section(data: &RunData) -> Markup {
    let partitions = run::partitions(&data.history);
    if partitions.is_empty() {
        return html! {};
    }
    html! {
        section #partitions {
            h2 { "Partitions" }
            p.muted { "Final length: highest offset + 1 in the final reads. Leader changes: how often the node serving the key's ok ops changed." }
            table {
                tr { th { "key" } th { "final length" } th { "ok ops" } th { "leader changes" } th { "serving nodes" } }
                @for p in partitions.iter().take(MAX_PARTITIONS) {
                    tr data-key=(p.key) {
                        td { code { (p.key) } }
                        td.n { @match p.final_length { Some(n) => (n), None => span.muted { "no final read" } } }
                        td.n { (p.ok_ops) }
                        td.n.leader-changes { (p.leader_changes) }
                        td {
                            (p.serving.join(" → "))
                            @if (p.serving.len() as u64) < p.leader_changes + 1 && !p.serving.is_empty() { " → …" }
                        }
                    }
                }
            }
            @if partitions.len() > MAX_PARTITIONS {
                p.muted { "… and " (partitions.len() - MAX_PARTITIONS) " more keys." }
            }
        }
    }
}

fn ops_section(data: &RunData) -> Markup {
    let counts = run::op_counts(&data.history);
    let nemesis = data
        .history
        .ops
        .iter()
        .filter(|op| !op.process.is_client())
        .count();
    html! {
        section #ops {
            h2 { "Operations" }
            p { (data.history.len()) " history entries, " (data.operations.len()) " operations paired, " (nemesis) " nemesis entries." }
            @if !counts.is_empty() {
                table {
                    tr { th { "f" } th { "invoked" } th { "ok" } th { "fail" } th { "info" } th { "never completed" } }
                    @for c in &counts {
                        tr { td { code { (c.f) } } td.n { (c.invoke) } td.n { (c.ok) } td.n { (c.fail) } td.n { (c.info) } td.n { (c.pending()) } }
                    }
                }
            }
        }
    }
}

fn stats_section(data: &RunData) -> Markup {
    let Some(stats) = &data.stats else {
        return html! {};
    };
    let rows = flatten(&serde_json::to_value(stats).unwrap_or(Value::Null));
    html! {
        section #stats {
            h2 { "Figures (stats.json)" }
            table {
                @for (key, value) in &rows {
                    tr { th { (key) } td { code { (cell(value)) } } }
                }
            }
        }
    }
}

/// A relative URL of a path inside the run folder: each segment percent-encoded.
fn href(segments: &[&str]) -> String {
    let mut url = String::new();
    for (i, segment) in segments.iter().enumerate() {
        if i > 0 {
            url.push('/');
        }
        for byte in segment.bytes() {
            if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
                url.push(byte as char);
            } else {
                url.push_str(&format!("%{byte:02X}"));
            }
        }
    }
    url
}

fn files_section(data: &RunData) -> Markup {
    let files = [
        "timeline.html",
        "history.jsonl",
        "results.json",
        "test.json",
        "stats.json",
        "expectation.json",
    ];
    let sizes: BTreeMap<&str, u64> = files
        .iter()
        .filter_map(|f| Some((*f, std::fs::metadata(data.dir.join(f)).ok()?.len())))
        .collect();
    html! {
        section #files {
            h2 { "Files" }
            ul {
                @for file in files {
                    @if file == "timeline.html" || sizes.contains_key(file) {
                        li { a.file href=(href(&[file])) { (file) }
                            @if let Some(size) = sizes.get(file) { " " span.muted { "(" (human_bytes(*size)) ")" } } }
                    }
                }
            }
            @if !data.nodes.is_empty() {
                h3 { "Nodes" }
                table #nodes {
                    @for node in &data.nodes {
                        tr {
                            th { (node) }
                            @let files = node_files(data, node);
                            @if files.is_empty() {
                                td { span.muted { "no files" } }
                            }
                            @for file in &files {
                                td { a.node-file href=(href(&["nodes", node, file])) { (file) } }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The files in a node's folder of the run (its log, configuration, data listing:
/// whatever the harness brought back for the system under test), sorted by name;
/// folders (a node's live data) and hidden files are left out.
fn node_files(data: &RunData, node: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(data.dir.join("nodes").join(node)) else {
        return Vec::new();
    };
    let mut files: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|name| !name.starts_with('.'))
        .collect();
    files.sort();
    files
}

fn human_bytes(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{:.1} MB", b as f64 / (1 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} kB", b as f64 / (1 << 10) as f64),
        b => format!("{b} B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::tests::temp_dir;
    use serde_json::json;
    use std::path::Path;

    const HOSTILE: &str = "</script><b>";

    fn line(v: Value) -> String {
        format!("{v}\n")
    }

    /// A small log run: a partition period, two appends on a hostile key (one acked by
    /// n1, one by n2), a final read, an invalid log checker with a lost write.
    fn write_run(dir: &Path) {
        let history = [
            json!({"index":0,"time":1_000_000,"process":"nemesis","type":"info","f":"start-partition","value":{}}),
            json!({"index":1,"time":2_000_000,"process":0,"type":"invoke","f":"append","value":{"key":HOSTILE,"value":1},"node":"n1"}),
            json!({"index":2,"time":3_000_000,"process":0,"type":"ok","f":"append","value":{"key":HOSTILE,"value":1,"offset":0},"node":"n1"}),
            json!({"index":3,"time":4_000_000,"process":1,"type":"invoke","f":"append","value":{"key":HOSTILE,"value":2},"node":"n2"}),
            json!({"index":4,"time":5_000_000,"process":1,"type":"ok","f":"append","value":{"key":HOSTILE,"value":2,"offset":1},"node":"n2"}),
            json!({"index":5,"time":6_000_000,"process":"nemesis","type":"info","f":"stop-partition","value":{}}),
            json!({"index":6,"time":7_000_000,"process":2,"type":"invoke","f":"read","value":{"key":HOSTILE,"final":true},"node":"n2"}),
            json!({"index":7,"time":8_000_000,"process":2,"type":"ok","f":"read","value":{"key":HOSTILE,"final":true,"records":[[0,1]]},"node":"n2"}),
        ];
        let text: String = history.into_iter().map(line).collect();
        std::fs::write(dir.join("history.jsonl"), text).unwrap();
        let anomalies: Vec<Value> = (0..130)
            .map(|i| json!({"kind":"lost-write","key":HOSTILE,"ops":[4, 7],
                "explanation": format!("value 2 {HOSTILE} lost #{i}"),"counts_against_validity":true}))
            .collect();
        let results = json!({"verdict":"invalid","checkers":{"log":{"verdict":"invalid","report":{
            "anomalies": anomalies,
            "stats":{"anomalies":[{"kind":"lost-write","found":150,"counted":150,"reported":130}]}}}}});
        std::fs::write(dir.join("results.json"), results.to_string()).unwrap();
        let test = crate::testing::workload_record(
            "log",
            42,
            &format!("harness test --seed 42 {HOSTILE}"),
            Some("Scenario <i>title</i>"),
        );
        std::fs::write(dir.join("test.json"), test).unwrap();
        let expectation = crate::testing::expectation(false, "expected lost-write");
        std::fs::write(dir.join("expectation.json"), expectation).unwrap();
        std::fs::create_dir_all(dir.join("nodes/n1")).unwrap();
        std::fs::write(dir.join("nodes/n1/broker.log"), "log").unwrap();
        // A node's live data and staged files are no files to link.
        std::fs::create_dir_all(dir.join("nodes/n1/data")).unwrap();
        std::fs::write(dir.join("nodes/n1/.staged"), "").unwrap();
    }

    #[test]
    fn page_has_verdict_plots_links_and_escapes() {
        let dir = temp_dir("page");
        write_run(&dir);
        let written = crate::write_run_reports(&dir).unwrap();
        let page = std::fs::read_to_string(&written.report).unwrap();
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert!(page.contains(r#"id="verdict""#), "banner");
        assert!(page.contains(r#"data-verdict="invalid""#));
        assert!(page.contains("lost-write ×150"));
        assert!(page.contains(r#"<svg class="plot" data-plot="latency" data-f="append""#));
        assert!(page.contains(r#"data-plot="throughput""#));
        assert!(page.contains(r##"<a class="op-link" href="timeline.html#i4">op 4</a>"##));
        // 100 listed, the rest counted.
        assert_eq!(page.matches(r##"href="timeline.html#i7""##).count(), 100);
        assert!(page.contains("… and 50 more not listed (the checker's report keeps 130)."));
        // Escaped everywhere: key, explanation, command, title.
        assert!(!page.contains(HOSTILE));
        assert!(!page.contains("<i>title"));
        assert!(page.contains("&lt;/script&gt;&lt;b&gt;"));
        assert_eq!(page.matches("<script>").count(), 1);
        assert_eq!(page.matches("</script>").count(), 1);
        assert!(page.contains("dataset.scriptErrors"));
        // The run, its expectation and partitions.
        assert!(page.contains("harness test --seed 42 &lt;/script&gt;"));
        assert!(page.contains(r#"id="expectation" data-met="false""#));
        assert!(page.contains("expected lost-write"));
        assert!(page.contains(r#"<td class="n leader-changes">1</td>"#));
        assert!(page.contains("n1 → n2"));
        assert!(page.contains(r#"data-lane="partition""#));
        assert!(!page.contains("nodes/n1/data") && !page.contains(".staged"));
        // Links to the files.
        for link in [
            "nodes/n1/broker.log",
            "history.jsonl",
            "results.json",
            "test.json",
            "timeline.html",
        ] {
            assert!(page.contains(&format!("href=\"{link}\"")), "{link}");
        }
        assert!(!page.contains("href=\"stats.json\""));
        // Self-contained: nothing fetched.
        assert!(!page.contains(" src=") && !page.contains("<link"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_waived_checker_says_why_its_anomalies_do_not_count() {
        let dir = temp_dir("waived-page");
        write_run(&dir);
        let text = std::fs::read_to_string(dir.join("results.json")).unwrap();
        let mut results: checkers::Results = serde_json::from_str(&text).unwrap();
        results.waive("log", Some(&["lost-write"]), "unclean <b>elections</b>");
        std::fs::write(
            dir.join("results.json"),
            serde_json::to_string(&results).unwrap(),
        )
        .unwrap();
        let page = render(&RunData::load(&dir).unwrap());
        assert!(page.contains(r#"data-verdict="valid""#));
        assert!(page.contains("lost-write ×150 (not counted)"));
        assert!(page.contains("waived, unclean &lt;b&gt;elections&lt;/b&gt;"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unpaired_history_still_gives_a_page() {
        let dir = temp_dir("unpaired-page");
        std::fs::write(
            dir.join("history.jsonl"),
            line(json!({"index":0,"time":5,"process":3,"type":"ok","f":"read","value":{}})),
        )
        .unwrap();
        let page = render(&RunData::load(&dir).unwrap());
        assert!(page.contains(r#"data-verdict="unknown""#));
        assert!(page.contains("The history does not pair"));
        assert!(page.contains("no invocation before it"));
        assert!(page.contains("No paired client operations to plot."));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_invalid_register_run_says_why_it_is_not_linearizable() {
        let dir = temp_dir("linear");
        let history = [
            json!({"index":0,"time":1,"process":0,"type":"invoke","f":"write","value":{"key":"r/0","value":1},"node":"n1"}),
            json!({"index":1,"time":2,"process":0,"type":"ok","f":"write","value":{"key":"r/0","value":1},"node":"n1"}),
            json!({"index":2,"time":3,"process":1,"type":"invoke","f":"read","value":{"key":"r/0","value":null},"node":"n2"}),
            json!({"index":3,"time":4,"process":1,"type":"ok","f":"read","value":{"key":"r/0","value":2},"node":"n2"}),
        ];
        let text: String = history.into_iter().map(line).collect();
        std::fs::write(dir.join("history.jsonl"), text).unwrap();
        let results = json!({"verdict":"invalid","checkers":{"linearizable":{"verdict":"invalid","report":{
            "verdict":"invalid","model":"register","reason":null,"partitions":1,"partitions_checked":1,"operations":2,
            "failure":{"key":"r/0","longest_prefix":[0],"unplaced":2,"unplaced_description":"read r/0 = 2",
                "partial_linearizations":[]}}}}});
        std::fs::write(dir.join("results.json"), results.to_string()).unwrap();
        let page = render(&RunData::load(&dir).unwrap());
        assert!(page.contains("Why it is not linearizable"));
        assert!(page.contains(r##"<a class="op-link" href="timeline.html#i2">op 2</a> could not be placed (read r/0 = 2) after a linearizable prefix of 1 ops."##));
        assert!(page.contains(r#"<td class="n leader-changes">1</td>"#));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn hrefs_are_percent_encoded() {
        assert_eq!(
            href(&["nodes", "n 1#x", "broker.log"]),
            "nodes/n%201%23x/broker.log"
        );
    }
}
