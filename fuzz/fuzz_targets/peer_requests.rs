//! What a peer or a client may send a broker's partition, from arbitrary bytes: each line
//! of the input is one request or answer (its first byte says which, the rest is its
//! JSON body), decoded and checked exactly as the listeners do (`parse_body`, the
//! bodies' own checks and conversions), then handed to a replica core over an in-memory
//! log. Nothing may panic, and the core must keep its own bounds: its high watermark
//! between its log's start and end. The input's first byte picks the core's settings
//! (truncation mode, unclean elections, bug switches), as a broker's config would.

#![no_main]

use broker::log::MemoryLog;
use broker::replica::{
    BrokerId, BugSwitches, Effect, FetchRequest, ListOffsetsRequest, OffsetsForLeaderEpochRequest,
    PartitionStateWrite, ProduceRequest, Replica, ReplicaConfig, TruncationMode,
};
use broker::server::client_api::ProduceBatch;
use broker::server::wire::{
    parse_body, FetchBody, FetchReply, LeaderAndIsrBody, ListOffsetsBody, ListOffsetsReply,
    OffsetsForLeaderEpochBody, OffsetsForLeaderEpochReply, ProduceBody,
};
use libfuzzer_sys::fuzz_target;

const ME: BrokerId = 1;
const BROKERS: [BrokerId; 3] = [1, 2, 3];
const MAX_VALUE_BYTES: usize = 1 << 16;

/// The requests this replica sent last, which an answer line answers, and the partition
/// state write it asked for (answered as the metadata store would, after the line).
#[derive(Default)]
struct Sent {
    fetch: Option<FetchRequest>,
    epoch: Option<OffsetsForLeaderEpochRequest>,
    list: Option<ListOffsetsRequest>,
    write: Option<PartitionStateWrite>,
}

impl Sent {
    fn note(&mut self, effects: Vec<Effect>) {
        for effect in effects {
            match effect {
                Effect::SendFetch(request) => self.fetch = Some(request),
                Effect::SendOffsetsForLeaderEpoch(request) => self.epoch = Some(request),
                Effect::SendListOffsets(request) => self.list = Some(request),
                Effect::WritePartitionState(write) => self.write = Some(write),
                _ => {}
            }
        }
    }
}

fn config(flags: u8) -> ReplicaConfig {
    let mut config = ReplicaConfig::new(ME, BROKERS.to_vec());
    config.truncation_mode = if flags & 1 == 0 {
        TruncationMode::Epoch
    } else {
        TruncationMode::Hw
    };
    config.unclean_leader_election = flags & 2 != 0;
    config.min_insync_replicas = 1 + usize::from(flags >> 2 & 1);
    config.fetch_max_records = if flags & 8 == 0 { 500 } else { 1 };
    if flags & 16 != 0 {
        config.bugs = BugSwitches::ALL;
    }
    config
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let Ok(mut replica) = Replica::new(config(flags), MemoryLog::new()) else {
        return;
    };
    let mut sent = Sent::default();
    let mut now = 0u64;
    let mut request_id = 0u64;
    for line in rest.split(|byte| *byte == b'\n') {
        let Some((&kind, body)) = line.split_first() else {
            continue;
        };
        now += 50 * u64::from(kind >> 4);
        match kind % 8 {
            0 => {
                let Ok(body) = parse_body::<LeaderAndIsrBody>(body) else {
                    continue;
                };
                if body.check_shape(&BROKERS).is_ok() {
                    if let Ok(output) = replica.handle_leader_and_isr(body.to_request(), now) {
                        sent.note(output.effects);
                    }
                }
            }
            1 => {
                let Ok(body) = parse_body::<ProduceBody>(body) else {
                    continue;
                };
                let Ok(batch) = ProduceBatch::from_body(body, MAX_VALUE_BYTES) else {
                    continue;
                };
                request_id += 1;
                let request = ProduceRequest {
                    request_id,
                    values: batch.values,
                    acks: batch.acks,
                    timeout_ms: batch.timeout_ms,
                };
                if let Ok(output) = replica.produce(request, now) {
                    sent.note(output.effects);
                }
            }
            2 => {
                let Ok(body) = parse_body::<FetchBody>(body) else {
                    continue;
                };
                if let Ok(output) = replica.handle_fetch(&body.to_request(ME), now) {
                    sent.note(output.effects);
                }
            }
            3 => {
                let Ok(body) = parse_body::<OffsetsForLeaderEpochBody>(body) else {
                    continue;
                };
                let _ = replica.handle_offsets_for_leader_epoch(&body.to_request(ME));
            }
            4 => {
                let Ok(body) = parse_body::<ListOffsetsBody>(body) else {
                    continue;
                };
                let _ = replica.handle_list_offsets(&body.to_request(ME));
            }
            5 => {
                let (Some(request), Ok(reply)) = (&sent.fetch, parse_body::<FetchReply>(body))
                else {
                    continue;
                };
                let request = request.clone();
                if let Ok(effects) = replica.on_fetch_response(&request, Ok(reply.into_data()), now)
                {
                    sent.note(effects);
                }
            }
            6 => {
                let (Some(request), Ok(reply)) =
                    (&sent.epoch, parse_body::<OffsetsForLeaderEpochReply>(body))
                else {
                    continue;
                };
                let request = request.clone();
                let answer = Ok(reply.into_end_offset());
                if let Ok(effects) =
                    replica.on_offsets_for_leader_epoch_response(&request, answer, now)
                {
                    sent.note(effects);
                }
            }
            _ => {
                let (Some(request), Ok(reply)) = (&sent.list, parse_body::<ListOffsetsReply>(body))
                else {
                    continue;
                };
                let request = request.clone();
                if let Ok(effects) =
                    replica.on_list_offsets_response(&request, Ok(reply.into_offsets()), now)
                {
                    sent.note(effects);
                }
            }
        }
        if let Some(write) = sent.write.take() {
            // Granted when the line's high bit is clear, as a store that took the write.
            let result = if kind & 0x80 == 0 {
                Ok(write.expected_version.saturating_add(1))
            } else {
                Err(broker::replica::metadata::MetadataError::VersionConflict {
                    expected: write.expected_version,
                    actual: Some(write.expected_version.saturating_add(1)),
                })
            };
            let effects = replica.on_partition_state_written(&write, result);
            sent.note(effects);
        }
        if let Ok(effects) = replica.tick(now) {
            sent.note(effects);
        }
        assert!(
            replica.log_start_offset() <= replica.high_watermark()
                && replica.high_watermark() <= replica.log_end_offset(),
            "high watermark {} outside the log [{}, {})",
            replica.high_watermark(),
            replica.log_start_offset(),
            replica.log_end_offset()
        );
    }
});
