//! A broker's `node.toml`: its id, data folder, listeners and peers (set by the
//! harness), its bug switches, and the user's `KEY=VALUE` settings, where a dotted key
//! names a table (`metadata.session_timeout_ms=3000`).

use std::net::SocketAddr;
use std::path::PathBuf;

use sut::{ClusterSecret, DbError, NodeInfo};

use crate::{BrokerDb, CLIENT_PORT, METADATA_PORT, REPLICATION_PORT};

/// The configuration file's name in the node's folder.
pub const NODE_TOML: &str = "node.toml";

/// Keys the harness sets itself; a setting may not change them.
const HARNESS_KEYS: [&str; 7] = [
    "broker_id",
    "data_dir",
    "listeners",
    "brokers",
    "bugs",
    "cluster_secret",
    "cluster_id",
];

/// The broker's data folder on a node.
pub fn data_dir(node: &NodeInfo) -> PathBuf {
    node.dir.join("data")
}

/// Checks `--broker-config` settings without starting anything.
pub fn validate_settings(settings: &[String]) -> Result<(), DbError> {
    let mut table = toml::Table::new();
    for setting in settings {
        apply_setting(&mut table, setting)?;
    }
    Ok(())
}

/// The broker's `min_insync_replicas` under `settings` (later ones winning; the
/// broker's default, 1, when none names it or a value is not a count).
pub fn min_insync_replicas(settings: &[String]) -> u32 {
    table_of(settings)
        .get("min_insync_replicas")
        .and_then(toml::Value::as_integer)
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(1)
}

/// Why a broker under `settings` may lose acknowledged writes by design, if it may:
/// `truncation_mode = "hw"` (before KIP-101 a follower that comes back cuts its log to
/// its own high watermark, which lags the leader's, and may then be elected) and
/// `unclean_leader_election = true` (a replica outside the ISR may be elected).
pub fn durability_waiver(settings: &[String]) -> Option<String> {
    let table = table_of(settings);
    let mut reasons = Vec::new();
    if hw_truncation_in(&table) {
        reasons.push(
            "truncation_mode = \"hw\": before KIP-101 a follower that comes back cuts its log \
             to its own high watermark, which lags the leader's, and a leader change can then \
             drop committed records",
        );
    }
    if unclean_election_in(&table) {
        reasons.push(
            "unclean_leader_election = true: a replica outside the ISR may be elected, and \
             what only the ISR held is gone",
        );
    }
    (!reasons.is_empty()).then(|| reasons.join("; "))
}

/// Whether a follower under `settings` cuts its log to its own high watermark after a
/// leadership change (`truncation_mode = "hw"`, before KIP-101) instead of asking its
/// leader where their logs diverge (OffsetsForLeaderEpoch, the default).
pub fn truncates_to_high_watermark(settings: &[String]) -> bool {
    hw_truncation_in(&table_of(settings))
}

fn hw_truncation_in(table: &toml::Table) -> bool {
    table.get("truncation_mode").and_then(toml::Value::as_str) == Some("hw")
}

/// Whether a broker under `settings` may elect a replica outside the ISR
/// (`unclean_leader_election = true`; off by default).
pub fn unclean_leader_election(settings: &[String]) -> bool {
    unclean_election_in(&table_of(settings))
}

fn unclean_election_in(table: &toml::Table) -> bool {
    table
        .get("unclean_leader_election")
        .and_then(toml::Value::as_bool)
        == Some(true)
}

/// `settings` as one node.toml table (later ones winning).
fn table_of(settings: &[String]) -> toml::Table {
    let mut table = toml::Table::new();
    for setting in settings {
        // A refused setting refuses the whole test elsewhere; here it names nothing.
        let _ = apply_setting(&mut table, setting);
    }
    table
}

/// One `--broker-config KEY=VALUE` applied to a node.toml table. The value is read as
/// TOML (`3000`, `true`, `"os_only"`, `[1, 2]`) and, failing that, as a string.
pub fn apply_setting(table: &mut toml::Table, setting: &str) -> Result<(), DbError> {
    let refuse = |reason: &str| DbError::Setting {
        setting: setting.to_string(),
        reason: reason.to_string(),
    };
    let (key, value) = setting
        .split_once('=')
        .ok_or_else(|| refuse("expected KEY=VALUE"))?;
    let key = key.trim();
    let value_text = value.trim();
    if key.is_empty() || key.split('.').any(str::is_empty) {
        return Err(refuse("empty key"));
    }
    let value: toml::Value = match format!("v = {value_text}").parse::<toml::Table>() {
        Ok(mut parsed) => parsed
            .remove("v")
            .unwrap_or_else(|| toml::Value::String(value_text.to_string())),
        Err(_) => toml::Value::String(value_text.to_string()),
    };
    let mut parts: Vec<&str> = key.split('.').collect();
    let last = parts.pop().unwrap_or_default();
    let mut current = table;
    for part in parts {
        let entry = current
            .entry(part.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        current = entry
            .as_table_mut()
            .ok_or_else(|| refuse(&format!("`{part}` is not a table")))?;
    }
    if HARNESS_KEYS.contains(&last) {
        return Err(refuse(
            "set by the harness (use --bug for bug switches, --nodes for the cluster)",
        ));
    }
    current.insert(last.to_string(), value);
    Ok(())
}

/// The node.toml of node `index` of `nodes`.
pub fn node_toml(
    nodes: &[NodeInfo],
    index: usize,
    bugs: &[String],
    settings: &[String],
    secret: &ClusterSecret,
) -> Result<String, DbError> {
    let node = nodes
        .get(index)
        .ok_or_else(|| DbError::Other(format!("no node {index} of {}", nodes.len())))?;
    let mut table = toml::Table::new();
    table.insert(
        "broker_id".into(),
        toml::Value::Integer(BrokerDb::broker_id(index).into()),
    );
    table.insert(
        "data_dir".into(),
        toml::Value::String(data_dir(node).display().to_string()),
    );
    table.insert(
        "bugs".into(),
        toml::Value::Array(
            bugs.iter()
                .map(|b| toml::Value::String(b.clone()))
                .collect(),
        ),
    );
    // The harness arms failpoints (slow links, aimed strikes, scenario steps); a setting
    // may still turn them off.
    table.insert("enable_failpoints".into(), toml::Value::Boolean(true));
    // The peers sign every request to each other with it, and the harness its failpoints.
    table.insert(
        "cluster_secret".into(),
        toml::Value::String(secret.to_hex()),
    );
    // A node never starts on another cluster's data folder.
    table.insert(
        "cluster_id".into(),
        toml::Value::String(secret.cluster_id()),
    );
    for setting in settings {
        apply_setting(&mut table, setting)?;
    }
    let mut listeners = toml::Table::new();
    for (name, port) in [
        ("client", CLIENT_PORT),
        ("replication", REPLICATION_PORT),
        ("metadata", METADATA_PORT),
    ] {
        listeners.insert(
            name.into(),
            toml::Value::String(SocketAddr::new(node.address, port).to_string()),
        );
    }
    table.insert("listeners".into(), toml::Value::Table(listeners));
    let brokers = nodes
        .iter()
        .enumerate()
        .map(|(i, peer)| {
            let mut entry = toml::Table::new();
            entry.insert(
                "id".into(),
                toml::Value::Integer(BrokerDb::broker_id(i).into()),
            );
            for (name, port) in [
                ("replication", REPLICATION_PORT),
                ("metadata", METADATA_PORT),
            ] {
                entry.insert(
                    name.into(),
                    toml::Value::String(SocketAddr::new(peer.address, port).to_string()),
                );
            }
            toml::Value::Table(entry)
        })
        .collect();
    table.insert("brokers".into(), toml::Value::Array(brokers));
    toml::to_string(&table).map_err(|e| DbError::Setting {
        setting: settings.join(" "),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durability_is_waived_only_for_hw_truncation_or_unclean_elections() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(durability_waiver(&[]), None);
        assert_eq!(
            durability_waiver(&s(&[
                "truncation_mode=epoch",
                "unclean_leader_election=false"
            ])),
            None
        );
        let hw = durability_waiver(&s(&["truncation_mode=hw"])).expect("hw");
        assert!(hw.contains("KIP-101") && !hw.contains("unclean"), "{hw}");
        let both = durability_waiver(&s(&["truncation_mode=hw", "unclean_leader_election=true"]))
            .expect("both");
        assert!(
            both.contains("KIP-101") && both.contains("unclean"),
            "{both}"
        );
        // The last setting wins.
        assert_eq!(
            durability_waiver(&s(&[
                "unclean_leader_election=true",
                "unclean_leader_election=false"
            ])),
            None
        );
    }

    #[test]
    fn followers_ask_where_logs_diverge_unless_they_truncate_to_the_high_watermark() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let asks = |settings: &[&str]| sut::Db::asks_divergence(&BrokerDb, &s(settings));
        assert!(asks(&[]));
        assert!(asks(&[
            "truncation_mode=epoch",
            "unclean_leader_election=true"
        ]));
        assert!(!asks(&["truncation_mode=hw"]));
        assert!(!asks(&["truncation_mode = \"hw\""]));
        // The last setting wins.
        assert!(asks(&["truncation_mode=hw", "truncation_mode=epoch"]));
    }

    #[test]
    fn min_insync_replicas_is_the_last_setting_or_the_default() {
        let s = |items: &[&str]| items.iter().map(|i| i.to_string()).collect::<Vec<_>>();
        assert_eq!(min_insync_replicas(&[]), 1);
        assert_eq!(min_insync_replicas(&s(&["min_insync_replicas=2"])), 2);
        assert_eq!(
            min_insync_replicas(&s(&["min_insync_replicas=3", "min_insync_replicas = 2"])),
            2
        );
        assert_eq!(min_insync_replicas(&s(&["min_insync_replicas=many"])), 1);
        assert_eq!(min_insync_replicas(&s(&["min_insync_replicas=-1"])), 1);
        assert_eq!(
            sut::Db::failures_tolerated(&BrokerDb, &s(&["min_insync_replicas=2"]), 3),
            1
        );
        assert_eq!(
            sut::Db::failures_tolerated(&BrokerDb, &s(&["min_insync_replicas=2"]), 2),
            0
        );
    }

    #[test]
    fn settings_land_in_their_tables_as_typed_values() {
        let mut table = toml::Table::new();
        apply_setting(&mut table, "min_insync_replicas=2").unwrap();
        apply_setting(&mut table, "metadata.session_timeout_ms = 3000").unwrap();
        apply_setting(&mut table, "storage.flush_policy=every_append").unwrap();
        apply_setting(&mut table, "unclean_leader_election=true").unwrap();
        let text = toml::to_string(&table).unwrap();
        assert!(text.contains("min_insync_replicas = 2"), "{text}");
        assert!(text.contains("unclean_leader_election = true"), "{text}");
        assert!(
            text.contains("[metadata]\nsession_timeout_ms = 3000"),
            "{text}"
        );
        assert!(text.contains("flush_policy = \"every_append\""), "{text}");
        for bad in ["novalue", "=3", "a..b=1", "broker_id=4", "bugs=[]"] {
            assert!(apply_setting(&mut table, bad).is_err(), "{bad}");
        }
        apply_setting(&mut table, "x=1").unwrap();
        assert!(
            apply_setting(&mut table, "x.y=1").is_err(),
            "x is not a table"
        );
    }

    #[test]
    fn a_node_toml_names_the_node_its_peers_and_the_settings() {
        let secret = ClusterSecret::draw().unwrap();
        let nodes: Vec<NodeInfo> = (1..=3)
            .map(|i| NodeInfo {
                name: format!("n{i}"),
                address: format!("10.0.0.{i}").parse().unwrap(),
                dir: PathBuf::from(format!("/r/n{i}")),
            })
            .collect();
        let text = node_toml(
            &nodes,
            1,
            &["KAFKA-7128".into()],
            &[
                "min_insync_replicas=2".into(),
                "min_insync_replicas=3".into(),
            ],
            &secret,
        )
        .unwrap();
        let table: toml::Table = text.parse().unwrap();
        assert_eq!(table["broker_id"].as_integer(), Some(2));
        assert_eq!(table["data_dir"].as_str(), Some("/r/n2/data"));
        assert_eq!(table["min_insync_replicas"].as_integer(), Some(3));
        assert_eq!(table["listeners"]["client"].as_str(), Some("10.0.0.2:9092"));
        let brokers = table["brokers"].as_array().unwrap();
        assert_eq!(brokers.len(), 3);
        assert_eq!(brokers[2]["metadata"].as_str(), Some("10.0.0.3:9094"));
        assert_eq!(table["bugs"].as_array().unwrap().len(), 1);
        assert_eq!(table["cluster_secret"].as_str(), Some(&*secret.to_hex()));
        assert_eq!(table["cluster_id"].as_str(), Some(&*secret.cluster_id()));
        assert!(node_toml(&nodes, 3, &[], &[], &secret).is_err());
    }
}
