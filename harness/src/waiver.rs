//! Durability waivers: a run whose broker settings give up acknowledged writes by design
//! (`sut::Db::durability_waiver`: in Kafka, unclean leader elections and pre-KIP-101
//! truncation) still has its history checked and every anomaly reported, but the kinds
//! such a configuration produces on a correct broker do not count against validity.
//! What the configuration still promises is judged as usual: the truncation oracle
//! (a replica never cuts below what it knew committed while its leader still holds it),
//! the ISR-admission oracle's admissions decided below the leader's own epoch start,
//! availability, the one-down probe, and the log anomalies no lost or rewritten suffix
//! explains (a value at two offsets, a value that was never written). Scenarios are
//! judged as written: they name the writes they expect to lose themselves
//! (`Phases::waives_durability`).

use std::collections::BTreeMap;

use checkers::Results;
use sut::Db;

/// The log checker's kinds that a rewritten log suffix produces on a correct broker: the
/// write is gone (`lost-write`, `unseen`), another value took its offset
/// (`inconsistent-offsets`, `realtime-order`), and reads see a log that went back
/// (`stale-read`, `nonmonotonic-read`, `poll-skip`).
pub const LOG_KINDS: &[&str] = &[
    "lost-write",
    "unseen",
    "inconsistent-offsets",
    "realtime-order",
    "stale-read",
    "nonmonotonic-read",
    "poll-skip",
];

/// Why the run's brokers may lose acknowledged writes by design, if any node may: the
/// settings of every broker (`global`) with each node's own after them.
pub fn reason(
    db: &dyn Db,
    global: &[String],
    per_node: &BTreeMap<String, Vec<String>>,
) -> Option<String> {
    if per_node.is_empty() {
        return db.durability_waiver(global);
    }
    per_node.values().find_map(|own| {
        let settings: Vec<String> = global.iter().chain(own).cloned().collect();
        db.durability_waiver(&settings)
    })
}

/// Waives the history checkers' durability anomalies for `reason`: the log checker's
/// [`LOG_KINDS`], and every non-linearizable verdict of a register's history (a register
/// read of a value whose write was lost by design cannot be told from a wrong read).
/// The ISR-admission oracle is given the reason itself (`admissions::add`): a follower
/// let in after a lossy election may lack writes that are gone anyway, but one let in
/// below what its leader held when it took its epoch breaks a rule no setting relaxes.
pub fn apply(results: &mut Results, reason: &str) {
    let why = format!("not counted: {reason}");
    results.waive("log", Some(LOG_KINDS), &why);
    results.waive("linearizable", None, &why);
}

#[cfg(test)]
mod tests {
    use super::*;
    use checkers::Verdict;
    use serde_json::json;

    #[test]
    fn any_node_whose_settings_waive_durability_waives_the_run() {
        let db = crate::system::db();
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let reason = |global: &[&str], nodes: &BTreeMap<String, Vec<String>>| {
            super::reason(&*db, &s(global), nodes)
        };
        let none = BTreeMap::new();
        assert_eq!(reason(&["min_insync_replicas=2"], &none), None);
        let unclean = reason(&["unclean_leader_election=true"], &none).expect("waived");
        assert!(unclean.contains("unclean"), "{unclean}");
        let mut nodes = BTreeMap::new();
        nodes.insert("n1".to_string(), s(&[]));
        nodes.insert("n2".to_string(), s(&["truncation_mode=hw"]));
        assert!(reason(&[], &nodes).is_some_and(|r| r.contains("KIP-101")));
        nodes.insert("n1".to_string(), s(&["truncation_mode=epoch"]));
        nodes.insert("n2".to_string(), s(&["truncation_mode=epoch"]));
        assert_eq!(
            reason(&["truncation_mode=hw"], &nodes),
            None,
            "each node's own wins"
        );
    }

    #[test]
    fn a_value_at_two_offsets_still_counts() {
        let mut results = Results::default();
        results.add(
            "log",
            Verdict::Invalid,
            &json!({"anomalies": [{"kind": "lost-write"}, {"kind": "duplicate"}]}),
        );
        apply(&mut results, "unclean");
        assert_eq!(results.verdict, Verdict::Invalid);
        assert_eq!(
            results.counted_anomalies().keys().collect::<Vec<_>>(),
            ["duplicate"]
        );
    }
}
