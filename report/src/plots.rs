//! SVG plots of a run: latency over time (one plot per client `f`, log scale, points
//! coloured by outcome) and throughput over time (ops/s per `f` per time bucket, lines).
//! Both show the fault periods: translucent bands over the plot, and one labelled lane
//! per kind of fault above it, in the nemesis package's colour.
//!
//! Big histories are thinned deterministically ([`downsample`]): at most about
//! [`MAX_POINTS`] points are drawn, every `fail`/`info` kept, `ok` points evenly spread.
//! Points are drawn as one `<path>` per series (a zero-length segment with round caps
//! per point), which keeps the markup at a few bytes per point.

use std::collections::HashMap;
use std::fmt::Write as _;

use history::{History, OpType, Operation, Outcome, Process};
use maud::{html, Markup};
use nemesis::FaultValue;
use nemesis::PackageKind;
use serde_json::Value;

/// Points drawn over all latency plots together, about.
pub const MAX_POINTS: usize = 20_000;
/// `fail`/`info` points are all kept up to this many; beyond, they are thinned too.
pub const MAX_NON_OK_POINTS: usize = 60_000;

/// Jepsen's colours for outcomes.
pub fn outcome_colour(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Ok => "#81BFFC",
        Outcome::Info => "#FFA400",
        Outcome::Fail => "#FF1E90",
    }
}

pub fn outcome_name(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Ok => "ok",
        Outcome::Info => "info",
        Outcome::Fail => "fail",
    }
}

/// Line colours of the throughput plot, one per `f` in turn.
const F_COLOURS: [&str; 6] = [
    "#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#17becf", "#7f7f7f",
];
const WAIT_COLOUR: &str = "#BBBBBB";

/// A span of time in which a fault was in place, or an instantaneous fault (the span of
/// its operation), in nanoseconds since the test began.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultPeriod {
    /// The lane it is drawn in: the package's label (`partition`, `kill`, `admin`, ...),
    /// `failpoint`, or the `f` of an op of no package (`wait-until`).
    pub lane: String,
    pub colour: &'static str,
    pub start: u64,
    pub end: u64,
    /// An instantaneous fault (admin ops, waits) rather than a period.
    pub instant: bool,
    /// A fault, as opposed to a harness step of no package (`wait-until`), which is
    /// drawn in its lane only.
    pub fault: bool,
    /// `Op::index` of the entry that began it.
    pub index: u64,
    /// What happened, for the tooltip (`start-partition … stop-partition`).
    pub what: String,
}

/// One nemesis operation: an entry and the entry of the same `f` that completed it.
struct NemesisOp<'a> {
    f: &'a str,
    start: u64,
    end: Option<u64>,
    index: u64,
    value: &'a Value,
}

/// Pairs the nemesis's entries as `history::pair` does: an entry completes the
/// outstanding one of its `f`, else opens one. Works on histories that do not pair.
fn nemesis_ops(history: &History) -> Vec<NemesisOp<'_>> {
    let mut ops: Vec<NemesisOp> = Vec::new();
    let mut open: HashMap<&str, usize> = HashMap::new();
    for op in history
        .ops
        .iter()
        .filter(|op| op.process == Process::Nemesis)
    {
        let completes = op.kind != OpType::Invoke && open.contains_key(op.f.as_str());
        if completes {
            if let Some(at) = open.remove(op.f.as_str()) {
                ops[at].end = Some(op.time);
            }
        } else {
            open.insert(op.f.as_str(), ops.len());
            ops.push(NemesisOp {
                f: &op.f,
                start: op.time,
                end: None,
                index: op.index,
                value: &op.value,
            });
        }
    }
    ops
}

/// How a nemesis `f` is drawn.
enum Role {
    /// Begins a period of the lane (keyed: concurrent periods of a lane stay apart).
    Start,
    /// Ends the lane's open period of the same key.
    Stop,
    Instant,
}

/// The lane, colour, key and role of a nemesis operation.
fn classify(op: &NemesisOp) -> (String, &'static str, String, Role) {
    let admin = PackageKind::Admin.info().colour;
    if let Some(kind) = PackageKind::of_f(op.f) {
        let info = kind.info();
        let label = info.label.to_string();
        if info.stop.is_empty() {
            return (label, info.colour, String::new(), Role::Instant);
        }
        let role = if info.start.contains(&op.f) {
            Role::Start
        } else {
            Role::Stop
        };
        return (label, info.colour, info.name.to_string(), role);
    }
    let fault = FaultValue::of(op.value);
    let point = fault.point.as_deref().unwrap_or("");
    match op.f {
        "failpoint" => ("failpoint".into(), admin, point.into(), Role::Start),
        "release-failpoint" => ("failpoint".into(), admin, point.into(), Role::Stop),
        f => {
            let package = fault.package.as_deref();
            match package.and_then(|p| p.parse::<PackageKind>().ok()) {
                Some(kind) => (
                    kind.info().label.into(),
                    kind.info().colour,
                    String::new(),
                    Role::Instant,
                ),
                None => (f.into(), WAIT_COLOUR, String::new(), Role::Instant),
            }
        }
    }
}

/// The fault periods of a history, in order of their start. A period runs from the
/// invocation of a package's start op to the completion of its next stop op (or the end
/// of the history); a start while one is open, or a stop with none open (the final
/// heal), changes nothing. Ops of packages without a stop, and ops of no package, are
/// instantaneous: the span of the op itself.
pub fn fault_periods(history: &History) -> Vec<FaultPeriod> {
    let history_end = history.ops.iter().map(|op| op.time).max().unwrap_or(0);
    let mut periods: Vec<FaultPeriod> = Vec::new();
    let mut open: HashMap<(String, String), usize> = HashMap::new();
    for op in nemesis_ops(history) {
        let (lane, colour, key, role) = classify(&op);
        let end = op.end.unwrap_or(op.start);
        match role {
            Role::Instant => periods.push(FaultPeriod {
                what: op.f.to_string(),
                fault: colour != WAIT_COLOUR,
                lane,
                colour,
                start: op.start,
                end,
                instant: true,
                index: op.index,
            }),
            Role::Start => {
                if let std::collections::hash_map::Entry::Vacant(slot) =
                    open.entry((lane.clone(), key))
                {
                    slot.insert(periods.len());
                    let what = match FaultValue::of(op.value).point {
                        Some(point) => format!("{} {point}", op.f),
                        None => op.f.to_string(),
                    };
                    periods.push(FaultPeriod {
                        lane,
                        colour,
                        start: op.start,
                        end: history_end,
                        instant: false,
                        fault: true,
                        index: op.index,
                        what,
                    });
                }
            }
            Role::Stop => {
                if let Some(at) = open.remove(&(lane, key)) {
                    let period = &mut periods[at];
                    period.end = end.max(period.start);
                    period.what = format!("{} … {}", period.what, op.f);
                }
            }
        }
    }
    periods
}

/// The lanes of `periods` in a fixed order: packages as `PackageKind::ALL`, then
/// failpoints, then the rest by name.
fn lanes(periods: &[FaultPeriod]) -> Vec<(String, &'static str)> {
    let mut lanes: Vec<(String, &'static str)> = Vec::new();
    for p in periods {
        if !lanes.iter().any(|(l, _)| *l == p.lane) {
            lanes.push((p.lane.clone(), p.colour));
        }
    }
    let rank = |lane: &str| {
        PackageKind::ALL
            .iter()
            .position(|k| k.info().label == lane)
            .unwrap_or(if lane == "failpoint" { 10 } else { 11 })
    };
    lanes.sort_by(|a, b| rank(&a.0).cmp(&rank(&b.0)).then(a.0.cmp(&b.0)));
    lanes
}

/// One latency point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Position of its `f` in the list of client `f`s.
    pub f: usize,
    pub invoke: u64,
    pub latency: u64,
    pub outcome: Outcome,
}

/// The latency points of the client operations, in order of invocation, and the `f`s
/// they name (sorted). An operation never completed has the latency up to `end`.
pub fn latency_points(
    history: &History,
    operations: &[Operation],
    end: u64,
) -> (Vec<String>, Vec<Point>) {
    let mut fs: Vec<String> = Vec::new();
    let mut f_of: HashMap<&str, usize> = HashMap::new();
    let mut points = Vec::with_capacity(operations.len());
    for operation in operations.iter().filter(|o| o.process.is_client()) {
        let Some(invoke) = history.ops.get(operation.invoke) else {
            continue;
        };
        let done = operation
            .completion
            .and_then(|c| history.ops.get(c))
            .map_or(end, |op| op.time);
        let f = match f_of.get(invoke.f.as_str()) {
            Some(&f) => f,
            None => {
                f_of.insert(&invoke.f, fs.len());
                fs.push(invoke.f.clone());
                fs.len() - 1
            }
        };
        points.push(Point {
            f,
            invoke: invoke.time,
            latency: done.saturating_sub(invoke.time),
            outcome: operation.outcome,
        });
    }
    // Sort the fs by name and renumber.
    let mut order: Vec<usize> = (0..fs.len()).collect();
    order.sort_by(|&a, &b| fs[a].cmp(&fs[b]));
    let mut renumber = vec![0; fs.len()];
    for (new, &old) in order.iter().enumerate() {
        renumber[old] = new;
    }
    for p in &mut points {
        p.f = renumber[p.f];
    }
    let sorted = order.iter().map(|&i| fs[i].clone()).collect();
    (sorted, points)
}

/// Whether item `i` of `count` is among `keep` evenly spread ones (exactly `keep` of
/// them are, when `keep <= count`).
fn evenly(i: usize, count: usize, keep: usize) -> bool {
    if keep >= count {
        return true;
    }
    let (i, count, keep) = (i as u128, count as u128, keep as u128);
    (i + 1) * keep / count != i * keep / count
}

/// At most about `budget` of `points`, deterministically: every `fail` and `info` point
/// (up to [`MAX_NON_OK_POINTS`]), and `ok` points evenly spread over the rest of the
/// budget (at least a quarter of it). Order is kept.
pub fn downsample(points: &[Point], budget: usize) -> Vec<Point> {
    if points.len() <= budget {
        return points.to_vec();
    }
    let non_ok = points.iter().filter(|p| p.outcome != Outcome::Ok).count();
    let ok = points.len() - non_ok;
    let non_ok_keep = non_ok.min(MAX_NON_OK_POINTS);
    let ok_keep = budget.saturating_sub(non_ok_keep).max(budget / 4).min(ok);
    let (mut i_ok, mut i_non_ok) = (0, 0);
    let mut kept = Vec::with_capacity(ok_keep + non_ok_keep);
    for p in points {
        let keep = if p.outcome == Outcome::Ok {
            i_ok += 1;
            evenly(i_ok - 1, ok, ok_keep)
        } else {
            i_non_ok += 1;
            evenly(i_non_ok - 1, non_ok, non_ok_keep)
        };
        if keep {
            kept.push(*p);
        }
    }
    kept
}

/// Plot geometry, in SVG user units.
const WIDTH: f64 = 960.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 20.0;
const PLOT_HEIGHT: f64 = 220.0;
const LANE: f64 = 13.0;
const BOTTOM: f64 = 40.0;

/// The frame shared by both plots: x is time in seconds from 0 to `end_s`, and fault
/// lanes sit above the plot area.
struct Frame {
    end_s: f64,
    lanes: Vec<(String, &'static str)>,
}

impl Frame {
    fn top(&self) -> f64 {
        10.0 + self.lanes.len() as f64 * LANE + if self.lanes.is_empty() { 0.0 } else { 6.0 }
    }
    fn bottom(&self) -> f64 {
        self.top() + PLOT_HEIGHT
    }
    fn height(&self) -> f64 {
        self.bottom() + BOTTOM
    }
    fn x(&self, ns: u64) -> f64 {
        LEFT + (ns as f64 / 1e9) / self.end_s * (WIDTH - LEFT - RIGHT)
    }

    /// Fault lanes with their labels, translucent bands over the plot, and the x axis.
    fn decorations(&self, periods: &[FaultPeriod], x_label: &str) -> Markup {
        let (top, bottom) = (self.top(), self.bottom());
        let ticks = nice_ticks(0.0, self.end_s, 10);
        html! {
            g.faults {
                @for (i, (lane, colour)) in self.lanes.iter().enumerate() {
                    text.lane x=(num(LEFT - 4.0)) y=(num(10.0 + i as f64 * LANE + 9.5)) text-anchor="end" fill="#333" { (lane) }
                    line x1=(num(LEFT)) x2=(num(WIDTH - RIGHT)) y1=(num(10.0 + (i as f64 + 0.5) * LANE)) y2=(num(10.0 + (i as f64 + 0.5) * LANE)) stroke=(colour) stroke-opacity="0.35" {}
                }
                @for p in periods {
                    @let lane = self.lanes.iter().position(|(l, _)| *l == p.lane).unwrap_or(0);
                    @let x0 = self.x(p.start);
                    @let w = (self.x(p.end) - x0).max(if p.instant { 1.5 } else { 2.0 });
                    g.fault data-lane=(p.lane) {
                        title { (p.lane) ": " (p.what) ", " (secs(p.start)) "–" (secs(p.end)) " s (op " (p.index) ")" }
                        rect x=(num(x0)) y=(num(10.0 + lane as f64 * LANE + 1.0)) width=(num(w)) height=(num(LANE - 2.0)) fill=(p.colour) {}
                        @if !p.instant {
                            rect x=(num(x0)) y=(num(top)) width=(num(w)) height=(num(bottom - top)) fill=(p.colour) fill-opacity="0.25" {}
                        } @else if p.fault {
                            // An instantaneous fault: a thin mark where it began.
                            rect x=(num(x0)) y=(num(top)) width="1.5" height=(num(bottom - top)) fill=(p.colour) fill-opacity="0.7" {}
                        }
                    }
                }
            }
            g.axis {
                rect x=(num(LEFT)) y=(num(top)) width=(num(WIDTH - LEFT - RIGHT)) height=(num(bottom - top)) fill="none" stroke="#888" {}
                @for t in &ticks {
                    @let x = LEFT + t / self.end_s * (WIDTH - LEFT - RIGHT);
                    line x1=(num(x)) x2=(num(x)) y1=(num(bottom)) y2=(num(bottom + 4.0)) stroke="#888" {}
                    text x=(num(x)) y=(num(bottom + 16.0)) text-anchor="middle" { (tick_label(*t)) }
                }
                text x=(num((LEFT + WIDTH - RIGHT) / 2.0)) y=(num(bottom + 33.0)) text-anchor="middle" { (x_label) }
            }
        }
    }
}

fn frame(history: &History, periods: &[FaultPeriod]) -> Frame {
    let end = history.ops.iter().map(|op| op.time).max().unwrap_or(0);
    Frame {
        end_s: (end as f64 / 1e9).max(1e-3),
        lanes: lanes(periods),
    }
}

/// A number for an SVG attribute, one decimal.
fn num(x: f64) -> String {
    format!("{x:.1}")
}

fn secs(ns: u64) -> String {
    format!("{:.3}", ns as f64 / 1e9)
}

fn tick_label(x: f64) -> String {
    if x == x.trunc() && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        let s = format!("{x:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// About `count` round tick values covering `[lo, hi]`.
fn nice_ticks(lo: f64, hi: f64, count: usize) -> Vec<f64> {
    let step = nice_step((hi - lo) / count.max(1) as f64);
    let mut ticks = Vec::new();
    let mut t = (lo / step).ceil() * step;
    while t <= hi + step * 1e-9 && ticks.len() < 100 {
        ticks.push(t);
        t += step;
    }
    ticks
}

/// The round number (1, 2 or 5 times a power of ten) at or above `raw`.
fn nice_step(raw: f64) -> f64 {
    if raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|s| *s >= raw * 0.999)
        .unwrap_or(10.0 * power)
}

/// The latency plots, one per client `f`: what `report.html` shows.
pub struct LatencyPlots {
    pub markup: Markup,
    /// Points drawn and points there were.
    pub drawn: usize,
    pub total: usize,
}

/// Latency over time: one plot per client `f`, x the invocation time (s), y the latency
/// (ms, log scale), points coloured by outcome, fault periods shaded.
pub fn latency(
    history: &History,
    operations: &[Operation],
    periods: &[FaultPeriod],
) -> LatencyPlots {
    let frame = frame(history, periods);
    let end = history.ops.iter().map(|op| op.time).max().unwrap_or(0);
    let (fs, points) = latency_points(history, operations, end);
    let drawn = downsample(&points, MAX_POINTS);
    // The y range: powers of ten around the latencies (ms), at least 1 µs.
    let ms = |p: &Point| (p.latency as f64 / 1e6).max(1e-3);
    let lo = drawn.iter().map(ms).fold(f64::INFINITY, f64::min);
    let hi = drawn.iter().map(ms).fold(0.0, f64::max);
    let (lo_exp, hi_exp) = if drawn.is_empty() {
        (0, 1)
    } else {
        let lo_exp = lo.log10().floor() as i32;
        (lo_exp, (hi.log10().ceil() as i32).max(lo_exp + 1))
    };
    let (top, bottom) = (frame.top(), frame.bottom());
    let y = |ms: f64| {
        let t = (ms.log10() - lo_exp as f64) / (hi_exp - lo_exp) as f64;
        bottom - t * (bottom - top)
    };
    let markup = html! {
        @for (fi, f) in fs.iter().enumerate() {
            figure {
                figcaption { "Latency of " code { (f) } " (log scale), by invocation time" }
                svg.plot data-plot="latency" data-f=(f) xmlns="http://www.w3.org/2000/svg"
                    viewBox=(format!("0 0 {WIDTH} {}", num(frame.height()))) width=(WIDTH) height=(num(frame.height())) role="img" {
                    title { "Latency of " (f) " over time" }
                    (frame.decorations(periods, "time (s)"))
                    g.axis {
                        @for e in lo_exp..=hi_exp {
                            @let yy = y(10f64.powi(e));
                            line x1=(num(LEFT - 4.0)) x2=(num(LEFT)) y1=(num(yy)) y2=(num(yy)) stroke="#888" {}
                            line x1=(num(LEFT)) x2=(num(WIDTH - RIGHT)) y1=(num(yy)) y2=(num(yy)) stroke="#eee" {}
                            text x=(num(LEFT - 6.0)) y=(num(yy + 4.0)) text-anchor="end" { (tick_label(10f64.powi(e))) }
                        }
                        text x="14" y=(num((top + bottom) / 2.0)) text-anchor="middle" transform=(format!("rotate(-90 14 {})", num((top + bottom) / 2.0))) { "latency (ms)" }
                    }
                    g.points {
                        @for outcome in [Outcome::Ok, Outcome::Info, Outcome::Fail] {
                            @let d = point_path(drawn.iter().filter(|p| p.f == fi && p.outcome == outcome), &frame, &y, &ms);
                            @if !d.is_empty() {
                                path.series data-type=(outcome_name(outcome)) d=(d) stroke=(outcome_colour(outcome)) stroke-width="3" stroke-linecap="round" fill="none" {}
                            }
                        }
                    }
                }
            }
        }
    };
    LatencyPlots {
        markup,
        drawn: drawn.len(),
        total: points.len(),
    }
}

/// One zero-length segment per point: `M x yh0`.
fn point_path<'a>(
    points: impl Iterator<Item = &'a Point>,
    frame: &Frame,
    y: &impl Fn(f64) -> f64,
    ms: &impl Fn(&Point) -> f64,
) -> String {
    let mut d = String::new();
    for p in points {
        let _ = write!(d, "M{:.1} {:.1}h0", frame.x(p.invoke), y(ms(p)));
    }
    d
}

/// Throughput over time: completed ops/s per client `f` in time buckets, `ok` as solid
/// lines and `fail`+`info` dashed, fault periods shaded.
pub fn throughput(history: &History, operations: &[Operation], periods: &[FaultPeriod]) -> Markup {
    let frame = frame(history, periods);
    let bucket_s = nice_step(frame.end_s / 120.0);
    let buckets = ((frame.end_s / bucket_s).ceil() as usize).max(1);
    // counts[f][0 = ok, 1 = fail/info][bucket]
    let mut fs: Vec<&str> = Vec::new();
    let mut counts: Vec<[Vec<u64>; 2]> = Vec::new();
    let mut f_of: HashMap<&str, usize> = HashMap::new();
    for operation in operations.iter().filter(|o| o.process.is_client()) {
        let (Some(invoke), Some(done)) = (
            history.ops.get(operation.invoke),
            operation.completion.and_then(|c| history.ops.get(c)),
        ) else {
            continue;
        };
        let f = *f_of.entry(invoke.f.as_str()).or_insert_with(|| {
            fs.push(&invoke.f);
            counts.push([vec![0; buckets], vec![0; buckets]]);
            fs.len() - 1
        });
        let bucket = ((done.time as f64 / 1e9 / bucket_s) as usize).min(buckets - 1);
        let series = usize::from(operation.outcome != Outcome::Ok);
        counts[f][series][bucket] += 1;
    }
    let mut order: Vec<usize> = (0..fs.len()).collect();
    order.sort_by(|&a, &b| fs[a].cmp(fs[b]));
    let max = counts
        .iter()
        .flat_map(|c| c.iter().flatten())
        .copied()
        .max()
        .unwrap_or(0) as f64
        / bucket_s;
    let y_ticks = nice_ticks(0.0, max.max(1.0), 5);
    let y_max = y_ticks.last().copied().unwrap_or(1.0).max(max).max(1e-9);
    let (top, bottom) = (frame.top(), frame.bottom());
    let y = |rate: f64| bottom - rate / y_max * (bottom - top);
    let line = |series: &[u64]| {
        let mut d = String::new();
        for (b, count) in series.iter().enumerate() {
            let x = LEFT + ((b as f64 + 0.5) * bucket_s) / frame.end_s * (WIDTH - LEFT - RIGHT);
            let cmd = if b == 0 { 'M' } else { 'L' };
            let _ = write!(d, "{cmd}{x:.1} {:.1}", y(*count as f64 / bucket_s));
        }
        d
    };
    html! {
        figure {
            figcaption { "Throughput: completed ops/s per " (tick_label(bucket_s)) " s bucket; solid ok, dashed fail and info" }
            svg.plot data-plot="throughput" xmlns="http://www.w3.org/2000/svg"
                viewBox=(format!("0 0 {WIDTH} {}", num(frame.height()))) width=(WIDTH) height=(num(frame.height())) role="img" {
                title { "Throughput over time" }
                (frame.decorations(periods, "time (s)"))
                g.axis {
                    @for t in &y_ticks {
                        @let yy = y(*t);
                        line x1=(num(LEFT - 4.0)) x2=(num(LEFT)) y1=(num(yy)) y2=(num(yy)) stroke="#888" {}
                        text x=(num(LEFT - 6.0)) y=(num(yy + 4.0)) text-anchor="end" { (tick_label(*t)) }
                    }
                    text x="14" y=(num((top + bottom) / 2.0)) text-anchor="middle" transform=(format!("rotate(-90 14 {})", num((top + bottom) / 2.0))) { "ops/s" }
                }
                g.lines {
                    @for (n, &f) in order.iter().enumerate() {
                        @let colour = F_COLOURS[n % F_COLOURS.len()];
                        path.series data-f=(fs[f]) data-type="ok" d=(line(&counts[f][0])) stroke=(colour) stroke-width="1.5" fill="none" {}
                        path.series data-f=(fs[f]) data-type="fail-info" d=(line(&counts[f][1])) stroke=(colour) stroke-width="1.2" stroke-dasharray="4 3" fill="none" {}
                    }
                }
            }
            div.legend {
                @for (n, &f) in order.iter().enumerate() {
                    span.key { span.swatch style=(format!("background:{}", F_COLOURS[n % F_COLOURS.len()])) {} code { (fs[f]) } }
                }
            }
        }
    }
}

/// The legend of the fault lanes and outcome colours, shown once under the plots.
pub fn legend(periods: &[FaultPeriod]) -> Markup {
    html! {
        div.legend {
            @for outcome in [Outcome::Ok, Outcome::Info, Outcome::Fail] {
                span.key { span.dot style=(format!("background:{}", outcome_colour(outcome))) {} (outcome_name(outcome)) }
            }
            @for (lane, colour) in lanes(periods) {
                span.key { span.swatch style=(format!("background:{colour}")) {} (lane) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use history::Op;
    use serde_json::json;

    fn nem(index: u64, time_s: f64, f: &str, value: Value) -> Op {
        let mut op = Op::new(index, Process::Nemesis, OpType::Info, f, value);
        op.time = (time_s * 1e9) as u64;
        op
    }

    fn client(index: u64, time_s: f64, process: u64, kind: OpType, f: &str) -> Op {
        let mut op = Op::new(index, Process::Client(process), kind, f, json!({}));
        op.time = (time_s * 1e9) as u64;
        op
    }

    #[test]
    fn fault_periods_run_from_start_to_the_stop_completion() {
        let h = History::from_ops(vec![
            nem(0, 1.0, "start-partition", json!({})),
            nem(1, 1.5, "start-partition", json!({"grudge": {}})),
            nem(2, 2.0, "kill", json!({})),
            nem(3, 2.1, "kill", json!({})),
            nem(4, 3.0, "transfer-leader", json!({"package": "admin"})),
            nem(5, 3.2, "transfer-leader", json!({"package": "admin"})),
            nem(6, 4.0, "stop-partition", json!({})),
            nem(7, 4.5, "stop-partition", json!({})),
            nem(8, 5.0, "failpoint", json!({"point": "fetch"})),
            nem(9, 5.1, "failpoint", json!({"point": "fetch"})),
            nem(10, 6.0, "wait-until", json!({})),
            nem(11, 6.5, "wait-until", json!({})),
            nem(12, 7.0, "release-failpoint", json!({"point": "fetch"})),
            nem(13, 7.1, "release-failpoint", json!({"point": "fetch"})),
            // The final heal, with nothing open: no period.
            nem(14, 8.0, "stop-partition", json!({"final": true})),
            nem(15, 8.1, "stop-partition", json!({"final": true})),
            client(16, 9.0, 0, OpType::Invoke, "read"),
        ]);
        let periods = fault_periods(&h);
        let summary: Vec<(&str, u64, u64, bool, u64)> = periods
            .iter()
            .map(|p| (p.lane.as_str(), p.start, p.end, p.instant, p.index))
            .collect();
        let s = |x: f64| (x * 1e9) as u64;
        assert_eq!(
            summary,
            vec![
                ("partition", s(1.0), s(4.5), false, 0),
                // Never restarted: open to the end of the history.
                ("kill", s(2.0), s(9.0), false, 2),
                ("admin", s(3.0), s(3.2), true, 4),
                ("failpoint", s(5.0), s(7.1), false, 8),
                ("wait-until", s(6.0), s(6.5), true, 10),
            ]
        );
        assert_eq!(periods[0].what, "start-partition … stop-partition");
        assert_eq!(periods[0].colour, PackageKind::Partition.info().colour);
        assert_eq!(periods[3].what, "failpoint fetch … release-failpoint");
        // wait-until is a harness step, not a fault: drawn in its lane only.
        let faults: Vec<bool> = periods.iter().map(|p| p.fault).collect();
        assert_eq!(faults, vec![true, true, true, true, false]);
        let lane_names: Vec<String> = lanes(&periods).into_iter().map(|l| l.0).collect();
        assert_eq!(
            lane_names,
            vec!["kill", "partition", "admin", "failpoint", "wait-until"]
        );
    }

    fn point(i: usize, outcome: Outcome) -> Point {
        Point {
            f: 0,
            invoke: i as u64,
            latency: 1000,
            outcome,
        }
    }

    #[test]
    fn downsampling_keeps_every_fail_and_info() {
        let points: Vec<Point> = (0..100_000)
            .map(|i| {
                let outcome = match i % 1000 {
                    7 => Outcome::Fail,
                    8 => Outcome::Info,
                    _ => Outcome::Ok,
                };
                point(i, outcome)
            })
            .collect();
        let kept = downsample(&points, 1000);
        let fails = kept.iter().filter(|p| p.outcome == Outcome::Fail).count();
        let infos = kept.iter().filter(|p| p.outcome == Outcome::Info).count();
        assert_eq!((fails, infos), (100, 100));
        assert_eq!(kept.len(), 1000);
        // Deterministic, in order, spread over the whole run.
        assert_eq!(kept, downsample(&points, 1000));
        assert!(kept.windows(2).all(|w| w[0].invoke < w[1].invoke));
        assert!(kept.last().unwrap().invoke > 99_000);
        // Small inputs are untouched.
        assert_eq!(downsample(&points[..10], 1000), points[..10].to_vec());
    }

    #[test]
    fn evenly_keeps_exactly_the_count() {
        for (count, keep) in [(10, 3), (1000, 999), (7, 7), (5, 0)] {
            let n = (0..count).filter(|&i| evenly(i, count, keep)).count();
            assert_eq!(n, keep, "{count} {keep}");
        }
    }

    #[test]
    fn plots_are_svg_with_points_and_faults() {
        let h = History::from_ops(vec![
            nem(0, 0.5, "pause", json!({})),
            client(1, 1.0, 0, OpType::Invoke, "append"),
            client(2, 1.01, 0, OpType::Ok, "append"),
            client(3, 2.0, 1, OpType::Invoke, "read"),
            client(4, 2.5, 1, OpType::Fail, "read"),
            nem(5, 3.0, "resume", json!({})),
        ]);
        let ops = history::pair(&h).unwrap();
        let periods = fault_periods(&h);
        let latency = latency(&h, &ops, &periods);
        assert_eq!((latency.drawn, latency.total), (2, 2));
        let svg = latency.markup.into_string();
        assert_eq!(svg.matches(r#"data-plot="latency""#).count(), 2);
        assert!(svg.contains(r#"data-f="append""#));
        assert!(svg.contains(r#"data-type="fail""#));
        assert!(svg.contains(r#"data-lane="pause""#));
        assert!(svg.contains(PackageKind::Pause.info().colour));
        // No void-style SVG elements: every rect is closed.
        assert_eq!(svg.matches("<rect").count(), svg.matches("</rect>").count());
        let tp = throughput(&h, &ops, &periods).into_string();
        assert!(tp.contains(r#"data-plot="throughput""#));
        assert!(tp.contains(r#"data-f="read" data-type="fail-info""#));
    }

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(3.0), 5.0);
        assert_eq!(nice_step(12.0), 20.0);
        assert_eq!(
            nice_ticks(0.0, 10.0, 5),
            vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
        );
    }
}
