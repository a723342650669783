//! The zone check against the Wing–Gong search (itself checked against a brute-force
//! oracle in linear_prop.rs) on thousands of small random register histories: up to four
//! concurrent processes, `ok`, `fail` and `info` writes, `ok`, `fail` and `info` reads,
//! the initial value null or 0, most reads honest (a value the register held at some
//! moment of the read) and some not (a stale value, a failed write's value, a value never
//! written, null), and now and then a value written twice, where the zones must step
//! aside. Both verdicts must agree on every history.

use checkers::linear::{
    check_linearizable, Algorithm, AlgorithmChoice, LinearError, LinearOptions, LinearReport,
    ModelKind, NotEligible,
};
use checkers::Verdict;
use history::{History, Op, OpType, Process};
use proptest::prelude::*;
use serde_json::{json, Value};

const PROCESSES: usize = 4;

/// Draws from the test's choices, cycling; 0 once they run out.
struct Choices<'a> {
    choices: &'a [u8],
    at: usize,
}

impl Choices<'_> {
    fn below(&mut self, n: u8) -> u8 {
        let choice = self.choices.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        choice % n
    }
}

#[derive(Clone, Copy)]
enum Pending {
    /// A read, and how many states the register had gone through when it was invoked.
    Read(usize),
    Write(i64),
}

/// A history played from `choices`: every op's fate (ok/fail/info, when a write takes
/// effect, what a read returns) is a choice. Writes take effect at their completion
/// (`ok`), at their completion, later or never (`info`), never (`fail`).
fn build(choices: &[u8], init: Option<i64>) -> History {
    let mut draw = Choices { choices, at: 0 };
    let mut ops = Vec::new();
    let mut pending: [Option<Pending>; PROCESSES] = [None; PROCESSES];
    let mut ids: [u64; PROCESSES] = [0, 1, 2, 3];
    // Every state the register held, in order.
    let mut states: Vec<Option<i64>> = vec![init];
    let mut next_value = 1;
    let mut failed = Vec::new();
    let steps = 8 + draw.below(24) as usize;
    // Indeterminate writes that take effect later than their completion.
    let mut deferred: Vec<i64> = Vec::new();
    for _ in 0..steps {
        if !deferred.is_empty() && draw.below(4) == 0 {
            states.push(Some(deferred.remove(0)));
        }
        let p = draw.below(PROCESSES as u8) as usize;
        let index = ops.len() as u64;
        let process = Process::Client(ids[p]);
        match pending[p].take() {
            None => {
                let (f, call) = if draw.below(2) == 0 {
                    ("read", Pending::Read(states.len() - 1))
                } else {
                    // Now and then a value written before (not eligible for the zones).
                    let value = if next_value > 2 && draw.below(12) == 0 {
                        next_value - 1
                    } else {
                        next_value += 1;
                        next_value - 1
                    };
                    ("write", Pending::Write(value))
                };
                let value = match call {
                    Pending::Write(v) => json!(v),
                    Pending::Read(_) => Value::Null,
                };
                ops.push(Op::new(index, process, OpType::Invoke, f, value));
                pending[p] = Some(call);
            }
            Some(Pending::Write(v)) => {
                let kind =
                    [OpType::Ok, OpType::Ok, OpType::Fail, OpType::Info][draw.below(4) as usize];
                match kind {
                    OpType::Ok => states.push(Some(v)),
                    OpType::Info => match draw.below(3) {
                        0 => states.push(Some(v)),
                        1 => deferred.push(v),
                        _ => {}
                    },
                    OpType::Fail => failed.push(v),
                    _ => {}
                }
                ops.push(Op::new(index, process, kind, "write", json!(v)));
                if kind == OpType::Info {
                    ids[p] += PROCESSES as u64;
                }
            }
            Some(Pending::Read(since)) => {
                let kind = [
                    OpType::Ok,
                    OpType::Ok,
                    OpType::Ok,
                    OpType::Fail,
                    OpType::Info,
                ][draw.below(5) as usize];
                let honest = states.len() - since;
                let value = match draw.below(10) {
                    // A state overwritten before the read began, if any: stale.
                    0 | 1 => states[draw.below(since.max(1) as u8) as usize],
                    2 => failed.last().copied().or(Some(99)),
                    3 => None,
                    // Most likely written later, if at all.
                    4 => Some(next_value),
                    _ => states[since + draw.below(honest as u8) as usize],
                };
                let value = match kind {
                    OpType::Ok => value.map_or(Value::Null, |v| json!(v)),
                    _ => Value::Null,
                };
                ops.push(Op::new(index, process, kind, "read", value));
                if kind == OpType::Info {
                    ids[p] += PROCESSES as u64;
                }
            }
        }
    }
    History::from_ops(ops)
}

fn check(
    history: &History,
    init: Option<i64>,
    algorithm: AlgorithmChoice,
) -> Result<LinearReport, LinearError> {
    let mut options = LinearOptions::new(ModelKind::Register);
    options.init = init.map(|v| json!(v));
    options.algorithm = algorithm;
    options.threads = 1;
    check_linearizable(history, &options)
}

/// Both verdicts, or `None` for the zones when they do not apply (then `auto` must have
/// searched, saying why).
fn verdicts(history: &History, init: Option<i64>) -> (Verdict, Option<Verdict>) {
    let searched = check(history, init, AlgorithmChoice::Wgl).expect("well-formed");
    let zones = match check(history, init, AlgorithmChoice::Zones) {
        Ok(report) => {
            assert!(report
                .algorithms
                .iter()
                .all(|p| p.algorithm == Algorithm::Zones));
            if report.verdict == Verdict::Invalid {
                let failure = report.failure.as_ref().expect("invalid names a failure");
                assert!(failure.conflict.is_some() && !failure.unplaced_description.is_empty());
            }
            Some(report.verdict)
        }
        Err(LinearError::ZonesNotApplicable {
            reason: NotEligible::RepeatedValue { .. },
            ..
        }) => {
            let auto = check(history, init, AlgorithmChoice::Auto).expect("well-formed");
            assert_eq!(auto.algorithms[0].algorithm, Algorithm::Wgl);
            assert!(auto.algorithms[0].zones_not_applicable.is_some());
            None
        }
        Err(other) => panic!("{other}"),
    };
    (searched.verdict, zones)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn zones_and_search_agree(
        choices in prop::collection::vec(any::<u8>(), 0..80),
        init_zero in any::<bool>(),
    ) {
        let init = init_zero.then_some(0);
        let history = build(&choices, init);
        let (searched, zones) = verdicts(&history, init);
        if let Some(zones) = zones {
            prop_assert_eq!(zones, searched, "{:#?}", history.ops);
        }
    }
}

/// The generator makes both kinds of history, and mostly ones the zones apply to: else
/// the agreement above would prove little.
#[test]
fn random_histories_are_valid_and_invalid_and_mostly_eligible() {
    let mut rng = rng::Rng::new(20);
    let (mut valid, mut invalid, mut ineligible) = (0, 0, 0);
    for round in 0..1000 {
        let choices: Vec<u8> = (0..80).map(|_| rng.below(256) as u8).collect();
        let init = (round % 2 == 0).then_some(0);
        match verdicts(&build(&choices, init), init) {
            (searched, Some(zones)) => {
                assert_eq!(zones, searched, "round {round}");
                match zones {
                    Verdict::Valid => valid += 1,
                    _ => invalid += 1,
                }
            }
            (_, None) => ineligible += 1,
        }
    }
    println!("{valid} valid, {invalid} invalid, {ineligible} not eligible");
    assert!(
        valid >= 300 && invalid >= 300,
        "{valid} valid, {invalid} invalid"
    );
    assert!((20..200).contains(&ineligible), "{ineligible} not eligible");
}
