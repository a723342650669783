//! `timeline.html`, like Jepsen's: one column per process (the nemesis first, in its
//! own column), one bar per operation from its invocation down to its completion,
//! coloured by outcome (ok green, fail pink, info orange; an invocation never completed
//! is info, drawn dashed to the end of the history; nemesis ops in their fault package's
//! colour). Hovering a bar shows the whole op, clicking pins it.
//!
//! Scale: ops are data, not elements. The page embeds them compactly and a small static script
//! (`report/assets/timeline.js`) draws only the bars near the viewport (virtual scrolling; content taller than
//! browsers allow an element to be is mapped proportionally onto a shorter scroll
//! range), so a million ops stay responsive. Three data blocks, with the operations in
//! order of invocation:
//!
//! - `tl-meta` (JSON, `Meta`): counts, time span, the column, `f` and node names.
//! - `tl-cols` (JSON array of integers, [`WIDTH`] per operation, see `write_cols`):
//!   column, f, time (delta), latency, outcome, position (delta), completion offset,
//!   node; plus the indexes when they are not `position + index_base`.
//! - `tl-values` (text, one JSON line per operation): `[value]`, `[value, completion
//!   value]` or `[value, completion value, error]`; parsed only for the bars shown.
//!
//! Every `<` in the data is written `\u003c`, so no `</script>` or `<!--` can occur.
//!
//! Rows: "order" (one row per history entry, as Jepsen) or "time" (proportional to
//! time); columns: one per process, or "packed" (processes that never overlap share a
//! column; the default when there are more than [`PACK_ABOVE`] client processes, since
//! every crashed client comes back as a new process).
//!
//! Links: `timeline.html#i<index>`, where index is the invocation's or the
//! completion's `index`, scroll to the op and highlight it, on load and on hashchange.
//! The script records errors in `body[data-script-errors]` (`"0"` once drawn) and the
//! operation count in `body[data-ops]`.
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fs::File;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::{self, BufWriter, Write};
use std::path::Path;

use history::{History, Op, Operation, Outcome, Process};
use maud::{html, Markup, PreEscaped, DOCTYPE};
use nemesis::PackageKind;
use serde::Serialize;

use crate::assets;
use crate::ReportError;

/// Integers per operation in `tl-cols` when indexes are `position + index_base`.
pub const WIDTH: usize = 8;
/// Integers per operation when they are not (the indexes follow, as deltas).
pub const WIDTH_WITH_INDEXES: usize = 10;
/// Above this many client processes, columns are packed by default.
pub const PACK_ABOVE: usize = 32;

/// Where the data blocks go in the static page; contains `<`, so escaped text can never
/// produce it.
const DATA_MARK: &str = "<tl-data></tl-data>";

/// Writes the timeline of `history` to `out`; the bytes written.
pub fn write(history: &History, out: &Path) -> Result<u64, ReportError> {
    let operations = history::pair(history)?;
    let io_error = |source| ReportError::Io {
        path: out.to_path_buf(),
        source,
    };
    let file = File::create(out).map_err(io_error)?;
    let mut w = Counting {
        inner: BufWriter::with_capacity(1 << 20, file),
        bytes: 0,
    };
    write_page(history, &operations, &mut w).map_err(io_error)?;
    w.flush().map_err(io_error)?;
    Ok(w.bytes)
}

/// Writes the whole page for `history`, whose operations `history::pair` gave.
fn write_page<W: Write>(history: &History, operations: &[Operation], w: &mut W) -> io::Result<()> {
    let layout = Layout::new(history, operations);
    let page = shell(history, &layout).into_string();
    let (before, after) = page
        .split_once(DATA_MARK)
        .ok_or_else(|| io::Error::other("timeline page without its data mark"))?;
    w.write_all(before.as_bytes())?;
    w.write_all(br#"<script type="application/json" id="tl-meta">"#)?;
    serde_json::to_writer(EscapeLt(&mut *w), &layout.meta(history))?;
    w.write_all(b"</script>\n")?;
    w.write_all(br#"<script type="application/json" id="tl-cols">["#)?;
    write_cols(history, operations, &layout, w)?;
    w.write_all(b"]</script>\n")?;
    w.write_all(br#"<script type="text/plain" id="tl-values">"#)?;
    write_values(history, operations, w)?;
    w.write_all(b"</script>\n")?;
    w.write_all(after.as_bytes())
}

/// What the page needs besides the ops themselves: columns, names, time span.
struct Layout<'h> {
    /// Processes in column order: the nemesis first, then clients by number.
    procs: Vec<Process>,
    /// Per operation: its process's column, f and node ids.
    op_proc: Vec<u32>,
    op_f: Vec<u32>,
    op_node: Vec<i64>,
    /// Per process (column order): its column when packed.
    lanes: Vec<usize>,
    fs: Vec<&'h str>,
    nodes: Vec<&'h str>,
    t0: u64,
    t1: u64,
    /// `Some(b)` when every op's index is its position plus `b`.
    index_base: Option<u64>,
}

impl<'h> Layout<'h> {
    fn new(history: &'h History, operations: &[Operation]) -> Layout<'h> {
        let ops = &history.ops;
        let t0 = ops.iter().map(|op| op.time).min().unwrap_or(0);
        let t1 = ops.iter().map(|op| op.time).max().unwrap_or(0);
        let index_base = ops.first().map(|op| op.index).filter(|&base| {
            ops.iter()
                .enumerate()
                .all(|(position, op)| op.index.checked_sub(position as u64) == Some(base))
        });

        // Each process's lifetime in positions: its first invocation to its last
        // completion (the end of the history for an invocation never completed).
        let mut lifetimes: FastMap<Process, (usize, usize)> = FastMap::default();
        for op in operations {
            let end = op.completion.unwrap_or(ops.len());
            let life = lifetimes.entry(op.process).or_insert((op.invoke, end));
            life.1 = life.1.max(end);
        }
        let mut procs: Vec<Process> = lifetimes.keys().copied().collect();
        procs.sort_by_key(|p| match p {
            Process::Nemesis => (0, 0),
            Process::Client(c) => (1, *c),
        });
        let column: FastMap<Process, u32> = procs
            .iter()
            .enumerate()
            .map(|(i, p)| (*p, i as u32))
            .collect();
        let lanes = pack(&procs, &lifetimes);

        let mut f_ids: FastMap<&str, u32> = FastMap::default();
        let mut node_ids: FastMap<&str, u32> = FastMap::default();
        let (mut fs, mut nodes) = (Vec::new(), Vec::new());
        let mut op_proc = Vec::with_capacity(operations.len());
        let mut op_f = Vec::with_capacity(operations.len());
        let mut op_node = Vec::with_capacity(operations.len());
        for op in operations {
            let invocation = &ops[op.invoke];
            let f = invocation.f.as_str();
            op_f.push(*f_ids.entry(f).or_insert_with(|| {
                fs.push(f);
                fs.len() as u32 - 1
            }));
            let node = invocation
                .node
                .as_deref()
                .or_else(|| op.completion.and_then(|c| ops[c].node.as_deref()));
            op_node.push(match node {
                Some(node) => i64::from(*node_ids.entry(node).or_insert_with(|| {
                    nodes.push(node);
                    nodes.len() as u32 - 1
                })),
                None => -1,
            });
            op_proc.push(column.get(&op.process).copied().unwrap_or(0));
        }
        Layout {
            procs,
            op_proc,
            op_f,
            op_node,
            lanes,
            fs,
            nodes,
            t0,
            t1,
            index_base,
        }
    }

    fn clients(&self) -> usize {
        self.procs.iter().filter(|p| p.is_client()).count()
    }

    fn meta<'a>(&'a self, history: &'a History) -> Meta<'a> {
        Meta {
            source: history.source.as_deref(),
            entries: history.len(),
            ops: self.op_proc.len(),
            t0: self.t0,
            t1: self.t1,
            width: if self.index_base.is_some() {
                WIDTH
            } else {
                WIDTH_WITH_INDEXES
            },
            index_base: self.index_base,
            procs: self.procs.iter().map(Process::to_string).collect(),
            nemesis: self.procs.iter().position(|p| *p == Process::Nemesis),
            lanes: &self.lanes,
            nlanes: self.lanes.iter().max().map_or(0, |m| m + 1),
            packed: self.clients() > PACK_ABOVE,
            fs: &self.fs,
            fcolours: self
                .fs
                .iter()
                .map(|f| PackageKind::of_f(f).map(|k| k.info().colour))
                .collect(),
            nodes: &self.nodes,
        }
    }
}

/// Packs processes into columns: the nemesis alone in column 0, then each client (in
/// order of first invocation) in the lowest column free since before it began.
fn pack(procs: &[Process], lifetimes: &FastMap<Process, (usize, usize)>) -> Vec<usize> {
    let mut order: Vec<usize> = (0..procs.len()).collect();
    order.sort_by_key(|&i| lifetimes.get(&procs[i]).map_or(0, |l| l.0));
    let mut lanes = vec![0; procs.len()];
    let mut next = usize::from(procs.contains(&Process::Nemesis));
    let mut busy: BinaryHeap<Reverse<(usize, usize)>> = BinaryHeap::new();
    let mut free: BinaryHeap<Reverse<usize>> = BinaryHeap::new();
    for i in order {
        if procs[i] == Process::Nemesis {
            continue;
        }
        let (first, last) = lifetimes.get(&procs[i]).copied().unwrap_or((0, 0));
        while let Some(&Reverse((end, lane))) = busy.peek() {
            if end >= first {
                break;
            }
            busy.pop();
            free.push(Reverse(lane));
        }
        let lane = match free.pop() {
            Some(Reverse(lane)) => lane,
            None => {
                next += 1;
                next - 1
            }
        };
        lanes[i] = lane;
        busy.push(Reverse((last, lane)));
    }
    lanes
}

/// FNV-1a, for the maps consulted once or twice per op: much faster than the default
/// SipHash, and flooding is no concern for a report.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<Fnv>>;

/// The `tl-meta` block.
#[derive(Serialize)]
struct Meta<'a> {
    /// The history's file.
    source: Option<&'a str>,
    /// History entries (rows in "order" mode).
    entries: usize,
    /// Operations (bars).
    ops: usize,
    t0: u64,
    t1: u64,
    /// Integers per operation in `tl-cols`.
    width: usize,
    index_base: Option<u64>,
    /// Column labels, one per process.
    procs: Vec<String>,
    /// The nemesis's column, if it has ops.
    nemesis: Option<usize>,
    /// Per process, its column when packed.
    lanes: &'a [usize],
    nlanes: usize,
    /// Whether columns start packed.
    packed: bool,
    fs: &'a [&'a str],
    /// Per f, the colour of its nemesis package.
    fcolours: Vec<Option<&'static str>>,
    nodes: &'a [&'a str],
}

/// Writes the `tl-cols` integers (without brackets), per operation in invocation order:
/// process column, f id, invocation time minus the previous operation's (the first's
/// minus `t0`), latency in ns (-1: never completed), outcome (0 ok, 1 fail, 2 info),
/// invocation position minus the previous operation's, completion position minus
/// invocation position (-1: none), node id (-1: none); then, only without an
/// `index_base`, invocation index minus the previous one's and completion index minus
/// invocation index (-1: none).
fn write_cols<W: Write>(
    history: &History,
    operations: &[Operation],
    layout: &Layout,
    w: &mut W,
) -> io::Result<()> {
    let ops = &history.ops;
    let (mut time, mut position, mut index) = (int(layout.t0), 0, 0);
    for (i, op) in operations.iter().enumerate() {
        let invocation = &ops[op.invoke];
        let completion: Option<&Op> = op.completion.map(|c| &ops[c]);
        let latency = completion.map_or(-1, |c| int(c.time.saturating_sub(invocation.time)));
        let outcome = match op.outcome {
            Outcome::Ok => 0,
            Outcome::Fail => 1,
            Outcome::Info => 2,
        };
        let invoked = int(op.invoke as u64);
        let mut row = [
            i64::from(layout.op_proc[i]),
            i64::from(layout.op_f[i]),
            int(invocation.time).saturating_sub(time),
            latency,
            outcome,
            invoked - position,
            op.completion.map_or(-1, |c| int(c as u64) - invoked),
            layout.op_node[i],
            0,
            0,
        ];
        time = int(invocation.time);
        position = invoked;
        let width = if layout.index_base.is_some() {
            WIDTH
        } else {
            row[8] = int(invocation.index).saturating_sub(index);
            row[9] = completion.map_or(-1, |c| int(c.index).saturating_sub(int(invocation.index)));
            index = int(invocation.index);
            WIDTH_WITH_INDEXES
        };
        for (k, n) in row[..width].iter().enumerate() {
            write_int(w, i > 0 || k > 0, *n)?;
        }
    }
    Ok(())
}

/// `n` as an i64 (saturating; JavaScript cannot represent more anyway).
fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Writes `n` in decimal, after a comma if `comma`; without `fmt`, a million rows are
/// eight million numbers.
fn write_int<W: Write>(w: &mut W, comma: bool, n: i64) -> io::Result<()> {
    let mut buf = [0u8; 22];
    let mut at = buf.len();
    let mut u = n.unsigned_abs();
    loop {
        at -= 1;
        buf[at] = b'0' + (u % 10) as u8;
        u /= 10;
        if u == 0 {
            break;
        }
    }
    if n < 0 {
        at -= 1;
        buf[at] = b'-';
    }
    if comma {
        at -= 1;
        buf[at] = b',';
    }
    w.write_all(&buf[at..])
}

/// Writes the `tl-values` lines: `[value]` when the completion (if any) has the same
/// value and there is no error, else `[value, completion value]`, or with an error
/// `[value, completion value, error]`.
fn write_values<W: Write>(
    history: &History,
    operations: &[Operation],
    w: &mut W,
) -> io::Result<()> {
    let ops = &history.ops;
    // Each line is built in `line`, then escaped in one pass: far fewer small writes.
    let mut line = Vec::with_capacity(256);
    for op in operations {
        let invocation = &ops[op.invoke];
        let completion = op.completion.map(|c| &ops[c]);
        let value = &invocation.value;
        let completion_value = completion.map_or(value, |c| &c.value);
        let error = completion
            .and_then(|c| c.error.as_ref())
            .or(invocation.error.as_ref());
        line.clear();
        line.push(b'[');
        serde_json::to_writer(&mut line, value)?;
        if error.is_some() || completion_value != value {
            line.push(b',');
            serde_json::to_writer(&mut line, completion_value)?;
        }
        if let Some(error) = error {
            line.push(b',');
            serde_json::to_writer(&mut line, error)?;
        }
        line.extend_from_slice(b"]\n");
        EscapeLt(&mut *w).write_all(&line)?;
    }
    Ok(())
}

/// Passes bytes through, writing `<` as `\u003c`: for JSON, where `<` only occurs
/// inside strings, this keeps the text parseable and free of `</script` and `<!--`.
struct EscapeLt<W>(W);

impl<W: Write> Write for EscapeLt<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }

    fn write_all(&mut self, mut buf: &[u8]) -> io::Result<()> {
        while let Some(at) = buf.iter().position(|&b| b == b'<') {
            self.0.write_all(&buf[..at])?;
            self.0.write_all(br"\u003c")?;
            buf = &buf[at + 1..];
        }
        self.0.write_all(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// Counts the bytes written through it.
struct Counting<W> {
    inner: W,
    bytes: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn seconds(ns: u64) -> String {
    format!("{:.3} s", ns as f64 / 1e9)
}

/// The static page: header, legend, controls, the empty timeline and the script;
/// [`DATA_MARK`] where the data blocks go.
fn shell(history: &History, layout: &Layout) -> Markup {
    let source = history.source.as_deref().unwrap_or("history in memory");
    let name = Path::new(source)
        .file_name()
        .map_or(source.to_string(), |n| n.to_string_lossy().into_owned());
    let mut packages: Vec<PackageKind> = Vec::new();
    let mut other_nemesis = false;
    for (column, f) in layout.op_proc.iter().zip(&layout.op_f) {
        if layout.procs.get(*column as usize) != Some(&Process::Nemesis) {
            continue;
        }
        match layout
            .fs
            .get(*f as usize)
            .and_then(|f| PackageKind::of_f(f))
        {
            Some(kind) if !packages.contains(&kind) => packages.push(kind),
            Some(_) => {}
            None => other_nemesis = true,
        }
    }
    packages.sort();
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "Timeline: " (name) }
                script { (PreEscaped(assets::TIMELINE_ONERROR_JS)) }
                style { (PreEscaped(assets::TIMELINE_CSS)) }
            }
            body {
                header {
                    h1 { "Timeline of " span title=(source) { (name) } }
                    p.summary {
                        (layout.op_proc.len()) " operations (" (history.len()) " history entries), "
                        (layout.clients()) " client processes"
                        @if layout.procs.contains(&Process::Nemesis) { " and the nemesis" }
                        "; from " (seconds(layout.t0)) " to " (seconds(layout.t1))
                        " (" (seconds(layout.t1 - layout.t0)) "). "
                        a href="report.html" { "Report" }
                    }
                    @if let Some(at) = &history.torn_tail {
                        p.warn { "An incomplete last line was dropped at " (at) "." }
                    }
                    div.legend {
                        span.sw.ok {} "ok"
                        span.sw.fail {} "fail"
                        span.sw.info {} "info"
                        span.sw.info.open {} "never completed"
                        @for kind in &packages {
                            span.sw style=(format!("background:{}", kind.info().colour)) {}
                            "nemesis: " (kind.info().label)
                        }
                        @if other_nemesis { span.sw.nemesis {} "nemesis: other" }
                    }
                    form #tl-controls {
                        "Rows: "
                        button #tl-order type="button" title="one row per history entry" { "order" }
                        button #tl-time type="button" title="proportional to time" { "time" }
                        " Zoom: "
                        button #tl-zoom-in type="button" { "+" }
                        button #tl-zoom-out type="button" { "−" }
                        " Columns: "
                        button #tl-per-process type="button" { "one per process" }
                        button #tl-packed type="button" title="processes that never overlap share a column" { "packed" }
                        " Go to index "
                        input #tl-goto type="number" min="0" size="8";
                        button type="submit" { "go" }
                        " "
                        span #tl-status {}
                    }
                }
                div #tl-colhead { div #tl-colhead-inner {} }
                div #timeline { div #tl-canvas {} }
                aside #tl-panel hidden {
                    div.panel-head {
                        b #tl-panel-title {}
                        button #tl-panel-close type="button" title="unselect" { "×" }
                    }
                    table #tl-panel-table {}
                }
                (PreEscaped(DATA_MARK))
                script { (PreEscaped(assets::TIMELINE_JS)) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use history::{Op, OpType};
    use serde_json::{json, Value};

    fn op(index: u64, time: u64, process: Process, kind: OpType, f: &str, value: Value) -> Op {
        let mut op = Op::new(index, process, kind, f, value);
        op.time = time;
        op
    }

    fn page(history: &History) -> String {
        let operations = history::pair(history).expect("pairs");
        let mut out = Vec::new();
        write_page(history, &operations, &mut out).expect("writes");
        String::from_utf8(out).expect("utf-8")
    }

    /// The text of the data block `id`.
    fn block<'a>(page: &'a str, id: &str) -> &'a str {
        let open = format!("id=\"{id}\">");
        let start = page.find(&open).expect("block") + open.len();
        let len = page[start..].find("</script>").expect("block end");
        &page[start..start + len]
    }

    fn json_block(page: &str, id: &str) -> Value {
        serde_json::from_str(block(page, id)).expect("json")
    }

    fn small() -> History {
        use OpType::*;
        let (c, nem) = (Process::Client, Process::Nemesis);
        let mut ops = vec![
            op(0, 100, nem, Info, "start-partition", json!(null)),
            op(
                1,
                150,
                c(0),
                Invoke,
                "append",
                json!({"key": "p/0", "value": 1}),
            ),
            op(2, 200, nem, Info, "start-partition", json!({"n1": ["n2"]})),
            op(3, 300, c(1), Invoke, "read", json!({"key": "p/0"})),
            op(
                4,
                450,
                c(0),
                Ok,
                "append",
                json!({"key": "p/0", "value": 1, "offset": 0}),
            ),
            op(5, 500, c(1), Fail, "read", json!({"key": "p/0"})),
            op(
                6,
                600,
                c(2),
                Invoke,
                "append",
                json!({"key": "p/0", "value": 2}),
            ),
            op(7, 700, nem, Info, "kill", json!("n1")),
        ];
        ops[4].node = Some("n1".into());
        ops[1].node = Some("n1".into());
        ops[3].node = Some("n2".into());
        ops[5].error = Some(json!("not_leader"));
        History::from_source("store/t/1/history.jsonl", ops, (1..=8).collect())
    }

    #[test]
    fn small_history_data() {
        let page = page(&small());
        let meta = json_block(&page, "tl-meta");
        assert_eq!(meta["source"], "store/t/1/history.jsonl");
        assert_eq!(meta["entries"], 8);
        assert_eq!(meta["ops"], 5);
        assert_eq!(
            (meta["t0"].as_u64(), meta["t1"].as_u64()),
            (Some(100), Some(700))
        );
        assert_eq!(meta["width"], WIDTH);
        assert_eq!(meta["index_base"], 0);
        assert_eq!(meta["procs"], json!(["nemesis", "0", "1", "2"]));
        assert_eq!(meta["nemesis"], 0);
        assert_eq!(
            meta["fs"],
            json!(["start-partition", "append", "read", "kill"])
        );
        assert_eq!(meta["nodes"], json!(["n1", "n2"]));
        assert_eq!(meta["fcolours"], json!(["#E9DCA0", null, null, "#E9A4A0"]));
        assert_eq!(meta["packed"], false);
        // Client 2 starts after client 1 ended (position 5), so packing reuses a column.
        assert_eq!(meta["lanes"], json!([0, 1, 2, 1]));
        assert_eq!(meta["nlanes"], 3);

        let cols = json_block(&page, "tl-cols");
        #[rustfmt::skip]
        let expected = json!([
            // col, f, dt, latency, outcome, dpos, completion offset, node
            0, 0, 0, 100, 2, 0, 2, -1,    // nemesis start-partition 0..2, info
            1, 1, 50, 300, 0, 1, 3, 0,    // process 0 append 1..4, ok, n1
            2, 2, 150, 200, 1, 2, 2, 1,   // process 1 read 3..5, fail, n2
            3, 1, 300, -1, 2, 3, -1, -1,  // process 2 append 6, never completed: info
            0, 3, 100, -1, 2, 1, -1, -1,  // nemesis kill 7, open
        ]);
        assert_eq!(cols, expected);

        let lines: Vec<Value> = block(&page, "tl-values")
            .lines()
            .map(|l| serde_json::from_str(l).expect("line"))
            .collect();
        assert_eq!(
            lines,
            vec![
                json!([null, {"n1": ["n2"]}]),
                json!([{"key": "p/0", "value": 1}, {"key": "p/0", "value": 1, "offset": 0}]),
                json!([{"key": "p/0"}, {"key": "p/0"}, "not_leader"]),
                json!([{"key": "p/0", "value": 2}]),
                json!(["n1"]),
            ]
        );
        // Header and legend.
        assert!(page.contains("<title>Timeline: history.jsonl</title>"));
        assert!(
            page.contains("5 operations (8 history entries), 3 client processes and the nemesis")
        );
        assert!(page.contains("from 0.000 s to 0.000 s"));
        assert!(page.contains("nemesis: partition"));
        assert!(page.contains("nemesis: kill"));
        assert!(page.contains(r#"<div id="timeline"><div id="tl-canvas"></div></div>"#));
    }

    #[test]
    fn hostile_values_cannot_break_out() {
        use OpType::*;
        let evil = "</script><script>alert(1)</script><!-- x";
        let mut ops = vec![
            op(
                0,
                0,
                Process::Client(0),
                Invoke,
                "<b>f</b>",
                json!({ "v": evil }),
            ),
            op(1, 5, Process::Client(0), Ok, "<b>f</b>", json!(evil)),
        ];
        ops[0].node = Some("</script>".into());
        ops[1].error = Some(json!({ "why": evil }));
        let history = History::from_source("<img src=x>.jsonl", ops, vec![1, 2]);
        let page = page(&history);
        // Only our own five scripts end, and no comment opens.
        assert_eq!(page.matches("</script>").count(), 5, "{page}");
        assert!(!page.contains("<!--"));
        assert!(!page.contains("<img"));
        assert!(page.contains("&lt;img src=x&gt;.jsonl"));
        // The data still decodes to the original text.
        let meta = json_block(&page, "tl-meta");
        assert_eq!(meta["fs"], json!(["<b>f</b>"]));
        assert_eq!(meta["nodes"], json!(["</script>"]));
        assert_eq!(meta["source"], "<img src=x>.jsonl");
        let line: Value = serde_json::from_str(block(&page, "tl-values").trim_end()).expect("line");
        assert_eq!(line, json!([{ "v": evil }, evil, { "why": evil }]));
    }

    #[test]
    fn indexes_lead_to_ops() {
        use OpType::*;
        let c = Process::Client;
        // Dense indexes from 10: an index base, no index columns.
        let dense = History::from_ops(vec![
            op(10, 1, c(0), Invoke, "read", json!(null)),
            op(11, 2, c(0), Ok, "read", json!(1)),
        ]);
        let page_dense = page(&dense);
        let meta = json_block(&page_dense, "tl-meta");
        assert_eq!(
            (meta["index_base"].as_u64(), meta["width"].as_u64()),
            (Some(10), Some(8))
        );
        // Sparse indexes: written per op, as deltas.
        let sparse = History::from_ops(vec![
            op(3, 1, c(0), Invoke, "read", json!(null)),
            op(7, 2, c(1), Invoke, "read", json!(null)),
            op(20, 3, c(0), Ok, "read", json!(1)),
            op(21, 4, c(1), Info, "read", json!(null)),
        ]);
        let page_sparse = page(&sparse);
        let meta = json_block(&page_sparse, "tl-meta");
        assert_eq!(meta["index_base"], Value::Null);
        assert_eq!(meta["width"], WIDTH_WITH_INDEXES);
        let cols = json_block(&page_sparse, "tl-cols");
        let cols = cols.as_array().expect("array");
        let rows: Vec<&[Value]> = cols.chunks(WIDTH_WITH_INDEXES).collect();
        // Invocation index 3, completion 3 + 17 = 20; then 3 + 4 = 7, completion 7 + 14.
        assert_eq!(rows[0][8..], [json!(3), json!(17)]);
        assert_eq!(rows[1][8..], [json!(4), json!(14)]);
        // The script makes both indexes of an op addressable and jumps to the hash.
        for needle in [
            r##"d.id = "i" + index"##,
            r##"a.id = "i" + ci"##,
            r#"setAttribute("data-index""#,
            r#"className = "op "#,
            "hashchange",
            "dataset.scriptErrors = \"0\"",
            "dataset.ops = String(n)",
        ] {
            assert!(page_sparse.contains(needle), "{needle}");
        }
    }

    /// A log workload of `n` operations over 8 processes, some reads with records,
    /// some info, plus a nemesis.
    fn generated(n: u64) -> History {
        use OpType::*;
        let mut ops = Vec::with_capacity(2 * n as usize + 16);
        let mut time = 0u64;
        let mut push = |ops: &mut Vec<Op>, p: Process, kind: OpType, f: &str, value: Value| {
            time += 40_000 + (ops.len() as u64 * 7919) % 900_000;
            let index = ops.len() as u64;
            let mut o = op(index, time, p, kind, f, value);
            if p.is_client() {
                o.node = Some(format!("n{}", index % 3 + 1));
            }
            ops.push(o);
        };
        let mut process = 8;
        for i in 0..n {
            if i % 10_000 == 5_000 {
                push(
                    &mut ops,
                    Process::Nemesis,
                    Info,
                    "start-partition",
                    json!("majority"),
                );
                push(
                    &mut ops,
                    Process::Nemesis,
                    Info,
                    "start-partition",
                    json!({"n1": ["n2", "n3"]}),
                );
                continue;
            }
            let p = Process::Client(i % 8 + process - 8);
            let key = format!("p/{}", i % 4);
            if i % 5 == 0 {
                push(
                    &mut ops,
                    p,
                    Invoke,
                    "read",
                    json!({"key": key, "offset": i / 2}),
                );
                let records: Vec<[u64; 2]> = (0..3).map(|r| [i / 2 + r, i + r]).collect();
                push(
                    &mut ops,
                    p,
                    Ok,
                    "read",
                    json!({"key": key, "offset": i / 2, "records": records}),
                );
            } else {
                push(
                    &mut ops,
                    p,
                    Invoke,
                    "append",
                    json!({"key": key, "value": i}),
                );
                if i % 97 == 0 {
                    push(&mut ops, p, Info, "append", json!({"key": key, "value": i}));
                    process += 1;
                } else {
                    push(
                        &mut ops,
                        p,
                        Ok,
                        "append",
                        json!({"key": key, "value": i, "offset": i / 4}),
                    );
                }
            }
        }
        let lines = (1..=ops.len()).collect();
        History::from_source("history.jsonl", ops, lines)
    }

    #[test]
    fn size_per_op_is_bounded() {
        let history = generated(100_000);
        let operations = history::pair(&history).expect("pairs");
        let mut out = Vec::new();
        write_page(&history, &operations, &mut out).expect("writes");
        let per_op = out.len() as f64 / operations.len() as f64;
        let per_entry = out.len() as f64 / history.len() as f64;
        eprintln!(
            "{} operations, {} entries: {} bytes, {per_op:.1} per operation, {per_entry:.1} per entry",
            operations.len(),
            history.len(),
            out.len()
        );
        assert!(per_op < 150.0, "{per_op} bytes per operation");
        let meta = json_block(std::str::from_utf8(&out).expect("utf-8"), "tl-meta");
        assert_eq!(meta["ops"].as_u64(), Some(operations.len() as u64));
        assert_eq!(meta["packed"], true, "over a thousand processes");
    }

    #[test]
    fn write_reports_the_bytes_of_the_file() {
        let dir = std::env::temp_dir().join(format!("timeline-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let out = dir.join("timeline.html");
        let bytes = write(&small(), &out).expect("writes");
        assert_eq!(std::fs::metadata(&out).expect("file").len(), bytes);
        let missing = write(&small(), &dir.join("no/such/dir/timeline.html"));
        assert!(matches!(missing, Err(ReportError::Io { .. })));
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    /// Runs the page's scripts in node against a minimal DOM ([`DOM_STUB`]), when node is
    /// installed: the initial draw, a link to a completion's index, a hash change, controls.
    #[test]
    fn script_runs_against_a_minimal_dom() {
        let dir = std::env::temp_dir().join(format!("timeline-dom-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("stub.js"), DOM_STUB).expect("stub");
        std::fs::write(dir.join("timeline.html"), page(&small())).expect("page");
        let steps = "#i6,tl-time,tl-zoom-out,tl-packed,tl-per-process,tl-order,tl-zoom-in,#i99";
        let output = std::process::Command::new("node")
            .current_dir(&dir)
            .args(["stub.js", "timeline.html", "#i4", steps])
            .output();
        std::fs::remove_dir_all(&dir).expect("cleanup");
        let Ok(output) = output else {
            eprintln!("node not found: script not run");
            return;
        };
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{stderr}");
        let out: Value = serde_json::from_slice(&output.stdout).expect("json");
        assert_eq!(out["errors"], "0", "{out}");
        assert_eq!(out["ops"], "5");
        // #i4 is the completion of the append invoked at 1: that bar is highlighted, and
        // carries both anchors.
        assert_eq!(out["initial"]["hl"], json!(["1"]), "{out}");
        let ids = out["initial"]["ids"].as_array().expect("ids");
        for id in ["i0", "i2", "i1", "i4", "i3", "i5", "i6", "i7"] {
            assert!(ids.contains(&json!(id)), "{id} in {ids:?}");
        }
        let classes: Vec<&str> = out["initial"]["bars"]
            .as_array()
            .expect("bars")
            .iter()
            .filter_map(|b| b["cls"].as_str())
            .collect();
        assert_eq!(
            classes,
            [
                "op info nemesis",
                "op ok hl",
                "op fail",
                "op info open",
                "op info nemesis open"
            ]
        );
        assert!(out["panel"]
            .as_str()
            .expect("panel")
            .contains("index1 → 4process0fappend"));
        assert_eq!(out["#i6"]["hl"], json!(["6"]));
        assert_eq!(out["tl-order"]["bars"].as_array().map(Vec::len), Some(5));
        assert_eq!(out["status"], "no operation with index 99");
    }

    /// A minimal DOM for [`script_runs_against_a_minimal_dom`]: `node stub.js <page>
    /// [hash] [steps]` prints what the scripts drew, as JSON.
    const DOM_STUB: &str = include_str!("../testdata/timeline-dom-stub.js");
}
