//! The seeded operation generator: what each worker does next, and when it may start.
//!
//! The two halves are kept apart on purpose. [`WorkerOps`] is the deterministic part: for
//! one seed, worker `w` gets the same sequence of [`PlannedOp`]s on every run, whatever
//! the network does (DESIGN.md §3: the same seed gives the same schedule of operations).
//! [`Pacer`] is the timing part: it spreads the total `rate` evenly over the workers and
//! stops at the time limit (and at an optional per-worker op limit); timing of course is
//! not reproducible.
//!
//! Randomness comes from `rng::Rng`: a root generator seeded
//! with the test's seed hands each worker its own seed (an output of the root, so the
//! workers' streams are unrelated rather than shifted copies of one another).
//!
//! Written values are unique across the whole run without coordination: worker `w`'s
//! `k`-th write carries `w + k * concurrency`. Every value the workers write is thus
//! non-negative; negative values are free for other writers (availability probes).

use rng::Rng;
use std::time::{Duration, Instant};

/// Everything the generator needs; plain data.
#[derive(Debug, Clone, PartialEq)]
pub struct GeneratorOptions {
    pub seed: u64,
    /// Workers (logical clients running at once).
    pub concurrency: usize,
    /// Operations per second over all workers; 0 means as fast as they can.
    pub rate: f64,
    /// Share of operations that are reads, 0.0 to 1.0 (the rest are writes/appends).
    pub read_fraction: f64,
    /// No operation starts after this much time from the start.
    pub time_limit: Duration,
    /// Partitions (keys) operations choose from, uniformly.
    pub partitions: u32,
    /// At most this many operations per worker (`None`: until the time limit).
    pub ops_per_worker: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GeneratorError {
    #[error("concurrency must be at least 1")]
    NoWorkers,
    #[error("there must be at least one partition")]
    NoPartitions,
    #[error("read fraction must be between 0 and 1, not {0}")]
    ReadFraction(f64),
    #[error("rate must be a finite number of operations per second, 0 or more, not {0}")]
    Rate(f64),
    #[error("worker {worker} does not exist (concurrency {concurrency})")]
    NoSuchWorker { worker: usize, concurrency: usize },
}

/// One operation a worker is to perform. The workload turns it into requests and history
/// entries: a `Write` is an `append` in the log workload and a `write` in the register one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PlannedOp {
    Write { partition: u32, value: i64 },
    Read { partition: u32 },
}

impl PlannedOp {
    pub fn partition(&self) -> u32 {
        match *self {
            PlannedOp::Write { partition, .. } | PlannedOp::Read { partition } => partition,
        }
    }
}

/// Validated options, ready to hand each worker its plan.
#[derive(Debug, Clone)]
pub struct Generator {
    options: GeneratorOptions,
    worker_seeds: Vec<u64>,
}

impl Generator {
    pub fn new(options: GeneratorOptions) -> Result<Generator, GeneratorError> {
        if options.concurrency == 0 {
            return Err(GeneratorError::NoWorkers);
        }
        if options.partitions == 0 {
            return Err(GeneratorError::NoPartitions);
        }
        if !(0.0..=1.0).contains(&options.read_fraction) {
            return Err(GeneratorError::ReadFraction(options.read_fraction));
        }
        if !options.rate.is_finite() || options.rate < 0.0 {
            return Err(GeneratorError::Rate(options.rate));
        }
        let mut root = Rng::new(options.seed);
        let worker_seeds = (0..options.concurrency).map(|_| root.next_u64()).collect();
        Ok(Generator {
            options,
            worker_seeds,
        })
    }

    pub fn options(&self) -> &GeneratorOptions {
        &self.options
    }

    /// Worker `worker`'s operations.
    pub fn ops(&self, worker: usize) -> Result<WorkerOps, GeneratorError> {
        let seed = *self
            .worker_seeds
            .get(worker)
            .ok_or(GeneratorError::NoSuchWorker {
                worker,
                concurrency: self.options.concurrency,
            })?;
        // The read threshold in 32-bit fixed point: 1.0 reads always, 0.0 never.
        let read_threshold = (self.options.read_fraction * f64::from(1u32 << 31) * 2.0) as u64;
        Ok(WorkerOps {
            rng: Rng::new(seed),
            first_value: worker as i64,
            stride: self.options.concurrency as i64,
            writes: 0,
            read_threshold,
            partitions: self.options.partitions,
        })
    }

    /// Worker `worker`'s pacing, for a run that started at `start`.
    pub fn pacer(&self, worker: usize, start: Instant) -> Result<Pacer, GeneratorError> {
        let concurrency = self.options.concurrency;
        if worker >= concurrency {
            return Err(GeneratorError::NoSuchWorker {
                worker,
                concurrency,
            });
        }
        let period = if self.options.rate > 0.0 {
            // Beyond what a Duration holds: one op at the start and no more.
            Some(
                Duration::try_from_secs_f64(concurrency as f64 / self.options.rate)
                    .unwrap_or(Duration::MAX),
            )
        } else {
            None
        };
        // Staggered so that the workers' slots interleave evenly.
        let offset = period.map_or(Duration::ZERO, |p| {
            p.checked_mul(worker as u32)
                .map_or(Duration::ZERO, |d| d / concurrency as u32)
        });
        Ok(Pacer {
            period,
            next: start.checked_add(offset).unwrap_or(start),
            deadline: start.checked_add(self.options.time_limit),
            remaining: self.options.ops_per_worker,
        })
    }
}

/// One worker's deterministic sequence of operations (an endless iterator).
#[derive(Debug, Clone)]
pub struct WorkerOps {
    rng: Rng,
    first_value: i64,
    stride: i64,
    writes: i64,
    read_threshold: u64,
    partitions: u32,
}

impl WorkerOps {
    pub fn next_op(&mut self) -> PlannedOp {
        let is_read = (self.rng.next_u64() >> 32) < self.read_threshold;
        let partition = self.rng.below(u64::from(self.partitions)) as u32;
        if is_read {
            return PlannedOp::Read { partition };
        }
        let value = self
            .first_value
            .saturating_add(self.writes.saturating_mul(self.stride));
        self.writes += 1;
        PlannedOp::Write { partition, value }
    }
}

impl Iterator for WorkerOps {
    type Item = PlannedOp;

    fn next(&mut self) -> Option<PlannedOp> {
        Some(self.next_op())
    }
}

/// When one worker may start its next operation.
#[derive(Debug, Clone)]
pub struct Pacer {
    /// Time between this worker's slots; `None`: no pacing.
    period: Option<Duration>,
    next: Instant,
    /// `None`: no time limit (it lies beyond what an `Instant` holds).
    deadline: Option<Instant>,
    remaining: Option<u64>,
}

impl Pacer {
    /// The instant the next operation may start (possibly already past), or `None` when
    /// the worker is done: its slot lies at or beyond the time limit, or it has used its
    /// op limit. A worker that fell behind by more than a period starts at once and does
    /// not burst to catch up.
    pub fn next_slot(&mut self, now: Instant) -> Option<Instant> {
        if self.remaining == Some(0) {
            return None;
        }
        let slot = match self.period {
            None => now,
            Some(period) => {
                let late = now.checked_duration_since(self.next).unwrap_or_default();
                let slot = if late > period { now } else { self.next };
                self.next = slot.checked_add(period).unwrap_or(slot);
                slot
            }
        };
        if self.deadline.is_some_and(|deadline| slot >= deadline) {
            self.remaining = Some(0);
            return None;
        }
        if let Some(remaining) = &mut self.remaining {
            *remaining -= 1;
        }
        Some(slot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn options(seed: u64) -> GeneratorOptions {
        GeneratorOptions {
            seed,
            concurrency: 4,
            rate: 0.0,
            read_fraction: 0.5,
            time_limit: Duration::from_secs(60),
            partitions: 3,
            ops_per_worker: None,
        }
    }

    fn take(generator: &Generator, worker: usize, n: usize) -> Vec<PlannedOp> {
        generator.ops(worker).unwrap().take(n).collect()
    }

    #[test]
    fn the_same_seed_gives_the_same_ops_per_worker() {
        let a = Generator::new(options(42)).unwrap();
        let b = Generator::new(options(42)).unwrap();
        let c = Generator::new(options(43)).unwrap();
        for w in 0..4 {
            assert_eq!(take(&a, w, 1000), take(&b, w, 1000));
            assert_ne!(take(&a, w, 1000), take(&c, w, 1000));
        }
        // Workers do not share one stream.
        assert_ne!(take(&a, 0, 50), take(&a, 1, 50));
    }

    #[test]
    fn written_values_are_unique_and_partitions_in_range() {
        let generator = Generator::new(options(7)).unwrap();
        let mut values = HashSet::new();
        let mut partitions = HashSet::new();
        let mut reads = 0;
        for w in 0..4 {
            for op in take(&generator, w, 5000) {
                partitions.insert(op.partition());
                match op {
                    PlannedOp::Write { value, .. } => {
                        assert!(value >= 0);
                        assert!(values.insert(value), "value {value} written twice");
                    }
                    PlannedOp::Read { .. } => reads += 1,
                }
            }
        }
        assert_eq!(partitions, HashSet::from([0, 1, 2]));
        // About half reads (20,000 draws: far more than 3 sigma inside these bounds).
        assert!((9_000..11_000).contains(&reads), "{reads} reads");
    }

    #[test]
    fn read_fraction_bounds_are_exact() {
        let all_reads = Generator::new(GeneratorOptions {
            read_fraction: 1.0,
            ..options(1)
        })
        .unwrap();
        assert!(take(&all_reads, 0, 2000)
            .iter()
            .all(|op| matches!(op, PlannedOp::Read { .. })));
        let no_reads = Generator::new(GeneratorOptions {
            read_fraction: 0.0,
            ..options(1)
        })
        .unwrap();
        assert!(take(&no_reads, 0, 2000)
            .iter()
            .all(|op| matches!(op, PlannedOp::Write { .. })));
    }

    #[test]
    fn bad_options_are_refused() {
        let bad = |o: GeneratorOptions| Generator::new(o).unwrap_err();
        assert_eq!(
            bad(GeneratorOptions {
                concurrency: 0,
                ..options(0)
            }),
            GeneratorError::NoWorkers
        );
        assert_eq!(
            bad(GeneratorOptions {
                partitions: 0,
                ..options(0)
            }),
            GeneratorError::NoPartitions
        );
        assert!(matches!(
            bad(GeneratorOptions {
                read_fraction: 1.5,
                ..options(0)
            }),
            GeneratorError::ReadFraction(_)
        ));
        assert!(matches!(
            bad(GeneratorOptions {
                rate: f64::NAN,
                ..options(0)
            }),
            GeneratorError::Rate(_)
        ));
        let generator = Generator::new(options(0)).unwrap();
        assert!(generator.ops(4).is_err());
        assert!(generator.pacer(4, Instant::now()).is_err());
    }

    #[test]
    fn pacing_spreads_the_rate_over_workers_and_stops_at_the_limit() {
        let start = Instant::now();
        let generator = Generator::new(GeneratorOptions {
            rate: 100.0,
            time_limit: Duration::from_secs(1),
            ..options(0)
        })
        .unwrap();
        // 4 workers at 100 ops/s in total: each every 40 ms, offset by 10 ms per worker.
        let mut pacer = generator.pacer(1, start).unwrap();
        let mut slots = Vec::new();
        // Pretend every op is instant: ask at each returned slot.
        let mut now = start;
        while let Some(slot) = pacer.next_slot(now) {
            slots.push(slot.duration_since(start));
            now = slot;
        }
        assert_eq!(slots.len(), 25);
        assert_eq!(slots[0], Duration::from_millis(10));
        assert_eq!(slots[1], Duration::from_millis(50));
        assert_eq!(slots[24], Duration::from_millis(970));
        // A worker far behind starts at once, without a burst of catch-up slots.
        let mut pacer = generator.pacer(0, start).unwrap();
        let late = start + Duration::from_millis(500);
        assert_eq!(pacer.next_slot(late), Some(late));
        assert_eq!(
            pacer.next_slot(late),
            Some(late + Duration::from_millis(40))
        );
        // Past the time limit: done, and stays done.
        let after = start + Duration::from_secs(2);
        assert_eq!(pacer.next_slot(after), None);
        assert_eq!(pacer.next_slot(start), None);
    }

    #[test]
    fn op_limit_and_unpaced_workers() {
        let start = Instant::now();
        let generator = Generator::new(GeneratorOptions {
            ops_per_worker: Some(3),
            ..options(0)
        })
        .unwrap();
        let mut pacer = generator.pacer(2, start).unwrap();
        let now = start + Duration::from_millis(5);
        assert_eq!(pacer.next_slot(now), Some(now));
        assert_eq!(pacer.next_slot(now), Some(now));
        assert_eq!(pacer.next_slot(now), Some(now));
        assert_eq!(pacer.next_slot(now), None);
    }
}
