//! The patches of `contrib/desispec`, applied to desispec 0.70.0 and run:
//! no Slurm, no GPU, no MPI.
//!
//! Each test copies desispec 0.70.0 (as `tests/desi/fetch.sh` installs it
//! from PyPI, this suite runs it) into a scratch tree laid out as
//! desispec's source (`py/desispec/...`: the wheel's files are the sdist's),
//! applies the patches it needs with `patch -p1` (cleanly: no fuzz, no
//! offset), and runs desispec's own code from it with `/usr/bin/python3`:
//!
//! - `redistribute_gpu_ranks` in 8 ranks, one process each
//!   (`tests/contrib/desispec_rank.py`: a communicator that passes values
//!   through files, the cupy and numba stand-ins of `tests/fakes/python`),
//!   each rank seeing a node's 4 GPUs as `visible=rotate` lists them: its
//!   own GPU first. The rows the plugin's two methods and desispec's two
//!   methods give are written out by hand.
//! - The batch writer (`tests/contrib/desispec_batch.py`), whose scripts
//!   are read back.
//!
//! Fails, never skips, when PyPI, desispec, `patch` or python3 is missing.

#[path = "desi/installed.rs"]
mod installed;

use installed::installed;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

const GPU_PATCH: &str = "contrib/desispec/0001-gpu-honour-DESI_GPU_MAPPED.patch";
const BATCH_PATCH: &str = "contrib/desispec/0002-batch_writer-desi-gpu-map-task-prolog.patch";

/// The two lines the patched batch writer puts before a GPU job's sruns.
const EXPORTS: [&str; 2] = [
    "export SLURM_TASK_PROLOG=$(command -v desi-gpu-map) SLURM_TASK_EPILOG=$(command -v desi-gpu-map)",
    "export DESI_GPU_MAP_METHOD=contiguous,mps",
];

/// 8 ranks on one node's 4 GPUs.
const RANKS: usize = 8;
const GPUS: usize = 4;

/// The plugin's GPU for each rank, by plugin method: contiguous puts
/// ranks 2k and 2k+1 on GPU k, roundrobin rank r on GPU r % 4.
const PLUGIN: [(&str, [usize; RANKS]); 2] = [
    ("contiguous", [0, 0, 1, 1, 2, 2, 3, 3]),
    ("roundrobin", [0, 1, 2, 3, 0, 1, 2, 3]),
];

/// The physical GPU unpatched desispec 0.70.0 puts each rank on, by plugin
/// method and desispec's method: it indexes the rotated list with `rank %
/// 4` (round-robin) or `rank / 2` (contiguous).
const UNPATCHED: [(&str, &str, [usize; RANKS]); 4] = [
    ("contiguous", "round-robin", [0, 1, 3, 0, 2, 3, 1, 2]),
    ("contiguous", "contiguous", [0, 0, 2, 2, 0, 0, 2, 2]),
    ("roundrobin", "round-robin", [0, 2, 0, 2, 0, 2, 0, 2]),
    ("roundrobin", "contiguous", [0, 1, 3, 0, 2, 3, 1, 2]),
];

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

/// A copy of desispec 0.70.0 in a scratch dir, its package at
/// `py/desispec` as in desispec's source tree, with `patches` applied.
fn tree(patches: &[&str]) -> Scratch {
    let tree = Scratch::new("desispec");
    let py = tree.path().join("py");
    std::fs::create_dir(&py).expect("make py/");
    let out = Command::new("cp")
        .arg("-R")
        .arg(installed().join("desispec"))
        .arg(&py)
        .output()
        .expect("run cp");
    assert!(
        out.status.success(),
        "copying desispec failed:\n{}",
        show(&out)
    );
    for patch in patches {
        apply(tree.path(), patch);
    }
    tree
}

/// Applies `patch` (a path under the repo) to `tree` with `patch -p1`,
/// asserting that every hunk applies where it says, without fuzz.
fn apply(tree: &Path, patch: &str) {
    let out = Command::new("patch")
        .args(["-p1", "--batch", "--forward", "--fuzz=0", "-d"])
        .arg(tree)
        .arg("-i")
        .arg(repo().join(patch))
        .output()
        .unwrap_or_else(|e| panic!("run patch ({e}): apt-get install patch"));
    let said = show(&out);
    assert!(out.status.success(), "{patch} does not apply:\n{said}");
    for word in [
        "offset",
        "fuzz",
        "FAILED",
        "rej",
        "Reversed",
        "already applied",
    ] {
        assert!(
            !said.contains(word),
            "{patch} does not apply cleanly ({word}):\n{said}"
        );
    }
}

/// Runs `python` (a script under tests/contrib) with `args`, desispec from
/// `tree` first on PYTHONPATH, then the cupy/numba stand-ins and desiutil.
fn python(tree: &Path, script: &str, args: &[&str]) -> Command {
    let path = [
        tree.join("py"),
        repo().join("tests/fakes/python"),
        installed().to_path_buf(),
    ]
    .map(|p| p.display().to_string())
    .join(":");
    let mut cmd = Command::new("/usr/bin/python3");
    cmd.arg(repo().join("tests/contrib").join(script))
        .args(args)
        .env("PYTHONPATH", path)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONNOUSERSITE", "1")
        .env("DESI_LOGLEVEL", "DEBUG")
        .env_remove("DESI_NO_GPU")
        .env_remove("DESI_GPU_MAPPED")
        .env_remove("CUDA_VISIBLE_DEVICES")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// What one rank did.
struct Rank {
    /// Its CUDA_VISIBLE_DEVICES.
    visible: String,
    /// The device index desispec selected.
    selected: usize,
    /// The GPU that index names.
    physical: usize,
    /// Everything it printed.
    output: String,
}

/// `visible=rotate`'s list for a task on GPU `gpu`: all 4, its own first.
fn rotated(gpu: usize) -> String {
    (0..GPUS)
        .map(|i| ((gpu + i) % GPUS).to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The 8 ranks of one world, run at once with desispec from `tree`: rank
/// r sees `rotated(gpus[r])`, `DESI_GPU_MAPPED` is `flag` (unset: None),
/// and desispec's method is `method`.
fn ranks(tree: &Path, gpus: [usize; RANKS], method: &str, flag: Option<&str>) -> Vec<Rank> {
    let world = Scratch::new("world");
    let world_arg = world.path().display().to_string();
    let size = RANKS.to_string();
    let children: Vec<_> = (0..RANKS)
        .map(|rank| {
            let rank_arg = rank.to_string();
            let mut cmd = python(
                tree,
                "desispec_rank.py",
                &[method, &rank_arg, &size, &world_arg],
            );
            cmd.env("CUDA_VISIBLE_DEVICES", rotated(gpus[rank]));
            if let Some(flag) = flag {
                cmd.env("DESI_GPU_MAPPED", flag);
            }
            cmd.spawn().expect("start a rank")
        })
        .collect();
    let py = tree.join("py").display().to_string();
    children
        .into_iter()
        .enumerate()
        .map(|(rank, child)| {
            let out = child.wait_with_output().expect("wait for a rank");
            let output = show(&out);
            assert!(out.status.success(), "rank {rank} failed:\n{output}");
            let stdout = text(&out.stdout);
            let from = stdout
                .lines()
                .find_map(|l| l.strip_prefix("F "))
                .unwrap_or_else(|| panic!("rank {rank} named no gpu.py:\n{output}"));
            assert!(
                from.starts_with(&py),
                "rank {rank} ran {from}, not the tree's:\n{output}"
            );
            let row = stdout
                .lines()
                .find_map(|l| l.strip_prefix("T "))
                .unwrap_or_else(|| panic!("rank {rank} printed no row:\n{output}"));
            let cols: Vec<&str> = row.split(' ').collect();
            assert_eq!(cols.len(), 4, "rank {rank}'s row: {row}");
            assert_eq!(cols[0], rank.to_string(), "rank {rank}'s row: {row}");
            Rank {
                visible: cols[1].to_string(),
                selected: cols[2].parse().expect("selected"),
                physical: cols[3].parse().expect("physical"),
                output,
            }
        })
        .collect()
}

fn physical(ranks: &[Rank]) -> Vec<usize> {
    ranks.iter().map(|r| r.physical).collect()
}

/// How many ranks ended on another GPU than the first of their list.
fn moved(ranks: &[Rank]) -> usize {
    ranks
        .iter()
        .filter(|r| r.visible.split(',').next() != Some(r.physical.to_string().as_str()))
        .count()
}

fn plugin(method: &str) -> [usize; RANKS] {
    PLUGIN
        .iter()
        .find(|(m, _)| *m == method)
        .expect("a plugin method")
        .1
}

#[test]
fn both_patches_apply_cleanly_to_desispec_0_70_0() {
    let tree = tree(&[GPU_PATCH, BATCH_PATCH]);
    let gpu = std::fs::read_to_string(tree.path().join("py/desispec/gpu.py")).unwrap();
    assert!(gpu.contains("def is_gpu_mapped():"), "{gpu}");
    let writer =
        std::fs::read_to_string(tree.path().join("py/desispec/workflow/batch_writer.py")).unwrap();
    assert!(!writer.contains("mps_wrapper="), "{writer}");
}

#[test]
fn patched_ranks_keep_their_gpu_under_rotate() {
    let tree = tree(&[GPU_PATCH]);
    for (plugin_method, gpus) in PLUGIN {
        for method in ["round-robin", "contiguous"] {
            let ran = ranks(tree.path(), gpus, method, Some("1"));
            let what = format!("plugin {plugin_method}, desispec {method}");
            assert_eq!(physical(&ran), gpus, "{what}");
            assert_eq!(moved(&ran), 0, "{what}");
            for (rank, r) in ran.iter().enumerate() {
                assert_eq!(r.visible, rotated(gpus[rank]), "{what}");
                assert_eq!(r.selected, 0, "{what}, rank {rank}:\n{}", r.output);
                assert!(
                    r.output.contains(&format!(
                        "$DESI_GPU_MAPPED set; rank={rank} keeps GPU=0/4 instead of {method} GPU="
                    )),
                    "{what}, rank {rank} does not say it keeps its GPU:\n{}",
                    r.output
                );
            }
            let said = "INFO:gpu.py";
            let keep = "$DESI_GPU_MAPPED set; MPI ranks keep the GPU already mapped to them";
            assert!(
                ran[0]
                    .output
                    .lines()
                    .any(|l| l.starts_with(said) && l.contains(keep)),
                "{what}, rank 0 does not say at INFO that the ranks keep their GPUs:\n{}",
                ran[0].output
            );
            assert!(
                !ran[0].output.contains("Assigned MPI ranks to GPUs"),
                "{what}:\n{}",
                ran[0].output
            );
        }
    }
}

#[test]
fn patched_ranks_keep_their_gpu_for_any_flag_but_0() {
    let tree = tree(&[GPU_PATCH]);
    let gpus = plugin("contiguous");
    for flag in ["yes", "2"] {
        let ran = ranks(tree.path(), gpus, "round-robin", Some(flag));
        assert_eq!(physical(&ran), gpus, "DESI_GPU_MAPPED={flag}");
        assert!(
            ran.iter().all(|r| r.selected == 0),
            "DESI_GPU_MAPPED={flag}"
        );
    }
}

/// The control: desispec 0.70.0 as released moves ranks off the GPU the
/// plugin gave them under `visible=rotate`, 6 of 8 in each combination.
#[test]
fn unpatched_ranks_move_off_their_gpu_under_rotate() {
    let tree = tree(&[]);
    for (plugin_method, method, want) in UNPATCHED {
        let ran = ranks(tree.path(), plugin(plugin_method), method, Some("1"));
        let what = format!("plugin {plugin_method}, desispec {method}");
        assert_eq!(physical(&ran), want, "{what}");
        assert!(moved(&ran) >= 1, "{what}: no rank moved");
        assert_eq!(moved(&ran), 6, "{what}");
        assert!(
            ran[0].output.contains("Assigned MPI ranks to GPUs"),
            "{what}:\n{}",
            ran[0].output
        );
    }
}

/// Without the flag (unset, empty or 0) the patched function chooses as
/// 0.70.0 does, and says nothing of the flag.
#[test]
fn patched_ranks_choose_as_before_without_the_flag() {
    let tree = tree(&[GPU_PATCH]);
    for (plugin_method, method, want) in UNPATCHED {
        if plugin_method != "contiguous" {
            continue;
        }
        for flag in [None, Some(""), Some("0")] {
            let ran = ranks(tree.path(), plugin(plugin_method), method, flag);
            let what = format!("desispec {method}, DESI_GPU_MAPPED {flag:?}");
            assert_eq!(physical(&ran), want, "{what}");
            for r in &ran {
                assert!(
                    !r.output.contains("DESI_GPU_MAPPED"),
                    "{what}:\n{}",
                    r.output
                );
            }
            assert!(
                ran[0].output.contains("Assigned MPI ranks to GPUs"),
                "{what}:\n{}",
                ran[0].output
            );
        }
    }
}

/// A batch script written by desispec's batch writer from `tree`: `args`
/// as `tests/contrib/desispec_batch.py` takes them, less the output dir.
fn script(tree: &Path, args: &[&str]) -> String {
    let out_dir = Scratch::new("scripts");
    let dir = out_dir.path().display().to_string();
    let mut all = args.to_vec();
    all.push(&dir);
    let out = python(tree, "desispec_batch.py", &all)
        .output()
        .expect("run desispec_batch.py");
    assert!(
        out.status.success(),
        "desispec_batch.py {args:?} failed:\n{}",
        show(&out)
    );
    let stdout = text(&out.stdout);
    let path = stdout
        .lines()
        .find_map(|l| l.strip_prefix("SCRIPT "))
        .unwrap_or_else(|| panic!("desispec_batch.py {args:?} named no script:\n{stdout}"));
    assert!(path.starts_with(&dir), "{path} is outside {dir}");
    let script = std::fs::read_to_string(path).expect("read the script");
    let check = Command::new("bash")
        .arg("-n")
        .arg(path)
        .output()
        .expect("run bash -n");
    assert!(
        check.status.success(),
        "{args:?}: bash -n:\n{}\n{script}",
        show(&check)
    );
    script
}

/// The srun lines of `script` (not its `echo Running srun ...`).
fn sruns(script: &str) -> Vec<&str> {
    script
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("srun "))
        .collect()
}

/// GPU jobs: perlmutter-gpu, not arcs. 0.70.0 wrapped the full-parallelism
/// srun of each in desi_mps_wrapper, and none of poststdstar's (its one
/// srun is fluxcalib's, which the wrapper never wrapped).
const GPU_JOBS: [&[&str]; 6] = [
    &["tilenight", "perlmutter-gpu"],
    &["proc", "perlmutter-gpu", "science"],
    &["proc", "perlmutter-gpu", "prestdstar"],
    &["proc", "perlmutter-gpu", "stdstarfit"],
    &["proc", "perlmutter-gpu", "poststdstar"],
    &["proc", "perlmutter-gpu", "flat"],
];

/// Jobs 0.70.0 ran without the wrapper: CPU systems, and arcs anywhere.
const OTHER_JOBS: [&[&str]; 3] = [
    &["tilenight", "perlmutter-cpu"],
    &["proc", "perlmutter-cpu", "science"],
    &["proc", "perlmutter-gpu", "arc"],
];

#[test]
fn patched_gpu_scripts_export_desi_gpu_map_and_run_commands_unwrapped() {
    let tree = tree(&[BATCH_PATCH]);
    for job in GPU_JOBS {
        let script = script(tree.path(), job);
        assert!(!script.contains("desi_mps_wrapper"), "{job:?}:\n{script}");
        let lines: Vec<&str> = script.lines().collect();
        let first_srun = lines
            .iter()
            .position(|l| l.contains("srun "))
            .unwrap_or_else(|| panic!("{job:?}: no srun:\n{script}"));
        for export in EXPORTS {
            let at: Vec<usize> = (0..lines.len()).filter(|&i| lines[i] == export).collect();
            assert_eq!(at.len(), 1, "{job:?}: `{export}` once:\n{script}");
            assert!(
                at[0] < first_srun,
                "{job:?}: `{export}` after an srun:\n{script}"
            );
        }
        let sruns = sruns(&script);
        assert!(!sruns.is_empty(), "{job:?}:\n{script}");
        for srun in sruns {
            let (_, command) = srun
                .split_once("--cpu-bind=")
                .unwrap_or_else(|| panic!("{job:?}: {srun}"));
            let command = command.split_once(' ').map(|(_, c)| c).unwrap_or("");
            assert!(
                command.starts_with("desi_proc"),
                "{job:?}: srun does not run the command itself: {srun}"
            );
        }
    }
}

/// The exports name desi-gpu-map as found on the script's PATH.
#[test]
fn patched_exports_name_desi_gpu_map_on_path() {
    let tree = tree(&[BATCH_PATCH]);
    let script = script(tree.path(), GPU_JOBS[0]);
    let bin = Scratch::new("bin");
    let fake = bin.path().join("desi-gpu-map");
    std::fs::write(&fake, "#!/bin/sh\n").unwrap();
    let chmod = Command::new("chmod")
        .arg("755")
        .arg(&fake)
        .output()
        .unwrap();
    assert!(chmod.status.success(), "{}", show(&chmod));
    let exports: Vec<&str> = script.lines().filter(|l| EXPORTS.contains(l)).collect();
    let probe = format!(
        "{}\necho \"$SLURM_TASK_PROLOG|$SLURM_TASK_EPILOG|$DESI_GPU_MAP_METHOD\"\n",
        exports.join("\n")
    );
    let out = Command::new("bash")
        .arg("-c")
        .arg(probe)
        .env("PATH", format!("{}:/usr/bin:/bin", bin.path().display()))
        .output()
        .expect("run bash");
    assert!(out.status.success(), "{}", show(&out));
    let fake = fake.display().to_string();
    assert_eq!(
        text(&out.stdout).trim(),
        format!("{fake}|{fake}|contiguous,mps")
    );
}

#[test]
fn patched_cpu_and_arc_scripts_get_neither_exports_nor_wrapper() {
    let tree = tree(&[BATCH_PATCH]);
    for job in OTHER_JOBS {
        let script = script(tree.path(), job);
        assert!(!script.contains("desi_mps_wrapper"), "{job:?}:\n{script}");
        assert!(!script.contains("SLURM_TASK_PROLOG"), "{job:?}:\n{script}");
        assert!(
            !script.contains("DESI_GPU_MAP_METHOD"),
            "{job:?}:\n{script}"
        );
        assert!(!sruns(&script).is_empty(), "{job:?}:\n{script}");
    }
}

/// The control: 0.70.0 as released wraps its GPU jobs' commands in
/// desi_mps_wrapper and exports no task prolog.
#[test]
fn unpatched_gpu_scripts_wrap_commands_in_desi_mps_wrapper() {
    let tree = tree(&[]);
    for job in GPU_JOBS {
        let script = script(tree.path(), job);
        assert!(!script.contains("SLURM_TASK_PROLOG"), "{job:?}:\n{script}");
        if job.contains(&"poststdstar") {
            assert!(!script.contains("desi_mps_wrapper"), "{job:?}:\n{script}");
            continue;
        }
        assert!(
            sruns(&script)
                .iter()
                .any(|s| s.contains("--cpu-bind=cores desi_mps_wrapper desi_proc")),
            "{job:?}:\n{script}"
        );
    }
}
