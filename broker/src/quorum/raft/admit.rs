//! Which Raft RPCs reach openraft. openraft trusts whoever calls it: a vote request from a
//! node outside the cluster is granted and saved, and a term near `u64::MAX` makes its
//! engine panic the next time this node campaigns (the term wraps around), after a restart
//! too, since the vote was saved. The metadata listener checks every RPC here first: the
//! candidate or leader must be one of this cluster's brokers, and no term or log index may
//! be one that a real cluster cannot reach.

use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};

use super::types::{LogId, NodeId, TypeConfig, Vote};

/// The largest term or log index an RPC may carry: a new term every millisecond would
/// take almost 9,000 years to get here, and `u64::MAX` is far beyond.
pub(crate) const MAX_TERM_OR_INDEX: u64 = 1 << 48;

/// Why an RPC was turned away.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refused {
    #[error("node {0} is not a broker of this cluster")]
    NotAMember(NodeId),
    #[error("term {0} is beyond any a cluster reaches (at most {MAX_TERM_OR_INDEX})")]
    Term(u64),
    #[error("log index {0} is beyond any a cluster reaches (at most {MAX_TERM_OR_INDEX})")]
    Index(u64),
    #[error("the RPC speaks for node {named} but was signed by {sender}")]
    NotTheSender { named: NodeId, sender: String },
}

/// A vote request: from a member, with a sane term and last log id.
pub(crate) fn admit_vote(
    is_member: impl Fn(NodeId) -> bool,
    rpc: &VoteRequest<NodeId>,
) -> Result<(), Refused> {
    check_vote(&is_member, &rpc.vote)?;
    check_log_id(rpc.last_log_id.as_ref())
}

/// An append: from a member leader, every log id in it sane.
pub(crate) fn admit_append(
    is_member: impl Fn(NodeId) -> bool,
    rpc: &AppendEntriesRequest<TypeConfig>,
) -> Result<(), Refused> {
    check_vote(&is_member, &rpc.vote)?;
    check_log_id(rpc.prev_log_id.as_ref())?;
    check_log_id(rpc.leader_commit.as_ref())?;
    rpc.entries
        .iter()
        .try_for_each(|entry| check_log_id(Some(&entry.log_id)))
}

/// A snapshot chunk: from a member leader, its log ids sane.
pub(crate) fn admit_snapshot(
    is_member: impl Fn(NodeId) -> bool,
    rpc: &InstallSnapshotRequest<TypeConfig>,
) -> Result<(), Refused> {
    check_vote(&is_member, &rpc.vote)?;
    check_log_id(rpc.meta.last_log_id.as_ref())?;
    check_log_id(rpc.meta.last_membership.log_id().as_ref())
}

fn check_vote(is_member: &impl Fn(NodeId) -> bool, vote: &Vote) -> Result<(), Refused> {
    let leader = &vote.leader_id;
    if !is_member(leader.node_id) {
        return Err(Refused::NotAMember(leader.node_id));
    }
    check_term(leader.term)
}

fn check_log_id(log_id: Option<&LogId>) -> Result<(), Refused> {
    let Some(log_id) = log_id else {
        return Ok(());
    };
    check_term(log_id.leader_id.term)?;
    if log_id.index > MAX_TERM_OR_INDEX {
        return Err(Refused::Index(log_id.index));
    }
    Ok(())
}

fn check_term(term: u64) -> Result<(), Refused> {
    if term > MAX_TERM_OR_INDEX {
        return Err(Refused::Term(term));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(id: NodeId) -> bool {
        (1..=3).contains(&id)
    }

    fn vote_request(text: &str) -> VoteRequest<NodeId> {
        serde_json::from_str(text).expect("a vote request")
    }

    #[test]
    fn the_hostile_vote_of_the_bug_report_is_refused() {
        // Non-member 99 with every number at its maximum: once granted, saved and fatal.
        let rpc = vote_request(
            r#"{"vote":{"leader_id":{"term":18446744073709551615,"node_id":99},"committed":false},"last_log_id":{"leader_id":{"term":18446744073709551615,"node_id":99},"index":18446744073709551615}}"#,
        );
        assert_eq!(admit_vote(members, &rpc), Err(Refused::NotAMember(99)));
        // The same numbers from a member are refused for the term.
        let rpc = vote_request(
            r#"{"vote":{"leader_id":{"term":18446744073709551615,"node_id":2},"committed":false},"last_log_id":null}"#,
        );
        assert_eq!(admit_vote(members, &rpc), Err(Refused::Term(u64::MAX)));
        let rpc = vote_request(
            r#"{"vote":{"leader_id":{"term":7,"node_id":2},"committed":false},"last_log_id":{"leader_id":{"term":6,"node_id":1},"index":18446744073709551615}}"#,
        );
        assert_eq!(admit_vote(members, &rpc), Err(Refused::Index(u64::MAX)));
    }

    #[test]
    fn an_ordinary_vote_passes() {
        let rpc = vote_request(
            r#"{"vote":{"leader_id":{"term":7,"node_id":2},"committed":false},"last_log_id":{"leader_id":{"term":6,"node_id":1},"index":120}}"#,
        );
        assert_eq!(admit_vote(members, &rpc), Ok(()));
        let rpc = vote_request(
            r#"{"vote":{"leader_id":{"term":1,"node_id":3},"committed":false},"last_log_id":null}"#,
        );
        assert_eq!(admit_vote(members, &rpc), Ok(()));
    }

    #[test]
    fn appends_are_checked_down_to_their_entries() {
        let append = |leader: NodeId, entry_term: u64| -> AppendEntriesRequest<TypeConfig> {
            serde_json::from_value(serde_json::json!({
                "vote": {"leader_id": {"term": 5, "node_id": leader}, "committed": true},
                "prev_log_id": {"leader_id": {"term": 4, "node_id": leader}, "index": 9},
                "entries": [{"log_id": {"leader_id": {"term": entry_term, "node_id": leader}, "index": 10}, "payload": "Blank"}],
                "leader_commit": {"leader_id": {"term": 4, "node_id": leader}, "index": 9},
            }))
            .expect("an append request")
        };
        assert_eq!(admit_append(members, &append(1, 5)), Ok(()));
        assert_eq!(
            admit_append(members, &append(42, 5)),
            Err(Refused::NotAMember(42))
        );
        assert_eq!(
            admit_append(members, &append(1, u64::MAX)),
            Err(Refused::Term(u64::MAX))
        );
    }
}
