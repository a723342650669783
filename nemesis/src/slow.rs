//! Slow links from the broker's delay failpoints (the `slow` package). This kernel has
//! no `netem`, so a slow link is made inside the broker: a failpoint armed
//! `return(<ms>)` makes the task that reaches it wait that long (`tokio::time::sleep`,
//! no thread held) and then carry on. A `slow` period arms one to three of the
//! [`DELAY_POINTS`] on its target nodes, each with its own delay and firing
//! probability, and the next step releases them.
//!
//! The points are the broker's (`broker/src/server/failpoints.rs`, where each is
//! documented with the race it widens); this crate knows them by name only.

use serde::{Deserialize, Serialize};

use rng::Rng;

/// The broker failpoints a `slow` period may arm, each on the path it names.
pub const DELAY_POINTS: &[&str] = &[
    // Follower → leader, the truncation round trip (KAFKA-7040).
    "before_offsets_for_leader_epoch",
    "after_offsets_for_leader_epoch",
    "leader_offsets_for_leader_epoch",
    // Fetch responses, leader and follower side (KAFKA-7128, 1561).
    "leader_fetch_response",
    "follower_fetch_response",
    // The follower's ListOffsets after an out-of-range fetch (KAFKA-2143).
    "before_list_offsets",
    // Metadata writes: the leader's ISR change, the controller's state (KAFKA-3083).
    "before_isr_write",
    "controller_before_state_write",
    // The controller's LeaderAndIsr to each broker (KAFKA-1561, 7040, 7128).
    "controller_leader_and_isr_send",
];

/// The shortest delay a period draws, in milliseconds.
pub const MIN_DELAY_MS: u64 = 200;
/// The longest delay a period draws, in milliseconds.
pub const MAX_DELAY_MS: u64 = 3_000;
/// The most points one period arms.
pub const MAX_POINTS: u64 = 3;
/// The firing probabilities (percent) a partial delay draws from; half the delays fire
/// on every hit.
pub const PARTIAL_PERCENTS: &[u32] = &[25, 50, 75];

/// One failpoint of a `slow` period: the point, its delay, and the share of hits it
/// delays.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delay {
    pub point: String,
    pub delay_ms: u64,
    /// 1..=100: the chance (percent) that one hit of the point is delayed.
    pub percent: u32,
}

impl Delay {
    /// The broker's failpoint actions: `return(<ms>)`, or `<p>%return(<ms>)`.
    pub fn actions(&self) -> String {
        if self.percent >= 100 {
            format!("return({})", self.delay_ms)
        } else {
            format!("{}%return({})", self.percent, self.delay_ms)
        }
    }

    /// Draws one to [`MAX_POINTS`] distinct points (in [`DELAY_POINTS`] order), each with
    /// a delay log-uniform in [`MIN_DELAY_MS`]..=[`MAX_DELAY_MS`] (as many delays below
    /// 775 ms as above: short stalls are common, multi-second ones rarer) and a firing
    /// probability: every hit with chance ½, else one of [`PARTIAL_PERCENTS`].
    pub fn draw(rng: &mut Rng) -> Vec<Delay> {
        Delay::draw_among(rng, DELAY_POINTS)
    }

    /// As [`Delay::draw`], among `points` only (a swarm period's points): one to
    /// [`MAX_POINTS`] of them (never more than there are; none from an empty list), in
    /// their order. `draw_among(rng, DELAY_POINTS)` is `draw(rng)`.
    pub fn draw_among<S: AsRef<str>>(rng: &mut Rng, points: &[S]) -> Vec<Delay> {
        if points.is_empty() {
            return Vec::new();
        }
        let count = rng.between(1, MAX_POINTS) as usize;
        let mut order: Vec<usize> = (0..points.len()).collect();
        rng.shuffle(&mut order);
        let mut chosen: Vec<usize> = order.into_iter().take(count).collect();
        chosen.sort_unstable();
        chosen
            .into_iter()
            .map(|at| {
                let delay_ms = log_uniform(MIN_DELAY_MS, MAX_DELAY_MS, rng.unit());
                let percent = if rng.chance(0.5) {
                    100
                } else {
                    rng.pick(PARTIAL_PERCENTS).copied().unwrap_or(100)
                };
                Delay {
                    point: points[at].as_ref().to_string(),
                    delay_ms,
                    percent,
                }
            })
            .collect()
    }
}

/// `lo·(hi/lo)^unit`, rounded, within `lo..=hi`, for `unit` in `[0, 1)`.
pub fn log_uniform(lo: u64, hi: u64, unit: f64) -> u64 {
    let (lo_f, hi_f) = (lo as f64, hi as f64);
    let value = lo_f * (hi_f / lo_f).powf(unit.clamp(0.0, 1.0));
    (value.round() as u64).clamp(lo, hi)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn the_same_seed_draws_the_same_delays() {
        for seed in 0..50 {
            let a = Delay::draw(&mut Rng::derive(seed, "slow", 0));
            let b = Delay::draw(&mut Rng::derive(seed, "slow", 0));
            assert_eq!(a, b);
        }
        let draws: BTreeSet<String> = (0..50)
            .map(|seed| format!("{:?}", Delay::draw(&mut Rng::derive(seed, "slow", 0))))
            .collect();
        assert!(draws.len() > 45, "seeds draw different delays");
    }

    #[test]
    fn draws_stay_in_range_and_cover_every_point() {
        let mut points = BTreeSet::new();
        let mut counts = BTreeSet::new();
        let mut percents = BTreeSet::new();
        let mut below_median = 0;
        let mut total = 0;
        for index in 0..2_000 {
            let delays = Delay::draw(&mut Rng::derive(7, "slow", index));
            counts.insert(delays.len());
            assert!((1..=MAX_POINTS as usize).contains(&delays.len()));
            let names: Vec<&str> = delays.iter().map(|d| d.point.as_str()).collect();
            let mut distinct = names.clone();
            distinct.dedup();
            assert_eq!(distinct, names, "distinct, in DELAY_POINTS order");
            for delay in &delays {
                assert!(DELAY_POINTS.contains(&delay.point.as_str()));
                assert!((MIN_DELAY_MS..=MAX_DELAY_MS).contains(&delay.delay_ms));
                assert!(delay.percent == 100 || PARTIAL_PERCENTS.contains(&delay.percent));
                points.insert(delay.point.clone());
                percents.insert(delay.percent);
                total += 1;
                below_median += u32::from(delay.delay_ms < 775);
            }
        }
        assert_eq!(points.len(), DELAY_POINTS.len());
        assert_eq!(counts, BTreeSet::from([1, 2, 3]));
        assert_eq!(percents, BTreeSet::from([25, 50, 75, 100]));
        let share = f64::from(below_median) / f64::from(total);
        assert!((0.45..0.55).contains(&share), "log-uniform: {share}");
    }

    #[test]
    fn draws_among_a_subset_stay_in_it() {
        let subset = ["leader_fetch_response", "before_isr_write"];
        let mut seen = BTreeSet::new();
        for index in 0..500 {
            let delays = Delay::draw_among(&mut Rng::derive(5, "slow", index), &subset);
            assert!((1..=2).contains(&delays.len()), "{delays:?}");
            for delay in &delays {
                assert!(subset.contains(&delay.point.as_str()), "{delay:?}");
                seen.insert(delay.point.clone());
            }
            assert_eq!(
                Delay::draw_among(&mut Rng::derive(5, "slow", index), DELAY_POINTS),
                Delay::draw(&mut Rng::derive(5, "slow", index)),
                "the whole list draws as draw does"
            );
        }
        assert_eq!(seen.len(), 2);
        let none: [&str; 0] = [];
        assert!(Delay::draw_among(&mut Rng::new(1), &none).is_empty());
    }

    #[test]
    fn actions_are_the_brokers_delay_syntax() {
        let delay = |percent| Delay {
            point: "leader_fetch_response".into(),
            delay_ms: 450,
            percent,
        };
        assert_eq!(delay(100).actions(), "return(450)");
        assert_eq!(delay(25).actions(), "25%return(450)");
        assert_eq!(log_uniform(200, 3000, 0.0), 200);
        assert_eq!(log_uniform(200, 3000, 1.0), 3000);
        assert_eq!(log_uniform(200, 3000, 0.5), 775);
    }

    /// The broker's failpoints module lists every point this package arms: a renamed
    /// point would make every `slow` period an error.
    #[test]
    fn every_point_is_one_the_broker_has() {
        let broker = include_str!("../../broker/src/server/failpoints.rs");
        let all = broker
            .split("pub const ALL: &[&str] = &[")
            .nth(1)
            .and_then(|rest| rest.split("];").next())
            .expect("the broker's failpoints::ALL");
        for point in DELAY_POINTS {
            let constant = broker
                .lines()
                .find(|line| line.contains(&format!("&str = \"{point}\";")))
                .and_then(|line| line.split_whitespace().nth(2))
                .map(|name| name.trim_end_matches(':'))
                .unwrap_or_else(|| panic!("the broker has no point {point:?}"));
            assert!(
                all.contains(&format!("{constant},")),
                "{point} ({constant}) is not in the broker's ALL"
            );
        }
    }
}
