//! The EDN reader and printer: syntax coverage, error positions, and print → parse
//! round trips of generated values.

use history::edn::{self, Edn, EdnParser, MAX_DEPTH};
use proptest::prelude::*;
use serde_json::json;

fn kw(name: &str) -> Edn {
    Edn::Keyword(name.to_string())
}

#[test]
fn reads_the_subset_jepsen_writes() {
    let text = r#"#jepsen.history.Op{:index 0, :type :invoke, :f :txn,
        :value [[:r :x nil] [:append :x/y 12345678901N]], :time -3, :ok? true,
        :error #inst "2024-01-01T00:00:00Z", :s "a\"b\\c\n\t\u00e9", :c [\a \newline \u0041 \space],
        :set #{1 2}, :list (1 #_ discarded 2), :float [1.5 -2e3 3.0M ##Inf]}"#;
    let value = edn::parse(text).unwrap();
    let Edn::Tagged(tag, inner) = &value else {
        panic!("{value:?}")
    };
    assert_eq!(tag, "jepsen.history.Op");
    let Edn::Map(entries) = &**inner else {
        panic!("{inner:?}")
    };
    let get = |name: &str| {
        entries
            .iter()
            .find(|(k, _)| *k == kw(name))
            .map(|(_, v)| v.clone())
            .unwrap()
    };
    assert_eq!(get("index"), Edn::Int(0));
    assert_eq!(get("time"), Edn::Int(-3));
    assert_eq!(get("ok?"), Edn::Bool(true));
    assert_eq!(
        get("value"),
        Edn::Vector(vec![
            Edn::Vector(vec![kw("r"), kw("x"), Edn::Nil]),
            Edn::Vector(vec![kw("append"), kw("x/y"), Edn::Int(12345678901)]),
        ])
    );
    assert_eq!(get("s"), Edn::Str("a\"b\\c\n\té".into()));
    assert_eq!(
        get("c"),
        Edn::Vector(vec![
            Edn::Char('a'),
            Edn::Char('\n'),
            Edn::Char('A'),
            Edn::Char(' ')
        ])
    );
    assert_eq!(get("set"), Edn::Set(vec![Edn::Int(1), Edn::Int(2)]));
    assert_eq!(get("list"), Edn::List(vec![Edn::Int(1), Edn::Int(2)]));
    assert_eq!(
        get("float"),
        Edn::Vector(vec![
            Edn::Float(1.5),
            Edn::Float(-2000.0),
            Edn::Float(3.0),
            Edn::Float(f64::INFINITY)
        ])
    );
    assert_eq!(
        get("error"),
        Edn::Tagged(
            "inst".into(),
            Box::new(Edn::Str("2024-01-01T00:00:00Z".into()))
        )
    );
}

#[test]
fn streams_values_with_their_lines() {
    let text = "{:a 1}\n\n; comment\n{:a 2} {:a\n3}\n";
    let mut parser = EdnParser::new(text);
    let mut lines = Vec::new();
    while let Some((_, line)) = parser.next_value().unwrap() {
        lines.push(line);
    }
    assert_eq!(lines, vec![1, 4, 4]);
}

#[test]
fn entered_sequence_yields_elements_with_lines() {
    let text = "[{:a 1}\n {:a 2}\n]\n";
    let mut parser = EdnParser::new(text);
    assert!(parser.enter_sequence().unwrap());
    assert_eq!(parser.next_value().unwrap().map(|(_, l)| l), Some(1));
    assert_eq!(parser.next_value().unwrap().map(|(_, l)| l), Some(2));
    assert_eq!(parser.next_value().unwrap(), None);
    assert_eq!(parser.next_value().unwrap(), None);
}

#[test]
fn to_json_follows_the_documented_mapping() {
    let value =
        edn::parse(r#"{:k :kw, "s" sym, 1 [nil 2.5 ##NaN], [1 2] #{\c}, :t #inst "x", :big 7N}"#)
            .unwrap();
    assert_eq!(
        edn::to_json(&value),
        json!({"k": "kw", "s": "sym", "1": [null, 2.5, null], "[1 2]": ["c"], "t": "x", "big": 7})
    );
}

fn error_of(text: &str) -> edn::EdnError {
    match edn::parse(text) {
        Ok(value) => panic!("{text:?} parsed as {value:?}"),
        Err(e) => e,
    }
}

#[test]
fn unclosed_collections_name_where_they_opened() {
    let err = error_of("[1 2\n  {:a [3\n");
    assert_eq!((err.line, err.column), (2, 7), "{err}");
    assert!(err.message.contains("unclosed '['"), "{err}");
    let err = error_of("{:a 1\n:b");
    assert_eq!((err.line, err.column), (1, 1), "{err}");
    assert!(err.message.contains("unclosed '{'"), "{err}");
    let err = error_of("\n  (1");
    assert_eq!(
        err.to_string(),
        "line 2, column 3: unclosed '(': the input ends before its ')'"
    );
}

#[test]
fn unclosed_string_names_where_it_opened() {
    let err = error_of("[\"ok\"\n \"never closed\n more");
    assert_eq!((err.line, err.column), (2, 2), "{err}");
    assert!(err.message.contains("unclosed string"), "{err}");
}

#[test]
fn syntax_errors_name_line_and_column() {
    for (text, line, column, needle) in [
        ("[1 2}", 1, 5, "unexpected '}'"),
        ("\n)", 2, 1, "unexpected ')'"),
        ("{:a}", 1, 1, "odd number"),
        ("[1 \"\\q\"]", 1, 5, "unknown escape"),
        ("\"\\u12\"", 1, 2, "four hex digits"),
        ("\"\\ud800\"", 1, 2, "surrogate"),
        ("[12abc]", 1, 2, "invalid number"),
        ("99999999999999999999", 1, 1, "64 bits"),
        ("\\nope", 1, 1, "character literal"),
        ("::auto", 1, 1, "auto-resolved"),
        ("[#_]", 1, 4, "nothing to discard"),
        ("#:ns{:a 1}", 1, 1, "tag must start with a letter"),
        ("##Nope", 1, 1, "symbolic value"),
        ("(#foo)", 1, 6, "has no value"),
        ("@x", 1, 1, "reader macro"),
        (":", 1, 1, "keyword name"),
        ("1 2", 1, 3, "after the value"),
        ("  ", 1, 3, "end of input"),
    ] {
        let err = error_of(text);
        assert_eq!((err.line, err.column), (line, column), "{text:?}: {err}");
        assert!(err.message.contains(needle), "{text:?}: {err}");
    }
}

#[test]
fn nesting_is_limited() {
    let fits = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
    assert!(edn::parse(&fits).is_ok());
    let one_more = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
    assert!(error_of(&one_more).message.contains("nesting deeper"));
    let deep = "[".repeat(100_000);
    let err = error_of(&deep);
    assert!(err.message.contains("nesting deeper"), "{err}");
    let tags = "#a ".repeat(100_000) + "1";
    assert!(error_of(&tags).message.contains("nesting deeper"));
    let discards = "#_".repeat(100_000) + "1";
    assert!(error_of(&discards).message.contains("nesting deeper"));
}

#[test]
fn prints_clojure_style() {
    let value = Edn::Tagged(
        "jepsen.history.Op".into(),
        Box::new(Edn::Map(vec![
            (kw("type"), kw("ok")),
            (
                kw("value"),
                Edn::Vector(vec![Edn::Int(1), Edn::Str("a\nb".into()), Edn::Nil]),
            ),
        ])),
    );
    assert_eq!(
        value.to_string(),
        "#jepsen.history.Op{:type :ok, :value [1 \"a\\nb\" nil]}"
    );
    assert_eq!(Edn::Float(f64::NEG_INFINITY).to_string(), "##-Inf");
    assert_eq!(Edn::Float(1.0).to_string(), "1.0");
}

#[test]
fn name_checks_reject_what_would_not_read_back() {
    assert!(edn::is_keyword_name("read"));
    assert!(edn::is_keyword_name("ns/name"));
    assert!(!edn::is_keyword_name("two words"));
    assert!(!edn::is_keyword_name(""));
    assert!(!edn::is_keyword_name("a[0]"));
    assert!(edn::is_symbol_name("x"));
    assert!(!edn::is_symbol_name("nil"));
    assert!(!edn::is_symbol_name("-1x"));
}

fn name() -> impl Strategy<Value = String> {
    "[a-zA-Z*!_?<>=][a-zA-Z0-9*!_?<>=.+-]{0,6}(/[a-z][a-z0-9-]{0,4})?"
}

fn leaf() -> impl Strategy<Value = Edn> {
    prop_oneof![
        Just(Edn::Nil),
        any::<bool>().prop_map(Edn::Bool),
        any::<i64>().prop_map(Edn::Int),
        any::<f64>()
            .prop_filter("NaN never equals itself", |x| !x.is_nan())
            .prop_map(Edn::Float),
        any::<String>().prop_map(Edn::Str),
        any::<char>().prop_map(Edn::Char),
        name().prop_map(Edn::Keyword),
        name()
            .prop_filter("reserved words read as values", |s| edn::is_symbol_name(s))
            .prop_map(Edn::Symbol),
    ]
}

fn tree() -> impl Strategy<Value = Edn> {
    leaf().prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Edn::List),
            prop::collection::vec(inner.clone(), 0..6).prop_map(Edn::Vector),
            prop::collection::vec(inner.clone(), 0..6).prop_map(Edn::Set),
            prop::collection::vec((inner.clone(), inner.clone()), 0..4).prop_map(Edn::Map),
            ("[a-z][a-z.]{0,12}", inner).prop_map(|(tag, v)| Edn::Tagged(tag, Box::new(v))),
        ]
    })
}

proptest! {
    #[test]
    fn print_then_parse_is_identity(value in tree()) {
        let text = value.to_string();
        let parsed = edn::parse(&text);
        prop_assert_eq!(parsed.as_ref(), Ok(&value), "printed as {}", text);
    }

    #[test]
    fn parser_never_panics(text in "\\PC{0,64}") {
        let _ = edn::parse(&text);
    }

    #[test]
    fn parser_never_panics_on_edn_like_text(text in "[\\[\\]{}()#_:;\"\\\\ \na-z0-9.+-]{0,64}") {
        let mut parser = EdnParser::new(&text);
        let _ = parser.enter_sequence();
        while let Ok(Some(_)) = parser.next_value() {}
    }
}
