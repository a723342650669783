//! A test as plain data and the run folder it leaves (what Jepsen keeps in its test map
//! and its `store`).
//!
//! - [`spec`]: [`TestSpec`], what `harness test`, `repro` and `nightly` build once from
//!   their options, and the command line that runs it again.
//! - [`folder`]: the run folder's file names and the types of its JSON files, written by
//!   the harness and read by the report.
//! - [`duration`]: the one duration grammar of every flag and scenario key.

pub mod duration;
pub mod folder;
pub mod spec;

pub use folder::{
    Expectation, FolderError, NemesisTally, NotRestored, OneDownProbe, PartitionAvailability,
    RunFolder, RunStats, ScenarioInfo, TestRecord,
};
pub use spec::{
    BackendSpec, BrokerSettings, HostsSource, Mode, NemesisSpec, Plan, ScenarioPlan, SpecError,
    SshSpec, TestSpec, WorkloadPlan, WorkloadShape,
};
