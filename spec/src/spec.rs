//! A test as plain data (Jepsen: "a test is a map"): what `harness test`, `harness repro`
//! and `harness nightly` build once, what `test.json` holds, and the command line that
//! runs it again ([`TestSpec::to_argv`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use backend::ssh::HostKeyPolicy;
use nemesis::{PackageKind, TargetSpec};
use serde::{Deserialize, Serialize};
use workloads::WorkloadKind;

use crate::duration::format_duration;

/// The store folder a test uses when none is named.
pub const DEFAULT_STORE: &str = "store";
/// Where the ssh backend keeps a run's files on its hosts when none is named.
pub const DEFAULT_REMOTE_DIR: &str = backend::ssh::DEFAULT_REMOTE_DIR;

/// One test: where it runs, on which brokers, what it does, and its seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestSpec {
    /// The run's name in the store: `<store>/<name>/<time>/`.
    pub name: String,
    pub store: PathBuf,
    /// All randomness of the test comes from it.
    pub seed: u64,
    pub backend: BackendSpec,
    /// A broker binary given on the command line; `None`: this workspace's, built.
    pub broker_bin: Option<PathBuf>,
    pub brokers: BrokerSettings,
    pub plan: Plan,
}

/// What every broker of the test is started with.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BrokerSettings {
    /// Historical bugs turned on (`KAFKA-7128`, ...).
    pub bugs: Vec<String>,
    /// `node.toml` settings, `KEY=VALUE` with dotted keys naming tables.
    pub config: Vec<String>,
}

/// What the test does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Plan {
    /// `harness test`: a workload's clients for a time while the nemesis injects faults.
    Workload(WorkloadPlan),
    /// `harness repro`: a scenario file's steps, judged against its expectation.
    Scenario(ScenarioPlan),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadPlan {
    pub nodes: u32,
    pub workload: WorkloadKind,
    pub nemesis: NemesisSpec,
    #[serde(with = "secs")]
    pub time_limit: Duration,
    pub concurrency: usize,
    /// Operations per second over all workers (0: as fast as they go).
    pub rate: f64,
    pub partitions: u32,
    pub replication_factor: u32,
    /// The workload's shapes (hot partitions, batches, RF-1-then-grow); the defaults are
    /// the plain workload (and what a `test.json` written before them reads as).
    #[serde(default)]
    pub shape: WorkloadShape,
}

/// How a workload leans on the cluster beyond its rate and size: all off by default,
/// and a plan without them runs exactly the operations it always ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkloadShape {
    /// Partition `i` twice as likely as `i + 1` (Jepsen's Kafka workload), instead of
    /// uniform.
    pub hot_partitions: bool,
    /// Share of writes sent as one request of 2 to `batch_max` values (each still its own
    /// operation in the history).
    pub batch_fraction: f64,
    pub batch_max: u32,
    /// The log workload's reads ask for linearizable consistency (the leader confirms it
    /// still leads and that its high watermark reached its epoch's start), so that the
    /// checker counts a read that misses an acknowledged write (`stale-read`); at
    /// default consistency it only reports one. Register reads are always linearizable.
    pub linearizable_reads: bool,
    /// Create the topic with replication factor 1 and reassign every partition to
    /// `replication_factor` replicas this long after the workload starts (`None`: created
    /// with its replication factor).
    #[serde(with = "opt_secs")]
    pub grow_after: Option<Duration>,
}

/// The largest batch when none is named.
pub const DEFAULT_BATCH_MAX: u32 = workloads::DEFAULT_BATCH_MAX;

impl Default for WorkloadShape {
    fn default() -> Self {
        WorkloadShape {
            hot_partitions: false,
            batch_fraction: 0.0,
            batch_max: DEFAULT_BATCH_MAX,
            linearizable_reads: false,
            grow_after: None,
        }
    }
}

/// The faults of a workload test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NemesisSpec {
    /// Empty: no faults.
    pub packages: Vec<PackageKind>,
    /// Mean time between two steps of each package.
    #[serde(with = "secs")]
    pub interval: Duration,
    pub targets: Vec<TargetSpec>,
    /// Whether single-node kills sometimes restart the node with its data wiped.
    pub wipe: bool,
    /// Swarm testing: the length of a period, each of which draws which packages act
    /// (`nemesis::swarm`); `None`: every package acts all the time.
    #[serde(default, with = "opt_secs", skip_serializing_if = "Option::is_none")]
    pub swarm: Option<Duration>,
}

impl Default for NemesisSpec {
    fn default() -> Self {
        NemesisSpec {
            packages: Vec::new(),
            interval: Duration::from_secs(10),
            targets: TargetSpec::defaults(),
            wipe: true,
            swarm: None,
        }
    }
}

impl NemesisSpec {
    /// `--nemesis` as given back on a command line: `none`, or the packages' names.
    pub fn list(&self) -> String {
        if self.packages.is_empty() {
            "none".into()
        } else {
            self.packages
                .iter()
                .map(|p| p.name())
                .collect::<Vec<_>>()
                .join(",")
        }
    }

    /// `--nemesis-targets` as given back on a command line.
    pub fn target_list(&self) -> String {
        self.targets
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScenarioPlan {
    /// The scenario as named on the command line: a name in the scenarios folder or a
    /// file.
    pub scenario: String,
    /// The scenarios folder given with `--scenarios` (`None`: the workspace's).
    pub scenarios_dir: Option<PathBuf>,
    pub mode: Mode,
}

/// Which way a scenario's bug switch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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

/// Where the nodes live.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum BackendSpec {
    /// One network namespace per node on this machine (root).
    Netns,
    /// One host per node over SSH.
    Ssh(SshSpec),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SshSpec {
    pub hosts: HostsSource,
    /// A private key for hosts that name none.
    pub key: Option<PathBuf>,
    /// An ssh config file for every connection (`ssh -F`).
    pub config: Option<PathBuf>,
    /// `None`: `off` with vagrant, `accept-new` otherwise.
    pub host_keys: Option<HostKeyPolicy>,
    pub remote_dir: PathBuf,
}

impl SshSpec {
    /// The host-key policy in force.
    pub fn host_key_policy(&self) -> HostKeyPolicy {
        self.host_keys.unwrap_or(match self.hosts {
            HostsSource::Vagrant => HostKeyPolicy::Off,
            HostsSource::NodesFile(_) => HostKeyPolicy::AcceptNew,
        })
    }
}

/// Where the ssh backend's hosts come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostsSource {
    /// `name address [user] [port]` per line.
    NodesFile(PathBuf),
    /// `vagrant ssh-config` in the current folder.
    Vagrant,
}

/// A spec that cannot run, and why (in the words of its command-line options).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SpecError(pub String);

impl TestSpec {
    /// The name a test's runs get when none is given: the workload's, or the scenario's
    /// and its mode.
    pub fn default_name(plan: &Plan) -> String {
        match plan {
            Plan::Workload(plan) => plan.workload.to_string(),
            Plan::Scenario(plan) => format!("{}-{}", plan.scenario, plan.mode.as_str()),
        }
    }

    /// Checks what the spec alone can tell (the brokers' settings are the broker's to
    /// judge).
    pub fn validate(&self) -> Result<(), SpecError> {
        let fail = |text: String| Err(SpecError(text));
        if self.name.is_empty() || self.name.contains('/') || self.name.starts_with('.') {
            return fail(format!(
                "--name {:?} must be a plain folder name",
                self.name
            ));
        }
        let Plan::Workload(plan) = &self.plan else {
            return Ok(());
        };
        if plan.nodes == 0 || plan.nodes > 32 {
            return fail(format!("--nodes {}: 1 to 32", plan.nodes));
        }
        if plan.replication_factor == 0 || plan.replication_factor > plan.nodes {
            return fail(format!(
                "--replication-factor {} is more than the {} nodes",
                plan.replication_factor, plan.nodes
            ));
        }
        if plan.partitions == 0 || plan.partitions > 1000 {
            return fail(format!("--partitions {}: 1 to 1000", plan.partitions));
        }
        if plan.time_limit.is_zero() {
            return fail("--time-limit must be a positive duration".into());
        }
        if plan.concurrency == 0 {
            return fail("--concurrency must be at least 1".into());
        }
        if !(plan.rate.is_finite() && plan.rate >= 0.0) {
            return fail(
                "--rate must be 0 (unlimited) or a positive number of operations per second".into(),
            );
        }
        let shape = &plan.shape;
        if !(0.0..=1.0).contains(&shape.batch_fraction) {
            return fail(format!(
                "--batch-fraction {}: a share between 0 and 1",
                shape.batch_fraction
            ));
        }
        if !(2..=workloads::generator::MAX_BATCH).contains(&shape.batch_max) {
            return fail(format!(
                "--batch-max {}: 2 to {}",
                shape.batch_max,
                workloads::generator::MAX_BATCH
            ));
        }
        if let Some(after) = shape.grow_after {
            if plan.replication_factor < 2 {
                return fail(format!(
                    "--grow-replication-after needs a --replication-factor to grow to (2 or \
                     more), not {}",
                    plan.replication_factor
                ));
            }
            if after >= plan.time_limit {
                return fail(format!(
                    "--grow-replication-after {} is not within the --time-limit {}",
                    format_duration(after),
                    format_duration(plan.time_limit)
                ));
            }
            // A partition's only copy wiped is an acknowledged write lost by design.
            if plan.nemesis.wipe && plan.nemesis.packages.contains(&PackageKind::Kill) {
                return fail(
                    "--grow-replication-after with kills needs --nemesis-wipe false: a node \
                     wiped while it holds a partition's only replica loses acknowledged \
                     writes on a correct broker too"
                        .into(),
                );
            }
        }
        if plan.nemesis.interval.is_zero() {
            return fail("--nemesis-interval must be a positive duration".into());
        }
        if plan.nemesis.swarm.is_some_and(|period| period.is_zero()) {
            return fail("--nemesis-swarm must be a positive duration".into());
        }
        if plan.nemesis.targets.is_empty() {
            return fail("--nemesis-targets names no target".into());
        }
        for target in &plan.nemesis.targets {
            if let TargetSpec::Nodes(named) = target {
                let stranger = named.iter().find(|node| {
                    node.strip_prefix('n')
                        .and_then(|n| n.parse::<u32>().ok())
                        .is_none_or(|n| n == 0 || n > plan.nodes)
                });
                if let Some(stranger) = stranger {
                    return fail(format!(
                        "--nemesis-targets: no node {stranger} in a test of {} nodes (n1..n{})",
                        plan.nodes, plan.nodes
                    ));
                }
            }
        }
        Ok(())
    }

    /// The command line that runs this test again, `harness` first.
    pub fn to_argv(&self) -> Vec<String> {
        let mut argv: Vec<String> = vec!["harness".into()];
        let flag = |argv: &mut Vec<String>, name: &str, value: String| {
            argv.push(format!("--{name}"));
            argv.push(value);
        };
        match &self.plan {
            Plan::Workload(plan) => {
                argv.push("test".into());
                flag(&mut argv, "nodes", plan.nodes.to_string());
                flag(&mut argv, "workload", plan.workload.to_string());
                flag(&mut argv, "nemesis", plan.nemesis.list());
                flag(
                    &mut argv,
                    "nemesis-interval",
                    format_duration(plan.nemesis.interval),
                );
                flag(&mut argv, "nemesis-targets", plan.nemesis.target_list());
                flag(&mut argv, "nemesis-wipe", plan.nemesis.wipe.to_string());
                if let Some(period) = plan.nemesis.swarm {
                    flag(&mut argv, "nemesis-swarm", format_duration(period));
                }
                flag(&mut argv, "time-limit", format_duration(plan.time_limit));
                flag(&mut argv, "concurrency", plan.concurrency.to_string());
                flag(&mut argv, "rate", plan.rate.to_string());
                flag(&mut argv, "partitions", plan.partitions.to_string());
                flag(
                    &mut argv,
                    "replication-factor",
                    plan.replication_factor.to_string(),
                );
                plan.shape.argv(&mut argv);
                flag(&mut argv, "seed", self.seed.to_string());
                for bug in &self.brokers.bugs {
                    flag(&mut argv, "bug", bug.clone());
                }
                for setting in &self.brokers.config {
                    flag(&mut argv, "broker-config", setting.clone());
                }
                if self.name != TestSpec::default_name(&self.plan) {
                    flag(&mut argv, "name", self.name.clone());
                }
                self.backend_argv(&mut argv);
            }
            Plan::Scenario(plan) => {
                argv.push("repro".into());
                argv.push(plan.scenario.clone());
                if plan.mode == Mode::Buggy {
                    argv.push("--buggy".into());
                }
                if let Some(dir) = &plan.scenarios_dir {
                    flag(&mut argv, "scenarios", path_word(dir));
                }
            }
        }
        if self.store != Path::new(DEFAULT_STORE) {
            flag(&mut argv, "store", path_word(&self.store));
        }
        if let Some(bin) = &self.broker_bin {
            flag(&mut argv, "broker-bin", path_word(bin));
        }
        argv
    }

    /// [`TestSpec::to_argv`] as one line for a shell.
    pub fn command_line(&self) -> String {
        backend::tools::display_command(&self.to_argv())
    }

    fn backend_argv(&self, argv: &mut Vec<String>) {
        let BackendSpec::Ssh(ssh) = &self.backend else {
            return;
        };
        argv.extend(["--backend".to_string(), "ssh".to_string()]);
        match &ssh.hosts {
            HostsSource::NodesFile(file) => {
                argv.extend(["--nodes-file".to_string(), path_word(file)]);
            }
            HostsSource::Vagrant => argv.push("--vagrant".into()),
        }
        if let Some(key) = &ssh.key {
            argv.extend(["--ssh-key".to_string(), path_word(key)]);
        }
        if let Some(config) = &ssh.config {
            argv.extend(["--ssh-config".to_string(), path_word(config)]);
        }
        if let Some(policy) = ssh.host_keys {
            argv.extend(["--ssh-host-keys".to_string(), policy.name().to_string()]);
        }
        if ssh.remote_dir != Path::new(DEFAULT_REMOTE_DIR) {
            argv.extend(["--remote-dir".to_string(), path_word(&ssh.remote_dir)]);
        }
    }
}

impl WorkloadShape {
    /// The shape's flags, only those that differ from the plain workload.
    fn argv(&self, argv: &mut Vec<String>) {
        if self.hot_partitions {
            argv.push("--hot-partitions".into());
        }
        if self.batch_fraction != 0.0 {
            argv.extend(["--batch-fraction".into(), self.batch_fraction.to_string()]);
        }
        if self.batch_max != DEFAULT_BATCH_MAX {
            argv.extend(["--batch-max".into(), self.batch_max.to_string()]);
        }
        if self.linearizable_reads {
            argv.push("--linearizable-reads".into());
        }
        if let Some(after) = self.grow_after {
            argv.extend(["--grow-replication-after".into(), format_duration(after)]);
        }
    }
}

fn path_word(path: &Path) -> String {
    path.display().to_string()
}

/// An optional duration in JSON as seconds, `null` or absent for none.
mod opt_secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(
        value: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(duration) => serializer.serialize_some(&duration.as_secs_f64()),
            None => serializer.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        Option::<f64>::deserialize(deserializer)?
            .map(|secs| Duration::try_from_secs_f64(secs).map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// Durations in JSON as seconds (`"time_limit": 60.0`), as people read them.
mod secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(value.as_secs_f64())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        let secs = f64::deserialize(deserializer)?;
        Duration::try_from_secs_f64(secs).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_swarm_period_is_seconds_in_json_and_absent_when_off() {
        let off = NemesisSpec::default();
        let json = serde_json::to_value(&off).expect("json");
        assert!(json.get("swarm").is_none(), "{json}");
        let on = NemesisSpec {
            swarm: Some(Duration::from_millis(2500)),
            ..NemesisSpec::default()
        };
        let json = serde_json::to_value(&on).expect("json");
        assert_eq!(json["swarm"], serde_json::json!(2.5));
        let back: NemesisSpec = serde_json::from_value(json).expect("read back");
        assert_eq!(back, on);
        // A test.json written before swarms existed reads as no swarm.
        let mut old = serde_json::to_value(&off).expect("json");
        old.as_object_mut().expect("object").remove("swarm");
        let read: NemesisSpec = serde_json::from_value(old).expect("old file");
        assert_eq!(read.swarm, None);
    }
}
