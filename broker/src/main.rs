//! `broker --config node.toml [--bug KAFKA-nnnn]...`: one broker node (DESIGN.md §2).
//!
//! The broker joins the metadata quorum (Raft over its metadata listener; the voters of
//! `[metadata]`, the others as learners), registers itself, takes part in the controller
//! election, and serves clients and followers. SIGTERM or SIGINT stops it gracefully
//! (its session closed, so the controller moves its leaderships at once).

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;

use broker::config::NodeConfig;
use broker::replica::BugSwitches;
use broker::server::Broker;

#[derive(Debug, Parser)]
#[command(name = "broker", about = "A Kafka-style replicated-log broker")]
struct Args {
    /// The node configuration file.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Turns on a historical bug's behaviour (adds to the config's `bugs`); repeatable.
    #[arg(long = "bug", value_name = "KAFKA-nnnn")]
    bugs: Vec<String>,
}

fn main() -> anyhow::Result<()> {
    // Logs on stderr, so that stdout carries only the startup line a harness waits for.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(
                |_| // openraft logs every failed call to a down peer at WARN; its errors suffice.
                tracing_subscriber::EnvFilter::new("info,openraft=error"),
            ),
        )
        .init();
    let args = Args::parse();
    let mut config = NodeConfig::load(&args.config)?;
    if !args.bugs.is_empty() {
        let mut names: Vec<&str> = config.bugs.names();
        names.extend(args.bugs.iter().map(String::as_str));
        config.bugs = BugSwitches::from_names(&names).context("--bug")?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(run(config))
}

async fn run(config: NodeConfig) -> anyhow::Result<()> {
    let metadata_addr = config.listeners.metadata;
    let broker = Broker::start_member(config).await?;
    println!(
        "broker {} listening: client {} replication {} metadata {}",
        broker.broker_id(),
        broker.client_addr(),
        broker.replication_addr(),
        metadata_addr
    );
    wait_for_signal().await?;
    tracing::info!("stopping");
    broker.shutdown().await;
    Ok(())
}

/// SIGINT or SIGTERM, the signals a harness or an operator stops a broker with.
async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut terminate = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result.context("cannot watch SIGINT")?,
        _ = terminate.recv() => {}
    }
    Ok(())
}
