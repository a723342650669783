//! `harness test`: a workload's clients against a fresh cluster while the nemesis
//! injects faults (DESIGN.md §3), as the [`Phases`] of the one test lifecycle
//! ([`crate::lifecycle`]).
//!
//! The phases: start the brokers and wait until the cluster serves → run the workload,
//! streaming `history.jsonl`, and the nemesis beside it → when the time limit ends,
//! stop the nemesis and heal everything (every cut removed, paused brokers resumed,
//! killed ones restarted) → verify the cluster serves again (every node registered and
//! answering, every partition led by a caught-up leader) → availability probe (every
//! partition must accept a write within [`AVAILABILITY_BOUND`]) → final reads. Then
//! the lifecycle checks the history; this module prints the summary and the last two
//! lines `run: <folder>` and `verdict: <verdict>`.
//!
//! Healing is guaranteed: a phase that fails heals before the brokers are stopped.
//!
//! RF-1-then-grow (`--grow-replication-after`): the topic is created with one replica per
//! partition, and beside the workload and the nemesis every partition is reassigned to
//! the plan's replication factor once the delay has passed: its replica plus nodes drawn
//! from the seed (per partition, one of the added nodes sometimes goes first, as the new
//! preferred leader). Each request is a `grow-replication` invoke/complete pair of the
//! `nemesis` process in the history, retried every second until it is accepted or the
//! workload ends (an admin request may fail while the controller is cut off); one the
//! workload phase did not get through is tried again after the heal, for up to 30 s, so
//! that the topic has the declared factor before anything is judged.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use backend::Signal;
use checkers::Verdict;
use indicatif::{ProgressBar, ProgressStyle};
use nemesis::schedule::ScheduleOptions;
use nemesis::{AdminAction, ClusterControl, Journal, JournalError, Nemesis, NemesisOptions};
use rng::Rng;
use serde::Serialize;
use serde_json::json;
use spec::{OneDownProbe, RunFolder, RunStats, TestSpec, WorkloadPlan};
use tokio::sync::watch;
use workloads::availability::probe_availability;
use workloads::recorder::Recorder;
use workloads::WorkloadOptions;

use crate::check::CheckSettings;
use crate::cluster::Cluster;
use crate::faults::{ClusterFaults, HistoryJournal};
use crate::lifecycle::{self, Broker, Phases, Ran, TOPIC};
use crate::one_down::OneDown;
use sut::{Connector, TopicLayout, TopicSpec};

/// How long the cluster may take to form and serve the topic.
const SERVING_TIMEOUT: Duration = Duration::from_secs(90);
/// After the heal, every partition must accept an acks=all write within this.
pub const AVAILABILITY_BOUND: Duration = Duration::from_secs(30);
/// How long the final reads may take.
const FINAL_READS_TIMEOUT: Duration = Duration::from_secs(60);
/// After the final heal, how long the cluster may take to serve again: every node
/// registered and answering, every partition led by a caught-up leader. Generous: a
/// restarted broker must rejoin the quorum, and a wiped one re-replicate its partitions
/// (four times the longest session timeout of the nightly matrix; detection runs on this
/// machine recovered within 16 s when they recovered at all, and a cluster that does not
/// only delays its verdict by waiting longer; the availability probe judges it).
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(60);
/// After the one-down probe restarted its node, how long the cluster may take to serve
/// again before the final reads (a restart on its own data: quick, unless the probe
/// found the cluster broken, when waiting longer only delays the verdict).
const AFTER_ONE_DOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// Bounds the heal after a failed phase (the brokers are stopped next anyway).
const EMERGENCY_HEAL_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `harness test`; returns the exit code (0 valid, 1 invalid, 2 unknown).
pub fn run(spec: &TestSpec) -> Result<i32> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let broker = Broker::resolve(spec.broker_bin.as_deref())?;
    let outcome = runtime.block_on(execute(spec, &broker))?;
    Ok(outcome.verdict.exit_code())
}

/// What one test came to.
#[derive(Debug, Clone, Serialize)]
pub struct TestOutcome {
    pub run_dir: PathBuf,
    pub seed: u64,
    pub verdict: Verdict,
    /// Anomaly kinds that count against validity, with how many of each were reported
    /// (`not-<checker>` for a checker judged invalid that lists none).
    pub anomalies: BTreeMap<String, u64>,
    /// Wall-clock seconds from start to verdict.
    pub secs: f64,
    /// Client operations the workload ran.
    pub ops: u64,
}

/// Runs one workload test (a spec with a workload plan, validated), printing its
/// progress and summary as `harness test` does; an `Err` is a failure of the harness or
/// the cluster (no verdict).
pub async fn execute(spec: &TestSpec, broker: &Broker) -> Result<TestOutcome> {
    let spec::Plan::Workload(plan) = &spec.plan else {
        anyhow::bail!("internal: `harness test` runs workload plans, not scenarios");
    };
    let test = WorkloadTest {
        plan: plan.clone(),
        seed: spec.seed,
    };
    let finished = lifecycle::run(spec, &test, broker).await?;
    let stats = &finished.stats;
    crate::check::print_summary(&finished.checked);
    print_availability(stats);
    for line in crate::truncations::summary_lines(&finished.checked.results)
        .into_iter()
        .chain(crate::admissions::summary_lines(&finished.checked.results))
    {
        println!("{line}");
    }
    if let Some(probe) = &stats.one_down {
        print_one_down(probe);
    }
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
    println!("run: {}", finished.folder.dir().display());
    println!("verdict: {}", finished.verdict().as_str());
    Ok(TestOutcome {
        run_dir: finished.folder.dir().to_path_buf(),
        seed: spec.seed,
        verdict: finished.verdict(),
        anomalies: finished.anomalies,
        secs: finished.secs,
        ops: stats.ops,
    })
}

/// A workload test's phases.
struct WorkloadTest {
    plan: WorkloadPlan,
    seed: u64,
}

impl Phases for WorkloadTest {
    fn nodes(&self) -> usize {
        self.plan.nodes as usize
    }

    fn check_settings(&self) -> CheckSettings {
        lifecycle::check_settings_for(
            self.plan.workload.checker(),
            Duration::from_secs(300),
            4 << 30,
            std::thread::available_parallelism().map_or(1, |n| n.get()),
        )
    }

    fn availability_bound(&self) -> Duration {
        AVAILABILITY_BOUND
    }

    fn announce(&self, spec: &TestSpec, folder: &RunFolder) {
        println!("seed: {}", spec.seed);
        println!("run folder: {}", folder.dir().display());
    }

    async fn run(&self, cluster: &Arc<Cluster>, folder: &RunFolder) -> Result<Ran> {
        let stats = run_phases(&self.plan, self.seed, folder, cluster).await?;
        Ok(Ran {
            stats,
            problem: None,
        })
    }
}

fn nemesis_options(plan: &WorkloadPlan, seed: u64, cluster: &Cluster) -> NemesisOptions {
    let spec = &cluster.spec;
    // The settings every broker has, then each node's with its own after them.
    let settings: Vec<Vec<String>> = std::iter::once(spec.settings.clone())
        .chain(
            spec.node_settings
                .values()
                .map(|own| spec.settings.iter().chain(own).cloned().collect()),
        )
        .collect();
    let unclean_elections = settings.iter().any(|s| cluster.db.elects_out_of_sync(s));
    // One node that cuts to its high watermark is enough to make a held question moot
    // there; every node must ask.
    let asks_divergence = settings.iter().all(|s| cluster.db.asks_divergence(s));
    NemesisOptions {
        packages: plan.nemesis.packages.clone(),
        schedule: ScheduleOptions {
            seed,
            interval: plan.nemesis.interval,
            targets: plan.nemesis.targets.clone(),
            wipe: plan.nemesis.wipe,
            unclean_elections,
            asks_divergence,
        },
        swarm: plan.nemesis.swarm,
    }
}

struct Faults {
    nemesis: Nemesis,
    journal: Arc<HistoryJournal>,
    control: Arc<ClusterFaults>,
}

/// A workload test's phases on a defined cluster: serving, recording (workload and
/// nemesis), heal and recovery, the availability probe, the final reads.
async fn run_phases(
    plan: &WorkloadPlan,
    seed: u64,
    folder: &RunFolder,
    cluster: &Arc<Cluster>,
) -> Result<RunStats> {
    let mut stats = RunStats::default();
    // Set once the history is being recorded; the error path below heals through it.
    let mut faults: Option<Faults> = None;
    let result = async {
        stats.serving_secs = serve(plan, cluster).await?;
        warn_without_failpoints(plan, cluster).await;
        let connector = cluster.connector(&cluster.target(TOPIC, plan.partitions))?;
        let recorder = Recorder::create(&folder.history())?;
        stats.history_unix_ms = Some(recorder.wall_start_unix_ms());
        let options = workload_options(plan, seed);
        faults = arm_nemesis(plan, seed, cluster, &recorder)?;
        let grow = plan.shape.grow_after.map(|after| {
            let (control, journal) = match &faults {
                Some(faults) => (Arc::clone(&faults.control), Arc::clone(&faults.journal)),
                None => (
                    Arc::new(ClusterFaults::new(Arc::clone(cluster))),
                    Arc::new(HistoryJournal::new(recorder.clone())),
                ),
            };
            Grow {
                after,
                seed,
                partitions: plan.partitions,
                replication_factor: plan.replication_factor,
                control,
                journal,
                done: Default::default(),
            }
        });
        record(
            &*connector,
            &options,
            &recorder,
            faults.as_ref(),
            grow.as_ref(),
            &mut stats,
        )
        .await?;
        heal_and_recover(plan, cluster, faults.as_ref(), &mut stats).await?;
        if let Some(grow) = &grow {
            grow.finish(GROW_AFTER_HEAL).await?;
        }
        stats.availability =
            probe_availability(&*connector, &options, &recorder, AVAILABILITY_BOUND).await?;
        if let Some(faults) = &faults {
            let probe = one_down(plan, seed, cluster, faults, &*connector, &options, &recorder, &stats).await?;
            if probe.node.is_some() {
                if let Err(problem) =
                    wait_serving(cluster, TOPIC, plan.partitions, AFTER_ONE_DOWN_TIMEOUT).await
                {
                    eprintln!(
                        "warning: after the one-down probe the cluster did not serve again: {problem}"
                    );
                }
            }
            stats.one_down = Some(probe);
        }
        let finals =
            workloads::final_reads(&*connector, &options, &recorder, FINAL_READS_TIMEOUT).await?;
        stats.final_reads_complete = finals.complete();
        stats.nemesis = faults.as_ref().map(|f| f.journal.tally());
        stats.history_unix_ms_at_end = Some(recorder.wall_start_unix_ms());
        recorder.finish()?;
        anyhow::Ok(())
    }
    .await;
    if let Err(error) = &result {
        eprintln!("error: {error:#}; healing before stopping the brokers");
        emergency_heal(cluster, faults.as_ref()).await;
    }
    result?;
    Ok(stats)
}

/// The one-down probe ([`crate::one_down`]) of a fault test: the settled cluster judged,
/// then, once the heal left every partition available (otherwise the availability
/// checker or the recovery has said so already), a node killed.
#[allow(clippy::too_many_arguments)]
async fn one_down(
    plan: &WorkloadPlan,
    seed: u64,
    cluster: &Cluster,
    faults: &Faults,
    connector: &dyn Connector,
    options: &WorkloadOptions,
    recorder: &Recorder,
    stats: &RunStats,
) -> Result<OneDownProbe> {
    let available = stats.recovered
        && stats
            .availability
            .iter()
            .all(|p| p.first_write_secs.is_some());
    OneDown {
        cluster,
        topic: TOPIC,
        control: &faults.control,
        journal: &faults.journal,
        connector,
        options,
        recorder,
        replication_factor: plan.replication_factor,
        partitions: plan.partitions,
        seed,
        bound: AVAILABILITY_BOUND,
        kill: available,
    }
    .run()
    .await
}

/// What the workers do: the plan's workload, rate, length and shapes.
fn workload_options(plan: &WorkloadPlan, seed: u64) -> WorkloadOptions {
    let mut options = WorkloadOptions::new(plan.workload, seed);
    options.concurrency = plan.concurrency;
    options.rate = plan.rate;
    options.time_limit = plan.time_limit;
    options.hot_partitions = plan.shape.hot_partitions;
    options.batch_fraction = plan.shape.batch_fraction;
    options.batch_max = plan.shape.batch_max;
    if plan.shape.linearizable_reads {
        options.read_consistency = sut::Consistency::Linearizable;
    }
    options
}

/// The replication factor the topic is created with: 1 when it is to grow.
fn initial_replication_factor(plan: &WorkloadPlan) -> u32 {
    if plan.shape.grow_after.is_some() {
        1
    } else {
        plan.replication_factor
    }
}

/// Starts the brokers and waits until the test's topic is served; the seconds it took.
async fn serve(plan: &WorkloadPlan, cluster: &Cluster) -> Result<f64> {
    let started = Instant::now();
    cluster.start().await?;
    cluster.wait_formed(SERVING_TIMEOUT).await?;
    let topic = TopicSpec {
        name: TOPIC.to_string(),
        layout: TopicLayout::Spread {
            partitions: plan.partitions,
            replication_factor: initial_replication_factor(plan),
        },
    };
    cluster
        .api
        .create_topic(&topic, SERVING_TIMEOUT)
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "cluster of {} nodes serving {} partitions after {secs:.2} s",
        plan.nodes, plan.partitions
    );
    Ok(secs)
}

/// Says once, before the faults begin, when the plan's packages need failpoints the
/// cluster's first node does not show (a broker built without `--features
/// broker/failpoints`): otherwise every slow and aimed fault of the run just fails.
async fn warn_without_failpoints(plan: &WorkloadPlan, cluster: &Cluster) {
    let needing: Vec<&str> = plan
        .nemesis
        .packages
        .iter()
        .filter(|kind| kind.uses_failpoints())
        .map(|kind| kind.name())
        .collect();
    let Some(node) = cluster.node_names().into_iter().next() else {
        return;
    };
    if needing.is_empty() || cluster.api.failpoint_hits(&node).await.is_some() {
        return;
    }
    tracing::warn!(
        node,
        packages = needing.join(","),
        "the broker shows no failpoints (GET /v1/debug/failpoints): built without \
         `--features broker/failpoints`, it refuses every fault of these packages"
    );
}

/// The nemesis of the plan, recording into the history (`None` without faults).
fn arm_nemesis(
    plan: &WorkloadPlan,
    seed: u64,
    cluster: &Arc<Cluster>,
    recorder: &Recorder,
) -> Result<Option<Faults>> {
    if plan.nemesis.packages.is_empty() {
        return Ok(None);
    }
    let control = Arc::new(ClusterFaults::new(Arc::clone(cluster)));
    let journal = Arc::new(HistoryJournal::new(recorder.clone()));
    let nemesis = Nemesis::new(
        nemesis_options(plan, seed, cluster),
        control.clone(),
        journal.clone(),
    );
    eprintln!(
        "nemesis: {} every ~{:.1} s at {}",
        plan.nemesis.list(),
        plan.nemesis.interval.as_secs_f64(),
        plan.nemesis.target_list()
    );
    Ok(Some(Faults {
        nemesis,
        journal,
        control,
    }))
}

/// RF-1-then-grow: what growing the topic needs.
struct Grow {
    after: Duration,
    seed: u64,
    partitions: u32,
    replication_factor: u32,
    /// The nemesis's control when there is one (it knows which nodes are paused).
    control: Arc<ClusterFaults>,
    journal: Arc<HistoryJournal>,
    /// The partitions grown so far.
    done: std::sync::Mutex<std::collections::BTreeSet<u32>>,
}

/// How often a refused or failed grow of a partition is tried again.
const GROW_RETRY: Duration = Duration::from_secs(1);
/// How long after the grow begins the nemesis starts at the latest when the grow has not
/// finished ([`record`]).
const NEMESIS_GROW_WAIT: Duration = Duration::from_secs(10);
/// How long the heal keeps trying a grow the workload phase did not get through.
const GROW_AFTER_HEAL: Duration = Duration::from_secs(30);

impl Grow {
    /// Waits `after` (or until stopped), then grows every partition, all at once, each
    /// tried until it is accepted or the workload ends (one after another, a grow of six
    /// partitions took 9 s: each request waits for its new replicas to join the ISR).
    /// The nemesis, when there is one, learns each grown partition's replicas, so that
    /// undoing its own reassignments does not shrink the topic back.
    async fn run(
        &self,
        mut stopped: watch::Receiver<bool>,
        nemesis: Option<&Nemesis>,
    ) -> Result<(), JournalError> {
        eprintln!(
            "topic created with replication factor 1; growing it to {} after {:.1} s",
            self.replication_factor,
            self.after.as_secs_f64()
        );
        let stop = |stopped: &mut watch::Receiver<bool>, wait: Duration| {
            let mut stopped = stopped.clone();
            async move {
                tokio::select! {
                    _ = tokio::time::sleep(wait) => false,
                    _ = stopped.wait_for(|&s| s) => true,
                }
            }
        };
        if stop(&mut stopped, self.after).await {
            return Ok(());
        }
        let grow_one = |partition: u32| {
            let mut stopped = stopped.clone();
            async move {
                loop {
                    if let Some(replicas) = self.grow_partition(partition).await? {
                        if let Some(nemesis) = nemesis {
                            nemesis.rebase_replicas(&format!("{TOPIC}/{partition}"), &replicas);
                        }
                        return Ok(());
                    }
                    if stop(&mut stopped, GROW_RETRY).await {
                        return Ok(());
                    }
                }
            }
        };
        let grown: Vec<Result<(), JournalError>> =
            backend::join_all((0..self.partitions).map(grow_one)).await;
        grown.into_iter().collect()
    }

    /// After the heal: grows the partitions the workload phase did not get to (its
    /// requests may all have failed while the controller was cut off), each tried until
    /// accepted or `within` has passed. The topic the test declared has its replication
    /// factor before anything is judged; a partition left with one replica would refuse
    /// acks=all writes under `min_insync_replicas = 2` on any broker.
    async fn finish(&self, within: Duration) -> Result<(), JournalError> {
        let deadline = Instant::now() + within;
        for partition in 0..self.partitions {
            while !self.is_done(partition) {
                if self.grow_partition(partition).await?.is_some() || Instant::now() >= deadline {
                    break;
                }
                tokio::time::sleep(GROW_RETRY).await;
            }
        }
        Ok(())
    }

    fn is_done(&self, partition: u32) -> bool {
        self.done.lock().is_ok_and(|done| done.contains(&partition))
    }

    /// One attempt at growing `partition`, recorded; its replicas once it is done
    /// (accepted, or already at the factor), `None` when it is to be tried again.
    async fn grow_partition(&self, partition: u32) -> Result<Option<Vec<String>>, JournalError> {
        let grown = self.attempt(partition).await?;
        if grown.is_some() {
            if let Ok(mut done) = self.done.lock() {
                done.insert(partition);
            }
        }
        Ok(grown)
    }

    async fn attempt(&self, partition: u32) -> Result<Option<Vec<String>>, JournalError> {
        let f = "grow-replication";
        let key = format!("{TOPIC}/{partition}");
        let token = self.journal.invoke(
            f,
            json!({"key": key, "replication_factor": self.replication_factor}),
        )?;
        let mut value = serde_json::Map::new();
        value.insert("key".into(), json!(key));
        let roles = self.control.roles().await;
        let current = roles
            .as_ref()
            .and_then(|r| r.partition(TOPIC, partition))
            .map(|p| p.replicas.clone())
            .filter(|replicas| !replicas.is_empty());
        let (done, error) = match (roles, current) {
            (Some(roles), Some(current)) => {
                let mut rng = Rng::derive(self.seed, "grow-replication", u64::from(partition));
                let replicas = grown(&current, &roles.nodes, self.replication_factor, &mut rng);
                value.insert("from".into(), json!(current));
                value.insert("to".into(), json!(replicas));
                if replicas == current {
                    (Some(replicas), None)
                } else {
                    let action = AdminAction::Reassign {
                        topic: TOPIC.to_string(),
                        partition,
                        replicas: replicas.clone(),
                    };
                    match self.control.admin(&action).await {
                        Ok(answer) => {
                            value.insert("answer".into(), answer);
                            (Some(replicas), None)
                        }
                        Err(error) => (None, Some(format!("reassign failed: {error}"))),
                    }
                }
            }
            _ => (
                None,
                Some(format!("no-target: the metadata does not show {key}")),
            ),
        };
        self.journal
            .complete(token, f, serde_json::Value::Object(value), error)?;
        Ok(done)
    }
}

/// `current` grown to `factor` replicas with nodes not among them, drawn from `rng`; half
/// the time the first added node goes first (the new preferred leader, KAFKA-1561's
/// shape), otherwise the current replicas keep their places. Unchanged when it already
/// has `factor` replicas or no node is left to add.
fn grown(current: &[String], nodes: &[String], factor: u32, rng: &mut Rng) -> Vec<String> {
    let mut spare: Vec<String> = nodes
        .iter()
        .filter(|node| !current.contains(node))
        .cloned()
        .collect();
    rng.shuffle(&mut spare);
    let missing = (factor as usize).saturating_sub(current.len());
    let added: Vec<String> = spare.into_iter().take(missing).collect();
    let mut replicas = current.to_vec();
    if added.is_empty() {
        return replicas;
    }
    if rng.percent(50) {
        replicas.splice(0..0, added);
    } else {
        replicas.extend(added);
    }
    replicas
}

/// The workload and the nemesis side by side until the time limit; the nemesis stops
/// when the workload's time is up (its step in progress finishes first).
async fn record(
    connector: &dyn Connector,
    options: &WorkloadOptions,
    recorder: &Recorder,
    faults: Option<&Faults>,
    grow: Option<&Grow>,
    stats: &mut RunStats,
) -> Result<()> {
    let progress = spawn_progress(recorder, options.time_limit);
    let (_stopper, stop) = workloads::stop_signal();
    let (stop_nemesis, nemesis_stopped) = watch::channel(false);
    let workload_done = async {
        let ran = workloads::run_workload(connector, options, recorder, &stop).await;
        let _ = stop_nemesis.send(true);
        ran
    };
    let grow_stopped = nemesis_stopped.clone();
    // RF-1-then-grow: the faults begin once the topic has its replicas (or
    // NEMESIS_GROW_WAIT after the grow began): faults that keep a grow from getting
    // through leave a run at one replica, its acks=all writes refused, its replication
    // never tried.
    let (grown, mut grown_seen) = watch::channel(grow.is_none());
    let nemesis_done = async {
        let faults = faults?;
        if let Some(grow) = grow {
            let mut stopped = nemesis_stopped.clone();
            tokio::select! {
                _ = grown_seen.wait_for(|&g| g) => {}
                _ = stopped.wait_for(|&s| s) => {}
                () = tokio::time::sleep(grow.after + NEMESIS_GROW_WAIT) => {}
            }
        }
        Some(faults.nemesis.run(nemesis_stopped).await)
    };
    let grow_done = async {
        let result = match grow {
            Some(grow) => grow.run(grow_stopped, faults.map(|f| &f.nemesis)).await,
            None => Ok(()),
        };
        let _ = grown.send(true);
        result
    };
    let (ran, faulted, grew) = tokio::join!(workload_done, nemesis_done, grow_done);
    progress.finish_and_clear();
    let ran = ran?;
    if let Some(Err(error)) = faulted {
        return Err(error).context("the nemesis could not record its operations");
    }
    grew.context("the replication growth could not be recorded")?;
    stats.workload_secs = ran.elapsed.as_secs_f64();
    stats.ops = ran.ops;
    stats.ok = ran.ok;
    stats.fail = ran.fail;
    stats.info = ran.info;
    stats.ops_per_sec = ran.ops as f64 / stats.workload_secs.max(1e-9);
    Ok(())
}

/// Heals everything, then waits for the cluster to serve again before availability is
/// judged. What the heal could not undo at once (an admin request during a controller
/// failover, say) is tried again once the cluster serves.
async fn heal_and_recover(
    plan: &WorkloadPlan,
    cluster: &Cluster,
    faults: Option<&Faults>,
    stats: &mut RunStats,
) -> Result<()> {
    let mut left = match faults {
        Some(faults) => Some(
            faults
                .nemesis
                .heal_all()
                .await
                .context("the nemesis could not record the final heal")?,
        ),
        None => {
            cluster.backend.heal().await?;
            None
        }
    };
    let recovery = Instant::now();
    let mut serving = wait_serving(cluster, TOPIC, plan.partitions, RECOVERY_TIMEOUT).await;
    if let (Some(faults), Some(state)) = (faults, &left) {
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
            serving = wait_serving(cluster, TOPIC, plan.partitions, RECOVERY_TIMEOUT).await;
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
    Ok(())
}

/// The nodes of a run, and where their files go on them.
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
    for (node, point) in state.slowed.keys() {
        left.push(format!("the delay at {point} on {node} is still armed"));
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
pub(crate) async fn wait_serving(
    cluster: &Cluster,
    topic: &str,
    partitions: u32,
    timeout: Duration,
) -> Result<(), String> {
    let start = Instant::now();
    if let Err(error) = cluster.wait_formed(timeout).await {
        return Err(with_down_brokers(cluster, error.to_string()).await);
    }
    loop {
        let mut silent = Vec::new();
        for node in &cluster.nodes {
            if !cluster.api.answers(&node.name).await {
                silent.push(node.name.clone());
            }
        }
        let missing = if !silent.is_empty() {
            format!("the client API of {} does not answer", silent.join(", "))
        } else if !cluster.api.topic_served(topic, partitions).await {
            "not every partition has a leader serving reads".to_string()
        } else if !cluster.api.caught_up(topic, partitions).await {
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

/// The availability checker: `invalid` (`unavailable-after-heal`) if a partition
/// accepted no write within the bound after the final heal.
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

/// The one-down probe's line: what was killed and whether every partition took a write,
/// or why it did not run; then any partition the healed cluster left out of sync.
fn print_one_down(probe: &OneDownProbe) {
    for stuck in &probe.not_restored {
        println!("one-down: isr-not-restored on {}: {}", stuck.key, stuck.why);
    }
    match (&probe.node, &probe.skipped) {
        (Some(node), _) => {
            let down: Vec<String> = probe
                .availability
                .iter()
                .filter(|p| p.first_write_secs.is_none())
                .map(|p| p.partition.to_string())
                .collect();
            let slowest = probe
                .availability
                .iter()
                .filter_map(|p| p.first_write_secs)
                .fold(0.0_f64, f64::max);
            if down.is_empty() {
                println!(
                    "one-down: with {node} killed every partition accepted a write (slowest {slowest:.2} s)"
                );
            } else {
                println!(
                    "one-down: unavailable-with-one-down ({node} killed) on partitions {}",
                    down.join(", ")
                );
            }
        }
        (None, Some(skipped)) => println!("one-down: not run ({skipped})"),
        (None, None) => {}
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

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_partition_grows_with_new_nodes_from_the_seed() {
        let nodes = names(&["n1", "n2", "n3", "n4", "n5"]);
        let mut firsts = std::collections::BTreeSet::new();
        for seed in 0..200 {
            let draw = |seed| grown(&names(&["n2"]), &nodes, 3, &mut Rng::new(seed));
            let replicas = draw(seed);
            assert_eq!(replicas, draw(seed), "the same seed, the same growth");
            assert_eq!(replicas.len(), 3);
            assert!(replicas.contains(&"n2".to_string()));
            let distinct: std::collections::BTreeSet<_> = replicas.iter().collect();
            assert_eq!(distinct.len(), 3, "{replicas:?}");
            firsts.insert(replicas[0] == "n2");
        }
        // Sometimes the old replica stays preferred, sometimes a new one leads.
        assert_eq!(firsts.len(), 2);
        // Already grown, or nothing to add: unchanged.
        let full = names(&["n1", "n2", "n3"]);
        assert_eq!(grown(&full, &nodes, 3, &mut Rng::new(1)), full);
        assert_eq!(
            grown(&full, &full, 5, &mut Rng::new(1)),
            full,
            "no spare node"
        );
    }

    #[test]
    fn a_growing_plan_creates_its_topic_with_one_replica() {
        let mut plan = WorkloadPlan {
            nodes: 3,
            workload: workloads::WorkloadKind::Log,
            nemesis: spec::NemesisSpec::default(),
            time_limit: Duration::from_secs(20),
            concurrency: 4,
            rate: 100.0,
            partitions: 2,
            replication_factor: 3,
            shape: spec::WorkloadShape::default(),
        };
        assert_eq!(initial_replication_factor(&plan), 3);
        plan.shape.grow_after = Some(Duration::from_secs(3));
        plan.shape.hot_partitions = true;
        plan.shape.batch_fraction = 0.25;
        plan.shape.batch_max = 4;
        assert_eq!(initial_replication_factor(&plan), 1);
        let options = workload_options(&plan, 9);
        assert!(options.hot_partitions);
        assert_eq!((options.batch_fraction, options.batch_max), (0.25, 4));
    }
}
