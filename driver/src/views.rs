//! The broker's answers read as the doors' plain views: `GET /v1/metadata` as
//! [`sut::Roles`], `GET /v1/debug/replicas` as [`sut::ReplicaView`]s, and
//! `GET /v1/debug/failpoints` as hit counts, `GET /v1/debug/controller` as a
//! [`sut::ControllerView`]. Broker ids become node names; an id of no
//! node of the cluster is dropped.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;
use sut::{ControllerView, PartitionRoles, ReplicaView, Roles};

/// Each node's name and its broker id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerIds(pub Vec<(String, u32)>);

impl BrokerIds {
    /// The node whose broker id is `id`.
    pub fn name(&self, id: u32) -> Option<String> {
        self.0
            .iter()
            .find(|(_, broker)| *broker == id)
            .map(|(node, _)| node.clone())
    }

    /// The broker id of node `name`.
    pub fn id(&self, name: &str) -> Option<u32> {
        self.0
            .iter()
            .find(|(node, _)| node == name)
            .map(|(_, id)| *id)
    }

    fn names(&self, ids: &[u32]) -> Vec<String> {
        ids.iter().filter_map(|id| self.name(*id)).collect()
    }

    fn nodes(&self) -> Vec<String> {
        self.0.iter().map(|(node, _)| node.clone()).collect()
    }
}

#[derive(Debug, Default, Deserialize)]
struct Metadata {
    #[serde(default)]
    brokers: Vec<RegisteredBroker>,
    #[serde(default)]
    controller: Option<Controller>,
    #[serde(default)]
    metadata_leader: Option<u32>,
    #[serde(default)]
    topics: Vec<Topic>,
}

#[derive(Debug, Deserialize)]
struct RegisteredBroker {
    id: u32,
}

#[derive(Debug, Deserialize)]
struct Controller {
    id: u32,
    #[serde(default)]
    epoch: u64,
}

#[derive(Debug, Deserialize)]
struct Topic {
    topic: String,
    #[serde(default)]
    partitions: Vec<Partition>,
}

#[derive(Debug, Deserialize)]
struct Partition {
    partition: u32,
    #[serde(default)]
    leader: Option<u32>,
    #[serde(default)]
    leader_epoch: Option<u64>,
    #[serde(default)]
    replicas: Vec<u32>,
    #[serde(default)]
    isr: Vec<u32>,
}

/// A `/v1/metadata` answer as roles; `None` when it is not one.
pub fn roles(ids: &BrokerIds, metadata: &Value) -> Option<Roles> {
    let metadata = Metadata::deserialize(metadata).ok()?;
    let partitions = metadata
        .topics
        .iter()
        .flat_map(|topic| {
            topic.partitions.iter().map(|p| PartitionRoles {
                topic: topic.topic.clone(),
                partition: p.partition,
                leader: p.leader.and_then(|id| ids.name(id)),
                leader_epoch: p.leader_epoch,
                replicas: ids.names(&p.replicas),
                isr: ids.names(&p.isr),
            })
        })
        .collect();
    Some(Roles {
        nodes: ids.nodes(),
        registered: metadata
            .brokers
            .iter()
            .filter_map(|b| ids.name(b.id))
            .collect(),
        controller: metadata.controller.as_ref().and_then(|c| ids.name(c.id)),
        controller_epoch: metadata.controller.as_ref().map_or(0, |c| c.epoch),
        meta_leader: metadata.metadata_leader.and_then(|id| ids.name(id)),
        partitions,
    })
}

#[derive(Debug, Deserialize)]
struct Replicas {
    replicas: Vec<Replica>,
}

#[derive(Debug, Deserialize)]
struct Replica {
    topic: String,
    partition: u32,
    #[serde(default)]
    role: String,
    #[serde(default)]
    leader: Option<u32>,
    #[serde(default)]
    leader_epoch: Option<u64>,
    #[serde(default)]
    isr: Vec<u32>,
    #[serde(default)]
    controller_epoch: Option<u64>,
    #[serde(default)]
    log_start_offset: u64,
    #[serde(default)]
    log_end_offset: u64,
    #[serde(default)]
    high_watermark: u64,
}

/// A `/v1/debug/replicas` answer as replica views; `None` when it is not one.
pub fn replicas(ids: &BrokerIds, answer: &Value) -> Option<Vec<ReplicaView>> {
    let answer = Replicas::deserialize(answer).ok()?;
    Some(
        answer
            .replicas
            .into_iter()
            .map(|r| ReplicaView {
                leading: r.role == "leader",
                leader: r.leader.and_then(|id| ids.name(id)),
                isr: ids.names(&r.isr),
                topic: r.topic,
                partition: r.partition,
                leader_epoch: r.leader_epoch,
                log_start_offset: r.log_start_offset,
                log_end_offset: r.log_end_offset,
                high_watermark: r.high_watermark,
                controller_epoch: r.controller_epoch,
            })
            .collect(),
    )
}

#[derive(Debug, Deserialize)]
struct ControlPlane {
    #[serde(default)]
    controller_epoch: Option<u64>,
    #[serde(default)]
    elections_won: u64,
    #[serde(default)]
    resignations: u64,
}

/// A `/v1/debug/controller` answer as the node's view of its control plane; `None` when
/// it is not one.
pub fn controller_view(answer: &Value) -> Option<ControllerView> {
    // An object only: serde would read an array as the struct's fields in order.
    let status = ControlPlane::deserialize(answer.as_object()?).ok()?;
    Some(ControllerView {
        acting_epoch: status.controller_epoch,
        elections_won: status.elections_won,
        resignations: status.resignations,
    })
}

#[derive(Debug, Deserialize)]
struct Failpoints {
    #[serde(default)]
    hits: BTreeMap<String, u64>,
}

/// The hit counts of a `/v1/debug/failpoints` answer; `None` when it is not one.
pub fn failpoint_hits(answer: &Value) -> Option<BTreeMap<String, u64>> {
    Failpoints::deserialize(answer).ok().map(|f| f.hits)
}

/// The broker log's marker of a replica event: the rest of the line is the event's JSON
/// (`server/partitions.rs`, `log_replica_event`).
const REPLICA_EVENT: &str = "replica_event=";

/// The replica events of `kind` a broker's log records, in order; colour codes are passed
/// over, a line that does not parse is not an event.
fn replica_events<'a>(log: &'a str, kind: &'a str) -> impl Iterator<Item = Value> + 'a {
    log.lines().filter_map(move |line| {
        let plain = strip_ansi(line);
        let at = plain.find(REPLICA_EVENT)?;
        let json = plain[at + REPLICA_EVENT.len()..].trim();
        let value: Value = serde_json::from_str(json).ok()?;
        (value.get("kind").and_then(Value::as_str) == Some(kind)).then_some(value)
    })
}

/// The truncations a broker's log records (replica events of kind `truncated`).
pub fn truncations(log: &str) -> Vec<sut::Truncation> {
    replica_events(log, "truncated")
        .filter_map(|value| serde_json::from_value(value).ok())
        .collect()
}

/// An `isr-expanded` event as the broker writes it (its follower is a broker id).
#[derive(Deserialize)]
struct IsrExpanded {
    topic: String,
    partition: u32,
    follower: u32,
    follower_log_end: u64,
    unix_ms: u64,
    written: bool,
    leader_epoch: u64,
    high_watermark: u64,
    epoch_start_offset: Option<u64>,
}

/// The ISR expansions a broker's log records (replica events of kind `isr-expanded`).
pub fn isr_expansions(log: &str) -> Vec<sut::IsrExpansion> {
    replica_events(log, "isr-expanded")
        .filter_map(|value| serde_json::from_value::<IsrExpanded>(value).ok())
        .map(|e| sut::IsrExpansion {
            topic: e.topic,
            partition: e.partition,
            follower: format!("broker {}", e.follower),
            follower_log_end: e.follower_log_end,
            unix_ms: e.unix_ms,
            written: e.written,
            leader_epoch: e.leader_epoch,
            high_watermark: e.high_watermark,
            epoch_start_offset: e.epoch_start_offset,
        })
        .collect()
}

/// `line` without its ANSI escape sequences (`ESC [ ... letter`).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ids() -> BrokerIds {
        BrokerIds((1..=3).map(|i| (format!("n{i}"), i)).collect())
    }

    #[test]
    fn metadata_reads_as_roles_with_names() {
        let metadata = json!({
            "brokers": [{"id": 1}, {"id": 3}, {"id": 9}],
            "controller": {"id": 1, "epoch": 3},
            "metadata_leader": 2,
            "topics": [{"topic": "p", "partitions": [
                {"partition": 0, "replicas": [1, 2, 3], "leader": 1, "leader_epoch": 4,
                 "isr": [1, 2], "version": 7},
                {"partition": 1, "replicas": [3, 2], "leader": null, "leader_epoch": null,
                 "isr": []},
            ]}],
        });
        let roles = roles(&ids(), &metadata).unwrap();
        assert_eq!(roles.nodes, vec!["n1", "n2", "n3"]);
        assert_eq!(
            roles.registered.iter().collect::<Vec<_>>(),
            vec!["n1", "n3"],
            "id 9 is no node"
        );
        assert_eq!(roles.controller.as_deref(), Some("n1"));
        assert_eq!(roles.controller_epoch, 3);
        assert_eq!(roles.meta_leader.as_deref(), Some("n2"));
        let p0 = roles.partition("p", 0).unwrap();
        assert_eq!(p0.leader.as_deref(), Some("n1"));
        assert_eq!(p0.leader_epoch, Some(4));
        assert_eq!(p0.replicas, vec!["n1", "n2", "n3"]);
        assert_eq!(p0.isr, vec!["n1", "n2"]);
        let p1 = roles.partition("p", 1).unwrap();
        assert_eq!((p1.leader.clone(), p1.leader_epoch), (None, None));
        let leaderless = super::roles(&ids(), &json!({"controller": null})).unwrap();
        assert_eq!(
            (leaderless.controller, leaderless.controller_epoch),
            (None, 0)
        );
        assert!(super::roles(&ids(), &json!({"brokers": "junk"})).is_none());
    }

    #[test]
    fn control_plane_answers_read_as_controller_views() {
        let acting = json!({"broker_id": 2, "controller_epoch": 5, "live_brokers": [1, 2],
            "elections_won": 2, "resignations": 1, "fenced_writes": 0});
        assert_eq!(
            controller_view(&acting),
            Some(ControllerView {
                acting_epoch: Some(5),
                elections_won: 2,
                resignations: 1
            })
        );
        let idle = json!({"broker_id": 3, "controller_epoch": null, "live_brokers": []});
        assert_eq!(controller_view(&idle).map(|v| v.acting_epoch), Some(None));
        assert_eq!(controller_view(&json!({"controller_epoch": "five"})), None);
        assert_eq!(controller_view(&json!([1, 2])), None);
    }

    #[test]
    fn debug_answers_read_as_views() {
        let answer = json!({"broker_id": 2, "replicas": [
            {"topic": "p", "partition": 0, "role": "follower", "leader": 1,
             "leader_epoch": 4, "isr": [1, 2], "log_start_offset": 7,
             "log_end_offset": 600, "high_watermark": 100, "controller_epoch": 3,
             "epoch_cache": [], "error": null},
        ]});
        let views = replicas(&ids(), &answer).unwrap();
        assert_eq!(views.len(), 1);
        let v = &views[0];
        assert!(!v.leading);
        assert_eq!(v.leader.as_deref(), Some("n1"));
        assert_eq!(
            (v.log_start_offset, v.log_end_offset, v.high_watermark),
            (7, 600, 100)
        );
        assert_eq!(v.controller_epoch, Some(3));
        assert!(replicas(&ids(), &json!({"error": "x"})).is_none());
        let hits = failpoint_hits(&json!({"enabled": true, "hits": {"a@2": 3}})).unwrap();
        assert_eq!(hits.get("a@2"), Some(&3));
        assert_eq!(failpoint_hits(&json!({})), Some(BTreeMap::new()));
    }

    #[test]
    fn truncations_are_read_back_from_the_log_colours_and_all() {
        let log = "2026-12-02T14:02:00Z  INFO broker: broker started\n\
            2026-12-02T14:02:01Z \u{1b}[33m WARN\u{1b}[0m broker::server::partitions: replica discarded records \u{1b}[3mbroker\u{1b}[0m=3 \u{1b}[3mreplica_event\u{1b}[0m={\"kind\":\"truncated\",\"reason\":\"epoch\",\"from\":15,\"to\":10,\"high_watermark\":15,\"leader_log_end\":null,\"unclean_leader_election\":false,\"topic\":\"p\",\"partition\":0}\n\
            replica_event={\"kind\":\"other\"}\n\
            replica_event={not json\n";
        let found = truncations(log);
        assert_eq!(
            found,
            vec![sut::Truncation {
                topic: "p".into(),
                partition: 0,
                reason: "epoch".into(),
                from: 15,
                to: 10,
                high_watermark: 15,
                leader_log_end: None,
                unclean_leader_election: false,
            }]
        );
    }

    #[test]
    fn isr_expansions_are_read_back_with_the_follower_named() {
        let log = "2026-12-02T14:02:01Z \u{1b}[32m INFO\u{1b}[0m broker::server::partitions: ISR expansion broker=1 replica_event={\"kind\":\"isr-expanded\",\"follower\":3,\"follower_log_end\":4,\"leader_epoch\":2,\"high_watermark\":4,\"log_end_offset\":9,\"epoch_start_offset\":9,\"written\":false,\"topic\":\"p\",\"partition\":1,\"unix_ms\":1767000000123}\n\
            replica_event={\"kind\":\"truncated\",\"reason\":\"hw\",\"from\":1,\"to\":0,\"high_watermark\":0,\"topic\":\"p\",\"partition\":0}\n\
            replica_event={\"kind\":\"isr-expanded\",\"follower\":\"x\"}\n";
        assert_eq!(
            isr_expansions(log),
            vec![sut::IsrExpansion {
                topic: "p".into(),
                partition: 1,
                follower: "broker 3".into(),
                follower_log_end: 4,
                unix_ms: 1_767_000_000_123,
                written: false,
                leader_epoch: 2,
                high_watermark: 4,
                epoch_start_offset: Some(9),
            }]
        );
        assert_eq!(truncations(log).len(), 1);
    }
}
