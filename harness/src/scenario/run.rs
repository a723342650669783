//! Playing one scenario against a real cluster, as a stored test: the cluster in network
//! namespaces, the steps one after the other (faults through the nemesis, writes and
//! reads through the workload's client, every one recorded in `history.jsonl`), then the
//! end: background writes awaited, the network healed, paused nodes resumed, failpoints
//! released (nodes the steps killed stay down unless a step started them), the
//! availability probe, final reads, and the checkers' verdict on the history, compared
//! with the scenario's expectation. The verdict is the checkers' alone: wait-until
//! predicates may read internal state to pace the script, never to judge it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use checkers::Verdict;
use history::Outcome;
use nemesis::{
    Action, Journal, Nemesis, NemesisOptions, PackageKind, Ports, Shape, Step as NemesisStep,
};
use serde_json::{json, Map, Value};
use tokio::task::JoinSet;

use super::predicate::{Needs, Predicate, View};
use super::{Acks, Cut, OnTimeout, Scenario, Sending, StepKind};
use crate::check::CheckSettings;
use crate::cluster::Cluster;
use crate::faults::{ClusterFaults, HistoryJournal};
use crate::lifecycle::{self, Broker, Judged, Phases, Ran};
use crate::one_down::OneDown;
use spec::{
    BackendSpec, BrokerSettings, Expectation, OneDownProbe, PartitionAvailability, Plan, RunFolder,
    RunStats, ScenarioInfo, ScenarioPlan, TestSpec,
};
use sut::{Connector, TopicLayout, TopicSpec};
use workloads::availability::probe_availability;
use workloads::log::{read, ReadSpec};
use workloads::recorder::Recorder;
use workloads::{
    Consistency, WorkloadError, WorkloadKind, WorkloadOptions, WorkloadStats, FINAL_READ_MAX,
};

/// Bounds the start of each group of nodes and the creation of the topic.
const SETUP_TIMEOUT: Duration = Duration::from_secs(60);
/// Bounds the final reads.
const FINAL_READS_TIMEOUT: Duration = Duration::from_secs(60);
/// Bounds one request of a read step.
const READ_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Bounds a read step (all its requests).
const READ_STEP_TIMEOUT: Duration = Duration::from_secs(15);

pub use spec::Mode;

/// What one play of a scenario came to (its `expectation.json`).
pub type PlayOutcome = spec::Expectation;

/// Plays `scenario` in `mode` with `broker`, storing the run under `store`.
/// Errors only when the harness itself fails (nodes cannot be set up, the history
/// cannot be written or checked); a scenario that could not play out is an outcome with
/// a `problem`, judged not met.
pub async fn play(
    scenario: &Scenario,
    mode: Mode,
    store: &Path,
    broker: &Broker,
) -> Result<PlayOutcome> {
    let spec = scenario_spec(scenario, mode, store, broker.given.as_deref());
    let finished = lifecycle::run(&spec, &ScenarioTest { scenario, mode }, broker).await?;
    finished
        .expectation
        .ok_or_else(|| anyhow!("internal: a scenario's run came back without its expectation"))
}

/// The test that plays `scenario` in `mode`: the brokers' switches and settings of the
/// mode, always on network namespaces.
pub fn scenario_spec(
    scenario: &Scenario,
    mode: Mode,
    store: &Path,
    broker_bin: Option<&Path>,
) -> TestSpec {
    let (bugs, config) = match mode {
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
    let scenarios_dir = scenario
        .path
        .parent()
        .filter(|dir| dir.canonicalize().ok() != super::default_dir().canonicalize().ok())
        .map(Path::to_path_buf);
    let plan = Plan::Scenario(ScenarioPlan {
        scenario: scenario.name.clone(),
        scenarios_dir,
        mode,
    });
    TestSpec {
        name: TestSpec::default_name(&plan),
        store: store.to_path_buf(),
        seed: 0,
        backend: BackendSpec::Netns,
        broker_bin: broker_bin.map(Path::to_path_buf),
        brokers: BrokerSettings { bugs, config },
        plan,
    }
}

/// A scenario's phases in the test lifecycle.
struct ScenarioTest<'a> {
    scenario: &'a Scenario,
    mode: Mode,
}

impl Phases for ScenarioTest<'_> {
    fn nodes(&self) -> usize {
        self.scenario.cluster.nodes.len()
    }

    fn node_settings(&self) -> BTreeMap<String, Vec<String>> {
        self.scenario.cluster.node_settings.clone()
    }

    fn waives_durability(&self) -> bool {
        self.scenario.expect.waive_durability
    }

    fn scenario(&self) -> Option<ScenarioInfo> {
        let scenario = self.scenario;
        Some(ScenarioInfo {
            name: scenario.name.clone(),
            title: scenario.title.clone(),
            jira: scenario.jira.clone(),
            file: spec::folder::shown_path(&scenario.path),
            nodes: scenario.cluster.nodes.len(),
            node_settings: scenario.cluster.node_settings.clone(),
            assignment: scenario.topic.assignment.clone(),
        })
    }

    fn topic(&self) -> String {
        self.scenario.topic.name.clone()
    }

    fn check_settings(&self) -> CheckSettings {
        lifecycle::check_settings_for(
            WorkloadKind::Log.checker(),
            Duration::from_secs(120),
            2 << 30,
            1,
        )
    }

    fn availability_bound(&self) -> Duration {
        self.scenario.expect.availability_bound
    }

    fn announce(&self, _spec: &TestSpec, folder: &RunFolder) {
        eprintln!(
            "{} ({}): {}\nrun folder: {}",
            self.scenario.name,
            self.mode.as_str(),
            self.scenario.title,
            folder.dir().display()
        );
    }

    async fn run(&self, cluster: &Arc<Cluster>, folder: &RunFolder) -> Result<Ran> {
        let played = play_on(self.scenario, Arc::clone(cluster), folder).await?;
        Ok(Ran {
            stats: RunStats {
                availability: played.availability,
                one_down: played.one_down,
                history_unix_ms: Some(played.history_unix_ms),
                history_unix_ms_at_end: Some(played.history_unix_ms_at_end),
                ..RunStats::default()
            },
            problem: played.problem,
        })
    }

    fn expect(&self, judged: &Judged<'_>) -> Option<Expectation> {
        let verdict = judged.results.verdict;
        let (met, reason) = judge(
            self.scenario,
            self.mode,
            verdict,
            judged.anomalies,
            judged.problem,
        );
        Some(Expectation {
            scenario: self.scenario.name.clone(),
            mode: self.mode,
            verdict: Some(verdict),
            anomalies: judged.anomalies.clone(),
            met,
            reason,
            secs: judged.secs,
            run_dir: judged.folder.dir().to_path_buf(),
            problem: judged.problem.map(str::to_string),
        })
    }
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

/// What a play left behind besides its history.
struct Played {
    /// Why the steps could not play out (the end still ran, so the history is complete
    /// and checkable).
    problem: Option<String>,
    /// The availability probe's findings.
    availability: Vec<PartitionAvailability>,
    /// The one-down probe's, when the scenario's end asks for it.
    one_down: Option<OneDownProbe>,
    /// The history's time 0 by the wall clock ([`Recorder::wall_start_unix_ms`]), read
    /// when the recording began and again when it ended.
    history_unix_ms: u64,
    history_unix_ms_at_end: u64,
}

/// Starts the cluster, plays the steps and the end, stops the brokers and keeps their
/// logs.
async fn play_on(scenario: &Scenario, cluster: Arc<Cluster>, folder: &RunFolder) -> Result<Played> {
    start_cluster(scenario, &cluster).await?;
    let recorder = Recorder::create(&folder.history())?;
    let history_unix_ms = recorder.wall_start_unix_ms();
    let mut player = Player::new(scenario, Arc::clone(&cluster), recorder.clone())?;
    let problem = match player.steps().await {
        Ok(()) => None,
        Err(error) => {
            let problem = format!("{error:#}");
            eprintln!("  the steps stop: {problem}");
            Some(problem)
        }
    };
    let ended = player.end().await?;
    let history_unix_ms_at_end = recorder.wall_start_unix_ms();
    recorder.finish()?;
    Ok(Played {
        problem,
        availability: ended.availability,
        one_down: ended.one_down,
        history_unix_ms,
        history_unix_ms_at_end,
    })
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
    let topic = TopicSpec {
        name: scenario.topic.name.clone(),
        layout: TopicLayout::Assigned(scenario.topic.assignment.clone()),
    };
    cluster
        .api
        .create_topic(&topic, SETUP_TIMEOUT)
        .await
        .map_err(|e| anyhow!(e))?;
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
        if let Some(roles) = cluster.api.roles(&cluster.node_names()).await {
            if roles.formed_with(nodes) {
                return Ok(());
            }
            last = format!(
                "registered {:?}, controller {}",
                roles.registered,
                roles.controller.as_deref().unwrap_or("none")
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!(
        "{} not all registered within {SETUP_TIMEOUT:?}: {last}",
        nodes.join(", ")
    )
}

/// What the end of a play found.
struct Ended {
    availability: Vec<PartitionAvailability>,
    one_down: Option<OneDownProbe>,
}

/// Bounds the wait for the cluster to serve again after the final heal of an `[end]`
/// with `restart`, and after the one-down probe.
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(60);

/// The state of one play.
struct Player<'a> {
    scenario: &'a Scenario,
    cluster: Arc<Cluster>,
    recorder: Recorder,
    journal: Arc<HistoryJournal>,
    nemesis: Nemesis,
    /// The clients of the scenario's topic.
    connector: Arc<dyn Connector>,
    /// The next value to write (values are unique in a history).
    values: Arc<AtomicI64>,
    background: JoinSet<Result<ProduceTally>>,
    /// The workload step's clients, while they run.
    workload: Option<tokio::task::JoinHandle<Result<WorkloadStats, WorkloadError>>>,
    /// The nemesis's hands on the cluster (the one-down probe uses them too).
    control: Arc<ClusterFaults>,
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
    connector: Arc<dyn Connector>,
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
        let connector = cluster.connector(&cluster.target(&scenario.topic.name, partitions))?;
        let control = Arc::new(ClusterFaults::new(Arc::clone(&cluster)));
        let journal = Arc::new(HistoryJournal::new(recorder.clone()));
        let options = NemesisOptions {
            packages: Vec::new(),
            schedule: nemesis::schedule::ScheduleOptions {
                seed: 0,
                interval: Duration::from_secs(1),
                targets: Vec::new(),
                wipe: false,
                unclean_elections: false,
                asks_divergence: true,
            },
            swarm: None,
        };
        let hands: Arc<dyn nemesis::ClusterControl> = control.clone();
        let nemesis = Nemesis::new(options, hands, journal.clone());
        Ok(Player {
            scenario,
            cluster,
            recorder,
            journal,
            nemesis,
            connector,
            values: Arc::new(AtomicI64::new(1)),
            background: JoinSet::new(),
            workload: None,
            control,
            armed: BTreeSet::new(),
            nemesis_steps: 0,
        })
    }

    async fn steps(&mut self) -> Result<()> {
        let total = self.scenario.steps.len();
        for step in &self.scenario.steps {
            let began = Instant::now();
            let said = match self.step(&step.kind).await {
                // A fault that did not happen, on a step that may fail: recorded, go on.
                Err(error) if step.may_fail && error.is::<FaultFailed>() => {
                    Ok(format!("did not act (may_fail): {error:#}"))
                }
                done => done,
            };
            let said = said.with_context(|| {
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
                        self.connector
                            .target()
                            .node_index(node)
                            .ok_or_else(|| anyhow!("no node {node}"))?,
                    ),
                    None => None,
                };
                let job = ProduceJob {
                    connector: Arc::clone(&self.connector),
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
            StepKind::Workload(options) => {
                // As a test's clients: once every partition has a leader serving.
                let topic = &self.scenario.topic;
                let partitions = u32::try_from(topic.assignment.len()).unwrap_or(u32::MAX);
                let began = Instant::now();
                while !self.cluster.api.topic_served(&topic.name, partitions).await {
                    if began.elapsed() >= SETUP_TIMEOUT {
                        bail!("{} is not served after {SETUP_TIMEOUT:?}", topic.name);
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                let connector = Arc::clone(&self.connector);
                let recorder = self.recorder.clone();
                let options = options.clone();
                let said = format!(
                    "{} clients at {} ops/s for {:.1} s in the background",
                    options.concurrency,
                    options.rate,
                    options.time_limit.as_secs_f64()
                );
                self.workload = Some(tokio::spawn(async move {
                    // Never stopped early: it ends at its time limit.
                    let (_stopper, stop) = workloads::stop_signal();
                    workloads::run_workload(&*connector, &options, &recorder, &stop).await
                }));
                Ok(said)
            }
            StepKind::Strike(aim) => {
                match self
                    .fault(PackageKind::Aimed, Action::Aim(aim.clone()))
                    .await
                {
                    // A strike whose moment did not come is recorded; the steps go on.
                    Err(error) if error.is::<FaultFailed>() => {
                        Ok(format!("did not strike: {error:#}"))
                    }
                    done => done,
                }
            }
            StepKind::StopStrike => self.fault(PackageKind::Aimed, Action::StopAim).await,
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
        let mut client = self
            .connector
            .connect(READ_REQUEST_TIMEOUT, partition as usize);
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
            match read(&mut *client, &self.recorder, process, spec, deadline).await? {
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
        if let Some(workload) = self.workload.take() {
            let stats = workload.await.context("the workload's task")??;
            eprintln!(
                "  workload done: {} ops ({} ok, {} fail, {} info)",
                stats.ops, stats.ok, stats.fail, stats.info
            );
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
        let reachable: Vec<String> = self
            .cluster
            .node_names()
            .into_iter()
            .filter(|node| self.cluster.pid(node).is_some() && !paused.contains(node))
            .collect();
        let api = &self.cluster.api;
        let mut view = View::default();
        if needs.metadata {
            view.roles = api.roles(&reachable).await;
        }
        for name in needs.replicas.iter().filter(|n| reachable.contains(n)) {
            if let Some(replicas) = api.replicas(name).await {
                view.replicas.insert(name.clone(), replicas);
            }
        }
        for name in needs.failpoints.iter().filter(|n| reachable.contains(n)) {
            if let Some(hits) = api.failpoint_hits(name).await {
                view.hits.insert(name.clone(), hits);
            }
        }
        view
    }

    /// The end of every play: background writes awaited, cuts removed, paused nodes
    /// resumed, failpoints released; then the availability probe (its findings
    /// returned) and the final reads.
    async fn end(&mut self) -> Result<Ended> {
        let tally = self.await_background().await?;
        if tally.ok + tally.fail + tally.info > 0 {
            eprintln!("  background writes done: {tally}");
        }
        let partitions = u32::try_from(self.scenario.topic.assignment.len()).unwrap_or(u32::MAX);
        let mut recovered = true;
        if self.scenario.end.restart {
            // As a test's final heal: every fault undone, then the cluster serving again.
            let left = self
                .nemesis
                .heal_all()
                .await
                .context("the nemesis could not record the final heal")?;
            if !left.is_healed() {
                eprintln!("  warning: the final heal left faults in place");
            }
            if !self.serving_again("the final heal", partitions).await {
                recovered = false;
            }
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
            probe_availability(&*self.connector, &options, &self.recorder, bound).await?;
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
        let one_down = if self.scenario.end.one_down {
            let probe = self
                .one_down(&options, &availability, recovered, partitions)
                .await?;
            if probe.node.is_some() {
                self.serving_again("the one-down probe", partitions).await;
            }
            Some(probe)
        } else {
            None
        };
        let finals =
            workloads::final_reads(&*self.connector, &options, &self.recorder, finals_timeout)
                .await?;
        if !finals.complete() {
            eprintln!("  warning: the final reads did not reach the end of every partition");
        }
        Ok(Ended {
            availability,
            one_down,
        })
    }

    /// Waits until the cluster serves the topic again after `what` (at most
    /// [`RECOVERY_TIMEOUT`]); whether it does, with a warning when not.
    async fn serving_again(&self, what: &str, partitions: u32) -> bool {
        let topic = &self.scenario.topic.name;
        match crate::test_run::wait_serving(&self.cluster, topic, partitions, RECOVERY_TIMEOUT)
            .await
        {
            Ok(()) => true,
            Err(problem) => {
                eprintln!("  warning: after {what} the cluster did not serve again: {problem}");
                false
            }
        }
    }

    /// The one-down probe of a test, on the scenario's topic: the replication factor is
    /// the largest replica set the metadata shows for it now (a topic may have grown).
    async fn one_down(
        &self,
        options: &WorkloadOptions,
        availability: &[PartitionAvailability],
        recovered: bool,
        partitions: u32,
    ) -> Result<OneDownProbe> {
        let topic = &self.scenario.topic;
        let shown = self
            .cluster
            .api
            .roles(&self.cluster.node_names())
            .await
            .and_then(|roles| {
                roles
                    .partitions
                    .iter()
                    .filter(|p| p.topic == topic.name)
                    .map(|p| p.replicas.len())
                    .max()
            });
        let assigned = topic.assignment.iter().map(Vec::len).max().unwrap_or(1);
        let replication_factor = u32::try_from(shown.unwrap_or(assigned)).unwrap_or(1);
        let available = recovered && availability.iter().all(|p| p.first_write_secs.is_some());
        OneDown {
            cluster: &self.cluster,
            topic: &topic.name,
            control: &self.control,
            journal: &self.journal,
            connector: &*self.connector,
            options,
            recorder: &self.recorder,
            replication_factor,
            partitions,
            seed: 0,
            bound: self.scenario.expect.availability_bound,
            kill: available,
        }
        .run()
        .await
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
    let mut client = job.connector.connect(job.timeout, job.partition as usize);
    let key = job.connector.target().key(job.partition);
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
            Some(job.connector.target().node_name(node)),
        )?;
        let result = client
            .produce(node, job.partition, &json!(value), job.acks)
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
    let mut client = job.connector.connect(job.timeout, job.partition as usize);
    let key = job.connector.target().key(job.partition);
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
            Some(job.connector.target().node_name(node)),
        )?);
    }
    let payload: Vec<Value> = values.iter().map(|v| json!(v)).collect();
    let result = client
        .produce_batch(node, job.partition, &payload, job.acks)
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
