//! The nightly matrix: the dimensions a night's random tests are drawn from, and one
//! drawn cell as `harness test` options.
//!
//! Every cell must keep a correct broker valid: a cell whose faults could lose
//! acknowledged writes by design (a wiped node holding the only copy) is not in the
//! matrix. So `min_insync_replicas = 1` and replication factor 1 come only with
//! `--nemesis-wipe false`: a single acknowledged copy is lost with its disk, in Kafka too.
//! The same holds for RF-1-then-grow cells (`--grow-replication-after`): until the
//! reassignment lands, and again if the nemesis's own reassignment puts a partition back
//! on its one replica, a partition has a single copy, so they never wipe either. The one
//! exception is declared: the lossy replication profile gives up acknowledged writes by
//! design, and its runs are judged on what it still promises ([`LOSSY_PROFILE_PERCENT`]).
//!
//! The dimensions: workload × fault mix × cluster size × durability (replication factor,
//! `min_insync_replicas`, wipes) × the replication profile (20% of the cells lossy)
//! × the broker settings the replication bugs depend on (the follower's fetch size,
//! `replica_lag_time_max_ms`, `replica_fetch_wait_max_ms`, the metadata session timeout,
//! the controller's leader rebalance) × the workload's shapes (hot partitions, batch
//! produces, RF-1-then-grow) × partitions, fault interval and length. Each is drawn on
//! its own from the night's seed.

use std::time::Duration;

use nemesis::{PackageKind, TargetSpec};
use rng::Rng;
use spec::{NemesisSpec, WorkloadPlan, WorkloadShape};

/// Fault mixes the matrix draws from (`--nemesis` lists).
pub const NEMESIS_MIXES: &[&str] = &[
    "kill",
    "pause",
    "partition",
    "partition-ports",
    "admin",
    "kill,partition",
    "pause,partition",
    "admin,kill",
    "admin,partition-ports",
    "admin,kill,partition",
    "slow",
    "aimed",
    "aimed,kill",
    "aimed,admin",
    "aimed,partition-ports",
    "slow,kill",
    "slow,admin",
    "slow,partition-ports",
    "aimed,slow",
    "aimed,slow,admin",
    "all",
    "all",
];

/// Swarm periods a cell with several packages may draw (`--nemesis-swarm`): each period
/// a random subset of its packages is on, a quarter of them calm.
pub const SWARM_PERIODS_SECS: (u64, u64) = (5, 15);

/// Durability settings: replication factor, `min_insync_replicas`, and whether the
/// nemesis may wipe a killed node's data (never when a single copy can be acknowledged).
pub const DURABILITY: &[(u32, u32, bool)] =
    &[(3, 2, true), (2, 2, true), (3, 1, false), (1, 1, false)];

/// `replica_fetch_max_records`: one record per fetch (a follower's HW and LEO move in
/// the smallest steps, catching up takes many rounds), a few, the default.
pub const FETCH_MAX_RECORDS: &[u32] = &[1, 5, 500];
/// `replica_lag_time_max_ms`: quick ISR shrinks, a middle, the default.
pub const LAG_TIME_MAX_MS: &[u64] = &[2_000, 5_000, 10_000];
/// `replica_fetch_wait_max_ms`: followers learn the HW at once, the default, late; each
/// below every `LAG_TIME_MAX_MS` (the broker refuses a wait at or above the lag time).
pub const FETCH_WAIT_MAX_MS: &[u64] = &[50, 500, 1_500];
/// `metadata.session_timeout_ms`: quick broker deaths and controller failovers, the
/// default, slow ones.
pub const SESSION_TIMEOUT_MS: &[u64] = &[3_000, 6_000, 15_000];
/// Shares of the log workload's writes sent as batches (0: none).
pub const BATCH_FRACTIONS: &[f64] = &[0.0, 0.0, 0.1, 0.3, 0.6];
/// Largest batch of a cell with batches.
pub const BATCH_MAX: u32 = 10;

/// The share (percent) of cells that run the lossy replication profile (small: most
/// durability anomalies are waived there, so its runs judge less than the others): pre-KIP-101
/// truncation (`truncation_mode = "hw"`) with unclean leader elections. It loses
/// acknowledged writes on a correct broker too, so those runs' durability anomalies are
/// reported and not counted (`harness::waiver`); what it still promises is judged (a
/// replica never cuts its log below what it knew committed while its leader holds it).
/// It is the one profile where a follower can be ahead of its leader (KAFKA-2143's
/// precondition), and so where the `aimed` package strands leaders (`Aim::Strand`: only an
/// election outside the ISR completes one). Its cells run with `min_insync_replicas = 1` (Kafka's default then), so
/// that a leader alone in its ISR keeps taking writes, and never wipe.
pub const LOSSY_PROFILE_PERCENT: u32 = 20;

/// The share (percent) of log cells whose reads ask for linearizable consistency
/// (`--linearizable-reads`): there a read that misses a write acknowledged before it
/// began counts against validity (`stale-read`), as it does for the register; at the
/// default consistency the checker only reports it. An acknowledgement given before the
/// write is committed (one replicated too late, or not at all) shows there at once,
/// without waiting for a failure to lose it.
pub const LINEARIZABLE_READS_PERCENT: u32 = 50;

/// Shortest client phase a run gets.
pub const MIN_TIME_LIMIT_SECS: f64 = 15.0;
/// Longest client phase a run gets.
pub const MAX_TIME_LIMIT_SECS: f64 = 60.0;
/// When an RF-1-then-grow cell grows its topic: 2 to 5 s after the clients start, well
/// within the shortest client phase.
pub const GROW_AFTER_SECS: (u64, u64) = (2, 5);

/// One drawn cell of the matrix, with its seed.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    pub workload: &'static str,
    pub nemesis: &'static str,
    pub nodes: u32,
    pub replication_factor: u32,
    pub min_insync_replicas: u32,
    pub wipe: bool,
    pub settings: BrokerTimings,
    pub hot_partitions: bool,
    pub batch_fraction: f64,
    /// The log workload's reads are linearizable ([`LINEARIZABLE_READS_PERCENT`]).
    pub linearizable_reads: bool,
    /// RF-1-then-grow: seconds after the start at which the topic grows.
    pub grow_after_secs: Option<u64>,
    /// Swarm testing: the period after which the active packages are drawn again.
    pub swarm_secs: Option<u64>,
    /// The lossy replication profile ([`LOSSY_PROFILE_PERCENT`]).
    pub lossy: bool,
    pub partitions: u32,
    pub nemesis_interval_secs: f64,
    pub time_limit_secs: f64,
    pub seed: u64,
}

/// The broker settings a cell draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrokerTimings {
    pub fetch_max_records: u32,
    pub lag_time_max_ms: u64,
    pub fetch_wait_max_ms: u64,
    pub session_timeout_ms: u64,
    /// The controller moves leadership back to preferred replicas every 5 s.
    pub rebalance: bool,
}

fn pick<T: Copy>(rng: &mut Rng, items: &[T]) -> T {
    items[rng.below(items.len() as u64) as usize]
}

impl Cell {
    /// Draws a cell; its client phase is at most `max_time_limit_secs` (at least
    /// [`MIN_TIME_LIMIT_SECS`]); a cell of 5 nodes becomes one of 3 when fewer than 5
    /// hosts are there (`max_nodes`, at least 3). Every dimension is drawn whatever the
    /// others came to, so a cell's draws do not depend on `max_nodes`.
    pub fn draw(rng: &mut Rng, max_time_limit_secs: f64, max_nodes: u32) -> Cell {
        let longest = max_time_limit_secs.min(MAX_TIME_LIMIT_SECS);
        Cell::draw_timed(rng, MIN_TIME_LIMIT_SECS, longest, max_nodes)
    }

    /// [`Cell::draw`] with a client phase between `shortest` and `longest` seconds (both
    /// at least [`MIN_TIME_LIMIT_SECS`]; `longest` wins when they cross; a detection run
    /// may be longer than the matrix's [`MAX_TIME_LIMIT_SECS`]). The same draws as
    /// [`Cell::draw`] in the same order: only the phase's span differs.
    pub fn draw_timed(rng: &mut Rng, shortest: f64, longest: f64, max_nodes: u32) -> Cell {
        let workload = if rng.percent(75) { "log" } else { "register" };
        let nemesis = pick(rng, NEMESIS_MIXES);
        let nodes = if rng.percent(50) || max_nodes < 5 {
            3
        } else {
            5
        };
        let (replication_factor, min_insync_replicas, mut wipe) = pick(rng, DURABILITY);
        let settings = BrokerTimings {
            fetch_max_records: pick(rng, FETCH_MAX_RECORDS),
            lag_time_max_ms: pick(rng, LAG_TIME_MAX_MS),
            fetch_wait_max_ms: pick(rng, FETCH_WAIT_MAX_MS),
            session_timeout_ms: pick(rng, SESSION_TIMEOUT_MS),
            rebalance: rng.percent(25),
        };
        let hot_partitions = rng.percent(50);
        let batch_fraction = pick(rng, BATCH_FRACTIONS);
        let batch_fraction = if workload == "log" {
            batch_fraction
        } else {
            0.0
        };
        let grow = rng.percent(25);
        let grow_after = rng.between(GROW_AFTER_SECS.0, GROW_AFTER_SECS.1);
        let grow_after_secs = (grow && replication_factor >= 2).then_some(grow_after);
        if grow_after_secs.is_some() {
            wipe = false;
        }
        let several = nemesis == "all" || nemesis.contains(',');
        let swarm = rng.percent(50);
        let swarm_period = rng.between(SWARM_PERIODS_SECS.0, SWARM_PERIODS_SECS.1);
        let swarm_secs = (several && swarm).then_some(swarm_period);
        let partitions = 1 + rng.below(6) as u32;
        // 2 to 8 s between steps, in tenths.
        let nemesis_interval_secs = (20 + rng.below(61)) as f64 / 10.0;
        let longest = longest.max(MIN_TIME_LIMIT_SECS);
        let shortest = shortest.clamp(MIN_TIME_LIMIT_SECS, longest);
        let span = (longest - shortest).round() as u64;
        let time_limit_secs = shortest + rng.below(span + 1) as f64;
        let seed = rng.next_u64() >> 1;
        let lossy = rng.percent(LOSSY_PROFILE_PERCENT);
        // Drawn last, so that the dimensions before it draw as they did without it.
        let linearizable_reads = rng.percent(LINEARIZABLE_READS_PERCENT) && workload == "log";
        // The lossy profile is the Kafka of before KIP-101 with its defaults then:
        // unclean elections and `min.insync.replicas = 1`, so a leader whose ISR shrank
        // to itself goes on acknowledging writes that an unclean election gives up (a
        // single acknowledged copy: no wipes).
        let (min_insync_replicas, wipe) = if lossy {
            (1, false)
        } else {
            (min_insync_replicas, wipe)
        };
        Cell {
            workload,
            nemesis,
            nodes,
            replication_factor,
            min_insync_replicas,
            wipe,
            settings,
            hot_partitions,
            batch_fraction,
            linearizable_reads,
            grow_after_secs,
            swarm_secs,
            lossy,
            partitions,
            nemesis_interval_secs,
            time_limit_secs,
            seed,
        }
    }

    /// What nights are compared by: the cell without its seed, timings and broker
    /// settings.
    pub fn key(&self) -> String {
        let mut key = format!(
            "{} nemesis={} nodes={} rf={} min-isr={}",
            self.workload,
            self.nemesis,
            self.nodes,
            self.replication_factor,
            self.min_insync_replicas,
        );
        if self.grow_after_secs.is_some() {
            key.push_str(" rf1-then-grow");
        }
        if self.linearizable_reads {
            key.push_str(" linearizable-reads");
        }
        if self.swarm_secs.is_some() {
            key.push_str(" swarm");
        }
        if self.lossy {
            key.push_str(" lossy");
        }
        key
    }

    /// The key plus the rest, for people.
    pub fn description(&self) -> String {
        let t = &self.settings;
        let mut text = format!(
            "{} partitions={} interval={}s wipe={} time={}s fetch-max={} lag={}ms \
             fetch-wait={}ms session={}ms",
            self.key(),
            self.partitions,
            self.nemesis_interval_secs,
            self.wipe,
            self.time_limit_secs,
            t.fetch_max_records,
            t.lag_time_max_ms,
            t.fetch_wait_max_ms,
            t.session_timeout_ms,
        );
        if t.rebalance {
            text.push_str(" rebalance");
        }
        if self.hot_partitions {
            text.push_str(" hot-partitions");
        }
        if self.batch_fraction > 0.0 {
            text.push_str(&format!(" batches={}", self.batch_fraction));
        }
        if let Some(after) = self.grow_after_secs {
            text.push_str(&format!(" grow-after={after}s"));
        }
        if let Some(period) = self.swarm_secs {
            text.push_str(&format!(" swarm-period={period}s"));
        }
        text
    }

    /// The cell's `node.toml` settings, `min_insync_replicas` included.
    pub fn broker_config(&self) -> Vec<String> {
        let t = &self.settings;
        let mut settings = vec![
            format!("replica_fetch_max_records={}", t.fetch_max_records),
            format!("replica_lag_time_max_ms={}", t.lag_time_max_ms),
            format!("replica_fetch_wait_max_ms={}", t.fetch_wait_max_ms),
            format!("metadata.session_timeout_ms={}", t.session_timeout_ms),
        ];
        if t.rebalance {
            settings.push("controller.auto_leader_rebalance=true".into());
            settings.push("controller.leader_imbalance_check_interval_ms=5000".into());
        }
        settings.push(format!("min_insync_replicas={}", self.min_insync_replicas));
        if self.lossy {
            settings.push("truncation_mode=hw".into());
            settings.push("unclean_leader_election=true".into());
        }
        settings
    }

    /// What the cell's test does.
    pub fn plan(&self) -> Result<WorkloadPlan, String> {
        Ok(WorkloadPlan {
            nodes: self.nodes,
            workload: self.workload.parse()?,
            nemesis: NemesisSpec {
                packages: PackageKind::parse_list(self.nemesis)?,
                interval: Duration::from_secs_f64(self.nemesis_interval_secs),
                targets: TargetSpec::defaults(),
                wipe: self.wipe,
                swarm: self.swarm_secs.map(Duration::from_secs),
            },
            time_limit: Duration::from_secs_f64(self.time_limit_secs),
            concurrency: 10,
            rate: 500.0,
            partitions: self.partitions,
            replication_factor: self.replication_factor,
            shape: WorkloadShape {
                hot_partitions: self.hot_partitions,
                batch_fraction: self.batch_fraction,
                batch_max: BATCH_MAX,
                linearizable_reads: self.linearizable_reads,
                grow_after: self.grow_after_secs.map(Duration::from_secs),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spec::{BrokerSettings, Plan, TestSpec};

    #[test]
    fn every_drawn_cell_is_a_valid_test() {
        let mut rng = Rng::new(7);
        for _ in 0..500 {
            let cell = Cell::draw(&mut rng, 40.0, 5);
            assert!(cell.replication_factor <= cell.nodes, "{cell:?}");
            assert!(
                cell.min_insync_replicas <= cell.replication_factor,
                "{cell:?}"
            );
            assert!(
                !cell.wipe || cell.min_insync_replicas >= 2,
                "a wipe could lose the only acknowledged copy: {cell:?}"
            );
            if let Some(after) = cell.grow_after_secs {
                assert!(!cell.wipe, "a wipe while RF is 1: {cell:?}");
                assert!(cell.replication_factor >= 2, "{cell:?}");
                assert!((after as f64) < MIN_TIME_LIMIT_SECS, "{cell:?}");
            }
            assert!(
                cell.settings.fetch_wait_max_ms < cell.settings.lag_time_max_ms,
                "{cell:?}"
            );
            assert!(cell.workload == "log" || cell.batch_fraction == 0.0);
            assert!((MIN_TIME_LIMIT_SECS..=40.0).contains(&cell.time_limit_secs));
            assert!((2.0..=8.0).contains(&cell.nemesis_interval_secs));
            let spec = TestSpec {
                name: format!("nightly-{}", cell.workload),
                store: "store".into(),
                seed: cell.seed,
                backend: spec::BackendSpec::Netns,
                broker_bin: None,
                brokers: BrokerSettings {
                    bugs: Vec::new(),
                    config: cell.broker_config(),
                },
                plan: Plan::Workload(cell.plan().expect("a cell's plan")),
            };
            spec.validate().unwrap_or_else(|e| panic!("{cell:?}: {e}"));
            crate::system::check_settings(&spec.brokers.config)
                .unwrap_or_else(|e| panic!("{cell:?}: {e}"));
            // What the night stores as the reproduce line parses back to the same test.
            let argv = spec.to_argv();
            let parsed = crate::options::spec_of_argv(&argv)
                .unwrap_or_else(|e| panic!("{argv:?} does not parse: {e}"));
            assert_eq!(parsed, spec, "{argv:?}");
        }
    }

    #[test]
    fn the_draw_follows_the_seed_and_covers_the_dimensions() {
        let draw = |seed| {
            let mut rng = Rng::new(seed);
            (0..200)
                .map(|_| Cell::draw(&mut rng, 60.0, 5))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(3), draw(3));
        assert_ne!(draw(3), draw(4));
        let cells = draw(3);
        for mix in NEMESIS_MIXES {
            assert!(cells.iter().any(|c| c.nemesis == *mix), "{mix} never drawn");
        }
        for size in FETCH_MAX_RECORDS {
            assert!(cells.iter().any(|c| c.settings.fetch_max_records == *size));
        }
        for lag in LAG_TIME_MAX_MS {
            assert!(cells.iter().any(|c| c.settings.lag_time_max_ms == *lag));
        }
        for wait in FETCH_WAIT_MAX_MS {
            assert!(cells.iter().any(|c| c.settings.fetch_wait_max_ms == *wait));
        }
        for timeout in SESSION_TIMEOUT_MS {
            assert!(cells
                .iter()
                .any(|c| c.settings.session_timeout_ms == *timeout));
        }
        for share in BATCH_FRACTIONS {
            assert!(cells.iter().any(|c| c.batch_fraction == *share), "{share}");
        }
        assert!(cells.iter().any(|c| c.settings.rebalance));
        assert!(cells.iter().any(|c| c.lossy) && cells.iter().any(|c| !c.lossy));
        for cell in cells.iter().filter(|c| c.lossy) {
            assert_eq!(
                (cell.min_insync_replicas, cell.wipe),
                (1, false),
                "{cell:?}"
            );
            let waived = crate::waiver::reason(
                &*crate::system::db(),
                &cell.broker_config(),
                &Default::default(),
            );
            assert!(waived.is_some(), "{cell:?}");
        }
        assert!(cells.iter().any(|c| c.hot_partitions));
        assert!(cells.iter().any(|c| !c.hot_partitions));
        assert!(cells.iter().any(|c| c.linearizable_reads));
        assert!(cells
            .iter()
            .any(|c| c.workload == "log" && !c.linearizable_reads));
        assert!(cells
            .iter()
            .all(|c| c.workload == "log" || !c.linearizable_reads));
        assert!(cells
            .iter()
            .any(|c| c.grow_after_secs.is_some() && c.min_insync_replicas == 1));
        assert!(cells
            .iter()
            .any(|c| c.grow_after_secs.is_some() && c.min_insync_replicas == 2));
        // Swarm only where there is more than one package to choose from.
        assert!(cells.iter().any(|c| c.swarm_secs.is_some()));
        assert!(cells
            .iter()
            .any(|c| c.swarm_secs.is_none() && c.nemesis == "all"));
        for cell in cells.iter().filter(|c| c.swarm_secs.is_some()) {
            assert!(
                cell.nemesis == "all" || cell.nemesis.contains(','),
                "{cell:?}"
            );
            let plan = cell.plan().expect("a plan");
            assert_eq!(
                plan.nemesis.swarm.map(|p| p.as_secs()),
                cell.swarm_secs,
                "{cell:?}"
            );
        }
        for mix in ["slow", "aimed"] {
            assert!(cells.iter().any(|c| c.nemesis.contains(mix)), "{mix}");
        }
        assert!(cells.iter().any(|c| c.replication_factor == 1));
        assert!(cells.iter().any(|c| c.workload == "register"));
        assert!(cells.iter().any(|c| c.nodes == 5));
    }

    #[test]
    fn with_three_hosts_every_cell_has_three_nodes_and_the_same_draws() {
        let mut five = Rng::new(9);
        let mut three = Rng::new(9);
        for _ in 0..200 {
            let (a, b) = (
                Cell::draw(&mut five, 60.0, 5),
                Cell::draw(&mut three, 60.0, 3),
            );
            assert_eq!(b.nodes, 3);
            assert_eq!(
                (a.workload, a.nemesis, a.seed),
                (b.workload, b.nemesis, b.seed)
            );
            assert_eq!(
                (a.settings, a.grow_after_secs, a.hot_partitions),
                (b.settings, b.grow_after_secs, b.hot_partitions)
            );
        }
    }

    #[test]
    fn a_timed_draw_differs_only_in_its_client_phase() {
        let (mut plain, mut timed) = (Rng::new(9), Rng::new(9));
        for _ in 0..100 {
            let a = Cell::draw(&mut plain, 60.0, 5);
            let b = Cell::draw_timed(&mut timed, 30.0, 60.0, 5);
            assert!((30.0..=60.0).contains(&b.time_limit_secs), "{b:?}");
            assert_eq!(
                Cell {
                    time_limit_secs: b.time_limit_secs,
                    ..a
                },
                b
            );
        }
        // Crossed bounds: the longest wins.
        let c = Cell::draw_timed(&mut Rng::new(3), 50.0, 20.0, 5);
        assert_eq!(c.time_limit_secs, 20.0);
        // A timed draw may go past the matrix's longest phase; a plain one may not.
        let mut long = Rng::new(4);
        let d = Cell::draw_timed(&mut long, 100.0, 120.0, 5);
        assert!((100.0..=120.0).contains(&d.time_limit_secs), "{d:?}");
        for _ in 0..50 {
            let e = Cell::draw(&mut long, 600.0, 5);
            assert!(e.time_limit_secs <= MAX_TIME_LIMIT_SECS, "{e:?}");
        }
    }

    #[test]
    fn a_short_budget_draws_short_runs() {
        let mut rng = Rng::new(1);
        for _ in 0..50 {
            assert_eq!(
                Cell::draw(&mut rng, 5.0, 5).time_limit_secs,
                MIN_TIME_LIMIT_SECS
            );
        }
    }
}
