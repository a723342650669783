//! `harness export`: a history (any format we read) as Jepsen EDN, so that Knossos and
//! Elle can judge our runs too.

use crate::check::history_path;
use crate::check::parse_format;
use anyhow::{Context, Result};
use clap::Args;
use history::Format;
use history::{jepsen, read_history};
use std::io::Write;
use std::path::PathBuf;

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

/// Runs `harness export`; returns the exit code.
pub fn run(args: &ExportArgs) -> Result<i32> {
    let (history, _) = read_history(&history_path(&args.file), args.format)?;
    // Refuse histories that do not pair up: Knossos would misjudge them silently.
    history::pair(&history)?;
    let edn = jepsen::to_jepsen_edn(&history);
    match &args.out {
        Some(out) => {
            std::fs::write(out, edn).with_context(|| format!("writing {}", out.display()))?
        }
        None => std::io::stdout()
            .lock()
            .write_all(edn.as_bytes())
            .context("writing to standard output")?,
    }
    Ok(0)
}
