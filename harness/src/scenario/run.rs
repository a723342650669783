//! Playing one scenario against a real cluster, as a stored test: the cluster in network
//! namespaces, the steps one after the other (faults through the nemesis, writes and
//! reads through the workload's client, every one recorded in `history.jsonl`), then the
//! end: background writes awaited, the network healed, paused nodes resumed, failpoints
//! released (nodes the steps killed stay down unless a step started them), the
//! availability probe, final reads, and the checkers' verdict on the history, compared
//! with the scenario's expectation. The verdict is the checkers' alone: wait-until
//! predicates may read internal state to pace the script, never to judge it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use checkers::Verdict;
use history::Outcome;
use nemesis::{
    Action, Journal, Nemesis, NemesisOptions, PackageKind, Ports, Shape, Step as NemesisStep,
};
use serde::Serialize;
use serde_json::{json, Map, Value};
use tokio::task::JoinSet;

use super::predicate::{Needs, Predicate, View};
use super::{Acks, Cut, OnTimeout, Scenario, Sending, StepKind};
use crate::check::{self, CheckModel, CheckSettings};
use crate::cluster::{Cluster, ClusterSpec};
use crate::faults::{ClusterFaults, HistoryJournal};
use crate::test_run::{
    add_availability, create_run_dir, probe_availability, update_latest, PartitionAvailability,
};
use backend::netns::NetnsBackend;
use backend::Backend;
use workloads::client::BrokerClient;
use workloads::log::{read, ReadSpec};
use workloads::recorder::Recorder;
use workloads::{Consistency, Target, WorkloadKind, WorkloadOptions, FINAL_READ_MAX};

/// Bounds the start of each group of nodes and the creation of the topic.
const SETUP_TIMEOUT: Duration = Duration::from_secs(60);
/// Bounds the final reads.
const FINAL_READS_TIMEOUT: Duration = Duration::from_secs(60);
/// Bounds one request of a wait-until's poll.
const POLL_REQUEST_TIMEOUT: Duration = Duration::from_secs(1);
/// Bounds a read step (all its requests).
const READ_STEP_TIMEOUT: Duration = Duration::from_secs(15);

/// Which way the bug switch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Buggy,
    Fixed,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Buggy => "buggy",
            Mode::Fixed => "fixed",
        }
    }
}

/// What one play of a scenario came to.
#[derive(Debug, Clone, Serialize)]
pub struct PlayOutcome {
    pub scenario: String,
    pub mode: Mode,
    /// The checkers' composed verdict; `None` when the history could not be checked.
    pub verdict: Option<Verdict>,
    /// Anomaly kinds that count against validity, with how many of each were reported.
    pub anomalies: BTreeMap<String, u64>,
    /// Whether the expectation of this mode held.
    pub met: bool,
    /// Why it did or did not.
    pub reason: String,
    pub secs: f64,
    pub run_dir: PathBuf,
    /// The steps could not play out as written (a wait-until timed out, a fault failed).
    pub problem: Option<String>,
}

/// What the run folder's `test.json` holds for a scenario.
#[derive(Serialize)]
struct ScenarioRecord<'a> {
    name: String,
    scenario: &'a str,
    file: String,
    title: &'a str,
    jira: Option<&'a str>,
    mode: Mode,
    command: String,
    nodes: usize,
    bugs: &'a [String],
    broker_config: &'a [String],
    node_settings: &'a BTreeMap<String, Vec<String>>,
    topic: &'a str,
    assignment: &'a [Vec<String>],
    broker_bin: String,
    harness_version: &'static str,
    started: String,
}

/// Plays `scenario` in `mode` with `broker_bin`, storing the run under `store`.
/// Errors only when the harness itself fails (nodes cannot be set up, the history
/// cannot be written or checked); a scenario that could not play out is an outcome with
/// a `problem`, judged not met.
pub async fn play(
    scenario: &Scenario,
    mode: Mode,
    store: &Path,
    broker_bin: &Path,
) -> Result<PlayOutcome> {
    let began = Instant::now();
    let name = format!("{}-{}", scenario.name, mode.as_str());
    let run_dir = create_run_dir(store, &name)?;
    let (bugs, settings) = match mode {
        Mode::Buggy => (
            scenario.switch.bugs.clone(),
            [
                scenario.cluster.settings.clone(),
                scenario.switch.settings.clone(),
            ]
            .concat(),
        ),
        Mode::Fixed => (Vec::new(), scenario.cluster.settings.clone()),
    };
    let record = ScenarioRecord {
        name: name.clone(),
        scenario: &scenario.name,
        file: scenario.path.display().to_string(),
        title: &scenario.title,
        jira: scenario.jira.as_deref(),
        mode,
        command: format!(
            "harness repro {}{}",
            scenario.name,
            if mode == Mode::Buggy { " --buggy" } else { "" }
        ),
        nodes: scenario.cluster.nodes.len(),
        bugs: &bugs,
        broker_config: &settings,
        node_settings: &scenario.cluster.node_settings,
        topic: &scenario.topic.name,
        assignment: &scenario.topic.assignment,
        broker_bin: broker_bin.display().to_string(),
        harness_version: env!("CARGO_PKG_VERSION"),
        started: chrono::Local::now().to_rfc3339(),
    };
    check::write_json(&run_dir.join("test.json"), &record)?;
    eprintln!(
        "{} ({}): {}\nrun folder: {}",
        scenario.name,
        mode.as_str(),
        scenario.title,
        run_dir.display()
    );

    backend::install_signal_teardown().context("cannot install the Ctrl-C handler")?;
    let backend: Arc<NetnsBackend> = Arc::new(
        NetnsBackend::start(scenario.cluster.nodes.len())
            .await
            .context("cannot set up the nodes")?,
    );
    let spec = ClusterSpec {
        broker_bin: broker_bin.to_path_buf(),
        bugs,
        settings,
        node_settings: scenario.cluster.node_settings.clone(),
        root: run_dir.join("nodes"),
        local_dir: run_dir.join("nodes"),
        install_broker: false,
    };
    let dyn_backend: Arc<dyn Backend> = backend.clone();
    let played = match Cluster::new(dyn_backend, spec) {
        Ok(cluster) => play_on(scenario, Arc::new(cluster), &run_dir).await,
        Err(error) => Err(error.into()),
    };
    let teardown = backend.teardown().await;
    let (problem, availability) = played?;
    teardown.context("tearing down the nodes")?;

    // Judge the history.
    let settings = CheckSettings {
        format: Some(history::Format::Jsonl),
        model: Some(CheckModel::Log),
        init: None,
        independent: false,
        time_limit: Duration::from_secs(120),
        memory_budget_bytes: 2 << 30,
        threads: 1,
    };
    let mut checked = check::check_file(&run_dir, &settings)?;
    if !availability.is_empty() {
        add_availability(
            &mut checked.results,
            &availability,
            scenario.expect.availability_bound,
        );
    }
    check::write_json(&run_dir.join("results.json"), &checked.results)?;
    update_latest(store, &name, &run_dir);

    let anomalies = counted_anomalies(&checked.results);
    let verdict = checked.results.verdict;
    let (met, reason) = judge(scenario, mode, verdict, &anomalies, problem.as_deref());
    let outcome = PlayOutcome {
        scenario: scenario.name.clone(),
        mode,
        verdict: Some(verdict),
        anomalies,
        met,
        reason,
        secs: began.elapsed().as_secs_f64(),
        run_dir,
        problem,
    };
    check::write_json(&outcome.run_dir.join("expectation.json"), &outcome)?;
    // Written after expectation.json so that the page shows it; a report problem must
    // not cost the run its verdict: only a warning.
    match report::write_run_reports(&outcome.run_dir) {
        Ok(written) => eprintln!("report: {}", written.report.display()),
        Err(error) => eprintln!("warning: the report could not be written: {error}"),
    }
    Ok(outcome)
}

/// Whether the expectation of `mode` held, and why.
pub fn judge(
    scenario: &Scenario,
    mode: Mode,
    verdict: Verdict,
    anomalies: &BTreeMap<String, u64>,
    problem: Option<&str>,
) -> (bool, String) {
    if let Some(problem) = problem {
        return (false, format!("the steps did not play out: {problem}"));
    }
    match mode {
        Mode::Fixed => {
            if verdict == Verdict::Valid {
                (true, "valid, as expected with the fix".into())
            } else {
                (
                    false,
                    format!(
                        "expected valid, the checkers said {} ({})",
                        verdict.as_str(),
                        list(anomalies)
                    ),
                )
            }
        }
        Mode::Buggy => {
            let missing: Vec<&str> = scenario
                .expect
                .buggy
                .iter()
                .filter(|kind| !anomalies.contains_key(kind.as_str()))
                .map(String::as_str)
                .collect();
            if verdict == Verdict::Invalid && missing.is_empty() {
                (true, format!("caught: {}", list(anomalies)))
            } else {
                (
                    false,
                    format!(
                        "expected {} with the bug, the checkers said {} ({}); missing: {}",
                        scenario.expect.buggy.join(", "),
                        verdict.as_str(),
                        list(anomalies),
                        missing.join(", ")
                    ),
                )
            }
        }
    }
}

fn list(anomalies: &BTreeMap<String, u64>) -> String {
    if anomalies.is_empty() {
        return "no anomalies".into();
    }
    anomalies
        .iter()
        .map(|(kind, n)| format!("{kind} ×{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every anomaly kind that counts against validity in any checker's report, with the
/// number of instances reported.
pub fn counted_anomalies(results: &checkers::Results) -> BTreeMap<String, u64> {
    let mut found = BTreeMap::new();
    for checker in results.checkers.values() {
        let Some(list) = checker.report.get("anomalies").and_then(Value::as_array) else {
            continue;
        };
        for anomaly in list {
            let counts = anomaly
                .get("counts_against_validity")
                .and_then(Value::as_bool)
                .unwrap_or(true);
            if let (true, Some(kind)) = (counts, anomaly.get("kind").and_then(Value::as_str)) {
                *found.entry(kind.to_string()).or_insert(0) += 1;
            }
        }
    }
    found
}

/// Starts the cluster, plays the steps and the end, stops the brokers and keeps their
/// logs. The problem when the steps could not play out (the end still ran, so the
/// history is complete and checkable), and the availability probe's findings.
async fn play_on(
    scenario: &Scenario,
    cluster: Arc<Cluster>,
    run_dir: &Path,
) -> Result<(Option<String>, Vec<PartitionAvailability>)> {
    let result = async {
        start_cluster(scenario, &cluster).await?;
        let recorder = Recorder::create(&run_dir.join("history.jsonl"))?;
        let mut player = Player::new(scenario, Arc::clone(&cluster), recorder.clone())?;
        let problem = match player.steps().await {
            Ok(()) => None,
            Err(error) => {
                let problem = format!("{error:#}");
                eprintln!("  the steps stop: {problem}");
                Some(problem)
            }
        };
        let ended = player.end().await;
        recorder.finish()?;
        anyhow::Ok((problem, ended?))
    }
    .await;
    let stopped = cluster.stop(Duration::from_secs(3)).await;
    for problem in cluster.collect_logs(&run_dir.join("nodes")).await {
        eprintln!("warning: collecting logs: {problem}");
    }
    let played = result?;
    stopped?;
    Ok(played)
}

/// Starts the nodes group by group (each once the previous group's are registered and
/// a controller is elected), then creates the topic.
async fn start_cluster(scenario: &Scenario, cluster: &Cluster) -> Result<()> {
    let began = Instant::now();
    cluster.install_configs().await?;
    let mut started: Vec<String> = Vec::new();
    for group in &scenario.cluster.start {
        for node in group {
            cluster.start_node(node).await?;
            started.push(node.clone());
        }
        wait_registered(cluster, &started).await?;
    }
    cluster
        .create_topic_assigned(
            &scenario.topic.name,
            &scenario.topic.assignment,
            SETUP_TIMEOUT,
        )
        .await?;
    eprintln!(
        "  cluster of {} nodes serving {} after {:.2} s",
        scenario.cluster.nodes.len(),
        scenario.topic.name,
        began.elapsed().as_secs_f64()
    );
    Ok(())
}

async fn wait_registered(cluster: &Cluster, nodes: &[String]) -> Result<()> {
    let began = Instant::now();
    let ids: BTreeSet<u64> = nodes
        .iter()
        .filter_map(|n| cluster.node(n).map(|n| u64::from(n.broker_id)))
        .collect();
    let mut last = String::from("no node answered");
    while began.elapsed() < SETUP_TIMEOUT {
        for node in nodes {
            if !cluster.is_running(node).await {
                bail!(
                    "the broker of {node} exited while starting: {}",
                    cluster.log_tail(node).await
                );
            }
        }
        if let Some(metadata) = cluster.metadata().await {
            let registered: BTreeSet<u64> = metadata["brokers"]
                .as_array()
                .map(|brokers| brokers.iter().filter_map(|b| b["id"].as_u64()).collect())
                .unwrap_or_default();
            if ids.is_subset(&registered) && !metadata["controller"].is_null() {
                return Ok(());
            }
            last = format!(
                "registered {registered:?}, controller {}",
                metadata["controller"]
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!(
        "{} not all registered within {SETUP_TIMEOUT:?}: {last}",
        nodes.join(", ")
    )
}

/// The state of one play.
struct Player<'a> {
    scenario: &'a Scenario,
    cluster: Arc<Cluster>,
    recorder: Recorder,
    journal: Arc<HistoryJournal>,
    nemesis: Nemesis,
    target: Arc<Target>,
    http: reqwest::Client,
    /// The next value to write (values are unique in a history).
    values: Arc<AtomicI64>,
    background: JoinSet<Result<ProduceTally>>,
    /// Failpoints armed and not released, as (node, point).
    armed: BTreeSet<(String, String)>,
    nemesis_steps: u64,
}

/// What a produce step got.
#[derive(Debug, Default, Clone, Copy)]
struct ProduceTally {
    ok: u64,
    fail: u64,
    info: u64,
}

impl ProduceTally {
    fn add(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Ok => self.ok += 1,
            Outcome::Fail => self.fail += 1,
            Outcome::Info => self.info += 1,
        }
    }

    fn merge(&mut self, other: ProduceTally) {
        self.ok += other.ok;
        self.fail += other.fail;
        self.info += other.info;
    }
}

impl std::fmt::Display for ProduceTally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ok, {} fail, {} info", self.ok, self.fail, self.info)
    }
}

/// One produce step, owned so that it can run in the background.
#[derive(Clone)]
struct ProduceJob {
    target: Arc<Target>,
    recorder: Recorder,
    partition: u32,
    first_value: i64,
    count: u32,
    acks: Acks,
    sending: Sending,
    every: Option<Duration>,
    to: Option<usize>,
    timeout: Duration,
}

impl<'a> Player<'a> {
    fn new(
        scenario: &'a Scenario,
        cluster: Arc<Cluster>,
        recorder: Recorder,
    ) -> Result<Player<'a>> {
        let partitions = u32::try_from(scenario.topic.assignment.len()).unwrap_or(u32::MAX);
        let target = Arc::new(cluster.target(&scenario.topic.name, partitions));
        let control = Arc::new(ClusterFaults::new(Arc::clone(&cluster))?);
        let journal = Arc::new(HistoryJournal::new(recorder.clone()));
        let options = NemesisOptions {
            packages: Vec::new(),
            schedule: nemesis::schedule::ScheduleOptions {
                seed: 0,
                interval: Duration::from_secs(1),
                targets: Vec::new(),
                wipe: false,
            },
        };
        let nemesis = Nemesis::new(options, control, journal.clone());
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(POLL_REQUEST_TIMEOUT)
            .build()
            .context("HTTP client")?;
        Ok(Player {
            scenario,
            cluster,
            recorder,
            journal,
            nemesis,
            target,
            http,
            values: Arc::new(AtomicI64::new(1)),
            background: JoinSet::new(),
            armed: BTreeSet::new(),
            nemesis_steps: 0,
        })
    }

    async fn steps(&mut self) -> Result<()> {
        let total = self.scenario.steps.len();
        for step in &self.scenario.steps {
            let began = Instant::now();
            let said = self.step(&step.kind).await.with_context(|| {
                format!(
                    "step {} ({}, line {})",
                    step.number,
                    step.kind.name(),
                    step.line
                )
            })?;
            eprintln!(
                "  step {}/{total} {}: {said} ({:.2} s)",
                step.number,
                step.kind.name(),
                began.elapsed().as_secs_f64()
            );
        }
        Ok(())
    }

    /// Plays one step; a line saying what happened.
    async fn step(&mut self, kind: &StepKind) -> Result<String> {
        match kind {
            StepKind::Produce {
                partition,
                count,
                acks,
                sending,
                every,
                to,
                timeout,
                background,
            } => {
                let first_value = self.values.fetch_add(i64::from(*count), Ordering::Relaxed);
                let to = match to {
                    Some(node) => Some(
                        self.target
                            .nodes
                            .iter()
                            .position(|n| &n.name == node)
                            .ok_or_else(|| anyhow!("no node {node}"))?,
                    ),
                    None => None,
                };
                let job = ProduceJob {
                    target: Arc::clone(&self.target),
                    recorder: self.recorder.clone(),
                    partition: *partition,
                    first_value,
                    count: *count,
                    acks: *acks,
                    sending: *sending,
                    every: *every,
                    to,
                    timeout: *timeout,
                };
                if *background {
                    self.background.spawn(produce(job));
                    Ok(format!("{count} record(s) in the background"))
                } else {
                    let tally = produce(job).await?;
                    Ok(format!("{count} record(s): {tally}"))
                }
            }
            StepKind::Read { partition } => self.read(*partition).await,
            StepKind::Await => {
                let tally = self.await_background().await?;
                Ok(format!("background writes done: {tally}"))
            }
            StepKind::Kill { .. }
            | StepKind::Start { .. }
            | StepKind::Pause { .. }
            | StepKind::Resume { .. }
            | StepKind::Partition { .. } => match fault_of(kind) {
                Some((package, action)) => self.fault(package, action).await,
                None => bail!("no fault for {}", kind.name()),
            },
            StepKind::Heal => self.heal_network().await,
            StepKind::Failpoint {
                node,
                point,
                actions,
            } => {
                let said = self
                    .fault(
                        PackageKind::Admin,
                        Action::Failpoint {
                            node: node.clone(),
                            point: point.clone(),
                            actions: actions.clone(),
                        },
                    )
                    .await?;
                let key = (node.clone(), point.clone());
                if actions.is_some() {
                    self.armed.insert(key);
                } else {
                    self.armed.remove(&key);
                }
                Ok(said)
            }
            StepKind::Admin { request, may_fail } => {
                let done = self
                    .fault(PackageKind::Admin, Action::AdminRequest(request.clone()))
                    .await;
                match done {
                    Err(error) if *may_fail && error.is::<FaultFailed>() => {
                        Ok(format!("refused (may_fail): {error:#}"))
                    }
                    done => done,
                }
            }
            StepKind::WaitUntil {
                predicate,
                timeout,
                poll,
                on_timeout,
            } => {
                self.wait_until(predicate, *timeout, *poll, *on_timeout)
                    .await
            }
            StepKind::Sleep(duration) => {
                tokio::time::sleep(*duration).await;
                Ok(format!("slept {:.2} s", duration.as_secs_f64()))
            }
        }
    }

    /// One fault through the nemesis (recorded there); an error if it did not happen.
    async fn fault(&mut self, package: PackageKind, action: Action) -> Result<String> {
        self.nemesis_steps += 1;
        let step = NemesisStep {
            package,
            index: self.nemesis_steps,
            delay: Duration::ZERO,
            action,
            seed: self.nemesis_steps,
        };
        let (value, error) = self.nemesis.execute_checked(&step).await?;
        match error {
            Some(error) => Err(FaultFailed(error).into()),
            None => Ok(describe_fault(&value)),
        }
    }

    /// Removes every cut in place, as the stop operation of each package that made some.
    async fn heal_network(&mut self) -> Result<String> {
        let cuts = self.nemesis.state().cuts;
        let mut said = Vec::new();
        for (package, stop) in [
            (PackageKind::Partition, Action::StopPartition),
            (PackageKind::PartitionPorts, Action::StopPartitionPorts),
        ] {
            if cuts.get(&package).is_some_and(|c| !c.is_empty()) {
                said.push(self.fault(package, stop).await?);
            }
        }
        if said.is_empty() {
            Ok("no cuts in place".into())
        } else {
            Ok(said.join("; "))
        }
    }

    /// Reads the partition from offset 0 to its end from its leader.
    async fn read(&mut self, partition: u32) -> Result<String> {
        let mut client = BrokerClient::new(
            Arc::clone(&self.target),
            POLL_REQUEST_TIMEOUT * 5,
            partition as usize,
        )?;
        let process = self.recorder.reserve_process();
        let deadline = Instant::now() + READ_STEP_TIMEOUT;
        let mut offset = 0;
        let mut records = 0;
        loop {
            let spec = ReadSpec {
                partition,
                offset,
                max: FINAL_READ_MAX,
                consistency: Consistency::Default,
                marked_final: false,
            };
            match read(&mut client, &self.recorder, process, spec, deadline).await? {
                Ok(summary) => {
                    records += summary.records;
                    if summary.records < summary.max || summary.end >= summary.high_watermark {
                        return Ok(format!(
                            "{records} record(s) up to offset {} (high watermark {})",
                            summary.end, summary.high_watermark
                        ));
                    }
                    offset = summary.end;
                }
                Err(error) => {
                    return Ok(format!(
                        "read failed ({}) after {records} record(s)",
                        error.code()
                    ))
                }
            }
        }
    }

    async fn await_background(&mut self) -> Result<ProduceTally> {
        let mut tally = ProduceTally::default();
        while let Some(joined) = self.background.join_next().await {
            tally.merge(joined.context("background produce task")??);
        }
        Ok(tally)
    }

    /// Polls until `predicate` holds or `timeout` passes; recorded as a `wait-until`
    /// nemesis operation whose completion says whether it held, and the terms' values.
    async fn wait_until(
        &mut self,
        predicate: &Predicate,
        timeout: Duration,
        poll: Duration,
        on_timeout: OnTimeout,
    ) -> Result<String> {
        let began = Instant::now();
        let token = self.journal.invoke(
            "wait-until",
            json!({"until": predicate.text(), "timeout_secs": timeout.as_secs_f64()}),
        )?;
        let needs = predicate.needs();
        let (held, view) = loop {
            let view = self.view(&needs).await;
            if predicate.eval(&view) == Ok(true) {
                break (true, view);
            }
            if began.elapsed() >= timeout {
                break (false, view);
            }
            tokio::time::sleep(poll.min(timeout.saturating_sub(began.elapsed()))).await;
        };
        let waited = began.elapsed().as_secs_f64();
        let state = predicate.describe(&view);
        let error = (!held).then(|| format!("timeout after {waited:.1} s"));
        self.journal.complete(
            token,
            "wait-until",
            json!({"until": predicate.text(), "held": held, "waited_secs": waited, "state": state}),
            error,
        )?;
        match (held, on_timeout) {
            (true, _) => Ok(format!("{} held after {waited:.2} s", predicate.text())),
            (false, OnTimeout::Continue) => Ok(format!(
                "{} did not hold within {:.1} s (on_timeout = continue): {state}",
                predicate.text(),
                timeout.as_secs_f64()
            )),
            (false, OnTimeout::Fail) => bail!(
                "{} did not hold within {:.1} s: {state}",
                predicate.text(),
                timeout.as_secs_f64()
            ),
        }
    }

    /// What `needs` asks for, from the nodes that are running and not paused.
    async fn view(&self, needs: &Needs) -> View {
        let paused = self.nemesis.state().paused;
        let reachable = |node: &str| self.cluster.pid(node).is_some() && !paused.contains(node);
        let mut view = View {
            node_of_broker: self
                .cluster
                .nodes
                .iter()
                .map(|n| (u64::from(n.broker_id), n.name.clone()))
                .collect(),
            ..View::default()
        };
        if needs.metadata {
            for node in &self.cluster.nodes {
                if !reachable(&node.name) {
                    continue;
                }
                if let Some(metadata) = self.get_json(&node.client_url(), "/v1/metadata").await {
                    view.metadata = Some(metadata);
                    break;
                }
            }
        }
        for (wanted, path, into) in [
            (&needs.replicas, "/v1/debug/replicas", &mut view.replicas),
            (
                &needs.failpoints,
                "/v1/debug/failpoints",
                &mut view.failpoints,
            ),
        ] {
            for name in wanted {
                let Some(node) = self.cluster.node(name) else {
                    continue;
                };
                if !reachable(name) {
                    continue;
                }
                if let Some(answer) = self.get_json(&node.client_url(), path).await {
                    into.insert(name.clone(), answer);
                }
            }
        }
        view
    }

    async fn get_json(&self, base: &str, path: &str) -> Option<Value> {
        let response = self.http.get(format!("{base}{path}")).send().await.ok()?;
        if !response.status().is_success() {
            return None;
        }
        response.json::<Value>().await.ok()
    }

    /// The end of every play: background writes awaited, cuts removed, paused nodes
    /// resumed, failpoints released; then the availability probe (its findings
    /// returned) and the final reads.
    async fn end(&mut self) -> Result<Vec<PartitionAvailability>> {
        let tally = self.await_background().await?;
        if tally.ok + tally.fail + tally.info > 0 {
            eprintln!("  background writes done: {tally}");
        }
        let healed = self.heal_network().await;
        if let Err(error) = &healed {
            eprintln!("  warning: healing the network: {error:#}");
        }
        let paused: Vec<String> = self.nemesis.state().paused.into_iter().collect();
        if !paused.is_empty() {
            if let Err(error) = self
                .fault(PackageKind::Pause, Action::ResumeNodes { nodes: paused })
                .await
            {
                eprintln!("  warning: resuming: {error:#}");
            }
        }
        for (node, point) in std::mem::take(&mut self.armed) {
            if self.cluster.pid(&node).is_none() {
                continue;
            }
            if let Err(error) = self
                .fault(
                    PackageKind::Admin,
                    Action::Failpoint {
                        node: node.clone(),
                        point: point.clone(),
                        actions: None,
                    },
                )
                .await
            {
                eprintln!("  warning: releasing {point} on {node}: {error:#}");
            }
        }
        let mut options = WorkloadOptions::new(WorkloadKind::Log, 0);
        options.concurrency = 1;
        let bound = self.scenario.expect.availability_bound;
        let availability =
            probe_availability(&self.target, &options, &self.recorder, bound).await?;
        for p in &availability {
            match p.first_write_secs {
                Some(secs) => eprintln!(
                    "  availability: partition {} took a write after {secs:.2} s",
                    p.partition
                ),
                None => eprintln!(
                    "  availability: partition {} took no write within {:.0} s (last error: {})",
                    p.partition,
                    bound.as_secs_f64(),
                    p.last_error.as_deref().unwrap_or("none")
                ),
            }
        }
        // A partition that took no write within the bound may not serve a linearizable
        // read either (KAFKA-3083: its leader's epoch is not the store's): the verdict is
        // invalid already, so the final reads do not wait their full minute for it.
        let finals_timeout = if availability.iter().any(|p| p.first_write_secs.is_none()) {
            FINAL_READS_TIMEOUT.min(bound.max(Duration::from_secs(5)))
        } else {
            FINAL_READS_TIMEOUT
        };
        let finals =
            workloads::final_reads(&self.target, &options, &self.recorder, finals_timeout).await?;
        if !finals.complete() {
            eprintln!("  warning: the final reads did not reach the end of every partition");
        }
        Ok(availability)
    }
}

/// The nemesis action of a process or network step.
fn fault_of(kind: &StepKind) -> Option<(PackageKind, Action)> {
    Some(match kind {
        StepKind::Kill { target, wipe } => (
            PackageKind::Kill,
            Action::Kill {
                target: target.clone(),
                wipe: *wipe,
            },
        ),
        StepKind::Start { nodes } => (
            PackageKind::Kill,
            Action::StartNodes {
                nodes: nodes.clone(),
            },
        ),
        StepKind::Pause { target } => (
            PackageKind::Pause,
            Action::Pause {
                target: target.clone(),
            },
        ),
        StepKind::Resume { nodes } => (
            PackageKind::Pause,
            Action::ResumeNodes {
                nodes: nodes.clone(),
            },
        ),
        StepKind::Partition { cut, ports } => {
            let (shape, one_way) = match cut {
                Cut::Isolate { target, one_way } => (Shape::Isolate(target.clone()), *one_way),
                Cut::Drop(grudge) => (Shape::Explicit(grudge.clone()), false),
            };
            if *ports == Ports::All && !one_way {
                (PackageKind::Partition, Action::Partition { shape })
            } else {
                (
                    PackageKind::PartitionPorts,
                    Action::PartitionPorts {
                        shape,
                        ports: *ports,
                        one_way,
                    },
                )
            }
        }
        _ => return None,
    })
}

/// A fault that did not happen (recorded so in the history).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct FaultFailed(String);

/// One line of what a fault did, from its completion's value.
fn describe_fault(value: &Value) -> String {
    let mut parts = Vec::new();
    for key in [
        "nodes", "grudge", "ports", "point", "actions", "request", "wiped", "healed",
    ] {
        if let Some(v) = value.get(key) {
            if !v.is_null() {
                parts.push(format!("{key} {v}"));
            }
        }
    }
    if let Some(answer) = value.get("answer") {
        let text = answer.to_string();
        let short: String = text.chars().take(160).collect();
        parts.push(format!("answer {short}"));
    }
    parts.join(", ")
}

/// Writes the job's records as it says, recording each as an append.
async fn produce(job: ProduceJob) -> Result<ProduceTally> {
    match job.sending {
        Sending::OneByOne => produce_one_by_one(&job).await,
        Sending::Batch => produce_batch(&job).await,
        Sending::Concurrent => {
            let mut tasks = JoinSet::new();
            for i in 0..job.count {
                let mut single = job.clone();
                single.first_value = job.first_value + i64::from(i);
                single.count = 1;
                single.sending = Sending::OneByOne;
                tasks.spawn(async move { produce_one_by_one(&single).await });
            }
            let mut tally = ProduceTally::default();
            while let Some(joined) = tasks.join_next().await {
                tally.merge(joined.context("produce task")??);
            }
            Ok(tally)
        }
    }
}

fn invoke_value(job: &ProduceJob, key: &str, value: i64) -> Value {
    let mut body = Map::new();
    body.insert("key".into(), json!(key));
    body.insert("value".into(), json!(value));
    if job.acks != Acks::All {
        body.insert("acks".into(), json!(job.acks.as_str()));
    }
    Value::Object(body)
}

/// Records an append's completion: `ok` at its offset, or the outcome and error code it
/// failed with; returns the outcome.
fn complete_append(
    job: &ProduceJob,
    invocation: workloads::recorder::Invocation,
    key: &str,
    value: i64,
    result: Result<i64, (Outcome, String)>,
) -> Result<Outcome> {
    let (outcome, done, error) = match result {
        Ok(offset) => (
            Outcome::Ok,
            json!({"key": key, "value": value, "offset": offset}),
            None,
        ),
        Err((outcome, code)) => (outcome, json!({"key": key, "value": value}), Some(code)),
    };
    job.recorder.complete(invocation, outcome, done, error)?;
    Ok(outcome)
}

async fn produce_one_by_one(job: &ProduceJob) -> Result<ProduceTally> {
    let mut client =
        BrokerClient::new(Arc::clone(&job.target), job.timeout, job.partition as usize)?;
    let key = job.target.key(job.partition);
    let mut process = job.recorder.reserve_process();
    let mut tally = ProduceTally::default();
    for i in 0..job.count {
        if i > 0 {
            if let Some(every) = job.every {
                tokio::time::sleep(every).await;
            }
        }
        let value = job.first_value + i64::from(i);
        let node = match job.to {
            Some(node) => node,
            None => client.route(job.partition).await,
        };
        let invocation = job.recorder.invoke(
            process,
            "append",
            invoke_value(job, &key, value),
            Some(job.target.node_name(node)),
        )?;
        let result = client
            .produce_acks(node, job.partition, &json!(value), job.acks.as_str())
            .await
            .map_err(|error| (error.write_outcome(), error.code()));
        let outcome = complete_append(job, invocation, &key, value, result)?;
        tally.add(outcome);
        if outcome == Outcome::Info {
            process = job.recorder.reserve_process();
        }
    }
    Ok(tally)
}

async fn produce_batch(job: &ProduceJob) -> Result<ProduceTally> {
    let mut client =
        BrokerClient::new(Arc::clone(&job.target), job.timeout, job.partition as usize)?;
    let key = job.target.key(job.partition);
    let node = match job.to {
        Some(node) => node,
        None => client.route(job.partition).await,
    };
    let values: Vec<i64> = (0..i64::from(job.count))
        .map(|i| job.first_value + i)
        .collect();
    let mut invocations = Vec::with_capacity(values.len());
    for &value in &values {
        let process = job.recorder.reserve_process();
        invocations.push(job.recorder.invoke(
            process,
            "append",
            invoke_value(job, &key, value),
            Some(job.target.node_name(node)),
        )?);
    }
    let payload: Vec<Value> = values.iter().map(|v| json!(v)).collect();
    let result = client
        .produce_batch(node, job.partition, &payload, job.acks.as_str())
        .await;
    let failed = |outcome: Outcome, code: String| vec![Err((outcome, code)); values.len()];
    let results: Vec<Result<i64, (Outcome, String)>> = match result {
        Ok(offsets) if offsets.len() == values.len() => offsets.into_iter().map(Ok).collect(),
        // An answer that does not match the request: whether it happened is unknown.
        Ok(offsets) => failed(
            Outcome::Info,
            format!(
                "bad_response: {} offsets for {} values",
                offsets.len(),
                values.len()
            ),
        ),
        Err(error) => failed(error.write_outcome(), error.code()),
    };
    let mut tally = ProduceTally::default();
    for ((invocation, value), one) in invocations.into_iter().zip(&values).zip(results) {
        tally.add(complete_append(job, invocation, &key, *value, one)?);
    }
    Ok(tally)
}
