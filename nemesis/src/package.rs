//! Fault packages, as Jepsen's combined packages: each fault kind with the `f` names of
//! its start and stop operations, its final heal, and its colour and label for plots.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A kind of fault, as `--nemesis` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PackageKind {
    /// SIGKILL, then restart (sometimes with the partition data wiped: a new replica).
    Kill,
    /// SIGSTOP, then SIGCONT.
    Pause,
    /// Network partitions of every shape, all traffic between nodes.
    Partition,
    /// Cuts of one listener's port only (metadata or replication), both ways or one way.
    PartitionPorts,
    /// Through the broker's admin API: leader transfer storms, preferred-leader
    /// elections, reassignments adding or removing a replica.
    Admin,
    /// Slow links: delay failpoints (`return(<ms>)`) armed on the target's brokers for a
    /// period, then released ([`crate::slow`]).
    Slow,
    /// Faults aimed at roles and moments ([`crate::aimed`]): the controller cut from the
    /// metadata quorum while an admin request is sent, a leader struck right after an
    /// ISR expansion or a leadership move, a leader or follower struck while a follower's
    /// high watermark lags.
    Aimed,
}

/// What the report and the history need to know of a package.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PackageInfo {
    pub name: &'static str,
    /// The label of its shaded periods in plots.
    pub label: &'static str,
    /// CSS colour of its periods (Jepsen's palette).
    pub colour: &'static str,
    /// `f` of the operations that start a fault period.
    pub start: &'static [&'static str],
    /// `f` of the operations that end one (empty: instantaneous faults).
    pub stop: &'static [&'static str],
}

impl PackageKind {
    pub const ALL: [PackageKind; 7] = [
        PackageKind::Kill,
        PackageKind::Pause,
        PackageKind::Partition,
        PackageKind::PartitionPorts,
        PackageKind::Admin,
        PackageKind::Slow,
        PackageKind::Aimed,
    ];

    pub fn name(self) -> &'static str {
        self.info().name
    }

    pub fn info(self) -> PackageInfo {
        match self {
            PackageKind::Kill => PackageInfo {
                name: "kill",
                label: "kill",
                colour: "#E9A4A0",
                start: &["kill"],
                stop: &["start"],
            },
            PackageKind::Pause => PackageInfo {
                name: "pause",
                label: "pause",
                colour: "#A0B1E9",
                start: &["pause"],
                stop: &["resume"],
            },
            PackageKind::Partition => PackageInfo {
                name: "partition",
                label: "partition",
                colour: "#E9DCA0",
                start: &["start-partition"],
                stop: &["stop-partition"],
            },
            PackageKind::PartitionPorts => PackageInfo {
                name: "partition-ports",
                label: "port cut",
                colour: "#D1E8A0",
                start: &["start-partition-ports"],
                stop: &["stop-partition-ports"],
            },
            PackageKind::Admin => PackageInfo {
                name: "admin",
                label: "admin",
                colour: "#A66AD8",
                start: &["transfer-leaders", "elect-preferred", "reassign"],
                stop: &[],
            },
            PackageKind::Slow => PackageInfo {
                name: "slow",
                label: "slow link",
                colour: "#A0E9D9",
                start: &["start-slow"],
                stop: &["stop-slow"],
            },
            PackageKind::Aimed => PackageInfo {
                name: "aimed",
                label: "aimed",
                colour: "#E9A0D6",
                start: &["start-aimed"],
                stop: &["stop-aimed"],
            },
        }
    }

    /// Whether the package's faults arm the broker's failpoints (a broker built without
    /// them refuses each such fault).
    pub fn uses_failpoints(self) -> bool {
        matches!(self, PackageKind::Slow | PackageKind::Aimed)
    }

    /// The package whose operation has this `f`, if any.
    pub fn of_f(f: &str) -> Option<PackageKind> {
        PackageKind::ALL
            .into_iter()
            .find(|kind| kind.info().start.contains(&f) || kind.info().stop.contains(&f))
    }

    /// Parses `--nemesis`: `none`, `all`, or a comma-separated list of package names;
    /// duplicates are dropped, order kept canonical.
    pub fn parse_list(list: &str) -> Result<Vec<PackageKind>, String> {
        let mut kinds = Vec::new();
        for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match name {
                "none" => {}
                "all" => kinds.extend(PackageKind::ALL),
                other => kinds.push(other.parse()?),
            }
        }
        kinds.sort();
        kinds.dedup();
        Ok(kinds)
    }
}

impl fmt::Display for PackageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PackageKind {
    type Err = String;

    fn from_str(s: &str) -> Result<PackageKind, String> {
        PackageKind::ALL
            .into_iter()
            .find(|kind| kind.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown nemesis {s:?}: expected none, all, or a list of {}",
                    PackageKind::ALL.map(PackageKind::name).join(", ")
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_f_names_map_back() {
        assert_eq!(PackageKind::parse_list("none").unwrap(), vec![]);
        assert_eq!(
            PackageKind::parse_list("all").unwrap(),
            PackageKind::ALL.to_vec()
        );
        assert_eq!(
            PackageKind::parse_list("pause,kill,pause").unwrap(),
            vec![PackageKind::Kill, PackageKind::Pause]
        );
        assert_eq!(
            PackageKind::parse_list("slow").unwrap(),
            vec![PackageKind::Slow]
        );
        assert_eq!(
            PackageKind::parse_list("slow, admin,slow").unwrap(),
            vec![PackageKind::Admin, PackageKind::Slow]
        );
        assert!(PackageKind::parse_list("all")
            .unwrap()
            .contains(&PackageKind::Slow));
        assert_eq!(PackageKind::of_f("start-slow"), Some(PackageKind::Slow));
        assert_eq!(PackageKind::of_f("stop-slow"), Some(PackageKind::Slow));
        assert_eq!(
            PackageKind::of_f("failpoint"),
            None,
            "scenario steps stay apart"
        );
        assert!(PackageKind::parse_list("kill,clock")
            .unwrap_err()
            .contains("clock"));
        for kind in PackageKind::ALL {
            for f in kind.info().start.iter().chain(kind.info().stop) {
                assert_eq!(PackageKind::of_f(f), Some(kind), "{f}");
            }
        }
    }
}
