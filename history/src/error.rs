//! Errors of reading and validating histories. Every error names the place: a file and
//! line, or an op index for histories built in memory.

use std::fmt;
use std::path::PathBuf;

/// Where an op came from: `history.jsonl:12`, or `op 12` for in-memory histories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// File name, or `None` for a history built in memory.
    pub source: Option<String>,
    /// 1-based line in `source`, or the op's position when there is no file.
    pub line: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            Some(source) => write!(f, "{source}:{}", self.line),
            None => write!(f, "op {}", self.line),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The text could not be parsed (bad JSON or EDN, missing field, unknown op type).
    #[error("{location}: {message}")]
    Parse { location: Location, message: String },
    /// The ops parse but do not form a valid history (e.g. a completion without invocation).
    #[error("{location}: {message}")]
    Invalid { location: Location, message: String },
}

impl HistoryError {
    pub fn parse(location: Location, message: impl Into<String>) -> HistoryError {
        HistoryError::Parse {
            location,
            message: message.into(),
        }
    }

    pub fn invalid(location: Location, message: impl Into<String>) -> HistoryError {
        HistoryError::Invalid {
            location,
            message: message.into(),
        }
    }

    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> HistoryError {
        HistoryError::Io {
            path: path.into(),
            source,
        }
    }
}
