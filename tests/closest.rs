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
#![cfg(feature = "cluster-tests")]

mod common;
use common::*;
use desi_gpu_map::cpuset::CpuSet;
use std::path::PathBuf;
use std::sync::OnceLock;

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
        let masks = |args: &str| -> Vec<CpuSet> {
            let (got, err) = srun_cpus(args);
            got.lines()
                .map(|row| {
                    let list = row.rsplit(' ').next().unwrap();
                    CpuSet::parse(list).unwrap_or_else(|e| panic!("{row}: {e}\n{err}"))
                })
                .collect()
        };
        let bound = masks("-n2 --cpu-bind=cores");
        let all = masks("-n2 --cpu-bind=none").remove(0);
        let (a, b) = (bound[0].clone(), bound[1].clone());
        assert!(
            a.overlap(&b) == 0 && a.len() == b.len(),
            "closest's tests need --cpu-bind=cores to give two tasks disjoint CPU sets of one size; got {a} and {b}"
        );
        Cpus { a, b, all }
    })
}

/// The first CPU of `set`, for map_cpu.
fn first(set: &CpuSet) -> usize {
    set.cpus().next().unwrap()
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
fn with_tree(vendor: &str, tree_of: &str) -> std::sync::MutexGuard<'static, ()> {
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

fn with_root() -> std::sync::MutexGuard<'static, ()> {
    with_tree("nvidia", "nvidia")
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
    std::fs::write(&probe, CPU_PROBE).unwrap();
    // Started by srun directly, and under a shell that stays (slurmstepd is
    // then the shell's parent, not exec's).
    let direct = format!("{exec} bash {probe}");
    let under_shell = format!("true; {exec} bash {probe}; true");
    for line in [direct, under_shell] {
        let mut all = vec!["-n2", "--gpus-per-node=4", "--cpu-bind=cores", "-w", "n1"];
        all.extend(["bash", "-c", &line]);
        let out = run("srun", &all);
        assert!(out.status.success(), "{}", show(&out));
        let err = text(&out.stderr);
        assert_eq!(
            probe_rows(&text(&out.stdout)),
            expect(&[("2", a), ("0", b)]),
            "{err}"
        );
        let line = format!("cpus={a} cpus_from=slurm gpu_cpus={a} near=yes");
        assert!(err.contains(&line), "{err}");
    }
}

/// The lines of `err` that report a `closest` fallback.
fn closest_lines(err: &str) -> Vec<&str> {
    err.lines().filter(|l| l.contains("closest:")).collect()
}

/// The rows tasks 0, 1, ... (ranks and local ids alike) print: each one's
/// GPU and CPUs.
fn expect(tasks: &[(&str, &CpuSet)]) -> String {
    tasks
        .iter()
        .enumerate()
        .map(|(l, (gpu, cpus))| format!("{l} {l} {gpu} {cpus}\n"))
        .collect()
}

#[test]
fn two_bound_tasks_take_the_gpus_next_to_their_cpus() {
    let _c = with_root();
    let Cpus { a, b, .. } = cpus();
    let (got, err) =
        srun_cpus("-n2 --gpus-per-node=4 --cpu-bind=cores --desi-gpu-map=verbose,closest");
    assert_eq!(got, expect(&[("2", a), ("0", b)]), "{err}");
    let line = format!("cpus={a} cpus_from=slurm gpu_cpus={a} near=yes");
    assert!(err.contains(&line), "{err}");
    // map_cpu reverses the CPUs, and with them the GPUs.
    let (a0, b0) = (first(a), first(b));
    let bind = format!("-n2 --gpus-per-node=4 --cpu-bind=map_cpu:{b0},{a0} --desi-gpu-map=closest");
    let (got, err) = srun_cpus(&bind);
    let one = |cpu| CpuSet::of(&[cpu]).unwrap();
    assert_eq!(got, expect(&[("0", &one(b0)), ("2", &one(a0))]), "{err}");
}

#[test]
fn overcommitted_tasks_split_their_domain() {
    let _c = with_root();
    let Cpus { a, b, .. } = cpus();
    // Four tasks on one CPU: Slurm binds all to A, near GPUs 2 and 3.
    let (got, err) =
        srun_cpus("-n4 --overcommit --gpus-per-node=4 --cpu-bind=cores --desi-gpu-map=closest");
    assert_eq!(
        got,
        expect(&[("2", a), ("2", a), ("3", a), ("3", a)]),
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
    let (a0, b0) = (first(a), first(b));
    let (one_a, one_b) = (CpuSet::of(&[a0]).unwrap(), CpuSet::of(&[b0]).unwrap());
    assert_eq!(
        eight(&format!(
            "--cpu-bind=map_cpu:{a0},{a0},{a0},{a0},{b0},{b0},{b0},{b0}"
        )),
        expect(&[
            ("2", &one_a),
            ("2", &one_a),
            ("3", &one_a),
            ("3", &one_a),
            ("0", &one_b),
            ("0", &one_b),
            ("1", &one_b),
            ("1", &one_b)
        ])
    );
    // cores with more tasks than CPUs: Slurm binds each to both CPUs, so
    // every GPU is as near as any other: contiguous.
    let both = a.union(b);
    assert_eq!(
        eight("--cpu-bind=cores"),
        expect(&[
            ("0", &both),
            ("0", &both),
            ("1", &both),
            ("1", &both),
            ("2", &both),
            ("2", &both),
            ("3", &both),
            ("3", &both)
        ])
    );
}

#[test]
fn unbound_tasks_and_partial_steps_are_contiguous_where_nothing_is_nearer() {
    let _c = with_root();
    let Cpus { a, b, all } = cpus();
    let (got, err) =
        srun_cpus("-n2 --gpus-per-node=4 --cpu-bind=none --desi-gpu-map=verbose,closest");
    assert_eq!(got, expect(&[("0", all), ("1", all)]), "{err}");
    assert!(err.contains(&format!("cpus={all} cpus_from=own")), "{err}");
    assert_eq!(
        closest_lines(&err),
        [format!(
            "desi-gpu-map: node n1: closest: the tasks' CPUs ({all} for local task 0) are as near \
             to every GPU as to any (bind tasks to CPUs, e.g. srun --cpu-bind=cores); using contiguous"
        )],
        "{err}"
    );
    // The step holds GPUs 0 and 1, both next to B: the task on A has no
    // near GPU, so both tasks split the pair, rightly: no line.
    let (got, err) = srun_cpus("-n2 --gres=gpu:2 --cpu-bind=cores --desi-gpu-map=closest");
    assert_eq!(got, expect(&[("0", a), ("1", b)]), "{err}");
    assert!(closest_lines(&err).is_empty(), "{err}");
}

#[test]
fn tasks_bound_without_a_cpu_list_use_their_own_masks() {
    let _c = with_root();
    let Cpus { a, b, .. } = cpus();
    let (got, err) =
        srun_cpus("-n2 --gpus-per-node=4 --cpu-bind=rank --desi-gpu-map=verbose,closest");
    if !series_at_least("24.11") {
        // rank binds task l to CPU l but writes no per-task list
        // (SLURM_CPU_BIND_TYPE=rank): each task sees only its own mask and
        // takes its candidates' GPU at local_id mod 2, so task 1 gets GPU 1
        // (CPUs 0 and 1 are A and B on a 2-core machine).
        let (zero, one) = (CpuSet::of(&[0]).unwrap(), CpuSet::of(&[1]).unwrap());
        assert_eq!((a, b), (&zero, &one), "this case needs A = 0 and B = 1");
        assert_eq!(got, expect(&[("2", a), ("1", b)]), "{err}");
        let line = format!("cpus={b} cpus_from=own gpu_cpus={b} near=yes");
        assert!(err.contains(&line), "{err}");
    } else {
        // 24.11 and later ignore rank and bind cores, with the list.
        assert!(err.contains("Ignoring --cpu-bind=rank"), "{err}");
        assert_eq!(got, expect(&[("2", a), ("0", b)]), "{err}");
        let line = format!("cpus={b} cpus_from=slurm gpu_cpus={b} near=yes");
        assert!(err.contains(&line), "{err}");
    }
}

#[test]
fn unknown_gpu_locations_fall_back_in_one_line() {
    // No kernel_root (this host has no NVIDIA driver files), and the fake
    // NVML reports no CPU affinity (no affinity= line).
    let _c = setup("required", &[]);
    let Cpus { a, b, .. } = cpus();
    let (got, err) = srun_cpus("-n2 --gpus-per-node=4 --cpu-bind=cores --desi-gpu-map=closest");
    assert_eq!(got, expect(&[("0", a), ("1", b)]), "{err}");
    assert_eq!(
        closest_lines(&err),
        ["desi-gpu-map: node n1: closest: no CPU affinity is known for GPU \"0\"; using contiguous"],
        "{err}"
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
    let (got, err) =
        srun_cpus("-n2 --gpus-per-node=4 --cpu-bind=cores --desi-gpu-map=verbose,closest");
    assert_eq!(got, expect(&[("2", a), ("0", b)]), "{err}");
    assert!(err.contains(&format!("gpu_cpus={a} near=yes")), "{err}");
    // NVML fails the call: the step falls back, in one line.
    cluster(&["nvml", "set", "fail=affinity"]);
    let (got, err) = srun_cpus("-n2 --gpus-per-node=4 --cpu-bind=cores --desi-gpu-map=closest");
    assert_eq!(got, expect(&[("0", a), ("1", b)]), "{err}");
    assert!(err.contains("nvmlDeviceGetCpuAffinity failed"), "{err}");
}

#[test]
fn gpus_only_nvml_lists_are_placed_in_the_same_load() {
    // n2 says Flags=no_gpu_env: Slurm sets only SLURM_GPUS_ON_NODE, NVML
    // lists the UUIDs and, for closest, places them in the same load.
    let _c = setup("required", &[]);
    let Cpus { a, b, .. } = cpus();
    cluster(&["nvml", "set", &format!("affinity.n2={}", affinity(1, 2))]);
    cluster(&["nvml", "clear-log"]);
    let args = "-n2 --gres=gpu:2 --cpu-bind=cores --desi-gpu-map=verbose,closest";
    let (got, err) = srun_on("n2", args, CPU_PROBE);
    assert_eq!(
        got,
        expect(&[("GPU-fake-n2-1", a), ("GPU-fake-n2-0", b)]),
        "{err}"
    );
    let line = format!("source=nvml cpus={a} cpus_from=slurm gpu_cpus={a} near=yes");
    assert!(err.contains(&line), "{err}");
    let inits = |log: String| log.lines().filter(|l| l.starts_with("init n2 ")).count();
    assert_eq!(inits(cluster(&["nvml", "log"])), 1, "one NVML load");
    // The affinity call fails: the UUIDs alone, in a second load, and the
    // step maps contiguous, said in one line.
    cluster(&["nvml", "add", "fail.n2=affinity"]);
    cluster(&["nvml", "clear-log"]);
    let (got, err) = srun_on("n2", args, CPU_PROBE);
    assert_eq!(
        got,
        expect(&[("GPU-fake-n2-0", a), ("GPU-fake-n2-1", b)]),
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
/// tree of `tree_of`'s GPUs, each printing `var` (the list that carries
/// its GPU); the rows and stderr.
fn two_bound_tasks(vendor: &str, tree_of: &str, var: &str, option: &str) -> (String, String) {
    let _c = with_tree(vendor, tree_of);
    let probe = CPU_PROBE.replace("CUDA_VISIBLE_DEVICES", var);
    let args = format!("-n2 --gpus-per-node=4 --cpu-bind=cores --desi-gpu-map={option}");
    srun_probe(&args, &probe)
}

#[test]
fn amd_gpus_are_located_through_their_render_nodes() {
    // ROCR_VISIBLE_DEVICES carries the GPU (CUDA_VISIBLE_DEVICES, which HIP
    // applies on top, is 0).
    let (got, err) = two_bound_tasks("amd", "amd", "ROCR_VISIBLE_DEVICES", "verbose,closest");
    let Cpus { a, b, .. } = cpus();
    assert_eq!(got, expect(&[("2", a), ("0", b)]), "{err}");
    assert!(err.contains(&format!("gpu_cpus={a} near=yes")), "{err}");
}

#[test]
fn amd_gpus_without_render_nodes_fall_back_in_one_line() {
    // The NVIDIA driver's files are not read for AMD GPUs.
    let (got, err) = two_bound_tasks("amd", "nvidia", "ROCR_VISIBLE_DEVICES", "closest");
    let Cpus { a, b, .. } = cpus();
    assert_eq!(got, expect(&[("0", a), ("1", b)]), "{err}");
    let lines = closest_lines(&err);
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("/sys/class/drm"), "{err}");
}

#[test]
fn intel_gpus_are_located_through_their_render_nodes() {
    let (got, err) = two_bound_tasks("intel", "intel", "ZE_AFFINITY_MASK", "verbose,closest");
    let Cpus { a, b, .. } = cpus();
    assert_eq!(got, expect(&[("2", a), ("0", b)]), "{err}");
    assert!(err.contains(&format!("gpu_cpus={b} near=yes")), "{err}");
}

#[test]
fn a_step_that_falls_back_says_contiguous() {
    // No kernel_root, and the fake NVML reports no CPU affinity: the step
    // falls back, and the tasks are told the method that placed them.
    let _c = setup("required", &[]);
    let probe = r#"echo "T $SLURM_PROCID $SLURM_LOCALID ${CUDA_VISIBLE_DEVICES-unset} ${DESI_GPU_MAP_METHOD-unset}""#;
    let (got, err) = srun_probe(
        "-n2 --gpus-per-node=4 --desi-gpu-map=verbose,closest",
        probe,
    );
    assert_eq!(got, "0 0 0 contiguous\n1 1 1 contiguous\n", "{err}");
    assert_eq!(
        closest_lines(&err),
        ["desi-gpu-map: node n1: closest: no CPU affinity is known for GPU \"0\"; using contiguous"],
        "{err}"
    );
    let reports: Vec<&str> = err.lines().filter(|l| l.contains(" rank=")).collect();
    assert_eq!(reports.len(), 2, "{err}");
    assert!(
        reports.iter().all(|l| l.contains(" method=contiguous ")),
        "{err}"
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
    let (zero, one) = (CpuSet::of(&[0]).unwrap(), CpuSet::of(&[1]).unwrap());
    write_tree_near("nvidia", &zero, &one);
    // Every task is unbound: its mask is slurmstepd's, the whole node.
    let (rows, err) = srun_cpus("-n1");
    let all = CpuSet::parse(rows.trim_end().rsplit(' ').next().unwrap())
        .unwrap_or_else(|e| panic!("{rows}: {e}\n{err}"));
    assert!(
        all.overlap(&zero.union(&one)) == 2,
        "needs CPUs 0 and 1; got {all}"
    );
    // A list in the user's environment claims tasks 0-2 sit on CPU 0 and
    // the others on every CPU, which each unbound task's own mask equals.
    let mut list = vec![zero.to_mask(); 3];
    list.extend(vec![all.to_mask(); 5]);
    let probe = r#"echo "T $SLURM_PROCID $SLURM_LOCALID ${CUDA_VISIBLE_DEVICES-unset}""#;
    let args = [
        "-w",
        "n1",
        "-n8",
        "--gpus-per-node=4",
        "--desi-gpu-map=verbose,closest",
        "bash",
        "-c",
        probe,
    ];
    let out = slurm("srun", &args)
        .env("SLURM_CPU_BIND_TYPE", "mask_cpu:")
        .env("SLURM_CPU_BIND_LIST", list.join(","))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let (got, err) = (probe_rows(&text(&out.stdout)), text(&out.stderr));
    let contiguous = "0 0 0\n1 1 0\n2 2 1\n3 3 1\n4 4 2\n5 5 2\n6 6 3\n7 7 3\n";
    assert_eq!(got, contiguous, "{err}");
    assert!(!err.contains("cpus_from=slurm"), "{err}");
    assert_eq!(err.matches("cpus_from=own").count(), 8, "{err}");
    // Without the export: the same.
    let (got, err) = srun_probe("-n8 --gpus-per-node=4 --desi-gpu-map=closest", probe);
    assert_eq!(got, contiguous, "{err}");
}
