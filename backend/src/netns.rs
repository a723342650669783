//! The netns backend: every node is a Linux network namespace on this machine (root only).
//!
//! ## Layout of a run
//!
//! A run has a prefix, `jh` + 6 hex digits (Linux interface names are at most 15 bytes),
//! and a /24 of the test range 10.77.0.0/16, 10.77.K.0/24, claimed through a file in
//! `/run/harness/`. It creates, in this order, recording each in its state file
//! (`/run/harness/<prefix>.json`, see [`super::state`]) before creating it:
//!
//! 1. an `unreachable` route for the whole 10.77.0.0/16 in the root namespace, so that no
//!    packet for a test address can leave the machine (shared by all runs; the last live
//!    run removes it);
//! 2. a bridge `<prefix>-br` with 10.77.K.254/24 in the root namespace, where the
//!    harness's clients run (more specific than the route, so it stays reachable);
//! 3. if bridged packets pass through the root namespace's iptables (`br_netfilter`
//!    with `bridge-nf-call-iptables` = 1) and its `FORWARD` chain is not an empty
//!    `ACCEPT` (Docker sets it to `DROP`), an `ACCEPT` rule for the bridge at its head,
//!    commented with the prefix;
//! 4. per node `n<i>`: a namespace `<prefix>-n<i>` with loopback up, a veth pair whose
//!    host side `<prefix>-v<i>` is a port of the bridge and whose other side is `eth0`
//!    with 10.77.K.i/24 inside the namespace (no default route: a node reaches only its
//!    /24), and an iptables chain `<prefix>-cuts` jumped to from `INPUT`, which holds the
//!    cuts.
//!
//! Daemons are started with `ip netns exec`, which `exec`s the command, so the pid the
//! harness gets is the daemon's own; each is recorded with its start time, and only a
//! process with that pid *and* that start time is ever signalled.
//!
//! ## Cuts
//!
//! A cut of `from → to` is a `DROP` rule for `from`'s address (and destination ports)
//! in `to`'s `<prefix>-cuts` chain: packets vanish on arrival, as in a real partition.
//! `uncut` deletes the same rules again (one instance each: `iptables -D`), `heal`
//! flushes the chain in every namespace. Traffic between the root namespace and
//! the nodes is never cut.
//!
//! ## Teardown
//!
//! [`NetnsBackend`] is the guard: dropping it tears the run down (so a `?` or a panic that
//! unwinds through its owner does), and [`Backend::teardown`] does it explicitly.
//! Teardown kills the recorded daemons (identity checked) and then whatever still runs
//! inside the run's namespaces, deletes the veths, the bridge, the namespaces and the
//! `FORWARD` rule, removes the route when no other live run remains, and finally the
//! subnet claim and the state file (kept if anything failed, for `harness clean`). Each
//! step checks that a thing exists and carries the prefix, so teardown is idempotent and
//! touches nothing else. A process that ends without unwinding (SIGKILL, `process::exit`,
//! a signal's default action) runs no destructor: call [`install_signal_teardown`] (or
//! [`teardown_all`] from the runner's own handler) for Ctrl-C and SIGTERM, and
//! [`clean_leftovers`] (`harness clean`) removes what a killed harness left.

use crate::state::{
    self, claim_path, is_prefix, prefix_of, DaemonRecord, NodeRecord, ProcessRecord, RunState,
    STATE_DIR, STATE_VERSION,
};
use crate::tools::{self, display_command, find_binary, run};
use crate::{Backend, BackendError, BoxFuture, Cut, ExecOutput, Signal};
use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

/// The test range; every run takes one /24 of it.
pub const TEST_RANGE: &str = "10.77.0.0/16";

/// Node addresses are 10.77.K.1 to 10.77.K.253 (.254 is the bridge).
pub const MAX_NODES: usize = 253;

/// How long teardown waits for killed processes to be gone.
const KILL_DEADLINE: Duration = Duration::from_secs(10);

/// How long `spawn_daemon` waits for `ip netns exec` to exec the daemon.
const EXEC_DEADLINE: Duration = Duration::from_secs(10);

/// The address of node `index` (1-based) in subnet `subnet`.
pub fn node_address(subnet: u8, index: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 77, subnet, index as u8)
}

/// The bridge's address (where the harness's clients come from).
pub fn bridge_address(subnet: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 77, subnet, 254)
}

/// The `ACCEPT` rule for a run's bridge in the root `FORWARD` chain (arguments after
/// `-I FORWARD 1` or `-D FORWARD`).
pub fn forward_rule(prefix: &str, bridge: &str) -> Vec<String> {
    [
        "-i",
        bridge,
        "-o",
        bridge,
        "-m",
        "comment",
        "--comment",
        prefix,
        "-j",
        "ACCEPT",
    ]
    .iter()
    .map(|arg| arg.to_string())
    .collect()
}

/// One iptables rule a cut adds (or removes): the node whose namespace it is in, and its
/// arguments (after `iptables -w 10`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CutRule {
    pub node: String,
    pub args: Vec<String>,
}

/// Whether [`cut_rules`] adds a cut's rules or removes them again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleVerb {
    /// `-A`: append to the chain.
    Append,
    /// `-D`: delete the first rule of the chain with the same specification, so that
    /// removing a cut made twice once leaves it in place once.
    Delete,
}

impl RuleVerb {
    /// The iptables flag.
    pub fn flag(self) -> &'static str {
        match self {
            RuleVerb::Append => "-A",
            RuleVerb::Delete => "-D",
        }
    }
}

/// The rules for `cut`: for each direction `src → dst` it covers, `DROP` rules in `dst`'s
/// `chain` for packets from `src`'s address, when the cut has ports one per port, protocol
/// (TCP and UDP) and side (to the port: requests to `dst`'s listener; for cuts both ways
/// also from it: answers of `src`'s listener), else one for everything; `verb` appends them (a cut)
/// or deletes them (an uncut), with the same specifications either way.
pub fn cut_rules(
    cut: &Cut,
    verb: RuleVerb,
    chain: &str,
    address: &dyn Fn(&str) -> Option<Ipv4Addr>,
) -> Result<Vec<CutRule>, BackendError> {
    let invalid = |reason: String| BackendError::InvalidCut {
        cut: Box::new(cut.clone()),
        reason,
    };
    let from = address(&cut.from).ok_or_else(|| invalid(format!("no node {:?}", cut.from)))?;
    let to = address(&cut.to).ok_or_else(|| invalid(format!("no node {:?}", cut.to)))?;
    if cut.from == cut.to {
        return Err(invalid("a node cannot be cut from itself".into()));
    }
    let ports: Option<BTreeSet<u16>> = cut
        .ports
        .as_ref()
        .map(|ports| ports.iter().copied().collect());
    if let Some(ports) = &ports {
        if ports.is_empty() {
            return Err(invalid(
                "an empty port list cuts nothing; use `None` for all ports".into(),
            ));
        }
        if ports.contains(&0) {
            return Err(invalid("port 0".into()));
        }
    }
    let mut directions = vec![(from, cut.to.as_str())];
    if !cut.one_way {
        directions.push((to, cut.from.as_str()));
    }
    let mut rules = Vec::new();
    for (source, node) in directions {
        let base = |extra: &[String]| {
            let mut args: Vec<String> = vec![
                verb.flag().into(),
                chain.into(),
                "-s".into(),
                format!("{source}/32"),
            ];
            args.extend(extra.iter().cloned());
            args.extend(["-j".to_string(), "DROP".to_string()]);
            CutRule {
                node: node.to_string(),
                args,
            }
        };
        match &ports {
            None => rules.push(base(&[])),
            Some(ports) => {
                // To the port (requests to the receiver's listener); for a cut both ways
                // also from it (answers of the sender's listener, e.g. to a fetch already
                // in flight), so that nothing of that traffic crosses. A one-way cut keeps
                // the answers: the receiver can still reach the sender's listener.
                let sides: &[&str] = if cut.one_way {
                    &["--dport"]
                } else {
                    &["--dport", "--sport"]
                };
                for port in ports {
                    for &direction in sides {
                        for protocol in ["tcp", "udp"] {
                            rules.push(base(&[
                                "-p".into(),
                                protocol.into(),
                                direction.into(),
                                port.to_string(),
                            ]));
                        }
                    }
                }
            }
        }
    }
    Ok(rules)
}

/// The system tools a run (or its cleanup) uses, as absolute paths.
#[derive(Debug, Clone)]
struct SysTools {
    ip: String,
    kill: String,
    iptables: Option<String>,
}

impl SysTools {
    /// Finds the tools without installing anything (for cleanup: a tool that is missing
    /// now cannot have made what is to be removed).
    fn find() -> SysTools {
        let path = |binary: &str| find_binary(binary).map(|path| path.display().to_string());
        SysTools {
            ip: path("ip").unwrap_or_else(|| "ip".into()),
            kill: path("kill").unwrap_or_else(|| "kill".into()),
            iptables: path("iptables"),
        }
    }

    fn ip(&self, args: &[&str]) -> Result<String, BackendError> {
        let mut argv = vec![self.ip.clone()];
        argv.extend(args.iter().map(|arg| arg.to_string()));
        run(&argv)
    }

    fn iptables_in(
        &self,
        namespace: Option<&str>,
        args: &[String],
    ) -> Result<String, BackendError> {
        let iptables = self
            .iptables
            .clone()
            .ok_or_else(|| BackendError::MissingTool {
                tool: "iptables".into(),
                package: "iptables".into(),
                reason: String::new(),
            })?;
        let mut argv = Vec::new();
        if let Some(namespace) = namespace {
            argv.extend([
                self.ip.clone(),
                "netns".into(),
                "exec".into(),
                namespace.into(),
            ]);
        }
        argv.extend([iptables, "-w".into(), "10".into()]);
        argv.extend(args.iter().cloned());
        run(&argv)
    }

    /// `kill -s <signal>` for the given pids.
    fn kill(&self, signal: Signal, pids: &[u32]) -> Result<String, BackendError> {
        let mut argv = vec![self.kill.clone(), "-s".into(), signal.name().into()];
        argv.extend(pids.iter().map(|pid| pid.to_string()));
        run(&argv)
    }
}

fn namespace_exists(name: &str) -> bool {
    Path::new("/run/netns").join(name).exists()
}

fn link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

/// The pids of the processes whose network namespace is the named one (what
/// `ip netns pids` prints), found by comparing `/proc/<pid>/ns/net` with the namespace's
/// inode.
fn pids_in_namespace(name: &str) -> Vec<u32> {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(Path::new("/run/netns").join(name)) else {
        return Vec::new();
    };
    let wanted = format!("net:[{}]", meta.ino());
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/ns/net"))
                .is_ok_and(|link| link.to_str() == Some(wanted.as_str()))
        })
        .collect()
}

/// What the route for the test range in the root namespace's main table is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum RouteState {
    Absent,
    Unreachable,
    Other(String),
}

fn parse_route_state(output: &str) -> RouteState {
    match output.lines().map(str::trim).find(|line| !line.is_empty()) {
        None => RouteState::Absent,
        Some(line) if line.starts_with(&format!("unreachable {TEST_RANGE}")) => {
            RouteState::Unreachable
        }
        Some(line) => RouteState::Other(line.to_string()),
    }
}

fn route_state(tools: &SysTools) -> Result<RouteState, BackendError> {
    Ok(parse_route_state(
        &tools.ip(&["-4", "route", "show", "exact", TEST_RANGE])?,
    ))
}

/// Installs the `unreachable` route unless it is there; refuses if the range is routed
/// somewhere else on this machine.
fn ensure_route(tools: &SysTools) -> Result<(), BackendError> {
    match route_state(tools)? {
        RouteState::Unreachable => Ok(()),
        RouteState::Other(line) => Err(BackendError::Setup(format!(
            "the test range {TEST_RANGE} is routed on this machine (`{line}`); the netns backend needs it unused"
        ))),
        RouteState::Absent => match tools.ip(&["route", "add", "unreachable", TEST_RANGE]) {
            Ok(_) => Ok(()),
            // Another run added it in between.
            Err(error) if route_state(tools)? == RouteState::Unreachable => {
                tracing::debug!(%error, "route added concurrently");
                Ok(())
            }
            Err(error) => Err(error),
        },
    }
}

/// Removes the `unreachable` route when no live run other than `own` remains. A run that
/// starts meanwhile may have seen the route and not added it: the second look puts it
/// back for that run, and every run checks the route again at the end of its setup.
fn release_route(
    tools: &SysTools,
    dir: &Path,
    own: Option<&str>,
) -> Result<Option<String>, BackendError> {
    let others_live = || {
        state::live_runs(dir)
            .iter()
            .any(|run| Some(run.prefix.as_str()) != own)
    };
    if others_live() || route_state(tools)? != RouteState::Unreachable {
        return Ok(None);
    }
    tools.ip(&["route", "del", "unreachable", TEST_RANGE])?;
    if others_live() {
        ensure_route(tools)?;
        return Ok(None);
    }
    Ok(Some(format!("route unreachable {TEST_RANGE}")))
}

/// What a teardown or a cleanup did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CleanReport {
    /// One line per thing removed, e.g. `namespace jh0a1b2c-n1`.
    pub removed: Vec<String>,
    /// Runs left alone because their harness is still running.
    pub skipped: Vec<String>,
    /// What could not be removed, and why.
    pub failures: Vec<String>,
}

impl CleanReport {
    fn attempt(&mut self, what: String, outcome: Result<(), BackendError>) {
        match outcome {
            Ok(()) => self.removed.push(what),
            Err(error) => self.failures.push(format!("{what}: {error}")),
        }
    }
}

/// SIGKILLs the processes and waits until they are gone; only those still alive with their
/// recorded start time are signalled.
fn kill_and_wait(
    tools: &SysTools,
    processes: &[(ProcessRecord, String)],
    report: &mut CleanReport,
) {
    let alive: Vec<&(ProcessRecord, String)> = processes
        .iter()
        .filter(|(process, _)| process.is_alive())
        .collect();
    if alive.is_empty() {
        return;
    }
    let pids: Vec<u32> = alive.iter().map(|(process, _)| process.pid).collect();
    // `kill` fails for pids that exited in between; what counts is what is left after.
    if let Err(error) = tools.kill(Signal::Kill, &pids) {
        tracing::debug!(%error, "kill");
    }
    let deadline = Instant::now() + KILL_DEADLINE;
    while alive.iter().any(|(process, _)| process.is_alive()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    for (process, what) in alive {
        if process.is_alive() {
            report.failures.push(format!(
                "{what}: still running {KILL_DEADLINE:?} after SIGKILL"
            ));
        } else {
            report.removed.push(what.clone());
        }
    }
}

/// Removes everything `run` names that still exists; the state file and subnet claim go
/// last, and only if nothing failed.
fn teardown_run(tools: &SysTools, dir: &Path, run: &RunState) -> CleanReport {
    let mut report = CleanReport::default();
    if let Err(reason) = run.validate() {
        report
            .failures
            .push(format!("state of {}: {reason}; left alone", run.prefix));
        return report;
    }
    let daemons: Vec<(ProcessRecord, String)> = run
        .daemons
        .iter()
        .map(|daemon| {
            (
                daemon.process.clone(),
                format!(
                    "daemon {} `{}` on {}",
                    daemon.process.pid,
                    display_command(&daemon.process.cmdline),
                    daemon.node
                ),
            )
        })
        .collect();
    kill_and_wait(tools, &daemons, &mut report);

    // Whatever else still runs inside the run's namespaces (commands of `exec`, children
    // of daemons) belongs to the run too.
    let mut stragglers = Vec::new();
    for node in &run.nodes {
        for pid in pids_in_namespace(&node.namespace) {
            if let Some(process) = ProcessRecord::of(pid) {
                let what = format!(
                    "process {pid} `{}` in {}",
                    display_command(&process.cmdline),
                    node.namespace
                );
                stragglers.push((process, what));
            }
        }
    }
    kill_and_wait(tools, &stragglers, &mut report);

    for node in &run.nodes {
        if link_exists(&node.host_link) {
            let outcome = tools.ip(&["link", "del", &node.host_link]).map(drop);
            // Deleting the peer (with its namespace) also deletes this end.
            let outcome = outcome.or_else(|error| {
                if link_exists(&node.host_link) {
                    Err(error)
                } else {
                    Ok(())
                }
            });
            report.attempt(format!("veth {}", node.host_link), outcome);
        }
    }
    if link_exists(&run.bridge) {
        let outcome = tools.ip(&["link", "del", &run.bridge]).map(drop);
        report.attempt(format!("bridge {}", run.bridge), outcome);
    }
    for node in &run.nodes {
        if namespace_exists(&node.namespace) {
            let outcome = tools.ip(&["netns", "del", &node.namespace]).map(drop);
            report.attempt(format!("namespace {}", node.namespace), outcome);
        }
    }
    if let Some(rule) = &run.forward_rule {
        if tools.iptables.is_some() {
            let mut check = vec!["-C".to_string(), "FORWARD".to_string()];
            check.extend(rule.iter().cloned());
            if tools.iptables_in(None, &check).is_ok() {
                let mut delete = vec!["-D".to_string(), "FORWARD".to_string()];
                delete.extend(rule.iter().cloned());
                let outcome = tools.iptables_in(None, &delete).map(drop);
                report.attempt(format!("FORWARD rule for {}", run.bridge), outcome);
            }
        }
    }
    match release_route(tools, dir, Some(&run.prefix)) {
        Ok(Some(removed)) => report.removed.push(removed),
        Ok(None) => {}
        Err(error) => report.failures.push(format!("route {TEST_RANGE}: {error}")),
    }
    if report.failures.is_empty() {
        remove_run_files(dir, run, &mut report);
    }
    report
}

/// The run's subnet claim (if it is still the run's), temporary and state file.
fn remove_run_files(dir: &Path, run: &RunState, report: &mut CleanReport) {
    let claim = claim_path(dir, run.subnet);
    let ours = std::fs::read_to_string(&claim).is_ok_and(|text| text.trim() == run.prefix);
    let temp = dir.join(format!("{}.json.tmp", run.prefix));
    let state_file = RunState::path(dir, &run.prefix);
    let mut files = vec![temp];
    if ours {
        files.push(claim);
    }
    files.push(state_file);
    for file in files {
        match std::fs::remove_file(&file) {
            Ok(()) => report.removed.push(format!("file {}", file.display())),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => report
                .failures
                .push(format!("file {}: {error}", file.display())),
        }
    }
}

/// The backend's shared core; [`NetnsBackend`] is its guard.
struct Inner {
    prefix: String,
    subnet: u8,
    dir: PathBuf,
    nodes: Vec<NodeRecord>,
    cut_chain: String,
    ip: String,
    kill: String,
    /// The iptables binary that works in the namespaces (`iptables`, or
    /// `iptables-legacy` where the kernel lacks nf_tables), chosen during setup.
    iptables: OnceLock<String>,
    candidates: Vec<String>,
    run: Mutex<Run>,
}

struct Run {
    state: RunState,
    /// Exit status of each daemon, set by its reaper thread.
    exits: HashMap<u32, Arc<Mutex<Option<ExitStatus>>>>,
    /// Teardown has started: no new work.
    closed: bool,
    /// Teardown finished without failures.
    torn_down: bool,
}

/// Every live backend of this process, for [`teardown_all`].
static LIVE: Mutex<Vec<Weak<Inner>>> = Mutex::new(Vec::new());

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl Inner {
    fn tools(&self) -> SysTools {
        SysTools {
            ip: self.ip.clone(),
            kill: self.kill.clone(),
            iptables: self
                .iptables
                .get()
                .cloned()
                .or_else(|| self.candidates.first().cloned()),
        }
    }

    fn node(&self, name: &str) -> Result<(usize, &NodeRecord), BackendError> {
        self.nodes
            .iter()
            .enumerate()
            .find(|(_, node)| node.name == name)
            .map(|(index, node)| (index + 1, node))
            .ok_or_else(|| BackendError::UnknownNode {
                node: name.to_string(),
                nodes: self.nodes.iter().map(|node| node.name.clone()).collect(),
            })
    }

    fn address(&self, name: &str) -> Option<Ipv4Addr> {
        self.node(name)
            .ok()
            .map(|(index, _)| node_address(self.subnet, index))
    }

    fn open(&self) -> Result<MutexGuard<'_, Run>, BackendError> {
        let run = lock(&self.run);
        if run.closed {
            Err(BackendError::TornDown)
        } else {
            Ok(run)
        }
    }

    fn write_state(&self, run: &Run) -> Result<(), BackendError> {
        run.state.write(&self.dir)
    }

    fn ip(&self, args: &[&str]) -> Result<String, BackendError> {
        self.tools().ip(args)
    }

    fn iptables(&self, namespace: &str, args: &[String]) -> Result<String, BackendError> {
        self.tools().iptables_in(Some(namespace), args)
    }

    /// Creates everything the state file names (it was written before this is called).
    /// Holds the run's lock throughout, so that a teardown from a signal handler waits
    /// for it instead of racing it.
    fn setup(&self) -> Result<(), BackendError> {
        let mut run = lock(&self.run);
        let tools = self.tools();
        ensure_route(&tools)?;
        let subnet = self.subnet;
        let bridge = run.state.bridge.clone();
        self.ip(&["link", "add", &bridge, "type", "bridge"])?;
        self.ip(&[
            "addr",
            "add",
            &format!("{}/24", bridge_address(subnet)),
            "dev",
            &bridge,
        ])?;
        self.ip(&["link", "set", &bridge, "up"])?;
        self.allow_bridge_forwarding(&mut run, &bridge)?;
        for (index, node) in self.nodes.iter().enumerate() {
            let index = index + 1;
            let namespace = node.namespace.as_str();
            self.ip(&["netns", "add", namespace])?;
            self.ip(&["-n", namespace, "link", "set", "lo", "up"])?;
            self.ip(&[
                "link",
                "add",
                &node.host_link,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                namespace,
            ])?;
            self.ip(&["link", "set", &node.host_link, "master", &bridge])?;
            self.ip(&["link", "set", &node.host_link, "up"])?;
            let address = format!("{}/24", node_address(subnet, index));
            self.ip(&["-n", namespace, "addr", "add", &address, "dev", "eth0"])?;
            self.ip(&["-n", namespace, "link", "set", "eth0", "up"])?;
            self.choose_iptables(namespace)?;
            self.iptables(namespace, &["-N".into(), self.cut_chain.clone()])?;
            self.iptables(
                namespace,
                &[
                    "-I".into(),
                    "INPUT".into(),
                    "1".into(),
                    "-j".into(),
                    self.cut_chain.clone(),
                ],
            )?;
        }
        // A teardown of another run may have removed the route meanwhile (see
        // `release_route`): make sure it is there before any traffic.
        ensure_route(&tools)
    }

    /// Picks the first iptables that works in `namespace` (once).
    fn choose_iptables(&self, namespace: &str) -> Result<(), BackendError> {
        if self.iptables.get().is_some() {
            return Ok(());
        }
        let mut errors = Vec::new();
        for candidate in &self.candidates {
            let tools = SysTools {
                iptables: Some(candidate.clone()),
                ..self.tools()
            };
            match tools.iptables_in(Some(namespace), &["-S".into(), "INPUT".into()]) {
                Ok(_) => {
                    let _ = self.iptables.set(candidate.clone());
                    return Ok(());
                }
                Err(error) => errors.push(error.to_string()),
            }
        }
        Err(BackendError::Setup(format!(
            "no working iptables in a network namespace: {}",
            errors.join("; ")
        )))
    }

    /// Step 3 of the layout: when bridged packets go through the root namespace's
    /// iptables and its FORWARD chain could drop them, an ACCEPT rule for the bridge.
    fn allow_bridge_forwarding(&self, run: &mut Run, bridge: &str) -> Result<(), BackendError> {
        let bridged_through_iptables =
            std::fs::read_to_string("/proc/sys/net/bridge/bridge-nf-call-iptables")
                .is_ok_and(|value| value.trim() == "1");
        if !bridged_through_iptables {
            return Ok(());
        }
        let tools = self.tools();
        let Some(iptables) = tools.iptables.clone() else {
            return Ok(());
        };
        if !root_filter_tables_exist(&iptables) {
            return Ok(());
        }
        let listing = tools.iptables_in(None, &["-S".into(), "FORWARD".into()])?;
        let lines: Vec<&str> = listing
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty())
            .collect();
        if lines == ["-P FORWARD ACCEPT"] {
            return Ok(());
        }
        let rule = forward_rule(&self.prefix, bridge);
        run.state.forward_rule = Some(rule.clone());
        self.write_state(run)?;
        let mut insert = vec!["-I".to_string(), "FORWARD".to_string(), "1".to_string()];
        insert.extend(rule);
        tools.iptables_in(None, &insert)?;
        Ok(())
    }

    fn exec_argv(&self, node: &str, argv: &[String]) -> Result<Vec<String>, BackendError> {
        let (_, record) = self.node(node)?;
        if argv.is_empty() {
            return Err(BackendError::Spawn {
                command: String::new(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "empty argv"),
            });
        }
        let mut full = vec![
            self.ip.clone(),
            "netns".into(),
            "exec".into(),
            record.namespace.clone(),
        ];
        full.extend(argv.iter().cloned());
        Ok(full)
    }

    fn spawn_daemon(
        &self,
        node: &str,
        argv: &[String],
        log_file: &Path,
    ) -> Result<u32, BackendError> {
        use std::os::unix::process::CommandExt;
        let full = self.exec_argv(node, argv)?;
        let command_text = display_command(argv);
        let start_error = |reason: String| BackendError::DaemonStart {
            node: node.to_string(),
            command: command_text.clone(),
            reason,
        };
        if let Some(parent) = log_file.parent() {
            std::fs::create_dir_all(parent).map_err(|source| BackendError::Io {
                what: "creating".into(),
                path: parent.to_path_buf(),
                source,
            })?;
        }
        let open_log = || {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log_file)
                .map_err(|source| BackendError::Io {
                    what: "opening".into(),
                    path: log_file.to_path_buf(),
                    source,
                })
        };
        let (stdout, stderr) = (open_log()?, open_log()?);
        let (pid, exit) = {
            let mut run = self.open()?;
            let mut child = Command::new(&full[0])
                .args(&full[1..])
                .stdin(Stdio::null())
                .stdout(stdout)
                .stderr(stderr)
                // Its own process group: a Ctrl-C at the terminal reaches the harness,
                // whose teardown then stops the daemons in order.
                .process_group(0)
                .spawn()
                .map_err(|source| BackendError::Spawn {
                    command: display_command(&full),
                    source,
                })?;
            let pid = child.id();
            // Not reaped yet, so /proc/<pid> is there even if it already exited.
            let Some(start_time) = state::read_stat(pid).map(|stat| stat.start_time) else {
                let _ = child.kill();
                let _ = child.wait();
                return Err(start_error(format!("cannot read /proc/{pid}/stat")));
            };
            run.state.daemons.push(DaemonRecord {
                node: node.to_string(),
                process: ProcessRecord {
                    pid,
                    start_time,
                    cmdline: argv.to_vec(),
                },
                log_file: log_file.to_path_buf(),
            });
            let exit: Arc<Mutex<Option<ExitStatus>>> = Arc::new(Mutex::new(None));
            run.exits.insert(pid, Arc::clone(&exit));
            let reaped = Arc::clone(&exit);
            let reaper = std::thread::Builder::new()
                .name(format!("reap-{pid}"))
                .spawn(move || {
                    if let Ok(status) = child.wait() {
                        *lock(&reaped) = Some(status);
                    }
                });
            if let Err(error) = reaper {
                return Err(start_error(format!("no thread to wait for it: {error}")));
            }
            self.write_state(&run)?;
            (pid, exit)
        };
        // Wait until `ip netns exec` has exec'd the daemon, so that the pid is the
        // daemon's and a command that cannot start is reported here.
        let deadline = Instant::now() + EXEC_DEADLINE;
        loop {
            if let Some(status) = *lock(&exit) {
                let tail = log_tail(log_file);
                return Err(start_error(format!(
                    "it exited at once ({status}); its log ends: {tail}"
                )));
            }
            match state::cmdline(pid) {
                Some(current) if current != full => return Ok(pid),
                _ => {}
            }
            if Instant::now() > deadline {
                let _ = self.tools().kill(Signal::Kill, &[pid]);
                return Err(start_error(format!(
                    "still not started after {EXEC_DEADLINE:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The recorded daemon `pid` on `node`, and whether it still runs. A daemon this
    /// process started runs until its reaper has waited for it: a SIGKILLed
    /// multi-threaded process shows its main thread as a zombie while its other
    /// threads are still exiting and still hold its files (its listening sockets: a
    /// restart that binds then fails with "address in use"); `wait` returns only once
    /// the whole process is gone. One recorded by another run is judged from `/proc`.
    fn daemon(&self, node: &str, pid: u32) -> Result<(ProcessRecord, bool), BackendError> {
        self.node(node)?;
        let run = self.open()?;
        let record = run
            .state
            .daemons
            .iter()
            .find(|daemon| daemon.process.pid == pid && daemon.node == node)
            .ok_or_else(|| BackendError::NotOurProcess {
                node: node.to_string(),
                pid,
            })?;
        let running = match run.exits.get(&pid) {
            Some(exit) => lock(exit).is_none(),
            None => record.process.is_alive(),
        };
        Ok((record.process.clone(), running))
    }

    fn is_running(&self, node: &str, pid: u32) -> Result<bool, BackendError> {
        let (_, running) = self.daemon(node, pid)?;
        Ok(running)
    }

    fn signal(&self, node: &str, pid: u32, signal: Signal) -> Result<(), BackendError> {
        let (_, running) = self.daemon(node, pid)?;
        if !running {
            return Err(BackendError::ProcessGone {
                node: node.to_string(),
                pid,
            });
        }
        self.tools().kill(signal, &[pid]).map(drop)
    }

    /// The rules of `cuts`, all of them built (and so every cut checked) before any is
    /// applied.
    fn rules(&self, cuts: &[Cut], verb: RuleVerb) -> Result<Vec<CutRule>, BackendError> {
        let address = |name: &str| self.address(name);
        let mut rules = Vec::new();
        for cut in cuts {
            rules.extend(cut_rules(cut, verb, &self.cut_chain, &address)?);
        }
        Ok(rules)
    }

    fn cut(&self, cuts: &[Cut]) -> Result<(), BackendError> {
        let rules = self.rules(cuts, RuleVerb::Append)?;
        let _run = self.open()?;
        for rule in rules {
            let (_, node) = self.node(&rule.node)?;
            self.iptables(&node.namespace, &rule.args)?;
        }
        Ok(())
    }

    /// Deletes the rules `cut` of the same cuts appended. Every rule is tried, so that a
    /// rule that is missing (healed meanwhile) does not keep the others in place; the
    /// first failure is returned.
    fn uncut(&self, cuts: &[Cut]) -> Result<(), BackendError> {
        let rules = self.rules(cuts, RuleVerb::Delete)?;
        let _run = self.open()?;
        let mut first_failure = None;
        for rule in rules {
            let (_, node) = self.node(&rule.node)?;
            if let Err(error) = self.iptables(&node.namespace, &rule.args) {
                tracing::debug!(node = %rule.node, %error, "removing a cut rule");
                first_failure.get_or_insert(error);
            }
        }
        first_failure.map_or(Ok(()), Err)
    }

    fn heal(&self) -> Result<(), BackendError> {
        let _run = self.open()?;
        for node in &self.nodes {
            self.iptables(&node.namespace, &["-F".into(), self.cut_chain.clone()])?;
        }
        Ok(())
    }

    fn teardown(&self) -> Result<(), BackendError> {
        let mut run = lock(&self.run);
        run.closed = true;
        if run.torn_down {
            return Ok(());
        }
        let report = teardown_run(&self.tools(), &self.dir, &run.state);
        for removed in &report.removed {
            tracing::debug!(prefix = %self.prefix, "removed {removed}");
        }
        if report.failures.is_empty() {
            run.torn_down = true;
            lock(&LIVE).retain(|weak| {
                weak.upgrade()
                    .is_some_and(|inner| inner.prefix != self.prefix)
            });
            Ok(())
        } else {
            Err(BackendError::Teardown {
                prefix: self.prefix.clone(),
                failures: report.failures,
            })
        }
    }
}

/// Whether the root namespace has an iptables filter table to look at, without creating
/// one: legacy tables are listed in `/proc/net/ip_tables_names`, and `iptables-save`
/// (without `-t`) prints only the tables that exist.
fn root_filter_tables_exist(iptables: &str) -> bool {
    let legacy = std::fs::read_to_string("/proc/net/ip_tables_names")
        .is_ok_and(|names| names.lines().any(|name| name.trim() == "filter"));
    if legacy {
        return true;
    }
    let save = format!("{iptables}-save");
    if !Path::new(&save).exists() {
        // Cannot tell: look at the chain itself.
        return true;
    }
    run(&[save]).is_ok_and(|text| text.lines().any(|line| line.starts_with(":FORWARD ")))
}

/// The last lines of a log file, for error messages.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(5)..].join(" | ");
    if tail.is_empty() {
        "(empty)".into()
    } else {
        tail
    }
}

/// Copies a file, or a folder recursively, creating `to`'s parents.
fn copy_path(from: &Path, to: &Path) -> Result<(), BackendError> {
    let io = |what: &str, path: &Path| {
        let what = what.to_string();
        let path = path.to_path_buf();
        move |source| BackendError::Io { what, path, source }
    };
    let meta = std::fs::metadata(from).map_err(io("reading", from))?;
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).map_err(io("creating", parent))?;
    }
    if meta.is_dir() {
        std::fs::create_dir_all(to).map_err(io("creating", to))?;
        for entry in std::fs::read_dir(from).map_err(io("listing", from))? {
            let entry = entry.map_err(io("listing", from))?;
            copy_path(&entry.path(), &to.join(entry.file_name()))?;
        }
    } else {
        std::fs::copy(from, to).map_err(io(&format!("copying {} to", from.display()), to))?;
    }
    Ok(())
}

/// A netns run: its nodes, and the guard that tears it down when dropped.
pub struct NetnsBackend {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for NetnsBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetnsBackend")
            .field("prefix", &self.inner.prefix)
            .field("subnet", &self.inner.subnet)
            .field("nodes", &self.inner.nodes.len())
            .finish()
    }
}

impl NetnsBackend {
    /// Creates a run of `nodes` nodes (blocking; see [`NetnsBackend::start`]). Needs root;
    /// installs `iproute2`, `iptables` or `procps` with apt if missing. On error
    /// everything created so far is removed.
    pub fn new(nodes: usize) -> Result<NetnsBackend, BackendError> {
        tools::require_root(
            "the netns backend",
            "it creates network namespaces, routes and firewall rules",
        )?;
        if nodes == 0 || nodes > MAX_NODES {
            return Err(BackendError::Setup(format!(
                "{nodes} nodes: the netns backend runs 1 to {MAX_NODES}"
            )));
        }
        let found = tools::ensure_tools(&[tools::IP, tools::IPTABLES, tools::KILL])?;
        let [ip, iptables, kill] = [0, 1, 2].map(|i| found[i].display().to_string());
        let mut candidates = vec![iptables];
        candidates.extend(find_binary("iptables-legacy").map(|path| path.display().to_string()));
        let dir = PathBuf::from(STATE_DIR);
        std::fs::create_dir_all(&dir).map_err(|source| BackendError::Io {
            what: "creating".into(),
            path: dir.clone(),
            source,
        })?;
        let owner = ProcessRecord::this_process().ok_or_else(|| {
            BackendError::Internal("cannot read this process's /proc/self/stat".into())
        })?;
        let prefix = fresh_prefix(&dir)?;
        let sys = SysTools {
            ip: ip.clone(),
            kill: kill.clone(),
            iptables: None,
        };
        let in_use = state::subnets_in_use(&sys.ip(&["-4", "-o", "addr", "show"])?);
        let subnet = state::claim_subnet(&dir, &prefix, &in_use)?;
        let node_records: Vec<NodeRecord> = (1..=nodes)
            .map(|i| NodeRecord {
                name: format!("n{i}"),
                namespace: format!("{prefix}-n{i}"),
                host_link: format!("{prefix}-v{i}"),
            })
            .collect();
        let cut_chain = format!("{prefix}-cuts");
        let run_state = RunState {
            version: STATE_VERSION,
            prefix: prefix.clone(),
            owner,
            subnet,
            bridge: format!("{prefix}-br"),
            nodes: node_records.clone(),
            cut_chain: cut_chain.clone(),
            route: TEST_RANGE.to_string(),
            forward_rule: None,
            daemons: Vec::new(),
            created: chrono::Utc::now().to_rfc3339(),
        };
        if let Err(error) = run_state.write(&dir) {
            let _ = std::fs::remove_file(claim_path(&dir, subnet));
            return Err(error);
        }
        let inner = Arc::new(Inner {
            prefix,
            subnet,
            dir,
            nodes: node_records,
            cut_chain,
            ip,
            kill,
            iptables: OnceLock::new(),
            candidates,
            run: Mutex::new(Run {
                state: run_state,
                exits: HashMap::new(),
                closed: false,
                torn_down: false,
            }),
        });
        lock(&LIVE).push(Arc::downgrade(&inner));
        // From here on, dropping the guard (on the error below too) tears the run down.
        let backend = NetnsBackend { inner };
        backend.inner.setup()?;
        Ok(backend)
    }

    /// [`NetnsBackend::new`] on tokio's blocking pool.
    pub async fn start(nodes: usize) -> Result<NetnsBackend, BackendError> {
        tokio::task::spawn_blocking(move || NetnsBackend::new(nodes))
            .await
            .map_err(|error| {
                BackendError::Internal(format!("setting up the netns backend: {error}"))
            })?
    }

    /// The run's prefix, `jh` + 6 hex digits.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// The K of the run's 10.77.K.0/24.
    pub fn subnet(&self) -> u8 {
        self.inner.subnet
    }

    /// The bridge's address, where the harness's connections to the nodes come from.
    pub fn host_address(&self) -> Ipv4Addr {
        bridge_address(self.inner.subnet)
    }

    /// The namespace of `node`.
    pub fn namespace(&self, node: &str) -> Result<&str, BackendError> {
        Ok(self.inner.node(node)?.1.namespace.as_str())
    }

    /// The run's state file.
    pub fn state_file(&self) -> PathBuf {
        RunState::path(&self.inner.dir, &self.inner.prefix)
    }

    /// Runs `f` on tokio's blocking pool with the shared core.
    fn blocking<T, F>(&self, f: F) -> BoxFuture<'static, Result<T, BackendError>>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> Result<T, BackendError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            tokio::task::spawn_blocking(move || f(&inner))
                .await
                .map_err(|error| BackendError::Internal(format!("netns backend task: {error}")))?
        })
    }
}

impl Drop for NetnsBackend {
    fn drop(&mut self) {
        if let Err(error) = self.inner.teardown() {
            eprintln!("error: {error}");
        }
    }
}

impl Backend for NetnsBackend {
    fn kind(&self) -> &'static str {
        "netns"
    }

    fn nodes(&self) -> Vec<String> {
        self.inner
            .nodes
            .iter()
            .map(|node| node.name.clone())
            .collect()
    }

    fn address(&self, node: &str) -> Result<IpAddr, BackendError> {
        let (index, _) = self.inner.node(node)?;
        Ok(IpAddr::V4(node_address(self.inner.subnet, index)))
    }

    fn exec<'a>(
        &'a self,
        node: &'a str,
        argv: &'a [String],
    ) -> BoxFuture<'a, Result<ExecOutput, BackendError>> {
        let full = self
            .inner
            .open()
            .map(drop)
            .and_then(|()| self.inner.exec_argv(node, argv));
        Box::pin(async move { tools::run_cancellable(full?).await })
    }

    fn spawn_daemon<'a>(
        &'a self,
        node: &'a str,
        argv: &'a [String],
        log_file: &'a Path,
    ) -> BoxFuture<'a, Result<u32, BackendError>> {
        let (node, argv, log_file) = (node.to_string(), argv.to_vec(), log_file.to_path_buf());
        self.blocking(move |inner| inner.spawn_daemon(&node, &argv, &log_file))
    }

    fn signal<'a>(
        &'a self,
        node: &'a str,
        pid: u32,
        signal: Signal,
    ) -> BoxFuture<'a, Result<(), BackendError>> {
        let node = node.to_string();
        self.blocking(move |inner| inner.signal(&node, pid, signal))
    }

    fn is_running<'a>(
        &'a self,
        node: &'a str,
        pid: u32,
    ) -> BoxFuture<'a, Result<bool, BackendError>> {
        let node = node.to_string();
        self.blocking(move |inner| inner.is_running(&node, pid))
    }

    fn upload<'a>(
        &'a self,
        local: &'a Path,
        node: &'a str,
        remote: &'a Path,
    ) -> BoxFuture<'a, Result<(), BackendError>> {
        let (local, node, remote) = (local.to_path_buf(), node.to_string(), remote.to_path_buf());
        self.blocking(move |inner| {
            inner.node(&node)?;
            drop(inner.open()?);
            copy_path(&local, &remote)
        })
    }

    fn download<'a>(
        &'a self,
        node: &'a str,
        remote: &'a Path,
        local: &'a Path,
    ) -> BoxFuture<'a, Result<(), BackendError>> {
        let (node, remote, local) = (node.to_string(), remote.to_path_buf(), local.to_path_buf());
        self.blocking(move |inner| {
            inner.node(&node)?;
            drop(inner.open()?);
            copy_path(&remote, &local)
        })
    }

    fn cut<'a>(&'a self, cuts: &'a [Cut]) -> BoxFuture<'a, Result<(), BackendError>> {
        let cuts = cuts.to_vec();
        self.blocking(move |inner| inner.cut(&cuts))
    }

    fn uncut<'a>(&'a self, cuts: &'a [Cut]) -> BoxFuture<'a, Result<(), BackendError>> {
        let cuts = cuts.to_vec();
        self.blocking(move |inner| inner.uncut(&cuts))
    }

    fn heal(&self) -> BoxFuture<'_, Result<(), BackendError>> {
        self.blocking(|inner| inner.heal())
    }

    fn teardown(&self) -> BoxFuture<'_, Result<(), BackendError>> {
        self.blocking(|inner| inner.teardown())
    }
}

/// A prefix no state file, namespace or link uses yet.
fn fresh_prefix(dir: &Path) -> Result<String, BackendError> {
    for _ in 0..64 {
        let prefix = state::random_prefix()?;
        let taken = RunState::path(dir, &prefix).exists()
            || namespace_exists(&format!("{prefix}-n1"))
            || link_exists(&format!("{prefix}-br"));
        if !taken {
            return Ok(prefix);
        }
    }
    Err(BackendError::Setup(
        "no unused run prefix after 64 tries".into(),
    ))
}

/// Tears down every live backend of this process, for a signal handler: the runner's own,
/// or the one [`install_signal_teardown`] installs. Returns each run's prefix and outcome.
/// Blocking.
pub fn teardown_all() -> Vec<(String, Result<(), BackendError>)> {
    let live: Vec<Arc<Inner>> = lock(&LIVE).iter().filter_map(Weak::upgrade).collect();
    live.into_iter()
        .map(|inner| (inner.prefix.clone(), inner.teardown()))
        .collect()
}

/// Installs the process's handlers for SIGINT (Ctrl-C), SIGTERM and SIGHUP, which tear
/// down every live backend of this process — netns runs through [`teardown_all`] — and
/// exit with 128 + the signal's number: [`super::install_signal_teardown`]. Call it from
/// inside a tokio runtime before creating a backend. A runner that must do more on
/// Ctrl-C (flush the history, say) installs its own handler instead and calls
/// [`teardown_all`] from it.
pub fn install_signal_teardown() -> Result<(), BackendError> {
    super::install_signal_teardown()
}

/// Removes what earlier runs left behind (`harness clean`): every run in the state folder
/// whose harness is no longer running, then namespaces, links and subnet claims that
/// carry a run prefix but belong to no live run, then the route when no live run remains.
/// Runs whose harness is still running are left alone and listed in `skipped`.
pub fn clean_leftovers() -> Result<CleanReport, BackendError> {
    tools::require_root(
        "`harness clean`",
        "it removes network namespaces, routes, firewall rules and processes",
    )?;
    let tools = SysTools::find();
    let dir = PathBuf::from(STATE_DIR);
    let mut report = CleanReport::default();
    // Prefixes not to touch: live runs, and runs whose state file cannot be read (they
    // may be live, for a newer harness).
    let mut keep: BTreeSet<String> = BTreeSet::new();
    for (path, run) in state::read_all(&dir) {
        match run {
            Ok(run) if run.is_live() => {
                report.skipped.push(format!(
                    "run {} (its harness, pid {}, is still running)",
                    run.prefix, run.owner.pid
                ));
                keep.insert(run.prefix);
            }
            Ok(run) => {
                let done = teardown_run(&tools, &dir, &run);
                report.removed.extend(done.removed);
                report.failures.extend(done.failures);
            }
            Err(error) => {
                report.failures.push(format!(
                    "{error}; left alone, remove it by hand once its run is gone"
                ));
                if let Some(prefix) = path.file_stem().and_then(|stem| stem.to_str()) {
                    keep.insert(prefix.to_string());
                }
            }
        }
    }
    // A run writes its state file before it creates anything, so a name whose run has no
    // state file (looked at now, after the listing) is a leftover, not a run starting up.
    let leftover = |name: &str| {
        prefix_of(name)
            .is_some_and(|prefix| !keep.contains(prefix) && !RunState::path(&dir, prefix).exists())
    };
    let mut stragglers = Vec::new();
    let netns = list_names(Path::new("/run/netns"));
    for name in netns.iter().filter(|name| leftover(name)) {
        for pid in pids_in_namespace(name) {
            if let Some(process) = ProcessRecord::of(pid) {
                let what = format!(
                    "process {pid} `{}` in {name}",
                    display_command(&process.cmdline)
                );
                stragglers.push((process, what));
            }
        }
    }
    kill_and_wait(&tools, &stragglers, &mut report);
    // Veths before bridges, so that deleting a veth's namespace cannot race with it.
    let mut links: Vec<String> = list_names(Path::new("/sys/class/net"))
        .into_iter()
        .filter(|name| leftover(name))
        .collect();
    links.sort_by_key(|name| name.ends_with("-br"));
    for link in links {
        if link_exists(&link) {
            let outcome = tools
                .ip(&["link", "del", &link])
                .map(drop)
                .or_else(|error| {
                    if link_exists(&link) {
                        Err(error)
                    } else {
                        Ok(())
                    }
                });
            report.attempt(format!("link {link}"), outcome);
        }
    }
    for name in netns.iter().filter(|name| leftover(name)) {
        let outcome = tools.ip(&["netns", "del", name]).map(drop);
        report.attempt(format!("namespace {name}"), outcome);
    }
    for (_, path, owner) in state::claims(&dir) {
        let orphan = match &owner {
            Some(prefix) => !keep.contains(prefix) && !RunState::path(&dir, prefix).exists(),
            None => true,
        };
        if orphan {
            let outcome = std::fs::remove_file(&path).map_err(|source| BackendError::Io {
                what: "removing".into(),
                path: path.clone(),
                source,
            });
            report.attempt(format!("file {}", path.display()), outcome);
        }
    }
    for name in list_names(&dir) {
        let stale_temp = name
            .strip_suffix(".json.tmp")
            .is_some_and(|prefix| is_prefix(prefix) && !keep.contains(prefix));
        if stale_temp {
            let path = dir.join(&name);
            let outcome = std::fs::remove_file(&path).map_err(|source| BackendError::Io {
                what: "removing".into(),
                path: path.clone(),
                source,
            });
            report.attempt(format!("file {}", path.display()), outcome);
        }
    }
    match release_route(&tools, &dir, None) {
        Ok(Some(removed)) => report.removed.push(removed),
        Ok(None) => {}
        Err(error) => report.failures.push(format!("route {TEST_RANGE}: {error}")),
    }
    Ok(report)
}

fn list_names(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addresses(name: &str) -> Option<Ipv4Addr> {
        let index: usize = name.strip_prefix('n')?.parse().ok()?;
        (1..=3).contains(&index).then(|| node_address(5, index))
    }

    fn args(rule: &CutRule) -> String {
        format!("{}: {}", rule.node, rule.args.join(" "))
    }

    #[test]
    fn a_two_way_cut_drops_both_directions_at_the_receiver() {
        let rules = cut_rules(
            &Cut::between("n1", "n2"),
            RuleVerb::Append,
            "jh000000-cuts",
            &addresses,
        )
        .expect("rules");
        assert_eq!(
            rules.iter().map(args).collect::<Vec<_>>(),
            vec![
                "n2: -A jh000000-cuts -s 10.77.5.1/32 -j DROP",
                "n1: -A jh000000-cuts -s 10.77.5.2/32 -j DROP",
            ]
        );
    }

    #[test]
    fn a_one_way_cut_drops_one_direction() {
        let rules = cut_rules(
            &Cut::between("n3", "n1").one_way(),
            RuleVerb::Append,
            "c",
            &addresses,
        )
        .expect("rules");
        assert_eq!(
            rules.iter().map(args).collect::<Vec<_>>(),
            vec!["n1: -A c -s 10.77.5.3/32 -j DROP"]
        );
    }

    #[test]
    fn a_port_cut_drops_tcp_and_udp_to_each_port_and_both_ways_also_from_it() {
        let rules = cut_rules(
            &Cut::between("n1", "n2").ports(&[9093, 80, 9093]),
            RuleVerb::Append,
            "c",
            &addresses,
        )
        .expect("rules");
        assert_eq!(
            rules.iter().map(args).collect::<Vec<_>>(),
            vec![
                "n2: -A c -s 10.77.5.1/32 -p tcp --dport 80 -j DROP",
                "n2: -A c -s 10.77.5.1/32 -p udp --dport 80 -j DROP",
                "n2: -A c -s 10.77.5.1/32 -p tcp --sport 80 -j DROP",
                "n2: -A c -s 10.77.5.1/32 -p udp --sport 80 -j DROP",
                "n2: -A c -s 10.77.5.1/32 -p tcp --dport 9093 -j DROP",
                "n2: -A c -s 10.77.5.1/32 -p udp --dport 9093 -j DROP",
                "n2: -A c -s 10.77.5.1/32 -p tcp --sport 9093 -j DROP",
                "n2: -A c -s 10.77.5.1/32 -p udp --sport 9093 -j DROP",
                "n1: -A c -s 10.77.5.2/32 -p tcp --dport 80 -j DROP",
                "n1: -A c -s 10.77.5.2/32 -p udp --dport 80 -j DROP",
                "n1: -A c -s 10.77.5.2/32 -p tcp --sport 80 -j DROP",
                "n1: -A c -s 10.77.5.2/32 -p udp --sport 80 -j DROP",
                "n1: -A c -s 10.77.5.2/32 -p tcp --dport 9093 -j DROP",
                "n1: -A c -s 10.77.5.2/32 -p udp --dport 9093 -j DROP",
                "n1: -A c -s 10.77.5.2/32 -p tcp --sport 9093 -j DROP",
                "n1: -A c -s 10.77.5.2/32 -p udp --sport 9093 -j DROP",
            ]
        );
        // An uncut deletes the very rules the cut appended.
        let one_way = cut_rules(
            &Cut::between("n2", "n3").ports(&[7]).one_way(),
            RuleVerb::Delete,
            "c",
            &addresses,
        )
        .expect("rules");
        assert_eq!(
            one_way.iter().map(args).collect::<Vec<_>>(),
            vec![
                "n3: -D c -s 10.77.5.2/32 -p tcp --dport 7 -j DROP",
                "n3: -D c -s 10.77.5.2/32 -p udp --dport 7 -j DROP",
            ]
        );
    }

    #[test]
    fn bad_cuts_are_refused() {
        for (cut, reason) in [
            (Cut::between("n1", "n1"), "itself"),
            (Cut::between("n1", "n9"), "no node \"n9\""),
            (Cut::between("x", "n1"), "no node \"x\""),
            (Cut::between("n1", "n2").ports(&[]), "empty port list"),
            (Cut::between("n1", "n2").ports(&[0]), "port 0"),
        ] {
            match cut_rules(&cut, RuleVerb::Delete, "c", &addresses) {
                Err(BackendError::InvalidCut { reason: got, .. }) => {
                    assert!(got.contains(reason), "{got}")
                }
                other => panic!("{cut:?}: expected InvalidCut, got {other:?}"),
            }
        }
    }

    #[test]
    fn addresses_and_names_fit() {
        assert_eq!(node_address(3, 1), Ipv4Addr::new(10, 77, 3, 1));
        assert_eq!(
            node_address(255, MAX_NODES),
            Ipv4Addr::new(10, 77, 255, 253)
        );
        assert_eq!(bridge_address(3), Ipv4Addr::new(10, 77, 3, 254));
        // Interface names are at most 15 bytes.
        let prefix = "jhffffff";
        for name in [format!("{prefix}-br"), format!("{prefix}-v{MAX_NODES}")] {
            assert!(name.len() <= 15, "{name}");
        }
        let rule = forward_rule(prefix, "jhffffff-br");
        assert_eq!(
            rule.join(" "),
            "-i jhffffff-br -o jhffffff-br -m comment --comment jhffffff -j ACCEPT"
        );
    }

    #[test]
    fn route_states_are_told_apart() {
        assert_eq!(parse_route_state(""), RouteState::Absent);
        assert_eq!(
            parse_route_state("unreachable 10.77.0.0/16 \n"),
            RouteState::Unreachable
        );
        assert_eq!(
            parse_route_state("10.77.0.0/16 via 192.0.2.9 dev eth0\n"),
            RouteState::Other("10.77.0.0/16 via 192.0.2.9 dev eth0".into())
        );
    }
}
