//! A whole history in memory, remembering where each op came from so that errors and
//! reports can point at a file and line.

use crate::error::{HistoryError, Location};
use crate::op::Op;

/// The ops of one history, in order of occurrence, with their source lines.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    pub ops: Vec<Op>,
    /// File the ops were read from, if any.
    pub source: Option<String>,
    /// 1-based source line of each op (parallel to `ops`); empty for in-memory histories.
    pub lines: Vec<usize>,
    /// Where an incomplete last line was dropped: what a writer killed mid-write leaves
    /// (JSONL only). Readers should tell the user.
    pub torn_tail: Option<Location>,
}

impl History {
    /// A history built in memory; errors name ops by position.
    pub fn from_ops(ops: Vec<Op>) -> History {
        History {
            ops,
            source: None,
            lines: Vec::new(),
            torn_tail: None,
        }
    }

    /// A history read from `source`, where `lines[i]` is the line of `ops[i]`.
    pub fn from_source(source: impl Into<String>, ops: Vec<Op>, lines: Vec<usize>) -> History {
        debug_assert_eq!(ops.len(), lines.len());
        History {
            ops,
            source: Some(source.into()),
            lines,
            torn_tail: None,
        }
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Where the op at position `position` came from.
    pub fn locate(&self, position: usize) -> Location {
        match (&self.source, self.lines.get(position)) {
            (Some(source), Some(line)) => Location {
                source: Some(source.clone()),
                line: *line,
            },
            (source, _) => Location {
                source: source.clone(),
                line: position,
            },
        }
    }

    /// Checks that op indices go strictly up along the history, as every writer of a
    /// history numbers them: a repeated or decreasing index means ops were duplicated,
    /// reordered or spliced from two files, and no checker could judge that safely.
    pub fn check_index_order(&self) -> Result<(), HistoryError> {
        for (i, pair) in self.ops.windows(2).enumerate() {
            let (before, op) = (pair[0].index, pair[1].index);
            if op > before {
                continue;
            }
            let what = if op == before { "repeats" } else { "is below" };
            return Err(HistoryError::invalid(
                self.locate(i + 1),
                format!(
                    "op index {op} {what} the index {before} of the op before it \
                     (a history's indices go strictly up)"
                ),
            ));
        }
        Ok(())
    }

    /// Client ops only (nemesis ops removed), keeping positions consistent with `lines`.
    pub fn without_nemesis(&self) -> History {
        let mut ops = Vec::with_capacity(self.ops.len());
        let mut lines = Vec::with_capacity(self.lines.len());
        for (i, op) in self.ops.iter().enumerate() {
            if op.process.is_client() {
                ops.push(op.clone());
                if let Some(line) = self.lines.get(i) {
                    lines.push(*line);
                }
            }
        }
        History {
            ops,
            source: self.source.clone(),
            lines,
            torn_tail: self.torn_tail.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::{OpType, Process};
    use serde_json::Value;

    fn with_indices(indices: &[u64]) -> History {
        let ops = indices
            .iter()
            .map(|&i| {
                crate::op::Op::new(i, Process::Client(0), OpType::Invoke, "read", Value::Null)
            })
            .collect();
        let lines = (1..=indices.len()).collect();
        History::from_source("h.jsonl", ops, lines)
    }

    #[test]
    fn indices_must_go_strictly_up() {
        assert!(with_indices(&[0, 1, 5, 9]).check_index_order().is_ok());
        assert!(with_indices(&[]).check_index_order().is_ok());
        let err = with_indices(&[0, 1, 1, 2]).check_index_order().unwrap_err();
        assert_eq!(
            err.to_string(),
            "h.jsonl:3: op index 1 repeats the index 1 of the op before it (a history's indices go strictly up)"
        );
        let err = with_indices(&[0, 4, 2]).check_index_order().unwrap_err();
        assert!(
            err.to_string()
                .starts_with("h.jsonl:3: op index 2 is below the index 4"),
            "{err}"
        );
    }
}
