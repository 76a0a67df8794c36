//! The shape of the code, as ARCHITECTURE.md and each folder's module doc
//! draw it, kept by a test.
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
//! - each folder's module doc names every file and folder in it, and
//!   each crate root's lists the crate's layers bottom first (the rule is
//!   at [`each_folders_doc_names_its_files_and_the_roots_follow_the_layers`]);
//! - ARCHITECTURE.md stays short, and names no `.rs` file that does not
//!   exist.
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
            "text", "env", "snapshot", "error", "wire", "files", "names", "grant", "cpuset",
            "slurm", "launch", "method", "runtime", "topology", "settings", "flux", "mps", "step",
            "job", "start", "preview",
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
            "error", "conf", "ffi", "broker", "mps", "node", "plugin", "exports",
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

/// Each folder of a crate says what it holds in its module doc, and the
/// rule is exact enough to check:
/// - A folder's doc is the leading `//!` block (blank lines between its
///   lines included) of its face: `lib.rs` or `main.rs` at a crate root,
///   else the folder's `mod.rs`, else the file named for the folder beside
///   it (`job.rs` for `job/`).
/// - The doc names each `.rs` file directly in the folder (its face
///   excepted) and each subfolder, as its child module `x`: by the file
///   name in backticks (`` `x.rs` ``), the folder's (`` `x/` ``), or a
///   rustdoc link (`` [`x`] ``, where the module is public; rustdoc, run
///   with `-D warnings`, checks that the link resolves).
/// - Every `.rs` path the doc names, and every folder it names in
///   backticks (`` `a/b/` ``), exists, from the folder or from the
///   repository root.
/// - A crate root's doc lists the crate's layers ([`CRATES`]) bottom
///   first: the first list item (a line starting `- `) naming each layer
///   comes no earlier than the one naming the layer below it.
#[test]
fn each_folders_doc_names_its_files_and_the_roots_follow_the_layers() {
    let problems: Vec<String> = CRATES
        .iter()
        .flat_map(|k| check_docs(&root().join(k.src), k.layers, root()))
        .collect();
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

/// ARCHITECTURE.md keeps the crates, the decision, the protocol and the
/// rules of the house, not each folder's files: it stays short, and every
/// `.rs` path it names (by its path from the repository root) exists.
#[test]
fn the_architecture_map_is_short_and_names_only_files_that_exist() {
    const MAX_LINES: usize = 260;
    let doc = fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let lines = doc.lines().count();
    assert!(
        lines <= MAX_LINES,
        "ARCHITECTURE.md has {lines} lines, more than {MAX_LINES}: say what a \
         folder holds in its module doc"
    );
    let dangling: Vec<String> = rs_paths(&doc)
        .into_iter()
        // A bare `mod.rs` is any folder's; a path names one file.
        .filter(|p| p.contains('/') && !root().join(p).is_file())
        .collect();
    assert!(
        dangling.is_empty(),
        "ARCHITECTURE.md names {dangling:?}, which do not exist"
    );
}

/// The words of `text` that end in `.rs`: `a/b.rs`, `b.rs`. A path that
/// ends a sentence keeps its full stop.
fn rs_paths(text: &str) -> Vec<String> {
    let path_char = |c: char| c.is_alphanumeric() || "_./-".contains(c);
    text.split(|c: char| !path_char(c))
        .map(|word| word.trim_end_matches('.'))
        .filter(|word| word.ends_with(".rs") && word.len() > ".rs".len())
        .map(String::from)
        .collect()
}

/// A face's module doc: its leading `//!` lines, blank lines between them
/// included, without the `//!`.
fn module_doc(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .take_while(|l| l.is_empty() || l.starts_with("//!"))
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The file whose doc says what folder `dir` holds: `lib.rs` or `main.rs`
/// at the crate root (`src`), else `mod.rs`, else `dir.rs` beside it.
fn face_of(src: &Path, dir: &Path) -> Option<PathBuf> {
    let faces = match dir == src {
        true => vec![dir.join("lib.rs"), dir.join("main.rs")],
        false => vec![dir.join("mod.rs"), dir.with_extension("rs")],
    };
    faces.into_iter().find(|f| f.is_file())
}

/// Whether `doc` names the child module `name`: `` `name.rs` ``,
/// `` `name/` `` or `` [`name`] ``.
fn names_child(doc: &str, name: &str) -> bool {
    let forms = [
        format!("`{name}.rs`"),
        format!("`{name}/`"),
        format!("[`{name}`]"),
    ];
    forms.iter().any(|f| doc.contains(f.as_str()))
}

/// The problems of the docs of the crate in `src`, whose layers are
/// `layers`, in the repository at `repo`.
fn check_docs(src: &Path, layers: &[&str], repo: &Path) -> Vec<String> {
    let shown = |p: &Path| p.strip_prefix(repo).unwrap_or(p).display().to_string();
    let (mut problems, mut dirs) = (Vec::new(), vec![src.to_path_buf()]);
    while let Some(dir) = dirs.pop() {
        let Some(face) = face_of(src, &dir) else {
            problems.push(format!("{}/: no mod.rs says what it holds", shown(&dir)));
            continue;
        };
        let doc = module_doc(&fs::read_to_string(&face).unwrap());
        let mut children = BTreeSet::new();
        for path in fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()) {
            let stem = path.file_stem().unwrap().to_string_lossy().to_string();
            if path.is_dir() {
                dirs.push(path);
                children.insert(stem);
            } else if path.extension().is_some_and(|e| e == "rs") && path != face {
                children.insert(stem);
            }
        }
        for child in children.iter().filter(|c| !names_child(&doc, c)) {
            problems.push(format!(
                "{}: its doc does not name `{child}.rs` or `{child}/`",
                shown(&face)
            ));
        }
        let folders = doc
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|s| s.ends_with('/') && s.starts_with(char::is_alphanumeric))
            .filter(|s| !s.contains(char::is_whitespace))
            .map(String::from);
        for named in rs_paths(&doc).into_iter().chain(folders) {
            if !dir.join(&named).exists() && !repo.join(&named).exists() {
                problems.push(format!(
                    "{}: its doc names `{named}`, which does not exist",
                    shown(&face)
                ));
            }
        }
        if dir == src {
            problems.extend(check_layers(&doc, layers).map(|p| format!("{}: {p}", shown(&face))));
        }
    }
    problems.sort();
    problems
}

/// Whether a crate root's doc lists `layers` bottom first, by the first
/// list item naming each.
fn check_layers(doc: &str, layers: &[&str]) -> Option<String> {
    let mut items: Vec<String> = Vec::new();
    for line in doc.lines() {
        match line.strip_prefix("- ") {
            Some(item) => items.push(item.to_string()),
            None if line.starts_with(' ') => {
                if let Some(last) = items.last_mut() {
                    last.push_str(line);
                }
            }
            None => {}
        }
    }
    let places: Vec<Option<usize>> = layers
        .iter()
        .map(|l| items.iter().position(|i| names_child(i, l)))
        .collect();
    let ordered = places.iter().all(Option::is_some) && places.windows(2).all(|w| w[0] <= w[1]);
    (!ordered).then(|| {
        let at: Vec<_> = layers.iter().zip(&places).collect();
        format!("its list does not give the layers bottom first: {at:?}")
    })
}

#[test]
fn the_doc_check_finds_a_file_left_out() {
    let repo = std::env::temp_dir().join(format!("dgm-layers-{}", std::process::id()));
    let src = repo.join("src");
    let write = |path: &str, text: &str| {
        let path = src.join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    };
    let _ = fs::remove_dir_all(&repo);
    write(
        "lib.rs",
        "//! The crate.\n//!\n//! - [`a`]: the bottom;\n//! - `b/`: above it,\n//!   as \
         `gone.rs` was.\n\nmod a;\n",
    );
    write("a.rs", "//! A.\n");
    write("b/mod.rs", "//! - `c.rs`: one.\n");
    write("b/c.rs", "");
    write("b/d.rs", "");
    assert_eq!(
        check_docs(&src, &["b", "a"], &repo),
        [
            "src/b/mod.rs: its doc does not name `d.rs` or `d/`",
            "src/lib.rs: its doc names `gone.rs`, which does not exist",
            "src/lib.rs: its list does not give the layers bottom first: \
             [(\"b\", Some(1)), (\"a\", Some(0))]",
        ]
    );
    write("b/mod.rs", "//! - `c.rs`: one;\n//! - `d.rs`: two.\n");
    write(
        "lib.rs",
        "//! - [`a`]: the bottom;\n//! - `b/`: above it.\n",
    );
    assert_eq!(check_docs(&src, &["a", "b"], &repo), Vec::<String>::new());
    fs::remove_dir_all(&repo).unwrap();
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
