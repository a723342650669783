//! The controller's decisions as pure functions: given a partition's stored state and the
//! live brokers, what its next state is (kafka-replication.md §2, Kafka 1.1's partition
//! and replica state machines). No I/O, no clock; the driver reads, calls these, writes.
//!
//! Every state a decision returns has the leader epoch bumped and carries the deciding
//! controller's epoch, as ZooKeeper-era Kafka did for every controller-driven change of
//! leader or ISR. `None` means nothing to change.
//!
//! Rules:
//! - A clean leader is the first replica, in assignment order, that is in the ISR and
//!   alive (Kafka 1.1's `offlinePartitionLeaderElection`); its new ISR is the live part
//!   of the old one.
//! - With none, and unclean election enabled, the first live replica leads alone
//!   (ISR = {it}); otherwise the partition is offline (leader `None`).
//! - A broker's death shrinks it out of the ISR of every partition, but with unclean
//!   election off the last ISR member stays (KAFKA-5083): it is the only replica known to
//!   hold every committed record, so it is the one that may lead when it returns.

use std::collections::{BTreeMap, BTreeSet};

use crate::replica::metadata::{ControllerEpoch, PartitionState, TopicPartition};
use crate::replica::BrokerId;

/// Why a requested change cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("broker {target} is not a replica of the partition (replicas {replicas:?})")]
    NotAReplica {
        target: BrokerId,
        replicas: Vec<BrokerId>,
    },
    #[error("broker {target} is not in the ISR {isr:?}")]
    NotInIsr {
        target: BrokerId,
        isr: Vec<BrokerId>,
    },
    #[error("broker {target} is not alive")]
    NotLive { target: BrokerId },
    #[error("the preferred replica {preferred} is not both alive and in the ISR {isr:?}")]
    PreferredNotAvailable {
        preferred: BrokerId,
        isr: Vec<BrokerId>,
    },
    #[error("replication factor {requested} is more than the {available} live brokers")]
    ReplicationFactorTooLarge { requested: u32, available: usize },
    #[error("invalid replica assignment: {0}")]
    InvalidAssignment(String),
    #[error("no replica of {replicas:?} is alive")]
    NoLiveReplica { replicas: Vec<BrokerId> },
    #[error("the new replicas {missing:?} have not joined the ISR")]
    NotInSync { missing: Vec<BrokerId> },
}

/// `current` with a new leader and ISR, the leader epoch bumped, signed by `epoch`.
fn bumped(
    current: &PartitionState,
    leader: Option<BrokerId>,
    isr: Vec<BrokerId>,
    epoch: ControllerEpoch,
) -> PartitionState {
    PartitionState {
        leader,
        leader_epoch: current.leader_epoch + 1,
        isr,
        controller_epoch: epoch,
        replicas: current.replicas.clone(),
    }
}

/// The first replica in assignment order that is in the ISR and alive.
pub fn clean_leader(state: &PartitionState, live: &BTreeSet<BrokerId>) -> Option<BrokerId> {
    state
        .replicas
        .iter()
        .copied()
        .find(|id| state.isr.contains(id) && live.contains(id))
}

/// The first live replica in assignment order, in sync or not (unclean election).
pub fn unclean_leader(state: &PartitionState, live: &BTreeSet<BrokerId>) -> Option<BrokerId> {
    state.replicas.iter().copied().find(|id| live.contains(id))
}

/// The member an ISR keeps when every member is gone (KAFKA-5083): the leader if it was
/// in the ISR (it had every committed record and maybe more), else the first member.
fn last_member(state: &PartitionState) -> Vec<BrokerId> {
    match state.leader {
        Some(leader) if state.isr.contains(&leader) => vec![leader],
        _ => state.isr.first().copied().into_iter().collect(),
    }
}

/// Elects a leader for a partition whose leader is not alive: clean from the ISR, else
/// unclean if allowed. `(leader, isr)`, or `None` if no replica may lead.
fn elect(
    state: &PartitionState,
    live: &BTreeSet<BrokerId>,
    unclean: bool,
) -> Option<(BrokerId, Vec<BrokerId>)> {
    if let Some(leader) = clean_leader(state, live) {
        let isr = state
            .isr
            .iter()
            .copied()
            .filter(|id| live.contains(id))
            .collect();
        return Some((leader, isr));
    }
    if unclean {
        return unclean_leader(state, live).map(|leader| (leader, vec![leader]));
    }
    None
}

/// The state after brokers `dead` died (Kafka's `onBrokerFailure` for one partition):
/// `None` if the partition neither had its leader nor an ISR member among them.
///
/// - Leader alive: the dead leave the ISR.
/// - Leader dead: a new leader is elected; with none, the partition goes offline with the
///   dead removed from the ISR, keeping the last member when unclean election is off.
pub fn after_broker_failure(
    current: &PartitionState,
    dead: &BTreeSet<BrokerId>,
    live: &BTreeSet<BrokerId>,
    unclean: bool,
    epoch: ControllerEpoch,
) -> Option<PartitionState> {
    let leader_died = current.leader.is_some_and(|l| dead.contains(&l));
    let isr_hit = current.isr.iter().any(|id| dead.contains(id));
    if !leader_died && !isr_hit {
        return None;
    }
    let survivors: Vec<BrokerId> = current
        .isr
        .iter()
        .copied()
        .filter(|id| !dead.contains(id))
        .collect();
    if let Some(leader) = current
        .leader
        .filter(|l| !dead.contains(l) && live.contains(l))
    {
        return Some(bumped(current, Some(leader), survivors, epoch));
    }
    if let Some((leader, isr)) = elect(current, live, unclean) {
        return Some(bumped(current, Some(leader), isr, epoch));
    }
    let isr = if survivors.is_empty() && !unclean {
        last_member(current)
    } else {
        survivors
    };
    if current.leader.is_none() && isr == current.isr {
        return None;
    }
    Some(bumped(current, None, isr, epoch))
}

/// The state of a partition without a live leader once the live brokers are `live`
/// (Kafka's online-partition transition, run at failover and when brokers start):
/// `None` if its leader is alive, or if it has none and still none can be elected.
pub fn elect_leaderless(
    current: &PartitionState,
    live: &BTreeSet<BrokerId>,
    unclean: bool,
    epoch: ControllerEpoch,
) -> Option<PartitionState> {
    match current.leader {
        Some(leader) if live.contains(&leader) => None,
        Some(leader) => {
            // Its death was never handled (it died with the previous controller): handle
            // it now, with the ISR's other dead members.
            let dead: BTreeSet<BrokerId> = current
                .isr
                .iter()
                .copied()
                .chain([leader])
                .filter(|id| !live.contains(id))
                .collect();
            after_broker_failure(current, &dead, live, unclean, epoch)
        }
        None => elect(current, live, unclean)
            .map(|(leader, isr)| bumped(current, Some(leader), isr, epoch)),
    }
}

/// Preferred replica election: `Ok(None)` if the preferred replica (the first assigned)
/// already leads; refused unless it is alive and in the ISR.
pub fn preferred_election(
    current: &PartitionState,
    live: &BTreeSet<BrokerId>,
    epoch: ControllerEpoch,
) -> Result<Option<PartitionState>, Refusal> {
    let Some(&preferred) = current.replicas.first() else {
        return Err(Refusal::InvalidAssignment(
            "the partition has no replicas".into(),
        ));
    };
    if current.leader == Some(preferred) {
        return Ok(None);
    }
    if !current.isr.contains(&preferred) || !live.contains(&preferred) {
        return Err(Refusal::PreferredNotAvailable {
            preferred,
            isr: current.isr.clone(),
        });
    }
    Ok(Some(bumped(
        current,
        Some(preferred),
        current.isr.clone(),
        epoch,
    )))
}

/// Moves leadership to `target`, which must be an alive ISR member. Transferring to the
/// current leader is allowed: it re-announces the partition with a new leader epoch.
pub fn transfer_leadership(
    current: &PartitionState,
    target: BrokerId,
    live: &BTreeSet<BrokerId>,
    epoch: ControllerEpoch,
) -> Result<PartitionState, Refusal> {
    if !current.replicas.contains(&target) {
        return Err(Refusal::NotAReplica {
            target,
            replicas: current.replicas.clone(),
        });
    }
    if !current.isr.contains(&target) {
        return Err(Refusal::NotInIsr {
            target,
            isr: current.isr.clone(),
        });
    }
    if !live.contains(&target) {
        return Err(Refusal::NotLive { target });
    }
    Ok(bumped(current, Some(target), current.isr.clone(), epoch))
}

/// Checks a reassignment's target replicas: non-empty, no duplicates, every one a
/// configured broker, and alive (Kafka refuses to reassign to dead brokers).
pub fn validate_reassignment(
    target: &[BrokerId],
    configured: &BTreeSet<BrokerId>,
    live: &BTreeSet<BrokerId>,
) -> Result<(), Refusal> {
    validate_replica_list(target, configured)?;
    if let Some(&dead) = target.iter().find(|id| !live.contains(id)) {
        return Err(Refusal::NotLive { target: dead });
    }
    Ok(())
}

/// Steps 1–2 of Kafka 1.1's reassignment: the assignment becomes RAR followed by the old
/// replicas not in RAR (OAR ∪ RAR, with RAR's first as the preferred replica), leader and
/// ISR unchanged, leader epoch bumped. `None` if it already is.
pub fn reassignment_start(
    current: &PartitionState,
    target: &[BrokerId],
    epoch: ControllerEpoch,
) -> Option<PartitionState> {
    let union = union_assignment(&current.replicas, target);
    if union == current.replicas {
        return None;
    }
    let mut next = bumped(current, current.leader, current.isr.clone(), epoch);
    next.replicas = union;
    Some(next)
}

/// RAR followed by the members of OAR not in RAR.
pub fn union_assignment(old: &[BrokerId], target: &[BrokerId]) -> Vec<BrokerId> {
    let mut union = target.to_vec();
    union.extend(old.iter().copied().filter(|id| !target.contains(id)));
    union
}

/// Step 4's condition: the target replicas not yet in the ISR (empty when done waiting).
pub fn reassignment_missing(current: &PartitionState, target: &[BrokerId]) -> Vec<BrokerId> {
    target
        .iter()
        .copied()
        .filter(|id| !current.isr.contains(id))
        .collect()
}

/// Steps 5–9 in one write, once every target replica is in the ISR: the assignment
/// becomes RAR, the ISR loses the removed replicas, and the leader stays if it is in RAR
/// and alive, else the first RAR member in the ISR and alive leads.
pub fn reassignment_finish(
    current: &PartitionState,
    target: &[BrokerId],
    live: &BTreeSet<BrokerId>,
    epoch: ControllerEpoch,
) -> Result<PartitionState, Refusal> {
    let missing = reassignment_missing(current, target);
    if !missing.is_empty() {
        return Err(Refusal::NotInSync { missing });
    }
    let isr: Vec<BrokerId> = current
        .isr
        .iter()
        .copied()
        .filter(|id| target.contains(id))
        .collect();
    let leader = match current.leader {
        Some(leader) if target.contains(&leader) && live.contains(&leader) => leader,
        _ => target
            .iter()
            .copied()
            .find(|id| isr.contains(id) && live.contains(id))
            .ok_or_else(|| Refusal::NoLiveReplica {
                replicas: target.to_vec(),
            })?,
    };
    let mut next = bumped(current, Some(leader), isr, epoch);
    next.replicas = target.to_vec();
    Ok(next)
}

/// A replica list: non-empty, no broker twice, every broker configured.
pub fn validate_replica_list(
    replicas: &[BrokerId],
    configured: &BTreeSet<BrokerId>,
) -> Result<(), Refusal> {
    if replicas.is_empty() {
        return Err(Refusal::InvalidAssignment("an empty replica list".into()));
    }
    let mut seen = BTreeSet::new();
    for &id in replicas {
        if !seen.insert(id) {
            return Err(Refusal::InvalidAssignment(format!(
                "broker {id} appears twice in {replicas:?}"
            )));
        }
        if !configured.contains(&id) {
            return Err(Refusal::InvalidAssignment(format!(
                "broker {id} is not among the configured brokers {configured:?}"
            )));
        }
    }
    Ok(())
}

/// An explicit topic assignment: one valid replica list per partition, all of the same
/// length (one replication factor per topic).
pub fn validate_assignment(
    assignment: &[Vec<BrokerId>],
    configured: &BTreeSet<BrokerId>,
) -> Result<(), Refusal> {
    let Some(first) = assignment.first() else {
        return Err(Refusal::InvalidAssignment("no partitions".into()));
    };
    for (partition, replicas) in assignment.iter().enumerate() {
        validate_replica_list(replicas, configured).map_err(|refusal| match refusal {
            Refusal::InvalidAssignment(reason) => {
                Refusal::InvalidAssignment(format!("partition {partition}: {reason}"))
            }
            other => other,
        })?;
        if replicas.len() != first.len() {
            return Err(Refusal::InvalidAssignment(format!(
                "partition {partition} has {} replicas, partition 0 has {}",
                replicas.len(),
                first.len()
            )));
        }
    }
    Ok(())
}

/// Round-robin assignment over `brokers` (sorted, deduplicated by the caller): partition
/// `p`'s replicas are the `replication_factor` brokers from index `start + p` on, so
/// leaders (first replicas) spread evenly and each partition's replicas are distinct.
pub fn assign_round_robin(
    brokers: &[BrokerId],
    partitions: u32,
    replication_factor: u32,
    start: usize,
) -> Result<Vec<Vec<BrokerId>>, Refusal> {
    let rf = replication_factor as usize;
    if rf == 0 || rf > brokers.len() {
        return Err(Refusal::ReplicationFactorTooLarge {
            requested: replication_factor,
            available: brokers.len(),
        });
    }
    Ok((0..partitions as usize)
        .map(|p| {
            (0..rf)
                .map(|j| brokers[(start + p + j) % brokers.len()])
                .collect()
        })
        .collect())
}

/// A new partition's state: the first live replica leads, the live replicas form the
/// ISR, leader epoch 0. Refused if no replica is alive.
pub fn initial_state(
    replicas: &[BrokerId],
    live: &BTreeSet<BrokerId>,
    epoch: ControllerEpoch,
) -> Result<PartitionState, Refusal> {
    let isr: Vec<BrokerId> = replicas
        .iter()
        .copied()
        .filter(|id| live.contains(id))
        .collect();
    let Some(&leader) = isr.first() else {
        return Err(Refusal::NoLiveReplica {
            replicas: replicas.to_vec(),
        });
    };
    Ok(PartitionState {
        leader: Some(leader),
        leader_epoch: 0,
        isr,
        controller_epoch: epoch,
        replicas: replicas.to_vec(),
    })
}

/// Auto leader rebalance (Kafka's `checkAndTriggerAutoLeaderRebalance`): for each broker,
/// the share of the partitions it prefers (first replica) that another broker leads; where
/// that share exceeds `threshold_percent`, every such partition whose preferred replica is
/// alive and in the ISR, in order.
pub fn imbalanced_partitions(
    states: &BTreeMap<TopicPartition, PartitionState>,
    live: &BTreeSet<BrokerId>,
    threshold_percent: u32,
) -> Vec<TopicPartition> {
    let mut by_preferred: BTreeMap<BrokerId, Vec<(&TopicPartition, &PartitionState)>> =
        BTreeMap::new();
    for (tp, state) in states {
        if let Some(&preferred) = state.replicas.first() {
            by_preferred.entry(preferred).or_default().push((tp, state));
        }
    }
    let mut elect = Vec::new();
    for (preferred, partitions) in by_preferred {
        let not_led: Vec<_> = partitions
            .iter()
            .filter(|(_, state)| state.leader != Some(preferred))
            .collect();
        // not_led / total > threshold / 100, in integers.
        if not_led.len() * 100 <= partitions.len() * threshold_percent as usize {
            continue;
        }
        elect.extend(
            not_led
                .into_iter()
                .filter(|(_, state)| state.isr.contains(&preferred) && live.contains(&preferred))
                .map(|(tp, _)| (*tp).clone()),
        );
    }
    elect.sort();
    elect
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[BrokerId]) -> BTreeSet<BrokerId> {
        ids.iter().copied().collect()
    }

    fn state(leader: Option<BrokerId>, isr: &[BrokerId], replicas: &[BrokerId]) -> PartitionState {
        PartitionState {
            leader,
            leader_epoch: 5,
            isr: isr.to_vec(),
            controller_epoch: 1,
            replicas: replicas.to_vec(),
        }
    }

    fn expect(
        leader: Option<BrokerId>,
        isr: &[BrokerId],
        replicas: &[BrokerId],
    ) -> Option<PartitionState> {
        Some(PartitionState {
            leader,
            leader_epoch: 6,
            isr: isr.to_vec(),
            controller_epoch: 2,
            replicas: replicas.to_vec(),
        })
    }

    #[test]
    fn a_dead_follower_leaves_the_isr() {
        let current = state(Some(3), &[3, 4, 2], &[3, 4, 2]);
        assert_eq!(
            after_broker_failure(&current, &set(&[4]), &set(&[1, 2, 3]), false, 2),
            expect(Some(3), &[3, 2], &[3, 4, 2])
        );
    }

    #[test]
    fn an_unrelated_death_changes_nothing() {
        let current = state(Some(3), &[3, 2], &[3, 4, 2]);
        assert_eq!(
            after_broker_failure(&current, &set(&[4]), &set(&[1, 2, 3]), false, 2),
            None,
            "4 is a replica but not in the ISR"
        );
        assert_eq!(
            after_broker_failure(&current, &set(&[1]), &set(&[2, 3]), true, 2),
            None
        );
    }

    #[test]
    fn a_dead_leader_is_replaced_by_the_first_live_isr_member_in_assignment_order() {
        let current = state(Some(1), &[3, 1, 2], &[1, 2, 3]);
        assert_eq!(
            after_broker_failure(&current, &set(&[1]), &set(&[2, 3]), false, 2),
            expect(Some(2), &[3, 2], &[1, 2, 3])
        );
        // The ISR also loses members that are not alive for other reasons.
        assert_eq!(
            after_broker_failure(&current, &set(&[1]), &set(&[3]), false, 2),
            expect(Some(3), &[3], &[1, 2, 3])
        );
    }

    #[test]
    fn without_unclean_election_the_last_isr_member_stays_and_the_partition_goes_offline() {
        let current = state(Some(1), &[1], &[1, 2]);
        assert_eq!(
            after_broker_failure(&current, &set(&[1]), &set(&[2, 3]), false, 2),
            expect(None, &[1], &[1, 2])
        );
        // Leader and follower die together: the leader is the one kept.
        let current = state(Some(2), &[1, 2], &[1, 2]);
        assert_eq!(
            after_broker_failure(&current, &set(&[1, 2]), &set(&[3]), false, 2),
            expect(None, &[2], &[1, 2])
        );
        // Already offline, its last member's death changes nothing more.
        let offline = state(None, &[2], &[1, 2]);
        assert_eq!(
            after_broker_failure(&offline, &set(&[2]), &set(&[3]), false, 2),
            None
        );
    }

    #[test]
    fn with_unclean_election_a_live_out_of_sync_replica_leads_alone() {
        let current = state(Some(1), &[1], &[1, 2, 3]);
        assert_eq!(
            after_broker_failure(&current, &set(&[1]), &set(&[2, 3]), true, 2),
            expect(Some(2), &[2], &[1, 2, 3])
        );
        // No live replica at all: offline, and the ISR keeps no dead member.
        assert_eq!(
            after_broker_failure(&current, &set(&[1]), &set(&[4]), true, 2),
            expect(None, &[], &[1, 2, 3])
        );
    }

    #[test]
    fn a_leaderless_partition_gets_a_leader_when_an_isr_member_is_back() {
        let offline = state(None, &[2], &[1, 2]);
        assert_eq!(elect_leaderless(&offline, &set(&[1]), false, 2), None);
        assert_eq!(
            elect_leaderless(&offline, &set(&[1]), true, 2),
            expect(Some(1), &[1], &[1, 2])
        );
        assert_eq!(
            elect_leaderless(&offline, &set(&[1, 2]), false, 2),
            expect(Some(2), &[2], &[1, 2])
        );
        let led = state(Some(1), &[1, 2], &[1, 2]);
        assert_eq!(elect_leaderless(&led, &set(&[1]), false, 2), None);
        // A leader that died unhandled (with the previous controller) is replaced.
        assert_eq!(
            elect_leaderless(&led, &set(&[2]), false, 2),
            expect(Some(2), &[2], &[1, 2])
        );
    }

    #[test]
    fn preferred_election_needs_the_first_replica_alive_and_in_sync() {
        let current = state(Some(2), &[2, 1], &[1, 2]);
        assert_eq!(
            preferred_election(&current, &set(&[1, 2]), 2),
            Ok(expect(Some(1), &[2, 1], &[1, 2]))
        );
        assert_eq!(
            preferred_election(&current, &set(&[2]), 2),
            Err(Refusal::PreferredNotAvailable {
                preferred: 1,
                isr: vec![2, 1]
            })
        );
        let out_of_sync = state(Some(2), &[2], &[1, 2]);
        assert!(preferred_election(&out_of_sync, &set(&[1, 2]), 2).is_err());
        let already = state(Some(1), &[1, 2], &[1, 2]);
        assert_eq!(preferred_election(&already, &set(&[1, 2]), 2), Ok(None));
    }

    #[test]
    fn transfer_needs_a_live_isr_member_and_always_bumps_the_epoch() {
        let current = state(Some(1), &[1, 2], &[1, 2, 3]);
        let live = set(&[1, 2, 3]);
        assert_eq!(
            transfer_leadership(&current, 2, &live, 2).ok(),
            expect(Some(2), &[1, 2], &[1, 2, 3])
        );
        assert_eq!(
            transfer_leadership(&current, 1, &live, 2).ok(),
            expect(Some(1), &[1, 2], &[1, 2, 3]),
            "to the current leader: re-announced with a new epoch"
        );
        assert_eq!(
            transfer_leadership(&current, 3, &live, 2),
            Err(Refusal::NotInIsr {
                target: 3,
                isr: vec![1, 2]
            })
        );
        assert_eq!(
            transfer_leadership(&current, 4, &live, 2),
            Err(Refusal::NotAReplica {
                target: 4,
                replicas: vec![1, 2, 3]
            })
        );
        assert_eq!(
            transfer_leadership(&current, 2, &set(&[1]), 2),
            Err(Refusal::NotLive { target: 2 })
        );
    }

    #[test]
    fn reassignment_grows_to_the_union_then_shrinks_to_the_target() {
        let current = state(Some(1), &[1, 2], &[1, 2]);
        let target = [2, 3];
        let started = reassignment_start(&current, &target, 2);
        assert_eq!(started, expect(Some(1), &[1, 2], &[2, 3, 1]));
        let started = started.unwrap_or_else(|| unreachable!());
        assert_eq!(reassignment_start(&started, &target, 2), None, "idempotent");
        assert_eq!(reassignment_missing(&started, &target), vec![3]);
        assert_eq!(
            reassignment_finish(&started, &target, &set(&[1, 2, 3]), 2),
            Err(Refusal::NotInSync { missing: vec![3] })
        );
        let caught_up = PartitionState {
            isr: vec![1, 2, 3],
            ..started
        };
        // The leader 1 is removed: the first target replica in sync leads.
        assert_eq!(
            reassignment_finish(&caught_up, &target, &set(&[1, 2, 3]), 2).ok(),
            Some(PartitionState {
                leader: Some(2),
                leader_epoch: 7,
                isr: vec![2, 3],
                controller_epoch: 2,
                replicas: vec![2, 3],
            })
        );
        // A leader that stays keeps leading.
        let keep = reassignment_finish(&caught_up, &[1, 3], &set(&[1, 2, 3]), 2);
        assert_eq!(keep.map(|s| (s.leader, s.isr)), Ok((Some(1), vec![1, 3])));
    }

    #[test]
    fn reassignment_targets_are_validated() {
        let configured = set(&[1, 2, 3]);
        let live = set(&[1, 2]);
        assert!(validate_reassignment(&[1, 2], &configured, &live).is_ok());
        assert_eq!(
            validate_reassignment(&[1, 3], &configured, &live),
            Err(Refusal::NotLive { target: 3 })
        );
        assert!(matches!(
            validate_reassignment(&[1, 1], &configured, &live),
            Err(Refusal::InvalidAssignment(_))
        ));
        assert!(matches!(
            validate_reassignment(&[], &configured, &live),
            Err(Refusal::InvalidAssignment(_))
        ));
        assert!(matches!(
            validate_reassignment(&[7], &configured, &live),
            Err(Refusal::InvalidAssignment(m)) if m.contains("broker 7")
        ));
    }

    #[test]
    fn round_robin_spreads_leaders_and_keeps_replicas_distinct() {
        assert_eq!(
            assign_round_robin(&[1, 2, 3], 4, 2, 0),
            Ok(vec![vec![1, 2], vec![2, 3], vec![3, 1], vec![1, 2]])
        );
        assert_eq!(
            assign_round_robin(&[1, 2, 3], 2, 3, 1),
            Ok(vec![vec![2, 3, 1], vec![3, 1, 2]])
        );
        assert_eq!(
            assign_round_robin(&[1, 2], 1, 3, 0),
            Err(Refusal::ReplicationFactorTooLarge {
                requested: 3,
                available: 2
            })
        );
        assert!(assign_round_robin(&[1, 2], 1, 0, 0).is_err());
    }

    #[test]
    fn explicit_assignments_are_validated() {
        let configured = set(&[1, 2, 3]);
        assert!(validate_assignment(&[vec![1, 2], vec![2, 3]], &configured).is_ok());
        for (bad, reason) in [
            (vec![], "no partitions"),
            (vec![vec![1, 2], vec![3]], "partition 1 has 1 replicas"),
            (vec![vec![1, 1]], "partition 0: broker 1 appears twice"),
            (vec![vec![1, 9]], "partition 0: broker 9 is not among"),
            (vec![vec![]], "partition 0: an empty replica list"),
        ] {
            match validate_assignment(&bad, &configured) {
                Err(Refusal::InvalidAssignment(message)) => {
                    assert!(message.contains(reason), "{message} lacks {reason}")
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_new_partition_is_led_by_its_first_live_replica() {
        assert_eq!(
            initial_state(&[3, 1, 2], &set(&[1, 2]), 4),
            Ok(PartitionState {
                leader: Some(1),
                leader_epoch: 0,
                isr: vec![1, 2],
                controller_epoch: 4,
                replicas: vec![3, 1, 2],
            })
        );
        assert_eq!(
            initial_state(&[3], &set(&[1]), 4),
            Err(Refusal::NoLiveReplica { replicas: vec![3] })
        );
    }

    #[test]
    fn rebalance_picks_partitions_of_brokers_over_the_threshold() {
        let tp = |p| TopicPartition::new("t", p);
        let mut states = BTreeMap::new();
        // Broker 1 prefers 0..10 and leads 9 of them: 10 % is not over the threshold.
        for p in 0..10 {
            let leader = if p == 0 { 2 } else { 1 };
            states.insert(tp(p), state(Some(leader), &[1, 2], &[1, 2]));
        }
        // Broker 2 prefers 10 and 11, leads neither; 11's preferred replica is out of sync.
        states.insert(tp(10), state(Some(1), &[1, 2], &[2, 1]));
        states.insert(tp(11), state(Some(1), &[1], &[2, 1]));
        let live = set(&[1, 2]);
        assert_eq!(imbalanced_partitions(&states, &live, 10), vec![tp(10)]);
        // Broker 1 leading only 8 of its 10 (20 %) makes its partitions due as well.
        states.insert(tp(1), state(Some(2), &[1, 2], &[1, 2]));
        assert_eq!(
            imbalanced_partitions(&states, &live, 10),
            vec![tp(0), tp(1), tp(10)]
        );
        assert_eq!(
            imbalanced_partitions(&states, &set(&[1]), 10),
            vec![tp(0), tp(1)],
            "broker 2 is not alive: the partitions it prefers stay as they are"
        );
    }
}
