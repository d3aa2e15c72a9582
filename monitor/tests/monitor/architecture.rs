//! The module graph of `warden-monitor`, read from its sources: it has no
//! cycles, it is the one ARCHITECTURE.md shows, and the pure core imports
//! neither tonic nor tokio nor sled nor the proto crate.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The modules that decide, with no I/O and no transport.
const CORE: &[&str] =
    &["normalize", "redact", "programs", "command", "entities", "policy", "index", "grants", "decision", "policytest"];

/// A module's source without its `#[cfg(test)] mod tests { … }` (a `mod tests;` file is not read).
fn source(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    match text.find("#[cfg(test)]\nmod tests {") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

/// The `crate::…` modules a source names, in `use` lines and paths.
fn uses(text: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item.trim().chars().take_while(|c| c.is_ascii_lowercase() || *c == '_').collect();
                found.insert(name);
            }
        } else {
            let name: String = rest.chars().take_while(|c| c.is_ascii_lowercase() || *c == '_').collect();
            found.insert(name);
        }
    }
    found.retain(|m| modules.contains(m));
    found
}

/// The top-level modules of `src/` (a file `m.rs`, or a folder `m/` with
/// `mod.rs`), each with the text of all its files.
fn modules() -> BTreeMap<String, String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()) {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(module) = name.strip_suffix(".rs") {
            if module != "lib" && module != "main" {
                out.insert(module.to_owned(), source(&path));
            }
        } else if path.join("mod.rs").is_file() {
            let mut files: Vec<_> =
                std::fs::read_dir(&path).unwrap().filter_map(|e| e.ok()).map(|e| e.path()).collect();
            files.sort();
            let text = files
                .iter()
                .filter(|f| f.extension().is_some_and(|e| e == "rs") && !f.ends_with("tests.rs"))
                .map(|f| source(f))
                .collect();
            out.insert(name, text);
        }
    }
    out
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let modules = modules();
    let names: BTreeSet<String> = modules.keys().cloned().collect();
    modules
        .iter()
        .map(|(m, text)| {
            let mut deps = uses(text, &names);
            deps.remove(m);
            (m.clone(), deps)
        })
        .collect()
}

/// The graph block of ARCHITECTURE.md: ```` ```text module-graph ```` lines
/// of `module -> a, b`.
fn documented() -> BTreeMap<String, BTreeSet<String>> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../ARCHITECTURE.md")).unwrap();
    let start = text.find("```text module-graph\n").expect("ARCHITECTURE.md has a ```text module-graph block");
    let block = &text[start + "```text module-graph\n".len()..];
    let block = &block[..block.find("```").unwrap()];
    block
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let (module, deps) = line.split_once("->").unwrap_or((line, ""));
            let deps = deps.split(',').map(str::trim).filter(|d| !d.is_empty()).map(str::to_owned).collect();
            (module.trim().to_owned(), deps)
        })
        .collect()
}

fn render(graph: &BTreeMap<String, BTreeSet<String>>) -> String {
    graph
        .iter()
        .map(|(m, deps)| {
            format!("{m} -> {}", deps.iter().cloned().collect::<Vec<_>>().join(", ")).trim_end().to_owned()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_module_graph_has_no_cycles() {
    let graph = graph();
    // Depth-first search for a way back.
    fn back(graph: &BTreeMap<String, BTreeSet<String>>, at: &str, path: &mut Vec<String>) -> Option<Vec<String>> {
        if let Some(from) = path.iter().position(|m| m == at) {
            let mut cycle = path[from..].to_vec();
            cycle.push(at.to_owned());
            return Some(cycle);
        }
        path.push(at.to_owned());
        for next in graph.get(at).into_iter().flatten() {
            if let Some(cycle) = back(graph, next, path) {
                return Some(cycle);
            }
        }
        path.pop();
        None
    }
    for module in graph.keys() {
        if let Some(cycle) = back(&graph, module, &mut Vec::new()) {
            panic!("a cycle in the module graph: {}", cycle.join(" -> "));
        }
    }
}

#[test]
fn architecture_md_shows_the_module_graph() {
    let graph = graph();
    assert_eq!(documented(), graph, "ARCHITECTURE.md's module graph is stale; it is now:\n{}", render(&graph));
}

#[test]
fn the_core_imports_no_transport_store_or_runtime() {
    let graph = graph();
    let sources = modules();
    for module in CORE {
        let text = sources.get(*module).unwrap_or_else(|| panic!("no core module `{module}`"));
        for banned in ["tonic", "tokio", "sled", "warden_proto", "hyper", "tower"] {
            assert!(
                !text.contains(&format!("{banned}::")) && !text.contains(&format!("use {banned}")),
                "core module `{module}` uses `{banned}`"
            );
        }
        // Nor does it reach the modules that do, however indirectly.
        let mut seen = BTreeSet::new();
        let mut stack = vec![(*module).to_owned()];
        while let Some(at) = stack.pop() {
            for next in graph.get(&at).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        for effectful in ["store", "service", "grpc", "server", "watch", "wal", "config", "auth", "checkpoint"] {
            assert!(!seen.contains(effectful), "core module `{module}` reaches `{effectful}`");
        }
    }
}
