//! The harness's own history format: one JSON object per line (DESIGN.md §4).
//!
//! The writer streams while a test runs. It only ever writes whole lines, and flushes at
//! least every [`FLUSH_INTERVAL`] or every `flush_every` ops, so a harness killed at any
//! moment leaves a history that reads cleanly up to its last flush.

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
    let text = std::fs::read_to_string(path).map_err(|e| HistoryError::io(path, e))?;
    parse_jsonl(&path.display().to_string(), &text)
}

/// Parses JSONL text; `source` names it in errors. Blank lines are skipped. A last line
/// without its newline that does not parse is reported as truncated.
pub fn parse_jsonl(source: &str, text: &str) -> Result<History, HistoryError> {
    let mut ops = Vec::new();
    let mut lines = Vec::new();
    let ends_with_newline = text.ends_with('\n');
    let line_count = text.lines().count();
    for (i, line) in text.lines().enumerate() {
        let line_number = i + 1;
        let location = || Location {
            source: Some(source.to_string()),
            line: line_number,
        };
        if line.trim().is_empty() {
            continue;
        }
        let raw: LineOp = match serde_json::from_str(line) {
            Ok(raw) => raw,
            Err(e) => {
                let truncated = line_number == line_count && !ends_with_newline && e.is_eof();
                let message = if truncated {
                    format!("truncated line (the file ends mid-op): {e}")
                } else {
                    format!("bad history line: {e}")
                };
                return Err(HistoryError::parse(location(), message));
            }
        };
        let kind = OpType::parse(&raw.kind).ok_or_else(|| {
            HistoryError::parse(
                location(),
                format!(
                    "unknown op type {:?}: expected invoke, ok, fail or info",
                    raw.kind
                ),
            )
        })?;
        ops.push(Op {
            index: raw.index.unwrap_or(ops.len() as u64),
            time: raw.time.unwrap_or(0),
            process: raw.process,
            kind,
            f: raw.f,
            value: raw.value,
            node: raw.node,
            error: raw.error,
        });
        lines.push(line_number);
    }
    Ok(History::from_source(source, ops, lines))
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
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
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
        let mut a = Op::new(0, Process::Client(0), OpType::Invoke, "append", json!({"key": "t/0", "value": 1}));
        a.time = 5;
        a.node = Some("n1".into());
        let mut b = Op::new(1, Process::Client(0), OpType::Ok, "append", json!({"key": "t/0", "value": 1, "offset": 0}));
        b.time = 9;
        let mut c = Op::new(2, Process::Nemesis, OpType::Info, "kill", json!({"nodes": ["n2"]}));
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
        assert!(err.starts_with("h.jsonl:2: unknown op type \"okay\""), "{err}");
    }

    #[test]
    fn truncated_last_line_is_reported() {
        let mut text = to_jsonl(&sample());
        text.truncate(text.len() - 10);
        let err = parse_jsonl("h.jsonl", &text).unwrap_err().to_string();
        assert!(err.starts_with("h.jsonl:3: truncated line"), "{err}");
    }

    #[test]
    fn bad_process_is_reported() {
        let text = "{\"index\":0,\"process\":\"bob\",\"type\":\"invoke\",\"f\":\"read\"}\n";
        let err = parse_jsonl("h.jsonl", text).unwrap_err().to_string();
        assert!(err.contains("h.jsonl:1:") && err.contains("unknown process"), "{err}");
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
