//! Each name is declared once, in code: the methods (`method::Method`, and
//! `none`), the vendors (`runtime::Vendor`), the plugstack keys with their
//! forms and defaults (`settings::site::KEYS`) and the Slurm series
//! (`tests/cluster/series`). The README, the user guide
//! (`docs/user-guide.md`), both man pages and the packaging's texts are
//! checked against those declarations here, so that a name added in code
//! fails this test until every text that lists such names has it. So is the
//! plugstack snippet's file name (`env::SNIPPET`), which the packaging
//! scripts, the Makefile and the docs each spell out, as they cannot read
//! Rust.

use desi_gpu_map_core::env::{OLD_SNIPPET, OWN_PREFIX, SNIPPET};
use desi_gpu_map_core::names::names;
use desi_gpu_map_core::runtime::Vendor;
use desi_gpu_map_core::settings::option::Choice;
use desi_gpu_map_core::settings::site::KEYS;
use desi_gpu_map_core::snapshot::{MIRRORS, OTHER_LISTS};
use std::path::Path;

fn read(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The snippet as the repository holds it, named as it is installed.
fn template() -> String {
    format!("packaging/{SNIPPET}")
}

/// A man page as plain text: roff's font escapes and `\-` undone.
fn plain_roff(text: &str) -> String {
    text.replace("\\fB", "")
        .replace("\\fR", "")
        .replace("\\fI", "")
        .replace("\\fP", "")
        .replace("\\-", "-")
}

/// The lines of `text` from the first line containing `from` up to the
/// first line after it containing `to`.
fn section<'a>(text: &'a str, from: &str, to: &str) -> Vec<&'a str> {
    let mut lines = text.lines().skip_while(|l| !l.contains(from));
    let first: Vec<&str> = lines.next().into_iter().collect();
    first
        .into_iter()
        .chain(lines.take_while(|l| !l.contains(to)))
        .collect()
}

fn missing<'a>(names: &[&'a str], text: &str) -> Vec<&'a str> {
    names
        .iter()
        .copied()
        .filter(|n| !text.contains(n))
        .collect()
}

/// `none`'s siblings: every value of `--desi-gpu-map=` and `default=`.
fn methods() -> Vec<&'static str> {
    names::<Choice>()
}

#[test]
fn every_method_is_in_every_text_that_lists_methods() {
    let deb = read("packaging/deb/build-deb.sh");
    let rpm = read("packaging/rpm/desi-gpu-map.spec");
    let conf = read(&template());
    let man8 = plain_roff(&read("packaging/man/desi_gpu_map.8"));
    let texts = [
        (
            "the deb's Description",
            section(&deb, "Description:", "EOF").join("\n"),
        ),
        (
            "the RPM's %description",
            section(&rpm, "%description", "%prep").join("\n"),
        ),
        (
            "the snippet's first lines",
            section(&conf, "#", "See").join("\n"),
        ),
        (
            "the snippet's default= comment",
            section(&conf, "#   default=", "#   flag=").join("\n"),
        ),
        (
            "desi_gpu_map(8)'s SYNOPSIS",
            section(&man8, ".SH SYNOPSIS", ".SH DESCRIPTION").join("\n"),
        ),
        ("README.md", read("README.md")),
        ("packaging/README.md", read("packaging/README.md")),
    ];
    for (what, text) in texts {
        let methods = methods();
        let gone = missing(&methods, &text);
        assert!(gone.is_empty(), "{what} lacks {gone:?}:\n{text}");
    }
}

#[test]
fn every_vendor_is_documented() {
    let vendors = names::<Vendor>();
    for (what, text) in [
        // Its "GPU vendors" section names each value of vendor=.
        ("docs/user-guide.md", read("docs/user-guide.md")),
        (
            "desi_gpu_map(8)",
            plain_roff(&read("packaging/man/desi_gpu_map.8")),
        ),
        ("the snippet", read(&template())),
        ("packaging/README.md", read("packaging/README.md")),
    ] {
        let gone = missing(&vendors, &text);
        assert!(gone.is_empty(), "{what} lacks vendors {gone:?}");
    }
}

/// A key as a Markdown table row starts: `` | `name=form` `` with `|`
/// escaped, or `` | `verbose` ``.
fn row_start(name: &str, form: Option<String>) -> String {
    match form {
        Some(form) if form.contains('|') => format!("| `{name}={}`", form.replace('|', "\\|")),
        Some(_) => format!("| `{name}="),
        None => format!("| `{name}`"),
    }
}

/// The administrators' table; the README links to it and to the man page,
/// whose entries the next test checks.
#[test]
fn every_plugstack_key_has_its_row_with_its_default() {
    for path in ["packaging/README.md"] {
        let text = read(path);
        for key in &KEYS {
            let start = row_start(key.name, (key.form)());
            let row = text
                .lines()
                .find(|l| l.starts_with(&start))
                .unwrap_or_else(|| panic!("{path}: no row starting {start:?}"));
            let default = (key.default)().map_or(key.unset.to_string(), |d| format!("`{d}`"));
            assert!(
                row.contains(&format!("| {default} |")),
                "{path}: the row of {} lacks its default {default}: {row}",
                key.name
            );
        }
    }
}

#[test]
fn every_plugstack_key_is_in_the_man_page_and_the_snippet() {
    let man8 = plain_roff(&read("packaging/man/desi_gpu_map.8"));
    let synopsis = section(&man8, ".SH SYNOPSIS", ".SH DESCRIPTION").join("\n");
    let conf = read(&template());
    for key in &KEYS {
        let written = match (key.form)() {
            Some(_) => format!("{}=", key.name),
            None => key.name.to_string(),
        };
        assert!(synopsis.contains(&written), "SYNOPSIS lacks {written}");
        assert!(
            man8.contains(&format!(".BR {written}")) || man8.contains(&format!(".B {written}")),
            "desi_gpu_map(8) has no entry for {written}"
        );
        assert!(
            conf.lines()
                .any(|l| l.starts_with(&format!("#   {written}"))),
            "the snippet does not describe {written}"
        );
    }
    // The snippet's line with every argument at its default.
    let defaults: Vec<String> = KEYS
        .iter()
        .filter_map(|k| Some(format!("{}={}", k.name, (k.default)()?)))
        .collect();
    let line = format!(
        "#required @SLURM_PLUGIN_DIR@/desi_gpu_map.so {}",
        defaults.join(" ")
    );
    assert!(
        conf.lines().any(|l| l == line),
        "the snippet lacks the line of defaults:\n{line}"
    );
}

/// Each variable that mirrors an exec option is the plugstack key's
/// name under `DESI_GPU_MAP_`, and the option is the key's name as a long
/// option (`nvml_timeout=`, `--nvml-timeout`, `$DESI_GPU_MAP_NVML_TIMEOUT`):
/// the key is in `KEYS`, and exec's help shows the option reading that
/// variable.
#[test]
fn every_mirror_is_a_plugstack_key_and_its_exec_option() {
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_desi-gpu-map"))
        .args(["exec", "--help"])
        .env_clear()
        .output()
        .expect("exec --help runs");
    let help = String::from_utf8(help.stdout).expect("the help is UTF-8");
    for var in MIRRORS.map(|v| v.name()) {
        let key = var
            .strip_prefix(OWN_PREFIX)
            .unwrap_or_else(|| panic!("{var} does not start with {OWN_PREFIX}"))
            .to_lowercase();
        assert!(
            KEYS.iter().any(|k| k.name == key),
            "{var} names no plugstack key {key}="
        );
        let option = format!("--{} ", key.replace('_', "-"));
        let line = help
            .lines()
            .find(|l| l.trim_start().starts_with(&option))
            .unwrap_or_else(|| panic!("exec has no option {option}for {var}:\n{help}"));
        assert!(
            line.contains(&format!("[env: {var}=]")),
            "exec's {option}does not read {var}: {line}"
        );
    }
}

#[test]
fn every_slurm_series_has_its_readme_row() {
    let readme = read("README.md");
    let supported = section(&readme, "## Supported Slurm", "## ");
    let series = read("tests/cluster/series");
    let listed: Vec<&str> = series
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(listed.contains(&"22.05"), "{series}");
    for s in listed {
        assert!(
            supported.iter().any(|l| l.starts_with(&format!("| {s} |"))),
            "README.md's Supported Slurm has no row for {s}"
        );
    }
}

/// Every text file of the repository, but build outputs and fuzz data, as
/// (path from the repository root, text); man pages as plain text.
fn texts() -> Vec<(String, String)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("directory entry").path())
            .collect();
        entries.sort();
        for path in entries {
            let rel = path.strip_prefix(root).expect("under the root");
            let rel = rel.to_string_lossy().into_owned();
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            let name = name.unwrap_or_default();
            if path.is_dir() {
                let skip = [".git", "target", ".build", "vendor", "corpus", "artifacts"];
                if !skip.contains(&name.as_str()) && !name.starts_with("target") {
                    walk(root, &path, out);
                }
            } else if let Ok(text) = std::fs::read_to_string(&path) {
                let man = [".1", ".8"].iter().any(|x| rel.ends_with(x));
                out.push((rel, if man { plain_roff(&text) } else { text }));
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out
}

/// Each file name in `text` that ends in the old snippet's name: the new
/// name, the old one, or another (`90-...`), with the paragraph (lines
/// between blank ones) it is in.
fn snippet_names(text: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for paragraph in text.split("\n\n") {
        for (at, _) in paragraph.match_indices(OLD_SNIPPET) {
            let before = &paragraph[..at];
            let start = before
                .rfind(|c: char| !(c.is_ascii_alphanumeric() || "._-".contains(c)))
                .map_or(0, |i| i + 1);
            let name = format!("{}{OLD_SNIPPET}", &before[start..]);
            found.push((name, paragraph.to_string()));
        }
    }
    found
}

/// The snippet's file name is `env::SNIPPET` wherever it is written. The name
/// it had up to 0.1.0 appears only where the rename is done or documented: in
/// a paragraph that says "0.1.0".
#[test]
fn every_text_names_the_snippet_as_env_snippet() {
    assert!(SNIPPET.ends_with(OLD_SNIPPET));
    // The pyxis reason (packaging/README.md): after pyxis.conf in glob(3)'s
    // order, in the C locale (bytes) as in any collation that puts digits
    // and then letters in their usual order.
    assert!(SNIPPET > "pyxis.conf" && SNIPPET.starts_with(|c: char| c.is_ascii_lowercase()));
    let texts = texts();
    assert!(texts.len() > 50, "found only {} texts", texts.len());
    let mut wrong = Vec::new();
    for (path, text) in &texts {
        for (name, paragraph) in snippet_names(text) {
            let migration = name == OLD_SNIPPET && paragraph.contains("0.1.0");
            if name != SNIPPET && !migration {
                wrong.push(format!("{path}: {name} in:\n{paragraph}"));
            }
        }
    }
    assert!(wrong.is_empty(), "not {SNIPPET}:\n{}", wrong.join("\n\n"));
    // The texts that install, package, test or document the snippet.
    for path in [
        "Makefile",
        "README.md",
        "packaging/README.md",
        "packaging/man/desi_gpu_map.8",
        "packaging/deb/build-deb.sh",
        "packaging/deb/preinst",
        "packaging/deb/postinst",
        "packaging/deb/postrm",
        "packaging/rpm/desi-gpu-map.spec",
        "tests/package/package-tests.sh",
        "tests/package/deb-smoke.sh",
    ] {
        let (_, text) = texts
            .iter()
            .find(|(p, _)| p == path)
            .unwrap_or_else(|| panic!("no {path}"));
        assert!(
            snippet_names(text).iter().any(|(n, _)| n == SNIPPET),
            "{path} does not name the snippet {SNIPPET}"
        );
    }
}

/// podman-hpc's module (`packaging/podman-hpc/desi-gpu-map.yaml`) carries
/// into the container every variable that a mapped task may be given: the
/// GPU lists of every vendor, CUDA's device order, MPS's three, and the
/// plugin's own (`variables` in core/src/step/outcome.rs, `mps_variables`),
/// each named here by its declaration in core/src/env.rs; and it names
/// nothing that env.rs does not declare.
#[test]
fn the_podman_hpc_module_carries_every_variable_a_task_is_given() {
    use desi_gpu_map_core::env;
    let yaml = read("packaging/podman-hpc/desi-gpu-map.yaml");
    let carried: Vec<&str> = yaml
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- --env="))
        .collect();
    let mut given = vec![
        env::CUDA,
        env::DEVICE_ORDER,
        // Read by HIP on top of ROCR's list; the plugin never sets it, but
        // the application must see the task's value.
        env::HIP,
        env::MPS_PIPE,
        env::MPS_LOG,
        env::MPS_SHARE,
        env::DEFAULT_FLAG,
        env::METHOD,
        env::NODE_GPUS,
        env::TASK_GPUS,
        env::STEP,
        env::MPS,
        env::MPS_HOST,
    ];
    given.extend(OTHER_LISTS.map(|v| v.name()));
    let gone: Vec<&str> = given
        .iter()
        .copied()
        .filter(|n| !carried.contains(n))
        .collect();
    assert!(gone.is_empty(), "the podman-hpc module lacks {gone:?}");
    let declared = read("core/src/env.rs");
    for name in &carried {
        assert!(
            declared.contains(&format!("&str = \"{name}\";")),
            "the podman-hpc module carries {name}, which core/src/env.rs does not declare"
        );
    }
    assert_eq!(
        carried.len(),
        given.len(),
        "the module names one twice: {carried:?}"
    );
}
