//! The operation model shared by everything in the harness (DESIGN.md §4).
//!
//! - [`op`]: one history entry ([`Op`], [`Process`], [`OpType`]).
//! - [`history`]: a whole history with the source line of each op.
//! - [`pairing`]: invocations paired with completions, validated.
//! - [`jsonl`]: the harness's own format, streamed while a test runs.
//! - [`edn`]: a reader and printer for the subset of EDN that Jepsen writes.
//! - [`jepsen`], [`porcupine`]: importers (and the Jepsen EDN exporter).
//! - [`format`]: which format a file is in, and reading any of them.
//! - [`independent`]: Jepsen `[key value]` tuple histories lifted to our keyed shape.
//! - [`text`]: a file's text, read with its memory bounded per line.
//!
//! Architecture invariant: this crate knows nothing of brokers, checkers or reports; it
//! never panics on input, and every error names a file and line.

pub mod edn;
pub mod error;
pub mod format;
pub mod history;
pub mod independent;
pub mod jepsen;
pub mod jsonl;
pub mod op;
pub mod pairing;
pub mod porcupine;
pub mod text;

pub use error::{HistoryError, Location};
pub use format::{read_history, Format};
pub use history::History;
pub use op::{Op, OpType, Process};
pub use pairing::{pair, Operation, Outcome};
