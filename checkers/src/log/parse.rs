//! Turns a history's append and read operations into compact typed records, once, so the
//! analysis never touches `serde_json::Value` again.

use history::{History, HistoryError, Operation, Outcome, Process};
use serde_json::Value;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A multiplicative hasher for integer and short string keys: SipHash's DoS resistance buys
/// nothing for a checker and costs a large share of its time.
#[derive(Default, Clone, Copy)]
pub(crate) struct FastHasher(u64);

const MULTIPLIER: u64 = 0x517c_c1b7_2722_0a95;

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(MULTIPLIER);
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// One `append` operation.
#[derive(Debug, Clone)]
pub(crate) struct Append {
    pub key: u32,
    pub value: i64,
    pub invoke: usize,
    pub completion: Option<usize>,
    pub outcome: Outcome,
    /// The offset its `ok` reported.
    pub offset: Option<i64>,
}

/// One `read` operation.
#[derive(Debug, Clone)]
pub(crate) struct Read {
    pub key: u32,
    pub process: u64,
    pub invoke: usize,
    pub completion: Option<usize>,
    pub outcome: Outcome,
    pub offset: i64,
    pub max: Option<u64>,
    /// The broker said a byte limit cut the reply short (`"truncated": true`).
    pub truncated: bool,
    pub linearizable: bool,
    pub marked_final: bool,
    pub high_watermark: Option<i64>,
    pub log_start: Option<i64>,
    /// Its records are `Parsed::records[records_start..records_start + records_len]`.
    pub records_start: usize,
    pub records_len: usize,
}

impl Read {
    pub fn is_ok(&self) -> bool {
        self.outcome == Outcome::Ok
    }

    /// May have returned fewer records than the log held below its high watermark
    /// because of a limit: a byte limit the reply says cut it, its own `max`, or, without
    /// one, the broker's default cap (a non-empty read that stopped short of its high
    /// watermark).
    pub fn limited(&self) -> bool {
        if self.truncated {
            return true;
        }
        match self.max {
            Some(max) => self.records_len as u64 >= max,
            None => {
                self.records_len > 0
                    && self
                        .high_watermark
                        .is_some_and(|hw| self.offset.saturating_add(self.records_len as i64) < hw)
            }
        }
    }
}

/// The typed history: appends and reads in invocation order, records in one arena.
#[derive(Debug, Default)]
pub(crate) struct Parsed {
    pub keys: Vec<String>,
    pub appends: Vec<Append>,
    pub reads: Vec<Read>,
    pub records: Vec<(i64, i64)>,
    pub other_client_ops: usize,
}

impl Parsed {
    pub fn records(&self, read: &Read) -> &[(i64, i64)] {
        &self.records[read.records_start..read.records_start + read.records_len]
    }
}

struct Interner {
    ids: FastMap<String, u32>,
}

impl Interner {
    fn intern(&mut self, keys: &mut Vec<String>, key: &str) -> u32 {
        if let Some(&id) = self.ids.get(key) {
            return id;
        }
        // Key counts are tiny next to u32; saturating keeps this total without a panic path.
        let id = u32::try_from(keys.len()).unwrap_or(u32::MAX);
        keys.push(key.to_string());
        self.ids.insert(key.to_string(), id);
        id
    }
}

fn malformed(history: &History, position: usize, message: String) -> HistoryError {
    HistoryError::invalid(history.locate(position), message)
}

/// The fields of a log op's value that the checker reads, found in one pass over the map
/// (a lookup per field costs several string comparisons each).
#[derive(Default, Clone, Copy)]
struct Fields<'v> {
    key: Option<&'v Value>,
    value: Option<&'v Value>,
    offset: Option<&'v Value>,
    max: Option<&'v Value>,
    truncated: Option<&'v Value>,
    consistency: Option<&'v Value>,
    marked_final: Option<&'v Value>,
    records: Option<&'v Value>,
    high_watermark: Option<&'v Value>,
    log_start_offset: Option<&'v Value>,
    acks: Option<&'v Value>,
}

impl<'v> Fields<'v> {
    fn of(value: &'v Value) -> Fields<'v> {
        let mut fields = Fields::default();
        if let Value::Object(map) = value {
            for (name, v) in map {
                let slot = match name.as_str() {
                    "key" => &mut fields.key,
                    "value" => &mut fields.value,
                    "offset" => &mut fields.offset,
                    "max" => &mut fields.max,
                    "truncated" => &mut fields.truncated,
                    "consistency" => &mut fields.consistency,
                    "final" => &mut fields.marked_final,
                    "records" => &mut fields.records,
                    "high_watermark" => &mut fields.high_watermark,
                    "log_start_offset" => &mut fields.log_start_offset,
                    "acks" => &mut fields.acks,
                    _ => continue,
                };
                *slot = Some(v);
            }
        }
        fields
    }
}

/// Whether an append's invocation asked for less than `acks=all` (`"acks": 1` or `0`,
/// as a number or a string): its acknowledgement promises only the leader's log, which a
/// failover may rewrite, so it is judged like an `info`.
fn weak_acks(acks: Option<&Value>) -> bool {
    match acks {
        Some(Value::Number(n)) => n.as_i64().is_some_and(|n| n == 0 || n == 1),
        Some(Value::String(s)) => s == "0" || s == "1",
        _ => false,
    }
}

fn integer(field: Option<&Value>) -> Option<i64> {
    field.and_then(Value::as_i64)
}

/// Parses every client append and read; errors name the op lacking a required field.
pub(crate) fn parse(history: &History, operations: &[Operation]) -> Result<Parsed, HistoryError> {
    let mut parsed = Parsed::default();
    let mut interner = Interner {
        ids: FastMap::default(),
    };
    let mut key_text = String::new();
    for operation in operations {
        let Process::Client(process) = operation.process else {
            continue;
        };
        let invocation = &history.ops[operation.invoke];
        let is_append = match invocation.f.as_str() {
            "append" => true,
            "read" => false,
            _ => {
                parsed.other_client_ops += 1;
                continue;
            }
        };
        let invoked = Fields::of(&invocation.value);
        let key = match invoked.key {
            Some(Value::String(s)) => s.as_str(),
            Some(Value::Number(n)) => {
                key_text.clear();
                key_text.push_str(&n.to_string());
                key_text.as_str()
            }
            _ => {
                return Err(malformed(
                    history,
                    operation.invoke,
                    format!(
                        "{} invocation has no \"key\" (expected {{\"key\": \"t/0\", ...}})",
                        invocation.f
                    ),
                ))
            }
        };
        let key = interner.intern(&mut parsed.keys, key);
        let ok_value = match (operation.outcome, operation.completion) {
            (Outcome::Ok, Some(position)) => {
                Some((position, Fields::of(&history.ops[position].value)))
            }
            _ => None,
        };
        if is_append {
            let value = integer(invoked.value).ok_or_else(|| {
                malformed(
                    history,
                    operation.invoke,
                    "append invocation has no integer \"value\"".to_string(),
                )
            })?;
            let mut outcome = operation.outcome;
            if weak_acks(invoked.acks) && outcome == Outcome::Ok {
                // acks=0/1: the offset is only the leader's promise; judged as an info
                // append (lost if never seen, acked once a read shows it).
                outcome = Outcome::Info;
            }
            let offset = match ok_value.filter(|_| outcome == Outcome::Ok) {
                Some((position, completed)) => match completed.offset {
                    // An ok without an offset is what acks=0 gets: the broker promised
                    // nothing, so it may or may not have happened.
                    None | Some(Value::Null) => {
                        outcome = Outcome::Info;
                        None
                    }
                    Some(raw) => Some(integer(Some(raw)).ok_or_else(|| {
                        malformed(
                            history,
                            position,
                            format!("append ok of value {value} has no integer \"offset\""),
                        )
                    })?),
                },
                None => None,
            };
            parsed.appends.push(Append {
                key,
                value,
                invoke: operation.invoke,
                completion: operation.completion,
                outcome,
                offset,
            });
            continue;
        }
        let offset = integer(invoked.offset).ok_or_else(|| {
            malformed(
                history,
                operation.invoke,
                "read invocation has no integer \"offset\"".to_string(),
            )
        })?;
        // Options are read from the invocation, or from the completion if it repeats them.
        let completed = ok_value.map(|(_, fields)| fields).unwrap_or_default();
        let max = invoked.max.or(completed.max).and_then(Value::as_u64);
        let linearizable = invoked
            .consistency
            .or(completed.consistency)
            .and_then(Value::as_str)
            == Some("linearizable");
        let marked_final = invoked
            .marked_final
            .or(completed.marked_final)
            .and_then(Value::as_bool)
            == Some(true);
        let truncated = completed.truncated.and_then(Value::as_bool) == Some(true);
        let records_start = parsed.records.len();
        let (mut high_watermark, mut log_start) = (None, None);
        if let Some((position, completed)) = ok_value {
            let Some(records) = completed.records.and_then(Value::as_array) else {
                return Err(malformed(
                    history,
                    position,
                    "read ok has no \"records\" array".to_string(),
                ));
            };
            parsed.records.reserve(records.len());
            for (i, record) in records.iter().enumerate() {
                let pair = match record.as_array().map(Vec::as_slice) {
                    Some([o, v]) => o.as_i64().zip(v.as_i64()),
                    _ => None,
                };
                let Some(pair) = pair else {
                    return Err(malformed(
                        history,
                        position,
                        format!("read ok record {i} is {record}, not [offset, value] integers"),
                    ));
                };
                parsed.records.push(pair);
            }
            high_watermark = integer(completed.high_watermark);
            log_start = integer(completed.log_start_offset);
        }
        parsed.reads.push(Read {
            key,
            process,
            invoke: operation.invoke,
            completion: operation.completion,
            outcome: operation.outcome,
            offset,
            max,
            truncated,
            linearizable,
            marked_final,
            high_watermark,
            log_start,
            records_start,
            records_len: parsed.records.len() - records_start,
        });
    }
    Ok(parsed)
}
