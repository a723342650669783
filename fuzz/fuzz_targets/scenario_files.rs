//! Scenario files from arbitrary text: `Scenario::parse` (TOML, then every section's and
//! step's checks, predicates included) must turn down what it cannot use with an error
//! naming the file, never panic; and a scenario it accepts has steps and a cluster to
//! run them on.

#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(scenario) = harness::scenario::Scenario::parse(Path::new("fuzz.toml"), text) {
        assert!(
            !scenario.cluster.nodes.is_empty(),
            "a scenario without nodes"
        );
    }
});
