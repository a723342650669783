//! Lifting a run into a scenario: a `harness test` run's folder (`test.json`,
//! `history.jsonl`, `results.json`) becomes the parts of a scenario file that plays the
//! same test as a script. The cluster, broker settings, bug switches and topic come from
//! `test.json` (the topic's assignment is the broker's round-robin placement of a fresh
//! cluster); the client load is one `workload` step with the run's seed, rate,
//! concurrency, shapes and length; every fault the nemesis recorded is a [`Fault`]: its
//! start and its stop (as what was actually done: the nodes killed, the grudge cut, the
//! failpoints armed, the strike's aim), each at the time it was recorded. The
//! expectation is the failing run's anomaly kinds; the end is a test's (everything
//! healed, the one-down probe), and durability is judged as the test judged it.
//!
//! What is not lifted: the final heal and the one-down probe's faults (the scenario's
//! end does those), and faults that did nothing (`no-target`); [`Lifted::skipped`] lists
//! them. Packages ran concurrently in the run, while a scenario plays its steps one
//! after the other: a step whose time came while an earlier one was still acting (a
//! strike that waits for its moment) starts when that one is done.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use checkers::Results;
use history::{Op, Process};
use serde_json::Value;
use spec::{Plan, RunFolder, TestRecord, WorkloadPlan};
use workloads::WorkloadKind;

/// A run that cannot be lifted, and why.
#[derive(Debug, thiserror::Error)]
pub enum LiftError {
    #[error("{0}: not a run folder (no test.json)")]
    NotARun(PathBuf),
    #[error("{path}: {reason}")]
    Unreadable { path: PathBuf, reason: String },
    #[error("{0}")]
    Unsupported(String),
    #[error("{0}: the run was not found invalid (nothing to shrink); its results say {1}")]
    NotFailing(PathBuf, String),
}

/// One step of the scenario to be, as a TOML table, with when the run did it.
#[derive(Debug, Clone, PartialEq)]
pub struct TimedStep {
    /// When the run began it (since the history's start).
    pub at: Duration,
    /// When it was done.
    pub done: Duration,
    /// The step's keys, `do` first.
    pub keys: Vec<(String, toml::Value)>,
    /// A line saying what it does.
    pub what: String,
}

/// One fault of the run: a package's start and (when the run recorded one before its
/// final heal) its stop, or an instantaneous admin fault. The unit the shrinker keeps or
/// drops.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    pub steps: Vec<TimedStep>,
    /// A line saying what it was (`kill n2 … start n2`).
    pub what: String,
}

/// A run lifted into a scenario's parts.
#[derive(Debug, Clone)]
pub struct Lifted {
    pub run: PathBuf,
    pub nodes: usize,
    pub settings: Vec<String>,
    pub bugs: Vec<String>,
    pub topic: String,
    pub assignment: Vec<Vec<String>>,
    /// The run's load as a `workload` step (at time 0).
    pub workload: TimedStep,
    pub faults: Vec<Fault>,
    /// The anomaly kinds the run failed with.
    pub kinds: BTreeMap<String, u64>,
    /// Nemesis operations not lifted, each with why.
    pub skipped: Vec<String>,
}

/// The stop `f`s of the fault packages.
const STOPS: &[&str] = &[
    "start",
    "resume",
    "stop-partition",
    "stop-partition-ports",
    "stop-slow",
    "stop-aimed",
];

/// Reads and lifts the run in `dir`.
pub fn lift(dir: &Path) -> Result<Lifted, LiftError> {
    let folder = RunFolder::open(dir);
    let unreadable = |path: PathBuf, reason: String| LiftError::Unreadable { path, reason };
    let record: TestRecord = folder
        .read_test()
        .map_err(|e| unreadable(folder.path(spec::folder::TEST), e.to_string()))?
        .ok_or_else(|| LiftError::NotARun(dir.to_path_buf()))?;
    let results: Results = folder
        .read_results()
        .map_err(|e| unreadable(folder.path(spec::folder::RESULTS), e.to_string()))?
        .ok_or_else(|| {
            unreadable(
                folder.path(spec::folder::RESULTS),
                "missing: the run was never checked (`harness check` it first)".into(),
            )
        })?;
    let (history, _) = history::read_history(&folder.history(), Some(history::Format::Jsonl))
        .map_err(|e| unreadable(folder.history(), e.to_string()))?;
    lift_parts(dir, &record, &results, &history.ops)
}

/// Lifts a run from its parts (what [`lift`] read).
pub fn lift_parts(
    dir: &Path,
    record: &TestRecord,
    results: &Results,
    ops: &[Op],
) -> Result<Lifted, LiftError> {
    let plan = match &record.spec.plan {
        Plan::Workload(plan) => plan,
        Plan::Scenario(scenario) => {
            return Err(LiftError::Unsupported(format!(
                "{} played the scenario {}: it is a scenario already",
                dir.display(),
                scenario.scenario
            )))
        }
    };
    if plan.workload != WorkloadKind::Log {
        return Err(LiftError::Unsupported(format!(
            "{}: a {} workload run; scenarios play the log workload only",
            dir.display(),
            plan.workload.name()
        )));
    }
    let kinds = results.failure_kinds();
    if kinds.is_empty() {
        return Err(LiftError::NotFailing(
            dir.to_path_buf(),
            format!("{:?}", results.verdict.as_str()),
        ));
    }
    let nodes: Vec<String> = (1..=plan.nodes).map(|i| format!("n{i}")).collect();
    let initial_rf = if plan.shape.grow_after.is_some() {
        1
    } else {
        plan.replication_factor
    };
    let assignment = round_robin(&nodes, plan.partitions, initial_rf);
    let (faults, skipped) = lift_faults(ops, &record.topic);
    Ok(Lifted {
        run: dir.to_path_buf(),
        nodes: nodes.len(),
        settings: record.spec.brokers.config.clone(),
        bugs: record.spec.brokers.bugs.clone(),
        topic: record.topic.clone(),
        assignment,
        workload: workload_step(plan, record.spec.seed),
        faults,
        kinds,
        skipped,
    })
}

/// The broker's placement of a topic created on a fresh cluster of `nodes`: partition
/// `p`'s replicas are the `rf` nodes from `p` on, round the ring.
pub fn round_robin(nodes: &[String], partitions: u32, rf: u32) -> Vec<Vec<String>> {
    let n = nodes.len().max(1);
    (0..partitions as usize)
        .map(|p| {
            (0..(rf as usize).min(n))
                .filter_map(|j| nodes.get((p + j) % n).cloned())
                .collect()
        })
        .collect()
}

fn workload_step(plan: &WorkloadPlan, seed: u64) -> TimedStep {
    let mut keys = vec![
        key("do", "workload"),
        key("for", format!("{}ms", plan.time_limit.as_millis())),
        ("rate".into(), toml::Value::Float(plan.rate)),
        ("concurrency".into(), int(plan.concurrency as u64)),
        ("seed".into(), int(seed)),
    ];
    if plan.shape.hot_partitions {
        keys.push(("hot_partitions".into(), toml::Value::Boolean(true)));
    }
    if plan.shape.batch_fraction > 0.0 {
        keys.push((
            "batch_fraction".into(),
            toml::Value::Float(plan.shape.batch_fraction),
        ));
        keys.push(("batch_max".into(), int(u64::from(plan.shape.batch_max))));
    }
    if plan.shape.linearizable_reads {
        keys.push(("linearizable_reads".into(), toml::Value::Boolean(true)));
    }
    TimedStep {
        at: Duration::ZERO,
        done: Duration::ZERO,
        keys,
        what: format!(
            "the run's clients: {} workers at {} ops/s for {:.0} s",
            plan.concurrency,
            plan.rate,
            plan.time_limit.as_secs_f64()
        ),
    }
}

/// A nemesis entry paired with the entry that completed it.
struct Entry<'a> {
    invoke: &'a Op,
    done: Option<&'a Op>,
}

impl Entry<'_> {
    /// The completion's value (what was done), else the invocation's.
    fn value(&self) -> &Value {
        self.done.map_or(&self.invoke.value, |done| &done.value)
    }

    fn package(&self) -> Option<&str> {
        self.value().get("package").and_then(Value::as_str)
    }

    fn error(&self) -> Option<String> {
        self.done
            .and_then(|done| done.error.as_ref())
            .map(|e| match e {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            })
    }

    fn at(&self) -> Duration {
        Duration::from_nanos(self.invoke.time)
    }

    fn finished(&self) -> Duration {
        Duration::from_nanos(self.done.map_or(self.invoke.time, |done| done.time))
    }
}

/// The nemesis's entries paired: an entry completes the open one of its `f` and `key`,
/// else opens one. The key (a partition, `jepsen/0`) tells apart the operations of one
/// `f` that run side by side: the grows of several partitions are invoked together.
fn entries(ops: &[Op]) -> Vec<Entry<'_>> {
    let mut paired: Vec<Entry<'_>> = Vec::new();
    let mut open: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for op in ops.iter().filter(|op| op.process == Process::Nemesis) {
        let key = op.value.get("key").and_then(Value::as_str).unwrap_or("");
        let slot = (op.f.as_str(), key);
        match open.remove(&slot) {
            Some(at) if op.kind != history::OpType::Invoke => paired[at].done = Some(op),
            // An invocation while one of its f is open: the open one never ended.
            _ => {
                open.insert(slot, paired.len());
                paired.push(Entry {
                    invoke: op,
                    done: None,
                });
            }
        }
    }
    paired
}

/// The run's faults, and what was not lifted.
fn lift_faults(ops: &[Op], topic: &str) -> (Vec<Fault>, Vec<String>) {
    let mut faults: Vec<Fault> = Vec::new();
    let mut skipped = Vec::new();
    // Per package, the fault whose stop is still to come.
    let mut open: BTreeMap<String, usize> = BTreeMap::new();
    for entry in entries(ops) {
        let f = entry.invoke.f.as_str();
        let value = entry.value();
        if value.get("final").and_then(Value::as_bool) == Some(true) {
            continue; // the final heal: the scenario's end does it
        }
        if value.get("phase").is_some() {
            continue; // the one-down probe: the scenario's end does it
        }
        if let Some(error) = entry.error() {
            if error.starts_with("no-target") {
                skipped.push(format!("{f} at {:.1} s: {error}", entry.at().as_secs_f64()));
                continue;
            }
        }
        let steps = match steps_of(&entry, topic) {
            Ok(steps) => steps,
            Err(why) => {
                skipped.push(format!("{f} at {:.1} s: {why}", entry.at().as_secs_f64()));
                continue;
            }
        };
        if steps.is_empty() {
            continue;
        }
        let package = entry.package().unwrap_or(f).to_string();
        let what = steps
            .iter()
            .map(|s| s.what.clone())
            .collect::<Vec<_>>()
            .join("; ");
        if STOPS.contains(&f) {
            match open.remove(&package) {
                Some(at) => {
                    let fault = &mut faults[at];
                    fault.what = format!("{} … {what}", fault.what);
                    fault.steps.extend(steps);
                }
                None => faults.push(Fault { steps, what }),
            }
        } else {
            let has_stop = !matches!(
                f,
                "transfer-leaders" | "elect-preferred" | "reassign" | "grow-replication"
            );
            if has_stop {
                open.insert(package, faults.len());
            }
            faults.push(Fault { steps, what });
        }
    }
    (faults, skipped)
}

/// The scenario steps that do what `entry` did; an error says why it cannot be lifted.
fn steps_of(entry: &Entry<'_>, topic: &str) -> Result<Vec<TimedStep>, String> {
    let value = entry.value();
    let step = |keys: Vec<(String, toml::Value)>, what: String| TimedStep {
        at: entry.at(),
        done: entry.finished(),
        keys,
        what,
    };
    let nodes = || -> Vec<String> { strings(value.get("nodes")) };
    let f = entry.invoke.f.as_str();
    Ok(match f {
        "kill" | "pause" | "start" | "resume" => {
            let nodes = nodes();
            if nodes.is_empty() {
                return Ok(Vec::new());
            }
            let mut keys = vec![key("do", f), key("nodes", nodes.join("+")), may_fail()];
            if f == "kill" && value.get("wipe").and_then(Value::as_bool) == Some(true) {
                keys.push(("wipe".into(), toml::Value::Boolean(true)));
            }
            vec![step(keys, format!("{f} {}", nodes.join("+")))]
        }
        "start-partition" | "start-partition-ports" => {
            let grudge = value
                .get("grudge")
                .and_then(Value::as_object)
                .ok_or("no grudge recorded")?;
            let mut drop = toml::Table::new();
            for (node, from) in grudge {
                let from = strings(Some(from));
                if !from.is_empty() {
                    drop.insert(
                        node.clone(),
                        toml::Value::Array(from.into_iter().map(toml::Value::String).collect()),
                    );
                }
            }
            if drop.is_empty() {
                return Ok(Vec::new());
            }
            let ports = value.get("ports").and_then(Value::as_str).unwrap_or("all");
            let what = format!("cut ({ports}) {}", toml::Value::Table(drop.clone()));
            vec![step(
                vec![
                    key("do", "partition"),
                    ("drop".into(), toml::Value::Table(drop)),
                    key("ports", ports),
                    may_fail(),
                ],
                what,
            )]
        }
        "stop-partition" | "stop-partition-ports" => {
            vec![step(vec![key("do", "heal"), may_fail()], "heal".into())]
        }
        "transfer-leaders" => value
            .get("transfers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|t| {
                let key_text = t.get("key")?.as_str()?;
                let to = t.get("to")?.as_str()?;
                Some(step(
                    vec![
                        key("do", "transfer-leader"),
                        key("partition", key_text),
                        key("to", to),
                        may_fail(),
                    ],
                    format!("move {key_text} to {to}"),
                ))
            })
            .collect(),
        "elect-preferred" => vec![step(
            vec![key("do", "elect-preferred"), may_fail()],
            "preferred-leader election".into(),
        )],
        "reassign" | "grow-replication" => {
            let key_text = value
                .get("key")
                .and_then(Value::as_str)
                .ok_or("no key recorded")?;
            let to = value.get("to").or_else(|| value.get("restore"));
            let replicas = strings(to);
            if replicas.is_empty() {
                return Err("no replicas recorded".into());
            }
            vec![step(
                vec![
                    key("do", "reassign"),
                    key("partition", key_text),
                    (
                        "replicas".into(),
                        toml::Value::Array(
                            replicas.iter().cloned().map(toml::Value::String).collect(),
                        ),
                    ),
                    may_fail(),
                ],
                format!("reassign {key_text} to {}", replicas.join(", ")),
            )]
        }
        "start-slow" => value
            .get("armed")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|armed| {
                let node = armed.get("node")?.as_str()?;
                let point = armed.get("point")?.as_str()?;
                let actions = armed.get("actions")?.as_str()?;
                Some(step(
                    vec![
                        key("do", "failpoint"),
                        key("node", node),
                        key("point", point),
                        key("action", actions),
                        may_fail(),
                    ],
                    format!("delay {point} on {node} ({actions})"),
                ))
            })
            .collect(),
        "stop-slow" => value
            .get("released")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|released| {
                let node = released.get("node")?.as_str()?;
                let point = released.get("point")?.as_str()?;
                Some(step(
                    vec![
                        key("do", "release"),
                        key("node", node),
                        key("point", point),
                        may_fail(),
                    ],
                    format!("release {point} on {node}"),
                ))
            })
            .collect(),
        "start-aimed" => {
            let aim = entry
                .invoke
                .value
                .get("aim")
                .and_then(Value::as_object)
                .ok_or("no aim recorded")?;
            let mut keys = vec![key("do", "strike")];
            for (name, field) in aim {
                keys.push((name.clone(), toml_of(field)?));
            }
            let name = aim.get("aim").and_then(Value::as_str).unwrap_or("?");
            vec![step(keys, format!("strike: {name}"))]
        }
        "stop-aimed" => vec![step(
            vec![key("do", "stop-strike")],
            "undo the strike".into(),
        )],
        // A swarm period's draw: no fault itself (what it let act is recorded on its own).
        "swarm" => Vec::new(),
        other => return Err(format!("no scenario step for {other:?} (topic {topic})")),
    })
}

/// Every lifted fault may fail: the replay's cluster is not the run's.
fn may_fail() -> (String, toml::Value) {
    ("may_fail".into(), toml::Value::Boolean(true))
}

fn key(name: &str, value: impl Into<String>) -> (String, toml::Value) {
    (name.to_string(), toml::Value::String(value.into()))
}

/// An integer as TOML holds it; one above `i64::MAX` as a string of it.
fn int(n: u64) -> toml::Value {
    match i64::try_from(n) {
        Ok(n) => toml::Value::Integer(n),
        Err(_) => toml::Value::String(n.to_string()),
    }
}

fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

/// A JSON value as TOML (which has no null: an error).
fn toml_of(value: &Value) -> Result<toml::Value, String> {
    Ok(match value {
        Value::Null => return Err("a null in the aim".into()),
        Value::Bool(b) => toml::Value::Boolean(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => toml::Value::Integer(i),
            (None, Some(u), _) => int(u),
            (_, _, Some(f)) => toml::Value::Float(f),
            _ => return Err(format!("the number {n}")),
        },
        Value::String(s) => toml::Value::String(s.clone()),
        Value::Array(items) => {
            toml::Value::Array(items.iter().map(toml_of).collect::<Result<_, _>>()?)
        }
        Value::Object(fields) => {
            let mut table = toml::Table::new();
            for (name, field) in fields {
                table.insert(name.clone(), toml_of(field)?);
            }
            toml::Value::Table(table)
        }
    })
}

/// A broker setting's value (a `node.toml` value, as `--broker-config` takes it) as
/// TOML; text that is no TOML value stays a string.
fn setting_value(text: &str) -> toml::Value {
    toml::from_str::<toml::Table>(&format!("v = {text}"))
        .ok()
        .and_then(|mut table| table.remove("v"))
        .unwrap_or_else(|| toml::Value::String(text.to_string()))
}

/// A TOML key, quoted when it is not a bare key.
fn toml_key(name: &str) -> String {
    if !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        name.to_string()
    } else {
        toml::Value::String(name.to_string()).to_string()
    }
}

/// What the file says about where it came from and how well it reproduces.
#[derive(Debug, Clone, Default)]
pub struct Provenance {
    /// Lines for the summary (the shrink's figures).
    pub lines: Vec<String>,
}

impl Lifted {
    /// When the last of the faults at `keep` was done (zero for none).
    pub fn last_done(&self, keep: &[usize]) -> Duration {
        keep.iter()
            .filter_map(|&i| self.faults.get(i))
            .flat_map(|f| &f.steps)
            .map(|s| s.done)
            .max()
            .unwrap_or(Duration::ZERO)
    }

    /// The workload's length as lifted.
    pub fn workload_for(&self) -> Option<Duration> {
        self.workload
            .keys
            .iter()
            .find(|(name, _)| name == "for")
            .and_then(|(_, value)| value.as_str())
            .and_then(|text| spec::duration::parse_duration(text).ok())
    }

    /// The same, with the workload running `length`.
    pub fn with_workload_for(&self, length: Duration) -> Lifted {
        let mut shorter = self.clone();
        for (name, value) in &mut shorter.workload.keys {
            if name == "for" {
                *value = toml::Value::String(format!("{}ms", length.as_millis()));
            }
        }
        shorter.workload.what = format!(
            "{} (cut to {:.0} s)",
            self.workload.what,
            length.as_secs_f64()
        );
        shorter
    }

    /// The scenario file with the faults at positions `keep` (of [`Lifted::faults`]),
    /// expecting `expect` (anomaly kinds), each step commented with what it does.
    pub fn render(&self, keep: &[usize], expect: &[String], provenance: &Provenance) -> String {
        let mut out = String::new();
        let kept: Vec<&Fault> = keep.iter().filter_map(|&i| self.faults.get(i)).collect();
        let _ = writeln!(
            out,
            "title = {}",
            toml::Value::String(format!(
                "{} from a random run: {}",
                if self.bugs.is_empty() {
                    "A failure".to_string()
                } else {
                    self.bugs.join(", ")
                },
                expect.join(", ")
            ))
        );
        let mut summary = format!(
            "Lifted from the run {} ({} fault(s) of {}), by `harness shrink`.\n",
            self.run.display(),
            kept.len(),
            self.faults.len()
        );
        for line in &provenance.lines {
            summary.push_str(line);
            summary.push('\n');
        }
        let _ = writeln!(out, "summary = {}", toml::Value::String(summary));
        out.push_str("\n[cluster]\n");
        let _ = writeln!(out, "nodes = {}", self.nodes);
        let settings: Vec<String> = self
            .settings
            .iter()
            .filter_map(|line| line.split_once('='))
            .map(|(k, v)| format!("{} = {}", toml_key(k.trim()), setting_value(v.trim())))
            .collect();
        let _ = writeln!(out, "settings = {{ {} }}", settings.join(", "));
        out.push_str("\n[topic]\n");
        let _ = writeln!(out, "name = {}", toml::Value::String(self.topic.clone()));
        let assignment = toml::Value::Array(
            self.assignment
                .iter()
                .map(|r| toml::Value::Array(r.iter().cloned().map(toml::Value::String).collect()))
                .collect(),
        );
        let _ = writeln!(out, "assignment = {assignment}");
        if !self.bugs.is_empty() {
            out.push_str("\n[switch]\n");
            let bugs =
                toml::Value::Array(self.bugs.iter().cloned().map(toml::Value::String).collect());
            let _ = writeln!(out, "bugs = {bugs}");
        }
        out.push_str("\n[expect]\n");
        let kinds = toml::Value::Array(expect.iter().cloned().map(toml::Value::String).collect());
        let _ = writeln!(out, "buggy = {kinds}");
        out.push_str("fixed = \"valid\"\n");
        out.push_str(
            "# As the test judged it: the settings' own durability waiver, a 30 s bound.\n",
        );
        out.push_str("availability_bound = \"30s\"\nwaive_durability = true\n");
        out.push_str("\n# As the test ended: every fault undone, then the one-down probe.\n");
        out.push_str("[end]\nrestart = true\none_down = true\n");

        let mut steps: Vec<&TimedStep> = kept.iter().flat_map(|f| f.steps.iter()).collect();
        steps.sort_by_key(|s| s.at);
        write_step(&mut out, &self.workload);
        let mut clock = Duration::ZERO;
        for step in steps {
            let gap = step.at.saturating_sub(clock);
            if gap >= Duration::from_millis(10) {
                let _ = write!(
                    out,
                    "\n[[step]]\ndo = \"sleep\"\nfor = \"{}ms\"\n",
                    gap.as_millis()
                );
            }
            write_step(&mut out, step);
            clock = clock.max(step.done);
        }
        out
    }
}

fn write_step(out: &mut String, step: &TimedStep) {
    let _ = write!(
        out,
        "\n# {:.1} s: {}\n[[step]]\n",
        step.at.as_secs_f64(),
        step.what
    );
    for (name, value) in &step.keys {
        let _ = writeln!(out, "{} = {value}", toml_key(name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_is_the_brokers_placement_on_a_fresh_cluster() {
        let nodes: Vec<String> = ["n1", "n2", "n3"].map(String::from).to_vec();
        assert_eq!(
            round_robin(&nodes, 4, 2),
            vec![
                vec!["n1", "n2"],
                vec!["n2", "n3"],
                vec!["n3", "n1"],
                vec!["n1", "n2"]
            ]
        );
        assert_eq!(round_robin(&nodes, 1, 1), vec![vec!["n1"]]);
    }

    #[test]
    fn keys_are_quoted_only_when_they_must_be() {
        assert_eq!(toml_key("min_insync_replicas"), "min_insync_replicas");
        assert_eq!(
            toml_key("metadata.session_timeout_ms"),
            "\"metadata.session_timeout_ms\""
        );
    }

    #[test]
    fn settings_keep_their_types() {
        assert_eq!(setting_value("3"), toml::Value::Integer(3));
        assert_eq!(setting_value("true"), toml::Value::Boolean(true));
        assert_eq!(
            setting_value("[1, 2]"),
            toml::Value::Array(vec![toml::Value::Integer(1), toml::Value::Integer(2)])
        );
        assert_eq!(setting_value("fast"), toml::Value::String("fast".into()));
    }

    use checkers::Verdict;
    use history::OpType;
    use serde_json::json;

    fn record() -> TestRecord {
        serde_json::from_value(json!({
            "spec": {
                "name": "nightly-log",
                "store": "/tmp/store",
                "seed": 12_345_678_901_234_567_890u64,
                "backend": {"kind": "netns"},
                "broker_bin": null,
                "brokers": {
                    "bugs": ["KAFKA-3083"],
                    "config": ["replica_lag_time_max_ms=5000", "metadata.session_timeout_ms=6000", "min_insync_replicas=2"]
                },
                "plan": {
                    "kind": "workload", "nodes": 4, "workload": "log",
                    "nemesis": {"packages": ["kill"], "interval": 2.0, "targets": ["one"], "wipe": false},
                    "time_limit": 30.0, "concurrency": 10, "rate": 500.0,
                    "partitions": 3, "replication_factor": 3,
                    "shape": {"hot_partitions": true, "batch_fraction": 0.1, "batch_max": 10, "linearizable_reads": true, "grow_after": null}
                }
            },
            "command": "harness test ...",
            "broker_bin": "broker",
            "topic": "jepsen",
            "started": "2026-12-07T20:00:33+00:00",
            "harness_version": "0.1.0",
            "scenario": null
        }))
        .expect("a test record")
    }

    fn failing() -> Results {
        let mut results = Results::default();
        results.add(
            "settle",
            Verdict::Invalid,
            &json!({"anomalies": [{"kind": "roles-not-converged"}]}),
        );
        results
    }

    /// A nemesis entry: `f` at `secs`, with `value` (and an error).
    fn entry(index: u64, secs: f64, f: &str, value: Value, error: Option<&str>) -> Op {
        let mut op = Op::new(index, Process::Nemesis, OpType::Info, f, value);
        op.time = (secs * 1e9) as u64;
        op.error = error.map(|e| json!(e));
        op
    }

    /// A run's nemesis: a pause and its resume, a kill and its start, a cut and its
    /// heal, a gated controller cut never undone before the final heal, a transfer
    /// storm, a strike that found no target, and the final heal.
    fn ops() -> Vec<Op> {
        let aim = json!({"aim": "controller-cut", "request": "transfer-leader", "request_after_ms": 0, "gated": true});
        vec![
            entry(
                0,
                1.0,
                "pause",
                json!({"package": "pause", "targets": "one"}),
                None,
            ),
            entry(
                1,
                1.1,
                "pause",
                json!({"package": "pause", "targets": "one", "nodes": ["n2"]}),
                None,
            ),
            entry(
                2,
                2.0,
                "kill",
                json!({"package": "kill", "targets": "one", "wipe": true}),
                None,
            ),
            entry(
                3,
                2.2,
                "kill",
                json!({"package": "kill", "targets": "one", "wipe": true, "nodes": ["n1"]}),
                None,
            ),
            entry(4, 3.0, "resume", json!({"package": "pause"}), None),
            entry(
                5,
                3.1,
                "resume",
                json!({"package": "pause", "nodes": ["n2"]}),
                None,
            ),
            entry(
                6,
                4.0,
                "start-partition",
                json!({"package": "partition", "shape": "halves"}),
                None,
            ),
            entry(
                7,
                4.1,
                "start-partition",
                json!({"package": "partition", "shape": "halves", "ports": "all", "grudge": {"n1": ["n3", "n4"], "n2": [], "n3": ["n1"], "n4": ["n1"]}}),
                None,
            ),
            entry(
                8,
                5.0,
                "start-aimed",
                json!({"package": "aimed", "aim": aim}),
                None,
            ),
            entry(
                9,
                5.9,
                "start-aimed",
                json!({"package": "aimed", "aim": aim, "gate_reached": true}),
                None,
            ),
            entry(10, 6.0, "start", json!({"package": "kill"}), None),
            entry(
                11,
                6.5,
                "start",
                json!({"package": "kill", "nodes": ["n1"]}),
                None,
            ),
            entry(
                12,
                7.0,
                "transfer-leaders",
                json!({"package": "admin", "kind": "transfer-storm"}),
                None,
            ),
            entry(
                13,
                7.2,
                "transfer-leaders",
                json!({"package": "admin", "transfers": [{"key": "jepsen/1", "from": "n2", "to": "n3", "ok": true}]}),
                None,
            ),
            entry(
                14,
                8.0,
                "stop-partition",
                json!({"package": "partition"}),
                None,
            ),
            entry(
                15,
                8.1,
                "stop-partition",
                json!({"package": "partition", "healed": 1}),
                None,
            ),
            entry(
                16,
                25.0,
                "start-aimed",
                json!({"package": "aimed", "aim": aim}),
                None,
            ),
            entry(
                17,
                25.0,
                "start-aimed",
                json!({"package": "aimed", "aim": aim}),
                None,
            ),
            entry(
                18,
                29.0,
                "start-aimed",
                json!({"package": "aimed", "aim": {"aim": "lagging", "strike": "kill", "whom": "leader", "watch_ms": 3000}}),
                None,
            ),
            entry(
                19,
                29.5,
                "start-aimed",
                json!({"package": "aimed"}),
                Some("no-target: no follower lagged"),
            ),
            entry(
                20,
                31.0,
                "stop-aimed",
                json!({"package": "aimed", "final": true}),
                None,
            ),
            entry(
                21,
                31.2,
                "stop-aimed",
                json!({"package": "aimed", "final": true}),
                None,
            ),
        ]
    }

    #[test]
    fn a_run_lifts_into_faults_that_pair_each_start_with_its_stop() {
        let lifted =
            lift_parts(Path::new("/runs/r1"), &record(), &failing(), &ops()).expect("lifted");
        let whats: Vec<&str> = lifted.faults.iter().map(|f| f.what.as_str()).collect();
        assert_eq!(
            whats,
            vec![
                "pause n2 … resume n2",
                "kill n1 … start n1",
                "cut (all) { n1 = [\"n3\", \"n4\"], n3 = [\"n1\"], n4 = [\"n1\"] } … heal",
                "strike: controller-cut",
                "move jepsen/1 to n3",
                "strike: controller-cut",
            ],
            "{whats:#?}"
        );
        // The cut's heal belongs to the cut; the final heal and the strike that found no
        // target are not lifted.
        assert_eq!(lifted.faults[2].steps.len(), 2);
        assert_eq!(lifted.skipped.len(), 1, "{:?}", lifted.skipped);
        assert_eq!(lifted.assignment.len(), 3);
        assert_eq!(lifted.assignment[2], vec!["n3", "n4", "n1"]);
        assert_eq!(
            lifted.kinds.keys().collect::<Vec<_>>(),
            vec!["roles-not-converged"]
        );
    }

    #[test]
    fn every_subset_of_a_lifted_run_renders_a_scenario_that_validates() {
        let lifted =
            lift_parts(Path::new("/runs/r1"), &record(), &failing(), &ops()).expect("lifted");
        let expect = vec!["roles-not-converged".to_string()];
        let n = lifted.faults.len();
        for mask in 0u32..(1 << n) {
            let keep: Vec<usize> = (0..n).filter(|i| mask & (1 << i) != 0).collect();
            let text = lifted.render(&keep, &expect, &Provenance::default());
            let scenario = crate::scenario::Scenario::parse(Path::new("lifted.toml"), &text)
                .unwrap_or_else(|e| panic!("{keep:?}: {e}\n{text}"));
            assert_eq!(scenario.switch.bugs, vec!["KAFKA-3083"]);
            assert!(scenario.end.restart && scenario.end.one_down);
            assert!(scenario.expect.waive_durability);
            let kinds: Vec<&str> = scenario.steps.iter().map(|s| s.kind.name()).collect();
            assert_eq!(kinds[0], "workload");
            let faults = kinds
                .iter()
                .filter(|k| !matches!(**k, "workload" | "sleep"))
                .count();
            let expected: usize = keep.iter().map(|&i| lifted.faults[i].steps.len()).sum();
            assert_eq!(faults, expected, "{keep:?}: {kinds:?}");
        }
    }

    #[test]
    fn the_workload_step_carries_the_runs_seed_and_shapes() {
        let lifted =
            lift_parts(Path::new("/runs/r1"), &record(), &failing(), &ops()).expect("lifted");
        let text = lifted.render(&[], &["roles-not-converged".into()], &Provenance::default());
        let scenario = crate::scenario::Scenario::parse(Path::new("lifted.toml"), &text)
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        let crate::scenario::StepKind::Workload(options) = &scenario.steps[0].kind else {
            panic!("{text}");
        };
        assert_eq!(options.seed, 12_345_678_901_234_567_890);
        assert!(options.hot_partitions);
        assert_eq!(options.batch_fraction, 0.1);
        assert_eq!(
            options.read_consistency,
            workloads::Consistency::Linearizable
        );
        assert_eq!(options.time_limit, Duration::from_secs(30));
        assert!(scenario
            .cluster
            .settings
            .contains(&"metadata.session_timeout_ms=6000".to_string()));
    }

    #[test]
    fn grows_of_several_partitions_invoked_together_pair_by_partition() {
        let grow = |index: u64, secs: f64, key: &str, to: Option<&[&str]>| {
            let value = match to {
                Some(to) => json!({"key": key, "from": [to[0]], "to": to}),
                None => json!({"key": key, "replication_factor": 3}),
            };
            entry(index, secs, "grow-replication", value, None)
        };
        let ops = vec![
            grow(0, 5.0, "jepsen/0", None),
            grow(1, 5.0, "jepsen/1", None),
            grow(2, 5.1, "jepsen/1", Some(&["n2", "n3", "n4"])),
            grow(3, 5.2, "jepsen/0", Some(&["n1", "n2", "n3"])),
        ];
        let lifted = lift_parts(Path::new("/r"), &record(), &failing(), &ops).expect("lifted");
        let whats: Vec<&str> = lifted.faults.iter().map(|f| f.what.as_str()).collect();
        assert_eq!(
            whats,
            vec![
                "reassign jepsen/0 to n1, n2, n3",
                "reassign jepsen/1 to n2, n3, n4"
            ]
        );
        assert!(lifted.skipped.is_empty(), "{:?}", lifted.skipped);
    }

    #[test]
    fn a_valid_run_or_a_scenario_run_is_refused() {
        let valid = Results::default();
        assert!(matches!(
            lift_parts(Path::new("/r"), &record(), &valid, &ops()),
            Err(LiftError::NotFailing(..))
        ));
    }
}
