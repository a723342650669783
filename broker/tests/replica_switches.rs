//! Each JIRA's event sequence (kafka-replication.md §1.x and §5.x) driven through the
//! simulated cluster: with the bug switch on, the concrete violation the JIRA reports;
//! with it off (the default), none.

use broker::replica::sim::{Cluster, Envelope, Message, MessageId, SimConfig, Violation};
use broker::replica::{
    Acks, BrokerId, ProduceError, ProduceOutcome, ReplicaConfig, RequestId, TruncationMode,
};

fn cluster(brokers: &[BrokerId], tune: impl Fn(&mut ReplicaConfig)) -> Cluster {
    let mut replica = ReplicaConfig::new(0, Vec::new());
    replica.replica_lag_time_max_ms = 2_000;
    replica.request_timeout_ms = 30_000;
    replica.high_watermark_checkpoint_interval_ms = 100;
    tune(&mut replica);
    let mut config = SimConfig::new(brokers.to_vec());
    config.replica = replica;
    Cluster::new(config)
}

fn values(prefix: &str, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("{prefix}{i}").into_bytes())
        .collect()
}

/// Delivers messages one by one, oldest first, skipping `held`, until `done` or a bound.
fn deliver_until(cluster: &mut Cluster, held: &[MessageId], done: impl Fn(&Cluster) -> bool) {
    for _ in 0..500 {
        if done(cluster) {
            return;
        }
        let Some(id) = cluster.find(|e| !held.contains(&e.id)) else {
            break;
        };
        cluster.deliver(id).unwrap();
    }
    assert!(done(cluster), "the cluster never got there");
}

fn deliver_rounds_except(cluster: &mut Cluster, held: &[MessageId], rounds: usize) {
    for _ in 0..rounds {
        let ids: Vec<_> = cluster
            .messages()
            .iter()
            .map(|e| e.id)
            .filter(|id| !held.contains(id))
            .collect();
        for id in ids {
            if cluster.messages().iter().any(|e| e.id == id) {
                cluster.deliver(id).unwrap();
            }
        }
    }
}

fn acked(cluster: &Cluster, request: RequestId) -> bool {
    cluster
        .produce_record(request)
        .is_some_and(|p| matches!(p.result, Some(Ok(_))))
}

fn is_leader_and_isr_to(e: &Envelope, to: BrokerId) -> bool {
    e.to == to && matches!(e.message, Message::LeaderAndIsr(_))
}

fn lost_offsets(cluster: &Cluster) -> Vec<u64> {
    cluster
        .lost_acked_records()
        .into_iter()
        .map(|(offset, _)| offset)
        .collect()
}

// ----- KAFKA-7128 ------------------------------------------------------------------------

/// §1.1: r2 leads with a HW lagging r1's; an empty r3 reaches that stale HW and, with
/// the bug, joins the ISR; r2 fails; r3 is elected cleanly without [5, 10).
///
/// A leader whose ISR is only itself raises its HW to its LEO at once (Kafka's
/// `makeLeader` does too), so the stale HW needs an ISR member that holds it back, as in
/// the fix's unit test: r1 dies unnoticed while leadership moves to r2, and stays in the
/// ISR until the controller notices.
fn kafka_7128(buggy: bool) -> Cluster {
    let mut c = cluster(&[1, 2, 3], |r| {
        r.bugs.kafka_7128 = buggy;
        r.fetch_max_records = 5;
    });
    c.create_partition(vec![1, 2, 3]).unwrap();
    c.deliver_rounds(2).unwrap();
    // r3 is lost with its disk and shrunk out of the ISR.
    c.wipe(3).unwrap();
    c.controller_handle_failure(3).unwrap();
    c.deliver_rounds(2).unwrap();
    assert_eq!(c.isr(), vec![1, 2]);

    let (first, _) = c.produce(1, values("a", 5), Acks::All).unwrap();
    deliver_until(&mut c, &[], |c| {
        acked(c, first) && c.replica(2).is_some_and(|r| r.high_watermark() == 5)
    });
    let (second, _) = c.produce(1, values("b", 5), Acks::All).unwrap();
    deliver_until(&mut c, &[], |c| acked(c, second));
    // r2 learns only the HW of the fetch before the one that committed [5, 10).
    let response = c
        .find(|e| e.to == 2 && matches!(e.message, Message::FetchResponse(..)))
        .unwrap();
    c.deliver(response).unwrap();
    let r2 = c.replica(2).unwrap();
    assert_eq!((r2.high_watermark(), r2.log_end_offset()), (5, 10));
    assert_eq!(c.replica(1).unwrap().high_watermark(), 10);

    // r1 dies unnoticed; leadership moves to r2 (epoch +1), its HW stale at 5.
    c.crash(1).unwrap();
    c.elect(2).unwrap();
    c.deliver_rounds(1).unwrap();
    assert_eq!((c.leader(), c.isr()), (Some(2), vec![1, 2]));
    assert_eq!(
        c.replica(2).unwrap().high_watermark(),
        5,
        "r2.HW < 10 <= r2.LEO"
    );
    // The new, empty r3 starts and fetches [0, 5), then fetches from 5 = r2's HW.
    c.restart(3).unwrap();
    deliver_until(&mut c, &[], |c| {
        c.find(|e| e.to == 2 && matches!(&e.message, Message::Fetch(f) if f.fetch_offset == 5))
            .is_some()
    });
    let fetch = c
        .find(|e| e.to == 2 && matches!(e.message, Message::Fetch(_)))
        .unwrap();
    c.deliver(fetch).unwrap();
    assert_eq!(
        c.isr().contains(&3),
        buggy,
        "r3 joins the ISR at the stale HW only with the bug"
    );

    // The controller notices r1; then r2 fails before r3 catches up.
    c.controller_handle_failure(1).unwrap();
    c.fail(2).unwrap();
    c.deliver_rounds(2).unwrap();
    c
}

#[test]
fn kafka_7128_on_a_replica_below_the_epoch_start_joins_the_isr_and_committed_data_is_lost() {
    let mut c = kafka_7128(true);
    assert_eq!(c.leader(), Some(3), "elected cleanly: it is in the ISR");
    assert_eq!(
        lost_offsets(&c),
        vec![5, 6, 7, 8, 9],
        "acks=all records lost"
    );
    assert!(c.violations().iter().any(
        |v| matches!(v, Violation::CommittedLost { leader: 3, record } if record.offset == 5)
    ));
    // New writes reuse the offsets: offset 5 changes value.
    c.produce(3, values("c", 1), Acks::All).unwrap();
    assert!(c
        .violations()
        .iter()
        .any(|v| matches!(v, Violation::CommittedChanged { was, .. } if was.offset == 5)));
}

#[test]
fn kafka_7128_off_the_partition_waits_offline_and_loses_nothing() {
    let mut c = kafka_7128(false);
    assert_eq!(c.leader(), None, "no live ISR member: offline, not unclean");
    assert_eq!(c.violations(), &[]);
    c.restart(2).unwrap();
    c.deliver_rounds(6).unwrap();
    assert_eq!(c.leader(), Some(2));
    assert_eq!(lost_offsets(&c), Vec::<u64>::new());
    assert_eq!(c.committed().map(|r| r.len()), Some(10));
    assert_eq!(c.violations(), &[]);
}

// ----- KAFKA-1561 ------------------------------------------------------------------------

/// §5.3: RF 1 → 2 by reassignment; the new replica joins the ISR; replication is cut;
/// acks=all writes to the old leader; preferred election of the new replica.
fn kafka_1561(buggy: bool) -> (Cluster, Vec<RequestId>) {
    let mut c = cluster(&[1, 2], |r| r.bugs.kafka_1561 = buggy);
    c.create_partition(vec![1]).unwrap();
    c.deliver_rounds(1).unwrap();
    c.produce(1, values("a", 5), Acks::All).unwrap();
    c.add_replicas(&[2]).unwrap();
    deliver_until(&mut c, &[], |c| c.isr() == vec![1, 2]);

    c.block(1, 2);
    c.block(2, 1);
    let mut requests = Vec::new();
    for i in 0..3 {
        let (request, outcome) = c
            .produce(1, values(&format!("b{i}."), 1), Acks::All)
            .unwrap();
        match outcome {
            ProduceOutcome::Done(Ok(_)) => assert!(buggy, "acked before replication"),
            ProduceOutcome::Pending(_) => assert!(!buggy),
            other => panic!("unexpected {other:?}"),
        }
        requests.push(request);
    }
    c.deliver_rounds(2).unwrap();
    // Preferred election, within the lag time: broker 2 is still in the ISR.
    c.elect(2).unwrap();
    c.deliver_rounds(1).unwrap();
    c.unblock(1, 2);
    c.unblock(2, 1);
    c.deliver_rounds(6).unwrap();
    (c, requests)
}

#[test]
fn kafka_1561_on_acks_all_completes_before_replication_and_the_writes_are_lost() {
    let (mut c, requests) = kafka_1561(true);
    assert!(requests.iter().all(|&r| acked(&c, r)));
    assert_eq!(lost_offsets(&c), vec![5, 6, 7]);
    // The offsets are reused by later writes.
    c.produce(2, values("c", 3), Acks::All).unwrap();
    c.deliver_rounds(4).unwrap();
    assert_eq!(lost_offsets(&c), vec![5, 6, 7]);
}

#[test]
fn kafka_1561_off_the_writes_end_indeterminate_and_nothing_acked_is_lost() {
    let (c, requests) = kafka_1561(false);
    for request in requests {
        let result = c.produce_record(request).and_then(|p| p.result.clone());
        assert!(
            matches!(result, Some(Err(ProduceError::LeadershipLost(_)))),
            "{result:?}"
        );
    }
    assert_eq!(lost_offsets(&c), Vec::<u64>::new());
    assert_eq!(c.violations(), &[]);
}

// ----- KAFKA-2143 ------------------------------------------------------------------------

/// §5.5 with RF 2 [A=1, B=2], HW truncation and unclean election: A gets ahead of B,
/// OffsetOutOfRange races with B's appends, and the escalation elects A uncleanly.
fn kafka_2143(buggy: bool) -> Cluster {
    let mut c = cluster(&[1, 2], |r| {
        r.bugs.kafka_2143 = buggy;
        r.truncation_mode = TruncationMode::Hw;
        r.unclean_leader_election = true;
    });
    c.create_partition(vec![1, 2]).unwrap();
    c.deliver_rounds(1).unwrap();
    let (committed, _) = c.produce(1, values("a", 10), Acks::All).unwrap();
    deliver_until(&mut c, &[], |c| {
        acked(c, committed) && c.replica(2).is_some_and(|r| r.high_watermark() == 10)
    });

    // Partition A from B: acks=1 writes make A's log 15 long and B leaves the ISR.
    c.block(1, 2);
    c.block(2, 1);
    c.produce(1, values("x", 5), Acks::Leader).unwrap();
    c.advance(2_001).unwrap();
    c.deliver_rounds(2).unwrap();
    assert_eq!(c.isr(), vec![1]);
    c.advance(100).unwrap();
    assert_eq!(
        c.log(1)
            .map(broker::log::ReplicaLog::high_watermark_checkpoint),
        Some(15)
    );

    // Kill A, heal: the unclean election makes B (LEO 10) leader; it takes 3 writes.
    c.fail(1).unwrap();
    c.unblock(1, 2);
    c.unblock(2, 1);
    c.deliver_rounds(1).unwrap();
    assert_eq!(c.leader(), Some(2));
    c.produce(2, values("y", 3), Acks::Leader).unwrap();

    // A restarts, keeps its log (HW 15 = LEO), fetches at 15: out of range.
    c.restart(1).unwrap();
    deliver_until(&mut c, &[], |c| {
        c.find(|e| e.to == 2 && matches!(e.message, Message::ListOffsets(_)))
            .is_some()
    });
    // Before A's ListOffsets arrives, B has appended past A's LEO.
    c.produce(2, values("z", 2), Acks::Leader).unwrap();
    let list = c
        .find(|e| e.to == 2 && matches!(e.message, Message::ListOffsets(_)))
        .unwrap();
    c.deliver(list).unwrap();
    let answer = c
        .find(|e| e.to == 1 && matches!(e.message, Message::ListOffsetsResponse(..)))
        .unwrap();
    c.deliver(answer).unwrap();
    c
}

#[test]
fn kafka_2143_on_the_follower_deletes_its_log_and_the_escalation_loses_acked_writes() {
    let mut c = kafka_2143(true);
    let a = c.replica(1).unwrap();
    assert_eq!(
        (a.log_start_offset(), a.log_end_offset()),
        (0, 0),
        "re-replicating from the leader's log start"
    );
    // Escalation: B dies while A re-fetches; A is elected uncleanly.
    c.fail(2).unwrap();
    c.deliver_rounds(2).unwrap();
    assert_eq!(c.leader(), Some(1));
    assert_eq!(
        lost_offsets(&c),
        (0..10).collect::<Vec<_>>(),
        "acked on both replicas"
    );
}

#[test]
fn kafka_2143_off_the_follower_keeps_its_log_and_acked_writes_survive() {
    let mut c = kafka_2143(false);
    let a = c.replica(1).unwrap();
    assert_eq!((a.log_start_offset(), a.log_end_offset()), (0, 15));
    c.fail(2).unwrap();
    c.deliver_rounds(2).unwrap();
    assert_eq!(c.leader(), Some(1));
    assert_eq!(lost_offsets(&c), Vec::<u64>::new());
}

// ----- KAFKA-7040 ------------------------------------------------------------------------

/// §5.2 with C=1, L=2, B=3: B's OffsetsForLeaderEpoch to L is answered in epoch e but
/// held; B leads e+1 and commits [10, 15); L leads e+2; the stale answer arrives.
fn kafka_7040(buggy: bool) -> Cluster {
    let mut c = cluster(&[1, 2, 3], |r| {
        r.bugs.kafka_7040 = buggy;
        r.replica_lag_time_max_ms = 10_000;
    });
    c.create_partition(vec![1, 2, 3]).unwrap();
    c.deliver_rounds(1).unwrap();
    let (first, _) = c.produce(1, values("a", 10), Acks::All).unwrap();
    deliver_until(&mut c, &[], |c| acked(c, first));
    c.deliver_rounds(3).unwrap();

    // Transfer to L (epoch 1). B asks L where its epoch ends; L's answer is held.
    c.elect(2).unwrap();
    let to_b = c.find(|e| is_leader_and_isr_to(e, 3)).unwrap();
    c.deliver(to_b).unwrap();
    let question = c
        .find(|e| e.to == 2 && matches!(e.message, Message::OffsetsForLeaderEpoch(_)))
        .unwrap();
    let to_l = c.find(|e| is_leader_and_isr_to(e, 2)).unwrap();
    c.deliver(to_l).unwrap();
    c.deliver(question).unwrap();
    let stale = c
        .find(|e| e.to == 3 && matches!(e.message, Message::OffsetsForLeaderEpochResponse(..)))
        .unwrap();
    deliver_rounds_except(&mut c, &[stale], 3);

    // Transfer to B (epoch 2): it takes 5 acks=all writes, committed on all three.
    c.elect(3).unwrap();
    deliver_rounds_except(&mut c, &[stale], 1);
    assert!(c.replica(3).unwrap().is_leader());
    let (second, _) = c.produce(3, values("b", 5), Acks::All).unwrap();
    deliver_until(&mut c, &[stale], |c| acked(c, second));
    assert_eq!(c.replica(3).unwrap().high_watermark(), 15);

    // Transfer back to L (epoch 3); B's new question to L is dropped.
    c.elect(2).unwrap();
    for to in [2, 1, 3] {
        let id = c.find(|e| is_leader_and_isr_to(e, to)).unwrap();
        c.deliver(id).unwrap();
    }
    let fresh = c
        .find(|e| {
            e.id != stale && e.to == 2 && matches!(e.message, Message::OffsetsForLeaderEpoch(_))
        })
        .unwrap();
    c.drop_message(fresh).unwrap();
    // The stale answer (epoch 0 ends at 10) arrives.
    c.deliver(stale).unwrap();
    c
}

#[test]
fn kafka_7040_on_a_stale_answer_truncates_committed_records_and_a_failover_loses_them() {
    let mut c = kafka_7040(true);
    assert_eq!(
        c.replica(3).unwrap().log_end_offset(),
        10,
        "B truncated [10, 15)"
    );
    // L and C die before B re-fetches: B, the only live ISR member, is elected.
    c.fail(1).unwrap();
    c.fail(2).unwrap();
    c.deliver_rounds(2).unwrap();
    assert_eq!(c.leader(), Some(3));
    assert_eq!(lost_offsets(&c), vec![10, 11, 12, 13, 14]);
    assert!(c
        .violations()
        .iter()
        .any(|v| matches!(v, Violation::CommittedLost { leader: 3, .. })));
}

#[test]
fn kafka_7040_off_the_stale_answer_is_ignored_and_nothing_is_lost() {
    let mut c = kafka_7040(false);
    assert_eq!(c.replica(3).unwrap().log_end_offset(), 15);
    c.fail(1).unwrap();
    c.fail(2).unwrap();
    c.deliver_rounds(2).unwrap();
    assert_eq!(c.leader(), Some(3));
    assert_eq!(lost_offsets(&c), Vec::<u64>::new());
    assert_eq!(c.violations(), &[]);
}
