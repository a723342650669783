//! The `register` workload: one register per partition, whose value is the partition's
//! last committed record. Checked with the linearizability checker's `register` model
//! (`checkers::linear`): `f` is `write` or `read`, values are `{"key": K, "value": V}`, the
//! initial value is null, and a read of null constrains nothing.
//!
//! History values, key `topic/partition`:
//!
//! | entry | value |
//! |---|---|
//! | write invoke, fail, info | `{"key": "t/0", "value": 17}` |
//! | write ok | `{"key": "t/0", "value": 17, "offset": 4}` (where the log put it) |
//! | read invoke, fail | `{"key": "t/0", "value": null}` |
//! | read ok | `{"key": "t/0", "value": 17}` (`null`: the partition was empty) |
//!
//! A **write** appends a unique integer with acks=all: it takes effect when the high
//! watermark passes its offset, and the register's order is the log's offset order.
//!
//! A **read** is two steps, both with `consistency=linearizable`: learn the high watermark
//! `h` (a read of one record), then read from `h - 1` and take the last record returned.
//! If that answer stopped short of its own high watermark (more was committed meanwhile
//! than fits in its `max`), read again from its high watermark - 1. Why the value is
//! linearizable: the broker takes the records and the high watermark `h2` of the answer
//! together, at one instant `t` inside the read's interval, and only answers after the
//! metadata quorum confirmed it still led at that epoch and its high watermark had
//! reached the epoch's start offset. So at `t` no later leader existed, every write acked
//! before the read began lies below `h2` (it was committed to the ISR, which the leader
//! of this epoch was elected from, and lies below the epoch's start), and everything below
//! `h2` is committed and stays in the log in this order. The record at `h2 - 1` is thus
//! the register's value at `t`. Step one only finds where to look; it need not be
//! current. A high watermark of 0 at step one reads as null: the register was still empty
//! at that step's own instant, which is equally linearizable (and Knossos's `register`
//! model reads null as unknown anyway).

use super::{backoff, record_batch, BatchShape, Consistency, FinalPartition, OpContext};
use crate::generator::PlannedOp;
use crate::recorder::{Recorder, RecorderError};
use history::Outcome;
use serde_json::{json, Value};
use std::time::Instant;
use sut::{Acks, Client, ClientError, ReadRequest};

/// `max` of a register read's second step: room for the writes committed between the two
/// steps.
const READ_MAX: u32 = 1000;
/// Second steps before a register read gives up (each one found more committed than fit).
const READ_ROUNDS: u32 = 8;

/// Performs and records one operation; returns how it ended.
pub(crate) async fn execute(
    cx: &mut OpContext<'_>,
    op: PlannedOp,
) -> Result<Outcome, RecorderError> {
    match op {
        PlannedOp::Write { partition, value } => write(cx, partition, value).await,
        PlannedOp::Batch { partition, values } => {
            // Concurrent writes that take effect together, in offset order: the register
            // ends at the batch's last value, which is linearizable.
            let shape = BatchShape {
                f: "write",
                with_offset: true,
            };
            let values: Vec<i64> = values.iter().collect();
            record_batch(cx, shape, partition, &values).await
        }
        PlannedOp::Read { partition } => {
            let deadline = Instant::now() + cx.options.request_timeout;
            let result = read(cx.client, cx.recorder, cx.process, partition, deadline).await?;
            Ok(match result {
                Ok(_) => Outcome::Ok,
                Err(error) => error.read_outcome(),
            })
        }
    }
}

async fn write(
    cx: &mut OpContext<'_>,
    partition: u32,
    value: i64,
) -> Result<Outcome, RecorderError> {
    let key = cx.client.target().key(partition);
    let node = cx.client.route(partition).await;
    let body = json!({"key": key, "value": value});
    let invocation = cx.recorder.invoke(
        cx.process,
        "write",
        body.clone(),
        Some(cx.client.target().node_name(node)),
    )?;
    let (outcome, done, error) = match cx
        .client
        .produce(node, partition, &json!(value), Acks::All)
        .await
    {
        // The offset is not the register's business (its checker reads key and value);
        // the ISR-admission oracle judges acknowledged writes by where they landed.
        Ok(offset) => {
            let mut done = body;
            done["offset"] = json!(offset);
            (Outcome::Ok, done, None)
        }
        Err(error) => (error.write_outcome(), body, Some(error.code())),
    };
    cx.recorder.complete(invocation, outcome, done, error)?;
    Ok(outcome)
}

/// A read's value and the high watermark it was read at.
struct Latest {
    value: Value,
    high_watermark: i64,
}

/// Performs and records one register read.
async fn read(
    client: &mut dyn Client,
    recorder: &Recorder,
    process: u64,
    partition: u32,
    deadline: Instant,
) -> Result<Result<Latest, ClientError>, RecorderError> {
    let key = client.target().key(partition);
    let node = client.route(partition).await;
    let invocation = recorder.invoke(
        process,
        "read",
        json!({"key": key, "value": null}),
        Some(client.target().node_name(node)),
    )?;
    match read_latest(client, node, partition, deadline).await {
        Ok(latest) => {
            let done = json!({"key": key, "value": latest.value});
            recorder.complete(invocation, Outcome::Ok, done, None)?;
            Ok(Ok(latest))
        }
        Err(error) => {
            let done = json!({"key": key, "value": null});
            recorder.complete(invocation, error.read_outcome(), done, Some(error.code()))?;
            Ok(Err(error))
        }
    }
}

/// The two steps of a register read (module docs), all on `node`.
async fn read_latest(
    client: &mut dyn Client,
    node: usize,
    partition: u32,
    deadline: Instant,
) -> Result<Latest, ClientError> {
    let request = |offset: Option<i64>, max: u32| ReadRequest {
        partition,
        offset,
        max,
        consistency: Consistency::Linearizable,
    };
    let first = client.read(node, request(None, 1), deadline).await?;
    if first.high_watermark <= 0 {
        return Ok(Latest {
            value: Value::Null,
            high_watermark: first.high_watermark,
        });
    }
    let mut from = first.high_watermark - 1;
    for _ in 0..READ_ROUNDS {
        let reply = client
            .read(node, request(Some(from), READ_MAX), deadline)
            .await?;
        match reply.records.last() {
            Some(last) if last.offset.saturating_add(1) >= reply.high_watermark => {
                return Ok(Latest {
                    value: last.value.clone(),
                    high_watermark: reply.high_watermark,
                });
            }
            None if reply.high_watermark <= 0 => {
                return Ok(Latest {
                    value: Value::Null,
                    high_watermark: reply.high_watermark,
                });
            }
            // Cut short by READ_MAX, or (from a broker whose high watermark moved back)
            // nothing at `from`: look again just below the answer's high watermark.
            _ => from = reply.high_watermark - 1,
        }
    }
    Err(ClientError::BadResponse {
        status: 200,
        detail: format!(
            "no read within {READ_ROUNDS} rounds reached its own high watermark (last asked from offset {from})"
        ),
    })
}

/// The register's final value: one read, recorded, retried with backoff until it
/// succeeds or `deadline` passes.
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
    let mut failures = 0;
    while Instant::now() < deadline {
        let read_deadline = deadline.min(Instant::now() + client.request_timeout());
        done.reads += 1;
        match read(client, recorder, process, partition, read_deadline).await? {
            Ok(latest) => {
                done.complete = true;
                done.records = u64::from(!latest.value.is_null());
                done.high_watermark = Some(latest.high_watermark);
                break;
            }
            Err(error) => {
                done.last_error = Some(error.to_string());
                backoff(failures, deadline).await;
                failures += 1;
            }
        }
    }
    Ok(done)
}
