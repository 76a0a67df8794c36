//! `desi-gpu-map exec` as a task runs it: the mapping, then the application
//! in its place (the same pid, signal dispositions and mask); batch scripts
//! and special steps run unchanged; the lists it refuses or says why it
//! leaves alone, and the options' words. MPS is in exec_mps.rs.

mod common;

use common::{exec_in_task, exec_said, exec_with, run, stdout, words_of, SHOW_ENV};
use std::process::Command;

#[test]
fn exec_maps_the_task_then_becomes_the_application() {
    // Local task 3 of 6 on 4 GPUs: contiguous gives GPU 1, roundrobin 3.
    for (method, gpu) in [
        ("contiguous", "1"),
        ("roundrobin", "3"),
        ("round-robin", "3"),
    ] {
        let out = exec_in_task("3", &["--method", method, "--", "sh", "-c", SHOW_ENV], &[]);
        assert!(out.status.success(), "{out:?}");
        let words = words_of(&out);
        let method = method.replace('-', "");
        assert_eq!(words[1..], [gpu, "1", method.as_str(), "7.0"], "{out:?}");
    }
    // $DESI_GPU_MAP_METHOD is the default; the exit code is the application's.
    let out = exec_in_task(
        "3",
        &["--", "sh", "-c", "echo $CUDA_VISIBLE_DEVICES; exit 5"],
        &[("DESI_GPU_MAP_METHOD", "roundrobin")],
    );
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    assert_eq!(stdout(&out), "3\n");
}

#[test]
fn exec_keeps_the_pid_and_steps_aside_for_the_plugins_mapping() {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_desi-gpu-map"));
    let child = cmd
        .args(["exec", "--allow-outside-slurm", "--", "sh", "-c", "echo $$"])
        .env_remove("SLURM_STEP_ID")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert_eq!(stdout(&out).trim(), pid.to_string(), "exec, not a child");
    // The plugin mapped this step (7.0): nothing changes.
    let mapped = [
        ("CUDA_VISIBLE_DEVICES", "2"),
        ("DESI_GPU_MAPPED", "1"),
        ("DESI_GPU_MAP_STEP", "7.0"),
        ("DESI_GPU_MAP_METHOD", "contiguous"),
    ];
    let out = exec_in_task(
        "0",
        &["--method", "roundrobin", "--", "sh", "-c", SHOW_ENV],
        &mapped,
    );
    let words = words_of(&out);
    assert_eq!(words[1..], ["2", "1", "contiguous", "7.0"], "{out:?}");
    // An outer step's mapping (6.0) does not stop it.
    let outer = [("DESI_GPU_MAPPED", "1"), ("DESI_GPU_MAP_STEP", "6.0")];
    let out = exec_in_task(
        "0",
        &["--method", "roundrobin", "--", "sh", "-c", SHOW_ENV],
        &outer,
    );
    let words = words_of(&out);
    assert_eq!(words[1..], ["0", "1", "roundrobin", "7.0"], "{out:?}");
}

#[test]
fn exec_refuses_bad_input_and_runs_nothing() {
    let marker = std::env::temp_dir().join(format!("dgm-exec-{}", std::process::id()));
    let touch = marker.display().to_string();
    for (args, says) in [
        (
            &["--method", "nearest", "--", "touch", touch.as_str()][..],
            "invalid --method \"nearest\"",
        ),
        (&[][..], "no command to run"),
        (&["touch", touch.as_str()][..], "unexpected argument"),
    ] {
        let out = exec_in_task("0", args, &[]);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(says),
            "{out:?}"
        );
    }
    let out = exec_in_task(
        "0",
        &["--", "touch", &touch],
        &[("DESI_GPU_MAP_METHOD", "bogus")],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    // Outside a Slurm step.
    let out = run(&["exec", "--", "touch", &touch]);
    if std::env::var_os("SLURM_STEP_ID").is_none() {
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("not inside a Slurm job"));
    }
    assert!(!marker.exists(), "nothing ran");
    // Commands that cannot run: the shell's codes.
    let out = exec_in_task("0", &["--", "no-such-command-here"], &[]);
    assert_eq!(out.status.code(), Some(127), "{out:?}");
    let data = std::env::temp_dir().join(format!("dgm-data-{}", std::process::id()));
    std::fs::write(&data, "data\n").unwrap();
    let out = exec_in_task("0", &["--", &data.display().to_string()], &[]);
    let _ = std::fs::remove_file(&data);
    assert_eq!(out.status.code(), Some(126), "{out:?}");
}

/// A batch script's environment on a 2-GPU node: Slurm sets the job's id
/// (both spellings) and its GPUs, and no SLURM_STEP_ID (only srun steps
/// get one: env_array_for_step in Slurm's src/common/env.c).
const BATCH: [(&str, &str); 5] = [
    ("SLURM_JOB_ID", "7"),
    ("SLURM_JOBID", "7"),
    ("SLURM_JOB_GPUS", "0,1"),
    ("CUDA_VISIBLE_DEVICES", "0,1"),
    ("SLURMD_NODENAME", "n1"),
];

#[test]
fn exec_in_a_batch_script_or_special_step_runs_the_application_unchanged() {
    let special = |id: &'static str| [&BATCH[..], &[("SLURM_STEP_ID", id)]].concat();
    for (vars, why) in [
        (
            BATCH.to_vec(),
            "not in an srun step (SLURM_JOB_ID=\"7\" is set, SLURM_STEP_ID is not",
        ),
        (
            vec![("SLURM_JOBID", "7"), ("CUDA_VISIBLE_DEVICES", "0,1")],
            "not in an srun step (SLURM_JOBID=\"7\" is set, SLURM_STEP_ID is not",
        ),
        (
            special("4294967291"),
            "the batch step (SLURM_STEP_ID=4294967291)",
        ),
        // Slurm 26.05 writes the batch step's id signed.
        (special("-5"), "the batch step (SLURM_STEP_ID=-5)"),
        (
            special("4294967290"),
            "the interactive step (SLURM_STEP_ID=4294967290)",
        ),
        (
            special("4294967292"),
            "the extern step (SLURM_STEP_ID=4294967292)",
        ),
    ] {
        let out = exec_with(
            &vars,
            &["--method", "roundrobin", "--", "sh", "-c", SHOW_ENV],
        );
        assert!(out.status.success(), "{vars:?}: {out:?}");
        let words = words_of(&out);
        assert_eq!(words[1..], ["0,1", "unset", "unset", "unset"], "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), "", "silent: {vars:?}");
        let out = exec_with(&vars, &["--verbose", "--", "sh", "-c", "exit 3"]);
        assert_eq!(out.status.code(), Some(3), "{vars:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(why), "{err}");
        assert!(err.ends_with("; sh runs unchanged\n"), "{err}");
    }
    // The application is exec'd there too: the same pid.
    let child = Command::new(env!("CARGO_BIN_EXE_desi-gpu-map"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(BATCH)
        .args(["exec", "--", "sh", "-c", "echo $$"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert_eq!(stdout(&out).trim(), pid.to_string(), "exec, not a child");
    // No job at all: refused, nothing run.
    let marker = std::env::temp_dir().join(format!("dgm-batch-{}", std::process::id()));
    let out = exec_with(&[], &["--", "touch", &marker.display().to_string()]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not inside a Slurm job (neither SLURM_STEP_ID nor SLURM_JOB_ID is set)"),
        "{err}"
    );
    assert!(!marker.exists(), "nothing ran");
}

/// The application's ignored and blocked signals (`SigIgn`, `SigBlk` of
/// /proc/self/status) where `parent` started `desi-gpu-map exec` with
/// these variables: `parent` is a shell line ending in `exec "$@"`.
fn signals_of_the_application(parent: &[&str], vars: &[(&str, &str)]) -> (u64, u64) {
    let out = Command::new(parent[0])
        .args(&parent[1..])
        .arg(env!("CARGO_BIN_EXE_desi-gpu-map"))
        .args(["exec", "--", "grep", "^Sig", "/proc/self/status"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(vars.iter().copied())
        .output()
        .expect("run the parent");
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    let mask = |name: &str| {
        let line = text.lines().find_map(|l| l.strip_prefix(name)).unwrap();
        u64::from_str_radix(line.trim(), 16).unwrap()
    };
    (mask("SigIgn:"), mask("SigBlk:"))
}

const SIGPIPE: u64 = 1 << (13 - 1);

const SIGUSR1: u64 = 1 << (10 - 1);

#[test]
fn exec_keeps_the_callers_signal_dispositions_and_mask() {
    let task = [
        ("SLURM_JOB_ID", "7"),
        ("SLURM_STEP_ID", "0"),
        ("SLURM_LOCALID", "0"),
        ("SLURM_PROCID", "0"),
        ("SLURM_NODEID", "0"),
        ("SLURM_STEP_TASKS_PER_NODE", "1"),
        ("CUDA_VISIBLE_DEVICES", "0,1"),
        ("SLURM_STEP_GPUS", "0,1"),
        ("SLURM_GPUS_ON_NODE", "2"),
    ];
    // A mapped task, and one run unchanged (a batch script).
    for vars in [&task[..], &BATCH[..]] {
        let ignoring = ["bash", "-c", "trap '' PIPE; exec \"$@\"", "bash"];
        let (ignored, _) = signals_of_the_application(&ignoring, vars);
        assert_eq!(
            ignored & SIGPIPE,
            SIGPIPE,
            "SIGPIPE stays ignored: {ignored:x}"
        );
        let default = ["bash", "-c", "trap - PIPE; exec \"$@\"", "bash"];
        let (ignored, _) = signals_of_the_application(&default, vars);
        assert_eq!(ignored & SIGPIPE, 0, "SIGPIPE stays default: {ignored:x}");
        let blocking = [
            "perl",
            "-e",
            "use POSIX; sigprocmask(SIG_BLOCK, POSIX::SigSet->new(SIGUSR1)) or die; exec @ARGV",
        ];
        let (_, blocked) = signals_of_the_application(&blocking, vars);
        assert_eq!(
            blocked & SIGUSR1,
            SIGUSR1,
            "SIGUSR1 stays blocked: {blocked:x}"
        );
    }
}

/// A list that names some GPUs by index and others by UUID (which no
/// Slurm writes) is refused in one line, and the task runs unchanged.
#[test]
fn exec_refuses_a_list_of_indices_and_uuids_and_runs_unchanged() {
    let (out, err) = exec_said(
        &[],
        &[
            ("CUDA_VISIBLE_DEVICES", "2,GPU-fake-n1-3"),
            ("SLURM_STEP_GPUS", "2,3"),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        words_of(&out)[1..],
        ["2,GPU-fake-n1-3", "unset", "unset", "unset"]
    );
    assert_eq!(
        err,
        "desi-gpu-map: node n1: CUDA_VISIBLE_DEVICES is not Slurm's: GPU list \"2,GPU-fake-n1-3\" \
         mixes indices and UUIDs (\"2\" and \"GPU-fake-n1-3\"); a list must name every GPU one \
         way, and NVML discovery is off (nvml=off); tasks left unchanged\n"
    );
}

#[test]
fn exec_says_why_a_list_is_not_slurms() {
    // A list the user set over Slurm's 2-GPU grant: Slurm did set one.
    let (out, err) = exec_said(
        &[],
        &[
            ("CUDA_VISIBLE_DEVICES", "0,1,2,3"),
            ("SLURM_STEP_GPUS", "0,1"),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(words_of(&out)[1..], ["0,1,2,3", "unset", "unset", "unset"]);
    assert_eq!(
        err,
        "desi-gpu-map: node n1: CUDA_VISIBLE_DEVICES=\"0,1,2,3\" disagrees with Slurm's grant \
         (SLURM_STEP_GPUS=\"0,1\"), so it is not Slurm's, and NVML discovery is off (nvml=off); \
         tasks left unchanged\n"
    );
    // A forged list of 20000 entries: too long to be any node's.
    let forged = (0..20000)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let (out, err) = exec_said(
        &[],
        &[
            ("CUDA_VISIBLE_DEVICES", &forged),
            ("SLURM_STEP_GPUS", "0,1"),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    assert!(
        err.starts_with(
            "desi-gpu-map: node n1: CUDA_VISIBLE_DEVICES is not Slurm's: GPU list \"0,1,2,"
        ),
        "{err}"
    );
    assert!(
        err.ends_with(
            " has 20000 entries, more than the 1024 any node holds, and NVML discovery is off \
             (nvml=off); tasks left unchanged\n"
        ),
        "{err}"
    );
    assert!(!err.contains("Slurm set no"), "{err}");
    // Where Slurm set none, that is what it says.
    let (_, err) = exec_said(&[], &[("SLURM_STEP_GPUS", "0,1")]);
    assert_eq!(
        err,
        "desi-gpu-map: node n1: Slurm set no CUDA_VISIBLE_DEVICES, and NVML discovery is off \
         (nvml=off); tasks left unchanged\n"
    );
}

#[test]
fn exec_is_quiet_where_slurm_binds_each_task() {
    // --gpus-per-task=1 with 2 tasks: slurmstepd narrowed this task's list
    // to its GPU and says so in SLURMD_TRES_BIND (24.11's spelling and
    // SLURM_TRES_PER_TASK; 22.05 writes gpu:per_task:1), with or without
    // the step's list narrowed alike.
    for (bind, step) in [
        ("gres/gpu:per_task:1", "1"),
        ("gres/gpu:per_task:1", "0,1"),
        ("gpu:per_task:1", "0,1"),
    ] {
        let vars = [
            ("CUDA_VISIBLE_DEVICES", "1"),
            ("SLURM_STEP_GPUS", step),
            ("SLURMD_TRES_BIND", bind),
            ("SLURM_TRES_PER_TASK", "gres/gpu=1"),
        ];
        let (out, err) = exec_said(&["--method", "roundrobin"], &vars);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(words_of(&out)[1..], ["1", "unset", "unset", "unset"]);
        assert_eq!(err, "", "silent without --verbose: {bind} {step}");
        let (_, err) = exec_said(&["--verbose", "--method", "roundrobin"], &vars);
        assert_eq!(
            err,
            format!(
                "desi-gpu-map: node n1: Slurm binds GPUs per task (SLURMD_TRES_BIND=\"{bind}\"); \
                 keeping Slurm's binding\n"
            )
        );
        // MPS asked for is never dropped in silence.
        let (out, err) = exec_said(&["--method", "contiguous,mps"], &vars);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(words_of(&out)[1..], ["1", "unset", "unset", "unset"]);
        assert!(
            err.contains("keeping Slurm's binding, and running without MPS"),
            "{bind} {step}: {err}"
        );
    }
}

/// Outside any job, `--allow-outside-slurm` runs the application with no
/// list: `--verbose` says why, naming this host.
#[test]
fn exec_outside_slurm_says_why_it_maps_nothing() {
    let args = [
        "--allow-outside-slurm",
        "--verbose",
        "--method",
        "contiguous,mps",
    ];
    let out = exec_with(&[], &[&args[..], &["--", "sh", "-c", SHOW_ENV]].concat());
    assert!(out.status.success(), "{out:?}");
    assert_eq!(words_of(&out)[1..], ["unset", "unset", "unset", "unset"]);
    let err = String::from_utf8_lossy(&out.stderr);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(
        err,
        format!(
            "desi-gpu-map: node {}: no GPUs are allocated to this step on this node; tasks \
             left unchanged\n",
            host.trim()
        )
    );
}

#[test]
fn exec_takes_the_options_words_and_refuses_what_the_plugin_refuses() {
    let marker = std::env::temp_dir().join(format!("dgm-exec-words-{}", std::process::id()));
    let touch = marker.display().to_string();
    for (words, says) in [
        (
            "none,mps",
            "invalid --method \"none,mps\": none maps no task, and MPS needs mapped tasks",
        ),
        (
            "contiguous,mps,mps",
            "invalid --method \"contiguous,mps,mps\"",
        ),
        ("help", "invalid --method \"help\""),
    ] {
        let out = exec_in_task("0", &["--method", words, "--", "touch", &touch], &[]);
        assert_eq!(out.status.code(), Some(2), "{words}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{words}: {err}");
    }
    // The environment form, refused the same way and named.
    let out = exec_in_task(
        "0",
        &["--", "touch", &touch],
        &[("DESI_GPU_MAP_METHOD", "none,mps")],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("DESI_GPU_MAP_METHOD=\"none,mps\""), "{err}");
    assert!(!marker.exists(), "nothing ran");
    // The verbose word, as --verbose.
    let out = exec_in_task("3", &["--method", "verbose,roundrobin", "--", "true"], &[]);
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rank=3 local=3/6 gpu=3"), "{err}");
}
