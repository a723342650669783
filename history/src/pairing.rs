//! Pairs each invocation with its completion and validates the history's shape.
//!
//! Rules (as Jepsen): a client process has at most one outstanding invocation; every
//! `ok`/`fail`/`info` completion of a client answers that process's outstanding invocation
//! with the same `f`. An invocation never completed counts as `info` (it may have happened).
//! Nemesis entries are `info` on both sides (or `invoke` then `info`); a completion
//! answers the nemesis's outstanding invocation of the same `f`. The nemesis may have
//! several outstanding at once, one per `f` (its fault packages run concurrently and
//! their `f` names differ), so its entries need not alternate.

use crate::error::HistoryError;
use crate::history::History;
use crate::op::{OpType, Process};
use std::collections::HashMap;

/// How an operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// It took effect.
    Ok,
    /// It certainly did not take effect.
    Fail,
    /// It may or may not have taken effect, at any time after its invocation. Also used
    /// for invocations that never completed.
    Info,
}

/// One operation: an invocation and, if it came, its completion. Positions index
/// `History::ops`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operation {
    pub process: Process,
    pub invoke: usize,
    pub completion: Option<usize>,
    pub outcome: Outcome,
}

/// Pairs every invocation with its completion, in order of invocation.
/// Errors name the file and line (or op position) of the offending entry.
pub fn pair(history: &History) -> Result<Vec<Operation>, HistoryError> {
    let mut operations: Vec<Operation> = Vec::with_capacity(history.len() / 2 + 1);
    // Per client process, the position in `operations` of its outstanding invocation.
    let mut outstanding: HashMap<Process, usize> = HashMap::new();
    // The nemesis's outstanding invocations, by f.
    let mut nemesis_open: HashMap<&str, usize> = HashMap::new();

    for (position, op) in history.ops.iter().enumerate() {
        if op.process == Process::Nemesis {
            // Info on both sides: an entry completes the outstanding one of its f, else
            // opens one. Some histories log a fault once, unpaired; that one then stays
            // open rather than making the whole history unreadable, since no checker
            // judges nemesis ops.
            let completes = op.kind != OpType::Invoke && nemesis_open.contains_key(op.f.as_str());
            if completes {
                if let Some(open) = nemesis_open.remove(op.f.as_str()) {
                    let operation = &mut operations[open];
                    operation.completion = Some(position);
                    operation.outcome = outcome_of(op.kind);
                }
            } else {
                nemesis_open.insert(op.f.as_str(), operations.len());
                operations.push(Operation {
                    process: op.process,
                    invoke: position,
                    completion: None,
                    outcome: Outcome::Info,
                });
            }
            continue;
        }
        let is_invocation = op.kind == OpType::Invoke;
        if is_invocation {
            if let Some(&open) = outstanding.get(&op.process) {
                let open_at = history.locate(operations[open].invoke);
                return Err(HistoryError::invalid(
                    history.locate(position),
                    format!(
                        "process {} invokes {} while its invocation at {} has not completed",
                        op.process, op.f, open_at
                    ),
                ));
            }
            outstanding.insert(op.process, operations.len());
            operations.push(Operation {
                process: op.process,
                invoke: position,
                completion: None,
                outcome: Outcome::Info,
            });
            continue;
        }
        let Some(open) = outstanding.remove(&op.process) else {
            return Err(HistoryError::invalid(
                history.locate(position),
                format!(
                    "{} {} of process {} has no invocation before it",
                    op.kind, op.f, op.process
                ),
            ));
        };
        let invocation = &history.ops[operations[open].invoke];
        if invocation.f != op.f {
            return Err(HistoryError::invalid(
                history.locate(position),
                format!(
                    "{} of process {} has f {:?} but its invocation at {} has f {:?}",
                    op.kind,
                    op.process,
                    op.f,
                    history.locate(operations[open].invoke),
                    invocation.f
                ),
            ));
        }
        let operation = &mut operations[open];
        operation.completion = Some(position);
        operation.outcome = outcome_of(op.kind);
    }
    Ok(operations)
}

fn outcome_of(kind: OpType) -> Outcome {
    match kind {
        OpType::Ok => Outcome::Ok,
        OpType::Fail => Outcome::Fail,
        OpType::Info | OpType::Invoke => Outcome::Info,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::Op;
    use serde_json::json;

    fn op(i: u64, p: u64, kind: OpType, f: &str) -> Op {
        Op::new(i, Process::Client(p), kind, f, json!(null))
    }

    #[test]
    fn pairs_interleaved_processes() {
        let h = History::from_ops(vec![
            op(0, 0, OpType::Invoke, "write"),
            op(1, 1, OpType::Invoke, "read"),
            op(2, 1, OpType::Ok, "read"),
            op(3, 0, OpType::Info, "write"),
            op(4, 2, OpType::Invoke, "read"),
        ]);
        let ops = pair(&h).unwrap();
        assert_eq!(ops.len(), 3);
        assert_eq!(
            (ops[0].invoke, ops[0].completion, ops[0].outcome),
            (0, Some(3), Outcome::Info)
        );
        assert_eq!(
            (ops[1].invoke, ops[1].completion, ops[1].outcome),
            (1, Some(2), Outcome::Ok)
        );
        assert_eq!(
            (ops[2].invoke, ops[2].completion, ops[2].outcome),
            (4, None, Outcome::Info)
        );
    }

    #[test]
    fn completion_without_invocation_names_the_line() {
        let h = History::from_source("h.jsonl", vec![op(0, 0, OpType::Ok, "read")], vec![7]);
        let err = pair(&h).unwrap_err().to_string();
        assert!(err.starts_with("h.jsonl:7:"), "{err}");
        assert!(err.contains("no invocation"), "{err}");
    }

    #[test]
    fn double_invocation_is_an_error() {
        let h = History::from_ops(vec![
            op(0, 3, OpType::Invoke, "read"),
            op(1, 3, OpType::Invoke, "read"),
        ]);
        let err = pair(&h).unwrap_err().to_string();
        assert!(err.contains("process 3 invokes read while"), "{err}");
        assert!(err.starts_with("op 1:"), "{err}");
    }

    #[test]
    fn mismatched_f_is_an_error() {
        let h = History::from_ops(vec![
            op(0, 0, OpType::Invoke, "read"),
            op(1, 0, OpType::Ok, "write"),
        ]);
        assert!(pair(&h)
            .unwrap_err()
            .to_string()
            .contains("has f \"write\""));
    }

    #[test]
    fn nemesis_info_pairs_alternate() {
        let n = |i, f: &str| Op::new(i, Process::Nemesis, OpType::Info, f, json!(null));
        let h = History::from_ops(vec![
            n(0, "start-partition"),
            op(1, 0, OpType::Invoke, "read"),
            n(2, "start-partition"),
            op(3, 0, OpType::Ok, "read"),
            n(4, "stop-partition"),
            n(5, "stop-partition"),
        ]);
        let ops = pair(&h).unwrap();
        assert_eq!(ops.len(), 3);
        assert_eq!(ops[0].completion, Some(2));
        assert_eq!(ops[2].completion, Some(5));
    }

    #[test]
    fn concurrent_nemesis_packages_pair_by_f() {
        let n = |i, f: &str| Op::new(i, Process::Nemesis, OpType::Info, f, json!(null));
        let h = History::from_ops(vec![
            n(0, "kill"),
            n(1, "start-partition"),
            n(2, "start-partition"),
            n(3, "kill"),
            n(4, "start"),
            n(5, "stop-partition"),
            n(6, "start"),
            n(7, "stop-partition"),
        ]);
        let ops = pair(&h).unwrap();
        let pairs: Vec<(usize, Option<usize>)> =
            ops.iter().map(|o| (o.invoke, o.completion)).collect();
        assert_eq!(
            pairs,
            vec![(0, Some(3)), (1, Some(2)), (4, Some(6)), (5, Some(7))]
        );
    }

    #[test]
    fn an_unpaired_nemesis_entry_stays_open() {
        let n = |i, f: &str| Op::new(i, Process::Nemesis, OpType::Info, f, json!(null));
        let h = History::from_ops(vec![n(0, "start"), n(1, "stop"), n(2, "stop")]);
        let ops = pair(&h).unwrap();
        assert_eq!(ops.len(), 2);
        assert_eq!((ops[0].invoke, ops[0].completion), (0, None));
        assert_eq!((ops[1].invoke, ops[1].completion), (1, Some(2)));
    }
}
