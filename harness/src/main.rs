#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::Parser;
use harness::cli::{Cli, Command};
use harness::EXIT_TOOL_ERROR;
use std::io::Write;
use tracing_subscriber::EnvFilter;

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("HARNESS_LOG").unwrap_or_else(|_| EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    // Exit code 2 means "unknown" to our users' scripts, so clap's usage errors (which
    // exit 2 by default) exit with the tool-error code instead; help and version exit 0.
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let code = if error.use_stderr() {
                EXIT_TOOL_ERROR
            } else {
                0
            };
            let _ = error.print();
            std::process::exit(code);
        }
    };
    let outcome = match cli.command {
        Command::Check(args) => harness::check::run(&args),
        Command::Export(args) => harness::export::run(&args),
        Command::Clean => harness::clean::run(),
        Command::Test(args) => args
            .to_spec()
            .and_then(|spec| harness::test_run::run(&spec)),
        Command::Repro(args) => harness::repro::run(&args),
        Command::Shrink(args) => harness::shrink::run(&args),
        Command::Report(args) => harness::report_cmd::run(&args),
        Command::Serve(args) => harness::serve::run(&args),
        Command::Nightly(args) => harness::nightly::run(&args),
    };
    match outcome {
        Ok(code) => std::process::exit(code),
        Err(error) => {
            // A closed standard error must not turn a tool error into a panic.
            let _ = writeln!(std::io::stderr().lock(), "error: {error:#}");
            std::process::exit(EXIT_TOOL_ERROR);
        }
    }
}
