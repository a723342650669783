//! `cargo bench -p report`: the time to write `report.html` and `timeline.html` for a
//! run of 1,000,000 operations (2,000,000 history entries of a simulated log workload
//! with nemesis faults, checked), and the size of the files. Target: under 10 s.

use std::time::Instant;

use checkers::log::{check_log, simulate};
use checkers::Results;

const OPERATIONS: usize = 1_000_000;

fn main() {
    let dir = std::env::temp_dir().join(format!("report-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(error) = std::fs::create_dir_all(&dir) {
        eprintln!("cannot create {}: {error}", dir.display());
        std::process::exit(1);
    }
    let history = simulate::generate_history(7, 2 * OPERATIONS, 8, 20);
    let checked = match check_log(&history) {
        Ok(report) => report,
        Err(error) => {
            eprintln!("the simulated history does not check: {error}");
            std::process::exit(1);
        }
    };
    let mut results = Results::default();
    results.add("log", checked.verdict, &checked);
    let written = std::fs::write(
        dir.join("history.jsonl"),
        history::jsonl::to_jsonl(&history.ops),
    )
    .and_then(|()| {
        std::fs::write(
            dir.join("results.json"),
            serde_json::to_vec(&results).unwrap_or_default(),
        )
    })
    .and_then(|()| {
        std::fs::write(
            dir.join("test.json"),
            br#"{"name": "bench", "command": "cargo bench -p report", "seed": 7}"#,
        )
    });
    if let Err(error) = written {
        eprintln!("cannot write the run folder: {error}");
        std::process::exit(1);
    }
    let entries = history.len();
    drop(history);
    let history_bytes = std::fs::metadata(dir.join("history.jsonl")).map_or(0, |m| m.len());

    // Where the time goes, then the whole as `harness report` does it.
    let began = Instant::now();
    if let Ok(data) = report::run::RunData::load(&dir) {
        let loaded = began.elapsed();
        let page = report::page::render(&data);
        let rendered = began.elapsed() - loaded;
        let out = dir.join("timeline-part.html");
        let timeline = report::timeline::write(&data.history, &out);
        let timed = began.elapsed() - loaded - rendered;
        let _ = std::fs::remove_file(&out);
        println!(
            "parts: load {:.2} s, report.html {:.2} s ({} bytes), timeline.html {:.2} s ({:?})",
            loaded.as_secs_f64(),
            rendered.as_secs_f64(),
            page.len(),
            timed.as_secs_f64(),
            timeline.map_err(|e| e.to_string())
        );
    }
    let began = Instant::now();
    let result = report::write_run_reports(&dir);
    let took = began.elapsed();
    match result {
        Ok(files) => {
            let size = |p: &std::path::Path| std::fs::metadata(p).map_or(0, |m| m.len());
            println!(
                "{OPERATIONS} operations ({entries} entries, history.jsonl {:.1} MB): reports written in {:.2} s (target 10 s: {})",
                history_bytes as f64 / 1e6,
                took.as_secs_f64(),
                if took.as_secs_f64() < 10.0 { "met" } else { "NOT met" }
            );
            println!(
                "report.html {:.2} MB, timeline.html {:.1} MB ({:.0} bytes per operation)",
                size(&files.report) as f64 / 1e6,
                size(&files.timeline) as f64 / 1e6,
                size(&files.timeline) as f64 / OPERATIONS as f64
            );
        }
        Err(error) => {
            eprintln!("writing the reports failed: {error}");
            std::process::exit(1);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
