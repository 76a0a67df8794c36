//! `closest` on the local test cluster with real CPU binding: n1 with 4
//! fake GPUs and n2 with 2 that Slurm names by count only (no_gpu_env),
//! brought up by `tests/run-cluster-tests.sh` with `DGM_TASK_AFFINITY=1`
//! (TaskPlugin=task/affinity, the host's real CPU count), and a fake kernel
//! tree given to the plugin through the plugstack-only `kernel_root`.
//!
//! The fake topology follows the CPUs Slurm binds on this host ([`cpus`]):
//! `A` and `B`, those of tasks 0 and 1 of `srun -n2 --cpu-bind=cores` (CPU
//! 0 and CPU 1 on a 2-core machine). GPUs 0 and 1 sit next to `B`, GPUs 2
//! and 3 next to `A`, so `closest` is not the identity, and the expected
//! values, written out per task, hold on any host. Fails, never skips, when
//! the cluster is not up.
//!
//! The `task_none_*` tests need a cluster that binds no CPUs (task/none):
//! `tests/run-cluster-tests.sh` runs them on the main one (`up 4 4 2
//! 2:noenv`) and skips them here.

use crate::common::*;
use desi_gpu_map_core::cpuset::CpuSet;
use std::path::PathBuf;
use std::sync::{MutexGuard, OnceLock};

/// Where Slurm binds tasks on this host.
struct Cpus {
    /// Task 0's CPUs under `--cpu-bind=cores`.
    a: CpuSet,
    /// Task 1's.
    b: CpuSet,
    /// An unbound task's of two (`--cpu-bind=none`).
    all: CpuSet,
}

/// Measured once, by the first test (which holds the cluster).
fn cpus() -> &'static Cpus {
    static CPUS: OnceLock<Cpus> = OnceLock::new();
    CPUS.get_or_init(|| {
        let bound = masks("-w n1 -n2 --cpu-bind=cores");
        let all = masks("-w n1 -n2 --cpu-bind=none").remove(0);
        let (a, b) = (bound[0].clone(), bound[1].clone());
        assert!(
            a.overlap(&b) == 0 && a.len() == b.len(),
            "closest's tests need --cpu-bind=cores to give two tasks disjoint CPU sets of one size; got {a} and {b}"
        );
        Cpus { a, b, all }
    })
}

/// The CPUs of each task of `srun WORDS` ([`probe::CPUS`]), in rank order.
fn masks(words: &str) -> Vec<CpuSet> {
    let ran = srun(words).probe(probe::CPUS).ok();
    ran.rows()
        .lines()
        .map(|row| {
            let list = row.rsplit(' ').next().unwrap();
            CpuSet::parse(list).unwrap_or_else(|e| panic!("{row}: {e}\n{ran}"))
        })
        .collect()
}

/// The first CPU of `set`, for map_cpu.
fn first(set: &CpuSet) -> usize {
    set.cpus().next().unwrap()
}

/// The set of CPU `n` alone.
fn cpu(n: usize) -> CpuSet {
    CpuSet::of(&[n]).unwrap()
}

/// The fake kernel tree of `vendor`'s GPUs (`nvidia`, `amd`, `intel`)
/// under the cluster's state dir: where `kernel_root=` points.
fn tree(vendor: &str) -> PathBuf {
    PathBuf::from(state_dir()).join(format!("kernel-{vendor}"))
}

/// Writes [`tree`]: the same four PCI devices for every vendor, with
/// NVIDIA's driver information files, or the others' render nodes
/// (`sys/class/drm/renderD<128+i>`). Readable by slurmstepd, named only
/// in plugstack.conf.
fn write_tree(vendor: &str) {
    let Cpus { a, b, .. } = cpus();
    write_tree_near(vendor, a, b);
}

/// [`write_tree`] with GPUs 0 and 1 next to `b`, 2 and 3 next to `a`.
fn write_tree_near(vendor: &str, a: &CpuSet, b: &CpuSet) {
    let root = tree(vendor);
    let pci_id = if vendor == "amd" { "0x1002" } else { "0x8086" };
    let put = |path: PathBuf, text: String| {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    for gpu in 0..4 {
        let bus = format!("0000:0{}:00.0", gpu + 1);
        let (numa, near) = if gpu < 2 { (1, b) } else { (0, a) };
        let pci = root.join(format!("sys/bus/pci/devices/{bus}"));
        put(pci.join("numa_node"), format!("{numa}\n"));
        put(pci.join("local_cpulist"), format!("{near}\n"));
        if vendor == "nvidia" {
            put(
                root.join(format!("proc/driver/nvidia/gpus/{bus}/information")),
                format!("Model: Fake\nDevice Minor: {gpu}\nBus Location: {bus}\n"),
            );
        } else {
            put(pci.join("vendor"), format!("{pci_id}\n"));
            put(pci.join("uevent"), format!("PCI_SLOT_NAME={bus}\n"));
            let render = root.join(format!("sys/class/drm/renderD{}", 128 + gpu));
            std::fs::create_dir_all(&render).unwrap();
            let link = render.join("device");
            if !link.exists() {
                let target = format!("../../../bus/pci/devices/{bus}");
                std::os::unix::fs::symlink(target, link).unwrap();
            }
        }
    }
}

/// Loads the plugin with `vendor=VENDOR` (unless nvidia) and the fake tree
/// of `tree_of`'s GPUs, and writes that tree.
fn with_tree(vendor: &str, tree_of: &str) -> MutexGuard<'static, ()> {
    let root = format!("kernel_root={}", tree(tree_of).display());
    let vendor_arg = format!("vendor={vendor}");
    let mut args = vec![root.as_str()];
    if vendor != "nvidia" {
        args.push(&vendor_arg);
    }
    let guard = setup("required", &args);
    write_tree(tree_of);
    guard
}

fn with_root() -> MutexGuard<'static, ()> {
    with_tree("nvidia", "nvidia")
}

/// `closest` through `desi-gpu-map exec`, with no plugin: bound tasks take
/// the GPUs next to their CPUs, as the plugin's tasks do above.
#[test]
fn exec_gives_bound_tasks_the_gpus_next_to_their_cpus() {
    let _c = with_root();
    cluster(&["plugin", "off"]);
    let Cpus { a, b, .. } = cpus();
    let root = tree("nvidia").display().to_string();
    let exec = format!(
        "{} exec --verbose --method closest --kernel-root {root} --",
        bin()
    );
    let probe = format!("{}/cpu-probe.sh", state_dir());
    std::fs::write(&probe, probe::CPUS).unwrap();
    // Started by srun directly, and under a shell that stays (slurmstepd is
    // then the shell's parent, not exec's).
    let direct = format!("{exec} bash {probe}");
    let under_shell = format!("true; {exec} bash {probe}; true");
    for line in [direct, under_shell] {
        let ran = srun("-w n1 -n2 --gpus-per-node=4 --cpu-bind=cores")
            .probe(&line)
            .ok();
        tasks_got(&ran, &[("2,3", a), ("0,1", b)]);
        ran.says(&format!("cpus={a} cpus_from=slurm gpu_cpus={a} near=yes"));
    }
}

/// The lines of `ran`'s stderr that report a `closest` fallback.
fn closest_lines(ran: &Ran) -> Vec<String> {
    ran.stderr()
        .lines()
        .filter(|l| l.contains("closest:"))
        .map(String::from)
        .collect()
}

/// Tasks 0, 1, ... (ranks and local ids alike) of `ran` printed these
/// rows ([`probe::CPUS`]): each one's GPU and CPUs.
#[track_caller]
fn tasks_got(ran: &Ran, tasks: &[(&str, &CpuSet)]) {
    let want: String = tasks
        .iter()
        .enumerate()
        .map(|(l, (gpu, cpus))| format!("{l} {l} {gpu} {cpus}\n"))
        .collect();
    assert_eq!(ran.rows(), want, "{ran}");
}

/// The columns `keep` of each probe row, in rank order: the part of a
/// shared probe's row that a test compares.
fn columns(ran: &Ran, keep: &[usize]) -> String {
    ran.rows()
        .lines()
        .map(|row| {
            let fields: Vec<&str> = row.split(' ').collect();
            let kept: Vec<&str> = keep.iter().map(|&k| fields[k]).collect();
            kept.join(" ") + "\n"
        })
        .collect()
}

#[test]
fn two_bound_tasks_take_the_gpus_next_to_their_cpus() {
    let _c = with_root();
    let Cpus { a, b, .. } = cpus();
    let ran = srun("-w n1 -n2 --gpus-per-node=4 --cpu-bind=cores --desi-gpu-map=verbose,closest")
        .probe(probe::CPUS)
        .ok();
    tasks_got(&ran, &[("2,3", a), ("0,1", b)]);
    ran.says(&format!("cpus={a} cpus_from=slurm gpu_cpus={a} near=yes"));
    // map_cpu reverses the CPUs, and with them the GPUs.
    let (a0, b0) = (first(a), first(b));
    let ran = srun("-w n1 -n2 --gpus-per-node=4")
        .arg(format!("--cpu-bind=map_cpu:{b0},{a0}"))
        .method("closest")
        .probe(probe::CPUS)
        .ok();
    tasks_got(&ran, &[("0,1", &cpu(b0)), ("2,3", &cpu(a0))]);
}

#[test]
fn overcommitted_tasks_split_their_domain() {
    let _c = with_root();
    let Cpus { a, b, .. } = cpus();
    // Four tasks on one CPU: Slurm binds all to A, near GPUs 2 and 3.
    let ran =
        srun("-w n1 -n4 --overcommit --gpus-per-node=4 --cpu-bind=cores --desi-gpu-map=closest")
            .probe(probe::CPUS)
            .ok();
    tasks_got(&ran, &[("2", a), ("2", a), ("3", a), ("3", a)]);
    // Eight tasks in an allocation of both CPUs, four bound to each
    // (map_cpu): two domains of two GPUs, each split in blocks.
    let eight = |bind: &str| {
        salloc("-n2 -w n1 --gpus-per-node=4 srun -n8 --overcommit")
            .arg(bind)
            .method("closest")
            .probe(probe::CPUS)
            .ok()
    };
    let (a0, b0) = (first(a), first(b));
    let (one_a, one_b) = (cpu(a0), cpu(b0));
    let ran = eight(&format!(
        "--cpu-bind=map_cpu:{a0},{a0},{a0},{a0},{b0},{b0},{b0},{b0}"
    ));
    tasks_got(
        &ran,
        &[
            ("2", &one_a),
            ("2", &one_a),
            ("3", &one_a),
            ("3", &one_a),
            ("0", &one_b),
            ("0", &one_b),
            ("1", &one_b),
            ("1", &one_b),
        ],
    );
    // cores with more tasks than CPUs: Slurm binds each to both CPUs, so
    // every GPU is as near as any other: contiguous.
    let both = a.union(b);
    let ran = eight("--cpu-bind=cores");
    tasks_got(
        &ran,
        &[
            ("0", &both),
            ("0", &both),
            ("1", &both),
            ("1", &both),
            ("2", &both),
            ("2", &both),
            ("3", &both),
            ("3", &both),
        ],
    );
}

#[test]
fn unbound_tasks_and_partial_steps_are_contiguous_where_nothing_is_nearer() {
    let _c = with_root();
    let Cpus { a, b, all } = cpus();
    let ran = srun("-w n1 -n2 --gpus-per-node=4 --cpu-bind=none --desi-gpu-map=verbose,closest")
        .probe(probe::CPUS)
        .ok();
    tasks_got(&ran, &[("0,1", all), ("2,3", all)]);
    let ran = ran.says(&format!("cpus={all} cpus_from=own"));
    assert_eq!(
        closest_lines(&ran),
        [format!(
            "desi-gpu-map: node n1: closest: the tasks' CPUs ({all} for local task 0) are as near \
             to every GPU as to any (bind tasks to CPUs, e.g. srun --cpu-bind=cores); using contiguous"
        )],
        "{ran}"
    );
    // The step holds GPUs 0 and 1, both next to B: the task on A has no
    // near GPU, so both tasks split the pair, rightly: no line.
    let ran = srun("-w n1 -n2 --gres=gpu:2 --cpu-bind=cores --desi-gpu-map=closest")
        .probe(probe::CPUS)
        .ok();
    tasks_got(&ran, &[("0", a), ("1", b)]);
    assert!(closest_lines(&ran).is_empty(), "{ran}");
}

#[test]
fn tasks_bound_without_a_cpu_list_use_their_own_masks() {
    let _c = with_root();
    let Cpus { a, b, .. } = cpus();
    let ran = srun("-w n1 -n2 --gpus-per-node=4 --cpu-bind=rank --desi-gpu-map=verbose,closest")
        .probe(probe::CPUS)
        .ok();
    if !series_at_least("24.11") {
        // rank binds task l to CPU l but writes no per-task list
        // (SLURM_CPU_BIND_TYPE=rank): each task sees only its own mask.
        // Two tasks on four GPUs cannot know what the other would take, so
        // each holds contiguous's half, its nearest first: here neither
        // half is near (CPUs 0 and 1 are A and B on a 2-core machine).
        let (zero, one) = (cpu(0), cpu(1));
        assert_eq!((a, b), (&zero, &one), "this case needs A = 0 and B = 1");
        tasks_got(&ran, &[("0,1", a), ("2,3", b)]);
        ran.says(&format!("cpus={b} cpus_from=own gpu_cpus={a} near=no"));
    } else {
        // 24.11 and later ignore rank and bind cores, with the list.
        let ran = ran.says("Ignoring --cpu-bind=rank");
        tasks_got(&ran, &[("2,3", a), ("0,1", b)]);
        ran.says(&format!("cpus={b} cpus_from=slurm gpu_cpus={b} near=yes"));
    }
}

/// A task bound to every CPU cannot tell Slurm's list from a user's, nor
/// the others whether it was bound: so no task takes the list, and the
/// node's tasks agree, every GPU held (issue 55, item 3).
#[test]
fn a_task_bound_to_every_cpu_keeps_the_node_on_its_own_masks() {
    let _c = with_root();
    let Cpus { a, b, all } = cpus();
    // GPUs 0 and 1 next to A, 2 and 3 next to B.
    write_tree_near("nvidia", b, a);
    let masks = [b, all, a].map(CpuSet::to_mask).join(",");
    let ran = salloc("-w n1 --exclusive --gpus-per-node=4 srun -n3 --overcommit")
        .arg(format!("--cpu-bind=mask_cpu:{masks}"))
        .method("verbose,closest")
        .probe(probe::CPUS)
        .ok();
    // Each holds contiguous's block, its nearest first.
    tasks_got(&ran, &[("0,1", b), ("2", all), ("3", a)]);
    let ran = ran.never_says("cpus_from=slurm");
    assert_eq!(ran.stderr().matches("cpus_from=own").count(), 3, "{ran}");
}

#[test]
fn unknown_gpu_locations_fall_back_in_one_line() {
    // No kernel_root (this host has no NVIDIA driver files), and the fake
    // NVML reports no CPU affinity (no affinity= line).
    let _c = setup("required", &[]);
    let Cpus { a, b, .. } = cpus();
    let ran = srun("-w n1 -n2 --gpus-per-node=4 --cpu-bind=cores --desi-gpu-map=closest")
        .probe(probe::CPUS)
        .ok();
    tasks_got(&ran, &[("0,1", a), ("2,3", b)]);
    assert_eq!(
        closest_lines(&ran),
        ["desi-gpu-map: node n1: closest: no CPU affinity is known for GPU \"0\"; using contiguous"],
        "{ran}"
    );
}

/// The fake NVML's `affinity=` masks: the first `near_b` GPUs next to B,
/// the rest of `count` next to A.
fn affinity(near_b: usize, count: usize) -> String {
    let Cpus { a, b, .. } = cpus();
    let masks: Vec<String> = (0..count)
        .map(|g| if g < near_b { b.to_mask() } else { a.to_mask() })
        .collect();
    masks.join(",")
}

#[test]
fn nvml_locates_the_gpus_where_the_kernel_files_fail() {
    // No kernel_root (this host has no NVIDIA driver files): NVML's CPU
    // affinity, from the fake library, places GPUs 0,1 at B, 2,3 at A.
    let _c = setup("required", &[]);
    let Cpus { a, b, .. } = cpus();
    cluster(&["nvml", "set", &format!("affinity={}", affinity(2, 4))]);
    let ran = srun("-w n1 -n2 --gpus-per-node=4 --cpu-bind=cores --desi-gpu-map=verbose,closest")
        .probe(probe::CPUS)
        .ok();
    tasks_got(&ran, &[("2,3", a), ("0,1", b)]);
    ran.says(&format!("gpu_cpus={a} near=yes"));
    // NVML fails the call: the step falls back, in one line.
    cluster(&["nvml", "set", "fail=affinity"]);
    let ran = srun("-w n1 -n2 --gpus-per-node=4 --cpu-bind=cores --desi-gpu-map=closest")
        .probe(probe::CPUS)
        .ok();
    tasks_got(&ran, &[("0,1", a), ("2,3", b)]);
    ran.says("nvmlDeviceGetCpuAffinity failed");
}

#[test]
fn gpus_only_nvml_lists_are_placed_in_the_same_load() {
    // n2 says Flags=no_gpu_env: Slurm sets only SLURM_GPUS_ON_NODE, NVML
    // lists the UUIDs and, for closest, places them in the same load.
    let _c = setup("required", &[]);
    let Cpus { a, b, .. } = cpus();
    cluster(&["nvml", "set", &format!("affinity.n2={}", affinity(1, 2))]);
    cluster(&["nvml", "clear-log"]);
    let on_n2 = || {
        srun("-n2 --gres=gpu:2 --cpu-bind=cores --desi-gpu-map=verbose,closest")
            .words(&["-w", "n2"])
            .probe(probe::CPUS)
            .ok()
    };
    let ran = on_n2();
    tasks_got(&ran, &[("GPU-fake-n2-1", a), ("GPU-fake-n2-0", b)]);
    ran.says(&format!(
        "source=nvml cpus={a} cpus_from=slurm gpu_cpus={a} near=yes"
    ));
    let inits = |log: String| log.lines().filter(|l| l.starts_with("init n2 ")).count();
    assert_eq!(inits(cluster(&["nvml", "log"])), 1, "one NVML load");
    // The affinity call fails: the UUIDs alone, in a second load, and the
    // step maps contiguous, said in one line.
    cluster(&["nvml", "add", "fail.n2=affinity"]);
    cluster(&["nvml", "clear-log"]);
    let ran = on_n2();
    tasks_got(&ran, &[("GPU-fake-n2-0", a), ("GPU-fake-n2-1", b)]);
    let lines = closest_lines(&ran);
    assert_eq!(lines.len(), 1, "{ran}");
    assert!(
        lines[0].contains("nvmlDeviceGetCpuAffinity failed"),
        "{ran}"
    );
    assert_eq!(inits(cluster(&["nvml", "log"])), 2);
}

/// Two tasks bound to cores under `vendor=VENDOR`, with the fake kernel
/// tree of `tree_of`'s GPUs, each printing `var` (the list that carries
/// its GPU) in [`probe::CPUS`]'s place for CUDA_VISIBLE_DEVICES.
fn two_bound_tasks(vendor: &str, tree_of: &str, var: &str, option: &str) -> Ran {
    let _c = with_tree(vendor, tree_of);
    srun("-w n1 -n2 --gpus-per-node=4 --cpu-bind=cores")
        .method(option)
        .probe(&probe::CPUS.replace("CUDA_VISIBLE_DEVICES", var))
        .ok()
}

#[test]
fn amd_gpus_are_located_through_their_render_nodes() {
    // ROCR_VISIBLE_DEVICES carries the GPU (CUDA_VISIBLE_DEVICES, which HIP
    // applies on top, is 0).
    let ran = two_bound_tasks("amd", "amd", "ROCR_VISIBLE_DEVICES", "verbose,closest");
    let Cpus { a, b, .. } = cpus();
    tasks_got(&ran, &[("2,3", a), ("0,1", b)]);
    ran.says(&format!("gpu_cpus={a} near=yes"));
}

#[test]
fn amd_gpus_without_render_nodes_fall_back_in_one_line() {
    // The NVIDIA driver's files are not read for AMD GPUs.
    let ran = two_bound_tasks("amd", "nvidia", "ROCR_VISIBLE_DEVICES", "closest");
    let Cpus { a, b, .. } = cpus();
    tasks_got(&ran, &[("0,1", a), ("2,3", b)]);
    let lines = closest_lines(&ran);
    assert_eq!(lines.len(), 1, "{ran}");
    assert!(lines[0].contains("/sys/class/drm"), "{ran}");
}

#[test]
fn intel_gpus_are_located_through_their_render_nodes() {
    let ran = two_bound_tasks("intel", "intel", "ZE_AFFINITY_MASK", "verbose,closest");
    let Cpus { a, b, .. } = cpus();
    tasks_got(&ran, &[("2,3", a), ("0,1", b)]);
    ran.says(&format!("gpu_cpus={b} near=yes"));
}

#[test]
fn a_step_that_falls_back_says_contiguous() {
    // No kernel_root, and the fake NVML reports no CPU affinity: the step
    // falls back, and the tasks are told the method that placed them.
    let _c = setup("required", &[]);
    let ran = srun("-w n1 -n2 --gpus-per-node=4 --desi-gpu-map=verbose,closest")
        .probe(probe::FULL)
        .ok();
    // FULL's rank, local id, CUDA_VISIBLE_DEVICES and method.
    assert_eq!(
        columns(&ran, &[0, 2, 3, 5]),
        "0 0 0,1 contiguous\n1 1 2,3 contiguous\n",
        "{ran}"
    );
    assert_eq!(
        closest_lines(&ran),
        ["desi-gpu-map: node n1: closest: no CPU affinity is known for GPU \"0\"; using contiguous"],
        "{ran}"
    );
    let err = ran.stderr();
    let reports: Vec<&str> = err.lines().filter(|l| l.contains(" rank=")).collect();
    assert_eq!(reports.len(), 2, "{ran}");
    assert!(
        reports.iter().all(|l| l.contains(" method=contiguous ")),
        "{ran}"
    );
}

/// Tests named `task_none_*` need Slurm's task/none, where slurmstepd binds
/// no CPUs and writes no CPU list: tests/run-cluster-tests.sh runs them on
/// the main cluster (`up 4 4 2 2:noenv`) and skips them on the task/affinity
/// one. They fail anywhere else.
fn assert_task_none() {
    // The harness's slurm.conf: scontrol prints task/none as "(null)" on
    // 24.11 and later.
    let conf = std::fs::read_to_string(format!("{}/slurm.conf", state_dir())).unwrap();
    let plugin = conf
        .lines()
        .find(|l| l.starts_with("TaskPlugin="))
        .unwrap_or("TaskPlugin unset");
    assert_eq!(
        plugin, "TaskPlugin=task/none",
        "this test needs the task/none cluster (tests/cluster/cluster.sh up 4 4 2 2:noenv)"
    );
}

#[test]
fn task_none_an_exported_cpu_list_is_not_slurms() {
    // GPUs 0 and 1 next to CPU 1, 2 and 3 next to CPU 0.
    let root = format!("kernel_root={}", tree("nvidia").display());
    let _c = setup("required", &[root.as_str()]);
    assert_task_none();
    let (zero, one) = (cpu(0), cpu(1));
    write_tree_near("nvidia", &zero, &one);
    // Every task is unbound: its mask is slurmstepd's, the whole node.
    let all = masks("-w n1 -n1").remove(0);
    assert!(
        all.overlap(&zero.union(&one)) == 2,
        "needs CPUs 0 and 1; got {all}"
    );
    // A list in the user's environment claims tasks 0-2 sit on CPU 0 and
    // the others on every CPU, which each unbound task's own mask equals.
    let mut list = vec![zero.to_mask(); 3];
    list.extend(vec![all.to_mask(); 5]);
    let ran = srun("-w n1 -n8 --gpus-per-node=4 --desi-gpu-map=verbose,closest")
        .env("SLURM_CPU_BIND_TYPE", "mask_cpu:")
        .env("SLURM_CPU_BIND_LIST", &list.join(","))
        .probe(probe::CPUS)
        .ok();
    // CPUS's rank, local id and CUDA_VISIBLE_DEVICES.
    let contiguous = "0 0 0\n1 1 0\n2 2 1\n3 3 1\n4 4 2\n5 5 2\n6 6 3\n7 7 3\n";
    assert_eq!(columns(&ran, &[0, 1, 2]), contiguous, "{ran}");
    let ran = ran.never_says("cpus_from=slurm");
    assert_eq!(ran.stderr().matches("cpus_from=own").count(), 8, "{ran}");
    // Without the export: the same.
    let ran = srun("-w n1 -n8 --gpus-per-node=4 --desi-gpu-map=closest")
        .probe(probe::CPUS)
        .ok();
    assert_eq!(columns(&ran, &[0, 1, 2]), contiguous, "{ran}");
}

/// exec's MPS keeper, started by a task bound to one core, runs on the
/// step's CPUs (its slurmstepd's), as the plugin's daemon does: the MPS
/// daemon and its servers inherit them.
#[test]
fn execs_mps_keeper_runs_on_the_steps_cpus_not_on_its_starters_core() {
    let _c = with_root();
    cluster(&["plugin", "off"]);
    let Cpus { a, b, .. } = cpus();
    let control = format!("{}/mps/bin/nvidia-cuda-mps-control", state_dir());
    let exec = format!(
        "{} exec --mps-control {control} --nvml {} --method contiguous,mps --",
        bin(),
        fake_nvml()
    );
    // Each task: its own CPUs, its slurmstepd's, and the step's keeper's.
    let probe = r#"cpus() { sed -n 's/^Cpus_allowed_list:\t*//p' /proc/$1/status; }
for p in /proc/[0-9]*; do
  case $(tr '\0' ' ' <$p/cmdline 2>/dev/null) in
    *mps-keeper*".$SLURM_JOB_ID.$SLURM_STEP_ID.0.k "*) k=${p#/proc/};;
  esac
done
echo "T $SLURM_PROCID $(cpus self) $(cpus $PPID) $(cpus ${k:-none})""#;
    let ran = srun("-w n1 -n2 --gpus-per-node=2 --cpu-bind=cores")
        .user(USERS[0].0)
        .args(&exec)
        .probe(probe)
        .ok();
    let rows: Vec<Vec<String>> = ran
        .rows()
        .lines()
        .map(|r| r.split(' ').map(String::from).collect())
        .collect();
    assert_eq!(rows.len(), 2, "{ran}");
    for (row, own) in rows.iter().zip([a, b]) {
        assert_eq!(row[1], own.to_string(), "the task is bound: {ran}");
        assert_eq!(
            row[3], row[2],
            "the keeper runs on slurmstepd's CPUs: {ran}"
        );
        assert_ne!(row[3], row[1], "not on the task's one core: {ran}");
    }
}

/// On a node whose `/proc` hides other users' processes (hidepid), exec,
/// run as a user, cannot read slurmstepd's CPUs from `/proc`; the kernel
/// still tells them (sched_getaffinity). Bound tasks take the GPUs next
/// to their CPUs, and the keeper runs on the step's CPUs, as without it.
#[test]
fn under_hidepid_exec_reads_slurmstepds_cpus_from_the_kernel() {
    let _c = with_root();
    cluster(&["plugin", "off"]);
    let _hidden = crate::hidepid::Hidepid::on(&["n1"]);
    let Cpus { a, b, all } = cpus();
    let root = tree("nvidia").display().to_string();
    let alice = USERS[0].0;
    let ran = srun("-w n1 -n2 --gpus-per-node=4 --cpu-bind=cores")
        .user(alice)
        .arg(bin())
        .args(&format!(
            "exec --verbose --method closest --kernel-root {root} --"
        ))
        .probe(probe::CPUS)
        .ok();
    tasks_got(&ran, &[("2,3", a), ("0,1", b)]);
    ran.says(&format!("cpus={a} cpus_from=slurm gpu_cpus={a} near=yes"));
    let control = format!("{}/mps/bin/nvidia-cuda-mps-control", state_dir());
    let exec = format!(
        "{} exec --mps-control {control} --nvml {} --method contiguous,mps --",
        bin(),
        fake_nvml()
    );
    let probe = r#"for p in /proc/[0-9]*; do
  case $(tr '\0' ' ' <$p/cmdline 2>/dev/null) in
    *mps-keeper*".$SLURM_JOB_ID.$SLURM_STEP_ID.0.k "*) k=${p#/proc/};;
  esac
done
echo "T $SLURM_PROCID $(sed -n 's/^Cpus_allowed_list:\t*//p' /proc/${k:-none}/status)""#;
    let ran = srun("-w n1 -n2 --gpus-per-node=2 --cpu-bind=cores")
        .user(alice)
        .args(&exec)
        .probe(probe)
        .ok();
    assert_eq!(
        ran.rows(),
        format!("0 {all}\n1 {all}\n"),
        "the keeper runs on the step's CPUs: {ran}"
    );
}
