//! `harness nightly`'s options and the bug switches it knows.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use spec::duration::parse_duration;

use crate::options::BackendArgs;

/// `harness nightly`.
#[derive(Debug, Args)]
pub struct NightlyArgs {
    /// Wall-clock time for the whole night (`90s`, `10m`, `2h`, `1h30m`): the
    /// reproductions first, then random tests while a run still fits.
    #[arg(long, value_parser = positive_duration, value_name = "DURATION")]
    pub budget: Duration,

    /// Where runs and nights are stored (`<store>/nightly/<time>/`).
    #[arg(long, default_value = "store", value_name = "DIR")]
    pub store: PathBuf,

    /// All randomness of the night comes from it (random when not given).
    #[arg(long)]
    pub seed: Option<u64>,

    /// Instead of a night: for each bug switch, run random cells with it on until the
    /// checkers flag a run, over several seeds, and report the time it took.
    #[arg(long)]
    pub detect: bool,

    /// With --detect: the bug switches to measure (comma-separated; default all five).
    #[arg(long, value_name = "LIST", requires = "detect")]
    pub bugs: Option<String>,

    /// With --detect: seeds per bug switch.
    #[arg(long, default_value_t = 5, requires = "detect")]
    pub seeds: u32,

    /// With --detect: how long one seed searches before giving up.
    #[arg(long, value_parser = positive_duration, default_value = "10m", value_name = "DURATION", requires = "detect")]
    pub detect_limit: Duration,

    /// Skip the reproductions (only random tests).
    #[arg(long)]
    pub no_repro: bool,

    /// Where scenario files are (default: `scenarios/` of this workspace).
    #[arg(long, value_name = "DIR")]
    pub scenarios: Option<PathBuf>,

    /// A broker binary to run instead of building this workspace's (with failpoints).
    #[arg(long, value_name = "PATH")]
    pub broker_bin: Option<PathBuf>,

    /// Turn a bug switch on in every random test (to see what a regression looks like
    /// in the summary); repeatable. The reproductions set their own switches.
    #[arg(long = "bug", value_name = "JIRA", conflicts_with = "detect")]
    pub regressions: Vec<String>,

    /// After the runs, shrink every new failure of a random test into a scenario file
    /// (as `harness shrink`; the summary links it with its reproduction rate), for at
    /// most this long in all, beyond `--budget` (`0s`: none).
    #[arg(long, value_parser = parse_duration, default_value = "0s", value_name = "DURATION")]
    pub shrink_budget: Duration,

    /// Plays per candidate of those shrinks.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub shrink_tries: u32,

    /// Where the random tests' nodes live (the reproductions always use netns).
    #[command(flatten)]
    pub backend: BackendArgs,
}

/// The bug switches the broker has.
pub const BUG_SWITCHES: &[&str] = &[
    "KAFKA-7128",
    "KAFKA-7040",
    "KAFKA-1561",
    "KAFKA-3083",
    "KAFKA-2143",
];

/// Seconds a test takes beyond its client phase before anything was measured (cluster
/// start, heal, recovery, final reads, checking); replaced by the night's own mean.
pub(super) const FIRST_OVERHEAD_GUESS_SECS: f64 = 35.0;

/// A `--budget` or `--detect-limit`: a duration ([`parse_duration`]'s grammar: `90`, `90s`,
/// `10m`, `2h`, `1h30m`), above zero and below a billion seconds.
fn positive_duration(text: &str) -> Result<Duration, String> {
    let duration = parse_duration(text)?;
    if duration.is_zero() || duration.as_secs_f64() >= 1e9 {
        return Err(format!("{:?}: must be a positive duration", text.trim()));
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_are_positive_durations() {
        assert_eq!(positive_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(positive_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(positive_duration("1.5m"), Ok(Duration::from_secs(90)));
        for bad in [
            "",
            "m",
            "10x",
            "10m5",
            "0",
            "-5",
            "0s",
            "ten",
            "1000000000s",
        ] {
            assert!(positive_duration(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            positive_duration("0s"),
            Err("\"0s\": must be a positive duration".into())
        );
    }
}
