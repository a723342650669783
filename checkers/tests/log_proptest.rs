//! Property tests of the log checker over simulated histories: a correct log is always
//! valid, and one injected fault is always caught with the right kind.

// In a module named `log` so that `cargo test -p checkers log` selects these tests.
mod log {
    use checkers::log::simulate::{generate, SimConfig};
    use checkers::log::{check_log, AnomalyKind, LogReport};
    use checkers::Verdict;
    use history::{History, OpType, Process};
    use proptest::prelude::*;
    use serde_json::{json, Value};
    use std::collections::HashMap;

    fn config() -> impl Strategy<Value = SimConfig> {
        (
            any::<u64>(),
            200usize..3000,
            1usize..6,
            1usize..8,
            0u32..15,
            0u32..15,
            0u32..=100,
        )
            .prop_map(|(seed, ops, keys, processes, fail, crash, lin)| {
                let mut config = SimConfig::new(seed, ops, keys, processes);
                config.fail_percent = fail;
                config.crash_percent = crash;
                config.linearizable_percent = lin;
                config
            })
    }

    fn check(history: &History) -> LogReport {
        match check_log(history) {
            Ok(report) => report,
            Err(e) => panic!("generated history is malformed: {e}"),
        }
    }

    fn records_of(value: &Value) -> Vec<(i64, i64)> {
        value["records"]
            .as_array()
            .map(|records| {
                records
                    .iter()
                    .filter_map(|r| Some((r[0].as_i64()?, r[1].as_i64()?)))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn set_records(value: &mut Value, records: &[(i64, i64)]) {
        value["records"] = json!(records
            .iter()
            .map(|&(o, v)| json!([o, v]))
            .collect::<Vec<_>>());
    }

    /// Values whose append completed ok.
    fn acked_values(history: &History) -> HashMap<i64, usize> {
        history
            .ops
            .iter()
            .enumerate()
            .filter(|(_, op)| op.f == "append" && op.kind == OpType::Ok)
            .filter_map(|(i, op)| Some((op.value["value"].as_i64()?, i)))
            .collect()
    }

    /// (a) Drops one acked value from the final read that returned it.
    fn drop_from_final_read(history: &History, choice: usize) -> Option<History> {
        let acked = acked_values(history);
        let candidates: Vec<(usize, usize)> = history
            .ops
            .iter()
            .enumerate()
            .filter(|(_, op)| op.f == "read" && op.kind == OpType::Ok && op.value["final"] == true)
            .flat_map(|(i, op)| {
                records_of(&op.value)
                    .into_iter()
                    .enumerate()
                    .filter(|(_, (_, v))| acked.contains_key(v))
                    .map(move |(j, _)| (i, j))
                    .collect::<Vec<_>>()
            })
            .collect();
        let &(position, j) = candidates.get(choice % candidates.len().max(1))?;
        let mut faulty = history.clone();
        let mut records = records_of(&faulty.ops[position].value);
        records.remove(j);
        set_records(&mut faulty.ops[position].value, &records);
        Some(faulty)
    }

    /// (b) Moves one ack to the offset another ack of the same key reported.
    fn two_values_one_offset(history: &History, choice: usize) -> Option<History> {
        let mut by_key: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, op) in history.ops.iter().enumerate() {
            if op.f == "append" && op.kind == OpType::Ok {
                by_key.entry(op.key()?).or_default().push(i);
            }
        }
        let mut pairs: Vec<(usize, usize)> = by_key
            .values()
            .filter(|acks| acks.len() >= 2)
            .flat_map(|acks| acks.windows(2).map(|w| (w[0], w[1])).collect::<Vec<_>>())
            .collect();
        pairs.sort_unstable();
        let &(first, second) = pairs.get(choice % pairs.len().max(1))?;
        let mut faulty = history.clone();
        let offset = faulty.ops[first].value["offset"].clone();
        faulty.ops[second].value["offset"] = offset;
        Some(faulty)
    }

    /// (c) Shortens a process's read that began below the end of its previous read of the
    /// key, so that it ends before that end.
    fn shorten_a_later_read(history: &History, choice: usize) -> Option<History> {
        let mut invoked: HashMap<Process, Value> = HashMap::new();
        let mut last_end: HashMap<(Process, String), i64> = HashMap::new();
        let mut candidates = Vec::new();
        for (i, op) in history.ops.iter().enumerate() {
            if op.f != "read" {
                continue;
            }
            if op.kind == OpType::Invoke {
                invoked.insert(op.process, op.value.clone());
                continue;
            }
            let Some(invoke) = invoked.remove(&op.process) else {
                continue;
            };
            if op.kind != OpType::Ok {
                continue;
            }
            let (Some(key), Some(from)) = (op.key(), invoke["offset"].as_i64()) else {
                continue;
            };
            let records = records_of(&op.value);
            let end = records.last().map_or(from, |&(o, _)| o + 1);
            let slot = (op.process, key);
            if let Some(&e1) = last_end.get(&slot) {
                if from < e1 && records.iter().any(|&(o, _)| o == e1 - 1) {
                    candidates.push((i, e1));
                }
            }
            if !records.is_empty() {
                last_end.insert(slot, end);
            }
        }
        let &(position, e1) = candidates.get(choice % candidates.len().max(1))?;
        let mut faulty = history.clone();
        let records: Vec<(i64, i64)> = records_of(&faulty.ops[position].value)
            .into_iter()
            .filter(|&(o, _)| o < e1 - 1)
            .collect();
        set_records(&mut faulty.ops[position].value, &records);
        Some(faulty)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn a_correct_log_is_valid(config in config()) {
            let history = generate(&config);
            let report = check(&history);
            prop_assert_eq!(report.verdict, Verdict::Valid, "{:#?}", report.anomalies);
            prop_assert!(report.anomalies.is_empty(), "{:#?}", report.anomalies);
            prop_assert!(report.stats.final_reads_marked);
            prop_assert_eq!(report.stats.values_read, report.stats.values_acked + report.stats.values_info_seen);
        }

        #[test]
        fn an_injected_fault_is_caught(config in config(), fault in 0usize..3, choice in any::<usize>()) {
            let history = generate(&config);
            let (kind, faulty) = match fault {
                0 => (AnomalyKind::LostWrite, drop_from_final_read(&history, choice)),
                1 => (AnomalyKind::InconsistentOffsets, two_values_one_offset(&history, choice)),
                _ => (AnomalyKind::NonmonotonicRead, shorten_a_later_read(&history, choice)),
            };
            let Some(faulty) = faulty else {
                // Too few acks or reads in this history to inject this fault.
                prop_assume!(false);
                unreachable!();
            };
            let report = check(&faulty);
            prop_assert_eq!(report.verdict, Verdict::Invalid);
            prop_assert!(report.counted(kind) >= 1, "{} not caught: {:#?}", kind, report.anomalies);
        }
    }

    #[test]
    fn the_simulation_is_deterministic_and_near_the_requested_size() {
        let a = checkers::log::simulate::generate_history(11, 5000, 3, 5);
        let b = checkers::log::simulate::generate_history(11, 5000, 3, 5);
        assert_eq!(a, b);
        assert!((4900..=5000).contains(&a.len()), "{}", a.len());
        let report = check(&a);
        assert_eq!(report.verdict, Verdict::Valid);
        assert!(report.stats.appends_info > 0 && report.stats.appends_fail > 0);
        assert!(report.stats.reads_ok > 0 && report.stats.final_reads >= 3);
    }
}
