//! AMD, Intel and NVIDIA runtimes, each reading the GPU lists in its own
//! layers (src/runtime/). Slurm 22.05 sets CUDA_VISIBLE_DEVICES,
//! ROCR_VISIBLE_DEVICES, GPU_DEVICE_ORDINAL and ZE_AFFINITY_MASK to the same
//! list on this cluster (gres.conf names no env flags); each case writes out
//! every variable per task. On n4 (Flags=no_gpu_env) Slurm sets no list.
//!
//! Run on the local test cluster that `tests/run-cluster-tests.sh` brings up
//! (nodes n1 and n2 with 4 fake GPUs each, n3 with 2, n4 with 2 that Slurm
//! names by count only); these tests fail, never skip, when it is not up.

use crate::common::*;

/// Two tasks on n1 with `words` (a GPU request and the option), each
/// printing every vendor's list ([`probe::VARS`]).
fn two_on_n1(words: &str) -> Job {
    srun("-N1 -n2 -w n1").args(words).probe(probe::VARS)
}

/// The tasks' `V` lines, sorted, are `want`.
#[track_caller]
fn vars_are(out: Ran, want: &[&str]) -> Ran {
    assert_eq!(out.lines("V "), want, "{out}");
    out
}

/// While another job holds GPUs 0 and 1 of n1, [`two_on_n1`] with
/// `--gres=gpu:2 OPTION` (so the step has GPUs 2 and 3): `V` lines `want`.
#[track_caller]
fn beside_a_job(option: &str, want: &[&str]) -> Ran {
    let _held = hold("n1", "gpu:2");
    vars_are(two_on_n1(&format!("--gres=gpu:2 {option}")).ok(), want)
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
    vars_are(
        two_on_n1("--gpus-per-node=4 --desi-gpu-map=verbose,roundrobin").ok(),
        &[
            "V 0 0,2 0,1,2,3 0,1,2,3 0,1,2,3 unset PCI_BUS_ID 1",
            "V 1 1,3 0,1,2,3 0,1,2,3 0,1,2,3 unset PCI_BUS_ID 1",
        ],
    )
    .says(&format!(
        "desi-gpu-map: node n1: GPU lists written for nvidia runtimes ({why})"
    ));
}

#[test]
fn vendor_nvidia_narrows_cuda_visible_devices_only() {
    let _c = setup("required", &["vendor=nvidia"]);
    vars_are(
        two_on_n1("--gpus-per-node=4 --desi-gpu-map=roundrobin").ok(),
        &[
            "V 0 0,2 0,1,2,3 0,1,2,3 0,1,2,3 unset PCI_BUS_ID 1",
            "V 1 1,3 0,1,2,3 0,1,2,3 0,1,2,3 unset PCI_BUS_ID 1",
        ],
    );
    // The user's own CUDA_DEVICE_ORDER is kept.
    vars_are(
        two_on_n1("--gpus-per-node=4 --desi-gpu-map=verbose,roundrobin")
            .env("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
            .run(),
        &[
            "V 0 0,2 0,1,2,3 0,1,2,3 0,1,2,3 unset FASTEST_FIRST 1",
            "V 1 1,3 0,1,2,3 0,1,2,3 0,1,2,3 unset FASTEST_FIRST 1",
        ],
    )
    .says(
        "desi-gpu-map: node n1: CUDA_DEVICE_ORDER=\"FASTEST_FIRST\" kept as set; \
         Slurm's indices follow the PCI bus order",
    );
    // Beside another job, the step has GPUs 2 and 3.
    beside_a_job(
        "--desi-gpu-map=roundrobin",
        &[
            "V 0 2 2,3 2,3 2,3 unset PCI_BUS_ID 1",
            "V 1 3 2,3 2,3 2,3 unset PCI_BUS_ID 1",
        ],
    );
}

#[test]
fn vendor_amd_puts_the_gpu_in_rocr_visible_devices() {
    let _c = setup("required", &["vendor=amd"]);
    // ROCR carries the GPU; the index lists HIP and OpenCL apply on top of
    // it name its first device. ZE_AFFINITY_MASK stays as Slurm set it.
    vars_are(
        two_on_n1("--gpus-per-node=4 --desi-gpu-map=verbose,roundrobin").ok(),
        &[
            // Two tasks on four GPUs: each holds two, its ROCR list
            // theirs and the index lists on top of it 0,1.
            "V 0 0,1 0,2 0,1 0,1,2,3 unset unset 1",
            "V 1 0,1 1,3 0,1 0,1,2,3 unset unset 1",
        ],
    )
    .says(
        "desi-gpu-map: node n1: GPU lists written for amd runtimes \
         (vendor=amd in plugstack.conf)",
    );
    beside_a_job(
        "--desi-gpu-map=roundrobin",
        &["V 0 0 2 0 2,3 unset unset 1", "V 1 0 3 0 2,3 unset unset 1"],
    );
}

/// The user's HIP_VISIBLE_DEVICES (Slurm never sets it): HIP reads it
/// instead of CUDA_VISIBLE_DEVICES, so the tasks are not bound, and the
/// flag must not say they are.
#[test]
fn vendor_amd_with_the_users_hip_list_stands_aside() {
    let _c = setup("required", &["vendor=amd"]);
    vars_are(
        two_on_n1("--gpus-per-node=4 --desi-gpu-map=roundrobin")
            .env("HIP_VISIBLE_DEVICES", "1")
            .ok(),
        &[
            "V 0 0,1,2,3 0,1,2,3 0,1,2,3 0,1,2,3 1 unset unset",
            "V 1 0,1,2,3 0,1,2,3 0,1,2,3 0,1,2,3 1 unset unset",
        ],
    )
    .says("HIP_VISIBLE_DEVICES is the user's, and HIP reads it instead of CUDA_VISIBLE_DEVICES");
}

#[test]
fn vendor_amd_rotate_reorders_rocr_only() {
    // ROCR reorders the devices it keeps, so the index lists stay 0,1.
    let _c = setup("required", &["vendor=amd", "visible=rotate"]);
    beside_a_job(
        "--desi-gpu-map=roundrobin",
        &[
            "V 0 0,1 2,3 0,1 2,3 unset unset 1",
            "V 1 0,1 3,2 0,1 2,3 unset unset 1",
        ],
    );
}

#[test]
fn vendor_intel_puts_the_gpu_in_ze_affinity_mask() {
    // Level Zero does not reorder by the mask: rotate falls back to single.
    let _c = setup("required", &["vendor=intel", "visible=rotate"]);
    beside_a_job(
        "--desi-gpu-map=verbose,roundrobin",
        &[
            "V 0 2 2,3 2,3 2 unset unset 1",
            "V 1 3 2,3 2,3 3 unset unset 1",
        ],
    )
    .says("visible=rotate cannot apply");
}

// ------------------------------------------------------------ no list from Slurm

/// With the fake NVML and `vendor` in plugstack.conf: `srun -N1 -n2 -w n4
/// --gpus-per-node=2 --desi-gpu-map=contiguous` (n4 says Flags=no_gpu_env,
/// so NVML lists its 2 GPUs) with `exports` in its environment, each task
/// printing `T rank CUDA_VISIBLE_DEVICES VAR flag`; it must succeed.
fn no_gpu_env_step(vendor: &str, var: &str, exports: &[(&str, &str)]) -> Ran {
    let _c = setup("required", &[&format!("nvml={}", fake_nvml()), vendor]);
    let probe = format!(
        r#"echo "T $SLURM_PROCID ${{CUDA_VISIBLE_DEVICES-unset}} ${{{var}-unset}} ${{DESI_GPU_MAPPED-unset}}""#
    );
    exports
        .iter()
        .fold(
            srun("-N1 -n2 -w n4 --gpus-per-node=2 --desi-gpu-map=contiguous").probe(&probe),
            |job, (name, value)| job.env(name, value),
        )
        .ok()
}

#[test]
fn amd_and_intel_lists_exported_on_a_no_gpu_env_node_are_not_slurms() {
    // Slurm set no list on n4: the user's ROCR_VISIBLE_DEVICES or
    // ZE_AFFINITY_MASK is theirs, never split among the tasks under the
    // flag. NVML's list names NVIDIA GPUs, which neither runtime reads: the
    // tasks run as the user made them, and the node says why once.
    for (vendor, var) in [
        ("vendor=amd", "ROCR_VISIBLE_DEVICES"),
        ("vendor=intel", "ZE_AFFINITY_MASK"),
    ] {
        let out = no_gpu_env_step(vendor, var, &[(var, "7,9")])
            .rows_are(&["0 unset 7,9 unset", "1 unset 7,9 unset"]);
        let lines = out.said();
        assert_eq!(lines.len(), 1, "{vendor}: {out}");
        assert!(
            lines[0].contains("NVIDIA UUIDs") && lines[0].ends_with("tasks left unchanged"),
            "{vendor}: {lines:?}"
        );
    }
}

#[test]
fn amd_and_intel_tasks_on_a_no_gpu_env_node_get_no_flag_without_their_list() {
    // Nothing exported: Level Zero (or ROCm) would see every GPU of n4,
    // so the flag must not say the tasks were bound.
    for (vendor, var) in [
        ("vendor=intel", "ZE_AFFINITY_MASK"),
        ("vendor=amd", "ROCR_VISIBLE_DEVICES"),
    ] {
        let out = no_gpu_env_step(vendor, var, &[])
            .rows_are(&["0 unset unset unset", "1 unset unset unset"]);
        assert_eq!(out.said().len(), 1, "{vendor}: {out}");
    }
}
