//! The module ladder of `src/`: each module imports only modules below it
//! (LAYERS, bottom first), so no ring can form, and the core (the layers
//! below FIRST_IO) does no I/O. Read from the `crate::` paths of non-test
//! code (cargo-modules would tell the same, but takes minutes to install).
//! Inside a folder, the files beside `mod.rs` form no ring either: a ring
//! there is two files that are one concern. (`mod.rs` is the folder's face:
//! its children use the folder's shared items and it calls them, as every
//! Rust folder does, so it is left out of that check.) ARCHITECTURE.md,
//! the map of these layers and files, is checked against them here too.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// Bottom first: a module may import only modules listed before it.
const LAYERS: &[&str] = &[
    "text", "env", "error", "wire", "files", "names", "cpuset", "slurm", "launch", "method",
    "runtime", "topology", "settings", "mps", "step", "host", "cli",
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
    let mut files = Graph::new();
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
            let siblings = sibling_stems(&path);
            for line in code_lines(&fs::read_to_string(&path).unwrap()) {
                if rel.contains('/') && stem != "mod" {
                    let node = format!("{top}/{stem}");
                    for to in siblings_named(line, top, &siblings) {
                        if to != stem {
                            files
                                .entry(node.clone())
                                .or_default()
                                .insert(format!("{top}/{to}"));
                        }
                    }
                }
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
    problems.extend(ring(&files));
    problems.sort();
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

/// ARCHITECTURE.md is the map of the code: its layers section follows
/// LAYERS, it names every `.rs` file under `src/` and `spank/src/` by its
/// path from the repository root, and every `.rs` path it names exists.
#[test]
fn the_architecture_map_names_every_file_and_follows_the_layers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let path_char = |c: char| c.is_alphanumeric() || "_./-".contains(c);
    let named: BTreeSet<&str> = doc
        .split(|c: char| !path_char(c))
        // A path that ends a sentence keeps its full stop.
        .map(|word| word.trim_end_matches('.'))
        // A bare `mod.rs` is any folder's; a path names one file.
        .filter(|word| word.contains('/') && word.ends_with(".rs"))
        .collect();
    let (mut files, mut dirs) = (
        BTreeSet::new(),
        vec![root.join("src"), root.join("spank/src")],
    );
    while let Some(dir) = dirs.pop() {
        for path in fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()) {
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.insert(path.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    let unnamed: Vec<&String> = files
        .iter()
        .filter(|f| !named.contains(f.as_str()))
        .collect();
    let dangling: Vec<&&str> = named.iter().filter(|n| !root.join(n).is_file()).collect();
    assert!(
        unnamed.is_empty() && dangling.is_empty(),
        "ARCHITECTURE.md does not name {unnamed:?}, and names {dangling:?}, which do not exist"
    );
    // Where the layers section first names each layer's file or folder.
    let layers = doc
        .split("\n## ")
        .find(|s| s.starts_with("The layers"))
        .unwrap();
    let at = |layer: &str| {
        let forms = [format!("`src/{layer}.rs`"), format!("`src/{layer}/`")];
        forms
            .iter()
            .filter_map(|form| layers.find(form.as_str()))
            .min()
    };
    let places: Vec<Option<usize>> = LAYERS.iter().map(|layer| at(layer)).collect();
    assert!(
        places.iter().all(Option::is_some) && places.windows(2).all(|w| w[0] < w[1]),
        "ARCHITECTURE.md's layers are not LAYERS, bottom first: {:?}",
        LAYERS.iter().zip(&places).collect::<Vec<_>>()
    );
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

/// The `.rs` files beside `path` other than `mod.rs`, by stem.
fn sibling_stems(path: &Path) -> BTreeSet<String> {
    let dir = fs::read_dir(path.parent().unwrap()).unwrap();
    let stems = dir.filter_map(|e| {
        Some(
            e.ok()?
                .file_name()
                .to_str()?
                .strip_suffix(".rs")?
                .to_string(),
        )
    });
    stems.filter(|s| s != "mod").collect()
}

/// The sibling files a line of folder `top` names: as `crate::top::FILE`,
/// `super::FILE` or inside `super::{...}`.
fn siblings_named(line: &str, top: &str, siblings: &BTreeSet<String>) -> Vec<String> {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut found = Vec::new();
    for prefix in [format!("crate::{top}::"), "super::".to_string()] {
        for (at, _) in line.match_indices(&prefix) {
            if line[..at].ends_with(|c: char| ident(c) || c == ':') {
                continue;
            }
            let rest = &line[at + prefix.len()..];
            let names = match rest.strip_prefix('{') {
                Some(list) => list[..list.find('}').unwrap_or(list.len())]
                    .split(',')
                    .collect(),
                None => vec![rest],
            };
            for name in names {
                let name = name.trim();
                let name = &name[..name.find(|c: char| !ident(c)).unwrap_or(name.len())];
                if siblings.contains(name) {
                    found.push(name.to_string());
                }
            }
        }
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
    let siblings = ["option", "site"].map(String::from).into();
    assert_eq!(
        siblings_named(
            "use crate::settings::option::Choice;",
            "settings",
            &siblings
        ),
        ["option"]
    );
    assert_eq!(
        siblings_named(
            "use super::{site, Tool}; super::option::x",
            "settings",
            &siblings
        ),
        ["site", "option"]
    );
    let mut files = Graph::new();
    files
        .entry("settings/option".into())
        .or_default()
        .insert("settings/site".into());
    assert_eq!(ring(&files), None);
    files
        .entry("settings/site".into())
        .or_default()
        .insert("settings/option".into());
    assert!(ring(&files).is_some(), "two files that import each other");
    let code = code_lines("use crate::a; // crate::b\n#[cfg(test)]\nmod tests {\nuse crate::c;\n");
    assert_eq!(code, ["use crate::a; "]);
}
