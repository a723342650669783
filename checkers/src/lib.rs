//! Judges histories (DESIGN.md §5, checking.md).
//!
//! - [`verdict`]: `valid` / `invalid` / `unknown` and how they compose.
//! - [`log`]: the log checker for Kafka-style append/read histories (sort and sweep).
//! - [`linear`]: the linearizability checker (Wing–Gong with Lowe's cache,
//!   P-compositional) and its models.
//! - [`settle`]: whether the cluster settled after the nemesis strikes that had it to
//!   themselves (what the nemesis recorded of its roles and the leaders' views).
//! - [`results`]: every checker's verdict and report, composed: `results.json`.
//!
//! Architecture invariant: checkers do no I/O and never panic on a history; they return
//! `unknown` with a reason rather than exceed their time or memory bounds.

pub mod linear;
pub mod log;
pub mod results;
pub mod settle;
pub mod verdict;

pub use results::{Anomaly, AnomalyCount, CheckerResult, Results};
pub use verdict::Verdict;
