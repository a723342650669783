//! `harness report <run>`: (re)writes a run folder's `report.html` and `timeline.html`
//! from what the folder holds, and prints their paths, sizes and the time taken.
//! Exit 0; any error (no history, unwritable folder) exits 3 through `anyhow`.

use std::path::Path;
use std::time::Instant;

use anyhow::{anyhow, Result};

use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A run folder (`store/<name>/<time>`, or a `latest` link).
    #[arg(value_name = "RUN")]
    pub run: PathBuf,
}

pub fn run(args: &ReportArgs) -> Result<i32> {
    let began = Instant::now();
    // The error's own message already names its cause; its source chain would repeat it.
    let written = report::write_run_reports(&args.run).map_err(|error| {
        anyhow!(
            "cannot write the reports of {}: {error}",
            args.run.display()
        )
    })?;
    let secs = began.elapsed().as_secs_f64();
    println!(
        "report: {} ({})",
        written.report.display(),
        size_of(&written.report)
    );
    println!(
        "timeline: {} ({})",
        written.timeline.display(),
        size_of(&written.timeline)
    );
    println!(
        "written in {secs:.2} s, {} in all",
        human_bytes(written.bytes)
    );
    Ok(0)
}

fn size_of(path: &Path) -> String {
    match std::fs::metadata(path) {
        Ok(meta) => human_bytes(meta.len()),
        Err(_) => "size unknown".to_string(),
    }
}

fn human_bytes(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{:.1} MB", b as f64 / (1 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} kB", b as f64 / (1 << 10) as f64),
        b => format!("{b} B"),
    }
}
