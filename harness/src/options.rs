//! The options of `harness test` (and the backend options `harness nightly` shares), and
//! their translation into a [`TestSpec`], the plain data every part of a test reads.

use std::path::PathBuf;

use anyhow::{anyhow, bail, Result};
use backend::ssh::HostKeyPolicy;
use clap::Args;
use nemesis::{PackageKind, TargetSpec};
use spec::duration::parse_duration;
use spec::{
    BackendSpec, BrokerSettings, HostsSource, NemesisSpec, Plan, SshSpec, TestSpec, WorkloadPlan,
    WorkloadShape,
};

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
    /// `partition-ports`, `admin`, `slow` and `aimed`; `all` for every one, `none` for
    /// none.
    #[arg(long, default_value = "none", value_name = "LIST|all|none")]
    pub nemesis: String,

    /// Mean time between two steps of each fault package (each delay is uniform in 0 to
    /// twice this): `10` (seconds), `2.5s`, `500ms`, `1m`.
    #[arg(
        long,
        default_value = "10",
        value_name = "DURATION",
        allow_hyphen_values = true
    )]
    pub nemesis_interval: String,

    /// Whom kills, pauses, slow links and role isolations hit, comma-separated: `one`,
    /// `minority`, `majority`, `all`, `leaders`, `controller`, `meta-leader`, or nodes
    /// joined by `+` (`n1+n3`). Default: every kind but explicit nodes.
    #[arg(long, value_name = "LIST")]
    pub nemesis_targets: Option<String>,

    /// Whether single-node kills sometimes restart the node with its partition data
    /// wiped (the metadata quorum's files are kept).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub nemesis_wipe: bool,

    /// Swarm testing: cut the run into periods of this length (30s when given alone),
    /// each drawing from the seed which packages act (a quarter of them calm) and which
    /// delay points `slow` may arm; a package turned off has its fault stopped.
    #[arg(
        long,
        value_name = "PERIOD",
        num_args = 0..=1,
        default_missing_value = "30s"
    )]
    pub nemesis_swarm: Option<String>,

    /// How long the clients run: `60` (seconds), `90s`, `2m`, `1m30s`.
    #[arg(
        long,
        default_value = "60",
        value_name = "DURATION",
        allow_hyphen_values = true
    )]
    pub time_limit: String,

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

    /// Skew the clients' partition choice: partition i twice as likely as partition i+1
    /// (as Jepsen's Kafka workload), instead of uniform.
    #[arg(long)]
    pub hot_partitions: bool,

    /// Share of writes sent as one produce request of 2 to --batch-max values (sizes
    /// uniform, from the seed); each value is still its own operation in the history.
    #[arg(long, default_value_t = 0.0, value_name = "SHARE")]
    pub batch_fraction: f64,

    /// The largest batch of --batch-fraction.
    #[arg(long, default_value_t = spec::spec::DEFAULT_BATCH_MAX, value_name = "N")]
    pub batch_max: u32,

    /// The log workload's reads ask for linearizable consistency, so that a read missing
    /// a write acknowledged before it began counts against validity (`stale-read`); at
    /// the default consistency it is only reported. Register reads always are.
    #[arg(long)]
    pub linearizable_reads: bool,

    /// Create the topic with replication factor 1 and grow every partition to
    /// --replication-factor replicas (a reassignment, recorded in the history) this long
    /// after the clients start: `3s`. With kills it needs --nemesis-wipe false.
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    pub grow_replication_after: Option<String>,

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

    #[command(flatten)]
    pub backend: BackendArgs,

    /// A broker binary to run instead of building this workspace's (with failpoints).
    #[arg(long, value_name = "PATH")]
    pub broker_bin: Option<PathBuf>,
}

/// Where the nodes live: `--backend` and the ssh backend's options.
#[derive(Debug, Clone, Args)]
pub struct BackendArgs {
    /// Where the nodes live: `netns` (network namespaces on this machine; root) or `ssh`
    /// (hosts reached over SSH: `--nodes-file` or `--vagrant`).
    #[arg(long, default_value = "netns", value_name = "netns|ssh")]
    pub backend: String,

    #[command(flatten)]
    pub ssh: SshArgs,
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
    pub ssh_host_keys: Option<HostKeyPolicy>,

    /// Where a run keeps its files on the hosts (a folder per run inside, removed at the
    /// end once the logs are copied back).
    #[arg(long, value_name = "DIR", default_value = spec::spec::DEFAULT_REMOTE_DIR)]
    pub remote_dir: PathBuf,
}

fn parse_host_keys(text: &str) -> Result<HostKeyPolicy, String> {
    text.parse()
}

impl TestArgs {
    /// The test these options describe; a random seed when none is given. Refuses what
    /// cannot run, in the words of the options.
    pub fn to_spec(&self) -> Result<TestSpec> {
        let packages = PackageKind::parse_list(&self.nemesis)
            .map_err(|reason| anyhow!("--nemesis {:?}: {reason}", self.nemesis))?;
        let interval = positive_duration("--nemesis-interval", &self.nemesis_interval)?;
        let targets = match &self.nemesis_targets {
            None => TargetSpec::defaults(),
            Some(list) => {
                let targets = TargetSpec::parse_list(list)
                    .map_err(|e| anyhow!("--nemesis-targets {list:?}: {e}"))?;
                if targets.is_empty() {
                    bail!("--nemesis-targets {list:?}: names no target");
                }
                targets
            }
        };
        let swarm = match &self.nemesis_swarm {
            Some(period) => Some(positive_duration("--nemesis-swarm", period)?),
            None => None,
        };
        let time_limit = positive_duration("--time-limit", &self.time_limit)?;
        let grow_after = match &self.grow_replication_after {
            Some(text) => Some(positive_duration("--grow-replication-after", text)?),
            None => None,
        };
        let plan = Plan::Workload(WorkloadPlan {
            nodes: self.nodes,
            workload: self.workload,
            nemesis: NemesisSpec {
                packages,
                interval,
                targets,
                wipe: self.nemesis_wipe,
                swarm,
            },
            time_limit,
            concurrency: self.concurrency,
            rate: self.rate,
            partitions: self.partitions,
            replication_factor: self.replication_factor,
            shape: WorkloadShape {
                hot_partitions: self.hot_partitions,
                batch_fraction: self.batch_fraction,
                batch_max: self.batch_max,
                linearizable_reads: self.linearizable_reads,
                grow_after,
            },
        });
        let spec = TestSpec {
            name: self
                .name
                .clone()
                .unwrap_or_else(|| TestSpec::default_name(&plan)),
            store: self.store.clone(),
            seed: self.seed.unwrap_or_else(crate::lifecycle::random_seed),
            backend: self.backend.to_spec()?,
            broker_bin: self.broker_bin.clone(),
            brokers: BrokerSettings {
                bugs: self.bugs.clone(),
                config: self.broker_config.clone(),
            },
            plan,
        };
        spec.validate()?;
        crate::system::check_settings(&spec.brokers.config)?;
        Ok(spec)
    }
}

impl BackendArgs {
    /// `--backend` and its options as a [`BackendSpec`].
    pub fn to_spec(&self) -> Result<BackendSpec> {
        let ssh = &self.ssh;
        match self.backend.as_str() {
            "netns" => {
                if ssh.nodes_file.is_some() || ssh.vagrant {
                    bail!("--nodes-file and --vagrant need --backend ssh");
                }
                Ok(BackendSpec::Netns)
            }
            "ssh" => {
                let hosts = match (&ssh.nodes_file, ssh.vagrant) {
                    (Some(file), false) => HostsSource::NodesFile(file.clone()),
                    (None, true) => HostsSource::Vagrant,
                    _ => bail!("--backend ssh needs the hosts: --nodes-file FILE or --vagrant"),
                };
                Ok(BackendSpec::Ssh(SshSpec {
                    hosts,
                    key: ssh.ssh_key.clone(),
                    config: ssh.ssh_config.clone(),
                    host_keys: ssh.ssh_host_keys,
                    remote_dir: ssh.remote_dir.clone(),
                }))
            }
            other => bail!("--backend {other:?}: one of netns, ssh"),
        }
    }
}

/// A flag's duration, which must be more than zero.
fn positive_duration(flag: &str, text: &str) -> Result<std::time::Duration> {
    match parse_duration(text) {
        Ok(duration) if !duration.is_zero() => Ok(duration),
        Ok(_) => bail!("{flag} {text}: must be a positive duration"),
        Err(reason) => bail!("{flag} {text}: {reason}"),
    }
}

/// `harness test`'s options on their own, for tests that read a command line back.
#[cfg(test)]
#[derive(clap::Parser)]
struct TestCommand {
    #[command(flatten)]
    test: TestArgs,
}

/// The spec of a `harness test ...` command line (`argv[0]` is `harness`).
#[cfg(test)]
pub(crate) fn spec_of_argv(argv: &[String]) -> Result<TestSpec, String> {
    use clap::Parser;
    // argv[1] is `test`: clap wants a program name first.
    let parsed = TestCommand::try_parse_from(&argv[1..]).map_err(|e| e.to_string())?;
    parsed.test.to_spec().map_err(|e| format!("{e:#}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    fn parse(argv: &[String]) -> Result<TestSpec, String> {
        spec_of_argv(argv)
    }

    fn duration() -> impl Strategy<Value = Duration> {
        (0u64..100_000, 0u32..1_000_000_000)
            .prop_map(|(secs, nanos)| Duration::new(secs, nanos))
            .prop_filter("positive", |d| !d.is_zero())
    }

    fn targets(nodes: u32) -> impl Strategy<Value = Vec<TargetSpec>> {
        let named = proptest::collection::btree_set(1..=nodes, 1..3)
            .prop_map(|ns| TargetSpec::Nodes(ns.into_iter().map(|n| format!("n{n}")).collect()));
        let role = proptest::sample::select(TargetSpec::defaults());
        proptest::collection::vec(prop_oneof![role, named], 1..4)
    }

    fn backend() -> impl Strategy<Value = BackendSpec> {
        let path = "[a-z][a-z0-9 ._-]{0,12}".prop_map(PathBuf::from);
        let ssh = (
            prop_oneof![
                path.clone().prop_map(HostsSource::NodesFile),
                Just(HostsSource::Vagrant)
            ],
            proptest::option::of(path.clone()),
            proptest::option::of(path.clone()),
            proptest::option::of(proptest::sample::select(HostKeyPolicy::ALL.to_vec())),
            prop_oneof![Just(PathBuf::from(spec::spec::DEFAULT_REMOTE_DIR)), path],
        )
            .prop_map(|(hosts, key, config, host_keys, remote_dir)| {
                BackendSpec::Ssh(SshSpec {
                    hosts,
                    key,
                    config,
                    host_keys,
                    remote_dir,
                })
            });
        prop_oneof![Just(BackendSpec::Netns), ssh]
    }

    /// A shape; growing only where the plan allows it (a factor to grow to, within the
    /// time limit, no wipes with kills), fixed up in `spec()`.
    fn shape() -> impl Strategy<Value = WorkloadShape> {
        (
            any::<bool>(),
            prop_oneof![Just(0.0), 0.0f64..=1.0, Just(1.0)],
            prop_oneof![Just(spec::spec::DEFAULT_BATCH_MAX), 2u32..=1000],
            any::<bool>(),
            proptest::option::of(duration()),
        )
            .prop_map(
                |(hot_partitions, batch_fraction, batch_max, linearizable_reads, grow_after)| {
                    WorkloadShape {
                        hot_partitions,
                        batch_fraction,
                        batch_max,
                        linearizable_reads,
                        grow_after,
                    }
                },
            )
    }

    fn spec() -> impl Strategy<Value = TestSpec> {
        (1u32..=32)
            .prop_flat_map(|nodes| {
                (
                    Just(nodes),
                    1..=nodes,
                    targets(nodes),
                    proptest::sample::subsequence(PackageKind::ALL.to_vec(), 0..=7),
                    (
                        duration(),
                        duration(),
                        any::<bool>(),
                        proptest::option::of(duration()),
                    ),
                    (1usize..500, 0u32..100_000, 1u32..=1000),
                    (any::<u64>(), any::<bool>(), "[a-z][a-z0-9_-]{0,10}"),
                    (
                        proptest::collection::vec("KAFKA-[0-9]{4}", 0..3),
                        proptest::collection::vec("[a-z_]{1,8}=[0-9]{1,4}", 0..3),
                    ),
                    (
                        backend(),
                        proptest::option::of("[a-z/]{1,12}"),
                        "[a-z][a-z/]{0,10}",
                    ),
                    shape(),
                )
            })
            .prop_map(
                |(
                    nodes,
                    replication_factor,
                    targets,
                    packages,
                    (interval, time_limit, wipe, swarm),
                    (concurrency, rate_tenths, partitions),
                    (seed, register, name),
                    (bugs, config),
                    (backend, broker_bin, store),
                    mut shape,
                )| {
                    // Growing needs a factor above 1, a start within the time limit and no
                    // wipes with kills: otherwise the spec is refused (tested below).
                    if replication_factor < 2 || (wipe && packages.contains(&PackageKind::Kill)) {
                        shape.grow_after = None;
                    }
                    if let Some(after) = shape.grow_after {
                        if after >= time_limit {
                            shape.grow_after = Some(time_limit / 2);
                        }
                        if shape.grow_after == Some(Duration::ZERO) {
                            shape.grow_after = None;
                        }
                    }
                    let workload = if register {
                        workloads::WorkloadKind::Register
                    } else {
                        workloads::WorkloadKind::Log
                    };
                    TestSpec {
                        name,
                        store: PathBuf::from(store),
                        seed,
                        backend,
                        broker_bin: broker_bin.map(PathBuf::from),
                        brokers: BrokerSettings { bugs, config },
                        plan: Plan::Workload(WorkloadPlan {
                            nodes,
                            workload,
                            nemesis: NemesisSpec {
                                packages,
                                interval,
                                targets,
                                wipe,
                                swarm,
                            },
                            time_limit,
                            concurrency,
                            rate: f64::from(rate_tenths) / 10.0,
                            partitions,
                            replication_factor,
                            shape,
                        }),
                    }
                },
            )
    }

    proptest! {
        /// What `test.json` says runs the test again: spec → argv → spec.
        #[test]
        fn a_spec_survives_its_command_line(spec in spec()) {
            let argv = spec.to_argv();
            prop_assert_eq!(parse(&argv), Ok(spec), "{:?}", argv);
        }
    }

    #[test]
    fn defaults_give_the_readme_test() {
        let spec = parse(&["harness".into(), "test".into(), "--seed".into(), "1".into()])
            .expect("defaults are valid");
        let Plan::Workload(plan) = &spec.plan else {
            panic!("a workload test");
        };
        assert_eq!(plan.nodes, 5);
        assert_eq!(plan.time_limit, Duration::from_secs(60));
        assert_eq!(plan.nemesis.interval, Duration::from_secs(10));
        assert!(plan.nemesis.packages.is_empty());
        assert_eq!(spec.name, "log");
        assert_eq!(spec.backend, BackendSpec::Netns);
        assert_eq!(
            spec.command_line(),
            "harness test --nodes 5 --workload log --nemesis none --nemesis-interval 10s \
             --nemesis-targets one,minority,majority,all,leaders,controller,meta-leader \
             --nemesis-wipe true --time-limit 60s --concurrency 10 --rate 500 --partitions 4 \
             --replication-factor 3 --seed 1"
        );
    }

    #[test]
    fn the_swarm_flag_takes_a_period_or_none() {
        let argv = |extra: &[&str]| -> Vec<String> {
            let mut argv = vec!["harness", "test", "--nemesis", "all"];
            argv.extend(extra);
            argv.push("--seed");
            argv.push("3");
            argv.into_iter().map(String::from).collect()
        };
        let swarm = |extra: &[&str]| -> Option<Duration> {
            let spec = parse(&argv(extra)).expect("valid");
            let Plan::Workload(plan) = spec.plan else {
                panic!("a workload test");
            };
            plan.nemesis.swarm
        };
        assert_eq!(swarm(&[]), None);
        assert_eq!(
            swarm(&["--nemesis-swarm", "10s"]),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            swarm(&["--nemesis-swarm"]),
            Some(Duration::from_secs(30)),
            "alone: the default period"
        );
        assert_eq!(
            swarm(&["--nemesis-swarm", "--time-limit", "40"]),
            Some(Duration::from_secs(30)),
            "alone before another flag"
        );
        let error = parse(&argv(&["--nemesis-swarm", "0s"])).expect_err("zero");
        assert!(error.contains("--nemesis-swarm 0s"), "{error}");
        let spec = parse(&argv(&["--nemesis-swarm", "1m"])).expect("valid");
        assert!(
            spec.command_line().contains("--nemesis-swarm 60s"),
            "{}",
            spec.command_line()
        );
        let plain = parse(&argv(&[])).expect("valid");
        assert!(!plain.command_line().contains("swarm"));
    }

    #[test]
    fn shape_flags_are_read_and_refused_in_their_words() {
        let argv = |extra: &[&str]| -> Vec<String> {
            ["harness", "test", "--seed", "3"]
                .iter()
                .chain(extra)
                .map(|s| s.to_string())
                .collect()
        };
        let spec = parse(&argv(&[
            "--hot-partitions",
            "--batch-fraction",
            "0.3",
            "--batch-max",
            "5",
            "--linearizable-reads",
            "--grow-replication-after",
            "2.5s",
        ]))
        .expect("valid");
        let Plan::Workload(plan) = &spec.plan else {
            panic!("a workload test");
        };
        assert_eq!(
            plan.shape,
            WorkloadShape {
                hot_partitions: true,
                batch_fraction: 0.3,
                batch_max: 5,
                linearizable_reads: true,
                grow_after: Some(Duration::from_millis(2500)),
            }
        );
        let line = spec.command_line();
        assert!(
            line.ends_with(
                "--replication-factor 3 --hot-partitions --batch-fraction 0.3 --batch-max 5 \
                 --linearizable-reads --grow-replication-after 2500ms --seed 3"
            ),
            "{line}"
        );
        for (extra, expected) in [
            (&["--batch-fraction", "1.5"][..], "--batch-fraction 1.5"),
            (&["--batch-max", "1"][..], "--batch-max 1: 2 to 1000"),
            (
                &[
                    "--grow-replication-after",
                    "3s",
                    "--replication-factor",
                    "1",
                ][..],
                "needs a --replication-factor to grow to",
            ),
            (
                &["--grow-replication-after", "2m"][..],
                "is not within the --time-limit",
            ),
            (
                &["--grow-replication-after", "3s", "--nemesis", "kill"][..],
                "needs --nemesis-wipe false",
            ),
            (
                &["--grow-replication-after", "0s"][..],
                "must be a positive",
            ),
        ] {
            let error = parse(&argv(extra)).expect_err(expected);
            assert!(error.contains(expected), "{extra:?}: {error}");
        }
        // Kills without wipes may grow.
        parse(&argv(&[
            "--grow-replication-after",
            "3s",
            "--nemesis",
            "kill",
            "--nemesis-wipe",
            "false",
        ]))
        .expect("no wipes");
    }

    #[test]
    fn durations_take_the_one_grammar() {
        let argv = |limit: &str| -> Vec<String> {
            [
                "harness",
                "test",
                "--time-limit",
                limit,
                "--nemesis-interval",
                "500ms",
            ]
            .map(String::from)
            .to_vec()
        };
        for (text, secs) in [("90", 90.0), ("1m30s", 90.0), ("2.5s", 2.5)] {
            let spec = parse(&argv(text)).expect(text);
            let Plan::Workload(plan) = spec.plan else {
                panic!("a workload test");
            };
            assert_eq!(plan.time_limit.as_secs_f64(), secs, "{text}");
            assert_eq!(plan.nemesis.interval, Duration::from_millis(500));
        }
        let error = parse(&argv("0s")).expect_err("zero");
        assert!(
            error.contains("--time-limit 0s: must be a positive duration"),
            "{error}"
        );
        let error = parse(&argv("soon")).expect_err("words");
        assert!(error.contains("--time-limit soon"), "{error}");
    }
}
