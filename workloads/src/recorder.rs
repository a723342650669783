//! The history recorder: every client operation and nemesis fault of a running test,
//! streamed to `history.jsonl` as it happens (DESIGN.md §3 "Store", §4).
//!
//! A [`Recorder`] is a cheap, cloneable handle shared by every worker and the nemesis. Each
//! entry gets its `index` (dense, from 0) and `time` (nanoseconds since the recorder's
//! start, from the monotonic clock) under one lock, together with its hand-over to the
//! [`JsonlWriter`], so the file is in index order and times never go backwards along it.
//! The writer flushes whole lines at least every 100 ms (or every N entries): a harness
//! killed mid-run leaves a history that reads up to the last flush, and a recorder
//! dropped mid-run (every clone gone) flushes what it holds.
//!
//! Client ops are an [`Recorder::invoke`] followed by exactly one
//! [`Recorder::complete`] with an [`Outcome`] (`ok`, `fail` or `info`, checking.md).
//! Nemesis ops are `info` on both sides ([`Recorder::nemesis_invoke`] /
//! [`Recorder::nemesis_complete`]) with process `"nemesis"`. Live counts per `f`, for a
//! progress bar, are in [`Recorder::counts`].

use history::jsonl::{JsonlWriter, DEFAULT_FLUSH_EVERY};
use history::{HistoryError, Op, OpType, Outcome, Process};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Why an entry could not be recorded.
#[derive(Debug, thiserror::Error)]
pub enum RecorderError {
    /// The history file could not be created.
    #[error(transparent)]
    Create(#[from] HistoryError),
    /// Writing to the history file failed; every later entry fails the same way, since a
    /// history with a hole in it cannot be checked.
    #[error("writing history {path}: {message}")]
    Write { path: PathBuf, message: String },
    /// [`Recorder::finish`] was called; nothing more can be recorded.
    #[error("history {path} is already finished")]
    Finished { path: PathBuf },
}

/// How many client operations of one `f` were invoked and how they ended so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct OpCounts {
    pub invoked: u64,
    pub ok: u64,
    pub fail: u64,
    pub info: u64,
}

impl OpCounts {
    /// Invoked and not yet completed.
    pub fn pending(&self) -> u64 {
        self.invoked.saturating_sub(self.ok + self.fail + self.info)
    }

    fn add(&mut self, other: &OpCounts) {
        self.invoked += other.invoked;
        self.ok += other.ok;
        self.fail += other.fail;
        self.info += other.info;
    }
}

/// Live counts of a recording: per client `f`, plus nemesis entries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RecordCounts {
    /// Client operations by `f` (`append`, `read`, `write`, ...).
    pub by_f: BTreeMap<String, OpCounts>,
    /// Nemesis entries (each fault is two: its start and its completion).
    pub nemesis_entries: u64,
    /// Every line written (or buffered for writing): client and nemesis entries.
    pub entries: u64,
}

impl RecordCounts {
    /// All client operations together.
    pub fn total(&self) -> OpCounts {
        let mut total = OpCounts::default();
        for counts in self.by_f.values() {
            total.add(counts);
        }
        total
    }

    /// The counts of one `f` (zero if it never occurred).
    pub fn of(&self, f: &str) -> OpCounts {
        self.by_f.get(f).copied().unwrap_or_default()
    }
}

/// A client operation that was invoked and awaits its completion. Complete it exactly
/// once with [`Recorder::complete`]; one never completed stays open in the history, which
/// the checkers read as `info` (it may have happened).
#[derive(Debug)]
#[must_use = "an invocation must be completed with Recorder::complete"]
pub struct Invocation {
    process: u64,
    f: String,
    node: Option<String>,
    index: u64,
    time: u64,
}

impl Invocation {
    pub fn process(&self) -> u64 {
        self.process
    }

    pub fn f(&self) -> &str {
        &self.f
    }

    /// The `index` of the invoke entry.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// The `time` of the invoke entry (ns since the recorder's start).
    pub fn time(&self) -> u64 {
        self.time
    }
}

/// A nemesis operation that started; complete it with [`Recorder::nemesis_complete`].
#[derive(Debug)]
#[must_use = "a nemesis invocation must be completed with Recorder::nemesis_complete"]
pub struct NemesisInvocation {
    f: String,
    index: u64,
}

impl NemesisInvocation {
    pub fn f(&self) -> &str {
        &self.f
    }

    pub fn index(&self) -> u64 {
        self.index
    }
}

/// Where time zero is and how often the file is flushed by count.
#[derive(Debug, Clone, Copy)]
pub struct RecorderConfig {
    /// `time` 0 of the history: the test's start.
    pub start: Instant,
    /// Buffered entries that force a flush (besides the flush every 100 ms).
    pub flush_every: usize,
}

impl Default for RecorderConfig {
    fn default() -> Self {
        RecorderConfig {
            start: Instant::now(),
            flush_every: DEFAULT_FLUSH_EVERY,
        }
    }
}

/// Records a test's history to a JSONL file. Clone it freely: clones share one file.
#[derive(Clone)]
pub struct Recorder {
    shared: Arc<Shared>,
}

struct Shared {
    path: PathBuf,
    start: Instant,
    state: Mutex<State>,
}

struct State {
    /// `None` once finished.
    writer: Option<JsonlWriter>,
    next_index: u64,
    last_time: u64,
    counts: RecordCounts,
    /// One above the highest client process recorded or reserved.
    next_free_process: u64,
    /// The first write error; once set, nothing more is recorded.
    failure: Option<String>,
}

impl Recorder {
    /// Creates (truncates) `path`; time zero is now.
    pub fn create(path: &Path) -> Result<Recorder, RecorderError> {
        Self::create_with(path, RecorderConfig::default())
    }

    pub fn create_with(path: &Path, config: RecorderConfig) -> Result<Recorder, RecorderError> {
        let writer = JsonlWriter::with_flush_every(path, config.flush_every)?;
        Ok(Recorder {
            shared: Arc::new(Shared {
                path: path.to_path_buf(),
                start: config.start,
                state: Mutex::new(State {
                    writer: Some(writer),
                    next_index: 0,
                    last_time: 0,
                    counts: RecordCounts::default(),
                    next_free_process: 0,
                    failure: None,
                }),
            }),
        })
    }

    /// The history file.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Time since the recorder's start.
    pub fn elapsed(&self) -> Duration {
        self.shared.start.elapsed()
    }

    /// `time` 0 of the history by the wall clock, in ms since the Unix epoch: what ties
    /// the history to the times the nodes write in their logs (on one machine, or hosts
    /// whose clocks agree). Read now, from the wall clock less the time elapsed.
    pub fn wall_start_unix_ms(&self) -> u64 {
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let start = since_epoch.saturating_sub(self.shared.start.elapsed());
        u64::try_from(start.as_millis()).unwrap_or(u64::MAX)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent counters behind: keep going.
        self.shared
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Stamps `op` with the next index and the current time and hands it to the writer.
    fn append(&self, state: &mut State, op: &mut Op) -> Result<(), RecorderError> {
        if let Some(message) = &state.failure {
            return Err(RecorderError::Write {
                path: self.shared.path.clone(),
                message: message.clone(),
            });
        }
        let Some(writer) = &state.writer else {
            return Err(RecorderError::Finished {
                path: self.shared.path.clone(),
            });
        };
        let now = u64::try_from(self.shared.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        // Instant is monotonic; the max only guards the invariant against a start given
        // in the future.
        let time = now.max(state.last_time);
        op.index = state.next_index;
        op.time = time;
        if let Err(e) = writer.append(op) {
            let message = e.to_string();
            state.failure = Some(message.clone());
            return Err(RecorderError::Write {
                path: self.shared.path.clone(),
                message,
            });
        }
        state.next_index += 1;
        state.last_time = time;
        state.counts.entries += 1;
        Ok(())
    }

    /// Records the invocation of `f` by client `process`, sent to `node`.
    pub fn invoke(
        &self,
        process: u64,
        f: &str,
        value: Value,
        node: Option<&str>,
    ) -> Result<Invocation, RecorderError> {
        let mut op = Op {
            index: 0,
            time: 0,
            process: Process::Client(process),
            kind: OpType::Invoke,
            f: f.to_string(),
            value,
            node: node.map(str::to_string),
            error: None,
        };
        let mut state = self.lock();
        self.append(&mut state, &mut op)?;
        state.next_free_process = state.next_free_process.max(process.saturating_add(1));
        match state.counts.by_f.get_mut(f) {
            Some(counts) => counts.invoked += 1,
            None => {
                state.counts.by_f.insert(
                    f.to_string(),
                    OpCounts {
                        invoked: 1,
                        ..OpCounts::default()
                    },
                );
            }
        }
        Ok(Invocation {
            process,
            f: op.f,
            node: op.node,
            index: op.index,
            time: op.time,
        })
    }

    /// Records how `invocation` ended: `ok` (it happened), `fail` (it did not) or `info`
    /// (unknown). `value` is the completion's value; `error` says why it failed.
    pub fn complete(
        &self,
        invocation: Invocation,
        outcome: Outcome,
        value: Value,
        error: Option<String>,
    ) -> Result<(), RecorderError> {
        let kind = match outcome {
            Outcome::Ok => OpType::Ok,
            Outcome::Fail => OpType::Fail,
            Outcome::Info => OpType::Info,
        };
        let mut op = Op {
            index: 0,
            time: 0,
            process: Process::Client(invocation.process),
            kind,
            f: invocation.f,
            value,
            node: invocation.node,
            error: error.map(Value::String),
        };
        let mut state = self.lock();
        self.append(&mut state, &mut op)?;
        let counts = state.counts.by_f.entry(op.f).or_default();
        match outcome {
            Outcome::Ok => counts.ok += 1,
            Outcome::Fail => counts.fail += 1,
            Outcome::Info => counts.info += 1,
        }
        Ok(())
    }

    /// Records the start of a fault (`info`, process `"nemesis"`), e.g. `start-partition`
    /// with a value saying to whom.
    pub fn nemesis_invoke(
        &self,
        f: &str,
        value: Value,
    ) -> Result<NemesisInvocation, RecorderError> {
        let mut op = Op::new(0, Process::Nemesis, OpType::Info, f, value);
        let mut state = self.lock();
        self.append(&mut state, &mut op)?;
        state.counts.nemesis_entries += 1;
        Ok(NemesisInvocation {
            f: op.f,
            index: op.index,
        })
    }

    /// Records that the fault's action is done (`info` again, same `f`), with what was
    /// actually done in `value` and an `error` if it could not be.
    pub fn nemesis_complete(
        &self,
        invocation: NemesisInvocation,
        value: Value,
        error: Option<String>,
    ) -> Result<(), RecorderError> {
        let mut op = Op::new(0, Process::Nemesis, OpType::Info, &invocation.f, value);
        op.error = error.map(Value::String);
        let mut state = self.lock();
        self.append(&mut state, &mut op)?;
        state.counts.nemesis_entries += 1;
        Ok(())
    }

    /// A client process id no entry has used so far, reserved for the caller (final reads
    /// use these, so that their reads are not judged as continuations of a worker's).
    /// Reserve after the workers have stopped: workers derive their ids themselves.
    pub fn reserve_process(&self) -> u64 {
        let mut state = self.lock();
        let process = state.next_free_process;
        state.next_free_process = process.saturating_add(1);
        process
    }

    /// The counts so far (cheap: for a progress bar polled a few times a second).
    pub fn counts(&self) -> RecordCounts {
        self.lock().counts.clone()
    }

    /// Writes everything buffered to the file now.
    pub fn flush(&self) -> Result<(), RecorderError> {
        let state = self.lock();
        match &state.writer {
            Some(writer) => writer.flush().map_err(|e| RecorderError::Write {
                path: self.shared.path.clone(),
                message: e.to_string(),
            }),
            None => Ok(()),
        }
    }

    /// Flushes and syncs the file and stops recording; returns the final counts. Calling
    /// it again returns the counts again. Later `invoke`/`complete` calls fail.
    pub fn finish(&self) -> Result<RecordCounts, RecorderError> {
        let mut state = self.lock();
        if let Some(writer) = state.writer.take() {
            if let Err(e) = writer.finish() {
                let message = e.to_string();
                state.failure.get_or_insert(message.clone());
                return Err(RecorderError::Write {
                    path: self.shared.path.clone(),
                    message,
                });
            }
        }
        if let Some(message) = &state.failure {
            return Err(RecorderError::Write {
                path: self.shared.path.clone(),
                message: message.clone(),
            });
        }
        Ok(state.counts.clone())
    }
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("path", &self.shared.path)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use history::{pair, read_history};
    use serde_json::json;

    /// A scratch folder for one test, removed when the test is done with it.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir = std::env::temp_dir()
                .join(format!("harness-recorder-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("scratch dir");
            Scratch(dir)
        }

        fn history(&self) -> PathBuf {
            self.0.join("history.jsonl")
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn indices_are_dense_and_times_monotonic_across_threads() {
        let scratch = Scratch::new("threads");
        let path = scratch.history();
        let recorder = Recorder::create(&path).unwrap();
        std::thread::scope(|scope| {
            for t in 0..4u64 {
                let recorder = recorder.clone();
                scope.spawn(move || {
                    for i in 0..500u64 {
                        let f = if i % 2 == 0 { "append" } else { "read" };
                        let inv = recorder
                            .invoke(t, f, json!({"key": "t/0", "value": i}), Some("n1"))
                            .unwrap();
                        let outcome = [Outcome::Ok, Outcome::Fail][(i % 3 == 0) as usize];
                        recorder.complete(inv, outcome, json!(null), None).unwrap();
                    }
                });
            }
        });
        let counts = recorder.finish().unwrap();
        assert_eq!(counts.entries, 4000);
        assert_eq!(counts.total().invoked, 2000);
        assert_eq!(counts.total().pending(), 0);
        assert_eq!(counts.of("append").invoked, 1000);
        let (history, _) = read_history(&path, None).unwrap();
        assert_eq!(history.len(), 4000);
        for (i, op) in history.ops.iter().enumerate() {
            assert_eq!(op.index, i as u64);
        }
        assert!(history.ops.windows(2).all(|w| w[0].time <= w[1].time));
        let operations = pair(&history).unwrap();
        assert_eq!(operations.len(), 2000);
        assert!(operations.iter().all(|o| o.completion.is_some()));
        assert!(history
            .ops
            .iter()
            .all(|op| op.node.as_deref() == Some("n1")));
    }

    #[test]
    fn dropping_the_last_handle_flushes_everything() {
        let scratch = Scratch::new("drop");
        let path = scratch.history();
        // Never flushed by count, and dropped long before the 100 ms flusher fires.
        let recorder = Recorder::create_with(
            &path,
            RecorderConfig {
                start: Instant::now(),
                flush_every: usize::MAX,
            },
        )
        .unwrap();
        let clone = recorder.clone();
        let inv = recorder
            .invoke(0, "write", json!({"key": "t/0", "value": 1}), None)
            .unwrap();
        clone
            .complete(
                inv,
                Outcome::Info,
                json!({"key": "t/0", "value": 1}),
                Some("timeout".into()),
            )
            .unwrap();
        let _open = clone
            .invoke(1, "read", json!({"key": "t/0", "value": null}), None)
            .unwrap();
        drop(recorder);
        drop(clone);
        let (history, _) = read_history(&path, None).unwrap();
        assert_eq!(history.len(), 3);
        assert_eq!(history.ops[1].kind, OpType::Info);
        assert_eq!(history.ops[1].error, Some(json!("timeout")));
        let operations = pair(&history).unwrap();
        assert_eq!(operations[1].completion, None);
    }

    #[test]
    fn nemesis_entries_are_info_on_both_sides_and_pair() {
        let scratch = Scratch::new("nemesis");
        let path = scratch.history();
        let recorder = Recorder::create(&path).unwrap();
        let fault = recorder
            .nemesis_invoke("start-partition", json!({"isolated": ["n2"]}))
            .unwrap();
        let inv = recorder
            .invoke(3, "read", json!({"key": "t/0", "offset": 0}), Some("n1"))
            .unwrap();
        recorder
            .nemesis_complete(fault, json!({"isolated": ["n2"]}), None)
            .unwrap();
        recorder
            .complete(
                inv,
                Outcome::Fail,
                json!({"key": "t/0", "offset": 0}),
                Some("not_leader".into()),
            )
            .unwrap();
        let counts = recorder.finish().unwrap();
        assert_eq!(counts.nemesis_entries, 2);
        assert_eq!(counts.of("read").fail, 1);
        let (history, _) = read_history(&path, None).unwrap();
        assert_eq!(history.ops[0].process, Process::Nemesis);
        assert_eq!(history.ops[0].kind, OpType::Info);
        assert_eq!(history.ops[2].kind, OpType::Info);
        let operations = pair(&history).unwrap();
        assert_eq!(operations.len(), 2);
        assert_eq!(operations[0].completion, Some(2));
    }

    #[test]
    fn finish_is_idempotent_and_stops_recording() {
        let scratch = Scratch::new("finish");
        let path = scratch.history();
        let recorder = Recorder::create(&path).unwrap();
        let inv = recorder
            .invoke(5, "append", json!({"key": "t/0", "value": 1}), None)
            .unwrap();
        recorder
            .complete(
                inv,
                Outcome::Ok,
                json!({"key": "t/0", "value": 1, "offset": 0}),
                None,
            )
            .unwrap();
        assert_eq!(recorder.reserve_process(), 6);
        assert_eq!(recorder.reserve_process(), 7);
        let first = recorder.finish().unwrap();
        assert_eq!(recorder.finish().unwrap(), first);
        let err = recorder.invoke(0, "append", json!(null), None).unwrap_err();
        assert!(matches!(err, RecorderError::Finished { .. }), "{err}");
        assert_eq!(read_history(&path, None).unwrap().0.len(), 2);
    }

    #[test]
    fn create_in_a_missing_directory_names_the_file() {
        let scratch = Scratch::new("missing");
        let path = scratch.0.join("no/such/dir/history.jsonl");
        let err = Recorder::create(&path).unwrap_err().to_string();
        assert!(err.contains("history.jsonl"), "{err}");
    }
}
