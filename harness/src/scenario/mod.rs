//! Scenario files (`scenarios/*.toml`): a bug report turned into a deterministic script
//! of faults, writes and waits, with what the checkers must say when the bug switch is
//! on and when it is off. [`Scenario::load`] parses and validates a file completely, so
//! that a mistake (an unknown step or node, a bad predicate) is refused with its line
//! before any node exists; [`run`] plays one against a real cluster.
//!
//! The format, by example (the README has a worked one):
//!
//! ```toml
//! title = "KAFKA-7128: ..."
//! jira = "https://issues.apache.org/jira/browse/KAFKA-7128"
//! summary = """What goes wrong, in a paragraph."""
//!
//! [cluster]
//! nodes = 4                               # n1..n4, broker ids 1..4
//! voters = ["n4"]                         # the metadata quorum (default: the first three)
//! start = [["n4"], ["n1", "n2", "n3"]]    # optional start order, group by group
//! settings = { min_insync_replicas = 1, "metadata.session_timeout_ms" = 3000 }
//! [cluster.node.n4]                       # settings of one node
//! settings = { "controller.eligible" = false }
//!
//! [topic]
//! name = "p"
//! assignment = [["n1", "n2", "n3"]]       # replicas of each partition, preferred first
//!
//! [switch]                                # what `--buggy` turns on
//! bugs = ["KAFKA-7128"]
//! settings = {}                           # broker settings of the buggy mode
//!
//! [expect]
//! buggy = ["lost-write"]                  # anomalies the checkers must find
//! fixed = "valid"
//!
//! [[step]]
//! do = "wait-until"
//! until = "leader(p/0) == n1 and isr(p/0) == {n1, n2, n3}"
//! timeout = "20s"
//! ```
//!
//! Steps (`do = ...`): `produce`, `read`, `kill`, `start`, `pause`, `resume`,
//! `partition`, `heal`, `failpoint`, `release`, `transfer-leader`, `elect-preferred`,
//! `reassign`, `wait-until`, `sleep`, `await`, `workload`, `strike`, `stop-strike`;
//! [`StepKind`] documents each one's keys.
//!
//! A scenario lifted from a random run (`harness shrink`) ends as the run did, with an
//! `[end]` table: `restart = true` (the end undoes every fault, killed nodes restarted,
//! and waits for the cluster to serve again) and `one_down = true` (the one-down probe
//! after the availability probe); its `[expect]` may say `waive_durability = true` (the
//! durability anomalies do not count when the broker settings give up acknowledged
//! writes by design, as in a test).

pub mod predicate;
pub mod run;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nemesis::aimed::Aim;
use nemesis::{AdminAction, Grudge, Ports, TargetSpec};
use serde::Deserialize;
use toml::Spanned;
use workloads::{Consistency, WorkloadKind, WorkloadOptions};

use predicate::Predicate;
use spec::duration::parse_duration;

/// Most nodes a scenario may have.
pub const MAX_NODES: usize = 9;

/// A scenario file refused: where and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ScenarioError {
    pub file: String,
    /// 1-based; `None` when the problem is the file as a whole.
    pub line: Option<usize>,
    pub reason: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.file, self.reason),
            None => write!(f, "{}: {}", self.file, self.reason),
        }
    }
}

/// A scenario, validated.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The file's stem (`KAFKA-7128`): what `harness repro` is given.
    pub name: String,
    pub path: PathBuf,
    pub title: String,
    pub jira: Option<String>,
    pub summary: String,
    pub cluster: ClusterDef,
    pub topic: TopicDef,
    pub switch: Switch,
    pub expect: Expectation,
    pub end: EndDef,
    pub steps: Vec<Step>,
}

/// How a play ends beyond the usual (network healed, paused nodes resumed, failpoints
/// released, availability probe, final reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EndDef {
    /// Every fault undone as a test's final heal does (killed nodes restarted,
    /// reassignments restored, the `aimed` package's strike undone), then a wait until
    /// the cluster serves again.
    pub restart: bool,
    /// The one-down probe ([`crate::one_down`]) after the availability probe.
    pub one_down: bool,
}

/// The nodes and how they are configured and started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterDef {
    /// `n1..nN`.
    pub nodes: Vec<String>,
    /// Groups started one after the other, each once all of the previous group are
    /// registered brokers; every node is in exactly one.
    pub start: Vec<Vec<String>>,
    /// `KEY=VALUE` settings of every node.toml (`metadata.voters` included when given).
    pub settings: Vec<String>,
    /// `KEY=VALUE` settings of single nodes.
    pub node_settings: BTreeMap<String, Vec<String>>,
}

/// The scenario's one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicDef {
    pub name: String,
    /// Per partition its replicas (node names), the preferred leader first.
    pub assignment: Vec<Vec<String>>,
}

/// What the buggy mode turns on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Switch {
    pub bugs: Vec<String>,
    pub settings: Vec<String>,
}

/// What the checkers must say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expectation {
    /// With the switch on: the verdict is invalid and each of these anomaly kinds is
    /// among those that count.
    pub buggy: Vec<String>,
    /// How long after the end of the steps a write must succeed (the availability
    /// checker's bound).
    pub availability_bound: Duration,
    /// Whether durability anomalies do not count when the broker settings give up
    /// acknowledged writes by design ([`crate::waiver`]), as in a test run.
    pub waive_durability: bool,
}

/// One step and where it is written.
#[derive(Debug, Clone)]
pub struct Step {
    /// 1-based position among the steps.
    pub number: usize,
    /// Line of its `[[step]]`.
    pub line: usize,
    pub kind: StepKind,
    /// `may_fail = true` on a fault step (kill, start, pause, resume, partition, heal,
    /// failpoint, release; admin steps carry their own): a fault that does not happen
    /// (its node is down, say) is recorded and the steps go on, instead of stopping the
    /// play. Lifted runs mark every fault so: a replay's cluster is not the run's.
    pub may_fail: bool,
}

/// The fault steps that take a `may_fail` key of the step itself ([`Step::may_fail`]).
const MAY_FAIL_STEPS: &[&str] = &[
    "kill",
    "start",
    "pause",
    "resume",
    "partition",
    "heal",
    "failpoint",
    "release",
];

/// How many replicas a produce step waits for (`acks = "all"` or `"1"`).
pub use sut::Acks;

/// How a produce step sends its records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sending {
    /// One request after the other, each waiting for its answer.
    OneByOne,
    /// All records in one request (appended together at consecutive offsets).
    Batch,
    /// Every record its own request, all at once.
    Concurrent,
}

/// What a wait-until does when its timeout passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnTimeout {
    /// The scenario stops with an error: what follows would not test what it says.
    Fail,
    /// Recorded, and the steps go on (a wait whose outcome differs between the modes).
    Continue,
}

/// The steps; each is recorded in the history (client ops for produce and read, nemesis
/// ops for the rest).
#[derive(Debug, Clone)]
pub enum StepKind {
    /// `produce`: `partition = "p/0"`, `count` (1), `acks` (`"all"` or `"1"`),
    /// `batch` or `concurrent` (false: one by one), `every` (pause between records),
    /// `to` (a node, instead of the partition's leader), `timeout` ("5s" per request),
    /// `background` (false: the next step starts at once; `await` waits for it).
    Produce {
        partition: u32,
        count: u32,
        acks: Acks,
        sending: Sending,
        every: Option<Duration>,
        to: Option<String>,
        timeout: Duration,
        background: bool,
    },
    /// `read`: `partition`, from offset 0 to the end, from its leader.
    Read { partition: u32 },
    /// `kill`: `nodes` (`"n1"`, `"n1+n3"`, or a role: `leaders`, `controller`,
    /// `meta-leader`), `wipe` (remove its partition data before its next start).
    Kill { target: TargetSpec, wipe: bool },
    /// `start`: `nodes` (`"n1+n3"`).
    Start { nodes: Vec<String> },
    /// `pause`: `nodes` (as `kill`).
    Pause { target: TargetSpec },
    /// `resume`: `nodes`.
    Resume { nodes: Vec<String> },
    /// `partition`: either `isolate` (nodes or a role, cut from all others; `one_way`:
    /// only what they receive) or `drop` (`{n2 = ["n1"]}`: n2 drops what n1 sends it);
    /// `ports` (`"all"`, `"replication"`, `"metadata"`).
    Partition { cut: Cut, ports: Ports },
    /// `heal`: remove every cut.
    Heal,
    /// `failpoint`: `node`, `point`, `action` (`pause`, `return`, `sleep(300)`, ...).
    /// `release`: `node`, `point`.
    Failpoint {
        node: String,
        point: String,
        actions: Option<String>,
    },
    /// `transfer-leader` (`partition`, `to`), `elect-preferred`, `reassign`
    /// (`partition`, `replicas`); `may_fail = true` when the broker may rightly refuse
    /// it (the refusal is recorded and the steps go on).
    Admin {
        request: AdminAction,
        may_fail: bool,
    },
    /// `wait-until`: `until` (a [`predicate`]), `timeout` ("30s"), `on_timeout`
    /// (`"fail"` or `"continue"`), `poll` ("100ms").
    WaitUntil {
        predicate: Predicate,
        timeout: Duration,
        poll: Duration,
        on_timeout: OnTimeout,
    },
    /// `sleep`: `for` ("2s").
    Sleep(Duration),
    /// `await`: until every background produce and the workload have finished.
    Await,
    /// `workload`: the random client load of a test in the background (awaited by
    /// `await` and at the end): `for` (how long), `rate` (500 ops/s), `concurrency` (10),
    /// `seed` (0), `read_fraction` (0.5), `hot_partitions`, `batch_fraction` (0),
    /// `batch_max` (10), `linearizable_reads`. At most one per scenario, and none beside
    /// `produce` steps (their values would collide).
    Workload(WorkloadOptions),
    /// `strike`: one strike of the `aimed` package, its keys those of the history's
    /// `aim` (`aim = "controller-cut"`, `request = "transfer-leader"`, `gated = true`,
    /// ...): it waits for its moment and hits the node holding the role, as in a test.
    /// A strike that finds no target is recorded and the steps go on.
    Strike(Aim),
    /// `stop-strike`: undo what the strikes left (restart, resume, uncut, release).
    StopStrike,
}

/// The cut of a partition step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cut {
    Isolate { target: TargetSpec, one_way: bool },
    Drop(Grudge),
}

impl StepKind {
    /// The word that starts it in the file.
    pub fn name(&self) -> &'static str {
        match self {
            StepKind::Produce { .. } => "produce",
            StepKind::Read { .. } => "read",
            StepKind::Kill { .. } => "kill",
            StepKind::Start { .. } => "start",
            StepKind::Pause { .. } => "pause",
            StepKind::Resume { .. } => "resume",
            StepKind::Partition { .. } => "partition",
            StepKind::Heal => "heal",
            StepKind::Failpoint {
                actions: Some(_), ..
            } => "failpoint",
            StepKind::Failpoint { actions: None, .. } => "release",
            StepKind::Admin { request, .. } => request.f(),
            StepKind::WaitUntil { .. } => "wait-until",
            StepKind::Sleep(_) => "sleep",
            StepKind::Await => "await",
            StepKind::Workload(_) => "workload",
            StepKind::Strike(_) => "strike",
            StepKind::StopStrike => "stop-strike",
        }
    }
}

// ----- the file as written ---------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    title: String,
    #[serde(default)]
    jira: Option<String>,
    summary: String,
    cluster: Spanned<RawCluster>,
    topic: Spanned<RawTopic>,
    #[serde(default)]
    switch: Option<Spanned<RawSwitch>>,
    expect: Spanned<RawExpect>,
    #[serde(default)]
    end: Option<Spanned<RawEnd>>,
    /// Each step's table, deserialized on its own so that an error names its line.
    #[serde(default, rename = "step")]
    steps: Vec<Spanned<toml::Table>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    nodes: usize,
    #[serde(default)]
    voters: Option<Vec<String>>,
    #[serde(default)]
    start: Option<Vec<Vec<String>>>,
    #[serde(default)]
    settings: toml::Table,
    #[serde(default)]
    node: BTreeMap<String, RawNode>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNode {
    #[serde(default)]
    settings: toml::Table,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTopic {
    name: String,
    assignment: Vec<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSwitch {
    #[serde(default)]
    bugs: Vec<String>,
    #[serde(default)]
    settings: toml::Table,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExpect {
    buggy: Vec<String>,
    fixed: String,
    #[serde(default)]
    availability_bound: Option<String>,
    #[serde(default)]
    waive_durability: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEnd {
    #[serde(default)]
    restart: bool,
    #[serde(default)]
    one_down: bool,
}

#[derive(Deserialize)]
#[serde(tag = "do", rename_all = "kebab-case", deny_unknown_fields)]
enum RawStep {
    Produce(ProduceKeys),
    Read {
        partition: String,
    },
    Kill {
        nodes: String,
        #[serde(default)]
        wipe: bool,
    },
    Start {
        nodes: String,
    },
    Pause {
        nodes: String,
    },
    Resume {
        nodes: String,
    },
    Partition {
        #[serde(default)]
        isolate: Option<String>,
        #[serde(default)]
        one_way: bool,
        #[serde(default)]
        drop: Option<BTreeMap<String, Vec<String>>>,
        #[serde(default)]
        ports: Option<String>,
    },
    Heal {},
    Failpoint {
        node: String,
        point: String,
        action: String,
    },
    Release {
        node: String,
        point: String,
    },
    TransferLeader {
        partition: String,
        to: String,
        #[serde(default)]
        may_fail: bool,
    },
    ElectPreferred {
        #[serde(default)]
        may_fail: bool,
    },
    Reassign {
        partition: String,
        replicas: Vec<String>,
        #[serde(default)]
        may_fail: bool,
    },
    WaitUntil {
        until: String,
        timeout: String,
        #[serde(default)]
        on_timeout: Option<String>,
        #[serde(default)]
        poll: Option<String>,
    },
    Sleep {
        #[serde(rename = "for")]
        duration: String,
    },
    Await {},
    Workload(WorkloadKeys),
    StopStrike {},
}

// ----- loading -----------------------------------------------------------------------

/// Where scenarios live: `scenarios/` of the workspace this harness was built from.
pub fn default_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(|root| root.join("scenarios"))
        .unwrap_or_else(|| PathBuf::from("scenarios"))
}

/// Every `*.toml` of `dir`, loaded, in name order; the first refused file is the error.
pub fn load_all(dir: &Path) -> Result<Vec<Scenario>, ScenarioError> {
    let refuse = |reason: String| ScenarioError {
        file: dir.display().to_string(),
        line: None,
        reason,
    };
    let entries = std::fs::read_dir(dir).map_err(|e| refuse(format!("cannot list: {e}")))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
        .collect();
    paths.sort();
    if paths.is_empty() {
        return Err(refuse("no scenario files (*.toml)".into()));
    }
    paths.iter().map(|path| Scenario::load(path)).collect()
}

impl Scenario {
    /// Reads and validates one file.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|e| ScenarioError {
            file: path.display().to_string(),
            line: None,
            reason: format!("cannot read: {e}"),
        })?;
        Scenario::parse(path, &text)
    }

    /// Parses and validates `text` (the contents of `path`).
    pub fn parse(path: &Path, text: &str) -> Result<Scenario, ScenarioError> {
        let file = path.display().to_string();
        let at = |span: std::ops::Range<usize>, reason: String| ScenarioError {
            file: file.clone(),
            line: Some(line_of(text, span.start)),
            reason,
        };
        let raw: RawScenario = toml::from_str(text).map_err(|e| ScenarioError {
            file: file.clone(),
            line: e.span().map(|span| line_of(text, span.start)),
            reason: e.message().trim().to_string(),
        })?;
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();

        let cluster_span = raw.cluster.span();
        let cluster = validate_cluster(raw.cluster.into_inner())
            .map_err(|reason| at(cluster_span, format!("[cluster]: {reason}")))?;
        let topic_span = raw.topic.span();
        let topic = validate_topic(raw.topic.into_inner(), &cluster.nodes)
            .map_err(|reason| at(topic_span, format!("[topic]: {reason}")))?;
        let switch = match raw.switch {
            Some(switch) => {
                let span = switch.span();
                validate_switch(switch.into_inner())
                    .map_err(|reason| at(span, format!("[switch]: {reason}")))?
            }
            None => Switch::default(),
        };
        let expect_span = raw.expect.span();
        let expect = validate_expect(raw.expect.into_inner())
            .map_err(|reason| at(expect_span, format!("[expect]: {reason}")))?;
        if raw.steps.is_empty() {
            return Err(ScenarioError {
                file,
                line: None,
                reason: "no steps ([[step]] tables)".into(),
            });
        }
        let end = match raw.end {
            Some(end) => {
                let end = end.into_inner();
                EndDef {
                    restart: end.restart,
                    one_down: end.one_down,
                }
            }
            None => EndDef::default(),
        };
        let mut steps = Vec::new();
        for (i, raw_step) in raw.steps.into_iter().enumerate() {
            let span = raw_step.span();
            let line = line_of(text, span.start);
            let mut table = raw_step.into_inner();
            let what = table
                .get("do")
                .and_then(toml::Value::as_str)
                .unwrap_or("?")
                .to_string();
            let refused =
                |reason: String| at(span.clone(), format!("step {} ({what}): {reason}", i + 1));
            let may_fail = if MAY_FAIL_STEPS.contains(&what.as_str()) {
                match table.remove("may_fail") {
                    None => false,
                    Some(toml::Value::Boolean(b)) => b,
                    Some(other) => {
                        return Err(refused(format!("may_fail = {other}: true or false")))
                    }
                }
            } else {
                false
            };
            let kind = if what == "strike" {
                // The rest of the table is the aim itself, as the history records it.
                table.remove("do");
                let aim = Aim::deserialize(toml::Value::Table(table))
                    .map_err(|e| refused(e.message().trim().to_string()))?;
                StepKind::Strike(aim)
            } else {
                let parsed = RawStep::deserialize(toml::Value::Table(table))
                    .map_err(|e| refused(e.message().trim().to_string()))?;
                validate_step(parsed, &cluster, &topic).map_err(|(what, reason)| {
                    at(span.clone(), format!("step {} ({what}): {reason}", i + 1))
                })?
            };
            steps.push(Step {
                number: i + 1,
                line,
                kind,
                may_fail,
            });
        }
        validate_load(&steps).map_err(|(step, reason)| ScenarioError {
            file: file.clone(),
            line: Some(step.line),
            reason: format!("step {} ({}): {reason}", step.number, step.kind.name()),
        })?;
        Ok(Scenario {
            name,
            path: path.to_path_buf(),
            title: raw.title,
            jira: raw.jira,
            summary: raw.summary,
            cluster,
            topic,
            switch,
            expect,
            end,
            steps,
        })
    }
}

/// The 1-based line of byte `offset` of `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset)
        .map_or(1, |before| before.matches('\n').count() + 1)
}

// ----- validation --------------------------------------------------------------------

fn node_names(count: usize) -> Vec<String> {
    (1..=count).map(|i| format!("n{i}")).collect()
}

fn known_node(node: &str, nodes: &[String]) -> Result<(), String> {
    if nodes.iter().any(|n| n == node) {
        Ok(())
    } else {
        Err(format!(
            "unknown node {node:?} (the cluster has {})",
            nodes.join(", ")
        ))
    }
}

/// A settings table as `KEY=VALUE` lines (nested tables give dotted keys), each checked
/// the way `--broker-config` is.
fn flatten_settings(table: &toml::Table) -> Result<Vec<String>, String> {
    fn walk(prefix: &str, table: &toml::Table, out: &mut Vec<String>) {
        for (key, value) in table {
            let key = if prefix.is_empty() {
                key.clone()
            } else {
                format!("{prefix}.{key}")
            };
            match value {
                toml::Value::Table(inner) => walk(&key, inner, out),
                other => out.push(format!("{key}={other}")),
            }
        }
    }
    let mut settings = Vec::new();
    walk("", table, &mut settings);
    crate::system::check_settings(&settings).map_err(|e| e.to_string())?;
    Ok(settings)
}

fn validate_cluster(raw: RawCluster) -> Result<ClusterDef, String> {
    if raw.nodes == 0 || raw.nodes > MAX_NODES {
        return Err(format!(
            "nodes = {}: a scenario has 1 to {MAX_NODES} nodes",
            raw.nodes
        ));
    }
    let nodes = node_names(raw.nodes);
    let mut settings = flatten_settings(&raw.settings)?;
    if let Some(voters) = &raw.voters {
        if voters.is_empty() {
            return Err("voters: at least one".into());
        }
        let mut ids = Vec::new();
        for voter in voters {
            known_node(voter, &nodes).map_err(|e| format!("voters: {e}"))?;
            ids.push(voter.trim_start_matches('n').to_string());
        }
        if settings.iter().any(|s| s.starts_with("metadata.voters=")) {
            return Err("voters given twice (voters and settings)".into());
        }
        settings.push(format!("metadata.voters=[{}]", ids.join(", ")));
    }
    let start = match raw.start {
        None => vec![nodes.clone()],
        Some(groups) => {
            let mut seen = BTreeSet::new();
            for node in groups.iter().flatten() {
                known_node(node, &nodes).map_err(|e| format!("start: {e}"))?;
                if !seen.insert(node.clone()) {
                    return Err(format!("start: {node} is listed twice"));
                }
            }
            if let Some(missing) = nodes.iter().find(|n| !seen.contains(*n)) {
                return Err(format!("start: {missing} is in no group"));
            }
            groups.into_iter().filter(|g| !g.is_empty()).collect()
        }
    };
    let mut node_settings = BTreeMap::new();
    for (node, raw_node) in raw.node {
        known_node(&node, &nodes).map_err(|e| format!("[cluster.node.{node}]: {e}"))?;
        let own = flatten_settings(&raw_node.settings)
            .map_err(|e| format!("[cluster.node.{node}]: {e}"))?;
        node_settings.insert(node, own);
    }
    Ok(ClusterDef {
        nodes,
        start,
        settings,
        node_settings,
    })
}

fn validate_topic(raw: RawTopic, nodes: &[String]) -> Result<TopicDef, String> {
    let name_ok = !raw.name.is_empty()
        && raw
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !name_ok {
        return Err(format!("name {:?}: use letters, digits, . _ -", raw.name));
    }
    if raw.assignment.is_empty() {
        return Err("assignment: at least one partition".into());
    }
    for (partition, replicas) in raw.assignment.iter().enumerate() {
        if replicas.is_empty() {
            return Err(format!("assignment: partition {partition} has no replicas"));
        }
        let mut seen = BTreeSet::new();
        for node in replicas {
            known_node(node, nodes).map_err(|e| format!("assignment: {e}"))?;
            if !seen.insert(node) {
                return Err(format!(
                    "assignment: partition {partition} lists {node} twice"
                ));
            }
        }
    }
    Ok(TopicDef {
        name: raw.name,
        assignment: raw.assignment,
    })
}

fn validate_switch(raw: RawSwitch) -> Result<Switch, String> {
    for bug in &raw.bugs {
        let digits = bug.strip_prefix("KAFKA-").unwrap_or_default();
        if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
            return Err(format!(
                "bugs: {bug:?} is not a switch name like KAFKA-7128"
            ));
        }
    }
    let settings = flatten_settings(&raw.settings)?;
    if raw.bugs.is_empty() && settings.is_empty() {
        return Err("turns nothing on: give bugs or settings".into());
    }
    Ok(Switch {
        bugs: raw.bugs,
        settings,
    })
}

/// Anomaly kinds the checkers and oracles report: the log checker's, the availability
/// checker's, the settle checker's, the one-down probe's, the truncation and
/// ISR-admission oracles'. A checker that says `invalid` without listing an anomaly
/// counts as `not-<checker>` (`not-linearizable`), which an expectation may also name.
pub const ANOMALY_KINDS: &[&str] = &[
    "lost-write",
    "unseen",
    "inconsistent-offsets",
    "duplicate",
    "aborted-read",
    "nonmonotonic-read",
    "poll-skip",
    "stale-read",
    "realtime-order",
    "unavailable-after-heal",
    "roles-not-converged",
    "isr-not-restored",
    "unavailable-with-one-down",
    "truncated-committed",
    "isr-admitted-behind",
];

/// Whether `kind` is one an expectation may name.
pub fn known_anomaly(kind: &str) -> bool {
    ANOMALY_KINDS.contains(&kind)
        || kind.strip_prefix("not-").is_some_and(|checker| {
            !checker.is_empty() && checker.chars().all(|c| c.is_ascii_lowercase() || c == '-')
        })
}

/// The availability bound when a scenario gives none.
pub const DEFAULT_AVAILABILITY_BOUND: Duration = Duration::from_secs(30);

fn validate_expect(raw: RawExpect) -> Result<Expectation, String> {
    if raw.fixed != "valid" {
        return Err(format!(
            "fixed = {:?}: with the switch off the expectation is \"valid\"",
            raw.fixed
        ));
    }
    if raw.buggy.is_empty() {
        return Err("buggy: name the anomalies the bug must produce".into());
    }
    for kind in &raw.buggy {
        if !known_anomaly(kind) {
            return Err(format!(
                "buggy: unknown anomaly {kind:?} (known: {})",
                ANOMALY_KINDS.join(", ")
            ));
        }
    }
    let availability_bound = match raw.availability_bound {
        Some(text) => scenario_duration("availability_bound", &text)?,
        None => DEFAULT_AVAILABILITY_BOUND,
    };
    Ok(Expectation {
        buggy: raw.buggy,
        availability_bound,
        waive_durability: raw.waive_durability,
    })
}

/// The longest duration a scenario key may have.
const MAX_DURATION: Duration = Duration::from_secs(3600);

/// A duration key of a step or of `[expect]`, named `what` in the error: the harness's
/// grammar ([`parse_duration`]), at most an hour.
fn scenario_duration(what: &str, text: &str) -> Result<Duration, String> {
    let duration = parse_duration(text).map_err(|e| format!("{what}: {e}"))?;
    if duration > MAX_DURATION {
        return Err(format!("{what}: {:?}: at most an hour", text.trim()));
    }
    Ok(duration)
}

/// `"p/0"` of the scenario's topic: the partition number.
fn partition_of(text: &str, topic: &TopicDef) -> Result<u32, String> {
    let (name, number) = text.rsplit_once('/').ok_or_else(|| {
        format!(
            "partition {text:?}: write it topic/partition, e.g. \"{}/0\"",
            topic.name
        )
    })?;
    if name != topic.name {
        return Err(format!(
            "partition {text:?}: the scenario's topic is {:?}",
            topic.name
        ));
    }
    let partition: u32 = number
        .parse()
        .map_err(|_| format!("partition {text:?}: {number:?} is not a partition number"))?;
    if partition as usize >= topic.assignment.len() {
        return Err(format!(
            "partition {text:?}: the topic has {} partition(s)",
            topic.assignment.len()
        ));
    }
    Ok(partition)
}

/// A `nodes` value of kill/pause: a node list (`n1+n3`) or a role.
fn target_of(text: &str, nodes: &[String]) -> Result<TargetSpec, String> {
    let spec: TargetSpec = text.parse().map_err(|e| format!("nodes: {e}"))?;
    match &spec {
        TargetSpec::Nodes(list) => {
            for node in list {
                known_node(node, nodes).map_err(|e| format!("nodes: {e}"))?;
            }
        }
        TargetSpec::Leaders | TargetSpec::Controller | TargetSpec::MetaLeader => {}
        other => {
            return Err(format!(
                "nodes = {:?}: a scenario names its nodes (n1+n3) or a role (leaders, controller, meta-leader), not a random choice",
                other.to_string()
            ))
        }
    }
    Ok(spec)
}

/// A `nodes` value of start/resume: node names only.
fn node_list(text: &str, nodes: &[String]) -> Result<Vec<String>, String> {
    let list: Vec<String> = text.split('+').map(|n| n.trim().to_string()).collect();
    for node in &list {
        known_node(node, nodes).map_err(|e| format!("nodes: {e}"))?;
    }
    Ok(list)
}

fn validate_step(
    raw: RawStep,
    cluster: &ClusterDef,
    topic: &TopicDef,
) -> Result<StepKind, (&'static str, String)> {
    let nodes = &cluster.nodes;
    let (what, kind) = match raw {
        RawStep::Produce(keys) => ("produce", produce_step(keys, nodes, topic)),
        RawStep::Read { partition } => ("read", read_step(&partition, topic)),
        RawStep::Kill { nodes: spec, wipe } => ("kill", kill_step(&spec, wipe, nodes)),
        RawStep::Start { nodes: list } => ("start", start_step(&list, nodes)),
        RawStep::Pause { nodes: spec } => ("pause", pause_step(&spec, nodes)),
        RawStep::Resume { nodes: list } => ("resume", resume_step(&list, nodes)),
        RawStep::Partition {
            isolate,
            one_way,
            drop,
            ports,
        } => (
            "partition",
            partition_step(isolate, one_way, drop, ports.as_deref(), nodes),
        ),
        RawStep::Heal {} => ("heal", Ok(StepKind::Heal)),
        RawStep::Failpoint {
            node,
            point,
            action,
        } => ("failpoint", failpoint_step(node, point, action, nodes)),
        RawStep::Release { node, point } => ("release", release_step(node, point, nodes)),
        RawStep::TransferLeader {
            partition,
            to,
            may_fail,
        } => (
            "transfer-leader",
            transfer_leader_step(&partition, to, may_fail, nodes, topic),
        ),
        RawStep::ElectPreferred { may_fail } => (
            "elect-preferred",
            Ok(StepKind::Admin {
                request: AdminAction::ElectPreferred,
                may_fail,
            }),
        ),
        RawStep::Reassign {
            partition,
            replicas,
            may_fail,
        } => (
            "reassign",
            reassign_step(&partition, replicas, may_fail, nodes, topic),
        ),
        RawStep::WaitUntil {
            until,
            timeout,
            on_timeout,
            poll,
        } => (
            "wait-until",
            wait_until_step(
                &until,
                &timeout,
                on_timeout.as_deref(),
                poll.as_deref(),
                nodes,
                topic,
            ),
        ),
        RawStep::Sleep { duration: text } => ("sleep", sleep_step(&text)),
        RawStep::Await {} => ("await", Ok(StepKind::Await)),
        RawStep::Workload(keys) => ("workload", workload_step(keys)),
        RawStep::StopStrike {} => ("stop-strike", Ok(StepKind::StopStrike)),
    };
    kind.map_err(|e| (what, e))
}

/// One workload step at most, and none beside produce steps: the workload's values
/// (from 0 up) and the produce steps' (from 1 up) would collide.
fn validate_load(steps: &[Step]) -> Result<(), (&Step, String)> {
    let workloads: Vec<&Step> = steps
        .iter()
        .filter(|s| matches!(s.kind, StepKind::Workload(_)))
        .collect();
    if let Some(second) = workloads.get(1) {
        return Err((
            second,
            format!(
                "a second workload (the first is step {})",
                workloads[0].number
            ),
        ));
    }
    if let Some(first) = workloads.first() {
        if let Some(produce) = steps
            .iter()
            .find(|s| matches!(s.kind, StepKind::Produce { .. }))
        {
            return Err((
                first,
                format!(
                    "a workload beside produce steps (step {}): their values would collide",
                    produce.number
                ),
            ));
        }
    }
    Ok(())
}

/// The keys of a workload step, as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkloadKeys {
    #[serde(rename = "for")]
    duration: String,
    #[serde(default)]
    rate: Option<f64>,
    #[serde(default)]
    concurrency: Option<usize>,
    /// An integer, or a string of one (a seed above what TOML integers hold).
    #[serde(default)]
    seed: Option<toml::Value>,
    #[serde(default)]
    read_fraction: Option<f64>,
    #[serde(default)]
    hot_partitions: bool,
    #[serde(default)]
    batch_fraction: Option<f64>,
    #[serde(default)]
    batch_max: Option<u32>,
    #[serde(default)]
    linearizable_reads: bool,
}

fn workload_step(keys: WorkloadKeys) -> Result<StepKind, String> {
    let seed = match &keys.seed {
        None => 0,
        Some(toml::Value::Integer(n)) => {
            u64::try_from(*n).map_err(|_| format!("seed = {n}: not negative"))?
        }
        Some(toml::Value::String(text)) => text
            .trim()
            .parse()
            .map_err(|_| format!("seed = {text:?}: not a number"))?,
        Some(other) => return Err(format!("seed = {other}: an integer")),
    };
    let mut options = WorkloadOptions::new(WorkloadKind::Log, seed);
    options.time_limit = scenario_duration("for", &keys.duration)?;
    if options.time_limit.is_zero() {
        return Err("for: must be above zero".into());
    }
    if let Some(rate) = keys.rate {
        options.rate = rate;
    }
    if let Some(concurrency) = keys.concurrency {
        if concurrency == 0 || concurrency > 1000 {
            return Err(format!("concurrency = {concurrency}: 1 to 1000"));
        }
        options.concurrency = concurrency;
    }
    if let Some(fraction) = keys.read_fraction {
        options.read_fraction = fraction;
    }
    options.hot_partitions = keys.hot_partitions;
    if let Some(fraction) = keys.batch_fraction {
        options.batch_fraction = fraction;
    }
    if let Some(max) = keys.batch_max {
        options.batch_max = max;
    }
    if keys.linearizable_reads {
        options.read_consistency = Consistency::Linearizable;
    }
    // The generator's own checks (rate, fractions, batch sizes).
    workloads::generator::Generator::new(options.generator_options(1))
        .map_err(|e| e.to_string())?;
    Ok(StepKind::Workload(options))
}

/// The keys of a produce step, as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProduceKeys {
    partition: String,
    #[serde(default)]
    count: Option<u32>,
    #[serde(default)]
    acks: Option<String>,
    #[serde(default)]
    batch: bool,
    #[serde(default)]
    concurrent: bool,
    #[serde(default)]
    every: Option<String>,
    #[serde(default)]
    to: Option<String>,
    #[serde(default)]
    timeout: Option<String>,
    #[serde(default)]
    background: bool,
}

fn produce_step(keys: ProduceKeys, nodes: &[String], topic: &TopicDef) -> Result<StepKind, String> {
    let partition = partition_of(&keys.partition, topic)?;
    let count = keys.count.unwrap_or(1);
    if count == 0 || count > 100_000 {
        return Err(format!("count = {count}: 1 to 100000"));
    }
    let acks = match keys.acks.as_deref().unwrap_or("all") {
        "all" | "-1" => Acks::All,
        "1" => Acks::Leader,
        other => return Err(format!("acks = {other:?}: \"all\" or \"1\"")),
    };
    let sending = match (keys.batch, keys.concurrent) {
        (false, false) => Sending::OneByOne,
        (true, false) => Sending::Batch,
        (false, true) => Sending::Concurrent,
        (true, true) => return Err("batch and concurrent: choose one".into()),
    };
    let every = keys
        .every
        .map(|e| scenario_duration("every", &e))
        .transpose()?;
    if every.is_some() && sending != Sending::OneByOne {
        return Err("every: only for records sent one by one".into());
    }
    let timeout = match keys.timeout {
        Some(t) => scenario_duration("timeout", &t)?,
        None => Duration::from_secs(5),
    };
    if timeout.is_zero() {
        return Err("timeout: must be above zero".into());
    }
    if let Some(node) = &keys.to {
        known_node(node, nodes).map_err(|e| format!("to: {e}"))?;
    }
    Ok(StepKind::Produce {
        partition,
        count,
        acks,
        sending,
        every,
        to: keys.to,
        timeout,
        background: keys.background,
    })
}

fn read_step(partition: &str, topic: &TopicDef) -> Result<StepKind, String> {
    partition_of(partition, topic).map(|partition| StepKind::Read { partition })
}

fn kill_step(spec: &str, wipe: bool, nodes: &[String]) -> Result<StepKind, String> {
    target_of(spec, nodes).map(|target| StepKind::Kill { target, wipe })
}

fn start_step(list: &str, nodes: &[String]) -> Result<StepKind, String> {
    node_list(list, nodes).map(|nodes| StepKind::Start { nodes })
}

fn pause_step(spec: &str, nodes: &[String]) -> Result<StepKind, String> {
    target_of(spec, nodes).map(|target| StepKind::Pause { target })
}

fn resume_step(list: &str, nodes: &[String]) -> Result<StepKind, String> {
    node_list(list, nodes).map(|nodes| StepKind::Resume { nodes })
}

fn partition_step(
    isolate: Option<String>,
    one_way: bool,
    drop: Option<BTreeMap<String, Vec<String>>>,
    ports: Option<&str>,
    nodes: &[String],
) -> Result<StepKind, String> {
    let ports = match ports.unwrap_or("all") {
        "all" => Ports::All,
        "replication" => Ports::Replication,
        "metadata" => Ports::Metadata,
        other => {
            return Err(format!(
                "ports = {other:?}: \"all\", \"replication\" or \"metadata\""
            ))
        }
    };
    let cut = match (isolate, drop) {
        (Some(spec), None) => Cut::Isolate {
            target: target_of(&spec, nodes).map_err(|e| e.replacen("nodes", "isolate", 1))?,
            one_way,
        },
        (None, Some(drops)) => {
            if one_way {
                return Err("one_way: only with isolate (drop is one way already)".into());
            }
            Cut::Drop(drop_grudge(&drops, nodes)?)
        }
        _ => return Err("give either isolate or drop".into()),
    };
    Ok(StepKind::Partition { cut, ports })
}

/// The grudge of a partition step's `drop` (receiver → the senders it drops).
fn drop_grudge(drops: &BTreeMap<String, Vec<String>>, nodes: &[String]) -> Result<Grudge, String> {
    let mut grudge = Grudge::default();
    for (receiver, senders) in drops {
        known_node(receiver, nodes).map_err(|e| format!("drop: {e}"))?;
        for sender in senders {
            known_node(sender, nodes).map_err(|e| format!("drop: {e}"))?;
            if sender == receiver {
                return Err(format!("drop: {receiver} cannot drop itself"));
            }
            grudge.drop_from(receiver, sender);
        }
    }
    if grudge.is_empty() {
        return Err("drop: cuts nothing".into());
    }
    Ok(grudge)
}

fn failpoint_step(
    node: String,
    point: String,
    action: String,
    nodes: &[String],
) -> Result<StepKind, String> {
    failpoint(&node, &point, nodes)?;
    if action.trim().is_empty() {
        return Err("action: empty (pause, return, sleep(300), ...)".into());
    }
    Ok(StepKind::Failpoint {
        node,
        point,
        actions: Some(action),
    })
}

fn release_step(node: String, point: String, nodes: &[String]) -> Result<StepKind, String> {
    failpoint(&node, &point, nodes)?;
    Ok(StepKind::Failpoint {
        node,
        point,
        actions: None,
    })
}

fn transfer_leader_step(
    partition: &str,
    to: String,
    may_fail: bool,
    nodes: &[String],
    topic: &TopicDef,
) -> Result<StepKind, String> {
    let partition = partition_of(partition, topic)?;
    known_node(&to, nodes).map_err(|e| format!("to: {e}"))?;
    Ok(StepKind::Admin {
        request: AdminAction::TransferLeader {
            topic: topic.name.clone(),
            partition,
            to,
        },
        may_fail,
    })
}

fn reassign_step(
    partition: &str,
    replicas: Vec<String>,
    may_fail: bool,
    nodes: &[String],
    topic: &TopicDef,
) -> Result<StepKind, String> {
    let partition = partition_of(partition, topic)?;
    if replicas.is_empty() {
        return Err("replicas: at least one".into());
    }
    for node in &replicas {
        known_node(node, nodes).map_err(|e| format!("replicas: {e}"))?;
    }
    Ok(StepKind::Admin {
        request: AdminAction::Reassign {
            topic: topic.name.clone(),
            partition,
            replicas,
        },
        may_fail,
    })
}

fn wait_until_step(
    until: &str,
    timeout: &str,
    on_timeout: Option<&str>,
    poll: Option<&str>,
    nodes: &[String],
    topic: &TopicDef,
) -> Result<StepKind, String> {
    let predicate = Predicate::parse(until, nodes).map_err(|e| format!("until: {e}"))?;
    for (name, partition) in predicate.partitions() {
        if name != topic.name || partition >= topic.assignment.len() as u64 {
            return Err(format!(
                "until: {name}/{partition} is no partition of this scenario (its topic {:?} has {})",
                topic.name,
                topic.assignment.len()
            ));
        }
    }
    let timeout = scenario_duration("timeout", timeout)?;
    let poll = match poll {
        Some(p) => scenario_duration("poll", p)?,
        None => Duration::from_millis(100),
    };
    if poll.is_zero() {
        return Err("poll: must be above zero".into());
    }
    let on_timeout = match on_timeout.unwrap_or("fail") {
        "fail" => OnTimeout::Fail,
        "continue" => OnTimeout::Continue,
        other => return Err(format!("on_timeout = {other:?}: \"fail\" or \"continue\"")),
    };
    Ok(StepKind::WaitUntil {
        predicate,
        timeout,
        poll,
        on_timeout,
    })
}

fn sleep_step(text: &str) -> Result<StepKind, String> {
    scenario_duration("for", text).map(StepKind::Sleep)
}

fn failpoint(node: &str, point: &str, nodes: &[String]) -> Result<(), String> {
    known_node(node, nodes).map_err(|e| format!("node: {e}"))?;
    let (name, target) = match point.split_once('@') {
        Some((name, target)) => (name, Some(target)),
        None => (point, None),
    };
    let name_ok = !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '_');
    let target_ok = match target {
        None => true,
        Some(t) => !t.is_empty() && t.chars().all(|c| c.is_ascii_digit()),
    };
    if name_ok && target_ok {
        Ok(())
    } else {
        Err(format!(
            "point {point:?}: a failpoint name like controller_before_state_write"
        ))
    }
}
