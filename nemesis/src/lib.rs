//! The nemesis: the faults a test injects, whom they hit, when, and how they are undone
//! (DESIGN.md §1, `../shared/docs/jepsen.md` §2).
//!
//! Every choice draws from `rng::Rng`, the workspace's seeded random numbers.
//!
//! - [`roles`]: the cluster's roles (controller, metadata-quorum leader, partition
//!   leaders, registered brokers) at one moment (`sut::Roles`, from the system's API).
//! - [`target`]: node targets (`one`, `minority`, `majority`, `all`, `leaders`,
//!   `controller`, `meta-leader`, explicit nodes) and their resolution against [`Roles`].
//! - [`grudge`]: network partitions as grudges (who drops whose packets) and the shapes:
//!   halves, one, majority, majorities-ring, bridge, isolate-targets, explicit.
//! - [`package`]: the fault packages (`kill`, `pause`, `partition`, `partition-ports`,
//!   `admin`, `slow`, `aimed`): their `f` names, plot colour and label, and `--nemesis`
//!   parsing.
//! - [`aimed`]: faults aimed at roles and moments: the controller cut off while an admin
//!   request is sent, a leader struck right after an ISR expansion or a leadership move,
//!   a leader or follower struck while a follower's high watermark lags.
//! - [`swarm`]: swarm testing: which packages each period of a run lets act.
//! - [`slow`]: slow links as the broker's delay failpoints: the points a `slow` period
//!   may arm and the draw of its delays.
//! - [`schedule`]: the seeded, deterministic sequence of fault steps of each package
//!   (start and stop alternating at random intervals around the interval).
//! - [`control`]: what the nemesis needs of the cluster ([`ClusterControl`]) and of the
//!   history ([`Journal`]); the harness implements both.
//! - [`runner`]: executes steps against a [`ClusterControl`], records each as a
//!   `nemesis` invoke/complete pair, keeps what is broken, and heals everything at the end.
//!
//! Invariant: everything random is drawn from the test's seed, per package and per step,
//! so that the same seed gives the same schedule whatever the cluster answered.

pub mod aimed;
pub mod control;
pub mod grudge;
pub mod package;
pub mod roles;
pub mod runner;
pub mod schedule;
pub mod settle;
pub mod slow;
pub mod swarm;
pub mod target;

pub use control::{
    AdminAction, BoxFuture, ClusterControl, ControlError, ControllerView, FaultValue, Journal,
    JournalError, ReplicaView,
};
pub use grudge::{Grudge, Ports, Shape};
pub use package::{PackageInfo, PackageKind};
pub use roles::{PartitionRoles, Roles};
pub use runner::{DeregistrationWait, FaultState, Nemesis, NemesisOptions, NemesisSummary};
pub use schedule::{Action, AdminKind, Step};
pub use slow::Delay;
pub use swarm::SwarmDraw;
pub use target::{TargetError, TargetSpec};
