//! The schedule: for each package, a seeded, endless sequence of [`Step`]s — a delay and
//! an [`Action`] — where start and stop alternate (Jepsen's flip-flop inside a stagger):
//! each delay is uniform in `0..2×interval`. Admin faults are instantaneous: every step
//! is an admin action. Everything is drawn from `Rng::derive(seed, package, step)`, so
//! the schedule depends on the seed alone; the [`Step::seed`] is what the runner draws
//! the step's cluster-dependent choices (target resolution, shapes) from.

use std::time::Duration;

use serde::Serialize;

use crate::aimed::{self, Aim};
use crate::grudge::{Ports, Shape};
use crate::package::PackageKind;
use crate::slow::Delay;
use crate::target::TargetSpec;
use rng::Rng;

/// Kinds of admin fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AdminKind {
    /// Several leader transfers in a row, each to a random ISR member of a random
    /// partition (`f` `transfer-leaders`).
    TransferStorm,
    /// A preferred-leader election of every partition (`f` `elect-preferred`).
    ElectPreferred,
    /// Add a replica to a partition, or (when one was added) remove it again
    /// (`f` `reassign`).
    Reassign,
}

/// One thing the nemesis does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// `kill`: SIGKILL the target's brokers; with `wipe` (only ever for a one-node
    /// target) their partition data is wiped before the next `start`.
    Kill { target: TargetSpec, wipe: bool },
    /// `start`: restart every killed node.
    Start,
    /// `pause`: SIGSTOP the target's brokers.
    Pause { target: TargetSpec },
    /// `resume`: SIGCONT every paused node.
    Resume,
    /// `start-partition`: all traffic of the shape's grudge.
    Partition { shape: Shape },
    /// `stop-partition`: remove this package's cuts.
    StopPartition,
    /// `start-partition-ports`: only one listener's port, both ways or one way.
    PartitionPorts {
        shape: Shape,
        ports: Ports,
        one_way: bool,
    },
    /// `stop-partition-ports`: remove this package's cuts.
    StopPartitionPorts,
    /// An admin fault (`transfer-leaders`, `elect-preferred`, `reassign`).
    Admin(AdminKind),
    /// `start-slow`: arm each of `delays` (a delay failpoint) on the target's brokers.
    Slow {
        target: TargetSpec,
        delays: Vec<Delay>,
    },
    /// `stop-slow`: release every failpoint the `slow` package armed.
    StopSlow,
    /// `start-aimed`: wait for the aim's moment, then strike the node holding its role
    /// ([`crate::aimed`]).
    Aim(Aim),
    /// `stop-aimed`: undo what the `aimed` package's strikes left (restart, resume,
    /// uncut).
    StopAim,
    /// `start` of exactly these nodes (a scripted scenario's step): those the nemesis
    /// killed are started as [`Action::Start`] starts them (wiping once deregistered
    /// when their kill asked for it); others are started if not running.
    StartNodes { nodes: Vec<String> },
    /// `resume` of exactly these nodes (a scripted scenario's step).
    ResumeNodes { nodes: Vec<String> },
    /// One exact admin request (a scripted scenario's step): `transfer-leader`,
    /// `elect-preferred` or `reassign`, recorded with the request and the answer.
    AdminRequest(crate::control::AdminAction),
    /// Arm (`Some(actions)`, `fail` crate syntax: `pause`, `return`, `sleep(300)`) or
    /// release (`None`) a broker failpoint on one node (`failpoint` /
    /// `release-failpoint`).
    Failpoint {
        node: String,
        point: String,
        actions: Option<String>,
    },
}

impl Action {
    /// The history's `f`.
    pub fn f(&self) -> &'static str {
        match self {
            Action::Kill { .. } => "kill",
            Action::Start => "start",
            Action::Pause { .. } => "pause",
            Action::Resume => "resume",
            Action::Partition { .. } => "start-partition",
            Action::StopPartition => "stop-partition",
            Action::PartitionPorts { .. } => "start-partition-ports",
            Action::StopPartitionPorts => "stop-partition-ports",
            Action::Admin(AdminKind::TransferStorm) => "transfer-leaders",
            Action::Admin(AdminKind::ElectPreferred) => "elect-preferred",
            Action::Admin(AdminKind::Reassign) => "reassign",
            Action::Slow { .. } => "start-slow",
            Action::StopSlow => "stop-slow",
            Action::Aim(_) => "start-aimed",
            Action::StopAim => "stop-aimed",
            Action::StartNodes { .. } => "start",
            Action::ResumeNodes { .. } => "resume",
            Action::AdminRequest(request) => request.f(),
            Action::Failpoint {
                actions: Some(_), ..
            } => "failpoint",
            Action::Failpoint { actions: None, .. } => "release-failpoint",
        }
    }

    /// What it targets as the history's `targets` says it (the spec, not the nodes):
    /// `"minority"`, `"isolate-controller"`, `"majorities-ring"`, ...; `None` for stops.
    pub fn targets(&self) -> Option<String> {
        match self {
            Action::Kill { target, .. }
            | Action::Pause { target }
            | Action::Slow { target, .. } => Some(target.to_string()),
            Action::Partition { shape } | Action::PartitionPorts { shape, .. } => {
                Some(shape.name())
            }
            Action::Admin(_) | Action::AdminRequest(_) => Some("partitions".into()),
            Action::Failpoint { node, .. } => Some(node.clone()),
            Action::Aim(aim) => Some(aim.target_name().into()),
            Action::Start
            | Action::Resume
            | Action::StopPartition
            | Action::StopPartitionPorts
            | Action::StopSlow
            | Action::StopAim
            | Action::StartNodes { .. }
            | Action::ResumeNodes { .. } => None,
        }
    }

    /// Whether it ends a package's fault period (a random package's stop step).
    pub fn is_stop(&self) -> bool {
        matches!(
            self,
            Action::Start
                | Action::Resume
                | Action::StopPartition
                | Action::StopPartitionPorts
                | Action::StopSlow
                | Action::StopAim
        )
    }
}

/// One step of a package's schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub package: PackageKind,
    /// Its number within the package's schedule, from 0.
    pub index: u64,
    /// How long to wait after the previous step of this package (or the start).
    pub delay: Duration,
    pub action: Action,
    /// The seed of the step's cluster-dependent choices.
    pub seed: u64,
}

/// What a package's schedule draws from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleOptions {
    pub seed: u64,
    /// Mean time between steps (delays uniform in `0..2×interval`).
    pub interval: Duration,
    /// Node targets of kill, pause and slow, and of the role isolations of partitions.
    pub targets: Vec<TargetSpec>,
    /// Whether kills may wipe a lone node's partition data.
    pub wipe: bool,
    /// Whether the system under test may elect a replica outside its in-sync set (Kafka's
    /// unclean leader election): the `aimed` package then also strands leaders
    /// ([`Aim::Strand`]), which only an election of an out-of-sync replica completes.
    pub unclean_elections: bool,
    /// Whether a follower of the system under test asks its leader where their logs
    /// diverge after a leadership change (Kafka's OffsetsForLeaderEpoch): the `aimed`
    /// package holds and delays that round trip only then
    /// ([`crate::aimed::SystemTraits::asks_divergence`]).
    pub asks_divergence: bool,
}

/// The endless schedule of one package.
pub struct Schedule {
    package: PackageKind,
    options: ScheduleOptions,
    next: u64,
}

impl Schedule {
    pub fn new(package: PackageKind, options: ScheduleOptions) -> Schedule {
        Schedule {
            package,
            options,
            next: 0,
        }
    }

    /// The step numbered `index`: a function of the package, the options and `index`
    /// alone (the iterator yields `step(0)`, `step(1)`, ...).
    ///
    /// Drawn from `Rng::derive(seed, package, index)`, in this order: the delay (uniform
    /// in `0..2×interval`), the step's seed, then the action's choices. Even steps start
    /// a fault and odd steps stop it, except for `admin`, whose every step is a uniformly
    /// chosen [`AdminKind`].
    ///
    /// - `kill` / `pause`: a target picked uniformly from the targets
    ///   ([`ScheduleOptions::effective_targets`]); a kill wipes only when the options
    ///   allow it, the target is [`TargetSpec::One`] and a 1-in-4 chance says so.
    /// - `partition`: a shape picked uniformly from [`Shape::defaults`] and
    ///   `Isolate(t)` for each role target `t`.
    /// - `partition-ports`: a shape from `One`, `Halves` and `Isolate(t)` for each role
    ///   target, the metadata or the replication port, and one way with chance 0.3.
    /// - `slow`: a target picked uniformly from the targets, then the delays
    ///   ([`Delay::draw`]: which points, how long, how often).
    pub fn step(&self, index: u64) -> Step {
        if self.package == PackageKind::Aimed {
            return self.aimed_step(index);
        }
        let options = &self.options;
        let mut rng = Rng::derive(options.seed, self.package.name(), index);
        let delay = uniform_delay(options.interval, rng.unit());
        let seed = rng.next_u64();
        let start = index & 1 == 0; // even steps start (no `is_multiple_of`: MSRV 1.80)
        let action = match self.package {
            PackageKind::Kill if start => {
                let target = pick_target(&options.effective_targets(), &mut rng);
                let wipe = options.wipe && target == TargetSpec::One && rng.chance(0.25);
                Action::Kill { target, wipe }
            }
            PackageKind::Kill => Action::Start,
            PackageKind::Pause if start => Action::Pause {
                target: pick_target(&options.effective_targets(), &mut rng),
            },
            PackageKind::Pause => Action::Resume,
            PackageKind::Partition if start => {
                let mut shapes = Shape::defaults();
                shapes.extend(options.role_isolations());
                Action::Partition {
                    shape: pick_shape(&shapes, &mut rng),
                }
            }
            PackageKind::Partition => Action::StopPartition,
            PackageKind::PartitionPorts if start => {
                let mut shapes = vec![Shape::One, Shape::Halves];
                shapes.extend(options.role_isolations());
                let shape = pick_shape(&shapes, &mut rng);
                let ports = if rng.below(2) == 0 {
                    Ports::Metadata
                } else {
                    Ports::Replication
                };
                let one_way = rng.chance(0.3);
                Action::PartitionPorts {
                    shape,
                    ports,
                    one_way,
                }
            }
            PackageKind::PartitionPorts => Action::StopPartitionPorts,
            PackageKind::Slow if start => {
                let target = pick_target(&options.effective_targets(), &mut rng);
                Action::Slow {
                    target,
                    delays: Delay::draw(&mut rng),
                }
            }
            PackageKind::Slow => Action::StopSlow,
            // Drawn by `aimed_step`.
            PackageKind::Aimed if start => Action::Aim(Aim::draw(&mut rng, options.system())),
            PackageKind::Aimed => Action::StopAim,
            PackageKind::Admin => Action::Admin(match rng.below(3) {
                0 => AdminKind::TransferStorm,
                1 => AdminKind::ElectPreferred,
                _ => AdminKind::Reassign,
            }),
        };
        Step {
            package: self.package,
            index,
            delay,
            action,
            seed,
        }
    }
}

impl Schedule {
    /// A step of `aimed`, whose delays are its own (the interval does not scale them):
    /// even steps strike ([`Aim::draw`]) after [`aimed::strike_gap`] (a burst's gap or a
    /// calm), odd steps undo the strike before them after its [`aimed::hold`]. Drawn from
    /// `Rng::derive(seed, "aimed", index)` in this order: the step's seed, then the
    /// strike and its gap; an undo draws the hold of the strike before it (whose draw it
    /// repeats) from its own stream.
    fn aimed_step(&self, index: u64) -> Step {
        let mut rng = Rng::derive(self.options.seed, self.package.name(), index);
        let seed = rng.next_u64();
        let (delay, action) = if index & 1 == 0 {
            let aim = Aim::draw(&mut rng, self.options.system());
            (aimed::strike_gap(&mut rng), Action::Aim(aim))
        } else {
            let mut before = Rng::derive(self.options.seed, self.package.name(), index - 1);
            let _ = before.next_u64();
            let aim = Aim::draw(&mut before, self.options.system());
            (aimed::hold(&aim, &mut rng), Action::StopAim)
        };
        Step {
            package: self.package,
            index,
            delay,
            action,
            seed,
        }
    }
}

impl ScheduleOptions {
    /// What the `aimed` package may count on in the system under test.
    pub fn system(&self) -> crate::aimed::SystemTraits {
        crate::aimed::SystemTraits {
            unclean_elections: self.unclean_elections,
            asks_divergence: self.asks_divergence,
        }
    }

    /// The targets steps pick from: [`ScheduleOptions::targets`], or
    /// [`TargetSpec::defaults`] when that is empty.
    pub fn effective_targets(&self) -> Vec<TargetSpec> {
        if self.targets.is_empty() {
            TargetSpec::defaults()
        } else {
            self.targets.clone()
        }
    }

    /// `Isolate(t)` for every role target `t` of the effective targets, each once, in
    /// their order.
    pub fn role_isolations(&self) -> Vec<Shape> {
        let mut shapes: Vec<Shape> = Vec::new();
        for target in self
            .effective_targets()
            .into_iter()
            .filter(TargetSpec::is_role)
        {
            let shape = Shape::Isolate(target);
            if !shapes.contains(&shape) {
                shapes.push(shape);
            }
        }
        shapes
    }
}

/// Uniform in `0..2×interval` for `unit` in `[0, 1)`: never `2×interval` itself, zero
/// when the interval is zero; saturates for intervals too long to double.
fn uniform_delay(interval: Duration, unit: f64) -> Duration {
    let span = interval.saturating_mul(2);
    if span.is_zero() {
        return Duration::ZERO;
    }
    let delay = Duration::try_from_secs_f64(span.as_secs_f64() * unit).unwrap_or(span);
    if delay >= span {
        span.saturating_sub(Duration::from_nanos(1))
    } else {
        delay
    }
}

/// One of `targets` (never empty: effective targets), `One` otherwise.
fn pick_target(targets: &[TargetSpec], rng: &mut Rng) -> TargetSpec {
    rng.pick(targets).cloned().unwrap_or(TargetSpec::One)
}

/// One of `shapes` (never empty here), `One` otherwise.
fn pick_shape(shapes: &[Shape], rng: &mut Rng) -> Shape {
    rng.pick(shapes).cloned().unwrap_or(Shape::One)
}

impl Iterator for Schedule {
    type Item = Step;

    /// The next step; the schedule never ends.
    fn next(&mut self) -> Option<Step> {
        let step = self.step(self.next);
        self.next = self.next.wrapping_add(1);
        Some(step)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use proptest::prelude::*;

    fn options(seed: u64) -> ScheduleOptions {
        ScheduleOptions {
            seed,
            interval: Duration::from_secs(10),
            targets: TargetSpec::defaults(),
            wipe: true,
            unclean_elections: false,
            asks_divergence: true,
        }
    }

    fn steps(package: PackageKind, options: ScheduleOptions, n: usize) -> Vec<Step> {
        Schedule::new(package, options).take(n).collect()
    }

    #[test]
    fn same_seed_gives_the_same_steps() {
        for package in PackageKind::ALL {
            let a = steps(package, options(42), 50);
            let b = steps(package, options(42), 50);
            assert_eq!(a.len(), 50);
            assert_eq!(a, b, "{package}");
            for (i, step) in a.iter().enumerate() {
                assert_eq!(step.index, i as u64);
                assert_eq!(step.package, package);
            }
        }
    }

    #[test]
    fn different_seeds_and_packages_differ() {
        for package in PackageKind::ALL {
            let a = steps(package, options(1), 50);
            let b = steps(package, options(2), 50);
            assert_ne!(a, b, "{package}");
            let delays: Vec<Duration> = a.iter().map(|s| s.delay).collect();
            assert_ne!(delays, b.iter().map(|s| s.delay).collect::<Vec<_>>());
        }
        let kill: Vec<u64> = steps(PackageKind::Kill, options(1), 20)
            .iter()
            .map(|s| s.seed)
            .collect();
        let pause: Vec<u64> = steps(PackageKind::Pause, options(1), 20)
            .iter()
            .map(|s| s.seed)
            .collect();
        assert_ne!(kill, pause);
        let distinct: BTreeSet<u64> = kill.iter().copied().collect();
        assert_eq!(distinct.len(), kill.len(), "each step has its own seed");
    }

    #[test]
    fn start_and_stop_alternate() {
        for package in PackageKind::ALL {
            let info = package.info();
            for (i, step) in steps(package, options(9), 60).iter().enumerate() {
                let f = step.action.f();
                if info.stop.is_empty() {
                    assert!(info.start.contains(&f), "{package}: {f}");
                } else if i % 2 == 0 {
                    assert!(info.start.contains(&f), "{package} step {i}: {f}");
                    assert!(step.action.targets().is_some());
                } else {
                    assert!(info.stop.contains(&f), "{package} step {i}: {f}");
                    assert!(step.action.targets().is_none());
                }
            }
        }
    }

    #[test]
    fn delays_are_uniform_around_the_interval() {
        let interval = Duration::from_millis(500);
        let opts = ScheduleOptions {
            interval,
            ..options(3)
        };
        let all = steps(PackageKind::Partition, opts, 4000);
        assert!(
            all.iter().all(|s| s.delay < 2 * interval),
            "within 0..2×interval"
        );
        let mean = all.iter().map(|s| s.delay.as_secs_f64()).sum::<f64>() / all.len() as f64;
        assert!((mean - 0.5).abs() < 0.025, "mean {mean}");
        let short = all.iter().filter(|s| s.delay < interval / 2).count();
        assert!(
            (900..1100).contains(&short),
            "a quarter below interval/2: {short}"
        );
        let zero = ScheduleOptions {
            interval: Duration::ZERO,
            ..options(3)
        };
        assert!(steps(PackageKind::Kill, zero, 20)
            .iter()
            .all(|s| s.delay.is_zero()));
    }

    #[test]
    fn uniform_delay_stays_below_twice_the_interval() {
        let interval = Duration::from_secs(3);
        assert_eq!(uniform_delay(interval, 0.0), Duration::ZERO);
        assert_eq!(uniform_delay(interval, 0.5), interval);
        let top = uniform_delay(interval, 1.0 - f64::EPSILON / 2.0);
        assert!(top < 2 * interval && top > interval, "{top:?}");
        assert!(uniform_delay(Duration::MAX, 0.99) <= Duration::MAX);
    }

    #[test]
    fn only_lone_node_kills_wipe() {
        let all = steps(PackageKind::Kill, options(11), 2000);
        let mut wipes = 0;
        let mut ones = 0;
        let mut targets = BTreeSet::new();
        for step in &all {
            if let Action::Kill { target, wipe } = &step.action {
                targets.insert(target.to_string());
                if *target == TargetSpec::One {
                    ones += 1;
                }
                if *wipe {
                    assert_eq!(*target, TargetSpec::One);
                    wipes += 1;
                }
            }
        }
        assert_eq!(
            targets.len(),
            TargetSpec::defaults().len(),
            "every target: {targets:?}"
        );
        assert!(ones > 50, "{ones}");
        let share = f64::from(wipes) / f64::from(ones);
        assert!(
            (0.15..0.35).contains(&share),
            "{wipes} wipes of {ones} lone kills"
        );
        let no_wipe = ScheduleOptions {
            wipe: false,
            ..options(11)
        };
        assert!(steps(PackageKind::Kill, no_wipe, 400)
            .iter()
            .all(|s| !matches!(s.action, Action::Kill { wipe: true, .. })));
    }

    #[test]
    fn targets_come_from_the_options_or_the_defaults() {
        let explicit = TargetSpec::Nodes(vec!["n2".into()]);
        let opts = ScheduleOptions {
            targets: vec![TargetSpec::Majority, explicit.clone()],
            ..options(5)
        };
        let mut seen = BTreeSet::new();
        for step in steps(PackageKind::Pause, opts, 200) {
            if let Action::Pause { target } = step.action {
                assert!(
                    target == TargetSpec::Majority || target == explicit,
                    "{target}"
                );
                seen.insert(target.to_string());
            }
        }
        assert_eq!(seen.len(), 2);
        let empty = ScheduleOptions {
            targets: vec![],
            ..options(5)
        };
        assert_eq!(empty.effective_targets(), TargetSpec::defaults());
        let kills: BTreeSet<String> = steps(PackageKind::Kill, empty, 400)
            .iter()
            .filter_map(|s| s.action.targets())
            .collect();
        assert_eq!(kills.len(), TargetSpec::defaults().len(), "{kills:?}");
    }

    #[test]
    fn partitions_add_isolations_of_role_targets() {
        let opts = ScheduleOptions {
            targets: vec![
                TargetSpec::One,
                TargetSpec::Controller,
                TargetSpec::Leaders,
                TargetSpec::Controller,
            ],
            ..options(8)
        };
        let names: BTreeSet<String> = steps(PackageKind::Partition, opts.clone(), 600)
            .iter()
            .filter_map(|s| s.action.targets())
            .collect();
        let expected: BTreeSet<String> = [
            "halves",
            "one",
            "majority",
            "majorities-ring",
            "bridge",
            "isolate-controller",
            "isolate-leaders",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        assert_eq!(names, expected);

        let mut ports = BTreeSet::new();
        let mut one_way = 0;
        let mut starts = 0;
        let mut shapes = BTreeSet::new();
        for step in steps(PackageKind::PartitionPorts, opts, 2000) {
            if let Action::PartitionPorts {
                shape,
                ports: p,
                one_way: w,
            } = step.action
            {
                starts += 1;
                shapes.insert(shape.name());
                ports.insert(p.name());
                one_way += u32::from(w);
            }
        }
        let expected: BTreeSet<String> = ["one", "halves", "isolate-controller", "isolate-leaders"]
            .into_iter()
            .map(String::from)
            .collect();
        assert_eq!(shapes, expected);
        assert_eq!(ports, BTreeSet::from(["metadata", "replication"]));
        let share = f64::from(one_way) / f64::from(starts);
        assert!(
            (0.25..0.35).contains(&share),
            "{one_way} of {starts} one way"
        );
    }

    #[test]
    fn slow_periods_draw_targets_and_delays_from_the_seed() {
        let a = steps(PackageKind::Slow, options(21), 400);
        assert_eq!(a, steps(PackageKind::Slow, options(21), 400));
        assert_ne!(a, steps(PackageKind::Slow, options(22), 400));
        let mut targets = BTreeSet::new();
        let mut points = BTreeSet::new();
        for (i, step) in a.iter().enumerate() {
            match &step.action {
                Action::Slow { target, delays } => {
                    assert_eq!(i % 2, 0, "{:?}", step.action);
                    targets.insert(target.to_string());
                    assert!(!delays.is_empty());
                    // The step's draw is the schedule's alone: step(i) draws it again.
                    let again = Schedule::new(PackageKind::Slow, options(21)).step(i as u64);
                    assert_eq!(again.action, step.action);
                    points.extend(delays.iter().map(|d| d.point.clone()));
                }
                Action::StopSlow => assert_eq!(i % 2, 1),
                other => panic!("not a slow step: {other:?}"),
            }
        }
        assert_eq!(targets.len(), TargetSpec::defaults().len(), "{targets:?}");
        assert_eq!(points.len(), crate::slow::DELAY_POINTS.len(), "{points:?}");
        let leaders_only = ScheduleOptions {
            targets: vec![TargetSpec::Leaders],
            ..options(21)
        };
        assert!(steps(PackageKind::Slow, leaders_only, 40)
            .iter()
            .filter_map(|s| s.action.targets())
            .all(|t| t == "leaders"));
    }

    #[test]
    fn admin_steps_are_all_admin_faults() {
        let mut kinds = Vec::new();
        for step in steps(PackageKind::Admin, options(4), 300) {
            let Action::Admin(kind) = step.action else {
                panic!("{:?}", step.action);
            };
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        assert_eq!(kinds.len(), 3, "{kinds:?}");
    }

    #[test]
    fn aimed_steps_alternate_strikes_and_undos_in_bursts() {
        let all = steps(PackageKind::Aimed, options(31), 2000);
        assert_eq!(all, steps(PackageKind::Aimed, options(31), 2000));
        assert_ne!(all, steps(PackageKind::Aimed, options(32), 2000));
        let mut aims = BTreeSet::new();
        let mut calm = 0;
        let mut cut_holds = Vec::new();
        for (i, step) in all.iter().enumerate() {
            match &step.action {
                Action::Aim(aim) => {
                    assert_eq!(i % 2, 0);
                    aims.insert(aim.target_name());
                    if step.delay >= Duration::from_secs(8) {
                        calm += 1;
                    } else {
                        assert!(step.delay <= Duration::from_secs(3), "{step:?}");
                    }
                    if matches!(aim, Aim::ControllerCut { .. }) {
                        cut_holds.push(all[i + 1].delay);
                    }
                }
                Action::StopAim => assert_eq!(i % 2, 1),
                other => panic!("not an aimed step: {other:?}"),
            }
        }
        assert_eq!(aims.len(), 6, "{aims:?}");
        let share = f64::from(calm) / 1000.0;
        assert!((0.28..0.39).contains(&share), "calm {share}");
        // A controller's cut is held 1–6 s after its request.
        assert!(cut_holds
            .iter()
            .all(|d| (Duration::from_secs(1)..=Duration::from_secs(6)).contains(d)));
        // Three strikes in sixteen are controller cuts (187 of 1,000).
        assert!((140..240).contains(&cut_holds.len()), "{}", cut_holds.len());
    }

    proptest! {
        #[test]
        fn the_iterator_follows_step_and_delays_stay_in_range(
            seed in any::<u64>(),
            millis in 0u64..100_000,
            skip in 0usize..100,
        ) {
            let interval = Duration::from_millis(millis);
            let opts = ScheduleOptions { seed, interval, ..options(0) };
            for package in PackageKind::ALL {
                let schedule = Schedule::new(package, opts.clone());
                let step = schedule.step(skip as u64);
                let via_iter = Schedule::new(package, opts.clone()).nth(skip);
                prop_assert_eq!(Some(step.clone()), via_iter);
                if package == PackageKind::Aimed {
                    // Its own gaps and holds: 0.5 s to 12 s whatever the interval.
                    prop_assert!(step.delay >= Duration::from_millis(500));
                    prop_assert!(step.delay <= Duration::from_secs(12));
                } else {
                    prop_assert!(step.delay < 2 * interval || interval.is_zero());
                }
            }
        }
    }
}
