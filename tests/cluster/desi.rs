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
//! Needs: the host's Slurm 22.05 series (the last test below runs on
//! every series), `python3-mpi4py` and `openmpi-bin` (tests/deps.sh), and
//! desispec 0.70.0 and desiutil 4.0.1 from PyPI, which
//! `tests/desi/fetch.sh` installs with `--no-deps` into
//! /var/tmp/desi-gpu-map-desi (this suite runs it; it needs PyPI once, as
//! root). Run by `tests/run-cluster-tests.sh` on 22.05; it fails, never
//! skips, when any of that is missing. Every expected row is written out
//! by hand.
//!
//! Then the scripts desispec's branch writes
//! (`../shared/thirdparty/desispec-main-efd9676.tar.gz`, its own
//! `batch_writer`; tests/desi/scripts.sh): unpatched, patched with
//! contrib/desispec without the `gpu_wrapper` key (the branch's
//! `desi_mps_wrapper`, byte for byte the unpatched scripts), and patched
//! with `gpu_wrapper: desi-gpu-map`; the tilenight and a desi_proc script
//! for perlmutter-gpu, submitted as they are with sbatch as dgm-alice: 64
//! ranks of tests/desi/desi_proc (`-N 1 -n 64 -c 2`) on one node's 4 GPUs,
//! each row checked against the layout (desispec's round-robin, rank % 4),
//! with and without the site's plugin. Each job takes 6 to 10 s here (64
//! Python ranks on 2 cores); the whole suite, 10 jobs among its tests,
//! took 195 s on a loaded 2-core machine. Needs
//! `tests/desi/fetch.sh branch` (PyPI once) and Debian's imports of the
//! branch (tests/deps.sh).
//!
//! Last, desi_proc's own GPU extraction orchestration (proc.py's block as
//! written, gpu_specter's ParallelIOCoordinator and decompose_comm from
//! `tests/desi/gpu_specter-116b964/`, its package, vendored; the extraction
//! and cupy stubbed) in the 64 ranks of the tilenight script: 4 jobs. This
//! one test runs on every series (`EVERY_SERIES` in run-cluster-tests.sh):
//! on 24.11 and 26.05 its ranks run in the Debian root, on the root's
//! Python (tests/cluster/slurm-root.sh installs it): Debian's mpi4py on
//! Open MPI 5 under mpi/pmix on 24.11; on 26.05, whose Debian Slurm has no
//! mpi/pmix, Debian's MPICH under mpi/pmi2 with PyPI's mpi4py wheel
//! (`tests/desi/fetch.sh mpi4py`; tests/desi/scripts.sh chooses). The
//! scripts' folder is in the cluster's state dir and fetch.sh's cache is
//! bound read-only into the root (cluster.sh), both at the same paths.

use crate::common::*;
use crate::mps::ALICE;

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
    let prolog = format!("--task-prolog={}", prolog_bin());
    let hooks = format!("--task-prolog={b} --task-epilog={b}", b = prolog_bin());
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

// ------------------------------------------- the scripts desispec writes

/// What desispec's branch imports from PyPI (desiutil, desitarget,
/// desimodel): `tests/desi/fetch.sh branch`.
fn branch_deps() -> String {
    script("tests/desi/fetch.sh", &["branch"])
        .trim()
        .to_string()
}

/// The tilenight and desi_proc scripts desispec's branch writes
/// (tests/desi/scripts.sh: `unpatched`, `patched` or `desi-gpu-map`), in a
/// folder of their own with the user's home and the production's output
/// tree; removed when dropped. The folder is in the cluster's state dir,
/// which a Slurm root sees at the same path (cluster.sh binds it).
struct Scripts {
    dir: std::path::PathBuf,
    tilenight: String,
    proc: String,
}

impl Scripts {
    fn write(kind: &str) -> Scripts {
        Scripts::write_for(kind, false)
    }

    /// [`Scripts::write`], whose tilenight script runs desi_proc's own
    /// extraction orchestration (tests/desi/extraction) where `extraction`.
    fn write_for(kind: &str, extraction: bool) -> Scripts {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::path::PathBuf::from(format!(
            "{}/dgm-desi-scripts.{}.{stamp}",
            state_dir(),
            std::process::id()
        ));
        let out = std::process::Command::new("bash")
            .arg(repo().join("tests/desi/scripts.sh"))
            .arg(&dir)
            .args([kind, ALICE, &branch_deps()])
            .env("DGM_CLUSTER_DIR", state_dir())
            .env("DGM_DESI_EXTRACTION", if extraction { "1" } else { "0" })
            .output()
            .expect("run tests/desi/scripts.sh");
        let mut scripts = Scripts {
            dir,
            tilenight: String::new(),
            proc: String::new(),
        };
        assert!(
            out.status.success(),
            "tests/desi/scripts.sh {kind}:\n{}",
            show(&out)
        );
        let paths = std::fs::read_to_string(scripts.dir.join("scripts")).unwrap();
        let mut paths = paths.lines().map(String::from);
        scripts.tilenight = paths.next().unwrap();
        scripts.proc = paths.next().unwrap();
        scripts
    }

    /// Submits `script` as it is, as alice with the home whose profile its
    /// login shell reads, and returns its log once the job has ended.
    fn run(&self, script: &str) -> String {
        // HOME through env(1): runuser sets the user's own (/tmp).
        let home = format!("HOME={}", self.dir.join("home").display());
        let id = client("env", &home)
            .args("sbatch --parsable")
            .arg(script)
            .user(ALICE)
            .ok()
            .stdout()
            .trim()
            .to_string();
        let done = crate::mps::wait_for(120, || {
            client("squeue", &format!("-h -j {id} -o %t"))
                .run()
                .stdout()
                .trim()
                .is_empty()
        });
        let log = format!("{}-{id}.log", script.trim_end_matches(".slurm"));
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(done, "job {id} ({script}) still runs after 120 s:\n{text}");
        assert!(
            text.contains("\nSUCCESS: done at "),
            "job {id} ({script}) failed:\n{text}"
        );
        text
    }
}

impl Drop for Scripts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The user's processes on this machine, zombies aside.
fn alices_processes() -> Vec<u32> {
    let uid = USERS[0].1;
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse().ok()) else {
            continue;
        };
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|l| l.split_whitespace().next())
                .map(String::from)
        };
        if field("Uid:").and_then(|u| u.parse::<u32>().ok()) == Some(uid)
            && field("State:").as_deref() != Some("Z")
        {
            found.push(pid);
        }
    }
    found
}

/// The job's 64 rows, rank by rank, and its node's daemon line, where
/// each rank's GPU and daemon are desi-gpu-map's (exec's or the plugin's):
/// rank r on GPU r % 4, desispec's own round-robin (the method the
/// scripts export), each seeing its GPU alone by UUID,
/// desispec selecting it, the flag set, desispec keeping device 0 where it
/// would see four GPUs (patched gpu.py), and every rank reaching the one
/// control daemon of the node, as alice, in its private directory, holding
/// the node's 4 GPUs.
#[track_caller]
fn assert_mapped_and_served(log: &str, what: &str) {
    let rows = probe_rows(log);
    let first: Vec<&str> = rows.lines().next().unwrap_or_default().split(' ').collect();
    let (host, pipe) = (
        first.get(1).copied().unwrap_or("?"),
        first.last().copied().unwrap_or("?"),
    );
    assert!(
        pipe.starts_with("/tmp/dgm-mps.3901."),
        "{what}: rank 0's MPS directory is no private one of alice's:\n{log}"
    );
    let want: Vec<String> = (0..64)
        .map(|rank| {
            let gpu = format!("GPU-fake-{host}-{}", rank % 4);
            format!("{rank} {host} {rank} {gpu} 0 {gpu} 1 0 reached {pipe}")
        })
        .collect();
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    assert_eq!(rows, crate::common::rows(&want), "{what}:\n{log}");
    let daemons: Vec<&str> = log.lines().filter(|l| l.starts_with("D ")).collect();
    let all = format!("GPU-fake-{host}-0,GPU-fake-{host}-1,GPU-fake-{host}-2,GPU-fake-{host}-3");
    assert_eq!(
        daemons,
        [format!(
            "D {host} 1 PIPE_DIRECTORY={pipe} CUDA_VISIBLE_DEVICES={all}"
        )],
        "{what}: one daemon on the node, the ranks' own\n{log}"
    );
}

/// Nothing of alice's is left on the node once the job has ended: no
/// process, no MPS daemon, keeper or directory.
#[track_caller]
fn assert_nothing_of_alices_left(what: &str) {
    crate::mps::assert_nothing_left(what);
    let gone = crate::mps::wait_for(10, || alices_processes().is_empty());
    assert!(
        gone,
        "after {what}: alice's processes {:?}",
        alices_processes()
    );
}

/// Runs both scripts and checks each as [`assert_mapped_and_served`] and
/// [`assert_nothing_of_alices_left`].
fn run_patched(scripts: &Scripts, case: &str) {
    for script in [&scripts.tilenight, &scripts.proc] {
        let what = format!("{script} ({case})");
        let log = scripts.run(script);
        assert_mapped_and_served(&log, &what);
        assert_nothing_of_alices_left(&what);
    }
}

/// What a script with `gpu_wrapper: desi-gpu-map` runs in the wrapper's
/// place, which the cluster takes as written: its `#SBATCH` lines (`--qos
/// regular`, `--account desi_g`, `--constraint=gpu`, `--gpus-per-node=4`,
/// `--exclusive`, `-N 1`) and its srun line (`-N 1 -n 64 -c 2
/// --cpu-bind=cores`) unchanged, now `desi-gpu-map exec --`, the method
/// exported once; what it needs on PATH from the profile its login shell
/// reads.
#[track_caller]
fn assert_as_written(path: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    for line in [
        "#!/bin/bash -l",
        "#SBATCH --qos regular",
        "#SBATCH --account desi_g",
        "#SBATCH --constraint=gpu",
        "#SBATCH --gpus-per-node=4",
        "#SBATCH --exclusive",
        "#SBATCH -N 1",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "{path} lacks {line:?}:\n{text}"
        );
    }
    assert!(
        text.contains("srun -N 1 -n 64 -c 2 --cpu-bind=cores desi-gpu-map exec -- desi_proc"),
        "{path}: not DESI's GPU shape under desi-gpu-map exec:\n{text}"
    );
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("export DESI_GPU_MAP_METHOD="))
            .collect::<Vec<_>>(),
        ["export DESI_GPU_MAP_METHOD=roundrobin,mps"],
        "{path}: the method exported once, desispec's round-robin:\n{text}"
    );
    assert!(!text.contains("desi_mps_wrapper"), "{path}:\n{text}");
}

/// The cluster takes the scripts desispec's branch writes as they are
/// (tests/desi/scripts.sh says what the profile gives them, and why:
/// `SLURM_MPI_TYPE=pmix`, as Perlmutter's MpiDefault gives its MPI, since
/// the srun lines name none; the nodes declare Perlmutter's 128 CPUs and
/// `Features=gpu`, tests/cluster/cluster.sh; srun warns that this
/// cluster's task/none binds no CPUs for `--cpu-bind=cores`, and runs the
/// step). With contrib/desispec's
/// patches, `gpu_wrapper: desi-gpu-map` and no plugin, the recipe a user
/// needs no admin for: 64 ranks of `desi_proc_tilenight`, then of
/// `desi_proc`, each on its GPU, flagged, kept there by desispec, served by
/// the node's one MPS daemon, and nothing of the user's left after each
/// job.
#[test]
fn the_desi_gpu_map_scripts_bind_and_serve_every_rank_without_the_plugin() {
    let _c = setup("required", &[]);
    cluster(&["plugin", "off"]);
    crate::mps::clear_what_others_left();
    let scripts = Scripts::write("desi-gpu-map");
    assert_as_written(&scripts.tilenight);
    assert_as_written(&scripts.proc);
    run_patched(&scripts, "no plugin");
}

/// The same scripts on nodes whose site installed the plugin, with and
/// without a site `default=`: the same rows, one daemon a node (exec
/// stands aside where the plugin took the exported method as the job's
/// request and started its own), and nothing left.
#[test]
fn the_desi_gpu_map_scripts_bind_and_serve_every_rank_under_the_site_plugin() {
    let control = format!(
        "mps_control={}/mps/bin/nvidia-cuda-mps-control",
        state_dir()
    );
    let scripts = Scripts::write("desi-gpu-map");
    for site in [
        vec![control.as_str()],
        vec![control.as_str(), "default=contiguous"],
    ] {
        let _c = setup("required", &site);
        crate::mps::clear_what_others_left();
        run_patched(&scripts, &format!("plugin {site:?}"));
    }
}

/// DESI's scripts as they are today, `desi_mps_wrapper` in every srun
/// (tests/desi/desi_mps_wrapper) and desispec's gpu.py unpatched, on nodes
/// whose site installed the plugin with `default=contiguous`: the jobs
/// succeed and every rank ends on its GPU (the plugin's, which it sees
/// alone, so desispec's round-robin selects it; where desispec would see
/// four it picks rank % 4, `kept`). The wrapper's own daemon runs beside
/// the plugin, in its fixed /tmp/nvidia-mps, started by local rank 0 with
/// rank 0's environment: it holds GPU 0 only, the plugin's GPU for rank 0
/// (docs/user-guide.md says what that means on a GPU).
#[test]
fn the_unpatched_scripts_keep_every_rank_on_its_gpu_under_a_site_default() {
    let _c = setup("required", &["default=contiguous"]);
    crate::mps::clear_what_others_left();
    remove_the_wrappers_directories();
    let scripts = Scripts::write("unpatched");
    for script in [&scripts.tilenight, &scripts.proc] {
        let log = scripts.run(script);
        remove_the_wrappers_directories();
        let rows = probe_rows(&log);
        let host = rows.split(' ').nth(1).unwrap_or("?").to_string();
        let want: Vec<String> = (0..64)
            .map(|rank| {
                let gpu = rank / 16;
                let kept = rank % 4;
                format!("{rank} {host} {rank} {gpu} 0 {gpu} 1 {kept} reached /tmp/nvidia-mps")
            })
            .collect();
        let want: Vec<&str> = want.iter().map(String::as_str).collect();
        assert_eq!(rows, crate::common::rows(&want), "{script}:\n{log}");
        let daemons: Vec<&str> = log.lines().filter(|l| l.starts_with("D ")).collect();
        assert_eq!(
            daemons,
            [format!(
                "D {host} 1 PIPE_DIRECTORY=/tmp/nvidia-mps CUDA_VISIBLE_DEVICES=0"
            )],
            "{script}: the wrapper's one daemon, with rank 0's GPU\n{log}"
        );
    }
}

/// The fixed directories of the wrapper's daemon (in the Slurm root's
/// /tmp where the cluster runs one), removed before a job (each must be
/// alice's: the wrapper needs it) and after it.
fn remove_the_wrappers_directories() {
    let base = slurm_root().unwrap_or_default();
    for dir in ["/tmp/nvidia-mps", "/tmp/nvidia-log"] {
        let dir = format!("{base}{dir}");
        if let Ok(meta) = std::fs::metadata(&dir) {
            use std::os::unix::fs::MetadataExt;
            assert_eq!(
                meta.uid(),
                USERS[0].1,
                "{dir} is not alice's: the wrapper needs it"
            );
            std::fs::remove_dir_all(dir).unwrap();
        }
    }
}

/// The scripts the patched branch writes without the `gpu_wrapper` key
/// (as contrib/desispec's 0002 ships batch_config.yaml:
/// `desi_mps_wrapper`) are the unpatched branch's, byte for byte once
/// their folders are named alike; on nodes without the plugin they run as
/// today: `desi_mps_wrapper` in every GPU srun, every rank sees the step's
/// 4 GPUs and desispec's round-robin selects rank % 4 (the flag unset, so
/// the patched gpu.py changes nothing), the wrapper's one daemon in its
/// fixed /tmp/nvidia-mps, started with rank 0's environment.
#[test]
fn the_scripts_without_the_key_are_todays_and_run_as_today_without_the_plugin() {
    let _c = setup("required", &[]);
    cluster(&["plugin", "off"]);
    crate::mps::clear_what_others_left();
    remove_the_wrappers_directories();
    let scripts = Scripts::write("patched");
    let today = Scripts::write("unpatched");
    for (script, todays) in [
        (&scripts.tilenight, &today.tilenight),
        (&scripts.proc, &today.proc),
    ] {
        let text = std::fs::read_to_string(script).unwrap();
        let todays = std::fs::read_to_string(todays).unwrap().replace(
            &*today.dir.to_string_lossy(),
            &scripts.dir.to_string_lossy(),
        );
        assert_eq!(text, todays, "{script}: not today's script");
        assert!(
            text.contains(" --cpu-bind=cores desi_mps_wrapper desi_proc"),
            "{text}"
        );
    }
    for script in [&scripts.tilenight, &scripts.proc] {
        let log = scripts.run(script);
        remove_the_wrappers_directories();
        let rows = probe_rows(&log);
        let host = rows.split(' ').nth(1).unwrap_or("?").to_string();
        let want: Vec<String> = (0..64)
            .map(|rank| {
                let gpu = rank % 4;
                format!(
                    "{rank} {host} {rank} 0,1,2,3 {gpu} {gpu} unset {gpu} reached /tmp/nvidia-mps"
                )
            })
            .collect();
        let want: Vec<&str> = want.iter().map(String::as_str).collect();
        assert_eq!(rows, crate::common::rows(&want), "{script}:\n{log}");
        let daemons: Vec<&str> = log.lines().filter(|l| l.starts_with("D ")).collect();
        assert_eq!(
            daemons,
            [format!(
                "D {host} 1 PIPE_DIRECTORY=/tmp/nvidia-mps CUDA_VISIBLE_DEVICES=0,1,2,3"
            )],
            "{script}: the wrapper's one daemon, with the step's GPUs\n{log}"
        );
    }
}

// ------------------------------- desi_proc's own GPU extraction, as written

/// Each rank's row from tests/desi/extraction/desi_proc_tilenight, where
/// each of the 64 ranks is bound to GPU rank % 4 and flagged (desi-gpu-map,
/// by exec or the plugin, round-robin): proc.py counts the node's 4 GPUs
/// (`$DESI_GPU_MAP_NODE_GPUS`, contrib/desispec's 0001), so its extraction
/// group is ranks 0 to 21 (2 + 5 * 4), as under desi_mps_wrapper; ranks 0
/// and 1 read and write, ranks 2 to 21 are gpu_specter's 20 workers, 5 on
/// each GPU; and every rank uses its own GPU only, from
/// redistribute_gpu_ranks to gpu_specter's decompose_comm.
fn extraction_mapped(host: &str) -> Vec<String> {
    extraction_bound(host, |gpu| format!("GPU-fake-{host}-{gpu}"))
}

/// [`extraction_mapped`]'s rows where the site's plugin binds the ranks
/// with no MPS (the scripts without the key: desi_mps_wrapper, the site's
/// `default=roundrobin`): each GPU named by its index, not its UUID.
fn extraction_by_index(host: &str) -> Vec<String> {
    extraction_bound(host, |gpu| gpu.to_string())
}

/// The bound rows, each GPU (`rank % 4`) named by `name`.
fn extraction_bound(host: &str, name: impl Fn(usize) -> String) -> Vec<String> {
    (0..64)
        .map(|rank| {
            let gpu = name(rank % 4);
            let work = match rank {
                0 | 1 => "io".to_string(),
                2..=21 => (rank - 2).to_string(),
                _ => "out".to_string(),
            };
            format!("{rank} {host} {rank} {gpu} 1 4 22 {work} {gpu}")
        })
        .collect()
}

/// The same rows as DESI runs today, under desi_mps_wrapper with no
/// binding: every rank sees the step's 4 GPUs, the group is the same 22
/// ranks; redistribute_gpu_ranks puts rank r on GPU r % 4 and
/// decompose_comm then moves gpu_specter's worker w to GPU w / 5 (5 a GPU).
fn extraction_today(host: &str) -> Vec<String> {
    (0..64)
        .map(|rank: usize| {
            let first = rank % 4;
            let (work, used) = match rank {
                2..=21 => {
                    let w = rank - 2;
                    let used = if w / 5 == first {
                        first.to_string()
                    } else {
                        format!("{first},{}", w / 5)
                    };
                    (w.to_string(), used)
                }
                0 | 1 => ("io".to_string(), first.to_string()),
                _ => ("out".to_string(), first.to_string()),
            };
            format!("{rank} {host} {rank} 0,1,2,3 unset 4 22 {work} {used}")
        })
        .collect()
}

/// Runs the tilenight script of `scripts` and checks its rows against
/// `want` (given the node's name).
#[track_caller]
fn assert_extraction(scripts: &Scripts, want: fn(&str) -> Vec<String>, what: &str) {
    let log = scripts.run(&scripts.tilenight);
    let rows = probe_rows(&log);
    let host = rows.split(' ').nth(1).unwrap_or("?").to_string();
    let want = want(&host);
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    assert_eq!(rows, crate::common::rows(&want), "{what}:\n{log}");
}

/// desi_proc's own GPU extraction orchestration, in each of the 64 ranks of
/// the tilenight script desispec's branch writes with contrib/desispec's
/// patches (tests/desi/extraction/desi_proc_tilenight: proc.py's block as
/// written, gpu_specter's ParallelIOCoordinator and decompose_comm as
/// written, the extraction and cupy stubbed), with `gpu_wrapper:
/// desi-gpu-map` and without the key (desi_mps_wrapper), on nodes without
/// the plugin and on nodes whose site installed it with
/// `default=roundrobin`. Bound (the key, or the site's plugin): the group
/// keeps its 22 ranks, its 20 workers 5 on each GPU, every rank on its own
/// GPU throughout. Unbound: the same group, as DESI runs today.
#[test]
fn desi_procs_gpu_extraction_keeps_22_ranks_on_every_gpu_of_the_node() {
    let mapped = Scripts::write_for("desi-gpu-map", true);
    let today = Scripts::write_for("patched", true);
    {
        let _c = setup("required", &[]);
        cluster(&["plugin", "off"]);
        crate::mps::clear_what_others_left();
        remove_the_wrappers_directories();
        assert_extraction(&mapped, extraction_mapped, "desi-gpu-map, no plugin");
        assert_nothing_of_alices_left("desi-gpu-map, no plugin");
        assert_extraction(&today, extraction_today, "no key, no plugin");
        remove_the_wrappers_directories();
    }
    let control = format!(
        "mps_control={}/mps/bin/nvidia-cuda-mps-control",
        state_dir()
    );
    let _c = setup("required", &[&control, "default=roundrobin"]);
    crate::mps::clear_what_others_left();
    assert_extraction(&mapped, extraction_mapped, "desi-gpu-map, site plugin");
    assert_nothing_of_alices_left("desi-gpu-map, site plugin");
    assert_extraction(&today, extraction_by_index, "no key, site plugin");
    remove_the_wrappers_directories();
}
