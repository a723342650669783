//! The analysis behind [`check_log`]: one pass in history order (observations, known
//! lengths), then per-key sweeps over sorted acked values. Rules: the module docs of
//! [`crate::log`].

use super::parse::{parse, Append, FastMap, Parsed, Read};
use super::{Anomaly, AnomalyKind, KindCount, LogReport, LogStats, MAX_REPORTED_PER_KIND};
use crate::verdict::Verdict;
use history::{History, HistoryError, Outcome};
use std::borrow::Cow;

/// Checks an append/read log history; errors only when the history is malformed.
pub fn check_log(history: &History) -> Result<LogReport, HistoryError> {
    let operations = history::pair(history)?;
    let parsed = parse(history, &operations)?;
    drop(operations);
    let values = index_values(history, &parsed)?;
    let mut checker = Checker::new(history, &parsed, values);
    checker.run();
    Ok(checker.finish())
}

/// Value → the append that sent it; a value appended twice makes the history malformed,
/// since every judgement here rests on values being unique.
fn index_values(history: &History, parsed: &Parsed) -> Result<FastMap<i64, u32>, HistoryError> {
    let mut values: FastMap<i64, u32> = FastMap::default();
    values.reserve(parsed.appends.len());
    for (i, append) in parsed.appends.iter().enumerate() {
        let id = u32::try_from(i).map_err(|_| {
            HistoryError::invalid(
                history.locate(append.invoke),
                "more than 2^32 appends in one history".to_string(),
            )
        })?;
        if let Some(&first) = values.get(&append.value) {
            let first = &parsed.appends[first as usize];
            return Err(HistoryError::invalid(
                history.locate(append.invoke),
                format!(
                    "value {} is appended again (first appended at {}); the log workload needs unique values",
                    append.value,
                    history.locate(first.invoke)
                ),
            ));
        }
        values.insert(append.value, id);
    }
    Ok(values)
}

/// What is known at one (key, offset): the first value shown there and by which op.
#[derive(Debug, Clone, Copy)]
struct Slot {
    value: i64,
    /// History position of the first op that showed a value here; `usize::MAX`: empty.
    position: usize,
    /// Whether a read (not only an ack) has shown `value` here.
    read_seen: bool,
}

const EMPTY_SLOT: Slot = Slot {
    value: 0,
    position: usize::MAX,
    read_seen: false,
};

/// (key, offset) → slot for one key: a vector for the offsets a correct log can have
/// (below the number of appends to the key, plus slack), a map for anything wilder, so a
/// broker reporting offset 2^60 cannot make the checker allocate it.
struct OffsetIndex {
    dense: Vec<Slot>,
    sparse: FastMap<i64, Slot>,
    dense_limit: i64,
}

impl OffsetIndex {
    fn slot_mut(&mut self, offset: i64) -> &mut Slot {
        if (0..self.dense_limit).contains(&offset) {
            let i = offset as usize;
            if i >= self.dense.len() {
                self.dense.resize(i + 1, EMPTY_SLOT);
            }
            &mut self.dense[i]
        } else {
            self.sparse.entry(offset).or_insert(EMPTY_SLOT)
        }
    }

    fn get(&self, offset: i64) -> Option<&Slot> {
        let slot = if (0..self.dense_limit).contains(&offset) {
            self.dense.get(offset as usize)
        } else {
            self.sparse.get(&offset)
        };
        slot.filter(|s| s.position != usize::MAX)
    }

    /// Offsets holding a value, ascending.
    fn existing(&self) -> Vec<i64> {
        let mut offsets: Vec<i64> = self
            .dense
            .iter()
            .enumerate()
            .filter(|(_, s)| s.position != usize::MAX)
            .map(|(i, _)| i as i64)
            .collect();
        offsets.extend(self.sparse.keys().copied());
        offsets.sort_unstable();
        offsets
    }
}

/// An acked value of one key, for the lost-write sweep.
#[derive(Debug, Clone, Copy)]
struct Entry {
    offset: i64,
    /// The appended value, kept here so the sweep does not chase `appends`.
    value: i64,
    append: u32,
}

/// "Next entry at or after i that is not yet lost", with path halving: each entry is
/// condemned once, and enumerating a gap costs only the entries still standing in it.
struct NextStanding {
    next: Vec<u32>,
}

impl NextStanding {
    fn new(len: usize) -> Self {
        NextStanding {
            next: (0..=len as u32).collect(),
        }
    }

    fn find(&mut self, mut i: usize) -> usize {
        while self.next[i] as usize != i {
            let parent = self.next[i] as usize;
            self.next[i] = self.next[parent];
            i = parent;
        }
        i
    }

    fn remove(&mut self, i: usize) {
        self.next[i] = (i + 1) as u32;
    }
}

/// Per kind: total, counted, and the first instances.
struct Collector {
    found: [usize; 9],
    counted: [usize; 9],
    kept: [Vec<Anomaly>; 9],
}

impl Collector {
    fn new() -> Self {
        Collector {
            found: [0; 9],
            counted: [0; 9],
            kept: Default::default(),
        }
    }

    fn push(
        &mut self,
        kind: AnomalyKind,
        key: &str,
        ops: Vec<u64>,
        counts: bool,
        explanation: impl FnOnce() -> String,
    ) {
        let slot = kind.slot();
        self.found[slot] += 1;
        if counts {
            self.counted[slot] += 1;
        }
        if self.kept[slot].len() < MAX_REPORTED_PER_KIND {
            self.kept[slot].push(Anomaly {
                kind,
                key: key.to_string(),
                ops,
                explanation: explanation(),
                counts_against_validity: counts,
            });
        }
    }
}

/// Per-append state gathered by the observation pass.
#[derive(Debug, Clone, Copy, Default)]
struct ValueState {
    /// First (offset, history position) at which an ack or read showed this value.
    first_at: Option<(i64, usize)>,
    /// First read (index into `reads`) that returned it.
    first_read: Option<u32>,
    /// Known length of the key when the append was invoked, and the op that set it.
    known_at_invoke: (i64, usize),
    lost: bool,
}

struct Checker<'a> {
    history: &'a History,
    parsed: &'a Parsed,
    values: FastMap<i64, u32>,
    offsets: Vec<OffsetIndex>,
    state: Vec<ValueState>,
    /// Known length of each read's key at its invocation, and the op that set it.
    read_known: Vec<(i64, usize)>,
    /// Previous ok read of the same process and key.
    previous: Vec<Option<u32>>,
    /// Among earlier ok reads of the same process and key that returned records, the
    /// furthest end reached, and by which read.
    furthest: Vec<Option<(i64, u32)>>,
    /// Among all earlier ok reads of the same process and key, the furthest position
    /// (end of returned range; an empty read's is its requested offset), and by which read.
    position: Vec<Option<(i64, u32)>>,
    is_final: Vec<bool>,
    /// Other distinct values seen at one (key, offset), beyond the slot's first.
    conflicts: FastMap<(u32, i64), Vec<(i64, usize)>>,
    /// (key, offset, value) of conflicting values a read has shown (the first value of
    /// an offset keeps this in its slot's `read_seen`).
    conflicts_read: FastMap<(u32, i64, i64), ()>,
    /// Further distinct offsets at which a value was seen, beyond its first.
    duplicates: FastMap<u32, Vec<(i64, usize)>>,
    out: Collector,
    stats: LogStats,
}

const NOBODY: usize = usize::MAX;

/// How a read shows an acked value missing.
#[derive(Clone, Copy)]
enum Missing {
    /// The read returned offsets around it but not it.
    Gap,
    /// The read has this other value at its offset.
    Replaced(i64),
    /// It lies beyond what a final read returned, yet that read claimed it is in the log.
    Beyond,
}

/// The end of a read's returned range: highest returned offset + 1, or its start if empty.
fn end_of(read: &Read, records: &[(i64, i64)]) -> i64 {
    records
        .iter()
        .map(|&(offset, _)| offset.saturating_add(1))
        .max()
        .map_or(read.offset, |end| end.max(read.offset))
}

/// A read's records by ascending offset, one per offset: borrowed unless the broker
/// returned them out of order (reported as nonmonotonic; judged here as a set).
fn sorted_records(raw: &[(i64, i64)]) -> Cow<'_, [(i64, i64)]> {
    if raw.windows(2).all(|w| w[0].0 < w[1].0) {
        Cow::Borrowed(raw)
    } else {
        let mut sorted = raw.to_vec();
        sorted.sort_by_key(|&(offset, _)| offset);
        sorted.dedup_by_key(|&mut (offset, _)| offset);
        Cow::Owned(sorted)
    }
}

/// First index of `entries[from..]` whose offset is ≥ `target`, by galloping: cheap when
/// the answer is near, logarithmic when a read jumps far ahead.
fn gallop(entries: &[Entry], from: usize, target: i64) -> usize {
    let mut low = from;
    let mut step = 1;
    let mut high = from;
    while high < entries.len() && entries[high].offset < target {
        low = high + 1;
        high = from + step;
        step *= 2;
    }
    let high = high.min(entries.len());
    low + entries[low..high].partition_point(|e| e.offset < target)
}

impl<'a> Checker<'a> {
    fn new(history: &'a History, parsed: &'a Parsed, values: FastMap<i64, u32>) -> Self {
        let mut appends_per_key = vec![0i64; parsed.keys.len()];
        for append in &parsed.appends {
            appends_per_key[append.key as usize] += 1;
        }
        let offsets = appends_per_key
            .iter()
            .map(|&n| OffsetIndex {
                dense: Vec::new(),
                sparse: FastMap::default(),
                dense_limit: n + 1024,
            })
            .collect();
        Checker {
            history,
            parsed,
            values,
            offsets,
            state: vec![ValueState::default(); parsed.appends.len()],
            read_known: vec![(0, NOBODY); parsed.reads.len()],
            previous: vec![None; parsed.reads.len()],
            furthest: vec![None; parsed.reads.len()],
            position: vec![None; parsed.reads.len()],
            is_final: vec![false; parsed.reads.len()],
            conflicts: FastMap::default(),
            conflicts_read: FastMap::default(),
            duplicates: FastMap::default(),
            out: Collector::new(),
            stats: LogStats::default(),
        }
    }

    fn index(&self, position: usize) -> u64 {
        self.history.ops[position].index
    }

    fn key(&self, key: u32) -> &'a str {
        self.parsed.keys[key as usize].as_str()
    }

    fn run(&mut self) {
        self.count_operations();
        self.observe_in_history_order();
        self.link_processes();
        self.choose_final_reads();
        self.report_conflicts();
        self.check_lost_and_unseen();
        self.check_reads();
        self.check_stale_and_realtime();
    }

    fn count_operations(&mut self) {
        let parsed = self.parsed;
        let stats = &mut self.stats;
        stats.keys = parsed.keys.len();
        stats.other_client_ops = parsed.other_client_ops;
        for append in &parsed.appends {
            match append.outcome {
                Outcome::Ok => stats.appends_ok += 1,
                Outcome::Fail => stats.appends_fail += 1,
                Outcome::Info => stats.appends_info += 1,
            }
        }
        for read in &parsed.reads {
            match read.outcome {
                Outcome::Ok => stats.reads_ok += 1,
                Outcome::Fail => stats.reads_fail += 1,
                Outcome::Info => stats.reads_info += 1,
            }
        }
        stats.values_acked = stats.appends_ok;
        stats.records_read = parsed.records.len();
    }

    /// Walks the history once in order: snapshots each key's known length at every
    /// invocation, and records every ack and returned record at its completion, so that the
    /// first op to show anything at a (key, offset) is the earliest one.
    fn observe_in_history_order(&mut self) {
        #[derive(Clone, Copy)]
        enum Event {
            None,
            AppendInvoke(u32),
            AppendOk(u32),
            ReadInvoke(u32),
            ReadOk(u32),
        }
        let parsed = self.parsed;
        let mut events = vec![Event::None; self.history.len()];
        for (i, append) in parsed.appends.iter().enumerate() {
            events[append.invoke] = Event::AppendInvoke(i as u32);
            if let (Outcome::Ok, Some(c)) = (append.outcome, append.completion) {
                events[c] = Event::AppendOk(i as u32);
            }
        }
        for (i, read) in parsed.reads.iter().enumerate() {
            events[read.invoke] = Event::ReadInvoke(i as u32);
            if let (Outcome::Ok, Some(c)) = (read.outcome, read.completion) {
                events[c] = Event::ReadOk(i as u32);
            }
        }
        let mut known: Vec<(i64, usize)> = vec![(0, NOBODY); parsed.keys.len()];
        for (position, event) in events.iter().enumerate() {
            match *event {
                Event::None => {}
                Event::AppendInvoke(a) => {
                    let key = parsed.appends[a as usize].key as usize;
                    self.state[a as usize].known_at_invoke = known[key];
                }
                Event::ReadInvoke(r) => {
                    let key = parsed.reads[r as usize].key as usize;
                    self.read_known[r as usize] = known[key];
                }
                Event::AppendOk(a) => {
                    let append = &parsed.appends[a as usize];
                    if let Some(offset) = append.offset {
                        self.observe(append.key, offset, append.value, position, None);
                        let length = offset.saturating_add(1);
                        let k = &mut known[append.key as usize];
                        if length > k.0 {
                            *k = (length, position);
                        }
                    }
                }
                Event::ReadOk(r) => {
                    let read = &parsed.reads[r as usize];
                    let records = parsed.records(read);
                    for &(offset, value) in records {
                        self.observe(read.key, offset, value, position, Some(r));
                    }
                    let length = end_of(read, records).max(read.high_watermark.unwrap_or(0));
                    let k = &mut known[read.key as usize];
                    if length > k.0 {
                        *k = (length, position);
                    }
                }
            }
        }
    }

    /// One value shown at (key, offset) by the op at `position` (a read if `read` is set).
    fn observe(&mut self, key: u32, offset: i64, value: i64, position: usize, read: Option<u32>) {
        let slot = self.offsets[key as usize].slot_mut(offset);
        if slot.position == NOBODY {
            *slot = Slot {
                value,
                position,
                read_seen: read.is_some(),
            };
        } else if slot.value == value {
            if read.is_none() || slot.read_seen {
                return;
            }
            slot.read_seen = true;
        } else {
            let first = (slot.value, slot.position);
            let others = self.conflicts.entry((key, offset)).or_default();
            if others.iter().any(|&(v, _)| v == value) {
                // Shown before (by an ack, say): the value checks run again only for
                // the first read that shows it, which is what reading it means.
                if read.is_none()
                    || self
                        .conflicts_read
                        .insert((key, offset, value), ())
                        .is_some()
                {
                    return;
                }
            } else {
                if others.is_empty() {
                    others.push(first);
                }
                others.push((value, position));
                if read.is_some() {
                    self.conflicts_read.insert((key, offset, value), ());
                }
            }
        }
        self.observe_value(key, offset, value, position, read);
    }

    /// Value-level checks, once per distinct (key, offset, value) shown by a read or ack.
    fn observe_value(
        &mut self,
        key: u32,
        offset: i64,
        value: i64,
        position: usize,
        read: Option<u32>,
    ) {
        let Some(&a) = self.values.get(&value) else {
            if read.is_some() {
                let key_name = self.key(key);
                self.out.push(
                    AnomalyKind::AbortedRead,
                    key_name,
                    vec![self.index(position)],
                    true,
                    || format!("read op {} returned value {value} at offset {offset} of {key_name}, a value nobody appended", self.history.ops[position].index),
                );
            }
            return;
        };
        let append: &Append = &self.parsed.appends[a as usize];
        if let Some(r) = read {
            let key_name = self.key(key);
            let read_index = self.index(position);
            if append.key != key {
                let other = self.key(append.key);
                self.out.push(
                    AnomalyKind::AbortedRead,
                    key_name,
                    vec![read_index, self.index(append.invoke)],
                    true,
                    || format!("read op {read_index} returned value {value} at offset {offset} of {key_name}, but op {} appended it to {other}", self.history.ops[append.invoke].index),
                );
                return;
            }
            if append.outcome == Outcome::Fail {
                let failed = append.completion.unwrap_or(append.invoke);
                self.out.push(
                    AnomalyKind::AbortedRead,
                    key_name,
                    vec![read_index, self.index(failed)],
                    true,
                    || format!("read op {read_index} returned value {value} at offset {offset} of {key_name}, whose append failed (op {})", self.history.ops[failed].index),
                );
            }
            if position < append.invoke {
                self.out.push(
                    AnomalyKind::RealtimeOrder,
                    key_name,
                    vec![read_index, self.index(append.invoke)],
                    true,
                    || format!("read op {read_index} returned value {value} at offset {offset} of {key_name} before its append (op {}) was invoked", self.history.ops[append.invoke].index),
                );
            }
            let state = &mut self.state[a as usize];
            if state.first_read.is_none() {
                state.first_read = Some(r);
            }
        }
        let state = &mut self.state[a as usize];
        match state.first_at {
            None => state.first_at = Some((offset, position)),
            Some((first, _)) if first == offset => {}
            Some(_) => {
                let seen = self.duplicates.entry(a).or_default();
                if !seen.iter().any(|&(o, _)| o == offset) {
                    seen.push((offset, position));
                }
            }
        }
    }

    /// Links each ok read to the previous ok read of its process and key, and to the
    /// furthest earlier ones reached.
    fn link_processes(&mut self) {
        let parsed = self.parsed;
        let mut last: FastMap<(u64, u32), u32> = FastMap::default();
        let mut furthest: FastMap<(u64, u32), (i64, u32)> = FastMap::default();
        let mut position: FastMap<(u64, u32), (i64, u32)> = FastMap::default();
        for (i, read) in parsed.reads.iter().enumerate() {
            if !read.is_ok() {
                continue;
            }
            let slot = (read.process, read.key);
            self.previous[i] = last.insert(slot, i as u32);
            self.furthest[i] = furthest.get(&slot).copied();
            self.position[i] = position.get(&slot).copied();
            let records = parsed.records(read);
            let end = end_of(read, records);
            if self.position[i].is_none_or(|(e, _)| end > e) {
                position.insert(slot, (end, i as u32));
            }
            if !records.is_empty() && self.furthest[i].is_none_or(|(e, _)| end > e) {
                furthest.insert(slot, (end, i as u32));
            }
        }
    }

    fn choose_final_reads(&mut self) {
        let reads = &self.parsed.reads;
        let marked = reads.iter().any(|r| r.marked_final);
        self.stats.final_reads_marked = marked;
        if marked {
            for (i, read) in reads.iter().enumerate() {
                self.is_final[i] = read.marked_final && read.is_ok();
            }
        } else {
            let mut last: Vec<Option<usize>> = vec![None; self.parsed.keys.len()];
            for (i, read) in reads.iter().enumerate() {
                if let (true, Some(c)) = (read.is_ok(), read.completion) {
                    let slot = &mut last[read.key as usize];
                    let later = match *slot {
                        None => true,
                        Some(j) => reads[j].completion.is_some_and(|d| d < c),
                    };
                    if later {
                        *slot = Some(i);
                    }
                }
            }
            for &start in last.iter().flatten() {
                let mut current = start;
                self.is_final[current] = true;
                while reads[current].offset > 0 {
                    let Some(p) = self.previous[current] else {
                        break;
                    };
                    let p = p as usize;
                    if end_of(&reads[p], self.parsed.records(&reads[p])) != reads[current].offset {
                        break;
                    }
                    self.is_final[p] = true;
                    current = p;
                }
            }
        }
        self.stats.final_reads = self.is_final.iter().filter(|&&f| f).count();
    }

    fn report_conflicts(&mut self) {
        let mut conflicts: Vec<_> = std::mem::take(&mut self.conflicts).into_iter().collect();
        conflicts.sort_unstable_by_key(|&((key, offset), _)| (key, offset));
        for ((key, offset), shown) in conflicts {
            let key_name = self.key(key);
            let ops = shown.iter().map(|&(_, p)| self.index(p)).collect();
            self.out.push(
                AnomalyKind::InconsistentOffsets,
                key_name,
                ops,
                true,
                || {
                    let parts: Vec<String> = shown
                        .iter()
                        .map(|&(v, p)| format!("{v} (op {})", self.history.ops[p].index))
                        .collect();
                    format!(
                        "offset {offset} of {key_name} holds different values: {}",
                        parts.join(", ")
                    )
                },
            );
        }
        let mut duplicates: Vec<_> = std::mem::take(&mut self.duplicates).into_iter().collect();
        duplicates.sort_unstable_by_key(|&(a, _)| a);
        for (a, others) in duplicates {
            let append = &self.parsed.appends[a as usize];
            let Some((first, first_position)) = self.state[a as usize].first_at else {
                continue;
            };
            let key_name = self.key(append.key);
            let mut ops = vec![self.index(first_position)];
            ops.extend(others.iter().map(|&(_, p)| self.index(p)));
            let value = append.value;
            self.out.push(AnomalyKind::Duplicate, key_name, ops, true, || {
                let parts: Vec<String> = others
                    .iter()
                    .map(|&(o, p)| format!("{o} (op {})", self.history.ops[p].index))
                    .collect();
                format!(
                    "value {value} of {key_name} is at offset {first} (op {}) and also at offset {}",
                    self.history.ops[first_position].index,
                    parts.join(", ")
                )
            });
        }
    }

    /// The offset at which an append counts as acked, and its witness position.
    fn acked_at(&self, a: usize) -> Option<(i64, usize)> {
        let append = &self.parsed.appends[a];
        let state = &self.state[a];
        match append.outcome {
            Outcome::Ok => append.offset.zip(append.completion),
            Outcome::Info => {
                let r = state.first_read? as usize;
                let (offset, _) = state.first_at?;
                Some((offset, self.parsed.reads[r].completion?))
            }
            Outcome::Fail => None,
        }
    }

    fn check_lost_and_unseen(&mut self) {
        let parsed = self.parsed;
        let key_count = parsed.keys.len();
        let mut entries: Vec<Vec<Entry>> = vec![Vec::new(); key_count];
        for a in 0..parsed.appends.len() {
            if let Some((offset, _)) = self.acked_at(a) {
                entries[parsed.appends[a].key as usize].push(Entry {
                    offset,
                    value: parsed.appends[a].value,
                    append: a as u32,
                });
            }
            if parsed.appends[a].outcome == Outcome::Info && self.state[a].first_read.is_some() {
                self.stats.values_info_seen += 1;
            }
            if self.state[a].first_read.is_some() {
                self.stats.values_read += 1;
            }
        }
        for list in &mut entries {
            list.sort_unstable_by_key(|e| (e.offset, e.append));
        }
        let mut reads_by_key: Vec<Vec<u32>> = vec![Vec::new(); key_count];
        for (r, read) in parsed.reads.iter().enumerate() {
            if read.is_ok() {
                reads_by_key[read.key as usize].push(r as u32);
            }
        }
        for key in 0..key_count {
            let list = &entries[key];
            let mut final_view: Vec<(i64, i64)> = reads_by_key[key]
                .iter()
                .filter(|&&r| self.is_final[r as usize])
                .flat_map(|&r| parsed.records(&parsed.reads[r as usize]).iter().copied())
                .collect();
            final_view.sort_unstable();
            let mut standing = NextStanding::new(list.len());
            for &r in &reads_by_key[key] {
                self.lost_in_read(r as usize, list, &final_view, &mut standing);
            }
        }
        // Unseen: acked ok, never returned by a read, not already lost. It counts only when
        // some final read should have shown it: invoked after the ack, completed ok, not
        // cut short, started at or below its offset, and (unless linearizable) with a high
        // watermark above it.
        let mut final_reads_by_key: Vec<Vec<usize>> = vec![Vec::new(); key_count];
        for (r, read) in parsed.reads.iter().enumerate() {
            if self.is_final[r] && read.is_ok() && !read.limited() {
                final_reads_by_key[read.key as usize].push(r);
            }
        }
        for (a, append) in parsed.appends.iter().enumerate() {
            let state = &self.state[a];
            if append.outcome != Outcome::Ok || state.first_read.is_some() || state.lost {
                continue;
            }
            let (Some(offset), Some(completion)) = (append.offset, append.completion) else {
                continue;
            };
            let final_after = final_reads_by_key[append.key as usize]
                .iter()
                .map(|&r| &parsed.reads[r])
                .filter(|read| {
                    read.invoke > completion
                        && read.offset.max(read.log_start.unwrap_or(i64::MIN)) <= offset
                        && (read.linearizable || read.high_watermark.is_some_and(|hw| hw > offset))
                })
                .map(|read| read.invoke)
                .max();
            let key_name = self.key(append.key);
            let value = append.value;
            let ack = self.index(completion);
            self.out.push(
                AnomalyKind::Unseen,
                key_name,
                vec![ack],
                final_after.is_some(),
                || match final_after {
                    Some(f) => format!(
                        "value {value} acked at offset {offset} of {key_name} (op {ack}) was never read, though a final read covering its offset ran after it (op {})",
                        self.history.ops[f].index
                    ),
                    None => format!(
                        "value {value} acked at offset {offset} of {key_name} (op {ack}) was never read, and no final read after it covered its offset: lost or late, cannot tell"
                    ),
                },
            );
        }
    }

    /// Condemns every acked value that read `r` shows missing.
    fn lost_in_read(
        &mut self,
        r: usize,
        list: &[Entry],
        final_view: &[(i64, i64)],
        standing: &mut NextStanding,
    ) {
        let parsed = self.parsed;
        let read = &parsed.reads[r];
        let raw = parsed.records(read);
        let Some(completion) = read.completion else {
            return;
        };
        let records = sorted_records(raw);
        let start = read.offset.max(read.log_start.unwrap_or(i64::MIN));
        let mut cursor = list.partition_point(|e| e.offset < start);
        for &(x, w) in records.iter().filter(|&&(x, _)| x >= start) {
            // Standing entries in the gap before this record are missing from the read.
            let mut j = standing.find(cursor);
            while j < list.len() && list[j].offset < x {
                if !self.appended_after(list[j], completion) {
                    self.condemn(list[j], r, completion, Missing::Gap, standing, j);
                }
                j = standing.find(j + 1);
            }
            cursor = gallop(list, cursor, x);
            // Standing entries at this offset with another value are missing too.
            let mut j = standing.find(cursor);
            while j < list.len() && list[j].offset == x {
                let entry = list[j];
                if entry.value != w && !self.appended_after(entry, completion) {
                    self.condemn(entry, r, completion, Missing::Replaced(w), standing, j);
                }
                j = standing.find(j + 1);
            }
            cursor = gallop(list, cursor, x.saturating_add(1));
        }
        if !self.is_final[r] {
            return;
        }
        let end = end_of(read, &records);
        let drained = read.high_watermark.is_some_and(|hw| end >= hw) || !read.limited();
        if !drained {
            return;
        }
        // A final read that was not cut short says the log ends at its high watermark:
        // an acked value beyond what it returned, missing from every final read, is gone if
        // the read's own high watermark covers it. Acked before the read began but above its
        // high watermark is gone only for a linearizable read: a default read may come from
        // a new leader whose high watermark still lags (a stale view, reported as such).
        let claimed_end = end.max(read.high_watermark.unwrap_or(end));
        let from = list.partition_point(|e| e.offset < end.max(start));
        let mut j = standing.find(from);
        while j < list.len() {
            let entry = list[j];
            let in_final_view = final_view
                .binary_search(&(entry.offset, entry.value))
                .is_ok();
            let due = entry.offset < claimed_end
                || (read.linearizable
                    && self
                        .acked_at(entry.append as usize)
                        .is_some_and(|(_, witness)| witness < read.invoke));
            if due && !in_final_view {
                self.condemn(entry, r, completion, Missing::Beyond, standing, j);
            }
            j = standing.find(j + 1);
        }
    }

    /// Whether `entry`'s append was invoked after the read that completed at
    /// `completion`: that read cannot show the value missing (an offset reused after
    /// the read is an `inconsistent-offsets`, not a loss of the later value).
    fn appended_after(&self, entry: Entry, completion: usize) -> bool {
        self.parsed.appends[entry.append as usize].invoke > completion
    }

    fn ack_description(&self, entry: Entry) -> (u64, &'static str) {
        let append = &self.parsed.appends[entry.append as usize];
        match (append.outcome, append.completion) {
            (Outcome::Ok, Some(c)) => (self.index(c), "acked"),
            _ => (self.index(append.invoke), "appended (info) and read"),
        }
    }

    /// Records that acked value `entry` is lost, as read `r` shows it missing.
    fn condemn(
        &mut self,
        entry: Entry,
        r: usize,
        completion: usize,
        missing: Missing,
        standing: &mut NextStanding,
        j: usize,
    ) {
        standing.remove(j);
        self.state[entry.append as usize].lost = true;
        let append = &self.parsed.appends[entry.append as usize];
        let read = &self.parsed.reads[r];
        let key_name = self.key(append.key);
        let (ack, how) = self.ack_description(entry);
        let read_index = self.index(completion);
        let invoke_index = self.index(read.invoke);
        let (value, x) = (append.value, entry.offset);
        let end = end_of(read, self.parsed.records(read));
        let final_word = if self.is_final[r] { "final " } else { "" };
        let lost =
            format!("value {value} {how} at offset {x} of {key_name} (op {ack}) is missing from");
        self.out.push(
            AnomalyKind::LostWrite,
            key_name,
            vec![ack, read_index],
            true,
            || match missing {
                Missing::Replaced(w) => {
                    format!("{lost} {final_word}read op {read_index}, which has value {w} there")
                }
                Missing::Gap => format!(
                    "{lost} {final_word}read op {read_index}, which returned offsets {} to {}",
                    read.offset,
                    end - 1
                ),
                Missing::Beyond => {
                    let hw = read
                        .high_watermark
                        .map_or_else(|| "none".to_string(), |h| h.to_string());
                    format!(
                        "{lost} every final read; final read op {read_index} (invoked at op {invoke_index}) returned up to offset {} and reported high watermark {hw}",
                        end - 1
                    )
                }
            },
        );
    }

    /// Per-read checks (order and skips within a read) and per-process checks between a
    /// process's successive reads of a key.
    fn check_reads(&mut self) {
        let parsed = self.parsed;
        // Op indices are looked up only for anomalies: `history.ops` is large and cold.
        let history = self.history;
        let idx = |position: usize| history.ops[position].index;
        let existing: Vec<Vec<i64>> = self.offsets.iter().map(OffsetIndex::existing).collect();
        let count_in = |key: u32, from: i64, to: i64| -> (usize, Option<i64>) {
            let list = &existing[key as usize];
            let lo = list.partition_point(|&o| o < from);
            let hi = list.partition_point(|&o| o < to);
            (
                hi.saturating_sub(lo),
                list.get(lo).copied().filter(|_| hi > lo),
            )
        };
        for (r, read) in parsed.reads.iter().enumerate() {
            let Some(completion) = read.completion.filter(|_| read.is_ok()) else {
                continue;
            };
            let records = parsed.records(read);
            let key_name = self.key(read.key);
            // (a) of nonmonotonic-read: within one read.
            let unordered = records.windows(2).find(|w| w[0].0 >= w[1].0);
            let below = records.iter().find(|&&(o, _)| o < read.offset);
            if unordered.is_some() || below.is_some() {
                let o = read.offset;
                let read_index = idx(completion);
                self.out.push(AnomalyKind::NonmonotonicRead, key_name, vec![read_index], true, || match (below, unordered) {
                    (Some(&(b, _)), _) => format!("read op {read_index} of {key_name} from offset {o} returned offset {b}, below where it asked to start"),
                    (None, Some(w)) => format!("read op {read_index} of {key_name} returned offset {} after offset {}: its records go backwards", w[1].0, w[0].0),
                    (None, None) => String::new(),
                });
            }
            // (a) of poll-skip: existing offsets the records jump over.
            let start = read.offset.max(read.log_start.unwrap_or(i64::MIN));
            let mut skipped = 0usize;
            let mut first_skipped = None;
            let mut previous_end = start;
            for &(x, _) in sorted_records(records).iter() {
                if x > previous_end {
                    let (n, first) = count_in(read.key, previous_end, x);
                    skipped += n;
                    first_skipped = first_skipped.or(first);
                }
                previous_end = previous_end.max(x.saturating_add(1));
            }
            if let Some(x) = first_skipped {
                let shown_by = self.offsets[read.key as usize].get(x).map(|s| s.position);
                let read_index = idx(completion);
                let mut ops = vec![read_index];
                ops.extend(shown_by.map(idx));
                let o = read.offset;
                self.out.push(AnomalyKind::PollSkip, key_name, ops, true, || {
                    let by = shown_by.map_or(String::new(), |p| format!(" (shown by op {})", self.history.ops[p].index));
                    format!("read op {read_index} of {key_name} from offset {o} jumped over {skipped} existing offset(s), first {x}{by}")
                });
            }
            // Against what this process had already read of the key.
            let (o2, e2) = (read.offset, end_of(read, records));
            if let Some((e1, p)) = self.furthest[r] {
                if o2 < e1 && e2 < e1 && !read.limited() {
                    let earlier = parsed.reads[p as usize].completion.map(idx);
                    let read_index = idx(completion);
                    let withheld = read.high_watermark.is_some_and(|h| h >= e1);
                    let counts = read.linearizable || withheld;
                    let hw = read.high_watermark;
                    let process = read.process;
                    let mut ops: Vec<u64> = earlier.into_iter().collect();
                    ops.push(read_index);
                    self.out.push(AnomalyKind::NonmonotonicRead, key_name, ops, counts, || {
                        let why = match hw {
                            Some(h) if h >= e1 => format!("although its high watermark {h} covers them"),
                            Some(h) => format!("its high watermark {h} is {} behind (a stale view)", e1 - h),
                            None => "and it reported no high watermark".to_string(),
                        };
                        let by = earlier.map_or(String::new(), |i| format!(" (op {i})"));
                        format!("process {process} had read {key_name} up to offset {}{by}, then read op {read_index} from offset {o2} returned only up to offset {}, {why}", e1 - 1, e2 - 1)
                    });
                }
            }
            // A process asking beyond the furthest it has read passes over what lies between.
            if let Some((e1, p)) = self.position[r] {
                if o2 > e1 {
                    let (n, first) = count_in(read.key, e1, o2);
                    if let Some(x) = first {
                        let earlier = parsed.reads[p as usize].completion.map(idx);
                        let invoke_index = idx(read.invoke);
                        let process = read.process;
                        let mut ops: Vec<u64> = earlier.into_iter().collect();
                        ops.push(invoke_index);
                        self.out.push(AnomalyKind::PollSkip, key_name, ops, false, || {
                            format!("process {process} had read {key_name} up to offset {} and then asked for offset {o2} (op {invoke_index}), passing over {n} existing offset(s) from {x}: the client moved ahead itself", e1 - 1)
                        });
                    }
                }
            }
        }
    }

    fn check_stale_and_realtime(&mut self) {
        let parsed = self.parsed;
        for (r, read) in parsed.reads.iter().enumerate() {
            let (Some(completion), Some(hw)) = (read.completion, read.high_watermark) else {
                continue;
            };
            if !read.is_ok() {
                continue;
            }
            let (known, by) = self.read_known[r];
            if by == NOBODY || hw >= known {
                continue;
            }
            let lag = known - hw;
            self.stats.stale_reads += 1;
            self.stats.max_stale_lag = self.stats.max_stale_lag.max(lag);
            if read.linearizable {
                self.stats.max_stale_lag_linearizable =
                    self.stats.max_stale_lag_linearizable.max(lag);
            }
            let key_name = self.key(read.key);
            let (read_index, by_index) = (self.index(completion), self.index(by));
            let consistency = if read.linearizable {
                "linearizable"
            } else {
                "default-consistency"
            };
            self.out.push(
                AnomalyKind::StaleRead,
                key_name,
                vec![by_index, read_index],
                read.linearizable,
                || format!("{consistency} read op {read_index} of {key_name} returned high watermark {hw}, {lag} offset(s) behind the length {known} known before it began (op {by_index})"),
            );
        }
        for a in 0..parsed.appends.len() {
            let Some((offset, _)) = self.acked_at(a) else {
                continue;
            };
            let (known, by) = self.state[a].known_at_invoke;
            if by == NOBODY || offset >= known {
                continue;
            }
            let append = &parsed.appends[a];
            let key_name = self.key(append.key);
            let by_index = self.index(by);
            let invoke_index = self.index(append.invoke);
            let mut ops = vec![by_index, invoke_index];
            ops.extend(
                append
                    .completion
                    .filter(|_| append.outcome == Outcome::Ok)
                    .map(|c| self.index(c)),
            );
            let value = append.value;
            self.out.push(
                AnomalyKind::RealtimeOrder,
                key_name,
                ops,
                true,
                || format!("append of {value} to {key_name} invoked at op {invoke_index} got offset {offset}, yet op {by_index}, which completed before it began, had shown the log {known} long"),
            );
        }
    }

    fn finish(self) -> LogReport {
        let mut stats = self.stats;
        let mut anomalies = Vec::new();
        let mut counted_any = false;
        for (slot, kept) in self.out.kept.into_iter().enumerate() {
            let kind = AnomalyKind::ALL[slot];
            stats.anomalies.push(KindCount {
                kind,
                found: self.out.found[slot],
                counted: self.out.counted[slot],
                reported: kept.len(),
            });
            stats.anomalies_omitted += self.out.found[slot] - kept.len();
            counted_any |= self.out.counted[slot] > 0;
            anomalies.extend(kept);
        }
        LogReport {
            verdict: if counted_any {
                Verdict::Invalid
            } else {
                Verdict::Valid
            },
            anomalies,
            stats,
        }
    }
}
