//! The ssh backend against real sshd servers: three network namespaces of the netns
//! backend, each running `/usr/sbin/sshd` on its own address with a host key and a client
//! key made here. First the library (hostile arguments, daemons, copies, cuts, teardown
//! on every path), then `harness test --backend ssh` end to end. Needs root,
//! `/usr/sbin/sshd` (openssh-server), `ssh` and `ssh-keygen` (openssh-client); otherwise
//! each test fails naming what is missing. Nothing is written to `~/.ssh`: known hosts live in the scratch folder.

mod common;

use backend::netns::NetnsBackend;
use backend::ssh::{self, Host, HostKeyPolicy, SshBackend, SshOptions};
use backend::state::ProcessRecord;
use backend::{tools, Backend, BackendError, Cut, Signal};
use common::{is_root, Scratch};
use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The tests share `/run/sshd` and namespaces: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const SSHD: &str = "/usr/sbin/sshd";

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|item| item.to_string()).collect()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Fails the calling test, naming its first missing prerequisite, unless it can run here.
#[track_caller]
fn require_prerequisites() {
    if !is_root() {
        common::missing_root();
    }
    if !Path::new(SSHD).exists() {
        common::missing(&format!("needs {SSHD} (apt-get install openssh-server)"));
    }
    for tool in ["ssh", "ssh-keygen"] {
        if tools::find_binary(tool).is_none() {
            common::missing(&format!("needs {tool} (apt-get install openssh-client)"));
        }
    }
}

fn run(argv: &[&str]) -> String {
    tools::run(&strings(argv)).unwrap_or_else(|error| panic!("{error}"))
}

/// What `~/.ssh` holds: names, sizes and modification times (nothing may change it).
fn ssh_dir_snapshot() -> Option<Vec<(String, u64, Option<std::time::SystemTime>)>> {
    let home = std::env::var_os("HOME")?;
    let dir = Path::new(&home).join(".ssh");
    let entries = std::fs::read_dir(&dir).ok()?;
    let mut found: Vec<_> = entries
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let meta = entry.metadata().ok()?;
            Some((
                entry.file_name().to_string_lossy().into_owned(),
                meta.len(),
                meta.modified().ok(),
            ))
        })
        .collect();
    found.sort();
    Some(found)
}

/// The control folders of ssh backends in the temp dir.
fn control_dirs() -> BTreeSet<String> {
    std::fs::read_dir(std::env::temp_dir())
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
                .filter(|name| name.starts_with("harness-ssh-jh"))
                .collect()
        })
        .unwrap_or_default()
}

/// Live processes whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<String> {
    let own = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != own)
        .filter_map(|pid| {
            let record = ProcessRecord::of(pid)?;
            (record.is_alive() && record.cmdline.iter().any(|arg| arg.contains(needle)))
                .then(|| format!("{pid} {:?}", record.cmdline))
        })
        .collect()
}

/// Live processes whose command line mentions `needle`, with their identity.
fn process_records_mentioning(needle: &str) -> Vec<ProcessRecord> {
    let own = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != own)
        .filter_map(ProcessRecord::of)
        .filter(|record| record.is_alive() && record.cmdline.iter().any(|arg| arg.contains(needle)))
        .collect()
}

/// Every file and folder under `dir` (relative), sorted.
fn tree(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&current) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            found.push(
                path.strip_prefix(dir)
                    .unwrap_or(&path)
                    .display()
                    .to_string(),
            );
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    found.sort();
    found
}

/// Three namespaces, each running sshd; keys, known_hosts and an ssh config in the
/// scratch folder. Dropping it stops everything (the namespaces' teardown kills sshd).
struct Hosts {
    runtime: tokio::runtime::Runtime,
    netns: Option<NetnsBackend>,
    scratch: Scratch,
    key: PathBuf,
    config: PathBuf,
    created_run_sshd: bool,
    ssh_before: Option<Vec<(String, u64, Option<std::time::SystemTime>)>>,
}

impl Hosts {
    fn new(name: &str) -> Hosts {
        let runtime = runtime();
        let scratch = Scratch::new(&format!("ssh-{name}"));
        let dir = scratch.0.clone();
        let ssh_before = ssh_dir_snapshot();
        let created_run_sshd = !Path::new("/run/sshd").exists();
        if created_run_sshd {
            std::fs::create_dir_all("/run/sshd").expect("/run/sshd");
        }
        let netns = runtime
            .block_on(NetnsBackend::start(3))
            .expect("namespaces");
        let key = dir.join("client_key");
        let host_key = dir.join("host_key");
        for path in [&key, &host_key] {
            run(&[
                "ssh-keygen",
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                "harness-test",
                "-f",
                &path.display().to_string(),
            ]);
        }
        std::fs::copy(dir.join("client_key.pub"), dir.join("authorized_keys"))
            .expect("authorized_keys");
        let host_public = std::fs::read_to_string(dir.join("host_key.pub")).expect("host key");
        let host_public: Vec<&str> = host_public.split_whitespace().take(2).collect();
        let mut known_hosts = String::new();
        let mut hosts = Hosts {
            runtime,
            netns: None,
            scratch,
            key,
            config: dir.join("ssh_config"),
            created_run_sshd,
            ssh_before,
        };
        for node in netns.nodes() {
            let ip = netns.address(&node).expect("address");
            let config = dir.join(format!("sshd-{node}.conf"));
            // `SetEnv SHLVL=1`: bash sources ~/.bashrc for every command sshd runs unless
            // SHLVL says it is nested; a developer's bashrc (pyenv init: ~200 ms) would
            // otherwise dominate every command of these stand-ins for lean machines.
            std::fs::write(
                &config,
                format!(
                    "ListenAddress {ip}\nPort 22\nHostKey {}\nAuthorizedKeysFile {}\n\
                     PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\n\
                     PidFile none\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nSetEnv SHLVL=1\n",
                    host_key.display(),
                    dir.join("authorized_keys").display()
                ),
            )
            .expect("sshd config");
            let argv = strings(&[SSHD, "-D", "-e", "-f", &config.display().to_string()]);
            let log = dir.join(format!("sshd-{node}.log"));
            hosts
                .runtime
                .block_on(netns.spawn_daemon(&node, &argv, &log))
                .unwrap_or_else(|error| panic!("sshd on {node}: {error}"));
            known_hosts.push_str(&format!("{ip} {}\n", host_public.join(" ")));
        }
        std::fs::write(dir.join("known_hosts"), known_hosts).expect("known_hosts");
        std::fs::write(
            &hosts.config,
            format!(
                "UserKnownHostsFile {}\nGlobalKnownHostsFile /dev/null\nUser root\n",
                dir.join("known_hosts").display()
            ),
        )
        .expect("ssh config");
        for node in netns.nodes() {
            let ip = netns.address(&node).expect("address");
            let deadline = Instant::now() + Duration::from_secs(20);
            while TcpStream::connect_timeout(&SocketAddr::new(ip, 22), Duration::from_secs(1))
                .is_err()
            {
                assert!(Instant::now() < deadline, "sshd on {node} does not listen");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        hosts.netns = Some(netns);
        hosts
    }

    fn netns(&self) -> &NetnsBackend {
        self.netns.as_ref().expect("namespaces")
    }

    fn dir(&self) -> &Path {
        &self.scratch.0
    }

    fn remote_dir(&self) -> PathBuf {
        self.dir().join("remote")
    }

    fn address(&self, node: &str) -> IpAddr {
        self.netns().address(node).expect("address")
    }

    /// The hosts, with labels no shell may interpret (they are only ever shown).
    fn host_list(&self) -> Vec<Host> {
        ["db-1;$(touch_x)", "db-2`x`", "db-3'"]
            .iter()
            .zip(self.netns().nodes())
            .map(|(label, node)| Host {
                label: label.to_string(),
                address: self.address(&node).to_string(),
                user: Some("root".into()),
                port: Some(22),
                identity_file: None,
            })
            .collect()
    }

    fn options(&self) -> SshOptions {
        SshOptions {
            hosts: self.host_list(),
            identity_file: Some(self.key.clone()),
            config_file: Some(self.config.clone()),
            host_keys: HostKeyPolicy::Strict,
            remote_dir: self.remote_dir(),
        }
    }

    fn start(&self) -> SshBackend {
        self.runtime
            .block_on(SshBackend::start(self.options(), 3))
            .unwrap_or_else(|error| panic!("starting the ssh backend: {error}"))
    }

    /// The chains of every namespace other than the netns run's own.
    fn foreign_chains(&self) -> Vec<String> {
        let netns = self.netns();
        let own = format!("{}-cuts", netns.prefix());
        let mut found = Vec::new();
        for node in netns.nodes() {
            let namespace = netns.namespace(&node).expect("namespace");
            for line in run(&[
                "ip", "netns", "exec", namespace, "iptables", "-w", "10", "-S",
            ])
            .lines()
            {
                let mentions_other = line
                    .split_whitespace()
                    .any(|word| word.starts_with("jh") && word.ends_with("-cuts") && word != own);
                if mentions_other {
                    found.push(format!("{node}: {line}"));
                }
            }
        }
        found
    }

    /// `iptables -S <chain>` in a node's namespace (None when the chain is missing).
    fn chain_rules(&self, node: &str, chain: &str) -> Option<Vec<String>> {
        let namespace = self.netns().namespace(node).expect("namespace").to_string();
        let argv = strings(&[
            "ip", "netns", "exec", &namespace, "iptables", "-w", "10", "-S", chain,
        ]);
        tools::run(&argv).ok().map(|text| {
            text.lines()
                .filter(|line| line.starts_with("-A"))
                .map(str::to_string)
                .collect()
        })
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        if let Some(netns) = self.netns.take() {
            if let Err(error) = self.runtime.block_on(netns.teardown()) {
                eprintln!("tearing down the namespaces: {error}");
            }
        }
        if self.created_run_sshd {
            let _ = std::fs::remove_dir("/run/sshd");
        }
        if !std::thread::panicking() {
            assert_eq!(ssh_dir_snapshot(), self.ssh_before, "~/.ssh changed");
        }
    }
}

/// Whether `from` connects to `to`'s sshd and reads its banner (2 s at most; on a veth
/// both take well under a millisecond).
async fn reaches(backend: &SshBackend, hosts: &Hosts, from: &str, to: &str) -> bool {
    let argv = vec![
        "timeout".to_string(),
        "2".to_string(),
        "bash".to_string(),
        "-c".to_string(),
        "exec 3<>\"/dev/tcp/$1/22\" && head -c 7 <&3".to_string(),
        "probe".to_string(),
        hosts.address(to).to_string(),
    ];
    match backend.exec(from, &argv).await {
        Ok(output) => output.stdout == "SSH-2.0",
        Err(BackendError::Command { .. }) => false,
        Err(error) => panic!("probing {from} → {to}: {error}"),
    }
}

/// The ordered pairs of nodes that do not reach each other (probed in parallel).
async fn blocked(backend: &SshBackend, hosts: &Hosts) -> BTreeSet<(String, String)> {
    let nodes = backend.nodes();
    let pairs: Vec<(String, String)> = nodes
        .iter()
        .flat_map(|a| {
            nodes
                .iter()
                .filter(move |b| *b != a)
                .map(move |b| (a.clone(), b.clone()))
        })
        .collect();
    let results = backend::join_all(pairs.iter().map(|(a, b)| reaches(backend, hosts, a, b))).await;
    pairs
        .into_iter()
        .zip(results)
        .filter(|(_, reached)| !*reached)
        .map(|(pair, _)| pair)
        .collect()
}

fn pair_set(list: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    list.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// Deterministic pseudo-random bytes.
fn noise(len: usize, mut seed: u64) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(len + 8);
    while bytes.len() < len {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        bytes.extend_from_slice(&seed.to_le_bytes());
    }
    bytes.truncate(len);
    bytes
}

fn hostile_args(pwned: &Path) -> Vec<String> {
    let pwned = pwned.display().to_string();
    let mut args = strings(&[
        "",
        " ",
        "two words",
        "'",
        "it's",
        "\"",
        "a\nb",
        "\n",
        "*",
        "/*",
        "?",
        "~",
        "-n",
        "--",
        "$HOME",
        "${HOME}",
        "\\",
        "'\\''",
        "!",
        "{a,b}",
        "a=b",
        "%s",
        "ünï ✓",
        "\t",
    ]);
    args.extend([
        format!("$(touch {pwned})"),
        format!("`touch {pwned}`"),
        format!("; touch {pwned}"),
        format!("&& touch {pwned}"),
        format!("| touch {pwned}"),
        format!("> {pwned}"),
        format!("'; touch {pwned}; '"),
        format!("\"; touch {pwned}; \""),
        format!("\ntouch {pwned}\n"),
    ]);
    args
}

fn split_nul(text: &str) -> Vec<String> {
    let mut parts: Vec<String> = text.split('\0').map(str::to_string).collect();
    assert_eq!(parts.pop().as_deref(), Some(""), "ends with NUL: {text:?}");
    parts
}

#[test]
#[allow(non_snake_case)]
fn needs_sshd__the_ssh_backend_runs_commands_daemons_copies_and_cuts_and_removes_everything() {
    require_prerequisites();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let started = Instant::now();
    let hosts = Hosts::new("lib");
    let controls_before = control_dirs();
    let backend = hosts.start();
    eprintln!("hosts and backend up in {:?}", started.elapsed());
    let rt = &hosts.runtime;
    let nodes = backend.nodes();
    assert_eq!(nodes, strings(&["n1", "n2", "n3"]));
    assert_eq!(backend.kind(), "ssh");
    for node in &nodes {
        assert_eq!(backend.address(node).expect("address"), hosts.address(node));
    }
    assert_eq!(
        backend.describe("n1"),
        format!("n1 (db-1;$(touch_x), root@{}:22)", hosts.address("n1"))
    );
    let run_id = backend.run_id().to_string();
    assert_eq!(backend.run_dir(), hosts.remote_dir().join(&run_id));
    assert!(backend.run_dir().is_dir(), "the run folder exists");
    assert!(backend.control_dir().is_dir(), "the control folder exists");
    for node in &nodes {
        assert_eq!(
            hosts.chain_rules(node, backend.chain()),
            Some(Vec::new()),
            "{node}: an empty cut chain"
        );
    }
    assert!(matches!(
        backend.address("n9"),
        Err(BackendError::UnknownNode { .. })
    ));

    // exec: hostile arguments arrive byte for byte and run nothing.
    let pwned = hosts.dir().join("pwned");
    let args = hostile_args(&pwned);
    let mut argv = strings(&["printf", "%s\\000"]);
    argv.extend(args.iter().cloned());
    let output = rt.block_on(backend.exec("n1", &argv)).expect("printf");
    assert_eq!(split_nul(&output.stdout), args);
    assert_eq!(output.stderr, "");
    // A program whose path needs quoting, too.
    let program_dir = hosts.dir().join("bin dir $(x)");
    std::fs::create_dir_all(&program_dir).expect("dir");
    let program = program_dir.join("it's `a` prog;");
    std::fs::write(&program, "#!/bin/sh\nprintf '%s\\0' \"$0\" \"$@\"\n").expect("program");
    run(&["chmod", "755", &program.display().to_string()]);
    let mut argv = vec![program.display().to_string()];
    argv.extend(args.iter().cloned());
    let output = rt.block_on(backend.exec("n2", &argv)).expect("program");
    assert_eq!(split_nul(&output.stdout), argv);
    assert!(!pwned.exists(), "a hostile argument ran a command");

    // exec: failures carry the status, stdout and stderr; 255 is a status, not a lost
    // connection.
    for (code, node) in [(3, "n1"), (255, "n3")] {
        let argv = vec![
            "sh".to_string(),
            "-c".to_string(),
            format!("echo out; echo err >&2; exit {code}"),
        ];
        match rt.block_on(backend.exec(node, &argv)) {
            Err(BackendError::Command {
                command,
                status,
                stdout,
                stderr,
            }) => {
                assert!(command.starts_with(&format!("{node}: sh -c")), "{command}");
                assert_eq!(status, format!("exit {code}"));
                assert_eq!((stdout.as_str(), stderr.as_str()), ("out\n", "err\n"));
            }
            other => panic!("expected a command error, got {other:?}"),
        }
    }
    match rt.block_on(backend.exec("n1", &strings(&["/nonexistent/tool", "x"]))) {
        Err(error @ BackendError::Command { .. }) => {
            let message = error.to_string();
            assert!(
                message.contains("exit 127") && message.contains("/nonexistent/tool"),
                "{message}"
            );
        }
        other => panic!("expected a command error, got {other:?}"),
    }
    assert!(matches!(
        rt.block_on(backend.exec("n7", &strings(&["true"]))),
        Err(BackendError::UnknownNode { .. })
    ));
    assert!(matches!(
        rt.block_on(backend.exec("n1", &[])),
        Err(BackendError::Spawn { .. })
    ));
    // Many at once on one host (more than sshd's 10 sessions per connection).
    let argvs: Vec<Vec<String>> = (0..24)
        .map(|i| vec!["echo".to_string(), i.to_string()])
        .collect();
    let outputs: Vec<String> = rt
        .block_on(backend::join_all(
            argvs.iter().map(|argv| backend.exec("n2", argv)),
        ))
        .into_iter()
        .map(|outcome| outcome.expect("echo").stdout)
        .collect();
    assert_eq!(
        outputs,
        (0..24).map(|i| format!("{i}\n")).collect::<Vec<_>>()
    );

    let timer = Instant::now();
    for _ in 0..10 {
        rt.block_on(backend.exec("n1", &strings(&["true"])))
            .expect("true");
    }
    eprintln!("one exec takes {:?}", timer.elapsed() / 10);

    // exec: dropping the future kills the remote command.
    let pid_file = hosts.dir().join("exec pid");
    let argv = vec![
        "sh".to_string(),
        "-c".to_string(),
        "echo $$ > \"$1\"; exec sleep 60".to_string(),
        "x".to_string(),
        pid_file.display().to_string(),
    ];
    let sleeper = rt.block_on(async {
        let mut command = backend.exec("n3", &argv);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            tokio::select! {
                outcome = &mut command => panic!("the command ended early: {outcome:?}"),
                _ = tokio::time::sleep(Duration::from_millis(10)) => {}
            }
            let text = std::fs::read_to_string(&pid_file).unwrap_or_default();
            if let Ok(pid) = text.trim().parse::<u32>() {
                let record = ProcessRecord::of(pid).expect("sleep runs");
                if record.cmdline.first().map(String::as_str) == Some("sleep") {
                    break record;
                }
            }
            assert!(Instant::now() < deadline, "no pid written");
        }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while sleeper.is_alive() {
        assert!(
            Instant::now() < deadline,
            "the remote command survived the drop"
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    // Daemons: the pid is the daemon's own; signals and liveness are identity checked.
    let log = backend
        .run_dir()
        .join("n1")
        .join("logs 'x' $(y)")
        .join("d;1.log");
    let pid = rt
        .block_on(backend.spawn_daemon(
            "n1",
            &strings(&[
                "sh",
                "-c",
                "echo hello-log \"$1\"; exec sleep 600",
                "sh",
                "it's",
            ]),
            &log,
        ))
        .expect("spawn");
    let daemon = ProcessRecord::of(pid).expect("the daemon runs");
    assert_eq!(
        daemon.cmdline,
        strings(&["sleep", "600"]),
        "the daemon's own pid"
    );
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(logged, "hello-log it's\n");
    assert!(rt.block_on(backend.is_running("n1", pid)).expect("running"));
    rt.block_on(backend.signal("n1", pid, Signal::Stop))
        .expect("stop");
    assert!(rt
        .block_on(backend.is_running("n1", pid))
        .expect("a stopped daemon runs"));
    rt.block_on(backend.signal("n1", pid, Signal::Cont))
        .expect("cont");
    assert!(matches!(
        rt.block_on(backend.signal("n2", pid, Signal::Kill)),
        Err(BackendError::NotOurProcess { .. })
    ));
    assert!(matches!(
        rt.block_on(backend.signal("n1", 1, Signal::Kill)),
        Err(BackendError::NotOurProcess { .. })
    ));
    let short = rt
        .block_on(backend.spawn_daemon(
            "n2",
            &strings(&["sleep", "600"]),
            &backend.run_dir().join("n2/short.log"),
        ))
        .expect("spawn");
    rt.block_on(backend.signal("n2", short, Signal::Term))
        .expect("term");
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(10);
        while backend.is_running("n2", short).await.expect("is_running") {
            assert!(Instant::now() < deadline, "SIGTERM did not stop sleep");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    assert!(matches!(
        rt.block_on(backend.signal("n2", short, Signal::Kill)),
        Err(BackendError::ProcessGone { .. })
    ));
    match rt.block_on(backend.spawn_daemon(
        "n3",
        &strings(&["sh", "-c", "echo boom; exit 7"]),
        &backend.run_dir().join("n3/fails.log"),
    )) {
        Err(BackendError::DaemonStart { node, reason, .. }) => {
            assert_eq!(node, "n3");
            assert!(
                reason.contains("exit 7") && reason.contains("boom"),
                "{reason}"
            );
        }
        other => panic!("expected DaemonStart, got {other:?}"),
    }

    // Copies: a few MB both ways, paths that need quoting, the mode kept, folders.
    let local = hosts.dir().join("local");
    std::fs::create_dir_all(&local).expect("local");
    let data = noise(3 * 1024 * 1024 + 17, 7);
    let source = local.join("data.bin");
    std::fs::write(&source, &data).expect("data");
    let remote = backend
        .run_dir()
        .join("n2")
        .join("up 'q' $(x)")
        .join("da ta;.bin");
    rt.block_on(backend.upload(&source, "n2", &remote))
        .expect("upload");
    assert_eq!(std::fs::read(&remote).expect("uploaded"), data);
    let back = local.join("down").join("data.bin");
    rt.block_on(backend.download("n2", &remote, &back))
        .expect("download");
    assert_eq!(std::fs::read(&back).expect("downloaded"), data);
    let script = local.join("script.sh");
    std::fs::write(&script, "#!/bin/sh\necho ran\n").expect("script");
    run(&["chmod", "750", &script.display().to_string()]);
    let remote_script = backend.run_dir().join("n3/bin/script.sh");
    rt.block_on(backend.upload(&script, "n3", &remote_script))
        .expect("upload");
    let output = rt
        .block_on(backend.exec("n3", &[remote_script.display().to_string()]))
        .expect("the uploaded script runs");
    assert_eq!(output.stdout, "ran\n");
    let folder = local.join("folder");
    std::fs::create_dir_all(folder.join("sub dir")).expect("folder");
    std::fs::write(folder.join("a"), b"alpha").expect("a");
    std::fs::write(folder.join("sub dir").join("b'"), noise(5000, 3)).expect("b");
    let remote_folder = backend.run_dir().join("n1/folder $(z)");
    rt.block_on(backend.upload(&folder, "n1", &remote_folder))
        .expect("upload folder");
    let folder_back = local.join("folder back");
    rt.block_on(backend.download("n1", &remote_folder, &folder_back))
        .expect("download folder");
    assert_eq!(tree(&folder_back), tree(&folder));
    assert_eq!(
        std::fs::read(folder_back.join("sub dir/b'")).expect("b"),
        noise(5000, 3)
    );
    match rt.block_on(backend.download("n1", &backend.run_dir().join("missing"), &local.join("m")))
    {
        Err(BackendError::Command { stderr, .. }) => {
            assert!(stderr.contains("No such file"), "{stderr}")
        }
        other => panic!("expected a command error, got {other:?}"),
    }
    // The upload speed of a broker-sized file.
    let big = local.join("big.bin");
    std::fs::write(&big, noise(70 * 1024 * 1024, 11)).expect("big");
    let timer = Instant::now();
    rt.block_on(backend.upload(&big, "n3", &backend.run_dir().join("n3/big.bin")))
        .expect("upload 70 MB");
    let secs = timer.elapsed().as_secs_f64();
    eprintln!("uploaded 70 MiB in {secs:.2} s ({:.0} MiB/s)", 70.0 / secs);
    assert_eq!(
        std::fs::metadata(backend.run_dir().join("n3/big.bin"))
            .expect("big")
            .len(),
        70 * 1024 * 1024
    );
    let _ = std::fs::remove_file(&big);

    // Cuts: DROP rules at the receiver; they add up, uncut exactly, heal.
    rt.block_on(async {
        assert_eq!(
            blocked(&backend, &hosts).await,
            BTreeSet::new(),
            "before any cut"
        );
        let cut = [Cut::between("n1", "n2")];
        backend.cut(&cut).await.expect("cut");
        backend.cut(&cut).await.expect("cut again");
        let both = pair_set(&[("n1", "n2"), ("n2", "n1")]);
        assert_eq!(blocked(&backend, &hosts).await, both, "n1 and n2 cut");
        backend.uncut(&cut).await.expect("uncut");
        assert_eq!(
            blocked(&backend, &hosts).await,
            both,
            "cut twice, uncut once"
        );
        backend.uncut(&cut).await.expect("uncut again");
        assert_eq!(
            blocked(&backend, &hosts).await,
            BTreeSet::new(),
            "uncut twice"
        );
        match backend.uncut(&cut).await {
            Err(BackendError::Command { command, .. }) => {
                assert!(command.contains("-D"), "{command}")
            }
            other => panic!("an uncut of no cut must fail, got {other:?}"),
        }
        backend
            .cut(&[
                Cut::between("n3", "n1").ports(&[22]),
                Cut::between("n2", "n3").one_way(),
            ])
            .await
            .expect("cuts");
        assert_eq!(
            hosts
                .chain_rules("n1", backend.chain())
                .map(|rules| rules.len()),
            Some(4),
            "a port cut both ways: tcp and udp, to and from the port"
        );
        let expected = pair_set(&[("n3", "n1"), ("n1", "n3"), ("n2", "n3"), ("n3", "n2")]);
        assert_eq!(
            blocked(&backend, &hosts).await,
            expected,
            "port and one-way cuts"
        );
        backend.heal().await.expect("heal");
        assert_eq!(blocked(&backend, &hosts).await, BTreeSet::new(), "healed");
        assert!(backend
            .uncut(&[Cut::between("n2", "n3").one_way()])
            .await
            .is_err());
        for bad in [Cut::between("n1", "n1"), Cut::between("n1", "n4")] {
            assert!(
                matches!(
                    backend.cut(std::slice::from_ref(&bad)).await,
                    Err(BackendError::InvalidCut { .. })
                ),
                "{bad:?}"
            );
        }
    });
    for node in &nodes {
        assert_eq!(hosts.chain_rules(node, backend.chain()), Some(Vec::new()));
    }

    // Teardown: daemons, chains, the run folder and the connections go; twice is fine.
    let control = backend.control_dir().to_path_buf();
    rt.block_on(backend.teardown()).expect("teardown");
    assert!(!daemon.is_alive(), "the daemon survived teardown");
    assert!(
        !backend.run_dir().exists(),
        "the run folder survived teardown"
    );
    assert_eq!(tree(&hosts.remote_dir()), Vec::<String>::new());
    assert_eq!(hosts.foreign_chains(), Vec::<String>::new());
    assert!(!control.exists(), "the control folder survived teardown");
    assert!(processes_mentioning(&control.display().to_string()).is_empty());
    rt.block_on(backend.teardown()).expect("a second teardown");
    assert!(matches!(
        rt.block_on(backend.exec("n1", &strings(&["true"]))),
        Err(BackendError::TornDown)
    ));
    assert!(matches!(
        rt.block_on(backend.cut(&[Cut::between("n1", "n2")])),
        Err(BackendError::TornDown)
    ));
    assert!(matches!(
        rt.block_on(backend.spawn_daemon("n1", &strings(&["true"]), &log)),
        Err(BackendError::TornDown)
    ));
    drop(backend);

    // Dropping a backend tears it down; so does teardown_all (the Ctrl-C handler's);
    // teardown reconnects to hosts whose connection was lost, and ends commands still
    // running.
    for path in [
        "drop",
        "teardown_all",
        "lost connection",
        "teardown during a command",
    ] {
        let backend = hosts.start();
        let pid = rt
            .block_on(backend.spawn_daemon(
                "n2",
                &strings(&["sleep", "600"]),
                &backend.run_dir().join("n2/d.log"),
            ))
            .expect("spawn");
        let daemon = ProcessRecord::of(pid).expect("daemon");
        rt.block_on(backend.cut(&[Cut::between("n1", "n3")]))
            .expect("cut");
        let (run_dir, control) = (
            backend.run_dir().to_path_buf(),
            backend.control_dir().to_path_buf(),
        );
        if path == "drop" {
            drop(backend);
        } else if path == "teardown during a command" {
            let pid_file = hosts.dir().join("long pid");
            let _ = std::fs::remove_file(&pid_file);
            let argv = vec![
                "sh".to_string(),
                "-c".to_string(),
                "echo $$ > \"$1\"; exec sleep 60".to_string(),
                "x".to_string(),
                pid_file.display().to_string(),
            ];
            let (outcome, sleeper) = rt.block_on(async {
                let command = backend.exec("n1", &argv);
                let teardown = async {
                    let deadline = Instant::now() + Duration::from_secs(10);
                    let sleeper = loop {
                        let text = std::fs::read_to_string(&pid_file).unwrap_or_default();
                        let record = text.trim().parse().ok().and_then(ProcessRecord::of);
                        if let Some(record) = record.filter(|r| r.cmdline[0] == "sleep") {
                            break record;
                        }
                        assert!(Instant::now() < deadline, "the command did not start");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    };
                    backend.teardown().await.expect("teardown during a command");
                    sleeper
                };
                tokio::join!(command, teardown)
            });
            assert!(
                outcome.is_err(),
                "the command ended by teardown: {outcome:?}"
            );
            let deadline = Instant::now() + Duration::from_secs(10);
            while sleeper.is_alive() {
                assert!(Instant::now() < deadline, "the command survived teardown");
                std::thread::sleep(Duration::from_millis(10));
            }
            drop(backend);
        } else if path == "lost connection" {
            let masters = process_records_mentioning(&control.display().to_string());
            assert!(!masters.is_empty(), "no ControlMaster processes");
            for master in &masters {
                // Our own ssh processes, by pid.
                let _ = tools::run(&strings(&["kill", "-s", "KILL", &master.pid.to_string()]));
            }
            match rt.block_on(backend.exec("n1", &strings(&["true"]))) {
                Err(error @ BackendError::Command { .. }) => {
                    let message = error.to_string();
                    assert!(message.contains("connection to n1"), "{message}");
                }
                other => panic!("expected a command error, got {other:?}"),
            }
            assert!(daemon.is_alive(), "the daemon outlives the connection");
            rt.block_on(backend.teardown())
                .expect("teardown after a lost connection");
            drop(backend);
        } else {
            let outcomes = rt.block_on(ssh::teardown_all());
            let run_id = backend.run_id().to_string();
            assert!(
                outcomes
                    .iter()
                    .any(|(id, outcome)| *id == run_id && outcome.is_ok()),
                "{outcomes:?}"
            );
            drop(backend);
        }
        assert!(!daemon.is_alive(), "{path}: the daemon survived");
        assert!(!run_dir.exists(), "{path}: the run folder survived");
        assert!(!control.exists(), "{path}: the control folder survived");
        assert_eq!(
            processes_mentioning(&control.display().to_string()),
            Vec::<String>::new(),
            "{path}: ssh processes of the run"
        );
        assert_eq!(hosts.foreign_chains(), Vec::<String>::new(), "{path}");
    }
    assert_eq!(control_dirs(), controls_before);

    // A host that refuses the key: a clear error, nothing left.
    let mut options = hosts.options();
    options.identity_file = Some(hosts.dir().join("host_key"));
    match rt.block_on(SshBackend::start(options, 2)) {
        Err(error) => {
            let message = error.to_string();
            assert!(message.contains("connecting to n1"), "{message}");
        }
        Ok(backend) => panic!("connected with the wrong key: {backend:?}"),
    }
    assert_eq!(control_dirs(), controls_before);
    assert_eq!(tree(&hosts.remote_dir()), Vec::<String>::new());
    eprintln!("library test done in {:?}", started.elapsed());
}

#[test]
#[allow(non_snake_case)]
fn needs_sshd__harness_test_over_ssh_ends_valid_and_leaves_nothing_behind() {
    require_prerequisites();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let broker = driver::build_broker().expect("building the broker");
    let started = Instant::now();
    let hosts = Hosts::new("e2e");
    let controls_before = control_dirs();
    let nodes_file = hosts.dir().join("nodes.txt");
    let mut text = String::from("# the test's hosts\n");
    for (index, node) in hosts.netns().nodes().iter().enumerate() {
        text.push_str(&format!(
            "db-{} {} root 22\n",
            index + 1,
            hosts.address(node)
        ));
    }
    std::fs::write(&nodes_file, text).expect("nodes file");
    let store = hosts.dir().join("store");
    let remote = hosts.remote_dir();
    let output = harness_test_over_ssh(&hosts, &nodes_file)
        .args([
            "--nodes",
            "3",
            "--time-limit",
            "10",
            "--nemesis",
            "partition,kill",
            "--nemesis-interval",
            "2",
            "--partitions",
            "2",
            "--concurrency",
            "4",
            "--seed",
            "20260901",
            "--broker-bin",
        ])
        .arg(&broker)
        .arg("--store")
        .arg(&store)
        .output()
        .expect("run harness test");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let all = format!("{stdout}\n--- stderr ---\n{stderr}");
    eprintln!("harness test --backend ssh took {:?}", started.elapsed());
    assert_eq!(output.status.code(), Some(0), "{all}");
    let last: Vec<&str> = stdout.lines().rev().take(2).collect();
    assert!(last[0].starts_with("verdict: valid"), "{all}");
    let run_dir = PathBuf::from(
        last[1]
            .strip_prefix("run:")
            .map(str::trim)
            .unwrap_or_else(|| panic!("no run line\n{all}")),
    );
    for node in ["n1", "n2", "n3"] {
        let log = run_dir.join("nodes").join(node).join("broker.log");
        let size = std::fs::metadata(&log).map(|meta| meta.len()).unwrap_or(0);
        assert!(size > 0, "{} is missing or empty\n{all}", log.display());
    }
    assert!(
        stderr.contains(&format!("n1: n1 (db-1, root@{}:22)", hosts.address("n1"))),
        "{all}"
    );
    // The faults went through the backend: the history has both packages' steps.
    let history = std::fs::read_to_string(run_dir.join("history.jsonl")).expect("history");
    for package in ["partition", "kill"] {
        let steps = history
            .lines()
            .filter(|line| {
                line.contains("\"nemesis\"") && line.contains(&format!("\"package\":\"{package}\""))
            })
            .count();
        assert!(steps > 2, "no {package} steps in the history\n{all}");
    }
    // Nothing is left on the hosts or here.
    assert_eq!(
        tree(&remote),
        Vec::<String>::new(),
        "files left under the remote folder"
    );
    assert_eq!(hosts.foreign_chains(), Vec::<String>::new());
    assert_eq!(
        processes_mentioning(&remote.display().to_string()),
        Vec::<String>::new()
    );
    assert_eq!(control_dirs(), controls_before);
    sigkilled_run_is_removed_by_clean(&hosts, &nodes_file, &broker, &controls_before);
    let namespaces: Vec<String> = hosts
        .netns()
        .nodes()
        .iter()
        .map(|node| {
            hosts
                .netns()
                .namespace(node)
                .expect("namespace")
                .to_string()
        })
        .collect();
    let prefix = hosts.netns().prefix().to_string();
    drop(hosts);
    let listed = run(&["ip", "netns", "list"]);
    for namespace in namespaces {
        assert!(!listed.contains(&namespace), "{namespace} is left");
    }
    let left = common::run_leftovers(&prefix, &[]);
    assert!(left.is_empty(), "{left:?}");
}

/// `harness test --backend ssh` on the hosts of `nodes_file`, with the test's key,
/// config and remote folder; the caller adds the test's own options.
fn harness_test_over_ssh(hosts: &Hosts, nodes_file: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_harness"));
    command
        .args(["test", "--backend", "ssh", "--nodes-file"])
        .arg(nodes_file)
        .arg("--ssh-key")
        .arg(&hosts.key)
        .arg("--ssh-config")
        .arg(&hosts.config)
        .arg("--remote-dir")
        .arg(hosts.remote_dir());
    command
}

/// A `harness test --backend ssh` SIGKILLed while its brokers run leaves them, its folder
/// and chain on the hosts and its ssh masters and control folder here; `harness clean`
/// removes all of it from the run's record.
fn sigkilled_run_is_removed_by_clean(
    hosts: &Hosts,
    nodes_file: &Path,
    broker: &Path,
    controls_before: &BTreeSet<String>,
) {
    let remote = hosts.remote_dir();
    let remote_text = remote.display().to_string();
    let log = hosts.dir().join("killed-run.log");
    let log_file = std::fs::File::create(&log).expect("log");
    let mut child = harness_test_over_ssh(hosts, nodes_file)
        .args([
            "--nodes",
            "3",
            "--time-limit",
            "120",
            "--nemesis",
            "none",
            "--broker-bin",
        ])
        .arg(broker)
        .arg("--store")
        .arg(hosts.dir().join("killed-store"))
        .stdout(std::process::Stdio::null())
        .stderr(log_file)
        .spawn()
        .expect("run harness test");
    // Until the run's record has its three brokers.
    let started = || {
        let left: Vec<String> = control_dirs()
            .difference(controls_before)
            .cloned()
            .collect();
        let [only] = left.as_slice() else {
            return false;
        };
        ssh::SshRunRecord::read(&std::env::temp_dir().join(only))
            .is_ok_and(|record| record.daemons.len() >= 3)
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !started() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the brokers did not start over ssh\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().expect("SIGKILL the harness");
    child.wait().expect("reap the harness");
    let left: Vec<String> = control_dirs()
        .difference(controls_before)
        .cloned()
        .collect();
    assert_eq!(left.len(), 1, "one control folder left: {left:?}");
    let control = std::env::temp_dir().join(&left[0]);
    let record = ssh::SshRunRecord::read(&control).expect("the run's record");
    assert_eq!(record.hosts.len(), 3);
    assert!(
        record.hosts.iter().all(|host| host.dir && host.chain),
        "{record:?}"
    );
    assert!(!record.daemons.is_empty(), "{record:?}");
    let control_text = control.display().to_string();
    assert!(
        !processes_mentioning(&control_text).is_empty(),
        "the killed harness's ssh masters are still running"
    );
    assert!(
        !hosts.foreign_chains().is_empty(),
        "the run's chains are left"
    );
    assert!(!tree(&remote).is_empty(), "the run's folder is left");
    let clean = Command::new(env!("CARGO_BIN_EXE_harness"))
        .arg("clean")
        .output()
        .expect("harness clean");
    let said = format!(
        "{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&clean.stdout),
        String::from_utf8_lossy(&clean.stderr)
    );
    assert_eq!(clean.status.code(), Some(0), "{said}");
    assert!(
        said.contains(&format!("removed ssh run {}", record.run_id)),
        "{said}"
    );
    assert_eq!(
        processes_mentioning(&remote_text),
        Vec::<String>::new(),
        "{said}"
    );
    assert_eq!(
        processes_mentioning(&control_text),
        Vec::<String>::new(),
        "{said}"
    );
    assert_eq!(hosts.foreign_chains(), Vec::<String>::new(), "{said}");
    assert_eq!(tree(&remote), Vec::<String>::new(), "{said}");
    assert_eq!(&control_dirs(), controls_before, "{said}");
    // Nothing more to do for a second clean.
    let again = Command::new(env!("CARGO_BIN_EXE_harness"))
        .arg("clean")
        .output()
        .expect("harness clean");
    let again_said = String::from_utf8_lossy(&again.stdout);
    assert!(!again_said.contains("removed ssh run"), "{again_said}");
}
