//! DESI's own GPU selection under the plugin: desispec 0.70.0's
//! `redistribute_gpu_ranks` (`py/desispec/gpu.py`, as PyPI ships it), run in
//! real MPI ranks on the local test cluster, and the physical GPU each rank
//! ends on, for each plugin method and each of desispec's methods, with
//! `visible=single` and `visible=rotate`, and without the option.
//!
//! Each of 8 ranks on n1's 4 fake GPUs (`srun --mpi=pmix`: Debian's
//! `python3-mpi4py` on Open MPI 4.1, loopback only) runs
//! `tests/desi/ranks.py`, which prints `T rank host local
//! CUDA_VISIBLE_DEVICES selected physical flag`: `selected` is the device
//! index desispec handed `cupy.cuda.Device(i).use()`, `physical` the entry
//! of `CUDA_VISIBLE_DEVICES` it names. cupy and numba.cuda are stand-ins
//! (`tests/fakes/python`): the device count is the number of entries of
//! `CUDA_VISIBLE_DEVICES`, as the CUDA runtime counts them.
//!
//! Needs: the host's Slurm 22.05 series only (the Debian roots of 24.11 and
//! 26.05 have no Python MPI), `python3-mpi4py` and `openmpi-bin`
//! (tests/deps.sh), and desispec 0.70.0 and desiutil 4.0.1 from PyPI, which
//! `tests/desi/fetch.sh` installs with `--no-deps` into
//! /var/tmp/desi-gpu-map-desi (this suite runs it; it needs PyPI once, as
//! root). Run by `tests/run-cluster-tests.sh` on 22.05; it fails, never
//! skips, when any of that is missing. Every expected row is written out
//! by hand.

use crate::common::*;

#[path = "../desi/installed.rs"]
mod installed;

/// 8 ranks on n1's 4 GPUs, started by Slurm's PMIx as one MPI world (one
/// node only: two slurmd on one host cannot share PMIx's directories).
const EIGHT_ON_N1: &str = "-N1 -n8 -w n1 --gpus-per-node=4 --mpi=pmix";

/// Open MPI on loopback only: its wire-up on `lo`, shared memory between
/// the ranks of the one node, and none of the components that pick
/// interfaces by themselves (UCX, libfabric). No TCP transport either:
/// Open MPI 4.1's listens on 0.0.0.0 and [::] even with
/// `btl_tcp_if_include=lo` (measured with `ss`), and one node needs none.
const LOOPBACK: [(&str, &str); 5] = [
    ("OMPI_MCA_oob_tcp_if_include", "lo"),
    ("OMPI_MCA_btl_tcp_if_include", "lo"),
    ("OMPI_MCA_btl", "self,vader"),
    ("OMPI_MCA_pml", "ob1"),
    ("OMPI_MCA_osc", "sm,pt2pt"),
];

/// Where `tests/desi/fetch.sh` installed desispec and desiutil.
fn desispec() -> String {
    installed::installed().display().to_string()
}

/// Removes the PMIx directories a failed launch leaves in /tmp
/// (`/tmp/spmix_appdir_<uid>_<job>.<step>`), which would make the next
/// step's slurmstepd fail with "File exists".
fn remove_pmix_leftovers() {
    let Ok(entries) = std::fs::read_dir("/tmp") else {
        return;
    };
    for entry in entries.flatten() {
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with("spmix_appdir_")
        {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The 8 ranks, each running desispec's `method` (`round-robin` or
/// `contiguous`); with `honour`, a rank that finds `DESI_GPU_MAPPED=1` uses
/// device 0 instead, as docs/user-guide.md tells applications to. `option` is
/// `--desi-gpu-map`'s value, none for a step without it.
fn ranks(option: Option<&str>, method: &str, honour: bool) -> Ran {
    ranks_through(option, "", method, honour)
}

/// [`ranks`], each rank started through `through` (`desi-gpu-map exec
/// ... --`, or nothing).
fn ranks_through(option: Option<&str>, through: &str, method: &str, honour: bool) -> Ran {
    ranks_as("root", option, through, method, honour)
}

/// [`ranks_through`] as `user`.
fn ranks_as(user: &str, option: Option<&str>, through: &str, method: &str, honour: bool) -> Ran {
    ranks_in(user, option, through, method, honour, |job| job)
}

/// [`ranks_as`], with `more` done to the step's srun (the task prolog).
fn ranks_in(
    user: &str,
    option: Option<&str>,
    through: &str,
    method: &str,
    honour: bool,
    more: impl FnOnce(Job) -> Job,
) -> Ran {
    let script = format!(
        "exec {through} /usr/bin/python3 {}/tests/desi/ranks.py {method}{}",
        repo().display(),
        if honour { " honour" } else { "" }
    );
    let path = format!(
        "{}:{}",
        repo().join("tests/fakes/python").display(),
        desispec()
    );
    let mut job = more(srun(EIGHT_ON_N1)).user(user).env("PYTHONPATH", &path);
    for (name, value) in LOOPBACK {
        job = job.env(name, value);
    }
    if let Some(option) = option {
        job = job.method(option);
    }
    let ran = job.probe(&script).run();
    if !ran.success() {
        remove_pmix_leftovers();
    }
    ran.ok()
}

/// How many ranks ended on another GPU than the plugin gave them: the
/// first entry of their list (`visible=rotate` puts the task's own GPU
/// first) against the physical GPU desispec selected.
fn moved(ran: &Ran) -> usize {
    ran.rows()
        .lines()
        .filter(|row| {
            let cols: Vec<&str> = row.split(' ').collect();
            cols[3].split(',').next() != Some(cols[5])
        })
        .count()
}

/// `visible=single`, plugin method contiguous: ranks 2k and 2k+1 on GPU k.
const SINGLE_CONTIGUOUS: [&str; 8] = [
    "0 n1 0 0 0 0 1",
    "1 n1 1 0 0 0 1",
    "2 n1 2 1 0 1 1",
    "3 n1 3 1 0 1 1",
    "4 n1 4 2 0 2 1",
    "5 n1 5 2 0 2 1",
    "6 n1 6 3 0 3 1",
    "7 n1 7 3 0 3 1",
];

/// `visible=single`, plugin method roundrobin: rank r on GPU r % 4.
const SINGLE_ROUNDROBIN: [&str; 8] = [
    "0 n1 0 0 0 0 1",
    "1 n1 1 1 0 1 1",
    "2 n1 2 2 0 2 1",
    "3 n1 3 3 0 3 1",
    "4 n1 4 0 0 0 1",
    "5 n1 5 1 0 1 1",
    "6 n1 6 2 0 2 1",
    "7 n1 7 3 0 3 1",
];

#[test]
fn single_keeps_every_rank_on_the_plugins_gpu() {
    // One visible device: desispec counts 1 and selects device 0 under
    // either of its methods, the plugin's GPU.
    let _c = setup("required", &[]);
    for method in ["round-robin", "contiguous"] {
        ranks(Some("contiguous"), method, false).rows_are(&SINGLE_CONTIGUOUS);
        ranks(Some("roundrobin"), method, false).rows_are(&SINGLE_ROUNDROBIN);
    }
}

#[test]
fn exec_keeps_every_rank_on_its_gpu_without_the_plugin() {
    // The same rows as the plugin's, each rank mapped by `exec` before
    // Python and MPI start.
    let _c = setup("required", &[]);
    cluster(&["plugin", "off"]);
    let exec = |m: &str| format!("{} exec --nvml {} --method {m} --", bin(), fake_nvml());
    for method in ["round-robin", "contiguous"] {
        ranks_through(None, &exec("contiguous"), method, false).rows_are(&SINGLE_CONTIGUOUS);
        ranks_through(None, &exec("roundrobin"), method, false).rows_are(&SINGLE_ROUNDROBIN);
    }
}

/// The 8 ranks under contiguous,mps: each on its GPU, named by UUID;
/// desispec counts one device and selects it.
fn mps_rows() -> Vec<String> {
    (0..8)
        .map(|rank| {
            let gpu = format!("GPU-fake-n1-{}", rank / 2);
            format!("{rank} n1 {rank} {gpu} 0 {gpu} 1")
        })
        .collect()
}

#[test]
fn exec_with_mps_keeps_every_rank_on_its_gpu_as_a_client_of_one_daemon() {
    // As DESI's batch scripts would run it: `exec --method contiguous,mps`
    // in place of desi_mps_wrapper. Under MPS the tasks' GPUs are named by
    // UUID; desispec still counts one device and selects it.
    let _c = setup("required", &[]);
    cluster(&["plugin", "off"]);
    let exec = format!(
        "{} exec --nvml {} --mps-control {}/mps/bin/nvidia-cuda-mps-control --method contiguous,mps --",
        bin(),
        fake_nvml(),
        state_dir()
    );
    for method in ["round-robin", "contiguous"] {
        let ran = ranks_as(USERS[0].0, None, &exec, method, false);
        ran.rows_are(&mps_rows().iter().map(String::as_str).collect::<Vec<_>>());
    }
}

#[test]
fn the_task_prolog_keeps_every_rank_on_its_gpu_with_mps_and_nothing_wrapped() {
    // As DESI's batch scripts would with contrib/desispec's batch writer:
    // desi-gpu-map as the task prolog and epilog, the method in
    // DESI_GPU_MAP_METHOD, and the ranks' command unchanged.
    let _c = setup("required", &[]);
    cluster(&["plugin", "off"]);
    let control = format!("{}/mps/bin/nvidia-cuda-mps-control", state_dir());
    // The epilog only with MPS, whose end it is for: slurmstepd waits about
    // a second for each task's epilog, so MPS's end is paid for once, with
    // desispec's contiguous formula.
    let prolog = format!("--task-prolog={}", bin());
    let hooks = format!("--task-prolog={b} --task-epilog={b}", b = bin());
    for (map, want_gpu) in [("contiguous", None), ("contiguous,mps", Some(()))] {
        let hooks = match want_gpu {
            None => &prolog,
            Some(()) => &hooks,
        };
        let methods: &[&str] = match want_gpu {
            None => &["round-robin", "contiguous"],
            Some(()) => &["contiguous"],
        };
        for method in methods {
            let ran = ranks_in(USERS[0].0, None, "", method, false, |job| {
                job.args(hooks)
                    .env("DESI_GPU_MAP_METHOD", map)
                    .env("DESI_GPU_MAP_NVML", &fake_nvml())
                    .env("DESI_GPU_MAP_MPS_CONTROL", &control)
            });
            match want_gpu {
                None => {
                    ran.rows_are(&SINGLE_CONTIGUOUS);
                }
                Some(()) => {
                    ran.rows_are(&mps_rows().iter().map(String::as_str).collect::<Vec<_>>());
                }
            }
        }
    }
}

#[test]
fn rotate_moves_six_of_eight_ranks_off_the_plugins_gpu() {
    // Under rotate each rank sees all 4 GPUs, its own first; desispec then
    // indexes the rotated list with its own formula: round-robin rank % 4,
    // contiguous rank / 2 (8 ranks, 4 GPUs, 1 host).
    let _c = setup("required", &["visible=rotate"]);
    let ran = ranks(Some("contiguous"), "round-robin", false).rows_are(&[
        "0 n1 0 0,1,2,3 0 0 1",
        "1 n1 1 0,1,2,3 1 1 1",
        "2 n1 2 1,2,3,0 2 3 1",
        "3 n1 3 1,2,3,0 3 0 1",
        "4 n1 4 2,3,0,1 0 2 1",
        "5 n1 5 2,3,0,1 1 3 1",
        "6 n1 6 3,0,1,2 2 1 1",
        "7 n1 7 3,0,1,2 3 2 1",
    ]);
    assert_eq!(moved(&ran), 6, "{ran}");
    let ran = ranks(Some("contiguous"), "contiguous", false).rows_are(&[
        "0 n1 0 0,1,2,3 0 0 1",
        "1 n1 1 0,1,2,3 0 0 1",
        "2 n1 2 1,2,3,0 1 2 1",
        "3 n1 3 1,2,3,0 1 2 1",
        "4 n1 4 2,3,0,1 2 0 1",
        "5 n1 5 2,3,0,1 2 0 1",
        "6 n1 6 3,0,1,2 3 2 1",
        "7 n1 7 3,0,1,2 3 2 1",
    ]);
    assert_eq!(moved(&ran), 6, "{ran}");
    let ran = ranks(Some("roundrobin"), "round-robin", false).rows_are(&[
        "0 n1 0 0,1,2,3 0 0 1",
        "1 n1 1 1,2,3,0 1 2 1",
        "2 n1 2 2,3,0,1 2 0 1",
        "3 n1 3 3,0,1,2 3 2 1",
        "4 n1 4 0,1,2,3 0 0 1",
        "5 n1 5 1,2,3,0 1 2 1",
        "6 n1 6 2,3,0,1 2 0 1",
        "7 n1 7 3,0,1,2 3 2 1",
    ]);
    assert_eq!(moved(&ran), 6, "{ran}");
    let ran = ranks(Some("roundrobin"), "contiguous", false).rows_are(&[
        "0 n1 0 0,1,2,3 0 0 1",
        "1 n1 1 1,2,3,0 0 1 1",
        "2 n1 2 2,3,0,1 1 3 1",
        "3 n1 3 3,0,1,2 1 0 1",
        "4 n1 4 0,1,2,3 2 2 1",
        "5 n1 5 1,2,3,0 2 3 1",
        "6 n1 6 2,3,0,1 3 1 1",
        "7 n1 7 3,0,1,2 3 2 1",
    ]);
    assert_eq!(moved(&ran), 6, "{ran}");
}

#[test]
fn honouring_the_flag_keeps_every_rank_on_its_gpu_under_rotate() {
    // The user guide's few lines: with DESI_GPU_MAPPED=1 skip the selection and
    // use device 0, the task's own GPU under either visible mode.
    let _c = setup("required", &["visible=rotate"]);
    for method in ["round-robin", "contiguous"] {
        let ran = ranks(Some("contiguous"), method, true).rows_are(&[
            "0 n1 0 0,1,2,3 0 0 1",
            "1 n1 1 0,1,2,3 0 0 1",
            "2 n1 2 1,2,3,0 0 1 1",
            "3 n1 3 1,2,3,0 0 1 1",
            "4 n1 4 2,3,0,1 0 2 1",
            "5 n1 5 2,3,0,1 0 2 1",
            "6 n1 6 3,0,1,2 0 3 1",
            "7 n1 7 3,0,1,2 0 3 1",
        ]);
        assert_eq!(moved(&ran), 0, "{ran}");
    }
}

#[test]
fn without_the_option_desispec_chooses_among_the_steps_gpus() {
    // No mapping: every rank sees the step's 4 GPUs, no flag, and desispec's
    // own formula decides.
    let _c = setup("required", &[]);
    ranks(None, "round-robin", false).rows_are(&[
        "0 n1 0 0,1,2,3 0 0 unset",
        "1 n1 1 0,1,2,3 1 1 unset",
        "2 n1 2 0,1,2,3 2 2 unset",
        "3 n1 3 0,1,2,3 3 3 unset",
        "4 n1 4 0,1,2,3 0 0 unset",
        "5 n1 5 0,1,2,3 1 1 unset",
        "6 n1 6 0,1,2,3 2 2 unset",
        "7 n1 7 0,1,2,3 3 3 unset",
    ]);
    // The honouring lines change nothing where the flag is unset.
    for honour in [false, true] {
        ranks(None, "contiguous", honour).rows_are(&[
            "0 n1 0 0,1,2,3 0 0 unset",
            "1 n1 1 0,1,2,3 0 0 unset",
            "2 n1 2 0,1,2,3 1 1 unset",
            "3 n1 3 0,1,2,3 1 1 unset",
            "4 n1 4 0,1,2,3 2 2 unset",
            "5 n1 5 0,1,2,3 2 2 unset",
            "6 n1 6 0,1,2,3 3 3 unset",
            "7 n1 7 0,1,2,3 3 3 unset",
        ]);
    }
}
