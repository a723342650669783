//! Every anomaly of the log checker: a minimal history that must be caught, and a near
//! miss that must pass.

// In a module named `log` so that `cargo test -p checkers log` selects these tests.
mod log {
    use checkers::log::{check_log, AnomalyKind, LogReport, MAX_REPORTED_PER_KIND};
    use checkers::Verdict;
    use history::{History, Op, OpType, Process};
    use serde_json::{json, Value};

    /// Builds a history op by op; each helper returns the `index` of the entries it wrote.
    #[derive(Default)]
    struct Builder {
        ops: Vec<Op>,
    }

    impl Builder {
        fn push(&mut self, process: u64, kind: OpType, f: &str, value: Value) -> u64 {
            let index = self.ops.len() as u64;
            self.ops
                .push(Op::new(index, Process::Client(process), kind, f, value));
            index
        }

        fn invoke_append(&mut self, p: u64, value: i64) -> u64 {
            self.push(
                p,
                OpType::Invoke,
                "append",
                json!({"key": "t/0", "value": value}),
            )
        }

        fn ack(&mut self, p: u64, value: i64, offset: i64) -> u64 {
            self.push(
                p,
                OpType::Ok,
                "append",
                json!({"key": "t/0", "value": value, "offset": offset}),
            )
        }

        /// An append invoked and acked at once: returns the ack's index.
        fn append(&mut self, p: u64, value: i64, offset: i64) -> u64 {
            self.invoke_append(p, value);
            self.ack(p, value, offset)
        }

        fn invoke_read(&mut self, p: u64, invoke: Value) -> u64 {
            self.push(p, OpType::Invoke, "read", invoke)
        }

        fn read_ok(&mut self, p: u64, invoke: &Value, records: &[(i64, i64)], hw: i64) -> u64 {
            let mut body = invoke.clone();
            body["records"] = json!(records
                .iter()
                .map(|&(o, v)| json!([o, v]))
                .collect::<Vec<_>>());
            body["high_watermark"] = json!(hw);
            self.push(p, OpType::Ok, "read", body)
        }

        /// A read invoked and completed at once: returns the completion's index.
        fn read_with(&mut self, p: u64, invoke: Value, records: &[(i64, i64)], hw: i64) -> u64 {
            self.invoke_read(p, invoke.clone());
            self.read_ok(p, &invoke, records, hw)
        }

        fn read(&mut self, p: u64, offset: i64, records: &[(i64, i64)], hw: i64) -> u64 {
            self.read_with(p, json!({"key": "t/0", "offset": offset}), records, hw)
        }

        fn final_read(&mut self, p: u64, offset: i64, records: &[(i64, i64)], hw: i64) -> u64 {
            self.read_with(
                p,
                json!({"key": "t/0", "offset": offset, "final": true}),
                records,
                hw,
            )
        }

        fn check(&self) -> LogReport {
            check_log(&History::from_ops(self.ops.clone())).expect("well-formed test history")
        }
    }

    fn of_kind(report: &LogReport, kind: AnomalyKind) -> Vec<&checkers::log::Anomaly> {
        report.anomalies.iter().filter(|a| a.kind == kind).collect()
    }

    fn assert_valid(report: &LogReport) {
        assert_eq!(report.verdict, Verdict::Valid, "{report:#?}");
        assert!(
            report.anomalies.iter().all(|a| !a.counts_against_validity),
            "{report:#?}"
        );
    }

    /// Exactly one instance of `kind`, naming `ops`, counted as `counts`.
    fn assert_one(report: &LogReport, kind: AnomalyKind, ops: &[u64], counts: bool) {
        let found = of_kind(report, kind);
        assert_eq!(found.len(), 1, "{kind}: {report:#?}");
        assert_eq!(found[0].ops, ops, "{kind}: {report:#?}");
        assert_eq!(found[0].counts_against_validity, counts, "{report:#?}");
        assert_eq!(found[0].key, "t/0");
        assert!(!found[0].explanation.is_empty());
        if counts {
            assert_eq!(report.verdict, Verdict::Invalid);
        }
    }

    // lost-write

    #[test]
    fn a_gap_in_a_read_loses_the_acked_value_there() {
        let mut h = Builder::default();
        h.append(0, 1, 0);
        let ack = h.append(0, 2, 1);
        h.append(0, 3, 2);
        let read = h.read(1, 0, &[(0, 1), (2, 3)], 3);
        let report = h.check();
        assert_one(&report, AnomalyKind::LostWrite, &[ack, read], true);
        assert!(of_kind(&report, AnomalyKind::LostWrite)[0]
            .explanation
            .contains("value 2 acked at offset 1 of t/0"));
    }

    #[test]
    fn an_acks_1_append_promises_only_the_leaders_log() {
        // Value 2 was acked with acks=1 at offset 1; a failover rewrote offset 1.
        let mut h = Builder::default();
        h.append(0, 1, 0);
        h.push(
            1,
            OpType::Invoke,
            "append",
            json!({"key": "t/0", "value": 2, "acks": "1"}),
        );
        h.ack(1, 2, 1);
        h.append(2, 3, 1);
        h.final_read(3, 0, &[(0, 1), (1, 3)], 2);
        let report = h.check();
        assert_eq!(report.verdict, Verdict::Valid, "{:?}", report.anomalies);
        // The same history with acks=all loses value 2 and disagrees at offset 1.
        let mut h = Builder::default();
        h.append(0, 1, 0);
        let ack = h.append(1, 2, 1);
        h.append(2, 3, 1);
        let fin = h.final_read(3, 0, &[(0, 1), (1, 3)], 2);
        let report = h.check();
        assert_eq!(report.verdict, Verdict::Invalid);
        assert_one(&report, AnomalyKind::LostWrite, &[ack, fin], true);
        assert!(!of_kind(&report, AnomalyKind::InconsistentOffsets).is_empty());
    }

    #[test]
    fn a_value_acked_at_a_reused_offset_and_then_read_is_not_unseen() {
        // Offset 1 acked twice (a divergence); the final read shows the second value:
        // the first is lost, the second was read, not unseen.
        let mut h = Builder::default();
        h.append(0, 1, 0);
        let first = h.append(1, 2, 1);
        h.append(2, 3, 1);
        let fin = h.final_read(3, 0, &[(0, 1), (1, 3)], 2);
        let report = h.check();
        assert_one(&report, AnomalyKind::LostWrite, &[first, fin], true);
        assert!(
            of_kind(&report, AnomalyKind::Unseen).is_empty(),
            "{report:#?}"
        );
        assert!(!of_kind(&report, AnomalyKind::InconsistentOffsets).is_empty());
    }

    #[test]
    fn a_read_that_ended_before_an_append_began_does_not_lose_it() {
        // Offset 1 is read with value 2, then reused for value 3 (after the read): value 2
        // is lost by the final read; value 3 is not lost by the earlier read.
        let mut h = Builder::default();
        h.append(0, 1, 0);
        let two = h.append(0, 2, 1);
        h.read(1, 0, &[(0, 1), (1, 2)], 2);
        h.append(2, 3, 1);
        let fin = h.final_read(3, 0, &[(0, 1), (1, 3)], 2);
        let report = h.check();
        assert_one(&report, AnomalyKind::LostWrite, &[two, fin], true);
        assert!(!of_kind(&report, AnomalyKind::InconsistentOffsets).is_empty());
    }

    #[test]
    fn an_acks_1_append_seen_by_a_read_is_acked_there() {
        let mut h = Builder::default();
        h.push(
            0,
            OpType::Invoke,
            "append",
            json!({"key": "t/0", "value": 1, "acks": 1}),
        );
        h.ack(0, 1, 0);
        h.read(1, 0, &[(0, 1)], 1);
        h.append(2, 2, 0);
        h.final_read(3, 0, &[(0, 2)], 1);
        let report = h.check();
        assert_eq!(report.verdict, Verdict::Invalid);
        assert!(!of_kind(&report, AnomalyKind::LostWrite).is_empty());
    }

    #[test]
    fn another_value_at_the_offset_loses_the_acked_one() {
        let mut h = Builder::default();
        let ack = h.append(0, 1, 0);
        h.invoke_append(1, 2);
        let read = h.read(2, 0, &[(0, 2)], 1);
        h.push(1, OpType::Info, "append", json!({"key": "t/0", "value": 2}));
        let report = h.check();
        assert_one(&report, AnomalyKind::LostWrite, &[ack, read], true);
        assert_eq!(of_kind(&report, AnomalyKind::InconsistentOffsets).len(), 1);
    }

    #[test]
    fn a_linearizable_final_read_that_ends_before_an_acked_offset_loses_it() {
        let mut h = Builder::default();
        h.append(0, 1, 0);
        let ack = h.append(0, 2, 1);
        let invoke =
            json!({"key": "t/0", "offset": 0, "final": true, "consistency": "linearizable"});
        let fin = h.read_with(1, invoke, &[(0, 1)], 1);
        let report = h.check();
        assert_one(&report, AnomalyKind::LostWrite, &[ack, fin], true);
    }

    #[test]
    fn a_final_read_whose_high_watermark_covers_an_acked_offset_it_lacks_loses_it() {
        let mut h = Builder::default();
        h.append(0, 1, 0);
        let ack = h.append(0, 2, 1);
        // Under its max, so not cut short: the log it claims ends at 2 and lacks value 2.
        let invoke = json!({"key": "t/0", "offset": 0, "final": true, "max": 10});
        let fin = h.read_with(1, invoke, &[(0, 1)], 2);
        let report = h.check();
        assert_one(&report, AnomalyKind::LostWrite, &[ack, fin], true);
    }

    #[test]
    fn near_miss_a_default_final_read_with_a_lagging_high_watermark_is_a_stale_view() {
        // After a failover the new leader's high watermark may lag what was acked; a
        // default read from it is stale, not proof of loss.
        let mut h = Builder::default();
        h.append(0, 1, 0);
        h.append(0, 2, 1);
        h.final_read(1, 0, &[(0, 1)], 1);
        let report = h.check();
        assert_valid(&report);
        assert_eq!(report.found(AnomalyKind::StaleRead), 1);
        assert_eq!(report.counted(AnomalyKind::StaleRead), 0);
    }

    #[test]
    fn an_info_append_seen_by_a_read_counts_as_acked() {
        let mut h = Builder::default();
        let invoke = h.invoke_append(0, 5);
        h.push(0, OpType::Info, "append", json!({"key": "t/0", "value": 5}));
        h.read(1, 0, &[(0, 5)], 1);
        let fin = h.final_read(2, 0, &[], 1);
        let report = h.check();
        assert_one(&report, AnomalyKind::LostWrite, &[invoke, fin], true);
    }

    #[test]
    fn near_miss_an_unseen_info_append_missing_from_the_final_read_is_not_lost() {
        let mut h = Builder::default();
        h.append(0, 1, 0);
        h.invoke_append(1, 2);
        h.push(1, OpType::Info, "append", json!({"key": "t/0", "value": 2}));
        h.final_read(2, 0, &[(0, 1)], 1);
        assert_valid(&h.check());
    }

    #[test]
    fn near_miss_a_read_that_did_not_reach_the_offset_loses_nothing() {
        let mut h = Builder::default();
        h.append(0, 1, 0);
        h.append(0, 2, 1);
        h.read_with(
            1,
            json!({"key": "t/0", "offset": 0, "max": 1}),
            &[(0, 1)],
            2,
        );
        h.final_read(1, 0, &[(0, 1), (1, 2)], 2);
        let report = h.check();
        assert_valid(&report);
        assert!(report.anomalies.is_empty(), "{report:#?}");
        assert_eq!(report.stats.values_acked, 2);
        assert_eq!(report.stats.final_reads, 1);
    }

    #[test]
    fn near_miss_chunked_final_reads_cover_the_log_together() {
        let mut h = Builder::default();
        h.append(0, 1, 0);
        h.append(0, 2, 1);
        h.append(0, 3, 2);
        let chunk = |offset| json!({"key": "t/0", "offset": offset, "max": 2, "final": true});
        h.read_with(1, chunk(0), &[(0, 1), (1, 2)], 3);
        h.read_with(1, chunk(2), &[(2, 3)], 3);
        let report = h.check();
        assert_valid(&report);
        assert!(report.anomalies.is_empty(), "{report:#?}");
    }

    // unseen

    #[test]
    fn an_acked_value_no_final_read_covered_is_unseen_not_counted() {
        // The final read began above offset 0: it could not have shown value 1.
        let mut h = Builder::default();
        let ack = h.append(0, 1, 0);
        h.append(0, 2, 1);
        h.final_read(1, 1, &[(1, 2)], 2);
        let report = h.check();
        assert_one(&report, AnomalyKind::Unseen, &[ack], false);
        assert_eq!(report.found(AnomalyKind::LostWrite), 0);
        assert_valid(&report);
    }

    #[test]
    fn near_miss_unseen_without_final_reads_is_reported_not_counted() {
        let mut h = Builder::default();
        let ack = h.append(0, 1, 0);
        let report = h.check();
        assert_one(&report, AnomalyKind::Unseen, &[ack], false);
        assert_valid(&report);
    }

    #[test]
    fn near_miss_a_final_read_concurrent_with_the_ack_cannot_judge_unseen() {
        let mut h = Builder::default();
        h.invoke_append(0, 1);
        let fin = json!({"key": "t/0", "offset": 0, "final": true});
        h.invoke_read(1, fin.clone());
        let ack = h.ack(0, 1, 0);
        h.read_ok(1, &fin, &[], 0);
        let report = h.check();
        assert_one(&report, AnomalyKind::Unseen, &[ack], false);
        assert_valid(&report);
    }

    // inconsistent-offsets

    #[test]
    fn two_acks_at_one_offset_are_inconsistent() {
        let mut h = Builder::default();
        let first = h.append(0, 1, 0);
        let second = h.append(1, 2, 0);
        let report = h.check();
        assert_one(
            &report,
            AnomalyKind::InconsistentOffsets,
            &[first, second],
            true,
        );
    }

    #[test]
    fn a_read_disagreeing_with_another_read_is_inconsistent() {
        let mut h = Builder::default();
        h.invoke_append(0, 1);
        h.invoke_append(1, 2);
        let a = h.read(2, 0, &[(0, 1)], 1);
        let b = h.read(3, 0, &[(0, 2)], 1);
        h.push(0, OpType::Info, "append", json!({"key": "t/0", "value": 1}));
        h.push(1, OpType::Info, "append", json!({"key": "t/0", "value": 2}));
        let report = h.check();
        assert_one(&report, AnomalyKind::InconsistentOffsets, &[a, b], true);
    }

    #[test]
    fn near_miss_distinct_offsets_agree() {
        let mut h = Builder::default();
        h.append(0, 1, 0);
        h.append(1, 2, 1);
        h.read(2, 0, &[(0, 1), (1, 2)], 2);
        h.read(2, 1, &[(1, 2)], 2);
        let report = h.check();
        assert_valid(&report);
        assert!(report.anomalies.is_empty(), "{report:#?}");
    }

    // duplicate

    #[test]
    fn one_value_at_two_offsets_is_a_duplicate() {
        let mut h = Builder::default();
        let ack = h.append(0, 1, 0);
        let read = h.read(1, 0, &[(0, 1), (1, 1)], 2);
        let report = h.check();
        assert_one(&report, AnomalyKind::Duplicate, &[ack, read], true);
    }

    #[test]
    fn near_miss_the_same_value_read_twice_at_its_offset_is_no_duplicate() {
        let mut h = Builder::default();
        h.append(0, 1, 0);
        h.read(1, 0, &[(0, 1)], 1);
        h.read(2, 0, &[(0, 1)], 1);
        let report = h.check();
        assert_valid(&report);
        assert_eq!(report.found(AnomalyKind::Duplicate), 0);
    }

    // aborted-read

    #[test]
    fn reading_a_failed_append_is_an_aborted_read() {
        let mut h = Builder::default();
        h.invoke_append(0, 1);
        let failed = h.push(0, OpType::Fail, "append", json!({"key": "t/0", "value": 1}));
        let read = h.read(1, 0, &[(0, 1)], 1);
        let report = h.check();
        assert_one(&report, AnomalyKind::AbortedRead, &[read, failed], true);
    }

    #[test]
    fn reading_a_value_never_sent_is_an_aborted_read() {
        let mut h = Builder::default();
        let read = h.read(1, 0, &[(0, 99)], 1);
        let report = h.check();
        assert_one(&report, AnomalyKind::AbortedRead, &[read], true);
    }

    #[test]
    fn reading_a_value_sent_to_another_key_is_an_aborted_read() {
        let mut h = Builder::default();
        let invoke = h.push(
            0,
            OpType::Invoke,
            "append",
            json!({"key": "t/1", "value": 7}),
        );
        h.push(
            0,
            OpType::Ok,
            "append",
            json!({"key": "t/1", "value": 7, "offset": 0}),
        );
        let read = h.read(1, 0, &[(0, 7)], 1);
        let report = h.check();
        assert_one(&report, AnomalyKind::AbortedRead, &[read, invoke], true);
    }

    #[test]
    fn near_miss_reading_an_info_append_is_fine() {
        let mut h = Builder::default();
        h.invoke_append(0, 1);
        h.push(0, OpType::Info, "append", json!({"key": "t/0", "value": 1}));
        h.read(1, 0, &[(0, 1)], 1);
        let report = h.check();
        assert_valid(&report);
        assert!(report.anomalies.is_empty(), "{report:#?}");
        assert_eq!(report.stats.values_info_seen, 1);
    }

    // nonmonotonic-read

    #[test]
    fn a_later_read_of_a_process_returning_less_than_committed_is_nonmonotonic() {
        let mut h = Builder::default();
        h.append(0, 1, 0);
        h.append(0, 2, 1);
        let first = h.read(1, 0, &[(0, 1), (1, 2)], 2);
        // An explicit max the read stayed under: nothing capped it.
        let second = h.read_with(
            1,
            json!({"key": "t/0", "offset": 0, "max": 10}),
            &[(0, 1)],
            2,
        );
        h.final_read(2, 0, &[(0, 1), (1, 2)], 2);
        let report = h.check();
        assert_one(
            &report,
            AnomalyKind::NonmonotonicRead,
            &[first, second],
            true,
        );
    }

    #[test]
    fn near_miss_a_read_without_max_that_stops_short_of_its_high_watermark_may_be_capped() {
        // The broker caps reads without a max at its own default; such a read stopping
        // below its high watermark shows no loss beyond it.
        let mut h = Builder::default();
        for v in 0..5 {
            h.append(0, v, v);
        }
        h.final_read(1, 0, &[(0, 0), (1, 1), (2, 2)], 5);
        let report = h.check();
        assert_valid(&report);
        assert_eq!(report.found(AnomalyKind::LostWrite), 0);
    }

    #[test]
    fn a_read_whose_completion_names_the_max_it_used_cannot_hide_behind_a_cap() {
        // Our broker echoes the limit it applied; under it, a read that stops short of its
        // high watermark withheld committed records.
        let mut h = Builder::default();
        h.append(0, 1, 0);
        let ack = h.append(0, 2, 1);
        let invoke = json!({"key": "t/0", "offset": 0, "final": true});
        h.invoke_read(1, invoke.clone());
        let mut body = invoke;
        body["records"] = json!([[0, 1]]);
        body["high_watermark"] = json!(2);
        body["max"] = json!(1000);
        let fin = h.push(1, OpType::Ok, "read", body);
        let report = h.check();
        assert_one(&report, AnomalyKind::LostWrite, &[ack, fin], true);
    }

    #[test]
    fn an_ok_append_without_an_offset_counts_as_info() {
        // What acks=0 gets: 202 and no offset. It may or may not have happened.
        let mut h = Builder::default();
        h.invoke_append(0, 7);
        h.push(0, OpType::Ok, "append", json!({"key": "t/0", "value": 7}));
        h.final_read(1, 0, &[], 0);
        assert_valid(&h.check());
        let mut h = Builder::default();
        h.invoke_append(0, 7);
        h.push(0, OpType::Ok, "append", json!({"key": "t/0", "value": 7}));
        h.final_read(1, 0, &[(0, 7)], 1);
        assert_valid(&h.check());
    }

    #[test]
    fn a_linearizable_read_going_backwards_counts() {
        let mut h = Builder::default();
        h.append(0, 1, 0);
        h.append(0, 2, 1);
        let first = h.read(1, 0, &[(0, 1), (1, 2)], 2);
        let lin = json!({"key": "t/0", "offset": 0, "consistency": "linearizable"});
        let second = h.read_with(1, lin, &[(0, 1)], 1);
        h.final_read(2, 0, &[(0, 1), (1, 2)], 2);
        let report = h.check();
        assert_one(
            &report,
            AnomalyKind::NonmonotonicRead,
            &[first, second],
            true,
        );
        assert_eq!(report.counted(AnomalyKind::StaleRead), 1);
    }

    #[test]
    fn records_going_backwards_within_a_read_are_nonmonotonic() {
        let mut h = Builder::default();
        h.append(0, 1, 0);
        h.append(0, 2, 1);
        let read = h.read(1, 0, &[(1, 2), (0, 1)], 2);
        let report = h.check();
        assert_one(&report, AnomalyKind::NonmonotonicRead, &[read], true);
    }

    #[test]
    fn near_miss_a_default_read_from_a_lagging_leader_is_reported_not_counted() {
        let mut h = Builder::default();
        h.append(0, 1, 0);
        h.append(0, 2, 1);
        let first = h.read(1, 0, &[(0, 1), (1, 2)], 2);
        let second = h.read(1, 0, &[(0, 1)], 1);
        h.final_read(2, 0, &[(0, 1), (1, 2)], 2);
        let report = h.check();
        assert_one(
            &report,
            AnomalyKind::NonmonotonicRead,
            &[first, second],
            false,
        );
        assert_valid(&report);
        assert!(of_kind(&report, AnomalyKind::NonmonotonicRead)[0]
            .explanation
            .contains("1 behind"));
    }

    #[test]
    fn near_miss_a_read_the_broker_says_a_byte_limit_cut_withholds_nothing() {
        // The same final read as above, under its max and short of its high watermark,
        // but its completion says a byte limit stopped it: the next record did not fit.
        let mut h = Builder::default();
        h.append(0, 1, 0);
        h.append(0, 2, 1);
        let invoke = json!({"key": "t/0", "offset": 0, "final": true});
        h.invoke_read(1, invoke.clone());
        let mut body = invoke;
        body["records"] = json!([[0, 1]]);
        body["high_watermark"] = json!(2);
        body["max"] = json!(1000);
        body["truncated"] = json!(true);
        h.push(1, OpType::Ok, "read", body);
        h.final_read(2, 1, &[(1, 2)], 2);
        let report = h.check();
        assert_valid(&report);
        assert_eq!(report.found(AnomalyKind::LostWrite), 0, "{report:#?}");
    }

    #[test]
    fn near_miss_a_later_read_cut_short_by_its_max_is_monotonic() {
        let mut h = Builder::default();
        h.append(0, 1, 0);
        h.append(0, 2, 1);
        h.read(1, 0, &[(0, 1), (1, 2)], 2);
        h.read_with(
            1,
            json!({"key": "t/0", "offset": 0, "max": 1}),
            &[(0, 1)],
            2,
        );
        h.final_read(2, 0, &[(0, 1), (1, 2)], 2);
        let report = h.check();
        assert_valid(&report);
        assert!(report.anomalies.is_empty(), "{report:#?}");
    }

    // poll-skip

    #[test]
    fn a_poll_whose_records_jump_over_an_existing_offset_skips() {
        let mut h = Builder::default();
        h.append(0, 1, 0);
        let skipped = h.append(0, 2, 1);
        h.append(0, 3, 2);
        h.read_with(
            1,
            json!({"key": "t/0", "offset": 0, "max": 1}),
            &[(0, 1)],
            3,
        );
        let poll = h.read(1, 1, &[(2, 3)], 3);
        let report = h.check();
        assert_one(&report, AnomalyKind::PollSkip, &[poll, skipped], true);
    }

    #[test]
    fn near_miss_a_client_that_seeks_ahead_itself_is_reported_not_counted() {
        let mut h = Builder::default();
        h.append(0, 1, 0);
        h.append(0, 2, 1);
        h.append(0, 3, 2);
        let first = h.read_with(
            1,
            json!({"key": "t/0", "offset": 0, "max": 1}),
            &[(0, 1)],
            3,
        );
        let seek = h.invoke_read(1, json!({"key": "t/0", "offset": 2}));
        h.read_ok(1, &json!({"key": "t/0", "offset": 2}), &[(2, 3)], 3);
        h.final_read(2, 0, &[(0, 1), (1, 2), (2, 3)], 3);
        let report = h.check();
        assert_one(&report, AnomalyKind::PollSkip, &[first, seek], false);
        assert_valid(&report);
    }

    #[test]
    fn near_miss_polls_that_continue_exactly_skip_nothing() {
        let mut h = Builder::default();
        h.append(0, 1, 0);
        h.append(0, 2, 1);
        h.append(0, 3, 2);
        h.read_with(
            1,
            json!({"key": "t/0", "offset": 0, "max": 1}),
            &[(0, 1)],
            3,
        );
        h.read(1, 1, &[(1, 2), (2, 3)], 3);
        let report = h.check();
        assert_valid(&report);
        assert!(report.anomalies.is_empty(), "{report:#?}");
    }

    // stale-read

    #[test]
    fn a_linearizable_read_behind_an_earlier_ack_is_stale() {
        let mut h = Builder::default();
        h.append(0, 1, 0);
        let ack = h.append(0, 2, 1);
        let lin = json!({"key": "t/0", "offset": 0, "consistency": "linearizable"});
        let read = h.read_with(1, lin, &[(0, 1)], 1);
        h.final_read(2, 0, &[(0, 1), (1, 2)], 2);
        let report = h.check();
        assert_one(&report, AnomalyKind::StaleRead, &[ack, read], true);
        assert_eq!(report.stats.max_stale_lag_linearizable, 1);
    }

    #[test]
    fn a_linearizable_read_shorter_than_an_earlier_read_is_stale() {
        let mut h = Builder::default();
        h.invoke_append(0, 1);
        h.invoke_append(1, 2);
        let first = h.read(2, 0, &[(0, 1), (1, 2)], 2);
        let lin = json!({"key": "t/0", "offset": 0, "consistency": "linearizable"});
        let second = h.read_with(3, lin, &[], 0);
        h.ack(0, 1, 0);
        h.ack(1, 2, 1);
        let report = h.check();
        assert_one(&report, AnomalyKind::StaleRead, &[first, second], true);
        assert!(of_kind(&report, AnomalyKind::StaleRead)[0]
            .explanation
            .contains("2 offset(s) behind"));
    }

    #[test]
    fn near_miss_a_default_stale_read_is_reported_with_its_lag() {
        let mut h = Builder::default();
        h.append(0, 1, 0);
        h.append(0, 2, 1);
        let ack = h.append(0, 3, 2);
        let read = h.read(1, 0, &[(0, 1)], 1);
        h.final_read(2, 0, &[(0, 1), (1, 2), (2, 3)], 3);
        let report = h.check();
        assert_one(&report, AnomalyKind::StaleRead, &[ack, read], false);
        assert_valid(&report);
        assert_eq!(report.stats.max_stale_lag, 2);
        assert_eq!(report.stats.max_stale_lag_linearizable, 0);
    }

    #[test]
    fn near_miss_a_linearizable_read_concurrent_with_the_ack_is_not_stale() {
        let mut h = Builder::default();
        h.invoke_append(0, 1);
        let lin = json!({"key": "t/0", "offset": 0, "consistency": "linearizable"});
        h.invoke_read(1, lin.clone());
        h.ack(0, 1, 0);
        h.read_ok(1, &lin, &[], 0);
        h.final_read(2, 0, &[(0, 1)], 1);
        let report = h.check();
        assert_valid(&report);
        assert!(report.anomalies.is_empty(), "{report:#?}");
    }

    // realtime-order

    #[test]
    fn a_later_append_with_a_lower_offset_breaks_realtime_order() {
        let mut h = Builder::default();
        let first = h.append(0, 1, 1);
        let invoke = h.invoke_append(1, 2);
        let ack = h.ack(1, 2, 0);
        let report = h.check();
        assert_one(
            &report,
            AnomalyKind::RealtimeOrder,
            &[first, invoke, ack],
            true,
        );
    }

    #[test]
    fn an_append_below_an_earlier_reads_length_breaks_realtime_order() {
        let mut h = Builder::default();
        h.invoke_append(0, 1);
        h.invoke_append(1, 2);
        let read = h.read(2, 0, &[(0, 1), (1, 2)], 2);
        h.push(0, OpType::Info, "append", json!({"key": "t/0", "value": 1}));
        h.push(1, OpType::Info, "append", json!({"key": "t/0", "value": 2}));
        let invoke = h.invoke_append(3, 3);
        let ack = h.ack(3, 3, 1);
        let report = h.check();
        assert_one(
            &report,
            AnomalyKind::RealtimeOrder,
            &[read, invoke, ack],
            true,
        );
    }

    #[test]
    fn a_read_returning_a_value_before_its_append_began_breaks_realtime_order() {
        let mut h = Builder::default();
        let read = h.read(1, 0, &[(0, 1)], 1);
        let invoke = h.invoke_append(0, 1);
        h.ack(0, 1, 0);
        let report = h.check();
        assert_eq!(report.verdict, Verdict::Invalid);
        let found = of_kind(&report, AnomalyKind::RealtimeOrder);
        assert!(
            found
                .iter()
                .any(|a| a.ops == [read, invoke] && a.explanation.contains("before its append")),
            "{report:#?}"
        );
    }

    #[test]
    fn near_miss_concurrent_appends_may_take_offsets_in_either_order() {
        let mut h = Builder::default();
        h.invoke_append(0, 1);
        h.invoke_append(1, 2);
        h.ack(0, 1, 1);
        h.ack(1, 2, 0);
        h.final_read(2, 0, &[(0, 2), (1, 1)], 2);
        let report = h.check();
        assert_valid(&report);
        assert!(report.anomalies.is_empty(), "{report:#?}");
    }

    // Reporting and malformed input

    #[test]
    fn instances_beyond_the_cap_are_counted_not_kept() {
        let mut h = Builder::default();
        let n = MAX_REPORTED_PER_KIND as i64 + 50;
        for v in 0..n {
            h.append(0, v, v);
        }
        h.final_read(1, 0, &[], n);
        let report = h.check();
        assert_eq!(report.verdict, Verdict::Invalid);
        assert_eq!(report.found(AnomalyKind::LostWrite), n as usize);
        assert_eq!(report.counted(AnomalyKind::LostWrite), n as usize);
        assert_eq!(
            of_kind(&report, AnomalyKind::LostWrite).len(),
            MAX_REPORTED_PER_KIND
        );
        assert!(report.stats.anomalies_omitted >= 50);
    }

    #[test]
    fn nemesis_and_other_ops_are_ignored() {
        let mut h = Builder::default();
        h.ops.push(Op::new(
            0,
            Process::Nemesis,
            OpType::Info,
            "kill",
            json!("n1"),
        ));
        h.push(5, OpType::Invoke, "poll", json!(null));
        h.push(5, OpType::Ok, "poll", json!(null));
        h.ops.push(Op::new(
            3,
            Process::Nemesis,
            OpType::Info,
            "kill",
            json!("n1"),
        ));
        h.append(0, 1, 0);
        h.final_read(1, 0, &[(0, 1)], 1);
        let report = h.check();
        assert_valid(&report);
        assert_eq!(report.stats.other_client_ops, 1);
        assert_eq!(report.stats.keys, 1);
    }

    fn error_of(ops: Vec<Op>) -> String {
        match check_log(&History::from_source(
            "h.jsonl",
            ops.clone(),
            (1..=ops.len()).collect(),
        )) {
            Ok(report) => panic!("expected an error, got {report:#?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn malformed_histories_are_errors_naming_the_line() {
        let mut h = Builder::default();
        h.push(0, OpType::Invoke, "append", json!({"key": "t/0"}));
        let err = error_of(h.ops);
        assert!(
            err.starts_with("h.jsonl:1:") && err.contains("\"value\""),
            "{err}"
        );

        let mut h = Builder::default();
        h.invoke_append(0, 1);
        h.push(
            0,
            OpType::Ok,
            "append",
            json!({"key": "t/0", "value": 1, "offset": "three"}),
        );
        let err = error_of(h.ops);
        assert!(
            err.starts_with("h.jsonl:2:") && err.contains("\"offset\""),
            "{err}"
        );

        let mut h = Builder::default();
        h.invoke_read(0, json!({"key": "t/0", "offset": 0}));
        h.push(0, OpType::Ok, "read", json!({"key": "t/0", "offset": 0}));
        let err = error_of(h.ops);
        assert!(
            err.starts_with("h.jsonl:2:") && err.contains("records"),
            "{err}"
        );

        let mut h = Builder::default();
        h.read(0, 0, &[], 0);
        h.ops[1].value["records"] = json!([[0]]);
        let err = error_of(h.ops);
        assert!(err.contains("[offset, value]"), "{err}");

        let mut h = Builder::default();
        h.invoke_read(0, json!({"offset": 0}));
        let err = error_of(h.ops);
        assert!(
            err.starts_with("h.jsonl:1:") && err.contains("\"key\""),
            "{err}"
        );

        let mut h = Builder::default();
        h.append(0, 1, 0);
        h.append(1, 1, 1);
        let err = error_of(h.ops);
        assert!(
            err.starts_with("h.jsonl:3:") && err.contains("appended again"),
            "{err}"
        );

        let mut h = Builder::default();
        h.ack(0, 1, 0);
        let err = error_of(h.ops);
        assert!(err.contains("no invocation"), "{err}");
    }

    #[test]
    fn the_report_serializes_with_kebab_case_kinds() {
        let mut h = Builder::default();
        h.append(0, 1, 0);
        h.final_read(1, 0, &[], 1);
        let report = h.check();
        let json = serde_json::to_value(&report).expect("serializable");
        assert_eq!(json["verdict"], "invalid");
        assert_eq!(json["anomalies"][0]["kind"], "lost-write");
        assert_eq!(AnomalyKind::LostWrite.name(), "lost-write");
    }
}
