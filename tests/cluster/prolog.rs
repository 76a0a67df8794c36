//! `desi-gpu-map` as the user's own task prolog and epilog
//! (`srun --task-prolog=... --task-epilog=...`, which a batch script sets
//! once as `SLURM_TASK_PROLOG` and `SLURM_TASK_EPILOG`): the plugin's rows
//! with nothing installed and nothing wrapped around the application. The
//! method and options come from `DESI_GPU_MAP_METHOD` and the variables
//! that mirror exec's options. Most cases take the plugin out of
//! plugstack.conf (`cluster.sh plugin off`) after `setup`. CUDA MPS
//! through the prolog and its epilog is tested with the other MPS cases
//! (`mps::keeper::prolog_...`), in both tracking modes.
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

/// `srun --task-prolog=BIN WORDS`.
fn with_prolog(words: &str) -> Job {
    srun(&format!("--task-prolog={} {words}", prolog_bin()))
}

/// A case's srun words less `--desi-gpu-map=`, with the prolog, and the
/// variables that ask for the same: `DESI_GPU_MAP_METHOD`, and one
/// `DESI_GPU_MAP_KEY` per plugstack argument.
fn through_prolog(case: &Case) -> Job {
    let mut srun_words = Vec::new();
    let mut method = None;
    for word in case.srun.split_whitespace() {
        match word.strip_prefix("--desi-gpu-map=") {
            Some(value) => method = Some(value.strip_prefix("verbose,").unwrap_or(value)),
            None => srun_words.push(word),
        }
    }
    let mut job = with_prolog(&srun_words.join(" "));
    if let Some(method) = method {
        job = job.env("DESI_GPU_MAP_METHOD", method);
    }
    for arg in case.plugstack {
        let (key, value) = arg.split_once('=').expect("a key=value plugstack argument");
        job = job.env(&format!("DESI_GPU_MAP_{}", key.to_uppercase()), value);
    }
    job
}

/// The shared layout tables through the task prolog, with no plugin in
/// plugstack.conf: the plugin's rows, task for task.
#[test]
fn the_prolog_gives_the_plugins_rows_without_the_plugin() {
    for case in EVERY_LAYOUT.iter().chain(PARTIAL_AND_ROTATE) {
        let _c = without_the_plugin();
        let _held = case.held.map(|(node, gres)| hold(node, gres));
        through_prolog(case)
            .probe(probe::GPU)
            .ok()
            .rows_are(case.rows);
    }
}

#[test]
fn the_application_is_the_task_with_its_own_parent_and_exit_code() {
    let _c = without_the_plugin();
    // Nothing wraps the application: slurmstepd is its parent, and its
    // exit code is srun's.
    with_prolog("-w n1 -n2 --gpus-per-node=4")
        .env("DESI_GPU_MAP_METHOD", "roundrobin")
        .probe(r#"echo "T $SLURM_PROCID $CUDA_VISIBLE_DEVICES $DESI_GPU_MAPPED $(cat /proc/$PPID/comm)"; exit 3"#)
        .run()
        .exits(3)
        .rows_are(&["0 0,2 1 slurmstepd", "1 1,3 1 slurmstepd"]);
}

#[test]
fn a_bad_method_or_value_is_said_once_per_task_and_the_task_runs_unchanged() {
    let _c = without_the_plugin();
    for (name, value, says) in [
        (
            "DESI_GPU_MAP_METHOD",
            "nearest",
            "invalid --method \"nearest\"",
        ),
        (
            "DESI_GPU_MAP_VISIBLE",
            "all",
            "(from $DESI_GPU_MAP_VISIBLE)",
        ),
    ] {
        let out = with_prolog("-w n1 -n2 --gpus-per-node=2")
            .env("DESI_GPU_MAP_METHOD", "contiguous")
            .env(name, value)
            .probe(probe::GPU)
            .ok()
            .rows_are(&["0 n1 0 0,1 unset", "1 n1 1 0,1 unset"]);
        let stdout = out.stdout();
        let said: Vec<&str> = stdout
            .lines()
            .filter(|l| l.starts_with("desi-gpu-map: "))
            .collect();
        assert_eq!(said.len(), 2, "one line per task\n{out}");
        assert!(
            said.iter()
                .all(|l| l.contains(says) && l.ends_with("the task runs unchanged")),
            "{out}"
        );
    }
}

#[test]
fn the_prolog_changes_nothing_where_the_plugin_mapped_the_step() {
    let _c = setup("required", &[]);
    // The plugin maps contiguously; the prolog, asked for roundrobin,
    // stands aside.
    with_prolog("-w n1 -n4 --gres=gpu:2 --desi-gpu-map=contiguous")
        .env("DESI_GPU_MAP_METHOD", "roundrobin")
        .probe(r#"echo "T $SLURM_PROCID $CUDA_VISIBLE_DEVICES $DESI_GPU_MAPPED""#)
        .ok()
        .rows_are(&["0 0 1", "1 0 1", "2 1 1", "3 1 1"]);
}

#[test]
fn on_a_step_without_gpus_the_prolog_changes_nothing_and_says_nothing() {
    let _c = without_the_plugin();
    let out = with_prolog("-w n1 -n2")
        .env("DESI_GPU_MAP_METHOD", "contiguous")
        .probe(r#"echo "T $SLURM_PROCID ${CUDA_VISIBLE_DEVICES-unset} ${DESI_GPU_MAPPED-unset}""#)
        .ok()
        .rows_are(&["0 unset unset", "1 unset unset"]);
    assert!(!out.stdout().contains("desi-gpu-map:"), "{out}");
}

#[test]
fn where_slurm_binds_each_task_the_prolog_keeps_slurms_binding() {
    let _c = without_the_plugin();
    with_prolog("-w n1 -n2 --gpus-per-node=4 --gpu-bind=single:1")
        .env("DESI_GPU_MAP_METHOD", "roundrobin")
        .probe(probe::GPU)
        .ok()
        .rows_are(&["0 n1 0 0 unset", "1 n1 1 1 unset"]);
}

#[test]
fn where_the_plugin_is_installed_but_not_asked_the_prolog_maps() {
    // The plugin, not asked, clears a mapped task's flags but leaves the
    // method: it is the user's, for the prolog.
    let _c = setup("required", &[]);
    with_prolog("-w n1 -n4 --gres=gpu:2")
        .env("DESI_GPU_MAP_METHOD", "roundrobin")
        .probe(r#"echo "T $SLURM_PROCID $CUDA_VISIBLE_DEVICES $DESI_GPU_MAPPED""#)
        .ok()
        .rows_are(&["0 0 1", "1 1 1", "2 0 1", "3 1 1"]);
}

/// The real MPS control daemon, as cluster.sh copied it.
fn mps_control() -> String {
    format!("{}/mps/bin/nvidia-cuda-mps-control", state_dir())
}

/// A site default (`default=contiguous`) is for steps the user asked
/// nothing of: the user's `DESI_GPU_MAP_METHOD`, exported for the task
/// prolog, is a request, and the plugin takes it for the step (its
/// method, `mps` and `verbose`, and it says so under verbose); the prolog
/// then finds the step mapped. Never the site's method over the user's,
/// unsaid.
#[test]
fn a_site_default_yields_to_the_users_method_for_the_prolog() {
    let control = mps_control();
    let at = format!("mps_control={control}");
    let _c = setup("required", &["default=contiguous", &at]);
    let out = with_prolog("-n3 -w n1 --gpus-per-node=2")
        .user(USERS[0].0)
        .env("DESI_GPU_MAP_METHOD", "roundrobin,mps,verbose")
        .env("DESI_GPU_MAP_MPS_CONTROL", &control)
        .env("DESI_GPU_MAP_NVML", &fake_nvml())
        .probe(&probe::mps(&control))
        .ok();
    // roundrobin gives GPUs 0 1 0 (contiguous: 0 0 1), each task served
    // by the step's daemon, as alice, in a 0700 directory.
    let alice = USERS[0].0;
    let out = out.rows_are(&[
        &format!("0 n1 0 GPU-fake-n1-0 1 unset 100.0 700:{alice}"),
        &format!("1 n1 1 GPU-fake-n1-1 1 unset 100.0 700:{alice}"),
        &format!("2 n1 2 GPU-fake-n1-0 1 unset 100.0 700:{alice}"),
    ]);
    let said = out.said();
    let rows: Vec<&String> = said.iter().filter(|l| l.contains(" rank=")).collect();
    assert_eq!(rows.len(), 3, "one verbose row per task\n{out}");
    assert!(
        rows.iter()
            .all(|l| l.contains(" method=roundrobin ") && l.contains(" mps=")),
        "{out}"
    );
    assert!(
        said.iter().any(|l| l.contains(
            "DESI_GPU_MAP_METHOD=\"roundrobin,mps,verbose\" asks for this step over the site's \
             default=contiguous"
        )),
        "the plugin says whose request it took\n{out}"
    );
}

/// `sbatch --export=NONE` with the guide's exports in the script: each
/// srun there hands its tasks only Slurm's own variables (measured on
/// 22.05: `SLURM_EXPORT_ENV=NONE`, no `PATH`, no `DESI_GPU_MAP_*`), so the
/// prolog, which `SLURM_TASK_PROLOG` still starts, maps with the defaults
/// (contiguous, without MPS): the node's first task says so, naming what
/// did not arrive and how to pass it. With `srun --export=ALL` the method
/// arrives, and nothing is said.
#[test]
fn under_export_none_the_prolog_says_the_method_did_not_arrive() {
    let _c = without_the_plugin();
    let dir = state_dir();
    // The tasks have no PATH: each probe sets its own.
    let probe = |tag| {
        format!(
            "/bin/bash -c 'PATH=/usr/bin:/bin; echo \"{tag} $SLURM_PROCID $CUDA_VISIBLE_DEVICES \
             ${{DESI_GPU_MAP_MPS-unset}}\"'"
        )
    };
    let script = format!(
        "#!/bin/bash\n#SBATCH -n3 -w n1 --gpus-per-node=2\n\
         export SLURM_TASK_PROLOG={} DESI_GPU_MAP_METHOD=roundrobin\n\
         srun {}\nsrun --export=ALL --gpus-per-node=2 -n3 {}\n",
        prolog_bin(),
        probe("A"),
        probe("Z")
    );
    let path = format!("{dir}/export-none.sh");
    let output = format!("{dir}/export-none.out");
    std::fs::write(&path, script).unwrap();
    let _ = std::fs::remove_file(&output);
    let ran = sbatch("--export=NONE --wait -o")
        .arg(&output)
        .arg(&path)
        .run();
    let log = std::fs::read_to_string(&output).unwrap_or_default();
    assert!(ran.success(), "{ran}\n{log}");
    let rows = |tag: &str| {
        let mut rows: Vec<&str> = log.lines().filter(|l| l.starts_with(tag)).collect();
        rows.sort();
        rows
    };
    // Contiguous (0 0 1), where the script asked roundrobin.
    assert_eq!(
        rows("A "),
        ["A 0 0 unset", "A 1 0 unset", "A 2 1 unset"],
        "{log}"
    );
    let said: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with("desi-gpu-map: "))
        .collect();
    assert_eq!(said.len(), 1, "said once, by the node's first task\n{log}");
    for part in [
        "SLURM_EXPORT_ENV=\"NONE\"",
        "DESI_GPU_MAP_METHOD",
        "mapped with their defaults (contiguous, without mps)",
        "srun --export=ALL",
        "export SLURM_EXPORT_ENV=ALL",
    ] {
        assert!(said[0].contains(part), "{part}: {log}");
    }
    // --export=ALL passes the method: roundrobin (0 1 0), nothing said.
    assert_eq!(
        rows("Z "),
        ["Z 0 0 unset", "Z 1 1 unset", "Z 2 0 unset"],
        "{log}"
    );
}

/// Where a site default lets the plugin read the user's
/// `DESI_GPU_MAP_METHOD`, it reads it as exec and the prolog do: bytes
/// that are not UTF-8 make it a bad value, named (U+FFFD for the bytes)
/// with the valid values, and the step's tasks run unchanged; never read
/// as unset, which would map them with the site's default.
#[test]
fn a_method_variable_that_is_not_utf8_is_a_bad_value_for_the_plugin_too() {
    let _c = setup("required", &["default=contiguous"]);
    let out = client("env", "")
        .arg_bytes(b"DESI_GPU_MAP_METHOD=roundrobin\xa0")
        .args(&format!(
            "srun --task-prolog={} -w n1 -n2 --gpus-per-node=2",
            prolog_bin()
        ))
        .probe(probe::GPU)
        .ok()
        .rows_are(&["0 n1 0 0,1 unset", "1 n1 1 0,1 unset"]);
    let bad =
        "DESI_GPU_MAP_METHOD=\"roundrobin\u{fffd}\": invalid --method \"roundrobin\u{fffd}\"; \
               valid values: contiguous";
    // The plugin says it once per node on stderr, the prolog once per
    // task on stdout.
    let plugin = out.said().iter().filter(|l| l.contains(bad)).count();
    assert_eq!(plugin, 1, "{out}");
    let stdout = out.stdout();
    let prolog = stdout
        .lines()
        .filter(|l| l.starts_with("desi-gpu-map: ") && l.contains(bad))
        .count();
    assert_eq!(prolog, 2, "{out}");
}
