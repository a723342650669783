//! The broker's client API as the workers use it (DESIGN.md §2): produce and read on the
//! partition leader, found from `GET /v1/metadata` and kept in a per-partition cache that
//! `not_leader` hints correct. Every request carries a timeout. Errors are classified as
//! checking.md asks ([`ClientError::write_outcome`]).
//!
//! One [`BrokerClient`] per worker (DESIGN.md §3: each worker has its own HTTP client and
//! connections), so a worker's view of the leaders is its own, as a Kafka client's is.

use super::{Consistency, Target, WorkloadError};
use history::Outcome;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The least time between two metadata refreshes of one client: while no leader is known
/// (an election in progress), requests go round-robin and learn from `not_leader` hints
/// instead of hammering `/v1/metadata`.
const METADATA_REFRESH_INTERVAL: Duration = Duration::from_millis(200);
/// Longest wait for a TCP connection. A refused or unanswered connect sent nothing, so the
/// operation certainly did not happen (`fail`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest wait for one node's `/v1/metadata` during a refresh.
const METADATA_TIMEOUT: Duration = Duration::from_secs(2);

/// Error codes this client gives to failures that did not come from the broker's error
/// body (they appear in the history's `error` field as they are).
pub mod codes {
    /// The TCP connection could not be made (refused, unreachable, connect timeout):
    /// nothing was sent.
    pub const CONNECT_FAILED: &str = "connect_failed";
    /// No complete answer within the request's timeout.
    pub const CLIENT_TIMEOUT: &str = "client_timeout";
    /// The connection broke after the request may have been sent (reset, closed early).
    pub const CONNECTION_ERROR: &str = "connection_error";
    /// A 2xx answer whose body is not what the API promises.
    pub const BAD_RESPONSE: &str = "bad_response";
}

/// Error codes of the broker after which a produce certainly did not append
/// (broker/src/server/wire.rs). Every other code, and any answer that cannot be read, is
/// indeterminate: the write may have happened.
const DEFINITE_PRODUCE_ERRORS: [&str; 5] = [
    "bad_request",
    "unknown_topic_or_partition",
    "value_too_large",
    "not_leader",
    "not_enough_replicas",
];

/// Why a request did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientError {
    /// The broker answered with its error body `{"error", "message", "leader"}`.
    Broker {
        status: u16,
        code: String,
        message: String,
        leader: Option<u32>,
    },
    /// No connection could be made: nothing was sent.
    ConnectFailed(String),
    /// No complete answer within the timeout.
    Timeout,
    /// The connection failed after the request may have been sent.
    Connection(String),
    /// An answer that is not what the API promises: a 2xx body that does not parse, or an
    /// error status without the error body (`http_<status>`).
    BadResponse { status: u16, detail: String },
}

impl ClientError {
    /// The `error` recorded in the history: the broker's code, or one of [`codes`], or
    /// `http_<status>` for an error status without a readable error body.
    pub fn code(&self) -> String {
        match self {
            ClientError::Broker { code, .. } => code.clone(),
            ClientError::ConnectFailed(_) => codes::CONNECT_FAILED.to_string(),
            ClientError::Timeout => codes::CLIENT_TIMEOUT.to_string(),
            ClientError::Connection(_) => codes::CONNECTION_ERROR.to_string(),
            ClientError::BadResponse { status, .. } if !(200..300).contains(status) => {
                format!("http_{status}")
            }
            ClientError::BadResponse { .. } => codes::BAD_RESPONSE.to_string(),
        }
    }

    /// How a produce (append, register write) that ended with this error is recorded:
    /// `fail` only when it certainly did not happen (the broker said so before appending,
    /// or nothing was sent); `info` otherwise.
    pub fn write_outcome(&self) -> Outcome {
        match self {
            ClientError::Broker { code, .. }
                if DEFINITE_PRODUCE_ERRORS.contains(&code.as_str()) =>
            {
                Outcome::Fail
            }
            ClientError::ConnectFailed(_) => Outcome::Fail,
            ClientError::Broker { .. }
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
            ClientError::Broker {
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

/// One record of a read.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ReadRecord {
    pub offset: i64,
    pub value: Value,
}

/// The answer to `GET .../records`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ReadReply {
    pub records: Vec<ReadRecord>,
    pub high_watermark: i64,
    #[serde(default)]
    pub log_start_offset: Option<i64>,
    #[serde(default)]
    pub leader_epoch: Option<i64>,
    /// The record limit the broker applied.
    #[serde(default)]
    pub max: Option<u64>,
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

/// The body of a produce: typed, so that sending it builds no JSON map.
#[derive(Serialize)]
struct ProduceBody<'a> {
    value: &'a Value,
    acks: &'static str,
    timeout_ms: u64,
}

#[derive(Deserialize)]
struct ProduceReply {
    offset: i64,
}

#[derive(Deserialize)]
struct ErrorBody {
    error: String,
    #[serde(default)]
    message: String,
    #[serde(default)]
    leader: Option<u32>,
}

/// `GET /v1/metadata`, the parts the client reads.
#[derive(Debug, Deserialize)]
pub(crate) struct MetadataReply {
    #[serde(default)]
    topics: Vec<TopicMetadata>,
}

#[derive(Debug, Deserialize)]
struct TopicMetadata {
    topic: String,
    #[serde(default)]
    partitions: Vec<PartitionMetadata>,
}

#[derive(Debug, Deserialize)]
struct PartitionMetadata {
    partition: u32,
    #[serde(default)]
    leader: Option<u32>,
}

impl MetadataReply {
    /// The leader's broker id of each of `topic`'s partitions `0..partitions`.
    pub(crate) fn leaders(&self, topic: &str, partitions: u32) -> Vec<Option<u32>> {
        let mut leaders = vec![None; partitions as usize];
        for entry in self.topics.iter().filter(|t| t.topic == topic) {
            for p in &entry.partitions {
                if let Some(slot) = leaders.get_mut(p.partition as usize) {
                    *slot = p.leader;
                }
            }
        }
        leaders
    }
}

/// A worker's connection to the cluster: an HTTP client and its view of the leaders.
pub struct BrokerClient {
    http: reqwest::Client,
    target: Arc<Target>,
    /// Per node: its `/v1/metadata` URL, and per partition its records URL (parsed once:
    /// parsing a URL per request is a visible share of the recording path's cost).
    metadata_urls: Vec<reqwest::Url>,
    records_urls: Vec<Vec<reqwest::Url>>,
    /// Per partition, the index in `target.nodes` of the node believed to lead it.
    leaders: Vec<Option<usize>>,
    /// Where the next round-robin guess or metadata refresh starts.
    next_node: usize,
    last_refresh: Option<Instant>,
    request_timeout: Duration,
}

impl BrokerClient {
    /// A client whose requests each time out after `request_timeout`. Starts at a
    /// different node per `seed` so workers spread their metadata requests.
    pub fn new(
        target: Arc<Target>,
        request_timeout: Duration,
        seed: usize,
    ) -> Result<BrokerClient, WorkloadError> {
        let parse = |url: String| {
            reqwest::Url::parse(&url)
                .map_err(|e| WorkloadError::Target(format!("bad client URL {url:?}: {e}")))
        };
        let mut metadata_urls = Vec::with_capacity(target.nodes.len());
        let mut records_urls = Vec::with_capacity(target.nodes.len());
        for (i, node) in target.nodes.iter().enumerate() {
            metadata_urls.push(parse(format!("{}/v1/metadata", node.base_url()))?);
            records_urls.push(
                (0..target.partitions)
                    .map(|p| parse(target.records_url(i, p)))
                    .collect::<Result<Vec<_>, _>>()?,
            );
        }
        let http = reqwest::Client::builder()
            // Test traffic goes to the test's nodes, never through a proxy from the
            // environment.
            .no_proxy()
            // One request per operation, as recorded: the client neither follows a
            // redirect elsewhere nor resends a request on its own (a resent produce would
            // be an append the history does not show).
            .redirect(reqwest::redirect::Policy::none())
            .retry(reqwest::retry::never())
            .referer(false)
            .connect_timeout(CONNECT_TIMEOUT.min(request_timeout))
            .timeout(request_timeout)
            .tcp_nodelay(true)
            .build()?;
        let partitions = target.partitions as usize;
        let next_node = seed % target.nodes.len().max(1);
        Ok(BrokerClient {
            http,
            target,
            metadata_urls,
            records_urls,
            leaders: vec![None; partitions],
            next_node,
            last_refresh: None,
            request_timeout,
        })
    }

    pub fn target(&self) -> &Target {
        &self.target
    }

    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// The node to send `partition`'s requests to: the cached leader; else the leader
    /// from a metadata refresh (at most one per [`METADATA_REFRESH_INTERVAL`]); else the
    /// next node in turn, whose `not_leader` answer will teach the cache.
    pub async fn route(&mut self, partition: u32) -> usize {
        if let Some(Some(node)) = self.leaders.get(partition as usize) {
            return *node;
        }
        let due = self
            .last_refresh
            .is_none_or(|at| at.elapsed() >= METADATA_REFRESH_INTERVAL);
        if due {
            self.refresh_metadata().await;
            if let Some(Some(node)) = self.leaders.get(partition as usize) {
                return *node;
            }
        }
        let node = self.next_node % self.target.nodes.len().max(1);
        self.next_node = node + 1;
        node
    }

    /// Asks the nodes in turn for `/v1/metadata` until one answers, and takes its
    /// leaders. A node whose answer cannot be read is skipped.
    pub async fn refresh_metadata(&mut self) -> bool {
        self.last_refresh = Some(Instant::now());
        let count = self.target.nodes.len();
        for i in 0..count {
            let node = (self.next_node + i) % count;
            let Some(url) = self.metadata_urls.get(node) else {
                continue;
            };
            let request = self
                .http
                .get(url.clone())
                .timeout(METADATA_TIMEOUT.min(self.request_timeout));
            let Ok(response) = request.send().await else {
                continue;
            };
            if !response.status().is_success() {
                continue;
            }
            let Ok(bytes) = response.bytes().await else {
                continue;
            };
            let Ok(metadata) = serde_json::from_slice::<MetadataReply>(&bytes) else {
                continue;
            };
            let leaders = metadata.leaders(&self.target.topic, self.target.partitions);
            for (slot, leader) in self.leaders.iter_mut().zip(leaders) {
                *slot = leader.and_then(|id| self.target.node_of_broker(id));
            }
            self.next_node = node + 1;
            return true;
        }
        false
    }

    /// Takes what an error says about `partition`'s leader: a `not_leader` hint moves the
    /// cache there; a broken connection forgets the node, so the next request looks again.
    fn learn(&mut self, partition: u32, error: &ClientError) {
        let Some(slot) = self.leaders.get_mut(partition as usize) else {
            return;
        };
        match error {
            ClientError::Broker { code, leader, .. } if code == "not_leader" => {
                *slot = leader.and_then(|id| self.target.node_of_broker(id));
            }
            ClientError::Broker { .. } | ClientError::BadResponse { .. } => {}
            ClientError::ConnectFailed(_) | ClientError::Timeout | ClientError::Connection(_) => {
                *slot = None;
            }
        }
    }

    /// The records URL of `partition` on `node`; a node or partition outside the target is
    /// a request that cannot be sent (definitely not performed).
    fn records_url(&self, node: usize, partition: u32) -> Result<reqwest::Url, ClientError> {
        self.records_urls
            .get(node)
            .and_then(|urls| urls.get(partition as usize))
            .cloned()
            .ok_or_else(|| {
                ClientError::ConnectFailed(format!(
                    "no node {node} or partition {partition} in the target"
                ))
            })
    }

    /// `POST .../records` with acks=all: the offset the value was appended at. The broker
    /// is asked to give up a little before this client does, so that a slow replication
    /// ends as the broker's own `timeout` rather than a cut connection.
    pub async fn produce(
        &mut self,
        node: usize,
        partition: u32,
        value: &Value,
    ) -> Result<i64, ClientError> {
        let url = self.records_url(node, partition)?;
        let broker_timeout_ms = (self.request_timeout.as_millis() * 4 / 5).max(1);
        let body = ProduceBody {
            value,
            acks: "all",
            timeout_ms: u64::try_from(broker_timeout_ms).unwrap_or(u64::MAX),
        };
        let request = self.http.post(url).json(&body);
        let result = send::<ProduceReply>(request)
            .await
            .map(|reply| reply.offset);
        if let Err(error) = &result {
            self.learn(partition, error);
        }
        result
    }

    /// `GET .../records?offset=&max=&consistency=`, answering within `deadline`. Without
    /// `offset` the broker reads from the log start.
    pub async fn read(
        &mut self,
        node: usize,
        partition: u32,
        offset: Option<i64>,
        max: u32,
        consistency: Consistency,
        deadline: Instant,
    ) -> Result<ReadReply, ClientError> {
        let timeout = deadline.saturating_duration_since(Instant::now());
        if timeout.is_zero() {
            return Err(ClientError::Timeout);
        }
        let mut url = self.records_url(node, partition)?;
        let mut query = String::with_capacity(64);
        let _ = write!(query, "max={max}");
        if let Some(offset) = offset {
            let _ = write!(query, "&offset={offset}");
        }
        if consistency == Consistency::Linearizable {
            query.push_str("&consistency=linearizable");
        }
        url.set_query(Some(&query));
        let request = self.http.get(url).timeout(timeout);
        let result = send::<ReadReply>(request).await;
        if let Err(error) = &result {
            self.learn(partition, error);
        }
        result
    }
}

/// Sends a request and reads a 2xx answer as `T` or an error answer as the broker's error
/// body, classifying everything that can go wrong on the way.
async fn send<T: serde::de::DeserializeOwned>(
    request: reqwest::RequestBuilder,
) -> Result<T, ClientError> {
    let response = request.send().await.map_err(transport_error)?;
    let status = response.status().as_u16();
    let bytes = response.bytes().await.map_err(transport_error)?;
    if (200..300).contains(&status) {
        return serde_json::from_slice(&bytes).map_err(|e| ClientError::BadResponse {
            status,
            detail: e.to_string(),
        });
    }
    match serde_json::from_slice::<ErrorBody>(&bytes) {
        Ok(body) => Err(ClientError::Broker {
            status,
            code: body.error,
            message: body.message,
            leader: body.leader,
        }),
        Err(_) => Err(ClientError::BadResponse {
            status,
            detail: String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned(),
        }),
    }
}

fn transport_error(error: reqwest::Error) -> ClientError {
    // Timeout first: a connect that timed out against the overall deadline is also a
    // timeout, and a timeout is never claimed definite.
    if error.is_timeout() {
        ClientError::Timeout
    } else if error.is_connect() {
        ClientError::ConnectFailed(error_chain(&error))
    } else {
        ClientError::Connection(error_chain(&error))
    }
}

/// The error and its sources on one line (reqwest's own message is only the outermost).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn broker(code: &str) -> ClientError {
        ClientError::Broker {
            status: 503,
            code: code.to_string(),
            message: String::new(),
            leader: None,
        }
    }

    #[test]
    fn produce_errors_are_definite_only_when_nothing_was_written() {
        for code in [
            "not_leader",
            "not_enough_replicas",
            "bad_request",
            "unknown_topic_or_partition",
            "value_too_large",
        ] {
            assert_eq!(broker(code).write_outcome(), Outcome::Fail, "{code}");
        }
        for code in [
            "timeout",
            "not_enough_replicas_after_append",
            "leadership_lost",
            "storage_error",
            "failpoint",
            "something_new",
        ] {
            assert_eq!(broker(code).write_outcome(), Outcome::Info, "{code}");
        }
        assert_eq!(
            ClientError::ConnectFailed("refused".into()).write_outcome(),
            Outcome::Fail
        );
        assert_eq!(ClientError::Timeout.write_outcome(), Outcome::Info);
        assert_eq!(
            ClientError::Connection("reset".into()).write_outcome(),
            Outcome::Info
        );
        let unreadable = ClientError::BadResponse {
            status: 200,
            detail: String::new(),
        };
        assert_eq!(unreadable.write_outcome(), Outcome::Info);
        assert_eq!(unreadable.code(), "bad_response");
        let bare_500 = ClientError::BadResponse {
            status: 500,
            detail: "oops".into(),
        };
        assert_eq!(bare_500.code(), "http_500");
        assert_eq!(bare_500.write_outcome(), Outcome::Info);
        // Reads have no effect: every failure is a fail.
        for error in [broker("timeout"), ClientError::Timeout, unreadable] {
            assert_eq!(error.read_outcome(), Outcome::Fail);
        }
    }

    #[test]
    fn metadata_leaders_follow_the_documented_shape() {
        let text = r#"{
            "brokers": [{"id": 1}, {"id": 2}, {"id": 3}],
            "controller": null,
            "metadata_leader": null,
            "topics": [
                {"topic": "other", "partitions": [{"partition": 0, "leader": 3}]},
                {"topic": "t", "partitions": [
                    {"partition": 1, "replicas": [1,2,3], "leader": 2, "leader_epoch": 4,
                     "isr": [2,3], "controller_epoch": 1, "version": 9},
                    {"partition": 0, "replicas": [1,2,3], "leader": null, "leader_epoch": 3,
                     "isr": [], "controller_epoch": 1, "version": 2},
                    {"partition": 7, "leader": 1}
                ]}
            ]
        }"#;
        let metadata: MetadataReply = serde_json::from_str(text).unwrap();
        assert_eq!(metadata.leaders("t", 3), vec![None, Some(2), None]);
        assert_eq!(metadata.leaders("missing", 2), vec![None, None]);
    }

    #[test]
    fn read_reply_end_and_records() {
        let mut reply: ReadReply = serde_json::from_str(
            r#"{"records": [{"offset": 3, "value": 30}, {"offset": 4, "value": 40}],
                "high_watermark": 9, "log_start_offset": 0, "leader_epoch": 2, "max": 2}"#,
        )
        .unwrap();
        assert_eq!(reply.end(3), 5);
        assert_eq!(reply.take_records_json(), json!([[3, 30], [4, 40]]));
        assert!(reply.records.is_empty());
        assert_eq!(reply.max, Some(2));
        let empty: ReadReply =
            serde_json::from_str(r#"{"records": [], "high_watermark": 9}"#).unwrap();
        assert_eq!(empty.end(9), 9);
    }
}
