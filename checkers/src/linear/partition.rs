//! From a paired history to independent partitions, each with its model's compact inputs.
//!
//! Linearizability is compositional (P-compositionality): a history of independent objects
//! is linearizable exactly when each object's sub-history is. So keyed histories split by
//! key, and multi-register histories into connected components of the keys that
//! transactions touch together. Ops whose outcome cannot constrain anything (failed ops,
//! reads with an unknown result) are left out here rather than made always-legal in the
//! search, so they cost nothing there.

use super::models::{KvModel, KvOp, Micro, MultiModel, RegisterModel, RegisterOp, Strings, Values};
use super::wgl::Span;
use super::{LinearError, ModelKind};
use history::{History, Op, Operation, Outcome};
use serde_json::Value;
use std::collections::HashMap;

static NULL_VALUE: Value = Value::Null;

/// One op of a partition: where it is in the history and how it ended.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PartOp {
    pub invoke: usize,
    pub completion: Option<usize>,
    pub outcome: Outcome,
}

impl PartOp {
    fn of(operation: &Operation) -> PartOp {
        PartOp {
            invoke: operation.invoke,
            completion: operation.completion,
            outcome: operation.outcome,
        }
    }

    /// An `info` op may take effect at any time after its invocation, so it stays open
    /// to the end; `ok` and (etcd) `fail` ops were decided at their completion.
    pub(crate) fn span(&self) -> Span {
        Span {
            call: self.invoke,
            ret: match self.outcome {
                Outcome::Info => None,
                Outcome::Ok | Outcome::Fail => self.completion,
            },
        }
    }
}

#[derive(Debug)]
pub(crate) enum PartitionModel {
    Register(RegisterModel),
    Kv(KvModel),
    Multi(MultiModel),
}

#[derive(Debug)]
pub(crate) struct Partition {
    /// The key (keyed histories) or the component's keys joined by `,` (multi-register).
    pub key: Option<String>,
    pub ops: Vec<PartOp>,
    pub model: PartitionModel,
}

/// Maps every client operation to its model's input and groups them into partitions, in
/// order of first appearance.
pub(crate) fn prepare(
    history: &History,
    operations: &[Operation],
    model: ModelKind,
    init: Option<&Value>,
) -> Result<Vec<Partition>, LinearError> {
    let clients = operations.iter().filter(|op| op.process.is_client());
    match model {
        ModelKind::Register | ModelKind::CasRegister | ModelKind::Etcd => {
            prepare_registers(history, clients, model, init)
        }
        ModelKind::Kv => prepare_kv(history, clients, init),
        ModelKind::MultiRegister => prepare_multi(history, clients, init),
    }
}

fn op_error(history: &History, position: usize, message: String) -> LinearError {
    LinearError::Op {
        location: history.locate(position),
        message,
    }
}

fn describe_json(value: &Value) -> String {
    let text = value.to_string();
    if text.len() > 80 {
        let cut = (0..=77)
            .rev()
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        format!("{}...", &text[..cut])
    } else {
        text
    }
}

/// Groups items by key, keeping keys in order of first appearance.
struct Groups<T> {
    index: HashMap<Option<String>, usize>,
    groups: Vec<(Option<String>, Vec<PartOp>, Vec<T>)>,
}

impl<T> Groups<T> {
    fn new() -> Groups<T> {
        Groups {
            index: HashMap::new(),
            groups: Vec::new(),
        }
    }

    fn push(&mut self, key: Option<String>, op: PartOp, item: T) {
        let slot = match self.index.get(&key) {
            Some(&slot) => slot,
            None => {
                self.index.insert(key.clone(), self.groups.len());
                self.groups.push((key, Vec::new(), Vec::new()));
                self.groups.len() - 1
            }
        };
        let group = &mut self.groups[slot];
        group.1.push(op);
        group.2.push(item);
    }
}

/// A keyed op's key and argument (`{"key": K, "value": V}`), or an unkeyed op's value.
fn split_key(op: &Op) -> (Option<String>, &Value) {
    match &op.value {
        Value::Object(map) if map.contains_key("key") => {
            (op.key(), map.get("value").unwrap_or(&NULL_VALUE))
        }
        value => (None, value),
    }
}

enum RegisterInput<'h> {
    Read(&'h Value),
    Write(&'h Value),
    Cas(&'h Value, &'h Value),
    CasFailed(&'h Value),
    CasUnknown(&'h Value, &'h Value),
}

fn parse_register<'h>(
    history: &'h History,
    operation: &Operation,
    model: ModelKind,
) -> Result<Option<(Option<String>, RegisterInput<'h>)>, LinearError> {
    let invoke = &history.ops[operation.invoke];
    let (key, argument) = split_key(invoke);
    let input = match invoke.f.as_str() {
        "read" => {
            let read = match (operation.outcome, operation.completion) {
                (Outcome::Ok, Some(completion)) => split_key(&history.ops[completion]).1,
                // An info or (etcd: timed-out) failed read has no effect and constrains
                // nothing.
                _ => return Ok(None),
            };
            // Knossos reads nil as "unknown", always legal; for etcd nil is the absent key.
            if read.is_null() && model != ModelKind::Etcd {
                return Ok(None);
            }
            RegisterInput::Read(read)
        }
        "write" => match operation.outcome {
            Outcome::Fail => return Ok(None),
            Outcome::Ok | Outcome::Info => RegisterInput::Write(argument),
        },
        "cas" if model != ModelKind::Register => {
            let (old, new) = match argument {
                Value::Array(pair) if pair.len() == 2 => (&pair[0], &pair[1]),
                other => {
                    return Err(op_error(
                        history,
                        operation.invoke,
                        format!(
                            "cas takes [old, new], not {} ({} model)",
                            describe_json(other),
                            model
                        ),
                    ))
                }
            };
            match operation.outcome {
                Outcome::Ok => RegisterInput::Cas(old, new),
                Outcome::Info => RegisterInput::CasUnknown(old, new),
                // Porcupine's etcd model: the compare was seen to fail. Knossos drops
                // failed ops: they did not happen.
                Outcome::Fail if model == ModelKind::Etcd => RegisterInput::CasFailed(old),
                Outcome::Fail => return Ok(None),
            }
        }
        other => {
            let expected = if model == ModelKind::Register {
                "read or write"
            } else {
                "read, write or cas"
            };
            return Err(op_error(
                history,
                operation.invoke,
                format!("f {other:?} is not an op of the {model} model (expected {expected})"),
            ));
        }
    };
    Ok(Some((key, input)))
}

fn prepare_registers<'h>(
    history: &'h History,
    operations: impl Iterator<Item = &'h Operation>,
    model: ModelKind,
    init: Option<&Value>,
) -> Result<Vec<Partition>, LinearError> {
    let mut groups = Groups::new();
    for operation in operations {
        if let Some((key, input)) = parse_register(history, operation, model)? {
            groups.push(key, PartOp::of(operation), input);
        }
    }
    let init = init.unwrap_or(&NULL_VALUE);
    Ok(groups
        .groups
        .into_iter()
        .map(|(key, ops, inputs)| {
            let mut values = Values::new();
            let init = values.intern(init);
            let inputs = inputs
                .into_iter()
                .map(|input| match input {
                    RegisterInput::Read(v) => RegisterOp::Read(values.intern(v)),
                    RegisterInput::Write(v) => RegisterOp::Write(values.intern(v)),
                    RegisterInput::Cas(old, new) => RegisterOp::Cas {
                        old: values.intern(old),
                        new: values.intern(new),
                    },
                    RegisterInput::CasFailed(old) => RegisterOp::CasFailed {
                        old: values.intern(old),
                    },
                    RegisterInput::CasUnknown(old, new) => RegisterOp::CasUnknown {
                        old: values.intern(old),
                        new: values.intern(new),
                    },
                })
                .collect();
            Partition {
                key,
                ops,
                model: PartitionModel::Register(RegisterModel {
                    etcd: model == ModelKind::Etcd,
                    init,
                    ops: inputs,
                    values,
                }),
            }
        })
        .collect())
}

enum KvInput<'h> {
    Get(&'h str),
    Put(&'h str),
    Append(&'h str),
}

fn kv_string<'h>(
    history: &History,
    position: usize,
    value: &'h Value,
) -> Result<&'h str, LinearError> {
    value.as_str().ok_or_else(|| {
        op_error(
            history,
            position,
            format!("kv values are strings, not {}", describe_json(value)),
        )
    })
}

fn parse_kv<'h>(
    history: &'h History,
    operation: &Operation,
) -> Result<Option<(String, KvInput<'h>)>, LinearError> {
    let invoke = &history.ops[operation.invoke];
    let Some(key) = invoke.key() else {
        return Err(op_error(
            history,
            operation.invoke,
            format!(
                "kv ops carry {{\"key\": K, \"value\": V}}, not {}",
                describe_json(&invoke.value)
            ),
        ));
    };
    let (_, argument) = split_key(invoke);
    let input = match invoke.f.as_str() {
        "get" => match (operation.outcome, operation.completion) {
            (Outcome::Ok, Some(completion)) => {
                let read = split_key(&history.ops[completion]).1;
                if read.is_null() {
                    return Ok(None);
                }
                KvInput::Get(kv_string(history, completion, read)?)
            }
            _ => return Ok(None),
        },
        "put" | "append" => {
            let text = kv_string(history, operation.invoke, argument)?;
            if operation.outcome == Outcome::Fail {
                return Ok(None);
            }
            if invoke.f == "put" {
                KvInput::Put(text)
            } else {
                KvInput::Append(text)
            }
        }
        other => {
            return Err(op_error(
                history,
                operation.invoke,
                format!("f {other:?} is not an op of the kv model (expected get, put or append)"),
            ))
        }
    };
    Ok(Some((key, input)))
}

/// A key's initial string: `init` is one string for every key, or an object of strings
/// by key (missing keys start empty).
fn kv_init<'a>(init: Option<&'a Value>, key: &str) -> Result<&'a str, LinearError> {
    let value = match init {
        None => return Ok(""),
        Some(Value::Object(map)) => match map.get(key) {
            None => return Ok(""),
            Some(value) => value,
        },
        Some(value) => value,
    };
    value.as_str().ok_or_else(|| LinearError::Init {
        model: ModelKind::Kv,
        message: format!(
            "a key's initial value must be a string, not {}",
            describe_json(value)
        ),
    })
}

fn prepare_kv<'h>(
    history: &'h History,
    operations: impl Iterator<Item = &'h Operation>,
    init: Option<&Value>,
) -> Result<Vec<Partition>, LinearError> {
    let mut groups = Groups::new();
    for operation in operations {
        if let Some((key, input)) = parse_kv(history, operation)? {
            groups.push(Some(key), PartOp::of(operation), input);
        }
    }
    groups
        .groups
        .into_iter()
        .map(|(key, ops, inputs)| {
            let mut strings = Strings::default();
            let init = strings.intern(kv_init(init, key.as_deref().unwrap_or(""))?);
            let inputs = inputs
                .into_iter()
                .map(|input| match input {
                    KvInput::Get(s) => KvOp::Get(strings.intern(s)),
                    KvInput::Put(s) => KvOp::Put(strings.intern(s)),
                    KvInput::Append(s) => KvOp::Append(strings.intern(s)),
                })
                .collect();
            Ok(Partition {
                key,
                ops,
                model: PartitionModel::Kv(KvModel::new(init, inputs, strings)),
            })
        })
        .collect()
}

struct MicroInput<'h> {
    write: bool,
    key: String,
    value: &'h Value,
}

fn multi_key(key: &Value) -> String {
    match key {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Reads a Knossos transaction `[[f, k, v], ...]` with f one of r, read, w, write.
fn parse_micros<'h>(
    history: &History,
    position: usize,
    value: &'h Value,
) -> Result<Vec<MicroInput<'h>>, LinearError> {
    let bad = |what: String| {
        op_error(
            history,
            position,
            format!("multi-register txn {what}, in {}", describe_json(value)),
        )
    };
    let Value::Array(micros) = value else {
        return Err(bad("must be an array of [f, k, v]".to_string()));
    };
    micros
        .iter()
        .map(|micro| {
            let (f, key, value) = match micro.as_array().map(Vec::as_slice) {
                Some([f, key, value]) => (f, key, value),
                Some([f, key]) => (f, key, &NULL_VALUE),
                _ => {
                    return Err(bad(format!(
                        "micro-op {} is not [f, k, v]",
                        describe_json(micro)
                    )))
                }
            };
            let write = match f.as_str() {
                Some("r" | "read") => false,
                Some("w" | "write") => true,
                _ => {
                    return Err(bad(format!(
                        "micro-op f {} is not r, read, w or write",
                        describe_json(f)
                    )))
                }
            };
            Ok(MicroInput {
                write,
                key: multi_key(key),
                value,
            })
        })
        .collect()
}

fn parse_txn<'h>(
    history: &'h History,
    operation: &Operation,
) -> Result<Option<Vec<MicroInput<'h>>>, LinearError> {
    let invoke = &history.ops[operation.invoke];
    if invoke.f != "txn" {
        return Err(op_error(
            history,
            operation.invoke,
            format!(
                "f {:?} is not an op of the multi-register model (expected txn)",
                invoke.f
            ),
        ));
    }
    let mut micros = parse_micros(history, operation.invoke, &invoke.value)?;
    match (operation.outcome, operation.completion) {
        (Outcome::Fail, _) => return Ok(None),
        (Outcome::Ok, Some(completion)) => {
            // The completion carries what the reads returned.
            let done = &history.ops[completion];
            if !done.value.is_null() {
                let completed = parse_micros(history, completion, &done.value)?;
                let matches = completed.len() == micros.len()
                    && completed
                        .iter()
                        .zip(&micros)
                        .all(|(a, b)| a.write == b.write && a.key == b.key);
                if !matches {
                    return Err(op_error(
                        history,
                        completion,
                        "txn completion's micro-ops differ from its invocation's".to_string(),
                    ));
                }
                micros = completed;
            }
        }
        // Reads of a txn that may not have happened returned nothing we know.
        _ => {
            for micro in micros.iter_mut().filter(|micro| !micro.write) {
                micro.value = &NULL_VALUE;
            }
        }
    }
    // A txn of only unknown reads (or none) cannot constrain anything.
    if micros
        .iter()
        .all(|micro| !micro.write && micro.value.is_null())
    {
        return Ok(None);
    }
    Ok(Some(micros))
}

/// Union-find over key ids, for the components of keys touched by the same txns.
struct Components {
    parent: Vec<usize>,
}

impl Components {
    fn find(&mut self, mut key: usize) -> usize {
        while self.parent[key] != key {
            self.parent[key] = self.parent[self.parent[key]];
            key = self.parent[key];
        }
        key
    }

    fn union(&mut self, a: usize, b: usize) {
        let (a, b) = (self.find(a), self.find(b));
        if a != b {
            self.parent[a.max(b)] = a.min(b);
        }
    }
}

fn prepare_multi<'h>(
    history: &'h History,
    operations: impl Iterator<Item = &'h Operation>,
    init: Option<&Value>,
) -> Result<Vec<Partition>, LinearError> {
    let init = match init {
        None | Some(Value::Null) => None,
        Some(Value::Object(map)) => Some(map),
        Some(other) => {
            return Err(LinearError::Init {
                model: ModelKind::MultiRegister,
                message: format!(
                    "the initial value is an object of values by key, not {}",
                    describe_json(other)
                ),
            })
        }
    };
    let mut key_ids: HashMap<String, usize> = HashMap::new();
    let mut key_names: Vec<String> = Vec::new();
    let mut txns: Vec<(PartOp, Vec<MicroInput<'h>>)> = Vec::new();
    for operation in operations {
        if let Some(micros) = parse_txn(history, operation)? {
            for micro in &micros {
                if !key_ids.contains_key(&micro.key) {
                    key_ids.insert(micro.key.clone(), key_names.len());
                    key_names.push(micro.key.clone());
                }
            }
            txns.push((PartOp::of(operation), micros));
        }
    }
    let mut components = Components {
        parent: (0..key_names.len()).collect(),
    };
    for (_, micros) in &txns {
        let mut first = None;
        for micro in micros {
            let id = key_ids[&micro.key];
            match first {
                None => first = Some(id),
                Some(first) => components.union(first, id),
            }
        }
    }

    // Per component root: its partition; per key: its slot within its component.
    let mut partition_of_root: HashMap<usize, usize> = HashMap::new();
    let mut slot_of_key: Vec<u32> = vec![u32::MAX; key_names.len()];
    let mut builders: Vec<ComponentBuilder> = Vec::new();
    for (op, micros) in txns {
        let root = components.find(key_ids[&micros[0].key]);
        let partition = *partition_of_root.entry(root).or_insert_with(|| {
            builders.push(ComponentBuilder::default());
            builders.len() - 1
        });
        let builder = &mut builders[partition];
        for micro in micros {
            let key = key_ids[&micro.key];
            // Every key belongs to one component, so its slot is the same in every txn.
            if slot_of_key[key] == u32::MAX {
                slot_of_key[key] = builder.keys.len() as u32;
                builder.keys.push(micro.key);
            }
            builder.micros.push(Micro {
                write: micro.write,
                slot: slot_of_key[key],
                value: builder.values.intern(micro.value),
            });
        }
        builder.bounds.push(builder.micros.len());
        builder.ops.push(op);
    }
    Ok(builders
        .into_iter()
        .map(|mut builder| {
            let start: Vec<u32> = builder
                .keys
                .iter()
                .map(|key| match init.and_then(|map| map.get(key)) {
                    Some(value) => builder.values.intern(value),
                    None => builder.values.intern(&NULL_VALUE),
                })
                .collect();
            Partition {
                key: Some(builder.keys.join(",")),
                ops: builder.ops,
                model: PartitionModel::Multi(MultiModel::new(
                    builder.keys,
                    builder.values,
                    start,
                    builder.micros,
                    builder.bounds,
                )),
            }
        })
        .collect())
}

/// The txns of one component of keys, as they are collected.
struct ComponentBuilder {
    keys: Vec<String>,
    ops: Vec<PartOp>,
    micros: Vec<Micro>,
    /// Txn `i`'s micro-ops are `micros[bounds[i]..bounds[i + 1]]`.
    bounds: Vec<usize>,
    values: Values,
}

impl Default for ComponentBuilder {
    fn default() -> ComponentBuilder {
        ComponentBuilder {
            keys: Vec::new(),
            ops: Vec::new(),
            micros: Vec::new(),
            bounds: vec![0],
            values: Values::new(),
        }
    }
}
