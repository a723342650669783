//! StrongIsr (kafka-replication.md §3) under random schedules: with no bug switch on, no
//! record seen below any replica's high watermark is ever lost or changed, every member of
//! the stored ISR holds each presumed leader's records below that leader's HW, and every
//! acks=all success stays on the leader.
//!
//! The simulated cluster checks these after every step (`Cluster::violations`); the
//! schedule interleaves produce, message delivery, drops and reorders, clock ticks,
//! leadership transfers chosen by the test-controller from the ISR, and crash/restart.

use broker::replica::sim::{Cluster, SimConfig};
use broker::replica::TruncationMode;
use broker::replica::{Acks, BrokerId, ReplicaConfig};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};

const BROKERS: [BrokerId; 3] = [1, 2, 3];

#[derive(Debug, Clone)]
enum Step {
    Produce {
        count: usize,
        acks: u8,
    },
    /// Deliver the message at this position (mod the queue length): reorders.
    Deliver(usize),
    Drop(usize),
    /// Deliver everything in flight, a few rounds.
    Rounds(usize),
    Advance(u64),
    /// Leadership transfer to the n-th live ISR member.
    Elect(usize),
    /// Kill a broker; the controller may notice later.
    Crash(usize),
    /// The controller notices a dead broker.
    Notice(usize),
    Restart(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (1usize..4, 0u8..3).prop_map(|(count, acks)| Step::Produce { count, acks }),
        6 => any::<usize>().prop_map(Step::Deliver),
        1 => any::<usize>().prop_map(Step::Drop),
        3 => (1usize..4).prop_map(Step::Rounds),
        2 => (1u64..1_500).prop_map(Step::Advance),
        1 => any::<usize>().prop_map(Step::Elect),
        1 => (0usize..3).prop_map(Step::Crash),
        1 => (0usize..3).prop_map(Step::Notice),
        1 => (0usize..3).prop_map(Step::Restart),
    ]
}

fn cluster(min_insync_replicas: usize, truncation_mode: TruncationMode) -> Cluster {
    let mut replica = ReplicaConfig::new(0, Vec::new());
    replica.replica_lag_time_max_ms = 1_000;
    replica.request_timeout_ms = 400;
    replica.retry_backoff_ms = 50;
    replica.high_watermark_checkpoint_interval_ms = 200;
    replica.fetch_max_records = 3;
    replica.min_insync_replicas = min_insync_replicas;
    replica.truncation_mode = truncation_mode;
    let mut config = SimConfig::new(BROKERS.to_vec());
    config.replica = replica;
    config.produce_timeout_ms = 2_000;
    let mut cluster = Cluster::new(config);
    cluster.create_partition(BROKERS.to_vec()).unwrap();
    cluster
}

fn run(cluster: &mut Cluster, steps: &[Step]) -> Result<(), TestCaseError> {
    let mut value = 0u64;
    for step in steps {
        match *step {
            Step::Produce { count, acks } => {
                let Some(leader) = cluster.leader().filter(|&l| cluster.replica(l).is_some())
                else {
                    continue;
                };
                let values = (0..count)
                    .map(|_| {
                        value += 1;
                        value.to_string().into_bytes()
                    })
                    .collect();
                let acks = [Acks::None, Acks::Leader, Acks::All][usize::from(acks)];
                cluster.produce(leader, values, acks).unwrap();
            }
            Step::Deliver(i) if !cluster.messages().is_empty() => {
                let id = cluster.messages()[i % cluster.messages().len()].id;
                cluster.deliver(id).unwrap();
            }
            Step::Drop(i) if !cluster.messages().is_empty() => {
                let id = cluster.messages()[i % cluster.messages().len()].id;
                cluster.drop_message(id).unwrap();
            }
            Step::Deliver(_) | Step::Drop(_) => {}
            Step::Rounds(n) => cluster.deliver_rounds(n).unwrap(),
            Step::Advance(ms) => cluster.advance(ms).unwrap(),
            Step::Elect(i) => {
                let candidates: Vec<_> = cluster
                    .isr()
                    .into_iter()
                    .filter(|&b| cluster.is_alive(b))
                    .collect();
                if !candidates.is_empty() {
                    cluster.elect(candidates[i % candidates.len()]).unwrap();
                }
            }
            Step::Crash(i) => {
                let broker = BROKERS[i];
                // Keep one broker up so that something can make progress.
                let up = BROKERS.iter().filter(|&&b| cluster.is_alive(b)).count();
                if cluster.is_alive(broker) && up > 1 {
                    cluster.crash(broker).unwrap();
                }
            }
            Step::Notice(i) => {
                if !cluster.is_alive(BROKERS[i]) {
                    cluster.controller_handle_failure(BROKERS[i]).unwrap();
                }
            }
            Step::Restart(i) => {
                if !cluster.is_alive(BROKERS[i]) {
                    cluster.restart(BROKERS[i]).unwrap();
                }
            }
        }
        prop_assert!(
            cluster.violations().is_empty(),
            "after {:?}: {:?}",
            step,
            cluster.violations()
        );
    }
    if cluster
        .leader()
        .is_some_and(|l| cluster.replica(l).is_some())
    {
        prop_assert_eq!(cluster.lost_acked_records(), vec![]);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn no_committed_record_is_lost_or_changed(
        min_insync_replicas in 1usize..3,
        steps in proptest::collection::vec(step(), 1..120),
    ) {
        let mut cluster = cluster(min_insync_replicas, TruncationMode::Epoch);
        run(&mut cluster, &steps)?;
    }
}

/// The same schedules and checks must be able to fail: with pre-KIP-101 truncation to the
/// high watermark, which the TLA+ spec (`KafkaTruncateToHighWatermark`) shows violates
/// StrongIsr, some of a fixed set of generated schedules lose committed records.
#[test]
fn the_schedules_find_the_known_hw_truncation_loss() {
    let mut runner = TestRunner::new(Config::default());
    let schedules = (1usize..3, proptest::collection::vec(step(), 1..120));
    let failing = (0..256)
        .filter(|_| {
            let (min_insync_replicas, steps) = match schedules.new_tree(&mut runner) {
                Ok(tree) => tree.current(),
                Err(reason) => panic!("cannot generate a schedule: {reason}"),
            };
            let mut cluster = cluster(min_insync_replicas, TruncationMode::Hw);
            run(&mut cluster, &steps).is_err()
        })
        .count();
    assert!(
        failing > 0,
        "no schedule of 256 found the HW-truncation loss"
    );
}
