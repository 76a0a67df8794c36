//! The `desi-gpu-map` command as a whole, as a user runs it: its help, what
//! it says of output it cannot write, the task prolog's lines, and the
//! variables that mirror exec's options, in exec and the prolog alike. Each
//! subcommand has a file of its own: plan.rs, show.rs, exec.rs and
//! exec_mps.rs, with what they share in common/.

mod common;

use common::{run, stdout};
use std::process::{Command, Output};

/// The command with its standard output on `out`: its exit code and what
/// it said on stderr.
fn run_into(args: &[&str], out: impl Into<std::process::Stdio>) -> (Option<i32>, String) {
    let done = Command::new(env!("CARGO_BIN_EXE_desi-gpu-map"))
        .args(args)
        .stdout(out)
        .output()
        .expect("run desi-gpu-map");
    let err = String::from_utf8_lossy(&done.stderr).into_owned();
    (done.status.code(), err)
}

#[test]
fn output_that_cannot_be_written_is_said_but_a_closed_pipe_is_quiet() {
    let full = || {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap()
    };
    let no_space = "to standard output: No space left on device (os error 28)\n";
    for (args, said) in [
        (
            &["plan", "-N", "1", "-n", "2"][..],
            "desi-gpu-map plan: cannot write the plan",
        ),
        (
            &["show", "--nvml", "off"],
            "desi-gpu-map show: cannot write the report",
        ),
        (&["--help"], "desi-gpu-map: cannot write the help"),
        (&["plan", "--help"], "desi-gpu-map: cannot write the help"),
        (&["--version"], "desi-gpu-map: cannot write the version"),
    ] {
        let (code, err) = run_into(args, full());
        assert_eq!(
            (code, err),
            (Some(1), format!("{said} {no_space}")),
            "{args:?}"
        );
        // A reader gone (`| head -1`): quiet, as Unix tools are. Its end is
        // closed before the command starts, so every write fails.
        let (ours, _) = std::os::unix::net::UnixStream::pair().unwrap();
        let (code, err) = run_into(args, std::os::fd::OwnedFd::from(ours));
        assert_eq!((code, err.as_str()), (Some(1), ""), "{args:?}");
    }
}

/// `desi-gpu-map exec ARGS -- touch MARKER` (or, with no `args`, the task
/// prolog) as local task 0 of 6 on 4 GPUs, with `var` set to `value`'s
/// bytes, which need not be UTF-8.
fn with_raw(var: &str, value: &[u8], args: &[&str], marker: &str) -> Output {
    use std::os::unix::ffi::OsStrExt;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_desi-gpu-map"));
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs([
            ("SLURM_JOB_ID", "7"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NODEID", "0"),
            ("SLURM_STEP_TASKS_PER_NODE", "6"),
            ("SLURMD_NODENAME", "n1"),
            ("CUDA_VISIBLE_DEVICES", "0,1,2,3"),
            ("SLURM_STEP_GPUS", "0,1,2,3"),
            ("SLURM_GPUS_ON_NODE", "4"),
        ])
        .env(var, std::ffi::OsStr::from_bytes(value));
    match args {
        [] => cmd.env("SLURM_SCRIPT_CONTEXT", "prolog_task"),
        _ => cmd.arg("exec").args(args).args(["--", "touch", marker]),
    };
    cmd.output().expect("run desi-gpu-map")
}

/// A bad value in a variable that mirrors one of exec's options: exec
/// says `says` (every part, on one line) and runs nothing; the prolog
/// prints one `print` line that says it, and sets nothing.
#[track_caller]
fn refused_in_exec_and_prolog(var: &str, value: &[u8], says: &[&str]) {
    let marker = std::env::temp_dir().join(format!("dgm-raw-{}", std::process::id()));
    let touch = marker.display().to_string();
    let out = with_raw(var, value, &["--method", "contiguous"], &touch);
    // Removed before any assertion: a failing run leaves nothing either.
    let ran = std::fs::remove_file(&marker).is_ok();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{var}: {out:?}");
    assert!(!ran, "{var}: exec ran the application");
    let line = err.lines().find(|l| l.contains("invalid")).unwrap_or("");
    for part in says {
        assert!(
            line.contains(part),
            "{var}: {part:?} not in {line:?}\n{err}"
        );
    }
    let out = with_raw(var, value, &[], &touch);
    assert!(out.status.success(), "{var}: {out:?}");
    let lines: Vec<String> = stdout(&out).lines().map(String::from).collect();
    assert_eq!(lines.len(), 1, "{var}: one line only\n{lines:?}");
    let line = &lines[0];
    assert!(
        line.starts_with("print desi-gpu-map: ") && line.ends_with("; the task runs unchanged"),
        "{var}: {line}"
    );
    for part in says {
        assert!(line.contains(part), "{var}: {part:?} not in {line:?}");
    }
}

/// A value that is not UTF-8 (a no-break space pasted from a web page) in
/// any variable that mirrors an option is a bad value: named, quoted with
/// U+FFFD for the bytes, with the valid choices; never read as unset.
#[test]
fn a_mirrored_value_that_is_not_utf8_is_a_bad_value_named_with_its_choices() {
    let choices = |var, value: &[u8], flag, shown, valid| {
        let quoted = format!("invalid {flag} \"{shown}\"");
        let from = format!("(from ${var})");
        let valid = format!("valid values: {valid}");
        refused_in_exec_and_prolog(var, value, &[&quoted, &valid, &from]);
    };
    choices(
        "DESI_GPU_MAP_VISIBLE",
        b"rotate\xa0",
        "--visible",
        "rotate\u{fffd}",
        "single, rotate",
    );
    choices(
        "DESI_GPU_MAP_VENDOR",
        b"nvidia\xa0",
        "--vendor",
        "nvidia\u{fffd}",
        "auto, nvidia",
    );
    choices(
        "DESI_GPU_MAP_NVML",
        b"/opt/libnvidia-ml.so\xa0",
        "--nvml",
        "/opt/libnvidia-ml.so\u{fffd}",
        "auto, off, /ABSOLUTE/PATH",
    );
    choices(
        "DESI_GPU_MAP_NVML_TIMEOUT",
        b"5\xa0",
        "--nvml-timeout",
        "5\u{fffd}",
        "whole seconds from 1 to",
    );
    choices(
        "DESI_GPU_MAP_MPS_SHARE",
        b"even\xa0",
        "--mps-share",
        "even\u{fffd}",
        "even, none",
    );
    choices(
        "DESI_GPU_MAP_MPS_DIR",
        b"/tmp/mps\xa0",
        "--mps-dir",
        "/tmp/mps\u{fffd}",
        "a path in UTF-8 text",
    );
    choices(
        "DESI_GPU_MAP_MPS_CONTROL",
        b"/opt/nvidia-cuda-mps-control\xa0",
        "--mps-control",
        "/opt/nvidia-cuda-mps-control\u{fffd}",
        "a path in UTF-8 text",
    );
}

/// The method's variable too: not read as unset (contiguous without MPS),
/// but refused as a UTF-8 typo is, exec's `--method` over it excepted.
#[test]
fn a_method_variable_that_is_not_utf8_is_refused_not_read_as_unset() {
    let marker = std::env::temp_dir().join(format!("dgm-raw-method-{}", std::process::id()));
    let touch = marker.display().to_string();
    let var = "DESI_GPU_MAP_METHOD";
    let value = b"roundrobin,mps\xa0";
    let says = [
        "DESI_GPU_MAP_METHOD=\"roundrobin,mps\u{fffd}\"",
        "invalid --method \"roundrobin,mps\u{fffd}\"",
        "valid values: contiguous, roundrobin",
    ];
    let out = with_raw(var, value, &["--verbose"], &touch);
    let ran = std::fs::remove_file(&marker).is_ok();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(!ran, "exec ran the application");
    assert!(says.iter().all(|part| err.contains(part)), "{err}");
    let out = with_raw(var, value, &[], &touch);
    let said = stdout(&out);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(!said.contains("export "), "the task is unchanged: {said}");
    assert!(says.iter().all(|part| said.contains(part)), "{said}");
    // exec's own option wins over the variable, as with a UTF-8 typo.
    let out = with_raw(var, value, &["--method", "roundrobin"], &touch);
    let _ = std::fs::remove_file(&marker);
    assert!(out.status.success(), "{out:?}");
}

/// A newline inside a mirrored value is quoted whole (`\n`), so that the
/// one line that says it names the value and the valid values.
#[test]
fn a_newline_in_a_mirrored_value_is_quoted_whole() {
    for (var, value, flag, valid) in [
        (
            "DESI_GPU_MAP_VISIBLE",
            "rotate\nsingle",
            "--visible",
            "single, rotate",
        ),
        (
            "DESI_GPU_MAP_VENDOR",
            "amd\nnvidia",
            "--vendor",
            "auto, nvidia",
        ),
        (
            "DESI_GPU_MAP_MPS_SHARE",
            "even\nnone",
            "--mps-share",
            "even, none",
        ),
        (
            "DESI_GPU_MAP_NVML_TIMEOUT",
            "5\n6",
            "--nvml-timeout",
            "whole seconds",
        ),
        ("DESI_GPU_MAP_NVML", "auto\noff", "--nvml", "auto, off"),
        // A path too: its messages would be cut at the newline, and no
        // line slurmstepd reads could carry it to the task.
        (
            "DESI_GPU_MAP_NVML",
            "/opt/lib\nnvml.so",
            "--nvml",
            "auto, off",
        ),
        (
            "DESI_GPU_MAP_MPS_DIR",
            "/tmp/a\nb",
            "--mps-dir",
            "a path in UTF-8 text",
        ),
        (
            "DESI_GPU_MAP_MPS_CONTROL",
            "/opt/a\nb",
            "--mps-control",
            "a path in UTF-8 text",
        ),
    ] {
        let quoted = format!("invalid {flag} \"{}\"", value.replace('\n', "\\n"));
        let from = format!("(from ${var})");
        let valid = format!("valid values: {valid}");
        refused_in_exec_and_prolog(var, value.as_bytes(), &[&quoted, &valid, &from]);
    }
}

/// What the task prolog says reads `desi-gpu-map: ...` once: the verbose
/// row and every other line the outcome gives are prefixed already.
#[test]
fn the_prologs_lines_carry_one_prefix() {
    let out = with_raw("DESI_GPU_MAP_METHOD", b"roundrobin,verbose", &[], "");
    let said = stdout(&out);
    assert!(out.status.success(), "{out:?}");
    assert!(said.contains("export CUDA_VISIBLE_DEVICES=0\n"), "{said}");
    let printed: Vec<&str> = said.lines().filter(|l| l.starts_with("print ")).collect();
    assert!(
        printed.iter().any(|l| l.contains(" rank=0 ")),
        "the verbose row: {said}"
    );
    for line in printed {
        assert!(line.starts_with("print desi-gpu-map: "), "{line}");
        assert!(!line.contains("desi-gpu-map: desi-gpu-map:"), "{line}");
    }
}

/// `desi-gpu-map --help` says the command is also the task prolog and
/// epilog, which take no argument and so no help of their own.
#[test]
fn the_help_says_the_command_is_also_the_task_prolog_and_epilog() {
    let out = run(&["--help"]);
    let help = stdout(&out);
    assert!(out.status.success(), "{out:?}");
    for part in [
        "--task-prolog",
        "--task-epilog",
        "SLURM_TASK_PROLOG",
        "DESI_GPU_MAP_METHOD",
    ] {
        assert!(help.contains(part), "{part} not in\n{help}");
    }
}
