//! Runs the schedule: every package's steps on a task of its own (packages run
//! concurrently), each step resolved against the roles of the moment, acted out through
//! the [`ClusterControl`], and recorded in the [`Journal`] as an invoke/complete pair of
//! the same `f` — the invoke's value says what is intended (`targets`, shape, ports, ...),
//! the completion's what was done to whom (`nodes`, `pids`, `grudge`, the admin answers).
//!
//! [`FaultState`] remembers what is broken (killed and paused nodes, each package's
//! cuts, changed replica assignments) so that the stop steps undo exactly their
//! package's faults and [`Nemesis::heal_all`] undoes everything: it heals the network,
//! resumes every paused node, restarts every killed one and restores assignments,
//! recording each as its package's stop operation. The harness calls it after the run,
//! and on error or Ctrl-C.
//!
//! What is recorded before it is done: a node is entered in [`FaultState::killed`] or
//! [`FaultState::paused`] before its signal is sent, and a reassignment's original
//! replicas before the request, because their undoing is harmless when the fault did not
//! happen (`start` leaves a running broker alone, SIGCONT a running process, a
//! reassignment to the current replicas changes nothing, releasing a failpoint that is
//! not armed does nothing) while a fault that happened
//! unrecorded (a failed or interrupted command that acted anyway) would never be undone.
//! A cut is recorded only once in place: `uncut` removes exactly what a `cut` made, and
//! [`Nemesis::heal_all`] removes every cut whatever was recorded.
//!
//! Completion values (beyond the invoke's fields, which are kept):
//!
//! | `f` | invoke | completion adds |
//! |---|---|---|
//! | `kill` | `wipe` | `nodes`, `wipe_on_start`, `pids` (`node → pid`, `null` when not running), `errors` |
//! | `start` | | `nodes`, `pids`, `errors`; with a wipe `waited_deregistration_ms`, `wiped`, `deregistration_timeout`, `wipe_skipped_in_sync` (node → the partitions whose ISR still names it) |
//! | `pause` | | `nodes`, `skipped_killed`, `pids`, `errors` |
//! | `resume` | | `nodes`, `pids`, `errors` |
//! | `start-partition` | `shape` | `grudge` (`node → nodes it drops`), `ports` |
//! | `start-partition-ports` | `shape`, `ports`, `one_way` | `grudge` |
//! | `stop-partition`, `stop-partition-ports` | | `healed` (cuts removed) |
//! | `transfer-leaders` | `kind` | `transfers`: `[{key, from, to, ok \| error}]` |
//! | `elect-preferred` | `kind` | `answer` |
//! | `reassign` | `kind` | `key`, `from`, `to`, `added` or `restore`, `answer` |
//! | `start-slow` | `delays`: `[{point, delay_ms, percent}]` | `nodes`, `armed`: `[{node, point, delay_ms, percent, actions}]`, `skipped_killed`, `errors` (`"node point" → error`) |
//! | `stop-slow` | | `released`: `[{node, point}]`, `errors` |
//!
//! Every value has `package` and, when the action has one, `targets`
//! ([`Action::targets`]); the operations of [`Nemesis::heal_all`] have `final: true`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{json, Map, Value};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::aimed::{self, Aim, AimKind, CutRequest, LagTarget, Strike, SystemTraits};
use crate::control::{AdminAction, BoxFuture, ClusterControl, Journal, JournalError};
use crate::grudge::{Grudge, Ports, Shape};
use crate::package::PackageKind;
use crate::roles::{PartitionRoles, Roles};
use crate::schedule::{Action, AdminKind, Schedule, ScheduleOptions, Step};
use crate::settle;
use crate::slow::Delay;
use crate::swarm::SwarmDraw;
use crate::target::{TargetError, TargetSpec};
use rng::Rng;

/// Which faults, how often, at whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NemesisOptions {
    pub packages: Vec<PackageKind>,
    pub schedule: ScheduleOptions,
    /// Swarm testing ([`crate::swarm`]): the length of a period, each of which draws
    /// which packages act; `None`: every package acts all the time.
    pub swarm: Option<Duration>,
}

/// What is broken now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultState {
    /// Killed nodes, each with whether its data is to be wiped on restart.
    pub killed: BTreeMap<String, bool>,
    pub paused: BTreeSet<String>,
    /// The cuts in place, by the package that made them.
    pub cuts: BTreeMap<PackageKind, Vec<(Grudge, Ports)>>,
    /// Partitions (`topic/partition`) whose replicas a `reassign` changed, with their
    /// original replica list.
    pub reassigned: BTreeMap<String, Vec<String>>,
    /// Failpoints the `slow` package armed, `(node, point)`, each with whether the broker
    /// confirmed it (`false`: the request failed, and may or may not have landed).
    pub slowed: BTreeMap<(String, String), bool>,
    /// Those of [`FaultState::killed`] that an `aimed` strike killed.
    pub aimed_killed: BTreeSet<String>,
    /// Those of [`FaultState::paused`] that an `aimed` strike paused.
    pub aimed_paused: BTreeSet<String>,
    /// Those of [`FaultState::slowed`] that an `aimed` flap armed.
    pub aimed_slowed: BTreeSet<(String, String)>,
    /// A package whose strike under way needs the cluster to itself (a strand: a
    /// sequence of faults that another package's fault landing mid-way undoes): the
    /// other packages' start steps are skipped meanwhile, their stops still run.
    pub exclusive: Option<PackageKind>,
}

impl FaultState {
    /// Whether nothing is broken.
    pub fn is_healed(&self) -> bool {
        self.killed.is_empty()
            && self.paused.is_empty()
            && self.cuts.values().all(Vec::is_empty)
            && self.reassigned.is_empty()
            && self.slowed.is_empty()
            && self.aimed_killed.is_empty()
            && self.aimed_paused.is_empty()
            && self.aimed_slowed.is_empty()
    }

    /// Whether a package other than `package` has a fault in place.
    pub fn others_hold(&self, package: PackageKind) -> bool {
        PackageKind::ALL
            .iter()
            .any(|other| *other != package && self.holds(*other))
    }

    /// Whether `package`'s start steps are held off by another's exclusive strike.
    pub fn held_off(&self, package: PackageKind) -> bool {
        self.exclusive.is_some_and(|owner| owner != package)
    }

    /// Whether `package` has a fault in place that its stop step would undo: a kill or
    /// pause of its own (the `aimed` package's kills and pauses are its own, not the
    /// `kill` or `pause` package's), a cut, an armed delay. Admin faults are
    /// instantaneous: never.
    pub fn holds(&self, package: PackageKind) -> bool {
        let cuts = self.cuts.get(&package).is_some_and(|cuts| !cuts.is_empty());
        match package {
            PackageKind::Kill => self
                .killed
                .keys()
                .any(|node| !self.aimed_killed.contains(node)),
            PackageKind::Pause => self
                .paused
                .iter()
                .any(|node| !self.aimed_paused.contains(node)),
            PackageKind::Partition | PackageKind::PartitionPorts => cuts,
            PackageKind::Slow => self
                .slowed
                .keys()
                .any(|key| !self.aimed_slowed.contains(key)),
            PackageKind::Admin => false,
            PackageKind::Aimed => {
                cuts || !self.aimed_killed.is_empty()
                    || !self.aimed_paused.is_empty()
                    || !self.aimed_slowed.is_empty()
            }
        }
    }
}

/// The stop step that ends `package`'s fault (`None` for admin, whose faults are
/// instantaneous).
fn stop_action(package: PackageKind) -> Option<Action> {
    match package {
        PackageKind::Kill => Some(Action::Start),
        PackageKind::Pause => Some(Action::Resume),
        PackageKind::Partition => Some(Action::StopPartition),
        PackageKind::PartitionPorts => Some(Action::StopPartitionPorts),
        PackageKind::Slow => Some(Action::StopSlow),
        PackageKind::Aimed => Some(Action::StopAim),
        PackageKind::Admin => None,
    }
}

/// Counts of what a run did, for the summary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NemesisSummary {
    /// Completed operations by `f`.
    pub by_f: BTreeMap<String, u64>,
    /// Operations that ended with an error, by `f`.
    pub errors: BTreeMap<String, u64>,
}

impl NemesisSummary {
    fn count(&mut self, done: &Completed) {
        *self.by_f.entry(done.f.to_string()).or_default() += 1;
        if done.error.is_some() {
            *self.errors.entry(done.f.to_string()).or_default() += 1;
        }
    }

    fn merge(&mut self, other: NemesisSummary) {
        for (f, n) in other.by_f {
            *self.by_f.entry(f).or_default() += n;
        }
        for (f, n) in other.errors {
            *self.errors.entry(f).or_default() += n;
        }
    }
}

/// What a `start` found before wiping a killed node's data.
#[derive(Debug, Clone, PartialEq, Eq)]
enum WipeCheck {
    /// Deregistered and in no partition's ISR: its data may go.
    Safe,
    /// Still registered when the wait ran out: restarted without the wipe.
    StillRegistered,
    /// Deregistered, but still in the ISR of these partitions (`topic/partition`): the
    /// last member of an ISR whose other members died stays in it (Kafka keeps it, as it
    /// may hold the only copy of committed records). Wiping it would lose acknowledged
    /// writes in any replicated log, a loss of the harness's making, so it restarts
    /// with its data.
    LastInSync(Vec<String>),
}

/// Whether an ISR names `node` together with a registered member: the controller will
/// shrink `node` out of it, so it is not the last member.
fn awaiting_shrink(roles: &Roles, node: &str) -> bool {
    roles.partitions.iter().any(|p| {
        p.isr.iter().any(|member| member == node)
            && p.isr
                .iter()
                .any(|member| member != node && roles.registered.contains(member))
    })
}

/// The partitions (`topic/partition`) whose ISR still names `node`.
fn in_sync_replicas_of(roles: &Roles, node: &str) -> Vec<String> {
    roles
        .partitions
        .iter()
        .filter(|p| p.isr.iter().any(|member| member == node))
        .map(|p| p.key())
        .collect()
}

/// How a `start` of a node whose data is to be wiped waits for the controller to
/// deregister it (and so remove it from every ISR) first: an empty replica must not
/// come back as an in-sync one, which would be a data loss of the harness's making.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeregistrationWait {
    /// Time between two reads of the roles.
    pub poll: Duration,
    /// The longest wait; past it the node is started without the wipe (a plain
    /// restart), and the completion says so in `deregistration_timeout`.
    pub limit: Duration,
}

impl Default for DeregistrationWait {
    /// Poll every 200 ms, for at most 30 s.
    fn default() -> DeregistrationWait {
        DeregistrationWait {
            poll: Duration::from_millis(200),
            limit: Duration::from_secs(30),
        }
    }
}

/// The nemesis of one test.
pub struct Nemesis {
    options: NemesisOptions,
    worker: Worker,
}

impl Nemesis {
    pub fn new(
        options: NemesisOptions,
        control: Arc<dyn ClusterControl>,
        journal: Arc<dyn Journal>,
    ) -> Nemesis {
        Nemesis {
            options,
            worker: Worker {
                control,
                journal,
                state: Arc::new(Mutex::new(FaultState::default())),
                deregistration: DeregistrationWait::default(),
                stopping: Arc::new(AtomicBool::new(false)),
            },
        }
    }

    /// The same nemesis with another wait for wiped nodes' deregistration.
    pub fn with_deregistration_wait(mut self, wait: DeregistrationWait) -> Nemesis {
        self.worker.deregistration = wait;
        self
    }

    pub fn options(&self) -> &NemesisOptions {
        &self.options
    }

    /// A copy of what is broken now.
    pub fn state(&self) -> FaultState {
        self.worker.state().clone()
    }

    /// The test itself changed the replica list of `key` (`topic/partition`) to
    /// `replicas` (it grew the topic): a reassignment of `key` this nemesis made is undone
    /// to `replicas` from now on, not to the list before the change, which the test no
    /// longer means (restoring a grown partition to its one first replica would leave it
    /// below `min_insync_replicas` for good).
    pub fn rebase_replicas(&self, key: &str, replicas: &[String]) {
        if let Some(original) = self.worker.state().reassigned.get_mut(key) {
            *original = replicas.to_vec();
        }
    }

    /// Runs every package's schedule concurrently until `stop` turns true (or its sender
    /// is dropped); a step in progress finishes first. Faults are left in place: call
    /// [`Nemesis::heal_all`] next. Errors only when the journal fails: the other
    /// packages then stop after their step in progress, and the first error is returned.
    /// A package listed twice runs once.
    ///
    /// The packages run as tasks of the current tokio runtime. Dropping the returned
    /// future (Ctrl-C) aborts them at their next `await`: a fault whose command was under
    /// way is still in [`FaultState`] (see the module's docs on what is recorded
    /// before it is done), and [`Nemesis::heal_all`] undoes the rest.
    pub async fn run(&self, stop: watch::Receiver<bool>) -> Result<NemesisSummary, JournalError> {
        let (abort_tx, abort_rx) = watch::channel(false);
        let packages: BTreeSet<PackageKind> = self.options.packages.iter().copied().collect();
        let mut tasks = JoinSet::new();
        let mut summary = NemesisSummary::default();
        self.worker.stopping.store(false, Ordering::SeqCst);
        let stop_seen = {
            let (mut stop, mut abort) = (stop.clone(), abort_rx.clone());
            let stopping = Arc::clone(&self.worker.stopping);
            tokio::spawn(async move {
                tokio::select! {
                    () = raised(&mut stop) => stopping.store(true, Ordering::SeqCst),
                    () = raised(&mut abort) => {}
                }
            })
        };
        let swarm = match self.options.swarm {
            Some(period) => {
                let swarm = Arc::new(Swarm::new(
                    self.options.schedule.seed,
                    period,
                    &packages,
                    self.options.schedule.system(),
                ));
                // Period 0 is drawn and recorded before any step.
                summary.count(&self.worker.record_swarm(&swarm.current())?);
                let worker = self.worker.clone();
                let (shared, stop, abort) = (Arc::clone(&swarm), stop.clone(), abort_rx.clone());
                tasks.spawn(async move { worker.run_swarm(shared, stop, abort).await });
                Some(swarm)
            }
            None => None,
        };
        for package in packages {
            let worker = self.worker.clone();
            let schedule = Schedule::new(package, self.options.schedule.clone());
            let stop = stop.clone();
            let abort = abort_rx.clone();
            let swarm = swarm.clone();
            tasks.spawn(async move {
                worker
                    .run_package(package, schedule, swarm, stop, abort)
                    .await
            });
        }
        let mut failure = None;
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok(Ok(done)) => summary.merge(done),
                Ok(Err(error)) => {
                    tracing::error!(%error, "nemesis stops: the journal failed");
                    if failure.is_none() {
                        failure = Some(error);
                        let _ = abort_tx.send(true);
                    }
                }
                Err(join_error) => match join_error.try_into_panic() {
                    // A panic is a bug of ours or of the control: pass it on unchanged.
                    Ok(panic) => std::panic::resume_unwind(panic),
                    Err(join_error) => {
                        tracing::error!(%join_error, "nemesis package task cancelled");
                    }
                },
            }
        }
        stop_seen.abort();
        match failure {
            Some(error) => Err(error),
            None => Ok(summary),
        }
    }

    /// Resolves and acts out one step, recording it; returns the completion's value.
    /// A fault that cannot be done (no holder of the role, a node not running, a failed
    /// command) completes with an `error` and leaves the state as it is; never panics.
    /// Public so that scenario steps (`harness repro`) reuse the same faults.
    pub async fn execute(&self, step: &Step) -> Result<Value, JournalError> {
        Ok(Value::Object(self.worker.execute(step).await?.value))
    }

    /// As [`Nemesis::execute`], also returning the error the completion was recorded
    /// with (a scripted scenario stops on a fault that did not happen).
    pub async fn execute_checked(
        &self,
        step: &Step,
    ) -> Result<(Value, Option<String>), JournalError> {
        let done = self.worker.execute(step).await?;
        Ok((Value::Object(done.value), done.error))
    }

    /// Undoes every fault in place, each as its package's stop operation (healing the
    /// network as `stop-partition` / `stop-partition-ports` when cuts are in place,
    /// `resume` of every paused node, `start` of every killed node — with the wait for a
    /// wiped node's deregistration —, `stop-slow` releasing every delay failpoint,
    /// `reassign` back to the original replicas), and
    /// then SIGCONT to every node anyway. Safe to call more than once: when nothing is
    /// broken it records nothing.
    ///
    /// Every cut goes with one `ClusterControl::heal`, recorded as the stop operation of
    /// each package that had cuts in place (`stop-partition`, `stop-partition-ports`:
    /// so that every fault period is closed), with value `{"healed": "all", "final":
    /// true}`; `heal` is called (unrecorded) even when no cut was recorded, and SIGCONT
    /// sent (unrecorded, errors ignored) to every node, so that a fault we lost track of
    /// does not outlive the test. Returns what is still broken: healed, unless a
    /// command failed (a node that would not start stays in `killed`).
    pub async fn heal_all(&self) -> Result<FaultState, JournalError> {
        let worker = &self.worker;
        worker.heal_network().await?;

        // The `aimed` package's own kills and pauses, as its stop (its cuts went with the
        // network's heal), so that its last period is closed like every package's.
        if worker.state().holds(PackageKind::Aimed) {
            let mut value = worker.intent(PackageKind::Aimed, &Action::StopAim);
            value.insert("final".into(), json!(true));
            let f = Action::StopAim.f();
            let token = worker.journal.invoke(f, Value::Object(value.clone()))?;
            let error = worker.stop_aimed(&mut value).await;
            worker.finish(token, f, value, error)?;
        }

        if !worker.state().paused.is_empty() {
            let mut value = worker.intent(PackageKind::Pause, &Action::Resume);
            value.insert("final".into(), json!(true));
            let token = worker
                .journal
                .invoke("resume", Value::Object(value.clone()))?;
            let error = worker.resume_paused(None, &mut value).await;
            worker.finish(token, "resume", value, error)?;
        }

        if !worker.state().killed.is_empty() {
            let mut value = worker.intent(PackageKind::Kill, &Action::Start);
            value.insert("final".into(), json!(true));
            let token = worker
                .journal
                .invoke("start", Value::Object(value.clone()))?;
            let error = worker.start_killed(None, &mut value).await;
            worker.finish(token, "start", value, error)?;
        }

        // After the resume and the start: every node answers (a restarted one has no
        // failpoint armed, and releasing one is harmless).
        if !worker.state().slowed.is_empty() {
            let mut value = worker.intent(PackageKind::Slow, &Action::StopSlow);
            value.insert("final".into(), json!(true));
            let f = Action::StopSlow.f();
            let token = worker.journal.invoke(f, Value::Object(value.clone()))?;
            let error = worker.release_slow(&mut value, false).await;
            worker.finish(token, f, value, error)?;
        }

        let reassigned = worker.state().reassigned.clone();
        if !reassigned.is_empty() {
            let roles = worker.roles().await;
            let action = Action::Admin(AdminKind::Reassign);
            for (key, original) in reassigned {
                let mut value = worker.intent(PackageKind::Admin, &action);
                value.insert("final".into(), json!(true));
                let token = worker
                    .journal
                    .invoke(action.f(), Value::Object(value.clone()))?;
                let error = worker
                    .restore_assignment(&roles, &key, &original, &mut value)
                    .await;
                worker.finish(token, action.f(), value, error)?;
            }
        }

        for node in worker.control.nodes() {
            if let Err(error) = worker.control.resume(&node).await {
                tracing::debug!(%node, %error, "final SIGCONT failed");
            }
        }
        Ok(self.state())
    }
}

/// One recorded operation: its `f`, the completion's value and error.
struct Completed {
    f: &'static str,
    value: Map<String, Value>,
    error: Option<String>,
}

/// A partition a leadership strike can work on ([`Worker::led_partitions`]): its roles,
/// its live in-sync followers, and its other live replicas besides the leader.
type LedPartition<'r> = (&'r PartitionRoles, Vec<String>, Vec<String>);

/// How many of a held flap's moves are paced by its stages ([`aimed::HeldStage`]).
const HELD_MOVES: u64 = 3;

/// The partition a lag move watches ([`Worker::wait_for_lag`]), and the replica whose
/// lag does not count there (the one put behind).
#[derive(Debug, Clone)]
struct LagFocus {
    key: String,
    except: Option<String>,
}

/// What a lag move does to its old leader's answer as a follower
/// ([`aimed::STALE_ANSWER_POINT`]).
#[derive(Debug, Clone, Copy)]
enum OldAnswer {
    /// Left alone.
    Prompt,
    /// Delayed this many ms (released by the undo).
    Delayed(u64),
    /// Held (`pause`) until the replica put behind rejoined the ISR
    /// ([`Worker::release_once_rejoined`]).
    Held,
}

/// A lag move's delays ([`Aim::LagMove`]): the old leader's stale answer and the
/// followers' widened lag.
#[derive(Debug, Clone, Copy)]
struct LagMoveDelays {
    answer_ms: Option<u64>,
    widen_ms: Option<u64>,
}

/// What a held flap's paced moves came to: their record (`held` in the strike's
/// value) and the error of a point that could not be released.
struct HeldOutcome {
    record: Map<String, Value>,
    error: Option<String>,
}

/// What the package tasks share with the [`Nemesis`]: the cluster, the journal, the
/// fault state (cheap to clone: all behind `Arc`s).
#[derive(Clone)]
struct Worker {
    control: Arc<dyn ClusterControl>,
    journal: Arc<dyn Journal>,
    state: Arc<Mutex<FaultState>>,
    deregistration: DeregistrationWait,
    /// Set once [`Nemesis::run`] was asked to stop (the client phase is over): a strike
    /// whose moment needs the clients' writes cuts its waits short.
    stopping: Arc<AtomicBool>,
}

/// [`FaultState::exclusive`] held by a package for as long as this lives (released
/// however the strike ends).
struct Exclusive {
    state: Arc<Mutex<FaultState>>,
}

impl Exclusive {
    fn take(state: &Arc<Mutex<FaultState>>, package: PackageKind) -> Exclusive {
        lock_state(state).exclusive = Some(package);
        Exclusive {
            state: Arc::clone(state),
        }
    }
}

impl Drop for Exclusive {
    fn drop(&mut self) {
        lock_state(&self.state).exclusive = None;
    }
}

/// `mutex` locked, poisoned or not: the nemesis's shared values (the fault state, a
/// swarm's period and owed kinds) are plain data that a panic while holding the lock
/// cannot leave half-written in a way that matters more than losing track of them, so
/// the run keeps going with what is there.
fn lock_state<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// The `f` of a swarm period's operation.
pub const SWARM_F: &str = "swarm";

/// What the package tasks of a swarm run share: the period of the moment, one turn
/// per package (held while a step of the package runs, or its fault is stopped at a
/// boundary), and the kinds of aimed strike the run still owes one strike each
/// ([`crate::swarm::aim_order`]), with those already owed a second time.
struct Swarm {
    seed: u64,
    period: Duration,
    enabled: Vec<PackageKind>,
    /// What its aimed strikes may count on (its strands, where elections may be unclean).
    system: SystemTraits,
    current: Mutex<SwarmDraw>,
    turns: BTreeMap<PackageKind, tokio::sync::Mutex<()>>,
    owed: Mutex<Owed>,
}

/// The kinds of aimed strike a swarm run still owes a strike, in order, and those owed
/// again once already ([`Swarm::owe_again`]).
#[derive(Debug, Default)]
struct Owed {
    queue: VecDeque<AimKind>,
    again: BTreeSet<AimKind>,
}

impl Swarm {
    fn new(
        seed: u64,
        period: Duration,
        enabled: &BTreeSet<PackageKind>,
        system: SystemTraits,
    ) -> Swarm {
        let strands = system.unclean_elections;
        let enabled: Vec<PackageKind> = enabled.iter().copied().collect();
        let owed = if enabled.contains(&PackageKind::Aimed) {
            crate::swarm::aim_order(seed, &crate::swarm::run_aims(seed, strands))
        } else {
            Vec::new()
        };
        Swarm {
            seed,
            period,
            system,
            owed: Mutex::new(Owed {
                queue: owed.into(),
                again: BTreeSet::new(),
            }),
            current: Mutex::new(SwarmDraw::draw(seed, 0, &enabled, strands)),
            turns: enabled
                .iter()
                .map(|package| (*package, tokio::sync::Mutex::new(())))
                .collect(),
            enabled,
        }
    }

    fn current(&self) -> SwarmDraw {
        lock_state(&self.current).clone()
    }

    fn set(&self, draw: SwarmDraw) {
        *lock_state(&self.current) = draw;
    }

    /// The next kind the run owes a strike of, taken off the list (`None` once each
    /// has had its strike).
    fn take_owed(&self) -> Option<AimKind> {
        self.owed().queue.pop_front()
    }

    /// Owes `kind` a strike again, after the kinds still owed one, when its owed strike
    /// found nothing to strike (`no-target`: no change or lag within the watch, no
    /// controller acting as one): a kind drawn for the run then strikes in it after all,
    /// the moment it waits for having had time to come. Once per kind and run, so that a
    /// kind whose moment never comes in this cluster does not hold the others' shares.
    fn owe_again(&self, kind: AimKind) {
        let mut owed = self.owed();
        if owed.again.insert(kind) {
            owed.queue.push_back(kind);
        }
    }

    fn owed(&self) -> MutexGuard<'_, Owed> {
        lock_state(&self.owed)
    }

    /// Returns once the current period is not calm (at once when it is not).
    async fn calm_over(&self) {
        while self.current().calm {
            tokio::time::sleep(aimed::POLL).await;
        }
    }

    /// `package`'s turn (`None` for a package the swarm does not know: no turn to wait).
    async fn turn(&self, package: PackageKind) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        match self.turns.get(&package) {
            Some(turn) => Some(turn.lock().await),
            None => None,
        }
    }
}

/// `step` as a swarm period lets it run: a `start-slow` arms only the period's delay
/// points — those of its own draw that are among them, or, when none is, a draw among
/// them from the step's seed and the period; an aimed strike is of the kind `owed` (the
/// run's next kind still without a strike), else of a kind the run draws — drawn again
/// among those when it is not ([`Aim::draw_among`], from the step's seed).
fn swarm_step(
    mut step: Step,
    draw: &SwarmDraw,
    owed: Option<AimKind>,
    system: SystemTraits,
) -> Step {
    if let Action::Aim(aim) = &mut step.action {
        let kinds = match owed {
            Some(kind) => vec![kind],
            None => draw.aims.clone(),
        };
        if !kinds.is_empty() && !kinds.contains(&aim.kind()) {
            let mut rng = Rng::derive(step.seed, "swarm-aim", 0);
            *aim = Aim::draw_among(&mut rng, &kinds, system);
        }
    }
    if let Action::Slow { delays, .. } = &mut step.action {
        if !draw.slow_points.is_empty() {
            delays.retain(|delay| draw.slow_points.contains(&delay.point));
            if delays.is_empty() {
                let mut rng = Rng::derive(step.seed, "swarm-slow", draw.period);
                *delays = Delay::draw_among(&mut rng, &draw.slow_points);
            }
        }
    }
    step
}

/// Runs `futures` concurrently on the calling task; their outputs in their order.
async fn join_all<T>(futures: Vec<BoxFuture<'_, T>>) -> Vec<T> {
    let mut pending: Vec<Option<BoxFuture<'_, T>>> = futures.into_iter().map(Some).collect();
    let mut outputs: Vec<Option<T>> = pending.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut waiting = false;
        for (slot, output) in pending.iter_mut().zip(outputs.iter_mut()) {
            if let Some(future) = slot {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(value) => {
                        *output = Some(value);
                        *slot = None;
                    }
                    std::task::Poll::Pending => waiting = true,
                }
            }
        }
        if waiting {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

/// Sleeps until `deadline`; forever without one.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Returns once `receiver` says true or its sender is gone.
async fn raised(receiver: &mut watch::Receiver<bool>) {
    loop {
        if *receiver.borrow_and_update() {
            return;
        }
        if receiver.changed().await.is_err() {
            return;
        }
    }
}

/// How the error of a step that found nothing to act on begins.
const NO_TARGET: &str = "no-target:";

fn no_target(error: &TargetError) -> String {
    format!("{NO_TARGET} {error}")
}

/// `"<what> failed on n1: ...; n3: ..."`, or `None` when nothing failed.
fn failures(what: &str, errors: &Map<String, Value>) -> Option<String> {
    if errors.is_empty() {
        return None;
    }
    let list: Vec<String> = errors
        .iter()
        .map(|(node, error)| format!("{node}: {}", error.as_str().unwrap_or_default()))
        .collect();
    Some(format!("{what} failed on {}", list.join("; ")))
}

/// Whether the hold recorded under `key` in `record` was armed (recorded, without an
/// error): a point that could not be armed counts nothing, so nobody waits for it.
fn is_armed(record: &Map<String, Value>, key: &str) -> bool {
    record
        .get(key)
        .is_some_and(|armed| armed.get("error").is_none())
}

/// Whether a strike may put `node` behind (its replication port cut): never the
/// controller, whose LeaderAndIsr requests (the moves that follow) travel on that port.
fn may_put_behind(roles: &Roles, node: &str) -> bool {
    roles.controller.as_deref() != Some(node)
}

/// `candidates` narrowed to those `out_of_isr` says are out of their ISR already, when
/// there are any: such a replica (restarted, or cut off by another fault) is behind at
/// once, with no lag time to wait out before the strike goes on.
fn out_of_isr_first<T: Clone>(candidates: &[T], out_of_isr: impl Fn(&T) -> bool) -> Vec<T> {
    let out: Vec<T> = candidates
        .iter()
        .filter(|c| out_of_isr(c))
        .cloned()
        .collect();
    if out.is_empty() {
        candidates.to_vec()
    } else {
        out
    }
}

/// How far `partition` is from `node`'s failure, lowest first: 0 when `node` holds no
/// replica of it, 1 when it follows, 2 when it leads. A controller that loses its
/// session is a broker that dies to its successor: the successor elects a new leader for
/// every partition it led (a new leader epoch, a new version of the partition's state),
/// while a follower that comes back in time keeps its partitions as they were.
fn remoteness(partition: &PartitionRoles, node: &str) -> u8 {
    if partition.leader.as_deref() == Some(node) {
        2
    } else if partition.replicas.iter().any(|r| r == node) {
        1
    } else {
        0
    }
}

/// The partitions a leader transfer can move: each with a leader and an in-sync follower,
/// with those followers.
fn transfer_candidates(roles: &Roles) -> Vec<(&PartitionRoles, Vec<&String>)> {
    roles
        .partitions
        .iter()
        .filter_map(|p| {
            let leader = p.leader.as_ref()?;
            let followers: Vec<&String> = p.isr.iter().filter(|node| *node != leader).collect();
            (!followers.is_empty()).then_some((p, followers))
        })
        .collect()
}

/// `topic/partition` split back (topics may hold `/`: the partition is after the last).
fn parse_key(key: &str) -> Option<(String, u32)> {
    let (topic, partition) = key.rsplit_once('/')?;
    Some((topic.to_string(), partition.parse().ok()?))
}

/// The one-way version of a grudge, for one-way port cuts: one side keeps dropping
/// packets from the other, which still hears it.
///
/// The rule: the receiving side is the nodes that drop packets from the most nodes
/// (the isolated side: the smaller half of `halves`, the lone node of `one`, the
/// minority of `majority`, the targets of an isolation); when every node that drops
/// anything drops as many (a balanced grudge: even halves, a bridge, a majorities
/// ring), it is the first of them in name order together with those of them it still
/// hears (its own half). Every edge whose receiver is on that side is kept, every other
/// edge dropped: the side drops what it dropped, the rest drops nothing. Nodes on the
/// side that dropped each other still do. Empty only for an empty grudge.
pub fn one_way(grudge: &Grudge) -> Grudge {
    let dropping: BTreeMap<&String, &BTreeSet<String>> = grudge
        .0
        .iter()
        .filter(|(_, dropped)| !dropped.is_empty())
        .collect();
    let Some(most) = dropping.values().map(|dropped| dropped.len()).max() else {
        return Grudge::default();
    };
    let mut side: Vec<&String> = dropping
        .iter()
        .filter(|(_, dropped)| dropped.len() == most)
        .map(|(node, _)| *node)
        .collect();
    if side.len() == dropping.len() {
        if let Some(first) = side.first().copied() {
            let dropped_by_first = dropping.get(first).copied();
            side.retain(|node| {
                *node == first || dropped_by_first.is_some_and(|dropped| !dropped.contains(*node))
            });
        }
    }
    Grudge(
        side.into_iter()
            .filter_map(|node| {
                dropping
                    .get(node)
                    .map(|dropped| (node.clone(), (*dropped).clone()))
            })
            .collect(),
    )
}

impl Worker {
    fn state(&self) -> MutexGuard<'_, FaultState> {
        lock_state(&self.state)
    }

    /// The roles now, or only the nodes when no node answers.
    async fn roles(&self) -> Roles {
        match self.control.roles().await {
            Some(roles) => roles,
            None => Roles::unknown(&self.control.nodes()),
        }
    }

    /// One package's schedule, until `stop` or `abort`; with a swarm, only the steps of
    /// the periods in which the package is on.
    async fn run_package(
        self,
        package: PackageKind,
        schedule: Schedule,
        swarm: Option<Arc<Swarm>>,
        mut stop: watch::Receiver<bool>,
        mut abort: watch::Receiver<bool>,
    ) -> Result<NemesisSummary, JournalError> {
        let mut summary = NemesisSummary::default();
        for step in schedule {
            let swarmed_strike = swarm.is_some() && matches!(step.action, Action::Aim(_));
            let delay = if swarmed_strike {
                aimed::swarm_gap(step.delay, step.seed)
            } else {
                step.delay
            };
            tokio::select! {
                biased;
                () = raised(&mut stop) => break,
                () = raised(&mut abort) => break,
                () = tokio::time::sleep(delay) => {}
            }
            if let (Some(swarm), true) = (&swarm, swarmed_strike) {
                // A strike that falls in a calm period waits for its end instead of
                // being dropped (the package's turn is not held meanwhile).
                tokio::select! {
                    biased;
                    () = raised(&mut stop) => break,
                    () = raised(&mut abort) => break,
                    () = swarm.calm_over() => {}
                }
            }
            if !step.action.is_stop() && self.state().held_off(package) {
                continue;
            }
            let done = match &swarm {
                None => Some(self.execute(&step).await?),
                Some(swarm) => self.execute_swarmed(swarm, step).await?,
            };
            if let Some(done) = done {
                summary.count(&done);
            }
        }
        tracing::debug!(
            package = package.name(),
            ?summary,
            "nemesis package stopped"
        );
        Ok(summary)
    }

    /// The invoke's value of `action` of `package`.
    fn intent(&self, package: PackageKind, action: &Action) -> Map<String, Value> {
        let mut value = Map::new();
        value.insert("package".into(), json!(package.name()));
        if let Some(targets) = action.targets() {
            value.insert("targets".into(), json!(targets));
        }
        match action {
            Action::Kill { wipe, .. } => {
                value.insert("wipe".into(), json!(wipe));
            }
            Action::Partition { shape } => {
                value.insert("shape".into(), json!(shape.name()));
            }
            Action::PartitionPorts {
                shape,
                ports,
                one_way,
            } => {
                value.insert("shape".into(), json!(shape.name()));
                value.insert("ports".into(), json!(ports.name()));
                value.insert("one_way".into(), json!(one_way));
            }
            Action::Admin(kind) => {
                value.insert(
                    "kind".into(),
                    serde_json::to_value(kind).unwrap_or(Value::Null),
                );
            }
            Action::AdminRequest(request) => {
                value.insert(
                    "request".into(),
                    serde_json::to_value(request).unwrap_or(Value::Null),
                );
            }
            Action::StartNodes { nodes } | Action::ResumeNodes { nodes } => {
                value.insert("targets".into(), json!(nodes.join("+")));
            }
            Action::Failpoint { point, actions, .. } => {
                value.insert("point".into(), json!(point));
                if let Some(actions) = actions {
                    value.insert("actions".into(), json!(actions));
                }
            }
            Action::Slow { delays, .. } => {
                value.insert("delays".into(), json!(delays));
            }
            Action::Aim(aim) => {
                value.insert(
                    "aim".into(),
                    serde_json::to_value(aim).unwrap_or(Value::Null),
                );
            }
            Action::StopAim
            | Action::StopSlow
            | Action::Start
            | Action::Pause { .. }
            | Action::Resume
            | Action::StopPartition
            | Action::StopPartitionPorts => {}
        }
        value
    }

    /// Records the completion of `token`.
    fn finish(
        &self,
        token: u64,
        f: &'static str,
        value: Map<String, Value>,
        error: Option<String>,
    ) -> Result<Completed, JournalError> {
        let shown = Value::Object(value.clone());
        match &error {
            Some(error) => tracing::warn!(f, %error, value = %shown, "nemesis"),
            None => tracing::info!(f, value = %shown, "nemesis"),
        }
        self.journal
            .complete(token, f, Value::Object(value.clone()), error.clone())?;
        Ok(Completed { f, value, error })
    }

    async fn execute(&self, step: &Step) -> Result<Completed, JournalError> {
        self.execute_in(step, None).await
    }

    /// [`Worker::execute`], its values saying in which swarm period it ran.
    async fn execute_in(
        &self,
        step: &Step,
        swarm_period: Option<u64>,
    ) -> Result<Completed, JournalError> {
        let f = step.action.f();
        let mut value = self.intent(step.package, &step.action);
        if let Some(period) = swarm_period {
            value.insert("swarm_period".into(), json!(period));
        }
        let token = self.journal.invoke(f, Value::Object(value.clone()))?;
        let mut rng = Rng::new(step.seed);
        let error = match &step.action {
            Action::Kill { target, wipe } => self.kill(target, *wipe, &mut rng, &mut value).await,
            Action::Start => self.start_killed(None, &mut value).await,
            Action::StartNodes { nodes } => self.start_killed(Some(nodes), &mut value).await,
            Action::Pause { target } => self.pause(target, &mut rng, &mut value).await,
            Action::Resume => self.resume_paused(None, &mut value).await,
            Action::ResumeNodes { nodes } => self.resume_paused(Some(nodes), &mut value).await,
            Action::AdminRequest(request) => self.admin_request(request, &mut value).await,
            Action::Failpoint {
                node,
                point,
                actions,
            } => {
                self.failpoint(node, point, actions.as_deref(), &mut value)
                    .await
            }
            Action::Partition { shape } => {
                self.partition(step.package, shape, Ports::All, false, &mut rng, &mut value)
                    .await
            }
            Action::PartitionPorts {
                shape,
                ports,
                one_way,
            } => {
                self.partition(step.package, shape, *ports, *one_way, &mut rng, &mut value)
                    .await
            }
            Action::StopPartition | Action::StopPartitionPorts => {
                self.stop_cuts(step.package, &mut value).await
            }
            Action::Admin(AdminKind::TransferStorm) => {
                self.transfer_storm(&mut rng, &mut value).await
            }
            Action::Admin(AdminKind::ElectPreferred) => self.elect_preferred(&mut value).await,
            Action::Admin(AdminKind::Reassign) => self.reassign(&mut rng, &mut value).await,
            Action::Slow { target, delays } => {
                self.slow(target, delays, &mut rng, &mut value).await
            }
            Action::StopSlow => self.release_slow(&mut value, true).await,
            Action::Aim(aim) => self.aim(aim, &mut rng, &mut value).await,
            Action::StopAim => self.stop_aimed(&mut value).await,
        };
        self.finish(token, f, value, error)
    }

    /// A step of a swarm run, when its package is on in the period of the moment (and,
    /// for a stop step, has a fault to stop): taken in the package's turn, so that a
    /// period's boundary never stops a fault while its start is under way. `None` when
    /// skipped.
    async fn execute_swarmed(
        &self,
        swarm: &Swarm,
        step: Step,
    ) -> Result<Option<Completed>, JournalError> {
        let _turn = swarm.turn(step.package).await;
        let draw = swarm.current();
        if !draw.is_on(step.package) {
            return Ok(None);
        }
        if step.action.is_stop() && !self.state().holds(step.package) {
            return Ok(None);
        }
        let owed = match step.action {
            Action::Aim(_) => swarm.take_owed(),
            _ => None,
        };
        let step = swarm_step(step, &draw, owed, swarm.system);
        let completed = self.execute_in(&step, Some(draw.period)).await?;
        let missed = completed
            .error
            .as_deref()
            .is_some_and(|error| error.starts_with(NO_TARGET));
        if let (Some(kind), true) = (owed, missed) {
            swarm.owe_again(kind);
        }
        Ok(Some(completed))
    }

    /// The swarm's periods after the first, until `stop` or `abort`: at each boundary
    /// the period's draw is made the current one and recorded, then every package that
    /// is off in it and has a fault in place is stopped (in its turn), so that a calm
    /// period is calm.
    async fn run_swarm(
        self,
        swarm: Arc<Swarm>,
        mut stop: watch::Receiver<bool>,
        mut abort: watch::Receiver<bool>,
    ) -> Result<NemesisSummary, JournalError> {
        let mut summary = NemesisSummary::default();
        let began = Instant::now();
        let mut period = 0u64;
        loop {
            period += 1;
            let offset = u32::try_from(period)
                .ok()
                .and_then(|n| swarm.period.checked_mul(n))
                .unwrap_or(Duration::MAX);
            let boundary = began.checked_add(offset);
            tokio::select! {
                biased;
                () = raised(&mut stop) => break,
                () = raised(&mut abort) => break,
                () = sleep_until(boundary) => {}
            }
            // Recorded before it is in force: a step that runs on the previous draw
            // meanwhile is one of a package on in that period (and stopped below if
            // this period turns it off).
            let draw = SwarmDraw::draw(
                swarm.seed,
                period,
                &swarm.enabled,
                swarm.system.unclean_elections,
            );
            summary.count(&self.record_swarm(&draw)?);
            swarm.set(draw.clone());
            for package in &swarm.enabled {
                if draw.is_on(*package) {
                    continue;
                }
                let Some(action) = stop_action(*package) else {
                    continue;
                };
                let _turn = swarm.turn(*package).await;
                if !self.state().holds(*package) {
                    continue;
                }
                let step = Step {
                    package: *package,
                    index: period,
                    delay: Duration::ZERO,
                    action,
                    seed: 0,
                };
                summary.count(&self.execute_in(&step, Some(period)).await?);
            }
        }
        Ok(summary)
    }

    /// Records a swarm period's draw: a `swarm` operation, its value the draw's.
    fn record_swarm(&self, draw: &SwarmDraw) -> Result<Completed, JournalError> {
        let Value::Object(value) = draw.value() else {
            return Err(JournalError("a swarm draw is a JSON object".into()));
        };
        let token = self.journal.invoke(SWARM_F, Value::Object(value.clone()))?;
        self.finish(token, SWARM_F, value, None)
    }

    /// SIGKILL the target's nodes; a lone node's data is wiped at its next start when
    /// `wipe`.
    async fn kill(
        &self,
        target: &TargetSpec,
        wipe: bool,
        rng: &mut Rng,
        value: &mut Map<String, Value>,
    ) -> Option<String> {
        let roles = self.roles().await;
        let nodes = match target.resolve(&roles, rng) {
            Ok(nodes) => nodes,
            Err(error) => return Some(no_target(&error)),
        };
        let wipe = wipe && nodes.len() == 1;
        value.insert("nodes".into(), json!(nodes));
        value.insert("wipe_on_start".into(), json!(wipe));
        let mut pids = Map::new();
        let mut errors = Map::new();
        for node in &nodes {
            // Entered before the signal (see the module's docs); without the wipe until
            // the kill is known to have happened: a broker that may still be running
            // must never have its data removed.
            self.state().killed.entry(node.clone()).or_insert(false);
            match self.control.kill(node).await {
                Ok(pid) => {
                    pids.insert(node.clone(), json!(pid));
                    let mut state = self.state();
                    if wipe {
                        state.killed.insert(node.clone(), true);
                    }
                    state.paused.remove(node);
                    state.aimed_paused.remove(node);
                }
                Err(error) => {
                    errors.insert(node.clone(), json!(error.0));
                }
            }
        }
        value.insert("pids".into(), Value::Object(pids));
        let error = failures("kill", &errors);
        if !errors.is_empty() {
            value.insert("errors".into(), Value::Object(errors));
        }
        error
    }

    /// Waits until `node` is not a registered broker, within the limit; what the wait
    /// found, and how long it took.
    async fn await_deregistration(&self, node: &str) -> (WipeCheck, Duration) {
        let began = Instant::now();
        loop {
            if let Some(roles) = self.control.roles().await {
                // An ISR that still names it beside a registered member is one the
                // controller has yet to shrink: wait for that.
                if !roles.registered.contains(node) && !awaiting_shrink(&roles, node) {
                    let in_sync = in_sync_replicas_of(&roles, node);
                    let check = if in_sync.is_empty() {
                        WipeCheck::Safe
                    } else {
                        WipeCheck::LastInSync(in_sync)
                    };
                    return (check, began.elapsed());
                }
            }
            let waited = began.elapsed();
            if waited >= self.deregistration.limit {
                return (WipeCheck::StillRegistered, waited);
            }
            let left = self.deregistration.limit.saturating_sub(waited);
            tokio::time::sleep(self.deregistration.poll.min(left)).await;
        }
    }

    /// Starts every killed node (or only `only`: those of them killed, as every killed
    /// node is, and the others if not running), wiping those marked so once they are
    /// deregistered.
    async fn start_killed(
        &self,
        only: Option<&[String]>,
        value: &mut Map<String, Value>,
    ) -> Option<String> {
        let killed: Vec<(String, bool)> = match only {
            None => self
                .state()
                .killed
                .iter()
                .map(|(node, wipe)| (node.clone(), *wipe))
                .collect(),
            Some(nodes) => {
                let state = self.state();
                nodes
                    .iter()
                    .map(|node| {
                        (
                            node.clone(),
                            state.killed.get(node).copied().unwrap_or(false),
                        )
                    })
                    .collect()
            }
        };
        let nodes: Vec<&String> = killed.iter().map(|(node, _)| node).collect();
        value.insert("nodes".into(), json!(nodes));
        if killed.is_empty() {
            return None;
        }
        let mut pids = Map::new();
        let mut errors = Map::new();
        let mut waited = Map::new();
        let mut wiped = Vec::new();
        let mut timeouts = Vec::new();
        let mut kept = Map::new();
        for (node, wipe) in &killed {
            let mut wipe_now = *wipe;
            if *wipe {
                let (check, took) = self.await_deregistration(node).await;
                waited.insert(node.clone(), json!(took.as_millis() as u64));
                match check {
                    WipeCheck::Safe => {}
                    WipeCheck::StillRegistered => {
                        tracing::warn!(%node, ?took, "still registered: restarting without the wipe");
                        timeouts.push(node.clone());
                        wipe_now = false;
                    }
                    WipeCheck::LastInSync(partitions) => {
                        tracing::info!(%node, ?partitions, "still in an ISR: restarting without the wipe");
                        kept.insert(node.clone(), json!(partitions));
                        wipe_now = false;
                    }
                }
            }
            match self.control.start(node, wipe_now).await {
                Ok(pid) => {
                    pids.insert(node.clone(), json!(pid));
                    if wipe_now {
                        wiped.push(node.clone());
                    }
                    let mut state = self.state();
                    state.killed.remove(node);
                    state.aimed_killed.remove(node);
                }
                Err(error) => {
                    errors.insert(node.clone(), json!(error.0));
                }
            }
        }
        value.insert("pids".into(), Value::Object(pids));
        if !waited.is_empty() {
            value.insert("waited_deregistration_ms".into(), Value::Object(waited));
            value.insert("wiped".into(), json!(wiped));
        }
        if !timeouts.is_empty() {
            value.insert("deregistration_timeout".into(), json!(timeouts));
        }
        if !kept.is_empty() {
            value.insert("wipe_skipped_in_sync".into(), Value::Object(kept));
        }
        let error = failures("start", &errors);
        if !errors.is_empty() {
            value.insert("errors".into(), Value::Object(errors));
        }
        error
    }

    /// The target's nodes, resolved against the roles now, less those killed (recorded
    /// as `nodes` and `skipped_killed`); the `no-target` error when it names nobody.
    async fn live_targets(
        &self,
        target: &TargetSpec,
        rng: &mut Rng,
        value: &mut Map<String, Value>,
    ) -> Result<Vec<String>, String> {
        let roles = self.roles().await;
        let resolved = target.resolve(&roles, rng).map_err(|e| no_target(&e))?;
        let (skipped, nodes): (Vec<String>, Vec<String>) = {
            let state = self.state();
            resolved
                .into_iter()
                .partition(|node| state.killed.contains_key(node))
        };
        value.insert("nodes".into(), json!(nodes));
        if !skipped.is_empty() {
            value.insert("skipped_killed".into(), json!(skipped));
        }
        Ok(nodes)
    }

    /// SIGSTOP the target's nodes that are not killed.
    async fn pause(
        &self,
        target: &TargetSpec,
        rng: &mut Rng,
        value: &mut Map<String, Value>,
    ) -> Option<String> {
        let nodes = match self.live_targets(target, rng, value).await {
            Ok(nodes) => nodes,
            Err(error) => return Some(error),
        };
        let mut pids = Map::new();
        let mut errors = Map::new();
        for node in &nodes {
            // Entered before the signal (see the module's docs).
            self.state().paused.insert(node.clone());
            match self.control.pause(node).await {
                Ok(pid) => {
                    pids.insert(node.clone(), json!(pid));
                }
                Err(error) => {
                    errors.insert(node.clone(), json!(error.0));
                }
            }
        }
        value.insert("pids".into(), Value::Object(pids));
        let error = failures("pause", &errors);
        if !errors.is_empty() {
            value.insert("errors".into(), Value::Object(errors));
        }
        error
    }

    /// SIGCONT every paused node (or only `only`).
    async fn resume_paused(
        &self,
        only: Option<&[String]>,
        value: &mut Map<String, Value>,
    ) -> Option<String> {
        let paused: Vec<String> = match only {
            None => self.state().paused.iter().cloned().collect(),
            Some(nodes) => nodes.to_vec(),
        };
        value.insert("nodes".into(), json!(paused));
        let mut pids = Map::new();
        let mut errors = Map::new();
        for node in &paused {
            match self.control.resume(node).await {
                Ok(pid) => {
                    pids.insert(node.clone(), json!(pid));
                    let mut state = self.state();
                    state.paused.remove(node);
                    state.aimed_paused.remove(node);
                }
                Err(error) => {
                    errors.insert(node.clone(), json!(error.0));
                }
            }
        }
        value.insert("pids".into(), Value::Object(pids));
        let error = failures("resume", &errors);
        if !errors.is_empty() {
            value.insert("errors".into(), Value::Object(errors));
        }
        error
    }

    /// Cuts the shape's grudge (one way when asked: see [`one_way`]) on `ports`.
    async fn partition(
        &self,
        package: PackageKind,
        shape: &Shape,
        ports: Ports,
        one_way_only: bool,
        rng: &mut Rng,
        value: &mut Map<String, Value>,
    ) -> Option<String> {
        let roles = self.roles().await;
        let grudge = match shape.grudge(&roles, rng) {
            Ok(grudge) if one_way_only => one_way(&grudge),
            Ok(grudge) => grudge,
            Err(error) => return Some(no_target(&error)),
        };
        value.insert("ports".into(), json!(ports.name()));
        if grudge.0.values().all(BTreeSet::is_empty) {
            return Some(format!(
                "no-target: the shape {} cuts nothing among {} nodes",
                shape.name(),
                roles.nodes.len()
            ));
        }
        value.insert(
            "grudge".into(),
            serde_json::to_value(&grudge).unwrap_or(Value::Null),
        );
        match self.control.cut(&grudge, ports).await {
            Ok(()) => {
                self.state()
                    .cuts
                    .entry(package)
                    .or_default()
                    .push((grudge, ports));
                None
            }
            Err(error) => Some(format!("cut failed: {error}")),
        }
    }

    /// Removes `package`'s cuts, and only those.
    async fn stop_cuts(
        &self,
        package: PackageKind,
        value: &mut Map<String, Value>,
    ) -> Option<String> {
        let cuts = self.state().cuts.get(&package).cloned().unwrap_or_default();
        let mut healed = 0u64;
        let mut errors = Vec::new();
        for (grudge, ports) in &cuts {
            match self.control.uncut(grudge, *ports).await {
                Ok(()) => {
                    healed += 1;
                    let mut state = self.state();
                    if let Some(in_place) = state.cuts.get_mut(&package) {
                        if let Some(at) = in_place
                            .iter()
                            .position(|cut| cut == &(grudge.clone(), *ports))
                        {
                            in_place.remove(at);
                        }
                        if in_place.is_empty() {
                            state.cuts.remove(&package);
                        }
                    }
                }
                Err(error) => errors.push(format!("{}: {error}", ports.name())),
            }
        }
        value.insert("healed".into(), json!(healed));
        if errors.is_empty() {
            None
        } else {
            Some(format!("uncut failed: {}", errors.join("; ")))
        }
    }

    /// 3 to 6 leader transfers, each of a random partition with a second in-sync
    /// replica to a random in-sync follower.
    async fn transfer_storm(
        &self,
        rng: &mut Rng,
        value: &mut Map<String, Value>,
    ) -> Option<String> {
        let mut partitions = self.roles().await.partitions;
        let count = rng.between(3, 6);
        let mut transfers = Vec::new();
        for _ in 0..count {
            let candidates: Vec<usize> = partitions
                .iter()
                .enumerate()
                .filter(|(_, p)| {
                    p.leader
                        .as_ref()
                        .is_some_and(|leader| p.isr.iter().any(|node| node != leader))
                })
                .map(|(at, _)| at)
                .collect();
            let Some(partition) = rng.pick(&candidates).and_then(|at| partitions.get_mut(*at))
            else {
                break;
            };
            let Some(from) = partition.leader.clone() else {
                break;
            };
            let followers: Vec<&String> =
                partition.isr.iter().filter(|node| **node != from).collect();
            let Some(to) = rng.pick(&followers).map(|node| (*node).clone()) else {
                break;
            };
            let action = AdminAction::TransferLeader {
                topic: partition.topic.clone(),
                partition: partition.partition,
                to: to.clone(),
            };
            let mut transfer = json!({"key": partition.key(), "from": from, "to": to});
            match self.control.admin(&action).await {
                Ok(answer) => {
                    transfer["ok"] = answer;
                    // Later transfers of the storm start from the new leader.
                    partition.leader = Some(to);
                }
                Err(error) => transfer["error"] = json!(error.0),
            }
            transfers.push(transfer);
        }
        let none = transfers.is_empty();
        value.insert("transfers".into(), Value::Array(transfers));
        none.then(|| "no-target: no partition with a second in-sync replica".to_string())
    }

    /// One exact admin request, with the broker's answer.
    async fn admin_request(
        &self,
        request: &AdminAction,
        value: &mut Map<String, Value>,
    ) -> Option<String> {
        match self.control.admin(request).await {
            Ok(answer) => {
                value.insert("answer".into(), answer);
                None
            }
            Err(error) => Some(format!("{} failed: {error}", request.f())),
        }
    }

    /// Arms or releases one failpoint, with the broker's answer.
    async fn failpoint(
        &self,
        node: &str,
        point: &str,
        actions: Option<&str>,
        value: &mut Map<String, Value>,
    ) -> Option<String> {
        value.insert("nodes".into(), json!([node]));
        match self.control.failpoint(node, point, actions).await {
            Ok(answer) => {
                value.insert("answer".into(), answer);
                None
            }
            Err(error) => Some(format!("failpoint {point} on {node}: {error}")),
        }
    }

    /// Arms every delay on each of the target's nodes that is not killed (a killed
    /// broker has no failpoints; its restart comes up with none armed). Each failpoint is
    /// entered in [`FaultState::slowed`] before its request, and confirmed once the
    /// broker answered.
    async fn slow(
        &self,
        target: &TargetSpec,
        delays: &[crate::slow::Delay],
        rng: &mut Rng,
        value: &mut Map<String, Value>,
    ) -> Option<String> {
        let nodes = match self.live_targets(target, rng, value).await {
            Ok(nodes) => nodes,
            Err(error) => return Some(error),
        };
        if nodes.is_empty() {
            return Some("no-target: every target node is killed".into());
        }
        let mut armed = Vec::new();
        let mut skipped = Vec::new();
        let mut errors = Map::new();
        for node in &nodes {
            for delay in delays {
                let key = (node.clone(), delay.point.clone());
                {
                    let mut state = self.state();
                    if state.aimed_slowed.contains(&key) {
                        // An aimed strike holds this point: re-arming it would end
                        // the strike's hold (and the slow stop would release it).
                        skipped.push(json!({"node": node, "point": delay.point}));
                        continue;
                    }
                    state.slowed.entry(key.clone()).or_insert(false);
                }
                let actions = delay.actions();
                match self
                    .control
                    .failpoint(node, &delay.point, Some(&actions))
                    .await
                {
                    Ok(_) => {
                        self.state().slowed.insert(key, true);
                        armed.push(json!({
                            "node": node,
                            "point": delay.point,
                            "delay_ms": delay.delay_ms,
                            "percent": delay.percent,
                            "actions": actions,
                        }));
                    }
                    Err(error) => {
                        errors.insert(format!("{node} {}", delay.point), json!(error.0));
                    }
                }
            }
        }
        value.insert("armed".into(), Value::Array(armed));
        if !skipped.is_empty() {
            value.insert("held_by_aimed".into(), Value::Array(skipped));
        }
        let error = failures("arming a delay", &errors);
        if !errors.is_empty() {
            value.insert("errors".into(), Value::Object(errors));
        }
        error
    }

    /// Releases every failpoint in [`FaultState::slowed`], but with `keep_aimed` those
    /// an `aimed` strike holds ([`FaultState::aimed_slowed`]: the slow package's stop
    /// must not let go a strike's hold half-way; the strike's own undo does). One that
    /// cannot be released stays there to be tried again, unless its arming was never
    /// confirmed or its node is killed (a killed broker's failpoints died with it).
    async fn release_slow(
        &self,
        value: &mut Map<String, Value>,
        keep_aimed: bool,
    ) -> Option<String> {
        let slowed: Vec<((String, String), bool)> = {
            let state = self.state();
            state
                .slowed
                .iter()
                .filter(|(key, _)| !(keep_aimed && state.aimed_slowed.contains(*key)))
                .map(|(key, confirmed)| (key.clone(), *confirmed))
                .collect()
        };
        let mut released = Vec::new();
        let mut errors = Map::new();
        for ((node, point), confirmed) in slowed {
            let result = self.control.failpoint(&node, &point, None).await;
            let mut state = self.state();
            match result {
                Ok(_) => {
                    released.push(json!({"node": node, "point": point}));
                    state.slowed.remove(&(node, point));
                }
                Err(error) => {
                    errors.insert(format!("{node} {point}"), json!(error.0));
                    if !confirmed || state.killed.contains_key(&node) {
                        state.slowed.remove(&(node, point));
                    }
                }
            }
        }
        value.insert("released".into(), Value::Array(released));
        let error = failures("releasing a delay", &errors);
        if !errors.is_empty() {
            value.insert("errors".into(), Value::Object(errors));
        }
        error
    }

    async fn elect_preferred(&self, value: &mut Map<String, Value>) -> Option<String> {
        match self.control.admin(&AdminAction::ElectPreferred).await {
            Ok(answer) => {
                value.insert("answer".into(), answer);
                None
            }
            Err(error) => Some(format!("elect-preferred failed: {error}")),
        }
    }

    /// Restores the first changed assignment when there is one, otherwise adds a random
    /// non-replica node, as the preferred (first) replica, to a random partition with
    /// fewer replicas than nodes. The
    /// original replicas are recorded before the request, so that a reassignment that
    /// failed or timed out (and may still be in progress) is restored too.
    async fn reassign(&self, rng: &mut Rng, value: &mut Map<String, Value>) -> Option<String> {
        let roles = self.roles().await;
        let pending = self
            .state()
            .reassigned
            .iter()
            .next()
            .map(|(key, original)| (key.clone(), original.clone()));
        if let Some((key, original)) = pending {
            return self
                .restore_assignment(&roles, &key, &original, value)
                .await;
        }
        let candidates: Vec<_> = roles
            .partitions
            .iter()
            .filter(|p| !p.replicas.is_empty() && p.replicas.len() < roles.nodes.len())
            .collect();
        let Some(partition) = rng.pick(&candidates) else {
            return Some("no-target: no partition with fewer replicas than nodes".into());
        };
        let spare: Vec<&String> = roles
            .nodes
            .iter()
            .filter(|node| !partition.replicas.contains(node))
            .collect();
        let Some(added) = rng.pick(&spare).map(|node| (*node).clone()) else {
            return Some("no-target: no partition with fewer replicas than nodes".into());
        };
        // The new replica goes first, as the partition's preferred leader: an operator
        // moving a partition to a new broker does that (KAFKA-1561's shape), and a
        // preferred-leader election or the broker's rebalance then moves leadership to a
        // replica that has only just caught up.
        let mut replicas = partition.replicas.clone();
        replicas.insert(0, added.clone());
        let key = partition.key();
        value.insert("key".into(), json!(key));
        value.insert("from".into(), json!(partition.replicas));
        value.insert("to".into(), json!(replicas));
        value.insert("added".into(), json!(added));
        self.state()
            .reassigned
            .insert(key, partition.replicas.clone());
        let action = AdminAction::Reassign {
            topic: partition.topic.clone(),
            partition: partition.partition,
            replicas,
        };
        match self.control.admin(&action).await {
            Ok(answer) => {
                value.insert("answer".into(), answer);
                None
            }
            Err(error) => Some(format!("reassign failed: {error}")),
        }
    }

    /// Reassigns `key` back to `original`; forgets it once done.
    async fn restore_assignment(
        &self,
        roles: &Roles,
        key: &str,
        original: &[String],
        value: &mut Map<String, Value>,
    ) -> Option<String> {
        let current = roles
            .partitions
            .iter()
            .find(|p| p.key() == key)
            .map(|p| json!(p.replicas))
            .unwrap_or(Value::Null);
        value.insert("key".into(), json!(key));
        value.insert("from".into(), current);
        value.insert("to".into(), json!(original));
        value.insert("restore".into(), json!(true));
        let Some((topic, partition)) = parse_key(key) else {
            // Cannot happen for keys of ours; forgetting it keeps heal_all finite.
            self.state().reassigned.remove(key);
            return Some(format!("reassign failed: malformed partition key {key:?}"));
        };
        let action = AdminAction::Reassign {
            topic,
            partition,
            replicas: original.to_vec(),
        };
        match self.control.admin(&action).await {
            Ok(answer) => {
                value.insert("answer".into(), answer);
                self.state().reassigned.remove(key);
                None
            }
            Err(error) => Some(format!("reassign failed: {error}")),
        }
    }

    /// One `aimed` strike: waits for its moment (within its watch), then strikes the
    /// node it aimed at; the value says whom (`node`), how (`strike`), and why
    /// (`trigger` and what showed it). No moment within the watch is a `no-target`.
    ///
    /// A strike of several stages ([`Aim::needs_the_cluster`]) has the cluster to itself
    /// ([`Worker::quiet`]); once it has done all it does, and before others may strike
    /// again, the cluster must settle ([`Worker::settle`]).
    async fn aim(
        &self,
        aim: &Aim,
        rng: &mut Rng,
        value: &mut Map<String, Value>,
    ) -> Option<String> {
        let _exclusive = if aim.needs_the_cluster() {
            Some(self.quiet(value).await)
        } else {
            None
        };
        let error = self.strike_aim(aim, rng, value).await;
        if aim.needs_the_cluster() && error.is_none() {
            self.settle(value).await;
        }
        error
    }

    async fn strike_aim(
        &self,
        aim: &Aim,
        rng: &mut Rng,
        value: &mut Map<String, Value>,
    ) -> Option<String> {
        match *aim {
            Aim::ControllerCut {
                request,
                request_after_ms,
                gated,
            } => {
                self.controller_cut(request, request_after_ms, gated, rng, value)
                    .await
            }
            Aim::AfterChange { strike, watch_ms } => {
                self.after_change(strike, watch_ms, rng, value).await
            }
            Aim::Lagging {
                strike,
                whom,
                watch_ms,
            } => self.on_lag(strike, whom, watch_ms, rng, value).await,
            Aim::LagMove {
                watch_ms,
                answer_delay_ms,
                behind_ms,
                widen_ms,
            } => {
                let delays = LagMoveDelays {
                    answer_ms: answer_delay_ms,
                    widen_ms,
                };
                self.lag_move(watch_ms, delays, behind_ms, rng, value).await
            }
            Aim::Flap {
                moves,
                gap_ms,
                ref slow,
                behind_ms,
                held,
            } => {
                self.flap(moves, gap_ms, slow.as_ref(), behind_ms, held, rng, value)
                    .await
            }
            Aim::Strand { alone_ms } => self.strand(alone_ms, rng, value).await,
        }
    }

    /// Leadership flapping: a partition with a leader and an in-sync follower (picked
    /// with `rng`, a killed or paused one passed over) has its leadership moved `moves`
    /// times, `gap_ms` apart, to the follower, back to the leader, and so on; with
    /// `slow`, that delay is first armed on one live replica of the partition (entered
    /// in [`FaultState::aimed_slowed`], released by the undo). Each move's answer or
    /// error is in `moves`; a move that fails does not end the flap. With `held`, the
    /// first three moves are [`Worker::held_moves`] and the rest `gap_ms` apart. With
    /// `behind_ms`, a third live replica of the partition (never the controller; one
    /// out of the ISR already when there is one) is first put behind
    /// ([`Worker::cut_behind`]), `behind_ms` more, and healed as the moves begin.
    #[allow(clippy::too_many_arguments)]
    async fn flap(
        &self,
        moves: u64,
        gap_ms: u64,
        slow: Option<&aimed::FlapDelay>,
        behind_ms: Option<u64>,
        held: bool,
        rng: &mut Rng,
        value: &mut Map<String, Value>,
    ) -> Option<String> {
        let roles = self.roles().await;
        value.insert("trigger".into(), json!("flap"));
        let candidates = self.led_partitions(&roles);
        // Putting a replica behind needs a partition with three live replicas.
        let candidates: Vec<LedPartition> =
            if behind_ms.is_some() && candidates.iter().any(|(_, _, others)| others.len() >= 2) {
                candidates
                    .into_iter()
                    .filter(|(_, _, others)| others.len() >= 2)
                    .collect()
            } else {
                candidates
            };
        let Some((partition, followers, others)) = rng.pick(&candidates) else {
            return Some("no-target: no partition with a live leader and in-sync follower".into());
        };
        let Some(follower) = rng.pick(followers).cloned() else {
            return Some("no-target: no in-sync follower".into());
        };
        let leader = partition.leader.clone().unwrap_or_default();
        let key = partition.key();
        let third: Vec<String> = others
            .iter()
            .filter(|n| **n != follower && may_put_behind(&roles, n))
            .cloned()
            .collect();
        let third = out_of_isr_first(&third, |n| !partition.isr.contains(n));
        let behind = match (behind_ms, rng.pick(&third)) {
            (Some(ms), Some(replica)) => Some((replica.clone(), ms)),
            _ => None,
        };
        if let Some((replica, ms)) = &behind {
            if let Some(error) = self.cut_behind(partition, replica, rng, value).await {
                return Some(error);
            }
            tokio::time::sleep(Duration::from_millis(*ms)).await;
        }
        value.insert("key".into(), json!(key));
        value.insert("node".into(), json!(leader));
        value.insert("between".into(), json!([follower, leader]));
        value.insert(
            "why".into(),
            json!(format!(
                "{key}'s leadership flaps between {follower} and {leader}, {gap_ms} ms apart"
            )),
        );
        if let Some(aimed::FlapDelay { delay, on }) = slow {
            // One replica: a delay on every replica would also hold back the fetches
            // that commit what a leader takes between two moves.
            let live: Vec<String> = match on {
                aimed::FlapSlowed::SteppingDown => vec![leader.clone()],
                aimed::FlapSlowed::AnyReplica => {
                    let state = self.state();
                    let alive: Vec<String> = partition
                        .replicas
                        .iter()
                        .filter(|node| !state.killed.contains_key(*node))
                        .cloned()
                        .collect();
                    rng.pick(&alive).cloned().into_iter().collect()
                }
            };
            let slowed = self.slow_aimed(live, delay, rng).await;
            value.insert("slow".into(), Value::Object(slowed));
        }
        if behind.is_some() {
            // The moves begin as the replica starts to catch up.
            self.heal_behind(value).await;
        }
        let mut done = Vec::new();
        let mut errors = Vec::new();
        let first = if held {
            let (topic, number) = (partition.topic.as_str(), partition.partition);
            let outcome = self
                .held_moves(topic, number, &leader, &follower, &mut done)
                .await;
            value.insert("held".into(), Value::Object(outcome.record));
            errors.extend(outcome.error);
            HELD_MOVES.min(moves)
        } else {
            0
        };
        for index in first..moves {
            if index > 0 {
                tokio::time::sleep(Duration::from_millis(gap_ms)).await;
            }
            let to = if index % 2 == 0 { &follower } else { &leader };
            done.push(
                self.transfer(&partition.topic, partition.partition, to)
                    .await,
            );
        }
        value.insert("moves".into(), Value::Array(done));
        (!errors.is_empty()).then(|| errors.join("; "))
    }

    /// A paced leadership move of a held flap: [`Worker::transfer`] tried again every
    /// [`aimed::POLL`] while it is refused (a replica restarted a moment ago, not yet
    /// registered again, is `not alive` to the controller for up to a session), for at
    /// most [`aimed::HELD_STAGE_WAIT`] and only while the run goes on. Its record, with
    /// `tries` when it took more than one.
    async fn transfer_taken(&self, topic: &str, number: u32, to: &str) -> Value {
        let began = Instant::now();
        let mut tries = 1u64;
        loop {
            let mut record = self.transfer(topic, number, to).await;
            let refused = record.get("error").is_some();
            if !refused || began.elapsed() >= aimed::HELD_STAGE_WAIT || self.stopping() {
                if tries > 1 {
                    if let Some(fields) = record.as_object_mut() {
                        fields.insert("tries".into(), json!(tries));
                    }
                }
                return record;
            }
            tokio::time::sleep(aimed::POLL).await;
            tries += 1;
        }
    }

    /// One leadership move of a flap: its record (`to`, and the answer or the error).
    async fn transfer(&self, topic: &str, number: u32, to: &str) -> Value {
        let action = AdminAction::TransferLeader {
            topic: topic.to_string(),
            partition: number,
            to: to.to_string(),
        };
        match tokio::time::timeout(aimed::REQUEST_WAIT, self.control.admin(&action)).await {
            Ok(Ok(answer)) => json!({"to": to, "answer": answer}),
            Ok(Err(error)) => json!({"to": to, "error": error.0}),
            Err(_) => json!({"to": to, "error": "no answer in time"}),
        }
    }

    /// A held flap's first three moves of `topic`/`number` (to `follower`, back to
    /// `leader`, to `follower` again), each paced by the stage it must bring about
    /// ([`aimed::HeldStage`]): `leader`'s question held ([`aimed::QUESTION_POINT`])
    /// until `follower` leads, then its answer held ([`aimed::STALE_ANSWER_POINT`])
    /// while leadership comes back to it, it commits a write and leadership leaves it
    /// again, and only then released — before the question it asks in that last epoch,
    /// held meanwhile. Each move is tried again while it is refused
    /// ([`Worker::transfer_taken`]). A stage that does not come within
    /// [`aimed::HELD_STAGE_WAIT`] is recorded as missed and the flap goes on; both
    /// points are released at the end whatever happened (and by the undo, should a
    /// release fail). The moves' records go to `moves`.
    async fn held_moves(
        &self,
        topic: &str,
        number: u32,
        leader: &str,
        follower: &str,
        moves: &mut Vec<Value>,
    ) -> HeldOutcome {
        let mut record = Map::new();
        let mut reached = Vec::new();
        let mut missed = Vec::new();
        let mut note = |stage: aimed::HeldStage, ok: bool| {
            let name = serde_json::to_value(stage).unwrap_or(Value::Null);
            if ok {
                reached.push(name);
            } else {
                missed.push(name);
            }
        };
        let question = aimed::QUESTION_POINT;
        let answer = aimed::STALE_ANSWER_POINT;

        let asked_before = self.hits_of(leader, question).await;
        record.insert("question".into(), self.hold_point(leader, question).await);
        moves.push(self.transfer_taken(topic, number, follower).await);
        let away = self
            .await_view(follower, topic, number, |view| view.leading)
            .await
            .is_some();
        note(aimed::HeldStage::Away, away);
        // Its question reached the point (it is a follower now) before the answer is
        // held: the answer it gets comes from a leader. (Not waited for when the point
        // could not be armed: it counts nothing then.)
        let question_armed = is_armed(&record, "question");
        if question_armed {
            self.await_hits(leader, question, asked_before).await;
        }
        let answered_before = self.hits_of(leader, answer).await;
        record.insert("answer".into(), self.hold_point(leader, answer).await);
        let mut errors = Vec::new();
        if let Err(error) = self.release_point(leader, question).await {
            errors.push(error);
        }
        let answer_armed = is_armed(&record, "answer");
        let answered = answer_armed && self.await_hits(leader, answer, answered_before).await;
        note(aimed::HeldStage::Answered, answered);

        moves.push(self.transfer_taken(topic, number, leader).await);
        let back = self
            .await_view(leader, topic, number, |view| view.leading)
            .await;
        note(aimed::HeldStage::Back, back.is_some());
        if let Some(start) = back.map(|view| view.log_end_offset) {
            let committed = self
                .await_view(leader, topic, number, |view| {
                    view.leading && view.high_watermark > start
                })
                .await;
            if let Some(view) = &committed {
                record.insert("committed_from".into(), json!(start));
                record.insert("committed_to".into(), json!(view.high_watermark));
            }
            note(aimed::HeldStage::Committed, committed.is_some());
        } else {
            note(aimed::HeldStage::Committed, false);
        }

        // Its question in the next epoch held as well: the stale answer goes first.
        let asked_again_before = self.hits_of(leader, question).await;
        record.insert(
            "question_again".into(),
            self.hold_point(leader, question).await,
        );
        moves.push(self.transfer_taken(topic, number, follower).await);
        let away_again = self
            .await_view(leader, topic, number, |view| {
                !view.leading && view.leader.as_deref() == Some(follower)
            })
            .await
            .is_some();
        note(aimed::HeldStage::AwayAgain, away_again);
        let question_again_armed = is_armed(&record, "question_again");
        let asked_again =
            question_again_armed && self.await_hits(leader, question, asked_again_before).await;
        note(aimed::HeldStage::AskedAgain, asked_again);
        if let Err(error) = self.release_point(leader, answer).await {
            errors.push(error);
        }
        // Time for the released answer to be applied before the fresh question goes.
        tokio::time::sleep(aimed::POLL).await;
        if let Err(error) = self.release_point(leader, question).await {
            errors.push(error);
        }
        record.insert("on".into(), json!(leader));
        record.insert("reached".into(), Value::Array(reached));
        record.insert("missed".into(), Value::Array(missed));
        HeldOutcome {
            record,
            error: (!errors.is_empty()).then(|| errors.join("; ")),
        }
    }

    /// `node`'s view of `topic`/`number`, read every [`aimed::POLL`] until `wanted` holds
    /// for it, for at most [`aimed::HELD_STAGE_WAIT`] and only while the run goes on.
    async fn await_view(
        &self,
        node: &str,
        topic: &str,
        number: u32,
        wanted: impl Fn(&sut::ReplicaView) -> bool,
    ) -> Option<sut::ReplicaView> {
        let began = Instant::now();
        while began.elapsed() < aimed::HELD_STAGE_WAIT && !self.stopping() {
            if let Some(view) = self.replica_view(node, topic, number).await {
                if wanted(&view) {
                    return Some(view);
                }
            }
            tokio::time::sleep(aimed::POLL).await;
        }
        None
    }

    /// How often `point` was reached on `node` (0 when it never was, or the node does
    /// not say).
    async fn hits_of(&self, node: &str, point: &str) -> u64 {
        tokio::time::timeout(aimed::POLL * 4, self.control.failpoint_hits(node))
            .await
            .ok()
            .flatten()
            .and_then(|hits| hits.get(point).copied())
            .unwrap_or(0)
    }

    /// Whether `point` was reached on `node` more than `before` times within
    /// [`aimed::HELD_STAGE_WAIT`] (polled, only while the run goes on).
    async fn await_hits(&self, node: &str, point: &str, before: u64) -> bool {
        self.await_hits_for(node, point, before, aimed::HELD_STAGE_WAIT)
            .await
    }

    /// [`Worker::await_hits`] for at most `limit`.
    async fn await_hits_for(&self, node: &str, point: &str, before: u64, limit: Duration) -> bool {
        let began = Instant::now();
        while began.elapsed() < limit && !self.stopping() {
            if self.hits_of(node, point).await > before {
                return true;
            }
            tokio::time::sleep(aimed::POLL).await;
        }
        false
    }

    /// `delay` armed on `nodes` for an `aimed` strike (entered in
    /// [`FaultState::aimed_slowed`], released by the undo): what was armed, and the
    /// error if one failed.
    async fn slow_aimed(
        &self,
        nodes: Vec<String>,
        delay: &crate::slow::Delay,
        rng: &mut Rng,
    ) -> Map<String, Value> {
        let mut slowed = Map::new();
        let error = self
            .slow(
                &TargetSpec::Nodes(nodes.clone()),
                std::slice::from_ref(delay),
                rng,
                &mut slowed,
            )
            .await;
        {
            let mut state = self.state();
            for node in &nodes {
                let point = (node.clone(), delay.point.clone());
                if state.slowed.contains_key(&point) {
                    state.aimed_slowed.insert(point);
                }
            }
        }
        if let Some(error) = error {
            slowed.insert("error".into(), json!(error));
        }
        slowed
    }

    /// A leader stranded ahead of its successor ([`Aim::Strand`]): a partition with a
    /// live leader and a live in-sync follower (picked with `rng`) has its leader's
    /// replication port cut from every other node until its ISR is the leader alone;
    /// `alone_ms` later [`aimed::OUT_OF_RANGE_POINT`] is held (`pause`) on it and it is
    /// paused; once another replica leads, the cut is healed and the leader resumed, and
    /// the point is released when the successor's log reaches the end the stranded
    /// replica kept (its log end once its own view says it follows). Each stage's outcome is in `value`
    /// (`quiet`, `alone`, `failover`, `returned`). When the ISR does not shrink the cut is
    /// healed and the strike ends there (`no-target`); when nobody is elected the leader
    /// is brought back at the end of the wait: nothing is left cut off, paused or held
    /// past the strike. Once the run is asked to stop every wait ends at once: the race
    /// needs the clients' writes.
    async fn strand(
        &self,
        alone_ms: u64,
        rng: &mut Rng,
        value: &mut Map<String, Value>,
    ) -> Option<String> {
        value.insert("trigger".into(), json!("strand"));
        let Some((leader, partition)) = self.own_leader(rng, value).await else {
            return Some(format!(
                "no-target: no partition whose leader says it leads with an in-sync \
                 follower (within {} s)",
                aimed::OWN_LEADER_WAIT.as_secs()
            ));
        };
        let (key, topic, number) = (partition.key(), partition.topic, partition.partition);
        value.insert("key".into(), json!(key));
        value.insert("node".into(), json!(leader));
        value.insert(
            "why".into(),
            json!(format!(
                "{leader} leads {key} alone, then another replica is elected without its last \
                 writes, and {leader} comes back ahead of it"
            )),
        );

        // Alone: the followers' fetches cut until the ISR is the leader's own.
        let mut alone = Map::new();
        let shape = Shape::Isolate(TargetSpec::Nodes(vec![leader.clone()]));
        if let Some(error) = self
            .partition(
                PackageKind::Aimed,
                &shape,
                Ports::Replication,
                false,
                rng,
                &mut alone,
            )
            .await
        {
            value.insert("alone".into(), Value::Object(alone));
            return Some(error);
        }
        let began = Instant::now();
        // Alone in its ISR (`true`), or no longer its leader (`false`: moot).
        let only_leader = self
            .poll_roles(aimed::LEAVE_ISR_WAIT, |roles| {
                let now = roles.partition(&topic, number)?;
                if now.leader.as_ref() != Some(&leader) {
                    return Some(false);
                }
                (now.isr == [leader.clone()]).then_some(true)
            })
            .await
            == Some(true);
        alone.insert("isr_alone".into(), json!(only_leader));
        alone.insert(
            "waited_ms".into(),
            json!(began.elapsed().as_millis() as u64),
        );
        if !only_leader {
            // Its followers still count as in sync (or the leader cannot write its ISR):
            // a pause now would only elect one of them cleanly.
            let mut healed = Map::new();
            let error = self.stop_cuts(PackageKind::Aimed, &mut healed).await;
            alone.insert("uncut".into(), Value::Object(healed));
            value.insert("alone".into(), Value::Object(alone));
            return Some(error.unwrap_or_else(|| {
                format!(
                    "no-target: {leader} did not lead {key} alone (within {} s{})",
                    aimed::LEAVE_ISR_WAIT.as_secs(),
                    if self.stopping() {
                        ", or the run ended"
                    } else {
                        ""
                    }
                )
            }));
        }
        value.insert("alone".into(), Value::Object(alone));
        tokio::time::sleep(Duration::from_millis(alone_ms)).await;

        // The point held on its way back, then the pause (its HTTP does not answer paused).
        let point = aimed::OUT_OF_RANGE_POINT;
        let held = self.hold_point(&leader, point).await;
        value.insert("held".into(), held);
        let paused_at = self.replica_view(&leader, &topic, number).await;
        value.insert(
            "stranded".into(),
            json!({
                "log_end": paused_at.as_ref().map(|v| v.log_end_offset),
                "high_watermark": paused_at.as_ref().map(|v| v.high_watermark),
            }),
        );
        if let Some(error) = self.strike(&leader, Strike::Pause, rng, value).await {
            return Some(error);
        }

        // Another replica elected without the writes it took alone.
        let began = Instant::now();
        let successor = self
            .poll_roles(aimed::FAILOVER_WAIT, |roles| {
                roles
                    .partition(&topic, number)
                    .and_then(|p| p.leader.clone())
                    .filter(|l| *l != leader)
            })
            .await;
        value.insert(
            "failover".into(),
            json!({
                "leader": successor,
                "waited_ms": began.elapsed().as_millis() as u64,
                "run_ended": self.stopping(),
            }),
        );

        // Back, ahead of its successor: its out-of-range round trip held until the
        // successor's log reaches the end it kept.
        let mut returned = Map::new();
        let mut errors = Vec::new();
        let mut healed = Map::new();
        if let Some(error) = self.stop_cuts(PackageKind::Aimed, &mut healed).await {
            errors.push(error);
        }
        returned.insert("uncut".into(), Value::Object(healed));
        let mut resumed = Map::new();
        if let Some(error) = self
            .resume_paused(Some(std::slice::from_ref(&leader)), &mut resumed)
            .await
        {
            errors.push(error);
        }
        returned.insert("resume".into(), Value::Object(resumed));
        if let Some(successor) = &successor {
            // What it kept is known once it follows (it may have taken writes as a
            // leader after it was resumed, and cut its log to its high watermark).
            let began = Instant::now();
            let (mut kept, mut last) = (None, None);
            while began.elapsed() < aimed::CATCH_UP_WAIT && !self.stopping() {
                if kept.is_none() {
                    kept = self
                        .replica_view(&leader, &topic, number)
                        .await
                        .filter(|v| !v.leading)
                        .map(|v| v.log_end_offset);
                }
                last = self
                    .replica_view(successor, &topic, number)
                    .await
                    .map(|v| v.log_end_offset)
                    .or(last);
                if matches!((kept, last), (Some(kept), Some(end)) if end >= kept) {
                    break;
                }
                tokio::time::sleep(aimed::POLL).await;
            }
            returned.insert("kept_log_end".into(), json!(kept));
            returned.insert("successor_log_end".into(), json!(last));
            returned.insert(
                "waited_ms".into(),
                json!(began.elapsed().as_millis() as u64),
            );
        }
        if let Err(error) = self.release_point(&leader, point).await {
            errors.push(error);
        }
        value.insert("returned".into(), Value::Object(returned));
        (!errors.is_empty()).then(|| errors.join("; "))
    }

    /// A partition (picked with `rng`) whose leader, by the metadata, is live and has a
    /// live in-sync follower, and says so itself: it leads in its own view, with another
    /// replica in its ISR. The metadata still names a restarted node leader until its old
    /// session ends, and a strand on it waits out its lag time for nothing. Looked for
    /// every [`aimed::POLL`] for at most [`aimed::OWN_LEADER_WAIT`]; how long it took in
    /// `value`'s `picked`. The leader, and the partition as the metadata has it.
    async fn own_leader(
        &self,
        rng: &mut Rng,
        value: &mut Map<String, Value>,
    ) -> Option<(String, PartitionRoles)> {
        let began = Instant::now();
        let mut looked = 0u32;
        let picked = loop {
            let roles = self.roles().await;
            let candidates: Vec<(String, PartitionRoles)> = self
                .led_partitions(&roles)
                .into_iter()
                .filter_map(|(p, _, _)| Some((p.leader.clone()?, p.clone())))
                .collect();
            if let Some((leader, partition)) = rng.pick(&candidates).cloned() {
                looked += 1;
                let says_so = self
                    .replica_view(&leader, &partition.topic, partition.partition)
                    .await
                    .is_some_and(|view| {
                        view.leading && view.isr.iter().any(|node| *node != leader)
                    });
                if says_so {
                    break Some((leader, partition));
                }
            }
            if began.elapsed() >= aimed::OWN_LEADER_WAIT || self.stopping() {
                break None;
            }
            tokio::time::sleep(aimed::POLL).await;
        };
        value.insert(
            "picked".into(),
            json!({"looked": looked, "waited_ms": began.elapsed().as_millis() as u64}),
        );
        picked
    }

    /// After a strike that had the cluster to itself: the roles and the leaders' own
    /// views polled every [`aimed::POLL`] until they have agreed for a while, at least
    /// [`settle::SETTLE_MIN`] and at most [`settle::SETTLE_WAIT`]
    /// ([`settle::Settling`]); the outcome in `value`'s
    /// `settled`. Not judged (`settled.skipped`) while another package's fault is still
    /// in place or an `aimed` fault of this strike is (a cluster still injured need not
    /// agree), nor once the run is stopping.
    async fn settle(&self, value: &mut Map<String, Value>) {
        let injured = {
            let state = self.state();
            state.others_hold(PackageKind::Aimed) || state.holds(PackageKind::Aimed)
        };
        if injured {
            value.insert(
                "settled".into(),
                json!({"skipped": "a fault is still in place"}),
            );
            return;
        }
        let began = Instant::now();
        let mut settling = settle::Settling::default();
        while began.elapsed() < settle::SETTLE_WAIT && !self.stopping() {
            if let Some((roles, views)) = self.roles_and_views(settle::SETTLE_WAIT, began).await {
                if views.is_empty() && settling == settle::Settling::default() {
                    // No node tells its replicas: nothing to judge, now or later.
                    value.insert(
                        "settled".into(),
                        json!({"skipped": "no node answered with its replicas"}),
                    );
                    return;
                }
                let poll = settle::Poll::of(&roles, &views);
                let at_ms = began.elapsed().as_millis() as u64;
                settling.observe(&poll, at_ms);
                if settling.done(at_ms) {
                    break;
                }
            }
            tokio::time::sleep(aimed::POLL).await;
        }
        value.insert(
            "settled".into(),
            settling.outcome(began.elapsed().as_millis() as u64),
        );
    }

    /// The cluster to an `aimed` strike of several stages, which a fault landing
    /// mid-way would undo: other packages start nothing more while the returned guard
    /// lives, and what they have in place is undone by their own stops, waited for at
    /// most [`aimed::QUIET_WAIT`] (the strike begins then whatever is still in place).
    /// What it came to is `value`'s `quiet`.
    async fn quiet(&self, value: &mut Map<String, Value>) -> Exclusive {
        let exclusive = Exclusive::take(&self.state, PackageKind::Aimed);
        let began = Instant::now();
        while self.state().others_hold(PackageKind::Aimed)
            && began.elapsed() < aimed::QUIET_WAIT
            && !self.stopping()
        {
            tokio::time::sleep(aimed::POLL).await;
        }
        value.insert(
            "quiet".into(),
            json!({
                "quiet": !self.state().others_hold(PackageKind::Aimed),
                "waited_ms": began.elapsed().as_millis() as u64,
            }),
        );
        exclusive
    }

    /// `point` held (`pause`) on `node` for an `aimed` strike, entered in
    /// [`FaultState::slowed`] and [`FaultState::aimed_slowed`] (so the undo and
    /// `heal_all` release it too): the arming's record.
    async fn hold_point(&self, node: &str, point: &str) -> Value {
        let key = (node.to_string(), point.to_string());
        {
            let mut state = self.state();
            state.slowed.entry(key.clone()).or_insert(false);
            state.aimed_slowed.insert(key.clone());
        }
        match self.control.failpoint(node, point, Some("pause")).await {
            Ok(_) => {
                self.state().slowed.insert(key, true);
                json!({"node": node, "point": point, "actions": "pause"})
            }
            Err(error) => json!({"node": node, "point": point, "error": error.0}),
        }
    }

    /// Releases a point an `aimed` strike armed ([`Worker::hold_point`], or a flap's
    /// delay): forgotten from [`FaultState::slowed`] and [`FaultState::aimed_slowed`]
    /// when released, when its arming was never confirmed, or when its node was killed
    /// (the restart forgets it); otherwise kept, to be tried again by the next undo. The
    /// error, if the release of a confirmed arming failed (one never confirmed has
    /// nothing to release, and its arming's error was said already).
    async fn release_point(&self, node: &str, point: &str) -> Result<(), String> {
        let key = (node.to_string(), point.to_string());
        let result = self.control.failpoint(node, point, None).await;
        let mut state = self.state();
        let confirmed = state.slowed.get(&key).copied().unwrap_or(false);
        if result.is_ok() || !confirmed || state.killed.contains_key(node) {
            state.slowed.remove(&key);
            state.aimed_slowed.remove(&key);
        }
        match result {
            Err(error) if confirmed => Err(format!("releasing {point} on {node}: {error}")),
            _ => Ok(()),
        }
    }

    /// Whether the nemesis was asked to stop (the clients are done).
    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// `node`'s view of its replica of `topic`/`number` (`None` when it does not answer
    /// in four polls or holds no such replica).
    async fn replica_view(&self, node: &str, topic: &str, number: u32) -> Option<sut::ReplicaView> {
        let views = tokio::time::timeout(aimed::POLL * 4, self.control.replicas(node))
            .await
            .ok()
            .flatten()?;
        views
            .into_iter()
            .find(|v| v.topic == topic && v.partition == number)
    }

    /// KAFKA-3083's shape: the controller's metadata port cut from every other node, then,
    /// `request_after_ms` later and the cut still in place, an admin request. The
    /// request's failure is recorded (`request_error`) but is not the step's: while the
    /// controller is cut off, a failure is one of the outcomes aimed at.
    async fn controller_cut(
        &self,
        request: CutRequest,
        request_after_ms: u64,
        gated: bool,
        rng: &mut Rng,
        value: &mut Map<String, Value>,
    ) -> Option<String> {
        value.insert("trigger".into(), json!("controller"));
        let roles = match self.acting_controller(value).await {
            Ok(roles) => roles,
            Err(why) => return Some(why),
        };
        let Some(controller) = roles.controller.clone() else {
            return Some("no-target: no controller".into());
        };
        value.insert("node".into(), json!(controller));
        value.insert("meta_leader".into(), json!(roles.meta_leader));
        value.insert("controller_epoch".into(), json!(roles.controller_epoch));
        if gated {
            return self.gated_cut(&controller, request, rng, value).await;
        }
        value.insert(
            "why".into(),
            json!("the controller's metadata port is cut from the metadata quorum while an admin request is sent"),
        );
        if let Some(error) = self.isolate(&controller, Ports::Metadata, rng, value).await {
            return Some(error);
        }
        tokio::time::sleep(Duration::from_millis(request_after_ms)).await;
        let action = self.cut_request(request, None, rng).await;
        // To the cut-off controller alone: retried at the others, the request would be
        // carried out by the controller that takes over, and the one cut off would have
        // nothing queued when it comes back.
        self.ask_controller(&action, &controller, aimed::REQUEST_WAIT, value)
            .await;
        // The cut is a soft failure only once the rest of the cluster has given the
        // controller up: hold it until another node is controller (its session expired
        // and a successor was elected), at most FAILOVER_WAIT; the undo's hold follows.
        self.await_successor(&controller, value).await;
        None
    }

    /// The roles polled until the controller they name acts as controller in its own
    /// view, with their epoch, and is neither killed nor paused by the nemesis, at most
    /// [`aimed::ACTING_WAIT`]; the wait in `value` (`acting_wait_ms`, and `named_idle`:
    /// how many reads named a controller that did not act as one). `Err` says why no
    /// controller is a target.
    async fn acting_controller(&self, value: &mut Map<String, Value>) -> Result<Roles, String> {
        let began = Instant::now();
        let mut named_idle = 0u64;
        let mut last = None;
        while began.elapsed() < aimed::ACTING_WAIT && !self.stopping() {
            if let Ok(Some(roles)) =
                tokio::time::timeout(aimed::POLL * 4, self.control.roles()).await
            {
                if let Some(controller) = roles.controller.clone() {
                    let down = {
                        let state = self.state();
                        state.killed.contains_key(&controller) || state.paused.contains(&controller)
                    };
                    let view = if down {
                        None
                    } else {
                        tokio::time::timeout(
                            aimed::POLL * 4,
                            self.control.controller_view(&controller),
                        )
                        .await
                        .ok()
                        .flatten()
                    };
                    let acting = view
                        .as_ref()
                        .and_then(|v| v.acting_epoch)
                        .is_some_and(|epoch| epoch == roles.controller_epoch);
                    if acting {
                        value.insert(
                            "acting_wait_ms".into(),
                            json!(began.elapsed().as_millis() as u64),
                        );
                        value.insert("named_idle".into(), json!(named_idle));
                        return Ok(roles);
                    }
                    if view.is_some() {
                        named_idle += 1;
                    }
                    last = Some(controller);
                }
            }
            tokio::time::sleep(aimed::POLL).await;
        }
        value.insert("named_idle".into(), json!(named_idle));
        Err(match last {
            Some(controller) => format!(
                "no-target: the controller {controller} the metadata names did not act as one within {} ms",
                aimed::ACTING_WAIT.as_millis()
            ),
            None => "no-target: no controller".into(),
        })
    }

    /// A gated controller cut ([`Aim::ControllerCut`]'s `gated`): `controller` stalled
    /// just before its next metadata write ([`aimed::GATE_POINT`] held), an admin
    /// request sent to it so that it decides something and stops there, its metadata
    /// port cut until another node is controller, the cut healed, and only then the
    /// gate released: its decision, made as controller, is written by a node that has
    /// not been one for a while. What each stage came to is in `value`.
    async fn gated_cut(
        &self,
        controller: &str,
        request: CutRequest,
        rng: &mut Rng,
        value: &mut Map<String, Value>,
    ) -> Option<String> {
        value.insert(
            "why".into(),
            json!("the controller stalls just before a metadata write and loses its session meanwhile"),
        );
        {
            let state = self.state();
            if state.killed.contains_key(controller) || state.paused.contains(controller) {
                return Some(format!(
                    "no-target: the controller {controller} is down (its successor is not elected yet)"
                ));
            }
        }
        if request == CutRequest::TransferLeader {
            if let Some(moved) = self.lead_away(controller, rng).await {
                value.insert("led_away".into(), moved);
            }
        }
        let gate = aimed::GATE_POINT;
        let before = self.hits_of(controller, gate).await;
        let held = self.hold_point(controller, gate).await;
        let armed = held.get("error").is_none();
        value.insert("gate".into(), held);
        if !armed {
            // A controller that does not answer cannot be gated (it may be down, or
            // cut off by another package): nothing is cut, and the arming is forgotten.
            if let Err(error) = self.release_point(controller, gate).await {
                return Some(error);
            }
            return Some(format!(
                "no-target: the gate could not be armed on the controller {controller}"
            ));
        }
        // A decision about a partition the controller's own failure leaves alone where
        // there is one (see `remoteness`): its successor rewrites a partition the
        // controller led, so the held write about it no longer lands.
        let action = self.cut_request(request, Some(controller), rng).await;
        // Not answered while the gate holds it: only sent.
        self.ask_controller(&action, controller, aimed::GATED_REQUEST_WAIT, value)
            .await;
        let began = Instant::now();
        let reached = self
            .await_hits_for(controller, gate, before, aimed::GATE_WAIT)
            .await;
        value.insert("gate_reached".into(), json!(reached));
        value.insert(
            "gate_wait_ms".into(),
            json!(began.elapsed().as_millis() as u64),
        );
        if !reached {
            // No decision to hold: a cut now would only be an ordinary one.
            if let Err(error) = self.release_point(controller, gate).await {
                return Some(error);
            }
            return Some(format!(
                "no-target: the controller {controller} wrote no partition state within {} ms of the request",
                aimed::GATE_WAIT.as_millis()
            ));
        }
        let mut errors = Vec::new();
        let cut = self.isolate(controller, Ports::Metadata, rng, value).await;
        if let Some(error) = cut {
            errors.push(error);
        } else {
            self.await_successor(controller, value).await;
            let mut healed = Map::new();
            if let Some(error) = self.stop_cuts(PackageKind::Aimed, &mut healed).await {
                errors.push(error);
            }
            value.insert("uncut".into(), Value::Object(healed));
        }
        if let Err(error) = self.release_point(controller, gate).await {
            errors.push(error);
        }
        value.insert("gate_released".into(), json!(true));
        (!errors.is_empty()).then(|| errors.join("; "))
    }

    /// When `controller` leads every partition that has an in-sync follower, one of them
    /// (picked with `rng`) moved to a follower before a gated cut: a decision about a
    /// partition the controller leads is overtaken by its successor, which elects that
    /// partition a new leader as soon as the controller's session is gone. The move's
    /// record, or `None` when the controller follows or holds no replica of one already.
    async fn lead_away(&self, controller: &str, rng: &mut Rng) -> Option<Value> {
        let roles = self.roles().await;
        let candidates = transfer_candidates(&roles);
        if candidates.is_empty()
            || candidates
                .iter()
                .any(|(p, _)| remoteness(p, controller) < 2)
        {
            return None;
        }
        let (partition, followers) = rng.pick(&candidates)?;
        let to = rng.pick(followers)?;
        let mut record = self
            .transfer(&partition.topic, partition.partition, to)
            .await;
        // The request below is drawn from the roles: wait until they show the move.
        let began = Instant::now();
        let key = partition.key();
        let shown = loop {
            let now = self.roles().await;
            let leader = now.partitions.iter().find(|p| p.key() == key);
            if leader.is_some_and(|p| p.leader.as_deref() != Some(controller)) {
                break true;
            }
            if began.elapsed() >= aimed::REQUEST_WAIT || self.stopping() {
                break false;
            }
            tokio::time::sleep(aimed::POLL).await;
        };
        if let Some(fields) = record.as_object_mut() {
            fields.insert("shown".into(), json!(shown));
        }
        Some(record)
    }

    /// `node` cut from every other node on `ports` as an `aimed` fault (healed by the
    /// strike or its undo); the cut's record in `value`, and its error.
    async fn isolate(
        &self,
        node: &str,
        ports: Ports,
        rng: &mut Rng,
        value: &mut Map<String, Value>,
    ) -> Option<String> {
        let shape = Shape::Isolate(TargetSpec::Nodes(vec![node.to_string()]));
        self.partition(PackageKind::Aimed, &shape, ports, false, rng, value)
            .await
    }

    /// The admin request of a controller cut: a preferred-leader election, or a
    /// partition with an in-sync follower moved to it (picked with `rng`; a preferred
    /// election when no partition has one), among those farthest from `away_from` by
    /// [`remoteness`].
    async fn cut_request(
        &self,
        request: CutRequest,
        away_from: Option<&str>,
        rng: &mut Rng,
    ) -> AdminAction {
        match request {
            CutRequest::ElectPreferred => AdminAction::ElectPreferred,
            CutRequest::TransferLeader => {
                let roles = self.roles().await;
                let mut candidates = transfer_candidates(&roles);
                if let Some(node) = away_from {
                    let best = candidates.iter().map(|(p, _)| remoteness(p, node)).min();
                    candidates.retain(|(p, _)| Some(remoteness(p, node)) == best);
                }
                match rng.pick(&candidates) {
                    Some((partition, followers)) => match rng.pick(followers) {
                        Some(to) => AdminAction::TransferLeader {
                            topic: partition.topic.clone(),
                            partition: partition.partition,
                            to: (*to).clone(),
                        },
                        None => AdminAction::ElectPreferred,
                    },
                    None => AdminAction::ElectPreferred,
                }
            }
        }
    }

    /// `action` sent to `controller` alone, waited for at most `wait` (the request is
    /// not withdrawn: the broker may still carry it out); the request and its answer or
    /// error in `value`.
    async fn ask_controller(
        &self,
        action: &AdminAction,
        controller: &str,
        wait: Duration,
        value: &mut Map<String, Value>,
    ) {
        value.insert(
            "request".into(),
            serde_json::to_value(action).unwrap_or(Value::Null),
        );
        match tokio::time::timeout(wait, self.control.admin_at(action, controller)).await {
            Ok(Ok(answer)) => {
                value.insert("answer".into(), answer);
            }
            Ok(Err(error)) => {
                value.insert("request_error".into(), json!(error.0));
            }
            Err(_) => {
                value.insert(
                    "request_error".into(),
                    json!(format!(
                        "no answer within {} ms (the request may still be handled)",
                        wait.as_millis()
                    )),
                );
            }
        }
    }

    /// The roles polled until a node other than `controller` is controller, at most
    /// [`aimed::FAILOVER_WAIT`]: the successor and the wait in `value`.
    async fn await_successor(&self, controller: &str, value: &mut Map<String, Value>) {
        let began = Instant::now();
        let successor = self
            .poll_roles(aimed::FAILOVER_WAIT, |now| {
                now.controller.clone().filter(|c| c != controller)
            })
            .await;
        value.insert("successor".into(), json!(successor));
        value.insert(
            "failover_wait_ms".into(),
            json!(began.elapsed().as_millis() as u64),
        );
    }

    /// CrashTuner's moment: the roles read every [`aimed::POLL`] for `watch_ms`; the first
    /// time a partition's ISR grew or its leadership moved since the read before, its
    /// leader now is struck (one of the changed partitions, picked with `rng`; a leader
    /// already killed or paused is passed over).
    async fn after_change(
        &self,
        strike: Strike,
        watch_ms: u64,
        rng: &mut Rng,
        value: &mut Map<String, Value>,
    ) -> Option<String> {
        let watch = Duration::from_millis(watch_ms);
        let began = Instant::now();
        let left = |began: Instant| watch.saturating_sub(began.elapsed());
        let mut before = tokio::time::timeout(watch, self.control.roles())
            .await
            .ok()
            .flatten();
        let mut polls = 0u64;
        while !left(began).is_zero() {
            tokio::time::sleep(aimed::POLL.min(left(began))).await;
            // A read that outlasts the watch (nodes down or paused) ends it.
            let Ok(Some(now)) = tokio::time::timeout(left(began), self.control.roles()).await
            else {
                continue;
            };
            polls += 1;
            if let Some(before) = &before {
                let found: Vec<aimed::Change> = {
                    let state = self.state();
                    aimed::changes(before, &now)
                        .into_iter()
                        .filter(|c| {
                            !state.killed.contains_key(&c.leader)
                                && !state.paused.contains(&c.leader)
                        })
                        .collect()
                };
                if let Some(change) = rng.pick(&found) {
                    let change = change.clone();
                    value.insert("trigger".into(), json!(change.trigger));
                    value.insert(
                        "why".into(),
                        json!(format!(
                            "{} of {}: strike its leader right after the metadata write",
                            change.trigger, change.key
                        )),
                    );
                    value.insert(
                        "change".into(),
                        serde_json::to_value(&change).unwrap_or(Value::Null),
                    );
                    value.insert(
                        "waited_ms".into(),
                        json!(began.elapsed().as_millis() as u64),
                    );
                    value.insert("polls".into(), json!(polls));
                    return self.strike(&change.leader, strike, rng, value).await;
                }
            }
            before = Some(now);
        }
        value.insert("polls".into(), json!(polls));
        Some(format!(
            "no-target: no ISR expansion or leadership move in {watch_ms} ms"
        ))
    }

    /// CoFI's moment: the first lag within `watch_ms` ([`Worker::wait_for_lag`]); the
    /// leader or the follower of that lag is struck.
    async fn on_lag(
        &self,
        strike: Strike,
        whom: LagTarget,
        watch_ms: u64,
        rng: &mut Rng,
        value: &mut Map<String, Value>,
    ) -> Option<String> {
        let lag = match self.wait_for_lag(watch_ms, None, rng, value).await {
            Ok(lag) => lag,
            Err(error) => return Some(error),
        };
        let node = match whom {
            LagTarget::Leader => lag.leader.clone(),
            LagTarget::Follower => lag.follower.clone(),
        };
        value.insert(
            "why".into(),
            json!(format!(
                "{}'s high watermark of {} is {} behind its leader {}'s: strike the {}",
                lag.follower,
                lag.key,
                lag.by(),
                lag.leader,
                match whom {
                    LagTarget::Leader => "leader",
                    LagTarget::Follower => "follower",
                }
            )),
        );
        self.strike(&node, strike, rng, value).await
    }

    /// A controlled failover at CoFI's moment ([`Aim::LagMove`]): with `behind_ms`, a
    /// third replica of a partition is put behind first ([`Worker::lag_behind`]) and left
    /// behind `behind_ms` more (where no partition has one, the move goes on without:
    /// `behind_skipped`); with `delays.widen_ms`, that partition (or, with nothing
    /// behind, a random led one) has its in-sync followers' [`aimed::LAG_WIDEN_POINT`]
    /// delayed (released by the undo); either way only that partition's other followers
    /// are then watched. At the first lag within `watch_ms` ([`Worker::wait_for_lag`]),
    /// the leadership is transferred to the lagging follower. With a replica behind, the
    /// leader's [`aimed::STALE_ANSWER_POINT`] is held first, the third replica's cut
    /// healed as soon as the roles name the new leader
    /// ([`Worker::heal_behind_once_moved`]; or at the watch's end), and the hold released
    /// once that replica is back in the ISR ([`Worker::release_once_rejoined`]): the new
    /// leader's high watermark is the stale one it had as a follower for as long as the
    /// replica catching up needs, however far behind it was. Without one, with
    /// `delays.answer_ms` that point is delayed that long (released by the undo).
    async fn lag_move(
        &self,
        watch_ms: u64,
        delays: LagMoveDelays,
        behind_ms: Option<u64>,
        rng: &mut Rng,
        value: &mut Map<String, Value>,
    ) -> Option<String> {
        let mut focus = match behind_ms {
            Some(ms) => match self.lag_behind(rng, value).await {
                Ok(Some((key, third))) => {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    Some(LagFocus {
                        key,
                        except: Some(third),
                    })
                }
                // Two copies, or a third one down: the move goes on without one behind.
                Ok(None) => {
                    value.insert(
                        "behind_skipped".into(),
                        json!("no partition with a live leader, an in-sync follower and a third live replica"),
                    );
                    None
                }
                Err(error) => return Some(error),
            },
            None => None,
        };
        let behind = focus.as_ref().and_then(|f| f.except.clone());
        let lag = self
            .widened_lag(watch_ms, delays.widen_ms, &mut focus, rng, value)
            .await;
        match (lag, behind) {
            (Ok(lag), Some(third)) => self.move_with_one_behind(&lag, &third, rng, value).await,
            (Ok(lag), None) => {
                let answer = match delays.answer_ms {
                    Some(ms) => OldAnswer::Delayed(ms),
                    None => OldAnswer::Prompt,
                };
                self.move_to_lagging(&lag, answer, rng, value).await
            }
            (Err(error), behind) => {
                if behind.is_some() {
                    self.heal_behind(value).await;
                }
                Some(error)
            }
        }
    }

    /// A lag move's lag: with `widen_ms`, its followers' lag widened first
    /// ([`Worker::widen_lag`], which may set `focus`), then the first lag of `focus`
    /// within `watch_ms` ([`Worker::wait_for_lag`]); `Err` says why there is none.
    async fn widened_lag(
        &self,
        watch_ms: u64,
        widen_ms: Option<u64>,
        focus: &mut Option<LagFocus>,
        rng: &mut Rng,
        value: &mut Map<String, Value>,
    ) -> Result<aimed::Lag, String> {
        if let Some(widen_ms) = widen_ms {
            if let Some(error) = self.widen_lag(widen_ms, focus, rng, value).await {
                return Err(error);
            }
        }
        self.wait_for_lag(watch_ms, focus.as_ref(), rng, value)
            .await
    }

    /// A lag move with `third` put behind: the old leader's answer held, the leadership
    /// moved to `lag`'s follower while `third` is healed as soon as the metadata names
    /// that follower leader (not when the controller answers: it answers once every
    /// replica took the move or its delivery timed out, and the one cut off cannot take
    /// it), and the answer released once `third` is back in the ISR.
    async fn move_with_one_behind(
        &self,
        lag: &aimed::Lag,
        third: &str,
        rng: &mut Rng,
        value: &mut Map<String, Value>,
    ) -> Option<String> {
        let mut healed = Map::new();
        let (error, ()) = tokio::join!(
            self.move_to_lagging(lag, OldAnswer::Held, rng, value),
            self.heal_behind_once_moved(lag, &mut healed),
        );
        value.extend(healed);
        let release = self
            .release_once_rejoined(lag, third, error.is_none(), value)
            .await;
        error.or(release)
    }

    /// A lag move's replica behind healed ([`Worker::heal_behind`]) once the roles name
    /// `lag`'s follower as its partition's leader (at most [`aimed::REQUEST_WAIT`]), so
    /// that it catches up from, and asks to join the ISR of, that leader; how long after
    /// the call in `value`'s `behind_healed_after_ms`.
    async fn heal_behind_once_moved(&self, lag: &aimed::Lag, value: &mut Map<String, Value>) {
        let began = Instant::now();
        let moved = match parse_key(&lag.key) {
            Some((topic, number)) => self
                .poll_roles(aimed::REQUEST_WAIT, |roles| {
                    roles
                        .partition(&topic, number)
                        .filter(|p| p.leader.as_ref() == Some(&lag.follower))
                        .map(|_| ())
                })
                .await
                .is_some(),
            None => false,
        };
        self.heal_behind(value).await;
        value.insert(
            "behind_healed_after_ms".into(),
            json!(began.elapsed().as_millis() as u64),
        );
        value.insert("behind_healed_at_move".into(), json!(moved));
    }

    /// A lag move's widening ([`Aim::LagMove`]'s `widen_ms`): `focus`'s partition (or,
    /// without one, a random partition with a live leader and a live in-sync follower,
    /// which becomes the focus) has its live in-sync followers but the focus's exception
    /// delayed at [`aimed::LAG_WIDEN_POINT`] (an `aimed` delay, released by the undo);
    /// what was armed is in `value`'s `widened`.
    async fn widen_lag(
        &self,
        widen_ms: u64,
        focus: &mut Option<LagFocus>,
        rng: &mut Rng,
        value: &mut Map<String, Value>,
    ) -> Option<String> {
        let roles = self.roles().await;
        let led = self.led_partitions(&roles);
        let chosen = match focus.as_ref() {
            Some(focus) => led.iter().find(|(p, _, _)| p.key() == focus.key),
            None => rng.pick(&led),
        };
        let Some((partition, followers, _)) = chosen else {
            return Some(match focus {
                Some(focus) => format!(
                    "no-target: {} has no live leader with a live in-sync follower to widen its lag",
                    focus.key
                ),
                None => "no-target: no partition with a live leader and a live in-sync follower"
                    .into(),
            });
        };
        let except = focus.as_ref().and_then(|f| f.except.clone());
        let slowed_followers: Vec<String> = followers
            .iter()
            .filter(|f| Some(*f) != except.as_ref())
            .cloned()
            .collect();
        if slowed_followers.is_empty() {
            return Some(format!(
                "no-target: {} has no in-sync follower besides the replica behind",
                partition.key()
            ));
        }
        let key = partition.key();
        let delay = crate::slow::Delay {
            point: aimed::LAG_WIDEN_POINT.to_string(),
            delay_ms: widen_ms,
            percent: 100,
        };
        let mut widened = self.slow_aimed(slowed_followers, &delay, rng).await;
        widened.insert("partition".into(), json!(key));
        value.insert("widened".into(), Value::Object(widened));
        *focus = Some(LagFocus { key, except });
        None
    }

    /// A lag move's held answer released ([`Worker::release_point`]) once the roles name
    /// `third` (the replica behind) in the ISR of `lag`'s partition again, at most
    /// [`aimed::LAG_REJOIN_WAIT`] (at once when the move failed, `moved` false):
    /// `rejoined` and `held_ms` in `value`; the release's error.
    async fn release_once_rejoined(
        &self,
        lag: &aimed::Lag,
        third: &str,
        moved: bool,
        value: &mut Map<String, Value>,
    ) -> Option<String> {
        let began = Instant::now();
        let rejoined = match (moved, parse_key(&lag.key)) {
            (true, Some((topic, number))) => self
                .poll_roles(aimed::LAG_REJOIN_WAIT, |roles| {
                    roles
                        .partition(&topic, number)
                        .filter(|p| p.isr.iter().any(|n| n == third))
                        .map(|_| ())
                })
                .await
                .is_some(),
            _ => false,
        };
        value.insert("rejoined".into(), json!(rejoined));
        value.insert("held_ms".into(), json!(began.elapsed().as_millis() as u64));
        self.release_point(&lag.leader, aimed::STALE_ANSWER_POINT)
            .await
            .err()
    }

    /// `lag`'s follower made its partition's leader; the old leader's stale-answer
    /// point first delayed or held as `answer` says (an `aimed` delay or hold, `slow` or
    /// `held` in `value`).
    async fn move_to_lagging(
        &self,
        lag: &aimed::Lag,
        answer: OldAnswer,
        rng: &mut Rng,
        value: &mut Map<String, Value>,
    ) -> Option<String> {
        let Some((topic, number)) = parse_key(&lag.key) else {
            return Some(format!("no-target: malformed partition key {:?}", lag.key));
        };
        value.insert("node".into(), json!(lag.follower));
        value.insert("strike".into(), json!("transfer"));
        value.insert(
            "why".into(),
            json!(format!(
                "{}'s high watermark of {} is {} behind its leader {}'s: make it the leader",
                lag.follower,
                lag.key,
                lag.by(),
                lag.leader
            )),
        );
        match answer {
            OldAnswer::Prompt => {}
            OldAnswer::Delayed(delay_ms) => {
                let delay = crate::slow::Delay {
                    point: aimed::STALE_ANSWER_POINT.to_string(),
                    delay_ms,
                    percent: 100,
                };
                let slowed = self.slow_aimed(vec![lag.leader.clone()], &delay, rng).await;
                value.insert("slow".into(), Value::Object(slowed));
            }
            OldAnswer::Held => {
                let held = self
                    .hold_point(&lag.leader, aimed::STALE_ANSWER_POINT)
                    .await;
                value.insert("held".into(), held);
            }
        }
        let moved = self.transfer(&topic, number, &lag.follower).await;
        let error = moved
            .get("error")
            .and_then(Value::as_str)
            .map(|error| format!("transfer to {} failed: {error}", lag.follower));
        value.insert("moved".into(), moved);
        error
    }

    /// A lag move's setup: a partition with a live leader, a live in-sync follower and a
    /// third live replica that is not the controller (picked with `rng`, among the
    /// third replicas out of the ISR already when there are any), whose third replica
    /// is cut off until it left the ISR ([`Worker::cut_behind`]): its key and that
    /// replica; `None` (nothing done) when no partition has such a third replica.
    async fn lag_behind(
        &self,
        rng: &mut Rng,
        value: &mut Map<String, Value>,
    ) -> Result<Option<(String, String)>, String> {
        let roles = self.roles().await;
        let candidates: Vec<(&PartitionRoles, String)> = self
            .led_partitions(&roles)
            .into_iter()
            .flat_map(|(partition, followers, others)| {
                // The third replica must leave an in-sync follower behind it.
                others
                    .into_iter()
                    .filter(|third| followers.iter().any(|f| f != third))
                    .filter(|third| may_put_behind(&roles, third))
                    .map(move |third| (partition, third))
                    .collect::<Vec<_>>()
            })
            .collect();
        let candidates = out_of_isr_first(&candidates, |(p, third)| !p.isr.contains(third));
        let Some((partition, third)) = rng.pick(&candidates).cloned() else {
            return Ok(None);
        };
        if let Some(error) = self.cut_behind(partition, &third, rng, value).await {
            self.heal_behind(value).await;
            return Err(error);
        }
        Ok(Some((partition.key(), third)))
    }

    /// Heals the cut of a replica put behind ([`Worker::cut_behind`]; every `aimed` cut:
    /// the package has one strike under way at a time); what the heal did is in
    /// `value`'s `behind_healed`.
    async fn heal_behind(&self, value: &mut Map<String, Value>) {
        let mut healed = Map::new();
        if let Some(error) = self.stop_cuts(PackageKind::Aimed, &mut healed).await {
            healed.insert("error".into(), json!(error));
        }
        value.insert("behind_healed".into(), Value::Object(healed));
    }

    /// Every [`aimed::POLL`] for `watch_ms`, the roles and the replica views of every
    /// node neither killed nor paused, until an in-sync follower's high watermark is
    /// behind its leader's ([`aimed::lags`]): the worst such lag (`trigger`, `lag`,
    /// `waited_ms` and `polls` in `value`). With `focus`, only a lag of its partition by
    /// a follower other than its exception counts. No lag within the watch is a
    /// `no-target`.
    async fn wait_for_lag(
        &self,
        watch_ms: u64,
        focus: Option<&LagFocus>,
        rng: &mut Rng,
        value: &mut Map<String, Value>,
    ) -> Result<aimed::Lag, String> {
        let watch = Duration::from_millis(watch_ms);
        let began = Instant::now();
        let mut polls = 0u64;
        let mut answered = false;
        loop {
            if let Some((roles, views)) = self.roles_and_views(watch, began).await {
                polls += 1;
                answered |= !views.is_empty();
                let mut found = aimed::lags(&roles, &views);
                if let Some(focus) = focus {
                    found.retain(|lag| {
                        lag.key == focus.key && Some(&lag.follower) != focus.except.as_ref()
                    });
                }
                if let Some(lag) = aimed::worst_lag(&found, rng) {
                    let lag = lag.clone();
                    value.insert("trigger".into(), json!("hw-lag"));
                    value.insert(
                        "lag".into(),
                        serde_json::to_value(&lag).unwrap_or(Value::Null),
                    );
                    value.insert(
                        "waited_ms".into(),
                        json!(began.elapsed().as_millis() as u64),
                    );
                    value.insert("polls".into(), json!(polls));
                    return Ok(lag);
                }
            }
            if began.elapsed() >= watch {
                break;
            }
            tokio::time::sleep(aimed::POLL).await;
        }
        value.insert("polls".into(), json!(polls));
        if answered {
            Err(format!(
                "no-target: no in-sync follower's high watermark behind its leader's in {watch_ms} ms"
            ))
        } else {
            Err("no-target: no node showed its replica views".into())
        }
    }

    /// The roles and the replica views of every node neither killed nor paused, each
    /// read within what is left of `watch` since `began` (at least one poll's time);
    /// `None` when the roles could not be read.
    async fn roles_and_views(
        &self,
        watch: Duration,
        began: Instant,
    ) -> Option<(Roles, BTreeMap<String, Vec<sut::ReplicaView>>)> {
        let left = watch.saturating_sub(began.elapsed()).max(aimed::POLL);
        let roles = tokio::time::timeout(left, self.control.roles())
            .await
            .ok()
            .flatten()?;
        let asked: Vec<String> = {
            let state = self.state();
            roles
                .nodes
                .iter()
                .filter(|n| !state.killed.contains_key(*n) && !state.paused.contains(*n))
                .cloned()
                .collect()
        };
        // All at once: views read one after another are taken at different moments, and
        // a follower read after its leader has often caught up with what the leader said.
        let left = watch.saturating_sub(began.elapsed()).max(aimed::POLL);
        let reads: Vec<BoxFuture<'_, Option<Vec<sut::ReplicaView>>>> = asked
            .iter()
            .map(|node| -> BoxFuture<'_, Option<Vec<sut::ReplicaView>>> {
                Box::pin(async move {
                    tokio::time::timeout(left, self.control.replicas(node))
                        .await
                        .ok()
                        .flatten()
                })
            })
            .collect();
        let views = asked
            .iter()
            .cloned()
            .zip(join_all(reads).await)
            .filter_map(|(node, replicas)| Some((node, replicas?)))
            .collect();
        Some((roles, views))
    }

    /// The partitions a leadership strike can work on: a live leader and at least one
    /// live in-sync follower (neither killed nor paused by the nemesis), each with its
    /// live in-sync followers and its other live replicas, in the roles' order.
    fn led_partitions<'r>(&self, roles: &'r Roles) -> Vec<LedPartition<'r>> {
        let state = self.state();
        let down = |node: &String| state.killed.contains_key(node) || state.paused.contains(node);
        roles
            .partitions
            .iter()
            .filter_map(|p| {
                let leader = p.leader.as_ref().filter(|l| !down(l))?;
                let live_besides_leader = |nodes: &[String]| -> Vec<String> {
                    nodes
                        .iter()
                        .filter(|node| *node != leader && !down(node))
                        .cloned()
                        .collect()
                };
                let followers = live_besides_leader(&p.isr);
                let others = live_besides_leader(&p.replicas);
                (!followers.is_empty()).then_some((p, followers, others))
            })
            .collect()
    }

    /// The roles read every [`aimed::POLL`] (each read given four polls to answer) until
    /// `found` picks something out of them, for at most `limit`, and only while the run
    /// goes on (once it is asked to stop, nothing is waited for): what it picked.
    async fn poll_roles<T>(
        &self,
        limit: Duration,
        mut found: impl FnMut(&Roles) -> Option<T>,
    ) -> Option<T> {
        let began = Instant::now();
        while began.elapsed() < limit && !self.stopping() {
            if let Ok(Some(roles)) =
                tokio::time::timeout(aimed::POLL * 4, self.control.roles()).await
            {
                if let Some(picked) = found(&roles) {
                    return Some(picked);
                }
            }
            tokio::time::sleep(aimed::POLL).await;
        }
        None
    }

    /// A flap's or a lag strike's setup: `replica`'s replication port cut from every
    /// other node (an `aimed` cut, healed by the strike or its undo), then the roles
    /// polled until `partition`'s ISR no longer names it, at most
    /// [`aimed::LEAVE_ISR_WAIT`]. What it came to is in `value`'s `behind`.
    async fn cut_behind(
        &self,
        partition: &PartitionRoles,
        replica: &str,
        rng: &mut Rng,
        value: &mut Map<String, Value>,
    ) -> Option<String> {
        let mut behind = Map::new();
        behind.insert("replica".into(), json!(replica));
        let shape = Shape::Isolate(TargetSpec::Nodes(vec![replica.to_string()]));
        let cut = self
            .partition(
                PackageKind::Aimed,
                &shape,
                Ports::Replication,
                false,
                rng,
                &mut behind,
            )
            .await;
        if let Some(error) = cut {
            value.insert("behind".into(), Value::Object(behind));
            return Some(error);
        }
        let began = Instant::now();
        let left = self
            .poll_roles(aimed::LEAVE_ISR_WAIT, |roles| {
                roles
                    .partition(&partition.topic, partition.partition)
                    .filter(|p| !p.isr.iter().any(|n| n == replica))
                    .map(|_| ())
            })
            .await
            .is_some();
        behind.insert("left_isr".into(), json!(left));
        behind.insert(
            "waited_ms".into(),
            json!(began.elapsed().as_millis() as u64),
        );
        value.insert("behind".into(), Value::Object(behind));
        None
    }

    /// Kills, pauses or isolates `node` as an `aimed` strike: entered in
    /// [`FaultState`] (and as the `aimed` package's) before its command runs. A node
    /// already killed (or, for a pause, paused) by any package is left alone.
    async fn strike(
        &self,
        node: &str,
        strike: Strike,
        rng: &mut Rng,
        value: &mut Map<String, Value>,
    ) -> Option<String> {
        value.insert("node".into(), json!(node));
        value.insert("strike".into(), json!(strike.name()));
        {
            let state = self.state();
            if state.killed.contains_key(node) {
                return Some(format!("no-target: {node} is killed already"));
            }
            if strike == Strike::Pause && state.paused.contains(node) {
                return Some(format!("no-target: {node} is paused already"));
            }
        }
        match strike {
            Strike::Kill => {
                {
                    let mut state = self.state();
                    state.killed.insert(node.to_string(), false);
                    state.aimed_killed.insert(node.to_string());
                }
                match self.control.kill(node).await {
                    Ok(pid) => {
                        value.insert("pid".into(), json!(pid));
                        let mut state = self.state();
                        state.paused.remove(node);
                        state.aimed_paused.remove(node);
                        None
                    }
                    Err(error) => Some(format!("kill failed on {node}: {error}")),
                }
            }
            Strike::Pause => {
                {
                    let mut state = self.state();
                    state.paused.insert(node.to_string());
                    state.aimed_paused.insert(node.to_string());
                }
                match self.control.pause(node).await {
                    Ok(pid) => {
                        value.insert("pid".into(), json!(pid));
                        None
                    }
                    Err(error) => Some(format!("pause failed on {node}: {error}")),
                }
            }
            Strike::Isolate => {
                let shape = Shape::Isolate(TargetSpec::Nodes(vec![node.to_string()]));
                self.partition(PackageKind::Aimed, &shape, Ports::All, false, rng, value)
                    .await
            }
        }
    }

    /// Undoes what the `aimed` package's strikes left: its cuts removed, its paused nodes
    /// resumed, its killed nodes restarted (never wiped); each part's record under
    /// `uncut`, `resume`, `start`.
    async fn stop_aimed(&self, value: &mut Map<String, Value>) -> Option<String> {
        let mut errors = Vec::new();
        let cut = self
            .state()
            .cuts
            .get(&PackageKind::Aimed)
            .is_some_and(|cuts| !cuts.is_empty());
        if cut {
            let mut part = Map::new();
            if let Some(error) = self.stop_cuts(PackageKind::Aimed, &mut part).await {
                errors.push(error);
            }
            value.insert("uncut".into(), Value::Object(part));
        }
        let (paused, killed): (Vec<String>, Vec<String>) = {
            let mut state = self.state();
            let paused_now = state.paused.clone();
            let killed_now: BTreeSet<String> = state.killed.keys().cloned().collect();
            // Another package's start or resume may have undone some already.
            state.aimed_paused.retain(|node| paused_now.contains(node));
            state.aimed_killed.retain(|node| killed_now.contains(node));
            (
                state.aimed_paused.iter().cloned().collect(),
                state.aimed_killed.iter().cloned().collect(),
            )
        };
        if !paused.is_empty() {
            let mut part = Map::new();
            if let Some(error) = self.resume_paused(Some(&paused), &mut part).await {
                errors.push(error);
            }
            value.insert("resume".into(), Value::Object(part));
        }
        if !killed.is_empty() {
            let mut part = Map::new();
            if let Some(error) = self.start_killed(Some(&killed), &mut part).await {
                errors.push(error);
            }
            value.insert("start".into(), Value::Object(part));
        }
        let slowed: Vec<(String, String)> = {
            let mut state = self.state();
            let armed_now: BTreeSet<(String, String)> = state.slowed.keys().cloned().collect();
            // The slow package's stop (or a kill) may have released some already.
            state.aimed_slowed.retain(|key| armed_now.contains(key));
            state.aimed_slowed.iter().cloned().collect()
        };
        if !slowed.is_empty() {
            let mut released = Vec::new();
            for (node, point) in slowed {
                match self.release_point(&node, &point).await {
                    Ok(()) => released.push(json!({"node": node, "point": point})),
                    Err(error) => errors.push(error),
                }
            }
            value.insert("released".into(), Value::Array(released));
        }
        let mut undone: Vec<String> = paused.into_iter().chain(killed).collect();
        undone.sort();
        value.insert("nodes".into(), json!(undone));
        if errors.is_empty() {
            None
        } else {
            Some(errors.join("; "))
        }
    }

    /// Removes every cut: recorded as each cutting package's stop operation when cuts
    /// were in place, silently otherwise.
    async fn heal_network(&self) -> Result<(), JournalError> {
        let packages: Vec<PackageKind> = self
            .state()
            .cuts
            .iter()
            .filter(|(_, cuts)| !cuts.is_empty())
            .map(|(package, _)| *package)
            .collect();
        if packages.is_empty() {
            if let Err(error) = self.control.heal().await {
                tracing::warn!(%error, "final network heal failed");
            }
            return Ok(());
        }
        let mut open = Vec::new();
        for package in packages {
            let f = match package {
                PackageKind::PartitionPorts => Action::StopPartitionPorts.f(),
                PackageKind::Aimed => Action::StopAim.f(),
                _ => Action::StopPartition.f(),
            };
            let mut value = Map::new();
            value.insert("package".into(), json!(package.name()));
            value.insert("healed".into(), json!("all"));
            value.insert("final".into(), json!(true));
            let token = self.journal.invoke(f, Value::Object(value.clone()))?;
            open.push((token, f, value));
        }
        let error = match self.control.heal().await {
            Ok(()) => {
                self.state().cuts.clear();
                None
            }
            Err(error) => Some(format!("heal failed: {error}")),
        };
        for (token, f, value) in open {
            self.finish(token, f, value, error.clone())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_out_of_the_isr_is_put_behind_first_and_never_the_controller() {
        let candidates = vec![("n2", true), ("n3", false), ("n4", true)];
        let out = |c: &(&str, bool)| !c.1;
        assert_eq!(out_of_isr_first(&candidates, out), vec![("n3", false)]);
        // None out of the ISR: every candidate stays.
        let all_in = vec![("n2", true), ("n4", true)];
        assert_eq!(out_of_isr_first(&all_in, out), all_in);
        assert!(out_of_isr_first(&[] as &[(&str, bool)], out).is_empty());
        let roles = Roles {
            controller: Some("n3".into()),
            ..Roles::default()
        };
        assert!(!may_put_behind(&roles, "n3"));
        assert!(may_put_behind(&roles, "n2"));
        assert!(
            may_put_behind(&Roles::default(), "n3"),
            "no controller named"
        );
    }

    fn nodes(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    fn grudge(edges: &[(&str, &[&str])]) -> Grudge {
        Grudge(
            edges
                .iter()
                .map(|(node, dropped)| (node.to_string(), nodes(dropped)))
                .collect(),
        )
    }

    #[test]
    fn one_way_keeps_the_isolated_side_receiving_nothing() {
        // Halves of 5: {n1, n4} against {n2, n3, n5}.
        let halves = grudge(&[
            ("n1", &["n2", "n3", "n5"]),
            ("n4", &["n2", "n3", "n5"]),
            ("n2", &["n1", "n4"]),
            ("n3", &["n1", "n4"]),
            ("n5", &["n1", "n4"]),
        ]);
        assert_eq!(
            one_way(&halves),
            grudge(&[("n1", &["n2", "n3", "n5"]), ("n4", &["n2", "n3", "n5"])])
        );
        // One node alone.
        let one = grudge(&[("n3", &["n1", "n2"]), ("n1", &["n3"]), ("n2", &["n3"])]);
        assert_eq!(one_way(&one), grudge(&[("n3", &["n1", "n2"])]));
    }

    #[test]
    fn one_way_of_a_balanced_grudge_takes_the_first_nodes_side() {
        let even = grudge(&[
            ("n1", &["n2", "n4"]),
            ("n3", &["n2", "n4"]),
            ("n2", &["n1", "n3"]),
            ("n4", &["n1", "n3"]),
        ]);
        let cut = one_way(&even);
        assert_eq!(cut, grudge(&[("n1", &["n2", "n4"]), ("n3", &["n2", "n4"])]));
        // No pair is cut both ways any more.
        for (node, dropped) in &cut.0 {
            for other in dropped {
                assert!(!cut.0.get(other).is_some_and(|d| d.contains(node)));
            }
        }
        assert_eq!(one_way(&Grudge::default()), Grudge::default());
    }

    #[test]
    fn a_swarm_period_limits_slow_to_its_points() {
        let delay = |point: &str| Delay {
            point: point.into(),
            delay_ms: 300,
            percent: 100,
        };
        let step = Step {
            package: PackageKind::Slow,
            index: 0,
            delay: Duration::ZERO,
            action: Action::Slow {
                target: TargetSpec::One,
                delays: vec![delay("before_isr_write"), delay("leader_fetch_response")],
            },
            seed: 12,
        };
        let draw = |points: &[&str]| SwarmDraw {
            aims: Vec::new(),
            period: 3,
            active: vec![PackageKind::Slow],
            calm: false,
            slow_points: points.iter().map(|p| p.to_string()).collect(),
        };
        let points = |step: &Step| match &step.action {
            Action::Slow { delays, .. } => delays.iter().map(|d| d.point.clone()).collect(),
            _ => Vec::new(),
        };
        // The step's own delays that the period allows.
        let kept = swarm_step(
            step.clone(),
            &draw(&["leader_fetch_response", "x"]),
            None,
            SystemTraits::default(),
        );
        assert_eq!(points(&kept), vec!["leader_fetch_response".to_string()]);
        // None allowed: a draw among the period's points, the same for the same seed.
        let period = draw(&["controller_before_state_write"]);
        let drawn = swarm_step(step.clone(), &period, None, SystemTraits::default());
        assert_eq!(
            points(&drawn),
            vec!["controller_before_state_write".to_string()]
        );
        assert_eq!(
            drawn,
            swarm_step(step.clone(), &period, None, SystemTraits::default())
        );
        // Other actions pass unchanged.
        let kill = Step {
            action: Action::Start,
            ..step
        };
        assert_eq!(
            swarm_step(kill.clone(), &period, None, SystemTraits::default()),
            kill
        );
        let owed = Some(AimKind::Flap);
        assert_eq!(
            swarm_step(kill.clone(), &period, owed, SystemTraits::default()),
            kill
        );
    }

    #[test]
    fn a_swarm_run_redraws_strikes_of_kinds_it_does_not_draw() {
        let strike = |aim: Aim, seed: u64| Step {
            package: PackageKind::Aimed,
            index: 0,
            delay: Duration::ZERO,
            action: Action::Aim(aim),
            seed,
        };
        let draw = |aims: Vec<AimKind>| SwarmDraw {
            period: 1,
            active: vec![PackageKind::Aimed],
            calm: false,
            slow_points: Vec::new(),
            aims,
        };
        let kind = |step: &Step| match &step.action {
            Action::Aim(aim) => Some(aim.kind()),
            _ => None,
        };
        let cut = Aim::ControllerCut {
            request: CutRequest::TransferLeader,
            request_after_ms: 0,
            gated: true,
        };
        let only_moves = draw(vec![AimKind::LagMove, AimKind::Flap]);
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..64 {
            let step = strike(cut.clone(), seed);
            let redrawn = swarm_step(step.clone(), &only_moves, None, SystemTraits::default());
            let redrawn_kind = kind(&redrawn).expect("a kind");
            assert!(only_moves.aims.contains(&redrawn_kind), "{redrawn:?}");
            assert_eq!(
                redrawn,
                swarm_step(step, &only_moves, None, SystemTraits::default()),
                "from the step's seed"
            );
            seen.insert(redrawn_kind);
        }
        assert_eq!(seen.len(), 2, "both allowed kinds come up: {seen:?}");
        // A strike of an allowed kind and a run without a draw pass unchanged; a strand
        // in a run that draws none is drawn again.
        let allowed = strike(cut.clone(), 3);
        let with_cuts = draw(vec![AimKind::ControllerCut]);
        assert_eq!(
            swarm_step(allowed.clone(), &with_cuts, None, SystemTraits::default()),
            allowed
        );
        let strand = strike(Aim::Strand { alone_ms: 1_000 }, 3);
        let unstranded = swarm_step(strand.clone(), &only_moves, None, SystemTraits::default());
        assert!(kind(&unstranded).is_some_and(|k| only_moves.aims.contains(&k)));
        assert_eq!(
            swarm_step(
                allowed.clone(),
                &draw(Vec::new()),
                None,
                SystemTraits::default()
            ),
            allowed
        );
        // A kind still owed a strike wins over the step's own and the run's shares.
        for owed in AimKind::ALL {
            for seed in 0..16 {
                let step = swarm_step(
                    strike(cut.clone(), seed),
                    &only_moves,
                    Some(owed),
                    SystemTraits::default(),
                );
                assert_eq!(kind(&step), Some(owed), "{step:?}");
            }
        }
        assert_eq!(
            swarm_step(
                allowed.clone(),
                &only_moves,
                Some(AimKind::ControllerCut),
                SystemTraits::default()
            ),
            allowed
        );
    }

    #[test]
    fn a_kind_whose_owed_strike_found_nothing_is_owed_once_more_after_the_others() {
        let enabled: BTreeSet<PackageKind> = [PackageKind::Aimed, PackageKind::Kill].into();
        let seed = (0..1_000u64)
            .find(|seed| crate::swarm::run_aims(*seed, false).len() >= 3)
            .expect("a seed with three kinds");
        let system = SystemTraits::default();
        let swarm = Swarm::new(seed, Duration::from_secs(10), &enabled, system);
        let order = crate::swarm::aim_order(seed, &crate::swarm::run_aims(seed, false));
        let first = swarm.take_owed().expect("a first kind");
        assert_eq!(first, order[0]);
        swarm.owe_again(first);
        swarm.owe_again(first);
        let mut rest = Vec::new();
        while let Some(kind) = swarm.take_owed() {
            rest.push(kind);
        }
        let mut expected = order[1..].to_vec();
        expected.push(first);
        assert_eq!(
            rest, expected,
            "owed again once, after the kinds still owed"
        );
        swarm.owe_again(first);
        assert_eq!(swarm.take_owed(), None, "once per kind and run");
        swarm.owe_again(order[1]);
        assert_eq!(swarm.take_owed(), Some(order[1]));
        // A run without the aimed package owes nothing.
        let without = Swarm::new(
            seed,
            Duration::from_secs(10),
            &[PackageKind::Kill].into(),
            system,
        );
        assert_eq!(without.take_owed(), None);
    }

    #[test]
    fn a_strand_takes_an_even_share_of_a_run_that_draws_it() {
        let mut rng = Rng::new(21);
        let kinds = [AimKind::Flap, AimKind::Strand, AimKind::LagMove];
        let mut strands = 0u32;
        for _ in 0..3_000 {
            let aim = Aim::draw_among(&mut rng, &kinds, SystemTraits::default());
            assert!(kinds.contains(&aim.kind()), "{aim:?}");
            strands += u32::from(aim.kind() == AimKind::Strand);
        }
        assert!((900..1_100).contains(&strands), "{strands} of 3000");
        let alone = Aim::draw_among(&mut rng, &[AimKind::Strand], SystemTraits::default());
        assert_eq!(alone.kind(), AimKind::Strand);
        for _ in 0..500 {
            assert_ne!(
                Aim::draw_among(&mut rng, &[], SystemTraits::default()).kind(),
                AimKind::Strand
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn join_all_runs_the_futures_at_once_and_keeps_their_order() {
        let began = tokio::time::Instant::now();
        let futures: Vec<BoxFuture<'_, u64>> = [300u64, 100, 200]
            .into_iter()
            .map(|ms| -> BoxFuture<'_, u64> {
                Box::pin(async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    ms
                })
            })
            .collect();
        assert_eq!(join_all(futures).await, vec![300, 100, 200]);
        // Together, not one after another (600 ms).
        assert_eq!(began.elapsed(), Duration::from_millis(300));
        assert!(join_all(Vec::<BoxFuture<'_, u64>>::new()).await.is_empty());
    }

    #[test]
    fn keys_parse_back() {
        assert_eq!(parse_key("t/3"), Some(("t".into(), 3)));
        assert_eq!(parse_key("a/b/0"), Some(("a/b".into(), 0)));
        assert_eq!(parse_key("t"), None);
        assert_eq!(parse_key("t/x"), None);
    }
}
