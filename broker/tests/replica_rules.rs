//! One test per rule of the replica core, driving a `Replica` directly with hand-built
//! requests (kafka-replication.md §2).

use broker::log::{EpochEntry, MemoryLog, ReplicaLog};
use broker::record::{LeaderEpoch, Offset, Record};
use broker::replica::metadata::MetadataError;
use broker::replica::{
    Acks, Appended, BrokerId, Effect, EpochEndOffset, FetchData, FetchRequest, IsrExpansion,
    LeaderAndIsr, LeaderAndIsrError, ListOffsetsRequest, LogOffsets, OffsetsForLeaderEpochRequest,
    PartitionStateWrite, ProduceError, ProduceOutcome, ProduceRequest, Replica, ReplicaConfig,
    ReplicaEvent, ReplicationError, RoleKind, TruncationMode,
};

const LAG_MS: u64 = 1_000;

fn config(id: BrokerId) -> ReplicaConfig {
    let mut config = ReplicaConfig::new(id, vec![1, 2, 3]);
    config.replica_lag_time_max_ms = LAG_MS;
    config
}

fn state(leader: BrokerId, leader_epoch: LeaderEpoch, isr: &[BrokerId]) -> LeaderAndIsr {
    LeaderAndIsr {
        controller_epoch: 1,
        leader,
        leader_epoch,
        isr: isr.to_vec(),
        version: u64::from(leader_epoch),
        replicas: vec![1, 2, 3],
    }
}

fn replica(config: ReplicaConfig, log: MemoryLog) -> Replica<MemoryLog> {
    Replica::new(config, log).unwrap()
}

/// Broker 1 leading epoch `epoch` with `isr`.
fn leader(config: ReplicaConfig, epoch: LeaderEpoch, isr: &[BrokerId]) -> Replica<MemoryLog> {
    let mut r = replica(config, MemoryLog::new());
    let out = r.handle_leader_and_isr(state(1, epoch, isr), 0).unwrap();
    assert_eq!(out.reply, Ok(()));
    r
}

fn produce(r: &mut Replica<MemoryLog>, id: u64, n: usize, acks: Acks, now: u64) -> ProduceOutcome {
    let values = (0..n).map(|i| format!("v{id}.{i}").into_bytes()).collect();
    let request = ProduceRequest {
        request_id: id,
        values,
        acks,
        timeout_ms: 5_000,
    };
    r.produce(request, now).unwrap().reply
}

fn fetch(from: BrokerId, offset: Offset, epoch: Option<LeaderEpoch>) -> FetchRequest {
    FetchRequest {
        replica_id: from,
        leader: 1,
        fetch_offset: offset,
        current_leader_epoch: epoch,
        max_records: 100,
        built_in_epoch: epoch.unwrap_or(0),
    }
}

fn completions(effects: &[Effect]) -> Vec<(u64, Result<Appended, ProduceError>)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::ProduceCompleted { request_id, result } => Some((*request_id, result.clone())),
            _ => None,
        })
        .collect()
}

fn isr_writes(effects: &[Effect]) -> Vec<PartitionStateWrite> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::WritePartitionState(w) => Some(w.clone()),
            _ => None,
        })
        .collect()
}

fn records(epochs: &[LeaderEpoch]) -> Vec<Record> {
    (0..)
        .zip(epochs)
        .map(|(offset, &epoch)| Record::new(offset, epoch, format!("r{offset}")))
        .collect()
}

fn log_with(epochs: &[LeaderEpoch], high_watermark: Offset) -> MemoryLog {
    let mut log = MemoryLog::new();
    let records = records(epochs);
    log.append(&records).unwrap();
    log.flush().unwrap();
    let mut entries: Vec<EpochEntry> = Vec::new();
    for r in &records {
        if entries.last().is_none_or(|e| e.epoch < r.leader_epoch) {
            entries.push(EpochEntry {
                epoch: r.leader_epoch,
                start_offset: r.offset,
            });
        }
    }
    log.write_epoch_checkpoint(&entries).unwrap();
    log.write_high_watermark_checkpoint(high_watermark).unwrap();
    log
}

// ----- produce and acks -------------------------------------------------------------

#[test]
fn acks_zero_and_one_answer_after_the_local_append() {
    let mut r = leader(config(1), 1, &[1, 2]);
    let expected = Appended {
        base_offset: 0,
        count: 2,
    };
    assert_eq!(
        produce(&mut r, 1, 2, Acks::None, 0),
        ProduceOutcome::Done(Ok(expected))
    );
    let second = Appended {
        base_offset: 2,
        count: 1,
    };
    assert_eq!(
        produce(&mut r, 2, 1, Acks::Leader, 0),
        ProduceOutcome::Done(Ok(second))
    );
    assert_eq!(r.log_end_offset(), 3);
    assert_eq!(r.high_watermark(), 0, "follower 2 has not fetched");
}

#[test]
fn acks_all_completes_only_when_the_high_watermark_passes_the_record() {
    let mut r = leader(config(1), 1, &[1, 2]);
    let appended = Appended {
        base_offset: 0,
        count: 3,
    };
    assert_eq!(
        produce(&mut r, 7, 3, Acks::All, 0),
        ProduceOutcome::Pending(appended)
    );
    let out = r.handle_fetch(&fetch(2, 0, Some(1)), 10).unwrap();
    assert_eq!(out.reply.as_ref().map(|d| d.records.len()), Ok(3));
    assert!(
        completions(&out.effects).is_empty(),
        "follower has not proven it holds them"
    );
    let out = r.handle_fetch(&fetch(2, 2, Some(1)), 20).unwrap();
    assert!(completions(&out.effects).is_empty(), "HW 2 < 3");
    assert_eq!(r.high_watermark(), 2);
    let out = r.handle_fetch(&fetch(2, 3, Some(1)), 30).unwrap();
    assert_eq!(completions(&out.effects), vec![(7, Ok(appended))]);
    assert_eq!(r.high_watermark(), 3);
}

#[test]
fn acks_all_with_a_single_member_isr_completes_at_once() {
    let mut r = leader(config(1), 1, &[1]);
    let appended = Appended {
        base_offset: 0,
        count: 1,
    };
    assert_eq!(
        produce(&mut r, 1, 1, Acks::All, 0),
        ProduceOutcome::Done(Ok(appended))
    );
}

#[test]
fn not_enough_replicas_is_refused_before_the_append() {
    let mut cfg = config(1);
    cfg.min_insync_replicas = 2;
    let mut r = leader(cfg, 1, &[1]);
    assert_eq!(
        produce(&mut r, 1, 1, Acks::All, 0),
        ProduceOutcome::Done(Err(ProduceError::NotEnoughReplicas {
            isr_size: 1,
            min_insync_replicas: 2
        }))
    );
    assert_eq!(r.log_end_offset(), 0, "nothing appended");
    assert!(matches!(
        produce(&mut r, 2, 1, Acks::Leader, 0),
        ProduceOutcome::Done(Ok(_))
    ));
}

#[test]
fn not_enough_replicas_after_append_when_the_isr_shrank_meanwhile() {
    let mut cfg = config(1);
    cfg.min_insync_replicas = 2;
    let mut r = leader(cfg, 1, &[1, 2]);
    let appended = Appended {
        base_offset: 0,
        count: 1,
    };
    assert_eq!(
        produce(&mut r, 1, 1, Acks::All, 0),
        ProduceOutcome::Pending(appended)
    );
    let effects = r.tick(LAG_MS + 1).unwrap();
    let writes = isr_writes(&effects);
    assert_eq!(writes.len(), 1);
    assert_eq!(writes[0].isr, vec![1]);
    let effects = r.on_partition_state_written(&writes[0], Ok(2));
    assert_eq!(
        completions(&effects),
        vec![(1, Err(ProduceError::NotEnoughReplicasAfterAppend(appended)))]
    );
    assert!(!ProduceError::NotEnoughReplicasAfterAppend(appended).is_definite());
}

#[test]
fn acks_all_times_out_as_indeterminate() {
    let mut r = leader(config(1), 1, &[1, 2]);
    produce(&mut r, 1, 1, Acks::All, 0);
    let appended = Appended {
        base_offset: 0,
        count: 1,
    };
    // Follower 2 keeps fetching (stays in the ISR) but never gets past offset 0.
    r.handle_fetch(&fetch(2, 0, Some(1)), 4_000).unwrap();
    assert!(completions(&r.tick(4_999).unwrap()).is_empty());
    let effects = r.tick(5_000).unwrap();
    assert_eq!(
        completions(&effects),
        vec![(1, Err(ProduceError::RequestTimedOut(appended)))]
    );
}

#[test]
fn losing_leadership_answers_parked_requests_and_refuses_new_ones() {
    let mut r = leader(config(1), 1, &[1, 2]);
    produce(&mut r, 1, 1, Acks::All, 0);
    let out = r.handle_leader_and_isr(state(2, 2, &[1, 2]), 10).unwrap();
    let appended = Appended {
        base_offset: 0,
        count: 1,
    };
    assert_eq!(
        completions(&out.effects),
        vec![(1, Err(ProduceError::LeadershipLost(appended)))]
    );
    assert_eq!(
        produce(&mut r, 2, 1, Acks::All, 10),
        ProduceOutcome::Done(Err(ProduceError::NotLeader { leader: Some(2) }))
    );
}

#[test]
fn kafka_1561_acks_all_short_circuits_on_a_cached_replication_factor_of_one() {
    for buggy in [false, true] {
        let mut cfg = ReplicaConfig::new(1, vec![1]);
        cfg.bugs.kafka_1561 = buggy;
        let mut r = replica(cfg, MemoryLog::new());
        // Reassigned to [2, 1]: broker 2 joined the ISR, broker 1 still leads.
        let mut request = state(1, 3, &[1, 2]);
        request.replicas = vec![2, 1];
        r.handle_leader_and_isr(request, 0).unwrap();
        let outcome = produce(&mut r, 1, 1, Acks::All, 0);
        let appended = Appended {
            base_offset: 0,
            count: 1,
        };
        if buggy {
            assert_eq!(
                outcome,
                ProduceOutcome::Done(Ok(appended)),
                "acked before replication"
            );
        } else {
            assert_eq!(outcome, ProduceOutcome::Pending(appended));
        }
    }
}

// ----- fetch, epochs, high watermark -------------------------------------------------

#[test]
fn fetch_validates_the_current_leader_epoch() {
    let mut r = leader(config(1), 5, &[1, 2]);
    let error = |r: &mut Replica<MemoryLog>, request| r.handle_fetch(&request, 0).unwrap().reply;
    assert_eq!(
        error(&mut r, fetch(2, 0, Some(4))),
        Err(ReplicationError::FencedLeaderEpoch)
    );
    assert_eq!(
        error(&mut r, fetch(2, 0, Some(6))),
        Err(ReplicationError::UnknownLeaderEpoch)
    );
    assert!(error(&mut r, fetch(2, 0, Some(5))).is_ok());
    assert!(
        error(&mut r, fetch(2, 0, None)).is_ok(),
        "pre-KIP-320 requests are not fenced"
    );
    assert_eq!(
        error(&mut r, fetch(2, 1, Some(5))),
        Err(ReplicationError::OffsetOutOfRange)
    );
    assert_eq!(
        error(&mut r, fetch(9, 0, Some(5))),
        Err(ReplicationError::UnknownReplica)
    );
    let mut follower = replica(config(2), MemoryLog::new());
    follower
        .handle_leader_and_isr(state(1, 5, &[1, 2]), 0)
        .unwrap();
    assert_eq!(
        error(&mut follower, fetch(3, 0, Some(5))),
        Err(ReplicationError::NotLeader)
    );
}

#[test]
fn high_watermark_is_the_minimum_leo_over_the_isr_and_never_decreases() {
    let mut r = leader(config(1), 1, &[1, 2, 3]);
    produce(&mut r, 1, 10, Acks::Leader, 0);
    r.handle_fetch(&fetch(2, 10, Some(1)), 1).unwrap();
    assert_eq!(
        r.high_watermark(),
        0,
        "follower 3 has not fetched in this epoch"
    );
    r.handle_fetch(&fetch(3, 6, Some(1)), 1).unwrap();
    assert_eq!(r.high_watermark(), 6);
    // A fetch from a lower offset (a follower that restarted and lost a tail) does not
    // move the leader's HW back.
    let out = r.handle_fetch(&fetch(3, 4, Some(1)), 2).unwrap();
    assert_eq!(out.reply.map(|d| d.high_watermark), Ok(6));
    assert_eq!(r.high_watermark(), 6);
    // Re-elected at a new epoch: follower progress is forgotten, the HW is not.
    r.handle_leader_and_isr(state(1, 2, &[1, 2, 3]), 3).unwrap();
    assert_eq!(r.high_watermark(), 6);
    r.handle_fetch(&fetch(2, 2, Some(2)), 4).unwrap();
    r.handle_fetch(&fetch(3, 2, Some(2)), 4).unwrap();
    assert_eq!(r.high_watermark(), 6);
}

#[test]
fn fetch_response_carries_the_high_watermark_before_the_update() {
    let mut r = leader(config(1), 1, &[1, 2]);
    produce(&mut r, 1, 4, Acks::Leader, 0);
    let out = r.handle_fetch(&fetch(2, 4, Some(1)), 1).unwrap();
    assert_eq!(
        out.reply,
        Ok(FetchData {
            records: vec![],
            high_watermark: 0,
            log_start_offset: 0
        })
    );
    assert_eq!(r.high_watermark(), 4);
}

#[test]
fn follower_appends_fetched_records_learns_epochs_and_takes_the_leader_high_watermark() {
    let mut r = replica(config(2), MemoryLog::new());
    let out = r.handle_leader_and_isr(state(1, 3, &[1, 2]), 0).unwrap();
    // An empty log has nothing to truncate: it fetches at once, with its epoch.
    let request = match out.effects.as_slice() {
        [Effect::SendFetch(request)] => request.clone(),
        other => panic!("expected one fetch, got {other:?}"),
    };
    assert_eq!(
        (request.fetch_offset, request.current_leader_epoch),
        (0, Some(3))
    );
    let data = FetchData {
        records: records(&[1, 1, 3]),
        high_watermark: 9,
        log_start_offset: 0,
    };
    let effects = r.on_fetch_response(&request, Ok(data), 1).unwrap();
    assert_eq!(r.log_end_offset(), 3);
    assert_eq!(r.high_watermark(), 3, "min(leader HW, own LEO)");
    assert_eq!(
        r.epoch_entries(),
        &[
            EpochEntry {
                epoch: 1,
                start_offset: 0
            },
            EpochEntry {
                epoch: 3,
                start_offset: 2
            }
        ]
    );
    assert_eq!(
        r.log().epoch_checkpoint(),
        r.epoch_entries(),
        "the cache is persisted"
    );
    assert!(matches!(effects.as_slice(), [Effect::SendFetch(f)] if f.fetch_offset == 3));
    // The same response again (a duplicate) is stale: its fetch offset is not our LEO.
    let again = FetchData {
        records: records(&[1, 1, 3]),
        high_watermark: 9,
        log_start_offset: 0,
    };
    assert!(r
        .on_fetch_response(&request, Ok(again), 2)
        .unwrap()
        .is_empty());
    assert_eq!(r.log_end_offset(), 3);
}

#[test]
fn follower_refuses_a_batch_that_does_not_continue_its_log() {
    let mut r = replica(config(2), MemoryLog::new());
    let out = r.handle_leader_and_isr(state(1, 3, &[1, 2]), 0).unwrap();
    let Some(Effect::SendFetch(request)) = out.effects.first().cloned() else {
        panic!("expected a fetch");
    };
    let gap = vec![Record::new(5, 1, "x")];
    let data = FetchData {
        records: gap,
        high_watermark: 6,
        log_start_offset: 0,
    };
    assert!(r
        .on_fetch_response(&request, Ok(data), 1)
        .unwrap()
        .is_empty());
    assert_eq!(r.log_end_offset(), 0);
}

// ----- ISR ----------------------------------------------------------------------------

#[test]
fn isr_shrinks_only_after_the_lag_time() {
    let mut r = leader(config(1), 1, &[1, 2, 3]);
    produce(&mut r, 1, 5, Acks::Leader, 0);
    // Follower 2 keeps up; follower 3 fetches once, behind, and stops.
    r.handle_fetch(&fetch(3, 0, Some(1)), 100).unwrap();
    r.handle_fetch(&fetch(2, 5, Some(1)), 900).unwrap();
    assert!(
        isr_writes(&r.tick(LAG_MS).unwrap()).is_empty(),
        "not yet past the lag time"
    );
    r.handle_fetch(&fetch(2, 5, Some(1)), LAG_MS + 1).unwrap();
    let writes = isr_writes(&r.tick(LAG_MS + 1).unwrap());
    assert_eq!(writes.len(), 1);
    assert_eq!(writes[0].isr, vec![1, 2]);
    assert_eq!(writes[0].expected_version, 1);
    assert_eq!(r.isr(), &[1, 2, 3], "not applied before the write succeeds");
    r.on_partition_state_written(&writes[0], Ok(2));
    assert_eq!(r.isr(), &[1, 2]);
    assert_eq!(r.partition_state_version(), Some(2));
    assert_eq!(
        r.high_watermark(),
        5,
        "the shrink lets the HW move to follower 2's LEO"
    );
}

#[test]
fn a_follower_that_was_caught_up_at_its_previous_fetch_stays_in_sync() {
    let mut r = leader(config(1), 1, &[1, 2]);
    produce(&mut r, 1, 5, Acks::Leader, 0);
    r.handle_fetch(&fetch(2, 5, Some(1)), 500).unwrap();
    produce(&mut r, 2, 5, Acks::Leader, 600);
    // Its next fetch is at the LEO the previous fetch saw (5): caught up as of 500.
    r.handle_fetch(&fetch(2, 5, Some(1)), 1_400).unwrap();
    assert!(isr_writes(&r.tick(1_499).unwrap()).is_empty());
    assert_eq!(isr_writes(&r.tick(1_501).unwrap()).len(), 1);
}

#[test]
fn a_failed_isr_write_keeps_the_cached_isr() {
    let mut r = leader(config(1), 1, &[1, 2]);
    let writes = isr_writes(&r.tick(LAG_MS + 1).unwrap());
    let conflict = MetadataError::VersionConflict {
        expected: 1,
        actual: Some(3),
    };
    r.on_partition_state_written(&writes[0], Err(conflict));
    assert_eq!(r.isr(), &[1, 2]);
    assert_eq!(
        isr_writes(&r.tick(LAG_MS + 2).unwrap()).len(),
        1,
        "and tries again later"
    );
}

#[test]
fn isr_expands_when_a_follower_reaches_the_high_watermark_and_the_epoch_start() {
    let mut r = leader(config(1), 1, &[1, 2]);
    produce(&mut r, 1, 4, Acks::Leader, 0);
    r.handle_fetch(&fetch(2, 4, Some(1)), 1).unwrap();
    assert!(isr_writes(&r.handle_fetch(&fetch(3, 2, Some(1)), 2).unwrap().effects).is_empty());
    let writes = isr_writes(&r.handle_fetch(&fetch(3, 4, Some(1)), 3).unwrap().effects);
    assert_eq!(writes.len(), 1);
    assert_eq!(writes[0].isr, vec![1, 2, 3]);
    r.on_partition_state_written(&writes[0], Ok(2));
    assert_eq!(r.isr(), &[1, 2, 3]);
}

/// KIP-497's "maximal ISR": while the write that lets a follower in is in flight, the HW
/// does not pass what that follower holds, or the write would land with the new member
/// lacking committed (acknowledged) records, and a clean election of it would lose them.
#[test]
fn a_pending_expansion_holds_the_high_watermark_at_the_joining_follower() {
    let mut cfg = config(1);
    cfg.min_insync_replicas = 1;
    let mut r = leader(cfg, 1, &[1]);
    produce(&mut r, 1, 4, Acks::All, 0);
    assert_eq!(r.high_watermark(), 4, "a leader alone commits at once");
    let writes = isr_writes(&r.handle_fetch(&fetch(2, 4, Some(1)), 1).unwrap().effects);
    assert_eq!(writes.len(), 1);
    let pending = produce(&mut r, 2, 3, Acks::All, 2);
    assert!(
        matches!(pending, ProduceOutcome::Pending(_)),
        "the joining follower holds only 4 of 7: {pending:?}"
    );
    assert_eq!(r.high_watermark(), 4);
    r.on_partition_state_written(&writes[0], Ok(2));
    assert_eq!(r.isr(), &[1, 2]);
    assert_eq!(r.high_watermark(), 4);
    let done = completions(&r.handle_fetch(&fetch(2, 7, Some(1)), 3).unwrap().effects);
    assert_eq!(done.len(), 1, "{done:?}");
    assert!(done[0].1.is_ok());
    assert_eq!(r.high_watermark(), 7);
}

#[test]
fn isr_expansions_are_recorded_at_the_decision_and_when_written() {
    let mut r = leader(config(1), 1, &[1, 2]);
    produce(&mut r, 1, 4, Acks::Leader, 0);
    r.handle_fetch(&fetch(2, 4, Some(1)), 1).unwrap();
    r.take_events();
    let writes = isr_writes(&r.handle_fetch(&fetch(3, 4, Some(1)), 2).unwrap().effects);
    r.handle_fetch(&fetch(3, 4, Some(1)), 3).unwrap();
    r.on_partition_state_written(&writes[0], Ok(2));
    let expansion = |written| {
        ReplicaEvent::IsrExpanded(IsrExpansion {
            follower: 3,
            follower_log_end: 4,
            leader_epoch: 1,
            high_watermark: 4,
            log_end_offset: 4,
            epoch_start_offset: 0,
            written,
        })
    };
    assert_eq!(r.take_events(), vec![expansion(false), expansion(true)]);
    assert!(r.take_events().is_empty(), "taken once");
    // The broker logs it as JSON that the harness's driver reads back by these names.
    let json = serde_json::to_value(expansion(true)).unwrap();
    assert_eq!(json["kind"], "isr-expanded");
    assert_eq!(json["follower_log_end"], 4);
    assert_eq!(json["written"], true);
}

/// The shape of `PartitionTest.testFollowerDoesNotJoinISRUntilCaughtUpToOffsetWithinCurrentLeaderEpoch`.
#[test]
fn kafka_7128_expansion_needs_the_current_epoch_start_offset() {
    for buggy in [false, true] {
        let mut cfg = config(1);
        cfg.bugs.kafka_7128 = buggy;
        // Leader of epoch 8 with LEO 10 and a HW of only 4 (its follower HW lagged).
        let mut r = replica(cfg, log_with(&[8; 10], 4));
        r.handle_leader_and_isr(state(1, 10, &[1, 2]), 0).unwrap();
        assert_eq!(r.leader_epoch_start_offset(), Some(10));
        assert_eq!(r.high_watermark(), 4);
        let writes = isr_writes(&r.handle_fetch(&fetch(3, 4, Some(10)), 1).unwrap().effects);
        assert_eq!(
            writes.is_empty(),
            !buggy,
            "follower at the old HW joins only with the bug"
        );
        if !buggy {
            let writes = isr_writes(&r.handle_fetch(&fetch(3, 10, Some(10)), 2).unwrap().effects);
            assert_eq!(writes.len(), 1, "at the epoch start offset it joins");
        }
    }
}

// ----- epoch cache and OffsetsForLeaderEpoch -----------------------------------------------

#[test]
fn becoming_leader_records_the_epoch_start_and_answers_offsets_for_leader_epoch() {
    let mut r = replica(config(1), log_with(&[1, 1, 2, 2, 2], 5));
    r.handle_leader_and_isr(state(1, 4, &[1, 2]), 0).unwrap();
    assert_eq!(
        r.epoch_entries().last(),
        Some(&EpochEntry {
            epoch: 4,
            start_offset: 5
        })
    );
    produce(&mut r, 1, 2, Acks::Leader, 0);
    let ask = |r: &Replica<MemoryLog>, requested_epoch, current| {
        r.handle_offsets_for_leader_epoch(&OffsetsForLeaderEpochRequest {
            replica_id: 2,
            leader: 1,
            requested_epoch,
            current_leader_epoch: current,
            built_in_epoch: current.unwrap_or(0),
        })
    };
    let at = |leader_epoch, end_offset| {
        Ok(Some(EpochEndOffset {
            leader_epoch,
            end_offset,
        }))
    };
    assert_eq!(
        ask(&r, 4, Some(4)),
        at(4, 7),
        "the latest epoch ends at the LEO"
    );
    assert_eq!(
        ask(&r, 2, Some(4)),
        at(2, 5),
        "an older one where the next starts"
    );
    assert_eq!(
        ask(&r, 3, Some(4)),
        at(2, 5),
        "an unknown one: largest epoch below it"
    );
    assert_eq!(ask(&r, 5, Some(4)), Ok(None), "newer than any: undefined");
    assert_eq!(
        ask(&r, 2, Some(3)),
        Err(ReplicationError::FencedLeaderEpoch)
    );
    assert_eq!(
        ask(&r, 2, Some(5)),
        Err(ReplicationError::UnknownLeaderEpoch)
    );
    assert_eq!(ask(&r, 2, None), at(2, 5));
}

#[test]
fn a_restarted_replica_reloads_its_checkpoints_cut_to_its_log() {
    let mut log = log_with(&[1, 1, 2], 9);
    log.write_epoch_checkpoint(&[
        EpochEntry {
            epoch: 1,
            start_offset: 0,
        },
        EpochEntry {
            epoch: 2,
            start_offset: 2,
        },
        EpochEntry {
            epoch: 3,
            start_offset: 3,
        },
    ])
    .unwrap();
    let r = replica(config(2), log);
    assert_eq!(r.high_watermark(), 3, "a HW past the LEO is cut to it");
    assert_eq!(
        r.epoch_entries().len(),
        2,
        "an epoch starting at the LEO has no record"
    );
    assert_eq!(r.log().epoch_checkpoint().len(), 2);
    assert_eq!(r.role(), RoleKind::Unassigned);
}

// ----- LeaderAndIsr fencing -------------------------------------------------------------

#[test]
fn leader_and_isr_is_fenced_by_controller_epoch_and_leader_epoch() {
    let mut r = leader(config(1), 3, &[1, 2]);
    let mut old_controller = state(2, 4, &[1, 2]);
    old_controller.controller_epoch = 0;
    assert_eq!(
        r.handle_leader_and_isr(old_controller, 1).unwrap().reply,
        Err(LeaderAndIsrError::StaleControllerEpoch {
            request: 0,
            current: 1
        })
    );
    assert_eq!(
        r.handle_leader_and_isr(state(2, 3, &[1, 2]), 1)
            .unwrap()
            .reply,
        Err(LeaderAndIsrError::StaleLeaderEpoch {
            request: 3,
            current: 3
        })
    );
    assert_eq!(r.role(), RoleKind::Leader);
    let mut elsewhere = state(2, 4, &[2, 3]);
    elsewhere.replicas = vec![2, 3];
    assert_eq!(
        r.handle_leader_and_isr(elsewhere, 1).unwrap().reply,
        Err(LeaderAndIsrError::NotAssigned)
    );
    let mut newer_controller = state(2, 4, &[1, 2]);
    newer_controller.controller_epoch = 2;
    assert_eq!(
        r.handle_leader_and_isr(newer_controller, 1).unwrap().reply,
        Ok(())
    );
    assert_eq!(r.role(), RoleKind::Follower { leader: 2 });
    assert_eq!((r.leader_epoch(), r.controller_epoch()), (Some(4), 2));
    let mut stale_again = state(3, 5, &[1, 3]);
    stale_again.controller_epoch = 1;
    assert!(r
        .handle_leader_and_isr(stale_again, 2)
        .unwrap()
        .reply
        .is_err());
}

// ----- truncation -----------------------------------------------------------------------

#[test]
fn hw_mode_truncates_to_the_local_high_watermark_on_becoming_follower() {
    let mut cfg = config(2);
    cfg.truncation_mode = TruncationMode::Hw;
    let mut r = replica(cfg, log_with(&[1; 10], 6));
    let out = r.handle_leader_and_isr(state(1, 2, &[1, 2]), 0).unwrap();
    assert_eq!(r.log_end_offset(), 6);
    assert!(matches!(out.effects.as_slice(), [Effect::SendFetch(f)] if f.fetch_offset == 6));
}

fn become_follower_asking(
    r: &mut Replica<MemoryLog>,
    epoch: LeaderEpoch,
) -> OffsetsForLeaderEpochRequest {
    let out = r
        .handle_leader_and_isr(state(1, epoch, &[1, 2]), 0)
        .unwrap();
    match out.effects.as_slice() {
        [Effect::SendOffsetsForLeaderEpoch(request)] => request.clone(),
        other => panic!("expected OffsetsForLeaderEpoch, got {other:?}"),
    }
}

#[test]
fn epoch_mode_truncates_to_where_the_leader_epoch_ends() {
    // Records 0..4 of epoch 1, 4..8 of epoch 3 that the new leader never got.
    let mut r = replica(config(2), log_with(&[1, 1, 1, 1, 3, 3, 3, 3], 2));
    let request = become_follower_asking(&mut r, 5);
    assert_eq!(r.log_end_offset(), 8, "no truncation before the answer");
    assert_eq!(
        (request.requested_epoch, request.current_leader_epoch),
        (3, Some(5))
    );
    // The leader's log has epochs 1 (0..4), 2 (4..7), 4 (7..): epoch 3 is unknown to it,
    // so it answers with epoch 2, ending at 7.
    let answer = Ok(Some(EpochEndOffset {
        leader_epoch: 2,
        end_offset: 7,
    }));
    let effects = r
        .on_offsets_for_leader_epoch_response(&request, answer, 1)
        .unwrap();
    // We lack epoch 2: cut where our largest smaller epoch (1) ends, and ask about it.
    assert_eq!(r.log_end_offset(), 4);
    let again = match effects.as_slice() {
        [Effect::SendOffsetsForLeaderEpoch(again)] => again.clone(),
        other => panic!("expected a second question, got {other:?}"),
    };
    assert_eq!(again.requested_epoch, 1);
    let answer = Ok(Some(EpochEndOffset {
        leader_epoch: 1,
        end_offset: 4,
    }));
    let effects = r
        .on_offsets_for_leader_epoch_response(&again, answer, 2)
        .unwrap();
    assert_eq!(
        r.log_end_offset(),
        4,
        "min(our end of epoch 1, the leader's)"
    );
    assert!(matches!(effects.as_slice(), [Effect::SendFetch(f)] if f.fetch_offset == 4));
    assert_eq!(
        r.epoch_entries(),
        &[EpochEntry {
            epoch: 1,
            start_offset: 0
        }]
    );
}

#[test]
fn epoch_mode_truncates_a_divergent_tail_of_a_shared_epoch() {
    let mut r = replica(config(2), log_with(&[1, 1, 1, 1, 2, 2, 2, 2], 2));
    let request = become_follower_asking(&mut r, 3);
    // The leader holds epoch 2 only up to 6.
    let answer = Ok(Some(EpochEndOffset {
        leader_epoch: 2,
        end_offset: 6,
    }));
    let effects = r
        .on_offsets_for_leader_epoch_response(&request, answer, 1)
        .unwrap();
    assert_eq!(r.log_end_offset(), 6);
    assert!(matches!(effects.as_slice(), [Effect::SendFetch(f)] if f.fetch_offset == 6));
}

#[test]
fn epoch_mode_keeps_a_log_the_leader_shares_and_falls_back_to_the_hw_on_undefined() {
    let mut r = replica(config(2), log_with(&[1, 1, 1, 1], 2));
    let request = become_follower_asking(&mut r, 2);
    let answer = Ok(Some(EpochEndOffset {
        leader_epoch: 1,
        end_offset: 9,
    }));
    r.on_offsets_for_leader_epoch_response(&request, answer, 1)
        .unwrap();
    assert_eq!(r.log_end_offset(), 4);

    let mut r = replica(config(2), log_with(&[1, 1, 1, 1], 2));
    let request = become_follower_asking(&mut r, 2);
    r.on_offsets_for_leader_epoch_response(&request, Ok(None), 1)
        .unwrap();
    assert_eq!(r.log_end_offset(), 2);
}

#[test]
fn kafka_7040_a_response_from_an_earlier_epoch_is_ignored_only_when_fixed() {
    for buggy in [false, true] {
        let mut cfg = config(2);
        cfg.bugs.kafka_7040 = buggy;
        let mut r = replica(cfg, log_with(&[1, 1, 1, 1, 3, 3], 6));
        let stale = become_follower_asking(&mut r, 4);
        assert_eq!(stale.current_leader_epoch, (!buggy).then_some(4));
        // Leadership moves on (epoch 5, the same leader) while the answer is in flight.
        become_follower_asking(&mut r, 5);
        let answer = Ok(Some(EpochEndOffset {
            leader_epoch: 3,
            end_offset: 5,
        }));
        r.on_offsets_for_leader_epoch_response(&stale, answer, 1)
            .unwrap();
        let expected = if buggy { 5 } else { 6 };
        assert_eq!(r.log_end_offset(), expected, "buggy: {buggy}");
    }
}

#[test]
fn kafka_2143_out_of_range_from_an_ahead_follower_deletes_the_log_only_with_the_bug() {
    for buggy in [false, true] {
        let mut cfg = config(2);
        cfg.truncation_mode = TruncationMode::Hw;
        cfg.bugs.kafka_2143 = buggy;
        let mut r = replica(cfg, log_with(&[1; 12], 12));
        let out = r.handle_leader_and_isr(state(1, 2, &[1]), 0).unwrap();
        let Some(Effect::SendFetch(fetch)) = out.effects.first().cloned() else {
            panic!("expected a fetch");
        };
        let effects = r
            .on_fetch_response(&fetch, Err(ReplicationError::OffsetOutOfRange), 1)
            .unwrap();
        let list = match effects.as_slice() {
            [Effect::SendListOffsets(list)] => list.clone(),
            other => panic!("expected ListOffsets, got {other:?}"),
        };
        // By the time ListOffsets arrives the leader has appended past our LEO.
        let leader = LogOffsets {
            log_start_offset: 0,
            log_end_offset: 13,
        };
        let effects = r.on_list_offsets_response(&list, Ok(leader), 2).unwrap();
        let expected = if buggy { (0, 0) } else { (0, 12) };
        assert_eq!((r.log_start_offset(), r.log_end_offset()), expected);
        assert!(
            matches!(effects.as_slice(), [Effect::SendFetch(f)] if f.fetch_offset == expected.1)
        );
    }
}

#[test]
fn out_of_range_behind_the_leader_log_start_restarts_the_log_there() {
    let mut r = replica(config(2), log_with(&[1; 3], 3));
    let out = r.handle_leader_and_isr(state(1, 2, &[1]), 0).unwrap();
    let Some(Effect::SendOffsetsForLeaderEpoch(question)) = out.effects.first().cloned() else {
        panic!("expected OffsetsForLeaderEpoch");
    };
    let answer = Ok(Some(EpochEndOffset {
        leader_epoch: 1,
        end_offset: 40,
    }));
    let effects = r
        .on_offsets_for_leader_epoch_response(&question, answer, 1)
        .unwrap();
    let Some(Effect::SendFetch(fetch)) = effects.first().cloned() else {
        panic!("expected a fetch");
    };
    let effects = r
        .on_fetch_response(&fetch, Err(ReplicationError::OffsetOutOfRange), 2)
        .unwrap();
    let Some(Effect::SendListOffsets(list)) = effects.first().cloned() else {
        panic!("expected ListOffsets");
    };
    let leader = LogOffsets {
        log_start_offset: 20,
        log_end_offset: 40,
    };
    r.on_list_offsets_response(&list, Ok(leader), 3).unwrap();
    assert_eq!((r.log_start_offset(), r.log_end_offset()), (20, 20));
}

#[test]
fn an_ahead_follower_halts_when_unclean_election_is_off_and_truncates_when_on() {
    for unclean in [false, true] {
        let mut cfg = config(2);
        cfg.truncation_mode = TruncationMode::Hw;
        cfg.unclean_leader_election = unclean;
        let mut r = replica(cfg, log_with(&[1; 12], 12));
        let out = r.handle_leader_and_isr(state(1, 2, &[1]), 0).unwrap();
        let Some(Effect::SendFetch(fetch)) = out.effects.first().cloned() else {
            panic!("expected a fetch");
        };
        let effects = r
            .on_fetch_response(&fetch, Err(ReplicationError::OffsetOutOfRange), 1)
            .unwrap();
        let Some(Effect::SendListOffsets(list)) = effects.first().cloned() else {
            panic!("expected ListOffsets");
        };
        let leader = LogOffsets {
            log_start_offset: 0,
            log_end_offset: 8,
        };
        let effects = r.on_list_offsets_response(&list, Ok(leader), 2).unwrap();
        if unclean {
            assert_eq!(r.log_end_offset(), 8);
        } else {
            assert_eq!(r.log_end_offset(), 12);
            assert!(matches!(
                effects.as_slice(),
                [Effect::TruncationNotAllowed { .. }]
            ));
            assert!(
                r.tick(1_000_000).unwrap().is_empty(),
                "halted: no more fetching"
            );
        }
    }
}

#[test]
fn a_follower_resends_a_lost_request_after_the_timeout() {
    let mut cfg = config(2);
    cfg.request_timeout_ms = 100;
    cfg.retry_backoff_ms = 10;
    let mut r = replica(cfg, MemoryLog::new());
    let out = r.handle_leader_and_isr(state(1, 1, &[1, 2]), 0).unwrap();
    let Some(Effect::SendFetch(first)) = out.effects.first().cloned() else {
        panic!("expected a fetch");
    };
    assert!(r.tick(99).unwrap().is_empty());
    assert!(matches!(
        r.tick(100).unwrap().as_slice(),
        [Effect::SendFetch(_)]
    ));
    let fenced = r
        .on_fetch_response(&first, Err(ReplicationError::UnknownLeaderEpoch), 150)
        .unwrap();
    assert!(fenced.is_empty(), "an error waits for the backoff");
    assert!(matches!(
        r.tick(160).unwrap().as_slice(),
        [Effect::SendFetch(_)]
    ));
}

#[test]
fn list_offsets_is_served_by_the_leader_only() {
    let mut r = leader(config(1), 2, &[1]);
    produce(&mut r, 1, 3, Acks::Leader, 0);
    let request = |epoch| ListOffsetsRequest {
        replica_id: 2,
        leader: 1,
        current_leader_epoch: epoch,
        built_in_epoch: 2,
    };
    assert_eq!(
        r.handle_list_offsets(&request(Some(2))),
        Ok(LogOffsets {
            log_start_offset: 0,
            log_end_offset: 3
        })
    );
    assert_eq!(
        r.handle_list_offsets(&request(Some(1))),
        Err(ReplicationError::FencedLeaderEpoch)
    );
}
