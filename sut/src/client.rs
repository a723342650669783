//! The workloads' door: one worker's connection to the cluster ([`Client`]), made by a
//! [`Connector`], and how each failure is recorded ([`ClientError`]).
//!
//! A client routes each partition's requests itself (its own view of the leaders, as a
//! Kafka client's is) and never sends a request twice: an operation is recorded once,
//! with the outcome its error implies.

use std::time::{Duration, Instant};

use history::Outcome;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::views::Target;
use crate::BoxFuture;

/// Error codes a client gives to failures that did not come from the system's own error
/// answer (they appear in the history's `error` field as they are).
pub mod codes {
    /// The connection could not be made (refused, unreachable, connect timeout):
    /// nothing was sent.
    pub const CONNECT_FAILED: &str = "connect_failed";
    /// No complete answer within the request's timeout.
    pub const CLIENT_TIMEOUT: &str = "client_timeout";
    /// The connection broke after the request may have been sent (reset, closed early).
    pub const CONNECTION_ERROR: &str = "connection_error";
    /// A success answer whose body is not what the API promises.
    pub const BAD_RESPONSE: &str = "bad_response";
}

/// Why a request did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientError {
    /// The system answered with an error of its own. `definite`: the error says the
    /// operation did not take effect (for a write: it was refused before appending).
    Answered {
        status: u16,
        code: String,
        message: String,
        definite: bool,
    },
    /// No connection could be made: nothing was sent.
    ConnectFailed(String),
    /// No complete answer within the timeout.
    Timeout,
    /// The connection failed after the request may have been sent.
    Connection(String),
    /// An answer that is not what the API promises: a success body that does not parse,
    /// or an error status without the error body (`http_<status>`).
    BadResponse { status: u16, detail: String },
}

impl ClientError {
    /// The `error` recorded in the history: the system's code, or one of [`codes`], or
    /// `http_<status>` for an error status without a readable error body.
    pub fn code(&self) -> String {
        match self {
            ClientError::Answered { code, .. } => code.clone(),
            ClientError::ConnectFailed(_) => codes::CONNECT_FAILED.to_string(),
            ClientError::Timeout => codes::CLIENT_TIMEOUT.to_string(),
            ClientError::Connection(_) => codes::CONNECTION_ERROR.to_string(),
            ClientError::BadResponse { status, .. } if !(200..300).contains(status) => {
                format!("http_{status}")
            }
            ClientError::BadResponse { .. } => codes::BAD_RESPONSE.to_string(),
        }
    }

    /// How a write (append, register write) that ended with this error is recorded:
    /// `fail` only when it certainly did not happen (the system said so, or nothing was
    /// sent); `info` otherwise.
    pub fn write_outcome(&self) -> Outcome {
        match self {
            ClientError::Answered { definite: true, .. } | ClientError::ConnectFailed(_) => {
                Outcome::Fail
            }
            ClientError::Answered { .. }
            | ClientError::Timeout
            | ClientError::Connection(_)
            | ClientError::BadResponse { .. } => Outcome::Info,
        }
    }

    /// How a read that ended with this error is recorded: always `fail`, since a read has
    /// no effect (checking.md: a read that timed out may be recorded as fail).
    pub fn read_outcome(&self) -> Outcome {
        Outcome::Fail
    }
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Answered {
                status,
                code,
                message,
                ..
            } => write!(f, "{status} {code}: {message}"),
            ClientError::ConnectFailed(detail) => write!(f, "cannot connect: {detail}"),
            ClientError::Timeout => f.write_str("no answer within the timeout"),
            ClientError::Connection(detail) => write!(f, "connection failed: {detail}"),
            ClientError::BadResponse { status, detail } => {
                write!(f, "unreadable answer (HTTP {status}): {detail}")
            }
        }
    }
}

impl std::error::Error for ClientError {}

/// How many replicas must have a write before it is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// Every in-sync replica (`acks=all`).
    All,
    /// The leader alone (`acks=1`).
    Leader,
}

impl Acks {
    /// As the history's invoke says it (Kafka's spelling).
    pub fn as_str(self) -> &'static str {
        match self {
            Acks::All => "all",
            Acks::Leader => "1",
        }
    }
}

/// A read's consistency (DESIGN.md §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Consistency {
    /// Whatever the leader has committed (may lag right after a leader change).
    Default,
    /// The leader confirms through the metadata quorum that it still leads, and that its
    /// high watermark has reached its epoch's start, before answering.
    Linearizable,
}

/// One record of a read.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ReadRecord {
    pub offset: i64,
    pub value: Value,
}

/// What a read returned.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ReadReply {
    pub records: Vec<ReadRecord>,
    pub high_watermark: i64,
    #[serde(default)]
    pub log_start_offset: Option<i64>,
    #[serde(default)]
    pub leader_epoch: Option<i64>,
    /// The record limit the system applied.
    #[serde(default)]
    pub max: Option<u64>,
    /// A byte limit of the system cut the reply short of `max` and of the high watermark.
    #[serde(default)]
    pub truncated: bool,
}

impl ReadReply {
    /// One past the highest offset returned, or `from` for an empty read.
    pub fn end(&self, from: i64) -> i64 {
        self.records
            .iter()
            .map(|r| r.offset.saturating_add(1))
            .fold(from, i64::max)
    }

    /// The records as the history writes them, `[[offset, value], ...]`, moved out of the
    /// reply (which is left without records).
    pub fn take_records_json(&mut self) -> Value {
        Value::Array(
            std::mem::take(&mut self.records)
                .into_iter()
                .map(|r| Value::Array(vec![Value::from(r.offset), r.value]))
                .collect(),
        )
    }
}

/// One read: where, how much, how consistent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadRequest {
    pub partition: u32,
    /// `None`: from the log's start.
    pub offset: Option<i64>,
    pub max: u32,
    pub consistency: Consistency,
}

/// One worker's connection to the cluster. Nodes are indices into the target's `nodes`.
/// One request at a time (`&mut self`); each ends within the client's request timeout
/// or its deadline.
pub trait Client: Send {
    /// What this client writes to.
    fn target(&self) -> &Target;

    /// How long one request may take.
    fn request_timeout(&self) -> Duration;

    /// The node to send `partition`'s requests to, as far as this client knows.
    fn route(&mut self, partition: u32) -> BoxFuture<'_, usize>;

    /// Appends `value` to `partition` through `node`: the offset it was appended at.
    fn produce<'a>(
        &'a mut self,
        node: usize,
        partition: u32,
        value: &'a Value,
        acks: Acks,
    ) -> BoxFuture<'a, Result<i64, ClientError>>;

    /// Appends `values` together, at consecutive offsets: each one's offset.
    fn produce_batch<'a>(
        &'a mut self,
        node: usize,
        partition: u32,
        values: &'a [Value],
        acks: Acks,
    ) -> BoxFuture<'a, Result<Vec<i64>, ClientError>>;

    /// Reads through `node`, answering within `deadline`.
    fn read(
        &mut self,
        node: usize,
        read: ReadRequest,
        deadline: Instant,
    ) -> BoxFuture<'_, Result<ReadReply, ClientError>>;
}

/// Makes the clients of one target.
pub trait Connector: Send + Sync {
    /// What the clients write to.
    fn target(&self) -> &Target;

    /// A new client whose requests time out after `request_timeout`; `seed` spreads the
    /// clients' first guesses over the nodes. Connects lazily: making it sends nothing.
    fn connect(&self, request_timeout: Duration, seed: usize) -> Box<dyn Client>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(code: &str, definite: bool) -> ClientError {
        ClientError::Answered {
            status: 503,
            code: code.into(),
            message: String::new(),
            definite,
        }
    }

    #[test]
    fn a_write_fails_only_when_it_certainly_did_not_happen() {
        assert_eq!(answered("not_leader", true).write_outcome(), Outcome::Fail);
        assert_eq!(answered("timeout", false).write_outcome(), Outcome::Info);
        assert_eq!(
            ClientError::ConnectFailed("refused".into()).write_outcome(),
            Outcome::Fail
        );
        for maybe in [
            ClientError::Timeout,
            ClientError::Connection("reset".into()),
            ClientError::BadResponse {
                status: 200,
                detail: "junk".into(),
            },
        ] {
            assert_eq!(maybe.write_outcome(), Outcome::Info, "{maybe}");
            assert_eq!(maybe.read_outcome(), Outcome::Fail, "{maybe}");
        }
    }

    #[test]
    fn codes_name_the_failure() {
        assert_eq!(answered("not_leader", true).code(), "not_leader");
        assert_eq!(ClientError::Timeout.code(), codes::CLIENT_TIMEOUT);
        let status_only = ClientError::BadResponse {
            status: 502,
            detail: String::new(),
        };
        assert_eq!(status_only.code(), "http_502");
        let junk = ClientError::BadResponse {
            status: 200,
            detail: String::new(),
        };
        assert_eq!(junk.code(), codes::BAD_RESPONSE);
    }

    #[test]
    fn a_reply_ends_past_its_last_record() {
        let mut reply = ReadReply {
            records: vec![
                ReadRecord {
                    offset: 4,
                    value: Value::from(7),
                },
                ReadRecord {
                    offset: 5,
                    value: Value::from(8),
                },
            ],
            high_watermark: 9,
            log_start_offset: None,
            leader_epoch: None,
            max: None,
            truncated: false,
        };
        assert_eq!(reply.end(0), 6);
        assert_eq!(
            reply.take_records_json(),
            serde_json::json!([[4, 7], [5, 8]])
        );
        assert_eq!(reply.end(3), 3);
    }
}
