//! The command line, parsed into plain data (clap); `main.rs` dispatches on it.

use crate::check::CheckModel;
use clap::{Args, Parser, Subcommand};
use history::Format;
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "harness",
    version,
    about = "Jepsen-style fault-injection test harness for replicated logs",
    after_help = "Exit codes: 0 valid, 1 invalid (anomalies found), 2 unknown (the checker could not decide \
                  within its bounds), 3 an error of the harness itself."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a test: a broker cluster, concurrent clients, a recorded history, a verdict.
    Test(TestArgs),
    /// Check stored histories offline: our JSONL, Jepsen EDN, or Porcupine's formats.
    Check(CheckArgs),
    /// Reproduce a reported bug: play a scenario from `scenarios/` and say whether the
    /// checkers' verdict is what the scenario expects (exit 0 if so, 1 if not).
    Repro(ReproArgs),
    /// Write a history as Jepsen EDN, for Knossos or Elle.
    Export(ExportArgs),
    /// (Re)write a run folder's report.html and timeline.html.
    Report(ReportArgs),
    /// Serve the store: a page listing every run, newest first, and each run's files.
    Serve(ServeArgs),
    /// A night of random tests (workloads × faults × cluster sizes) plus every bug
    /// reproduction, until a time budget is spent; writes `summary.html` and `junit.xml`.
    /// `--detect`: how long random faults take to find each bug switch.
    Nightly(crate::nightly::NightlyArgs),
    /// Remove what crashed runs left behind: namespaces, bridges, routes, rules, daemons
    /// (needs root).
    Clean,
}

#[derive(Debug, Args)]
pub struct ReproArgs {
    /// The scenario: a name in the scenarios folder (`KAFKA-7128`) or a `.toml` file.
    #[arg(
        value_name = "NAME",
        required_unless_present = "all",
        conflicts_with = "all"
    )]
    pub name: Option<String>,

    /// Turn the scenario's bug switch on (expect the checkers to catch the bug);
    /// without it the fix is on and the verdict must be valid.
    #[arg(long)]
    pub buggy: bool,

    /// Play every scenario in both modes and print a table.
    #[arg(long, conflicts_with = "buggy")]
    pub all: bool,

    /// With --all: also write the table as JSON to this file.
    #[arg(long, value_name = "OUT", requires = "all")]
    pub json: Option<PathBuf>,

    /// Only read and validate the scenario file(s); start nothing.
    #[arg(long)]
    pub check: bool,

    /// Where scenario files are (default: `scenarios/` of this workspace).
    #[arg(long, value_name = "DIR")]
    pub scenarios: Option<PathBuf>,

    /// Where runs are stored: `<store>/<scenario>-<mode>/<time>/`.
    #[arg(long, default_value = "store", value_name = "DIR")]
    pub store: PathBuf,

    /// A broker binary to run instead of building this workspace's (with failpoints).
    #[arg(long, value_name = "PATH")]
    pub broker_bin: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A run folder (`store/<name>/<time>`, or a `latest` link).
    #[arg(value_name = "RUN")]
    pub run: PathBuf,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The store to serve.
    #[arg(long, default_value = "store", value_name = "DIR")]
    pub store: PathBuf,

    /// The port to listen on.
    #[arg(long, default_value_t = 8080)]
    pub port: u16,

    /// The address to bind (loopback unless asked otherwise).
    #[arg(long, default_value = "127.0.0.1", value_name = "ADDR")]
    pub bind: std::net::IpAddr,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// A history file, or a run folder holding `history.jsonl`.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,

    /// Input format; guessed from the file when not given.
    #[arg(long, value_name = "jsonl|jepsen-edn|porcupine-etcd|porcupine-kv", value_parser = parse_format)]
    pub format: Option<Format>,

    /// Where to write the EDN (default: standard output).
    #[arg(long, short, value_name = "OUT")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// History files, or run folders holding `history.jsonl` (results are then written
    /// to the folder's `results.json`).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,

    /// Input format; guessed from each file when not given.
    #[arg(long, value_name = "jsonl|jepsen-edn|porcupine-etcd|porcupine-kv", value_parser = parse_format)]
    pub format: Option<Format>,

    /// What to check against; guessed from the format and the ops' functions when not given.
    #[arg(
        long,
        value_name = "log|register|cas-register|multi-register|etcd|kv",
        value_parser = parse_model
    )]
    pub model: Option<CheckModel>,

    /// The history is a Jepsen `independent` one: every client op's value is a
    /// `[key value]` tuple; check each key on its own.
    #[arg(long)]
    pub independent: bool,

    /// The model's initial value as JSON, e.g. `0`, `null`, `{"x":0,"y":0}`.
    #[arg(long, value_name = "JSON")]
    pub init: Option<String>,

    /// Give up with `unknown` after this many seconds per file (linearizability search).
    #[arg(long, value_name = "SECS", default_value_t = 300.0)]
    pub time_limit: f64,

    /// Give up with `unknown` when the search's memory estimate passes this many MiB.
    #[arg(long, value_name = "MIB", default_value_t = 4096)]
    pub memory_limit: usize,

    /// Also write the full results as JSON to this file.
    #[arg(long, value_name = "OUT")]
    pub json: Option<PathBuf>,
}

fn parse_format(name: &str) -> Result<Format, String> {
    name.parse()
}

fn parse_model(name: &str) -> Result<CheckModel, String> {
    CheckModel::parse(name).map_err(|e| e.to_string())
}

/// `harness test`: one test against a fresh broker cluster.
#[derive(Debug, Clone, Args)]
pub struct TestArgs {
    /// Broker nodes.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=32))]
    pub nodes: u32,

    /// What the clients do: `log` (appends and reads, checked for lost writes and
    /// ordering) or `register` (one value per partition, checked for linearizability).
    #[arg(long, default_value = "log", value_name = "log|register")]
    pub workload: workloads::WorkloadKind,

    /// Faults to inject: a comma-separated list of `kill`, `pause`, `partition`,
    /// `partition-ports` and `admin`; `all` for every one, `none` for none.
    #[arg(long, default_value = "none", value_name = "LIST|all|none")]
    pub nemesis: String,

    /// Mean seconds between two steps of each fault package (each delay is uniform in
    /// 0 to twice this).
    #[arg(long, default_value_t = 10.0, value_name = "SECS")]
    pub nemesis_interval: f64,

    /// Whom kills, pauses and role isolations hit, comma-separated: `one`, `minority`,
    /// `majority`, `all`, `leaders`, `controller`, `meta-leader`, or nodes joined by `+`
    /// (`n1+n3`). Default: every kind but explicit nodes.
    #[arg(long, value_name = "LIST")]
    pub nemesis_targets: Option<String>,

    /// Whether single-node kills sometimes restart the node with its partition data
    /// wiped (the metadata quorum's files are kept).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub nemesis_wipe: bool,

    /// Seconds the clients run.
    #[arg(long, default_value_t = 60.0, value_name = "SECS")]
    pub time_limit: f64,

    /// Client workers.
    #[arg(long, default_value_t = 10)]
    pub concurrency: usize,

    /// Operations per second over all workers (0: as fast as they go).
    #[arg(long, default_value_t = 500.0, value_name = "OPS")]
    pub rate: f64,

    /// Partitions of the test topic; each is a key of the history.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub partitions: u32,

    /// Replicas per partition (at most --nodes).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=32))]
    pub replication_factor: u32,

    /// All randomness comes from it; printed and stored (random when not given).
    #[arg(long)]
    pub seed: Option<u64>,

    /// Turn on a historical bug in every broker (KAFKA-7128, KAFKA-7040, KAFKA-1561,
    /// KAFKA-3083, KAFKA-2143); repeatable.
    #[arg(long = "bug", value_name = "JIRA")]
    pub bugs: Vec<String>,

    /// A node.toml setting for every broker, `KEY=VALUE`; dotted keys name tables
    /// (`metadata.session_timeout_ms=3000`); repeatable.
    #[arg(long = "broker-config", value_name = "KEY=VALUE")]
    pub broker_config: Vec<String>,

    /// Where runs are stored: `<store>/<name>/<time>/`.
    #[arg(long, default_value = "store", value_name = "DIR")]
    pub store: PathBuf,

    /// The run's name in the store (default: the workload's name).
    #[arg(long)]
    pub name: Option<String>,

    /// Where the nodes live: `netns` (network namespaces on this machine; root) or `ssh`
    /// (hosts reached over SSH: `--nodes-file` or `--vagrant`).
    #[arg(long, default_value = "netns", value_name = "netns|ssh")]
    pub backend: String,

    #[command(flatten)]
    pub ssh: SshArgs,

    /// A broker binary to run instead of building this workspace's (with failpoints).
    #[arg(long, value_name = "PATH")]
    pub broker_bin: Option<PathBuf>,
}

/// The ssh backend's options (`--backend ssh`).
#[derive(Debug, Clone, Default, Args)]
pub struct SshArgs {
    /// The hosts: one per line, `name address [user] [port]`; node nK is the K-th line.
    #[arg(long, value_name = "FILE", conflicts_with = "vagrant")]
    pub nodes_file: Option<PathBuf>,

    /// The hosts of `vagrant ssh-config` in the current folder (see the Vagrantfile).
    #[arg(long)]
    pub vagrant: bool,

    /// A private key for hosts that name none (vagrant names its own).
    #[arg(long, value_name = "FILE")]
    pub ssh_key: Option<PathBuf>,

    /// An ssh config file for every connection (ssh -F).
    #[arg(long, value_name = "FILE")]
    pub ssh_config: Option<PathBuf>,

    /// Unknown host keys: `strict` (only known hosts), `accept-new` (learn new ones,
    /// refuse changed ones), `off` (no checking). Default: `off` with --vagrant (its
    /// machines get new keys on every `vagrant up`), `accept-new` otherwise.
    #[arg(long, value_name = "strict|accept-new|off", value_parser = parse_host_keys)]
    pub ssh_host_keys: Option<backend::ssh::HostKeyPolicy>,

    /// Where a run keeps its files on the hosts (a folder per run inside, removed at the
    /// end once the logs are copied back).
    #[arg(long, value_name = "DIR", default_value = backend::ssh::DEFAULT_REMOTE_DIR)]
    pub remote_dir: PathBuf,
}

fn parse_host_keys(text: &str) -> Result<backend::ssh::HostKeyPolicy, String> {
    use backend::ssh::HostKeyPolicy;
    match text {
        "strict" => Ok(HostKeyPolicy::Strict),
        "accept-new" => Ok(HostKeyPolicy::AcceptNew),
        "off" => Ok(HostKeyPolicy::Off),
        other => Err(format!("{other:?}: one of strict, accept-new, off")),
    }
}
