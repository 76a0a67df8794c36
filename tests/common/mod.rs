//! What the suites that run the `desi-gpu-map` command share: the command
//! run with arguments or as a task's `exec`, its output, and the fake NVML.
//! Each suite is a test binary of its own and uses some of these.
#![allow(dead_code)]

use std::process::{Command, Output};

pub fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_desi-gpu-map"))
        .args(args)
        .output()
        .expect("run desi-gpu-map")
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `desi-gpu-map exec ARGS` with a task's Slurm variables (local task
/// `local` of 6 on node 0, 4 GPUs), and nothing else of the caller's.
pub fn exec_in_task(local: &str, args: &[&str], extra: &[(&str, &str)]) -> Output {
    let task = [
        ("SLURM_JOB_ID", "7"),
        ("SLURM_STEP_ID", "0"),
        ("SLURM_LOCALID", local),
        ("SLURM_PROCID", local),
        ("SLURM_NODEID", "0"),
        ("SLURM_STEP_TASKS_PER_NODE", "6(x2)"),
        ("SLURMD_NODENAME", "n1"),
        ("CUDA_VISIBLE_DEVICES", "0,1,2,3"),
        ("SLURM_STEP_GPUS", "0,1,2,3"),
        ("SLURM_GPUS_ON_NODE", "4"),
    ];
    exec_with(&[&task[..], extra].concat(), args)
}

/// `desi-gpu-map exec ARGS` with only `PATH` and these variables.
pub fn exec_with(vars: &[(&str, &str)], args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_desi-gpu-map"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(vars.iter().copied())
        .arg("exec")
        .args(args)
        .output()
        .expect("run desi-gpu-map exec")
}

/// The words the application printed.
pub fn words_of(out: &Output) -> Vec<String> {
    stdout(out).split_whitespace().map(String::from).collect()
}

pub const SHOW_ENV: &str = r#"echo "$$ ${CUDA_VISIBLE_DEVICES-unset} ${DESI_GPU_MAPPED-unset} ${DESI_GPU_MAP_METHOD-unset} ${DESI_GPU_MAP_STEP-unset}""#;

/// exec's lines on stderr for a task of a 2-GPU step (local task 0 of 2)
/// with these variables over the task's own, NVML off unless `args`
/// names one.
pub fn exec_said(args: &[&str], vars: &[(&str, &str)]) -> (Output, String) {
    let task = [
        ("SLURM_JOB_ID", "7"),
        ("SLURM_STEP_ID", "0"),
        ("SLURM_LOCALID", "0"),
        ("SLURM_PROCID", "0"),
        ("SLURM_NODEID", "0"),
        ("SLURM_STEP_TASKS_PER_NODE", "2"),
        ("SLURMD_NODENAME", "n1"),
        ("SLURM_GPUS_ON_NODE", "2"),
    ];
    // NVML off unless the test names one.
    let mut all = if args.contains(&"--nvml") {
        vec![]
    } else {
        vec!["--nvml", "off"]
    };
    all.extend(args);
    all.extend(["--", "sh", "-c", SHOW_ENV]);
    let out = exec_with(&[&task[..], vars].concat(), &all);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, err)
}

/// The fake NVML (tests/fakes/nvml/fake_nvml.c), built into a directory of this
/// test's own with `conf` as its control file.
pub fn fake_nvml(name: &str, conf: &str) -> (std::path::PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("dgm-cli-nvml-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let control = dir.join("fake-nvml.conf");
    std::fs::write(&control, conf).unwrap();
    let lib = dir.join("libnvidia-ml.so.1");
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fakes/nvml/fake_nvml.c");
    let built = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&lib)
        .arg(source)
        .arg(format!("-DFAKE_NVML_CONF=\"{}\"", control.display()))
        .arg("-lpthread")
        .status()
        .expect("run cc");
    assert!(built.success(), "build the fake NVML");
    (dir, lib.display().to_string())
}
