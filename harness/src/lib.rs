//! The harness: a thin command line over the library crates.
//!
//! - [`cli`]: the command line (each command's options live in its own module;
//!   [`options`] holds `harness test`'s, turned into a [`spec::TestSpec`]).
//! - [`lifecycle`]: one test start to verdict, for every kind of test.
//! - [`check`]: `harness check`, offline checking of stored histories.
//! - [`export`]: `harness export`, a history as Jepsen EDN for Knossos/Elle.
//! - [`clean`]: `harness clean`, removing what crashed runs left behind.
//! - [`system`]: the system under test (our broker's driver), named once.
//! - [`cluster`]: the processes of a test: their files (from the [`sut::Db`]), start,
//!   stop, logs, and the running cluster's [`sut::Api`].
//! - [`faults`]: the nemesis's hold on a real test: its `ClusterControl` on the cluster
//!   and backend, its `Journal` on the history recorder.
//! - [`test_run`]: `harness test`: cluster, workload, final reads, checks, the run folder;
//!   [`one_down`]: its liveness probe after the heal (one node killed, every partition
//!   must still take writes); [`truncations`]: the oracle over the truncations the
//!   nodes' logs record (no replica discards records it knew committed);
//!   [`admissions`]: the oracle over the ISR expansions they record (no replica joins
//!   the in-sync set lacking an acknowledged write).
//! - [`scenario`]: scenario files (a bug report as a script of faults and an
//!   expectation) and playing one on a cluster; [`repro`]: `harness repro`.
//! - [`nightly`]: `harness nightly`: random tests and every reproduction until a budget
//!   is spent, compared with the night before; `--detect`: time to find each bug switch.
//!
//! Architecture invariant: judging lives in `checkers`, formats in `history`; this crate
//! wires them to files, the terminal and exit codes.

pub mod admissions;
pub mod check;
pub mod clean;
pub mod cli;
pub mod cluster;
pub mod export;
pub mod faults;
pub mod lifecycle;
pub mod nightly;
pub mod one_down;
pub mod options;
pub mod report_cmd;
pub mod repro;
pub mod scenario;
pub mod serve;
pub mod shrink;
pub mod system;
pub mod test_run;
pub mod truncations;
pub mod waiver;

/// Exit code for an error of the harness itself (bad input, unreadable file, ...).
pub const EXIT_TOOL_ERROR: i32 = 3;
