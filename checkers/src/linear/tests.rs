use super::*;
use history::{Op, OpType, Process};
use serde_json::{json, Value};

/// Builds a history from (process, type, f, value); process `None` is the nemesis.
fn history(entries: &[(Option<u64>, OpType, &str, Value)]) -> History {
    History::from_ops(
        entries
            .iter()
            .enumerate()
            .map(|(i, (process, kind, f, value))| {
                let process = process.map_or(Process::Nemesis, Process::Client);
                Op::new(i as u64, process, *kind, f, value.clone())
            })
            .collect(),
    )
}

use OpType::{Fail, Info, Invoke, Ok as Done};

/// The search's report; for the register model, the zone check (`auto`) must give the
/// same verdict.
fn check(model: ModelKind, h: &History) -> LinearReport {
    let mut options = LinearOptions::new(model);
    options.algorithm = AlgorithmChoice::Wgl;
    let searched = check_linearizable(h, &options).unwrap();
    let auto = check_linearizable(h, &LinearOptions::new(model)).unwrap();
    assert_eq!(auto.verdict, searched.verdict, "{:?}", auto.failure);
    searched
}

fn kv(key: &str, value: Value) -> Value {
    json!({"key": key, "value": value})
}

#[test]
fn model_names_round_trip() {
    for model in ModelKind::ALL {
        assert_eq!(model.name().parse::<ModelKind>(), Ok(model));
        assert_eq!(
            serde_json::to_value(model).unwrap(),
            Value::String(model.name().to_string())
        );
    }
    let err = "cas".parse::<ModelKind>().unwrap_err().to_string();
    assert!(err.contains("unknown model \"cas\""), "{err}");
}

#[test]
fn stale_read_after_a_completed_write_is_not_linearizable() {
    let h = history(&[
        (Some(0), Invoke, "write", json!(1)),
        (Some(0), Done, "write", json!(1)),
        (Some(1), Invoke, "write", json!(2)),
        (Some(1), Done, "write", json!(2)),
        (Some(0), Invoke, "read", json!(null)),
        (Some(0), Done, "read", json!(1)),
    ]);
    let report = check(ModelKind::Register, &h);
    assert_eq!(report.verdict, Verdict::Invalid);
    let failure = report.failure.unwrap();
    assert_eq!(failure.key, None);
    assert_eq!(failure.longest_prefix, vec![0, 2]);
    assert_eq!(failure.unplaced, 4);
    assert!(
        failure
            .unplaced_description
            .starts_with("process 0 read -> 1 at op 4: cannot be linearized"),
        "{}",
        failure.unplaced_description
    );
    assert!(failure.unplaced_description.contains("state then: 2"));
    let partial = |op| {
        failure
            .partial_linearizations
            .iter()
            .find(|p| p.op == op)
            .map(|p| p.length)
    };
    assert_eq!(partial(0), Some(2));
    assert_eq!(partial(4), Some(0), "the read was never linearized");
    assert_eq!(failure.partials_omitted, 0);
}

#[test]
fn concurrent_write_makes_the_read_linearizable() {
    let h = history(&[
        (Some(0), Invoke, "write", json!(1)),
        (Some(0), Done, "write", json!(1)),
        (Some(1), Invoke, "write", json!(2)),
        (Some(0), Invoke, "read", json!(null)),
        (Some(0), Done, "read", json!(1)),
        (Some(1), Done, "write", json!(2)),
    ]);
    let report = check(ModelKind::Register, &h);
    assert_eq!(report.verdict, Verdict::Valid);
    assert_eq!((report.partitions, report.partitions_checked), (1, 1));
    assert_eq!(report.operations, 3);
    assert!(report.failure.is_none());
}

#[test]
fn info_write_stays_open_to_the_end_and_fail_write_never_happened() {
    let info = history(&[
        (Some(0), Invoke, "write", json!(1)),
        (Some(0), Info, "write", json!(1)),
        (Some(1), Invoke, "read", json!(null)),
        (Some(1), Done, "read", json!(null)),
        (Some(1), Invoke, "read", json!(null)),
        (Some(1), Done, "read", json!(1)),
    ]);
    assert_eq!(check(ModelKind::Register, &info).verdict, Verdict::Valid);

    let failed = history(&[
        (Some(0), Invoke, "write", json!(1)),
        (Some(0), Fail, "write", json!(1)),
        (Some(1), Invoke, "read", json!(null)),
        (Some(1), Done, "read", json!(1)),
    ]);
    assert_eq!(
        check(ModelKind::Register, &failed).verdict,
        Verdict::Invalid
    );
}

#[test]
fn knossos_cas_register_drops_failed_cas_and_lets_info_cas_happen_or_not() {
    let mut options = LinearOptions::new(ModelKind::CasRegister);
    options.init = Some(json!(0));
    // The failed cas [0 5] would have succeeded, but Knossos drops failed ops.
    let h = history(&[
        (Some(0), Invoke, "cas", json!([0, 5])),
        (Some(0), Fail, "cas", json!([0, 5])),
        (Some(1), Invoke, "cas", json!([0, 1])),
        (Some(1), Info, "cas", json!([0, 1])),
        (Some(2), Invoke, "read", json!(null)),
        (Some(2), Done, "read", json!(0)),
        (Some(3), Invoke, "read", json!(null)),
        (Some(3), Done, "read", json!(1)),
    ]);
    let report = check_linearizable(&h, &options).unwrap();
    assert_eq!(report.verdict, Verdict::Valid);
    assert_eq!(report.operations, 3);
}

#[test]
fn register_rejects_cas_and_names_the_op() {
    let h = history(&[
        (Some(0), Invoke, "write", json!(1)),
        (Some(0), Done, "write", json!(1)),
        (Some(0), Invoke, "cas", json!([1, 2])),
        (Some(0), Done, "cas", json!([1, 2])),
    ]);
    let err = check_linearizable(&h, &LinearOptions::new(ModelKind::Register))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("op 2: f \"cas\" is not an op of the register model"),
        "{err}"
    );

    let bad_cas = history(&[(Some(0), Invoke, "cas", json!(3))]);
    let err = check_linearizable(&bad_cas, &LinearOptions::new(ModelKind::CasRegister))
        .unwrap_err()
        .to_string();
    assert!(err.contains("cas takes [old, new], not 3"), "{err}");
}

#[test]
fn malformed_history_is_an_error() {
    let h = history(&[(Some(0), Done, "read", json!(1))]);
    let err = check_linearizable(&h, &LinearOptions::new(ModelKind::Register)).unwrap_err();
    assert!(matches!(err, LinearError::History(_)), "{err}");
}

#[test]
fn etcd_failed_cas_needs_the_compare_to_fail() {
    let run = |cas: Value| {
        let h = history(&[
            (Some(0), Invoke, "write", json!(1)),
            (Some(0), Done, "write", json!(1)),
            (Some(1), Invoke, "cas", cas.clone()),
            (Some(1), Fail, "cas", cas),
        ]);
        check(ModelKind::Etcd, &h).verdict
    };
    assert_eq!(run(json!([2, 3])), Verdict::Valid);
    assert_eq!(
        run(json!([1, 3])),
        Verdict::Invalid,
        "state was 1, compare held"
    );
}

#[test]
fn etcd_starts_absent_where_cas_fails_and_nil_reads_mean_absent() {
    let h = history(&[
        (Some(0), Invoke, "read", json!(null)),
        (Some(0), Done, "read", json!(null)),
        (Some(0), Invoke, "cas", json!([1, 2])),
        (Some(0), Fail, "cas", json!([1, 2])),
        (Some(1), Invoke, "read", json!(null)),
        (Some(1), Fail, "read", json!(null)),
        (Some(0), Invoke, "write", json!(1)),
        (Some(0), Done, "write", json!(1)),
    ]);
    assert_eq!(check(ModelKind::Etcd, &h).verdict, Verdict::Valid);

    let absent_after_write = history(&[
        (Some(0), Invoke, "write", json!(1)),
        (Some(0), Done, "write", json!(1)),
        (Some(0), Invoke, "read", json!(null)),
        (Some(0), Done, "read", json!(null)),
    ]);
    let report = check(ModelKind::Etcd, &absent_after_write);
    assert_eq!(report.verdict, Verdict::Invalid);
    let failure = report.failure.unwrap();
    assert_eq!(failure.unplaced, 2);
    // The same history in Knossos terms: a nil read is unknown.
    assert_eq!(
        check(ModelKind::CasRegister, &absent_after_write).verdict,
        Verdict::Valid
    );

    let cas_on_absent = history(&[
        (Some(0), Invoke, "cas", json!([1, 2])),
        (Some(0), Done, "cas", json!([1, 2])),
    ]);
    let report = check(ModelKind::Etcd, &cas_on_absent);
    assert_eq!(report.verdict, Verdict::Invalid);
    assert!(report
        .failure
        .unwrap()
        .unplaced_description
        .contains("state then: absent"));
}

#[test]
fn kv_gets_see_puts_and_appends_per_key() {
    let h = history(&[
        (Some(0), Invoke, "append", kv("a", json!("x"))),
        (Some(0), Done, "append", kv("a", json!("x"))),
        (Some(1), Invoke, "append", kv("a", json!("y"))),
        (Some(2), Invoke, "put", kv("b", json!("p"))),
        (Some(2), Done, "put", kv("b", json!("p"))),
        (Some(1), Done, "append", kv("a", json!("y"))),
        (Some(2), Invoke, "get", kv("a", json!(null))),
        (Some(2), Done, "get", kv("a", json!("xy"))),
        (Some(2), Invoke, "get", kv("b", json!(null))),
        (Some(2), Done, "get", kv("b", json!("p"))),
        (Some(3), Invoke, "get", kv("c", json!(null))),
        (Some(3), Done, "get", kv("c", json!(""))),
    ]);
    let report = check(ModelKind::Kv, &h);
    assert_eq!(report.verdict, Verdict::Valid);
    assert_eq!(report.partitions, 3);

    let wrong_order = history(&[
        (Some(0), Invoke, "append", kv("a", json!("x"))),
        (Some(0), Done, "append", kv("a", json!("x"))),
        (Some(1), Invoke, "append", kv("a", json!("y"))),
        (Some(1), Done, "append", kv("a", json!("y"))),
        (Some(2), Invoke, "get", kv("a", json!(null))),
        (Some(2), Done, "get", kv("a", json!("yx"))),
    ]);
    let report = check(ModelKind::Kv, &wrong_order);
    assert_eq!(report.verdict, Verdict::Invalid);
    let failure = report.failure.unwrap();
    assert_eq!(failure.key.as_deref(), Some("a"));
    assert_eq!(failure.unplaced, 4);
    assert!(failure.unplaced_description.contains("state then: \"xy\""));
}

#[test]
fn kv_initial_values_and_type_errors() {
    let h = history(&[
        (Some(0), Invoke, "get", kv("k", json!(null))),
        (Some(0), Done, "get", kv("k", json!("start"))),
    ]);
    let mut options = LinearOptions::new(ModelKind::Kv);
    assert_eq!(
        check_linearizable(&h, &options).unwrap().verdict,
        Verdict::Invalid
    );
    options.init = Some(json!({"k": "start"}));
    assert_eq!(
        check_linearizable(&h, &options).unwrap().verdict,
        Verdict::Valid
    );
    options.init = Some(json!(7));
    assert!(matches!(
        check_linearizable(&h, &options),
        Err(LinearError::Init { .. })
    ));

    let number = history(&[(Some(0), Invoke, "put", kv("k", json!(3)))]);
    let err = check(ModelKind::Kv, &History::default());
    assert_eq!(err.verdict, Verdict::Valid);
    let err = check_linearizable(&number, &LinearOptions::new(ModelKind::Kv))
        .unwrap_err()
        .to_string();
    assert!(err.contains("kv values are strings, not 3"), "{err}");
}

#[test]
fn keyed_registers_partition_by_key_and_report_the_failing_key() {
    let mut entries = Vec::new();
    for (p, key) in ["a", "b", "c"].iter().enumerate() {
        let p = p as u64;
        entries.push((Some(p), Invoke, "write", kv(key, json!(1))));
        entries.push((Some(p), Done, "write", kv(key, json!(1))));
        let read = if *key == "b" { 2 } else { 1 };
        entries.push((Some(p), Invoke, "read", kv(key, json!(null))));
        entries.push((Some(p), Done, "read", kv(key, json!(read))));
    }
    // Nemesis ops are no part of any partition.
    entries.push((None, Info, "start-partition", json!(null)));
    entries.push((None, Info, "start-partition", json!("majority")));
    let h = history(&entries);
    let mut options = LinearOptions::new(ModelKind::CasRegister);
    options.threads = 1;
    let report = check_linearizable(&h, &options).unwrap();
    assert_eq!(report.partitions, 3);
    assert_eq!(report.verdict, Verdict::Invalid);
    let failure = report.failure.unwrap();
    assert_eq!(failure.key.as_deref(), Some("b"));
    assert_eq!(failure.unplaced, 6);
    assert_eq!(failure.longest_prefix, vec![4]);
}

#[test]
fn multi_register_splits_into_components_of_keys_used_together() {
    let txn = |micros: Value| micros;
    let h = history(&[
        (
            Some(0),
            Invoke,
            "txn",
            txn(json!([["w", "x", 1], ["w", "y", 1]])),
        ),
        (
            Some(0),
            Done,
            "txn",
            txn(json!([["w", "x", 1], ["w", "y", 1]])),
        ),
        (Some(1), Invoke, "txn", txn(json!([["w", "z", 5]]))),
        (Some(1), Done, "txn", txn(json!([["w", "z", 5]]))),
        (
            Some(2),
            Invoke,
            "txn",
            txn(json!([["r", "y", null], ["r", "x", null]])),
        ),
        (
            Some(2),
            Done,
            "txn",
            txn(json!([["r", "y", 1], ["r", "x", 1]])),
        ),
        (Some(1), Invoke, "txn", txn(json!([["read", "z", null]]))),
        (Some(1), Done, "txn", txn(json!([["read", "z", 5]]))),
        // Unknown reads only: constrains nothing.
        (Some(3), Invoke, "txn", txn(json!([["r", "q", null]]))),
        (Some(3), Info, "txn", txn(json!(null))),
    ]);
    let report = check(ModelKind::MultiRegister, &h);
    assert_eq!(report.verdict, Verdict::Valid);
    assert_eq!(report.partitions, 2);
    assert_eq!(report.operations, 4);

    // A torn read: y's new value with x's old one.
    let torn = history(&[
        (
            Some(0),
            Invoke,
            "txn",
            json!([["w", "x", 1], ["w", "y", 1]]),
        ),
        (Some(0), Done, "txn", json!([["w", "x", 1], ["w", "y", 1]])),
        (
            Some(2),
            Invoke,
            "txn",
            json!([["r", "y", null], ["r", "x", null]]),
        ),
        (
            Some(2),
            Done,
            "txn",
            json!([["r", "y", 1], ["r", "x", null]]),
        ),
        (
            Some(2),
            Invoke,
            "txn",
            json!([["r", "x", null], ["r", "y", null]]),
        ),
        (Some(2), Done, "txn", json!([["r", "x", 2], ["r", "y", 1]])),
    ]);
    let report = check(ModelKind::MultiRegister, &torn);
    assert_eq!(report.verdict, Verdict::Invalid);
    let failure = report.failure.unwrap();
    assert_eq!(failure.key.as_deref(), Some("x,y"));
    assert_eq!(failure.unplaced, 4);
    assert!(
        failure
            .unplaced_description
            .contains(r#"state then: {"x":1,"y":1}"#),
        "{}",
        failure.unplaced_description
    );
}

/// `writers` concurrent `info` writes of distinct values, then a read of a value never
/// written: proving it impossible takes every subset of the writes, in every order up to
/// the cache, so about 2^writers · writers configurations.
fn hard_history(
    key: Option<&str>,
    writers: u64,
) -> Vec<(Option<u64>, OpType, &'static str, Value)> {
    let wrap = |v: Value| match key {
        Some(key) => kv(key, v),
        None => v,
    };
    let mut entries = Vec::new();
    for p in 0..writers {
        entries.push((Some(p), Invoke, "write", wrap(json!(p + 1))));
    }
    for p in 0..writers {
        entries.push((Some(p), Info, "write", wrap(json!(p + 1))));
    }
    entries.push((Some(writers), Invoke, "read", wrap(json!(null))));
    entries.push((Some(writers), Done, "read", wrap(json!(-1))));
    entries
}

#[test]
fn tiny_time_limit_gives_unknown_with_a_reason() {
    let h = history(&hard_history(None, 24));
    let mut options = LinearOptions::new(ModelKind::Register);
    options.algorithm = AlgorithmChoice::Wgl;
    options.time_limit = Some(Duration::from_millis(20));
    let report = check_linearizable(&h, &options).unwrap();
    assert_eq!(report.verdict, Verdict::Unknown);
    assert_eq!(
        report.reason.as_deref(),
        Some("time limit of 0.02s reached after 0 partitions")
    );
    assert_eq!(report.partitions_checked, 0);
}

#[test]
fn tiny_memory_budget_gives_unknown_with_a_reason() {
    let h = history(&hard_history(None, 24));
    let mut options = LinearOptions::new(ModelKind::Register);
    options.algorithm = AlgorithmChoice::Wgl;
    options.memory_budget_bytes = 1 << 20;
    let report = check_linearizable(&h, &options).unwrap();
    assert_eq!(report.verdict, Verdict::Unknown);
    assert_eq!(
        report.reason.as_deref(),
        Some("memory budget of 1 MiB exceeded")
    );
}

#[test]
fn hard_history_is_decided_within_its_bounds() {
    let h = history(&hard_history(None, 10));
    let report = check(ModelKind::Register, &h);
    assert_eq!(report.verdict, Verdict::Invalid);
    let failure = report.failure.unwrap();
    assert_eq!(failure.unplaced, 20);
    assert_eq!(failure.longest_prefix.len(), 10);
}

#[test]
fn one_invalid_partition_stops_the_others() {
    // A partition that would take hours, and a small one that is not linearizable.
    let mut entries = hard_history(Some("hard"), 40);
    let p = 100;
    entries.push((Some(p), Invoke, "write", kv("easy", json!(1))));
    entries.push((Some(p), Done, "write", kv("easy", json!(1))));
    entries.push((Some(p), Invoke, "read", kv("easy", json!(null))));
    entries.push((Some(p), Done, "read", kv("easy", json!(7))));
    let h = history(&entries);
    let mut options = LinearOptions::new(ModelKind::Register);
    options.algorithm = AlgorithmChoice::Wgl;
    options.threads = 2;
    // Only a safety net: the stop flag, not this limit, must end the hard search.
    options.time_limit = Some(Duration::from_secs(120));
    let report = check_linearizable(&h, &options).unwrap();
    assert_eq!(report.verdict, Verdict::Invalid);
    assert_eq!(report.partitions, 2);
    assert_eq!(report.partitions_checked, 1);
    assert_eq!(report.failure.unwrap().key.as_deref(), Some("easy"));
}

#[test]
fn one_thread_takes_turns_so_a_hard_partition_cannot_hide_a_failing_one() {
    let mut entries = hard_history(Some("hard"), 40);
    let p = 100;
    entries.push((Some(p), Invoke, "write", kv("easy", json!(1))));
    entries.push((Some(p), Done, "write", kv("easy", json!(1))));
    entries.push((Some(p), Invoke, "read", kv("easy", json!(null))));
    entries.push((Some(p), Done, "read", kv("easy", json!(7))));
    let h = history(&entries);
    let mut options = LinearOptions::new(ModelKind::Register);
    options.algorithm = AlgorithmChoice::Wgl;
    options.threads = 1;
    // Checked one after the other, the hard partition (the larger, so first) would reach
    // this limit and leave the easy one unchecked: unknown instead of invalid.
    options.time_limit = Some(Duration::from_secs(60));
    let report = check_linearizable(&h, &options).unwrap();
    assert_eq!(report.verdict, Verdict::Invalid);
    assert_eq!(report.partitions_checked, 1);
    assert_eq!(report.failure.unwrap().unplaced, 84);
}

#[test]
fn uncompleted_invocations_count_as_info() {
    let h = history(&[
        (Some(0), Invoke, "write", json!(3)),
        (Some(1), Invoke, "read", json!(null)),
        (Some(1), Done, "read", json!(3)),
    ]);
    assert_eq!(check(ModelKind::Register, &h).verdict, Verdict::Valid);
}
