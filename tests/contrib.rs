//! The patches of `contrib/desispec`, applied to desispec's branch and
//! checked by desispec's own unit tests: no Slurm, no GPU, no MPI.
//!
//! Each test unpacks the `py/` of desispec's branch snapshot
//! (`../shared/thirdparty/desispec-main-efd9676.tar.gz`, beside the
//! repository, its sha256 checked) into a temporary folder of its own,
//! applies patches there with `git apply` (exact context, no fuzz), and
//! runs desispec's `unittest` tests from that tree with Debian's
//! `/usr/bin/python3` (its numpy, astropy, ... from `tests/deps.sh`) and
//! what the branch imports from PyPI (`tests/desi/fetch.sh branch`), each
//! test's outcome read from `tests/contrib/unittests.py`. The tests that
//! must run are named, and each must pass: a test that did not run fails
//! the check as a failing one does.
//!
//! Also: each patch's tests fail where its change is left out, and
//! 0001 applies to desispec 0.70.0 (PyPI's newest, `tests/desi/fetch.sh`)
//! and its tests pass there, while 0002 does not apply there, as their
//! descriptions say.
//!
//! Fails, never skips, when the snapshot, PyPI, git or python3 is missing.

#[path = "desi/installed.rs"]
mod installed;

use installed::installed;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

const GPU_PATCH: &str = "contrib/desispec/0001-gpu-honour-DESI_GPU_MAPPED.patch";
const BATCH_PATCH: &str = "contrib/desispec/0002-batch_writer-desi-gpu-map.patch";

/// desispec's branch, as the snapshot's README says; its sha256.
const SNAPSHOT: &str = "desispec-main-efd9676.tar.gz";
const SNAPSHOT_TOP: &str = "desispec-efd9676";
const SNAPSHOT_SHA256: &str = "34d736ead370632ee0dd9857debd075ae7def89146324ebe433632e50425528b";

/// Where a patch's own tests live: `git apply --include` takes them alone.
const TEST_FILES: &str = "py/desispec/test/*";

/// The unittest names run: desispec's test_gpu, 0002's new test file, and
/// the one test of test_proc_night that writes the GPU scripts 0002
/// changes (the tilenight and flat jobs for perlmutter-gpu) in the least
/// time; the other tests of that file write no GPU script or repeat this
/// one's (measured with a line tracer on the changed lines).
const NAMES: [&str; 3] = [
    "desispec.test.test_gpu",
    "desispec.test.test_workflow_batch_writer",
    "desispec.test.test_proc_night.TestProcNight.test_proc_night_noz",
];

/// Every test those names hold, with 0001's tests marked by what they
/// give where gpu.py is left unpatched.
const GPU_TESTS: [(&str, &str); 8] = [
    ("desispec.test.test_gpu.TestGPU.test_doesnt_crash", "ok"),
    ("desispec.test.test_gpu.TestGPU.test_gpu_context", "ok"),
    ("desispec.test.test_gpu.TestGPU.test_gpu_envvar", "ok"),
    (
        "desispec.test.test_gpu.TestGPUMapped.test_is_gpu_mapped",
        "ERROR",
    ),
    (
        "desispec.test.test_gpu.TestGPUMapped.test_mapped_ranks_keep_device_0",
        "FAIL",
    ),
    (
        "desispec.test.test_gpu.TestGPUMapped.test_mapped_ranks_still_check_method",
        "ok",
    ),
    (
        "desispec.test.test_gpu.TestGPUMapped.test_mapped_without_comm",
        "ok",
    ),
    (
        "desispec.test.test_gpu.TestGPUMapped.test_unmapped_ranks_are_redistributed",
        "ok",
    ),
];

/// 0002's tests, with what each gives where batch_writer.py is left
/// unpatched (it still writes desi_mps_wrapper).
const BATCH_TESTS: [(&str, &str); 3] = [
    (
        "desispec.test.test_workflow_batch_writer.TestWorkflowBatchWriter.test_arc_and_cpu_unwrapped",
        "ok",
    ),
    (
        "desispec.test.test_workflow_batch_writer.TestWorkflowBatchWriter.test_desi_proc_gpu",
        "FAIL",
    ),
    (
        "desispec.test.test_workflow_batch_writer.TestWorkflowBatchWriter.test_tilenight_gpu",
        "FAIL",
    ),
];

const PROC_NIGHT_TEST: &str = "desispec.test.test_proc_night.TestProcNight.test_proc_night_noz";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn show(out: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    )
}

/// A scratch directory, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(what: &str) -> Scratch {
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "desi-gpu-map-contrib.{}.{}.{what}",
            std::process::id(),
            COUNT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("make a scratch dir");
        Scratch(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `cmd`, which must succeed; returns its output.
fn run(cmd: &mut Command, what: &str) -> Output {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run ({e})"));
    assert!(out.status.success(), "{what} failed:\n{}", show(&out));
    out
}

/// The branch snapshot, beside the repository as in CI, its sha256
/// checked once.
fn snapshot() -> &'static Path {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    FILE.get_or_init(|| {
        let file = repo().join("../shared/thirdparty").join(SNAPSHOT);
        assert!(
            file.is_file(),
            "{} is missing: the tests read desispec's branch from ../shared beside the repository",
            file.display()
        );
        let out = run(Command::new("sha256sum").arg(&file), "sha256sum");
        let sum = text(&out.stdout);
        assert!(
            sum.split_whitespace().next() == Some(SNAPSHOT_SHA256),
            "{} is not the snapshot the patches target (sha256 {sum}, want {SNAPSHOT_SHA256})",
            file.display()
        );
        file
    })
}

/// What the branch imports from PyPI (desiutil, desitarget, desimodel),
/// fetched on first use.
fn branch_deps() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let script = repo().join("tests/desi/fetch.sh");
        let out = run(
            Command::new("bash").arg(&script).arg("branch"),
            "tests/desi/fetch.sh branch",
        );
        let dir = PathBuf::from(text(&out.stdout).trim());
        assert!(
            dir.join("desitarget").is_dir() && dir.join("desimodel").is_dir(),
            "fetch.sh branch printed {}, which lacks desitarget/ or desimodel/",
            dir.display()
        );
        dir
    })
}

/// A scratch folder holding a git work tree (no commit: `git apply` needs
/// only the tree) at `tree/`, and a `tmp/` for the tests' own files.
fn scratch_tree(what: &str) -> Scratch {
    let scratch = Scratch::new(what);
    let tree = scratch.path().join("tree");
    std::fs::create_dir_all(&tree).expect("make tree/");
    std::fs::create_dir_all(scratch.path().join("tmp")).expect("make tmp/");
    run(
        Command::new("git").args(["init", "-q"]).arg(&tree),
        "git init",
    );
    scratch
}

/// desispec's branch (its `py/`) unpacked into a scratch tree.
fn branch_tree() -> Scratch {
    let scratch = scratch_tree("branch");
    let tree = scratch.path().join("tree");
    run(
        Command::new("tar")
            .arg("-xzf")
            .arg(snapshot())
            .arg("-C")
            .arg(&tree)
            .arg("--strip-components=1")
            .arg(format!("{SNAPSHOT_TOP}/py")),
        "unpacking the snapshot's py/",
    );
    scratch
}

/// desispec 0.70.0 from PyPI, laid out as its source (`py/desispec`: the
/// wheel's files are the sdist's) in a scratch tree.
fn release_tree() -> Scratch {
    let scratch = scratch_tree("0.70.0");
    let py = scratch.path().join("tree/py");
    std::fs::create_dir_all(&py).expect("make py/");
    run(
        Command::new("cp")
            .arg("-R")
            .arg(installed().join("desispec"))
            .arg(&py),
        "copying desispec 0.70.0",
    );
    scratch
}

/// `git apply` of `patch` (under the repo) at the top of `scratch`'s tree,
/// with `args` (`--check`, `--include=...`); whether it applied, and what
/// git said.
fn git_apply(scratch: &Scratch, patch: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new("git")
        .arg("-C")
        .arg(scratch.path().join("tree"))
        .arg("apply")
        .args(args)
        .arg(repo().join(patch))
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run git apply ({e}): apt-get install git"));
    (out.status.success(), show(&out))
}

fn apply(scratch: &Scratch, patch: &str, args: &[&str]) {
    let (applied, said) = git_apply(scratch, patch, args);
    assert!(applied, "{patch} {args:?} does not apply:\n{said}");
}

/// Runs desispec's tests `names` from `scratch`'s tree, with `deps` after
/// it on PYTHONPATH, in an environment of the test's own (its TMPDIR and
/// HOME in the scratch folder); returns each test's (id, outcome).
fn unittests(scratch: &Scratch, deps: &Path, names: &[&str]) -> Vec<(String, String)> {
    let tree = scratch.path().join("tree");
    let tmp = scratch.path().join("tmp");
    let path = format!("{}:{}", tree.join("py").display(), deps.display());
    let out = run(
        Command::new("timeout")
            .args(["-k", "10", "600", "/usr/bin/python3"])
            .arg(repo().join("tests/contrib/unittests.py"))
            .args(names)
            .current_dir(&tmp)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("LANG", "C.UTF-8")
            .env("HOME", &tmp)
            .env("TMPDIR", &tmp)
            .env("PYTHONPATH", path)
            .env("PYTHONNOUSERSITE", "1")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("NUMBA_CACHE_DIR", &tmp)
            .env("OMP_NUM_THREADS", "1")
            .env("OPENBLAS_NUM_THREADS", "1")
            .env("DESI_LOGLEVEL", "WARNING"),
        "desispec's unit tests",
    );
    let said = show(&out);
    let stdout = text(&out.stdout);
    let from = stdout
        .lines()
        .find_map(|l| l.strip_prefix("desispec "))
        .unwrap_or_else(|| panic!("the runner named no desispec:\n{said}"));
    assert!(
        Path::new(from).starts_with(tree.join("py/desispec")),
        "desispec came from {from}, not the patched tree:\n{said}"
    );
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("RESULT "))
        .map(|l| {
            let (outcome, id) = l.split_once(' ').unwrap_or((l, ""));
            (id.to_string(), outcome.to_string())
        })
        .collect()
}

/// `ran` is exactly `want` (id, outcome), in any order; says what differs.
fn assert_outcomes(ran: &[(String, String)], want: &[(&str, &str)], what: &str) {
    let mut ran: Vec<(&str, &str)> = ran.iter().map(|(i, o)| (i.as_str(), o.as_str())).collect();
    let mut want = want.to_vec();
    ran.sort_unstable();
    want.sort_unstable();
    assert_eq!(
        ran,
        want,
        "{what}: {} tests ran, {} expected",
        ran.len(),
        want.len()
    );
}

/// Each alone (`desispec_tests_pass_with_both_patches` applies both).
#[test]
fn each_patch_applies_to_desispec_branch() {
    let tree = branch_tree();
    for patch in [GPU_PATCH, BATCH_PATCH] {
        apply(&tree, patch, &["--check"]);
    }
}

#[test]
fn desispec_tests_pass_with_both_patches() {
    let tree = branch_tree();
    apply(&tree, GPU_PATCH, &[]);
    apply(&tree, BATCH_PATCH, &[]);
    let ran = unittests(&tree, branch_deps(), &NAMES);
    let want: Vec<(&str, &str)> = GPU_TESTS
        .iter()
        .chain(&BATCH_TESTS)
        .map(|(id, _)| (*id, "ok"))
        .chain([(PROC_NIGHT_TEST, "ok")])
        .collect();
    assert_outcomes(&ran, &want, "desispec's branch with both patches");
}

#[test]
fn each_patchs_tests_fail_without_its_change() {
    let tree = branch_tree();
    apply(&tree, GPU_PATCH, &[&format!("--include={TEST_FILES}")]);
    apply(&tree, BATCH_PATCH, &[&format!("--include={TEST_FILES}")]);
    let ran = unittests(&tree, branch_deps(), &NAMES[..2]);
    let want: Vec<(&str, &str)> = GPU_TESTS.iter().chain(&BATCH_TESTS).copied().collect();
    assert_outcomes(&ran, &want, "the patches' tests on the unpatched code");
}

#[test]
fn gpu_patch_applies_to_desispec_0_70_0_and_its_tests_pass_there() {
    let tree = release_tree();
    let (applied, said) = git_apply(&tree, BATCH_PATCH, &["--check"]);
    assert!(
        !applied,
        "0002 applies to 0.70.0, which its description denies:\n{said}"
    );
    apply(&tree, GPU_PATCH, &[]);
    // desiutil 4.0.1 comes from the same folder as desispec 0.70.0, which
    // the tree's copy comes before.
    let ran = unittests(&tree, installed(), &NAMES[..1]);
    let want: Vec<(&str, &str)> = GPU_TESTS.iter().map(|(id, _)| (*id, "ok")).collect();
    assert_outcomes(&ran, &want, "desispec 0.70.0 with 0001");
}
