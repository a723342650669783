//! Node targets: whom a kill, pause or isolation hits. Role targets are resolved from
//! the [`Roles`] of the moment the fault starts.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use crate::roles::Roles;
use rng::Rng;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// A spec that does not parse; `reason` lists what would.
    #[error("unknown target {spec:?}: {reason}")]
    Unknown { spec: String, reason: String },
    /// The role has no holder now (no controller, no known quorum leader, no leaders).
    #[error("no node holds the role {0}")]
    NoHolder(String),
    /// An explicit node that is not in the test.
    #[error("no node {node:?} in this test (nodes: {})", nodes.join(", "))]
    UnknownNode { node: String, nodes: Vec<String> },
    /// The test has fewer nodes than `shape` (a partition shape's or a target's name)
    /// needs.
    #[error("{shape} needs at least {need} nodes, this test has {have}")]
    TooFewNodes {
        shape: String,
        need: usize,
        have: usize,
    },
}

/// Whom a fault hits.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TargetSpec {
    /// One random node.
    One,
    /// A random minority: 1..=(n-1)/2 nodes (one node when n < 3).
    Minority,
    /// A random majority: n/2+1 nodes.
    Majority,
    All,
    /// The leaders of a random non-empty subset of partitions.
    Leaders,
    Controller,
    /// The metadata quorum's leader.
    MetaLeader,
    /// Exactly these nodes (`n1+n3` on the command line).
    Nodes(Vec<String>),
}

impl TargetSpec {
    /// The default `--nemesis-targets`.
    pub fn defaults() -> Vec<TargetSpec> {
        vec![
            TargetSpec::One,
            TargetSpec::Minority,
            TargetSpec::Majority,
            TargetSpec::All,
            TargetSpec::Leaders,
            TargetSpec::Controller,
            TargetSpec::MetaLeader,
        ]
    }

    /// Parses a comma-separated `--nemesis-targets` list.
    pub fn parse_list(list: &str) -> Result<Vec<TargetSpec>, TargetError> {
        list.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::parse)
            .collect()
    }

    /// Whether it names a role (resolved from the cluster's metadata).
    pub fn is_role(&self) -> bool {
        matches!(
            self,
            TargetSpec::Leaders | TargetSpec::Controller | TargetSpec::MetaLeader
        )
    }

    /// The nodes it names now, sorted by node order. Errors when a role has no holder,
    /// or an explicit node is unknown; never returns an empty list.
    ///
    /// - `one`: one random node; `minority`: 1..=(n-1)/2 random nodes (one when n < 3);
    ///   `majority`: n/2+1 random nodes; `all`: every node.
    /// - `leaders`: the leaders of a random non-empty subset of the partitions whose
    ///   leader is a node of the test ([`TargetError::NoHolder`] when there is none).
    /// - `controller`, `meta-leader`: that node ([`TargetError::NoHolder`] when nobody
    ///   holds the role, [`TargetError::UnknownNode`] when its holder is no node of the
    ///   test).
    /// - explicit nodes: exactly those, each checked against `roles.nodes`
    ///   ([`TargetError::UnknownNode`]).
    ///
    /// A test without nodes gives [`TargetError::TooFewNodes`].
    pub fn resolve(&self, roles: &Roles, rng: &mut Rng) -> Result<Vec<String>, TargetError> {
        let nodes = &roles.nodes;
        let n = nodes.len();
        if n == 0 {
            return Err(TargetError::TooFewNodes {
                shape: self.to_string(),
                need: 1,
                have: 0,
            });
        }
        let names: Vec<&str> = nodes.iter().map(String::as_str).collect();
        let chosen: BTreeSet<&str> = match self {
            TargetSpec::One => random_subset(&names, 1, rng),
            TargetSpec::Minority => {
                let most = ((n - 1) / 2).max(1);
                let size = rng.between(1, most as u64) as usize;
                random_subset(&names, size, rng)
            }
            TargetSpec::Majority => random_subset(&names, n / 2 + 1, rng),
            TargetSpec::All => names.iter().copied().collect(),
            TargetSpec::Leaders => {
                let leaders: Vec<&str> = roles
                    .partitions
                    .iter()
                    .filter_map(|p| p.leader.as_deref())
                    .filter(|leader| nodes.iter().any(|node| node == leader))
                    .collect();
                if leaders.is_empty() {
                    return Err(TargetError::NoHolder("leaders".into()));
                }
                let size = rng.between(1, leaders.len() as u64) as usize;
                random_subset(&leaders, size, rng)
            }
            TargetSpec::Controller => holder(&roles.controller, "controller", nodes)?,
            TargetSpec::MetaLeader => holder(&roles.meta_leader, "meta-leader", nodes)?,
            TargetSpec::Nodes(named) => {
                if named.is_empty() {
                    return Err(TargetError::Unknown {
                        spec: String::new(),
                        reason: "an explicit target names at least one node".into(),
                    });
                }
                for node in named {
                    if !nodes.contains(node) {
                        return Err(TargetError::UnknownNode {
                            node: node.clone(),
                            nodes: nodes.clone(),
                        });
                    }
                }
                named.iter().map(String::as_str).collect()
            }
        };
        Ok(in_node_order(nodes, &chosen))
    }
}

/// `size` distinct elements of `items` drawn at random (all of them when `size` is at
/// least their number).
fn random_subset<'a>(items: &[&'a str], size: usize, rng: &mut Rng) -> BTreeSet<&'a str> {
    let mut shuffled = items.to_vec();
    rng.shuffle(&mut shuffled);
    shuffled.into_iter().take(size).collect()
}

/// The holder of a single-node role, which must be a node of the test.
fn holder<'a>(
    role: &'a Option<String>,
    name: &str,
    nodes: &[String],
) -> Result<BTreeSet<&'a str>, TargetError> {
    let node = role
        .as_deref()
        .ok_or_else(|| TargetError::NoHolder(name.into()))?;
    if !nodes.iter().any(|n| n == node) {
        return Err(TargetError::UnknownNode {
            node: node.into(),
            nodes: nodes.to_vec(),
        });
    }
    Ok(BTreeSet::from([node]))
}

/// The chosen nodes in the order of `nodes`, each once.
fn in_node_order(nodes: &[String], chosen: &BTreeSet<&str>) -> Vec<String> {
    let mut seen = BTreeSet::new();
    nodes
        .iter()
        .filter(|node| chosen.contains(node.as_str()) && seen.insert(node.as_str()))
        .cloned()
        .collect()
}

/// What [`TargetSpec::from_str`] accepts, for error messages.
const EXPECTED: &str = "expected one, minority, majority, all, leaders, controller, \
    meta-leader, or node names n<digits> joined by + (e.g. n1+n3)";

/// Whether `name` is a node name: `n` followed by one or more ASCII digits.
fn is_node_name(name: &str) -> bool {
    name.strip_prefix('n')
        .is_some_and(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
}

/// Written as `--nemesis-targets` names one (`one`, `meta-leader`, `n1+n3`).
impl serde::Serialize for TargetSpec {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for TargetSpec {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for TargetSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TargetSpec::One => f.write_str("one"),
            TargetSpec::Minority => f.write_str("minority"),
            TargetSpec::Majority => f.write_str("majority"),
            TargetSpec::All => f.write_str("all"),
            TargetSpec::Leaders => f.write_str("leaders"),
            TargetSpec::Controller => f.write_str("controller"),
            TargetSpec::MetaLeader => f.write_str("meta-leader"),
            TargetSpec::Nodes(nodes) => f.write_str(&nodes.join("+")),
        }
    }
}

impl FromStr for TargetSpec {
    type Err = TargetError;

    /// `one`, `minority`, `majority`, `all`, `leaders`, `controller`, `meta-leader`, or
    /// explicit nodes joined by `+` (`n1+n3`; names `n<digits>`).
    /// A node named twice, an empty name (`n1+`) or anything else is
    /// [`TargetError::Unknown`].
    fn from_str(s: &str) -> Result<TargetSpec, TargetError> {
        let unknown = |reason: String| TargetError::Unknown {
            spec: s.to_string(),
            reason,
        };
        match s {
            "one" => return Ok(TargetSpec::One),
            "minority" => return Ok(TargetSpec::Minority),
            "majority" => return Ok(TargetSpec::Majority),
            "all" => return Ok(TargetSpec::All),
            "leaders" => return Ok(TargetSpec::Leaders),
            "controller" => return Ok(TargetSpec::Controller),
            "meta-leader" => return Ok(TargetSpec::MetaLeader),
            _ => {}
        }
        let mut nodes: Vec<String> = Vec::new();
        for name in s.split('+') {
            if !is_node_name(name) {
                return Err(unknown(EXPECTED.to_string()));
            }
            if nodes.iter().any(|node| node == name) {
                return Err(unknown(format!("node {name} is named twice")));
            }
            nodes.push(name.to_string());
        }
        Ok(TargetSpec::Nodes(nodes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roles::PartitionRoles;
    use proptest::prelude::*;
    use rng::Rng;

    fn names(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("n{i}")).collect()
    }

    fn partition(p: u32, leader: Option<&str>) -> PartitionRoles {
        PartitionRoles {
            leader_epoch: None,
            topic: "t".into(),
            partition: p,
            leader: leader.map(String::from),
            replicas: vec![],
            isr: vec![],
        }
    }

    /// Five nodes: controller n2, quorum leader n3, partitions led by n4, n1, n4 and one
    /// leaderless.
    fn five() -> Roles {
        Roles {
            controller_epoch: 0,
            nodes: names(5),
            registered: names(5).into_iter().collect(),
            controller: Some("n2".into()),
            meta_leader: Some("n3".into()),
            partitions: vec![
                partition(0, Some("n4")),
                partition(1, Some("n1")),
                partition(2, None),
                partition(3, Some("n4")),
            ],
        }
    }

    fn assert_well_formed(nodes: &[String], resolved: &[String]) {
        assert!(!resolved.is_empty());
        let positions: Vec<usize> = resolved
            .iter()
            .map(|r| {
                nodes
                    .iter()
                    .position(|n| n == r)
                    .expect("a node of the test")
            })
            .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{resolved:?}");
    }

    #[test]
    fn sizes_on_five_nodes() {
        let roles = five();
        let mut minority_sizes = BTreeSet::new();
        let mut seen_one = BTreeSet::new();
        for seed in 0..200 {
            let mut rng = Rng::new(seed);
            let one = TargetSpec::One.resolve(&roles, &mut rng).unwrap();
            assert_eq!(one.len(), 1);
            seen_one.insert(one[0].clone());
            let minority = TargetSpec::Minority.resolve(&roles, &mut rng).unwrap();
            assert_well_formed(&roles.nodes, &minority);
            assert!((1..=2).contains(&minority.len()), "{minority:?}");
            minority_sizes.insert(minority.len());
            let majority = TargetSpec::Majority.resolve(&roles, &mut rng).unwrap();
            assert_well_formed(&roles.nodes, &majority);
            assert_eq!(majority.len(), 3);
            assert_eq!(TargetSpec::All.resolve(&roles, &mut rng).unwrap(), names(5));
        }
        assert_eq!(seen_one.len(), 5, "every node is sometimes the one");
        assert_eq!(minority_sizes, BTreeSet::from([1, 2]));
    }

    #[test]
    fn sizes_on_small_and_even_clusters() {
        let mut rng = Rng::new(3);
        for (n, minority, majority) in [(1, 1, 1), (2, 1, 2), (3, 1, 2), (4, 1, 3), (6, 2, 4)] {
            let roles = Roles::unknown(&names(n));
            for _ in 0..50 {
                let got = TargetSpec::Minority.resolve(&roles, &mut rng).unwrap();
                assert!((1..=minority).contains(&got.len()), "n={n}: {got:?}");
                let got = TargetSpec::Majority.resolve(&roles, &mut rng).unwrap();
                assert_eq!(got.len(), majority, "n={n}");
            }
        }
        assert!(matches!(
            TargetSpec::One.resolve(&Roles::unknown(&[]), &mut rng),
            Err(TargetError::TooFewNodes {
                need: 1,
                have: 0,
                ..
            })
        ));
    }

    #[test]
    fn role_holders() {
        let roles = five();
        let mut rng = Rng::new(1);
        assert_eq!(
            TargetSpec::Controller.resolve(&roles, &mut rng).unwrap(),
            vec!["n2"]
        );
        assert_eq!(
            TargetSpec::MetaLeader.resolve(&roles, &mut rng).unwrap(),
            vec!["n3"]
        );
        let mut subsets = BTreeSet::new();
        for seed in 0..100 {
            let leaders = TargetSpec::Leaders
                .resolve(&roles, &mut Rng::new(seed))
                .unwrap();
            assert_well_formed(&roles.nodes, &leaders);
            assert!(
                leaders.iter().all(|l| l == "n1" || l == "n4"),
                "{leaders:?}"
            );
            subsets.insert(leaders);
        }
        let both: Vec<String> = vec!["n1".into(), "n4".into()];
        assert!(
            subsets.contains(&both),
            "sometimes every leader: {subsets:?}"
        );
        assert!(
            subsets.len() >= 2,
            "not always the same leaders: {subsets:?}"
        );
    }

    #[test]
    fn absent_roles_have_no_holder() {
        let roles = Roles {
            controller_epoch: 0,
            partitions: vec![partition(0, None), partition(1, Some("n9"))],
            ..Roles::unknown(&names(5))
        };
        let mut rng = Rng::new(1);
        for (spec, role) in [
            (TargetSpec::Leaders, "leaders"),
            (TargetSpec::Controller, "controller"),
            (TargetSpec::MetaLeader, "meta-leader"),
        ] {
            assert_eq!(
                spec.resolve(&roles, &mut rng),
                Err(TargetError::NoHolder(role.into()))
            );
        }
        let stray = Roles {
            controller_epoch: 0,
            controller: Some("n9".into()),
            ..roles
        };
        assert!(matches!(
            TargetSpec::Controller.resolve(&stray, &mut rng),
            Err(TargetError::UnknownNode { node, .. }) if node == "n9"
        ));
    }

    #[test]
    fn explicit_nodes_resolve_in_node_order() {
        let roles = five();
        let mut rng = Rng::new(1);
        let spec: TargetSpec = "n4+n1+n3".parse().unwrap();
        assert_eq!(
            spec.resolve(&roles, &mut rng).unwrap(),
            vec!["n1", "n3", "n4"]
        );
        let spec: TargetSpec = "n2+n6".parse().unwrap();
        let err = spec.resolve(&roles, &mut rng).unwrap_err();
        assert_eq!(
            err,
            TargetError::UnknownNode {
                node: "n6".into(),
                nodes: names(5)
            }
        );
        assert!(err.to_string().contains("n6"), "{err}");
        assert!(TargetSpec::Nodes(vec![]).resolve(&roles, &mut rng).is_err());
    }

    #[test]
    fn parse_round_trips_through_display() {
        let mut specs = TargetSpec::defaults();
        specs.push(TargetSpec::Nodes(vec!["n3".into()]));
        specs.push(TargetSpec::Nodes(vec![
            "n1".into(),
            "n3".into(),
            "n10".into(),
        ]));
        for spec in specs {
            assert_eq!(
                spec.to_string().parse::<TargetSpec>(),
                Ok(spec.clone()),
                "{spec}"
            );
        }
        assert_eq!("meta-leader".parse(), Ok(TargetSpec::MetaLeader));
        assert_eq!(
            TargetSpec::parse_list(" one, leaders ,n1+n2,").unwrap(),
            vec![
                TargetSpec::One,
                TargetSpec::Leaders,
                TargetSpec::Nodes(vec!["n1".into(), "n2".into()])
            ]
        );
    }

    #[test]
    fn bad_specs_say_what_parses() {
        for bad in [
            "primaries",
            "",
            "n",
            "n1+",
            "+n1",
            "node1",
            "n1+x2",
            "N1",
            "n-1",
            "One",
        ] {
            let err = bad.parse::<TargetSpec>().unwrap_err();
            let TargetError::Unknown { spec, reason } = &err else {
                panic!("{bad:?}: {err:?}");
            };
            assert_eq!(spec, bad);
            for expected in [
                "one",
                "minority",
                "majority",
                "leaders",
                "controller",
                "meta-leader",
                "n1+n3",
            ] {
                assert!(reason.contains(expected), "{bad:?}: {err}");
            }
        }
        let err = "n1+n2+n1".parse::<TargetSpec>().unwrap_err();
        assert!(
            matches!(&err, TargetError::Unknown { reason, .. } if reason.contains("twice")),
            "{err}"
        );
        assert!(TargetSpec::parse_list("one,bogus").is_err());
    }

    proptest! {
        #[test]
        fn resolution_is_sorted_distinct_and_non_empty(n in 1usize..12, seed in any::<u64>()) {
            let mut roles = Roles::unknown(&names(n));
            roles.controller = Some(format!("n{}", n));
            roles.meta_leader = Some("n1".into());
            roles.partitions = (0..n as u32)
                .map(|p| partition(p, Some(&format!("n{}", p as usize % n + 1))))
                .collect();
            let mut rng = Rng::new(seed);
            for spec in TargetSpec::defaults() {
                let got = spec.resolve(&roles, &mut rng).unwrap();
                assert_well_formed(&roles.nodes, &got);
            }
        }
    }
}
