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
//! `k`-th write carries `w + k * concurrency` (a batch of `n` takes `n` consecutive
//! `k`s). Every value the workers write is thus non-negative; negative values are free
//! for other writers (availability probes).
//!
//! Workload shapes, both off by default, and drawing nothing from the stream when off, so
//! that a seed gives the same operations it gave before they existed:
//!
//! - **hot partitions**: partition `i` is twice as likely as partition `i + 1` (Jepsen's
//!   Kafka workload skews its keys so), so that a few partitions take most of the
//!   traffic, and their replicas are busy when faults strike;
//! - **batches**: a share of the writes are batches of 2 to `batch_max` values
//!   (uniform), sent in one request and appended at consecutive offsets.

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
    /// Partitions (keys) operations choose from, uniformly unless `hot_partitions`.
    pub partitions: u32,
    /// At most this many operations per worker (`None`: until the time limit).
    pub ops_per_worker: Option<u64>,
    /// Partition `i` twice as likely as `i + 1` instead of uniform.
    pub hot_partitions: bool,
    /// Share of writes sent as a batch, 0.0 to 1.0.
    pub batch_fraction: f64,
    /// Largest batch (at least 2 when `batch_fraction` is above 0).
    pub batch_max: u32,
}

/// The largest batch the generator plans (the broker takes up to 10,000 per request).
pub const MAX_BATCH: u32 = 1000;

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
    #[error("batch fraction must be between 0 and 1, not {0}")]
    BatchFraction(f64),
    #[error("largest batch must be between 2 and {MAX_BATCH}, not {0}")]
    BatchMax(u32),
    #[error("worker {worker} does not exist (concurrency {concurrency})")]
    NoSuchWorker { worker: usize, concurrency: usize },
}

/// One operation a worker is to perform. The workload turns it into requests and history
/// entries: a `Write` is an `append` in the log workload and a `write` in the register one;
/// a `Batch` is one request carrying several values, each recorded as its own write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PlannedOp {
    Write { partition: u32, value: i64 },
    Batch { partition: u32, values: BatchValues },
    Read { partition: u32 },
}

impl PlannedOp {
    pub fn partition(&self) -> u32 {
        match *self {
            PlannedOp::Write { partition, .. }
            | PlannedOp::Batch { partition, .. }
            | PlannedOp::Read { partition } => partition,
        }
    }

    /// The values this operation writes, in order (none for a read).
    pub fn values(&self) -> Vec<i64> {
        match *self {
            PlannedOp::Write { value, .. } => vec![value],
            PlannedOp::Batch { values, .. } => values.iter().collect(),
            PlannedOp::Read { .. } => Vec::new(),
        }
    }
}

/// The values of a batch: `count` values from `first`, `stride` apart (the worker's own
/// sequence of values, so they are unique like single writes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BatchValues {
    pub first: i64,
    pub stride: i64,
    pub count: u32,
}

impl BatchValues {
    pub fn iter(&self) -> impl Iterator<Item = i64> {
        let BatchValues {
            first,
            stride,
            count,
        } = *self;
        (0..i64::from(count)).map(move |i| first.saturating_add(i.saturating_mul(stride)))
    }
}

/// A share in 32-bit fixed point, compared with the top 32 bits of a draw: 1.0 always, 0.0
/// never.
fn threshold(share: f64) -> u64 {
    (share * f64::from(1u32 << 31) * 2.0) as u64
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
        if !(0.0..=1.0).contains(&options.batch_fraction) {
            return Err(GeneratorError::BatchFraction(options.batch_fraction));
        }
        if options.batch_fraction > 0.0 && !(2..=MAX_BATCH).contains(&options.batch_max) {
            return Err(GeneratorError::BatchMax(options.batch_max));
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
        Ok(WorkerOps {
            rng: Rng::new(seed),
            first_value: worker as i64,
            stride: self.options.concurrency as i64,
            writes: 0,
            read_threshold: threshold(self.options.read_fraction),
            partitions: self.options.partitions,
            hot_partitions: self.options.hot_partitions,
            batch_threshold: threshold(self.options.batch_fraction),
            batch_max: self.options.batch_max,
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
    hot_partitions: bool,
    /// 0: no batches, and no draw for them.
    batch_threshold: u64,
    batch_max: u32,
}

impl WorkerOps {
    pub fn next_op(&mut self) -> PlannedOp {
        let is_read = (self.rng.next_u64() >> 32) < self.read_threshold;
        let partition = if self.hot_partitions {
            skewed(&mut self.rng, self.partitions)
        } else {
            self.rng.below(u64::from(self.partitions)) as u32
        };
        if is_read {
            return PlannedOp::Read { partition };
        }
        let count =
            if self.batch_threshold > 0 && (self.rng.next_u64() >> 32) < self.batch_threshold {
                self.rng.between(2, u64::from(self.batch_max)) as u32
            } else {
                1
            };
        let first = self
            .first_value
            .saturating_add(self.writes.saturating_mul(self.stride));
        self.writes += i64::from(count);
        if count == 1 {
            return PlannedOp::Write {
                partition,
                value: first,
            };
        }
        PlannedOp::Batch {
            partition,
            values: BatchValues {
                first,
                stride: self.stride,
                count,
            },
        }
    }
}

/// A partition in `0..partitions` with `i` twice as likely as `i + 1`: the number of
/// trailing zeros of a draw is `i` with probability 2^-(i+1); a draw at or beyond
/// `partitions` is drawn again, which leaves the ratios exact (partitions past 63 are
/// never chosen: their share is below 2^-64).
fn skewed(rng: &mut Rng, partitions: u32) -> u32 {
    let limit = partitions.min(64);
    loop {
        let zeros = rng.next_u64().trailing_zeros();
        if zeros < limit {
            return zeros;
        }
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
            hot_partitions: false,
            batch_fraction: 0.0,
            batch_max: 10,
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
                    PlannedOp::Batch { .. } => panic!("no batches unless asked: {op:?}"),
                    PlannedOp::Read { .. } => reads += 1,
                }
            }
        }
        assert_eq!(partitions, HashSet::from([0, 1, 2]));
        // About half reads (20,000 draws: far more than 3 sigma inside these bounds).
        assert!((9_000..11_000).contains(&reads), "{reads} reads");
    }

    /// The sequence as the generator drew it before hot partitions and batches existed:
    /// read or not, then a uniform partition, from each worker's own seed.
    fn plain_ops(options: &GeneratorOptions, worker: usize, n: usize) -> Vec<PlannedOp> {
        let mut root = Rng::new(options.seed);
        let seed = (0..=worker).map(|_| root.next_u64()).last().unwrap();
        let mut rng = Rng::new(seed);
        let threshold = (options.read_fraction * f64::from(1u32 << 31) * 2.0) as u64;
        let mut writes = 0i64;
        (0..n)
            .map(|_| {
                let is_read = (rng.next_u64() >> 32) < threshold;
                let partition = rng.below(u64::from(options.partitions)) as u32;
                if is_read {
                    PlannedOp::Read { partition }
                } else {
                    let value = worker as i64 + writes * options.concurrency as i64;
                    writes += 1;
                    PlannedOp::Write { partition, value }
                }
            })
            .collect()
    }

    #[test]
    fn with_the_shapes_off_a_seed_gives_the_ops_it_always_gave() {
        for seed in [0, 42, 1 << 40] {
            let plain = options(seed);
            // A batch size set but no batch share: still the plain sequence.
            let generator = Generator::new(GeneratorOptions {
                batch_max: 50,
                ..plain.clone()
            })
            .unwrap();
            for w in 0..4 {
                assert_eq!(take(&generator, w, 2000), plain_ops(&plain, w, 2000));
            }
        }
        // And the shapes do change it.
        let hot = Generator::new(GeneratorOptions {
            hot_partitions: true,
            ..options(42)
        })
        .unwrap();
        assert_ne!(take(&hot, 0, 200), plain_ops(&options(42), 0, 200));
    }

    #[test]
    fn hot_partitions_halve_from_one_partition_to_the_next() {
        let partitions = 6;
        let generator = Generator::new(GeneratorOptions {
            hot_partitions: true,
            partitions,
            ..options(11)
        })
        .unwrap();
        let mut counts = vec![0u64; partitions as usize];
        let draws = 4 * 50_000;
        for w in 0..4 {
            for op in take(&generator, w, 50_000) {
                counts[op.partition() as usize] += 1;
            }
        }
        // p(i) = 2^(5-i) / 63.
        for (i, &count) in counts.iter().enumerate() {
            let expected = draws as f64 * f64::from(1u32 << (5 - i)) / 63.0;
            let sigma = (expected * (1.0 - expected / draws as f64)).sqrt();
            assert!(
                (count as f64 - expected).abs() < 5.0 * sigma,
                "partition {i}: {count} draws, expected about {expected:.0} ({counts:?})"
            );
        }
        // The same seed, the same skewed sequence; a single partition is always 0.
        let again = Generator::new(GeneratorOptions {
            hot_partitions: true,
            partitions,
            ..options(11)
        })
        .unwrap();
        assert_eq!(take(&generator, 2, 1000), take(&again, 2, 1000));
        let one = Generator::new(GeneratorOptions {
            hot_partitions: true,
            partitions: 1,
            ..options(11)
        })
        .unwrap();
        assert!(take(&one, 0, 500).iter().all(|op| op.partition() == 0));
        // Many partitions: the first ones only, never out of range.
        let many = Generator::new(GeneratorOptions {
            hot_partitions: true,
            partitions: 1000,
            ..options(11)
        })
        .unwrap();
        assert!(take(&many, 0, 5000).iter().all(|op| op.partition() < 64));
    }

    #[test]
    fn batches_have_their_share_and_sizes_and_values_stay_unique() {
        let options = GeneratorOptions {
            read_fraction: 0.2,
            batch_fraction: 0.3,
            batch_max: 7,
            ..options(5)
        };
        let generator = Generator::new(options.clone()).unwrap();
        let again = Generator::new(options).unwrap();
        let mut values = HashSet::new();
        let (mut writes, mut batches) = (0u64, 0u64);
        let mut sizes = HashSet::new();
        for w in 0..4 {
            let ops = take(&generator, w, 5000);
            assert_eq!(
                ops,
                take(&again, w, 5000),
                "the same seed, the same batches"
            );
            for op in ops {
                match op {
                    PlannedOp::Write { .. } => writes += 1,
                    PlannedOp::Batch { values: batch, .. } => {
                        writes += 1;
                        batches += 1;
                        sizes.insert(batch.count);
                        assert!((2..=7).contains(&batch.count), "{op:?}");
                    }
                    PlannedOp::Read { .. } => continue,
                }
                for value in op.values() {
                    assert!(value >= 0);
                    assert!(values.insert(value), "value {value} written twice");
                }
            }
        }
        // 30% of about 16,000 writes; every size from 2 to 7 drawn.
        let share = batches as f64 / writes as f64;
        assert!(
            (0.27..0.33).contains(&share),
            "{batches} of {writes} writes"
        );
        assert_eq!(sizes, (2..=7).collect());
        // Worker w's values are still w + k * concurrency, k from 0 without a gap.
        let mut own: Vec<i64> = take(&generator, 1, 3000)
            .iter()
            .flat_map(PlannedOp::values)
            .collect();
        own.sort_unstable();
        let expected: Vec<i64> = (0..own.len() as i64).map(|k| 1 + 4 * k).collect();
        assert_eq!(own, expected);
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
        assert!(matches!(
            bad(GeneratorOptions {
                batch_fraction: -0.1,
                ..options(0)
            }),
            GeneratorError::BatchFraction(_)
        ));
        assert_eq!(
            bad(GeneratorOptions {
                batch_fraction: 0.5,
                batch_max: 1,
                ..options(0)
            }),
            GeneratorError::BatchMax(1)
        );
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
