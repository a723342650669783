//! A night in progress: its folder, its summary (rewritten after every run), the night
//! before it to compare with, and the time left of its budget.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use report::nightly::{self as summary, NightlyRun, NightlySummary, RunKind, Status};

use super::args::{NightlyArgs, FIRST_OVERHEAD_GUESS_SECS};

/// A night in progress: its folder, the summary so far, the previous night.
pub struct Night {
    pub dir: PathBuf,
    pub summary: NightlySummary,
    previous: Option<(String, NightlySummary)>,
    started: Instant,
    budget: Duration,
    /// Seconds tests took beyond their client phase, to plan the next one.
    overheads: Vec<f64>,
    /// The most nodes a test may have (the hosts there are).
    pub max_nodes: u32,
}

impl Night {
    pub(super) fn new(
        args: &NightlyArgs,
        seed: u64,
        broker_bin: &Path,
        dir: PathBuf,
    ) -> Result<Night> {
        let mode = if args.detect { "detect" } else { "nightly" };
        let previous = previous_night(&args.store, &dir, mode);
        if let Some((name, _)) = &previous {
            println!("compared with the night of {name}");
        }
        let summary = NightlySummary {
            mode: mode.to_string(),
            started: chrono::Local::now().to_rfc3339(),
            finished: None,
            budget_secs: args.budget.as_secs_f64(),
            seed,
            command: std::env::args().collect::<Vec<_>>().join(" "),
            broker_bin: spec::folder::shown_path(broker_bin),
            runs: Vec::new(),
            detect: Vec::new(),
        };
        let night = Night {
            dir,
            summary,
            previous,
            started: Instant::now(),
            budget: args.budget,
            overheads: Vec::new(),
            max_nodes: 5,
        };
        night.write()?;
        Ok(night)
    }

    /// Time left of the budget.
    pub fn remaining(&self) -> Duration {
        self.budget.saturating_sub(self.started.elapsed())
    }

    /// The overhead to plan with: the mean so far, or a guess.
    pub fn overhead_secs(&self) -> f64 {
        if self.overheads.is_empty() {
            FIRST_OVERHEAD_GUESS_SECS
        } else {
            self.overheads.iter().sum::<f64>() / self.overheads.len() as f64
        }
    }

    pub fn record_overhead(&mut self, secs: f64) {
        if secs.is_finite() && secs > 0.0 {
            self.overheads.push(secs);
        }
    }

    /// Adds a run and rewrites the summary files.
    pub fn add(&mut self, run: NightlyRun) -> Result<()> {
        println!(
            "[{}] {} {}: {}{} ({:.0} s)",
            run.id,
            match run.kind {
                RunKind::Matrix => "test",
                RunKind::Repro => "repro",
            },
            run.key,
            status_name(run.status),
            anomaly_suffix(&run),
            run.secs
        );
        self.summary.runs.push(run);
        self.write()
    }

    /// How each run compares with the previous night.
    pub fn changes(&self) -> Vec<summary::Change> {
        summary::compare(self.previous.as_ref().map(|(_, s)| s), &self.summary)
    }

    /// Rewrites `summary.json`, `summary.html` and `junit.xml`.
    pub fn write(&self) -> Result<()> {
        let changes = summary::compare(self.previous.as_ref().map(|(_, s)| s), &self.summary);
        spec::folder::write_json(&self.dir.join("summary.json"), &self.summary)?;
        let html = summary::render_html(
            &self.summary,
            &changes,
            self.previous.as_ref().map(|(name, _)| name.as_str()),
            &self.dir,
        );
        write_file(&self.dir.join("summary.html"), html.as_bytes())?;
        write_file(
            &self.dir.join("junit.xml"),
            summary::junit_xml(&self.summary).as_bytes(),
        )?;
        Ok(())
    }

    pub(super) fn finish(&mut self) -> Result<()> {
        self.summary.finished = Some(chrono::Local::now().to_rfc3339());
        self.write()?;
        let changes = summary::compare(self.previous.as_ref().map(|(_, s)| s), &self.summary);
        let count = |status: Status| {
            self.summary
                .runs
                .iter()
                .filter(|r| r.status == status)
                .count()
        };
        let new_failures = changes
            .iter()
            .filter(|c| **c == summary::Change::NewFailure)
            .count();
        println!();
        println!(
            "{} runs in {:.0} s: {} passed, {} failed, {} errors, {} unknown; {} new failures",
            self.summary.runs.len(),
            self.started.elapsed().as_secs_f64(),
            count(Status::Pass),
            count(Status::Fail),
            count(Status::Error),
            count(Status::Unknown),
            new_failures
        );
        for index in summary::listing_order(&changes) {
            let run = &self.summary.runs[index];
            if run.status != Status::Pass {
                println!(
                    "  {:13} {} {}: {}{}",
                    change_name(changes[index]),
                    run.id,
                    run.key,
                    status_name(run.status),
                    anomaly_suffix(run)
                );
            }
        }
        println!("summary: {}", self.dir.join("summary.html").display());
        println!("junit: {}", self.dir.join("junit.xml").display());
        Ok(())
    }

    /// A night: 0 when every run passed, 1 when one failed or erred, 2 when the worst was
    /// unknown. `--detect`: 0 when every bug switch was found with a median time within
    /// [`summary::DETECT_LIMIT_SECS`], 1 otherwise (its runs are meant to fail).
    pub(super) fn exit_code(&self) -> i32 {
        if self.summary.mode == "detect" {
            let all_found = self.summary.detect.iter().all(|result| {
                result
                    .median_secs
                    .is_some_and(|median| median <= summary::DETECT_LIMIT_SECS)
            });
            return if all_found { 0 } else { 1 };
        }
        let statuses: Vec<Status> = self.summary.runs.iter().map(|r| r.status).collect();
        if statuses
            .iter()
            .any(|s| matches!(s, Status::Fail | Status::Error))
        {
            1
        } else if statuses.contains(&Status::Unknown) {
            2
        } else {
            0
        }
    }
}

fn status_name(status: Status) -> &'static str {
    match status {
        Status::Pass => "pass",
        Status::Fail => "FAIL",
        Status::Error => "ERROR",
        Status::Unknown => "unknown",
    }
}

fn change_name(change: summary::Change) -> &'static str {
    match change {
        summary::Change::NewFailure => "NEW FAILURE",
        summary::Change::StillFailing => "still failing",
        summary::Change::Unknown => "unknown",
        summary::Change::Fixed => "fixed",
        summary::Change::Passing => "passing",
    }
}

fn anomaly_suffix(run: &NightlyRun) -> String {
    if run.anomalies.is_empty() {
        match &run.error {
            Some(error) => format!(": {error}"),
            None => String::new(),
        }
    } else {
        let kinds: Vec<String> = run
            .anomalies
            .iter()
            .map(|(kind, n)| format!("{kind}×{n}"))
            .collect();
        format!(" ({})", kinds.join(", "))
    }
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    // Written whole and renamed, so a reader never sees half a summary.
    let partial = path.with_extension("partial");
    std::fs::write(&partial, bytes)
        .with_context(|| format!("cannot write {}", partial.display()))?;
    std::fs::rename(&partial, path).with_context(|| format!("cannot write {}", path.display()))
}

/// `<store>/nightly/<YYYYMMDDTHHMMSS>/`.
pub(super) fn create_night_dir(store: &Path) -> Result<PathBuf> {
    Ok(spec::RunFolder::create(store, "nightly")?
        .dir()
        .to_path_buf())
}

/// The latest earlier night of `mode` in the store (its folder name and summary).
fn previous_night(store: &Path, current: &Path, mode: &str) -> Option<(String, NightlySummary)> {
    let mut nights: Vec<PathBuf> = std::fs::read_dir(store.join("nightly"))
        .ok()?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.is_dir() && !path.is_symlink())
        .filter(|path| path.file_name() != current.file_name())
        .collect();
    nights.sort();
    nights.into_iter().rev().find_map(|path| {
        let text = std::fs::read_to_string(path.join("summary.json")).ok()?;
        let summary: NightlySummary = serde_json::from_str(&text).ok()?;
        if summary.mode != mode {
            return None;
        }
        let name = path.file_name()?.to_string_lossy().into_owned();
        // Nights are named by their start time; only earlier ones count.
        (name.as_str() < current.file_name()?.to_string_lossy().as_ref()).then_some((name, summary))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_previous_night_is_the_latest_earlier_one_of_the_same_mode() {
        let dir = std::env::temp_dir().join(format!("nightly-prev-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let nights = dir.join("nightly");
        let write = |name: &str, mode: &str| {
            let night = nights.join(name);
            std::fs::create_dir_all(&night).unwrap();
            let summary = NightlySummary {
                mode: mode.into(),
                started: String::new(),
                finished: None,
                budget_secs: 1.0,
                seed: 1,
                command: String::new(),
                broker_bin: String::new(),
                runs: Vec::new(),
                detect: Vec::new(),
            };
            std::fs::write(
                night.join("summary.json"),
                serde_json::to_string(&summary).unwrap(),
            )
            .unwrap();
            night
        };
        write("20261101T010000", "nightly");
        write("20261102T010000", "detect");
        let current = write("20261103T010000", "nightly");
        write("20261104T010000", "nightly");
        std::fs::create_dir_all(nights.join("20261102T120000")).unwrap(); // no summary
        let found = previous_night(&dir, &current, "nightly").map(|(name, _)| name);
        assert_eq!(found.as_deref(), Some("20261101T010000"));
        let first = nights.join("20261101T010000");
        assert!(previous_night(&dir, &first, "nightly").is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
