//! Every history parser on arbitrary text: none may panic, and whatever parses must also
//! pair (to an error or a result) without panicking.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let parsed = [
        history::jepsen::parse_jepsen_edn("fuzz.edn", text),
        history::porcupine::parse_etcd_log("fuzz.log", text),
        history::porcupine::parse_kv("fuzz.txt", text),
        history::jsonl::parse_jsonl("fuzz.jsonl", text),
    ];
    for history in parsed.into_iter().flatten() {
        let _ = history::pair(&history);
        // The exporter must handle whatever the importers accept.
        let _ = history::jepsen::to_jepsen_edn(&history);
    }
    let _ = history::edn::parse(text);
});
