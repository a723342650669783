//! The command line, parsed into plain data (clap); `main.rs` dispatches on it.

use crate::check::CheckModel;
use clap::{Args, Parser, Subcommand};
use history::Format;
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "harness",
    version,
    about = "Jepsen-style fault-injection test harness for replicated logs",
    after_help = "Exit codes: 0 valid, 1 invalid (anomalies found), 2 unknown (the checker could not decide \
                  within its bounds), 3 an error of the harness itself."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check stored histories offline: our JSONL, Jepsen EDN, or Porcupine's formats.
    Check(CheckArgs),
    /// Write a history as Jepsen EDN, for Knossos or Elle.
    Export(ExportArgs),
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// A history file, or a run folder holding `history.jsonl`.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,

    /// Input format; guessed from the file when not given.
    #[arg(long, value_name = "jsonl|jepsen-edn|porcupine-etcd|porcupine-kv", value_parser = parse_format)]
    pub format: Option<Format>,

    /// Where to write the EDN (default: standard output).
    #[arg(long, short, value_name = "OUT")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// History files, or run folders holding `history.jsonl` (results are then written
    /// to the folder's `results.json`).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,

    /// Input format; guessed from each file when not given.
    #[arg(long, value_name = "jsonl|jepsen-edn|porcupine-etcd|porcupine-kv", value_parser = parse_format)]
    pub format: Option<Format>,

    /// What to check against; guessed from the format and the ops' functions when not given.
    #[arg(
        long,
        value_name = "log|register|cas-register|multi-register|etcd|kv",
        value_parser = parse_model
    )]
    pub model: Option<CheckModel>,

    /// The history is a Jepsen `independent` one: every client op's value is a
    /// `[key value]` tuple; check each key on its own.
    #[arg(long)]
    pub independent: bool,

    /// The model's initial value as JSON, e.g. `0`, `null`, `{"x":0,"y":0}`.
    #[arg(long, value_name = "JSON")]
    pub init: Option<String>,

    /// Give up with `unknown` after this many seconds per file (linearizability search).
    #[arg(long, value_name = "SECS", default_value_t = 300.0)]
    pub time_limit: f64,

    /// Give up with `unknown` when the search's memory estimate passes this many MiB.
    #[arg(long, value_name = "MIB", default_value_t = 4096)]
    pub memory_limit: usize,

    /// Also write the full results as JSON to this file.
    #[arg(long, value_name = "OUT")]
    pub json: Option<PathBuf>,
}

fn parse_format(name: &str) -> Result<Format, String> {
    name.parse()
}

fn parse_model(name: &str) -> Result<CheckModel, String> {
    CheckModel::parse(name).map_err(|e| e.to_string())
}
