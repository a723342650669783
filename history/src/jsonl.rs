//! The harness's own history format: one JSON object per line (DESIGN.md §4).
//!
//! The writer streams while a test runs. It hands the OS whole lines only, and flushes at
//! least every [`FLUSH_INTERVAL`] or every `flush_every` ops, so a harness killed at any
//! moment leaves a history that reads up to its last flush. A kill can still cut a
//! `write(2)` short (Linux stops a write at a page boundary once a fatal signal is
//! pending), so the reader drops an incomplete *last* line and says where
//! ([`History::torn_tail`]); damage anywhere else is an error.

use crate::error::{HistoryError, Location};
use crate::history::History;
use crate::op::{Op, OpType, Process};
use serde::Deserialize;
use serde_json::Value;
use std::fs::File;
use std::io::{self, Write};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// The longest an appended op waits in memory before it reaches the file.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(100);
/// Default number of buffered ops that forces a flush.
pub const DEFAULT_FLUSH_EVERY: usize = 1024;

/// A line as written: like [`Op`] but with `index`/`time` optional and `type` checked by
/// hand, so that an unknown type gets a clear message.
#[derive(Deserialize)]
struct LineOp {
    index: Option<u64>,
    time: Option<u64>,
    process: Process,
    #[serde(rename = "type")]
    kind: String,
    f: String,
    #[serde(default)]
    value: Value,
    #[serde(default)]
    node: Option<String>,
    #[serde(default)]
    error: Option<Value>,
}

/// Reads a JSONL history file.
pub fn read_jsonl(path: &Path) -> Result<History, HistoryError> {
    let text = crate::text::read_text(path)?;
    let history = parse_jsonl(&path.display().to_string(), &text)?;
    history.check_index_order()?;
    Ok(history)
}

/// Texts below this size are parsed on one thread; above it, in one chunk per core.
const PARALLEL_THRESHOLD: usize = 4 << 20;

/// Parses JSONL text; `source` names it in errors. Blank lines are skipped. A last line
/// without its newline that does not parse is the torn tail of a killed writer: it is
/// dropped and its place kept in [`History::torn_tail`]. Any other bad line is an error.
/// Large texts are split at line boundaries and parsed on every core.
pub fn parse_jsonl(source: &str, text: &str) -> Result<History, HistoryError> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunks = if text.len() < PARALLEL_THRESHOLD || threads < 2 {
        vec![text]
    } else {
        split_at_lines(text, threads)
    };
    let last = chunks.len() - 1;
    let parsed: Vec<Result<Chunk, ChunkError>> = if chunks.len() == 1 {
        vec![parse_chunk(text, true)]
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = chunks
                .iter()
                .enumerate()
                .map(|(i, chunk)| scope.spawn(move || parse_chunk(chunk, i == last)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(ChunkError {
                            line: 1,
                            message: "history parser thread panicked".into(),
                        })
                    })
                })
                .collect()
        })
    };
    let mut ops = Vec::with_capacity(parsed.iter().flatten().map(|c| c.ops.len()).sum());
    let mut lines = Vec::with_capacity(ops.capacity());
    let mut torn_tail = None;
    let mut lines_before = 0;
    for (chunk_text, chunk) in chunks.iter().zip(parsed) {
        let chunk = chunk.map_err(|e| {
            HistoryError::parse(
                Location {
                    source: Some(source.to_string()),
                    line: lines_before + e.line,
                },
                e.message,
            )
        })?;
        if let Some(line) = chunk.torn_line {
            torn_tail = Some(Location {
                source: Some(source.to_string()),
                line: lines_before + line,
            });
        }
        for (mut op, (line, index)) in chunk
            .ops
            .into_iter()
            .zip(chunk.lines.into_iter().zip(chunk.indices))
        {
            // Ops without an index are numbered by their position in the whole file.
            op.index = index.unwrap_or(ops.len() as u64);
            ops.push(op);
            lines.push(lines_before + line);
        }
        lines_before += chunk_text.bytes().filter(|&b| b == b'\n').count();
    }
    if let (true, Some(torn)) = (ops.is_empty(), torn_tail.as_ref()) {
        // A writer killed mid-write leaves its last line cut short after complete ones;
        // text with no complete op line at all is no history.
        return Err(HistoryError::parse(
            torn.clone(),
            "not a history line (no complete op line before it)",
        ));
    }
    let mut history = History::from_source(source, ops, lines);
    history.torn_tail = torn_tail;
    Ok(history)
}

/// Splits `text` into about `parts` pieces, each ending just after a newline (the last
/// one at the end of the text).
fn split_at_lines(text: &str, parts: usize) -> Vec<&str> {
    let mut pieces = Vec::with_capacity(parts);
    let mut start = 0;
    for k in 1..parts {
        let target = (text.len() * k / parts).max(start);
        let Some(newline) = text
            .as_bytes()
            .get(target..)
            .and_then(|rest| rest.iter().position(|&b| b == b'\n'))
        else {
            break;
        };
        let end = target + newline + 1;
        if let Some(piece) = text.get(start..end) {
            pieces.push(piece);
            start = end;
        }
    }
    pieces.push(text.get(start..).unwrap_or_default());
    pieces
}

/// The ops of one chunk, with chunk-relative 1-based lines and the index each line gave.
struct Chunk {
    ops: Vec<Op>,
    lines: Vec<usize>,
    indices: Vec<Option<u64>>,
    /// Chunk-relative line of a dropped incomplete last line.
    torn_line: Option<usize>,
}

/// A parse error at a chunk-relative line.
struct ChunkError {
    line: usize,
    message: String,
}

fn parse_chunk(text: &str, is_last: bool) -> Result<Chunk, ChunkError> {
    let mut chunk = Chunk {
        ops: Vec::new(),
        lines: Vec::new(),
        indices: Vec::new(),
        torn_line: None,
    };
    let ends_with_newline = text.ends_with('\n');
    let mut lines = text.lines().enumerate().peekable();
    while let Some((i, line)) = lines.next() {
        let line_number = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let raw: LineOp = match serde_json::from_str(line) {
            Ok(raw) => raw,
            Err(_) if is_last && lines.peek().is_none() && !ends_with_newline => {
                chunk.torn_line = Some(line_number);
                break;
            }
            Err(e) => {
                return Err(ChunkError {
                    line: line_number,
                    message: format!("bad history line: {e}"),
                });
            }
        };
        let kind = OpType::parse(&raw.kind).ok_or_else(|| ChunkError {
            line: line_number,
            message: format!(
                "unknown op type {:?}: expected invoke, ok, fail or info",
                raw.kind
            ),
        })?;
        chunk.indices.push(raw.index);
        chunk.ops.push(Op {
            index: 0,
            time: raw.time.unwrap_or(0),
            process: raw.process,
            kind,
            f: raw.f,
            value: raw.value,
            node: raw.node,
            error: raw.error,
        });
        chunk.lines.push(line_number);
    }
    Ok(chunk)
}

/// Writes `ops` as JSONL text (for tests and exports; tests stream with [`JsonlWriter`]).
pub fn to_jsonl(ops: &[Op]) -> String {
    let mut out = Vec::new();
    for op in ops {
        // Serializing an Op (strings, numbers, JSON values) to memory cannot fail.
        if serde_json::to_writer(&mut out, op).is_ok() {
            out.push(b'\n');
        }
    }
    String::from_utf8(out).unwrap_or_default()
}

struct WriterState {
    file: File,
    /// Whole serialized lines not yet written to `file`.
    buffer: Vec<u8>,
    buffered_ops: usize,
    closed: bool,
    /// The first write error of the background flusher, reported by the next call.
    error: Option<io::Error>,
}

impl WriterState {
    fn flush(&mut self) -> io::Result<()> {
        if !self.buffer.is_empty() {
            self.file.write_all(&self.buffer)?;
            self.buffer.clear();
            self.buffered_ops = 0;
        }
        Ok(())
    }
}

struct Shared {
    state: Mutex<WriterState>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, WriterState> {
        // A panic while holding the lock leaves plain bytes behind; keep using them.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Streams ops to a JSONL file as they happen. Cheap to share behind an `Arc`.
pub struct JsonlWriter {
    shared: Arc<Shared>,
    flush_every: usize,
    flusher: Option<JoinHandle<()>>,
}

impl JsonlWriter {
    /// Creates (truncates) `path` and starts the background flusher.
    pub fn create(path: &Path) -> Result<JsonlWriter, HistoryError> {
        Self::with_flush_every(path, DEFAULT_FLUSH_EVERY)
    }

    /// As [`create`](Self::create), flushing whenever `flush_every` ops are buffered.
    pub fn with_flush_every(path: &Path, flush_every: usize) -> Result<JsonlWriter, HistoryError> {
        let file = File::create(path).map_err(|e| HistoryError::io(path, e))?;
        let shared = Arc::new(Shared {
            state: Mutex::new(WriterState {
                file,
                buffer: Vec::with_capacity(64 * 1024),
                buffered_ops: 0,
                closed: false,
                error: None,
            }),
            wake: Condvar::new(),
        });
        let background = Arc::clone(&shared);
        let flusher = std::thread::Builder::new()
            .name("history-flusher".into())
            .spawn(move || flush_periodically(&background))
            .map_err(|e| HistoryError::io(path, e))?;
        Ok(JsonlWriter {
            shared,
            flush_every: flush_every.max(1),
            flusher: Some(flusher),
        })
    }

    /// Appends one op. It reaches the file within [`FLUSH_INTERVAL`].
    pub fn append(&self, op: &Op) -> io::Result<()> {
        let mut state = self.shared.lock();
        if let Some(e) = state.error.take() {
            return Err(e);
        }
        if state.closed {
            return Err(io::Error::other("history writer is closed"));
        }
        serde_json::to_writer(&mut state.buffer, op).map_err(io::Error::other)?;
        state.buffer.push(b'\n');
        state.buffered_ops += 1;
        if state.buffered_ops >= self.flush_every {
            state.flush()?;
        }
        Ok(())
    }

    /// Writes everything buffered now.
    pub fn flush(&self) -> io::Result<()> {
        let mut state = self.shared.lock();
        if let Some(e) = state.error.take() {
            return Err(e);
        }
        state.flush()
    }

    /// Flushes, syncs to disk and stops the flusher.
    pub fn finish(mut self) -> io::Result<()> {
        self.close()
    }

    fn close(&mut self) -> io::Result<()> {
        let result = {
            let mut state = self.shared.lock();
            state.closed = true;
            let pending = state.error.take();
            match pending {
                Some(e) => Err(e),
                None => state.flush().and_then(|()| state.file.sync_data()),
            }
        };
        self.shared.wake.notify_all();
        if let Some(handle) = self.flusher.take() {
            let _ = handle.join();
        }
        result
    }
}

impl Drop for JsonlWriter {
    fn drop(&mut self) {
        if self.flusher.is_some() {
            let _ = self.close();
        }
    }
}

fn flush_periodically(shared: &Shared) {
    let mut state = shared.lock();
    loop {
        if state.closed {
            return;
        }
        let (next, _) = shared
            .wake
            .wait_timeout(state, FLUSH_INTERVAL)
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        state = next;
        if state.closed {
            return;
        }
        if state.error.is_none() {
            if let Err(e) = state.flush() {
                state.error = Some(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> Vec<Op> {
        let mut a = Op::new(
            0,
            Process::Client(0),
            OpType::Invoke,
            "append",
            json!({"key": "t/0", "value": 1}),
        );
        a.time = 5;
        a.node = Some("n1".into());
        let mut b = Op::new(
            1,
            Process::Client(0),
            OpType::Ok,
            "append",
            json!({"key": "t/0", "value": 1, "offset": 0}),
        );
        b.time = 9;
        let mut c = Op::new(
            2,
            Process::Nemesis,
            OpType::Info,
            "kill",
            json!({"nodes": ["n2"]}),
        );
        c.error = Some(json!("boom"));
        vec![a, b, c]
    }

    #[test]
    fn round_trips() {
        let ops = sample();
        let text = to_jsonl(&ops);
        let h = parse_jsonl("x.jsonl", &text).unwrap();
        assert_eq!(h.ops, ops);
        assert_eq!(h.lines, vec![1, 2, 3]);
    }

    #[test]
    fn unknown_type_names_the_line() {
        let text = "{\"index\":0,\"process\":0,\"type\":\"invoke\",\"f\":\"read\"}\n{\"index\":1,\"process\":0,\"type\":\"okay\",\"f\":\"read\"}\n";
        let err = parse_jsonl("h.jsonl", text).unwrap_err().to_string();
        assert!(
            err.starts_with("h.jsonl:2: unknown op type \"okay\""),
            "{err}"
        );
    }

    #[test]
    fn a_torn_last_line_is_dropped_and_its_place_kept() {
        let mut text = to_jsonl(&sample());
        text.truncate(text.len() - 10);
        let h = parse_jsonl("h.jsonl", &text).unwrap();
        assert_eq!(h.ops, sample()[..2].to_vec());
        assert_eq!(
            h.torn_tail.map(|l| l.to_string()),
            Some("h.jsonl:3".to_string())
        );
        // The same damage with a newline after it, or further up, is an error.
        text.push('\n');
        let err = parse_jsonl("h.jsonl", &text).unwrap_err().to_string();
        assert!(err.starts_with("h.jsonl:3: bad history line"), "{err}");
        let whole = to_jsonl(&sample());
        let broken = whole.replacen("\"f\":\"append\"", "\"f\":", 1);
        let err = parse_jsonl("h.jsonl", &broken).unwrap_err().to_string();
        assert!(err.starts_with("h.jsonl:1: bad history line"), "{err}");
    }

    #[test]
    fn a_torn_line_with_nothing_before_it_is_no_history() {
        let err = parse_jsonl("g.jsonl", "this is total garbage, not json")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "g.jsonl:1: not a history line (no complete op line before it)"
        );
        let err = parse_jsonl("g.jsonl", "\n\n{\"index\":0,\"proc")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("g.jsonl:3: not a history line"), "{err}");
    }

    #[test]
    fn large_texts_parse_in_chunks_with_whole_file_lines() {
        let op = Op::new(
            0,
            Process::Client(1),
            OpType::Invoke,
            "read",
            json!({"key": "k", "pad": "x".repeat(200)}),
        );
        let line = serde_json::to_string(&op).unwrap();
        let count = PARALLEL_THRESHOLD / line.len() * 3;
        let mut text = String::new();
        for i in 0..count {
            // No index field: positions number them. A blank line now and then.
            text.push_str(&line.replace("\"index\":0,", ""));
            text.push('\n');
            if i % 1000 == 0 {
                text.push('\n');
            }
        }
        let h = parse_jsonl("big.jsonl", &text).unwrap();
        assert_eq!(h.len(), count);
        assert!(h.ops.iter().enumerate().all(|(i, op)| op.index == i as u64));
        let text_lines: Vec<&str> = text.lines().collect();
        for probe in [0, count / 3, count / 2, count - 1] {
            assert!(!text_lines[h.lines[probe] - 1].is_empty());
        }
        assert_eq!(h.lines[count - 1], text_lines.len());
        // An error deep in the file still names its line in the whole file.
        let bad_line = text_lines.len() - 5;
        let mut broken: Vec<String> = text_lines.iter().map(|l| l.to_string()).collect();
        broken[bad_line - 1] = "{\"process\":0,\"type\":\"nope\",\"f\":\"read\"}".into();
        let err = parse_jsonl("big.jsonl", &(broken.join("\n") + "\n"))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(&format!("big.jsonl:{bad_line}: unknown op type")),
            "{err}"
        );
    }

    #[test]
    fn bad_process_is_reported() {
        let text = "{\"index\":0,\"process\":\"bob\",\"type\":\"invoke\",\"f\":\"read\"}\n";
        let err = parse_jsonl("h.jsonl", text).unwrap_err().to_string();
        assert!(
            err.contains("h.jsonl:1:") && err.contains("unknown process"),
            "{err}"
        );
    }

    #[test]
    fn writer_flushes_on_its_own_within_the_interval() {
        let dir = std::env::temp_dir().join(format!("history-writer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("history.jsonl");
        let writer = JsonlWriter::with_flush_every(&path, 1_000_000).unwrap();
        for op in sample() {
            writer.append(&op).unwrap();
        }
        // Not flushed by count; the background flusher must write it. Poll, bounded.
        let mut read = History::default();
        for _ in 0..100 {
            std::thread::sleep(Duration::from_millis(20));
            read = read_jsonl(&path).unwrap();
            if read.len() == 3 {
                break;
            }
        }
        assert_eq!(read.ops, sample());
        writer.finish().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn writer_flushes_every_n_ops() {
        let dir = std::env::temp_dir().join(format!("history-writer-n-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("history.jsonl");
        let writer = JsonlWriter::with_flush_every(&path, 2).unwrap();
        let ops = sample();
        writer.append(&ops[0]).unwrap();
        writer.append(&ops[1]).unwrap();
        // Two ops reached the count: they are in the file before any timer could fire.
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2);
        drop(writer);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
