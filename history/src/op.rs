//! One history entry: an invocation or completion of an operation (DESIGN.md §4).

use serde::de::{self, Deserializer, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;

/// Who performed an operation: a client worker (a logical, single-threaded process)
/// or the nemesis. Serialized as an integer or the string `"nemesis"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Process {
    Client(u64),
    Nemesis,
}

impl Process {
    pub fn is_client(self) -> bool {
        matches!(self, Process::Client(_))
    }
}

impl fmt::Display for Process {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Process::Client(p) => write!(f, "{p}"),
            Process::Nemesis => f.write_str("nemesis"),
        }
    }
}

impl Serialize for Process {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Process::Client(p) => serializer.serialize_u64(*p),
            Process::Nemesis => serializer.serialize_str("nemesis"),
        }
    }
}

impl<'de> Deserialize<'de> for Process {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ProcessVisitor;
        impl Visitor<'_> for ProcessVisitor {
            type Value = Process;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a non-negative integer or \"nemesis\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Process, E> {
                Ok(Process::Client(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Process, E> {
                u64::try_from(v)
                    .map(Process::Client)
                    .map_err(|_| E::custom(format!("process {v} is negative")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Process, E> {
                if v == "nemesis" {
                    Ok(Process::Nemesis)
                } else {
                    Err(E::custom(format!(
                        "unknown process {v:?}: expected an integer or \"nemesis\""
                    )))
                }
            }
        }
        deserializer.deserialize_any(ProcessVisitor)
    }
}

/// The four kinds of history entries, as Jepsen: `ok` took effect, `fail` certainly did
/// not, `info` may or may not have (and may take effect at any later time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OpType {
    Invoke,
    Ok,
    Fail,
    Info,
}

impl OpType {
    pub fn as_str(self) -> &'static str {
        match self {
            OpType::Invoke => "invoke",
            OpType::Ok => "ok",
            OpType::Fail => "fail",
            OpType::Info => "info",
        }
    }

    /// Parses `invoke|ok|fail|info` (an optional leading `:` as in EDN keywords is allowed).
    pub fn parse(s: &str) -> Option<OpType> {
        match s.strip_prefix(':').unwrap_or(s) {
            "invoke" => Some(OpType::Invoke),
            "ok" => Some(OpType::Ok),
            "fail" => Some(OpType::Fail),
            "info" => Some(OpType::Info),
            _ => None,
        }
    }
}

impl fmt::Display for OpType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One line of a history. `value` is free-form JSON whose shape depends on the workload
/// (DESIGN.md §4); keyed workloads put `{"key": ..., "value": ...}` there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Op {
    /// Position in the history; unique and increasing (dense when written by the harness).
    pub index: u64,
    /// Nanoseconds since the test began, from a monotonic clock.
    #[serde(default)]
    pub time: u64,
    pub process: Process,
    #[serde(rename = "type")]
    pub kind: OpType,
    pub f: String,
    #[serde(default)]
    pub value: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
}

impl Op {
    /// A client or nemesis entry with no node, error or time.
    pub fn new(index: u64, process: Process, kind: OpType, f: &str, value: Value) -> Op {
        Op {
            index,
            time: 0,
            process,
            kind,
            f: f.to_string(),
            value,
            node: None,
            error: None,
        }
    }

    /// For keyed workloads: `value.key` as text, borrowed when it is a string (numbers
    /// are printed); `None` for an unkeyed op or a null key.
    pub fn key_text(&self) -> Option<std::borrow::Cow<'_, str>> {
        match self.value.get("key")? {
            Value::String(s) => Some(std::borrow::Cow::Borrowed(s.as_str())),
            Value::Null => None,
            other => Some(std::borrow::Cow::Owned(other.to_string())),
        }
    }

    /// The op's value without its key: `value.value` of a `{"key", "value"}` value
    /// (null when absent), the whole value of an unkeyed op.
    pub fn payload(&self) -> &Value {
        payload(&self.value)
    }

    /// For keyed workloads: `value.key` as a string (numbers are printed).
    pub fn key(&self) -> Option<String> {
        match self.value.get("key")? {
            Value::String(s) => Some(s.clone()),
            Value::Null => None,
            other => Some(other.to_string()),
        }
    }
}

/// A value without its key: `value` of a `{"key", "value"}` value (null when absent),
/// the value itself otherwise.
pub fn payload(value: &Value) -> &Value {
    static NULL: Value = Value::Null;
    match value.get("key") {
        Some(_) => value.get("value").unwrap_or(&NULL),
        None => value,
    }
}
