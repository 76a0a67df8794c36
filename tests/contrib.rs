//! The patches of `contrib/`: desispec's, applied to desispec's branch
//! with `git am` and checked by desispec's own unit tests and by the
//! scripts its generator writes; and every patch's form (`git
//! format-patch` mail, the project's author line, Slurm's `Changelog:`
//! trailer and separate `Testsuite - ...` commit). No Slurm, no GPU, no MPI.
//!
//! Each desispec test unpacks the `py/` and `doc/` of desispec's branch
//! snapshot (`../shared/thirdparty/desispec-main-efd9676.tar.gz`, beside
//! the repository, its sha256 checked) into a temporary folder of its own,
//! commits it there as a git repository, applies patches with `git am`
//! (exact context, no fuzz) or only their tests with `git apply
//! --include`, and runs desispec's `unittest` tests from that tree with
//! Debian's `/usr/bin/python3` (its numpy, astropy, ... from
//! `tests/deps.sh`) and what the branch imports from PyPI
//! (`tests/desi/fetch.sh branch`), each test's outcome read from
//! `tests/contrib/unittests.py`. The tests that must run are named, and
//! each must pass: a test that did not run fails the check as a failing
//! one does.
//!
//! Also: each patch's tests fail where its change is left out; the scripts
//! the patched branch writes without the `gpu_wrapper` key (or with
//! `desi_mps_wrapper`) are the unpatched branch's, byte for byte, and with
//! `desi-gpu-map` differ only in the GPU srun lines and the export; 0001
//! applies to desispec 0.70.0 (PyPI's newest, `tests/desi/fetch.sh`) and
//! its tests pass there, while 0002 does not apply there.
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

/// Slurm's patches, a series of two for each target, in SchedMD's form:
/// the code change, then its test (`Testsuite - ...`, no `src/` change).
/// Targets: SchedMD's master (and 25.11, 26.05 with
/// `--exclude='testsuite/*'`), 23.11 to 25.05 (24.11: Debian trixie's orig
/// tarball), and Debian bookworm's 22.05.8 (its test in 22.05.8's layout).
const SLURM_PATCHES: [(&str, &str); 3] = [
    (
        "contrib/slurm/0001-slurmstepd-task-epilog-wait-26.05-master.patch",
        "contrib/slurm/0002-Testsuite-task-epilog-wait-26.05-master.patch",
    ),
    (
        "contrib/slurm/0001-slurmstepd-task-epilog-wait-24.11.patch",
        "contrib/slurm/0002-Testsuite-task-epilog-wait-24.11.patch",
    ),
    (
        "contrib/slurm/0001-slurmstepd-task-epilog-wait-22.05.patch",
        "contrib/slurm/0002-Testsuite-task-epilog-wait-22.05.patch",
    ),
];

/// The author every patch carries: the project's.
const AUTHOR: &str =
    "From: desi-gpu-map developers\n <maintainers@users.noreply.a-seed-840fadd1.example>\n";

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
const GPU_TESTS: [(&str, &str); 13] = [
    ("desispec.test.test_gpu.TestGPU.test_doesnt_crash", "ok"),
    ("desispec.test.test_gpu.TestGPU.test_gpu_context", "ok"),
    ("desispec.test.test_gpu.TestGPU.test_gpu_envvar", "ok"),
    (
        "desispec.test.test_gpu.TestGPUMapped.test_gpu_count_mapped",
        "ERROR",
    ),
    (
        "desispec.test.test_gpu.TestGPUMapped.test_gpu_count_mapped_without_node_count",
        "ERROR",
    ),
    (
        "desispec.test.test_gpu.TestGPUMapped.test_gpu_count_unmapped",
        "ERROR",
    ),
    (
        "desispec.test.test_gpu.TestGPUMapped.test_gpu_count_without_gpu",
        "ERROR",
    ),
    (
        "desispec.test.test_gpu.TestGPUMapped.test_is_gpu_mapped",
        "ERROR",
    ),
    (
        "desispec.test.test_gpu.TestGPUMapped.test_is_gpu_mapped_other_values",
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
/// unpatched (it ignores the key and writes desi_mps_wrapper).
const BATCH_TESTS: [(&str, &str); 6] = [
    (
        "desispec.test.test_workflow_batch_writer.TestWorkflowBatchWriter.test_arc_and_cpu_unwrapped",
        "ok",
    ),
    (
        "desispec.test.test_workflow_batch_writer.TestWorkflowBatchWriter.test_desi_gpu_map",
        "FAIL",
    ),
    (
        "desispec.test.test_workflow_batch_writer.TestWorkflowBatchWriter.test_desi_gpu_map_method",
        "FAIL",
    ),
    (
        "desispec.test.test_workflow_batch_writer.TestWorkflowBatchWriter.test_desi_mps_wrapper",
        "ok",
    ),
    (
        "desispec.test.test_workflow_batch_writer.TestWorkflowBatchWriter.test_get_gpu_wrapper",
        "ERROR",
    ),
    (
        "desispec.test.test_workflow_batch_writer.TestWorkflowBatchWriter.test_other_gpu_system",
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

/// A scratch folder holding a git work tree at `tree/`, and a `tmp/` for
/// the tests' own files.
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

/// git in `scratch`'s tree, as a committer of its own (no global config).
fn git(scratch: &Scratch) -> Command {
    let mut cmd = Command::new("git");
    cmd.arg("-C")
        .arg(scratch.path().join("tree"))
        .args([
            "-c",
            "user.name=contrib test",
            "-c",
            "user.email=contrib@test.invalid",
        ])
        .args([
            "-c",
            "commit.gpgsign=false",
            "-c",
            "core.hooksPath=/dev/null",
        ]);
    cmd
}

/// desispec's branch (its `py/` and `doc/`) unpacked and committed, as in
/// a clone of it: a clone of [`branch_template`] in a scratch tree.
fn branch_tree() -> Scratch {
    let scratch = Scratch::new("branch");
    std::fs::create_dir_all(scratch.path().join("tmp")).expect("make tmp/");
    run(
        Command::new("git")
            .args(["clone", "-q", "--local"])
            .arg(branch_template())
            .arg(scratch.path().join("tree")),
        "git clone of the branch's tree",
    );
    scratch
}

/// The snapshot's `py/` and `doc/`, unpacked and committed once (in
/// Cargo's folder for tests' files, kept for the next run, named by the
/// snapshot's hash): what each test clones, rather than unpacking and
/// hashing 400 files again. Made aside and renamed into place, so that
/// another run at once never sees half of it.
fn branch_template() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("contrib-branch-{}", &SNAPSHOT_SHA256[..16]));
        if dir.join(".git").is_dir() {
            return dir;
        }
        let scratch = scratch_tree("template");
        run(
            Command::new("tar")
                .arg("-xzf")
                .arg(snapshot())
                .arg("-C")
                .arg(scratch.path().join("tree"))
                .arg("--strip-components=1")
                .arg(format!("{SNAPSHOT_TOP}/py"))
                .arg(format!("{SNAPSHOT_TOP}/doc")),
            "unpacking the snapshot's py/ and doc/",
        );
        run(git(&scratch).args(["add", "-A"]), "git add");
        run(
            git(&scratch).args(["commit", "-q", "-m", "desispec efd9676"]),
            "git commit",
        );
        // Another run may have put its own in place meanwhile: either serves.
        let _ = std::fs::rename(scratch.path().join("tree"), &dir);
        assert!(
            dir.join(".git").is_dir(),
            "no template at {}",
            dir.display()
        );
        dir
    })
}

/// `git am` of `patches` (under the repo), in order, on `scratch`'s tree;
/// whether they applied, and what git said (an `am` that failed is
/// aborted).
fn git_am(scratch: &Scratch, patches: &[&str]) -> (bool, String) {
    let out = git(scratch)
        .arg("am")
        .args(patches.iter().map(|p| repo().join(p)))
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run git am ({e}): apt-get install git"));
    if !out.status.success() {
        let _ = git(scratch).args(["am", "--abort"]).output();
    }
    (out.status.success(), show(&out))
}

fn am(scratch: &Scratch, patches: &[&str]) {
    let (applied, said) = git_am(scratch, patches);
    assert!(applied, "git am {patches:?} failed:\n{said}");
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

/// Every patch is `git format-patch` output, as `git am` takes it and
/// the projects ask for: its `From <sha>` line, the project's author, a
/// subject, a message above the `---` that says why, and a diff. Slurm's
/// code change carries the `Changelog:` trailer SchedMD's CONTRIBUTING.md
/// asks for and no test; its test is a `Testsuite - ...` commit of its own
/// with no `src/` change, whose leftover check can fail (`pgrep -f`).
#[test]
fn every_patch_is_a_git_am_mail_by_the_project() {
    let slurm = SLURM_PATCHES.iter().flat_map(|(code, test)| [code, test]);
    for patch in [GPU_PATCH, BATCH_PATCH].iter().chain(slurm) {
        let text = std::fs::read_to_string(repo().join(patch)).expect("read the patch");
        let first = text.lines().next().unwrap_or_default();
        let sha = first
            .strip_prefix("From ")
            .and_then(|l| l.strip_suffix(" Mon Sep 17 00:00:00 2001"))
            .unwrap_or_default();
        assert!(
            sha.len() == 40 && sha.chars().all(|c| c.is_ascii_hexdigit()),
            "{patch}: no git format-patch first line: {first:?}"
        );
        assert!(text.contains(AUTHOR), "{patch}: not the project's author");
        assert!(text.contains("\nDate: "), "{patch}: no Date:");
        assert!(text.contains("\nSubject: [PATCH"), "{patch}: no Subject:");
        let (message, diff) = text.split_once("\n---\n").expect("a --- line");
        let body = message.split_once("\n\n").map(|(_, b)| b).unwrap_or("");
        assert!(
            body.lines().count() >= 10,
            "{patch}: its message says too little:\n{message}"
        );
        assert!(
            !body.contains("Signed-off-by:"),
            "{patch}: the sender signs off, not the project"
        );
        assert!(diff.contains("\ndiff --git a/"), "{patch}: no diff");
        if SLURM_PATCHES.iter().any(|(code, _)| code == patch) {
            assert!(
                message.contains("\nChangelog: slurmstepd - "),
                "{patch}: no Changelog: trailer"
            );
            assert!(
                !diff.contains("\ndiff --git a/testsuite/"),
                "{patch}: the test goes in a commit of its own"
            );
        }
        if SLURM_PATCHES.iter().any(|(_, test)| test == patch) {
            assert!(
                message.contains("\nSubject: [PATCH 2/2] Testsuite - "),
                "{patch}: not a Testsuite commit"
            );
            assert!(
                !diff.contains("\ndiff --git a/src/"),
                "{patch}: a Testsuite commit changes no src/"
            );
            assert!(
                diff.contains("\n+def test_task_epilog_wait(tmp_path):\n"),
                "{patch}: no testsuite check"
            );
            assert!(
                diff.contains("pgrep -f '^{sleep_symlink} '"),
                "{patch}: the leftover check cannot fail without pgrep -f"
            );
        }
        if patch.starts_with("contrib/slurm/") {
            for line in diff.lines().filter(|l| l.starts_with('+')) {
                assert!(
                    !line.contains("sleep(1)"),
                    "{patch}: a comment about the removed code: {line}"
                );
            }
        }
    }
}

/// 0001 alone, and the series 0001 then 0002, with `git am` on desispec's
/// branch: each commit by the project's author.
#[test]
fn the_series_applies_with_git_am_to_desispec_branch() {
    let tree = branch_tree();
    am(&tree, &[GPU_PATCH]);
    let tree = branch_tree();
    am(&tree, &[GPU_PATCH, BATCH_PATCH]);
    let out = run(
        git(&tree).args(["log", "-2", "--format=%an <%ae>|%s"]),
        "git log",
    );
    let log = text(&out.stdout);
    let authors: Vec<&str> = log
        .lines()
        .map(|l| l.split('|').next().unwrap_or(""))
        .collect();
    assert_eq!(
        authors, ["desi-gpu-map developers <maintainers@users.noreply.a-seed-840fadd1.example>"; 2],
        "{log}"
    );
}

#[test]
fn desispec_tests_pass_with_both_patches() {
    let tree = branch_tree();
    am(&tree, &[GPU_PATCH, BATCH_PATCH]);
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

/// What `tests/contrib/write_scripts.py` prints from `scratch`'s tree: the
/// scripts the generator writes (perlmutter-gpu and -cpu; tilenight, arc,
/// flat with nightlybias, science, prestdstar), in a production folder of
/// `scratch`'s own `redux`, named `$DESI_SPECTRO_REDUX` in the text so that
/// trees written side by side compare.
fn scripts(scratch: &Scratch) -> String {
    let redux = scratch.path().join("redux");
    std::fs::create_dir_all(&redux).expect("make redux/");
    let tree = scratch.path().join("tree");
    let tmp = scratch.path().join("tmp");
    let path = format!("{}:{}", tree.join("py").display(), branch_deps().display());
    let out = run(
        Command::new("timeout")
            .args(["-k", "10", "300", "/usr/bin/python3"])
            .arg(repo().join("tests/contrib/write_scripts.py"))
            .current_dir(&tmp)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("LANG", "C.UTF-8")
            .env("HOME", &tmp)
            .env("TMPDIR", &tmp)
            .env("PYTHONPATH", path)
            .env("PYTHONNOUSERSITE", "1")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("DESI_SPECTRO_REDUX", &redux)
            .env("SPECPROD", "test")
            .env("DESI_LOGLEVEL", "WARNING"),
        "tests/contrib/write_scripts.py",
    );
    let said = text(&out.stdout);
    assert_eq!(
        said.matches("\n=== ").count() + 1,
        10,
        "not 10 scripts:\n{said}"
    );
    said.replace(&redux.display().to_string(), "$DESI_SPECTRO_REDUX")
}

/// Sets perlmutter-gpu's `gpu_wrapper` in `scratch`'s batch_config.yaml
/// (the line 0002 writes), or removes it where `value` is None.
fn set_gpu_wrapper(scratch: &Scratch, value: Option<&str>) {
    let file = scratch
        .path()
        .join("tree/py/desispec/data/batch_config.yaml");
    let yaml = std::fs::read_to_string(&file).expect("read batch_config.yaml");
    let line = "    gpu_wrapper: desi_mps_wrapper\n";
    assert_eq!(yaml.matches(line).count(), 1, "{yaml}");
    let new = match value {
        Some(v) => format!("    gpu_wrapper: {v}\n"),
        None => String::new(),
    };
    std::fs::write(&file, yaml.replace(line, &new)).expect("write batch_config.yaml");
}

/// Without the key, or with `desi_mps_wrapper` (as 0002 ships
/// batch_config.yaml), the patched branch writes today's scripts, byte for
/// byte; with `desi-gpu-map` the GPU sruns that ran desi_mps_wrapper run
/// `desi-gpu-map exec --`, the method desispec's round-robin is exported
/// after MPICH_GPU_SUPPORT_ENABLED, and nothing else changes.
#[test]
fn scripts_without_the_key_are_todays_byte_for_byte() {
    // Four trees, written side by side: the branch, and the patched branch
    // with 0002's key, without it, and with desi-gpu-map.
    let written = |patched: bool, key: Option<Option<&str>>| {
        let tree = branch_tree();
        if patched {
            am(&tree, &[GPU_PATCH, BATCH_PATCH]);
        }
        if let Some(value) = key {
            set_gpu_wrapper(&tree, value);
        }
        scripts(&tree)
    };
    let [today, shipped, no_key, mapped] = std::thread::scope(|s| {
        [
            s.spawn(|| written(false, None)),
            s.spawn(|| written(true, None)),
            s.spawn(|| written(true, Some(None))),
            s.spawn(|| written(true, Some(Some("desi-gpu-map")))),
        ]
        .map(|t| t.join().expect("a tree's scripts"))
    });
    assert_eq!(
        today.matches(" desi_mps_wrapper desi_proc").count(),
        2 * 4,
        "{today}"
    );
    assert_eq!(shipped, today, "gpu_wrapper: desi_mps_wrapper");
    assert_eq!(no_key, today, "no gpu_wrapper");
    let want = today
        .replace(
            " desi_mps_wrapper desi_proc",
            " desi-gpu-map exec -- desi_proc",
        )
        .replace(
            "export MPICH_GPU_SUPPORT_ENABLED=1\n",
            "export MPICH_GPU_SUPPORT_ENABLED=1\nexport DESI_GPU_MAP_METHOD=roundrobin,mps\n",
        );
    assert_eq!(mapped, want, "gpu_wrapper: desi-gpu-map");
    assert_eq!(
        mapped.matches("export DESI_GPU_MAP_METHOD=").count(),
        4,
        "{mapped}"
    );
    assert!(!mapped.contains("desi_mps_wrapper"), "{mapped}");
}

#[test]
fn gpu_patch_applies_to_desispec_0_70_0_and_its_tests_pass_there() {
    // The release's tree is its py/ only: the patches' doc/changes.rst
    // lines are left out.
    let tree = release_tree();
    let (applied, said) = git_apply(&tree, BATCH_PATCH, &["--check", "--include=py/*"]);
    assert!(
        !applied,
        "0002 applies to 0.70.0, which contrib/desispec/README.md denies:\n{said}"
    );
    apply(&tree, GPU_PATCH, &["--include=py/*"]);
    // desiutil 4.0.1 comes from the same folder as desispec 0.70.0, which
    // the tree's copy comes before.
    let ran = unittests(&tree, installed(), &NAMES[..1]);
    let want: Vec<(&str, &str)> = GPU_TESTS.iter().map(|(id, _)| (*id, "ok")).collect();
    assert_outcomes(&ran, &want, "desispec 0.70.0 with 0001");
}
