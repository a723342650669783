//! The follower's side: truncation on becoming follower (by HW or by leader epoch),
//! fetching, and OffsetOutOfRange handling.

use super::config::TruncationMode;
use super::{
    ActiveRole, Assignment, BrokerId, Effect, EpochEndOffset, FetchRequest, FetchResponse,
    ListOffsetsRequest, ListOffsetsResponse, OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse, PartitionView, Replica, ReplicaError,
};
use crate::log::ReplicaLog;
use crate::record::{LeaderEpoch, Offset, Record};

pub(super) struct FollowerState {
    pub(super) leader: BrokerId,
    phase: Phase,
    /// When to (re)send the phase's request if no usable answer came.
    resend_at_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for OffsetsForLeaderEpoch to say where our log may diverge.
    Truncating,
    /// Fetching from our LEO.
    Fetching,
    /// The last fetch was out of range; asking the leader for its log's bounds.
    ResolvingOutOfRange,
    /// Ahead of the leader with truncation not allowed (Kafka halts here); waits for the
    /// next LeaderAndIsr.
    Halted,
}

impl<L: ReplicaLog> Replica<L> {
    /// The follower's answer to a fetch it sent: appends the records, takes
    /// `min(leader HW, own LEO)` as its HW, and fetches again. Answers to requests that are
    /// no longer current (another fetch offset, another leader, another epoch) are dropped.
    pub fn on_fetch_response(
        &mut self,
        request: &FetchRequest,
        response: FetchResponse,
        now_ms: u64,
    ) -> Result<Vec<Effect>, ReplicaError> {
        self.with_follower(request.leader, |replica, view, state| {
            // KAFKA-7040 era: a response counted if the partition was still being fetched
            // at that offset; KIP-320 also wants the epoch it was asked in.
            let same_epoch =
                replica.config.bugs.kafka_7040 || request.built_in_epoch == view.leader_epoch;
            if state.phase != Phase::Fetching
                || !same_epoch
                || request.fetch_offset != replica.log.log_end_offset()
            {
                return Ok(Vec::new());
            }
            let data = match response {
                Ok(data) => data,
                Err(super::ReplicationError::OffsetOutOfRange) => {
                    state.phase = Phase::ResolvingOutOfRange;
                    return Ok(replica.send_phase_request(view, state, now_ms));
                }
                Err(error) => {
                    tracing::debug!(broker = replica.config.broker_id, %error, "fetch failed");
                    state.resend_at_ms = now_ms.saturating_add(replica.config.retry_backoff_ms);
                    return Ok(Vec::new());
                }
            };
            if let Err(problem) = check_batch(&data.records, request.fetch_offset) {
                tracing::warn!(
                    broker = replica.config.broker_id,
                    problem,
                    "bad fetch response"
                );
                state.resend_at_ms = now_ms.saturating_add(replica.config.retry_backoff_ms);
                return Ok(Vec::new());
            }
            if !data.records.is_empty() {
                replica.log.append(&data.records)?;
                replica.log.flush()?;
                let mut changed = false;
                for record in &data.records {
                    changed |= replica.epochs.assign(record.leader_epoch, record.offset);
                }
                replica.persist_epochs(changed)?;
            }
            // Never backwards: the fetcher may have two fetches at one offset in flight (a
            // re-send after a timeout), and the older answer can arrive last. Only
            // truncation lowers a follower's high watermark.
            let offered = data.high_watermark.min(replica.log.log_end_offset());
            replica.high_watermark = replica.high_watermark.max(offered);
            Ok(replica.send_phase_request(view, state, now_ms))
        })
    }

    /// The follower's answer to its OffsetsForLeaderEpoch: truncate to where its log and
    /// the leader's agree (§2, KIP-279), asking again if it lacks the leader's epoch.
    pub fn on_offsets_for_leader_epoch_response(
        &mut self,
        request: &OffsetsForLeaderEpochRequest,
        response: OffsetsForLeaderEpochResponse,
        now_ms: u64,
    ) -> Result<Vec<Effect>, ReplicaError> {
        self.with_follower(request.leader, |replica, view, state| {
            if state.phase != Phase::Truncating {
                return Ok(Vec::new());
            }
            // KAFKA-7040: the 2.0 fetcher checked only that the partition was still there
            // (still truncating, from the same leader); KAFKA-7786 also drops an answer
            // whose epoch changed while it was in flight: it describes a log that may
            // since have grown past what we hold.
            if !replica.config.bugs.kafka_7040 && request.built_in_epoch != view.leader_epoch {
                tracing::info!(
                    broker = replica.config.broker_id,
                    request_epoch = request.built_in_epoch,
                    epoch = view.leader_epoch,
                    "ignoring OffsetsForLeaderEpoch response from an earlier epoch"
                );
                return Ok(Vec::new());
            }
            let answer = match response {
                Ok(answer) => answer,
                Err(error) => {
                    tracing::debug!(broker = replica.config.broker_id, %error, "OffsetsForLeaderEpoch failed");
                    state.resend_at_ms = now_ms.saturating_add(replica.config.retry_backoff_ms);
                    return Ok(Vec::new());
                }
            };
            let log_end_offset = replica.log.log_end_offset();
            match answer {
                // UNDEFINED: the leader knows no epoch of ours; the HW is all we can trust.
                None => replica.truncate_to(replica.high_watermark, "hw", None)?,
                Some(EpochEndOffset {
                    leader_epoch,
                    end_offset,
                }) => match replica.epochs.end_offset_for(leader_epoch, log_end_offset) {
                    Some(ours) if ours.leader_epoch == leader_epoch => {
                        replica.truncate_to(ours.end_offset.min(end_offset), "epoch", None)?
                    }
                    Some(ours) => {
                        // We lack the leader's epoch: cut at the end of our largest
                        // smaller epoch and ask again about that one.
                        replica.truncate_to(ours.end_offset.min(log_end_offset), "epoch", None)?;
                        return replica.start_truncation(view, state, now_ms);
                    }
                    // We track no epoch that old: the leader's end is the bound.
                    None => replica.truncate_to(end_offset.min(log_end_offset), "epoch", None)?,
                },
            }
            state.phase = Phase::Fetching;
            Ok(replica.send_phase_request(view, state, now_ms))
        })
    }

    /// The follower's answer to the ListOffsets it sent after OffsetOutOfRange.
    pub fn on_list_offsets_response(
        &mut self,
        request: &ListOffsetsRequest,
        response: ListOffsetsResponse,
        now_ms: u64,
    ) -> Result<Vec<Effect>, ReplicaError> {
        self.with_follower(request.leader, |replica, view, state| {
            if state.phase != Phase::ResolvingOutOfRange
                || request.built_in_epoch != view.leader_epoch
            {
                return Ok(Vec::new());
            }
            let leader = match response {
                Ok(offsets) => offsets,
                Err(error) => {
                    tracing::debug!(broker = replica.config.broker_id, %error, "ListOffsets failed");
                    state.resend_at_ms = now_ms.saturating_add(replica.config.retry_backoff_ms);
                    return Ok(Vec::new());
                }
            };
            let log_end_offset = replica.log.log_end_offset();
            if leader.log_end_offset < log_end_offset {
                // We are ahead: the leader was elected uncleanly (or lost a tail).
                if !replica.config.unclean_leader_election {
                    tracing::error!(
                        broker = replica.config.broker_id,
                        leader_end_offset = leader.log_end_offset,
                        log_end_offset,
                        "ahead of the leader and truncation is not allowed"
                    );
                    state.phase = Phase::Halted;
                    return Ok(vec![Effect::TruncationNotAllowed {
                        leader_end_offset: leader.log_end_offset,
                        log_end_offset,
                    }]);
                }
                replica.truncate_to(
                    leader.log_end_offset,
                    "ahead-of-leader",
                    Some(leader.log_end_offset),
                )?;
            } else if replica.config.bugs.kafka_2143 {
                // KAFKA-2143: the 0.9.0 fetcher took "leader LEO >= ours" to mean we fell
                // behind its log start, though we may have been ahead a moment ago (the
                // leader appended since the fetch): the whole log goes.
                replica.truncate_fully_and_start_at(leader.log_start_offset, leader.log_end_offset)?;
            } else if leader.log_start_offset > log_end_offset {
                // Really behind the leader's retention: nothing we hold is still useful.
                replica.truncate_fully_and_start_at(leader.log_start_offset, leader.log_end_offset)?;
            }
            state.phase = Phase::Fetching;
            Ok(replica.send_phase_request(view, state, now_ms))
        })
    }

    pub(super) fn become_follower(
        &mut self,
        view: PartitionView,
        previous: Option<ActiveRole>,
        now_ms: u64,
    ) -> Result<Vec<Effect>, ReplicaError> {
        let mut effects = Replica::<L>::abandon_purgatory(previous);
        tracing::info!(
            broker = self.config.broker_id,
            leader = view.leader,
            epoch = view.leader_epoch,
            "became follower"
        );
        let mut state = FollowerState {
            leader: view.leader,
            phase: Phase::Fetching,
            resend_at_ms: now_ms,
        };
        match self.config.truncation_mode {
            TruncationMode::Hw => {
                self.truncate_to(self.high_watermark, "hw", None)?;
                effects.extend(self.send_phase_request(&view, &mut state, now_ms));
            }
            TruncationMode::Epoch => {
                effects.extend(self.start_truncation(&view, &mut state, now_ms)?);
            }
        }
        self.partition = Some(Assignment {
            view,
            role: ActiveRole::Follower(state),
        });
        Ok(effects)
    }

    pub(super) fn follower_tick(&mut self, now_ms: u64) -> Result<Vec<Effect>, ReplicaError> {
        let Some(leader) = self.partition.as_ref().and_then(|a| match &a.role {
            ActiveRole::Follower(f) => Some(f.leader),
            ActiveRole::Leader(_) => None,
        }) else {
            return Ok(Vec::new());
        };
        self.with_follower(leader, |replica, view, state| {
            if now_ms >= state.resend_at_ms {
                Ok(replica.send_phase_request(view, state, now_ms))
            } else {
                Ok(Vec::new())
            }
        })
    }

    /// Enters the truncation phase by asking about our latest epoch. A log without epochs
    /// (nothing held, or records from before epochs were tracked) falls back to the HW.
    fn start_truncation(
        &mut self,
        view: &PartitionView,
        state: &mut FollowerState,
        now_ms: u64,
    ) -> Result<Vec<Effect>, ReplicaError> {
        if self.epochs.latest_epoch().is_some() {
            state.phase = Phase::Truncating;
        } else {
            self.truncate_to(self.high_watermark, "hw", None)?;
            state.phase = Phase::Fetching;
        }
        Ok(self.send_phase_request(view, state, now_ms))
    }

    /// Sends the request the phase is waiting on, and arms the re-send timer.
    fn send_phase_request(
        &self,
        view: &PartitionView,
        state: &mut FollowerState,
        now_ms: u64,
    ) -> Vec<Effect> {
        state.resend_at_ms = now_ms.saturating_add(self.config.request_timeout_ms);
        let replica_id = self.config.broker_id;
        let built_in_epoch = view.leader_epoch;
        // KAFKA-7040: pre-KIP-320 requests carry no epoch, so the leader cannot fence.
        let current_leader_epoch = (!self.config.bugs.kafka_7040).then_some(built_in_epoch);
        let effect = match state.phase {
            Phase::Fetching => Effect::SendFetch(FetchRequest {
                replica_id,
                leader: state.leader,
                fetch_offset: self.log.log_end_offset(),
                current_leader_epoch,
                max_records: self.config.fetch_max_records,
                built_in_epoch,
            }),
            Phase::Truncating => match self.epochs.latest_epoch() {
                Some(requested_epoch) => {
                    Effect::SendOffsetsForLeaderEpoch(OffsetsForLeaderEpochRequest {
                        replica_id,
                        leader: state.leader,
                        requested_epoch,
                        current_leader_epoch,
                        built_in_epoch,
                    })
                }
                None => return Vec::new(),
            },
            Phase::ResolvingOutOfRange => Effect::SendListOffsets(ListOffsetsRequest {
                replica_id,
                leader: state.leader,
                current_leader_epoch,
                built_in_epoch,
            }),
            Phase::Halted => return Vec::new(),
        };
        vec![effect]
    }

    /// Runs `f` on the follower state if this replica follows `leader`; the assignment is
    /// taken out meanwhile so that `f` can use the rest of the replica freely.
    fn with_follower(
        &mut self,
        leader: BrokerId,
        f: impl FnOnce(
            &mut Replica<L>,
            &PartitionView,
            &mut FollowerState,
        ) -> Result<Vec<Effect>, ReplicaError>,
    ) -> Result<Vec<Effect>, ReplicaError> {
        let Some(mut assignment) = self.partition.take() else {
            return Ok(Vec::new());
        };
        let result = match &mut assignment.role {
            ActiveRole::Follower(state) if state.leader == leader => {
                f(self, &assignment.view, state)
            }
            _ => Ok(Vec::new()),
        };
        self.partition = Some(assignment);
        result
    }
}

/// A fetched batch must continue our log at `from` without gaps. Its contents come from
/// the network, so a bad one is refused rather than trusted.
fn check_batch(records: &[Record], from: Offset) -> Result<(), &'static str> {
    let mut last_epoch: Option<LeaderEpoch> = None;
    for (expected, record) in (from..).zip(records) {
        if record.offset != expected {
            return Err("records do not continue the log");
        }
        if last_epoch.is_some_and(|e| record.leader_epoch < e) {
            return Err("leader epochs go backwards");
        }
        last_epoch = Some(record.leader_epoch);
    }
    Ok(())
}
