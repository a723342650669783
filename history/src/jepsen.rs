//! Jepsen EDN histories: the importer (Knossos test data, Jepsen's `history.edn`) and the
//! exporter that lets Knossos or Elle check our histories.
//!
//! A keyed op carries its key at op level in EDN (`:key "k", :value 1`) and as
//! `{"key": "k", "value": 1}` in our model; import and export translate between the two.

use crate::edn::{self, Edn, EdnError, EdnParser};
use crate::error::{HistoryError, Location};
use crate::history::History;
use crate::op::{Op, OpType, Process};
use serde_json::Value;
use std::path::Path;

/// Reads a Jepsen EDN history file.
pub fn read_jepsen_edn(path: &Path) -> Result<History, HistoryError> {
    let text = crate::text::read_text(path)?;
    parse_jepsen_edn(&path.display().to_string(), &text)
}

/// Parses a Jepsen EDN history: one vector (or list) of op maps, or op maps one after
/// another (one per line, as Jepsen writes `history.edn`). Ops may be tagged
/// (`#jepsen.history.Op{...}`). `source` names the text in errors.
pub fn parse_jepsen_edn(source: &str, text: &str) -> Result<History, HistoryError> {
    parse_ops(source, text, KeyRule::Optional)
}

/// Whether every client op must carry a `:key` (Porcupine's kv histories).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyRule {
    Optional,
    RequiredForClients,
}

pub(crate) fn parse_ops(
    source: &str,
    text: &str,
    key_rule: KeyRule,
) -> Result<History, HistoryError> {
    let at = |line: usize| Location {
        source: Some(source.to_string()),
        line,
    };
    let syntax = |e: EdnError| HistoryError::parse(at(e.line), format!("bad EDN: {e}"));
    let mut parser = EdnParser::new(text);
    let in_vector = parser.enter_sequence().map_err(syntax)?;
    let mut ops = Vec::new();
    let mut lines = Vec::new();
    while let Some((value, line)) = parser.next_value().map_err(syntax)? {
        let position = ops.len() as u64;
        let op = op_from_edn(&value, position, key_rule)
            .map_err(|message| HistoryError::parse(at(line), message))?;
        ops.push(op);
        lines.push(line);
    }
    if in_vector {
        if let Some((_, line)) = parser.next_value().map_err(syntax)? {
            return Err(HistoryError::parse(
                at(line),
                "unexpected value after the history's closing bracket",
            ));
        }
    }
    Ok(History::from_source(source, ops, lines))
}

/// Converts one op map; the error is a message, to which the caller adds the line.
fn op_from_edn(value: &Edn, position: u64, key_rule: KeyRule) -> Result<Op, String> {
    let Edn::Map(entries) = value.untagged() else {
        return Err(format!("expected an op map, found {}", describe(value)));
    };
    let mut kind = None;
    let mut process = None;
    let mut f = None;
    let mut op_value = None;
    let mut time = None;
    let mut index = None;
    let mut error = None;
    let mut node = None;
    let mut key = None;
    for (field, field_value) in entries {
        let Edn::Keyword(field) = field.untagged() else {
            continue;
        };
        match field.as_str() {
            "type" => kind = Some(field_value),
            "process" => process = Some(field_value),
            "f" => f = Some(field_value),
            "value" => op_value = Some(field_value),
            "time" => time = Some(field_value),
            "index" => index = Some(field_value),
            "error" => error = Some(field_value),
            "node" => node = Some(field_value),
            "key" => key = Some(field_value),
            _ => {}
        }
    }

    let kind = kind.ok_or("op has no :type")?;
    let kind = kind.as_name().and_then(OpType::parse).ok_or_else(|| {
        format!(
            "unknown op type {}: expected :invoke, :ok, :fail or :info",
            describe(kind)
        )
    })?;
    let process = parse_process(process.ok_or("op has no :process")?)?;
    let f = f.ok_or("op has no :f")?;
    let f = f
        .as_name()
        .ok_or_else(|| {
            format!(
                "bad :f {}: expected a keyword, symbol or string",
                describe(f)
            )
        })?
        .to_string();
    let time = match time {
        None => 0,
        Some(t) => optional_count(t)
            .map_err(|()| format!("bad :time {}: expected a non-negative integer", describe(t)))?
            .unwrap_or(0),
    };
    let index = match index {
        None => position,
        Some(i) => optional_count(i)
            .map_err(|()| {
                format!(
                    "bad :index {}: expected a non-negative integer",
                    describe(i)
                )
            })?
            .unwrap_or(position),
    };
    if key_rule == KeyRule::RequiredForClients && key.is_none() && process.is_client() {
        return Err(format!("client op {} {f} has no :key", kind.as_str()));
    }
    let mut value = op_value.map_or(Value::Null, edn::to_json);
    if let Some(key) = key {
        let mut keyed = serde_json::Map::new();
        keyed.insert("key".to_string(), edn::to_json(key));
        keyed.insert("value".to_string(), value);
        value = Value::Object(keyed);
    }
    let error = error
        .filter(|e| !matches!(e.untagged(), Edn::Nil))
        .map(edn::to_json);
    let node = match node.map(Edn::untagged) {
        None | Some(Edn::Nil) => None,
        Some(named) => Some(
            named
                .as_name()
                .map_or_else(|| named.to_string(), str::to_string),
        ),
    };
    Ok(Op {
        index,
        time,
        process,
        kind,
        f,
        value,
        node,
        error,
    })
}

fn parse_process(process: &Edn) -> Result<Process, String> {
    match process.untagged() {
        Edn::Int(p) => u64::try_from(*p)
            .map(Process::Client)
            .map_err(|_| format!("bad :process {p}: a process id cannot be negative")),
        named if named.as_name() == Some("nemesis") => Ok(Process::Nemesis),
        other => Err(format!(
            "bad :process {}: expected an integer or :nemesis",
            describe(other)
        )),
    }
}

/// A non-negative integer, `None` for `nil`.
fn optional_count(value: &Edn) -> Result<Option<u64>, ()> {
    match value.untagged() {
        Edn::Nil => Ok(None),
        Edn::Int(i) => u64::try_from(*i).map(Some).map_err(|_| ()),
        _ => Err(()),
    }
}

/// A short description of a value for error messages, without printing a whole history.
fn describe(value: &Edn) -> String {
    let text = value.to_string();
    match text.char_indices().nth(60) {
        Some((cut, _)) => format!("{}...", text.get(..cut).unwrap_or_default()),
        None => text,
    }
}

/// Writes a history as Jepsen EDN: a vector with one op map per line, keys `:index :time
/// :type :process :f :value` (and `:node`, `:error` when present). Keyed ops
/// (`{"key": k, "value": v}`) get `:key k` and `:value v`; in `txn` ops the first
/// element of each micro-op becomes a keyword (`[:r "x" 1]`), as Elle expects.
pub fn to_jepsen_edn(history: &History) -> String {
    let mut out = String::with_capacity(history.len() * 96 + 4);
    out.push('[');
    for (i, op) in history.ops.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&op_to_edn(op).to_string());
    }
    out.push_str("]\n");
    out
}

fn op_to_edn(op: &Op) -> Edn {
    let keyword = |name: &str| Edn::Keyword(name.to_string());
    let count = |n: u64| i64::try_from(n).map_or(Edn::Float(n as f64), Edn::Int);
    let process = match op.process {
        Process::Client(p) => count(p),
        Process::Nemesis => keyword("nemesis"),
    };
    let mut entries = vec![
        (keyword("index"), count(op.index)),
        (keyword("time"), count(op.time)),
        (keyword("type"), keyword(op.kind.as_str())),
        (keyword("process"), process),
        (keyword("f"), edn::name_to_edn(&op.f)),
    ];
    let (key, value) = split_key(&op.value);
    if let Some(key) = key {
        entries.push((keyword("key"), edn::from_json(key)));
    }
    let value = if op.f == "txn" {
        txn_to_edn(value)
    } else {
        edn::from_json(value)
    };
    entries.push((keyword("value"), value));
    if let Some(node) = &op.node {
        entries.push((keyword("node"), Edn::Str(node.clone())));
    }
    if let Some(error) = &op.error {
        entries.push((keyword("error"), edn::from_json(error)));
    }
    Edn::Map(entries)
}

/// `{"key": k, "value": v}` (exactly those two fields) splits into its key and value.
fn split_key(value: &Value) -> (Option<&Value>, &Value) {
    match value {
        Value::Object(fields) if fields.len() == 2 => {
            match (fields.get("key"), fields.get("value")) {
                (Some(key), Some(inner)) => (Some(key), inner),
                _ => (None, value),
            }
        }
        _ => (None, value),
    }
}

/// A transaction `[["r", "x", 1], ...]` with each micro-op's function as a keyword.
fn txn_to_edn(value: &Value) -> Edn {
    let Value::Array(micro_ops) = value else {
        return edn::from_json(value);
    };
    Edn::Vector(
        micro_ops
            .iter()
            .map(|micro_op| match micro_op {
                Value::Array(parts) => Edn::Vector(
                    parts
                        .iter()
                        .enumerate()
                        .map(|(i, part)| match part {
                            Value::String(name) if i == 0 => edn::name_to_edn(name),
                            other => edn::from_json(other),
                        })
                        .collect(),
                ),
                other => edn::from_json(other),
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn txn_micro_ops_export_with_keyword_functions() {
        let op = Op::new(
            0,
            Process::Client(0),
            OpType::Invoke,
            "txn",
            json!([["r", "x", null], ["append", 3, 1]]),
        );
        let text = to_jepsen_edn(&History::from_ops(vec![op]));
        assert!(
            text.contains(":value [[:r \"x\" nil] [:append 3 1]]"),
            "{text}"
        );
    }

    #[test]
    fn only_exact_key_value_objects_split() {
        let both = json!({"key": "k", "value": 1});
        assert_eq!(split_key(&both), (Some(&json!("k")), &json!(1)));
        let more = json!({"key": "k", "value": 1, "offset": 0});
        assert_eq!(split_key(&more), (None, &more));
    }
}
