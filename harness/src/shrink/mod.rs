//! `harness shrink RUN`: a failing random run turned into a minimal scenario file.
//!
//! 1. **Lift** the run ([`lift`]): its cluster, settings, switches, topic and load, and
//!    every fault the nemesis recorded, as a scenario of timed steps.
//! 2. **Measure** how often the lifted file reproduces the failure: `--tries` plays with
//!    the switch on; a play reproduces it when the checkers say `invalid` with at least
//!    one of the run's anomaly kinds.
//! 3. **Minimize** the faults by delta debugging ([`ddmin`]): a candidate is kept when it
//!    reproduces in at least [`Shrink::threshold`] of its plays (a candidate's plays stop
//!    as soon as the answer is known), until the search ends or `--budget` is spent (the
//!    best so far is kept); then, budget left, a load that stops
//!    [`WORKLOAD_AFTER_LAST_FAULT`] after the last kept fault, kept on the same terms.
//! 4. **Write** the scenario file (`--out`, else `shrunk.toml` in the shrink's folder),
//!    each step commented, its reproduction rate measured again (`--tries` plays) and
//!    said in its summary; and `shrink.json` / `shrink.md` beside it: every candidate
//!    tried, its plays and verdicts, the fault counts and the time spent.
//!
//! The verdicts are the checkers' alone: nothing here reads which switch is on.

pub mod ddmin;
pub mod lift;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use serde::Serialize;

use crate::lifecycle::Broker;
use crate::scenario::run::{play, Mode};
use crate::scenario::Scenario;
use ddmin::Ddmin;
use lift::{Lifted, Provenance};

#[derive(Debug, Args)]
pub struct ShrinkArgs {
    /// The failing run's folder (`<store>/<test>/<time>`).
    #[arg(value_name = "RUN")]
    pub run: PathBuf,

    /// Stop minimizing after this long (the best scenario so far is written).
    #[arg(long, default_value = "30m", value_parser = spec::duration::parse_duration)]
    pub budget: Duration,

    /// Plays per candidate (and for the lifted and the final file).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub tries: u32,

    /// Where to write the scenario file (default: `shrunk.toml` in the shrink's folder).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,

    /// Only lift the run and write the scenario with every fault; play nothing.
    #[arg(long)]
    pub lift_only: bool,

    /// Where the shrink's plays are stored: `<store>/shrink/<time>/`.
    #[arg(long, default_value = "store", value_name = "DIR")]
    pub store: PathBuf,

    /// A broker binary to run instead of building this workspace's (with failpoints).
    #[arg(long, value_name = "PATH")]
    pub broker_bin: Option<PathBuf>,
}

/// One candidate tried: its faults and its plays.
#[derive(Debug, Clone, Serialize)]
pub struct Tried {
    /// `lifted`, `candidate` or `final`.
    pub stage: &'static str,
    pub faults: Vec<usize>,
    /// Per play: its verdict and anomaly kinds (`invalid: roles-not-converged`).
    pub plays: Vec<String>,
    pub reproduced: u32,
    pub kept: bool,
    pub secs: f64,
}

/// What a shrink came to (`shrink.json`).
#[derive(Debug, Clone, Serialize)]
pub struct ShrinkReport {
    pub run: PathBuf,
    pub kinds: BTreeMap<String, u64>,
    pub original_faults: usize,
    pub final_faults: usize,
    pub tries: u32,
    pub threshold: u32,
    pub lifted_reproduced: u32,
    pub final_reproduced: u32,
    /// Whether delta debugging ran to its end (the result is then 1-minimal).
    pub minimal: bool,
    pub secs: f64,
    pub scenario: PathBuf,
    /// Where the candidates, their plays and this report are.
    pub folder: PathBuf,
    pub skipped: Vec<String>,
    pub tried: Vec<Tried>,
}

/// How long the load of a shrunk scenario goes on after its last fault was done.
const WORKLOAD_AFTER_LAST_FAULT: Duration = Duration::from_secs(10);

/// The state of one shrink.
struct Shrink<'a> {
    lifted: &'a Lifted,
    /// The run's anomaly kinds, as the candidates expect them.
    expect: Vec<String>,
    dir: PathBuf,
    broker: &'a Broker,
    runtime: &'a tokio::runtime::Runtime,
    tries: u32,
    /// Plays out of `tries` a candidate must reproduce in.
    threshold: u32,
    tried: Vec<Tried>,
    /// Per kind, in how many reproducing plays of the current best it appeared.
    seen: BTreeMap<String, u32>,
}

/// What one shrink is given (the command's flags, or the nightly's).
#[derive(Debug, Clone)]
pub struct ShrinkOptions {
    pub run: PathBuf,
    pub budget: Duration,
    pub tries: u32,
    /// Where to write the file (default: `shrunk.toml` in the shrink's folder).
    pub out: Option<PathBuf>,
    /// The store, whose `shrink/<time>/` holds the shrink's plays and reports.
    pub store: PathBuf,
}

/// Runs `harness shrink`; the exit code: 0 when a scenario reproducing the failure was
/// written, 1 when the lifted run does not reproduce it.
pub fn run(args: &ShrinkArgs) -> Result<i32> {
    check_args(args)?;
    let options = ShrinkOptions {
        run: args.run.clone(),
        budget: args.budget,
        tries: args.tries,
        out: args.out.clone(),
        store: args.store.clone(),
    };
    if args.lift_only {
        let lifted = lift::lift(&args.run)?;
        announce(&lifted);
        let all: Vec<usize> = (0..lifted.faults.len()).collect();
        let expect: Vec<String> = lifted.kinds.keys().cloned().collect();
        let out = match &args.out {
            Some(out) => out.clone(),
            None => shrink_dir(&args.store)?.join("lifted.toml"),
        };
        write_checked(&out, &lifted.render(&all, &expect, &Provenance::default()))?;
        println!("scenario: {}", out.display());
        return Ok(0);
    }
    let broker = Broker::resolve(args.broker_bin.as_deref())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let report = shrink_run(&options, &runtime, &broker)?;
    if report.final_reproduced == 0 {
        eprintln!(
            "the lifted scenario did not reproduce the failure in {} play(s): nothing to shrink \
             (it is written to {} as lifted)",
            report.tries,
            report.scenario.display()
        );
        return Ok(1);
    }
    println!(
        "scenario: {} ({} of {} faults, reproduced in {} of {} plays)",
        report.scenario.display(),
        report.final_faults,
        report.original_faults,
        report.final_reproduced,
        report.tries
    );
    Ok(0)
}

fn announce(lifted: &Lifted) {
    eprintln!(
        "lifted {}: {} fault(s), failing with {}{}",
        lifted.run.display(),
        lifted.faults.len(),
        lifted.kinds.keys().cloned().collect::<Vec<_>>().join(", "),
        if lifted.skipped.is_empty() {
            String::new()
        } else {
            format!(
                " ({} nemesis operation(s) not lifted)",
                lifted.skipped.len()
            )
        }
    );
}

/// A fresh `<store>/shrink/<time>/` (a suffix when that second is taken).
fn shrink_dir(store: &Path) -> Result<PathBuf> {
    let stamp = chrono::Local::now().format("%Y%m%dT%H%M%S").to_string();
    let base = store.join("shrink");
    std::fs::create_dir_all(&base).with_context(|| format!("cannot create {}", base.display()))?;
    for n in 0..100 {
        let name = if n == 0 {
            stamp.clone()
        } else {
            format!("{stamp}-{n}")
        };
        let dir = base.join(name);
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot create {}", dir.display())),
        }
    }
    bail!("cannot make a fresh folder in {}", base.display())
}

/// Lifts, measures, minimizes and writes one shrink (see the module docs); its report.
/// When the lifted file does not reproduce the failure, it is written as lifted and the
/// report's `final_reproduced` is 0.
pub fn shrink_run(
    options: &ShrinkOptions,
    runtime: &tokio::runtime::Runtime,
    broker: &Broker,
) -> Result<ShrinkReport> {
    let began = Instant::now();
    let lifted = lift::lift(&options.run)?;
    announce(&lifted);
    let expect: Vec<String> = lifted.kinds.keys().cloned().collect();
    let dir = shrink_dir(&options.store)?;
    let out = options
        .out
        .clone()
        .unwrap_or_else(|| dir.join("shrunk.toml"));
    let all: Vec<usize> = (0..lifted.faults.len()).collect();
    let mut shrink = Shrink {
        lifted: &lifted,
        expect: expect.clone(),
        dir: dir.clone(),
        broker,
        runtime,
        tries: options.tries,
        threshold: options.tries,
        tried: Vec::new(),
        seen: BTreeMap::new(),
    };
    // The lifted run: how often it reproduces, all plays made.
    let baseline = shrink.try_faults("lifted", &all, false)?;
    if baseline == 0 {
        let text = lifted.render(&all, &expect, &Provenance::default());
        write_checked(&out, &text)?;
        return shrink.write_report(&out, 0, lifted.faults.len(), false, began);
    }
    // A candidate must reproduce nearly as often as the whole: 4 of 5 when the whole did
    // 5 of 5, at least once.
    shrink.threshold = ((baseline * 4).div_ceil(5)).max(1);
    eprintln!(
        "the lifted scenario reproduced in {baseline} of {} plays; a candidate must in {}",
        options.tries, shrink.threshold
    );
    let mut search = Ddmin::new(lifted.faults.len());
    while began.elapsed() < options.budget {
        let Some(candidate) = search.propose() else {
            break;
        };
        let hits = shrink.try_faults("candidate", &candidate, true)?;
        let kept = hits >= shrink.threshold;
        if let Some(last) = shrink.tried.last_mut() {
            last.kept = kept;
        }
        search.report(kept);
        eprintln!(
            "  {} fault(s): reproduced {hits} time(s) — {} ({:.0} s spent)",
            candidate.len(),
            if kept { "kept" } else { "dropped" },
            began.elapsed().as_secs_f64()
        );
    }
    let minimal = search.is_done();
    let best = search.best().to_vec();
    // Then a shorter load: until a little after the last kept fault was done.
    let mut lifted_best = lifted.clone();
    if let Some(length) = lifted.workload_for() {
        let shorter = lifted.last_done(&best) + WORKLOAD_AFTER_LAST_FAULT;
        if began.elapsed() < options.budget && shorter + WORKLOAD_AFTER_LAST_FAULT <= length {
            let candidate = lifted.with_workload_for(shorter);
            let mut trial = Shrink {
                lifted: &candidate,
                ..shrink.fork()
            };
            let hits = trial.try_faults("shorter-load", &best, true)?;
            let kept = hits >= trial.threshold;
            if let Some(last) = trial.tried.last_mut() {
                last.kept = kept;
            }
            eprintln!(
                "  the load cut to {:.0} s: reproduced {hits} time(s) — {}",
                shorter.as_secs_f64(),
                if kept { "kept" } else { "dropped" }
            );
            shrink.tried = trial.tried;
            if kept {
                lifted_best = candidate;
            }
        }
    }
    let lifted = &lifted_best;
    shrink.lifted = lifted;
    // The final file, measured again with every play made; its expectation is the kinds
    // every reproducing play showed (else those any did).
    shrink.seen.clear();
    let final_hits = shrink.try_faults("final", &best, false)?;
    let expect = shrink.final_expectation();
    let provenance = Provenance {
        lines: vec![
            format!(
                "Reproduced in {final_hits} of {} plays with the switch on (the lifted run: {baseline} of {}).",
                options.tries, options.tries
            ),
            format!(
                "Shrunk from {} to {} fault(s) in {:.0} s{}.",
                lifted.faults.len(),
                best.len(),
                began.elapsed().as_secs_f64(),
                if minimal {
                    " (1-minimal: no single fault can go)"
                } else {
                    " (the budget ran out before the search ended)"
                }
            ),
        ],
    };
    let text = lifted.render(&best, &expect, &provenance);
    write_checked(&out, &text)?;
    shrink.write_report(&out, final_hits, best.len(), minimal, began)
}

/// Writes `text` to `path` after checking that it loads as a scenario.
fn write_checked(path: &Path, text: &str) -> Result<()> {
    Scenario::parse(path, text)
        .map_err(|e| anyhow!("internal: the written scenario is refused: {e}"))?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

impl<'a> Shrink<'a> {
    /// The same shrink, to try another lifting with (its table goes on).
    fn fork(&self) -> Shrink<'a> {
        Shrink {
            lifted: self.lifted,
            expect: self.expect.clone(),
            dir: self.dir.clone(),
            broker: self.broker,
            runtime: self.runtime,
            tries: self.tries,
            threshold: self.threshold,
            tried: self.tried.clone(),
            seen: self.seen.clone(),
        }
    }

    /// Plays the scenario of `faults` up to `tries` times (with `early`, only until the
    /// answer against the threshold is known); how many plays reproduced the failure.
    fn try_faults(&mut self, stage: &'static str, faults: &[usize], early: bool) -> Result<u32> {
        let began = Instant::now();
        let number = self.tried.len();
        let path = self
            .dir
            .join("candidates")
            .join(format!("c{number:03}.toml"));
        let text = self
            .lifted
            .render(faults, &self.expect, &Provenance::default());
        write_checked(&path, &text)?;
        let scenario = Scenario::load(&path)?;
        let store = self.dir.join("plays");
        let mut plays = Vec::new();
        let mut hits = 0;
        let mut seen: BTreeMap<String, u32> = BTreeMap::new();
        for play_number in 0..self.tries {
            if early {
                let misses = play_number - hits;
                if hits >= self.threshold || misses > self.tries - self.threshold {
                    break;
                }
            }
            let outcome =
                self.runtime
                    .block_on(play(&scenario, Mode::Buggy, &store, self.broker))?;
            let verdict = outcome.verdict.map_or("none", |v| v.as_str());
            let kinds: Vec<&String> = outcome.anomalies.keys().collect();
            let reproduced = verdict == "invalid"
                && kinds
                    .iter()
                    .any(|k| self.lifted.kinds.contains_key(k.as_str()));
            if reproduced {
                hits += 1;
                for kind in kinds
                    .iter()
                    .filter(|k| self.lifted.kinds.contains_key(k.as_str()))
                {
                    *seen.entry((*kind).clone()).or_default() += 1;
                }
            }
            let shown: Vec<&str> = kinds.iter().map(|k| k.as_str()).collect();
            plays.push(format!("{verdict}: {}", shown.join(", ")));
            eprintln!(
                "    play {}: {verdict} ({})",
                play_number + 1,
                if shown.is_empty() {
                    "no anomalies".into()
                } else {
                    shown.join(", ")
                }
            );
        }
        if stage != "candidate" || hits >= self.threshold {
            self.seen = seen;
        }
        self.tried.push(Tried {
            stage,
            faults: faults.to_vec(),
            plays,
            reproduced: hits,
            kept: stage != "candidate",
            secs: began.elapsed().as_secs_f64(),
        });
        Ok(hits)
    }

    /// The kinds every reproducing play of the final file showed; else those any did;
    /// else the run's.
    fn final_expectation(&self) -> Vec<String> {
        let most = self.seen.values().copied().max().unwrap_or(0);
        let every: Vec<String> = self
            .seen
            .iter()
            .filter(|(_, n)| **n == most && most > 0)
            .map(|(k, _)| k.clone())
            .collect();
        if every.is_empty() {
            self.expect.clone()
        } else {
            every
        }
    }

    fn write_report(
        &self,
        scenario: &Path,
        final_hits: u32,
        final_faults: usize,
        minimal: bool,
        began: Instant,
    ) -> Result<ShrinkReport> {
        let lifted_reproduced = self.tried.first().map_or(0, |t| t.reproduced);
        let report = ShrinkReport {
            run: self.lifted.run.clone(),
            kinds: self.lifted.kinds.clone(),
            original_faults: self.lifted.faults.len(),
            final_faults,
            tries: self.tries,
            threshold: self.threshold,
            lifted_reproduced,
            final_reproduced: final_hits,
            minimal,
            secs: began.elapsed().as_secs_f64(),
            scenario: scenario.to_path_buf(),
            folder: self.dir.clone(),
            skipped: self.lifted.skipped.clone(),
            tried: self.tried.clone(),
        };
        spec::folder::write_json(&self.dir.join("shrink.json"), &report)?;
        std::fs::write(self.dir.join("shrink.md"), markdown(&report))?;
        eprintln!("shrink report: {}", self.dir.join("shrink.md").display());
        Ok(report)
    }
}

/// The shrink's report for people: the figures and a table of the candidates.
pub fn markdown(report: &ShrinkReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Shrink of {}\n", report.run.display());
    let _ = writeln!(
        out,
        "- failing with: {}",
        report.kinds.keys().cloned().collect::<Vec<_>>().join(", ")
    );
    let _ = writeln!(
        out,
        "- faults: {} → {}{}",
        report.original_faults,
        report.final_faults,
        if report.minimal {
            " (1-minimal)"
        } else {
            " (budget spent)"
        }
    );
    let _ = writeln!(
        out,
        "- reproduced: lifted {} of {}, final {} of {} (a candidate needed {})",
        report.lifted_reproduced,
        report.tries,
        report.final_reproduced,
        report.tries,
        report.threshold
    );
    let _ = writeln!(out, "- time: {:.0} s", report.secs);
    let _ = writeln!(out, "- scenario: {}\n", report.scenario.display());
    out.push_str(
        "| # | stage | faults | reproduced | kept | plays | s |\n|---|---|---|---|---|---|---|\n",
    );
    for (i, t) in report.tried.iter().enumerate() {
        let _ = writeln!(
            out,
            "| {i} | {} | {} | {}/{} | {} | {} | {:.0} |",
            t.stage,
            t.faults.len(),
            t.reproduced,
            t.plays.len(),
            if t.kept { "yes" } else { "no" },
            t.plays.join("; "),
            t.secs
        );
    }
    if !report.skipped.is_empty() {
        out.push_str("\nNot lifted:\n\n");
        for line in &report.skipped {
            let _ = writeln!(out, "- {line}");
        }
    }
    out
}

/// Refuses a budget the search cannot use.
pub fn check_args(args: &ShrinkArgs) -> Result<()> {
    if args.budget.is_zero() && !args.lift_only {
        bail!("--budget must be above zero");
    }
    Ok(())
}
