//! The module ladder of `src/`: each module imports only modules below it
//! (LAYERS, bottom first), so no ring can form, and the core (the layers
//! below FIRST_IO) does no I/O. Read from the `crate::` paths of non-test
//! code (cargo-modules would tell the same, but takes minutes to install).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// Bottom first: a module may import only modules listed before it.
const LAYERS: &[&str] = &[
    "text", "env", "error", "files", "names", "cpuset", "slurm", "method", "vendor", "topology",
    "settings", "step", "host", "cli",
];
/// The first layer that may touch the machine.
const FIRST_IO: &str = "host";
/// What I/O looks like in a line of code.
const IO_MARKS: &[&str] = &[
    "std::fs",
    "env::var",
    "Command",
    "File::",
    "read_dir",
    ".exists()",
    "Nvml::",
    "stdout(",
    "stderr(",
];

type Graph = BTreeMap<String, BTreeSet<String>>;

#[test]
fn modules_import_only_downwards_and_the_core_does_no_io() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let rank = |m: &str| LAYERS.iter().position(|l| *l == m);
    let (mut graph, mut problems, mut dirs) = (Graph::new(), Vec::new(), vec![src.clone()]);
    while let Some(dir) = dirs.pop() {
        for path in fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()) {
            let rel = path.strip_prefix(&src).unwrap().display().to_string();
            let (top, file) = rel.split_once('/').unwrap_or((&rel, &rel));
            let top = top.trim_end_matches(".rs");
            let stem = file.trim_end_matches(".rs");
            let test_file = ["tests", "testing"].contains(&stem) || stem.ends_with("_tests");
            if path.is_dir() {
                dirs.push(path);
                continue;
            } else if !rel.ends_with(".rs") || rel == "lib.rs" || rel == "main.rs" || test_file {
                continue;
            }
            let Some(own) = rank(top) else {
                problems.push(format!("{rel}: module {top} is in no layer of LAYERS"));
                continue;
            };
            let core = own < rank(FIRST_IO).unwrap();
            for line in code_lines(&fs::read_to_string(&path).unwrap()) {
                for to in imported(line).into_iter().filter(|to| to != top) {
                    graph.entry(top.to_string()).or_default().insert(to.clone());
                    match rank(&to) {
                        Some(r) if r < own => {}
                        Some(_) => problems.push(format!("{rel}: {top} imports {to}: {line}")),
                        None => problems.push(format!("{rel}: {to} is in no layer: {line}")),
                    }
                }
                if core && IO_MARKS.iter().any(|m| line.contains(m)) {
                    problems.push(format!("{rel}: I/O in the core: {line}"));
                }
            }
        }
    }
    problems.extend(ring(&graph));
    problems.sort();
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

/// The code of a file: comments and `#[cfg(test)]` items left out (a
/// `#[cfg(test)] mod tests {` ends the file's code).
fn code_lines(text: &str) -> Vec<&str> {
    let (mut code, mut lines) = (Vec::new(), text.lines().map(str::trim));
    while let Some(line) = lines.next() {
        if line == "#[cfg(test)]" {
            match lines.next() {
                Some(next) if next.starts_with("mod ") && next.ends_with('{') => break,
                _ => continue,
            }
        }
        let line = line.split("//").next().unwrap_or_default();
        if !line.trim().is_empty() {
            code.push(line);
        }
    }
    code
}

/// The modules a line names as `crate::MODULE` (`crate::Error`: `error`).
fn imported(line: &str) -> Vec<String> {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut found = Vec::new();
    for (at, _) in line.match_indices("crate::") {
        if line[..at].ends_with(|c: char| ident(c) || c == '$') {
            continue;
        }
        let rest = &line[at + "crate::".len()..];
        assert!(!rest.starts_with('{'), "{line}: one `use crate::X::` per X");
        let name = &rest[..rest.find(|c: char| !ident(c)).unwrap_or(rest.len())];
        found.push(if name == "Error" { "error" } else { name }.to_string());
    }
    found
}

/// A ring of imports, if there is one: `a -> b -> a`.
fn ring(graph: &Graph) -> Option<String> {
    fn visit(m: &str, g: &Graph, path: &mut Vec<String>, done: &mut Vec<String>) -> Option<String> {
        if let Some(at) = path.iter().position(|p| p == m) {
            return Some(format!("ring: {} -> {m}", path[at..].join(" -> ")));
        }
        if done.iter().any(|d| d == m) {
            return None;
        }
        done.push(m.to_string());
        path.push(m.to_string());
        let mut next = g.get(m).into_iter().flatten();
        let found = next.find_map(|n| visit(n, g, path, done));
        path.pop();
        found
    }
    let mut done = Vec::new();
    let mut starts = graph.keys();
    starts.find_map(|m| visit(m, graph, &mut Vec::new(), &mut done))
}

#[test]
fn the_check_finds_a_ring_and_reads_imports() {
    let mut graph = Graph::new();
    graph.entry("a".into()).or_default().insert("b".into());
    graph.entry("b".into()).or_default().insert("c".into());
    assert_eq!(ring(&graph), None);
    graph.entry("c".into()).or_default().insert("a".into());
    assert_eq!(ring(&graph), Some("ring: a -> b -> c -> a".to_string()));
    assert_eq!(
        imported("use crate::step::{Node, StepPlan}; crate::Error"),
        ["step", "error"]
    );
    let code = code_lines("use crate::a; // crate::b\n#[cfg(test)]\nmod tests {\nuse crate::c;\n");
    assert_eq!(code, ["use crate::a; "]);
}
