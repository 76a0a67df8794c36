//! The `desi-gpu-map` command inside Slurm steps: `exec`, which maps a step
//! without the plugin and then becomes the application, and `show`, which
//! tells a task what it got. Most cases take the plugin out of
//! plugstack.conf (`cluster.sh plugin off`) after `setup`.
//!
//! Run on the local test cluster that `tests/run-cluster-tests.sh` brings up
//! (nodes n1 and n2 with 4 fake GPUs each, n3 with 2, n4 with 2 that Slurm
//! names by count only), with `target/release/desi-gpu-map` built; these
//! tests fail, never skip, when it is not up.

use crate::common::layouts::{Case, EVERY_LAYOUT, PARTIAL_AND_ROTATE};
use crate::common::*;
use std::sync::MutexGuard;

/// Takes the cluster ([`setup`]) and takes the plugin out of plugstack.conf.
fn without_the_plugin() -> MutexGuard<'static, ()> {
    let guard = setup("required", &[]);
    cluster(&["plugin", "off"]);
    guard
}

/// `srun SRUN desi-gpu-map exec EXEC`, each split at spaces: EXEC ends with
/// `--` where a command follows.
fn exec(srun_words: &str, exec_words: &str) -> Job {
    srun(srun_words).arg(bin()).arg("exec").args(exec_words)
}

/// A case's srun words less `--desi-gpu-map=`, and the exec command that
/// asks for the same: `desi-gpu-map exec --method M [--visible V] --`.
fn through_exec(case: &Case) -> Job {
    let mut srun_words = Vec::new();
    let mut exec_words = Vec::new();
    for word in case.srun.split_whitespace() {
        match word.strip_prefix("--desi-gpu-map=") {
            Some(value) => {
                let method = value.strip_prefix("verbose,").unwrap_or(value);
                exec_words.extend(["--method".to_string(), method.to_string()]);
            }
            None => srun_words.push(word),
        }
    }
    for arg in case.plugstack {
        let (key, value) = arg.split_once('=').expect("a key=value plugstack argument");
        exec_words.extend([format!("--{key}"), value.to_string()]);
    }
    exec_words.push("--".to_string());
    exec(&srun_words.join(" "), &exec_words.join(" "))
}

/// The same tables through `desi-gpu-map exec`, with no plugin in
/// plugstack.conf: the same rows, task for task.
#[test]
fn exec_gives_the_plugins_rows_without_the_plugin() {
    for case in EVERY_LAYOUT.iter().chain(PARTIAL_AND_ROTATE) {
        let _c = without_the_plugin();
        let _held = case.held.map(|(node, gres)| hold(node, gres));
        through_exec(case)
            .probe(probe::GPU)
            .ok()
            .rows_are(case.rows);
    }
}

#[test]
fn exec_becomes_the_application_with_its_exit_code() {
    let _c = without_the_plugin();
    // The application is the task: slurmstepd is its parent, and its exit
    // code is srun's.
    exec("-w n1 -n2 --gpus-per-node=4", "--method roundrobin --")
        .probe(r#"echo "T $SLURM_PROCID $CUDA_VISIBLE_DEVICES $DESI_GPU_MAPPED $(cat /proc/$PPID/comm)"; exit 3"#)
        .run()
        .exits(3)
        .rows_are(&["0 0,2 1 slurmstepd", "1 1,3 1 slurmstepd"]);
    // A command that cannot run: the shell's message and code.
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
        exec("-w n1 -n1", "--")
            .arg(app)
            .run()
            .exits(code)
            .says(says);
    }
    // Bad input: nothing runs.
    for (exec_words, says) in [
        (
            "--method nearest -- touch x",
            "invalid --method \"nearest\"",
        ),
        ("", "no command to run"),
    ] {
        exec("-w n1 -n1", exec_words).run().fails().says(says);
    }
}

#[test]
fn scancel_reaches_an_exec_application_as_sigterm() {
    let _c = without_the_plugin();
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
    let out = sbatch("--parsable -o /dev/null -w n1 -n1 --gpus-per-node=4 --wrap")
        .arg(wrap)
        .ok();
    let id = out.stdout().trim().to_string();
    let _held = Held(id.clone());
    let ready = format!("{dir}/ready.0");
    let wait_for = |path: &str| {
        (0..200).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(100));
            std::path::Path::new(path).exists()
        })
    };
    assert!(wait_for(&ready), "the application never started");
    // One task on four GPUs holds them all.
    assert_eq!(std::fs::read_to_string(&ready).unwrap().trim(), "0,1,2,3");
    client("scancel", &id).ok();
    assert!(
        wait_for(&format!("{dir}/term.0")),
        "the application got no SIGTERM"
    );
}

#[test]
fn exec_changes_nothing_where_the_plugin_mapped_the_step() {
    let _c = setup("required", &[]);
    // The plugin maps contiguously; exec, asked for roundrobin, stands aside.
    exec(
        "-w n1 -n4 --gres=gpu:2 --desi-gpu-map=contiguous",
        "--verbose --method roundrobin --",
    )
    .probe(r#"echo "T $SLURM_PROCID $CUDA_VISIBLE_DEVICES $DESI_GPU_MAPPED""#)
    .ok()
    .rows_are(&["0 0 1", "1 0 1", "2 1 1", "3 1 1"])
    .says("this step is mapped already");
}

#[test]
fn a_flag_from_an_outer_step_does_not_stop_exec() {
    let _c = without_the_plugin();
    // What a task of mapped step 0 passes on to a step it starts.
    let out = exec("-w n1 -n4 --gres=gpu:2", "--method roundrobin --")
        .probe(
            r#"echo "T $SLURM_PROCID $CUDA_VISIBLE_DEVICES $DESI_GPU_MAPPED $DESI_GPU_MAP_STEP""#,
        )
        .env("DESI_GPU_MAPPED", "1")
        .env("DESI_GPU_MAP_STEP", "999999.0")
        .env("CUDA_VISIBLE_DEVICES", "1")
        .ok();
    let got = out.rows();
    let step = got
        .lines()
        .next()
        .and_then(|l| l.split(' ').nth(3))
        .unwrap_or_default()
        .to_string();
    assert!(step.ends_with(".0") && step != "999999.0", "{got}");
    out.rows_are(&[
        &format!("0 0 1 {step}"),
        &format!("1 1 1 {step}"),
        &format!("2 0 1 {step}"),
        &format!("3 1 1 {step}"),
    ]);
}

#[test]
fn exec_on_a_step_without_gpus_runs_the_application_unchanged() {
    let _c = without_the_plugin();
    let app = r#"echo "T $SLURM_PROCID ${CUDA_VISIBLE_DEVICES-unset} ${DESI_GPU_MAPPED-unset}""#;
    let out = exec("-w n1 -n2", "--method contiguous --")
        .probe(app)
        .ok()
        .rows_are(&["0 unset unset", "1 unset unset"]);
    assert_eq!(out.stderr(), "", "silent without --verbose");
    let out = exec("-w n1 -n2", "--verbose --method contiguous --")
        .probe(app)
        .run();
    assert_eq!(
        out.said(),
        ["desi-gpu-map: node n1: no GPUs are allocated to this step on this node; tasks left unchanged"],
        "{out}"
    );
    // Slurm binds each task itself: its binding stays, without the flag.
    exec("-w n1 -n2 --gpus-per-task=1", "--method roundrobin --")
        .probe(app)
        .ok()
        .rows_are(&["0 0 unset", "1 1 unset"]);
}

/// `exec` in a batch script (the batch step, which nothing maps): the
/// application runs unchanged, saying why only under `--verbose`.
#[test]
fn exec_in_a_batch_script_runs_the_application_unchanged() {
    let _c = without_the_plugin();
    let output = format!("{}/log/exec-batch.out", state_dir());
    let _ = std::fs::remove_file(&output);
    let script = format!(
        "{b} exec -- bash -c 'echo \"app $CUDA_VISIBLE_DEVICES ${{DESI_GPU_MAPPED-unset}}\"'; \
         {b} exec --verbose -- true",
        b = bin()
    );
    sbatch("-W -w n1 -n1 --gpus-per-node=2")
        .words(&["-o", &output, "--wrap", &script])
        .ok();
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
    let _c = without_the_plugin();
    let script = format!(
        "trap '' PIPE; exec {} exec --method contiguous -- grep SigIgn /proc/self/status",
        bin()
    );
    let out = srun("-n1 -w n1 --gpus-per-node=1").probe(&script).ok();
    let ignored = out
        .stdout()
        .split_whitespace()
        .nth(1)
        .and_then(|m| u64::from_str_radix(m, 16).ok())
        .expect("a SigIgn mask");
    assert_ne!(ignored & (1 << 12), 0, "SIGPIPE not ignored: {out}");
}

#[test]
fn show_inside_a_task() {
    let _c = setup("required", &[]);
    let out = srun("-N1 -n2 -w n1 --gpus-per-node=4 --desi-gpu-map=roundrobin -l")
        .arg(bin())
        .arg("show")
        .arg(format!("--nvml={}", fake_nvml()))
        .ok();
    let stdout = out.stdout();
    for want in [
        "1: mapped by desi-gpu-map: yes",
        "1: DESI_GPU_MAPPED: 1",
        "1: method: roundrobin",
        "1: node_gpus: 4",
        "1: cuda_visible_devices: 1",
        "1: device 0: 1 uuid GPU-fake-n1-1 pci 00000000:02:00.0",
        "0: device 0: 0 uuid GPU-fake-n1-0 pci 00000000:01:00.0",
    ] {
        assert!(stdout.contains(want), "missing {want:?} in\n{out}");
    }
}
