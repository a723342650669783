//! [`RaftNode`]: one node's Raft handle and what its clients ask of it. A proposal or a
//! read index is served by the leader; on any other node it is forwarded to the leader's
//! metadata listener, following "not leader" answers and waiting (briefly, between
//! tries) while no leader is known.
//!
//! A proposal is retried only when it certainly was not appended: no leader known, a
//! "not leader" answer, or a connection that could not be opened. Any other failure after
//! the command left this node is indeterminate and returned as
//! [`QuorumError::Unavailable`]. A read index has no side effect and is retried on every
//! failure until the caller's deadline ([`crate::quorum::MetadataClient`] bounds every
//! call).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{CheckIsLeaderError, ClientWriteError, Fatal, RaftError};

use super::api::{ProposeAnswer, ReadIndexAnswer, PROPOSE_PATH, READ_INDEX_PATH};
use super::types::{NodeId, Raft};
use crate::metadata::{Command, LogIndex, Reply};
use crate::quorum::QuorumError;

/// Follows at most this many "not leader" answers in a row without pausing, so that two
/// nodes naming each other cannot spin.
const MAX_HOPS_WITHOUT_PAUSE: u32 = 3;

/// One node of the quorum as its API handlers and its client backend use it.
pub(crate) struct RaftNode {
    pub(super) id: NodeId,
    pub(super) raft: Raft,
    addresses: Arc<BTreeMap<NodeId, SocketAddr>>,
    http: reqwest::Client,
    /// Signs the calls forwarded to the leader with the cluster secret, if any.
    signer: peer_auth::Signer,
    stopped: AtomicBool,
    /// Bounds the leader's wait for a proposal to commit or its lead to be confirmed.
    call_timeout: Duration,
    /// The pause between two tries while no leader is known.
    retry_pause: Duration,
}

/// The outcome of one try.
enum Attempt<T> {
    Done(Result<T, QuorumError>),
    /// Not done, certainly: try again at the named leader, or after a pause.
    Redirect(Option<NodeId>),
}

fn fatal_error(fatal: Fatal<NodeId>) -> QuorumError {
    match fatal {
        Fatal::Stopped => QuorumError::Stopped,
        other => QuorumError::Unavailable(format!("the Raft node failed: {other}")),
    }
}

impl RaftNode {
    pub(super) fn new(
        id: NodeId,
        raft: Raft,
        addresses: Arc<BTreeMap<NodeId, SocketAddr>>,
        http: reqwest::Client,
        signer: peer_auth::Signer,
        call_timeout: Duration,
        retry_pause: Duration,
    ) -> RaftNode {
        RaftNode {
            id,
            raft,
            addresses,
            http,
            signer,
            stopped: AtomicBool::new(false),
            call_timeout,
            retry_pause,
        }
    }

    /// Whether `id` is one of this cluster's brokers: configured, or in the quorum's
    /// current membership.
    pub(super) fn is_member(&self, id: NodeId) -> bool {
        self.addresses.contains_key(&id)
            || self
                .raft
                .metrics()
                .borrow()
                .membership_config
                .membership()
                .get_node(&id)
                .is_some()
    }

    pub(super) fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
    }

    pub(super) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// The leader as this node's Raft metrics know it; `None` once stopped.
    pub(super) fn leader(&self) -> Option<NodeId> {
        if self.is_stopped() {
            return None;
        }
        self.raft.metrics().borrow().current_leader
    }

    /// Where `id`'s metadata listener is: the configuration, or its membership entry.
    fn address(&self, id: NodeId) -> Option<String> {
        if let Some(address) = self.addresses.get(&id) {
            return Some(address.to_string());
        }
        self.raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .get_node(&id)
            .map(|node| node.addr.clone())
    }

    /// Replicates `command` through the leader and returns its reply once applied.
    pub(super) async fn propose(&self, command: Command) -> Result<Reply, QuorumError> {
        self.with_leader(|target| {
            let command = command.clone();
            async move {
                if target == self.id {
                    self.propose_local(command).await
                } else {
                    self.propose_remote(target, &command).await
                }
            }
        })
        .await
    }

    /// The leader's commit index, confirmed by a quorum after this call began.
    pub(super) async fn read_index(&self) -> Result<LogIndex, QuorumError> {
        self.with_leader(|target| async move {
            if target == self.id {
                self.read_index_local().await
            } else {
                self.read_index_remote(target).await
            }
        })
        .await
    }

    /// Runs `attempt` at the leader until it is done.
    async fn with_leader<T, F, Fut>(&self, attempt: F) -> Result<T, QuorumError>
    where
        F: Fn(NodeId) -> Fut,
        Fut: std::future::Future<Output = Attempt<T>>,
    {
        let mut hint: Option<NodeId> = None;
        let mut hops = 0;
        loop {
            if self.is_stopped() {
                return Err(QuorumError::Stopped);
            }
            let target = hint.take().or_else(|| self.leader());
            let outcome = match target {
                Some(target) => attempt(target).await,
                None => Attempt::Redirect(None),
            };
            match outcome {
                Attempt::Done(result) => return result,
                Attempt::Redirect(Some(next))
                    if Some(next) != target && hops < MAX_HOPS_WITHOUT_PAUSE =>
                {
                    hops += 1;
                    hint = Some(next);
                }
                Attempt::Redirect(_) => {
                    hops = 0;
                    tokio::time::sleep(self.retry_pause).await;
                }
            }
        }
    }

    async fn propose_local(&self, command: Command) -> Attempt<Reply> {
        match tokio::time::timeout(self.call_timeout, self.raft.client_write(command)).await {
            Err(_) => Attempt::Done(Err(QuorumError::Unavailable(format!(
                "the proposal was not committed within {} ms",
                self.call_timeout.as_millis()
            )))),
            Ok(Ok(response)) => match response.data {
                Some(result) => Attempt::Done(result.outcome.map_err(QuorumError::Store)),
                None => Attempt::Done(Err(QuorumError::Unavailable(format!(
                    "entry {} was applied before, its result is unknown",
                    response.log_id
                )))),
            },
            // Refused before appending, or appended and then truncated: not applied.
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward)))) => {
                Attempt::Redirect(forward.leader_id.filter(|leader| *leader != self.id))
            }
            Ok(Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(error)))) => {
                Attempt::Done(Err(QuorumError::Unavailable(error.to_string())))
            }
            Ok(Err(RaftError::Fatal(fatal))) => Attempt::Done(Err(fatal_error(fatal))),
        }
    }

    async fn propose_remote(&self, target: NodeId, command: &Command) -> Attempt<Reply> {
        let Some(address) = self.address(target) else {
            return Attempt::Done(Err(QuorumError::Unavailable(format!(
                "no metadata address for broker {target}"
            ))));
        };
        let request = self
            .http
            .post(format!("http://{address}{PROPOSE_PATH}"))
            .timeout(self.forward_timeout())
            .json(command);
        let sent = self.signer.send(&self.http, request).await;
        let response = match sent {
            Ok(response) => response,
            // Never reached the leader: certainly not proposed.
            Err(peer_auth::SendError::Http(error)) if error.is_connect() => {
                tracing::debug!(%target, %error, "cannot reach the metadata leader");
                return Attempt::Redirect(None);
            }
            Err(error) => {
                return Attempt::Done(Err(QuorumError::Unavailable(format!(
                    "forwarding to broker {target}: {error}"
                ))))
            }
        };
        let status = response.status();
        if !status.is_success() {
            return Attempt::Done(Err(QuorumError::Unavailable(format!(
                "broker {target} answered HTTP {status}"
            ))));
        }
        match response.json::<ProposeAnswer>().await {
            Ok(ProposeAnswer::Applied(result)) => Attempt::Done(result.map_err(QuorumError::Store)),
            Ok(ProposeAnswer::NotLeader { leader }) => Attempt::Redirect(leader),
            Ok(ProposeAnswer::Unavailable(message)) => {
                Attempt::Done(Err(QuorumError::Unavailable(message)))
            }
            Err(error) => Attempt::Done(Err(QuorumError::Unavailable(format!(
                "unreadable answer from broker {target}: {error}"
            )))),
        }
    }

    async fn read_index_local(&self) -> Attempt<LogIndex> {
        match tokio::time::timeout(self.call_timeout, self.raft.get_read_log_id()).await {
            Err(_) => Attempt::Done(Err(QuorumError::Unavailable(format!(
                "the lead was not confirmed within {} ms",
                self.call_timeout.as_millis()
            )))),
            Ok(Ok((read_log_id, _))) => Attempt::Done(Ok(read_log_id.map_or(0, |id| id.index))),
            Ok(Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(forward)))) => {
                Attempt::Redirect(forward.leader_id.filter(|leader| *leader != self.id))
            }
            Ok(Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(error)))) => {
                tracing::debug!(%error, "read index: no quorum yet");
                Attempt::Redirect(None)
            }
            Ok(Err(RaftError::Fatal(fatal))) => Attempt::Done(Err(fatal_error(fatal))),
        }
    }

    async fn read_index_remote(&self, target: NodeId) -> Attempt<LogIndex> {
        let Some(address) = self.address(target) else {
            return Attempt::Done(Err(QuorumError::Unavailable(format!(
                "no metadata address for broker {target}"
            ))));
        };
        let answer = async {
            let request = self
                .http
                .post(format!("http://{address}{READ_INDEX_PATH}"))
                .timeout(self.forward_timeout());
            let response = self.signer.send(&self.http, request).await?;
            response
                .error_for_status()
                .map_err(peer_auth::SendError::Http)?
                .json::<ReadIndexAnswer>()
                .await
                .map_err(peer_auth::SendError::Http)
        };
        match answer.await {
            Ok(ReadIndexAnswer::Index(index)) => Attempt::Done(Ok(index)),
            Ok(ReadIndexAnswer::NotLeader { leader }) => Attempt::Redirect(leader),
            // Side-effect free: every failure is retried until the caller's deadline.
            Ok(ReadIndexAnswer::Unavailable(message)) => {
                tracing::debug!(%target, %message, "read index unavailable");
                Attempt::Redirect(None)
            }
            Err(error) => {
                tracing::debug!(%target, %error, "read index request failed");
                Attempt::Redirect(None)
            }
        }
    }

    /// A forwarded call outlives the leader's own bound, so the leader's answer arrives.
    fn forward_timeout(&self) -> Duration {
        self.call_timeout + Duration::from_secs(1)
    }

    /// The propose endpoint: proposes if this node leads, else names the leader.
    pub(super) async fn propose_here(&self, command: Command) -> ProposeAnswer {
        if self.is_stopped() {
            return ProposeAnswer::NotLeader { leader: None };
        }
        match self.propose_local(command).await {
            Attempt::Done(Ok(reply)) => ProposeAnswer::Applied(Ok(reply)),
            Attempt::Done(Err(QuorumError::Store(error))) => ProposeAnswer::Applied(Err(error)),
            Attempt::Done(Err(error)) => ProposeAnswer::Unavailable(error.to_string()),
            Attempt::Redirect(leader) => ProposeAnswer::NotLeader { leader },
        }
    }

    /// The read-index endpoint: confirms the lead if this node leads, else names the
    /// leader.
    pub(super) async fn read_index_here(&self) -> ReadIndexAnswer {
        if self.is_stopped() {
            return ReadIndexAnswer::NotLeader { leader: None };
        }
        match self.read_index_local().await {
            Attempt::Done(Ok(index)) => ReadIndexAnswer::Index(index),
            Attempt::Done(Err(error)) => ReadIndexAnswer::Unavailable(error.to_string()),
            Attempt::Redirect(leader) => ReadIndexAnswer::NotLeader { leader },
        }
    }
}
