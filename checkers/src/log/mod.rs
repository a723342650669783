//! The log checker (Kafka semantics) for append/read histories: checking.md's anomaly
//! table, checked by sorting and sweeping per partition ("key"), never by search.
//!
//! # Input
//!
//! Client ops with `f` = `append` or `read` (DESIGN.md §4); other client ops and every
//! nemesis op are ignored (counted in [`LogStats::other_client_ops`]). An append invoke
//! needs `key` and an integer `value`, its `ok` an integer `offset`. A read invoke needs
//! `key` and an integer `offset` (optional `max`, `"consistency": "linearizable"`,
//! `"final": true`); its `ok` needs `records` (`[[offset, value], ...]`) and usually has
//! `high_watermark` (and optionally `log_start_offset`). A history lacking any of the
//! required fields, or appending one value twice, is malformed: [`check_log`] returns an
//! error naming the op's location.
//!
//! # Terms
//!
//! - A read from offset `o` *returned the range* `[o, e)`, where `e` is its highest returned
//!   offset + 1 (an empty read returns the empty range `[o, o)`). When the read also
//!   reports `log_start_offset` `s`, the range starts at `max(o, s)`.
//! - A read was *cut short* when it returned as many records as its `max` and its
//!   records end below its high watermark (or it reported none), or when its ok says
//!   `"truncated": true` (a byte limit of the broker stopped it). A read not cut short
//!   claims the log (as the broker committed it) ends at its high watermark.
//! - An append is *acked* at offset `x` when it completed `ok` with offset `x`, or when it
//!   ended `info` and some read returned its value, at the first offset a read showed it.
//!   Its *witness* is its completion (ok) or the completion of the first read that showed
//!   it (info). An append invoked with `"acks": 1` or `0` (number or string) that
//!   completed `ok` is judged as an `info` one: such an acknowledgement promises only the
//!   leader's log, which a failover may rewrite, so its offset claims nothing until a
//!   read (which returns committed records only) shows the value.
//! - A value *exists* at (key, offset) when any ack or read showed a value there.
//! - *Final reads*: if any read is marked `"final": true`, exactly the marked reads. Otherwise,
//!   per key, the last read of that key to complete ok, plus the reads of the same process
//!   that it continues (walking back while each read began where the previous one's
//!   returned range ended, stopping at one from offset 0).
//! - *Known length* of a key at a moment: the largest of (offset + 1) over appends acked
//!   `ok` before it, and of `max(e, high_watermark)` over reads completed ok before it.
//!
//! # Rules, and whether each instance counts against validity
//!
//! | kind | rule | counts |
//! |---|---|---|
//! | `inconsistent-offsets` | two different values at one (key, offset), from acks or reads | always |
//! | `duplicate` | one value at two different offsets of its key (acks or reads) | always |
//! | `lost-write` | an acked value at offset `x` is absent from a read whose returned range contains `x` (no record at `x`, or another value there), unless that read completed before the value's append was invoked; or it is absent from every final read of its key although a final read that was not cut short began at or below `x` and either its high watermark exceeds `x` or it was invoked after the value's witness | always |
//! | `unseen` | an `ok` append whose value no read ever returned (and not already a `lost-write`) | only if an ok final read of its key was invoked after the ack |
//! | `aborted-read` | a read returned a value whose append failed, a value never appended, or a value appended to another key | always |
//! | `nonmonotonic-read` | (a) a read's returned offsets are not strictly increasing or lie below its requested offset; (b) process `p`'s read `N` of a key began below `e1`, the furthest end any earlier ok read of `p` on that key reached, but returned a range ending before `e1`, without being cut short by its `max` | (a) always; (b) if `N` was linearizable, or its own high watermark is ≥ `e1` (the broker said the records were committed yet withheld them); a default read whose high watermark is below `e1` is a stale view, reported with its lag |
//! | `poll-skip` | (a) a read's records jump over an offset that exists (between its requested offset and its first record, or between two records); (b) process `p`'s read of a key asked for offset `o2 > e0`, where `e0` is the furthest position of `p`'s earlier ok reads of that key (the end of a returned range; for an empty read, its requested offset), and a value exists in `[e0, o2)` | (a) always; (b) never: the client itself moved ahead |
//! | `stale-read` | a read whose high watermark `h` is below the key's known length `L` at its invocation (an append acked at offset ≥ `h`, or a read completed that saw further); lag `L - h` offsets | only for `"consistency": "linearizable"` reads |
//! | `realtime-order` | an acked append got an offset below the key's known length at its invocation (an earlier-acked append got a higher offset, or an earlier-completed read saw further); or a read completed before the append of a value it returned was invoked | always |
//!
//! Reads that did not complete ok show nothing; appends that failed are never acked.
//! At most [`MAX_REPORTED_PER_KIND`] instances of each kind are kept in
//! [`LogReport::anomalies`]; [`LogStats::anomalies`] has the true totals, and the verdict
//! is computed from all of them: invalid iff any instance counts, else valid.
//!
//! # Cost
//!
//! Each op's value is parsed once into compact structs (keys interned to `u32`); values
//! are indexed in a hash map and (key, offset) in per-key vectors; acked values are
//! sorted per key and matched against each read's records by a merge walk, with a
//! union-find "next not yet lost" structure so each acked value is condemned at most once.
//! Everything is O(n log n) in the number of ops plus records, except that each final read
//! not cut short rescans the acked values beyond what it returned that are still standing
//! (in a real run: the few acked after it began).

mod check;
mod parse;
pub mod simulate;

use serde::{Deserialize, Serialize};

use crate::verdict::Verdict;

pub use check::check_log;

/// Instances of one anomaly kind kept in a report; the rest are only counted.
pub const MAX_REPORTED_PER_KIND: usize = 100;

/// What the log checker found.
#[derive(Debug, Clone, Serialize)]
pub struct LogReport {
    /// Invalid iff any anomaly instance (reported or only counted) counts against validity.
    pub verdict: Verdict,
    /// The first [`MAX_REPORTED_PER_KIND`] instances of each kind, grouped by kind in the
    /// order of [`AnomalyKind::ALL`].
    pub anomalies: Vec<Anomaly>,
    pub stats: LogStats,
}

impl LogReport {
    /// Total instances of `kind` found (including those not kept in `anomalies`).
    pub fn found(&self, kind: AnomalyKind) -> usize {
        self.stats.count(kind).map_or(0, |c| c.found)
    }

    /// Instances of `kind` that count against validity.
    pub fn counted(&self, kind: AnomalyKind) -> usize {
        self.stats.count(kind).map_or(0, |c| c.counted)
    }
}

/// One instance of an anomaly.
#[derive(Debug, Clone, Serialize)]
pub struct Anomaly {
    pub kind: AnomalyKind,
    /// The partition it concerns.
    pub key: String,
    /// `Op::index` values of the entries that show it (completions carry the offsets and
    /// records, so they are named where they exist).
    pub ops: Vec<u64>,
    /// One line a person can follow.
    pub explanation: String,
    pub counts_against_validity: bool,
}

/// The anomalies of checking.md's log table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AnomalyKind {
    LostWrite,
    Unseen,
    InconsistentOffsets,
    Duplicate,
    AbortedRead,
    NonmonotonicRead,
    PollSkip,
    StaleRead,
    RealtimeOrder,
}

impl AnomalyKind {
    pub const ALL: [AnomalyKind; 9] = [
        AnomalyKind::LostWrite,
        AnomalyKind::Unseen,
        AnomalyKind::InconsistentOffsets,
        AnomalyKind::Duplicate,
        AnomalyKind::AbortedRead,
        AnomalyKind::NonmonotonicRead,
        AnomalyKind::PollSkip,
        AnomalyKind::StaleRead,
        AnomalyKind::RealtimeOrder,
    ];

    pub fn name(&self) -> &'static str {
        match self {
            AnomalyKind::LostWrite => "lost-write",
            AnomalyKind::Unseen => "unseen",
            AnomalyKind::InconsistentOffsets => "inconsistent-offsets",
            AnomalyKind::Duplicate => "duplicate",
            AnomalyKind::AbortedRead => "aborted-read",
            AnomalyKind::NonmonotonicRead => "nonmonotonic-read",
            AnomalyKind::PollSkip => "poll-skip",
            AnomalyKind::StaleRead => "stale-read",
            AnomalyKind::RealtimeOrder => "realtime-order",
        }
    }

    fn slot(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for AnomalyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How many instances of one kind were found, counted, and kept in the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct KindCount {
    pub kind: AnomalyKind,
    pub found: usize,
    pub counted: usize,
    pub reported: usize,
}

/// Counts over the history and the anomalies.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LogStats {
    pub appends_ok: usize,
    pub appends_fail: usize,
    pub appends_info: usize,
    pub reads_ok: usize,
    pub reads_fail: usize,
    pub reads_info: usize,
    /// Final reads that completed ok.
    pub final_reads: usize,
    /// Whether final reads were marked `"final": true` (else: the last reads of each key).
    pub final_reads_marked: bool,
    /// Client ops that are neither appends nor reads.
    pub other_client_ops: usize,
    pub keys: usize,
    /// Appends that completed ok.
    pub values_acked: usize,
    /// `info` appends whose value some read returned (they count as acked).
    pub values_info_seen: usize,
    /// Distinct appended values that some read returned.
    pub values_read: usize,
    /// Records returned by all ok reads.
    pub records_read: usize,
    /// Reads whose high watermark was below the key's known length (any consistency).
    pub stale_reads: usize,
    /// The largest stale-read lag, in offsets, over all reads.
    pub max_stale_lag: i64,
    /// The largest stale-read lag over linearizable reads.
    pub max_stale_lag_linearizable: i64,
    /// One entry per kind, in the order of [`AnomalyKind::ALL`].
    pub anomalies: Vec<KindCount>,
    /// Instances found but not kept in the report because of [`MAX_REPORTED_PER_KIND`].
    pub anomalies_omitted: usize,
}

impl LogStats {
    pub fn count(&self, kind: AnomalyKind) -> Option<&KindCount> {
        self.anomalies.iter().find(|c| c.kind == kind)
    }
}
