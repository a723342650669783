//! `harness nightly --detect`: how long random faults take to find each bug switch.
//!
//! For each bug switch and each of `--seeds` seeds, random replicated cells of the nightly
//! matrix (a cell with one copy of everything has no replication to break)
//! run with that switch on, one after another, until the checkers judge a run invalid
//! or the seed's `--detect-limit` is spent. The time to detect is the wall-clock time
//! from the seed's first run starting to the verdict of the run that found it: what a
//! nightly job would need. No scripted schedule: the scenarios' steps are not used.
//! A cell starts only while its shortest client phase fits in what is left of the
//! seed's limit and of the night's budget.

use std::path::Path;
use std::time::Instant;

use anyhow::Result;
use report::nightly::{detect_median, DetectResult, DetectSeed, Status};
use rng::Rng;
use spec::RunFolder;

use super::args::NightlyArgs;
use super::cells::run_cell;
use super::matrix::{self, Cell};
use super::night::Night;
use crate::lifecycle::Broker;

/// The shortest and longest client phase of a detection run, longer than the matrix's
/// (at most [`matrix::MAX_TIME_LIMIT_SECS`]). Short runs mean more fresh clusters per
/// hour, but each run also pays about 20 s of start, heal, probes (the one-down probe
/// waits out a session timeout) and checks, and an aimed strike takes 5 to 30 s (a flap
/// that first puts a replica behind waits for the ISR to drop it, a controller cut for
/// a successor): a phase of 15 to 40 s held one or two strikes; one of 30 to 60 s made
/// 2.2 to 2.4 on average, a third of the runs one, so that a run struck only some of the
/// kinds of strike it drew; 45 to 90 s gives each of them room, and a third less of the
/// search goes to the per-run costs. An RF-1-then-grow cell grows within its first 5 s.
pub const DETECT_TIME_LIMIT_SECS: (f64, f64) = (45.0, 90.0);

/// The share (percent) of drawn detection cells with two copies of each partition that
/// are kept (the others are drawn again): a third replica is what most of a replicated
/// log's states need (a follower catching up while leadership moves between two others,
/// a leader with a choice of followers, a quorum that survives one loss), and Kafka runs
/// with three. Of the replicated cells the matrix draws a third have two copies; a
/// search keeps one in six of its runs at two.
pub const DETECT_RF2_KEPT_PERCENT: u32 = 40;

/// The share (percent) of the detection cells the matrix drew without RF-1-then-grow
/// that grow their topic all the same: a replication factor that changes under load is
/// a path of its own through the broker (a leader whose partition was created with one
/// copy, a replica created mid-stream) that no fault reaches otherwise, and the matrix's
/// quarter left a 6-minute search of five or six runs without one a fifth of the time.
/// With it, about 44% of the detection cells grow.
pub const DETECT_MORE_GROW_PERCENT: u32 = 25;

/// One in this many of a search's runs is lossy, the others never are: the lossy
/// replication profile is the one in which a follower can be ahead of its leader (an
/// unclean election), a state of its own that no other cell reaches, while the other
/// cells judge every durability promise. Drawn independently per run (36% of them), a
/// search of seven runs had one lossy run or none a third of the time (KAFKA-2143
/// searches at f1db197: one of 8 runs, three of 7); by turns, every third run is, from
/// an offset drawn from the search's seed ([`lossy_turn`]). Lossy cells are judged, as
/// in the matrix, on what that profile still promises.
pub const DETECT_LOSSY_EVERY: u32 = 3;

/// The mean time between a detection cell's nemesis steps, in tenths of a second (1 to
/// 4 s; the matrix draws 2 to 8 s): a detection run is short, and a fault sequence
/// needs several faults within it.
pub const DETECT_INTERVAL_TENTHS: (u64, u64) = (10, 40);

/// Whether run `run` (from 0) of the search of `seed` is lossy: every
/// [`DETECT_LOSSY_EVERY`]th, the first of them at an offset drawn from `seed`.
pub fn lossy_turn(seed: u64, run: usize) -> bool {
    let every = u64::from(DETECT_LOSSY_EVERY);
    let offset = Rng::derive(seed, "detect-lossy", 0).below(every);
    (run as u64 + offset).is_multiple_of(every)
}

/// The seed of `bug`'s `index`-th search: independent of the other bugs' seeds.
pub fn seed_for(night_seed: u64, bug: &str, index: u32) -> u64 {
    let mut mix = Rng::new(night_seed ^ u64::from(index).wrapping_mul(0x9e37_79b9));
    for byte in bug.bytes() {
        mix = Rng::new(mix.next_u64() ^ u64::from(byte));
    }
    mix.next_u64() >> 1
}

/// A cell of the matrix whose partitions are replicated, or come to be (RF-1-then-grow):
/// a cell that keeps one copy of everything has no replication for a bug to break, so
/// a search spends no time on it. Cells are drawn until one is (from the same seed).
/// Three copies are preferred: of the cells with two, [`DETECT_RF2_KEPT_PERCENT`] are
/// kept, the rest drawn again.
///
/// Its faults are a swarm over every package (`--nemesis all --nemesis-swarm P`, P drawn
/// in [`matrix::SWARM_PERIODS_SECS`]): each period a random subset of them, a quarter of
/// the periods calm. A fixed mix per cell left a third of a search's runs without any
/// package that could bring about a given kind of bug (a controller's soft failure, a
/// leadership flap); a swarm gives every package periods of its own in every run, and
/// periods that leave out the faults that would mask another's (Groce et al.). Its
/// steps come [`DETECT_INTERVAL_TENTHS`] apart on average, denser than a night's, and
/// more of the cells grow their topic ([`DETECT_MORE_GROW_PERCENT`]). The cell is lossy
/// when `lossy` says so ([`lossy_turn`]), and otherwise never (a lossy draw of the
/// matrix's is drawn again).
pub fn draw_replicated(
    rng: &mut Rng,
    max_time_limit_secs: f64,
    max_nodes: u32,
    lossy: bool,
) -> Cell {
    loop {
        let longest = max_time_limit_secs.min(DETECT_TIME_LIMIT_SECS.1);
        let mut cell = Cell::draw_timed(rng, DETECT_TIME_LIMIT_SECS.0, longest, max_nodes);
        let kept = match cell.replication_factor {
            _ if cell.lossy && !lossy => false,
            0 | 1 => false,
            2 => rng.percent(DETECT_RF2_KEPT_PERCENT),
            _ => true,
        };
        if kept {
            cell.nemesis = "all";
            cell.swarm_secs =
                Some(rng.between(matrix::SWARM_PERIODS_SECS.0, matrix::SWARM_PERIODS_SECS.1));
            cell.nemesis_interval_secs =
                rng.between(DETECT_INTERVAL_TENTHS.0, DETECT_INTERVAL_TENTHS.1) as f64 / 10.0;
            let grow = rng.percent(DETECT_MORE_GROW_PERCENT);
            let grow_after = rng.between(matrix::GROW_AFTER_SECS.0, matrix::GROW_AFTER_SECS.1);
            if grow && cell.grow_after_secs.is_none() {
                // As the matrix's grown cells: never a wipe, a single copy being the
                // only one until the grow lands.
                cell.grow_after_secs = Some(grow_after);
                cell.wipe = false;
            }
            if lossy && !cell.lossy {
                // As the matrix's lossy cells: `min_insync_replicas = 1`, never a wipe.
                cell.lossy = true;
                cell.min_insync_replicas = 1;
                cell.wipe = false;
            }
            return cell;
        }
    }
}

/// Runs the searches; each finished seed is added to the night's summary at once.
pub fn run(
    args: &NightlyArgs,
    bugs: &[String],
    night: &mut Night,
    runtime: &tokio::runtime::Runtime,
    broker: &Broker,
) -> Result<()> {
    let limit = args.detect_limit.as_secs_f64();
    'bugs: for bug in bugs {
        night.summary.detect.push(DetectResult {
            bug: bug.clone(),
            seeds: Vec::new(),
            median_secs: None,
        });
        for index in 0..args.seeds {
            let seed = seed_for(night.summary.seed, bug, index);
            let mut rng = Rng::new(seed);
            let began = Instant::now();
            let mut result = DetectSeed {
                seed,
                found: false,
                late: false,
                secs: 0.0,
                runs: 0,
                run_id: None,
                anomalies: Vec::new(),
                run_seed: None,
                faults: Vec::new(),
                command: None,
            };
            loop {
                let left =
                    (limit - began.elapsed().as_secs_f64()).min(night.remaining().as_secs_f64());
                let room = left - night.overhead_secs();
                if room < matrix::MIN_TIME_LIMIT_SECS {
                    break;
                }
                let lossy = lossy_turn(seed, result.runs);
                let cell = draw_replicated(&mut rng, room, night.max_nodes, lossy);
                result.runs += 1;
                let id = format!("{}-s{}-r{:02}", bug.to_lowercase(), index + 1, result.runs);
                let run = run_cell(
                    args,
                    night,
                    runtime,
                    broker,
                    id.clone(),
                    &cell,
                    std::slice::from_ref(bug),
                )?;
                let flagged = run.status == Status::Fail;
                if flagged {
                    result.found = true;
                    result.run_id = Some(id);
                    result.anomalies = run.anomalies.keys().cloned().collect();
                    result.run_seed = run.seed;
                    result.command = Some(run.command.clone());
                    result.faults = run.run_dir.as_deref().map(faults_of).unwrap_or_default();
                }
                night.add(run)?;
                if flagged {
                    break;
                }
            }
            result.secs = began.elapsed().as_secs_f64();
            count_within(&mut result, limit);
            println!(
                "{bug} seed {} ({seed}): {} after {:.0} s and {} runs",
                index + 1,
                if result.found {
                    "FOUND"
                } else if result.late {
                    "found only after the limit (not counted)"
                } else {
                    "not found"
                },
                result.secs,
                result.runs
            );
            let out_of_budget = !result.found && night.remaining().as_secs_f64() < limit;
            if let Some(entry) = night.summary.detect.last_mut() {
                entry.seeds.push(result);
                entry.median_secs = detect_median(&entry.seeds);
            }
            night.write()?;
            if out_of_budget && night.remaining().as_secs_f64() < night.overhead_secs() {
                println!("the budget is spent; stopping the search");
                break 'bugs;
            }
        }
    }
    print_table(&night.summary.detect);
    Ok(())
}

/// A find counts only when its run's verdict came within the seed's `limit` (seconds):
/// a run starts only while its client phase fits, but a cluster slow to heal or a
/// long check can take its verdict past the limit; such a find is `late`, not `found`.
fn count_within(result: &mut DetectSeed, limit: f64) {
    if result.found && result.secs > limit {
        result.found = false;
        result.late = true;
    }
}

/// The nemesis operations of a stored run by `f`, with counts (`kill ×3`), from its
/// `stats.json`; none when it cannot be read.
fn faults_of(run_dir: &Path) -> Vec<String> {
    let stats = RunFolder::open(run_dir).read_stats().ok().flatten();
    let Some(tally) = stats.and_then(|s| s.nemesis) else {
        return Vec::new();
    };
    tally
        .by_f
        .iter()
        .map(|(f, count)| format!("{f} ×{count}"))
        .collect()
}

fn print_table(results: &[DetectResult]) {
    println!();
    println!(
        "{:11}  {:>5}  {:>12}  per seed (s)",
        "bug switch", "found", "median"
    );
    for result in results {
        let found = result.seeds.iter().filter(|s| s.found).count();
        let median = match result.median_secs {
            Some(secs) => format!("{secs:.0} s"),
            None => "not found".to_string(),
        };
        let per_seed: Vec<String> = result
            .seeds
            .iter()
            .map(|s| {
                if s.found {
                    format!("{:.0}", s.secs)
                } else if s.late {
                    format!("late:{:.0}", s.secs)
                } else {
                    format!(">{:.0}", s.secs)
                }
            })
            .collect();
        println!(
            "{:11}  {:>2}/{:<2}  {:>12}  {}",
            result.bug,
            found,
            result.seeds.len(),
            median,
            per_seed.join(" ")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_find_after_the_limit_is_late_not_found() {
        let seed = |found: bool, secs: f64| DetectSeed {
            seed: 1,
            found,
            late: false,
            secs,
            runs: 4,
            run_id: found.then(|| "r".to_string()),
            anomalies: Vec::new(),
            run_seed: None,
            faults: Vec::new(),
            command: None,
        };
        let mut within = seed(true, 599.0);
        count_within(&mut within, 600.0);
        assert!(within.found && !within.late);
        let mut late = seed(true, 689.0);
        count_within(&mut late, 600.0);
        assert!(!late.found && late.late);
        assert_eq!(late.run_id.as_deref(), Some("r"), "the run is still named");
        let mut missed = seed(false, 640.0);
        count_within(&mut missed, 600.0);
        assert!(!missed.found && !missed.late);
    }

    #[test]
    fn a_search_is_lossy_every_third_run_from_a_seeded_offset() {
        let mut firsts = std::collections::BTreeSet::new();
        for seed in 0..60 {
            let turns: Vec<bool> = (0..9).map(|run| lossy_turn(seed, run)).collect();
            assert_eq!(turns.iter().filter(|t| **t).count(), 3, "{turns:?}");
            let first = turns.iter().position(|t| *t).expect("a lossy run");
            assert!(first < 3, "{turns:?}");
            assert!(turns[first + 3] && turns[first + 6], "{turns:?}");
            firsts.insert(first);
        }
        assert_eq!(
            firsts.len(),
            3,
            "the first lossy run is any of the first three"
        );
    }

    #[test]
    fn seeds_differ_per_bug_and_index_and_follow_the_night() {
        let a = seed_for(1, "KAFKA-7128", 0);
        assert_eq!(a, seed_for(1, "KAFKA-7128", 0));
        assert_ne!(a, seed_for(1, "KAFKA-7128", 1));
        assert_ne!(a, seed_for(1, "KAFKA-7040", 0));
        assert_ne!(a, seed_for(2, "KAFKA-7128", 0));
    }

    #[test]
    fn detection_cells_are_long_replicated_swarms() {
        let mut rng = Rng::new(seed_for(5, "KAFKA-1561", 0));
        let mut again = Rng::new(seed_for(5, "KAFKA-1561", 0));
        let (mut grown, mut two, mut lossy, mut long) = (0, 0, 0, 0);
        for run in 0..300 {
            let turn = lossy_turn(17, run);
            let cell = draw_replicated(&mut rng, DETECT_TIME_LIMIT_SECS.1, 5, turn);
            assert_eq!(
                cell,
                draw_replicated(&mut again, DETECT_TIME_LIMIT_SECS.1, 5, turn),
                "the same seed, the same cells"
            );
            assert_eq!(cell.lossy, turn, "lossy by turns, and only then");
            assert!(cell.replication_factor >= 2, "{}", cell.description());
            assert_eq!(cell.nemesis, "all");
            let period = cell.swarm_secs.expect("a swarm");
            assert!(
                (matrix::SWARM_PERIODS_SECS.0..=matrix::SWARM_PERIODS_SECS.1).contains(&period)
            );
            grown += usize::from(cell.grow_after_secs.is_some());
            two += usize::from(cell.replication_factor == 2);
            lossy += usize::from(cell.lossy);
            long += usize::from(cell.time_limit_secs > matrix::MAX_TIME_LIMIT_SECS);
            if cell.lossy {
                assert_eq!(cell.min_insync_replicas, 1, "{}", cell.description());
                assert!(!cell.wipe, "{}", cell.description());
            }
            assert!((1.0..=4.0).contains(&cell.nemesis_interval_secs));
            assert!(
                (DETECT_TIME_LIMIT_SECS.0..=DETECT_TIME_LIMIT_SECS.1)
                    .contains(&cell.time_limit_secs),
                "{}",
                cell.description()
            );
            if let Some(after) = cell.grow_after_secs {
                assert!(after as f64 <= cell.time_limit_secs / 3.0);
                assert!(!cell.wipe, "{}", cell.description());
            }
        }
        // Two thirds of the phases are longer than the matrix's longest: 200 expected.
        assert!((170..=230).contains(&long), "{long} of 300 cells longer");
        assert_eq!(lossy, 100, "every third cell lossy");
        // About 44% grow: 132 expected of 300.
        assert!(
            (100..=165).contains(&grown),
            "{grown} of 300 cells RF-1-then-grow"
        );
        // One in six at two copies: 50 expected of 300.
        assert!(
            (25..=80).contains(&two),
            "{two} of 300 cells with two copies"
        );
        // Near the end of a seed's limit a shorter run still fits.
        let late = draw_replicated(&mut rng, 20.0, 5, false);
        assert!(
            (matrix::MIN_TIME_LIMIT_SECS..=20.0).contains(&late.time_limit_secs),
            "{}",
            late.description()
        );
    }
}
