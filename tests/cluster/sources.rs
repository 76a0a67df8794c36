//! Where a step's GPU list comes from, and never a GPU outside the step's
//! grant: what Slurm sets for a GPU step, CPU-only steps, nested steps and
//! stale flags, lists the user exported, NVML's lists, and Slurm's own
//! per-task binding. `DESI_GPU_MAPPED=1` only where the plugin mapped the
//! task. Real srun and salloc against the local test cluster that
//! `tests/run-cluster-tests.sh` brings up (nodes n1 and n2 with 4 fake GPUs
//! each, n3 with 2, n4 with 2 that Slurm names by count only,
//! `Flags=no_gpu_env`; a `shared` partition with `OverSubscribe=FORCE`).
//!
//! The test nodes declare 64 CPUs on a 2-CPU host: exactly the regime in
//! which "the job holds every CPU" once passed for "the job holds the node".

use crate::common::*;

fn nvml_arg() -> String {
    format!("nvml={}", fake_nvml())
}

/// Asserts that the two tasks on `node` ran without GPU or flag
/// ([`probe::FULL`] rows).
#[track_caller]
fn assert_two_unmapped(ran: Ran, node: &str) -> Ran {
    let want = [0, 1].map(|i| format!("{i} {node} {i} unset unset unset unset"));
    ran.rows_are(&[want[0].as_str(), want[1].as_str()])
}

/// Asserts that each [`probe::FULL`] row of `ran` has neither flag, method
/// nor GPU count.
#[track_caller]
fn assert_no_flag(ran: &Ran) {
    for row in ran.rows().lines() {
        let fields: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            fields.get(4..),
            Some(&["unset", "unset", "unset"][..]),
            "{ran}"
        );
    }
}

// ------------------------------------------------ what Slurm gives a step

#[test]
fn gpu_bind_none_maps_the_list_slurm_allocated() {
    // Under --gpu-bind=none slurmstepd drops CUDA_VISIBLE_DEVICES from each
    // task (22.05) or keeps the step's list in every task (23.11+), and
    // writes SLURMD_TRES_BIND as gpu:none (22.05) or gres/gpu:none (23.11+);
    // either way the step's list is mapped.
    let _c = setup("required", &[]);
    srun("-N1 -n4 -w n1 --gres=gpu:3 --gpu-bind=none --desi-gpu-map=roundrobin")
        .probe(probe::GPU)
        .ok()
        .rows_are(&["0 n1 0 0 1", "1 n1 1 1 1", "2 n1 2 2 1", "3 n1 3 0 1"]);
}

/// The GPU variables Slurm itself gives each task of
/// `srun -n NTASKS -w n1 --gpus-per-node=4 EXTRA`, plugin loaded but not
/// asked, one line per task, sorted.
fn slurm_gpu_variables(ntasks: &str, extra: &str) -> Vec<String> {
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
    // None of the names comes from whoever runs the tests.
    NAMES
        .iter()
        .fold(
            srun(&format!("-N1 -n {ntasks} -w n1 --gpus-per-node=4 {extra}")),
            |job, name| job.env_remove(name),
        )
        .probe(&format!("echo \"G {probe}\""))
        .ok()
        .lines("G ")
}

#[test]
fn what_slurm_sets_for_a_gpu_step_by_series() {
    // docs/slurm-series.md's table, measured on Debian's 22.05.8,
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
        slurm_gpu_variables("1", ""),
        [line(true, false, false)],
        "{}",
        at("one task")
    );
    // One task: slurmstepd binds nothing per task before 25.11.
    assert_eq!(
        slurm_gpu_variables("1", "--gpu-bind=none"),
        [line(true, series_at_least("25.11"), since_24_11)],
        "{}",
        at("one task, --gpu-bind=none")
    );
    // Two tasks: 22.05 takes every list away; 23.11+ leaves each task the
    // step's list.
    let two = line(since_23_11, true, since_24_11);
    assert_eq!(
        slurm_gpu_variables("2", "--gpu-bind=none"),
        [two.clone(), two],
        "{}",
        at("two tasks, --gpu-bind=none")
    );
}

#[test]
fn slurm_per_task_binding_is_kept() {
    let _c = setup("required", &[]);
    for (gpus, want) in [
        (
            "--gpus-per-task=1",
            [
                "0 n1 0 0 unset",
                "1 n1 1 1 unset",
                "2 n1 2 2 unset",
                "3 n1 3 3 unset",
            ],
        ),
        (
            "--gpus-per-node=4 --gpu-bind=map_gpu:1,0",
            [
                "0 n1 0 1 unset",
                "1 n1 1 0 unset",
                "2 n1 2 1 unset",
                "3 n1 3 0 unset",
            ],
        ),
    ] {
        srun("-N1 -n4 -w n1")
            .args(gpus)
            .method("contiguous")
            .probe(probe::GPU)
            .run()
            .rows_are(&want)
            .says("keeping Slurm's binding");
    }
}

// ------------------------------------------------ no GPUs, no mapping

#[test]
fn no_gpus_allocated_warns_once_and_leaves_tasks_alone() {
    let _c = setup("required", &[]);
    let ran = srun("-N1 -n1 -w n1 --desi-gpu-map=contiguous")
        .probe(probe::GPU)
        .ok()
        .rows_are(&["0 n1 0 unset unset"]);
    let said = ran
        .stderr()
        .lines()
        .filter(|l| l.contains("desi-gpu-map"))
        .count();
    assert_eq!(said, 1, "{ran}");
    ran.says("desi-gpu-map: node n1: no GPUs are allocated to this step on this node");
}

#[test]
fn cpu_only_steps_beside_a_working_nvml_get_no_gpu() {
    let _c = setup("required", &[&nvml_arg()]);
    // A whole node without a GPU request (it once got every NVML GPU),
    // and a small step on a node with GPUs.
    for (node, words) in [
        ("n3", "-N1 -n2 -w n3 --exclusive --desi-gpu-map=contiguous"),
        ("n1", "-N1 -n2 -w n1 --desi-gpu-map=contiguous"),
    ] {
        let ran = assert_two_unmapped(srun(words).probe(probe::FULL).ok(), node);
        assert_eq!(
            ran.said(),
            [format!(
                "desi-gpu-map: node {node}: no GPUs are allocated to this step on this node; tasks left unchanged"
            )],
            "the user asked, so one line per node"
        );
    }
}

#[test]
fn gpu_variables_exported_into_a_cpu_only_step_grant_nothing() {
    let _c = setup("required", &[&nvml_arg()]);
    let ran = srun("-N1 -n2 -w n1 --desi-gpu-map=contiguous")
        .env("CUDA_VISIBLE_DEVICES", "0,1")
        .env("SLURM_STEP_GPUS", "0,1")
        .env("SLURM_GPUS_ON_NODE", "2")
        .env("ROCR_VISIBLE_DEVICES", "0,1")
        .probe(probe::FULL)
        .ok();
    assert_no_flag(&ran);
    for row in ran.rows().lines() {
        assert_ne!(row.split_whitespace().nth(3), Some("0"), "{ran}");
    }
}

#[test]
fn cpu_only_job_in_a_shared_partition_beside_a_gpu_job_gets_no_gpu() {
    let _c = setup("required", &[&nvml_arg()]);
    // Job A holds all four GPUs of n1 in a partition with OverSubscribe=FORCE.
    let _a = hold_in("shared", "n1", "gpu:4");
    let ran = srun("-p shared -w n1 -n2 --desi-gpu-map=contiguous")
        .probe(probe::FULL)
        .ok();
    assert_two_unmapped(ran, "n1");
}

#[test]
fn a_step_without_gpus_inside_a_gpu_allocation_gets_none() {
    let _c = setup("required", &[&nvml_arg()]);
    // The allocation holds n1's 4 GPUs; the step asks for none (22.05
    // refuses --gres=none once the job used --gpus-per-node, so the
    // allocation asks with --gres).
    let ran = salloc("-N1 -n2 -w n1 --gres=gpu:4 --desi-gpu-map=contiguous")
        .probe(&format!("srun -n2 --gres=none bash -c '{}'", probe::FULL))
        .ok();
    assert_two_unmapped(ran, "n1");
}

#[test]
fn a_site_default_is_silent_on_cpu_only_steps() {
    let _c = setup("required", &["default=contiguous", &nvml_arg()]);
    assert_two_unmapped(srun("-N1 -n2 -w n1").probe(probe::FULL).ok(), "n1").quiet();
    // The same default still maps a GPU step.
    srun("-N1 -n2 -w n1 --gpus-per-node=4")
        .probe(probe::FULL)
        .ok()
        .rows_are(&["0 n1 0 0,1 1 contiguous 4", "1 n1 1 2,3 1 contiguous 4"]);
}

// ------------------------------------------------ stale flags

#[test]
fn a_step_nested_in_a_mapped_task_drops_the_inherited_flag() {
    let _c = setup("required", &[]);
    // The outer task is mapped (GPU 0, flag set); the inner srun, without
    // the option, must not claim a mapping it did not get. The method stays:
    // it is also the user's, for exec and the task prolog.
    srun("-N1 -n1 -w n1 --gpus-per-node=4 --desi-gpu-map=contiguous")
        .probe(&format!("srun --overlap -n1 bash -c '{}'", probe::FULL))
        .ok()
        .rows_are(&["0 n1 0 0,1,2,3 unset contiguous unset"]);
}

#[test]
fn a_flag_in_the_users_environment_is_removed_where_nothing_is_mapped() {
    let _c = setup("required", &[]);
    for option in ["--desi-gpu-map=none", "--gpus-per-node=4"] {
        srun("-N1 -n2 -w n1 --gpus-per-node=4")
            .arg(option)
            .env("DESI_GPU_MAPPED", "1")
            .env("DESI_GPU_MAP_METHOD", "contiguous")
            .env("DESI_GPU_MAP_NODE_GPUS", "4")
            .probe(probe::FULL)
            .run()
            // The flag and the GPU count go; the method is the user's (for
            // exec and the task prolog) and stays.
            .rows_are(&[
                "0 n1 0 0,1,2,3 unset contiguous unset",
                "1 n1 1 0,1,2,3 unset contiguous unset",
            ]);
    }
}

// ------------------------------------------------ the user's list

#[test]
fn a_list_exported_on_a_no_gpu_env_node_is_not_taken_for_slurms() {
    let _c = setup("required", &[&nvml_arg()]);
    // n4 says Flags=no_gpu_env: Slurm sets only SLURM_GPUS_ON_NODE and
    // SLURM_STEP_GPUS, so a CUDA_VISIBLE_DEVICES the user exports survives.
    // Job A holds GPU 0; the step gets GPU 1 and exports 0.
    let _a = hold("n4", "gpu:1");
    // NVML sees both GPUs of n4 and cannot tell which is the step's: the
    // task runs as the user made it, without the flag.
    let ran = srun("-N1 -n1 -w n4 --gres=gpu:1 --desi-gpu-map=contiguous")
        .env("CUDA_VISIBLE_DEVICES", "0")
        .probe(probe::FULL)
        .ok()
        .rows_are(&["0 n4 0 0 unset unset unset"]);
    let lines = ran.said();
    assert_eq!(lines.len(), 1, "{ran}");
    assert!(
        lines[0].contains("NVML finds 2 GPUs but SLURM_GPUS_ON_NODE=1"),
        "{lines:?}"
    );
}

/// `srun -N1 -n2 -w n4 --gpus-per-node=2 --desi-gpu-map=contiguous` (n4
/// says Flags=no_gpu_env, so NVML lists its 2 GPUs) with `exports` in its
/// environment, each task printing `T rank CUDA_VISIBLE_DEVICES VAR flag`.
fn no_gpu_env_step(var: &str, exports: &[(&str, &str)]) -> Ran {
    let probe = format!(
        r#"echo "T $SLURM_PROCID ${{CUDA_VISIBLE_DEVICES-unset}} ${{{var}-unset}} ${{DESI_GPU_MAPPED-unset}}""#
    );
    exports
        .iter()
        .fold(
            srun("-N1 -n2 -w n4 --gpus-per-node=2 --desi-gpu-map=contiguous"),
            |job, (name, value)| job.env(name, value),
        )
        .probe(&probe)
        .ok()
}

#[test]
fn a_stale_list_on_a_no_gpu_env_node_is_replaced_by_nvmls() {
    // A user in a GPU session submits with its lists exported; n4 (whole,
    // Flags=no_gpu_env) keeps them. The list is the user's, not Slurm's
    // binding, and a malformed one does not stop NVML's list either.
    let _c = setup("required", &[&nvml_arg()]);
    for stale in ["5,6", "0,0"] {
        let exports = [
            ("CUDA_VISIBLE_DEVICES", stale),
            ("ROCR_VISIBLE_DEVICES", stale),
        ];
        let want = [0, 1].map(|i| format!("{i} GPU-fake-n4-{i} {stale} 1"));
        no_gpu_env_step("ROCR_VISIBLE_DEVICES", &exports)
            .rows_are(&[want[0].as_str(), want[1].as_str()])
            .quiet();
    }
}

// ------------------------------------------------ NVML's list

/// Asserts that NVML was initialised once on `node` since
/// `cluster.sh nvml clear-log`: one init per step per node.
#[track_caller]
fn assert_one_nvml_init(node: &str) {
    let inits = cluster(&["nvml", "log"]);
    let on_node = format!("init {node} ");
    assert_eq!(
        inits.lines().filter(|l| l.starts_with(&on_node)).count(),
        1,
        "one NVML init per step per node:\n{inits}"
    );
}

#[test]
fn nvml_uuids_when_slurm_sets_only_a_count() {
    // n4's gres.conf has Flags=no_gpu_env: Slurm sets SLURM_GPUS_ON_NODE=2
    // and no list, so the plugin maps NVML's UUIDs (the fake library's,
    // chosen with nvml=PATH), loaded once for the step.
    let _c = setup("required", &[&nvml_arg()]);
    cluster(&["nvml", "clear-log"]);
    srun("-N1 -n3 -w n4 --gres=gpu:2 --desi-gpu-map=roundrobin")
        .probe(probe::GPU)
        .ok()
        .rows_are(&[
            "0 n4 0 GPU-fake-n4-0 1",
            "1 n4 1 GPU-fake-n4-1 1",
            "2 n4 2 GPU-fake-n4-0 1",
        ]);
    assert_one_nvml_init("n4");
}

#[test]
fn untracked_whole_node_maps_nvml_only_where_the_site_opts_in() {
    let _c = setup("required", &["untracked=whole-node", &nvml_arg()]);
    cluster(&["nvml", "clear-log"]);
    srun("-N1 -n3 -w n3 --exclusive --desi-gpu-map=roundrobin")
        .probe(probe::FULL)
        .ok()
        .rows_are(&[
            "0 n3 0 GPU-fake-n3-0 1 roundrobin 2",
            "1 n3 1 GPU-fake-n3-1 1 roundrobin 2",
            "2 n3 2 GPU-fake-n3-0 1 roundrobin 2",
        ]);
    assert_one_nvml_init("n3");
}

#[test]
fn nvml_lists_with_commas_or_duplicates_are_refused() {
    let _c = setup("required", &[&nvml_arg()]);
    for (style, want) in [
        ("comma", "has the entry \"GPU-fake-n4-0,100\""),
        ("duplicate", "names \"GPU-fake-n4-dup\" twice"),
    ] {
        cluster(&["nvml", "set", &format!("uuids.n4={style}")]);
        let ran = srun("-N1 -n2 -w n4 --gres=gpu:2 --desi-gpu-map=contiguous")
            .probe(probe::FULL)
            .ok()
            .rows_are(&[
                "0 n4 0 unset unset unset unset",
                "1 n4 1 unset unset unset unset",
            ]);
        let lines = ran.said();
        assert_eq!(lines.len(), 1, "{ran}");
        assert!(
            lines[0].contains("NVML's device list is unusable") && lines[0].contains(want),
            "{style}: {lines:?}"
        );
    }
    cluster(&["nvml", "reset"]);
}

// ------------------------------------------------ never wider than the grant

#[test]
fn odd_inherited_gpu_lists_are_left_intact() {
    // A step without GPUs, run from an environment with an odd list: each
    // task's environment is exactly what it is without the plugin.
    let _c = setup("required", &[]);
    let many: Vec<String> = (0..5000).map(|i| i.to_string()).collect();
    let many = many.join(",");
    let probe = r#"echo "L $SLURM_LOCALID ${CUDA_VISIBLE_DEVICES-unset} ${DESI_GPU_MAPPED-unset}""#;
    for value in ["", "garbage,,x", "0,0", "NoDevFiles", many.as_str()] {
        let step = |option: &str| {
            srun("-N1 -n1 -w n1")
                .args(option)
                .env("CUDA_VISIBLE_DEVICES", value)
                .probe(probe)
        };
        let plain = step("").run();
        let mapped = step("--desi-gpu-map=contiguous").ok();
        assert_eq!(mapped.stdout(), plain.stdout(), "{value:.40}");
        assert!(
            mapped.stdout().starts_with("L 0 ") && mapped.stdout().trim_end().ends_with(" unset")
        );
        let lines = mapped.said();
        assert_eq!(lines.len(), 1, "{value:.40}: {mapped}");
        assert!(lines[0].contains("no GPUs are allocated"), "{mapped}");
        assert!(lines[0].len() < 400, "{}", lines[0]);
    }
}

#[test]
fn user_environment_cannot_widen_a_partial_allocation() {
    // Every list a task ends up with stays within Slurm's grant (GPUs 2,3),
    // whichever vendor's lists carry the GPU (src/runtime/). On AMD the
    // filter is ROCR_VISIBLE_DEVICES; CUDA_VISIBLE_DEVICES and
    // GPU_DEVICE_ORDINAL are indices into it, not the user's 0,1.
    let cases: [(&str, [&str; 4]); 2] = [
        (
            "vendor=nvidia",
            [
                "S 0 2,3 2,3 2,3 2,3",
                "S 1 3,2 2,3 2,3 2,3",
                "S 2 2,3 2,3 2,3 2,3",
                "S 3 3,2 2,3 2,3 2,3",
            ],
        ),
        (
            "vendor=amd",
            [
                "S 0 0,1 2,3 0,1 2,3",
                "S 1 0,1 3,2 0,1 2,3",
                "S 2 0,1 2,3 0,1 2,3",
                "S 3 0,1 3,2 0,1 2,3",
            ],
        ),
    ];
    for (vendor, want) in cases {
        let _c = setup("required", &["visible=rotate", vendor]);
        let _held = hold("n1", "gpu:2");
        let probe = r#"echo "S $SLURM_LOCALID $CUDA_VISIBLE_DEVICES ${ROCR_VISIBLE_DEVICES-unset} ${GPU_DEVICE_ORDINAL-unset} ${ZE_AFFINITY_MASK-unset}""#;
        let ran = [
            "CUDA_VISIBLE_DEVICES",
            "ROCR_VISIBLE_DEVICES",
            "GPU_DEVICE_ORDINAL",
            "ZE_AFFINITY_MASK",
            "SLURM_STEP_GPUS",
        ]
        .iter()
        .fold(
            srun("-N1 -n4 -w n1 --gres=gpu:2 --desi-gpu-map=roundrobin"),
            |job, var| job.env(var, "0,1"),
        )
        .env("SLURM_GPUS_ON_NODE", "4")
        .probe(probe)
        .ok();
        assert_eq!(ran.lines("S "), want, "{vendor}: {ran}");
    }
}
