//! The `log` workload: appends of unique integers (acks=all) and polling reads, checked by
//! the log checker (`checkers::log`, whose module docs define every rule used below).
//!
//! History values (DESIGN.md §4), key `topic/partition`:
//!
//! | entry | value |
//! |---|---|
//! | append invoke, fail, info | `{"key": "t/0", "value": 17}` |
//! | append ok | `{"key": "t/0", "value": 17, "offset": 4}` |
//!
//! A batch of appends (`--batch-fraction`) is one produce request recorded as one
//! `append` per value, with the rows above ([`crate::record_batch`]).
//! | read invoke, fail | `{"key": "t/0", "offset": 0}` (+ `"consistency": "linearizable"`, `"final": true` when so) |
//! | read ok | the invoke's fields + `"records": [[offset, value], ...]`, `"high_watermark"`, `"log_start_offset"`, `"max"`, and `"truncated": true` when a byte limit of the broker cut it |
//!
//! `max` is the limit the broker applied (its answer's `max`), so the checker can tell a
//! read cut short by its limit from one that withheld records. It is not in the invoke:
//! the checker prefers the invoke's `max`, and only the broker knows the limit it used.
//!
//! Reads poll: each reads from where this worker's reads of the partition have reached
//! (the furthest end returned so far), so they never go back, and continue there under a
//! new process id after an `info` append (a consumer resuming from its position). The
//! final reads start at offset 0 under fresh processes, so no worker's position bears on
//! them.

use super::{
    backoff, record_batch, BatchShape, Consistency, FinalPartition, OpContext, FINAL_READ_MAX,
};
use crate::generator::PlannedOp;
use crate::recorder::{Recorder, RecorderError};
use history::Outcome;
use serde_json::{json, Map, Value};
use std::time::Instant;
use sut::{Acks, Client, ClientError, ReadRequest};

/// Per partition, the offset this worker's next read starts at.
pub(crate) struct Cursors {
    next: Vec<i64>,
}

impl Cursors {
    pub(crate) fn new(partitions: u32) -> Cursors {
        Cursors {
            next: vec![0; partitions as usize],
        }
    }
}

/// Performs and records one operation; returns how it ended.
pub(crate) async fn execute(
    cx: &mut OpContext<'_>,
    cursors: &mut Cursors,
    op: PlannedOp,
) -> Result<Outcome, RecorderError> {
    match op {
        PlannedOp::Write { partition, value } => append(cx, partition, value).await,
        PlannedOp::Batch { partition, values } => {
            let shape = BatchShape {
                f: "append",
                with_offset: true,
            };
            let values: Vec<i64> = values.iter().collect();
            record_batch(cx, shape, partition, &values).await
        }
        PlannedOp::Read { partition } => {
            let offset = cursors.next.get(partition as usize).copied().unwrap_or(0);
            let consistency = cx.options.read_consistency;
            let max = cx.options.read_max;
            let deadline = Instant::now() + cx.options.request_timeout;
            let result = read(
                cx.client,
                cx.recorder,
                cx.process,
                ReadSpec {
                    partition,
                    offset,
                    max,
                    consistency,
                    marked_final: false,
                },
                deadline,
            )
            .await?;
            match result {
                Ok(read) => {
                    if let Some(cursor) = cursors.next.get_mut(partition as usize) {
                        *cursor = (*cursor).max(read.end);
                    }
                    Ok(Outcome::Ok)
                }
                Err(error) => Ok(error.read_outcome()),
            }
        }
    }
}

async fn append(
    cx: &mut OpContext<'_>,
    partition: u32,
    value: i64,
) -> Result<Outcome, RecorderError> {
    let key = cx.client.target().key(partition);
    let node = cx.client.route(partition).await;
    let invocation = cx.recorder.invoke(
        cx.process,
        "append",
        json!({"key": key, "value": value}),
        Some(cx.client.target().node_name(node)),
    )?;
    match cx
        .client
        .produce(node, partition, &json!(value), Acks::All)
        .await
    {
        Ok(offset) => {
            let done = json!({"key": key, "value": value, "offset": offset});
            cx.recorder.complete(invocation, Outcome::Ok, done, None)?;
            Ok(Outcome::Ok)
        }
        Err(error) => {
            let outcome = error.write_outcome();
            let done = json!({"key": key, "value": value});
            cx.recorder
                .complete(invocation, outcome, done, Some(error.code()))?;
            Ok(outcome)
        }
    }
}

/// A read's value as the history holds it: whether it is a final read, and the
/// records it returned as `[offset, value]` pairs.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
pub struct ReadValue {
    #[serde(default, rename = "final")]
    pub is_final: bool,
    #[serde(default)]
    pub records: Vec<(u64, Value)>,
}

impl ReadValue {
    /// What a read's value says; `None` for a value of another shape.
    pub fn of(value: &Value) -> Option<ReadValue> {
        serde::Deserialize::deserialize(value).ok()
    }

    /// One past the highest offset returned (0 when none).
    pub fn end(&self) -> u64 {
        self.records
            .iter()
            .map(|(offset, _)| offset + 1)
            .max()
            .unwrap_or(0)
    }
}

/// What one read asks for.
pub struct ReadSpec {
    pub partition: u32,
    pub offset: i64,
    pub max: u32,
    pub consistency: Consistency,
    pub marked_final: bool,
}

/// What an ok read returned, beyond its records (which went into the history).
pub struct ReadSummary {
    /// One past the highest offset returned, or the offset read from if none.
    pub end: i64,
    pub records: u64,
    pub high_watermark: i64,
    /// The record limit the broker applied.
    pub max: u64,
}

/// Performs and records one read; what it returned, or the error it was recorded with.
pub async fn read(
    client: &mut dyn Client,
    recorder: &Recorder,
    process: u64,
    spec: ReadSpec,
    deadline: Instant,
) -> Result<Result<ReadSummary, ClientError>, RecorderError> {
    let mut value = Map::new();
    value.insert("key".into(), json!(client.target().key(spec.partition)));
    value.insert("offset".into(), json!(spec.offset));
    if spec.consistency == Consistency::Linearizable {
        value.insert("consistency".into(), json!("linearizable"));
    }
    if spec.marked_final {
        value.insert("final".into(), json!(true));
    }
    let node = client.route(spec.partition).await;
    let invocation = recorder.invoke(
        process,
        "read",
        Value::Object(value.clone()),
        Some(client.target().node_name(node)),
    )?;
    let request = ReadRequest {
        partition: spec.partition,
        offset: Some(spec.offset),
        max: spec.max,
        consistency: spec.consistency,
    };
    let result = client.read(node, request, deadline).await;
    match result {
        Ok(mut reply) => {
            let summary = ReadSummary {
                end: reply.end(spec.offset),
                records: reply.records.len() as u64,
                high_watermark: reply.high_watermark,
                max: reply.max.unwrap_or(u64::from(spec.max)),
            };
            value.insert("records".into(), reply.take_records_json());
            value.insert("high_watermark".into(), json!(reply.high_watermark));
            if let Some(start) = reply.log_start_offset {
                value.insert("log_start_offset".into(), json!(start));
            }
            value.insert("max".into(), json!(summary.max));
            if reply.truncated {
                value.insert("truncated".into(), json!(true));
            }
            recorder.complete(invocation, Outcome::Ok, Value::Object(value), None)?;
            Ok(Ok(summary))
        }
        Err(error) => {
            let outcome = error.read_outcome();
            recorder.complete(
                invocation,
                outcome,
                Value::Object(value),
                Some(error.code()),
            )?;
            Ok(Err(error))
        }
    }
}

/// Reads `partition` from offset 0 to its end: linearizable reads of [`FINAL_READ_MAX`]
/// marked `"final": true`, each from where the previous one ended, until one returns fewer
/// records than its max (so it returned everything below its high watermark: the log
/// checker's "final read not cut short"). A failed read is recorded and retried at the
/// same offset after a backoff, until `deadline`.
pub(crate) async fn final_read(
    client: &mut dyn Client,
    recorder: &Recorder,
    process: u64,
    partition: u32,
    deadline: Instant,
) -> Result<FinalPartition, RecorderError> {
    let mut done = FinalPartition {
        partition,
        key: client.target().key(partition),
        complete: false,
        records: 0,
        high_watermark: None,
        reads: 0,
        last_error: None,
    };
    let mut offset = 0;
    let mut failures = 0;
    while Instant::now() < deadline {
        let read_deadline = deadline.min(Instant::now() + client.request_timeout());
        let spec = ReadSpec {
            partition,
            offset,
            max: FINAL_READ_MAX,
            consistency: Consistency::Linearizable,
            marked_final: true,
        };
        done.reads += 1;
        let read = match read(client, recorder, process, spec, read_deadline).await? {
            Ok(read) => read,
            Err(error) => {
                done.last_error = Some(error.to_string());
                backoff(failures, deadline).await;
                failures += 1;
                continue;
            }
        };
        failures = 0;
        done.records += read.records;
        done.high_watermark = Some(read.high_watermark);
        if read.records < read.max {
            done.complete = true;
            break;
        }
        offset = read.end;
    }
    Ok(done)
}
