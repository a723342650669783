//! Jepsen EDN import and export: both file styles, keyed ops, error lines, round trips.

use history::jepsen::{parse_jepsen_edn, read_jepsen_edn, to_jepsen_edn};
use history::{pair, History, Op, OpType, Process};
use proptest::prelude::*;
use serde_json::{json, Value};

const KNOSSOS_STYLE: &str = r#"; a cas register, Knossos test-data style
[{:process 0, :type :invoke, :f :write, :value 1}
 {:process 0, :type :ok, :f :write, :value 1}
 {:process 1, :type :invoke, :f :cas, :value [1 2]}
 {:process :nemesis, :type :info, :f :start, :value nil}
 {:process 1, :type :fail, :f :cas, :value [1 2], :error :mismatch}
 {:process :nemesis, :type :info, :f :start, :value [:isolated {"n1" #{"n2"}}]}
 {:process 2, :type :invoke, :f :read, :value nil}
 {:process 2, :type :info, :f :read, :value nil}]
"#;

#[test]
fn reads_a_vector_of_op_maps() {
    let h = parse_jepsen_edn("cas.edn", KNOSSOS_STYLE).unwrap();
    assert_eq!(h.len(), 8);
    assert_eq!(h.lines, vec![2, 3, 4, 5, 6, 7, 8, 9]);
    assert_eq!(h.source.as_deref(), Some("cas.edn"));
    let indexes: Vec<u64> = h.ops.iter().map(|op| op.index).collect();
    assert_eq!(indexes, (0..8).collect::<Vec<u64>>());
    assert_eq!(
        h.ops[2],
        Op::new(2, Process::Client(1), OpType::Invoke, "cas", json!([1, 2]))
    );
    assert_eq!(h.ops[3].process, Process::Nemesis);
    assert_eq!(h.ops[4].error, Some(json!("mismatch")));
    assert_eq!(h.ops[5].value, json!(["isolated", {"n1": ["n2"]}]));
    let operations = pair(&h).unwrap();
    assert_eq!(operations.len(), 4);
}

#[test]
fn reads_one_tagged_op_per_line() {
    let text = "#jepsen.history.Op{:index 10, :time 3291485317, :type :invoke, :process 0, :f :txn, :value [[:w 2 1]], :node \"n1\"}\n\
                #jepsen.history.Op{:index 11, :time 3291485400, :type :ok, :process 0, :f :txn, :value [[:w 2 1]], :exception {:via []}}\n";
    let h = parse_jepsen_edn("history.edn", text).unwrap();
    assert_eq!(h.lines, vec![1, 2]);
    let mut expected = Op::new(
        10,
        Process::Client(0),
        OpType::Invoke,
        "txn",
        json!([["w", 2, 1]]),
    );
    expected.time = 3291485317;
    expected.node = Some("n1".into());
    assert_eq!(h.ops[0], expected);
    assert_eq!(h.ops[1].index, 11);
}

#[test]
fn key_moves_into_the_value() {
    let text = "{:process 3, :type :invoke, :f :put, :key \"k\", :value \"v\"}\n\
                {:process 3, :type :ok, :f :put, :key 7, :value nil}\n";
    let h = parse_jepsen_edn("kv.edn", text).unwrap();
    assert_eq!(h.ops[0].value, json!({"key": "k", "value": "v"}));
    assert_eq!(h.ops[0].key().as_deref(), Some("k"));
    assert_eq!(h.ops[1].value, json!({"key": 7, "value": null}));
}

#[test]
fn empty_input_is_an_empty_history() {
    assert!(parse_jepsen_edn("e.edn", "").unwrap().is_empty());
    assert!(parse_jepsen_edn("e.edn", "; nothing\n[]\n")
        .unwrap()
        .is_empty());
}

fn error_of(text: &str) -> String {
    match parse_jepsen_edn("h.edn", text) {
        Ok(h) => panic!("{text:?} parsed as {h:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn truncated_history_names_the_unclosed_op() {
    let mut text = KNOSSOS_STYLE.to_string();
    text.truncate(text.len() - 20);
    let err = error_of(&text);
    assert!(
        err.starts_with("h.edn:9: bad EDN: line 9, column 2: unclosed '{'"),
        "{err}"
    );
    let err = error_of("{:process 0, :type :invoke, :f :read, :value \"abc\n");
    assert!(
        err.starts_with("h.edn:1: bad EDN: line 1, column 46: unclosed string"),
        "{err}"
    );
    let err = error_of("[{:process 0, :type :invoke, :f :read}\n");
    assert!(
        err.starts_with("h.edn:1: bad EDN: line 1, column 1: unclosed '['"),
        "{err}"
    );
}

#[test]
fn bad_type_names_the_line() {
    let err =
        error_of("{:process 0, :type :invoke, :f :read}\n{:process 0, :type :okay, :f :read}\n");
    assert!(err.starts_with("h.edn:2: unknown op type :okay"), "{err}");
    let err = error_of("[{:process 0, :f :read}]");
    assert!(err.starts_with("h.edn:1: op has no :type"), "{err}");
}

#[test]
fn bad_process_names_the_line() {
    let err = error_of("\n\n{:process \"p1\", :type :invoke, :f :read}");
    assert!(err.starts_with("h.edn:3: bad :process \"p1\""), "{err}");
    let err = error_of("{:process -1, :type :invoke, :f :read}");
    assert!(err.starts_with("h.edn:1: bad :process -1"), "{err}");
    let err = error_of("{:process :client, :type :invoke, :f :read}");
    assert!(err.starts_with("h.edn:1: bad :process :client"), "{err}");
    let err = error_of("{:type :invoke, :f :read}");
    assert!(err.starts_with("h.edn:1: op has no :process"), "{err}");
}

#[test]
fn other_bad_fields_name_the_line() {
    for (text, needle) in [
        ("{:process 0, :type :invoke}", "h.edn:1: op has no :f"),
        ("{:process 0, :type :invoke, :f 3}", "h.edn:1: bad :f 3"),
        (
            "{:process 0, :type :invoke, :f :r, :time -5}",
            "h.edn:1: bad :time -5",
        ),
        (
            "{:process 0, :type :invoke, :f :r, :index :x}",
            "h.edn:1: bad :index :x",
        ),
        ("\n#{1 2}", "h.edn:2: expected an op map, found #{1 2}"),
        (
            "[{:process 0, :type :invoke, :f :r}\n [1 2]]",
            "h.edn:2: expected an op map, found [1 2]",
        ),
        (
            "[{:process 0, :type :invoke, :f :r}] {:x 1}",
            "h.edn:1: unexpected value after",
        ),
        (
            "{:process 0 :type}",
            "h.edn:1: bad EDN: line 1, column 1: map has an odd number",
        ),
    ] {
        let err = error_of(text);
        assert!(err.starts_with(needle), "{text:?}: {err}");
    }
}

#[test]
fn export_writes_one_op_per_line() {
    let mut write = Op::new(
        0,
        Process::Client(0),
        OpType::Invoke,
        "write",
        json!({"key": "r1", "value": 3}),
    );
    write.time = 17;
    write.node = Some("n1".into());
    let mut kill = Op::new(
        1,
        Process::Nemesis,
        OpType::Info,
        "kill",
        json!({"nodes": ["n2"]}),
    );
    kill.error = Some(json!("boom"));
    let h = History::from_ops(vec![write, kill]);
    assert_eq!(
        to_jepsen_edn(&h),
        "[{:index 0, :time 17, :type :invoke, :process 0, :f :write, :key \"r1\", :value 3, :node \"n1\"}\n\
         {:index 1, :time 0, :type :info, :process :nemesis, :f :kill, :value {:nodes [\"n2\"]}, :error \"boom\"}]\n"
    );
}

#[test]
fn import_export_import_keeps_the_ops() {
    for text in [
        KNOSSOS_STYLE,
        "{:process 0, :type :invoke, :f :txn, :value [[:r :x nil] [:append 3 1]], :time 5}\n\
         {:process 0, :type :ok, :f :txn, :value [[:r :x [1 2]] [:append 3 1]], :time 9}\n\
         {:process 1, :type :invoke, :f :put, :key \"a b\", :value {\"odd key\" 1, 2 3}}\n\
         {:process 1, :type :info, :f \"not a keyword\", :value \\c, :error {:type :timeout}}\n",
    ] {
        let first = parse_jepsen_edn("a.edn", text).unwrap();
        let exported = to_jepsen_edn(&first);
        let second = parse_jepsen_edn("b.edn", &exported).unwrap();
        assert_eq!(second.ops, first.ops, "exported as\n{exported}");
    }
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|i| json!(i)),
        (-1e12f64..1e12).prop_map(|x| json!(x)),
        "[ -~]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[ -~]{0,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn op() -> impl Strategy<Value = Op> {
    (
        prop_oneof![(0u64..50).prop_map(Process::Client), Just(Process::Nemesis)],
        prop_oneof![
            Just(OpType::Invoke),
            Just(OpType::Ok),
            Just(OpType::Fail),
            Just(OpType::Info)
        ],
        prop_oneof![
            Just("read".to_string()),
            Just("txn".to_string()),
            "[ -~]{1,8}"
        ],
        json_value(),
        0u64..1 << 40,
        prop::option::of("[a-z0-9]{1,4}"),
        prop::option::of(json_value().prop_filter("nil reads back as no error", |v| !v.is_null())),
    )
        .prop_map(|(process, kind, f, value, time, node, error)| Op {
            index: 0,
            time,
            process,
            kind,
            f,
            value,
            node,
            error,
        })
}

proptest! {
    #[test]
    fn export_then_import_is_identity(ops in prop::collection::vec(op(), 0..8)) {
        let ops: Vec<Op> = ops
            .into_iter()
            .enumerate()
            .map(|(i, op)| Op { index: i as u64, ..op })
            .collect();
        let exported = to_jepsen_edn(&History::from_ops(ops.clone()));
        let imported = parse_jepsen_edn("p.edn", &exported);
        prop_assert!(imported.is_ok(), "{:?}\n{}", imported, exported);
        if let Ok(imported) = imported {
            prop_assert_eq!(imported.ops, ops);
        }
    }
}

#[test]
fn reads_a_file_and_names_it_in_errors() {
    let dir = std::env::temp_dir().join(format!("history-jepsen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("history.edn");
    std::fs::write(
        &path,
        "{:process 0, :type :invoke, :f :read}\n{:process 0, :type :bogus, :f :read}\n",
    )
    .unwrap();
    let err = read_jepsen_edn(&path).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!("{}:2: unknown op type", path.display())),
        "{err}"
    );
    let missing = read_jepsen_edn(&dir.join("absent.edn"))
        .unwrap_err()
        .to_string();
    assert!(missing.contains("absent.edn"), "{missing}");
    std::fs::remove_dir_all(&dir).unwrap();
}
