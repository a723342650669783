//! One test, start to verdict, for every kind of test (`harness test`, `harness repro`,
//! and each run of `harness nightly`): the phases as named steps, teardown in one place.
//!
//! run folder and `test.json` → nodes (backend) → cluster → the test's own [`Phases`]
//! (start the brokers, operations and faults, heal, availability probe, final reads) →
//! brokers stopped and their logs collected → nodes torn down → `stats.json` → check →
//! `results.json` → the expectation (scenarios) → the pages → `latest` links.
//!
//! Whatever happens, the brokers are stopped and the nodes torn down before an error
//! returns (and on Ctrl-C: the backends' signal handler), so nothing is left on the host.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use backend::netns::NetnsBackend;
use backend::{ssh, Backend};
use checkers::{Results, Verdict};
use serde_json::{json, Value};
use spec::{
    BackendSpec, Expectation, HostsSource, OneDownProbe, PartitionAvailability, RunFolder,
    RunStats, ScenarioInfo, SshSpec, TestRecord, TestSpec,
};
use workloads::Checker;

use crate::check::{self, CheckModel, CheckSettings, FileOutcome};
use crate::cluster::{Cluster, ClusterSpec};

/// The topic every workload test writes to.
pub const TOPIC: &str = "jepsen";

/// [`Phases::stop_grace`]'s default.
pub const STOP_GRACE: Duration = Duration::from_secs(2);

/// What differs between kinds of test: the nodes, the phases between a defined cluster
/// and stopped brokers, and how the history is judged.
// The lifecycle awaits `run` on its caller's task, so its future needs no `Send` bound.
#[allow(async_fn_in_trait)]
pub trait Phases {
    /// How many nodes the test needs.
    fn nodes(&self) -> usize;

    /// `KEY=VALUE` settings of single nodes, by node (applied after the common ones).
    fn node_settings(&self) -> BTreeMap<String, Vec<String>> {
        BTreeMap::new()
    }

    /// What `test.json` says of a scenario.
    fn scenario(&self) -> Option<ScenarioInfo> {
        None
    }

    /// The topic the test writes to.
    fn topic(&self) -> String {
        TOPIC.to_string()
    }

    /// The checker of the history and its bounds.
    fn check_settings(&self) -> CheckSettings;

    /// How long an availability probe waits for each partition.
    fn availability_bound(&self) -> Duration;

    /// How long the brokers get to stop on their own at the end (SIGTERM), before they
    /// are killed. Short: when every broker stops at once, the metadata quorum goes with
    /// them, and a broker whose control plane is waiting on it (a write in flight, its
    /// session's close) would wait out its own 5 s graces, twice, for nothing: by then the
    /// history is complete, and nothing the checkers read (the history, the brokers' logs
    /// and data) depends on a graceful end. Up to 10 s of every run went there.
    fn stop_grace(&self) -> Duration {
        STOP_GRACE
    }

    /// Said once the run folder exists.
    fn announce(&self, spec: &TestSpec, folder: &RunFolder);

    /// Starts the brokers and does the test, recording into the folder's history; heals
    /// what it broke. An `Err` is a failure of the harness or the cluster (no verdict).
    async fn run(&self, cluster: &Arc<Cluster>, folder: &RunFolder) -> Result<Ran>;

    /// Whether durability anomalies are waived when the settings give acknowledged
    /// writes up by design ([`crate::waiver`]). A scenario says itself which writes it
    /// expects to lose (acks=1 writes, its expectation per mode), so it is judged as
    /// written.
    fn waives_durability(&self) -> bool {
        true
    }

    /// Whether the test's expectation held (scenarios), written to `expectation.json`.
    fn expect(&self, _verdict: &Judged<'_>) -> Option<Expectation> {
        None
    }
}

/// What the phases came to.
#[derive(Debug, Default)]
pub struct Ran {
    pub stats: RunStats,
    /// The steps could not play out as written (a scenario's; the history is still
    /// complete and checked).
    pub problem: Option<String>,
}

/// A judged run, as [`Phases::expect`] sees it.
pub struct Judged<'a> {
    pub folder: &'a RunFolder,
    pub results: &'a Results,
    pub anomalies: &'a BTreeMap<String, u64>,
    pub problem: Option<&'a str>,
    pub secs: f64,
}

/// A test that ran to its verdict.
pub struct Finished {
    pub folder: RunFolder,
    pub checked: FileOutcome,
    pub stats: RunStats,
    pub anomalies: BTreeMap<String, u64>,
    pub expectation: Option<Expectation>,
    pub secs: f64,
}

impl Finished {
    pub fn verdict(&self) -> Verdict {
        self.checked.results.verdict
    }
}

/// The broker binary of a test: as the user named it (what the reproduce line says;
/// `None`: this workspace's) and the file that runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broker {
    pub given: Option<PathBuf>,
    pub path: PathBuf,
}

impl Broker {
    /// The broker the user named (made absolute), or this workspace's, built.
    pub fn resolve(given: Option<&Path>) -> Result<Broker> {
        Ok(Broker {
            given: given.map(Path::to_path_buf),
            path: broker_binary(given)?,
        })
    }
}

/// Runs one test of any kind with `broker`; an `Err` names the run folder when there
/// is one.
pub async fn run<P: Phases>(spec: &TestSpec, phases: &P, broker: &Broker) -> Result<Finished> {
    let began = Instant::now();
    let folder = RunFolder::create(&spec.store, &spec.name)?;
    run_in(spec, phases, &broker.path, &folder, began)
        .await
        .with_context(|| format!("run {}", folder.dir().display()))
}

async fn run_in<P: Phases>(
    spec: &TestSpec,
    phases: &P,
    broker_bin: &Path,
    folder: &RunFolder,
    began: Instant,
) -> Result<Finished> {
    write_record(spec, phases, broker_bin, folder)?;
    phases.announce(spec, folder);
    backend::install_signal_teardown().context("cannot install the Ctrl-C handler")?;
    let nodes = start_backend(&spec.backend, phases.nodes(), folder)
        .await
        .context("cannot set up the nodes")?;
    let ran = run_on_nodes(spec, phases, broker_bin, folder, &nodes).await;
    let teardown = nodes.backend.teardown().await;
    let ran = ran?;
    teardown.context("tearing down the nodes")?;
    folder.write_stats(&ran.stats)?;
    judge(spec, phases, folder, ran, began)
}

/// `test.json`: the spec, the command that runs it again, the broker that ran.
fn write_record<P: Phases>(
    spec: &TestSpec,
    phases: &P,
    broker_bin: &Path,
    folder: &RunFolder,
) -> Result<()> {
    let record = TestRecord {
        spec: spec.clone(),
        command: spec.command_line(),
        broker_bin: spec::folder::shown_path(broker_bin),
        topic: phases.topic(),
        started: chrono::Local::now().to_rfc3339(),
        harness_version: env!("CARGO_PKG_VERSION").to_string(),
        scenario: phases.scenario(),
    };
    Ok(folder.write_test(&record)?)
}

/// The cluster on the nodes, the test's phases, then the brokers stopped and their logs
/// kept whatever happened.
async fn run_on_nodes<P: Phases>(
    spec: &TestSpec,
    phases: &P,
    broker_bin: &Path,
    folder: &RunFolder,
    nodes: &StartedBackend,
) -> Result<Ran> {
    let cluster_spec = ClusterSpec {
        program: broker_bin.to_path_buf(),
        bugs: spec.brokers.bugs.clone(),
        settings: spec.brokers.config.clone(),
        node_settings: phases.node_settings(),
        root: nodes.root.clone(),
        local_dir: folder.nodes(),
        install_program: nodes.install_broker,
    };
    let cluster = Arc::new(Cluster::new(
        Arc::clone(&nodes.backend),
        crate::system::db(),
        cluster_spec,
    )?);
    let ran = phases.run(&cluster, folder).await;
    let stopped = cluster.stop(phases.stop_grace()).await;
    for problem in cluster.collect_logs(&folder.nodes()).await {
        eprintln!("warning: collecting logs: {problem}");
    }
    let ran = ran?;
    stopped?;
    Ok(ran)
}

/// Checks the history, adds the availability checker, writes `results.json`, the
/// expectation and the pages, and points `latest` at the run.
fn judge<P: Phases>(
    spec: &TestSpec,
    phases: &P,
    folder: &RunFolder,
    ran: Ran,
    began: Instant,
) -> Result<Finished> {
    let mut checked = check::check_file(folder.dir(), &phases.check_settings())?;
    if !ran.stats.availability.is_empty() {
        add_availability(
            &mut checked.results,
            &ran.stats.availability,
            phases.availability_bound(),
        );
    }
    let waived = phases
        .waives_durability()
        .then(|| {
            crate::waiver::reason(
                &*crate::system::db(),
                &spec.brokers.config,
                &phases.node_settings(),
            )
        })
        .flatten();
    crate::admissions::add_for_run(
        &mut checked.results,
        &*crate::system::db(),
        &folder.history(),
        &folder.nodes(),
        &ran.stats,
        waived.as_deref(),
    );
    if let Some(reason) = &waived {
        crate::waiver::apply(&mut checked.results, reason);
    }
    if let Some(probe) = &ran.stats.one_down {
        add_one_down(&mut checked.results, probe);
    }
    let truncations = crate::truncations::read(&*crate::system::db(), &folder.nodes());
    if !truncations.is_empty() {
        crate::truncations::add(&mut checked.results, &truncations);
    }
    folder.write_results(&checked.results)?;
    let anomalies = checked.results.failure_kinds();
    let secs = began.elapsed().as_secs_f64();
    let expectation = phases.expect(&Judged {
        folder,
        results: &checked.results,
        anomalies: &anomalies,
        problem: ran.problem.as_deref(),
        secs,
    });
    if let Some(expectation) = &expectation {
        folder.write_expectation(expectation)?;
    }
    // A report problem must not cost the run its verdict: only a warning.
    match report::write_run_reports(folder.dir()) {
        Ok(written) => eprintln!("report: {}", written.report.display()),
        Err(error) => eprintln!("warning: the report could not be written: {error}"),
    }
    for problem in folder.update_latest(&spec.store, &spec.name) {
        eprintln!("warning: {problem}");
    }
    Ok(Finished {
        folder: folder.clone(),
        checked,
        stats: ran.stats,
        anomalies,
        expectation,
        secs,
    })
}

/// The checker settings of a workload's own checker.
pub fn check_settings_for(
    checker: Checker,
    time_limit: Duration,
    memory_budget_bytes: usize,
    threads: usize,
) -> CheckSettings {
    CheckSettings {
        format: Some(history::Format::Jsonl),
        model: Some(match checker {
            Checker::Log => CheckModel::Log,
            Checker::Linearizable(kind) => CheckModel::Linear(kind),
        }),
        init: None,
        independent: false,
        time_limit,
        memory_budget_bytes,
        threads,
        algorithm: Default::default(),
        require_ops: false,
    }
}

/// The availability checker: `invalid` (`unavailable-after-heal`) if a partition
/// accepted no write within the bound after the final heal.
pub fn add_availability(
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

/// The one-down checker: `invalid` (`unavailable-with-one-down`) if, with one node
/// killed after the cluster had healed and was fully in sync, a partition accepted no
/// acks=all write within the bound although the settings tolerate a failure; `valid`
/// when every partition did, or when the probe did not run (it says why).
///
/// Before the kill it also judges the healed cluster: `isr-not-restored` for a partition
/// that was still not fully in sync after the probe's wait while the cluster cannot have
/// been catching up on it (its leader's own ISR differs from the metadata's, or a replica
/// that holds the leader's whole log stays outside the ISR).
pub fn add_one_down(results: &mut Results, probe: &OneDownProbe) {
    let node = probe.node.as_deref().unwrap_or("none");
    let not_restored = probe.not_restored.iter().map(|stuck| {
        json!({
            "kind": "isr-not-restored",
            "key": stuck.key,
            "leader": stuck.leader,
            "replica": stuck.replica,
            "explanation": format!(
                "{} s after the cluster healed and served again, with nothing written, {} is \
                 still not fully in sync and cannot be catching up: {}",
                crate::one_down::IN_SYNC_TIMEOUT.as_secs(),
                stuck.key,
                stuck.why
            ),
        })
    });
    let anomalies: Vec<Value> = not_restored
        .collect::<Vec<Value>>()
        .into_iter()
        .chain(probe
        .availability
        .iter()
        .filter(|p| p.first_write_secs.is_none())
        .map(|p| {
            json!({
                "kind": "unavailable-with-one-down",
                "partition": p.partition,
                "node": node,
                "explanation": format!(
                    "with {node} killed after the cluster had healed and every partition was \
                     fully in sync, partition {} accepted no acks=all write within {} s, \
                     although the settings tolerate one failure (last error: {})",
                    p.partition,
                    probe.bound_secs,
                    p.last_error.as_deref().unwrap_or("none")
                ),
            })
        }))
        .collect();
    let verdict = if anomalies.is_empty() {
        Verdict::Valid
    } else {
        Verdict::Invalid
    };
    results.add(
        "one-down",
        verdict,
        &json!({
            "node": probe.node,
            "skipped": probe.skipped,
            "bound_secs": probe.bound_secs,
            "partitions": probe.availability,
            "not_restored": probe.not_restored,
            "anomalies": anomalies,
        }),
    );
}

/// The broker to run: the one given (made absolute), or this workspace's, built with
/// its failpoints.
fn broker_binary(given: Option<&Path>) -> Result<PathBuf> {
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
            Ok(crate::system::build()?)
        }
    }
}

/// A seed for a test that was given none.
pub fn random_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut rng = rng::Rng::new(nanos ^ u64::from(std::process::id()));
    rng.next_u64() >> 1
}

/// The nodes of a run, and where their files go on them.
pub struct StartedBackend {
    pub backend: Arc<dyn Backend>,
    /// The nodes' files: the run folder's `nodes/` (netns), or the run's folder on
    /// every host (ssh).
    pub root: PathBuf,
    /// Whether the broker binary is copied to the nodes (they do not share our files).
    pub install_broker: bool,
}

/// Sets up `nodes` nodes on the backend the spec names.
async fn start_backend(
    spec: &BackendSpec,
    nodes: usize,
    folder: &RunFolder,
) -> Result<StartedBackend> {
    match spec {
        BackendSpec::Netns => {
            let backend = NetnsBackend::start(nodes).await?;
            Ok(StartedBackend {
                backend: Arc::new(backend),
                root: folder.nodes(),
                install_broker: false,
            })
        }
        BackendSpec::Ssh(ssh_spec) => start_ssh(ssh_spec, nodes).await,
    }
}

async fn start_ssh(spec: &SshSpec, nodes: usize) -> Result<StartedBackend> {
    let hosts = match &spec.hosts {
        HostsSource::NodesFile(file) => {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("--nodes-file {}", file.display()))?;
            ssh::parse_nodes_file(&text)
                .with_context(|| format!("--nodes-file {}", file.display()))?
        }
        HostsSource::Vagrant => ssh::vagrant_hosts(None)
            .await
            .context("--vagrant: reading `vagrant ssh-config`")?,
    };
    if hosts.len() < nodes {
        bail!(
            "--nodes {nodes}, but only {} hosts are given ({})",
            hosts.len(),
            match &spec.hosts {
                HostsSource::Vagrant => "vagrant ssh-config".to_string(),
                HostsSource::NodesFile(file) => file.display().to_string(),
            }
        );
    }
    let options = ssh::SshOptions {
        hosts,
        identity_file: spec.key.clone(),
        config_file: spec.config.clone(),
        host_keys: spec.host_key_policy(),
        remote_dir: spec.remote_dir.clone(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use spec::NotRestored;

    fn written(partition: u32, secs: Option<f64>) -> PartitionAvailability {
        PartitionAvailability {
            partition,
            first_write_secs: secs,
            last_error: secs.is_none().then(|| "request_timed_out".to_string()),
        }
    }

    #[test]
    fn one_down_is_invalid_for_a_stuck_partition_or_one_without_writes() {
        let mut results = Results::default();
        let probe = OneDownProbe {
            node: Some("n3".into()),
            skipped: None,
            bound_secs: 30.0,
            availability: vec![written(0, Some(2.5)), written(1, Some(4.0))],
            not_restored: Vec::new(),
        };
        add_one_down(&mut results, &probe);
        assert_eq!(results.verdict, Verdict::Valid);

        let mut results = Results::default();
        let stuck = OneDownProbe {
            availability: vec![written(0, Some(2.5)), written(1, None)],
            not_restored: vec![NotRestored {
                key: "jepsen/1".into(),
                leader: "n2".into(),
                replica: None,
                why: "its leader n2 has ISR {n2, n3}, the metadata {n2}".into(),
            }],
            ..probe.clone()
        };
        add_one_down(&mut results, &stuck);
        assert_eq!(results.verdict, Verdict::Invalid);
        let counted = results.counted_anomalies();
        assert_eq!(counted.get("unavailable-with-one-down"), Some(&1));
        assert_eq!(counted.get("isr-not-restored"), Some(&1));

        // A probe that did not run judges nothing.
        let mut results = Results::default();
        let skipped = OneDownProbe {
            node: None,
            skipped: Some("the settings tolerate no failure".into()),
            bound_secs: 30.0,
            ..OneDownProbe::default()
        };
        add_one_down(&mut results, &skipped);
        assert_eq!(results.verdict, Verdict::Valid);
    }
}
