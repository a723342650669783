//! Network partitions as grudges: for each node, the nodes whose packets it drops
//! (Jepsen's grudge). A symmetric grudge from components cuts every pair of nodes in
//! different components both ways; a one-way grudge drops one direction only.
//!
//! Shapes (`../shared/docs/jepsen.md` §2.2): random halves, one node, a clean
//! majority/minority, majorities-ring, bridge, isolating target nodes (each in its own
//! component: role-aware, e.g. the controller or some partitions' leaders), an explicit
//! grudge.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::roles::Roles;
use crate::target::{TargetError, TargetSpec};
use rng::Rng;

/// `node → nodes whose packets it drops`. Nodes that drop nothing are absent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grudge(pub BTreeMap<String, BTreeSet<String>>);

impl Grudge {
    /// Every node drops packets from every node outside its own component. Nodes of no
    /// component are untouched. A node in several components (a bridge) hears from
    /// every node of each of them, and every node of those components hears from it.
    pub fn complete(components: &[Vec<String>]) -> Grudge {
        // Each node's side: every node it shares a component with.
        let mut sides: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for component in components {
            for node in component {
                sides
                    .entry(node.as_str())
                    .or_default()
                    .extend(component.iter().map(String::as_str));
            }
        }
        let everyone: BTreeSet<&str> = sides.keys().copied().collect();
        let mut grudge = Grudge::default();
        for (node, side) in &sides {
            for from in everyone.difference(side) {
                grudge.drop_from(node, from);
            }
        }
        grudge
    }

    /// Every node of `to` drops packets from every node of `from` (one direction only:
    /// `to` still reaches `from`).
    /// A node in both lists does not drop its own packets.
    pub fn one_way(from: &[String], to: &[String]) -> Grudge {
        let mut grudge = Grudge::default();
        for node in to {
            for source in from {
                grudge.drop_from(node, source);
            }
        }
        grudge
    }

    /// Adds `node` drops packets from `from`. A node never drops its own packets:
    /// `node == from` changes nothing.
    pub fn drop_from(&mut self, node: &str, from: &str) {
        if node == from {
            return;
        }
        self.0
            .entry(node.to_string())
            .or_default()
            .insert(from.to_string());
    }

    /// Whether `node` drops packets from `from`.
    pub fn drops(&self, node: &str, from: &str) -> bool {
        self.0
            .get(node)
            .is_some_and(|dropped| dropped.contains(from))
    }

    pub fn is_empty(&self) -> bool {
        self.0.values().all(BTreeSet::is_empty)
    }

    /// Every directed edge `(from, to)`: packets from `from` are dropped at `to`; sorted.
    pub fn edges(&self) -> Vec<(String, String)> {
        let mut edges: Vec<(String, String)> = self
            .0
            .iter()
            .flat_map(|(to, froms)| froms.iter().map(move |from| (from.clone(), to.clone())))
            .collect();
        edges.sort();
        edges
    }

    /// The nodes each node still hears from (itself included), for checks and display.
    /// Only `nodes` are considered, both as hearers and as senders.
    pub fn reachable(&self, nodes: &[String]) -> BTreeMap<String, BTreeSet<String>> {
        nodes
            .iter()
            .map(|node| {
                let heard = nodes
                    .iter()
                    .filter(|from| *from == node || !self.drops(node, from))
                    .cloned()
                    .collect();
                (node.clone(), heard)
            })
            .collect()
    }
}

/// Which traffic a cut drops: all of it, or only that to one listener's port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Ports {
    All,
    /// The metadata quorum's listener (Raft, sessions).
    Metadata,
    /// The replication listener (follower fetches, LeaderAndIsr).
    Replication,
}

impl Ports {
    pub fn name(self) -> &'static str {
        match self {
            Ports::All => "all",
            Ports::Metadata => "metadata",
            Ports::Replication => "replication",
        }
    }
}

/// A partition's shape, resolved into a [`Grudge`] when the fault starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shape {
    /// Shuffle, then cut into two halves (the first the smaller one).
    Halves,
    /// One random node alone.
    One,
    /// A random minority of 1..=(n-1)/2 nodes cut from the majority.
    Majority,
    /// Every node sees a majority, no two nodes the same one (n ≥ 3).
    MajoritiesRing,
    /// Two halves and one bridge node connected to both (n ≥ 3).
    Bridge,
    /// Each node the target names in a component of its own, the rest together.
    Isolate(TargetSpec),
    /// Exactly this grudge.
    Explicit(Grudge),
}

impl Shape {
    /// The default shapes of the `partition` package (role-aware isolations are added
    /// from the role targets asked for).
    pub fn defaults() -> Vec<Shape> {
        vec![
            Shape::Halves,
            Shape::One,
            Shape::Majority,
            Shape::MajoritiesRing,
            Shape::Bridge,
        ]
    }

    /// Its name in the history: `halves`, `one`, `majority`, `majorities-ring`,
    /// `bridge`, `isolate-<target>`, `grudge`.
    pub fn name(&self) -> String {
        match self {
            Shape::Halves => "halves".into(),
            Shape::One => "one".into(),
            Shape::Majority => "majority".into(),
            Shape::MajoritiesRing => "majorities-ring".into(),
            Shape::Bridge => "bridge".into(),
            Shape::Isolate(target) => format!("isolate-{target}"),
            Shape::Explicit(_) => "grudge".into(),
        }
    }

    /// The grudge for `roles.nodes` now. Never empty for ≥ 2 nodes (an error when the
    /// shape needs more nodes than there are, or a role has no holder).
    ///
    /// Every shape but [`Shape::Explicit`] needs two nodes, [`Shape::MajoritiesRing`] and
    /// [`Shape::Bridge`] three ([`TargetError::TooFewNodes`]). With two nodes, halves,
    /// one and majority all put each node alone. [`Shape::Isolate`] resolves its target
    /// ([`TargetSpec::resolve`]'s errors) and puts each node it names alone, the others
    /// together. [`Shape::Explicit`] is the grudge as given, once every node it names is
    /// known to be in `roles.nodes` ([`TargetError::UnknownNode`] otherwise).
    pub fn grudge(&self, roles: &Roles, rng: &mut Rng) -> Result<Grudge, TargetError> {
        let nodes = &roles.nodes;
        let need = self.min_nodes();
        if nodes.len() < need {
            return Err(TargetError::TooFewNodes {
                shape: self.name(),
                need,
                have: nodes.len(),
            });
        }
        match self {
            Shape::Halves => Ok(Grudge::complete(&halves(nodes, rng))),
            Shape::One => Ok(Grudge::complete(&split_off_random(nodes, 1, rng))),
            Shape::Majority => {
                let most = ((nodes.len() - 1) / 2).max(1);
                let size = rng.between(1, most as u64) as usize;
                Ok(Grudge::complete(&split_off_random(nodes, size, rng)))
            }
            Shape::MajoritiesRing => Ok(majorities_ring(nodes, rng)),
            Shape::Bridge => Ok(bridge(nodes, rng)),
            Shape::Isolate(target) => {
                let isolated = target.resolve(roles, rng)?;
                let rest: Vec<String> = nodes
                    .iter()
                    .filter(|node| !isolated.contains(node))
                    .cloned()
                    .collect();
                let mut components: Vec<Vec<String>> =
                    isolated.into_iter().map(|node| vec![node]).collect();
                if !rest.is_empty() {
                    components.push(rest);
                }
                Ok(Grudge::complete(&components))
            }
            Shape::Explicit(grudge) => {
                let named = grudge
                    .0
                    .iter()
                    .flat_map(|(node, froms)| std::iter::once(node).chain(froms));
                for node in named {
                    if !nodes.contains(node) {
                        return Err(TargetError::UnknownNode {
                            node: node.clone(),
                            nodes: nodes.clone(),
                        });
                    }
                }
                Ok(grudge.clone())
            }
        }
    }

    /// The fewest nodes the shape makes a partition of: 3 for majorities-ring and
    /// bridge, none for an explicit grudge, 2 for the others.
    pub fn min_nodes(&self) -> usize {
        match self {
            Shape::MajoritiesRing | Shape::Bridge => 3,
            Shape::Explicit(_) => 0,
            Shape::Halves | Shape::One | Shape::Majority | Shape::Isolate(_) => 2,
        }
    }
}

/// Two components: `size` random nodes, then the others (each in node order).
fn split_off_random(nodes: &[String], size: usize, rng: &mut Rng) -> Vec<Vec<String>> {
    let mut shuffled: Vec<&String> = nodes.iter().collect();
    rng.shuffle(&mut shuffled);
    let chosen: BTreeSet<&String> = shuffled.into_iter().take(size).collect();
    let (first, rest): (Vec<String>, Vec<String>) = nodes
        .iter()
        .cloned()
        .partition(|node| chosen.contains(node));
    vec![first, rest]
}

/// Random halves: the shuffled nodes bisected, the smaller half first.
/// The first half has `n/2` nodes, the second the other `n - n/2`.
pub fn halves(nodes: &[String], rng: &mut Rng) -> Vec<Vec<String>> {
    let mut shuffled = nodes.to_vec();
    rng.shuffle(&mut shuffled);
    let second = shuffled.split_off(shuffled.len() / 2);
    vec![shuffled, second]
}

/// Majorities ring: each node drops the nodes outside its own majority, such that every
/// node sees a majority (itself included) and no two nodes see the same set. The grudge
/// is symmetric (`a` drops `b` exactly when `b` drops `a`), with the ring order shuffled.
///
/// With the majority `m = n/2 + 1`, a node sees the nodes within ring distance
/// `r = ⌈(m-1)/2⌉` of it: `2r + 1` nodes, which is `m` when `m - 1` is even and `m + 1`
/// otherwise (a symmetric view cannot take one more neighbour on one side only). For
/// n ≥ 4, `2r + 1 < n`, so each view is a proper arc of the ring centred on its node and
/// no two are the same; e.g. n = 4 sees `i-1, i, i+1` and n = 5 the same, n = 6 and
/// n = 7 see `i-2..=i+2`.
///
/// For n = 3 every arc of three is the whole ring, so the ring is broken instead: the
/// nodes form a path `a - b - c` where `a` and `c` drop each other. `a` sees `{a, b}`,
/// `b` sees everyone, `c` sees `{b, c}`: all majorities, all distinct. Fewer than three
/// nodes have no two distinct majorities: the grudge is empty.
pub fn majorities_ring(nodes: &[String], rng: &mut Rng) -> Grudge {
    let n = nodes.len();
    let mut ring = nodes.to_vec();
    rng.shuffle(&mut ring);
    let mut grudge = Grudge::default();
    match n {
        0..=2 => {}
        3 => {
            grudge.drop_from(&ring[0], &ring[2]);
            grudge.drop_from(&ring[2], &ring[0]);
        }
        _ => {
            let majority = n / 2 + 1;
            let reach = majority / 2; // ⌈(m-1)/2⌉
            for (i, node) in ring.iter().enumerate() {
                for (j, other) in ring.iter().enumerate() {
                    let apart = i.abs_diff(j);
                    if apart.min(n - apart) > reach {
                        grudge.drop_from(node, other);
                    }
                }
            }
        }
    }
    grudge
}

/// Bridge: shuffled nodes cut into two halves, with one node (the bridge) in both.
///
/// The nodes are bisected as [`halves`] does; the bridge is a node of the second
/// (larger, or equal) half, which it stays in, and it also hears and is heard by the
/// first half. The halves otherwise drop each other (symmetric). Each node of the first
/// half sees `n/2 + 1` nodes (a majority); the others of the second half see
/// `n - n/2`, a majority only when n is odd. Fewer than three nodes give an empty grudge.
pub fn bridge(nodes: &[String], rng: &mut Rng) -> Grudge {
    let mut components = halves(nodes, rng);
    let bridge = components.get(1).and_then(|second| second.first()).cloned();
    if let (Some(bridge), Some(first)) = (bridge, components.first_mut()) {
        first.push(bridge);
    }
    Grudge::complete(&components)
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

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    fn is_symmetric(grudge: &Grudge) -> bool {
        grudge
            .edges()
            .iter()
            .all(|(from, to)| grudge.drops(from, to))
    }

    /// Five nodes: controller n2, quorum leader n3, partitions led by n4 and n5.
    fn five() -> Roles {
        let partition = |p: u32, leader: &str| PartitionRoles {
            leader_epoch: None,
            topic: "t".into(),
            partition: p,
            leader: Some(leader.into()),
            replicas: vec![],
            isr: vec![],
        };
        Roles {
            controller_epoch: 0,
            controller: Some("n2".into()),
            meta_leader: Some("n3".into()),
            partitions: vec![partition(0, "n4"), partition(1, "n5"), partition(2, "n4")],
            ..Roles::unknown(&names(5))
        }
    }

    /// Checks the majorities-ring properties of one grudge over `nodes`.
    fn check_majorities_ring(nodes: &[String], grudge: &Grudge) {
        let n = nodes.len();
        let views = grudge.reachable(nodes);
        assert!(is_symmetric(grudge), "n={n}: {grudge:?}");
        assert!(!grudge.is_empty(), "n={n}");
        for (node, view) in &views {
            assert!(view.len() > n / 2, "n={n}: {node} sees {view:?}");
        }
        let distinct: BTreeSet<&BTreeSet<String>> = views.values().collect();
        assert_eq!(distinct.len(), n, "n={n}: views {views:?}");
    }

    #[test]
    fn complete_cuts_every_pair_across_components_both_ways() {
        let grudge = Grudge::complete(&[strings(&["a", "b"]), strings(&["c"]), strings(&["d"])]);
        let all = strings(&["a", "b", "c", "d", "e"]);
        for x in &all {
            for y in &all {
                let same = x == y || (x.as_str() <= "b" && y.as_str() <= "b");
                let involved = x != "e" && y != "e";
                assert_eq!(grudge.drops(x, y), involved && !same, "{x} {y}");
            }
        }
        assert_eq!(grudge.0.get("a"), Some(&set(&["c", "d"])));
        assert!(
            !grudge.0.contains_key("e"),
            "nodes of no component are absent"
        );
        assert!(Grudge::complete(&[strings(&["a", "b"])]).is_empty());
        assert!(Grudge::complete(&[]).is_empty());
    }

    #[test]
    fn complete_lets_a_node_in_two_components_bridge_them() {
        let grudge = Grudge::complete(&[strings(&["a", "b"]), strings(&["b", "c"])]);
        assert_eq!(
            grudge.edges(),
            vec![("a".into(), "c".into()), ("c".into(), "a".into())]
        );
    }

    #[test]
    fn one_way_drops_one_direction_only() {
        let grudge = Grudge::one_way(&strings(&["a"]), &strings(&["b", "c"]));
        assert!(grudge.drops("b", "a") && grudge.drops("c", "a"));
        assert!(!grudge.drops("a", "b") && !grudge.drops("a", "c"));
        assert!(!grudge.drops("b", "c"));
        assert_eq!(
            grudge.edges(),
            vec![("a".into(), "b".into()), ("a".into(), "c".into())]
        );
        let overlapping = Grudge::one_way(&strings(&["a", "b"]), &strings(&["b"]));
        assert_eq!(overlapping.edges(), vec![("a".into(), "b".into())]);
    }

    #[test]
    fn drop_from_edges_and_reachable() {
        let mut grudge = Grudge::default();
        assert!(grudge.is_empty());
        grudge.drop_from("n2", "n1");
        grudge.drop_from("n3", "n1");
        grudge.drop_from("n1", "n3");
        grudge.drop_from("n1", "n1");
        grudge.drop_from("n2", "n1");
        assert!(!grudge.is_empty());
        assert!(grudge.drops("n2", "n1"));
        assert!(!grudge.drops("n1", "n2"));
        assert!(!grudge.drops("n1", "n1"));
        assert!(!grudge.drops("n9", "n1"));
        assert_eq!(
            grudge.edges(),
            vec![
                ("n1".into(), "n2".into()),
                ("n1".into(), "n3".into()),
                ("n3".into(), "n1".into()),
            ]
        );
        let reachable = grudge.reachable(&names(4));
        assert_eq!(reachable["n1"], set(&["n1", "n2", "n4"]));
        assert_eq!(reachable["n2"], set(&["n2", "n3", "n4"]));
        assert_eq!(reachable["n3"], set(&["n2", "n3", "n4"]));
        assert_eq!(reachable["n4"], set(&["n1", "n2", "n3", "n4"]));
        assert_eq!(reachable.len(), 4);
    }

    #[test]
    fn halves_are_two_balanced_components_smaller_first() {
        for n in 2..=9 {
            let nodes = names(n);
            let mut firsts = BTreeSet::new();
            for seed in 0..20 {
                let parts = halves(&nodes, &mut Rng::new(seed));
                assert_eq!(parts.len(), 2);
                assert_eq!(parts[0].len(), n / 2, "n={n}");
                assert_eq!(parts[1].len(), n - n / 2, "n={n}");
                let mut all: Vec<String> = parts.concat();
                all.sort();
                let mut expected = nodes.clone();
                expected.sort();
                assert_eq!(all, expected);
                firsts.insert(parts[0].clone());
                let grudge = Shape::Halves
                    .grudge(&Roles::unknown(&nodes), &mut Rng::new(seed))
                    .unwrap();
                for a in &parts[0] {
                    for b in &parts[1] {
                        assert!(grudge.drops(a, b) && grudge.drops(b, a), "{a} {b}");
                    }
                }
                for part in &parts {
                    for a in part {
                        for b in part {
                            assert!(!grudge.drops(a, b));
                        }
                    }
                }
            }
            assert!(firsts.len() > 1, "n={n}: halves are shuffled");
        }
    }

    #[test]
    fn majorities_ring_for_three_to_nine_nodes() {
        for n in 3..=9 {
            let nodes = names(n);
            let mut grudges = BTreeSet::new();
            for seed in 0..25 {
                let grudge = Shape::MajoritiesRing
                    .grudge(&Roles::unknown(&nodes), &mut Rng::new(seed))
                    .unwrap();
                check_majorities_ring(&nodes, &grudge);
                grudges.insert(grudge.edges());
            }
            assert!(grudges.len() > 1, "n={n}: the ring is shuffled");
        }
    }

    #[test]
    fn majorities_ring_views_are_as_documented() {
        let nodes = names(3);
        let grudge = majorities_ring(&nodes, &mut Rng::new(5));
        assert_eq!(grudge.edges().len(), 2, "one pair cut both ways");
        let sizes: Vec<usize> = grudge
            .reachable(&nodes)
            .values()
            .map(BTreeSet::len)
            .collect();
        assert_eq!(sizes.iter().filter(|&&s| s == 2).count(), 2);
        for (n, view) in [(4, 3), (5, 3), (6, 5), (7, 5), (8, 5), (9, 5)] {
            let nodes = names(n);
            let grudge = majorities_ring(&nodes, &mut Rng::new(n as u64));
            for (node, seen) in grudge.reachable(&nodes) {
                assert_eq!(seen.len(), view, "n={n}: {node} sees {seen:?}");
            }
        }
        assert!(majorities_ring(&names(2), &mut Rng::new(1)).is_empty());
    }

    #[test]
    fn bridge_connects_both_halves_through_one_node() {
        for n in 3..=9 {
            let nodes = names(n);
            for seed in 0..20 {
                let grudge = Shape::Bridge
                    .grudge(&Roles::unknown(&nodes), &mut Rng::new(seed))
                    .unwrap();
                assert!(is_symmetric(&grudge), "n={n}");
                let views = grudge.reachable(&nodes);
                let bridges: Vec<&String> = views
                    .iter()
                    .filter(|(_, view)| view.len() == n)
                    .map(|(node, _)| node)
                    .collect();
                assert_eq!(bridges.len(), 1, "n={n}: {views:?}");
                let bridge = bridges[0];
                // The others fall into two sides that do not hear each other.
                let sides: BTreeSet<BTreeSet<String>> = views
                    .iter()
                    .filter(|(node, _)| *node != bridge)
                    .map(|(_, view)| view.clone())
                    .collect();
                assert_eq!(sides.len(), 2, "n={n}: {views:?}");
                let sides: Vec<&BTreeSet<String>> = sides.iter().collect();
                assert!(sides[0].contains(bridge) && sides[1].contains(bridge));
                assert_eq!(
                    sides[0].intersection(sides[1]).count(),
                    1,
                    "only the bridge"
                );
                for a in sides[0].iter().filter(|a| *a != bridge) {
                    for b in sides[1].iter().filter(|b| *b != bridge) {
                        assert!(grudge.drops(a, b) && grudge.drops(b, a));
                    }
                }
                let mut sizes = [sides[0].len(), sides[1].len()];
                sizes.sort_unstable();
                assert_eq!(sizes, [n - n / 2, n / 2 + 1], "n={n}");
                let majorities = views.values().filter(|view| view.len() > n / 2).count();
                if n % 2 == 1 {
                    assert_eq!(majorities, n, "n={n}: every node sees a majority");
                } else {
                    // The bridge and the first half (n/2 + 1 nodes) see a majority; the
                    // rest of the second half sees exactly half.
                    assert_eq!(majorities, n / 2 + 1, "n={n}");
                }
            }
        }
    }

    #[test]
    fn one_and_majority_cut_a_minority_off() {
        for n in 2..=9 {
            let nodes = names(n);
            let roles = Roles::unknown(&nodes);
            let most = ((n - 1) / 2).max(1);
            let mut minority_sizes = BTreeSet::new();
            for seed in 0..40 {
                let one = Shape::One.grudge(&roles, &mut Rng::new(seed)).unwrap();
                let alone = one
                    .reachable(&nodes)
                    .values()
                    .filter(|view| view.len() == 1)
                    .count();
                assert_eq!(alone, if n == 2 { 2 } else { 1 }, "n={n}");
                assert_eq!(one.edges().len(), 2 * (n - 1), "n={n}");

                let grudge = Shape::Majority.grudge(&roles, &mut Rng::new(seed)).unwrap();
                assert!(is_symmetric(&grudge));
                let views = grudge.reachable(&nodes);
                let minority = views.values().map(BTreeSet::len).min().unwrap();
                assert!((1..=most).contains(&minority), "n={n}: {views:?}");
                let components: BTreeSet<&BTreeSet<String>> = views.values().collect();
                assert_eq!(components.len(), 2, "n={n}");
                minority_sizes.insert(minority);
            }
            assert_eq!(
                minority_sizes.len(),
                most,
                "n={n}: every minority size occurs"
            );
        }
    }

    #[test]
    fn isolate_role_holders() {
        let roles = five();
        let mut rng = Rng::new(7);
        let alone = |grudge: &Grudge| -> BTreeSet<String> {
            grudge
                .reachable(&names(5))
                .into_iter()
                .filter(|(_, view)| view.len() == 1)
                .map(|(node, _)| node)
                .collect()
        };
        let controller = Shape::Isolate(TargetSpec::Controller)
            .grudge(&roles, &mut rng)
            .unwrap();
        assert_eq!(alone(&controller), set(&["n2"]));
        assert_eq!(
            controller.reachable(&names(5))["n1"],
            set(&["n1", "n3", "n4", "n5"])
        );
        let meta = Shape::Isolate(TargetSpec::MetaLeader)
            .grudge(&roles, &mut rng)
            .unwrap();
        assert_eq!(alone(&meta), set(&["n3"]));
        let mut seen = BTreeSet::new();
        for seed in 0..50 {
            let leaders = Shape::Isolate(TargetSpec::Leaders)
                .grudge(&roles, &mut Rng::new(seed))
                .unwrap();
            let isolated = alone(&leaders);
            assert!(!isolated.is_empty());
            assert!(isolated.is_subset(&set(&["n4", "n5"])), "{isolated:?}");
            // The others hear each other.
            assert_eq!(leaders.reachable(&names(5))["n1"].len(), 5 - isolated.len());
            seen.insert(isolated);
        }
        assert!(
            seen.contains(&set(&["n4", "n5"])) && seen.len() > 1,
            "{seen:?}"
        );
        let all = Shape::Isolate(TargetSpec::All)
            .grudge(&roles, &mut rng)
            .unwrap();
        assert_eq!(alone(&all), set(&["n1", "n2", "n3", "n4", "n5"]));
        let no_controller = Roles {
            controller_epoch: 0,
            controller: None,
            ..five()
        };
        assert_eq!(
            Shape::Isolate(TargetSpec::Controller).grudge(&no_controller, &mut rng),
            Err(TargetError::NoHolder("controller".into()))
        );
    }

    #[test]
    fn explicit_grudges_are_checked_against_the_nodes() {
        let roles = Roles::unknown(&names(3));
        let mut rng = Rng::new(1);
        let mut grudge = Grudge::default();
        grudge.drop_from("n1", "n3");
        assert_eq!(
            Shape::Explicit(grudge.clone()).grudge(&roles, &mut rng),
            Ok(grudge.clone())
        );
        let mut stray_sender = grudge.clone();
        stray_sender.drop_from("n2", "n7");
        assert_eq!(
            Shape::Explicit(stray_sender).grudge(&roles, &mut rng),
            Err(TargetError::UnknownNode {
                node: "n7".into(),
                nodes: names(3)
            })
        );
        let mut stray_receiver = grudge;
        stray_receiver.drop_from("x", "n1");
        assert!(matches!(
            Shape::Explicit(stray_receiver).grudge(&roles, &mut rng),
            Err(TargetError::UnknownNode { node, .. }) if node == "x"
        ));
    }

    #[test]
    fn shapes_need_enough_nodes() {
        let mut rng = Rng::new(1);
        for shape in [Shape::MajoritiesRing, Shape::Bridge] {
            let err = shape
                .grudge(&Roles::unknown(&names(2)), &mut rng)
                .unwrap_err();
            assert_eq!(
                err,
                TargetError::TooFewNodes {
                    shape: shape.name(),
                    need: 3,
                    have: 2
                }
            );
            assert!(err.to_string().contains(&shape.name()), "{err}");
        }
        for shape in [
            Shape::Halves,
            Shape::One,
            Shape::Majority,
            Shape::Isolate(TargetSpec::One),
        ] {
            assert!(matches!(
                shape.grudge(&Roles::unknown(&names(1)), &mut rng),
                Err(TargetError::TooFewNodes {
                    need: 2,
                    have: 1,
                    ..
                })
            ));
            // Two nodes: each alone.
            let grudge = shape.grudge(&Roles::unknown(&names(2)), &mut rng).unwrap();
            assert_eq!(grudge.edges().len(), 2, "{}", shape.name());
        }
    }

    #[test]
    fn grudges_serialize_as_maps() {
        let grudge = Grudge::complete(&[strings(&["n1"]), strings(&["n2"])]);
        let json = serde_json::to_value(&grudge).unwrap();
        assert_eq!(json, serde_json::json!({"n1": ["n2"], "n2": ["n1"]}));
        assert_eq!(serde_json::from_value::<Grudge>(json).unwrap(), grudge);
    }

    proptest! {
        #[test]
        fn generated_shapes_are_sound(n in 3usize..16, seed in any::<u64>()) {
            let nodes = names(n);
            let roles = Roles::unknown(&nodes);
            check_majorities_ring(&nodes, &majorities_ring(&nodes, &mut Rng::new(seed)));
            for shape in Shape::defaults() {
                let grudge = shape.grudge(&roles, &mut Rng::new(seed)).unwrap();
                prop_assert!(!grudge.is_empty());
                prop_assert!(is_symmetric(&grudge));
                for (from, to) in grudge.edges() {
                    prop_assert!(from != to && nodes.contains(&from) && nodes.contains(&to));
                }
            }
        }
    }
}
