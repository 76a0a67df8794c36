//! The shape of the code, as ARCHITECTURE.md draws it, kept by a test.
//!
//! The compiler keeps the crates apart: the core (`core/`) depends on
//! nothing, so it cannot reach NVML, rustix or libc, and nothing it links
//! can touch the machine. What the compiler cannot see is checked here:
//! - the core's manifest names no dependency, and the core's code calls
//!   none of std's I/O either (`IO_MARKS`);
//! - inside each crate, each top module imports only modules listed before
//!   it in that crate's layers (bottom first), so no ring can form;
//! - no ring runs through the files of a crate either, `mod.rs` included:
//!   a folder's `mod.rs` is its face for the rest of the crate (its
//!   modules and re-exports), and the files behind it import each other by
//!   path, never back through the face;
//! - ARCHITECTURE.md names every `.rs` file of every crate, names no file
//!   that does not exist, and lists each crate's layers in order.
//!
//! Imports are read from the `crate::`, `super::` and `self::` paths of
//! non-test code (cargo-modules would tell the same, but takes minutes to
//! install).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// A crate of the workspace: its source folder, and its top modules,
/// bottom first (a module may import only modules listed before it).
struct Crate {
    src: &'static str,
    layers: &'static [&'static str],
}

const CRATES: &[Crate] = &[
    Crate {
        src: "core/src",
        layers: &[
            "text", "env", "error", "wire", "files", "names", "cpuset", "slurm", "launch",
            "method", "runtime", "topology", "settings", "flux", "mps", "step", "start", "preview",
        ],
    },
    Crate {
        src: "host/src",
        layers: &[
            "failure", "sys", "files", "process", "stepd", "child", "run", "deadline", "nvml",
            "mps",
        ],
    },
    Crate {
        src: "src",
        layers: &[
            "edge", "handover", "json", "keeper", "args", "plan", "show", "in_task", "exec",
            "prolog", "entry", "manpage",
        ],
    },
    Crate {
        src: "spank/src",
        layers: &[
            "logger",
            "exports",
            "copies",
            "mps",
            "node",
            "task_init",
            "context",
            "lines",
            "client",
            "stepd",
        ],
    },
    Crate {
        src: "flux/src",
        layers: &[
            "json", "conf", "ffi", "broker", "mps", "node", "plugin", "exports",
        ],
    },
];

/// The crate that must do no I/O: its manifest names no dependency, and
/// its code none of these.
const PURE: &str = "core/src";
const IO_MARKS: &[&str] = &[
    "std::fs",
    "env::var",
    "Command",
    "File::",
    "read_dir",
    ".exists()",
    "stdout(",
    "stderr(",
    "std::net",
    "std::process",
];

type Graph = BTreeMap<String, BTreeSet<String>>;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let (mut files, mut dirs) = (Vec::new(), vec![dir.to_path_buf()]);
    while let Some(dir) = dirs.pop() {
        for path in fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()) {
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// A file's module path inside its crate: `step/outcome.rs` is
/// `["step", "outcome"]`, `step/mod.rs` is `["step"]`, a crate root `[]`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into()).collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main" | "main_static")
    ) {
        parts.pop();
    }
    parts
}

/// A test-only file, left out of the checks on shape.
fn test_only(file: &Path) -> bool {
    let stem = file.file_stem().unwrap().to_string_lossy();
    ["tests", "testing", "manpage"].contains(&stem.as_ref()) || stem.ends_with("_tests")
}

#[test]
fn crates_import_only_downwards_no_file_ring_and_the_core_does_no_io() {
    let mut problems = Vec::new();
    for krate in CRATES {
        problems.extend(check_crate(krate));
    }
    let manifest = fs::read_to_string(root().join("core/Cargo.toml")).unwrap();
    let deps = manifest
        .split("\n[dependencies]")
        .nth(1)
        .map(|rest| rest.split("\n[").next().unwrap_or_default());
    let named: Vec<&str> = deps
        .into_iter()
        .flat_map(str::lines)
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    if !named.is_empty() {
        problems.push(format!("core/Cargo.toml: the core depends on {named:?}"));
    }
    problems.sort();
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

/// The problems of one crate: a top module in no layer, an upward import,
/// a ring of files, I/O in the pure crate.
fn check_crate(krate: &Crate) -> Vec<String> {
    let src = root().join(krate.src);
    let rank = |m: &str| krate.layers.iter().position(|l| *l == m);
    let (mut problems, mut files) = (Vec::new(), Graph::new());
    for file in rust_files(&src) {
        let module = module_of(&src, &file);
        let rel = file.strip_prefix(root()).unwrap().display().to_string();
        let Some(top) = module.first() else { continue };
        if test_only(&file) {
            continue;
        }
        let Some(own) = rank(top) else {
            problems.push(format!(
                "{rel}: module {top} is in no layer of {}",
                krate.src
            ));
            continue;
        };
        let is_face = file.file_name().is_some_and(|n| n == "mod.rs");
        for line in code_lines(&fs::read_to_string(&file).unwrap()) {
            for path in paths_in(line, &module, is_face, &src) {
                let to = resolve(&src, &path);
                let Some(to_top) = to.first() else { continue };
                if to != module {
                    files
                        .entry(module.join("/"))
                        .or_default()
                        .insert(to.join("/"));
                }
                if to_top == top {
                    continue;
                }
                match rank(to_top) {
                    Some(r) if r < own => {}
                    Some(_) => problems.push(format!("{rel}: {top} imports {to_top}: {line}")),
                    None => problems.push(format!("{rel}: {to_top} is in no layer: {line}")),
                }
            }
            if krate.src == PURE && IO_MARKS.iter().any(|m| line.contains(m)) {
                problems.push(format!("{rel}: I/O in the core: {line}"));
            }
        }
    }
    problems.extend(ring(&files).map(|r| format!("{}: {r}", krate.src)));
    problems
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

/// The module paths a line of `module` names, from the crate root:
/// `crate::a::b`, `super::a`, `self::a`, and in a folder's face (`mod.rs`)
/// a child's bare `a::b`. A `{...}` list gives one path per entry.
fn paths_in(line: &str, module: &[String], is_face: bool, src: &Path) -> Vec<Vec<String>> {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let parent = &module[..module.len().saturating_sub(1)];
    let mut found = Vec::new();
    let mut starts: Vec<(usize, Vec<String>, usize)> = Vec::new();
    for (prefix, base) in [
        ("crate::", Vec::new()),
        ("super::", parent.to_vec()),
        ("self::", module.to_vec()),
    ] {
        for (at, _) in line.match_indices(prefix) {
            starts.push((at, base.clone(), prefix.len()));
        }
    }
    if is_face {
        // `pub use task::X;` in step/mod.rs: the child `task`.
        for (at, _) in line.match_indices("::") {
            let head = &line[..at];
            let start = head.rfind(|c: char| !ident(c)).map_or(0, |i| i + 1);
            let name = &head[start..];
            let mut child = module.to_vec();
            child.push(name.to_string());
            let before = &line[..start];
            if !name.is_empty()
                && !before.ends_with(':')
                && !before.ends_with('$')
                && exists(src, &child)
            {
                starts.push((start, module.to_vec(), 0));
            }
        }
    }
    for (at, base, skip) in starts {
        if line[..at].ends_with(|c: char| ident(c) || c == ':' || c == '$') {
            continue;
        }
        let rest = &line[at + skip..];
        for tail in expand(rest) {
            let mut path = base.clone();
            path.extend(tail);
            found.push(path);
        }
    }
    found
}

/// `a::b::{c, d::e}` as `[[a, b, c], [a, b, d, e]]`: the names of a path
/// and of each entry of one brace list.
fn expand(rest: &str) -> Vec<Vec<String>> {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut head = Vec::new();
    let mut rest = rest;
    loop {
        if let Some(list) = rest.strip_prefix('{') {
            let list = &list[..list.find('}').unwrap_or(list.len())];
            return list
                .split(',')
                .map(|entry| {
                    let mut path = head.clone();
                    path.extend(expand(entry.trim()).into_iter().next().unwrap_or_default());
                    path
                })
                .collect();
        }
        let end = rest.find(|c: char| !ident(c)).unwrap_or(rest.len());
        if end == 0 {
            return vec![head];
        }
        head.push(rest[..end].to_string());
        match rest[end..].strip_prefix("::") {
            Some(next) => rest = next,
            None => return vec![head],
        }
    }
}

/// Whether `module` is a file of the crate (`a/b.rs` or `a/b/mod.rs`).
fn exists(src: &Path, module: &[String]) -> bool {
    if module.is_empty() {
        return true;
    }
    let path = src.join(module.join("/"));
    path.with_extension("rs").is_file() || path.join("mod.rs").is_file()
}

/// The deepest module of `path` that is a file: `crate::step::outcome::X` is
/// `step/outcome`; `crate::step::X` is `step` (its face); `crate::Error`
/// (an item of the crate root) is `[]`.
fn resolve(src: &Path, path: &[String]) -> Vec<String> {
    let mut module = path.to_vec();
    while !exists(src, &module) {
        module.pop();
    }
    module
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

/// ARCHITECTURE.md is the map of the code: it names every `.rs` file of
/// every crate by its path from the repository root, every `.rs` path it
/// names exists, and each crate's section lists its layers bottom first.
#[test]
fn the_architecture_map_names_every_file_and_follows_the_layers() {
    let doc = fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let path_char = |c: char| c.is_alphanumeric() || "_./-".contains(c);
    let named: BTreeSet<&str> = doc
        .split(|c: char| !path_char(c))
        // A path that ends a sentence keeps its full stop.
        .map(|word| word.trim_end_matches('.'))
        // A bare `mod.rs` is any folder's; a path names one file.
        .filter(|word| word.contains('/') && word.ends_with(".rs"))
        .collect();
    let files: BTreeSet<String> = CRATES
        .iter()
        .flat_map(|k| rust_files(&root().join(k.src)))
        .map(|f| f.strip_prefix(root()).unwrap().display().to_string())
        .collect();
    let unnamed: Vec<&String> = files
        .iter()
        .filter(|f| !named.contains(f.as_str()))
        .collect();
    let dangling: Vec<&&str> = named.iter().filter(|n| !root().join(n).is_file()).collect();
    assert!(
        unnamed.is_empty() && dangling.is_empty(),
        "ARCHITECTURE.md does not name {unnamed:?}, and names {dangling:?}, which do not exist"
    );
    for krate in CRATES {
        // The crate's section: from its heading's `src` folder on.
        let heading = format!("\n## The crate in `{}/`", krate.src);
        let section = doc
            .split_once(heading.as_str())
            .map(|(_, rest)| rest.split("\n## ").next().unwrap_or(rest))
            .unwrap_or_else(|| panic!("ARCHITECTURE.md has no section {heading:?}"));
        let at = |layer: &str| {
            let forms = [
                format!("`{}/{layer}.rs`", krate.src),
                format!("`{}/{layer}/`", krate.src),
            ];
            forms.iter().filter_map(|f| section.find(f.as_str())).min()
        };
        let places: Vec<Option<usize>> = krate.layers.iter().map(|l| at(l)).collect();
        assert!(
            places.iter().all(Option::is_some) && places.windows(2).all(|w| w[0] < w[1]),
            "ARCHITECTURE.md's section on {} does not list its layers bottom first: {:?}",
            krate.src,
            krate.layers.iter().zip(&places).collect::<Vec<_>>()
        );
    }
}

#[test]
fn the_check_finds_a_ring_and_reads_imports() {
    let mut graph = Graph::new();
    graph.entry("a".into()).or_default().insert("b".into());
    graph.entry("b".into()).or_default().insert("c".into());
    assert_eq!(ring(&graph), None);
    graph.entry("c".into()).or_default().insert("a".into());
    assert_eq!(ring(&graph), Some("ring: a -> b -> c -> a".to_string()));
    let src = root().join("core/src");
    let module = |m: &str| m.split('/').map(String::from).collect::<Vec<_>>();
    let step_outcome = module("step/outcome");
    let got = paths_in(
        "use crate::step::{Node, map::StepMap}; crate::Error; super::binding::X",
        &step_outcome,
        false,
        &src,
    );
    let resolved: Vec<String> = got.iter().map(|p| resolve(&src, p).join("/")).collect();
    assert_eq!(resolved, ["step", "step/map", "", "step/binding"]);
    let face = paths_in(
        "pub use outcome::{task_outcome, TaskInputs};",
        &module("step"),
        true,
        &src,
    );
    assert_eq!(resolve(&src, &face[0]).join("/"), "step/outcome");
    let code = code_lines("use crate::a; // crate::b\n#[cfg(test)]\nmod tests {\nuse crate::c;\n");
    assert_eq!(code, ["use crate::a; "]);
}
