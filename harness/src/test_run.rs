//! `harness test`: one test, start to verdict (DESIGN.md §3).
//!
//! Phases: build (or take) the broker → create the run folder and `test.json` → set up
//! the nodes (backend) → start the brokers and wait until the cluster serves → run the
//! workload, streaming `history.jsonl`, and the nemesis (`--nemesis`) beside it → when
//! the time limit ends, stop the nemesis and heal everything (every cut removed, paused
//! brokers resumed, killed ones restarted) → verify the cluster serves again (every node
//! registered and answering, every partition led by a caught-up leader) → availability
//! probe (every partition must accept a write within [`AVAILABILITY_BOUND`]) → final
//! reads → stop the brokers, collect their logs → check → `results.json`, a summary, and
//! the last two lines `run: <folder>` and `verdict: <verdict>`.
//!
//! Healing is guaranteed: a phase that fails heals before the brokers are stopped, and
//! the backend is torn down whatever happens (error, panic, Ctrl-C: the netns backend's
//! guard and signal handler kill the brokers and remove the namespaces with their
//! rules), so nothing is left on the host.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use checkers::{Results, Verdict};
use history::Outcome;
use indicatif::{ProgressBar, ProgressStyle};
use nemesis::schedule::ScheduleOptions;
use nemesis::{Nemesis, NemesisOptions, PackageKind, TargetSpec};
use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::backend::netns::NetnsBackend;
use crate::backend::ssh;
use crate::backend::{Backend, Signal};
use crate::check::{self, CheckModel, CheckSettings};
use crate::cli::TestArgs;
use crate::cluster::{self, Cluster, ClusterSpec};
use crate::faults::{ClusterFaults, HistoryJournal, NemesisTally};
use crate::recorder::Recorder;
use crate::workload::client::BrokerClient;
use crate::workload::{self, Target, WorkloadKind, WorkloadOptions};

/// The topic every test writes to.
pub const TOPIC: &str = "jepsen";
/// How long the cluster may take to form and serve the topic.
const SERVING_TIMEOUT: Duration = Duration::from_secs(90);
/// After the heal, every partition must accept an acks=all write within this.
pub const AVAILABILITY_BOUND: Duration = Duration::from_secs(30);
/// How long the final reads may take.
const FINAL_READS_TIMEOUT: Duration = Duration::from_secs(60);
/// After the final heal, how long the cluster may take to serve again: every node
/// registered and answering, every partition led by a caught-up leader. Generous: a
/// restarted broker must rejoin the quorum, and a wiped one re-replicate its partitions.
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(120);
/// Bounds the heal after a failed phase (the brokers are stopped next anyway).
const EMERGENCY_HEAL_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `harness test`; returns the exit code (0 valid, 1 invalid, 2 unknown).
pub fn run(args: &TestArgs) -> Result<i32> {
    validate(args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let outcome = runtime.block_on(execute(args))?;
    Ok(outcome.verdict.exit_code())
}

/// What one test came to.
#[derive(Debug, Clone, Serialize)]
pub struct TestOutcome {
    pub run_dir: PathBuf,
    pub seed: u64,
    pub verdict: Verdict,
    /// Anomaly kinds that count against validity, with how many of each were reported.
    pub anomalies: std::collections::BTreeMap<String, u64>,
    /// Wall-clock seconds from start to verdict.
    pub secs: f64,
    /// Client operations the workload ran.
    pub ops: u64,
}

/// Runs one test (the options already validated with [`validate`]), printing its
/// progress and summary as `harness test` does; an `Err` is a failure of the harness or
/// the cluster (no verdict).
pub async fn execute(args: &TestArgs) -> Result<TestOutcome> {
    run_test(args).await
}

/// Checks `harness test`'s options without starting anything.
pub fn validate(args: &TestArgs) -> Result<()> {
    match args.backend.as_str() {
        "netns" => {
            if args.ssh.nodes_file.is_some() || args.ssh.vagrant {
                bail!("--nodes-file and --vagrant need --backend ssh");
            }
        }
        "ssh" => {
            if args.ssh.nodes_file.is_none() && !args.ssh.vagrant {
                bail!("--backend ssh needs the hosts: --nodes-file FILE or --vagrant");
            }
        }
        other => bail!("--backend {other:?}: one of netns, ssh"),
    }
    NemesisChoice::parse(args)?;
    if args.replication_factor > args.nodes {
        bail!(
            "--replication-factor {} is more than the {} nodes",
            args.replication_factor,
            args.nodes
        );
    }
    if !(args.time_limit.is_finite() && args.time_limit > 0.0) {
        bail!("--time-limit must be a positive number of seconds");
    }
    if args.concurrency == 0 {
        bail!("--concurrency must be at least 1");
    }
    if !(args.rate.is_finite() && args.rate >= 0.0) {
        bail!("--rate must be 0 (unlimited) or a positive number of operations per second");
    }
    if let Some(name) = &args.name {
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            bail!("--name {name:?} must be a plain folder name");
        }
    }
    let mut table = toml::Table::new();
    for setting in &args.broker_config {
        cluster::apply_setting(&mut table, setting)?;
    }
    Ok(())
}

/// What `test.json` records: every option, the seed, how to run it again.
#[derive(Debug, Serialize)]
struct TestRecord<'a> {
    name: &'a str,
    command: String,
    seed: u64,
    nodes: u32,
    workload: String,
    /// `--nemesis` as given.
    nemesis: &'a str,
    /// The packages it names.
    nemesis_packages: Vec<&'static str>,
    nemesis_interval_secs: f64,
    nemesis_targets: Vec<String>,
    nemesis_wipe: bool,
    time_limit_secs: f64,
    concurrency: usize,
    rate: f64,
    partitions: u32,
    replication_factor: u32,
    bugs: &'a [String],
    broker_config: &'a [String],
    backend: &'a str,
    broker_bin: String,
    topic: &'static str,
    harness_version: &'static str,
    started: String,
}

/// Figures of the run, kept in `test.json`'s sibling `stats.json`.
#[derive(Debug, Default, Serialize)]
struct RunStats {
    serving_secs: f64,
    workload_secs: f64,
    ops: u64,
    ok: u64,
    fail: u64,
    info: u64,
    ops_per_sec: f64,
    recovery_secs: f64,
    /// Whether the cluster served again after the final heal within [`RECOVERY_TIMEOUT`].
    recovered: bool,
    /// What was still wrong when it did not.
    recovery_problem: Option<String>,
    availability: Vec<PartitionAvailability>,
    final_reads_complete: bool,
    /// What the nemesis did (absent with `--nemesis none`).
    nemesis: Option<NemesisTally>,
    /// Faults the final heal could not undo (empty when it healed everything).
    nemesis_unhealed: Vec<String>,
}

/// The validated `--nemesis*` options.
#[derive(Debug, Clone)]
struct NemesisChoice {
    packages: Vec<PackageKind>,
    interval: Duration,
    targets: Vec<TargetSpec>,
    wipe: bool,
}

impl NemesisChoice {
    /// Parses and checks `--nemesis`, `--nemesis-interval`, `--nemesis-targets` (explicit
    /// nodes must be among the test's `--nodes`) and `--nemesis-wipe`.
    fn parse(args: &TestArgs) -> Result<NemesisChoice> {
        let packages = PackageKind::parse_list(&args.nemesis)
            .map_err(|reason| anyhow::anyhow!("--nemesis {:?}: {reason}", args.nemesis))?;
        if !(args.nemesis_interval.is_finite() && args.nemesis_interval > 0.0) {
            bail!(
                "--nemesis-interval {}: must be a positive number of seconds",
                args.nemesis_interval
            );
        }
        let targets = match &args.nemesis_targets {
            None => TargetSpec::defaults(),
            Some(list) => {
                let targets = TargetSpec::parse_list(list)
                    .map_err(|e| anyhow::anyhow!("--nemesis-targets {list:?}: {e}"))?;
                if targets.is_empty() {
                    bail!("--nemesis-targets {list:?}: names no target");
                }
                targets
            }
        };
        let nodes: Vec<String> = (1..=args.nodes).map(|i| format!("n{i}")).collect();
        for target in &targets {
            if let TargetSpec::Nodes(named) = target {
                if let Some(stranger) = named.iter().find(|node| !nodes.contains(node)) {
                    bail!(
                        "--nemesis-targets: no node {stranger} in a test of {} nodes (n1..n{})",
                        args.nodes,
                        args.nodes
                    );
                }
            }
        }
        Ok(NemesisChoice {
            packages,
            interval: Duration::from_secs_f64(args.nemesis_interval),
            targets,
            wipe: args.nemesis_wipe,
        })
    }

    fn package_names(&self) -> Vec<&'static str> {
        self.packages.iter().map(|p| p.name()).collect()
    }

    /// `--nemesis` as the reproduce command gives it.
    fn list(&self) -> String {
        if self.packages.is_empty() {
            "none".into()
        } else {
            self.package_names().join(",")
        }
    }

    fn target_names(&self) -> Vec<String> {
        self.targets.iter().map(ToString::to_string).collect()
    }

    fn options(&self, seed: u64) -> NemesisOptions {
        NemesisOptions {
            packages: self.packages.clone(),
            schedule: ScheduleOptions {
                seed,
                interval: self.interval,
                targets: self.targets.clone(),
                wipe: self.wipe,
            },
        }
    }
}

/// The nemesis of a running test, and the journal that counts what it did.
struct Faults {
    nemesis: Nemesis,
    journal: Arc<HistoryJournal>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct PartitionAvailability {
    pub partition: u32,
    /// Seconds from the start of the probe to the first acknowledged write.
    pub first_write_secs: Option<f64>,
    pub last_error: Option<String>,
}

async fn run_test(args: &TestArgs) -> Result<TestOutcome> {
    let began = Instant::now();
    let mut run_dir = None;
    let outcome = run_test_in(args, began, &mut run_dir).await;
    match run_dir {
        // A failed run names its folder: what was recorded and the brokers' logs are there.
        Some(dir) => outcome.with_context(|| format!("run {}", dir.display())),
        None => outcome,
    }
}

async fn run_test_in(
    args: &TestArgs,
    began: Instant,
    created: &mut Option<PathBuf>,
) -> Result<TestOutcome> {
    let choice = NemesisChoice::parse(args)?;
    let seed = args.seed.unwrap_or_else(random_seed);
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| args.workload.to_string());
    let broker_bin = broker_binary(args.broker_bin.as_deref())?;
    let run_dir = create_run_dir(&args.store, &name)?;
    *created = Some(run_dir.clone());
    let record = TestRecord {
        name: &name,
        command: reproduce_command(args, &choice, seed),
        seed,
        nodes: args.nodes,
        workload: args.workload.to_string(),
        nemesis: &args.nemesis,
        nemesis_packages: choice.package_names(),
        nemesis_interval_secs: choice.interval.as_secs_f64(),
        nemesis_targets: choice.target_names(),
        nemesis_wipe: choice.wipe,
        time_limit_secs: args.time_limit,
        concurrency: args.concurrency,
        rate: args.rate,
        partitions: args.partitions,
        replication_factor: args.replication_factor,
        bugs: &args.bugs,
        broker_config: &args.broker_config,
        backend: &args.backend,
        broker_bin: broker_bin.display().to_string(),
        topic: TOPIC,
        harness_version: env!("CARGO_PKG_VERSION"),
        started: chrono::Local::now().to_rfc3339(),
    };
    check::write_json(&run_dir.join("test.json"), &record)?;
    println!("seed: {seed}");
    println!("run folder: {}", run_dir.display());

    crate::backend::install_signal_teardown().context("cannot install the Ctrl-C handler")?;
    let nodes = start_backend(args, &run_dir)
        .await
        .context("cannot set up the nodes")?;
    let outcome = run_phases(args, &choice, seed, &run_dir, broker_bin, &nodes).await;
    let teardown = nodes.backend.teardown().await;
    let stats = outcome?;
    teardown.context("tearing down the nodes")?;
    check::write_json(&run_dir.join("stats.json"), &stats)?;

    // Judge the history.
    let settings = CheckSettings {
        format: Some(history::Format::Jsonl),
        model: Some(match args.workload {
            WorkloadKind::Log => CheckModel::Log,
            WorkloadKind::Register => CheckModel::Linear(checkers::linear::ModelKind::Register),
        }),
        init: None,
        independent: false,
        time_limit: Duration::from_secs(300),
        memory_budget_bytes: 4 << 30,
        threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let mut outcome = check::check_file(&run_dir, &settings)?;
    add_availability(
        &mut outcome.results,
        &stats.availability,
        AVAILABILITY_BOUND,
    );
    check::write_json(&run_dir.join("results.json"), &outcome.results)?;
    // A report problem must not cost the run its verdict: only a warning.
    match report::write_run_reports(&run_dir) {
        Ok(written) => println!("report: {}", written.report.display()),
        Err(error) => eprintln!("warning: the report could not be written: {error}"),
    }
    update_latest(&args.store, &name, &run_dir);
    check::print_summary(&outcome);
    print_availability(&stats);
    if let Some(tally) = &stats.nemesis {
        println!("{}", tally.summary_line());
    }
    if !stats.nemesis_unhealed.is_empty() {
        println!(
            "warning: the final heal left faults in place: {}",
            stats.nemesis_unhealed.join("; ")
        );
    }
    println!(
        "{} ops in {:.1} s ({:.0} ops/s): {} ok, {} fail, {} info; cluster serving after {:.2} s",
        stats.ops,
        stats.workload_secs,
        stats.ops_per_sec,
        stats.ok,
        stats.fail,
        stats.info,
        stats.serving_secs
    );
    println!("run: {}", run_dir.display());
    println!("verdict: {}", outcome.results.verdict.as_str());
    Ok(TestOutcome {
        anomalies: crate::scenario::run::counted_anomalies(&outcome.results),
        verdict: outcome.results.verdict,
        run_dir,
        seed,
        secs: began.elapsed().as_secs_f64(),
        ops: stats.ops,
    })
}

async fn run_phases(
    args: &TestArgs,
    choice: &NemesisChoice,
    seed: u64,
    run_dir: &Path,
    broker_bin: PathBuf,
    nodes: &StartedBackend,
) -> Result<RunStats> {
    let mut stats = RunStats::default();
    let backend = Arc::clone(&nodes.backend);
    let nodes_dir = run_dir.join("nodes");
    let spec = ClusterSpec {
        broker_bin,
        bugs: args.bugs.clone(),
        settings: args.broker_config.clone(),
        node_settings: Default::default(),
        root: nodes.root.clone(),
        local_dir: nodes_dir.clone(),
        install_broker: nodes.install_broker,
    };
    let cluster = Arc::new(Cluster::new(backend.clone(), spec)?);
    // Set once the history is being recorded; the error path below heals through it.
    let mut faults: Option<Faults> = None;
    let started = Instant::now();
    let result = async {
        cluster.start().await?;
        cluster.wait_formed(SERVING_TIMEOUT).await?;
        cluster
            .create_topic(
                TOPIC,
                args.partitions,
                args.replication_factor,
                SERVING_TIMEOUT,
            )
            .await?;
        stats.serving_secs = started.elapsed().as_secs_f64();
        eprintln!(
            "cluster of {} nodes serving {} partitions after {:.2} s",
            args.nodes, args.partitions, stats.serving_secs
        );
        let target = cluster.target(TOPIC, args.partitions);
        let recorder = Recorder::create(&run_dir.join("history.jsonl"))?;
        let mut options = WorkloadOptions::new(args.workload, seed);
        options.concurrency = args.concurrency;
        options.rate = args.rate;
        options.time_limit = Duration::from_secs_f64(args.time_limit);
        if !choice.packages.is_empty() {
            let control = Arc::new(ClusterFaults::new(Arc::clone(&cluster))?);
            let journal = Arc::new(HistoryJournal::new(recorder.clone()));
            let nemesis = Nemesis::new(choice.options(seed), control, journal.clone());
            eprintln!(
                "nemesis: {} every ~{:.1} s at {}",
                choice.list(),
                choice.interval.as_secs_f64(),
                choice.target_names().join(",")
            );
            faults = Some(Faults { nemesis, journal });
        }

        // The workload and the nemesis side by side; the nemesis stops when the
        // workload's time is up (its step in progress finishes first).
        let progress = spawn_progress(&recorder, options.time_limit);
        let (_stopper, stop) = workload::stop_signal();
        let (stop_nemesis, nemesis_stopped) = watch::channel(false);
        let workload_done = async {
            let ran = workload::run_workload(&target, &options, &recorder, &stop).await;
            let _ = stop_nemesis.send(true);
            ran
        };
        let nemesis_done = async {
            match &faults {
                Some(faults) => Some(faults.nemesis.run(nemesis_stopped).await),
                None => None,
            }
        };
        let (ran, faulted) = tokio::join!(workload_done, nemesis_done);
        progress.finish_and_clear();
        let ran = ran?;
        if let Some(Err(error)) = faulted {
            return Err(error).context("the nemesis could not record its operations");
        }
        stats.workload_secs = ran.elapsed.as_secs_f64();
        stats.ops = ran.ops;
        stats.ok = ran.ok;
        stats.fail = ran.fail;
        stats.info = ran.info;
        stats.ops_per_sec = ran.ops as f64 / stats.workload_secs.max(1e-9);

        // Heal everything, then wait for the cluster to serve again before judging
        // availability. What the heal could not undo at once (an admin request during a
        // controller failover, say) is tried again once the cluster serves.
        let mut left = match &faults {
            Some(faults) => Some(
                faults
                    .nemesis
                    .heal_all()
                    .await
                    .context("the nemesis could not record the final heal")?,
            ),
            None => {
                backend.heal().await?;
                None
            }
        };
        let recovery = Instant::now();
        let mut serving = wait_serving(&cluster, args.partitions, RECOVERY_TIMEOUT).await;
        if let (Some(faults), Some(state)) = (&faults, &left) {
            if !state.is_healed() {
                eprintln!(
                    "the final heal left faults in place ({}): healing again",
                    unhealed(state).join("; ")
                );
                let again = faults
                    .nemesis
                    .heal_all()
                    .await
                    .context("the nemesis could not record the final heal")?;
                serving = wait_serving(&cluster, args.partitions, RECOVERY_TIMEOUT).await;
                left = Some(again);
            }
        }
        stats.nemesis_unhealed = left.as_ref().map(unhealed).unwrap_or_default();
        match serving {
            Ok(()) => stats.recovered = true,
            Err(problem) => {
                eprintln!(
                    "warning: after the final heal the cluster did not serve again within \
                     {RECOVERY_TIMEOUT:?}: {problem} (the availability check judges it)"
                );
                stats.recovery_problem = Some(problem);
            }
        }
        stats.recovery_secs = recovery.elapsed().as_secs_f64();
        stats.availability =
            probe_availability(&target, &options, &recorder, AVAILABILITY_BOUND).await?;
        let finals =
            workload::final_reads(&target, &options, &recorder, FINAL_READS_TIMEOUT).await?;
        stats.final_reads_complete = finals.complete();
        stats.nemesis = faults.as_ref().map(|f| f.journal.tally());
        recorder.finish()?;
        anyhow::Ok(())
    }
    .await;
    if let Err(error) = &result {
        eprintln!("error: {error:#}; healing before stopping the brokers");
        emergency_heal(&cluster, faults.as_ref()).await;
    }
    // Stop the brokers and keep their logs whatever happened above.
    let stopped = cluster.stop(Duration::from_secs(10)).await;
    for problem in cluster.collect_logs(&nodes_dir).await {
        eprintln!("warning: collecting logs: {problem}");
    }
    result?;
    stopped?;
    Ok(stats)
}

/// The nodes of a run, and where their files go on them.
struct StartedBackend {
    backend: Arc<dyn Backend>,
    /// The nodes' files: the run folder's `nodes/` (netns), or the run's folder on
    /// every host (ssh).
    root: PathBuf,
    /// Whether the broker binary is copied to the nodes (they do not share our files).
    install_broker: bool,
}

/// Sets up the nodes on the backend `--backend` names.
async fn start_backend(args: &TestArgs, run_dir: &Path) -> Result<StartedBackend> {
    let nodes = args.nodes as usize;
    if args.backend != "ssh" {
        let backend = NetnsBackend::start(nodes).await?;
        return Ok(StartedBackend {
            backend: Arc::new(backend),
            root: run_dir.join("nodes"),
            install_broker: false,
        });
    }
    let ssh_args = &args.ssh;
    let hosts = match &ssh_args.nodes_file {
        Some(file) => {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("--nodes-file {}", file.display()))?;
            ssh::parse_nodes_file(&text)
                .with_context(|| format!("--nodes-file {}", file.display()))?
        }
        None => ssh::vagrant_hosts(None)
            .await
            .context("--vagrant: reading `vagrant ssh-config`")?,
    };
    if hosts.len() < nodes {
        bail!(
            "--nodes {nodes}, but only {} hosts are given ({})",
            hosts.len(),
            if ssh_args.vagrant {
                "vagrant ssh-config".to_string()
            } else {
                ssh_args
                    .nodes_file
                    .as_deref()
                    .map(|f| f.display().to_string())
                    .unwrap_or_default()
            }
        );
    }
    let host_keys = ssh_args.ssh_host_keys.unwrap_or(if ssh_args.vagrant {
        ssh::HostKeyPolicy::Off
    } else {
        ssh::HostKeyPolicy::AcceptNew
    });
    let options = ssh::SshOptions {
        hosts,
        identity_file: ssh_args.ssh_key.clone(),
        config_file: ssh_args.ssh_config.clone(),
        host_keys,
        remote_dir: ssh_args.remote_dir.clone(),
    };
    let backend = ssh::SshBackend::start(options, nodes).await?;
    for node in backend.nodes() {
        eprintln!("{}: {}", node, backend.describe(&node));
    }
    Ok(StartedBackend {
        root: backend.run_dir().to_path_buf(),
        backend: Arc::new(backend),
        install_broker: true,
    })
}

/// The faults a final heal left in place, one line each.
fn unhealed(state: &nemesis::FaultState) -> Vec<String> {
    let mut left = Vec::new();
    for node in state.killed.keys() {
        left.push(format!("{node} is still down (it would not start)"));
    }
    for node in &state.paused {
        left.push(format!("{node} is still paused"));
    }
    for (package, cuts) in &state.cuts {
        if !cuts.is_empty() {
            left.push(format!("{} cuts of {package} remain", cuts.len()));
        }
    }
    for (key, replicas) in &state.reassigned {
        left.push(format!(
            "{key} is not back on its replicas {}",
            replicas.join(",")
        ));
    }
    left
}

/// The heal after a failed phase: the nemesis's (recorded, so that the history shows
/// it) when there is one, bounded; then, unrecorded, what that may not have done: every
/// cut removed, every broker sent SIGCONT. Brokers that stay down are stopped next
/// anyway.
async fn emergency_heal(cluster: &Cluster, faults: Option<&Faults>) {
    if let Some(faults) = faults {
        match tokio::time::timeout(EMERGENCY_HEAL_TIMEOUT, faults.nemesis.heal_all()).await {
            Ok(Ok(left)) if left.is_healed() => {}
            Ok(Ok(left)) => eprintln!(
                "warning: the heal left faults in place: {}",
                unhealed(&left).join("; ")
            ),
            Ok(Err(error)) => eprintln!("warning: the heal could not be recorded: {error}"),
            Err(_) => eprintln!("warning: the heal took more than {EMERGENCY_HEAL_TIMEOUT:?}"),
        }
    }
    if let Err(error) = cluster.backend.heal().await {
        eprintln!("warning: removing the network cuts: {error}");
    }
    for node in &cluster.nodes {
        let _ = cluster.signal(&node.name, Signal::Cont).await;
    }
}

/// Waits (up to `timeout`) until the cluster serves: a controller and every node
/// registered, every node's client API answering, every partition led by a leader that
/// serves reads and whose HW has reached its log end (a leader elected or restarted
/// during the run starts from a stale HW, and reads before its followers caught up
/// would see less than is committed). Says what is still missing when it does not.
async fn wait_serving(cluster: &Cluster, partitions: u32, timeout: Duration) -> Result<(), String> {
    let start = Instant::now();
    if let Err(error) = cluster.wait_formed(timeout).await {
        return Err(with_down_brokers(cluster, error.to_string()).await);
    }
    loop {
        let mut silent = Vec::new();
        for node in &cluster.nodes {
            if !cluster.node_answers(&node.name).await {
                silent.push(node.name.clone());
            }
        }
        let missing = if !silent.is_empty() {
            format!("the client API of {} does not answer", silent.join(", "))
        } else if !cluster.all_partitions_led(TOPIC, partitions).await {
            "not every partition has a leader serving reads".to_string()
        } else if !cluster.leaders_caught_up(TOPIC, partitions).await {
            "not every leader's high watermark has reached its log end".to_string()
        } else {
            return Ok(());
        };
        if start.elapsed() >= timeout {
            return Err(with_down_brokers(cluster, missing).await);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `problem`, plus the brokers that do not run (they exited on their own: their
/// `broker.log` says why).
async fn with_down_brokers(cluster: &Cluster, problem: String) -> String {
    let mut down = Vec::new();
    for node in &cluster.nodes {
        if !cluster.is_running(&node.name).await {
            down.push(node.name.clone());
        }
    }
    if down.is_empty() {
        problem
    } else {
        format!(
            "{problem}; not running: {} (see nodes/<node>/broker.log)",
            down.join(", ")
        )
    }
}

/// After the heal, an acks=all write to every partition, retried until one is
/// acknowledged or [`AVAILABILITY_BOUND`] passes; recorded like any other write (values
/// negative, so they never collide with the workers').
pub(crate) async fn probe_availability(
    target: &Target,
    options: &WorkloadOptions,
    recorder: &Recorder,
    bound: Duration,
) -> Result<Vec<PartitionAvailability>> {
    let target = Arc::new(target.clone());
    let mut tasks = tokio::task::JoinSet::new();
    for partition in 0..target.partitions {
        let mut client = BrokerClient::new(
            Arc::clone(&target),
            options.request_timeout,
            partition as usize,
        )?;
        let recorder = recorder.clone();
        let f = match options.workload {
            WorkloadKind::Log => "append",
            WorkloadKind::Register => "write",
        };
        let partitions = i64::from(target.partitions);
        tasks.spawn(async move {
            let start = Instant::now();
            let mut process = recorder.reserve_process();
            let key = client.target().key(partition);
            let mut last_error = None;
            let mut attempt: i64 = 0;
            while start.elapsed() < bound {
                let value = -1 - (i64::from(partition) + attempt * partitions);
                attempt += 1;
                let node = client.route(partition).await;
                let node_name = client.target().nodes.get(node).map(|n| n.name.clone());
                let invocation = recorder.invoke(
                    process,
                    f,
                    json!({"key": key, "value": value}),
                    node_name.as_deref(),
                )?;
                match client.produce(node, partition, &json!(value)).await {
                    Ok(offset) => {
                        let mut done = json!({"key": key, "value": value});
                        if f == "append" {
                            done["offset"] = json!(offset);
                        }
                        recorder.complete(invocation, Outcome::Ok, done, None)?;
                        return Ok(PartitionAvailability {
                            partition,
                            first_write_secs: Some(start.elapsed().as_secs_f64()),
                            last_error: None,
                        });
                    }
                    Err(error) => {
                        let outcome = error.write_outcome();
                        recorder.complete(
                            invocation,
                            outcome,
                            json!({"key": key, "value": value}),
                            Some(error.code()),
                        )?;
                        if outcome == Outcome::Info {
                            process = recorder.reserve_process();
                        }
                        last_error = Some(error.code());
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
            Ok::<_, anyhow::Error>(PartitionAvailability {
                partition,
                first_write_secs: None,
                last_error,
            })
        });
    }
    let mut results = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        results.push(joined.context("availability probe task")??);
    }
    results.sort_by_key(|p| p.partition);
    Ok(results)
}

/// The availability checker: `invalid` (`unavailable-after-heal`) if a partition
/// accepted no write within the bound after the final heal.
pub(crate) fn add_availability(
    results: &mut Results,
    availability: &[PartitionAvailability],
    bound: Duration,
) {
    let unavailable: Vec<&PartitionAvailability> = availability
        .iter()
        .filter(|p| p.first_write_secs.is_none())
        .collect();
    let verdict = if unavailable.is_empty() {
        Verdict::Valid
    } else {
        Verdict::Invalid
    };
    let anomalies: Vec<Value> = unavailable
        .iter()
        .map(|p| {
            json!({
                "kind": "unavailable-after-heal",
                "partition": p.partition,
                "explanation": format!(
                    "partition {} accepted no acks=all write within {} s after the final heal (last error: {})",
                    p.partition,
                    bound.as_secs_f64(),
                    p.last_error.as_deref().unwrap_or("none")
                ),
            })
        })
        .collect();
    results.add(
        "availability",
        verdict,
        &json!({
            "bound_secs": bound.as_secs_f64(),
            "partitions": availability,
            "anomalies": anomalies,
        }),
    );
}

fn print_availability(stats: &RunStats) {
    let slowest = stats
        .availability
        .iter()
        .filter_map(|p| p.first_write_secs)
        .fold(0.0_f64, f64::max);
    let down: Vec<String> = stats
        .availability
        .iter()
        .filter(|p| p.first_write_secs.is_none())
        .map(|p| p.partition.to_string())
        .collect();
    if down.is_empty() {
        println!(
            "availability: every partition accepted a write after the heal (slowest {slowest:.2} s)"
        );
    } else {
        println!(
            "availability: unavailable-after-heal on partitions {}",
            down.join(", ")
        );
    }
    if !stats.final_reads_complete {
        println!("warning: the final reads did not reach the end of every partition");
    }
}

/// A progress bar with the elapsed time and the ok/fail/info counts.
fn spawn_progress(recorder: &Recorder, limit: Duration) -> ProgressBar {
    let bar = ProgressBar::new(limit.as_secs().max(1));
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} s  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let recorder = recorder.clone();
    let ticker = bar.clone();
    tokio::spawn(async move {
        let start = Instant::now();
        while !ticker.is_finished() {
            let counts = recorder.counts().total();
            ticker.set_position(start.elapsed().as_secs().min(ticker.length().unwrap_or(0)));
            ticker.set_message(format!(
                "{} ops: {} ok, {} fail, {} info",
                counts.invoked, counts.ok, counts.fail, counts.info
            ));
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    bar
}

/// `<store>/<name>/<YYYYMMDDTHHMMSS>/`, suffixed if that exists already.
/// The broker to run: `--broker-bin` (made absolute), or this workspace's, built with
/// its failpoints.
pub(crate) fn broker_binary(given: Option<&Path>) -> Result<PathBuf> {
    match given {
        Some(path) => {
            if !path.is_file() {
                bail!("--broker-bin {}: no such file", path.display());
            }
            path.canonicalize()
                .with_context(|| format!("--broker-bin {}", path.display()))
        }
        None => {
            eprintln!("building the broker (cargo build -p broker --features failpoints)...");
            Ok(cluster::build_broker()?)
        }
    }
}

pub(crate) fn create_run_dir(store: &Path, name: &str) -> Result<PathBuf> {
    let stamp = chrono::Local::now().format("%Y%m%dT%H%M%S").to_string();
    let base = store.join(name);
    std::fs::create_dir_all(&base).with_context(|| format!("cannot create {}", base.display()))?;
    for n in 0..1000 {
        let candidate = if n == 0 {
            base.join(&stamp)
        } else {
            base.join(format!("{stamp}-{n}"))
        };
        match std::fs::create_dir(&candidate) {
            Ok(()) => {
                return candidate
                    .canonicalize()
                    .with_context(|| format!("cannot resolve {}", candidate.display()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(e).with_context(|| format!("cannot create {}", candidate.display()))
            }
        }
    }
    bail!(
        "cannot find a free run folder name under {}",
        base.display()
    )
}

/// Points `<store>/<name>/latest` and `<store>/latest` at the run.
pub(crate) fn update_latest(store: &Path, name: &str, run_dir: &Path) {
    for link in [store.join(name).join("latest"), store.join("latest")] {
        let _ = std::fs::remove_file(&link);
        if let Err(e) = std::os::unix::fs::symlink(run_dir, &link) {
            eprintln!("warning: cannot link {}: {e}", link.display());
        }
    }
}

pub(crate) fn random_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut rng = rng::Rng::new(nanos ^ u64::from(std::process::id()));
    rng.next_u64() >> 1
}

/// The command line that runs the same test again.
fn reproduce_command(args: &TestArgs, choice: &NemesisChoice, seed: u64) -> String {
    let mut parts = vec![
        "harness test".to_string(),
        format!("--nodes {}", args.nodes),
        format!("--workload {}", args.workload),
        format!("--nemesis {}", choice.list()),
        format!("--nemesis-interval {}", args.nemesis_interval),
        format!("--nemesis-targets {}", choice.target_names().join(",")),
        format!("--nemesis-wipe {}", choice.wipe),
        format!("--time-limit {}", args.time_limit),
        format!("--concurrency {}", args.concurrency),
        format!("--rate {}", args.rate),
        format!("--partitions {}", args.partitions),
        format!("--replication-factor {}", args.replication_factor),
        format!("--seed {seed}"),
    ];
    if args.backend == "ssh" {
        parts.push("--backend ssh".into());
        if let Some(file) = &args.ssh.nodes_file {
            parts.push(format!(
                "--nodes-file {}",
                shell_word(&file.display().to_string())
            ));
        }
        if args.ssh.vagrant {
            parts.push("--vagrant".into());
        }
    }
    parts.extend(args.bugs.iter().map(|b| format!("--bug {b}")));
    parts.extend(
        args.broker_config
            .iter()
            .map(|c| format!("--broker-config {}", shell_word(c))),
    );
    parts.join(" ")
}

/// `word` quoted for a shell when it needs it (the reproduce command is pasted into one).
fn shell_word(word: &str) -> String {
    crate::backend::tools::display_command(&[word])
}
