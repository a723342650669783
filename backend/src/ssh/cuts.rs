//! Cutting and healing traffic between nodes: `DROP` rules in the receiver's chain
//! ([`netns::cut_rules`]), applied with one command per host, the hosts in parallel.

use super::quote::shell_command;
use super::session::Inner;
use super::wait::{first_error, join_all};
use crate::netns::{self, CutRule, RuleVerb};
use crate::tools::display_command;
use crate::{BackendError, Cut};
use std::collections::BTreeMap;

impl Inner {
    /// The rules of `cuts` grouped by the host they go to, all built (and so every cut
    /// checked) before any is applied.
    fn rules(
        &self,
        cuts: &[Cut],
        verb: RuleVerb,
    ) -> Result<BTreeMap<String, Vec<CutRule>>, BackendError> {
        let address = |node: &str| {
            self.host(node)
                .ok()
                .and_then(|host| host.facts.get())
                .map(|facts| facts.address)
        };
        let mut by_node: BTreeMap<String, Vec<CutRule>> = BTreeMap::new();
        for cut in cuts {
            for rule in netns::cut_rules(cut, verb, &self.chain, &address)? {
                by_node.entry(rule.node.clone()).or_default().push(rule);
            }
        }
        Ok(by_node)
    }

    /// Applies rules per host, the hosts in parallel. With `keep_going`, every rule is
    /// tried and the first failure returned; otherwise a host stops at its first.
    async fn apply(
        &self,
        by_node: BTreeMap<String, Vec<CutRule>>,
        keep_going: bool,
    ) -> Result<(), BackendError> {
        let jobs = by_node.into_iter().map(|(node, rules)| async move {
            let host = self.host(&node)?;
            let iptables = self.facts(host)?.iptables.clone();
            let mut script = String::from("s=0\n");
            for rule in &rules {
                let mut argv = vec![iptables.clone(), "-w".to_string(), "10".to_string()];
                argv.extend(rule.args.iter().cloned());
                let line = shell_command(&argv);
                if keep_going {
                    script.push_str(&format!("{line} || s=1\n"));
                } else {
                    script.push_str(&format!("{line} || exit 1\n"));
                }
            }
            script.push_str("exit $s\n");
            let shown = rules
                .iter()
                .map(|rule| format!("iptables {}", display_command(&rule.args)))
                .collect::<Vec<_>>()
                .join("; ");
            let _channel = host
                .channels
                .acquire()
                .await
                .map_err(|_| BackendError::TornDown)?;
            let argv = vec!["sh".to_string(), "-c".to_string(), script];
            self.run_argv_shown(host, &argv, false, &shown)
                .await
                .map(drop)
        });
        first_error(join_all(jobs).await)
    }

    pub(super) async fn cut(&self, cuts: &[Cut]) -> Result<(), BackendError> {
        let by_node = self.rules(cuts, RuleVerb::Append)?;
        let _gate = self.gate.read().await;
        self.open()?;
        self.apply(by_node, false).await
    }

    pub(super) async fn uncut(&self, cuts: &[Cut]) -> Result<(), BackendError> {
        let by_node = self.rules(cuts, RuleVerb::Delete)?;
        let _gate = self.gate.read().await;
        self.open()?;
        self.apply(by_node, true).await
    }

    pub(super) async fn heal(&self) -> Result<(), BackendError> {
        let _gate = self.gate.read().await;
        self.open()?;
        let jobs = self.hosts.iter().map(|host| async move {
            let iptables = self.facts(host)?.iptables.clone();
            let argv = vec![
                iptables,
                "-w".into(),
                "10".into(),
                "-F".into(),
                self.chain.clone(),
            ];
            self.exec(&host.node, &argv).await.map(drop)
        });
        first_error(join_all(jobs).await)
    }
}
