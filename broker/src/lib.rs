//! The system under test: a Kafka-style replicated-log broker (DESIGN.md §2).
//!
//! - [`config`]: the node configuration (`node.toml`), parsed strictly and validated.
//! - [`record`]: a record (offset, leader epoch, value).
//! - [`log`]: the [`log::ReplicaLog`] port between the replica core and storage, and an
//!   in-memory log for tests.
//! - [`storage`]: segment files on disk, recovery, checkpoints, flush policy.
//! - [`metadata`]: the metadata quorum's ZooKeeper-like store as a pure state machine.
//! - [`quorum`]: the metadata quorum as the broker uses it: a client over Raft (openraft)
//!   or an in-memory store for tests; sessions and their expiry.
//! - [`controller`]: the control plane above the metadata quorum: the session, broker
//!   registration, the controller (election, failover, leader election on broker death,
//!   admin operations) and the admin HTTP handlers.
//! - [`replica`]: one partition replica as a pure state machine (leader and follower
//!   roles, high watermark, ISR, leader epochs) and the bug switches.
//! - [`server`]: the network layer: HTTP servers, the partition driver, follower fetchers.
//!
//! Architecture invariant: the replica core reads no clock and opens no socket; time and
//! messages come in as events, effects go out. The bug switches live only in that core,
//! except KAFKA-3083's, a controller behaviour, read only in [`controller`].

pub mod config;
pub mod controller;
pub mod log;
pub mod metadata;
pub mod peer_gate;
pub mod quorum;
pub mod record;
pub mod replica;
pub mod server;
pub mod storage;
