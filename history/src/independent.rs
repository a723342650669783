//! Jepsen's `jepsen.independent` histories: every client op's value is a `[key value]`
//! tuple, so that one history holds many independent keys. Lifting them gives our keyed
//! shape, `{"key": key, "value": value}`, which the checkers split by key.
//!
//! Not guessed: a plain cas-register history's values are pairs too (`[old new]`), so the
//! caller says when a history is independent.

use crate::error::HistoryError;
use crate::history::History;
use serde_json::{json, Value};

/// Rewrites every client op's `[key value]` value as `{"key": key, "value": value}`.
/// Nemesis ops are left alone. Any client op whose value is not a two-element vector is
/// an error naming its place.
pub fn lift_independent(history: &History) -> Result<History, HistoryError> {
    let mut lifted = history.clone();
    for (position, op) in lifted.ops.iter_mut().enumerate() {
        if !op.process.is_client() {
            continue;
        }
        let tuple = match &mut op.value {
            Value::Array(items) if items.len() == 2 => std::mem::take(items),
            other => {
                return Err(HistoryError::invalid(
                    history.locate(position),
                    format!(
                        "{} {} of process {} has value {other}, not a [key value] tuple as independent histories need",
                        op.kind, op.f, op.process
                    ),
                ))
            }
        };
        let mut items = tuple.into_iter();
        let (key, value) = (
            items.next().unwrap_or(Value::Null),
            items.next().unwrap_or(Value::Null),
        );
        op.value = json!({ "key": key, "value": value });
    }
    Ok(lifted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jepsen::parse_jepsen_edn;

    #[test]
    fn lifts_tuples_and_leaves_the_nemesis_alone() {
        let text = "[{:process 0 :type :invoke :f :cas :value [1 [1 2]]}\n\
                    {:process :nemesis :type :info :f :start :value nil}\n\
                    {:process 0 :type :ok :f :cas :value [1 [1 2]]}]";
        let h = lift_independent(&parse_jepsen_edn("i.edn", text).unwrap()).unwrap();
        assert_eq!(h.ops[0].value, json!({"key": 1, "value": [1, 2]}));
        assert_eq!(h.ops[1].value, Value::Null);
        assert_eq!(h.ops[2].key().as_deref(), Some("1"));
    }

    #[test]
    fn a_value_that_is_no_tuple_is_an_error_naming_the_line() {
        let text = "[{:process 0 :type :invoke :f :write :value [1 5]}\n\
                    {:process 0 :type :ok :f :write :value 5}]";
        let err = lift_independent(&parse_jepsen_edn("i.edn", text).unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("i.edn:2:") && err.contains("not a [key value] tuple"),
            "{err}"
        );
    }
}
