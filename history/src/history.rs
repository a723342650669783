//! A whole history in memory, remembering where each op came from so that errors and
//! reports can point at a file and line.

use crate::error::Location;
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
