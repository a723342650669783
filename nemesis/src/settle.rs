//! Whether the cluster settles after a strike that had it to itself: the roles the
//! metadata records and the leaders' own views must come to agree once nothing is
//! injured any more. A leader by the metadata that does not lead in its own view, leads
//! at another epoch, or keeps another ISR, is a cluster whose control plane and data
//! plane have parted; left alone it stays that way until a later fault happens to
//! repair it (a new controller's full resync, a broker failure), which a check at the
//! end of the run would miss. The strike records what it saw (`settled` in its value)
//! and the history's settle checker judges it.
//!
//! Pure: the runner polls the cluster and feeds each poll to a [`Settling`].

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};
use sut::{PartitionRoles, ReplicaView, Roles};

/// How long a settle check polls at most: longer than the slowest propagation of a
/// controller's decision on a healthy cluster (a LeaderAndIsr round, a leader's ISR
/// write), much shorter than a run.
pub const SETTLE_WAIT: Duration = Duration::from_secs(15);

/// How long a settle check polls at least: what a strike let go of last (a held write, a
/// released round trip) takes effect a moment after it ends, and a first poll that
/// agrees may come before it.
pub const SETTLE_MIN: Duration = Duration::from_secs(5);

/// How long every poll must agree for the cluster to be settled.
pub const SETTLE_STABLE: Duration = Duration::from_secs(3);

/// How long a partition must have disagreed, in every poll up to the end of the check,
/// for the check to find the cluster unsettled.
pub const DIVERGED_FOR: Duration = Duration::from_secs(8);

/// The fewest polls that may find a partition diverged: one or two unlucky reads in
/// the middle of a change are no finding.
pub const SETTLE_MIN_POLLS: u64 = 5;

/// Why the leader of `partition` by the metadata disagrees with its own view of it
/// (`lead`); `None` when they agree.
pub fn disagreement(partition: &PartitionRoles, lead: &ReplicaView) -> Option<String> {
    let leader = partition.leader.as_deref()?;
    let epoch = |e: Option<u64>| e.map_or("none".to_string(), |e| e.to_string());
    if !lead.leading {
        return Some(format!(
            "the metadata names {leader} its leader at epoch {}, but {leader} follows {} at epoch {}",
            epoch(partition.leader_epoch),
            lead.leader.as_deref().unwrap_or("no one"),
            epoch(lead.leader_epoch),
        ));
    }
    if lead.leader_epoch != partition.leader_epoch {
        return Some(format!(
            "{leader} leads it at epoch {}, the metadata at epoch {}",
            epoch(lead.leader_epoch),
            epoch(partition.leader_epoch),
        ));
    }
    let mut own = lead.isr.clone();
    let mut recorded = partition.isr.clone();
    own.sort();
    recorded.sort();
    (own != recorded).then(|| {
        format!(
            "{leader} has ISR {{{}}}, the metadata {{{}}}",
            lead.isr.join(", "),
            partition.isr.join(", ")
        )
    })
}

/// What one poll found: each partition with a leader whose view was read, judged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Poll {
    /// `topic/partition` → why it disagrees, for those that do.
    pub disagreeing: BTreeMap<String, String>,
    /// Partitions judged (a leader, and its views read).
    pub judged: usize,
    /// Partitions not judged: no leader, or its leader's views not read.
    pub unjudged: usize,
}

impl Poll {
    /// Every partition of `roles` judged against its leader's view in `views` (by node).
    pub fn of(roles: &Roles, views: &BTreeMap<String, Vec<ReplicaView>>) -> Poll {
        let mut poll = Poll::default();
        for partition in &roles.partitions {
            let Some((leader, held)) = partition
                .leader
                .as_ref()
                .and_then(|leader| Some((leader, views.get(leader)?)))
            else {
                poll.unjudged += 1;
                continue;
            };
            poll.judged += 1;
            let lead = held
                .iter()
                .find(|v| v.topic == partition.topic && v.partition == partition.partition);
            let why = match lead {
                Some(lead) => disagreement(partition, lead),
                None => Some(format!(
                    "the metadata names {leader} its leader, but {leader} holds no replica of it"
                )),
            };
            if let Some(why) = why {
                poll.disagreeing.insert(partition.key(), why);
            }
        }
        poll
    }

    /// Every partition judged, and all agree.
    pub fn settled(&self) -> bool {
        self.disagreeing.is_empty() && self.unjudged == 0 && self.judged > 0
    }
}

/// The polls of one settle check, folded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settling {
    /// Polls whose roles were read.
    polls: u64,
    /// Since when (ms into the check) every poll has found the cluster settled.
    settled_since_ms: Option<u64>,
    /// Each partition disagreeing in every poll since when (ms), how many polls, and
    /// the last reason.
    disagreeing: BTreeMap<String, Streak>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Streak {
    since_ms: u64,
    polls: u64,
    why: String,
}

impl Settling {
    /// Folds in a poll made `at_ms` into the check. A partition that agreed, or had no
    /// leader or no view read, ends its streak of disagreement.
    pub fn observe(&mut self, poll: &Poll, at_ms: u64) {
        self.polls += 1;
        let before = std::mem::take(&mut self.disagreeing);
        for (key, why) in &poll.disagreeing {
            let (since_ms, polls) = before
                .get(key)
                .map_or((at_ms, 0), |streak| (streak.since_ms, streak.polls));
            self.disagreeing.insert(
                key.clone(),
                Streak {
                    since_ms,
                    polls: polls + 1,
                    why: why.clone(),
                },
            );
        }
        if poll.settled() {
            self.settled_since_ms.get_or_insert(at_ms);
        } else {
            self.settled_since_ms = None;
        }
    }

    /// Whether the check may end `at_ms` into it: past [`SETTLE_MIN`], and every poll of
    /// the last [`SETTLE_STABLE`] settled.
    pub fn done(&self, at_ms: u64) -> bool {
        at_ms >= SETTLE_MIN.as_millis() as u64 && self.stable_at(at_ms)
    }

    fn stable_at(&self, at_ms: u64) -> bool {
        self.settled_since_ms
            .is_some_and(|since| at_ms.saturating_sub(since) >= SETTLE_STABLE.as_millis() as u64)
    }

    /// The check's record, `waited_ms` into it: `converged` is `true` when every poll of
    /// the last [`SETTLE_STABLE`] found every partition agreeing; `false` when some
    /// partition disagreed in every poll of the last [`DIVERGED_FOR`] or more (and at
    /// least [`SETTLE_MIN_POLLS`]), `diverged` saying which and why; `null` when it
    /// cannot tell (disagreements that came and went, views not read).
    pub fn outcome(&self, waited_ms: u64) -> Value {
        let diverged: Vec<Value> = self
            .disagreeing
            .iter()
            .filter(|(_, streak)| {
                waited_ms.saturating_sub(streak.since_ms) >= DIVERGED_FOR.as_millis() as u64
                    && streak.polls >= SETTLE_MIN_POLLS
            })
            .map(
                |(key, streak)| json!({"key": key, "why": streak.why, "since_ms": streak.since_ms}),
            )
            .collect();
        let converged = if self.stable_at(waited_ms) {
            Some(true)
        } else if !diverged.is_empty() {
            Some(false)
        } else {
            None
        };
        json!({
            "converged": converged,
            "settled_since_ms": self.settled_since_ms,
            "waited_ms": waited_ms,
            "polls": self.polls,
            "diverged": diverged,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(items: &[&str]) -> Vec<String> {
        items.iter().map(|i| i.to_string()).collect()
    }

    fn partition(number: u32, leader: &str, epoch: u64, isr: &[&str]) -> PartitionRoles {
        PartitionRoles {
            topic: "t".into(),
            partition: number,
            leader: Some(leader.into()),
            leader_epoch: Some(epoch),
            replicas: s(&["n1", "n2", "n3"]),
            isr: s(isr),
        }
    }

    fn view(number: u32, leading: bool, leader: &str, epoch: u64, isr: &[&str]) -> ReplicaView {
        ReplicaView {
            topic: "t".into(),
            partition: number,
            leading,
            leader: Some(leader.into()),
            leader_epoch: Some(epoch),
            isr: s(isr),
            ..ReplicaView::default()
        }
    }

    #[test]
    fn a_leader_agrees_when_it_leads_at_the_metadatas_epoch_with_its_isr_in_any_order() {
        let p = partition(0, "n1", 4, &["n1", "n2"]);
        assert_eq!(
            disagreement(&p, &view(0, true, "n1", 4, &["n2", "n1"])),
            None
        );
        let follows = disagreement(&p, &view(0, false, "n2", 5, &["n1", "n2"])).unwrap();
        assert!(follows.contains("follows n2 at epoch 5"), "{follows}");
        let epoch = disagreement(&p, &view(0, true, "n1", 3, &["n1", "n2"])).unwrap();
        assert!(
            epoch.contains("epoch 3") && epoch.contains("epoch 4"),
            "{epoch}"
        );
        let isr = disagreement(&p, &view(0, true, "n1", 4, &["n1", "n2", "n3"])).unwrap();
        assert!(
            isr.contains("{n1, n2, n3}") && isr.contains("{n1, n2}"),
            "{isr}"
        );
        let mut leaderless = p.clone();
        leaderless.leader = None;
        assert_eq!(
            disagreement(&leaderless, &view(0, false, "n2", 4, &[])),
            None
        );
    }

    fn roles(partitions: Vec<PartitionRoles>) -> Roles {
        Roles {
            nodes: s(&["n1", "n2", "n3"]),
            partitions,
            ..Roles::default()
        }
    }

    #[test]
    fn a_poll_judges_each_partition_whose_leaders_view_was_read() {
        let roles = roles(vec![
            partition(0, "n1", 4, &["n1", "n2"]),
            partition(1, "n2", 2, &["n2", "n3"]),
            partition(2, "n3", 1, &["n3"]),
        ]);
        let views = BTreeMap::from([
            (
                "n1".to_string(),
                vec![view(0, true, "n1", 4, &["n1", "n2"])],
            ),
            (
                "n2".to_string(),
                vec![view(1, true, "n2", 2, &["n2", "n3", "n1"])],
            ),
        ]);
        let poll = Poll::of(&roles, &views);
        assert_eq!((poll.judged, poll.unjudged), (2, 1), "n3's views unread");
        assert_eq!(poll.disagreeing.keys().collect::<Vec<_>>(), vec!["t/1"]);
        // A leader whose views were read but hold no replica of the partition disagrees.
        let mut ghost = views.clone();
        ghost.insert("n3".to_string(), Vec::new());
        let poll = Poll::of(&roles, &ghost);
        assert_eq!((poll.judged, poll.unjudged), (3, 0));
        assert!(
            poll.disagreeing["t/2"].contains("holds no replica"),
            "{poll:?}"
        );
        assert!(!poll.settled());
        let agreeing = Poll::of(&roles.clone(), &BTreeMap::new());
        assert!(!agreeing.settled(), "nothing judged is not settled");
    }

    fn poll(disagreeing: &[&str]) -> Poll {
        Poll {
            disagreeing: disagreeing
                .iter()
                .map(|k| (k.to_string(), format!("{k} differs")))
                .collect(),
            judged: 2,
            unjudged: 0,
        }
    }

    const STEP: u64 = 150;

    /// `polls` polls `STEP` ms apart from `from_ms`, each finding `disagreeing`.
    fn feed(settling: &mut Settling, from_ms: u64, polls: u64, disagreeing: &[&str]) -> u64 {
        for i in 0..polls {
            settling.observe(&poll(disagreeing), from_ms + i * STEP);
        }
        from_ms + polls * STEP
    }

    #[test]
    fn agreement_must_last_and_the_check_lasts_its_minimum() {
        let mut settling = Settling::default();
        let at = feed(&mut settling, 0, 10, &[]);
        assert!(
            !settling.done(at),
            "an early agreement does not end the check"
        );
        let settle_min = SETTLE_MIN.as_millis() as u64;
        let at = feed(&mut settling, at, settle_min / STEP, &[]);
        assert!(settling.done(at));
        let outcome = settling.outcome(at);
        assert_eq!(outcome["converged"], json!(true), "{outcome}");
        assert_eq!(outcome["settled_since_ms"], json!(0));
        // One disagreeing poll starts the wait for agreement again.
        settling.observe(&poll(&["t/0"]), at);
        assert!(!settling.done(at + STEP));
        let again = feed(&mut settling, at + STEP, 3, &[]);
        assert!(!settling.done(again));
        assert_eq!(settling.outcome(again)["converged"], Value::Null);
    }

    #[test]
    fn a_disagreement_that_appears_after_an_agreement_and_lasts_is_divergence() {
        let mut settling = Settling::default();
        // Agreeing at first (the strike's last release not yet effective), then t/0
        // parts for good; t/1 disagrees only now and then.
        let at = feed(&mut settling, 0, 5, &[]);
        let parted_at = at;
        let mut at = at;
        for i in 0..(SETTLE_WAIT.as_millis() as u64 / STEP) {
            let disagreeing: &[&str] = if i % 3 == 0 {
                &["t/0", "t/1"]
            } else {
                &["t/0"]
            };
            at = feed(&mut settling, at, 1, disagreeing);
            assert!(!settling.done(at));
        }
        let outcome = settling.outcome(at);
        assert_eq!(outcome["converged"], json!(false), "{outcome}");
        assert_eq!(
            outcome["diverged"],
            json!([{"key": "t/0", "why": "t/0 differs", "since_ms": parted_at}]),
            "t/1 agreed in some polls"
        );
    }

    #[test]
    fn a_short_disagreement_or_one_that_comes_and_goes_cannot_tell() {
        let diverged_for = DIVERGED_FOR.as_millis() as u64;
        let mut short = Settling::default();
        let at = feed(&mut short, 0, diverged_for / STEP - 2, &["t/0"]);
        assert_eq!(short.outcome(at)["converged"], Value::Null);
        let mut flapping = Settling::default();
        let mut at = 0;
        for i in 0..(2 * diverged_for / STEP) {
            let key = if i % 2 == 0 { "t/0" } else { "t/1" };
            at = feed(&mut flapping, at, 1, &[key]);
        }
        assert_eq!(flapping.outcome(at)["converged"], Value::Null);
        assert_eq!(flapping.outcome(at)["diverged"], json!([]));
        // Unjudged partitions keep a poll from being settled.
        let mut unread = Settling::default();
        let partial = Poll {
            unjudged: 1,
            ..poll(&[])
        };
        for i in 0..100 {
            unread.observe(&partial, i * STEP);
        }
        assert!(!unread.done(100 * STEP));
    }
}
