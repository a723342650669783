//! The harness's modules import each other in one direction only: a module graph with a
//! cycle (two modules that need each other) fails this test, naming the cycle.
//!
//! Each source file under `src/` is a module (`nightly/mod.rs` is `nightly`,
//! `nightly/detect.rs` is `nightly::detect`). A module depends on another when it names
//! it: `crate::a::b` or `super::x`. A module naming its own children (declaring them,
//! re-exporting their items) is containment, not an edge; a child naming its parent is
//! one. A reference to an item resolves to the longest module path it starts with (an
//! item a parent re-exports from its child counts as the parent's).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type ModulePath = Vec<String>;

fn module_of(relative: &Path) -> ModulePath {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let file = parts.pop().expect("a file name");
    let stem = file.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" && stem != "main" {
        parts.push(stem.to_string());
    }
    parts
}

fn rust_files(dir: &Path, into: &mut Vec<std::path::PathBuf>) {
    let entries = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: not a readable source folder: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

/// The code of a file without its comments and its `#[cfg(test)]` tail (tests may use
/// anything).
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Paths named after `prefix` (`crate::`, `super::`, `child::`), as segments; a group
/// `prefix{a::b, c}` gives each member.
fn paths_after(code: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(prefix) {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + prefix.len()..];
        if before.is_some_and(|c| is_ident(c) || c == ':') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for member in group[..end].split(',') {
                let segments = segments(member.trim());
                if !segments.is_empty() {
                    found.push(segments);
                }
            }
        } else {
            let end = rest
                .find(|c: char| !(is_ident(c) || c == ':'))
                .unwrap_or(rest.len());
            let segments = segments(&rest[..end]);
            if !segments.is_empty() {
                found.push(segments);
            }
        }
    }
    found
}

fn segments(path: &str) -> Vec<String> {
    path.split("::")
        .map(str::trim)
        .take_while(|s| !s.is_empty() && s.chars().all(is_ident))
        .map(str::to_string)
        .collect()
}

/// The longest known module path that `path` starts with.
fn resolve(path: &[String], modules: &BTreeSet<ModulePath>) -> Option<ModulePath> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|candidate| modules.contains(candidate))
}

fn find_cycle(graph: &BTreeMap<ModulePath, BTreeSet<ModulePath>>) -> Option<Vec<ModulePath>> {
    fn visit(
        node: &ModulePath,
        graph: &BTreeMap<ModulePath, BTreeSet<ModulePath>>,
        stack: &mut Vec<ModulePath>,
        done: &mut BTreeSet<ModulePath>,
    ) -> Option<Vec<ModulePath>> {
        if let Some(at) = stack.iter().position(|n| n == node) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(node.clone());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node.clone());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, stack, done) {
                return Some(cycle);
            }
        }
        stack.pop();
        done.insert(node.clone());
        None
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        if let Some(cycle) = visit(node, graph, &mut Vec::new(), &mut done) {
            return Some(cycle);
        }
    }
    None
}

/// The dependency graph of the modules of the crate whose sources are in `src`.
fn module_graph(src: &Path) -> BTreeMap<ModulePath, BTreeSet<ModulePath>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut modules = BTreeSet::new();
    let mut texts = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(src).expect("under src");
        let module = module_of(relative);
        if relative == Path::new("main.rs") {
            continue; // the binary, a crate of its own
        }
        modules.insert(module.clone());
        let text = std::fs::read_to_string(file).expect("a readable source file");
        texts.push((module, code(&text)));
    }
    let mut graph: BTreeMap<ModulePath, BTreeSet<ModulePath>> = BTreeMap::new();
    for (module, code) in &texts {
        let mut named: Vec<Vec<String>> = paths_after(code, "crate::");
        let parent: Vec<String> = module[..module.len().saturating_sub(1)].to_vec();
        for path in paths_after(code, "super::") {
            named.push(parent.iter().cloned().chain(path).collect());
        }
        for child in modules.iter().filter(|m| m.len() == module.len() + 1) {
            if !child.starts_with(module) {
                continue;
            }
            let name = child.last().expect("a child has a name");
            if !paths_after(code, &format!("{name}::")).is_empty() {
                named.push(child.clone());
            }
        }
        let edges = graph.entry(module.clone()).or_default();
        for path in named {
            if let Some(target) = resolve(&path, &modules) {
                // A module's own items, the crate root's re-exports and a module's own
                // children (declaring and re-exporting them is containment) are not edges.
                if !target.starts_with(module) && !target.is_empty() {
                    edges.insert(target);
                }
            }
        }
    }
    graph
}

/// The crates of the harness side of the workspace (the broker is the system under
/// test, with its own layout).
const CRATES: &[&str] = &[
    "harness",
    "workloads",
    "backend",
    "spec",
    "report",
    "checkers",
    "history",
    "nemesis",
    "rng",
    "sut",
    "driver",
];

#[test]
fn only_the_driver_knows_the_brokers_api() {
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let mut found = Vec::new();
    for name in CRATES.iter().filter(|c| **c != "driver") {
        let mut files = Vec::new();
        rust_files(&root.join(name).join("src"), &mut files);
        assert!(!files.is_empty(), "{name}/src was not read");
        for file in files {
            let text = std::fs::read_to_string(&file).expect("source file");
            let code = code(&text);
            let shown = file
                .strip_prefix(root)
                .unwrap_or(&file)
                .display()
                .to_string();
            // The broker's HTTP paths belong to the driver.
            if code.contains("\"/v1/") {
                found.push(format!("{shown}: a /v1/ path"));
            }
            // The harness names the driver in one place.
            if code.contains("driver::") && !shown.ends_with("harness/src/system.rs") {
                found.push(format!("{shown}: names the driver"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "broker knowledge outside the driver: {found:#?}"
    );
}

#[test]
fn the_modules_of_each_crate_have_no_cycle() {
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let mut cycles = Vec::new();
    for name in CRATES {
        let graph = module_graph(&root.join(name).join("src"));
        assert!(!graph.is_empty(), "{name}/src was not read");
        if let Some(cycle) = find_cycle(&graph) {
            let names: Vec<String> = cycle.iter().map(|m| m.join("::")).collect();
            cycles.push(format!("{name}: {}", names.join(" → ")));
        }
    }
    assert!(
        cycles.is_empty(),
        "modules import each other in a circle:\n{}",
        cycles.join("\n")
    );
}

#[test]
fn the_check_finds_a_cycle_when_there_is_one() {
    let dir = std::env::temp_dir().join(format!("module-graph-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("b")).expect("a scratch folder");
    let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).expect("written");
    write("lib.rs", "pub mod a;\npub mod b;\n");
    write("a.rs", "use crate::b::c::helper;\n");
    write("b/mod.rs", "pub mod c;\n");
    write("b/c.rs", "use crate::{a::thing, b};\npub fn helper() {}\n");
    let graph = module_graph(&dir);
    let cycle = find_cycle(&graph).expect("a → b::c → a");
    assert!(cycle.len() >= 3, "{cycle:?}");
    // A parent naming its child and the child naming its parent is no cycle.
    write("a.rs", "pub struct Thing;\n");
    write("b/c.rs", "use super::Thing;\npub fn helper() {}\n");
    write(
        "b/mod.rs",
        "pub mod c;\npub use c::helper;\npub struct Thing;\n",
    );
    assert_eq!(find_cycle(&module_graph(&dir)), None);
    let _ = std::fs::remove_dir_all(&dir);
}
