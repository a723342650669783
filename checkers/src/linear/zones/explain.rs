//! A zone check's finding in the history's terms: op indexes, values as JSON, and a
//! sentence a person can follow.

use super::super::describe_op;
use super::super::models::{RegisterModel, RegisterOp};
use super::super::partition::PartOp;
use super::clusters::{Zone, INIT};
use super::sweep::Clash;
use super::Finding;
use history::{History, OpType};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Reads of a cluster listed in the report at most (those bounding its zone first).
pub const MAX_READS_SHOWN: usize = 8;

/// Why a register key is not linearizable, as the zone check found it. Op numbers are
/// `Op.index` of invocations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum ZoneConflict {
    /// A read returned a value that no successful or indeterminate write wrote.
    UnwrittenRead {
        read: u64,
        value: Value,
        /// A write of that value that failed (so did not happen), if there is one.
        failed_write: Option<u64>,
    },
    /// A read completed before the write of its value was invoked.
    ReadBeforeWrite { read: u64, write: u64, value: Value },
    /// Two values each had to hold the register for a stretch of time, and the stretches
    /// overlap; `first` starts first.
    OverlappingZones {
        first: ClusterZone,
        second: ClusterZone,
    },
    /// A value had to take effect at a moment of its zone, but another value had to hold
    /// the register throughout that zone.
    ZoneInsideZone {
        backward: ClusterZone,
        forward: ClusterZone,
    },
}

/// A write and the reads that returned its value, with its zone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterZone {
    pub value: Value,
    /// `None`: the initial value, written before the history.
    pub write: Option<u64>,
    /// At most [`MAX_READS_SHOWN`] of the reads, those bounding the zone first.
    pub reads: Vec<u64>,
    pub reads_total: usize,
    /// The op that completed first (`None`: the initial value's write).
    pub earliest_completion: Option<u64>,
    /// The op invoked last (`None`: the initial value's write).
    pub latest_invocation: Option<u64>,
    /// Forward: the cluster must hold the register from `earliest_completion` until
    /// `latest_invocation`; backward: it may take effect at one moment between
    /// `latest_invocation` and `earliest_completion`.
    pub forward: bool,
}

/// What the report needs of a finding.
pub(crate) struct Explained {
    pub conflict: ZoneConflict,
    /// The op the explanation is about first (it orders failures across keys).
    pub unplaced: u64,
    pub description: String,
}

/// The ops of one partition, to name them.
pub(crate) struct Naming<'a> {
    pub history: &'a History,
    pub key: Option<&'a str>,
    pub ops: &'a [PartOp],
    pub model: &'a RegisterModel,
}

impl Naming<'_> {
    fn index(&self, local: u32) -> Option<u64> {
        let op = self.ops.get(local as usize)?;
        Some(self.history.ops.get(op.invoke)?.index)
    }

    fn value(&self, id: u32) -> Value {
        self.model.values.get(id).clone()
    }

    /// "op 12 (process 3 read -> 4)".
    fn name(&self, local: u32) -> String {
        match self.ops.get(local as usize) {
            Some(op) => format!(
                "op {} ({})",
                self.index(local).unwrap_or_default(),
                describe_op(self.history, op)
            ),
            None => "the initial value".to_string(),
        }
    }

    /// The write of the zone's cluster: one of the ops bounding it if it is a write (a
    /// write nobody read bounds its zone alone), else the value's only write; `None` for
    /// the initial value.
    fn writer(&self, zone: &Zone) -> Option<u32> {
        if zone.completion.op == INIT {
            return None;
        }
        let wrote =
            |op: u32| self.model.ops.get(op as usize) == Some(&RegisterOp::Write(zone.value));
        [zone.completion.op, zone.invocation.op]
            .into_iter()
            .find(|&op| wrote(op))
            .or_else(|| (0..self.model.ops.len() as u32).find(|&op| wrote(op)))
    }

    fn cluster(&self, zone: &Zone) -> ClusterZone {
        let bounding = [zone.completion.op, zone.invocation.op];
        let reads: Vec<u32> = (0..self.model.ops.len() as u32)
            .filter(|&op| self.model.ops[op as usize] == RegisterOp::Read(zone.value))
            .collect();
        let mut shown: Vec<u64> = bounding
            .iter()
            .filter(|op| reads.contains(op))
            .chain(reads.iter().filter(|op| !bounding.contains(op)))
            .filter_map(|&op| self.index(op))
            .take(MAX_READS_SHOWN)
            .collect();
        shown.dedup();
        ClusterZone {
            value: self.value(zone.value),
            write: self.writer(zone).and_then(|write| self.index(write)),
            reads: shown,
            reads_total: reads.len(),
            earliest_completion: self.index(zone.completion.op),
            latest_invocation: self.index(zone.invocation.op),
            forward: zone.forward(),
        }
    }

    /// "from the completion of op 3 (...) until the invocation of op 9 (...)".
    fn stretch(&self, zone: &Zone) -> String {
        let completion = match zone.completion.op {
            INIT => "the start of the history".to_string(),
            op => format!("the completion of {}", self.name(op)),
        };
        let invocation = format!("the invocation of {}", self.name(zone.invocation.op));
        if zone.completion.op == zone.invocation.op {
            return "between its invocation and its completion".to_string();
        }
        if zone.forward() {
            format!("from {completion} until {invocation}")
        } else {
            format!("between {invocation} and {completion}")
        }
    }

    /// The write of `value` on this key that failed, if any: its invocation's index.
    fn failed_write(&self, value: &Value) -> Option<u64> {
        let ops = &self.history.ops;
        let failed = ops.iter().position(|op| {
            op.kind == OpType::Fail
                && op.f == "write"
                && op.process.is_client()
                && op.key_text().as_deref() == self.key
                && op.payload() == value
        })?;
        let process = ops[failed].process;
        ops[..failed]
            .iter()
            .rev()
            .find(|op| op.process == process && op.kind == OpType::Invoke)
            .map(|op| op.index)
    }

    pub(crate) fn explain(&self, finding: &Finding) -> Option<Explained> {
        let show = |value: &Value| value.to_string();
        Some(match *finding {
            Finding::Linearizable => return None,
            Finding::Unwritten { read } => {
                let value = match self.model.ops.get(read as usize) {
                    Some(RegisterOp::Read(value)) => self.value(*value),
                    _ => Value::Null,
                };
                let failed_write = self.failed_write(&value);
                let why = match failed_write {
                    Some(write) => {
                        format!(", and the only write of it (op {write}) failed, so did not happen")
                    }
                    None => ", and no write wrote it".to_string(),
                };
                Explained {
                    unplaced: self.index(read).unwrap_or_default(),
                    description: format!("{} returned {}{why}", self.name(read), show(&value)),
                    conflict: ZoneConflict::UnwrittenRead {
                        read: self.index(read).unwrap_or_default(),
                        value,
                        failed_write,
                    },
                }
            }
            Finding::ReadBeforeWrite { read, write } => {
                let value = match self.model.ops.get(write as usize) {
                    Some(RegisterOp::Write(value)) => self.value(*value),
                    _ => Value::Null,
                };
                Explained {
                    unplaced: self.index(read).unwrap_or_default(),
                    description: format!(
                        "{} returned {}, but completed before the only write of it, {}, was invoked",
                        self.name(read),
                        show(&value),
                        self.name(write)
                    ),
                    conflict: ZoneConflict::ReadBeforeWrite {
                        read: self.index(read).unwrap_or_default(),
                        write: self.index(write).unwrap_or_default(),
                        value,
                    },
                }
            }
            Finding::Clash(Clash::Overlap { first, second }) => {
                let (a, b) = (
                    show(&self.value(first.value)),
                    show(&self.value(second.value)),
                );
                Explained {
                    unplaced: self.index(second.completion.op).unwrap_or_default(),
                    description: format!(
                        "{a} had to hold the register {}, and {b} {}; the two stretches \
                         overlap, but the register holds one value at a time and, as every \
                         value is written once, never returns to an overwritten one",
                        self.stretch(&first),
                        self.stretch(&second)
                    ),
                    conflict: ZoneConflict::OverlappingZones {
                        first: self.cluster(&first),
                        second: self.cluster(&second),
                    },
                }
            }
            Finding::Clash(Clash::Inside { backward, forward }) => {
                let cluster = self.cluster(&backward);
                let what = match self.writer(&backward) {
                    Some(write) => format!("the write of {}", self.name(write)),
                    None => "the initial value".to_string(),
                };
                Explained {
                    unplaced: cluster.write.unwrap_or_default(),
                    description: format!(
                        "{what}{} had to take effect {}, but the register had to hold {} \
                         throughout that stretch ({})",
                        match cluster.reads_total {
                            0 => String::new(),
                            1 => " and the read of it".to_string(),
                            n => format!(" and its {n} reads"),
                        },
                        self.stretch(&backward),
                        show(&self.value(forward.value)),
                        self.stretch(&forward)
                    ),
                    conflict: ZoneConflict::ZoneInsideZone {
                        backward: cluster,
                        forward: self.cluster(&forward),
                    },
                }
            }
        })
    }
}
