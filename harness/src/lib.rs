//! The harness: a thin command line over the library crates.
//!
//! - [`cli`]: the command line as plain data.
//! - [`check`]: `harness check`, offline checking of stored histories.
//! - [`export`]: `harness export`, a history as Jepsen EDN for Knossos/Elle.
//!
//! Architecture invariant: judging lives in `checkers`, formats in `history`; this crate
//! wires them to files, the terminal and exit codes.

pub mod check;
pub mod cli;
pub mod export;

/// Exit code for an error of the harness itself (bad input, unreadable file, ...).
pub const EXIT_TOOL_ERROR: i32 = 3;
