//! The plugin's promises where they broke before (issue 8): never a GPU
//! outside the step's grant, `DESI_GPU_MAPPED=1` only where the plugin
//! mapped the task, and clear errors for bad site or user input. Run on the
//! local test cluster by `tests/run-cluster-tests.sh`; each case failed
//! against the plugin before the fix.
//!
//! The test nodes declare 64 CPUs on a 2-CPU host: exactly the regime in
//! which "the job holds every CPU" once passed for "the job holds the node".
#![cfg(feature = "cluster-tests")]

mod common;
use common::*;
use std::process::Output;
use std::sync::MutexGuard;

/// Each task prints `T rank node local CUDA_VISIBLE_DEVICES flag method gpus`.
const FULL_PROBE: &str = r#"echo "T $SLURM_PROCID $(hostname) $SLURM_LOCALID ${CUDA_VISIBLE_DEVICES-unset} ${DESI_GPU_MAPPED-unset} ${DESI_GPU_MAP_METHOD-unset} ${DESI_GPU_MAP_NODE_GPUS-unset}""#;

/// The lines the plugin printed.
fn said(out: &Output) -> Vec<String> {
    sorted_lines(&out.stderr, |l| l.starts_with("desi-gpu-map: "))
}

/// `srun ARGS bash -c FULL_PROBE`, ARGS as one string; it must succeed.
fn probe(srun: &str) -> Output {
    let args: Vec<&str> = srun.split_whitespace().collect();
    let out = run("srun", &[&args[..], &["bash", "-c", FULL_PROBE]].concat());
    assert!(out.status.success(), "srun {srun}:\n{}", show(&out));
    out
}

/// Four verbose contiguous tasks on n1's four GPUs, each task's row.
fn four_on_n1() -> Output {
    probe("-N1 -n4 -w n1 --gpus-per-node=4 --desi-gpu-map=verbose,contiguous")
}

/// Each of [`four_on_n1`]'s tasks mapped once, to its own GPU.
const FOUR_MAPPED_ONCE: [&str; 4] = [
    "0 n1 0 0 1 contiguous 4",
    "1 n1 1 1 1 contiguous 4",
    "2 n1 2 2 1 contiguous 4",
    "3 n1 3 3 1 contiguous 4",
];

/// Asserts that the two tasks on `node` ran without GPU or flag.
fn assert_two_unmapped(out: &Output, node: &str) {
    assert_eq!(
        probe_rows(&text(&out.stdout)),
        rows(&[
            &format!("0 {node} 0 unset unset unset unset"),
            &format!("1 {node} 1 unset unset unset unset"),
        ]),
        "{}",
        show(out)
    );
}

fn nvml_arg() -> String {
    format!("nvml={}", fake_nvml())
}

// ------------------------------------------------ no GPUs, no mapping

#[test]
fn cpu_only_steps_beside_a_working_nvml_get_no_gpu() {
    let _c = setup("required", &[&nvml_arg()]);
    // A whole node without a GPU request (it once got every NVML GPU),
    // and a small step on a node with GPUs.
    for (node, srun) in [
        ("n3", "-N1 -n2 -w n3 --exclusive --desi-gpu-map=contiguous"),
        ("n1", "-N1 -n2 -w n1 --desi-gpu-map=contiguous"),
    ] {
        let out = probe(srun);
        assert_two_unmapped(&out, node);
        assert_eq!(
            said(&out),
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
    let mut c = slurm(
        "srun",
        &[
            "-N1",
            "-n2",
            "-w",
            "n1",
            "--desi-gpu-map=contiguous",
            "bash",
            "-c",
            FULL_PROBE,
        ],
    );
    for (name, value) in [
        ("CUDA_VISIBLE_DEVICES", "0,1"),
        ("SLURM_STEP_GPUS", "0,1"),
        ("SLURM_GPUS_ON_NODE", "2"),
        ("ROCR_VISIBLE_DEVICES", "0,1"),
    ] {
        c.env(name, value);
    }
    let out = c.output().expect("srun");
    assert!(out.status.success(), "{}", show(&out));
    let rows_got = probe_rows(&text(&out.stdout));
    for row in rows_got.lines() {
        let fields: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            fields.get(4..),
            Some(&["unset", "unset", "unset"][..]),
            "{}",
            show(&out)
        );
        assert_ne!(fields.get(3), Some(&"0"), "{}", show(&out));
    }
}

#[test]
fn cpu_only_job_in_a_shared_partition_beside_a_gpu_job_gets_no_gpu() {
    let _c = setup("required", &[&nvml_arg()]);
    // Job A holds all four GPUs of n1 in a partition with OverSubscribe=FORCE.
    let _a = hold_in("shared", "n1", "gpu:4");
    let out = probe("-p shared -w n1 -n2 --desi-gpu-map=contiguous");
    assert_two_unmapped(&out, "n1");
}

#[test]
fn a_step_without_gpus_inside_a_gpu_allocation_gets_none() {
    let _c = setup("required", &[&nvml_arg()]);
    // The allocation holds n1's 4 GPUs; the step asks for none (22.05
    // refuses --gres=none once the job used --gpus-per-node, so the
    // allocation asks with --gres).
    let script = format!("srun -n2 --gres=none bash -c '{FULL_PROBE}'");
    let out = run(
        "salloc",
        &[
            "-N1",
            "-n2",
            "-w",
            "n1",
            "--gres=gpu:4",
            "--desi-gpu-map=contiguous",
            "bash",
            "-c",
            &script,
        ],
    );
    assert!(out.status.success(), "{}", show(&out));
    assert_two_unmapped(&out, "n1");
}

#[test]
fn a_site_default_is_silent_on_cpu_only_steps() {
    let _c = setup("required", &["default=contiguous", &nvml_arg()]);
    let out = probe("-N1 -n2 -w n1");
    assert_two_unmapped(&out, "n1");
    assert_eq!(said(&out), Vec::<String>::new(), "{}", show(&out));
    // The same default still maps a GPU step.
    let out = probe("-N1 -n2 -w n1 --gpus-per-node=4");
    assert_eq!(
        probe_rows(&text(&out.stdout)),
        rows(&["0 n1 0 0 1 contiguous 4", "1 n1 1 1 1 contiguous 4"])
    );
}

#[test]
fn untracked_whole_node_maps_nvml_only_where_the_site_opts_in() {
    let _c = setup("required", &["untracked=whole-node", &nvml_arg()]);
    cluster(&["nvml", "clear-log"]);
    let out = probe("-N1 -n3 -w n3 --exclusive --desi-gpu-map=roundrobin");
    assert_eq!(
        probe_rows(&text(&out.stdout)),
        rows(&[
            "0 n3 0 GPU-fake-n3-0 1 roundrobin 2",
            "1 n3 1 GPU-fake-n3-1 1 roundrobin 2",
            "2 n3 2 GPU-fake-n3-0 1 roundrobin 2",
        ])
    );
    let inits = cluster(&["nvml", "log"]);
    assert_eq!(
        inits.lines().filter(|l| l.starts_with("init n3 ")).count(),
        1,
        "one NVML init per step per node:\n{inits}"
    );
}

// ------------------------------------------------ stale flags

#[test]
fn a_step_nested_in_a_mapped_task_drops_the_inherited_flag() {
    let _c = setup("required", &[]);
    // The outer task is mapped (GPU 0, flag set); the inner srun, without
    // the option, must not claim a mapping it did not get.
    let inner = format!("srun --overlap -n1 bash -c '{FULL_PROBE}'");
    let out = run(
        "srun",
        &[
            "-N1",
            "-n1",
            "-w",
            "n1",
            "--gpus-per-node=4",
            "--desi-gpu-map=contiguous",
            "bash",
            "-c",
            &inner,
        ],
    );
    assert!(out.status.success(), "{}", show(&out));
    let rows_got = probe_rows(&text(&out.stdout));
    let fields: Vec<&str> = rows_got.split_whitespace().collect();
    assert_eq!(
        fields.get(4..),
        Some(&["unset", "unset", "unset"][..]),
        "{}",
        show(&out)
    );
}

#[test]
fn a_flag_in_the_users_environment_is_removed_where_nothing_is_mapped() {
    let _c = setup("required", &[]);
    for option in ["--desi-gpu-map=none", "--gpus-per-node=4"] {
        let mut c = slurm(
            "srun",
            &[
                "-N1",
                "-n2",
                "-w",
                "n1",
                "--gpus-per-node=4",
                option,
                "bash",
                "-c",
                FULL_PROBE,
            ],
        );
        c.env("DESI_GPU_MAPPED", "1")
            .env("DESI_GPU_MAP_METHOD", "contiguous")
            .env("DESI_GPU_MAP_NODE_GPUS", "4");
        let out = c.output().expect("srun");
        assert_eq!(
            probe_rows(&text(&out.stdout)),
            rows(&[
                "0 n1 0 0,1,2,3 unset unset unset",
                "1 n1 1 0,1,2,3 unset unset unset"
            ]),
            "{option}: {}",
            show(&out)
        );
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
    let mut c = slurm(
        "srun",
        &[
            "-N1",
            "-n1",
            "-w",
            "n4",
            "--gres=gpu:1",
            "--desi-gpu-map=contiguous",
            "bash",
            "-c",
            FULL_PROBE,
        ],
    );
    c.env("CUDA_VISIBLE_DEVICES", "0");
    let out = c.output().expect("srun");
    assert!(out.status.success(), "{}", show(&out));
    // NVML sees both GPUs of n4 and cannot tell which is the step's: the
    // task runs as the user made it, without the flag.
    assert_eq!(
        probe_rows(&text(&out.stdout)),
        rows(&["0 n4 0 0 unset unset unset"]),
        "{}",
        show(&out)
    );
    let lines = said(&out);
    assert_eq!(lines.len(), 1, "{}", show(&out));
    assert!(
        lines[0].contains("NVML finds 2 GPUs but SLURM_GPUS_ON_NODE=1"),
        "{lines:?}"
    );
}

/// `srun -N1 -n2 -w n4 --gpus-per-node=2 --desi-gpu-map=contiguous` (n4
/// says Flags=no_gpu_env, so NVML lists its 2 GPUs) with `exports` in its
/// environment, each task printing `T rank CUDA_VISIBLE_DEVICES VAR flag`.
fn no_gpu_env_step(var: &str, exports: &[(&str, &str)]) -> Output {
    let probe = format!(
        r#"echo "T $SLURM_PROCID ${{CUDA_VISIBLE_DEVICES-unset}} ${{{var}-unset}} ${{DESI_GPU_MAPPED-unset}}""#
    );
    let mut c = slurm(
        "srun",
        &[
            "-N1",
            "-n2",
            "-w",
            "n4",
            "--gpus-per-node=2",
            "--desi-gpu-map=contiguous",
            "bash",
            "-c",
            &probe,
        ],
    );
    for (name, value) in exports {
        c.env(name, value);
    }
    let out = c.output().expect("srun");
    assert!(out.status.success(), "{}", show(&out));
    out
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
        let _c = setup("required", &[&nvml_arg(), vendor]);
        let out = no_gpu_env_step(var, &[(var, "7,9")]);
        assert_eq!(
            probe_rows(&text(&out.stdout)),
            rows(&["0 unset 7,9 unset", "1 unset 7,9 unset"]),
            "{vendor}: {}",
            show(&out)
        );
        let lines = said(&out);
        assert_eq!(lines.len(), 1, "{vendor}: {}", show(&out));
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
        let _c = setup("required", &[&nvml_arg(), vendor]);
        let out = no_gpu_env_step(var, &[]);
        assert_eq!(
            probe_rows(&text(&out.stdout)),
            rows(&["0 unset unset unset", "1 unset unset unset"]),
            "{vendor}: {}",
            show(&out)
        );
        assert_eq!(said(&out).len(), 1, "{vendor}: {}", show(&out));
    }
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
        let out = no_gpu_env_step("ROCR_VISIBLE_DEVICES", &exports);
        assert_eq!(
            probe_rows(&text(&out.stdout)),
            rows(&[
                &format!("0 GPU-fake-n4-0 {stale} 1"),
                &format!("1 GPU-fake-n4-1 {stale} 1"),
            ]),
            "{stale}: {}",
            show(&out)
        );
        assert_eq!(said(&out), Vec::<String>::new(), "{stale}: {}", show(&out));
    }
}

#[test]
fn nvml_lists_with_commas_or_duplicates_are_refused() {
    let _c = setup("required", &[&nvml_arg()]);
    for (style, want) in [
        ("comma", "has the entry \\\"GPU-fake-n4-0,100\\\""),
        ("duplicate", "names \\\"GPU-fake-n4-dup\\\" twice"),
    ] {
        cluster(&["nvml", "set", &format!("uuids.n4={style}")]);
        let out = probe("-N1 -n2 -w n4 --gres=gpu:2 --desi-gpu-map=contiguous");
        assert_eq!(
            probe_rows(&text(&out.stdout)),
            rows(&[
                "0 n4 0 unset unset unset unset",
                "1 n4 1 unset unset unset unset"
            ]),
            "{style}: {}",
            show(&out)
        );
        let lines = said(&out);
        assert_eq!(lines.len(), 1, "{}", show(&out));
        let want = want.replace('\\', "");
        assert!(
            lines[0].contains("NVML's device list is unusable") && lines[0].contains(&want),
            "{style}: {lines:?}"
        );
    }
    cluster(&["nvml", "reset"]);
}

// ------------------------------------------------ site and user input

#[test]
fn a_flag_that_a_loader_reads_is_refused() {
    for flag in ["flag=LD_AUDIT", "flag=BASH_ENV", "flag=lowercase"] {
        let _c = setup("required", &[flag]);
        let out = run("srun", &["-N1", "-n1", "-w", "n1", "true"]);
        assert!(!out.status.success(), "{flag}: {}", show(&out));
        let err = text(&out.stderr);
        assert!(
            err.contains(&format!("bad plugstack argument \"{flag}\""))
                && err.contains("valid arguments"),
            "{flag}: {err}"
        );
        drop(_c);
    }
    let _c = setup("required", &[]);
    assert!(
        run("srun", &["-N4", "-n4", "true"]).status.success(),
        "no node drained"
    );
}

#[test]
fn help_works_as_documented_and_only_on_the_command_line() {
    let _c = setup("required", &[]);
    let before = job_count();
    // The documented form: srun needs a command, none is run.
    let out = run("srun", &["--desi-gpu-map=help", "true"]);
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        text(&out.stdout).contains("Usage: --desi-gpu-map="),
        "{}",
        show(&out)
    );
    // The environment form is no place for help: a clear error, no job.
    for cmd in ["srun", "sbatch"] {
        let args: &[&str] = if cmd == "srun" {
            &["-n1", "true"]
        } else {
            &["--wrap", "true", "-o", "/dev/null"]
        };
        let mut c = slurm(cmd, args);
        c.env(OPTION_ENV, "help");
        let out = c.output().expect("client");
        assert!(!out.status.success(), "{cmd}: {}", show(&out));
        assert!(
            text(&out.stderr).contains("help is for the command line"),
            "{cmd}: {}",
            show(&out)
        );
    }
    assert_eq!(job_count(), before, "no job was created");
}

#[test]
fn help_from_the_environment_ignores_the_programs_arguments() {
    let _c = setup("required", &[]);
    let before = job_count();
    // A word of the program (or the batch script) that looks like the
    // option is not the command-line form: the environment's help is
    // refused, as the README promises, and nothing runs.
    let script = format!("{}/help-args.sh", state_dir());
    std::fs::write(&script, "#!/bin/bash\ntrue\n").expect("script");
    for (cmd, args) in [
        ("srun", vec!["-w", "n1", "echo", "--desi-gpu-map-x"]),
        ("srun", vec!["-w", "n1", "echo", "--desi-gpu-map=help"]),
        ("srun", vec!["-J", "--desi-gpu-map=help", "true"]),
        ("salloc", vec!["-w", "n1", "echo", "--desi-gpu-map=help"]),
        (
            "sbatch",
            vec!["-o", "/dev/null", &script, "--desi-gpu-map=help"],
        ),
    ] {
        let mut c = slurm(cmd, &args);
        c.env(OPTION_ENV, "help");
        let out = c.output().expect("client");
        assert!(!out.status.success(), "{cmd} {args:?}: {}", show(&out));
        assert!(
            !text(&out.stdout).contains("Usage:")
                && text(&out.stderr).contains("help is for the command line"),
            "{cmd} {args:?}: {}",
            show(&out)
        );
    }
    assert_eq!(job_count(), before, "no job was created");
    // srun's own option, spaced or after an option's value, still counts.
    for args in [
        &["-n", "1", "--desi-gpu-map", "help", "true"][..],
        &["-w", "n1", "--desi-gpu-map=help", "echo", "x"],
    ] {
        let mut c = slurm("srun", args);
        c.env(OPTION_ENV, "help");
        let out = c.output().expect("srun");
        assert!(out.status.success(), "{args:?}: {}", show(&out));
        assert!(
            text(&out.stdout).contains("Usage: --desi-gpu-map="),
            "{args:?}: {}",
            show(&out)
        );
        assert!(!text(&out.stdout).contains("\nx\n"), "{}", show(&out));
    }
    assert_eq!(job_count(), before, "no job was created");
}

#[test]
fn the_plugin_from_two_paths_maps_once_and_says_so_once() {
    let _c = setup("required", &[]);
    // A copy of the .so at another path is another library, with its own
    // state: Slurm gives --desi-gpu-map to the first line only.
    let dir = format!("{}/plugin-copy", state_dir());
    std::fs::create_dir_all(&dir).expect("mkdir");
    let copy = format!("{dir}/second-copy.so");
    std::fs::copy(so(), &copy).expect("copy the .so");
    // Dropped in reverse order: the line goes, then n1 restarts without it.
    let _restart = RestartOnDrop("n1");
    let second = format!("{}/plugstack.conf.d/desi-gpu-map-zz-copy.conf", state_dir());
    std::fs::write(&second, format!("required {copy}\n")).expect("second plugstack line");
    let _remove = RemoveOnDrop(second);
    // slurmd runs init once at start: restart n1 so that it reads both lines.
    let log = format!("{}/log/slurmd-n1.log", state_dir());
    let start = std::fs::metadata(&log).map_or(0, |m| m.len());
    cluster(&["restart-node", "n1"]);
    let out = four_on_n1();
    assert_eq!(
        probe_rows(&text(&out.stdout)),
        rows(&FOUR_MAPPED_ONCE),
        "{}",
        show(&out)
    );
    let lines = said(&out);
    let reports = lines.iter().filter(|l| l.contains(" rank=")).count();
    assert_eq!(reports, 4, "one report per task: {lines:?}");
    assert!(
        !lines.iter().any(|l| l.contains("keeping Slurm's")),
        "{lines:?}"
    );
    assert!(
        !text(&out.stderr).contains("provided by both"),
        "{}",
        show(&out)
    );
    let out = run("srun", &["--desi-gpu-map=help", "true"]);
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        text(&out.stdout).matches("Usage:").count(),
        1,
        "{}",
        show(&out)
    );
    // The environment form, sbatch and salloc work, and map once.
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
            FULL_PROBE,
        ],
    );
    c.env(OPTION_ENV, "roundrobin");
    let out = c.output().expect("srun");
    assert_eq!(
        probe_rows(&text(&out.stdout)),
        rows(&["0 n1 0 0 1 roundrobin 4", "1 n1 1 1 1 roundrobin 4"]),
        "{}",
        show(&out)
    );
    let inner = format!("srun -n2 bash -c '{FULL_PROBE}'");
    let out = run(
        "salloc",
        &[
            "-N1",
            "-n2",
            "-w",
            "n1",
            "--gpus-per-node=4",
            "--desi-gpu-map=contiguous",
            "bash",
            "-c",
            &inner,
        ],
    );
    assert_eq!(
        probe_rows(&text(&out.stdout)),
        rows(&["0 n1 0 0 1 contiguous 4", "1 n1 1 1 1 contiguous 4"]),
        "{}",
        show(&out)
    );
    let output = format!("{}/two-copies.out", state_dir());
    let out = run(
        "sbatch",
        &[
            "--wait",
            "-o",
            &output,
            "-N1",
            "-n2",
            "-w",
            "n1",
            "--gpus-per-node=4",
            "--desi-gpu-map=roundrobin",
            "--wrap",
            &inner,
        ],
    );
    assert!(out.status.success(), "{}", show(&out));
    let batch = std::fs::read_to_string(&output).unwrap_or_default();
    assert_eq!(
        probe_rows(&batch),
        rows(&["0 n1 0 0 1 roundrobin 4", "1 n1 1 1 1 roundrobin 4"]),
        "{batch}"
    );
    // One line in slurmd's log, from slurmd's own start, none per step.
    let written = std::fs::read(&log).unwrap_or_default();
    let new = text(
        written
            .get(usize::try_from(start).unwrap_or(0)..)
            .unwrap_or_default(),
    );
    let aside: Vec<&str> = new.lines().filter(|l| l.contains("stands aside")).collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert!(
        aside[0].contains(&copy) && aside[0].contains(&so()),
        "{aside:?}"
    );
}

#[test]
fn the_plugin_loaded_twice_maps_once() {
    let _c = setup("required", &[]);
    let second = format!("{}/plugstack.conf.d/desi-gpu-map-second.conf", state_dir());
    std::fs::write(&second, format!("required {}\n", so())).expect("second plugstack line");
    let _remove = RemoveOnDrop(second);
    let out = four_on_n1();
    assert_eq!(probe_rows(&text(&out.stdout)), rows(&FOUR_MAPPED_ONCE));
    let lines = said(&out);
    let reports = lines.iter().filter(|l| l.contains(" rank=")).count();
    assert_eq!(reports, 4, "one report per task: {lines:?}");
    assert!(
        !lines
            .iter()
            .any(|l| l.contains("narrowed") || l.contains("keeping Slurm's")),
        "the second line took the first one's mapping for Slurm's: {lines:?}"
    );
}

/// Loads the plugin from two plugstack lines: `first` (the harness's own
/// file), then `second` (a file that sorts after it); both name the same
/// `.so`, each with its own mode and arguments.
fn two_lines(first: &[&str], second: &str) -> (MutexGuard<'static, ()>, RemoveOnDrop) {
    let guard = setup(first[0], &first[1..]);
    let path = format!("{}/plugstack.conf.d/desi-gpu-map-z.conf", state_dir());
    std::fs::write(&path, second.replace("SO", &so())).expect("second plugstack line");
    (guard, RemoveOnDrop(path))
}

#[test]
fn a_bad_optional_line_never_hides_a_good_required_one() {
    let (_c, _second) = two_lines(&["optional", "bogus=1"], "required SO\n");
    let out = four_on_n1();
    assert_eq!(
        probe_rows(&text(&out.stdout)),
        rows(&FOUR_MAPPED_ONCE),
        "{}",
        show(&out)
    );
    let lines = said(&out);
    assert!(
        !lines.iter().any(|l| l.contains("misconfigured")),
        "{lines:?}"
    );
}

#[test]
fn a_required_lines_error_is_never_ignored() {
    let (_c, _second) = two_lines(&["optional"], "required SO bogus=1\n");
    let out = run("srun", &["-N1", "-w", "n1", "true"]);
    assert!(!out.status.success(), "{}", show(&out));
    assert!(text(&out.stderr).contains("bogus"), "{}", show(&out));
}

#[test]
fn a_plugstack_value_that_is_not_utf8_is_named_and_quoted() {
    let _c = setup("required", &[]);
    let path = format!("{}/plugstack.conf.d/desi-gpu-map-test.conf", state_dir());
    let mut line = format!("required {} nvml=/opt/", so()).into_bytes();
    line.extend_from_slice(b"\xff\xfelib.so\n");
    std::fs::write(&path, line).expect("plugstack line");
    let out = run("srun", &["-N1", "-w", "n1", "true"]);
    assert!(!out.status.success(), "{}", show(&out));
    let err = text(&out.stderr);
    assert!(
        err.contains("nvml=")
            && err.contains("\"/opt/\u{fffd}\u{fffd}lib.so\"")
            && err.contains("UTF-8"),
        "{}",
        show(&out)
    );
    assert!(!err.contains("C string"), "{}", show(&out));
}

#[test]
fn a_panic_inside_nvml_is_one_line_not_a_backtrace() {
    // A library without nvmlShutdown makes nvml-wrapper panic on drop.
    let dir = format!("{}/nvml/noshutdown", state_dir());
    let lib = format!("{dir}/libnvidia-ml.so.1");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let built = std::process::Command::new("cc")
        .args([
            "-shared",
            "-fPIC",
            "-O2",
            "-DFAKE_NVML_NO_SHUTDOWN",
            "-o",
            &lib,
        ])
        .arg(repo().join("tests/nvml/fake_nvml.c"))
        .arg(format!(
            "-DFAKE_NVML_CONF=\"{}/nvml/fake-nvml.conf\"",
            state_dir()
        ))
        .status()
        .expect("cc");
    assert!(built.success());
    let _c = setup("required", &[&format!("nvml={lib}")]);
    let mut c = slurm(
        "srun",
        &[
            "-N1",
            "-n2",
            "-w",
            "n4",
            "--gres=gpu:2",
            "--desi-gpu-map=contiguous",
            "bash",
            "-c",
            FULL_PROBE,
        ],
    );
    c.env("RUST_BACKTRACE", "1");
    let out = c.output().expect("srun");
    assert!(out.status.success(), "{}", show(&out));
    let err = text(&out.stderr);
    assert!(
        !err.contains("panicked") && !err.contains("backtrace"),
        "{err}"
    );
    let lines = said(&out);
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains("NVML: the library misbehaved"),
        "{lines:?}"
    );
}

/// Removes a file when dropped, even when the test fails.
struct RemoveOnDrop(String);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Restarts a node when dropped, so that its slurmd reads plugstack.conf
/// again (without a test's extra lines), even when the test fails.
struct RestartOnDrop(&'static str);

impl Drop for RestartOnDrop {
    fn drop(&mut self) {
        let _ = std::process::Command::new("bash")
            .arg(repo().join("tests/cluster/cluster.sh"))
            .args(["restart-node", self.0])
            .status();
    }
}

// ------------------------------------------------ desi-gpu-map exec

/// `srun SRUN desi-gpu-map exec EXEC -- bash -c APP`, with the plugin as
/// `setup` left it.
fn exec(srun: &str, exec: &str, app: &str) -> Output {
    let bin = bin();
    let mut all: Vec<&str> = srun.split_whitespace().collect();
    all.extend([bin.as_str(), "exec"]);
    all.extend(exec.split_whitespace());
    all.extend(["--", "bash", "-c", app]);
    run("srun", &all)
}

#[test]
fn exec_becomes_the_application_with_its_exit_code() {
    let _c = setup("required", &[]);
    cluster(&["plugin", "off"]);
    // The application is the task: slurmstepd is its parent, and its exit
    // code is srun's.
    let out = exec(
        "-w n1 -n2 --gpus-per-node=4",
        "--method roundrobin",
        r#"echo "T $SLURM_PROCID $CUDA_VISIBLE_DEVICES $DESI_GPU_MAPPED $(cat /proc/$PPID/comm)"; exit 3"#,
    );
    assert_eq!(out.status.code(), Some(3), "{}", show(&out));
    assert_eq!(
        probe_rows(&text(&out.stdout)),
        rows(&["0 0 1 slurmstepd", "1 1 1 slurmstepd"]),
        "{}",
        show(&out)
    );
    // A command that cannot run: the shell's message and code.
    let bin = bin();
    let data = format!("{}/not-a-program", state_dir());
    std::fs::write(&data, "data\n").unwrap();
    let denied = format!("{data}: Permission denied");
    for (app, code, says) in [
        (
            "no-such-command-here",
            127,
            "no-such-command-here: command not found",
        ),
        (data.as_str(), 126, denied.as_str()),
    ] {
        let out = run("srun", &["-w", "n1", "-n1", &bin, "exec", "--", app]);
        assert_eq!(out.status.code(), Some(code), "{}", show(&out));
        assert!(text(&out.stderr).contains(says), "{}", show(&out));
    }
    // Bad input: nothing runs.
    for (args, says) in [
        (
            &["exec", "--method", "nearest", "--", "touch", "x"][..],
            "invalid --method \"nearest\"",
        ),
        (&["exec"], "no command to run"),
    ] {
        let mut all = vec!["-w", "n1", "-n1", bin.as_str()];
        all.extend(args);
        let out = run("srun", &all);
        assert!(!out.status.success(), "{}", show(&out));
        assert!(text(&out.stderr).contains(says), "{}", show(&out));
    }
}

#[test]
fn scancel_reaches_an_exec_application_as_sigterm() {
    let _c = setup("required", &[]);
    cluster(&["plugin", "off"]);
    let dir = format!("{}/exec-term", state_dir());
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let app = format!("{dir}/app.sh");
    std::fs::write(
        &app,
        format!(
            "trap 'echo term > {dir}/term.$SLURM_PROCID; exit 0' TERM\n\
             echo $CUDA_VISIBLE_DEVICES > {dir}/ready.$SLURM_PROCID\n\
             while :; do sleep 0.1; done\n"
        ),
    )
    .unwrap();
    let wrap = format!(
        "srun -n1 --gpus-per-node=4 {} exec --method contiguous -- bash {app}",
        bin()
    );
    let out = run(
        "sbatch",
        &[
            "--parsable",
            "-o",
            "/dev/null",
            "-w",
            "n1",
            "-n1",
            "--gpus-per-node=4",
            "--wrap",
            &wrap,
        ],
    );
    assert!(out.status.success(), "{}", show(&out));
    let id = text(&out.stdout).trim().to_string();
    let _held = Held(id.clone());
    let ready = format!("{dir}/ready.0");
    let wait_for = |path: &str| {
        (0..200).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(100));
            std::path::Path::new(path).exists()
        })
    };
    assert!(wait_for(&ready), "the application never started");
    assert_eq!(std::fs::read_to_string(&ready).unwrap().trim(), "0");
    let cancelled = run("scancel", &[&id]);
    assert!(cancelled.status.success(), "{}", show(&cancelled));
    assert!(
        wait_for(&format!("{dir}/term.0")),
        "the application got no SIGTERM"
    );
}

#[test]
fn exec_changes_nothing_where_the_plugin_mapped_the_step() {
    let _c = setup("required", &[]);
    // The plugin maps contiguously; exec, asked for roundrobin, stands aside.
    let out = exec(
        "-w n1 -n4 --gres=gpu:2 --desi-gpu-map=contiguous",
        "--verbose --method roundrobin",
        r#"echo "T $SLURM_PROCID $CUDA_VISIBLE_DEVICES $DESI_GPU_MAPPED""#,
    );
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        probe_rows(&text(&out.stdout)),
        rows(&["0 0 1", "1 0 1", "2 1 1", "3 1 1"]),
        "{}",
        show(&out)
    );
    assert!(
        text(&out.stderr).contains("this step is mapped already"),
        "{}",
        show(&out)
    );
}

#[test]
fn a_flag_from_an_outer_step_does_not_stop_exec() {
    let _c = setup("required", &[]);
    cluster(&["plugin", "off"]);
    // What a task of mapped step 0 passes on to a step it starts.
    let out = slurm(
        "srun",
        &[
            "-w",
            "n1",
            "-n4",
            "--gres=gpu:2",
            &bin(),
            "exec",
            "--method",
            "roundrobin",
            "--",
            "bash",
            "-c",
            r#"echo "T $SLURM_PROCID $CUDA_VISIBLE_DEVICES $DESI_GPU_MAPPED $DESI_GPU_MAP_STEP""#,
        ],
    )
    .env("DESI_GPU_MAPPED", "1")
    .env("DESI_GPU_MAP_STEP", "999999.0")
    .env("CUDA_VISIBLE_DEVICES", "1")
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let got = probe_rows(&text(&out.stdout));
    let step = got
        .lines()
        .next()
        .and_then(|l| l.split(' ').nth(3))
        .unwrap_or_default()
        .to_string();
    assert!(step.ends_with(".0") && step != "999999.0", "{got}");
    assert_eq!(
        got,
        rows(&[
            &format!("0 0 1 {step}"),
            &format!("1 1 1 {step}"),
            &format!("2 0 1 {step}"),
            &format!("3 1 1 {step}"),
        ]),
        "{}",
        show(&out)
    );
}

#[test]
fn exec_on_a_step_without_gpus_runs_the_application_unchanged() {
    let _c = setup("required", &[]);
    cluster(&["plugin", "off"]);
    let app = r#"echo "T $SLURM_PROCID ${CUDA_VISIBLE_DEVICES-unset} ${DESI_GPU_MAPPED-unset}""#;
    let out = exec("-w n1 -n2", "--method contiguous", app);
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        probe_rows(&text(&out.stdout)),
        rows(&["0 unset unset", "1 unset unset"])
    );
    assert_eq!(text(&out.stderr), "", "silent without --verbose");
    let out = exec("-w n1 -n2", "--verbose --method contiguous", app);
    assert_eq!(
        said(&out),
        ["desi-gpu-map: node n1: no GPUs are allocated to this step on this node; tasks left unchanged"],
        "{}",
        show(&out)
    );
    // Slurm binds each task itself: its binding stays, without the flag.
    let out = exec("-w n1 -n2 --gpus-per-task=1", "--method roundrobin", app);
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        probe_rows(&text(&out.stdout)),
        rows(&["0 0 unset", "1 1 unset"]),
        "{}",
        show(&out)
    );
}
