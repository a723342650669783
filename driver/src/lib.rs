//! Our broker behind the harness's doors (`sut`): everything that knows its
//! `node.toml`, its ports, its HTTP API and its debug endpoints.
//!
//! - [`BrokerDb`] (`sut::Db`): a node's `node.toml` ([`config`]), the command that runs
//!   the broker, its log, its data folder and what a wipe keeps, its listeners' ports.
//! - [`BrokerApi`] ([`api`], `sut::Api`): `/v1/metadata` read as roles, topic creation,
//!   the admin API, failpoints, `/v1/debug/replicas` ([`views`] reads the answers).
//! - [`BrokerClient`] ([`client`], `sut::Client`): the workers' produce and read, on
//!   HTTP/1.1 written and read by hand ([`http1`]), the recording path's hot loop.
//! - [`build_broker`]: the workspace's broker, built with its failpoints.

pub mod api;
pub mod client;
pub mod config;
mod http1;
pub mod views;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use serde_json::{json, Value};
use sut::{Api, ClusterSecret, Db, DbError, NodeFile, NodeInfo};

pub use api::BrokerApi;
pub use client::{BrokerClient, BrokerConnector, ClientNode, ClientSetupError};

/// The client listener's port on every node.
pub const CLIENT_PORT: u16 = 9092;
/// The replication listener's port (follower fetches, LeaderAndIsr).
pub const REPLICATION_PORT: u16 = 9093;
/// The metadata quorum's listener's port (Raft, sessions).
pub const METADATA_PORT: u16 = 9094;

/// The folder under a broker's `data_dir` that holds the metadata quorum's files
/// (`METADATA_DIR` in `broker/src/quorum/raft/mod.rs`); every other entry of `data_dir`
/// is a partition's log (`<topic>-<partition>/`, `broker/src/server/partitions.rs`).
pub const METADATA_DIR: &str = "metadata";

/// Our broker as `sut::Db`. Node `i` (from 0) of a cluster is broker id `i + 1`.
#[derive(Debug, Clone, Copy, Default)]
pub struct BrokerDb;

impl BrokerDb {
    /// The broker id of node `index` (from 0).
    pub fn broker_id(index: usize) -> u32 {
        u32::try_from(index + 1).unwrap_or(u32::MAX)
    }
}

impl Db for BrokerDb {
    fn check_settings(&self, settings: &[String]) -> Result<(), DbError> {
        config::validate_settings(settings)
    }

    fn node_files(
        &self,
        nodes: &[NodeInfo],
        node: usize,
        bugs: &[String],
        settings: &[String],
        secret: &ClusterSecret,
    ) -> Result<Vec<NodeFile>, DbError> {
        Ok(vec![NodeFile {
            name: config::NODE_TOML.to_string(),
            contents: config::node_toml(nodes, node, bugs, settings, secret)?,
        }])
    }

    fn start_command(&self, program: &Path, node: &NodeInfo) -> Vec<String> {
        vec![
            program.display().to_string(),
            "--config".to_string(),
            node.dir.join(config::NODE_TOML).display().to_string(),
        ]
    }

    fn log_file(&self, node: &NodeInfo) -> PathBuf {
        node.dir.join("broker.log")
    }

    fn data_dir(&self, node: &NodeInfo) -> PathBuf {
        config::data_dir(node)
    }

    fn wipe_keeps(&self) -> &[&'static str] {
        &[METADATA_DIR]
    }

    fn listener_port(&self, listener: &str) -> Option<u16> {
        match listener {
            "client" => Some(CLIENT_PORT),
            "replication" => Some(REPLICATION_PORT),
            "metadata" => Some(METADATA_PORT),
            _ => None,
        }
    }

    fn fatal_error<'a>(&self, log_tail: &'a str) -> Option<&'a str> {
        // The broker's `main` prints its fatal error as `Error: ...` (anyhow).
        log_tail.lines().rev().find(|l| l.starts_with("Error: "))
    }

    fn api(&self, nodes: &[NodeInfo], secret: &ClusterSecret) -> Result<Arc<dyn Api>, DbError> {
        Ok(Arc::new(BrokerApi::new(nodes, secret)?))
    }

    fn truncations(&self, log: &str) -> Vec<sut::Truncation> {
        views::truncations(log)
    }

    fn isr_expansions(&self, log: &str) -> Vec<sut::IsrExpansion> {
        views::isr_expansions(log)
    }

    fn durability_waiver(&self, settings: &[String]) -> Option<String> {
        config::durability_waiver(settings)
    }

    fn elects_out_of_sync(&self, settings: &[String]) -> bool {
        config::unclean_leader_election(settings)
    }

    fn asks_divergence(&self, settings: &[String]) -> bool {
        !config::truncates_to_high_watermark(settings)
    }

    fn failures_tolerated(&self, settings: &[String], replication_factor: u32) -> u32 {
        replication_factor.saturating_sub(config::min_insync_replicas(settings))
    }
}

/// Why the broker could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the broker ({command}): {reason}")]
pub struct BuildError {
    pub command: String,
    pub reason: String,
}

/// Builds the broker of this workspace with its failpoints compiled in, in the profile
/// this crate was built with, and returns the binary's path.
pub fn build_broker() -> Result<PathBuf, BuildError> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let release = !cfg!(debug_assertions);
    let mut args = vec![
        "build",
        "-p",
        "broker",
        "--features",
        "failpoints",
        "--message-format=json-render-diagnostics",
    ];
    if release {
        args.push("--release");
    }
    let command = format!("cargo {}", args.join(" "));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let output = Command::new(cargo)
        .args(&args)
        .current_dir(&workspace)
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| BuildError {
            command: command.clone(),
            reason: format!("{e} (run from a checkout of the project, or pass --broker-bin PATH)"),
        })?;
    if !output.status.success() {
        return Err(BuildError {
            command,
            reason: format!("exit status {}", output.status),
        });
    }
    // The last artifact message for the broker binary names the executable.
    let text = String::from_utf8_lossy(&output.stdout);
    let executable = text
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|m| {
            m["reason"] == json!("compiler-artifact")
                && m["target"]["name"] == json!("broker")
                && m["target"]["kind"]
                    .as_array()
                    .is_some_and(|k| k.contains(&json!("bin")))
        })
        .filter_map(|m| m["executable"].as_str().map(PathBuf::from))
        .next_back();
    executable.ok_or_else(|| BuildError {
        command,
        reason: "cargo named no broker executable".into(),
    })
}
