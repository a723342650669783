//! The broker's client API as the workers use it (`sut::Client`) (DESIGN.md §2): produce and read on the
//! partition leader, found from `GET /v1/metadata` and kept in a per-partition cache that
//! `not_leader` hints correct. Every request carries a timeout. Errors are classified as
//! checking.md asks (`sut::ClientError::write_outcome`): the broker's codes that say a
//! produce did not append are definite.
//!
//! One [`BrokerClient`] per worker (DESIGN.md §3: each worker has its own HTTP client and
//! connections), so a worker's view of the leaders is its own, as a Kafka client's is.
//!
//! The HTTP is HTTP/1.1 written and read here, on one kept-alive connection per node
//! driven by the worker's own task: the recording path's hot loop, where a general client
//! (reqwest, or hyper underneath it) costs several times the CPU per request of what a
//! worker needs (`cargo bench -p harness --bench record`, scenarios `http-floor` and
//! `reqwest-floor`). What it needs is little: one request at a time, requests written
//! whole, answers delimited by `content-length` or chunked or the connection's end. No
//! proxy, no redirects, and no request sent twice: the only request sent again, on a new
//! connection, is one of which not a byte was written.

use crate::http1::{is_idle, round_trip, Answer, Buffers, Failure};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::io::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use sut::{
    error_chain, Acks, BoxFuture, Client, ClientError, Connector, Consistency, ReadReply,
    ReadRequest, Target,
};
use tokio::net::TcpStream;

/// The least time between two metadata refreshes of one client: while no leader is known
/// (an election in progress), requests go round-robin and learn from `not_leader` hints
/// instead of hammering `/v1/metadata`.
const METADATA_REFRESH_INTERVAL: Duration = Duration::from_millis(200);
/// Longest wait for a TCP connection. A refused or unanswered connect sent nothing, so the
/// operation certainly did not happen (`fail`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest wait for one node's `/v1/metadata` during a refresh.
const METADATA_TIMEOUT: Duration = Duration::from_secs(2);

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

/// The body of a batch produce.
#[derive(Serialize)]
struct BatchBody<'a> {
    values: &'a [Value],
    acks: &'static str,
    timeout_ms: u64,
}

#[derive(Deserialize)]
struct BatchReply {
    offsets: Vec<i64>,
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

/// One node as the clients reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientNode {
    /// The broker id it registers with (what `/v1/metadata` and `not_leader` hints name).
    pub broker_id: u32,
    /// Base URL of its client listener, e.g. `http://10.77.0.2:9092`.
    pub url: String,
}

/// A refused request and what the refusal says of the partition's leader.
struct Refusal {
    error: ClientError,
    /// The broker id a `not_leader` answer names.
    leader: Option<u32>,
}

impl From<ClientError> for Refusal {
    fn from(error: ClientError) -> Refusal {
        Refusal {
            error,
            leader: None,
        }
    }
}

/// The clients of one target on our brokers ([`sut::Connector`]).
pub struct BrokerConnector {
    target: Arc<Target>,
    /// Per node of the target, in order.
    nodes: Arc<Vec<ClientNode>>,
}

impl BrokerConnector {
    /// The clients of `target`, whose nodes are `nodes` (one per node of the target, in
    /// its order). Every URL must be `http://host:port`.
    pub fn new(
        target: Target,
        nodes: Vec<ClientNode>,
    ) -> Result<BrokerConnector, ClientSetupError> {
        target
            .validate()
            .map_err(|e| ClientSetupError(e.to_string()))?;
        if nodes.len() != target.nodes.len() {
            return Err(ClientSetupError(format!(
                "{} client addresses for {} nodes",
                nodes.len(),
                target.nodes.len()
            )));
        }
        for (i, node) in nodes.iter().enumerate() {
            if nodes[..i].iter().any(|n| n.broker_id == node.broker_id) {
                return Err(ClientSetupError(format!(
                    "broker id {} appears twice",
                    node.broker_id
                )));
            }
            // Every path the client will use parses.
            Endpoint::new(&target, node, 0)?;
        }
        Ok(BrokerConnector {
            target: Arc::new(target),
            nodes: Arc::new(nodes),
        })
    }

    /// A client of this target (see [`BrokerClient::new`]).
    pub fn client(&self, request_timeout: Duration, seed: usize) -> BrokerClient {
        BrokerClient::new(Arc::clone(&self.target), &self.nodes, request_timeout, seed)
    }
}

impl Connector for BrokerConnector {
    fn target(&self) -> &Target {
        &self.target
    }

    fn connect(&self, request_timeout: Duration, seed: usize) -> Box<dyn Client> {
        Box::new(self.client(request_timeout, seed))
    }
}

/// A target or client address the clients cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot make the clients: {0}")]
pub struct ClientSetupError(pub String);

/// A worker's connection to the cluster: one kept-alive HTTP/1.1 connection per node and
/// its view of the leaders.
pub struct BrokerClient {
    target: Arc<Target>,
    /// Per node of `target`, in order.
    endpoints: Vec<Endpoint>,
    /// The buffers of the one request in flight, reused by every request.
    io: Buffers,
    /// Per partition, the index in `target.nodes` of the node believed to lead it.
    leaders: Vec<Option<usize>>,
    /// Where the next round-robin guess or metadata refresh starts.
    next_node: usize,
    last_refresh: Option<Instant>,
    request_timeout: Duration,
    /// The `timeout_ms` of every produce (see [`BrokerClient::produce`]).
    broker_timeout_ms: u64,
}

impl BrokerClient {
    /// A client whose requests each time out after `request_timeout`. Starts at a
    /// different node per `seed` so workers spread their metadata requests. Connects
    /// lazily: building a client sends nothing. Endpoints that did not parse (which a
    /// [`BrokerConnector`] has ruled out) answer every request with a connect failure.
    fn new(
        target: Arc<Target>,
        nodes: &[ClientNode],
        request_timeout: Duration,
        seed: usize,
    ) -> BrokerClient {
        let endpoints = nodes
            .iter()
            .enumerate()
            .map(|(i, node)| Endpoint::new(&target, node, i).unwrap_or_else(Endpoint::unusable))
            .collect::<Vec<_>>();
        let partitions = target.partitions as usize;
        let next_node = seed % target.nodes.len().max(1);
        let broker_timeout_ms = (request_timeout.as_millis() * 4 / 5).max(1);
        BrokerClient {
            target,
            endpoints,
            io: Buffers::new(),
            leaders: vec![None; partitions],
            next_node,
            last_refresh: None,
            request_timeout,
            broker_timeout_ms: u64::try_from(broker_timeout_ms).unwrap_or(u64::MAX),
        }
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

    /// The index of the node whose broker id is `broker_id`.
    fn node_of_broker(&self, broker_id: u32) -> Option<usize> {
        self.endpoints.iter().position(|e| e.broker_id == broker_id)
    }

    /// Asks the nodes in turn for `/v1/metadata` until one answers, and takes its
    /// leaders. A node whose answer cannot be read is skipped.
    pub async fn refresh_metadata(&mut self) -> bool {
        self.last_refresh = Some(Instant::now());
        let count = self.endpoints.len();
        let timeout = METADATA_TIMEOUT.min(self.request_timeout);
        for i in 0..count {
            let node = (self.next_node + i) % count;
            let Some(endpoint) = self.endpoints.get_mut(node) else {
                continue;
            };
            self.io.begin("GET", &endpoint.metadata_path);
            self.io.finish(&endpoint.host, false);
            let Ok(answer) = endpoint.exchange(&mut self.io, timeout).await else {
                continue;
            };
            if !(200..300).contains(&answer.status) {
                continue;
            }
            let Ok(metadata) = serde_json::from_slice::<MetadataReply>(answer.body) else {
                continue;
            };
            let leaders = metadata.leaders(&self.target.topic, self.target.partitions);
            let nodes: Vec<Option<usize>> = leaders
                .into_iter()
                .map(|leader| leader.and_then(|id| self.node_of_broker(id)))
                .collect();
            for (slot, node) in self.leaders.iter_mut().zip(nodes) {
                *slot = node;
            }
            self.next_node = node + 1;
            return true;
        }
        false
    }

    /// Takes what a refusal says about `partition`'s leader: a `not_leader` hint moves the
    /// cache there; a broken connection forgets the node, so the next request looks again.
    fn learn(&mut self, partition: u32, refusal: &Refusal) {
        let hinted = refusal.leader.and_then(|id| self.node_of_broker(id));
        let Some(slot) = self.leaders.get_mut(partition as usize) else {
            return;
        };
        match &refusal.error {
            ClientError::Answered { code, .. } if code == "not_leader" => *slot = hinted,
            ClientError::Answered { .. } | ClientError::BadResponse { .. } => {}
            ClientError::ConnectFailed(_) | ClientError::Timeout | ClientError::Connection(_) => {
                *slot = None;
            }
        }
    }

    /// `POST .../records`: the offset the value was appended at. The broker is asked to
    /// give up a little before this client does, so that a slow replication ends as the
    /// broker's own `timeout` rather than a cut connection.
    pub async fn produce(
        &mut self,
        node: usize,
        partition: u32,
        value: &Value,
        acks: Acks,
    ) -> Result<i64, ClientError> {
        let body = ProduceBody {
            value,
            acks: acks.as_str(),
            timeout_ms: self.broker_timeout_ms,
        };
        self.send_produce::<_, ProduceReply>(node, partition, &body)
            .await
            .map(|r| r.offset)
    }

    /// Several values in one request, appended together at consecutive offsets: each
    /// one's offset.
    pub async fn produce_batch(
        &mut self,
        node: usize,
        partition: u32,
        values: &[Value],
        acks: Acks,
    ) -> Result<Vec<i64>, ClientError> {
        let body = BatchBody {
            values,
            acks: acks.as_str(),
            timeout_ms: self.broker_timeout_ms,
        };
        self.send_produce::<_, BatchReply>(node, partition, &body)
            .await
            .map(|r| r.offsets)
    }

    async fn send_produce<B: Serialize, R: serde::de::DeserializeOwned>(
        &mut self,
        node: usize,
        partition: u32,
        body: &B,
    ) -> Result<R, ClientError> {
        let timeout = self.request_timeout;
        let result = match records_endpoint(&mut self.endpoints, node, partition) {
            Ok((endpoint, p)) => {
                self.io.json.clear();
                match serde_json::to_writer(&mut self.io.json, body) {
                    Ok(()) => {
                        self.io.begin("POST", &endpoint.records_paths[p]);
                        self.io.finish(&endpoint.host, true);
                        match endpoint.exchange(&mut self.io, timeout).await {
                            Ok(answer) => answer.parse::<R>(),
                            Err(error) => Err(error.into()),
                        }
                    }
                    // Nothing was sent.
                    Err(e) => Err(ClientError::ConnectFailed(format!(
                        "cannot encode the produce: {e}"
                    ))
                    .into()),
                }
            }
            Err(error) => Err(error.into()),
        };
        result.map_err(|refusal| {
            self.learn(partition, &refusal);
            refusal.error
        })
    }

    /// `GET .../records?offset=&max=&consistency=`, answering within `deadline`. Without
    /// `offset` the broker reads from the log start.
    pub async fn read(
        &mut self,
        node: usize,
        read: ReadRequest,
        deadline: Instant,
    ) -> Result<ReadReply, ClientError> {
        let timeout = deadline.saturating_duration_since(Instant::now());
        if timeout.is_zero() {
            return Err(ClientError::Timeout);
        }
        let ReadRequest {
            partition,
            offset,
            max,
            consistency,
        } = read;
        let result = match records_endpoint(&mut self.endpoints, node, partition) {
            Ok((endpoint, p)) => {
                let io = &mut self.io;
                io.begin("GET", &endpoint.records_paths[p]);
                let _ = write!(io.request, "?max={max}");
                if let Some(offset) = offset {
                    let _ = write!(io.request, "&offset={offset}");
                }
                if consistency == Consistency::Linearizable {
                    io.request.extend_from_slice(b"&consistency=linearizable");
                }
                io.finish(&endpoint.host, false);
                match endpoint.exchange(io, timeout).await {
                    Ok(answer) => answer.parse::<ReadReply>(),
                    Err(error) => Err(error.into()),
                }
            }
            Err(error) => Err(error.into()),
        };
        result.map_err(|refusal| {
            self.learn(partition, &refusal);
            refusal.error
        })
    }
}

impl Client for BrokerClient {
    fn target(&self) -> &Target {
        &self.target
    }

    fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    fn route(&mut self, partition: u32) -> BoxFuture<'_, usize> {
        Box::pin(BrokerClient::route(self, partition))
    }

    fn produce<'a>(
        &'a mut self,
        node: usize,
        partition: u32,
        value: &'a Value,
        acks: Acks,
    ) -> BoxFuture<'a, Result<i64, ClientError>> {
        Box::pin(BrokerClient::produce(self, node, partition, value, acks))
    }

    fn produce_batch<'a>(
        &'a mut self,
        node: usize,
        partition: u32,
        values: &'a [Value],
        acks: Acks,
    ) -> BoxFuture<'a, Result<Vec<i64>, ClientError>> {
        Box::pin(BrokerClient::produce_batch(
            self, node, partition, values, acks,
        ))
    }

    fn read(
        &mut self,
        node: usize,
        read: ReadRequest,
        deadline: Instant,
    ) -> BoxFuture<'_, Result<ReadReply, ClientError>> {
        Box::pin(BrokerClient::read(self, node, read, deadline))
    }
}

/// `node`'s endpoint and the index of `partition`'s records path on it; a node or
/// partition outside the target is a request that cannot be sent (definitely not
/// performed).
fn records_endpoint(
    endpoints: &mut [Endpoint],
    node: usize,
    partition: u32,
) -> Result<(&mut Endpoint, usize), ClientError> {
    endpoints
        .get_mut(node)
        .filter(|endpoint| (partition as usize) < endpoint.records_paths.len())
        .map(|endpoint| (endpoint, partition as usize))
        .ok_or_else(|| {
            ClientError::ConnectFailed(format!(
                "no node {node} or partition {partition} in the target"
            ))
        })
}

/// Where a node's client listener is, for a connect.
enum Address {
    Ip(SocketAddr),
    /// A host name, resolved at each connect (connects are rare: one per node, plus one
    /// after each broken connection).
    Name(String, u16),
    /// An address that did not parse: no connection is ever made.
    Unusable(String),
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Ip(address) => write!(f, "{address}"),
            Address::Name(host, port) => write!(f, "{host}:{port}"),
            Address::Unusable(why) => write!(f, "unusable address ({why})"),
        }
    }
}

/// One node as a client talks to it: its address, its request targets (built once:
/// building and parsing a URL per request is a visible share of the recording path's
/// cost), and the kept-alive connection to it.
struct Endpoint {
    /// The broker id of the node.
    broker_id: u32,
    address: Address,
    /// The `Host` header: the URL's host and port.
    host: String,
    /// Origin-form request targets: `/v1/metadata`, and per partition its records.
    metadata_path: String,
    records_paths: Vec<String>,
    /// `None` until the first request, and after one that did not end with a complete
    /// answer on a connection that stays open (the next request connects again).
    connection: Option<TcpStream>,
}

impl Endpoint {
    fn new(target: &Target, node: &ClientNode, index: usize) -> Result<Endpoint, ClientSetupError> {
        let parse = |url: String| {
            reqwest::Url::parse(&url)
                .map_err(|e| ClientSetupError(format!("bad client URL {url:?}: {e}")))
        };
        let base = node.url.trim_end_matches('/');
        let name = target.node_name(index);
        if !base.starts_with("http://") {
            return Err(ClientSetupError(format!(
                "client URL {:?} of {name} is not http://host:port",
                node.url
            )));
        }
        let metadata = parse(format!("{base}/v1/metadata"))?;
        let bad = |what: &str| ClientSetupError(format!("client URL {base:?} has no {what}"));
        let host = metadata.host_str().ok_or_else(|| bad("host"))?;
        let port = metadata
            .port_or_known_default()
            .ok_or_else(|| bad("port"))?;
        let bare_host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let address = match bare_host.parse::<IpAddr>() {
            Ok(ip) => Address::Ip(SocketAddr::new(ip, port)),
            Err(_) => Address::Name(bare_host.to_string(), port),
        };
        let authority = match metadata.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_string(),
        };
        // The parsed URL's path (and query), as reqwest would send it.
        let origin_form = |url: &reqwest::Url| {
            let mut path = url.path().to_string();
            if let Some(query) = url.query() {
                path.push('?');
                path.push_str(query);
            }
            path
        };
        let metadata_path = origin_form(&metadata);
        let records_paths = (0..target.partitions)
            .map(|p| {
                let url = format!("{base}/v1/topics/{}/partitions/{p}/records", target.topic);
                Ok(origin_form(&parse(url)?))
            })
            .collect::<Result<Vec<_>, ClientSetupError>>()?;
        Ok(Endpoint {
            broker_id: node.broker_id,
            address,
            host: authority,
            metadata_path,
            records_paths,
            connection: None,
        })
    }

    /// An endpoint no request reaches (its address did not parse).
    fn unusable(error: ClientSetupError) -> Endpoint {
        Endpoint {
            broker_id: 0,
            address: Address::Unusable(error.0),
            host: String::new(),
            metadata_path: String::new(),
            records_paths: Vec::new(),
            connection: None,
        }
    }

    /// Sends the request in `io` and reads the whole answer within `timeout`, on the
    /// kept-alive connection if there is one. Sent at most once, as recorded: the only
    /// request sent again (on a new connection) is one that not a byte of was written
    /// on the kept connection, found closed by the node while it was idle.
    async fn exchange<'a>(
        &mut self,
        io: &'a mut Buffers,
        timeout: Duration,
    ) -> Result<Answer<'a>, ClientError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut kept = self.connection.take().filter(is_idle);
        loop {
            let reused = kept.is_some();
            let mut stream = match kept.take() {
                Some(stream) => stream,
                None => self.connect(deadline).await?,
            };
            let round_trip = round_trip(&mut stream, &io.request, &mut io.answer);
            match tokio::time::timeout_at(deadline, round_trip).await {
                // The connection is dropped with the request in flight: it cannot be used
                // again.
                Err(_) => return Err(ClientError::Timeout),
                Ok(Ok(framing)) => {
                    if framing.keep_alive {
                        self.connection = Some(stream);
                    }
                    return Ok(io.answer.answer(&framing));
                }
                Ok(Err(Failure::NotSent(_))) if reused => {}
                Ok(Err(Failure::NotSent(detail) | Failure::Failed(detail))) => {
                    return Err(ClientError::Connection(detail))
                }
            }
        }
    }

    /// A new connection, made within [`CONNECT_TIMEOUT`] and `deadline`. Every failure
    /// here is [`ClientError::ConnectFailed`]: nothing was sent on it.
    async fn connect(&self, deadline: tokio::time::Instant) -> Result<TcpStream, ClientError> {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let limit = CONNECT_TIMEOUT.min(left);
        let connecting = async {
            match &self.address {
                Address::Ip(address) => TcpStream::connect(address).await,
                Address::Name(host, port) => TcpStream::connect((host.as_str(), *port)).await,
                Address::Unusable(why) => Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    why.clone(),
                )),
            }
        };
        match tokio::time::timeout(limit, connecting).await {
            Ok(Ok(stream)) => {
                // Requests are whole when written: Nagle's algorithm would only delay them.
                let _ = stream.set_nodelay(true);
                Ok(stream)
            }
            Ok(Err(e)) => Err(ClientError::ConnectFailed(format!(
                "{}: {}",
                self.address,
                error_chain(&e)
            ))),
            Err(_) => Err(ClientError::ConnectFailed(format!(
                "{}: no connection within {} ms",
                self.address,
                limit.as_millis()
            ))),
        }
    }
}

impl Answer<'_> {
    /// A 2xx answer as `T`, or an error answer as the broker's error body.
    fn parse<T: serde::de::DeserializeOwned>(self) -> Result<T, Refusal> {
        let Answer { status, body } = self;
        if (200..300).contains(&status) {
            return serde_json::from_slice(body).map_err(|e| {
                Refusal::from(ClientError::BadResponse {
                    status,
                    detail: e.to_string(),
                })
            });
        }
        match serde_json::from_slice::<ErrorBody>(body) {
            Ok(error) => Err(Refusal {
                error: ClientError::Answered {
                    status,
                    definite: DEFINITE_PRODUCE_ERRORS.contains(&error.error.as_str()),
                    code: error.error,
                    message: error.message,
                },
                leader: error.leader,
            }),
            Err(_) => Err(ClientError::BadResponse {
                status,
                detail: String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
            }
            .into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use history::Outcome;
    use serde_json::json;
    use sut::ReadRecord;

    /// The error our client makes of a broker's error answer with `code`.
    fn broker(code: &str) -> ClientError {
        let body = format!(r#"{{"error": "{code}", "message": ""}}"#);
        match (Answer {
            status: 503,
            body: body.as_bytes(),
        })
        .parse::<Value>()
        {
            Err(refusal) => refusal.error,
            Ok(value) => panic!("an error answer parsed as {value}"),
        }
    }

    /// What a scripted node does with each request it reads, in order over all its
    /// connections.
    enum Step {
        Answer(String),
        /// The answer in pieces, a little apart.
        Pieces(Vec<&'static str>),
        /// Answers, then closes the connection.
        AnswerAndClose(String),
        /// Closes the connection without answering.
        Close,
        /// Never answers, and keeps the connection open.
        Hang,
    }

    /// A node on 127.0.0.1 that reads whole requests and plays `steps` to them; counts
    /// the connections it accepted and keeps the requests' text.
    struct ScriptedNode {
        address: SocketAddr,
        accepted: Arc<std::sync::atomic::AtomicUsize>,
        requests: Arc<std::sync::Mutex<Vec<String>>>,
    }

    fn read_request(stream: &mut std::net::TcpStream) -> Option<String> {
        use std::io::Read;
        let mut data = Vec::new();
        let mut buffer = [0u8; 4096];
        loop {
            if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&data[..end]).to_lowercase();
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                    .and_then(|l| l.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                if data.len() >= end + 4 + length {
                    return Some(String::from_utf8_lossy(&data).into_owned());
                }
            }
            match stream.read(&mut buffer) {
                Ok(0) | Err(_) => return None,
                Ok(n) => data.extend_from_slice(&buffer[..n]),
            }
        }
    }

    fn scripted_node(steps: Vec<Step>) -> ScriptedNode {
        use std::io::Write as _;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let node = ScriptedNode {
            address,
            accepted: Arc::default(),
            requests: Arc::default(),
        };
        let (accepted, requests) = (Arc::clone(&node.accepted), Arc::clone(&node.requests));
        std::thread::spawn(move || {
            let mut steps = steps.into_iter();
            // Connections left unanswered, open.
            let mut held = Vec::new();
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                accepted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut hung = false;
                while let Some(request) = read_request(&mut stream) {
                    requests.lock().unwrap().push(request);
                    match steps.next() {
                        None => return,
                        Some(Step::Answer(text)) => {
                            let _ = stream.write_all(text.as_bytes());
                        }
                        Some(Step::Pieces(pieces)) => {
                            for piece in pieces {
                                let _ = stream.write_all(piece.as_bytes());
                                let _ = stream.flush();
                                std::thread::sleep(Duration::from_millis(15));
                            }
                        }
                        Some(Step::AnswerAndClose(text)) => {
                            let _ = stream.write_all(text.as_bytes());
                            break;
                        }
                        Some(Step::Close) => break,
                        Some(Step::Hang) => {
                            hung = true;
                            break;
                        }
                    }
                }
                if hung {
                    held.push(stream);
                }
            }
        });
        node
    }

    fn client_of(address: SocketAddr, timeout: Duration) -> BrokerClient {
        let node = ClientNode {
            broker_id: 1,
            url: format!("http://{address}/"),
        };
        let target = Target::new(vec!["n1".into()], "t", 2).unwrap();
        BrokerConnector::new(target, vec![node])
            .unwrap()
            .client(timeout, 0)
    }

    #[test]
    fn a_connector_refuses_addresses_it_cannot_use() {
        let target = Target::new(vec!["n1".into(), "n2".into()], "t", 1).unwrap();
        let node = |id: u32, url: &str| ClientNode {
            broker_id: id,
            url: url.into(),
        };
        let ok = [node(1, "http://127.0.0.1:1"), node(2, "http://a:1/")];
        assert!(BrokerConnector::new(target.clone(), ok.to_vec()).is_ok());
        let error = |nodes: Vec<ClientNode>| match BrokerConnector::new(target.clone(), nodes) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("accepted"),
        };
        assert!(error(vec![node(1, "http://a:1")]).contains("1 client addresses for 2"));
        let same_id = vec![node(1, "http://a:1"), node(1, "http://b:1")];
        assert!(error(same_id).contains("broker id 1"));
        let not_http = vec![node(1, "http://a:1"), node(2, "a:1")];
        assert!(error(not_http).contains("http://"));
    }

    /// An answer with `status` (and its reason), `headers` (each ending in CRLF) and
    /// `body`, its length given.
    fn answer(status: &str, headers: &str, body: &str) -> String {
        format!(
            "HTTP/1.1 {status}\r\n{headers}content-length: {}\r\n\r\n{body}",
            body.len()
        )
    }

    fn offset_7() -> String {
        answer(
            "200 OK",
            "content-type: application/json\r\n",
            r#"{"offset":7}"#,
        )
    }

    #[tokio::test]
    async fn requests_share_one_kept_connection_and_are_what_the_broker_expects() {
        let node = scripted_node(vec![
            Step::Answer(offset_7()),
            Step::Pieces(vec![
                "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n",
                "\r\n28\r\n{\"records\": [{\"offset\": 3, \"valu",
                "e\": 30}]\r\n12\r\n, \"high_watermark\"\r\n",
                "4\r\n: 4}\r\n0\r\n\r\n",
            ]),
            Step::Answer(answer(
                "200 OK",
                "",
                r#"{"topics": [{"topic": "t", "partitions": [{"partition": 1, "leader": 1}]}]}"#,
            )),
        ]);
        let mut client = client_of(node.address, Duration::from_secs(2));
        assert_eq!(client.produce(0, 1, &json!(17), Acks::All).await, Ok(7));
        let deadline = Instant::now() + Duration::from_secs(2);
        let read = ReadRequest {
            partition: 1,
            offset: Some(3),
            max: 10,
            consistency: Consistency::Linearizable,
        };
        let reply = client.read(0, read, deadline).await.unwrap();
        assert_eq!(
            reply.records,
            vec![ReadRecord {
                offset: 3,
                value: json!(30)
            }]
        );
        assert_eq!(reply.high_watermark, 4);
        assert!(client.refresh_metadata().await);
        assert_eq!(client.route(1).await, 0);
        assert_eq!(node.accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
        let requests = node.requests.lock().unwrap().clone();
        let host = format!("host: {}", node.address);
        let produce = &requests[0];
        assert!(produce.starts_with("POST /v1/topics/t/partitions/1/records HTTP/1.1\r\n"));
        assert!(produce.contains(&host) && produce.contains("content-type: application/json"));
        let body = produce.split("\r\n\r\n").nth(1).unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(body).unwrap(),
            json!({"value": 17, "acks": "all", "timeout_ms": 1600})
        );
        assert!(requests[1].starts_with(
            "GET /v1/topics/t/partitions/1/records?max=10&offset=3&consistency=linearizable HTTP/1.1\r\n"
        ));
        assert!(requests[2].starts_with("GET /v1/metadata HTTP/1.1\r\n"));
        assert!(requests[1].contains(&host) && requests[2].contains(&host));
    }

    #[tokio::test]
    async fn a_connection_the_node_closed_is_replaced_without_an_error() {
        let node = scripted_node(vec![
            Step::AnswerAndClose(offset_7()),
            Step::Answer(offset_7()),
            Step::Answer(answer("200 OK", "connection: close\r\n", r#"{"offset":7}"#)),
            Step::Answer(offset_7()),
        ]);
        let mut client = client_of(node.address, Duration::from_secs(2));
        for _ in 0..2 {
            assert_eq!(client.produce(0, 0, &json!(1), Acks::All).await, Ok(7));
            // Time for the node's close to arrive.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(client.produce(0, 0, &json!(1), Acks::All).await, Ok(7));
        assert_eq!(client.produce(0, 0, &json!(1), Acks::All).await, Ok(7));
        assert_eq!(node.accepted.load(std::sync::atomic::Ordering::SeqCst), 3);
        assert_eq!(node.requests.lock().unwrap().len(), 4);
    }

    #[tokio::test]
    async fn failures_are_classified_by_what_may_have_been_sent() {
        let node = scripted_node(vec![
            Step::Close,
            Step::Hang,
            Step::Answer(answer(
                "421 Misdirected Request",
                "",
                r#"{"error": "not_leader", "message": "not me", "leader": 1}"#,
            )),
            Step::Answer(answer("500 Internal Server Error", "", "oops")),
            Step::Answer(answer("200 OK", "", r#"{"offs"#)),
            // Twelve bytes promised, five sent.
            Step::AnswerAndClose("HTTP/1.1 200 OK\r\ncontent-length: 12\r\n\r\n{\"off".into()),
        ]);
        let mut client = client_of(node.address, Duration::from_millis(300));
        let closed = client
            .produce(0, 0, &json!(1), Acks::All)
            .await
            .unwrap_err();
        assert!(matches!(closed, ClientError::Connection(_)), "{closed:?}");
        assert_eq!(closed.write_outcome(), Outcome::Info);
        assert_eq!(
            client.produce(0, 0, &json!(2), Acks::All).await,
            Err(ClientError::Timeout)
        );
        let not_leader = client
            .produce(0, 0, &json!(3), Acks::All)
            .await
            .unwrap_err();
        assert_eq!(not_leader.code(), "not_leader");
        assert_eq!(not_leader.write_outcome(), Outcome::Fail);
        let bare_500 = client
            .produce(0, 0, &json!(4), Acks::All)
            .await
            .unwrap_err();
        assert_eq!(bare_500.code(), "http_500");
        let unreadable = client
            .produce(0, 0, &json!(5), Acks::All)
            .await
            .unwrap_err();
        assert_eq!(unreadable.code(), "bad_response");
        // The answer stops short and the node goes away: may have happened.
        let cut = client
            .produce(0, 0, &json!(6), Acks::All)
            .await
            .unwrap_err();
        assert!(matches!(cut, ClientError::Connection(_)), "{cut:?}");
        // Out of the target: nothing sent.
        let nowhere = client
            .produce(5, 0, &json!(7), Acks::All)
            .await
            .unwrap_err();
        assert_eq!(nowhere.write_outcome(), Outcome::Fail);
        // Nothing listens: nothing sent.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let mut refused = client_of(port, Duration::from_millis(300));
        let error = refused
            .produce(0, 0, &json!(8), Acks::All)
            .await
            .unwrap_err();
        assert!(matches!(error, ClientError::ConnectFailed(_)), "{error:?}");
        assert_eq!(error.code(), "connect_failed");
        assert_eq!(error.write_outcome(), Outcome::Fail);
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
