//! The nightly matrix: the dimensions a night's random tests are drawn from, and one
//! drawn cell as `harness test` options.
//!
//! Every cell must keep a correct broker valid: a cell whose faults could lose
//! acknowledged writes by design (a wiped node holding the only copy) is not in the
//! matrix. So `min_insync_replicas = 1` and replication factor 1 come only with
//! `--nemesis-wipe false`: a single acknowledged copy is lost with its disk, in Kafka too.

use std::time::Duration;

use nemesis::{PackageKind, TargetSpec};
use rng::Rng;
use spec::{NemesisSpec, WorkloadPlan};

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
    "all",
];

/// Broker timing profiles: `--broker-config` settings that change how fast replicas
/// are dropped from the ISR, sessions expire and followers learn the high watermark.
pub const PROFILES: &[(&str, &[&str])] = &[
    ("default", &[]),
    (
        "fast-failover",
        &[
            "replica_lag_time_max_ms=3000",
            "metadata.session_timeout_ms=3000",
        ],
    ),
    (
        "slow-hw",
        &[
            "replica_lag_time_max_ms=10000",
            "replica_fetch_wait_max_ms=5000",
        ],
    ),
    (
        "rebalance",
        &[
            "controller.auto_leader_rebalance=true",
            "controller.leader_imbalance_check_interval_ms=5000",
        ],
    ),
];

/// Durability settings: replication factor, `min_insync_replicas`, and whether the
/// nemesis may wipe a killed node's data (never when a single copy can be acknowledged).
pub const DURABILITY: &[(u32, u32, bool)] =
    &[(3, 2, true), (2, 2, true), (3, 1, false), (1, 1, false)];

/// Shortest client phase a run gets.
pub const MIN_TIME_LIMIT_SECS: f64 = 15.0;
/// Longest client phase a run gets.
pub const MAX_TIME_LIMIT_SECS: f64 = 60.0;

/// One drawn cell of the matrix, with its seed.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    pub workload: &'static str,
    pub nemesis: &'static str,
    pub nodes: u32,
    pub replication_factor: u32,
    pub min_insync_replicas: u32,
    pub wipe: bool,
    pub profile: &'static str,
    pub partitions: u32,
    pub nemesis_interval_secs: f64,
    pub time_limit_secs: f64,
    pub seed: u64,
}

impl Cell {
    /// Draws a cell; its client phase is at most `max_time_limit_secs` (at least
    /// [`MIN_TIME_LIMIT_SECS`]); a cell of 5 nodes becomes one of 3 when fewer than 5
    /// hosts are there (`max_nodes`, at least 3).
    pub fn draw(rng: &mut Rng, max_time_limit_secs: f64, max_nodes: u32) -> Cell {
        let workload = if rng.percent(75) { "log" } else { "register" };
        let nemesis = NEMESIS_MIXES[rng.below(NEMESIS_MIXES.len() as u64) as usize];
        let nodes = if rng.percent(50) || max_nodes < 5 {
            3
        } else {
            5
        };
        let (replication_factor, min_insync_replicas, wipe) =
            DURABILITY[rng.below(DURABILITY.len() as u64) as usize];
        let profile = PROFILES[rng.below(PROFILES.len() as u64) as usize].0;
        let partitions = 1 + rng.below(6) as u32;
        // 2 to 8 s between steps, in tenths.
        let nemesis_interval_secs = (20 + rng.below(61)) as f64 / 10.0;
        let longest = max_time_limit_secs.clamp(MIN_TIME_LIMIT_SECS, MAX_TIME_LIMIT_SECS);
        let span = (longest - MIN_TIME_LIMIT_SECS).round() as u64;
        let time_limit_secs = MIN_TIME_LIMIT_SECS + rng.below(span + 1) as f64;
        let seed = rng.next_u64() >> 1;
        Cell {
            workload,
            nemesis,
            nodes,
            replication_factor,
            min_insync_replicas,
            wipe,
            profile,
            partitions,
            nemesis_interval_secs,
            time_limit_secs,
            seed,
        }
    }

    /// What nights are compared by: the cell without its seed and timings.
    pub fn key(&self) -> String {
        format!(
            "{} nemesis={} nodes={} rf={} min-isr={} profile={}",
            self.workload,
            self.nemesis,
            self.nodes,
            self.replication_factor,
            self.min_insync_replicas,
            self.profile
        )
    }

    /// The key plus the rest, for people.
    pub fn description(&self) -> String {
        format!(
            "{} partitions={} interval={}s wipe={} time={}s",
            self.key(),
            self.partitions,
            self.nemesis_interval_secs,
            self.wipe,
            self.time_limit_secs
        )
    }

    /// The profile's settings plus `min_insync_replicas`.
    pub fn broker_config(&self) -> Vec<String> {
        let mut settings: Vec<String> = PROFILES
            .iter()
            .find(|(name, _)| *name == self.profile)
            .map(|(_, settings)| settings.iter().map(|s| s.to_string()).collect())
            .unwrap_or_default();
        settings.push(format!("min_insync_replicas={}", self.min_insync_replicas));
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
                swarm: None,
            },
            time_limit: Duration::from_secs_f64(self.time_limit_secs),
            concurrency: 10,
            rate: 500.0,
            partitions: self.partitions,
            replication_factor: self.replication_factor,
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
        for (profile, _) in PROFILES {
            assert!(cells.iter().any(|c| c.profile == *profile), "{profile}");
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
