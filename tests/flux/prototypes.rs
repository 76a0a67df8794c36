//! The C functions the plugin declares by hand (`flux/src/ffi.rs`'s
//! `extern "C"` block), checked against flux-core's own headers: each
//! declaration, written as C, is compiled after `<flux/shell.h>` and
//! `<flux/core.h>`, where any that differs from flux-core's (a parameter,
//! a `const`, the return) is a conflicting redeclaration and fails.

use crate::common::*;
use std::fs;
use std::process::Command;

/// The C type of each Rust type the block uses.
const TYPES: &[(&str, &str)] = &[
    ("*mut FluxPlugin", "flux_plugin_t *"),
    ("*mut FluxShell", "flux_shell_t *"),
    ("*mut FluxTask", "flux_shell_task_t *"),
    ("*mut FluxCmd", "flux_cmd_t *"),
    ("*mut FluxHandle", "flux_t *"),
    ("*mut FluxFuture", "flux_future_t *"),
    ("*const c_char", "const char *"),
    ("*mut *mut c_char", "char **"),
    ("*mut *const c_char", "const char **"),
    ("*mut c_void", "void *"),
    ("*mut u32", "uint32_t *"),
    ("c_int", "int"),
    ("Handler", "flux_plugin_f"),
    ("Option<unsafe extern \"C\" fn(*mut c_void)>", "flux_free_f"),
    ("...", "..."),
];

/// The declarations of ffi.rs's `extern "C"` block, one a line, joined.
fn declarations() -> Vec<String> {
    let ffi = fs::read_to_string(repo().join("flux/src/ffi.rs")).unwrap();
    let start = ffi
        .find("extern \"C\" {")
        .expect("ffi.rs has an extern block");
    let end = start + ffi[start..].find("\n}\n").unwrap();
    let block = &ffi[start + "extern \"C\" {".len()..end];
    let joined: Vec<&str> = block.split_whitespace().collect();
    joined
        .join(" ")
        .split(';')
        .map(|d| d.trim().to_string())
        .filter(|d| d.starts_with("fn "))
        .collect()
}

/// `text` split at top-level commas.
fn split_params(text: &str) -> Vec<String> {
    let (mut depth, mut part, mut parts) = (0, String::new(), Vec::new());
    for c in text.chars() {
        match c {
            '(' | '<' => depth += 1,
            ')' | '>' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(part.trim().to_string());
                part.clear();
                continue;
            }
            _ => {}
        }
        part.push(c);
    }
    if !part.trim().is_empty() {
        parts.push(part.trim().to_string());
    }
    parts
}

fn c_type(rust: &str) -> String {
    TYPES
        .iter()
        .find(|(r, _)| *r == rust.trim())
        .map(|(_, c)| c.to_string())
        .unwrap_or_else(|| panic!("no C type for the Rust type {rust:?}: add it to TYPES"))
}

/// One declaration (`fn name(params) -> ret`) as C.
fn as_c(declaration: &str) -> String {
    let rest = declaration.strip_prefix("fn ").unwrap();
    let open = rest.find('(').unwrap();
    let name = &rest[..open];
    let close = rest.rfind(')').unwrap();
    let params: Vec<String> = split_params(&rest[open + 1..close])
        .iter()
        .map(|p| match p.split_once(':') {
            Some((_, ty)) => c_type(ty),
            None => c_type(p),
        })
        .collect();
    let ret = rest[close + 1..]
        .trim()
        .strip_prefix("->")
        .map_or("void".to_string(), c_type);
    format!("{ret} {name} ({});", params.join(", "))
}

#[test]
fn the_plugins_c_declarations_match_flux_cores_headers() {
    let declarations = declarations();
    assert!(declarations.len() >= 20, "{declarations:?}");
    let scratch = Scratch::new("prototypes");
    let source = scratch.0.join("prototypes.c");
    let mut text = "#define FLUX_SHELL_PLUGIN_NAME \"desi-gpu-map\"\n#include <stdint.h>\n#include <flux/core.h>\n#include <flux/shell.h>\n"
        .to_string();
    for d in &declarations {
        text += &as_c(d);
        text.push('\n');
    }
    fs::write(&source, &text).unwrap();
    let include = prefix().join("include");
    let cc = |file: &std::path::Path| {
        Command::new("cc")
            .args(["-fsyntax-only", "-Werror", "-I"])
            .arg(&include)
            .arg(file)
            .output()
            .expect("run cc")
    };
    let out = cc(&source);
    assert!(
        out.status.success(),
        "the plugin's declarations differ from flux-core's:\n{}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The check can fail: a declaration with one `const` dropped conflicts.
    let wrong = scratch.0.join("wrong.c");
    let changed = text.replacen(
        "flux_shell_getenv (flux_shell_t *, const char *)",
        "flux_shell_getenv (flux_shell_t *, char *)",
        1,
    );
    assert_ne!(changed, text, "{text}");
    fs::write(&wrong, changed).unwrap();
    assert!(!cc(&wrong).status.success());
}
