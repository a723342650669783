//! The leader's side: produce, serving follower fetches and truncation queries, the ISR
//! and the high watermark.

use std::collections::BTreeMap;

use super::metadata::{MetadataError, StateVersion};
use super::{
    follower_progress_map, Acks, ActiveRole, Appended, Assignment, Effect, FetchData, FetchRequest,
    FetchResponse, FollowerProgress, IsrExpansion, ListOffsetsRequest, ListOffsetsResponse,
    LogOffsets, OffsetsForLeaderEpochRequest, OffsetsForLeaderEpochResponse, Output,
    PartitionStateWrite, PartitionView, ProduceError, ProduceOutcome, ProduceRequest,
    ProduceResult, Replica, ReplicaError, ReplicaEvent, ReplicationError, RequestId,
};
use crate::log::ReplicaLog;
use crate::record::{LeaderEpoch, Offset, Record};

pub(super) struct LeaderState {
    /// The LEO when this replica took the current epoch: everything any earlier leader
    /// could have committed lies below it.
    pub(super) epoch_start_offset: Offset,
    followers: BTreeMap<super::BrokerId, FollowerProgress>,
    /// The ISR write in flight; one at a time, so results cannot be confused.
    pending_write: Option<PartitionStateWrite>,
    /// acks=all requests waiting for the HW, in offset order.
    purgatory: Vec<PendingProduce>,
}

struct PendingProduce {
    request_id: RequestId,
    appended: Appended,
    deadline_ms: u64,
}

impl<L: ReplicaLog> Replica<L> {
    /// Produce `request.values` as one batch. Only the leader accepts. acks=all refuses
    /// before appending when |ISR| < `min_insync_replicas` and otherwise parks the request
    /// until the HW passes its last record.
    pub fn produce(
        &mut self,
        request: ProduceRequest,
        now_ms: u64,
    ) -> Result<Output<ProduceOutcome>, ReplicaError> {
        let done = |result: ProduceResult| {
            Ok(Output {
                reply: ProduceOutcome::Done(result),
                effects: Vec::new(),
            })
        };
        let Some(Assignment {
            view,
            role: ActiveRole::Leader(_),
        }) = &self.partition
        else {
            let leader = self.partition.as_ref().map(|a| a.view.leader);
            return done(Err(ProduceError::NotLeader { leader }));
        };
        if request.values.is_empty() {
            return done(Err(ProduceError::Empty));
        }
        // KAFKA-1561: the 0.8.1 broker answered acks=-1 at once when the replication
        // factor it cached at creation was 1, whatever the ISR had become since.
        let rf_one_shortcut =
            self.config.bugs.kafka_1561 && self.config.creation_replication_factor() == 1;
        let isr_size = view.isr.len();
        if request.acks == Acks::All
            && !rf_one_shortcut
            && isr_size < self.config.min_insync_replicas
        {
            return done(Err(ProduceError::NotEnoughReplicas {
                isr_size,
                min_insync_replicas: self.config.min_insync_replicas,
            }));
        }
        let epoch = view.leader_epoch;
        let base_offset = self.log.log_end_offset();
        let records: Vec<Record> = (base_offset..)
            .zip(request.values)
            .map(|(offset, value)| Record::new(offset, epoch, value))
            .collect();
        let appended = Appended {
            base_offset,
            count: records.len() as u64,
        };
        self.log.append(&records)?;
        self.log.flush()?;
        if request.acks == Acks::All && !rf_one_shortcut {
            if let Some(Assignment {
                role: ActiveRole::Leader(leader),
                ..
            }) = &mut self.partition
            {
                leader.purgatory.push(PendingProduce {
                    request_id: request.request_id,
                    appended,
                    deadline_ms: now_ms.saturating_add(request.timeout_ms),
                });
            }
        }
        let mut effects = self.maybe_advance_high_watermark();
        let mut reply = match request.acks {
            Acks::All if !rf_one_shortcut => ProduceOutcome::Pending(appended),
            _ => ProduceOutcome::Done(Ok(appended)),
        };
        // A single-member ISR completes at once: answer directly, not as an effect.
        if let Some(i) = effects.iter().position(|e| {
            matches!(e, Effect::ProduceCompleted { request_id, .. } if *request_id == request.request_id)
        }) {
            if let Effect::ProduceCompleted { result, .. } = effects.remove(i) {
                reply = ProduceOutcome::Done(result);
            }
        }
        Ok(Output { reply, effects })
    }

    /// Serves a follower's fetch: validates its epoch, records its progress (its fetch
    /// offset is its LEO), may expand the ISR and advance the HW. The response carries the
    /// HW as of the read, before this fetch moved it.
    pub fn handle_fetch(
        &mut self,
        request: &FetchRequest,
        now_ms: u64,
    ) -> Result<Output<FetchResponse>, ReplicaError> {
        let rejected = |error| {
            Ok(Output {
                reply: Err(error),
                effects: Vec::new(),
            })
        };
        let Some(Assignment {
            view,
            role: ActiveRole::Leader(leader),
        }) = &mut self.partition
        else {
            return rejected(ReplicationError::NotLeader);
        };
        if let Err(error) = validate_epoch(view, request.current_leader_epoch) {
            return rejected(error);
        }
        let Some(progress) = leader.followers.get_mut(&request.replica_id) else {
            return rejected(ReplicationError::UnknownReplica);
        };
        let log_start_offset = self.log.log_start_offset();
        let log_end_offset = self.log.log_end_offset();
        if request.fetch_offset < log_start_offset || request.fetch_offset > log_end_offset {
            return rejected(ReplicationError::OffsetOutOfRange);
        }
        let records = self.log.read(request.fetch_offset, request.max_records)?;
        let data = FetchData {
            records,
            high_watermark: self.high_watermark,
            log_start_offset,
        };

        progress.log_end_offset = Some(request.fetch_offset);
        // KAFKA-4485: caught up if at the LEO now, or at the LEO the previous fetch saw
        // (then it was caught up as of that fetch).
        if request.fetch_offset >= log_end_offset {
            progress.last_caught_up_ms = now_ms;
        } else if request.fetch_offset >= progress.leader_log_end_offset_at_last_fetch {
            progress.last_caught_up_ms = progress.last_caught_up_ms.max(progress.last_fetch_ms);
        }
        progress.leader_log_end_offset_at_last_fetch = log_end_offset;
        progress.last_fetch_ms = now_ms;

        let mut effects = Vec::new();
        effects.extend(self.maybe_expand_isr(request.replica_id, request.fetch_offset));
        effects.extend(self.maybe_advance_high_watermark());
        Ok(Output {
            reply: Ok(data),
            effects,
        })
    }

    /// Where does `requested_epoch` end in this leader's log (§2, OffsetsForLeaderEpoch)?
    pub fn handle_offsets_for_leader_epoch(
        &self,
        request: &OffsetsForLeaderEpochRequest,
    ) -> OffsetsForLeaderEpochResponse {
        let view = self.leader_view()?;
        validate_epoch(view, request.current_leader_epoch)?;
        Ok(self
            .epochs
            .end_offset_for(request.requested_epoch, self.log.log_end_offset()))
    }

    /// The leader's log start and end offsets.
    pub fn handle_list_offsets(&self, request: &ListOffsetsRequest) -> ListOffsetsResponse {
        let view = self.leader_view()?;
        validate_epoch(view, request.current_leader_epoch)?;
        Ok(LogOffsets {
            log_start_offset: self.log.log_start_offset(),
            log_end_offset: self.log.log_end_offset(),
        })
    }

    /// Committed records (below the HW) from `from` on, as a consumer reads them: at most
    /// `max_records`, and values of at most `max_bytes` in all (but the first record).
    pub fn read_committed(
        &self,
        from: Offset,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<FetchResponse, ReplicaError> {
        if self.leader_view().is_err() {
            return Ok(Err(ReplicationError::NotLeader));
        }
        if from < self.log.log_start_offset() || from > self.high_watermark {
            return Ok(Err(ReplicationError::OffsetOutOfRange));
        }
        let available = usize::try_from(self.high_watermark - from).unwrap_or(usize::MAX);
        let records = self
            .log
            .read_bounded(from, max_records.min(available), max_bytes)?;
        Ok(Ok(FetchData {
            records,
            high_watermark: self.high_watermark,
            log_start_offset: self.log.log_start_offset(),
        }))
    }

    /// The result of an [`Effect::WritePartitionState`]. On success the new ISR takes
    /// effect (only now: a shrink must be durable before the HW may use it); on a conflict
    /// the leader keeps its ISR and waits for the controller's newer LeaderAndIsr.
    pub fn on_partition_state_written(
        &mut self,
        write: &PartitionStateWrite,
        result: Result<StateVersion, MetadataError>,
    ) -> Vec<Effect> {
        let Some(Assignment {
            view,
            role: ActiveRole::Leader(leader),
        }) = &mut self.partition
        else {
            return Vec::new();
        };
        if leader.pending_write.as_ref() != Some(write) {
            return Vec::new();
        }
        leader.pending_write = None;
        match result {
            Ok(version) => {
                tracing::info!(
                    broker = self.config.broker_id,
                    isr = ?write.isr,
                    version,
                    "ISR changed"
                );
                let log_end_offset = self.log.log_end_offset();
                for &follower in write.isr.iter().filter(|id| !view.isr.contains(id)) {
                    let known = leader.followers.get(&follower);
                    self.events.push(ReplicaEvent::IsrExpanded(IsrExpansion {
                        follower,
                        follower_log_end: known.and_then(|p| p.log_end_offset).unwrap_or(0),
                        leader_epoch: view.leader_epoch,
                        high_watermark: self.high_watermark,
                        log_end_offset,
                        epoch_start_offset: leader.epoch_start_offset,
                        written: true,
                    }));
                }
                view.isr.clone_from(&write.isr);
                view.version = version;
                self.maybe_advance_high_watermark()
            }
            Err(error) => {
                tracing::warn!(
                    broker = self.config.broker_id,
                    %error,
                    "ISR write failed; keeping the cached ISR"
                );
                Vec::new()
            }
        }
    }

    pub(super) fn become_leader(
        &mut self,
        view: PartitionView,
        previous: Option<ActiveRole>,
        now_ms: u64,
    ) -> Result<Vec<Effect>, ReplicaError> {
        let log_end_offset = self.log.log_end_offset();
        // KAFKA-7415: the new epoch starts at our LEO, even with no record of it yet, so
        // OffsetsForLeaderEpoch answers the end of the previous epoch correctly.
        let changed = self.epochs.assign(view.leader_epoch, log_end_offset);
        self.persist_epochs(changed)?;
        // Parked requests stay: they complete when the HW passes them in this epoch too.
        let purgatory = match previous {
            Some(ActiveRole::Leader(old)) => old.purgatory,
            _ => Vec::new(),
        };
        let followers =
            follower_progress_map(&view.replicas, &view.isr, self.config.broker_id, now_ms);
        tracing::info!(
            broker = self.config.broker_id,
            epoch = view.leader_epoch,
            start_offset = log_end_offset,
            isr = ?view.isr,
            "became leader"
        );
        self.partition = Some(Assignment {
            view,
            role: ActiveRole::Leader(LeaderState {
                epoch_start_offset: log_end_offset,
                followers,
                pending_write: None,
                purgatory,
            }),
        });
        Ok(self.maybe_advance_high_watermark())
    }

    pub(super) fn leader_tick(&mut self, now_ms: u64) -> Result<Vec<Effect>, ReplicaError> {
        let me = self.config.broker_id;
        let log_end_offset = self.log.log_end_offset();
        let Some(Assignment {
            view,
            role: ActiveRole::Leader(leader),
        }) = &mut self.partition
        else {
            return Ok(Vec::new());
        };
        let mut effects = Vec::new();
        let (expired, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut leader.purgatory)
            .into_iter()
            .partition(|p| now_ms >= p.deadline_ms);
        leader.purgatory = waiting;
        effects.extend(expired.into_iter().map(|p| Effect::ProduceCompleted {
            request_id: p.request_id,
            result: Err(ProduceError::RequestTimedOut(p.appended)),
        }));

        if leader.pending_write.is_none() {
            let lag_max = self.config.replica_lag_time_max_ms;
            let out_of_sync: Vec<_> = view
                .isr
                .iter()
                .copied()
                .filter(|&id| id != me)
                .filter(|id| match leader.followers.get(id) {
                    Some(p) => {
                        p.log_end_offset != Some(log_end_offset)
                            && now_ms.saturating_sub(p.last_caught_up_ms) > lag_max
                    }
                    // An ISR member outside the assignment never fetches: drop it.
                    None => true,
                })
                .collect();
            if !out_of_sync.is_empty() {
                tracing::info!(broker = me, ?out_of_sync, "shrinking ISR");
                let isr = view
                    .isr
                    .iter()
                    .copied()
                    .filter(|id| !out_of_sync.contains(id))
                    .collect();
                let write = isr_write(view, me, self.controller_epoch, isr);
                leader.pending_write = Some(write.clone());
                effects.push(Effect::WritePartitionState(write));
            }
        }
        Ok(effects)
    }

    /// Completes parked produce requests with leadership lost (the leader is leaving).
    pub(super) fn abandon_purgatory(previous: Option<ActiveRole>) -> Vec<Effect> {
        match previous {
            Some(ActiveRole::Leader(leader)) => leader
                .purgatory
                .into_iter()
                .map(|p| Effect::ProduceCompleted {
                    request_id: p.request_id,
                    result: Err(ProduceError::LeadershipLost(p.appended)),
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    fn leader_view(&self) -> Result<&PartitionView, ReplicationError> {
        match &self.partition {
            Some(Assignment {
                view,
                role: ActiveRole::Leader(_),
            }) => Ok(view),
            _ => Err(ReplicationError::NotLeader),
        }
    }

    fn maybe_expand_isr(&mut self, follower: super::BrokerId, fetch_offset: Offset) -> Vec<Effect> {
        let me = self.config.broker_id;
        let Some(Assignment {
            view,
            role: ActiveRole::Leader(leader),
        }) = &mut self.partition
        else {
            return Vec::new();
        };
        if leader.pending_write.is_some()
            || view.isr.contains(&follower)
            || !view.replicas.contains(&follower)
            || fetch_offset < self.high_watermark
        {
            return Vec::new();
        }
        // KAFKA-7128: without this guard a follower that reached only our (possibly stale)
        // HW joins the ISR, though it may lack records an earlier leader committed.
        if !self.config.bugs.kafka_7128 && fetch_offset < leader.epoch_start_offset {
            return Vec::new();
        }
        tracing::info!(broker = me, follower, fetch_offset, "expanding ISR");
        self.events.push(ReplicaEvent::IsrExpanded(IsrExpansion {
            follower,
            follower_log_end: fetch_offset,
            leader_epoch: view.leader_epoch,
            high_watermark: self.high_watermark,
            log_end_offset: self.log.log_end_offset(),
            epoch_start_offset: leader.epoch_start_offset,
            written: false,
        }));
        let mut isr = view.isr.clone();
        isr.push(follower);
        let write = isr_write(view, me, self.controller_epoch, isr);
        leader.pending_write = Some(write.clone());
        vec![Effect::WritePartitionState(write)]
    }

    /// HW = min LEO over the ISR, only ever moving up; then answers the acks=all requests
    /// it passed. A follower that has not fetched in this epoch holds the HW back.
    ///
    /// While an expansion is being written, the follower it lets in counts already (the
    /// "maximal ISR" of KIP-497): the write may land at any moment, and from then on the
    /// follower can be elected cleanly, so nothing it lacks may be committed meanwhile. A
    /// pending shrink still counts the member it removes, as the ISR takes it only once
    /// the write succeeded.
    fn maybe_advance_high_watermark(&mut self) -> Vec<Effect> {
        let me = self.config.broker_id;
        let Some(Assignment {
            view,
            role: ActiveRole::Leader(leader),
        }) = &mut self.partition
        else {
            return Vec::new();
        };
        let joining = leader
            .pending_write
            .iter()
            .flat_map(|write| write.isr.iter())
            .filter(|id| !view.isr.contains(id));
        let mut candidate = Some(self.log.log_end_offset());
        for id in view.isr.iter().chain(joining).filter(|&&id| id != me) {
            let follower = leader.followers.get(id).and_then(|p| p.log_end_offset);
            candidate = candidate.zip(follower).map(|(a, b)| a.min(b));
        }
        if let Some(candidate) = candidate {
            if candidate > self.high_watermark {
                self.high_watermark = candidate;
            }
        }
        let high_watermark = self.high_watermark;
        let enough = view.isr.len() >= self.config.min_insync_replicas;
        let (done, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut leader.purgatory)
            .into_iter()
            .partition(|p| p.appended.end_offset() <= high_watermark);
        leader.purgatory = waiting;
        done.into_iter()
            .map(|p| Effect::ProduceCompleted {
                request_id: p.request_id,
                result: if enough {
                    Ok(p.appended)
                } else {
                    Err(ProduceError::NotEnoughReplicasAfterAppend(p.appended))
                },
            })
            .collect()
    }
}

/// KIP-320: a request without an epoch (an old client, or KAFKA-7040's switch) is not
/// checked; an older epoch is fenced; a newer one is not known here yet.
fn validate_epoch(
    view: &PartitionView,
    current_leader_epoch: Option<LeaderEpoch>,
) -> Result<(), ReplicationError> {
    match current_leader_epoch {
        Some(epoch) if epoch < view.leader_epoch => Err(ReplicationError::FencedLeaderEpoch),
        Some(epoch) if epoch > view.leader_epoch => Err(ReplicationError::UnknownLeaderEpoch),
        _ => Ok(()),
    }
}

fn isr_write(
    view: &PartitionView,
    leader: super::BrokerId,
    controller_epoch: super::ControllerEpoch,
    isr: Vec<super::BrokerId>,
) -> PartitionStateWrite {
    PartitionStateWrite {
        leader,
        leader_epoch: view.leader_epoch,
        isr,
        expected_version: view.version,
        controller_epoch,
        replicas: view.replicas.clone(),
    }
}
