//! The ISR-admission oracle: judges the ISR expansions the leaders' logs record
//! ([`sut::Db::isr_expansions`]) against the writes the history says were acknowledged,
//! by one rule of a replicated log with in-sync sets: "a replica let into the in-sync
//! set holds every write acknowledged before it was let in". Once in the set it may be
//! elected cleanly, so a write it lacks is one leader failure away from being lost;
//! the lost-write checker sees that only if the failure then comes, this oracle as soon
//! as the admission happens.
//!
//! `isr-admitted-behind`: a leader let a follower in (at its decision, or when the new
//! set took effect) while the follower held only the records below `follower_log_end`,
//! and a write of that partition at or above that offset had been acknowledged before.
//! The follower holds at least what the leader knew it to (its last fetch offset), so a
//! correct broker never gives this: a write is acknowledged only once the high watermark
//! passed it, an expansion asks the follower to have reached the high watermark and the
//! start of the leader's epoch (below which every earlier leader's commits lie), and the
//! high watermark counts a follower being let in already.
//!
//! Under a durability waiver (unclean elections, truncation to the high watermark) a
//! follower may be let in without writes an election lost before: there only an
//! admission the leader decided while the follower lacked a write below the leader's
//! own epoch start counts ([`add`]).
//!
//! The history's times are the harness's clock, the events' the nodes' wall clocks: a
//! write counts only when it was acknowledged [`CLOCK_MARGIN_MS`] before the event (on
//! one machine the clocks are one; hosts over ssh need synchronized clocks). Nothing here
//! reads which bug switch is on: the rule is the protocol's (KAFKA-7128 is one way to
//! break it, a high watermark that passes a joining follower another).

use std::collections::BTreeMap;
use std::path::Path;

use checkers::{Results, Verdict};
use history::{OpType, Process};
use serde_json::{json, Value};
use sut::IsrExpansion;

/// How much earlier than an event a write must have been acknowledged to count: the
/// two clocks are read at different moments and rounded to ms.
pub const CLOCK_MARGIN_MS: u64 = 5;

/// At most this many anomalies are reported in full (the count is always exact).
const MAX_REPORTED: usize = 50;

/// One acknowledged write: its offset and when the client had the acknowledgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acked {
    pub offset: u64,
    pub value: i64,
    /// Wall clock, ms since the Unix epoch.
    pub unix_ms: u64,
    /// The history index of its completion.
    pub index: u64,
}

/// The acknowledged writes of a history, by key (`topic/partition`), in the order the
/// history has them: `ok` appends (the log workload) and register writes that carry
/// their offset and whose invocation asked for every in-sync replica (an `"acks": 1` or
/// `0` write promises only the leader's log, as the log checker reads it; register
/// writes are always acks=all). `history_unix_ms` is the history's time 0 by the wall
/// clock.
pub fn acknowledged(ops: &[history::Op], history_unix_ms: u64) -> BTreeMap<String, Vec<Acked>> {
    let mut by_key: BTreeMap<String, Vec<Acked>> = BTreeMap::new();
    // Each client process has at most one op open: its invocation says how it was sent.
    let mut weak_open: BTreeMap<u64, bool> = BTreeMap::new();
    for op in ops {
        let Process::Client(process) = op.process else {
            continue;
        };
        if op.f != "append" && op.f != "write" {
            continue;
        }
        if op.kind == OpType::Invoke {
            weak_open.insert(process, weak_acks(op.value.get("acks")));
            continue;
        }
        let weak = weak_open.remove(&process).unwrap_or(false);
        if op.kind != OpType::Ok || weak {
            continue;
        }
        let (Some(key), Some(offset), Some(value)) = (
            op.value.get("key").and_then(Value::as_str),
            op.value.get("offset").and_then(Value::as_u64),
            op.value.get("value").and_then(Value::as_i64),
        ) else {
            continue;
        };
        by_key.entry(key.to_string()).or_default().push(Acked {
            offset,
            value,
            unix_ms: history_unix_ms.saturating_add(op.time / 1_000_000),
            index: op.index,
        });
    }
    by_key
}

/// Whether an append asked for less than acks=all (`"acks": 1` or `0`, number or string).
fn weak_acks(acks: Option<&Value>) -> bool {
    match acks {
        Some(Value::Number(n)) => n.as_i64().is_some_and(|n| n == 0 || n == 1),
        Some(Value::String(s)) => s == "0" || s == "1",
        _ => false,
    }
}

/// Every node's ISR expansions, read from the logs under `nodes_dir`, by node name.
pub fn read(db: &dyn sut::Db, nodes_dir: &Path) -> BTreeMap<String, Vec<IsrExpansion>> {
    crate::truncations::read_logs(nodes_dir, |log| db.isr_expansions(log))
}

/// One key's acknowledged writes, ready to ask "the highest offset acknowledged before
/// a moment": sorted by time, with the running maximum.
struct Timeline {
    /// (unix ms, the write with the highest offset acknowledged up to then).
    prefix_max: Vec<(u64, Acked)>,
    all: Vec<Acked>,
}

impl Timeline {
    fn new(mut writes: Vec<Acked>) -> Timeline {
        writes.sort_by_key(|a| (a.unix_ms, a.index));
        let mut prefix_max = Vec::with_capacity(writes.len());
        let mut best: Option<Acked> = None;
        for &w in &writes {
            if best.is_none_or(|b| w.offset > b.offset) {
                best = Some(w);
            }
            if let Some(b) = best {
                prefix_max.push((w.unix_ms, b));
            }
        }
        Timeline {
            prefix_max,
            all: writes,
        }
    }

    /// The writes acknowledged before `before_ms` at or above `offset`, highest first
    /// (empty when there are none).
    fn at_or_above(&self, offset: u64, before_ms: u64) -> Vec<Acked> {
        let n = self.prefix_max.partition_point(|(t, _)| *t < before_ms);
        match n.checked_sub(1).map(|i| self.prefix_max[i].1) {
            Some(highest) if highest.offset >= offset => {
                let mut found: Vec<Acked> = self.all[..n]
                    .iter()
                    .filter(|w| w.offset >= offset)
                    .copied()
                    .collect();
                found.sort_by_key(|w| std::cmp::Reverse(w.offset));
                found
            }
            _ => Vec::new(),
        }
    }
}

/// The judgement: the anomalies (all of them, unbounded) and how many expansions were
/// judged (those of partitions the history wrote to).
pub struct Judgement {
    pub expansions: u64,
    pub judged: u64,
    pub anomalies: Vec<Value>,
    /// How far the wall clock was set during the run (the two readings of the
    /// history's origin apart, [`spec::RunStats::history_origin_ms`]); 0 if not at all.
    pub clock_moved_ms: u64,
}

pub fn judge(
    expansions: &BTreeMap<String, Vec<IsrExpansion>>,
    acked: BTreeMap<String, Vec<Acked>>,
) -> Judgement {
    let timelines: BTreeMap<String, Timeline> = acked
        .into_iter()
        .map(|(key, writes)| (key, Timeline::new(writes)))
        .collect();
    let mut judgement = Judgement {
        expansions: 0,
        judged: 0,
        anomalies: Vec::new(),
        clock_moved_ms: 0,
    };
    for (node, events) in expansions {
        for e in events {
            judgement.expansions += 1;
            let key = format!("{}/{}", e.topic, e.partition);
            let Some(timeline) = timelines.get(&key) else {
                continue;
            };
            judgement.judged += 1;
            let behind = timeline.at_or_above(
                e.follower_log_end,
                e.unix_ms.saturating_sub(CLOCK_MARGIN_MS),
            );
            if let Some(first) = behind.first() {
                let below_start = below_epoch_start(e, &behind);
                judgement
                    .anomalies
                    .push(anomaly(node, &key, e, first, behind.len(), below_start));
            }
        }
    }
    judgement
}

/// Whether the leader decided the admission (not: the new set took effect) while the
/// follower lacked a write below the offset where the leader's own epoch began: records
/// the leader held itself when it took the epoch, so no election lost them, and which a
/// leader asks a follower to have before it lets it in, whatever the settings (a follower
/// that reached only a high watermark the leader had not yet brought up to date does
/// not). When the set takes effect the follower may hold less than when it was let in
/// (a restart that truncates to its high watermark, in Kafka before KIP-101), so only
/// the decision is judged so.
fn below_epoch_start(e: &IsrExpansion, behind: &[Acked]) -> bool {
    !e.written
        && e.epoch_start_offset
            .is_some_and(|start| behind.iter().any(|w| w.offset < start))
}

fn anomaly(
    node: &str,
    key: &str,
    e: &IsrExpansion,
    highest: &Acked,
    count: usize,
    below_start: bool,
) -> Value {
    let when = if e.written {
        "the new ISR took effect"
    } else {
        "it decided to"
    };
    let mut explanation = format!(
        "{node}, leading {key} in epoch {}, let {} into the ISR ({when}) while it held only \
         the records below offset {}; {count} write(s) acknowledged before then lie at or \
         above it (the highest: value {} at offset {}, acknowledged {} ms earlier, op {}): \
         a clean election of that replica loses them",
        e.leader_epoch,
        e.follower,
        e.follower_log_end,
        highest.value,
        highest.offset,
        e.unix_ms.saturating_sub(highest.unix_ms),
        highest.index,
    );
    if let (true, Some(start)) = (below_start, e.epoch_start_offset) {
        explanation.push_str(&format!(
            "; and it had not reached offset {start}, where {node}'s own epoch began: \
             records {node} held itself, which a leader asks a follower to have before \
             letting it in"
        ));
    }
    json!({
        "kind": "isr-admitted-behind",
        "node": node,
        "key": key,
        "expansion": e,
        "writes_behind": count,
        "below_epoch_start": below_start,
        "highest": {"offset": highest.offset, "value": highest.value, "index": highest.index},
        "explanation": explanation,
    })
}

/// Adds the `isr` checker to `results`. `waiver`: why the run's settings may lose
/// acknowledged writes by design ([`crate::waiver`]), if they may: then a follower can
/// be let in without writes an election lost before, and only the admissions decided
/// below the leader's own epoch start count ([`below_epoch_start`]); the others are
/// reported, marked as not counting.
pub fn add(results: &mut Results, judgement: Judgement, waiver: Option<&str>) {
    let found = judgement.anomalies.len();
    let mut anomalies = judgement.anomalies;
    for anomaly in &mut anomalies {
        let counts = waiver.is_none() || anomaly["below_epoch_start"] == Value::Bool(true);
        anomaly["counts_against_validity"] = Value::Bool(counts);
    }
    // Those that count first, so that the ones listed include them.
    anomalies.sort_by_key(|a| a["counts_against_validity"] != Value::Bool(true));
    let counted = anomalies
        .iter()
        .filter(|a| a["counts_against_validity"] == Value::Bool(true))
        .count();
    let verdict = if counted == 0 {
        Verdict::Valid
    } else {
        Verdict::Invalid
    };
    anomalies.truncate(MAX_REPORTED);
    let mut report = json!({
        "expansions": judgement.expansions,
        "judged": judgement.judged,
        "found": found,
        "counted": counted,
        "anomalies": anomalies,
    });
    if let Some(reason) = waiver {
        report["waived"] = json!({
            "reason": format!(
                "not counted: {reason}; an admission decided below its leader's own epoch \
                 start still counts"
            ),
            "kinds": ["isr-admitted-behind"],
        });
    }
    if judgement.clock_moved_ms > 0 {
        report["wall_clock_moved_ms"] = json!(judgement.clock_moved_ms);
    }
    results.add("isr", verdict, &report);
}

/// Reads, judges and adds the `isr` checker for a run folder's history and node logs;
/// nothing when the run recorded no wall-clock origin or its nodes no expansion. The
/// history is lined up with the logs from the later origin `stats` read
/// ([`spec::RunStats::history_origin_ms`]), so that a wall clock set during the run
/// cannot make a write acknowledged after an admission look acknowledged before it.
pub fn add_for_run(
    results: &mut Results,
    db: &dyn sut::Db,
    history: &Path,
    nodes_dir: &Path,
    stats: &spec::RunStats,
    waiver: Option<&str>,
) {
    let Some(origin) = stats.history_origin_ms() else {
        return;
    };
    let expansions = read(db, nodes_dir);
    if expansions.values().all(Vec::is_empty) {
        return;
    }
    let clock_moved_ms = match (stats.history_unix_ms, stats.history_unix_ms_at_end) {
        (Some(start), Some(end)) => start.abs_diff(end),
        _ => 0,
    };
    if clock_moved_ms > CLOCK_MARGIN_MS {
        eprintln!(
            "warning: the wall clock was set {clock_moved_ms} ms during the run; the ISR \
             oracle judges from the later origin (less sensitive by as much)"
        );
    }
    match history::jsonl::read_jsonl(history) {
        Ok(h) => {
            let mut judgement = judge(&expansions, acknowledged(&h.ops, origin));
            judgement.clock_moved_ms = clock_moved_ms;
            add(results, judgement, waiver);
        }
        Err(error) => eprintln!("warning: the ISR oracle cannot read the history: {error}"),
    }
}

/// The terminal's lines for the `isr` checker of `results`: one per anomaly (at most
/// five, then a count); none when it found nothing or did not run.
pub fn summary_lines(results: &Results) -> Vec<String> {
    let Some(checker) = results.checkers.get("isr") else {
        return Vec::new();
    };
    let anomalies = checker
        .report
        .get("anomalies")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let found = checker
        .report
        .get("found")
        .and_then(Value::as_u64)
        .unwrap_or(anomalies.len() as u64);
    let mut lines: Vec<String> = anomalies
        .iter()
        .take(5)
        .filter_map(|a| {
            let explanation = a.get("explanation").and_then(Value::as_str)?;
            let waived = a.get("counts_against_validity") == Some(&Value::Bool(false));
            let note = if waived { " (not counted)" } else { "" };
            Some(format!("  isr-admitted-behind{note}: {explanation}"))
        })
        .collect();
    if found > 5 {
        lines.push(format!(
            "  … and {} more ISR admission(s) behind",
            found - 5
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use history::Op;

    fn append_ok(index: u64, ms: u64, key: &str, value: i64, offset: u64) -> Op {
        let mut op = Op::new(
            index,
            Process::Client(index),
            OpType::Ok,
            "append",
            json!({"key": key, "value": value, "offset": offset}),
        );
        op.time = ms * 1_000_000;
        op
    }

    fn expansion(follower_log_end: u64, unix_ms: u64, written: bool) -> IsrExpansion {
        IsrExpansion {
            topic: "t".into(),
            partition: 0,
            follower: "broker 3".into(),
            follower_log_end,
            unix_ms,
            written,
            leader_epoch: 2,
            high_watermark: follower_log_end,
            epoch_start_offset: Some(10),
        }
    }

    const ORIGIN: u64 = 1_700_000_000_000;

    fn history() -> Vec<Op> {
        (0..10)
            .map(|i| append_ok(i, 100 + i * 10, "t/0", i as i64, i))
            .chain([append_ok(10, 500, "t/1", 99, 0)])
            .collect()
    }

    fn judged(events: Vec<IsrExpansion>) -> Judgement {
        let by_node = BTreeMap::from([("n2".to_string(), events)]);
        judge(&by_node, acknowledged(&history(), ORIGIN))
    }

    #[test]
    fn register_writes_with_their_offset_count_and_reads_do_not() {
        let mut write = append_ok(0, 100, "t/0", 7, 3);
        write.f = "write".into();
        let mut bare = append_ok(1, 110, "t/0", 8, 4);
        bare.f = "write".into();
        bare.value = json!({"key": "t/0", "value": 8});
        let mut read = append_ok(2, 120, "t/0", 7, 5);
        read.f = "read".into();
        let acked = acknowledged(&[write, bare, read], ORIGIN);
        let offsets: Vec<u64> = acked["t/0"].iter().map(|a| a.offset).collect();
        assert_eq!(offsets, vec![3], "{acked:?}");
    }

    #[test]
    fn an_admission_below_an_earlier_acknowledged_write_is_an_anomaly() {
        // Offsets 0..10 acknowledged by 190 ms; the follower held only 0..5 at 1,000 ms.
        let j = judged(vec![expansion(5, ORIGIN + 1_000, false)]);
        assert_eq!((j.expansions, j.judged, j.anomalies.len()), (1, 1, 1));
        let a = &j.anomalies[0];
        assert_eq!(a["kind"], "isr-admitted-behind");
        assert_eq!(a["writes_behind"], 5);
        assert_eq!(a["highest"]["offset"], 9);
        let text = a["explanation"].as_str().unwrap();
        assert!(
            text.contains("below offset 5") && text.contains("broker 3"),
            "{text}"
        );
    }

    #[test]
    fn a_follower_holding_every_earlier_write_is_fine() {
        let j = judged(vec![
            expansion(10, ORIGIN + 1_000, false),
            expansion(12, ORIGIN + 1_000, true),
        ]);
        assert_eq!((j.judged, j.anomalies.len()), (2, 0));
    }

    #[test]
    fn only_writes_acknowledged_before_the_event_by_the_margin_count() {
        // Offset 5 was acknowledged at 150 ms, 6 at 160: an admission at 5 decided at
        // 152 ms is within the margin of the first and before the second.
        let j = judged(vec![expansion(5, ORIGIN + 152, false)]);
        assert!(j.anomalies.is_empty(), "{:?}", j.anomalies);
        let j = judged(vec![expansion(
            5,
            ORIGIN + 150 + CLOCK_MARGIN_MS + 1,
            false,
        )]);
        assert_eq!(j.anomalies.len(), 1);
        assert_eq!(j.anomalies[0]["writes_behind"], 1);
    }

    #[test]
    fn a_wall_clock_set_forward_during_the_run_raises_no_false_alarm() {
        // The follower is let in at 145 ms (holding 0..5, everything acknowledged by
        // then), but the wall clock was set 1 s forward before that, so the broker
        // stamps it 1,145 ms: judged from the origin read at the start, the writes
        // acknowledged at 150..190 ms look earlier than the admission.
        let stepped = vec![expansion(5, ORIGIN + 1_145, false)];
        let by_node = BTreeMap::from([("n2".to_string(), stepped)]);
        let from_start = judge(&by_node, acknowledged(&history(), ORIGIN));
        assert_eq!(from_start.anomalies.len(), 1);
        // The origin read again at the end has moved by the step; the later one is used.
        let stats = spec::RunStats {
            history_unix_ms: Some(ORIGIN),
            history_unix_ms_at_end: Some(ORIGIN + 1_000),
            ..spec::RunStats::default()
        };
        let origin = stats.history_origin_ms().expect("an origin");
        let judged = judge(&by_node, acknowledged(&history(), origin));
        assert!(judged.anomalies.is_empty(), "{:?}", judged.anomalies);
        // A real admission behind, after the step, is still found: offsets 0..10 were
        // acknowledged by 190 ms, the follower let in at 2 s (stamped 3 s) held 0..5.
        let late = BTreeMap::from([("n2".to_string(), vec![expansion(5, ORIGIN + 3_000, false)])]);
        assert_eq!(
            judge(&late, acknowledged(&history(), origin))
                .anomalies
                .len(),
            1
        );
    }

    #[test]
    fn other_partitions_and_unwritten_ones_are_apart() {
        let mut other = expansion(0, ORIGIN + 10_000, true);
        other.partition = 1;
        let mut unwritten = expansion(0, ORIGIN + 10_000, true);
        unwritten.partition = 7;
        let j = judged(vec![other, unwritten]);
        // t/1's one write is at offset 0, which a follower at 0 lacks.
        assert_eq!((j.expansions, j.judged, j.anomalies.len()), (2, 1, 1));
        assert_eq!(j.anomalies[0]["key"], "t/1");
    }

    #[test]
    fn under_a_durability_waiver_only_admissions_decided_below_the_epoch_start_count() {
        // Offsets 0..10 acknowledged by 190 ms; the leader's epoch began at offset 10.
        let judged_with = |events: Vec<IsrExpansion>| {
            let mut results = Results::default();
            add(&mut results, judged(events), Some("unclean elections"));
            results
        };
        // Decided with the follower at 5: it lacks 5..10, which the leader held itself.
        let results = judged_with(vec![expansion(5, ORIGIN + 1_000, false)]);
        let isr = &results.checkers["isr"];
        assert_eq!(isr.verdict, Verdict::Invalid);
        assert_eq!(isr.report["counted"], 1);
        let text = isr.report["anomalies"][0]["explanation"].as_str().unwrap();
        assert!(text.contains("where n2's own epoch began"), "{text}");
        assert!(isr
            .waived()
            .is_some_and(|why| why.contains("unclean elections")));
        // Taking effect with the follower at 5 (it may have restarted and truncated to
        // its high watermark since it was let in): reported, not counted.
        let results = judged_with(vec![expansion(5, ORIGIN + 1_000, true)]);
        let isr = &results.checkers["isr"];
        assert_eq!(isr.verdict, Verdict::Valid);
        assert_eq!(isr.report["found"], 1);
        assert_eq!(isr.report["anomalies"][0]["counts_against_validity"], false);
        // A leader whose epoch began at 3 (an election lost 3..10): the follower at 3
        // lacks only writes the leader lacked too.
        let mut lost = expansion(3, ORIGIN + 1_000, false);
        lost.epoch_start_offset = Some(3);
        let results = judged_with(vec![lost.clone()]);
        assert_eq!(results.checkers["isr"].verdict, Verdict::Valid);
        // Without a waiver every admission behind counts, as before.
        let mut results = Results::default();
        add(&mut results, judged(vec![lost]), None);
        assert_eq!(results.checkers["isr"].verdict, Verdict::Invalid);
        assert!(results.checkers["isr"].waived().is_none());
        // The counted ones are listed first, whatever their order.
        let mut results = Results::default();
        let mut events: Vec<IsrExpansion> = (0..MAX_REPORTED as u64)
            .map(|i| expansion(5, ORIGIN + 1_000 + i, true))
            .collect();
        events.push(expansion(5, ORIGIN + 2_000, false));
        add(&mut results, judged(events), Some("unclean elections"));
        let isr = &results.checkers["isr"];
        assert_eq!(isr.verdict, Verdict::Invalid);
        assert_eq!(isr.report["anomalies"][0]["counts_against_validity"], true);
        assert_eq!(
            results.counted_anomalies().get("isr-admitted-behind"),
            Some(&1)
        );
    }

    #[test]
    fn the_checker_is_invalid_only_with_an_anomaly_and_says_why() {
        let mut results = Results::default();
        add(
            &mut results,
            judged(vec![expansion(10, ORIGIN + 1_000, true)]),
            None,
        );
        assert_eq!(results.checkers["isr"].verdict, Verdict::Valid);
        assert!(summary_lines(&results).is_empty());
        let mut results = Results::default();
        add(
            &mut results,
            judged(vec![expansion(3, ORIGIN + 1_000, true)]),
            None,
        );
        assert_eq!(results.checkers["isr"].verdict, Verdict::Invalid);
        let lines = summary_lines(&results);
        assert_eq!(lines.len(), 1);
        assert!(lines[0].contains("isr-admitted-behind"), "{lines:?}");
    }

    #[test]
    fn failed_and_unsized_writes_are_not_acknowledged() {
        let mut failed = append_ok(0, 10, "t/0", 1, 0);
        failed.kind = OpType::Fail;
        let mut info = append_ok(1, 10, "t/0", 2, 1);
        info.kind = OpType::Info;
        let mut no_offset = append_ok(2, 10, "t/0", 3, 2);
        no_offset.value = json!({"key": "t/0", "value": 3});
        let acked = acknowledged(&[failed, info, no_offset], ORIGIN);
        assert!(acked.is_empty(), "{acked:?}");
    }

    #[test]
    fn writes_sent_with_weak_acks_are_not_counted() {
        let invoke = |index: u64, process: u64, acks: Option<Value>| {
            let mut value = json!({"key": "t/0", "value": index});
            if let Some(acks) = acks {
                value["acks"] = acks;
            }
            Op::new(
                index,
                Process::Client(process),
                OpType::Invoke,
                "append",
                value,
            )
        };
        let ok = |index: u64, process: u64, offset: u64| {
            let mut op = append_ok(index, 10, "t/0", index as i64, offset);
            op.process = Process::Client(process);
            op
        };
        let ops = vec![
            invoke(0, 1, Some(json!(1))),
            invoke(1, 2, None),
            invoke(2, 3, Some(json!("0"))),
            ok(3, 1, 0),
            ok(4, 2, 1),
            ok(5, 3, 2),
            invoke(6, 1, Some(json!("all"))),
            ok(7, 1, 3),
        ];
        let offsets: Vec<u64> = acknowledged(&ops, ORIGIN)["t/0"]
            .iter()
            .map(|a| a.offset)
            .collect();
        assert_eq!(offsets, vec![1, 3]);
    }
}
