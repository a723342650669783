//! Timing of the log checker on a large simulated history. Ignored by default; run with
//! `cargo test --release -p checkers --test log_perf -- --ignored --nocapture`.

// In a module named `log` so that `cargo test -p checkers log` selects these tests.
mod log {
    use checkers::log::check_log;
    use checkers::log::simulate::generate_history;
    use std::time::Instant;

    #[test]
    #[ignore = "timing only: run in release with --ignored --nocapture"]
    fn check_a_million_op_history() {
        let started = Instant::now();
        let history = generate_history(7, 1_000_000, 8, 10);
        let generated = started.elapsed();
        let started = Instant::now();
        let report = match check_log(&history) {
            Ok(report) => report,
            Err(e) => panic!("{e}"),
        };
        let checked = started.elapsed();
        println!(
            "{} ops generated in {:.2} s, checked in {:.2} s: {} ({} records read, {} acked)",
            history.len(),
            generated.as_secs_f64(),
            checked.as_secs_f64(),
            report.verdict,
            report.stats.records_read,
            report.stats.values_acked
        );
        assert_eq!(report.verdict, checkers::Verdict::Valid);
    }
}
