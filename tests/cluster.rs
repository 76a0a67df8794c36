//! The integration suite: real srun, sbatch and salloc against the local
//! test cluster that `tests/run-cluster-tests.sh` brings up (nodes n1 and n2
//! with 4 fake GPUs each, n3 with 2, n4 with 2 that Slurm names by count
//! only). Every case writes out the expected
//! values per task; none is computed by the code under test.
//!
//! srun places tasks where the allocation has CPUs: each node has 64, so
//! multi-node cases fix the split with `--ntasks-per-node`, or take whole
//! nodes (`--exclusive`) for srun's even split of uneven counts.
//!
//! Run through `make test` (or `bash tests/run-cluster-tests.sh`): these
//! tests fail, never skip, when the cluster is not up.
#![cfg(feature = "cluster-tests")]

mod common;
use common::*;

// ------------------------------------------------------------ the methods
//
// Each case: srun's arguments as one string, the plugstack arguments, a GPU
// request another job holds first, and each task's probe row
// `rank node local CUDA_VISIBLE_DEVICES flag`, written out by hand.

struct Case {
    srun: &'static str,
    plugstack: &'static [&'static str],
    held: Option<(&'static str, &'static str)>,
    rows: &'static [&'static str],
}

/// A case on whole allocations with the default plugstack line.
const fn case(srun: &'static str, rows: &'static [&'static str]) -> Case {
    Case {
        srun,
        plugstack: &[],
        held: None,
        rows,
    }
}

/// Runs each case on the cluster and compares every task's row.
fn check(cases: &[Case]) {
    for case in cases {
        let _c = setup("required", case.plugstack);
        let _held = case.held.map(|(node, gres)| hold(node, gres));
        let args: Vec<&str> = case.srun.split_whitespace().collect();
        assert_eq!(srun_map(&args), rows(case.rows), "srun {}", case.srun);
    }
}

/// Both methods in every layout.
const EVERY_LAYOUT: &[Case] = &[
        // 4 tasks on each node's 4 GPUs: both methods give each task its own GPU.
        case(
            "-N2 -n8 --ntasks-per-node=4 -w n[1-2] --gpus-per-node=4 --desi-gpu-map=contiguous",
            &EIGHT_ONE_GPU_EACH,
        ),
        case(
            "-N2 -n8 --ntasks-per-node=4 -w n[1-2] --gpus-per-node=4 --desi-gpu-map=roundrobin",
            &EIGHT_ONE_GPU_EACH,
        ),
        // 11 tasks on 2 whole nodes: 6 on n1, 5 on n2.
        case(
            "-N2 -n11 --exclusive -w n[1-2] --gpus-per-node=4 --desi-gpu-map=contiguous",
            &[
                "0 n1 0 0 1", "1 n1 1 0 1", "2 n1 2 1 1", "3 n1 3 1 1", "4 n1 4 2 1",
                "5 n1 5 3 1", "6 n2 0 0 1", "7 n2 1 0 1", "8 n2 2 1 1", "9 n2 3 2 1",
                "10 n2 4 3 1",
            ],
        ),
        case(
            "-N2 -n11 --exclusive -w n[1-2] --gpus-per-node=4 --desi-gpu-map=roundrobin",
            &[
                "0 n1 0 0 1", "1 n1 1 1 1", "2 n1 2 2 1", "3 n1 3 3 1", "4 n1 4 0 1",
                "5 n1 5 1 1", "6 n2 0 0 1", "7 n2 1 1 1", "8 n2 2 2 1", "9 n2 3 3 1",
                "10 n2 4 0 1",
            ],
        ),
        case(
            "-N2 -n5 --exclusive -w n[1-2] --gpus-per-node=2 --desi-gpu-map=contiguous",
            &["0 n1 0 0 1", "1 n1 1 0 1", "2 n1 2 1 1", "3 n2 0 0 1", "4 n2 1 1 1"],
        ),
        // -m cyclic: even ranks on n1, odd ranks on n2; local ids follow rank order.
        case(
            "-N2 -n10 --ntasks-per-node=5 -m cyclic -w n[1-2] --gpus-per-node=4 --desi-gpu-map=contiguous",
            &[
                "0 n1 0 0 1", "1 n2 0 0 1", "2 n1 1 0 1", "3 n2 1 0 1", "4 n1 2 1 1",
                "5 n2 2 1 1", "6 n1 3 2 1", "7 n2 3 2 1", "8 n1 4 3 1", "9 n2 4 3 1",
            ],
        ),
        case(
            "-N2 -n10 --ntasks-per-node=5 -m cyclic -w n[1-2] --gpus-per-node=4 --desi-gpu-map=roundrobin",
            &[
                "0 n1 0 0 1", "1 n2 0 0 1", "2 n1 1 1 1", "3 n2 1 1 1", "4 n1 2 2 1",
                "5 n2 2 2 1", "6 n1 3 3 1", "7 n2 3 3 1", "8 n1 4 0 1", "9 n2 4 0 1",
            ],
        ),
        // Fewer tasks than GPUs.
        case(
            "-N1 -n3 -w n1 --gpus-per-node=4 --desi-gpu-map=contiguous",
            &["0 n1 0 0 1", "1 n1 1 1 1", "2 n1 2 2 1"],
        ),
        case(
            "-N1 -n3 -w n1 --gpus-per-node=4 --desi-gpu-map=roundrobin",
            &["0 n1 0 0 1", "1 n1 1 1 1", "2 n1 2 2 1"],
        ),
        // n2 has 4 GPUs, n3 has 2: --gpus=6 takes all of both.
        case(
            "-N2 -n8 --ntasks-per-node=4 -w n[2-3] --gpus=6 --desi-gpu-map=contiguous",
            &[
                "0 n2 0 0 1", "1 n2 1 1 1", "2 n2 2 2 1", "3 n2 3 3 1", "4 n3 0 0 1",
                "5 n3 1 0 1", "6 n3 2 1 1", "7 n3 3 1 1",
            ],
        ),
];

/// Partial grants, GPUs another job holds, and `visible=rotate`.
const PARTIAL_AND_ROTATE: &[Case] = &[
    case(
        "-N1 -n3 -w n1 --gres=gpu:2 --desi-gpu-map=contiguous",
        &["0 n1 0 0 1", "1 n1 1 0 1", "2 n1 2 1 1"],
    ),
    // Another job holds GPUs 0 and 1: Slurm's tokens are kept.
    Case {
        held: Some(("n1", "gpu:2")),
        ..case(
            "-N1 -n3 -w n1 --gres=gpu:2 --desi-gpu-map=contiguous",
            &["0 n1 0 2 1", "1 n1 1 2 1", "2 n1 2 3 1"],
        )
    },
    Case {
        plugstack: &["visible=rotate"],
        ..case(
            "-N1 -n4 -w n1 --gpus-per-node=4 --desi-gpu-map=roundrobin",
            &[
                "0 n1 0 0,1,2,3 1",
                "1 n1 1 1,2,3,0 1",
                "2 n1 2 2,3,0,1 1",
                "3 n1 3 3,0,1,2 1",
            ],
        )
    },
];

#[test]
fn both_methods_in_every_layout() {
    check(EVERY_LAYOUT);
}

#[test]
fn partial_allocations_and_rotate() {
    check(PARTIAL_AND_ROTATE);
}

/// The same tables through `desi-gpu-map exec`, with no plugin in
/// plugstack.conf: the same rows, task for task.
#[test]
fn exec_gives_the_plugins_rows_without_the_plugin() {
    for case in EVERY_LAYOUT.iter().chain(PARTIAL_AND_ROTATE) {
        let _c = setup("required", &[]);
        cluster(&["plugin", "off"]);
        let _held = case.held.map(|(node, gres)| hold(node, gres));
        let (srun, exec) = through_exec(case);
        let mut all: Vec<&str> = srun.iter().map(String::as_str).collect();
        all.extend(exec.iter().map(String::as_str));
        all.extend(["bash", "-c", PROBE]);
        let out = run("srun", &all);
        assert!(out.status.success(), "srun {all:?}:\n{}", show(&out));
        assert_eq!(
            probe_rows(&text(&out.stdout)),
            rows(case.rows),
            "srun {all:?}"
        );
    }
}

/// `exec` in a batch script (the batch step, which nothing maps): the
/// application runs unchanged, saying why only under `--verbose`.
#[test]
fn exec_in_a_batch_script_runs_the_application_unchanged() {
    let _c = setup("required", &[]);
    cluster(&["plugin", "off"]);
    let output = format!("{}/log/exec-batch.out", state_dir());
    let _ = std::fs::remove_file(&output);
    let script = format!(
        "{b} exec -- bash -c 'echo \"app $CUDA_VISIBLE_DEVICES ${{DESI_GPU_MAPPED-unset}}\"'; \
         {b} exec --verbose -- true",
        b = bin()
    );
    let out = run(
        "sbatch",
        &[
            "-W",
            "-w",
            "n1",
            "-n1",
            "--gpus-per-node=2",
            "-o",
            &output,
            "--wrap",
            &script,
        ],
    );
    assert!(out.status.success(), "{}", show(&out));
    let batch = std::fs::read_to_string(&output).unwrap_or_default();
    let lines: Vec<&str> = batch.lines().collect();
    assert_eq!(lines.first(), Some(&"app 0,1 unset"), "{batch}");
    assert_eq!(lines.len(), 2, "one line, under --verbose only:\n{batch}");
    assert!(lines[1].contains("runs unchanged"), "{batch}");
}

/// `exec` hands the application the caller's signal dispositions: an
/// ignored SIGPIPE stays ignored (Rust's runtime would reset it).
#[test]
fn exec_keeps_an_ignored_sigpipe_under_srun() {
    let _c = setup("required", &[]);
    cluster(&["plugin", "off"]);
    let script = format!(
        "trap '' PIPE; exec {} exec --method contiguous -- grep SigIgn /proc/self/status",
        bin()
    );
    let out = run(
        "srun",
        &[
            "-n1",
            "-w",
            "n1",
            "--gpus-per-node=1",
            "bash",
            "-c",
            &script,
        ],
    );
    assert!(out.status.success(), "{}", show(&out));
    let ignored = text(&out.stdout)
        .split_whitespace()
        .nth(1)
        .and_then(|m| u64::from_str_radix(m, 16).ok())
        .expect("a SigIgn mask");
    assert_ne!(
        ignored & (1 << 12),
        0,
        "SIGPIPE not ignored: {}",
        show(&out)
    );
}

/// A case's srun words less `--desi-gpu-map=`, and the exec command that
/// asks for the same: `desi-gpu-map exec --method M [--visible V] --`.
fn through_exec(case: &Case) -> (Vec<String>, Vec<String>) {
    let mut srun = Vec::new();
    let mut exec = vec![bin(), "exec".to_string()];
    for word in case.srun.split_whitespace() {
        match word.strip_prefix("--desi-gpu-map=") {
            Some(value) => {
                let method = value.strip_prefix("verbose,").unwrap_or(value);
                exec.extend(["--method".to_string(), method.to_string()]);
            }
            None => srun.push(word.to_string()),
        }
    }
    for arg in case.plugstack {
        let (key, value) = arg.split_once('=').expect("a key=value plugstack argument");
        exec.extend([format!("--{key}"), value.to_string()]);
    }
    exec.push("--".to_string());
    (srun, exec)
}

// ------------------------------------------------------------ GPU vendors
//
// Slurm 22.05 sets CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES,
// GPU_DEVICE_ORDINAL and ZE_AFFINITY_MASK to the same list on this cluster
// (gres.conf names no env flags). Each vendor's runtime reads them in its own
// way (src/runtime/): each case writes out every variable per task.

/// Each task prints `V local CUDA ROCR GDO ZE HIP CUDA_DEVICE_ORDER flag`.
const GPU_VARS: &str = r#"echo "V $SLURM_LOCALID ${CUDA_VISIBLE_DEVICES-unset} ${ROCR_VISIBLE_DEVICES-unset} ${GPU_DEVICE_ORDINAL-unset} ${ZE_AFFINITY_MASK-unset} ${HIP_VISIBLE_DEVICES-unset} ${CUDA_DEVICE_ORDER-unset} ${DESI_GPU_MAPPED-unset}""#;

/// Two round-robin tasks on n1 with `gpus` (an srun GPU request): their
/// `V` lines, sorted, and the step's stderr.
fn gpu_vars(gpus: &str, option: &str) -> (Vec<String>, String) {
    let out = run(
        "srun",
        &[
            "-N1", "-n2", "-w", "n1", gpus, option, "bash", "-c", GPU_VARS,
        ],
    );
    assert!(out.status.success(), "{}", show(&out));
    (
        sorted_lines(&out.stdout, |l| l.starts_with("V ")),
        text(&out.stderr),
    )
}

#[test]
fn auto_on_this_host_is_nvidia_and_leaves_the_other_lists() {
    // This host has no GPU on PCI: NVIDIA semantics. Debian's real NVML,
    // loaded as root by the faults suite, creates /dev/nvidiactl without a
    // driver behind it, so the reason depends on which ran first.
    let _c = setup("required", &[]);
    let why = if std::path::Path::new("/dev/nvidiactl").exists() {
        "detected: no GPU on PCI, nvidia driver present"
    } else {
        "no GPU vendor detected; NVIDIA by default"
    };
    let (lines, err) = gpu_vars("--gpus-per-node=4", "--desi-gpu-map=verbose,roundrobin");
    assert_eq!(
        lines,
        [
            "V 0 0 0,1,2,3 0,1,2,3 0,1,2,3 unset PCI_BUS_ID 1",
            "V 1 1 0,1,2,3 0,1,2,3 0,1,2,3 unset PCI_BUS_ID 1"
        ],
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "desi-gpu-map: node n1: GPU lists written for nvidia runtimes ({why})"
        )),
        "{err}"
    );
}

#[test]
fn vendor_nvidia_narrows_cuda_visible_devices_only() {
    let _c = setup("required", &["vendor=nvidia"]);
    let (lines, err) = gpu_vars("--gpus-per-node=4", "--desi-gpu-map=roundrobin");
    assert_eq!(
        lines,
        [
            "V 0 0 0,1,2,3 0,1,2,3 0,1,2,3 unset PCI_BUS_ID 1",
            "V 1 1 0,1,2,3 0,1,2,3 0,1,2,3 unset PCI_BUS_ID 1"
        ],
        "{err}"
    );
    // The user's own CUDA_DEVICE_ORDER is kept.
    let out = slurm(
        "srun",
        &[
            "-N1",
            "-n2",
            "-w",
            "n1",
            "--gpus-per-node=4",
            "--desi-gpu-map=verbose,roundrobin",
            "bash",
            "-c",
            GPU_VARS,
        ],
    )
    .env("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    .output()
    .expect("run srun");
    assert_eq!(
        sorted_lines(&out.stdout, |l| l.starts_with("V ")),
        [
            "V 0 0 0,1,2,3 0,1,2,3 0,1,2,3 unset FASTEST_FIRST 1",
            "V 1 1 0,1,2,3 0,1,2,3 0,1,2,3 unset FASTEST_FIRST 1"
        ],
        "{}",
        show(&out)
    );
    assert!(
        text(&out.stderr).contains(
            "desi-gpu-map: node n1: CUDA_DEVICE_ORDER=\"FASTEST_FIRST\" kept as set; \
             Slurm's indices follow the PCI bus order"
        ),
        "{}",
        show(&out)
    );
    // Beside another job, the step has GPUs 2 and 3.
    let _held = hold("n1", "gpu:2");
    let (lines, err) = gpu_vars("--gres=gpu:2", "--desi-gpu-map=roundrobin");
    assert_eq!(
        lines,
        [
            "V 0 2 2,3 2,3 2,3 unset PCI_BUS_ID 1",
            "V 1 3 2,3 2,3 2,3 unset PCI_BUS_ID 1"
        ],
        "{err}"
    );
}

#[test]
fn vendor_amd_puts_the_gpu_in_rocr_visible_devices() {
    let _c = setup("required", &["vendor=amd"]);
    // ROCR carries the GPU; the index lists HIP and OpenCL apply on top of
    // it name its first device. ZE_AFFINITY_MASK stays as Slurm set it.
    let (lines, err) = gpu_vars("--gpus-per-node=4", "--desi-gpu-map=verbose,roundrobin");
    assert_eq!(
        lines,
        [
            "V 0 0 0 0 0,1,2,3 unset unset 1",
            "V 1 0 1 0 0,1,2,3 unset unset 1"
        ],
        "{err}"
    );
    assert!(
        err.contains(
            "desi-gpu-map: node n1: GPU lists written for amd runtimes \
             (vendor=amd in plugstack.conf)"
        ),
        "{err}"
    );
    let _held = hold("n1", "gpu:2");
    let (lines, err) = gpu_vars("--gres=gpu:2", "--desi-gpu-map=roundrobin");
    assert_eq!(
        lines,
        ["V 0 0 2 0 2,3 unset unset 1", "V 1 0 3 0 2,3 unset unset 1"],
        "{err}"
    );
}

/// The user's HIP_VISIBLE_DEVICES (Slurm never sets it): HIP reads it
/// instead of CUDA_VISIBLE_DEVICES, so the tasks are not bound, and the
/// flag must not say they are.
#[test]
fn vendor_amd_with_the_users_hip_list_stands_aside() {
    let _c = setup("required", &["vendor=amd"]);
    let out = slurm(
        "srun",
        &[
            "-N1",
            "-n2",
            "-w",
            "n1",
            "--gpus-per-node=4",
            "--desi-gpu-map=roundrobin",
            "bash",
            "-c",
            GPU_VARS,
        ],
    )
    .env("HIP_VISIBLE_DEVICES", "1")
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        sorted_lines(&out.stdout, |l| l.starts_with("V ")),
        [
            "V 0 0,1,2,3 0,1,2,3 0,1,2,3 0,1,2,3 1 unset unset",
            "V 1 0,1,2,3 0,1,2,3 0,1,2,3 0,1,2,3 1 unset unset"
        ],
        "{}",
        show(&out)
    );
    let err = text(&out.stderr);
    assert!(
        err.contains(
            "HIP_VISIBLE_DEVICES is the user's, and HIP reads it instead of CUDA_VISIBLE_DEVICES"
        ),
        "{err}"
    );
}

#[test]
fn vendor_amd_rotate_reorders_rocr_only() {
    // ROCR reorders the devices it keeps, so the index lists stay 0,1.
    let _c = setup("required", &["vendor=amd", "visible=rotate"]);
    let _held = hold("n1", "gpu:2");
    let (lines, err) = gpu_vars("--gres=gpu:2", "--desi-gpu-map=roundrobin");
    assert_eq!(
        lines,
        [
            "V 0 0,1 2,3 0,1 2,3 unset unset 1",
            "V 1 0,1 3,2 0,1 2,3 unset unset 1"
        ],
        "{err}"
    );
}

#[test]
fn vendor_intel_puts_the_gpu_in_ze_affinity_mask() {
    // Level Zero does not reorder by the mask: rotate falls back to single.
    let _c = setup("required", &["vendor=intel", "visible=rotate"]);
    let _held = hold("n1", "gpu:2");
    let (lines, err) = gpu_vars("--gres=gpu:2", "--desi-gpu-map=verbose,roundrobin");
    assert_eq!(
        lines,
        [
            "V 0 2 2,3 2,3 2 unset unset 1",
            "V 1 3 2,3 2,3 3 unset unset 1"
        ],
        "{err}"
    );
    assert!(err.contains("visible=rotate cannot apply"), "{err}");
}

// ------------------------------------------------------------ user interface

#[test]
fn verbose_reports_each_task() {
    let _c = setup("required", &[]);
    let out = run(
        "srun",
        &[
            "-N1",
            "-n2",
            "-w",
            "n1",
            "--gpus-per-node=4",
            "--desi-gpu-map=verbose,contiguous",
            "true",
        ],
    );
    assert!(out.status.success(), "{}", show(&out));
    let lines = sorted_lines(&out.stderr, |l| l.contains("desi-gpu-map: node="));
    assert_eq!(
        lines,
        [
            "desi-gpu-map: node=n1 rank=0 local=0/2 gpu=0 visible=0 gpus=0,1,2,3 method=contiguous source=slurm",
            "desi-gpu-map: node=n1 rank=1 local=1/2 gpu=1 visible=1 gpus=0,1,2,3 method=contiguous source=slurm",
        ],
        "{}",
        show(&out)
    );
}

#[test]
fn help_prints_usage_and_exits_zero_without_a_job() {
    let _c = setup("required", &[]);
    let before = job_count();
    for cmd in ["srun", "sbatch", "salloc"] {
        let out = run(cmd, &trivial_job(cmd, &["-N1", "--desi-gpu-map=help"]));
        assert!(out.status.success(), "{cmd}: {}", show(&out));
        assert!(
            text(&out.stdout).contains("Usage: --desi-gpu-map=METHOD[,verbose][,mps]"),
            "{cmd}: {}",
            show(&out)
        );
        assert!(text(&out.stdout).contains("roundrobin"), "{}", show(&out));
    }
    assert_eq!(job_count(), before, "help must not create a job");
}

#[test]
fn srun_help_lists_the_option() {
    let _c = setup("required", &[]);
    let out = run("srun", &["--help"]);
    let all = text(&out.stdout) + &text(&out.stderr);
    assert!(all.contains("--desi-gpu-map="), "{}", show(&out));
    assert!(
        all.contains("Bind each task to one GPU of its node"),
        "{}",
        show(&out)
    );
}

#[test]
fn value_options_are_slurms() {
    // The help check skips option values by these lists (src/client_args.rs):
    // each option must want a value in this series, or be unknown to the
    // client; one that takes none would hide the program's first word.
    use desi_gpu_map::settings::client_args::{value_options, Client};
    let _c = setup("required", &[]);
    let answer = |cmd: &str, word: &str| {
        let out = slurm(cmd, &[word])
            .stdin(std::process::Stdio::null())
            .output()
            .expect("client");
        text(&out.stderr)
    };
    for (cmd, client) in [
        ("srun", Client::Srun),
        ("sbatch", Client::Allocator),
        ("salloc", Client::Allocator),
    ] {
        let (letters, names) = value_options(client);
        let words = letters
            .chars()
            .map(|c| format!("-{c}"))
            .chain(names.iter().map(|n| format!("--{n}")));
        for word in words {
            let err = answer(cmd, &word);
            assert!(
                [
                    "requires an argument",
                    "unrecognized option",
                    "invalid option"
                ]
                .iter()
                .any(|known| err.contains(known)),
                "{cmd} {word}: {err}"
            );
        }
    }
    // sbatch's -W and --wait take no value, unlike srun's.
    for word in ["-W", "--wait"] {
        let err = answer("sbatch", word);
        assert!(
            !err.contains("requires an argument"),
            "sbatch {word}: {err}"
        );
    }
}

#[test]
fn no_option_leaves_the_environment_untouched() {
    let _c = setup("required", &[]);
    let got = srun_map(&["-N1", "-n2", "-w", "n1", "--gpus-per-node=4"]);
    assert_eq!(got, rows(&["0 n1 0 0,1,2,3 unset", "1 n1 1 0,1,2,3 unset"]));
}

#[test]
fn site_default_and_none() {
    let _c = setup("required", &["default=roundrobin"]);
    let got = srun_map(&["-N1", "-n2", "-w", "n1", "--gpus-per-node=4"]);
    assert_eq!(got, rows(&["0 n1 0 0 1", "1 n1 1 1 1"]));
    let got = srun_map(&[
        "-N1",
        "-n2",
        "-w",
        "n1",
        "--gpus-per-node=4",
        "--desi-gpu-map=none",
    ]);
    assert_eq!(got, rows(&["0 n1 0 0,1,2,3 unset", "1 n1 1 0,1,2,3 unset"]));
}

#[test]
fn sbatch_option_reaches_the_steps_and_the_batch_script_keeps_all_gpus() {
    let _c = setup("required", &[]);
    let script = format!(
        "#!/bin/bash\n#SBATCH -N2 -n8 --ntasks-per-node=4 -w n[1-2] --gpus-per-node=4\n#SBATCH --desi-gpu-map=roundrobin\n\
         echo \"B $(hostname) ${{CUDA_VISIBLE_DEVICES-unset}} ${{DESI_GPU_MAPPED-unset}}\"\n\
         srun -n4 -N1 -w n2 bash -c '{PROBE}'\n"
    );
    let path = format!("{}/batch-option.sh", state_dir());
    let output = format!("{}/batch-option.out", state_dir());
    std::fs::write(&path, script).unwrap();
    let out = run("sbatch", &["--wait", "-o", &output, &path]);
    assert!(out.status.success(), "{}", show(&out));
    let log = std::fs::read_to_string(&output).unwrap();
    assert!(log.lines().any(|l| l == "B n1 0,1,2,3 unset"), "{log}");
    assert_eq!(
        probe_rows(&log),
        rows(&["0 n2 0 0 1", "1 n2 1 1 1", "2 n2 2 2 1", "3 n2 3 3 1"]),
        "{log}"
    );
}

#[test]
fn environment_form_and_salloc() {
    let _c = setup("required", &[]);
    let mut c = slurm(
        "srun",
        &[
            "-N1",
            "-n2",
            "-w",
            "n1",
            "--gpus-per-node=4",
            "bash",
            "-c",
            PROBE,
        ],
    );
    c.env(OPTION_ENV, "roundrobin");
    let out = c.output().unwrap();
    assert_eq!(
        probe_rows(&text(&out.stdout)),
        rows(&["0 n1 0 0 1", "1 n1 1 1 1"]),
        "{}",
        show(&out)
    );

    let out = run(
        "salloc",
        &[
            "-N1",
            "-n2",
            "-w",
            "n2",
            "--gpus-per-node=4",
            "--desi-gpu-map=contiguous",
            "srun",
            "-n2",
            "bash",
            "-c",
            PROBE,
        ],
    );
    assert_eq!(
        probe_rows(&text(&out.stdout)),
        rows(&["0 n2 0 0 1", "1 n2 1 1 1"]),
        "{}",
        show(&out)
    );
}

/// A trivial job for `cmd`: sbatch takes a `--wrap`, srun and salloc a command.
fn trivial_job<'a>(cmd: &str, args: &[&'a str]) -> Vec<&'a str> {
    let mut all = args.to_vec();
    all.push(if cmd == "sbatch" {
        "--wrap=true"
    } else {
        "true"
    });
    all
}

#[test]
fn bad_values_stop_srun_sbatch_and_salloc_before_allocation() {
    let _c = setup("required", &[]);
    let before = job_count();
    for cmd in ["srun", "sbatch", "salloc"] {
        for bad in ["contigous", "", "verbose,", "round_robin"] {
            let arg = format!("--desi-gpu-map={bad}");
            let out = run(cmd, &trivial_job(cmd, &["-N1", &arg]));
            assert!(!out.status.success(), "{cmd} {arg}: {}", show(&out));
            let err = text(&out.stderr);
            assert!(
                err.contains("invalid --desi-gpu-map value"),
                "{cmd} {arg}: {}",
                show(&out)
            );
            assert!(
                err.contains("contiguous, roundrobin"),
                "{cmd} {arg}: {}",
                show(&out)
            );
        }
        let mut c = slurm(cmd, &trivial_job(cmd, &["-N1"]));
        c.env(OPTION_ENV, "bogus");
        let out = c.output().unwrap();
        assert!(!out.status.success(), "{cmd} env: {}", show(&out));
        assert!(
            text(&out.stderr).contains("\"bogus\""),
            "{cmd} env: {}",
            show(&out)
        );
    }
    assert_eq!(job_count(), before, "no job may be created");
}

#[test]
fn bad_plugstack_argument_is_a_clear_error_and_never_drains_a_node() {
    let _c = setup("required", &["default=contigous"]);
    let before = job_count();
    for cmd in ["srun", "sbatch", "salloc"] {
        let out = run(cmd, &trivial_job(cmd, &["-N1", "-w", "n1"]));
        assert!(!out.status.success(), "{cmd}: {}", show(&out));
        let err = text(&out.stderr);
        assert!(
            err.contains("bad plugstack argument \"default=contigous\""),
            "{cmd}: {}",
            show(&out)
        );
        assert!(err.contains("valid arguments"), "{cmd}: {}", show(&out));
    }
    assert_eq!(job_count(), before, "no job may be created");

    // Marked optional, srun goes on; the nodes report it to the task and stay up.
    configure("optional", &["visible=everything"]);
    let out = run(
        "srun",
        &["-N1", "-w", "n1", "--gpus-per-node=4", "bash", "-c", PROBE],
    );
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        probe_rows(&text(&out.stdout)),
        rows(&["0 n1 0 0,1,2,3 unset"])
    );
    assert!(
        text(&out.stderr).contains("plugin misconfigured"),
        "{}",
        show(&out)
    );
    let state = run("sinfo", &["-h", "-n", "n1", "-o", "%t"]);
    assert_eq!(
        text(&state.stdout).trim(),
        "idle",
        "the node must not drain"
    );
}

// ------------------------------------------------------------ GPU sources

#[test]
fn gpu_bind_none_maps_the_list_slurm_allocated() {
    // Under --gpu-bind=none slurmstepd drops CUDA_VISIBLE_DEVICES from each
    // task (22.05) or keeps the step's list in every task (23.11+), and
    // writes SLURMD_TRES_BIND as gpu:none (22.05) or gres/gpu:none (23.11+);
    // either way the step's list is mapped.
    let _c = setup("required", &[]);
    let got = srun_map(&[
        "-N1",
        "-n4",
        "-w",
        "n1",
        "--gres=gpu:3",
        "--gpu-bind=none",
        "--desi-gpu-map=roundrobin",
    ]);
    assert_eq!(
        got,
        rows(&["0 n1 0 0 1", "1 n1 1 1 1", "2 n1 2 2 1", "3 n1 3 0 1"])
    );
}

/// The GPU variables Slurm itself gives each task of
/// `srun -n NTASKS -w n1 --gpus-per-node=4 EXTRA`, plugin loaded but not
/// asked, one line per task, sorted.
fn slurm_gpu_variables(ntasks: &str, extra: &[&str]) -> Vec<String> {
    const NAMES: [&str; 9] = [
        "CUDA_VISIBLE_DEVICES",
        "GPU_DEVICE_ORDINAL",
        "ROCR_VISIBLE_DEVICES",
        "ZE_AFFINITY_MASK",
        "SLURM_STEP_GPUS",
        "SLURM_GPUS_ON_NODE",
        "SLURM_GPUS_PER_NODE",
        "SLURMD_TRES_BIND",
        "SLURM_TRES_BIND",
    ];
    let probe: String = NAMES
        .iter()
        .map(|n| format!("${{{n}+{n}=${n} }}"))
        .collect();
    let script = format!("echo \"G {probe}\"");
    let mut args = vec!["-N1", "-n", ntasks, "-w", "n1", "--gpus-per-node=4"];
    args.extend_from_slice(extra);
    args.extend(["bash", "-c", &script]);
    let mut c = slurm("srun", &args);
    for name in NAMES {
        c.env_remove(name);
    }
    let out = c.output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    sorted_lines(&out.stdout, |l| l.starts_with("G "))
}

#[test]
fn what_slurm_sets_for_a_gpu_step_by_series() {
    // The README's notes on the series, measured on Debian's 22.05.8,
    // 24.11.5 and 26.05.5. Where a change lies between two of those, the
    // series named is the one Slurm built from source showed (issue 9).
    let _c = setup("required", &[]);
    let (since_23_11, since_24_11) = (series_at_least("23.11"), series_at_least("24.11"));
    // line(lists, SLURMD_TRES_BIND, SLURM_TRES_BIND): one task's probe line
    let line = |lists: bool, slurmd_bind: bool, tres_bind: bool| {
        let mut l = String::from("G ");
        if lists {
            l += "CUDA_VISIBLE_DEVICES=0,1,2,3 GPU_DEVICE_ORDINAL=0,1,2,3 \
                  ROCR_VISIBLE_DEVICES=0,1,2,3 ZE_AFFINITY_MASK=0,1,2,3 SLURM_STEP_GPUS=0,1,2,3 ";
        }
        l += "SLURM_GPUS_ON_NODE=4 ";
        if since_24_11 {
            l += "SLURM_GPUS_PER_NODE=4 ";
        }
        if slurmd_bind {
            l += if since_23_11 {
                "SLURMD_TRES_BIND=gres/gpu:none "
            } else {
                "SLURMD_TRES_BIND=gpu:none "
            };
        }
        if tres_bind {
            l += "SLURM_TRES_BIND=gres/gpu:none ";
        }
        l
    };
    let at = |what: &str| format!("Slurm {}: {what}", series());
    assert_eq!(
        slurm_gpu_variables("1", &[]),
        [line(true, false, false)],
        "{}",
        at("one task")
    );
    // One task: slurmstepd binds nothing per task before 25.11.
    assert_eq!(
        slurm_gpu_variables("1", &["--gpu-bind=none"]),
        [line(true, series_at_least("25.11"), since_24_11)],
        "{}",
        at("one task, --gpu-bind=none")
    );
    // Two tasks: 22.05 takes every list away; 23.11+ leaves each task the
    // step's list.
    let two = line(since_23_11, true, since_24_11);
    assert_eq!(
        slurm_gpu_variables("2", &["--gpu-bind=none"]),
        [two.clone(), two],
        "{}",
        at("two tasks, --gpu-bind=none")
    );
}

#[test]
fn nvml_uuids_when_slurm_sets_only_a_count() {
    // n4's gres.conf has Flags=no_gpu_env: Slurm sets SLURM_GPUS_ON_NODE=2
    // and no list, so the plugin maps NVML's UUIDs (the fake library's,
    // chosen with nvml=PATH), loaded once for the step.
    let nvml = format!("nvml={}", fake_nvml());
    let _c = setup("required", &[&nvml]);
    cluster(&["nvml", "clear-log"]);
    let got = srun_map(&[
        "-N1",
        "-n3",
        "-w",
        "n4",
        "--gres=gpu:2",
        "--desi-gpu-map=roundrobin",
    ]);
    assert_eq!(
        got,
        rows(&[
            "0 n4 0 GPU-fake-n4-0 1",
            "1 n4 1 GPU-fake-n4-1 1",
            "2 n4 2 GPU-fake-n4-0 1"
        ])
    );
    let inits = cluster(&["nvml", "log"]);
    assert_eq!(
        inits.lines().filter(|l| l.starts_with("init n4 ")).count(),
        1,
        "{inits}"
    );
}

#[test]
fn no_gpus_allocated_warns_once_and_leaves_tasks_alone() {
    let _c = setup("required", &[]);
    let out = run(
        "srun",
        &[
            "-N1",
            "-n1",
            "-w",
            "n1",
            "--desi-gpu-map=contiguous",
            "bash",
            "-c",
            PROBE,
        ],
    );
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        probe_rows(&text(&out.stdout)),
        rows(&["0 n1 0 unset unset"])
    );
    let said = text(&out.stderr)
        .lines()
        .filter(|l| l.contains("desi-gpu-map"))
        .count();
    assert_eq!(said, 1, "{}", show(&out));
    assert!(
        text(&out.stderr)
            .contains("desi-gpu-map: node n1: no GPUs are allocated to this step on this node"),
        "{}",
        show(&out)
    );
}

#[test]
fn slurm_per_task_binding_is_kept() {
    let _c = setup("required", &[]);
    let out = run(
        "srun",
        &[
            "-N1",
            "-n4",
            "-w",
            "n1",
            "--gpus-per-task=1",
            "--desi-gpu-map=contiguous",
            "bash",
            "-c",
            PROBE,
        ],
    );
    assert_eq!(
        probe_rows(&text(&out.stdout)),
        rows(&[
            "0 n1 0 0 unset",
            "1 n1 1 1 unset",
            "2 n1 2 2 unset",
            "3 n1 3 3 unset"
        ]),
        "{}",
        show(&out)
    );
    assert!(
        text(&out.stderr).contains("keeping Slurm's binding"),
        "{}",
        show(&out)
    );

    let out = run(
        "srun",
        &[
            "-N1",
            "-n4",
            "-w",
            "n1",
            "--gpus-per-node=4",
            "--gpu-bind=map_gpu:1,0",
            "--desi-gpu-map=contiguous",
            "bash",
            "-c",
            PROBE,
        ],
    );
    assert_eq!(
        probe_rows(&text(&out.stdout)),
        rows(&[
            "0 n1 0 1 unset",
            "1 n1 1 0 unset",
            "2 n1 2 1 unset",
            "3 n1 3 0 unset"
        ]),
        "{}",
        show(&out)
    );
    assert!(
        text(&out.stderr).contains("keeping Slurm's binding"),
        "{}",
        show(&out)
    );
}

#[test]
fn show_inside_a_task() {
    let _c = setup("required", &[]);
    let nvml = format!("--nvml={}", fake_nvml());
    let out = run(
        "srun",
        &[
            "-N1",
            "-n2",
            "-w",
            "n1",
            "--gpus-per-node=4",
            "--desi-gpu-map=roundrobin",
            "-l",
            &bin(),
            "show",
            &nvml,
        ],
    );
    assert!(out.status.success(), "{}", show(&out));
    let stdout = text(&out.stdout);
    for want in [
        "1: mapped by desi-gpu-map: yes",
        "1: DESI_GPU_MAPPED: 1",
        "1: method: roundrobin",
        "1: node_gpus: 4",
        "1: cuda_visible_devices: 1",
        "1: device 0: 1 uuid GPU-fake-n1-1 pci 00000000:02:00.0",
        "0: device 0: 0 uuid GPU-fake-n1-0 pci 00000000:01:00.0",
    ] {
        assert!(stdout.contains(want), "missing {want:?} in\n{}", show(&out));
    }
}
