//! From a register partition's ops to its clusters' zones, or to a read that no write
//! explains.
//!
//! A cluster is a write and every read that returned its value (the initial value is a
//! write before the history). With every read value written once, a linearization holds
//! each cluster as one unbroken stretch, write first: once another value is written, no
//! later read can return the earlier one. So a cluster that some op completed before
//! another of its ops was invoked must hold the register at least from that completion
//! to that invocation (a forward zone); otherwise all its ops overlap and it can take
//! effect at one moment between its latest invocation and its earliest completion (a
//! backward zone).
//!
//! What is left out, and why: `fail` writes and `info` reads are gone already (the
//! partition has no such ops); an `info` write no read returned may take effect after
//! everything else, where it changes nothing, so it has no zone; an observed `info` write
//! completes at the end of time.

use super::super::models::{RegisterModel, RegisterOp};
use super::super::partition::PartOp;
use super::NotEligible;

/// A point on the history's time line: 0 is before the history (the initial value's
/// write), history position `p` is `p + 1`, [`AFTER`] is after it (ops open to the end).
pub(crate) type Time = u64;
pub(crate) const BEFORE: Time = 0;
pub(crate) const AFTER: Time = Time::MAX;

/// In place of a partition-local op index: the initial value's write.
pub(crate) const INIT: u32 = u32::MAX - 1;
/// No op.
pub(crate) const NONE: u32 = u32::MAX;

fn invoked(op: &PartOp) -> Time {
    op.invoke as Time + 1
}

fn completed(op: &PartOp) -> Time {
    op.span().ret.map_or(AFTER, |ret| ret as Time + 1)
}

/// A time and the op (partition-local, or [`INIT`]) whose event it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Event {
    pub time: Time,
    pub op: u32,
}

/// One cluster's stretch of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Zone {
    /// The value's id in the partition's model.
    pub value: u32,
    /// The cluster's earliest completion and latest invocation.
    pub completion: Event,
    pub invocation: Event,
}

impl Zone {
    /// Forward: some op of the cluster completed before another was invoked.
    pub(crate) fn forward(&self) -> bool {
        self.completion.time < self.invocation.time
    }

    /// The zone as an interval, earlier end first.
    pub(crate) fn bounds(&self) -> (Time, Time) {
        let (a, b) = (self.completion.time, self.invocation.time);
        (a.min(b), a.max(b))
    }
}

/// What a partition's clusters come to.
#[derive(Debug)]
pub(crate) enum Clusters {
    Zones(Vec<Zone>),
    /// A read of a value no (successful or indeterminate) write wrote.
    Unwritten {
        read: u32,
    },
    /// A read that completed before the write of its value was invoked.
    ReadBeforeWrite {
        read: u32,
        write: u32,
    },
}

/// Per value: its writer and how many reads returned it.
struct Tally {
    /// The op that wrote each value ([`INIT`] for the initial value, [`NONE`] if none).
    writer: Vec<u32>,
    writes: Vec<u32>,
    reads: Vec<u32>,
}

impl Tally {
    fn wrote(&mut self, value: u32, writer: u32) {
        let slot = value as usize;
        self.writer[slot] = writer;
        self.writes[slot] = self.writes[slot].saturating_add(1);
    }
}

fn tally(model: &RegisterModel) -> Result<Tally, NotEligible> {
    if model.etcd {
        return Err(NotEligible::Model);
    }
    let values = model.values.len();
    let mut tally = Tally {
        writer: vec![NONE; values],
        writes: vec![0; values],
        reads: vec![0; values],
    };
    tally.wrote(model.init, INIT);
    for (op, input) in model.ops.iter().enumerate() {
        match *input {
            RegisterOp::Write(value) => tally.wrote(value, op as u32),
            RegisterOp::Read(value) => tally.reads[value as usize] += 1,
            RegisterOp::Cas { .. }
            | RegisterOp::CasFailed { .. }
            | RegisterOp::CasUnknown { .. } => return Err(NotEligible::Cas),
        }
    }
    let repeated = (0..values).find(|&v| tally.reads[v] > 0 && tally.writes[v] > 1);
    if let Some(value) = repeated {
        return Err(NotEligible::RepeatedValue {
            value: model.values.get(value as u32).to_string(),
            writes: tally.writes[value],
        });
    }
    Ok(tally)
}

/// The partition's clusters and their zones, or the first read (in invocation order)
/// that no write explains. Linear in the partition.
pub(crate) fn clusters(model: &RegisterModel, ops: &[PartOp]) -> Result<Clusters, NotEligible> {
    let tally = tally(model)?;
    let time_of = |op: u32, at: fn(&PartOp) -> Time, init: Time| match op {
        INIT => init,
        op => ops.get(op as usize).map_or(init, at),
    };
    for (read, input) in model.ops.iter().enumerate() {
        let RegisterOp::Read(value) = *input else {
            continue;
        };
        let (read, write) = (read as u32, tally.writer[value as usize]);
        if write == NONE {
            return Ok(Clusters::Unwritten { read });
        }
        if time_of(read, completed, AFTER) < time_of(write, invoked, BEFORE) {
            return Ok(Clusters::ReadBeforeWrite { read, write });
        }
    }

    // Per value read at least once: its cluster's zone, widened op by op.
    let mut zone_of: Vec<Option<Zone>> = vec![None; tally.reads.len()];
    let mut zones = Vec::new();
    let mut widen = |value: u32, op: u32, completion: Time, invocation: Time| {
        let zone = zone_of[value as usize].get_or_insert(Zone {
            value,
            completion: Event {
                time: completion,
                op,
            },
            invocation: Event {
                time: invocation,
                op,
            },
        });
        if completion < zone.completion.time {
            zone.completion = Event {
                time: completion,
                op,
            };
        }
        if invocation > zone.invocation.time {
            zone.invocation = Event {
                time: invocation,
                op,
            };
        }
    };
    if tally.reads[model.init as usize] > 0 {
        widen(model.init, INIT, BEFORE, BEFORE);
    }
    for (index, (input, op)) in model.ops.iter().zip(ops).enumerate() {
        let index = index as u32;
        match *input {
            RegisterOp::Read(value) => widen(value, index, completed(op), invoked(op)),
            RegisterOp::Write(value) if tally.reads[value as usize] > 0 => {
                widen(value, index, completed(op), invoked(op))
            }
            // A write nobody read is a cluster of its own, which may take effect anywhere
            // in its interval; one open to the end can take effect after everything.
            RegisterOp::Write(value) if completed(op) != AFTER => zones.push(Zone {
                value,
                completion: Event {
                    time: completed(op),
                    op: index,
                },
                invocation: Event {
                    time: invoked(op),
                    op: index,
                },
            }),
            _ => {}
        }
    }
    zones.extend(zone_of.into_iter().flatten());
    Ok(Clusters::Zones(zones))
}
