//! Porcupine's test histories: Jepsen etcd logs and key-value histories.
//!
//! etcd logs are Jepsen's `jepsen.util` log lines, `INFO  jepsen.util - <process>\t
//! :<type>\t:<f>\t<value>` (some files use runs of spaces instead of tabs). A value of
//! `:timed-out` means the client gave up waiting; it becomes `value: null` with
//! `error: "timed-out"`, and the op keeps its written type (`info` for writes and cas,
//! `fail` for reads, whose result is then unknown). kv histories are Jepsen EDN op maps,
//! one per line, each client op with a `:key`.

use crate::edn::{self, Edn};
use crate::error::{HistoryError, Location};
use crate::history::History;
use crate::jepsen::{self, KeyRule};
use crate::op::{Op, OpType, Process};
use serde_json::Value;
use std::path::Path;

/// The logger name that Jepsen's op lines carry.
const LOGGER: &str = "jepsen.util";

/// Reads a Porcupine etcd log (`etcd_*.log`).
pub fn read_etcd_log(path: &Path) -> Result<History, HistoryError> {
    let text = crate::text::read_text(path)?;
    parse_etcd_log(&path.display().to_string(), &text)
}

/// Parses the text of an etcd log; `source` names it in errors. Blank lines are skipped;
/// any other line that is not an op line is an error.
pub fn parse_etcd_log(source: &str, text: &str) -> Result<History, HistoryError> {
    let mut ops = Vec::new();
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line_number = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let op = parse_log_line(line, ops.len() as u64).map_err(|message| {
            HistoryError::parse(
                Location {
                    source: Some(source.to_string()),
                    line: line_number,
                },
                message,
            )
        })?;
        ops.push(op);
        lines.push(line_number);
    }
    Ok(History::from_source(source, ops, lines))
}

fn parse_log_line(line: &str, index: u64) -> Result<Op, String> {
    let not_an_op = || {
        format!(
            "not a Jepsen op line (expected `INFO  {LOGGER} - <process> :<type> :<f> <value>`): {:?}",
            shorten(line)
        )
    };
    let fields = split_logger(line).ok_or_else(not_an_op)?;
    let (process, rest) = next_field(fields).ok_or_else(not_an_op)?;
    let (kind, rest) = next_field(rest).ok_or_else(not_an_op)?;
    let (f, rest) = next_field(rest).ok_or_else(not_an_op)?;
    let value = rest.trim_matches(|c: char| c.is_ascii_whitespace());

    let process = match process {
        ":nemesis" => Process::Nemesis,
        _ => process.parse::<u64>().map(Process::Client).map_err(|_| {
            format!(
                "bad process {:?}: expected an integer or :nemesis",
                shorten(process)
            )
        })?,
    };
    let kind = kind
        .strip_prefix(':')
        .and_then(OpType::parse)
        .ok_or_else(|| {
            format!(
                "unknown op type {:?}: expected :invoke, :ok, :fail or :info",
                shorten(kind)
            )
        })?;
    let f = f
        .strip_prefix(':')
        .filter(|name| edn::is_keyword_name(name))
        .ok_or_else(|| format!("bad f {:?}: expected a keyword such as :read", shorten(f)))?;
    if value.is_empty() {
        return Err("op line has no value (a read's invocation has `nil`)".to_string());
    }
    let mut op = Op::new(index, process, kind, f, Value::Null);
    // Most values are `nil` or a small integer; skip the EDN parser for those.
    if value == "nil" {
        return Ok(op);
    }
    if let Some(n) = value
        .parse::<i64>()
        .ok()
        .filter(|_| value.bytes().all(|b| b.is_ascii_digit()))
    {
        op.value = Value::from(n);
        return Ok(op);
    }
    match edn::parse(value).map_err(|e| format!("bad value {:?}: {e}", shorten(value)))? {
        Edn::Keyword(name) if name == "timed-out" => op.error = Some(Value::String(name)),
        other => op.value = edn::to_json(&other),
    }
    Ok(op)
}

/// At most 80 characters of `text`, so that a garbage line does not flood the message.
fn shorten(text: &str) -> String {
    match text.char_indices().nth(80) {
        Some((cut, _)) => format!("{}...", text.get(..cut).unwrap_or_default()),
        None => text.to_string(),
    }
}

/// The fields after `<level> jepsen.util - `, or `None` when the line is not an op line.
fn split_logger(line: &str) -> Option<&str> {
    // Nearly every line starts exactly so; avoid a substring search for those.
    if let Some(fields) = line.strip_prefix("INFO  jepsen.util - ") {
        return Some(fields);
    }
    let (logger, fields) = line.split_once(" - ")?;
    (logger.split_whitespace().last() == Some(LOGGER)).then_some(fields)
}

/// Splits off the first field separated by ASCII whitespace (tabs or runs of spaces).
fn next_field(text: &str) -> Option<(&str, &str)> {
    let text = text.trim_start_matches(|c: char| c.is_ascii_whitespace());
    if text.is_empty() {
        return None;
    }
    let end = text
        .bytes()
        .position(|b| b.is_ascii_whitespace())
        .unwrap_or(text.len());
    // `end` is at an ASCII byte or the end, so both halves are on character boundaries.
    Some((text.get(..end)?, text.get(end..)?))
}

/// Reads a Porcupine kv history (`kv/*.txt`).
pub fn read_kv(path: &Path) -> Result<History, HistoryError> {
    let text = crate::text::read_text(path)?;
    parse_kv(&path.display().to_string(), &text)
}

/// Parses a kv history: Jepsen EDN op maps, in which every client op has a `:key`
/// (its value becomes `{"key": ..., "value": ...}`).
pub fn parse_kv(source: &str, text: &str) -> Result<History, HistoryError> {
    jepsen::parse_ops(source, text, KeyRule::RequiredForClients)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_tab_and_space_separated_lines() {
        let text = "INFO  jepsen.util - 4\t:invoke\t:cas\t[1 2]\nINFO  jepsen.util - 4   :ok    :cas    [1 2]\n\nINFO  jepsen.util - 0\t:fail\t:read\t:timed-out\n";
        let h = parse_etcd_log("e.log", text).unwrap();
        assert_eq!(h.lines, vec![1, 2, 4]);
        assert_eq!(h.ops[1].kind, OpType::Ok);
        assert_eq!(h.ops[1].value, json!([1, 2]));
        assert_eq!(h.ops[2].kind, OpType::Fail);
        assert_eq!(
            (&h.ops[2].value, &h.ops[2].error),
            (&json!(null), &Some(json!("timed-out")))
        );
    }
}
