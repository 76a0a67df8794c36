//! `closest` on the local test cluster with real CPU binding: n1 with 4
//! fake GPUs and n2 with 2 that Slurm names by count only (no_gpu_env),
//! brought up by `tests/run-cluster-tests.sh` with `DGM_TASK_AFFINITY=1`
//! (TaskPlugin=task/affinity, the host's real CPU count), and
//! a fake kernel tree given to the plugin through the plugstack-only
//! `kernel_root`: GPUs 0 and 1 sit next to CPU 1, GPUs 2 and 3 next to
//! CPU 0, so `closest` is not the identity. Expected values are written out
//! per task. Fails, never skips, when the cluster is not up.
#![cfg(feature = "cluster-tests")]

mod common;
use common::*;
use std::path::PathBuf;

/// The fake kernel files, written once under the cluster's state dir
/// (readable by slurmstepd, set only in plugstack.conf), for the same four
/// PCI devices of `vendor` (`nvidia`, `amd`, `intel`): NVIDIA's driver
/// information files, or the others' render nodes
/// (`sys/class/drm/renderD<128+i>`).
fn kernel_root(vendor: &str) -> PathBuf {
    let root = PathBuf::from(state_dir()).join(format!("kernel-{vendor}"));
    let nvidia = vendor == "nvidia";
    let pci_id = if vendor == "amd" { "0x1002" } else { "0x8086" };
    let put = |path: PathBuf, text: String| {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    for gpu in 0..4 {
        let bus = format!("0000:0{}:00.0", gpu + 1);
        let cpu = if gpu < 2 { "1" } else { "0" };
        let pci = root.join(format!("sys/bus/pci/devices/{bus}"));
        put(pci.join("numa_node"), format!("{cpu}\n"));
        put(pci.join("local_cpulist"), format!("{cpu}\n"));
        if nvidia {
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
    root
}

fn with_root() -> std::sync::MutexGuard<'static, ()> {
    let root = format!("kernel_root={}", kernel_root("nvidia").display());
    setup("required", &[&root])
}

/// Each task prints `T rank local CUDA_VISIBLE_DEVICES its-CPUs`.
const CPU_PROBE: &str = r#"echo "T $SLURM_PROCID $SLURM_LOCALID ${CUDA_VISIBLE_DEVICES-unset} $(sed -n 's/^Cpus_allowed_list:\t*//p' /proc/self/status)""#;

/// `srun ARGS` (one string, split at spaces) with the probe; the rows
/// sorted by rank, and stderr.
fn srun_cpus(args: &str) -> (String, String) {
    srun_probe(args, CPU_PROBE)
}

fn srun_probe(args: &str, probe: &str) -> (String, String) {
    srun_on("n1", args, probe)
}

fn srun_on(node: &str, args: &str, probe: &str) -> (String, String) {
    let mut all: Vec<&str> = args.split_whitespace().collect();
    all.extend(["-w", node, "bash", "-c", probe]);
    let out = run("srun", &all);
    assert!(out.status.success(), "srun {args:?}:\n{}", show(&out));
    (probe_rows(&text(&out.stdout)), text(&out.stderr))
}

/// The lines of `err` that report a `closest` fallback.
fn closest_lines(err: &str) -> Vec<&str> {
    err.lines().filter(|l| l.contains("closest:")).collect()
}

fn rows(lines: &[&str]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

#[test]
fn two_bound_tasks_take_the_gpus_next_to_their_cpus() {
    let _c = with_root();
    let (got, err) =
        srun_cpus("-n2 --gpus-per-node=4 --cpu-bind=cores --desi-gpu-map=verbose,closest");
    assert_eq!(got, rows(&["0 0 2 0", "1 1 0 1"]), "{err}");
    assert!(
        err.contains("cpus=0 cpus_from=slurm gpu_cpus=0 near=yes"),
        "{err}"
    );
    // map_cpu reverses the CPUs, and with them the GPUs.
    let (got, err) =
        srun_cpus("-n2 --gpus-per-node=4 --cpu-bind=map_cpu:1,0 --desi-gpu-map=closest");
    assert_eq!(got, rows(&["0 0 0 1", "1 1 2 0"]), "{err}");
}

#[test]
fn overcommitted_tasks_split_their_domain() {
    let _c = with_root();
    // Four tasks on one CPU: Slurm binds all to CPU 0, near GPUs 2 and 3.
    let (got, err) =
        srun_cpus("-n4 --overcommit --gpus-per-node=4 --cpu-bind=cores --desi-gpu-map=closest");
    assert_eq!(
        got,
        rows(&["0 0 2 0", "1 1 2 0", "2 2 3 0", "3 3 3 0"]),
        "{err}"
    );
    // Eight tasks in an allocation of both CPUs, four bound to each
    // (map_cpu): two domains of two GPUs, each split in blocks.
    let eight = |bind: &str| {
        let args = format!(
            "-n2 -w n1 --gpus-per-node=4 srun -n8 --overcommit {bind} --desi-gpu-map=closest bash -c"
        );
        let mut all: Vec<&str> = args.split_whitespace().collect();
        all.push(CPU_PROBE);
        let out = run("salloc", &all);
        assert!(out.status.success(), "{}", show(&out));
        probe_rows(&text(&out.stdout))
    };
    assert_eq!(
        eight("--cpu-bind=map_cpu:0,0,0,0,1,1,1,1"),
        rows(&[
            "0 0 2 0", "1 1 2 0", "2 2 3 0", "3 3 3 0", "4 4 0 1", "5 5 0 1", "6 6 1 1", "7 7 1 1"
        ])
    );
    // cores with more tasks than CPUs: Slurm binds each to both CPUs, so
    // every GPU is as near as any other: contiguous.
    assert_eq!(
        eight("--cpu-bind=cores"),
        rows(&[
            "0 0 0 0-1",
            "1 1 0 0-1",
            "2 2 1 0-1",
            "3 3 1 0-1",
            "4 4 2 0-1",
            "5 5 2 0-1",
            "6 6 3 0-1",
            "7 7 3 0-1"
        ])
    );
}

#[test]
fn unbound_tasks_and_partial_steps_are_contiguous_where_nothing_is_nearer() {
    let _c = with_root();
    let (got, err) =
        srun_cpus("-n2 --gpus-per-node=4 --cpu-bind=none --desi-gpu-map=verbose,closest");
    assert_eq!(got, rows(&["0 0 0 0-1", "1 1 1 0-1"]), "{err}");
    assert!(err.contains("cpus=0-1 cpus_from=own"), "{err}");
    assert_eq!(
        closest_lines(&err),
        ["desi-gpu-map: node n1: closest: the tasks' CPUs (0-1 for local task 0) are as near \
          to every GPU as to any (bind tasks to CPUs, e.g. srun --cpu-bind=cores); using contiguous"],
        "{err}"
    );
    // The step holds GPUs 0 and 1, both next to CPU 1: the task on CPU 0
    // has no near GPU, so both tasks split the pair, rightly: no line.
    let (got, err) = srun_cpus("-n2 --gres=gpu:2 --cpu-bind=cores --desi-gpu-map=closest");
    assert_eq!(got, rows(&["0 0 0 0", "1 1 1 1"]), "{err}");
    assert!(closest_lines(&err).is_empty(), "{err}");
}

#[test]
fn tasks_bound_without_a_cpu_list_use_their_own_masks() {
    let _c = with_root();
    let (got, err) =
        srun_cpus("-n2 --gpus-per-node=4 --cpu-bind=rank --desi-gpu-map=verbose,closest");
    if !series_at_least("24.11") {
        // rank binds task l to CPU l but writes no per-task list
        // (SLURM_CPU_BIND_TYPE=rank): each task sees only its own mask and
        // takes its candidates' GPU at local_id mod 2, so task 1 gets GPU 1.
        assert_eq!(got, rows(&["0 0 2 0", "1 1 1 1"]), "{err}");
        assert!(
            err.contains("cpus=1 cpus_from=own gpu_cpus=1 near=yes"),
            "{err}"
        );
    } else {
        // 24.11 and later ignore rank and bind cores, with the list.
        assert!(err.contains("Ignoring --cpu-bind=rank"), "{err}");
        assert_eq!(got, rows(&["0 0 2 0", "1 1 0 1"]), "{err}");
        assert!(
            err.contains("cpus=1 cpus_from=slurm gpu_cpus=1 near=yes"),
            "{err}"
        );
    }
}

#[test]
fn unknown_gpu_locations_fall_back_in_one_line() {
    // No kernel_root (this host has no NVIDIA driver files), and the fake
    // NVML reports no CPU affinity (no affinity= line).
    let _c = setup("required", &[]);
    let (got, err) = srun_cpus("-n2 --gpus-per-node=4 --cpu-bind=cores --desi-gpu-map=closest");
    assert_eq!(got, rows(&["0 0 0 0", "1 1 1 1"]), "{err}");
    let lines = closest_lines(&err);
    assert_eq!(lines.len(), 1, "{err}");
    assert_eq!(
        lines[0],
        "desi-gpu-map: node n1: closest: no CPU affinity is known for GPU \"0\"; using contiguous"
    );
}

#[test]
fn nvml_locates_the_gpus_where_the_kernel_files_fail() {
    // No kernel_root (this host has no NVIDIA driver files): NVML's CPU
    // affinity, from the fake library, places GPUs 0,1 at CPU 1, 2,3 at 0.
    let _c = setup("required", &[]);
    cluster(&["nvml", "set", "affinity=0x2,0x2,0x1,0x1"]);
    let (got, err) =
        srun_cpus("-n2 --gpus-per-node=4 --cpu-bind=cores --desi-gpu-map=verbose,closest");
    assert_eq!(got, rows(&["0 0 2 0", "1 1 0 1"]), "{err}");
    assert!(err.contains("gpu_cpus=0 near=yes"), "{err}");
    // NVML fails the call: the step falls back, in one line.
    cluster(&["nvml", "set", "fail=affinity"]);
    let (got, err) = srun_cpus("-n2 --gpus-per-node=4 --cpu-bind=cores --desi-gpu-map=closest");
    assert_eq!(got, rows(&["0 0 0 0", "1 1 1 1"]), "{err}");
    assert!(err.contains("nvmlDeviceGetCpuAffinity failed"), "{err}");
}

#[test]
fn gpus_only_nvml_lists_are_placed_in_the_same_load() {
    // n2 says Flags=no_gpu_env: Slurm sets only SLURM_GPUS_ON_NODE, NVML
    // lists the UUIDs and, for closest, places them in the same load.
    let _c = setup("required", &[]);
    cluster(&["nvml", "set", "affinity.n2=0x2,0x1"]);
    cluster(&["nvml", "clear-log"]);
    let args = "-n2 --gres=gpu:2 --cpu-bind=cores --desi-gpu-map=verbose,closest";
    let (got, err) = srun_on("n2", args, CPU_PROBE);
    assert_eq!(
        got,
        rows(&["0 0 GPU-fake-n2-1 0", "1 1 GPU-fake-n2-0 1"]),
        "{err}"
    );
    assert!(
        err.contains("source=nvml cpus=0 cpus_from=slurm gpu_cpus=0 near=yes"),
        "{err}"
    );
    let inits = |log: String| log.lines().filter(|l| l.starts_with("init n2 ")).count();
    assert_eq!(inits(cluster(&["nvml", "log"])), 1, "one NVML load");
    // The affinity call fails: the UUIDs alone, in a second load, and the
    // step maps contiguous, said in one line.
    cluster(&["nvml", "add", "fail.n2=affinity"]);
    cluster(&["nvml", "clear-log"]);
    let (got, err) = srun_on("n2", args, CPU_PROBE);
    assert_eq!(
        got,
        rows(&["0 0 GPU-fake-n2-0 0", "1 1 GPU-fake-n2-1 1"]),
        "{err}"
    );
    let lines = closest_lines(&err);
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains("nvmlDeviceGetCpuAffinity failed"),
        "{err}"
    );
    assert_eq!(inits(cluster(&["nvml", "log"])), 2);
}

/// Two tasks bound to cores under `vendor=VENDOR`, with the fake kernel
/// tree of `tree`'s GPUs, each printing `var` (the list that carries its
/// GPU); the rows and stderr.
fn two_bound_tasks(vendor: &str, tree: &str, var: &str, option: &str) -> (String, String) {
    let root = format!("kernel_root={}", kernel_root(tree).display());
    let _c = setup("required", &[&format!("vendor={vendor}"), &root]);
    let probe = CPU_PROBE.replace("CUDA_VISIBLE_DEVICES", var);
    let args = format!("-n2 --gpus-per-node=4 --cpu-bind=cores --desi-gpu-map={option}");
    srun_probe(&args, &probe)
}

#[test]
fn amd_gpus_are_located_through_their_render_nodes() {
    // ROCR_VISIBLE_DEVICES carries the GPU (CUDA_VISIBLE_DEVICES, which HIP
    // applies on top, is 0).
    let (got, err) = two_bound_tasks("amd", "amd", "ROCR_VISIBLE_DEVICES", "verbose,closest");
    assert_eq!(got, rows(&["0 0 2 0", "1 1 0 1"]), "{err}");
    assert!(err.contains("gpu_cpus=0 near=yes"), "{err}");
}

#[test]
fn amd_gpus_without_render_nodes_fall_back_in_one_line() {
    // The NVIDIA driver's files are not read for AMD GPUs.
    let (got, err) = two_bound_tasks("amd", "nvidia", "ROCR_VISIBLE_DEVICES", "closest");
    assert_eq!(got, rows(&["0 0 0 0", "1 1 1 1"]), "{err}");
    let lines = closest_lines(&err);
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("/sys/class/drm"), "{err}");
}

#[test]
fn intel_gpus_are_located_through_their_render_nodes() {
    let (got, err) = two_bound_tasks("intel", "intel", "ZE_AFFINITY_MASK", "verbose,closest");
    assert_eq!(got, rows(&["0 0 2 0", "1 1 0 1"]), "{err}");
    assert!(err.contains("gpu_cpus=1 near=yes"), "{err}");
}
