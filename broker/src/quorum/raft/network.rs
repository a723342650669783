//! Raft RPCs to the other nodes ([`Network`], openraft's `RaftNetworkFactory`): JSON over
//! HTTP to each node's metadata listener, at the paths [`super::api`] serves. Every call
//! is bounded by the timeout openraft gives it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{Backoff, RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::api::{APPEND_PATH, SNAPSHOT_PATH, VOTE_PATH};
use super::types::{Node, NodeId, TypeConfig};

/// Makes a [`Peer`] per target node.
pub(super) struct Network {
    pub(super) client: reqwest::Client,
    /// Signs every RPC with the cluster secret, if any.
    pub(super) signer: peer_auth::Signer,
    /// Metadata addresses from the node configuration; a node not there is reached at
    /// the address its membership entry records.
    pub(super) addresses: Arc<BTreeMap<NodeId, SocketAddr>>,
    /// How long replication to an unreachable node pauses between tries.
    pub(super) backoff: Duration,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> Peer {
        let address = self
            .addresses
            .get(&target)
            .map_or_else(|| node.addr.clone(), SocketAddr::to_string);
        Peer {
            target,
            base: format!("http://{address}"),
            client: self.client.clone(),
            signer: self.signer.clone(),
            backoff: self.backoff,
        }
    }
}

/// The RPC client of one target node.
pub(super) struct Peer {
    target: NodeId,
    base: String,
    client: reqwest::Client,
    signer: peer_auth::Signer,
    backoff: Duration,
}

/// A reply that was not a protocol answer.
#[derive(Debug, thiserror::Error)]
#[error("HTTP {status} from {url}")]
struct BadStatus {
    status: reqwest::StatusCode,
    url: String,
}

impl Peer {
    async fn call<Req, Resp, E>(
        &self,
        path: &str,
        request: &Req,
        timeout: Duration,
    ) -> Result<Resp, RPCError<NodeId, Node, E>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let url = format!("{}{path}", self.base);
        let request = self.client.post(&url).timeout(timeout).json(request);
        let response = self
            .signer
            .send(&self.client, request)
            .await
            .map_err(|e| match e {
                peer_auth::SendError::Http(e) if e.is_connect() => {
                    RPCError::Unreachable(Unreachable::new(&e))
                }
                other => RPCError::Network(NetworkError::new(&other)),
            })?;
        let status = response.status();
        if !status.is_success() {
            return Err(RPCError::Network(NetworkError::new(&BadStatus {
                status,
                url,
            })));
        }
        let answer: Result<Resp, E> = response
            .json()
            .await
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        answer.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        self.call(APPEND_PATH, &rpc, option.hard_ttl()).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, Node, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.call(SNAPSHOT_PATH, &rpc, option.hard_ttl()).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        self.call(VOTE_PATH, &rpc, option.hard_ttl()).await
    }

    fn backoff(&self) -> Backoff {
        Backoff::new(std::iter::repeat(self.backoff))
    }
}
