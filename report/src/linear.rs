//! A linearizability failure drawn as Porcupine draws it, from the `linearizable`
//! checker's report (`results.checkers.linearizable.report`, see
//! `checkers::linear::LinearFailure`).
//!
//! For the failing key: one row per client process (another where a process's op stays
//! open), each op a box from its invocation to its completion (ops that may take effect
//! any time later, `info`, stay open to the right edge, dashed) on a shared axis in
//! history order, gaps scaled by elapsed time and long ones compressed. The ops of the
//! longest linearizable prefix are blue and numbered in linearization order, a line
//! joining their linearization points; the op that could not be placed after them is red,
//! and the caption says why ("read → 2 (process 3, op 40) could not be placed: after w 3
//! (the linearization so far, 5 ops), the register holds 3."). Each box links to
//! `timeline.html#i<index>` (class `op-link`); its tooltip gives its times and place in
//! the linearizations.
//!
//! Bounded: past [`MAX_FULL`] ops on the key, only a window around the failure is drawn
//! (the prefix's last [`PREFIX_TAIL`] ops, its last op that changed the state, the failing
//! op and the [`MAX_CONCURRENT`] ops concurrent with it invoked nearest to it), and the
//! figure says how many were left out. Linear in the history otherwise: a million ops
//! take well under a second.

use checkers::linear::LinearReport;
use history::{History, Outcome, Process};
use maud::{html, Markup};
use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Past this many ops on the failing key, only a window around the failure is drawn.
pub const MAX_FULL: usize = 100;
/// When windowed: ops drawn from the end of the linearizable prefix.
pub const PREFIX_TAIL: usize = 30;
/// When windowed: ops concurrent with the failing op drawn, nearest first.
pub const MAX_CONCURRENT: usize = 40;

/// Width of the process labels on the left.
pub(crate) const LEFT: f64 = 56.0;
pub(crate) const RIGHT: f64 = 16.0;
const TOP: f64 = 8.0;
const ROW_H: f64 = 36.0;
/// From a row's top to its boxes' top: room for the linearization numbers.
pub(crate) const BOX_TOP: f64 = 12.0;
pub(crate) const BOX_H: f64 = 22.0;
/// Horizontal room between two consecutive events, at least.
const MIN_GAP: f64 = 34.0;
/// Extra room per median gap of elapsed time, up to [`GAP_CAP`] medians.
const GAP_SCALE: f64 = 8.0;
/// Gaps longer than this many medians are compressed (drawn as a break on the axis).
const GAP_CAP: f64 = 6.0;
/// Where ops open to the end stop, past the last event.
const TAIL: f64 = 44.0;
/// Room per linearization point sharing one gap.
const POINT_W: f64 = 18.0;
pub(crate) const AXIS_H: f64 = 36.0;
/// Width of one character of the 11px labels, roughly.
pub(crate) const CHAR_W: f64 = 6.4;
/// Characters of the state the caption shows.
const MAX_STATE: usize = 160;
/// Labels longer than this many characters do not widen the gaps.
pub(crate) const MAX_LABEL: usize = 16;

/// The failure as the report serializes it.
#[derive(Debug)]
struct Failure {
    model: String,
    key: Option<String>,
    /// Invocation indexes, in linearization order.
    prefix: Vec<u64>,
    unplaced: u64,
    description: String,
    /// Ops of the partition (invocation indexes), with the length of the longest
    /// partial linearization that contained each.
    partials: Vec<(u64, usize)>,
    /// Whether `partials` lists every op of the partition.
    partials_complete: bool,
}

/// The linearizable checker's report in `report` (the report itself, or the checker's
/// result `{"verdict", "report": {...}}`).
pub(crate) fn linear_report(report: &Value) -> Option<LinearReport> {
    LinearReport::deserialize(report).ok().or_else(|| {
        checkers::CheckerResult::deserialize(report)
            .ok()?
            .linear_report()
    })
}

impl Failure {
    /// `None` when the report shows no failure. Accepts the checker's result as well
    /// (`{"verdict", "report": {...}}`).
    fn parse(report: &Value) -> Option<Failure> {
        let report = linear_report(report)?;
        let failure = report.failure?;
        Some(Failure {
            model: report.model.name().to_string(),
            key: failure.key,
            prefix: failure.longest_prefix,
            unplaced: failure.unplaced,
            description: failure.unplaced_description,
            partials: failure
                .partial_linearizations
                .iter()
                .map(|p| (p.op, p.len()))
                .collect(),
            partials_complete: failure.partials_omitted == 0,
        })
    }

    /// The model state after the prefix, as the checker described it ("... state then:
    /// X)").
    fn state_after(&self) -> Option<&str> {
        let (_, state) = self.description.rsplit_once("state then: ")?;
        Some(state.strip_suffix(')').unwrap_or(state))
    }

    /// What the model's state is called in the caption.
    fn holder(&self) -> &'static str {
        match self.model.as_str() {
            "kv" => "the key",
            "multi-register" => "the registers",
            "register" | "cas-register" | "etcd" => "the register",
            _ => "the state",
        }
    }
}

/// One op of the failing key, located in the history.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyOp {
    /// `Op.index` of the invocation.
    pub(crate) index: u64,
    pub(crate) process: Process,
    /// Positions in `History::ops`.
    pub(crate) invoke: usize,
    pub(crate) completion: Option<usize>,
    pub(crate) outcome: Outcome,
    /// 1-based position in the linearizable prefix.
    pub(crate) order: Option<usize>,
    /// Length of the longest partial linearization that contained it.
    pub(crate) partial: Option<usize>,
}

impl KeyOp {
    /// Where the checker takes the op to end: `None` for ops open to the end (`info`).
    pub(crate) fn ret(&self) -> Option<usize> {
        match self.outcome {
            Outcome::Info => None,
            Outcome::Ok | Outcome::Fail => self.completion,
        }
    }

    fn concurrent_with(&self, other: &KeyOp) -> bool {
        self.invoke < other.ret().unwrap_or(usize::MAX)
            && other.invoke < self.ret().unwrap_or(usize::MAX)
    }
}

/// Finds ops by `Op.index`: by binary search, in the history itself when sorted by index
/// (as every importer and the harness write it), else in a sorted table.
pub(crate) enum IndexLookup<'h> {
    Sorted(&'h History),
    Table(Vec<(u64, usize)>),
}

impl IndexLookup<'_> {
    pub(crate) fn new(history: &History) -> IndexLookup<'_> {
        if history.ops.windows(2).all(|w| w[0].index < w[1].index) {
            return IndexLookup::Sorted(history);
        }
        let mut table: Vec<(u64, usize)> = history
            .ops
            .iter()
            .enumerate()
            .map(|(pos, op)| (op.index, pos))
            .collect();
        table.sort_unstable();
        IndexLookup::Table(table)
    }

    /// The position in `History::ops` of the op with this index.
    pub(crate) fn position(&self, index: u64) -> Option<usize> {
        match self {
            IndexLookup::Sorted(history) => {
                // Dense indexes (as the harness writes them) need no search.
                let dense = usize::try_from(index)
                    .ok()
                    .filter(|&pos| history.ops.get(pos).is_some_and(|op| op.index == index));
                dense.or_else(|| history.ops.binary_search_by_key(&index, |op| op.index).ok())
            }
            IndexLookup::Table(table) => table
                .binary_search_by_key(&index, |&(i, _)| i)
                .ok()
                .map(|k| table[k].1),
        }
    }
}

/// The failing key's ops in invocation order, with their place in the prefix: the
/// partition's ops as the report lists them, or (should a report not list them) the
/// client ops on the failing key. Linear in the history, no hashing: it may hold a
/// million ops.
fn key_ops(history: &History, failure: &Failure) -> Vec<KeyOp> {
    let Ok(operations) = history::pair(history) else {
        return Vec::new();
    };
    let lookup = IndexLookup::new(history);
    let listed = failure.partials.iter().map(|&(op, _)| op);
    let mut positions: Vec<usize> = listed
        .chain(failure.prefix.iter().copied())
        .chain([failure.unplaced])
        .filter_map(|index| lookup.position(index))
        .collect();
    if failure.partials.is_empty() || !failure.partials_complete {
        positions.extend(
            operations
                .iter()
                .filter(|o| o.process.is_client())
                .filter(|o| {
                    let key = history.ops.get(o.invoke).and_then(|op| op.key());
                    failure.key.is_none() || key == failure.key
                })
                .map(|o| o.invoke),
        );
    }
    positions.sort_unstable();
    positions.dedup();
    // Both in invocation order: one merge pass.
    let mut wanted = positions.iter().peekable();
    let mut ops: Vec<KeyOp> = operations
        .iter()
        .filter(|operation| {
            while wanted.next_if(|&&pos| pos < operation.invoke).is_some() {}
            wanted.next_if(|&&pos| pos == operation.invoke).is_some()
        })
        .filter_map(|operation| {
            let pos = operation.invoke;
            let invoke = history.ops.get(pos)?;
            operation.process.is_client().then_some(KeyOp {
                index: invoke.index,
                process: operation.process,
                invoke: pos,
                completion: operation.completion,
                outcome: operation.outcome,
                order: None,
                partial: None,
            })
        })
        .collect();
    // Per history position, 1 + the slot in `ops` of the op invoked there (0: none).
    let mut slot_at = vec![0u32; history.len()];
    for (s, op) in ops.iter().enumerate() {
        if let Some(at) = slot_at.get_mut(op.invoke) {
            *at = u32::try_from(s + 1).unwrap_or(0);
        }
    }
    let slot = |index: u64| {
        let at = *slot_at.get(lookup.position(index)?)?;
        (at as usize).checked_sub(1)
    };
    let orders: Vec<(usize, usize)> = failure
        .prefix
        .iter()
        .enumerate()
        .filter_map(|(i, &index)| Some((slot(index)?, i + 1)))
        .collect();
    let partials: Vec<(usize, usize)> = failure
        .partials
        .iter()
        .filter_map(|&(index, len)| Some((slot(index)?, len)))
        .collect();
    for (s, order) in orders {
        ops[s].order = Some(order);
    }
    for (s, len) in partials {
        ops[s].partial = Some(len);
    }
    ops
}

/// Which of the key's ops are drawn.
struct Window {
    /// Positions in the key's ops, ascending.
    drawn: Vec<usize>,
    /// When not all are drawn: what was.
    bounded: Option<Bounds>,
}

/// What a bounded window holds.
struct Bounds {
    /// Ops from the end of the prefix.
    tail: usize,
    /// The op that last changed the state, drawn besides the tail.
    setter: Option<usize>,
    /// Ops concurrent with the failing op, drawn or not.
    concurrent: usize,
}

impl Window {
    /// All ops of a small key; else the prefix's last [`PREFIX_TAIL`] ops, the op that
    /// set the state the prefix leaves (`setter`), the op that could not be placed and
    /// the [`MAX_CONCURRENT`] ops concurrent with it invoked nearest to it.
    fn select(
        ops: &[KeyOp],
        prefix_len: usize,
        unplaced: Option<usize>,
        setter: Option<usize>,
    ) -> Window {
        if ops.len() <= MAX_FULL {
            return Window {
                drawn: (0..ops.len()).collect(),
                bounded: None,
            };
        }
        let tail_from = prefix_len.saturating_sub(PREFIX_TAIL);
        let mut drawn: BTreeSet<usize> = (0..ops.len())
            .filter(|&i| ops[i].order.is_some_and(|order| order > tail_from))
            .collect();
        let setter = setter.filter(|s| drawn.insert(*s));
        let mut concurrent_total = 0;
        if let Some(u) = unplaced {
            drawn.insert(u);
            let failing = ops[u];
            let mut concurrent: Vec<usize> = (0..ops.len())
                .filter(|&i| i != u && ops[i].concurrent_with(&failing))
                .collect();
            concurrent_total = concurrent.len();
            concurrent.sort_by_key(|&i| ops[i].invoke.abs_diff(failing.invoke));
            drawn.extend(concurrent.into_iter().take(MAX_CONCURRENT));
        }
        Window {
            drawn: drawn.into_iter().collect(),
            bounded: Some(Bounds {
                tail: prefix_len - tail_from,
                setter,
                concurrent: concurrent_total,
            }),
        }
    }

    /// What was drawn and what left out, when bounded.
    fn note(&self, history: &History, ops: &[KeyOp], model: &str) -> Option<String> {
        let bounds = self.bounded.as_ref()?;
        let mut note = format!(
            "Showing {} of the {} ops on this key: the last {} of the linearizable prefix, ",
            self.drawn.len(),
            ops.len(),
            bounds.tail
        );
        if let Some(setter) = bounds.setter.and_then(|s| ops.get(s)) {
            let (label, _) = labels(history, setter, model);
            note += &format!("{label} (the last op of the prefix that changed the state), ");
        }
        note += "the op that could not be placed";
        note += &match bounds.concurrent {
            n if n > MAX_CONCURRENT => {
                format!(" and the {MAX_CONCURRENT} nearest of the {n} ops concurrent with it")
            }
            0 => " (no op was concurrent with it)".to_string(),
            1 => " and the one op concurrent with it".to_string(),
            n => format!(" and the {n} ops concurrent with it"),
        };
        Some(note + &format!("; {} ops left out.", ops.len() - self.drawn.len()))
    }
}

/// The horizontal layout: one x per event (invocation or return of a drawn op), in
/// history order.
pub(crate) struct Axis {
    /// History positions of the events, ascending.
    events: Vec<usize>,
    xs: Vec<f64>,
    /// Where ops open to the end stop.
    pub(crate) end: f64,
    /// Compressed gaps: the middle x and the elapsed nanoseconds.
    breaks: Vec<(f64, u64)>,
    /// Whether the history has timestamps at all (else the axis is history order only).
    timed: bool,
}

impl Axis {
    /// `room[g]`: the least width of the gap after event `g` (the last one: the tail).
    pub(crate) fn new(history: &History, events: Vec<usize>, room: &[f64]) -> Axis {
        let time = |pos: usize| history.ops.get(pos).map_or(0, |op| op.time);
        let deltas: Vec<u64> = events
            .windows(2)
            .map(|pair| time(pair[1]).saturating_sub(time(pair[0])))
            .collect();
        let mut positive: Vec<u64> = deltas.iter().copied().filter(|&d| d > 0).collect();
        positive.sort_unstable();
        let median = positive.get(positive.len() / 2).copied().unwrap_or(0);
        let room_at = |g: usize| room.get(g).copied().unwrap_or(0.0);
        let mut xs = Vec::with_capacity(events.len());
        let mut breaks = Vec::new();
        let mut x = LEFT + 8.0;
        for (g, _) in events.iter().enumerate() {
            xs.push(x);
            let Some(&delta) = deltas.get(g) else { break };
            let medians = if median == 0 {
                0.0
            } else {
                delta as f64 / median as f64
            };
            let gap = (MIN_GAP + GAP_SCALE * medians.min(GAP_CAP)).max(room_at(g));
            if medians > GAP_CAP {
                breaks.push((x + gap / 2.0, delta));
            }
            x += gap;
        }
        let end = x + TAIL.max(room_at(events.len().saturating_sub(1)));
        Axis {
            events,
            xs,
            end,
            breaks,
            timed: median > 0,
        }
    }

    fn rank(&self, pos: usize) -> usize {
        self.events.partition_point(|&e| e < pos)
    }

    pub(crate) fn x(&self, pos: usize) -> f64 {
        self.xs.get(self.rank(pos)).copied().unwrap_or(self.end)
    }

    /// The x just after the gap following event `g`.
    fn next_x(&self, g: usize) -> f64 {
        self.xs.get(g + 1).copied().unwrap_or(self.end)
    }
}

/// One drawn op.
struct OpBox {
    op: KeyOp,
    row: usize,
    x1: f64,
    x2: f64,
    unplaced: bool,
    short: String,
    long: String,
}

impl OpBox {
    fn class(&self) -> String {
        let mut class = String::from("op-link lf-op");
        if self.op.order.is_some() {
            class += " lf-prefix";
        }
        if self.unplaced {
            class += " lf-unplaced";
        }
        if self.op.ret().is_none() {
            class += " lf-open";
        }
        class
    }
}

/// The drawing of a linearization failure the search found, from the `linearizable`
/// checker's report (as in `results.json`), or `None` when the report shows no failure.
/// A failure the zone check found is drawn by [`crate::zones::draw_report`].
pub fn draw(history: &history::History, report: &serde_json::Value) -> Option<maud::Markup> {
    let failure = Failure::parse(report)?;
    let ops = key_ops(history, &failure);
    let prefix_len = failure.prefix.len();
    let unplaced = ops.iter().position(|op| op.index == failure.unplaced);
    // The last op of the prefix that may have changed the state.
    let setter = (0..ops.len())
        .filter(|&i| changes_state(history, &ops[i]))
        .filter_map(|i| Some((ops[i].order?, i)))
        .max()
        .map(|(_, i)| i);
    let window = Window::select(&ops, prefix_len, unplaced, setter);
    let last_of_prefix = ops.iter().find(|op| op.order == Some(prefix_len));
    let caption = caption(
        history,
        &failure,
        unplaced.map(|u| ops[u]),
        last_of_prefix.copied(),
        setter.map(|s| ops[s]),
    );
    let note = window.note(history, &ops, &failure.model);
    let drawing = (!window.drawn.is_empty()).then(|| {
        let drawn: Vec<KeyOp> = window.drawn.iter().map(|&i| ops[i]).collect();
        let scene = layout(history, &failure, &drawn);
        render(history, &scene, prefix_len)
    });
    Some(html! {
        div class="linear-failure-figure" {
            p class="linear-caption" {
                strong { "Not linearizable" }
                @if let Some(key) = &failure.key { " (key " code { (key) } ")" }
                ": " (caption)
            }
            @if let Some(drawing) = drawing {
                div style="overflow-x:auto" { (drawing) }
                p class="linear-legend" {
                    "Blue: the longest linearizable prefix, numbered in linearization order; \
                     the line joins their linearization points. Red: the op that could not be \
                     placed next. Grey: other ops on the key. Dashed: indeterminate ops, which \
                     may take effect any time after their invocation. Each box links to the \
                     timeline."
                }
            } @else {
                p { "None of the failing key's ops were found in the history." }
            }
            @if let Some(note) = note { p class="linear-window" { (note) } }
        }
    })
}

/// Whether an op may change the model's state: reads and failed ops do not.
fn changes_state(history: &History, op: &KeyOp) -> bool {
    op.outcome != Outcome::Fail
        && history
            .ops
            .get(op.invoke)
            .is_some_and(|invoke| !matches!(invoke.f.as_str(), "read" | "get"))
}

/// "read → 2 (process 3, op 40) could not be placed: after w 3 (the linearization so
/// far, 5 ops), the register holds 3." `last`: the prefix's last op; `setter`: its last
/// op that may have changed the state.
fn caption(
    history: &History,
    failure: &Failure,
    unplaced: Option<KeyOp>,
    last: Option<KeyOp>,
    setter: Option<KeyOp>,
) -> String {
    let what = match unplaced {
        Some(op) => {
            let (_, long) = labels(history, &op, &failure.model);
            format!("{long} (process {}, op {})", op.process, op.index)
        }
        None => format!("op {}", failure.unplaced),
    };
    let holds = match failure.state_after() {
        Some("absent") => format!("{} is absent", failure.holder()),
        Some(state) => format!("{} holds {}", failure.holder(), shorten(state, MAX_STATE)),
        None => "the state it leaves does not allow it".to_string(),
    };
    if failure.prefix.is_empty() {
        return format!("{what} could not be placed first: initially, {holds}.");
    }
    let since = |op: &KeyOp| failure.prefix.len().saturating_sub(op.order.unwrap_or(0));
    let after = match (setter, last) {
        (Some(op), _) if since(&op) > 0 => format!(
            "{} and the {} {} after it",
            labels(history, &op, &failure.model).0,
            since(&op),
            if since(&op) == 1 { "read" } else { "reads" }
        ),
        (_, Some(op)) => labels(history, &op, &failure.model).0,
        (_, None) => format!("op {}", failure.prefix.last().copied().unwrap_or_default()),
    };
    let count = failure.prefix.len();
    let ops = if count == 1 { "op" } else { "ops" };
    format!(
        "{what} could not be placed: after {after} (the linearization so far, {count} {ops}), {holds}."
    )
}

/// A value as labels show it, cut short.
fn show(value: &Value, model: &str) -> String {
    let text = match value {
        Value::Null if model == "etcd" => "absent".to_string(),
        Value::Null => "nil".to_string(),
        other => other.to_string(),
    };
    shorten(&text, 48)
}

fn shorten(text: &str, chars: usize) -> String {
    if text.chars().count() <= chars {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(chars.saturating_sub(1)).collect();
    cut.truncate(cut.trim_end().len());
    cut.push('…');
    cut
}

/// The op's short label (`w 3`, `r → 2`) and long one (`write 3`, `read → 2`).
pub(crate) fn labels(history: &History, op: &KeyOp, model: &str) -> (String, String) {
    let Some(invoke) = history.ops.get(op.invoke) else {
        return (format!("op {}", op.index), format!("op {}", op.index));
    };
    let argument = invoke.payload();
    let result = match (op.outcome, op.completion) {
        (Outcome::Ok, Some(c)) => history.ops.get(c).map(|done| done.payload()),
        _ => None,
    };
    let returned = || format!("→ {}", result.map_or("?".to_string(), |r| show(r, model)));
    let f = invoke.f.as_str();
    let (short, body) = match f {
        "write" => ("w", show(argument, model)),
        "read" => ("r", returned()),
        "get" => ("get", returned()),
        "cas" => match argument.as_array().map(Vec::as_slice) {
            Some([old, new]) => ("cas", format!("{}→{}", show(old, model), show(new, model))),
            _ => ("cas", show(argument, model)),
        },
        "txn" => ("txn", show(result.unwrap_or(argument), model)),
        _ => {
            let mut body = if argument.is_null() {
                String::new()
            } else {
                show(argument, model)
            };
            if let Some(result) = result.filter(|r| !r.is_null() && *r != argument) {
                body = format!("{body} → {}", show(result, model))
                    .trim()
                    .to_string();
            }
            (f, body)
        }
    };
    let suffix = match op.outcome {
        Outcome::Ok => "",
        Outcome::Fail => " ✗",
        Outcome::Info => " ?",
    };
    let join = |name: &str| {
        let name = shorten(name, 24);
        match body.is_empty() {
            true => format!("{name}{suffix}"),
            false => format!("{name} {body}{suffix}"),
        }
    };
    (join(short), join(f))
}

/// Nanoseconds as "850 ns", "12.3 µs", "4.5 ms", "1.23 s".
pub(crate) fn duration(ns: u64) -> String {
    let ns_f = ns as f64;
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.1} µs", ns_f / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.1} ms", ns_f / 1e6)
    } else {
        format!("{:.2} s", ns_f / 1e9)
    }
}

/// Rounded to a tenth of a pixel, for short attributes.
pub(crate) fn px(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

/// The label cut to fit `width` pixels, or `None` when nothing fits.
pub(crate) fn fit(label: &str, width: f64) -> Option<String> {
    let room = ((width - 8.0) / CHAR_W).floor();
    (room >= 2.0).then(|| shorten(label, room as usize))
}

/// A linearization point: where an op of the prefix (or, last, the op that could not be
/// placed) is drawn taking effect.
#[derive(Debug, Clone, Copy)]
struct Point {
    x: f64,
    y: f64,
    /// `Op.index` of the op's invocation.
    index: u64,
    /// 1-based position in the prefix; `None` for the op that could not be placed.
    order: Option<usize>,
}

/// Everything placed, before rendering.
struct Scene {
    /// Per row, its process and whether it is that process's first row (a process
    /// whose op stays open to the end gets another row for its later ops).
    rows: Vec<(Process, bool)>,
    boxes: Vec<OpBox>,
    /// In linearization order; the op that could not be placed last, if drawn.
    points: Vec<Point>,
    axis: Axis,
}

pub(crate) fn row_top(row: usize) -> f64 {
    TOP + row as f64 * ROW_H
}

/// One row per process, and more for a process whose ops overlap (after an op that stays
/// open to the end); the row of each op by invocation index.
pub(crate) fn rows(drawn: &[KeyOp]) -> (Vec<(Process, bool)>, HashMap<u64, usize>) {
    // Per process, where each of its lanes is taken up to (`None`: to the end).
    let mut lanes: BTreeMap<Process, Vec<Option<usize>>> = BTreeMap::new();
    let mut lane_of = Vec::with_capacity(drawn.len());
    for op in drawn {
        let ends = lanes.entry(op.process).or_default();
        let free = ends
            .iter()
            .position(|end| end.is_some_and(|end| end < op.invoke));
        let lane = free.unwrap_or(ends.len());
        match ends.get_mut(lane) {
            Some(end) => *end = op.ret(),
            None => ends.push(op.ret()),
        }
        lane_of.push(lane);
    }
    let mut rows = Vec::new();
    let mut first_row = HashMap::new();
    for (process, ends) in &lanes {
        first_row.insert(*process, rows.len());
        rows.extend((0..ends.len()).map(|lane| (*process, lane == 0)));
    }
    let row_of = drawn
        .iter()
        .zip(lane_of)
        .map(|(op, lane)| {
            (
                op.index,
                first_row.get(&op.process).copied().unwrap_or(0) + lane,
            )
        })
        .collect();
    (rows, row_of)
}

/// Places the drawn ops (in invocation order).
fn layout(history: &History, failure: &Failure, drawn: &[KeyOp]) -> Scene {
    let (rows, row_of) = rows(drawn);
    let mut events: Vec<usize> = drawn
        .iter()
        .flat_map(|op| std::iter::once(op.invoke).chain(op.ret()))
        .collect();
    events.sort_unstable();
    events.dedup();
    let rank = |pos: usize| events.partition_point(|&e| e < pos);

    // Linearization points: the prefix's drawn ops in order, then the op that could not
    // be placed; each in the gap after the latest invocation so far. Every earlier op of
    // a linearization was invoked before this op returned (linearizations respect real
    // time), so the point falls inside the op's box.
    let mut sequence: Vec<&KeyOp> = drawn.iter().filter(|op| op.order.is_some()).collect();
    sequence.sort_by_key(|op| op.order);
    sequence.extend(drawn.iter().find(|op| op.index == failure.unplaced));
    let mut slots: Vec<usize> = Vec::with_capacity(sequence.len());
    for op in &sequence {
        let previous = slots.last().copied().unwrap_or(0);
        slots.push(rank(op.invoke).max(previous));
    }
    let mut per_gap = vec![0usize; events.len()];
    for &slot in &slots {
        if let Some(count) = per_gap.get_mut(slot) {
            *count += 1;
        }
    }
    let mut room: Vec<f64> = per_gap.iter().map(|&n| (n + 1) as f64 * POINT_W).collect();
    // A box spanning a single gap gets room for its label.
    let labelled: Vec<(String, String)> = drawn
        .iter()
        .map(|op| labels(history, op, &failure.model))
        .collect();
    for (op, (short, _)) in drawn.iter().zip(&labelled) {
        let g = rank(op.invoke);
        if op.ret().is_some_and(|r| rank(r) == g + 1) {
            if let Some(room) = room.get_mut(g) {
                let wanted = short.chars().count().min(MAX_LABEL) as f64 * CHAR_W + 12.0;
                *room = room.max(wanted);
            }
        }
    }
    let axis = Axis::new(history, events, &room);
    let mut seen_in_gap = vec![0usize; per_gap.len()];
    let points = sequence
        .iter()
        .zip(&slots)
        .map(|(op, &slot)| {
            let start = axis.xs.get(slot).copied().unwrap_or(axis.end);
            let count = per_gap.get(slot).copied().unwrap_or(1);
            let seen = match seen_in_gap.get_mut(slot) {
                Some(seen) => {
                    *seen += 1;
                    *seen
                }
                None => 1,
            };
            let x = start + (axis.next_x(slot) - start) * seen as f64 / (count + 1) as f64;
            Point {
                x: px(x),
                y: row_top(row_of.get(&op.index).copied().unwrap_or(0)) + BOX_TOP,
                index: op.index,
                order: op.order,
            }
        })
        .collect();
    let boxes = drawn
        .iter()
        .zip(labelled)
        .map(|(op, (short, long))| OpBox {
            op: *op,
            row: row_of.get(&op.index).copied().unwrap_or(0),
            x1: px(axis.x(op.invoke) + 1.0),
            x2: px(op.ret().map_or(axis.end, |r| axis.x(r)) - 1.0),
            unplaced: op.index == failure.unplaced,
            short,
            long,
        })
        .collect();
    Scene {
        rows,
        boxes,
        points,
        axis,
    }
}

/// The SVG of a scene.
fn render(history: &History, scene: &Scene, prefix_len: usize) -> Markup {
    let axis = &scene.axis;
    let (placed, stuck) = match scene.points.split_last() {
        Some((last, rest)) if last.order.is_none() => (rest, Some(last)),
        _ => (scene.points.as_slice(), None),
    };
    let axis_y = row_top(scene.rows.len()) + 6.0;
    let width = px(axis.end + RIGHT);
    let height = px(axis_y + AXIS_H);
    let line: Vec<String> = placed.iter().map(|p| format!("{},{}", p.x, p.y)).collect();
    let label_y = |row: usize| px(row_top(row) + BOX_TOP + BOX_H / 2.0 + 4.0);
    html! {
        svg class="linear-failure" xmlns="http://www.w3.org/2000/svg" width=(width)
            height=(height) viewBox={"0 0 " (width) " " (height)} {
            style { (crate::assets::LINEAR_CSS) }
            @for (row, (process, first)) in scene.rows.iter().enumerate() {
                @if *first {
                    text class="lf-proc" x=(LEFT - 6.0) y=(label_y(row)) text-anchor="end" {
                        "p" (process)
                    }
                }
            }
            @for b in &scene.boxes {
                a class=(b.class()) href={"timeline.html#i" (b.op.index)} {
                    title { (tooltip(history, b, prefix_len)) }
                    rect x=(b.x1) y=(px(row_top(b.row) + BOX_TOP)) width=(px((b.x2 - b.x1).max(2.0)))
                        height=(BOX_H) rx="3" {}
                    @if let Some(label) = fit(&b.short, b.x2 - b.x1) {
                        text x=(px(b.x1 + 4.0)) y=(label_y(b.row)) { (label) }
                    }
                }
            }
            @if line.len() > 1 { polyline class="lf-line" points=(line.join(" ")) {} }
            @for p in placed {
                circle class="lf-point" cx=(p.x) cy=(p.y) r="3" {
                    title { "linearized " (p.order.unwrap_or_default()) ": op " (p.index) }
                }
                text class="lf-order" x=(p.x) y=(px(p.y - 4.0)) { (p.order.unwrap_or_default()) }
            }
            @if let Some(s) = stuck {
                @if let Some(last) = placed.last() {
                    line class="lf-stuck" x1=(last.x) y1=(last.y) x2=(s.x) y2=(s.y)
                        stroke-dasharray="3 3" {}
                }
                path class="lf-stuck" d={"M" (px(s.x - 4.0)) "," (px(s.y - 4.0)) "l8,8m0,-8l-8,8"} {}
            }
            (axis_markup(history, axis, axis_y))
        }
    }
}

/// The time axis under a drawing, at `axis_y`: a tick per event, compressed gaps marked
/// with their elapsed time, the first and last event's times.
pub(crate) fn axis_markup(history: &History, axis: &Axis, axis_y: f64) -> Markup {
    let time = |pos: usize| history.ops.get(pos).map_or(0, |op| op.time);
    html! {
        line class="lf-axis" x1=(LEFT) y1=(axis_y) x2=(px(axis.end)) y2=(axis_y) {}
        @for x in &axis.xs {
            line class="lf-axis" x1=(x) y1=(axis_y) x2=(x) y2=(axis_y + 3.0) {}
        }
        @for (x, ns) in &axis.breaks {
            path class="lf-axis" d={"M" (px(x - 5.0)) "," (axis_y + 5.0) "l4,-10m2,10l4,-10"} {}
            text class="lf-axis-text" x=(px(*x)) y=(axis_y + 16.0) text-anchor="middle" {
                "+" (duration(*ns))
            }
        }
        @match (axis.timed, axis.events.first(), axis.events.last()) {
            (true, Some(&first), Some(&last)) => {
                text class="lf-axis-text" x=(LEFT) y=(axis_y + 28.0) {
                    "t = " (duration(time(first)))
                }
                text class="lf-axis-text" x=(px(axis.x(last))) y=(axis_y + 28.0)
                    text-anchor="end" { "t = " (duration(time(last))) }
            }
            _ => {
                text class="lf-axis-text" x=(LEFT) y=(axis_y + 28.0) {
                    "history order (no timestamps)"
                }
            }
        }
    }
}

/// The hover text of a box.
fn tooltip(history: &History, b: &OpBox, prefix_len: usize) -> String {
    let at = |pos: usize| {
        history.ops.get(pos).map_or(String::new(), |op| {
            format!("op {} (t = {})", op.index, duration(op.time))
        })
    };
    let mut text = format!(
        "process {}: {}\ninvoked at {}",
        b.op.process,
        b.long,
        at(b.op.invoke)
    );
    match (b.op.outcome, b.op.completion) {
        (Outcome::Ok, Some(c)) => text += &format!("\nok at {}", at(c)),
        (Outcome::Fail, Some(c)) => text += &format!("\nfailed at {}", at(c)),
        (Outcome::Info, Some(c)) => {
            text += &format!(
                "\nindeterminate at {}: may take effect any time after its invocation",
                at(c)
            )
        }
        (_, None) => text += "\nnever completed: may take effect any time after its invocation",
    }
    if let Some(order) = b.op.order {
        text += &format!("\nlinearized {order} of {prefix_len} in the longest linearizable prefix");
    }
    if b.unplaced {
        text += "\ncould not be placed after the longest linearizable prefix";
    }
    if let Some(len) = b.op.partial {
        text += &match len {
            0 => "\nnever linearized in any partial linearization".to_string(),
            n => format!("\nlongest partial linearization containing it: {n} ops"),
        };
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use checkers::linear::{check_linearizable, LinearOptions, ModelKind};
    use history::{Op, OpType};
    use serde_json::json;

    /// `harness check` on a run folder holding this history: p0 writes 1, p1 writes 2,
    /// then p2 reads 1.
    const TINY_HISTORY: &str = r#"{"index":0,"time":1000,"process":0,"type":"invoke","f":"write","value":1}
{"index":1,"time":2000,"process":0,"type":"ok","f":"write","value":1}
{"index":2,"time":3000,"process":1,"type":"invoke","f":"write","value":2}
{"index":3,"time":4000,"process":1,"type":"ok","f":"write","value":2}
{"index":4,"time":5000,"process":2,"type":"invoke","f":"read","value":null}
{"index":5,"time":6000,"process":2,"type":"ok","f":"read","value":1}
"#;

    /// Its `results.checkers.linearizable.report`, as `harness check` wrote it.
    const TINY_REPORT: &str = r#"{
        "failure": {
          "key": null,
          "longest_prefix": [0, 2],
          "partial_linearizations": [
            {"linearization": [0, 2], "op": 0},
            {"linearization": [0, 2], "op": 2},
            {"linearization": [], "op": 4}
          ],
          "unplaced": 4,
          "unplaced_description": "process 2 read -> 1 at ./history.jsonl:5: cannot be linearized after the longest linearizable prefix (2 ops; state then: 2)"
        },
        "model": "register",
        "operations": 3,
        "partitions": 1,
        "partitions_checked": 1,
        "reason": null,
        "verdict": "invalid"
      }"#;

    fn tiny() -> (History, Value) {
        let history = history::jsonl::parse_jsonl("./history.jsonl", TINY_HISTORY).unwrap();
        (history, serde_json::from_str(TINY_REPORT).unwrap())
    }

    /// A client op on `key` (or unkeyed when `None`).
    fn op(index: u64, process: u64, kind: OpType, f: &str, key: Option<&str>, value: Value) -> Op {
        let value = match key {
            Some(key) => json!({"key": key, "value": value}),
            None => value,
        };
        let mut op = Op::new(index, Process::Client(process), kind, f, value);
        op.time = index * 1_000;
        op
    }

    /// The report of the `linearizable` checker's search on `history`, as stored in
    /// results.json (zones.rs draws the zone check's failures).
    fn check(history: &History, model: ModelKind) -> Value {
        let mut options = LinearOptions::new(model);
        options.threads = 1;
        options.algorithm = checkers::linear::AlgorithmChoice::Wgl;
        let report = check_linearizable(history, &options).unwrap();
        serde_json::to_value(&report).unwrap()
    }

    /// The text of every `<text class="lf-order">`, in document order.
    fn order_labels(html: &str) -> Vec<usize> {
        html.split("<text class=\"lf-order\"")
            .skip(1)
            .filter_map(|rest| rest.split_once('>')?.1.split_once('<')?.0.parse().ok())
            .collect()
    }

    #[test]
    fn names_the_unplaceable_read_and_the_prefix_order() {
        let (history, report) = tiny();
        let html = draw(&history, &report).unwrap().into_string();
        assert!(
            html.contains(
                "read → 1 (process 2, op 4) could not be placed: after w 2 (the linearization \
                 so far, 2 ops), the register holds 2."
            ),
            "{html}"
        );
        assert!(html.contains("<svg class=\"linear-failure\""), "{html}");
        assert!(
            html.contains("<a class=\"op-link lf-op lf-unplaced\" href=\"timeline.html#i4\">"),
            "{html}"
        );
        assert!(html.contains("<a class=\"op-link lf-op lf-prefix\" href=\"timeline.html#i0\">"));
        assert!(html.contains("<a class=\"op-link lf-op lf-prefix\" href=\"timeline.html#i2\">"));
        assert!(
            html.contains(">w 1</text>") && html.contains(">r → 1</text>"),
            "{html}"
        );
        assert!(html.contains("linearized 1 of 2 in the longest linearizable prefix"));
        assert_eq!(order_labels(&html), vec![1, 2]);
        // The linearization line runs from write 1 (row p0) to write 2 (row p1).
        let (_, line) = html
            .split_once("<polyline class=\"lf-line\" points=\"")
            .unwrap();
        let points: Vec<(f64, f64)> = line
            .split('"')
            .next()
            .unwrap()
            .split(' ')
            .map(|p| {
                let (x, y) = p.split_once(',').unwrap();
                (x.parse().unwrap(), y.parse().unwrap())
            })
            .collect();
        assert_eq!(points.len(), 2);
        assert!(
            points[0].0 < points[1].0 && points[0].1 < points[1].1,
            "{points:?}"
        );
        assert!(html.contains("the op that could not be placed"));
        assert!(!html.contains("left out"), "small keys are drawn whole");
    }

    #[test]
    fn the_checker_result_and_the_checker_itself_agree() {
        // The same history checked here gives the same drawing as the stored report, and
        // the checker's whole result (verdict and report) is accepted as well.
        let (history, stored) = tiny();
        let fresh = check(&history, ModelKind::Register);
        let stored_html = draw(&history, &stored).unwrap().into_string();
        assert_eq!(draw(&history, &fresh).unwrap().into_string(), stored_html);
        let result = json!({"verdict": "invalid", "report": stored});
        assert_eq!(draw(&history, &result).unwrap().into_string(), stored_html);
    }

    #[test]
    fn no_failure_no_drawing() {
        let (history, _) = tiny();
        let valid = History::from_ops(vec![
            op(0, 0, OpType::Invoke, "write", None, json!(1)),
            op(1, 0, OpType::Ok, "write", None, json!(1)),
            op(2, 1, OpType::Invoke, "read", None, json!(null)),
            op(3, 1, OpType::Ok, "read", None, json!(1)),
        ]);
        let report = check(&valid, ModelKind::Register);
        assert_eq!(report["verdict"], "valid");
        assert!(draw(&valid, &report).is_none());
        assert!(draw(&valid, &json!({"verdict": "valid", "report": report})).is_none());
        assert!(draw(&history, &json!({})).is_none());
        assert!(draw(&history, &json!(null)).is_none());
        let unknown = json!({"verdict": "unknown", "reason": "time limit", "failure": null});
        assert!(draw(&history, &unknown).is_none());
    }

    #[test]
    fn hostile_strings_are_escaped() {
        let key = "</svg><script>alert(1)</script>";
        let evil = json!("<img src=x onerror=alert(2)>");
        let history = History::from_ops(vec![
            op(0, 0, OpType::Invoke, "write", Some(key), evil.clone()),
            op(1, 0, OpType::Ok, "write", Some(key), evil.clone()),
            op(2, 1, OpType::Invoke, "read", Some(key), json!(null)),
            op(3, 1, OpType::Ok, "read", Some(key), json!("\"><b>&amp;")),
        ]);
        let report = check(&history, ModelKind::Register);
        let html = draw(&history, &report).unwrap().into_string();
        for raw in ["<script", "<img", "<b>", "&amp;\""] {
            assert!(!html.contains(raw), "{raw} unescaped in {html}");
        }
        assert!(
            html.contains("&lt;/svg&gt;&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
        assert!(
            html.contains("&lt;img src=x onerror=alert(2)&gt;"),
            "{html}"
        );
        assert!(html.contains("(key <code>"), "{html}");
        // The same text as a report field, not a history value.
        let mut forged = report.clone();
        forged["failure"]["unplaced_description"] = json!("<script>x</script> (state then: <i>)");
        let html = draw(&history, &forged).unwrap().into_string();
        assert!(
            !html.contains("<script>x") && !html.contains("<i>"),
            "{html}"
        );
        assert!(html.contains("holds &lt;i&gt;."), "{html}");
    }

    /// 300 sequential writes on key "k" by 5 processes and ops on another key, then a
    /// stale read of 5 by process 9 while 60 processes read `concurrent_read`.
    fn large(concurrent_read: u64) -> (History, u64) {
        let mut ops = Vec::new();
        let mut push = |p, kind, f: &str, key, value| {
            let index = ops.len() as u64;
            ops.push(op(index, p, kind, f, Some(key), value));
            index
        };
        for v in 1..=300u64 {
            push(v % 5, OpType::Invoke, "write", "k", json!(v));
            push(v % 5, OpType::Ok, "write", "k", json!(v));
            push(7, OpType::Invoke, "write", "other", json!(v));
            push(7, OpType::Ok, "write", "other", json!(v));
        }
        for p in 100..160 {
            push(p, OpType::Invoke, "read", "k", json!(null));
        }
        let stale = push(9, OpType::Invoke, "read", "k", json!(null));
        push(9, OpType::Ok, "read", "k", json!(5));
        for p in 100..160 {
            push(p, OpType::Ok, "read", "k", json!(concurrent_read));
        }
        (History::from_ops(ops), stale)
    }

    #[test]
    fn a_large_key_is_drawn_around_the_failure() {
        // The concurrent reads of a value never written cannot be linearized either: the
        // prefix is the 300 writes, and the stale read, returning first, is stuck.
        let (history, stale) = large(999);
        let report = check(&history, ModelKind::Register);
        assert_eq!(report["failure"]["unplaced"], json!(stale));
        assert_eq!(
            report["failure"]["longest_prefix"]
                .as_array()
                .unwrap()
                .len(),
            300
        );
        let html = draw(&history, &report).unwrap().into_string();
        assert_eq!(html.matches("<a class=\"op-link").count(), 71);
        assert!(
            html.contains(
                "Showing 71 of the 361 ops on this key: the last 30 of the linearizable \
                 prefix, the op that could not be placed and the 40 nearest of the 60 ops \
                 concurrent with it; 290 ops left out."
            ),
            "{html}"
        );
        assert!(html.contains(&format!(
            "<a class=\"op-link lf-op lf-unplaced\" href=\"timeline.html#i{stale}\">"
        )));
        assert!(html.contains(
            "read → 5 (process 9, op 1260) could not be placed: after w 300 (the \
             linearization so far, 300 ops), the register holds 300."
        ));
        assert!(html.contains("(key <code>k</code>)"));
        assert!(html.contains(">w 271</text>") && !html.contains(">w 270</text>"));
        assert_eq!(order_labels(&html), (271..=300).collect::<Vec<_>>());
        // The nearest concurrent reads are drawn (p120 to p159), the farthest are not.
        assert!(html.contains(">p120</text>") && html.contains(">p159</text>"));
        assert!(!html.contains(">p119</text>"));
        assert!(!html.contains("\"other\""));
    }

    #[test]
    fn the_write_that_set_the_state_is_drawn_and_named() {
        // The 60 concurrent reads of 300 are linearized after the last write.
        let (history, _) = large(300);
        let report = check(&history, ModelKind::Register);
        assert_eq!(
            report["failure"]["longest_prefix"]
                .as_array()
                .unwrap()
                .len(),
            360
        );
        let html = draw(&history, &report).unwrap().into_string();
        assert!(
            html.contains(
                "could not be placed: after w 300 and the 60 reads after it (the \
                 linearization so far, 360 ops), the register holds 300."
            ),
            "{html}"
        );
        assert!(html.contains(
            "the last 30 of the linearizable prefix, w 300 (the last op of the prefix that \
             changed the state), the op that could not be placed and the 40 nearest of the \
             60 ops concurrent with it;"
        ));
        assert!(html.contains(">w 300</text>") && !html.contains(">w 299</text>"));
        let orders = order_labels(&html);
        assert_eq!(orders.first(), Some(&300));
        assert_eq!(orders.last(), Some(&360));
        assert!(orders.windows(2).all(|w| w[0] < w[1]), "{orders:?}");
    }

    /// A deterministic random history of cas-register ops by 5 processes, some reads
    /// stale; some `info`.
    fn random_history(seed: u64) -> History {
        let mut state = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let mut rand = move |n: u64| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) % n
        };
        let mut ops = Vec::new();
        let mut open: Vec<Option<(String, Value)>> = vec![None; 5];
        let mut register = 0u64;
        for _ in 0..120 {
            let p = rand(5) as usize;
            let index = ops.len() as u64;
            match open[p].take() {
                None => {
                    let (f, value) = match rand(3) {
                        0 => ("write", json!(rand(4))),
                        1 => ("read", json!(null)),
                        _ => ("cas", json!([rand(4), rand(4)])),
                    };
                    ops.push(op(index, p as u64, OpType::Invoke, f, None, value.clone()));
                    open[p] = Some((f.to_string(), value));
                }
                Some((f, value)) => {
                    let (kind, value) = match f.as_str() {
                        "write" => {
                            register = value.as_u64().unwrap_or(0);
                            (OpType::Ok, value)
                        }
                        "read" if rand(4) == 0 => (OpType::Ok, json!(rand(4))),
                        "read" => (OpType::Ok, json!(register)),
                        _ if rand(6) == 0 => (OpType::Info, value),
                        _ if value[0] == json!(register) => {
                            register = value[1].as_u64().unwrap_or(0);
                            (OpType::Ok, value)
                        }
                        _ => (OpType::Fail, value),
                    };
                    ops.push(op(index, p as u64, kind, &f, None, value));
                }
            }
        }
        History::from_ops(ops)
    }

    #[test]
    fn linearization_points_fall_inside_their_boxes_in_order() {
        let mut failures = 0;
        for seed in 0..60 {
            let history = random_history(seed);
            let report = check(&history, ModelKind::CasRegister);
            let Some(failure) = Failure::parse(&report) else {
                continue;
            };
            failures += 1;
            let ops = key_ops(&history, &failure);
            let unplaced = ops.iter().position(|op| op.index == failure.unplaced);
            assert!(unplaced.is_some(), "seed {seed}");
            let window = Window::select(&ops, failure.prefix.len(), unplaced, None);
            let drawn: Vec<KeyOp> = window.drawn.iter().map(|&i| ops[i]).collect();
            let scene = layout(&history, &failure, &drawn);
            assert_eq!(scene.points.len(), failure.prefix.len() + 1, "seed {seed}");
            assert_eq!(scene.points.last().unwrap().index, failure.unplaced);
            for pair in scene.points.windows(2) {
                assert!(pair[0].x < pair[1].x, "seed {seed}: {pair:?}");
            }
            for point in &scene.points {
                let b = scene
                    .boxes
                    .iter()
                    .find(|b| b.op.index == point.index)
                    .unwrap();
                assert!(b.x1 < point.x && point.x < b.x2, "seed {seed}: {point:?}");
                assert_eq!(point.y, row_top(b.row) + BOX_TOP);
            }
            // Boxes of one process never overlap.
            for (i, a) in scene.boxes.iter().enumerate() {
                for b in &scene.boxes[i + 1..] {
                    if a.row == b.row {
                        assert!(a.x2 <= b.x1 || b.x2 <= a.x1, "seed {seed}");
                    }
                }
            }
        }
        assert!(
            failures >= 10,
            "only {failures} random histories were invalid"
        );
    }

    #[test]
    fn labels_and_captions_per_model() {
        let history = History::from_ops(vec![
            op(0, 0, OpType::Invoke, "cas", None, json!([1, 2])),
            op(1, 0, OpType::Fail, "cas", None, json!([1, 2])),
            op(2, 1, OpType::Invoke, "read", None, json!(null)),
            op(3, 1, OpType::Ok, "read", None, json!(null)),
            op(4, 2, OpType::Invoke, "write", None, json!("x")),
        ]);
        let key_op = |invoke: usize, completion, outcome| KeyOp {
            index: invoke as u64,
            process: Process::Client(0),
            invoke,
            completion,
            outcome,
            order: None,
            partial: None,
        };
        let cas = key_op(0, Some(1), Outcome::Fail);
        let read = key_op(2, Some(3), Outcome::Ok);
        let write = key_op(4, None, Outcome::Info);
        assert_eq!(labels(&history, &cas, "etcd").0, "cas 1→2 ✗");
        assert_eq!(
            labels(&history, &read, "etcd"),
            ("r → absent".into(), "read → absent".into())
        );
        assert_eq!(labels(&history, &read, "register").0, "r → nil");
        assert_eq!(labels(&history, &write, "register").1, "write \"x\" ?");
        let failure = |model: &str, state: &str, prefix: Vec<u64>| Failure {
            model: model.into(),
            key: None,
            prefix,
            unplaced: 2,
            description: format!("... (1 ops; state then: {state})"),
            partials: Vec::new(),
            partials_complete: true,
        };
        assert_eq!(
            caption(
                &history,
                &failure("etcd", "absent", vec![0]),
                Some(read),
                Some(cas),
                None
            ),
            "read → absent (process 0, op 2) could not be placed: after cas 1→2 ✗ (the \
             linearization so far, 1 op), the register is absent."
        );
        assert_eq!(
            caption(
                &history,
                &failure("kv", "\"ab\"", vec![]),
                Some(read),
                None,
                None
            ),
            "read → absent (process 0, op 2) could not be placed first: initially, the key \
             holds \"ab\"."
                .replace("absent", "nil")
        );
        assert_eq!(duration(1_500), "1.5 µs");
        assert_eq!(duration(2_340_000_000), "2.34 s");
        assert_eq!(fit("r → 12345", 40.0).as_deref(), Some("r →…"));
        assert_eq!(fit("w 1", 10.0), None);
    }
}
