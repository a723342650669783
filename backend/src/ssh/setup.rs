//! Preparing the hosts of a run: connecting to every host, finding out what each one is
//! (its effective user and port, sudo, the tools it lacks, a working iptables, its IPv4
//! address), then creating the run's folder and cut chain on every host.

use super::address::{
    address_candidates, parse_addresses, parse_ssh_g, pick_address, resolve_here, Effective,
};
use super::hosts::Host;
use super::scripts::{ADDRESSES, INSTALL, MAKE_RUN_DIR, PROBE, REQUIRED_TOOLS};
use super::session::{lock, Facts, HostConn, Inner, STEP_TIMEOUT};
use super::wait::{first_error, join_all, timed};
use crate::tools;
use crate::BackendError;
use std::net::Ipv4Addr;
use std::time::Duration;

/// The longest installing missing tools may take.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(900);

impl Inner {
    /// Connects to every host, probes them and creates the run's folder and chains.
    pub(super) async fn setup(&self) -> Result<(), BackendError> {
        let connected = join_all(self.hosts.iter().map(|host| self.connect(host))).await;
        first_error(connected)?;
        let probed = join_all(self.hosts.iter().map(|host| self.probe(host))).await;
        let probed: Vec<Probed> = probed.into_iter().collect::<Result<_, _>>()?;
        let resolved: Vec<Option<Ipv4Addr>> = probed.iter().map(|p| p.resolved).collect();
        let reported: Vec<Vec<Ipv4Addr>> = probed.iter().map(|p| p.reported.clone()).collect();
        let candidates = address_candidates(&resolved, &reported);
        let addresses = join_all(candidates.iter().map(|list| pick_address(list))).await;
        for ((host, probed), address) in self.hosts.iter().zip(probed).zip(addresses) {
            let address = address.ok_or_else(|| {
                BackendError::Setup(format!(
                    "{}: cannot tell its IPv4 address (`{}` does not resolve here to a \
                     non-loopback IPv4 address, and none of the host's own addresses {:?} \
                     is its alone); give its address in the nodes file",
                    self.describe(host),
                    probed.hostname,
                    probed.reported
                ))
            })?;
            let _ = host.facts.set(Facts {
                user: probed.user,
                port: probed.port,
                address,
                iptables: probed.iptables,
            });
        }
        // The record says how to reach the hosts as probed before anything is made there.
        self.save_record()?;
        self.create_run_dirs().await?;
        // Recorded before they are made: a chain that may exist is one teardown removes.
        lock(&self.run)
            .chains
            .iter_mut()
            .for_each(|chain| *chain = true);
        self.save_record()?;
        let chains = join_all(self.hosts.iter().map(|host| self.create_chain(host))).await;
        first_error(chains)
    }

    /// The run folder on every host, made with `mkdir` (not `-p`), so that a folder that
    /// exists already is refused: the first host's gets a token file, and on a later host
    /// an existing folder is accepted only with that token in it (the hosts share a file
    /// system). Recorded for teardown once made.
    async fn create_run_dirs(&self) -> Result<(), BackendError> {
        let token = format!(
            "{} {} {}",
            self.run_id,
            std::process::id(),
            self.control_dir.display()
        );
        let Some(first) = self.hosts.first() else {
            return Ok(());
        };
        self.make_run_dir(0, first, &token).await?;
        let others = self
            .hosts
            .iter()
            .enumerate()
            .skip(1)
            .map(|(index, host)| self.make_run_dir(index, host, &token));
        first_error(join_all(others).await)
    }

    /// [`MAKE_RUN_DIR`] on one host (the first one when `index` is 0).
    async fn make_run_dir(
        &self,
        index: usize,
        host: &HostConn,
        token: &str,
    ) -> Result<(), BackendError> {
        let args = vec![
            self.remote_dir_text.clone(),
            self.run_dir_text.clone(),
            token.to_string(),
            if index == 0 { "first" } else { "other" }.to_string(),
        ];
        timed(
            STEP_TIMEOUT,
            self.run_script(host, "mkrun", MAKE_RUN_DIR, &args),
        )
        .await?;
        lock(&self.run).dirs[index] = true;
        Ok(())
    }

    async fn create_chain(&self, host: &HostConn) -> Result<(), BackendError> {
        let iptables = self.facts(host)?.iptables.clone();
        let argv = |args: &[&str]| -> Vec<String> {
            let mut argv = vec![iptables.clone(), "-w".into(), "10".into()];
            argv.extend(args.iter().map(|arg| arg.to_string()));
            argv
        };
        self.run_argv(host, &argv(&["-N", &self.chain]), false)
            .await?;
        self.run_argv(
            host,
            &argv(&[
                "-I",
                "INPUT",
                "1",
                "-m",
                "comment",
                "--comment",
                &self.run_id,
                "-j",
                &self.chain,
            ]),
            false,
        )
        .await
        .map(drop)
    }

    /// What one host is: its effective user and port, whether sudo is needed, its
    /// tools (installed if missing), iptables, and its address candidates.
    async fn probe(&self, host: &HostConn) -> Result<Probed, BackendError> {
        let step = |what: &'static str| {
            let described = self.describe(host);
            move |error: BackendError| BackendError::Setup(format!("{described}: {what}: {error}"))
        };
        let effective = self.ssh_g(&host.host).await;
        let hostname = effective
            .hostname
            .clone()
            .unwrap_or_else(|| host.host.address.clone());
        let port = effective.port.or(host.host.port).unwrap_or(22);
        let uid = timed(
            STEP_TIMEOUT,
            self.run_argv(host, &["id".into(), "-u".into()], true),
        )
        .await
        .map_err(step("checking the user"))?;
        let sudo = uid.stdout.trim() != "0";
        let user = match (&effective.user, &host.host.user) {
            (Some(user), _) | (None, Some(user)) => user.clone(),
            (None, None) => String::from("?"),
        };
        if sudo {
            let check = timed(
                STEP_TIMEOUT,
                self.run_argv(host, &["sudo".into(), "-n".into(), "true".into()], true),
            )
            .await;
            if let Err(error) = check {
                return Err(BackendError::Setup(format!(
                    "{}: the user {user} is not root and cannot use sudo without a password \
                     ({error}); allow it passwordless sudo (NOPASSWD in sudoers) or log in as root",
                    self.describe(host)
                )));
            }
        }
        // Commands below run as root (through sudo when needed).
        let _ = host.sudo.set(sudo);
        self.ensure_tools(host)
            .await
            .map_err(step("preparing the host"))?;
        let iptables = self
            .choose_iptables(host)
            .await
            .map_err(step("finding a working iptables"))?;
        let resolved = resolve_here(&hostname, port).await;
        let reported = if resolved.is_none() {
            let out = timed(
                STEP_TIMEOUT,
                self.run_argv(host, &["sh".into(), "-c".into(), ADDRESSES.into()], true),
            )
            .await
            .map_err(step("listing its addresses"))?;
            parse_addresses(&out.stdout)
        } else {
            Vec::new()
        };
        Ok(Probed {
            hostname,
            user,
            port,
            iptables,
            resolved,
            reported,
        })
    }

    /// `ssh -G` for the host: what ssh makes of it with the same options (a config's
    /// `HostName`, `User`, `Port`). Empty if ssh cannot say.
    async fn ssh_g(&self, host: &Host) -> Effective {
        let mut argv = vec!["ssh".to_string(), "-G".to_string()];
        if let Some(config) = &self.options.config_file {
            argv.extend(["-F".to_string(), config.display().to_string()]);
        }
        if let Some(port) = host.port {
            argv.extend(["-p".to_string(), port.to_string()]);
        }
        if let Some(user) = &host.user {
            argv.extend(["-l".to_string(), user.clone()]);
        }
        argv.extend(["--".to_string(), host.address.clone()]);
        match tools::run_cancellable(argv).await {
            Ok(output) => parse_ssh_g(&output.stdout),
            Err(error) => {
                tracing::debug!(%error, "ssh -G");
                Effective::default()
            }
        }
    }

    /// Installs what [`REQUIRED_TOOLS`] lists and is missing, on Debian and Ubuntu.
    async fn ensure_tools(&self, host: &HostConn) -> Result<(), BackendError> {
        let tools: Vec<String> = REQUIRED_TOOLS
            .iter()
            .map(|(tool, _)| tool.to_string())
            .collect();
        let probe = timed(STEP_TIMEOUT, self.run_script(host, "probe", PROBE, &tools)).await?;
        let mut missing: Vec<&str> = Vec::new();
        let mut proc_ok = false;
        let mut os = String::new();
        let mut apt = false;
        for line in probe.stdout.lines() {
            if let Some(rest) = line.strip_prefix("missing:") {
                missing = rest.split_whitespace().collect();
            } else if let Some(rest) = line.strip_prefix("proc: ") {
                proc_ok = rest.trim() == "yes";
            } else if let Some(rest) = line.strip_prefix("os: ") {
                os = rest.trim().to_string();
            } else if let Some(rest) = line.strip_prefix("apt: ") {
                apt = rest.trim() == "yes";
            }
        }
        if !proc_ok {
            return Err(BackendError::Setup(
                "no readable /proc (the backend identifies processes by /proc/<pid>/stat)".into(),
            ));
        }
        if missing.is_empty() {
            return Ok(());
        }
        let packages: Vec<String> = {
            let mut packages: Vec<String> = REQUIRED_TOOLS
                .iter()
                .filter(|(tool, _)| missing.contains(tool))
                .map(|(_, package)| package.to_string())
                .collect();
            packages.sort();
            packages.dedup();
            packages
        };
        let debian = os
            .split_whitespace()
            .any(|id| id == "debian" || id == "ubuntu");
        if !(debian && apt) {
            return Err(BackendError::MissingTool {
                tool: missing.join(", "),
                package: packages.join(" "),
                reason: format!(
                    "not installing on a host that is not Debian/Ubuntu with apt-get (os: {})",
                    if os.is_empty() { "unknown" } else { &os }
                ),
            });
        }
        eprintln!(
            "{}: installing {} with apt-get",
            self.describe(host),
            packages.join(", ")
        );
        timed(
            INSTALL_TIMEOUT,
            self.run_script(host, "install", INSTALL, &packages),
        )
        .await?;
        let again = timed(STEP_TIMEOUT, self.run_script(host, "probe", PROBE, &tools)).await?;
        let still: Vec<&str> = again
            .stdout
            .lines()
            .find_map(|line| line.strip_prefix("missing:"))
            .map(|rest| rest.split_whitespace().collect())
            .unwrap_or_default();
        if still.is_empty() {
            Ok(())
        } else {
            Err(BackendError::MissingTool {
                tool: still.join(", "),
                package: packages.join(" "),
                reason: "still missing after installing it".into(),
            })
        }
    }

    /// `iptables`, or `iptables-legacy` where the kernel lacks nf_tables: the first that
    /// can list `INPUT`.
    async fn choose_iptables(&self, host: &HostConn) -> Result<String, BackendError> {
        let mut errors = Vec::new();
        for candidate in ["iptables", "iptables-legacy"] {
            let argv: Vec<String> = [candidate, "-w", "10", "-S", "INPUT"]
                .iter()
                .map(|arg| arg.to_string())
                .collect();
            match timed(STEP_TIMEOUT, self.run_argv(host, &argv, false)).await {
                Ok(_) => return Ok(candidate.to_string()),
                Err(error) => errors.push(error.to_string()),
            }
        }
        Err(BackendError::Setup(errors.join("; ")))
    }
}

/// What [`Inner::probe`] found out about a host.
struct Probed {
    hostname: String,
    user: String,
    port: u16,
    iptables: String,
    resolved: Option<Ipv4Addr>,
    reported: Vec<Ipv4Addr>,
}
