//! A failure the zone check found (`checkers::linear::ZoneConflict`), drawn like the
//! search's failures (`linear`): the two conflicting clusters' ops — a write and the
//! reads that returned its value — as boxes on one row per process, blue for the first
//! cluster and orange for the second, and each cluster's zone as a band behind them:
//! solid where its value had to hold the register throughout (a forward zone, from its
//! ops' earliest completion to their latest invocation), hatched where the value had to
//! take effect at some moment (a backward zone, from latest invocation to earliest
//! completion). A read no write explains is drawn with its write (invoked too late, or
//! failed). At most a write and [`checkers::linear::MAX_READS_SHOWN`] reads per cluster.

use crate::linear::{
    axis_markup, duration, fit, labels, linear_report, px, row_top, rows, Axis, IndexLookup, KeyOp,
    BOX_H, BOX_TOP, CHAR_W, LEFT, MAX_LABEL, RIGHT,
};
use checkers::linear::{ClusterZone, ZoneConflict};
use history::{History, Outcome};
use maud::{html, Markup};

/// Room above the rows for the bands' labels, one line per band.
const LABELS_H: f64 = 26.0;

/// Where a band starts or ends.
#[derive(Debug, Clone, Copy, PartialEq)]
enum End {
    /// Before the history: the initial value's write.
    Start,
    Invoked(u64),
    Completed(u64),
}

/// A cluster's zone, drawn behind its ops.
#[derive(Debug, Clone, PartialEq)]
struct Band {
    group: usize,
    from: End,
    to: End,
    forward: bool,
    label: String,
}

/// The ops to draw (invocation index, group) and the bands.
fn scene_of(conflict: &ZoneConflict) -> (Vec<(u64, usize)>, Vec<Band>) {
    let mut ops = Vec::new();
    let mut bands = Vec::new();
    let mut cluster = |zone: &ClusterZone, group: usize| {
        ops.extend(zone.write.iter().chain(&zone.reads).map(|&op| (op, group)));
        let (completion, invocation) = (
            zone.earliest_completion.map_or(End::Start, End::Completed),
            zone.latest_invocation.map_or(End::Start, End::Invoked),
        );
        let (from, to, what) = match zone.forward {
            true => (completion, invocation, "holds the register"),
            false => (invocation, completion, "takes effect here"),
        };
        bands.push(Band {
            group,
            from,
            to,
            forward: zone.forward,
            label: format!("{} {what}", zone.value),
        });
    };
    match conflict {
        ZoneConflict::UnwrittenRead {
            read, failed_write, ..
        } => ops.extend(failed_write.map(|w| (w, 0)).into_iter().chain([(*read, 1)])),
        ZoneConflict::ReadBeforeWrite { read, write, .. } => ops.extend([(*write, 0), (*read, 1)]),
        ZoneConflict::OverlappingZones { first, second } => {
            cluster(first, 0);
            cluster(second, 1);
        }
        ZoneConflict::ZoneInsideZone { backward, forward } => {
            cluster(forward, 0);
            cluster(backward, 1);
        }
    }
    (ops, bands)
}

/// The drawn ops located in the history, in invocation order, with their group.
fn locate(history: &History, wanted: &[(u64, usize)]) -> Vec<(KeyOp, usize)> {
    let Ok(operations) = history::pair(history) else {
        return Vec::new();
    };
    let lookup = IndexLookup::new(history);
    let mut found: Vec<(KeyOp, usize)> = Vec::new();
    for &(index, group) in wanted {
        let Some(position) = lookup.position(index) else {
            continue;
        };
        let Ok(at) = operations.binary_search_by_key(&position, |o| o.invoke) else {
            continue;
        };
        let operation = &operations[at];
        if found.iter().any(|(op, _)| op.invoke == position) {
            continue;
        }
        found.push((
            KeyOp {
                index,
                process: operation.process,
                invoke: position,
                completion: operation.completion,
                outcome: operation.outcome,
                order: None,
                partial: None,
            },
            group,
        ));
    }
    found.sort_by_key(|(op, _)| op.invoke);
    found
}

/// The drawing of a zone check's failure, with its caption.
/// The drawing of a failure the zone check found, from the `linearizable` checker's
/// report (as in `results.json`); `None` when the report shows no such failure.
pub fn draw_report(history: &History, report: &serde_json::Value) -> Option<Markup> {
    let report = linear_report(report)?;
    let failure = report.failure?;
    let conflict = failure.conflict.as_ref()?;
    Some(draw(
        history,
        failure.key.as_deref(),
        &failure.unplaced_description,
        conflict,
        report.model.name(),
    ))
}

fn draw(
    history: &History,
    key: Option<&str>,
    description: &str,
    conflict: &ZoneConflict,
    model: &str,
) -> Markup {
    let (wanted, bands) = scene_of(conflict);
    let drawn = locate(history, &wanted);
    html! {
        div class="linear-failure-figure" {
            p class="linear-caption" {
                strong { "Not linearizable" }
                @if let Some(key) = key { " (key " code { (key) } ")" }
                ", found by the zone check: " (description) "."
            }
            @if drawn.is_empty() {
                p { "None of the conflicting ops were found in the history." }
            } @else {
                div style="overflow-x:auto" { (render(history, &drawn, &bands, model)) }
                p class="linear-legend" {
                    "Blue, then orange: each value's write and the reads that returned it. \
                     A solid band: the stretch throughout which the register had to hold \
                     that value (from the first completion to the last invocation among its \
                     ops). A hatched band: where the value had to take effect. Dashed: \
                     indeterminate ops, which may take effect any time after their \
                     invocation. Each box links to the timeline."
                }
            }
        }
    }
}

fn render(history: &History, drawn: &[(KeyOp, usize)], bands: &[Band], model: &str) -> Markup {
    let ops: Vec<KeyOp> = drawn.iter().map(|(op, _)| *op).collect();
    let (row_list, row_of) = rows(&ops);
    let mut events: Vec<usize> = ops
        .iter()
        .flat_map(|op| std::iter::once(op.invoke).chain(op.ret()))
        .collect();
    events.sort_unstable();
    events.dedup();
    let labelled: Vec<(String, String)> = ops.iter().map(|op| labels(history, op, model)).collect();
    // A box spanning a single gap gets room for its label.
    let mut room = vec![0.0; events.len()];
    for (op, (short, _)) in ops.iter().zip(&labelled) {
        let gap = events.partition_point(|&e| e < op.invoke);
        let next = op.ret().map(|r| events.partition_point(|&e| e < r));
        if let (Some(slot), Some(next)) = (room.get_mut(gap), next) {
            if next == gap + 1 {
                *slot = (short.chars().count().min(MAX_LABEL) as f64 * CHAR_W + 12.0).max(*slot);
            }
        }
    }
    let axis = Axis::new(history, events, &room);
    let x_of = |end: End| {
        let op = |index: u64| ops.iter().find(|op| op.index == index);
        match end {
            End::Start => LEFT,
            End::Invoked(index) => op(index).map_or(LEFT, |op| axis.x(op.invoke)),
            End::Completed(index) => op(index)
                .and_then(KeyOp::ret)
                .map_or(axis.end, |ret| axis.x(ret)),
        }
    };
    let axis_y = row_top(row_list.len()) + 6.0;
    let (width, height) = (px(axis.end + RIGHT), px(LABELS_H + axis_y + 36.0));
    let label_y = |row: usize| px(row_top(row) + BOX_TOP + BOX_H / 2.0 + 4.0);
    html! {
        svg class="linear-failure" xmlns="http://www.w3.org/2000/svg" width=(width)
            height=(height) viewBox={"0 0 " (width) " " (height)} {
            style { (crate::assets::LINEAR_CSS) }
            defs {
                pattern id="lz-hatch" width="6" height="6" patternUnits="userSpaceOnUse"
                    patternTransform="rotate(45)" {
                    line x1="0" y1="0" x2="0" y2="6" class="lz-hatch-line" {}
                }
            }
            @for (line, band) in bands.iter().enumerate() {
                text class={"lz-band-label lz-label" (band.group)}
                    x=(px(x_of(band.from).min(x_of(band.to)) + 3.0)) y=(px(10.0 + 12.0 * line as f64)) {
                    (band.label)
                }
            }
            g transform={"translate(0," (LABELS_H) ")"} {
            @for band in bands {
                @let (x1, x2) = (x_of(band.from), x_of(band.to));
                rect class={"lz-band lz-band" (band.group) @if !band.forward { " lz-backward" }}
                    x=(px(x1.min(x2))) y="0" width=(px((x2 - x1).abs().max(2.0)))
                    height=(px(axis_y)) {
                    title { (band.label) }
                }
            }
            @for ((op, group), (short, long)) in drawn.iter().zip(&labelled) {
                @let row = row_of.get(&op.index).copied().unwrap_or(0);
                @let x1 = px(axis.x(op.invoke) + 1.0);
                @let x2 = px(op.ret().map_or(axis.end, |r| axis.x(r)) - 1.0);
                a class={"op-link lf-op lz-op" (group) @if op.ret().is_none() { " lf-open" }}
                    href={"timeline.html#i" (op.index)} {
                    title { (tooltip(history, op, long)) }
                    rect x=(x1) y=(px(row_top(row) + BOX_TOP)) width=(px((x2 - x1).max(2.0)))
                        height=(BOX_H) rx="3" {}
                    @if let Some(label) = fit(short, x2 - x1) {
                        text x=(px(x1 + 4.0)) y=(label_y(row)) { (label) }
                    }
                }
            }
            @for (row, (process, first)) in row_list.iter().enumerate() {
                @if *first {
                    text class="lf-proc" x=(LEFT - 6.0) y=(label_y(row)) text-anchor="end" {
                        "p" (process)
                    }
                }
            }
            (axis_markup(history, &axis, axis_y))
            }
        }
    }
}

/// The hover text of a box.
fn tooltip(history: &History, op: &KeyOp, long: &str) -> String {
    let at = |pos: usize| {
        history.ops.get(pos).map_or(String::new(), |op| {
            format!("op {} (t = {})", op.index, duration(op.time))
        })
    };
    let end = match (op.outcome, op.completion) {
        (Outcome::Ok, Some(c)) => format!("ok at {}", at(c)),
        (Outcome::Fail, Some(c)) => format!("failed at {}: did not happen", at(c)),
        _ => "indeterminate: may take effect any time after its invocation".to_string(),
    };
    format!(
        "process {}: {long}\ninvoked at {}\n{end}",
        op.process,
        at(op.invoke)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use checkers::linear::{check_linearizable, LinearOptions, ModelKind};
    use history::{Op, OpType, Process};
    use serde_json::{json, Value};

    fn op(index: u64, process: u64, kind: OpType, f: &str, value: Value) -> Op {
        let mut op = Op::new(
            index,
            Process::Client(process),
            kind,
            f,
            json!({"key": "k", "value": value}),
        );
        op.time = index * 1_000;
        op
    }

    fn report(history: &History) -> Value {
        let report = check_linearizable(history, &LinearOptions::new(ModelKind::Register)).unwrap();
        serde_json::to_value(report).unwrap()
    }

    #[test]
    fn a_stale_read_is_drawn_as_a_write_inside_the_zone_of_the_value_read() {
        // 1 is written, then 2; a read invoked after both returns 1.
        let history = History::from_ops(vec![
            op(0, 0, OpType::Invoke, "write", json!(1)),
            op(1, 0, OpType::Ok, "write", json!(1)),
            op(2, 1, OpType::Invoke, "write", json!(2)),
            op(3, 1, OpType::Ok, "write", json!(2)),
            op(4, 2, OpType::Invoke, "read", json!(null)),
            op(5, 2, OpType::Ok, "read", json!(1)),
        ]);
        let report = report(&history);
        assert_eq!(report["failure"]["algorithm"], "zones");
        let html = draw_report(&history, &report).unwrap().into_string();
        assert!(
            html.contains(
                "found by the zone check: the write of op 2 (process 1 write key &quot;k&quot; \
                 2) had to take effect between its invocation and its completion, but the \
                 register had to hold 1 throughout that stretch (from the completion of op 0"
            ),
            "{html}"
        );
        assert!(html.contains("(key <code>k</code>)"), "{html}");
        for (index, group) in [(0, 0), (4, 0), (2, 1)] {
            assert!(
                html.contains(&format!(
                    "<a class=\"op-link lf-op lz-op{group}\" href=\"timeline.html#i{index}\">"
                )),
                "op {index}: {html}"
            );
        }
        assert!(html.contains(">1 holds the register</text>"), "{html}");
        assert!(html.contains(">2 takes effect here</text>"), "{html}");
        assert!(
            html.contains("class=\"lz-band lz-band1 lz-backward\""),
            "{html}"
        );
        // 1's band runs from the write of 1's completion to the read's invocation, and
        // the write of 2 lies inside it.
        let band = |group: usize| {
            let (_, rest) = html
                .split_once(&format!("class=\"lz-band lz-band{group}"))
                .unwrap();
            let x: f64 = rest
                .split("x=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            let w: f64 = rest
                .split("width=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            (x, x + w)
        };
        let (outer, inner) = (band(0), band(1));
        assert!(
            outer.0 < inner.0 && inner.1 < outer.1,
            "{outer:?} {inner:?}"
        );
    }

    #[test]
    fn a_read_of_a_failed_write_is_drawn_with_that_write() {
        let history = History::from_ops(vec![
            op(0, 0, OpType::Invoke, "write", json!("<b>x</b>")),
            op(1, 0, OpType::Fail, "write", json!("<b>x</b>")),
            op(2, 1, OpType::Invoke, "read", json!(null)),
            op(3, 1, OpType::Ok, "read", json!("<b>x</b>")),
        ]);
        let report = report(&history);
        assert_eq!(report["failure"]["conflict"]["kind"], "unwritten-read");
        assert_eq!(report["failure"]["conflict"]["failed_write"], 0);
        let html = draw_report(&history, &report).unwrap().into_string();
        assert!(!html.contains("<b>"), "{html}");
        assert!(
            html.contains("the only write of it (op 0) failed"),
            "{html}"
        );
        assert!(html.contains("href=\"timeline.html#i0\""), "{html}");
        assert!(html.contains("href=\"timeline.html#i2\""), "{html}");
        assert!(!html.contains("<rect class=\"lz-band"), "no zones: {html}");
    }
}
