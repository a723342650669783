//! The checker against a brute-force oracle on small random histories.
//!
//! The oracle shares no code with the checker: it tries every order of the ops that
//! respects real time, treating `info` ops as optional (they may not have happened)
//! rather than open to the end, and has none of the search's pruning (cache, committed
//! reads, interchangeable ops). Agreement on many random histories checks both the
//! semantics and that the pruning loses no linearization.

use checkers::linear::{check_linearizable, LinearOptions, ModelKind};
use checkers::Verdict;
use history::{History, Op, OpType, Process};
use proptest::prelude::*;
use serde_json::{json, Value};

#[derive(Debug, Clone, Copy)]
enum Call {
    Read,
    Write(i64),
    Cas(i64, i64),
}

/// What a process does next: invoke a call, or complete its pending one.
#[derive(Debug, Clone, Copy)]
enum Step {
    Invoke(usize, Call),
    /// Process, outcome (0 ok, 1 fail, 2 info), value a read returns (-1 for nil).
    Complete(usize, u8, i64),
}

fn call() -> impl Strategy<Value = Call> {
    prop_oneof![
        Just(Call::Read),
        (0i64..3).prop_map(Call::Write),
        (0i64..3, 0i64..3).prop_map(|(old, new)| Call::Cas(old, new)),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0usize..3, call()).prop_map(|(p, c)| Step::Invoke(p, c)),
        (
            0usize..3,
            prop_oneof![4 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)],
            -1i64..3
        )
            .prop_map(|(p, outcome, read)| Step::Complete(p, outcome, read)),
    ]
}

/// Plays the steps into a well-formed history: an invoke of a busy process or a
/// completion of an idle one is skipped; after `info` a process continues under a new id.
fn build(steps: &[Step]) -> History {
    let mut ops = Vec::new();
    let mut pending: [Option<Call>; 3] = [None; 3];
    let mut ids = [0u64, 1, 2];
    for step in steps {
        let index = ops.len() as u64;
        match *step {
            Step::Invoke(p, call) if pending[p].is_none() => {
                pending[p] = Some(call);
                ops.push(Op::new(
                    index,
                    Process::Client(ids[p]),
                    OpType::Invoke,
                    name(call),
                    arg(call),
                ));
            }
            Step::Complete(p, outcome, read) => {
                let Some(call) = pending[p].take() else {
                    continue;
                };
                let kind = [OpType::Ok, OpType::Fail, OpType::Info][outcome as usize];
                let value = match call {
                    Call::Read if kind == OpType::Ok && read >= 0 => json!(read),
                    Call::Read => Value::Null,
                    other => arg(other),
                };
                ops.push(Op::new(
                    index,
                    Process::Client(ids[p]),
                    kind,
                    name(call),
                    value,
                ));
                if kind == OpType::Info {
                    ids[p] += 3;
                }
            }
            Step::Invoke(..) => {}
        }
    }
    History::from_ops(ops)
}

fn name(call: Call) -> &'static str {
    match call {
        Call::Read => "read",
        Call::Write(_) => "write",
        Call::Cas(..) => "cas",
    }
}

fn arg(call: Call) -> Value {
    match call {
        Call::Read => Value::Null,
        Call::Write(v) => json!(v),
        Call::Cas(old, new) => json!([old, new]),
    }
}

/// A step of the oracle's model: the state after the op, or `None` if it is illegal.
type Apply = fn(&OracleOp, Option<i64>) -> Option<Option<i64>>;

/// One op as the oracle sees it. States are `Option<i64>`; `None` is nil / absent.
#[derive(Debug, Clone)]
struct OracleOp {
    call: usize,
    /// Position of the completion for ops that must have happened by then.
    ret: Option<usize>,
    /// Whether it must be in the linearization (`ok`, and etcd's failed cas).
    required: bool,
    apply: Apply,
    a: Option<i64>,
    b: Option<i64>,
}

fn read(op: &OracleOp, state: Option<i64>) -> Option<Option<i64>> {
    (state == op.a).then_some(state)
}
fn write(op: &OracleOp, _: Option<i64>) -> Option<Option<i64>> {
    Some(op.a)
}
fn cas(op: &OracleOp, state: Option<i64>) -> Option<Option<i64>> {
    (state.is_some() && state == op.a).then_some(op.b)
}
fn knossos_cas(op: &OracleOp, state: Option<i64>) -> Option<Option<i64>> {
    (state == op.a).then_some(op.b)
}
fn failed_cas(op: &OracleOp, state: Option<i64>) -> Option<Option<i64>> {
    (state.is_none() || state != op.a).then_some(state)
}

fn oracle_ops(history: &History, etcd: bool) -> Vec<OracleOp> {
    let mut result = Vec::new();
    for (i, op) in history.ops.iter().enumerate() {
        if op.kind != OpType::Invoke {
            continue;
        }
        let completion = history.ops[i + 1..]
            .iter()
            .position(|c| c.process == op.process)
            .map(|offset| i + 1 + offset);
        let kind = completion.map_or(OpType::Info, |c| history.ops[c].kind);
        let int = |v: &Value| v.as_i64();
        let (apply, a, b): (Apply, _, _) = match (op.f.as_str(), kind) {
            ("read", OpType::Ok) => {
                let value = completion.and_then(|c| int(&history.ops[c].value));
                if value.is_none() && !etcd {
                    continue;
                }
                (read, value, None)
            }
            ("read", _) => continue,
            ("write", OpType::Fail) => continue,
            ("write", _) => (write, int(&op.value), None),
            ("cas", OpType::Fail) if etcd => (failed_cas, int(&op.value[0]), None),
            ("cas", OpType::Fail) => continue,
            ("cas", _) if etcd => (cas, int(&op.value[0]), int(&op.value[1])),
            ("cas", _) => (knossos_cas, int(&op.value[0]), int(&op.value[1])),
            _ => unreachable!("generated ops are read, write or cas"),
        };
        let required = kind != OpType::Info;
        result.push(OracleOp {
            call: i,
            ret: if required { completion } else { None },
            required,
            apply,
            a,
            b,
        });
    }
    result
}

/// Tries every real-time-respecting order, info ops optional.
fn oracle(ops: &[OracleOp], placed: &mut Vec<bool>, state: Option<i64>) -> bool {
    if ops
        .iter()
        .zip(placed.iter())
        .all(|(op, &done)| done || !op.required)
    {
        return true;
    }
    for (i, op) in ops.iter().enumerate() {
        if placed[i] {
            continue;
        }
        // Placing op i now is too late for any unplaced required op that returned before
        // i was invoked.
        let blocked = ops.iter().zip(placed.iter()).any(|(other, &done)| {
            !done && other.required && other.ret.is_some_and(|ret| ret < op.call)
        });
        if blocked {
            continue;
        }
        if let Some(next) = (op.apply)(op, state) {
            placed[i] = true;
            let found = oracle(ops, placed, next);
            placed[i] = false;
            if found {
                return true;
            }
        }
    }
    false
}

fn oracle_verdict(history: &History, etcd: bool, init: Option<i64>) -> Verdict {
    let ops = oracle_ops(history, etcd);
    let mut placed = vec![false; ops.len()];
    if oracle(&ops, &mut placed, init) {
        Verdict::Valid
    } else {
        Verdict::Invalid
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(600))]

    #[test]
    fn linear_cas_register_agrees_with_the_oracle(steps in prop::collection::vec(step(), 0..22)) {
        let history = build(&steps);
        let mut options = LinearOptions::new(ModelKind::CasRegister);
        options.init = Some(json!(0));
        let report = check_linearizable(&history, &options).unwrap();
        prop_assert_eq!(report.verdict, oracle_verdict(&history, false, Some(0)), "{:#?}", history.ops);
    }

    #[test]
    fn linear_etcd_agrees_with_the_oracle(steps in prop::collection::vec(step(), 0..22)) {
        let history = build(&steps);
        let report = check_linearizable(&history, &LinearOptions::new(ModelKind::Etcd)).unwrap();
        prop_assert_eq!(report.verdict, oracle_verdict(&history, true, None), "{:#?}", history.ops);
        if let Some(failure) = &report.failure {
            prop_assert!(!failure.longest_prefix.contains(&failure.unplaced));
        }
    }
}
