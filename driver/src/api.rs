//! The broker's operator API as `sut::Api`: `/v1/metadata`, `/v1/topics`,
//! `/v1/admin/*`, `/v1/debug/*`, over one pooled HTTP client (reqwest: these requests
//! are few, unlike the workers').

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use sut::{
    error_chain, AdminAction, Api, ApiError, BoxFuture, ClusterSecret, Connector, ControllerView,
    DbError, NodeInfo, ReplicaView, Roles, Target, TopicLayout, TopicSpec,
};

use crate::client::{BrokerConnector, ClientNode};
use crate::views::{self, BrokerIds};
use crate::{BrokerDb, CLIENT_PORT};

/// Bounds one read-only request to one broker (metadata, debug views).
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Bounds one debug-view request (`/v1/debug/*`: local reads a live broker answers at
/// once; a scenario polls them, and a cut-off node should cost it little).
const VIEW_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest wait for a connection to a broker.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a reassignment asks the controller to wait for its new replicas (a few
/// seconds of records to copy; past it the assignment stays the union of old and new
/// replicas, and the nemesis's next `reassign` restores it).
const REASSIGN_TIMEOUT: Duration = Duration::from_secs(10);
/// Bounds one admin request to one broker (for a reassignment, on top of its timeout).
/// Short: during faults a broker may forward to a controller it cannot reach, and the
/// nemesis should keep its pace rather than wait out the broker's own 30 s bound; an
/// unanswered request is reported with its error (it may still take effect).
const ADMIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Bounds one admin request over all the brokers tried and all rounds (for a
/// reassignment, on top of its timeout). A controller failover may take longer (the old
/// controller's session must expire first): the harness heals a second time once the
/// cluster serves again, for what the final heal could not do.
const ADMIN_BUDGET: Duration = Duration::from_secs(8);
/// The pause between two rounds of asking every broker.
const ADMIN_RETRY_PAUSE: Duration = Duration::from_millis(500);

/// One broker as the API reaches it.
#[derive(Debug, Clone)]
struct ApiNode {
    name: String,
    broker_id: u32,
    /// `http://address:9092`
    url: String,
}

/// The API of one cluster of our brokers.
pub struct BrokerApi {
    nodes: Vec<ApiNode>,
    ids: BrokerIds,
    http: reqwest::Client,
    /// Signs the failpoint requests as the harness, with the cluster's secret.
    signer: peer_auth::Signer,
}

impl BrokerApi {
    /// The API of `nodes` (node `i` is broker id `i + 1`), signing what needs it with
    /// `secret`.
    pub fn new(nodes: &[NodeInfo], secret: &ClusterSecret) -> Result<BrokerApi, DbError> {
        let nodes: Vec<ApiNode> = nodes
            .iter()
            .enumerate()
            .map(|(i, node)| ApiNode {
                name: node.name.clone(),
                broker_id: BrokerDb::broker_id(i),
                url: format!(
                    "http://{}",
                    std::net::SocketAddr::new(node.address, CLIENT_PORT)
                ),
            })
            .collect();
        let http = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT)
            // The brokers close a connection idle for 60 s; ours go first, so that a
            // request never meets a connection the broker is closing.
            .pool_idle_timeout(std::time::Duration::from_secs(30))
            .build()
            .map_err(|e| DbError::Other(format!("cannot build the HTTP client: {e}")))?;
        Ok(BrokerApi {
            ids: BrokerIds(
                nodes
                    .iter()
                    .map(|n| (n.name.clone(), n.broker_id))
                    .collect(),
            ),
            nodes,
            http,
            signer: peer_auth::Signer::new(Some(secret.clone()), peer_auth::Sender::Harness),
        })
    }

    fn node(&self, name: &str) -> Result<&ApiNode, ApiError> {
        self.nodes
            .iter()
            .find(|n| n.name == name)
            .ok_or_else(|| ApiError(format!("no node {name:?} in this test")))
    }

    fn broker_id(&self, name: &str) -> Result<u32, ApiError> {
        self.node(name).map(|n| n.broker_id)
    }

    /// `GET path` of `node` within [`VIEW_TIMEOUT`], as JSON; `None` for no answer, an
    /// error status or a body that is no JSON.
    async fn get_view(&self, node: &ApiNode, path: &str) -> Option<Value> {
        let response = self
            .http
            .get(format!("{}{path}", node.url))
            .timeout(VIEW_TIMEOUT)
            .send()
            .await
            .ok()?;
        if !response.status().is_success() {
            return None;
        }
        response.json::<Value>().await.ok()
    }

    /// Asks every node of `ask` at once (a linearizable read: any answer is current) and
    /// takes the first answer, so that a paused or cut-off node costs nothing.
    async fn read_roles(&self, ask: &[String]) -> Option<Roles> {
        let mut asked = tokio::task::JoinSet::new();
        for name in ask {
            let Ok(node) = self.node(name) else {
                continue;
            };
            let request = self
                .http
                .get(format!("{}/v1/metadata", node.url))
                .timeout(READ_TIMEOUT);
            asked.spawn(async move {
                let response = request.send().await.ok()?;
                if !response.status().is_success() {
                    return None;
                }
                response.json::<Value>().await.ok()
            });
        }
        while let Some(answer) = asked.join_next().await {
            if let Ok(Some(metadata)) = answer {
                if let Some(roles) = views::roles(&self.ids, &metadata) {
                    return Some(roles);
                }
            }
        }
        None
    }

    fn every_node(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.name.clone()).collect()
    }

    async fn create(&self, topic: &TopicSpec, timeout: Duration) -> Result<(), ApiError> {
        let body = match &topic.layout {
            TopicLayout::Spread {
                partitions,
                replication_factor,
            } => json!({
                "topic": topic.name,
                "partitions": partitions,
                "replication_factor": replication_factor,
            }),
            TopicLayout::Assigned(assignment) => {
                let ids = assignment
                    .iter()
                    .map(|replicas| {
                        replicas
                            .iter()
                            .map(|name| self.broker_id(name))
                            .collect::<Result<Vec<u32>, ApiError>>()
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                json!({"topic": topic.name, "assignment": ids})
            }
        };
        let start = tokio::time::Instant::now();
        let mut last = String::new();
        'create: while start.elapsed() < timeout {
            for node in &self.nodes {
                let sent = self
                    .http
                    .post(format!("{}/v1/topics", node.url))
                    .json(&body)
                    .timeout(READ_TIMEOUT)
                    .send()
                    .await;
                match sent {
                    Ok(response) => {
                        let status = response.status();
                        let answer: Value = response.json().await.unwrap_or(Value::Null);
                        if status.is_success() || answer["error"] == json!("topic_exists") {
                            break 'create;
                        }
                        if status.is_client_error() && answer["error"] != json!("not_controller") {
                            return Err(ApiError(format!(
                                "creating topic {}: {status} {answer}",
                                topic.name
                            )));
                        }
                        last = format!("{status} {answer}");
                    }
                    Err(e) => last = error_chain(&e),
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        while start.elapsed() < timeout {
            if self.served(&topic.name, topic.partitions()).await {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(ApiError(format!(
            "topic {} not served within {timeout:?} {last}",
            topic.name
        )))
    }

    async fn served(&self, topic: &str, partitions: u32) -> bool {
        let Some(roles) = self.read_roles(&self.every_node()).await else {
            return false;
        };
        for p in 0..partitions {
            let Some(leader) = roles.partition(topic, p).and_then(|p| p.leader.clone()) else {
                return false;
            };
            let Ok(node) = self.node(&leader) else {
                return false;
            };
            let url = format!(
                "{}/v1/topics/{topic}/partitions/{p}/records?offset=0&max=1",
                node.url
            );
            match self.http.get(url).timeout(READ_TIMEOUT).send().await {
                Ok(response) if response.status().is_success() => {}
                _ => return false,
            }
        }
        true
    }

    async fn leaders_caught_up(&self, topic: &str, partitions: u32) -> bool {
        let mut views = Vec::new();
        for node in &self.nodes {
            if let Some(replicas) = self.node_replicas(&node.name).await {
                views.extend(replicas);
            }
        }
        (0..partitions).all(|p| {
            views.iter().any(|r| {
                r.topic == topic
                    && r.partition == p
                    && r.leading
                    && r.high_watermark == r.log_end_offset
            })
        })
    }

    async fn node_replicas(&self, name: &str) -> Option<Vec<ReplicaView>> {
        let node = self.node(name).ok()?;
        let answer = self.get_view(node, "/v1/debug/replicas").await?;
        views::replicas(&self.ids, &answer)
    }

    async fn node_controller(&self, name: &str) -> Option<ControllerView> {
        let node = self.node(name).ok()?;
        let answer = self.get_view(node, "/v1/debug/controller").await?;
        views::controller_view(&answer)
    }

    async fn node_hits(&self, name: &str) -> Option<BTreeMap<String, u64>> {
        let node = self.node(name).ok()?;
        let answer = self.get_view(node, "/v1/debug/failpoints").await?;
        views::failpoint_hits(&answer)
    }

    /// The admin request's path and body, nodes as broker ids.
    fn admin_request(&self, action: &AdminAction) -> Result<(&'static str, Value), ApiError> {
        Ok(match action {
            AdminAction::TransferLeader {
                topic,
                partition,
                to,
            } => (
                "/v1/admin/transfer-leader",
                json!({"topic": topic, "partition": partition, "leader": self.broker_id(to)?}),
            ),
            AdminAction::ElectPreferred => ("/v1/admin/elect-preferred", json!({})),
            AdminAction::Reassign {
                topic,
                partition,
                replicas,
            } => {
                let ids = replicas
                    .iter()
                    .map(|node| self.broker_id(node))
                    .collect::<Result<Vec<u32>, ApiError>>()?;
                (
                    "/v1/admin/reassign",
                    json!({
                        "topic": topic,
                        "partition": partition,
                        "replicas": ids,
                        "timeout_ms": REASSIGN_TIMEOUT.as_millis() as u64,
                    }),
                )
            }
        })
    }

    /// POSTs the admin request to the first node of `ask` that takes it (a broker
    /// forwards admin requests to the controller). A node that cannot be reached, or
    /// answers 503 (it knows no controller to forward to, cannot reach it, or is the
    /// controller-elect not yet in charge: a controller failover), is passed over for the
    /// next; when every node was passed over, all are asked again after a short pause,
    /// until [`ADMIN_BUDGET`] is spent. Any other answer is the result.
    async fn post_admin(&self, action: &AdminAction, ask: &[String]) -> Result<Value, ApiError> {
        let (path, body) = self.admin_request(action)?;
        let extra = match action {
            AdminAction::Reassign { .. } => REASSIGN_TIMEOUT,
            _ => Duration::ZERO,
        };
        let deadline = tokio::time::Instant::now() + ADMIN_BUDGET + extra;
        let mut rounds = 0u32;
        loop {
            rounds += 1;
            let mut passed_over = Vec::new();
            for name in ask {
                let node = self.node(name)?;
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                if left.is_zero() {
                    passed_over.push(format!("{name}: not asked (out of time)"));
                    continue;
                }
                let sent = self
                    .http
                    .post(format!("{}{path}", node.url))
                    .json(&body)
                    .timeout(left.min(ADMIN_TIMEOUT + extra))
                    .send()
                    .await;
                let response = match sent {
                    Ok(response) => response,
                    Err(e) => {
                        passed_over.push(format!("{name}: {}", error_chain(&e)));
                        continue;
                    }
                };
                let status = response.status();
                let text = response.text().await.unwrap_or_default();
                if status.is_success() {
                    return serde_json::from_str(&text).map_err(|e| {
                        ApiError(format!(
                            "{name} answered {path} with bad JSON ({e}): {text}"
                        ))
                    });
                }
                if status == reqwest::StatusCode::SERVICE_UNAVAILABLE {
                    passed_over.push(format!("{name}: {status} {text}"));
                    continue;
                }
                return Err(ApiError(format!("{name}: {status} {text}")));
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left < ADMIN_RETRY_PAUSE {
                return Err(ApiError(format!(
                    "no node took {path} ({rounds} rounds); last round: {}",
                    passed_over.join("; ")
                )));
            }
            tokio::time::sleep(ADMIN_RETRY_PAUSE).await;
        }
    }

    /// `PUT /v1/debug/failpoints/{point}` with the actions, or `DELETE` to release it, on
    /// `node`'s broker; its JSON answer.
    async fn set_failpoint(
        &self,
        name: &str,
        point: &str,
        actions: Option<&str>,
    ) -> Result<Value, ApiError> {
        let url = format!("{}/v1/debug/failpoints/{point}", self.node(name)?.url);
        let request = match actions {
            Some(actions) => self.http.put(url).json(&json!({ "actions": actions })),
            None => self.http.delete(url),
        };
        let response = self
            .signer
            .send(&self.http, request.timeout(ADMIN_TIMEOUT))
            .await
            .map_err(|e| match e {
                peer_auth::SendError::Http(e) => ApiError(format!("{name}: {}", error_chain(&e))),
                other => ApiError(format!("{name}: {other}")),
            })?;
        let status = response.status();
        let answer: Value = response.json().await.unwrap_or(Value::Null);
        if status.is_success() {
            Ok(answer)
        } else {
            Err(ApiError(format!("{name} answered {status}: {answer}")))
        }
    }
}

impl Api for BrokerApi {
    fn roles<'a>(&'a self, ask: &'a [String]) -> BoxFuture<'a, Option<Roles>> {
        Box::pin(self.read_roles(ask))
    }

    fn answers<'a>(&'a self, node: &'a str) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            let Ok(node) = self.node(node) else {
                return false;
            };
            let url = format!("{}/v1/metadata?consistency=local", node.url);
            let sent = self.http.get(url).timeout(READ_TIMEOUT).send().await;
            matches!(sent, Ok(r) if r.status().is_success())
        })
    }

    fn create_topic<'a>(
        &'a self,
        topic: &'a TopicSpec,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        Box::pin(self.create(topic, timeout))
    }

    fn topic_served<'a>(&'a self, topic: &'a str, partitions: u32) -> BoxFuture<'a, bool> {
        Box::pin(self.served(topic, partitions))
    }

    fn caught_up<'a>(&'a self, topic: &'a str, partitions: u32) -> BoxFuture<'a, bool> {
        Box::pin(self.leaders_caught_up(topic, partitions))
    }

    fn admin<'a>(
        &'a self,
        action: &'a AdminAction,
        ask: &'a [String],
    ) -> BoxFuture<'a, Result<Value, ApiError>> {
        Box::pin(self.post_admin(action, ask))
    }

    fn failpoint<'a>(
        &'a self,
        node: &'a str,
        point: &'a str,
        actions: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Value, ApiError>> {
        Box::pin(self.set_failpoint(node, point, actions))
    }

    fn replicas<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Option<Vec<ReplicaView>>> {
        Box::pin(self.node_replicas(node))
    }

    fn failpoint_hits<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Option<BTreeMap<String, u64>>> {
        Box::pin(self.node_hits(node))
    }

    fn controller_view<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Option<ControllerView>> {
        Box::pin(self.node_controller(node))
    }

    fn connector(&self, target: &Target) -> Result<Arc<dyn Connector>, ApiError> {
        let nodes = target
            .nodes
            .iter()
            .map(|name| {
                self.node(name).map(|n| ClientNode {
                    broker_id: n.broker_id,
                    url: n.url.clone(),
                })
            })
            .collect::<Result<Vec<_>, ApiError>>()?;
        let connector =
            BrokerConnector::new(target.clone(), nodes).map_err(|e| ApiError(e.to_string()))?;
        Ok(Arc::new(connector))
    }
}
