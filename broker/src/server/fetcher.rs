//! The follower side of replication: one fetcher per leader broker, as Kafka's
//! `ReplicaFetcherThread`. Each has its own HTTP client (so its own connection pool to
//! that leader) and sends the requests its followers' replicas ask for, each partition's
//! concurrently, then hands every answer back to the replica that asked, with the request
//! it answers (the core uses it to drop stale answers).
//!
//! A request that gets no protocol answer (connection refused, timeout, a 5xx) is not
//! reported to the core: the core re-sends it when its request timeout expires
//! (see [`super::partitions::replica_config`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::mpsc;

use super::failpoints;
use super::partitions::Partition;
use super::wire::{
    self, ErrorBody, FetchBody, FetchReply, ListOffsetsBody, ListOffsetsReply,
    OffsetsForLeaderEpochBody, OffsetsForLeaderEpochReply,
};
use super::Node;
use crate::replica::{
    BrokerId, FetchData, FetchRequest, ListOffsetsRequest, OffsetsForLeaderEpochRequest,
    ReplicationError,
};

/// A request a follower replica wants sent to its leader.
#[derive(Debug, Clone)]
pub enum Outgoing {
    Fetch(FetchRequest),
    OffsetsForLeaderEpoch(OffsetsForLeaderEpochRequest),
    ListOffsets(ListOffsetsRequest),
}

type Queue = mpsc::UnboundedSender<(Arc<Partition>, Outgoing)>;

/// The fetchers of this broker, by leader, started on first use.
#[derive(Default)]
pub struct Fetchers {
    by_leader: Mutex<HashMap<BrokerId, Queue>>,
}

impl Fetchers {
    pub(crate) fn send(
        &self,
        node: &Arc<Node>,
        leader: BrokerId,
        partition: &Arc<Partition>,
        outgoing: Outgoing,
    ) {
        let mut by_leader = self
            .by_leader
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let queue = by_leader.entry(leader).or_insert_with(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(run_fetcher(node.clone(), leader, rx));
            tx
        });
        if queue.send((partition.clone(), outgoing)).is_err() {
            // The fetcher stopped (shutdown); nothing is sent any more.
            tracing::debug!(leader, "fetcher gone; request dropped");
        }
    }
}

async fn run_fetcher(
    node: Arc<Node>,
    leader: BrokerId,
    mut queue: mpsc::UnboundedReceiver<(Arc<Partition>, Outgoing)>,
) {
    let me = node.broker_id();
    let Some(address) = node
        .config
        .brokers
        .iter()
        .find(|peer| peer.id == leader)
        .map(|peer| peer.replication)
    else {
        tracing::error!(
            broker = me,
            leader,
            "leader is not among the configured brokers"
        );
        return;
    };
    let timeout = Duration::from_millis(node.config.replica_fetch_wait_max_ms + 1_000);
    let client = match reqwest::Client::builder()
        .no_proxy()
        .timeout(timeout)
        .pool_idle_timeout(crate::server::CLIENT_POOL_IDLE)
        .build()
    {
        Ok(client) => client,
        Err(error) => {
            tracing::error!(broker = me, leader, %error, "cannot build the fetcher's HTTP client");
            return;
        }
    };
    let fetcher = Arc::new(Fetcher {
        node: node.clone(),
        client,
        signer: crate::peer_gate::signer(&node.config),
        base: format!("http://{address}/v1/replication"),
        leader,
    });
    tracing::info!(broker = me, leader, %address, "fetcher started");
    let stopping = node.stopping();
    tokio::pin!(stopping);
    loop {
        tokio::select! {
            _ = &mut stopping => return,
            next = queue.recv() => {
                let Some((partition, outgoing)) = next else { return };
                let fetcher = fetcher.clone();
                let stopping = node.stopping();
                tokio::spawn(async move {
                    tokio::select! {
                        _ = stopping => {}
                        _ = fetcher.exchange(partition, outgoing) => {}
                    }
                });
            }
        }
    }
}

struct Fetcher {
    node: Arc<Node>,
    client: reqwest::Client,
    /// Signs each request with the cluster secret, if any.
    signer: peer_auth::Signer,
    base: String,
    leader: BrokerId,
}

/// What came back for one request.
enum Answer<T> {
    /// A protocol answer, success or error, for the core.
    Protocol(Result<T, ReplicationError>),
    /// Nothing usable: the core re-sends on its timer.
    Lost,
}

impl Fetcher {
    async fn exchange(&self, partition: Arc<Partition>, outgoing: Outgoing) {
        let me = self.node.broker_id();
        let tp = &partition.tp;
        let now = || self.node.now_ms();
        let effects = match outgoing {
            Outgoing::Fetch(request) => {
                let body = FetchBody {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    replica_id: request.replica_id,
                    fetch_offset: request.fetch_offset,
                    current_leader_epoch: request.current_leader_epoch,
                    max_records: request.max_records,
                };
                let answer = self.call::<_, FetchReply>("fetch", &body).await;
                let Answer::Protocol(response) = answer else {
                    return;
                };
                if failpoints::hit(failpoints::FOLLOWER_FETCH_RESPONSE, me)
                    .await
                    .is_err()
                {
                    return;
                }
                let response = response.map(FetchReply::into_data);
                partition.with(|r| r.on_fetch_response(&request, response, now()))
            }
            Outgoing::OffsetsForLeaderEpoch(request) => {
                if failpoints::hit(failpoints::BEFORE_OFFSETS_FOR_LEADER_EPOCH, me)
                    .await
                    .is_err()
                {
                    return;
                }
                let body = OffsetsForLeaderEpochBody {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    replica_id: request.replica_id,
                    requested_epoch: request.requested_epoch,
                    current_leader_epoch: request.current_leader_epoch,
                };
                let answer = self
                    .call::<_, OffsetsForLeaderEpochReply>("offsets-for-leader-epoch", &body)
                    .await;
                let Answer::Protocol(response) = answer else {
                    return;
                };
                if failpoints::hit(failpoints::AFTER_OFFSETS_FOR_LEADER_EPOCH, me)
                    .await
                    .is_err()
                {
                    return;
                }
                let response = response.map(OffsetsForLeaderEpochReply::into_end_offset);
                partition
                    .with(|r| r.on_offsets_for_leader_epoch_response(&request, response, now()))
            }
            Outgoing::ListOffsets(request) => {
                if failpoints::hit(failpoints::BEFORE_LIST_OFFSETS, me)
                    .await
                    .is_err()
                {
                    return;
                }
                let body = ListOffsetsBody {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    replica_id: request.replica_id,
                    current_leader_epoch: request.current_leader_epoch,
                };
                let answer = self
                    .call::<_, ListOffsetsReply>("list-offsets", &body)
                    .await;
                let Answer::Protocol(response) = answer else {
                    return;
                };
                let response = response.map(ListOffsetsReply::into_offsets);
                partition.with(|r| r.on_list_offsets_response(&request, response, now()))
            }
        };
        match effects {
            Ok(effects) => self.node.apply(&partition, effects),
            Err(error) => {
                tracing::debug!(broker = me, partition = ?partition.tp, %error, "answer not applied")
            }
        }
    }

    async fn call<B: Serialize, R: DeserializeOwned>(&self, path: &str, body: &B) -> Answer<R> {
        let me = self.node.broker_id();
        let url = format!("{}/{path}", self.base);
        let request = self.client.post(&url).json(body);
        let response = match self.signer.send(&self.client, request).await {
            Ok(response) => response,
            Err(error) => {
                tracing::debug!(broker = me, leader = self.leader, %error, "{path} request failed");
                return Answer::Lost;
            }
        };
        let status = response.status();
        let bytes = match response.bytes().await {
            Ok(bytes) => bytes,
            Err(error) => {
                tracing::debug!(broker = me, leader = self.leader, %error, "{path} response lost");
                return Answer::Lost;
            }
        };
        if status.is_success() {
            return match serde_json::from_slice(&bytes) {
                Ok(reply) => Answer::Protocol(Ok(reply)),
                Err(error) => {
                    tracing::warn!(broker = me, leader = self.leader, %error, "malformed {path} response");
                    Answer::Lost
                }
            };
        }
        let code = serde_json::from_slice::<ErrorBody>(&bytes)
            .ok()
            .and_then(|body| wire::replication_error_from_code(&body.error));
        match code {
            Some(error) => Answer::Protocol(Err(error)),
            None => {
                tracing::debug!(broker = me, leader = self.leader, %status, "{path} failed");
                Answer::Lost
            }
        }
    }
}

/// The leader's answer to a fetch, on the wire (kept here beside its reverse).
pub(crate) fn fetch_reply(data: FetchData) -> Option<FetchReply> {
    Some(FetchReply {
        records: data
            .records
            .into_iter()
            .map(wire::WireRecord::from_record)
            .collect::<Option<Vec<_>>>()?,
        high_watermark: data.high_watermark,
        log_start_offset: data.log_start_offset,
    })
}
