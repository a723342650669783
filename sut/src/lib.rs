//! The system under test, as the rest of the harness sees it: the doors through which
//! it is configured, run, inspected and used (Jepsen's `db` and `client`).
//!
//! - [`Db`] ([`db`]): how a node is configured and run: the files it needs, the command
//!   that starts it, where its log and data are, which ports its listeners use, and the
//!   [`Api`] of a running cluster.
//! - [`Api`] ([`api`]): the operator's view of a running cluster: its [`Roles`], topics,
//!   admin requests, failpoints, each node's view of its replicas, and the [`Client`]s of
//!   the workloads.
//! - [`Client`] ([`client`]): one worker's connection: produce and read, with every
//!   failure classified as the history needs it ([`ClientError::write_outcome`]).
//! - [`views`]: the plain data the doors answer with ([`Roles`], [`ReplicaView`],
//!   [`AdminAction`], [`Target`]).
//!
//! Nothing here knows a wire format. Our broker's implementation is the `driver` crate;
//! a second system under test is a second implementation of these traits.

pub mod api;
pub mod client;
pub mod db;
pub mod views;

use std::future::Future;
use std::pin::Pin;

pub use api::{Api, ApiError, TopicLayout, TopicSpec};
pub use client::{
    Acks, Client, ClientError, Connector, Consistency, ReadRecord, ReadReply, ReadRequest,
};
pub use db::{Db, DbError, IsrExpansion, NodeFile, NodeInfo, Truncation};
/// The secret the harness draws for each cluster it starts: the nodes' files carry it
/// and the API signs with it what only the cluster's peers may ask (failpoints).
pub use peer_auth::ClusterSecret;
pub use views::{
    AdminAction, ControllerView, PartitionRoles, ReplicaView, Roles, Target, TargetError,
};

/// The futures of the doors: boxed, so that the traits are object safe (`Arc<dyn Api>`),
/// and `Send`, so that they run on any tokio worker.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// An error and its sources on one line, each cause once (`reqwest` and `std::io` keep
/// the reason, e.g. a timeout or a refused connection, in the sources; an error's own
/// message is often only the outermost).
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
