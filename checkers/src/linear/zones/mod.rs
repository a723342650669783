//! Linearizability of a read/write register whose read values are each written once, in
//! O(n log n) (Gibbons & Korach, "Testing shared memories", SIAM J. Comput. 26(4), 1997):
//! no search, so never `unknown`.
//!
//! - `clusters`: each write with the reads of its value, and the cluster's zone; reads
//!   no write explains.
//! - `sweep`: the condition on the zones (no two forward zones overlap, no backward zone
//!   inside a forward one).
//! - `explain`: a finding in the history's terms, for the report.
//!
//! Same semantics as the search's `register` model (see `linear`): reads of null and
//! `info` reads constrain nothing and are left out, failed writes did not happen, `info`
//! writes stay open to the end. Not for cas-register or etcd (a cas is not a plain write)
//! and not when a value that some read returned was written twice (counting the initial
//! value): the reads could then belong to either write, and the search judges instead.

mod clusters;
mod explain;
mod sweep;

use super::models::RegisterModel;
use super::partition::PartOp;
use clusters::Clusters;
pub(crate) use explain::Naming;
pub use explain::{ClusterZone, ZoneConflict, MAX_READS_SHOWN};
use sweep::Clash;

/// Why the zone check does not apply to a partition.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotEligible {
    #[error("only the register model is a plain read/write register")]
    Model,
    #[error("a cas is not a plain write")]
    Cas,
    #[error("value {value} is read and written {writes} times (counting the initial value)")]
    RepeatedValue { value: String, writes: u32 },
}

/// What the zone check found in one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Finding {
    Linearizable,
    /// A read of a value no write wrote (partition-local op).
    Unwritten {
        read: u32,
    },
    /// A read that completed before the write of its value was invoked.
    ReadBeforeWrite {
        read: u32,
        write: u32,
    },
    Clash(Clash),
}

/// Judges one register partition, or says why it cannot.
pub(crate) fn judge(model: &RegisterModel, ops: &[PartOp]) -> Result<Finding, NotEligible> {
    Ok(match clusters::clusters(model, ops)? {
        Clusters::Unwritten { read } => Finding::Unwritten { read },
        Clusters::ReadBeforeWrite { read, write } => Finding::ReadBeforeWrite { read, write },
        Clusters::Zones(zones) => match sweep::find_clash(zones) {
            Some(clash) => Finding::Clash(clash),
            None => Finding::Linearizable,
        },
    })
}
