//! The one-down probe, after the availability probe of a fault test: the cluster has
//! healed, so every node is back and every partition should be fully in sync again; one
//! node is killed, and every partition must still take an acks=all write within the
//! bound, as the settings promise when they tolerate a failure
//! ([`sut::Db::failures_tolerated`]). Then the node is restarted on its data and the
//! cluster must serve again before the final reads.
//!
//! Why: a run ends with every node back, so a cluster that healed into an inconsistent
//! state (a leader whose ISR the metadata no longer agrees with, a replica that cannot
//! be shrunk out) looks healthy to the availability probe and the final reads. Jepsen's
//! and VOPR's liveness phases ask the same of a healed cluster: that it still rides out
//! the failures it is built for. The kill and the restart are `kill`/`start` operations
//! of the nemesis in the history (`"phase": "one-down"`), the probe's writes ordinary
//! writes, so the history says everything that happened.

use std::time::{Duration, Instant};

use nemesis::{ClusterControl, Journal};
use rng::Rng;
use serde_json::json;
use spec::{NotRestored, OneDownProbe};
use sut::{Connector, PartitionRoles, ReplicaView, Roles};
use workloads::availability::probe_availability_round;
use workloads::recorder::Recorder;
use workloads::WorkloadOptions;

use crate::cluster::Cluster;
use crate::faults::{ClusterFaults, HistoryJournal};

/// How long the probe waits for every partition's ISR to be its whole replica set before
/// it kills anything (a kill before that may leave a partition without a live in-sync
/// replica, which is no failure of the system).
pub const IN_SYNC_TIMEOUT: Duration = Duration::from_secs(20);

/// What the probe needs of the run.
pub struct OneDown<'a> {
    pub cluster: &'a Cluster,
    /// The test's topic.
    pub topic: &'a str,
    pub control: &'a ClusterFaults,
    pub journal: &'a HistoryJournal,
    pub connector: &'a dyn Connector,
    pub options: &'a WorkloadOptions,
    pub recorder: &'a Recorder,
    pub replication_factor: u32,
    pub partitions: u32,
    pub seed: u64,
    pub bound: Duration,
    /// Whether a node may be killed: not when the cluster did not come back after the
    /// heal (the availability checker or the recovery already says so); the settled
    /// cluster is judged all the same.
    pub kill: bool,
}

impl OneDown<'_> {
    /// Runs the probe; a probe that cannot run says why in `skipped`. Errors are the
    /// harness's own (the history could not be written).
    pub async fn run(&self) -> anyhow::Result<OneDownProbe> {
        let mut probe = OneDownProbe {
            bound_secs: self.bound.as_secs_f64(),
            ..OneDownProbe::default()
        };
        let settled = self.wait_in_sync().await;
        let Some(roles) = settled.roles else {
            probe.skipped = Some(format!(
                "no node answered with the roles within {} s",
                IN_SYNC_TIMEOUT.as_secs()
            ));
            return Ok(probe);
        };
        let ours: Vec<&PartitionRoles> = roles
            .partitions
            .iter()
            .filter(|p| p.topic == self.topic)
            .collect();
        // Every partition is looked at: one in sync by the metadata may still name a
        // leader that does not lead it (its LeaderAndIsr refused), which no write
        // notices when clients find the real leader by trying the others.
        probe.not_restored = self.not_restored(&ours, &settled.lagging).await;
        if !self.kill {
            probe.skipped = Some("the cluster was not available after the heal".into());
            return Ok(probe);
        }
        let tolerated = self
            .cluster
            .db
            .failures_tolerated(&self.cluster.spec.settings, self.replication_factor);
        if tolerated == 0 {
            probe.skipped = Some(format!(
                "the settings tolerate no failure at replication factor {}",
                self.replication_factor
            ));
            return Ok(probe);
        }
        if ours.len() < self.partitions as usize {
            probe.skipped = Some(format!(
                "{} of {} partitions known",
                ours.len(),
                self.partitions
            ));
            return Ok(probe);
        }
        // Fully in sync, any node; else only one whose loss leaves every partition the
        // in-sync replicas an acks=all write needs, one of them to lead.
        let needed = self.replication_factor.saturating_sub(tolerated).max(1) as usize;
        let candidates = spare_nodes(&self.control.nodes(), &ours, needed);
        let mut rng = Rng::derive(self.seed, "one-down", 0);
        let Some(node) = rng.pick(&candidates).cloned() else {
            probe.skipped = Some(format!(
                "not fully in sync after {} s ({}), and every node's loss would leave a \
                 partition below {needed} in-sync replicas",
                IN_SYNC_TIMEOUT.as_secs(),
                settled.lagging.join(", ")
            ));
            return Ok(probe);
        };
        eprintln!("one-down probe: {node} killed, every partition must take a write");
        let token = self.journal.invoke(
            "kill",
            json!({"nodes": [node], "package": "kill", "phase": "one-down"}),
        )?;
        let killed = self.control.kill(&node).await;
        let error = killed.as_ref().err().map(|e| e.to_string());
        self.journal.complete(
            token,
            "kill",
            json!({"nodes": [node], "package": "kill", "phase": "one-down", "pid": killed.ok().flatten()}),
            error.clone(),
        )?;
        if let Some(error) = error {
            probe.skipped = Some(format!("{node} could not be killed: {error}"));
            return Ok(probe);
        }
        probe.node = Some(node.clone());
        probe.availability =
            probe_availability_round(self.connector, self.options, self.recorder, self.bound, 1)
                .await?;
        let token = self.journal.invoke(
            "start",
            json!({"nodes": [node], "package": "kill", "phase": "one-down"}),
        )?;
        let started = self.control.start(&node, false).await;
        let error = started.as_ref().err().map(|e| e.to_string());
        self.journal.complete(
            token,
            "start",
            json!({"nodes": [node], "package": "kill", "phase": "one-down", "pid": started.ok()}),
            error.clone(),
        )?;
        if let Some(error) = error {
            anyhow::bail!("the one-down probe could not restart {node}: {error}");
        }
        Ok(probe)
    }

    /// Waits (up to [`IN_SYNC_TIMEOUT`]) until every partition of the test's topic has a
    /// leader and all its replicas in its ISR; the last roles read, and the partitions
    /// that were not (empty when all were).
    async fn wait_in_sync(&self) -> Settled {
        let began = Instant::now();
        let mut last = Settled::default();
        loop {
            if let Some(roles) = self.control.roles().await {
                let ours: Vec<&PartitionRoles> = roles
                    .partitions
                    .iter()
                    .filter(|p| p.topic == self.topic)
                    .collect();
                let known = ours.len() >= self.partitions as usize;
                let lagging: Vec<String> = ours
                    .iter()
                    .filter(|p| !fully_in_sync(p))
                    .map(|p| p.key())
                    .collect();
                let done = known && lagging.is_empty();
                last = Settled {
                    roles: Some(roles),
                    lagging,
                };
                if done {
                    return last;
                }
            }
            if began.elapsed() >= IN_SYNC_TIMEOUT {
                return last;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The partitions a healed, idle cluster cannot be restoring: any whose leader by the
    /// metadata does not lead it in its own view, and of the `lagging` ones (not fully in
    /// sync for [`IN_SYNC_TIMEOUT`]) those whose leader's own ISR is not the metadata's,
    /// or with a replica outside the ISR that already holds the leader's whole log. Each
    /// is confirmed by a second look a second later.
    async fn not_restored(
        &self,
        partitions: &[&PartitionRoles],
        lagging: &[String],
    ) -> Vec<NotRestored> {
        let first = self.stuck(partitions, lagging).await;
        if first.is_empty() {
            return first;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let Some(roles) = self.control.roles().await else {
            return Vec::new();
        };
        let now: Vec<&PartitionRoles> = roles
            .partitions
            .iter()
            .filter(|p| p.topic == self.topic)
            .collect();
        let again = self.stuck(&now, lagging).await;
        first
            .into_iter()
            .filter(|a| again.iter().any(|b| b.key == a.key && b.why == a.why))
            .collect()
    }

    async fn stuck(&self, partitions: &[&PartitionRoles], lagging: &[String]) -> Vec<NotRestored> {
        let mut found = Vec::new();
        for partition in partitions {
            let Some(leader) = &partition.leader else {
                continue;
            };
            let behind = lagging.contains(&partition.key()) && !fully_in_sync(partition);
            let view_of = |views: Option<Vec<ReplicaView>>| {
                views.and_then(|all| {
                    all.into_iter()
                        .find(|v| v.topic == partition.topic && v.partition == partition.partition)
                })
            };
            let Some(lead) = view_of(self.control.replicas(leader).await) else {
                continue;
            };
            if !behind {
                found.extend(not_leading(partition, leader, &lead));
                continue;
            }
            let views = {
                let mut views = Vec::new();
                for replica in partition
                    .replicas
                    .iter()
                    .filter(|r| !partition.isr.contains(r))
                {
                    if let Some(view) = view_of(self.control.replicas(replica).await) {
                        views.push((replica.clone(), view));
                    }
                }
                views
            };
            found.extend(diverged(partition, leader, &lead, &views));
        }
        found
    }
}

/// What [`OneDown::wait_in_sync`] saw last.
#[derive(Default)]
struct Settled {
    roles: Option<Roles>,
    lagging: Vec<String>,
}

/// A leader, and every replica in the ISR.
fn fully_in_sync(partition: &PartitionRoles) -> bool {
    partition.leader.is_some()
        && partition
            .replicas
            .iter()
            .all(|node| partition.isr.contains(node))
}

/// The nodes whose loss leaves every partition of `partitions` a leader and at least
/// `needed` in-sync replicas (by the roles), in `nodes` order.
pub fn spare_nodes(nodes: &[String], partitions: &[&PartitionRoles], needed: usize) -> Vec<String> {
    nodes
        .iter()
        .filter(|node| {
            partitions
                .iter()
                .all(|p| p.leader.is_some() && p.isr.iter().filter(|m| m != node).count() >= needed)
        })
        .cloned()
        .collect()
}

/// A finding when `leader`, the leader of `partition` by the metadata, does not lead it in
/// its own view (`lead`): on a healed and idle cluster, clients sent to it are refused.
pub fn not_leading(
    partition: &PartitionRoles,
    leader: &str,
    lead: &ReplicaView,
) -> Option<NotRestored> {
    (!lead.leading).then(|| NotRestored {
        key: partition.key(),
        leader: leader.to_string(),
        replica: None,
        why: format!(
            "the metadata names {leader} its leader (epoch {}), but {leader} does not lead \
             it (it follows {} at epoch {})",
            partition
                .leader_epoch
                .map_or("none".to_string(), |e| e.to_string()),
            lead.leader.as_deref().unwrap_or("no one"),
            lead.leader_epoch
                .map_or("none".to_string(), |e| e.to_string()),
        ),
    })
}

/// Why `partition`, not fully in sync on a healed and idle cluster, cannot be catching
/// up, from its leader's own view (`lead`) and the views of the replicas outside its ISR
/// (`outside`, by node): the leader's ISR is not the metadata's (one finding), or else
/// each outside replica that holds the leader's whole log. Empty when it may still be
/// catching up.
pub fn diverged(
    partition: &PartitionRoles,
    leader: &str,
    lead: &ReplicaView,
    outside: &[(String, ReplicaView)],
) -> Vec<NotRestored> {
    if let Some(found) = not_leading(partition, leader, lead) {
        return vec![found];
    }
    let mut own = lead.isr.clone();
    let mut metadata = partition.isr.clone();
    own.sort();
    metadata.sort();
    if own != metadata {
        return vec![NotRestored {
            key: partition.key(),
            leader: leader.to_string(),
            replica: None,
            why: format!(
                "its leader {leader} has ISR {{{}}}, the metadata {{{}}}",
                lead.isr.join(", "),
                partition.isr.join(", ")
            ),
        }];
    }
    outside
        .iter()
        .filter(|(_, view)| view.log_end_offset >= lead.log_end_offset)
        .map(|(replica, view)| NotRestored {
            key: partition.key(),
            leader: leader.to_string(),
            replica: Some(replica.clone()),
            why: format!(
                "{replica} holds the leader's whole log (log end {} of {}) but is not in the ISR",
                view.log_end_offset, lead.log_end_offset
            ),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOPIC: &str = "jepsen";

    fn s(items: &[&str]) -> Vec<String> {
        items.iter().map(|i| i.to_string()).collect()
    }

    fn partition(index: u32, leader: &str, replicas: &[&str], isr: &[&str]) -> PartitionRoles {
        PartitionRoles {
            topic: TOPIC.into(),
            partition: index,
            leader: (!leader.is_empty()).then(|| leader.to_string()),
            leader_epoch: Some(1),
            replicas: s(replicas),
            isr: s(isr),
        }
    }

    fn view(isr: &[&str], leo: u64) -> ReplicaView {
        ReplicaView {
            topic: TOPIC.into(),
            partition: 0,
            leading: true,
            isr: s(isr),
            log_end_offset: leo,
            high_watermark: leo,
            ..ReplicaView::default()
        }
    }

    #[test]
    fn only_nodes_whose_loss_leaves_enough_in_sync_replicas_are_spared() {
        let nodes = s(&["n1", "n2", "n3", "n4"]);
        let a = partition(0, "n1", &["n1", "n2", "n3"], &["n1", "n2", "n3"]);
        let b = partition(1, "n2", &["n2", "n3", "n4"], &["n2", "n3"]);
        // Two in-sync replicas needed (min.insync 2): b has only n2 and n3 in sync.
        assert_eq!(spare_nodes(&nodes, &[&a, &b], 2), s(&["n1", "n4"]));
        // One needed: any node.
        assert_eq!(spare_nodes(&nodes, &[&a, &b], 1), nodes);
        // A partition without a leader: no node can be spared.
        let c = partition(2, "", &["n1", "n2", "n3"], &["n1"]);
        assert!(spare_nodes(&nodes, &[&a, &c], 1).is_empty());
        assert!(fully_in_sync(&a) && !fully_in_sync(&b) && !fully_in_sync(&c));
    }

    #[test]
    fn a_partition_is_stuck_only_when_it_cannot_be_catching_up() {
        let p = partition(0, "n2", &["n1", "n2", "n3"], &["n2", "n1"]);
        // KAFKA-3083's trace: the leader still counts n3 in, the metadata does not.
        let found = diverged(&p, "n2", &view(&["n2", "n3", "n1"], 100), &[]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].key, format!("{TOPIC}/0"));
        assert!(found[0].why.contains("{n2, n3, n1}") && found[0].why.contains("{n2, n1}"));
        // Leader and metadata agree; n3 is still behind: it may be catching up.
        let behind = (String::from("n3"), view(&[], 60));
        assert!(diverged(&p, "n2", &view(&["n1", "n2"], 100), &[behind]).is_empty());
        // The metadata's leader does not think it leads.
        let mut follows = view(&["n2", "n1"], 100);
        follows.leading = false;
        follows.leader = Some("n1".into());
        let found = diverged(&p, "n2", &follows, &[]);
        assert_eq!(found.len(), 1);
        assert!(found[0].why.contains("follows n1"), "{}", found[0].why);
        // The same for a partition in sync by the metadata: a leader by the metadata
        // that does not lead is found; one that leads is not.
        let in_sync = partition(0, "n2", &["n1", "n2", "n3"], &["n1", "n2", "n3"]);
        let found = not_leading(&in_sync, "n2", &follows).expect("not leading");
        assert_eq!(found.leader, "n2");
        assert!(not_leading(&in_sync, "n2", &view(&["n1", "n2", "n3"], 100)).is_none());
        // n3 holds the whole log and is still left out.
        let caught_up = (String::from("n3"), view(&[], 100));
        let found = diverged(&p, "n2", &view(&["n1", "n2"], 100), &[caught_up]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].replica.as_deref(), Some("n3"));
    }
}
