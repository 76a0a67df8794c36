//! What site admins and users type: `--desi-gpu-map=help`, bad option
//! values, plugstack arguments and their typos, several plugstack lines
//! for the plugin, and flag names that a loader or a runtime reads. Bad
//! input is refused with a clear message before anything is allocated, and
//! never drains a node.
//!
//! Run on the local test cluster that `tests/run-cluster-tests.sh` brings up
//! (nodes n1 and n2 with 4 fake GPUs each, n3 with 2, n4 with 2 that Slurm
//! names by count only); these tests fail, never skip, when it is not up.

use crate::common::*;
use std::sync::MutexGuard;

/// A trivial job for `cmd` with `words`: sbatch takes a `--wrap`, srun and
/// salloc a command.
fn trivial_job(cmd: &str, words: &str) -> Job {
    client(cmd, words).arg(if cmd == "sbatch" {
        "--wrap=true"
    } else {
        "true"
    })
}

/// The state sinfo gives `node`, e.g. `idle`, once the last job there has
/// completed: `comp` (Slurm still ending a job, which on a busy node takes
/// a while after srun returns) passes within 30 s and is never the answer
/// unless it lasts.
fn node_state(node: &str) -> String {
    let state = || {
        let ran = client("sinfo", "-h -n").arg(node).args("-o %t").run();
        ran.stdout().trim().to_string()
    };
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut now = state();
    while now == "comp" && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(200));
        now = state();
    }
    now
}

/// Loads the plugin as required with `args`: a plain step on n1 fails.
#[track_caller]
fn refused(args: &[&str]) -> Ran {
    configure("required", args);
    srun("-N1 -w n1 true").run().fails()
}

// ------------------------------------------------------------ help

#[test]
fn help_prints_usage_and_exits_zero_without_a_job() {
    let _c = setup("required", &[]);
    let before = job_count();
    for cmd in ["srun", "sbatch", "salloc"] {
        trivial_job(cmd, "-N1 --desi-gpu-map=help")
            .ok()
            .prints("Usage: --desi-gpu-map=METHOD[,verbose][,mps]")
            .prints("roundrobin");
    }
    assert_eq!(job_count(), before, "help must not create a job");
}

#[test]
fn srun_help_lists_the_option() {
    let _c = setup("required", &[]);
    let out = srun("--help").run();
    let all = out.stdout() + &out.stderr();
    assert!(all.contains("--desi-gpu-map="), "{out}");
    assert!(
        all.contains("Bind each task to its share of its node's GPUs"),
        "{out}"
    );
}

#[test]
fn value_options_are_slurms() {
    // The help check skips option values by these lists (core/src/settings/client_args.rs):
    // each option must want a value in this series, or be unknown to the
    // client; one that takes none would hide the program's first word.
    use desi_gpu_map_core::settings::client_args::{value_options, Client};
    let _c = setup("required", &[]);
    // The client's stdin is empty (Command::output), as before.
    let answer = |cmd: &str, word: &str| client(cmd, "").arg(word).run().stderr();
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
fn help_works_as_documented_and_only_on_the_command_line() {
    let _c = setup("required", &[]);
    let before = job_count();
    // The documented form: srun needs a command, none is run.
    srun("--desi-gpu-map=help true")
        .ok()
        .prints("Usage: --desi-gpu-map=");
    // The environment form is no place for help: a clear error, no job.
    for (cmd, words) in [("srun", "-n1 true"), ("sbatch", "--wrap true -o /dev/null")] {
        client(cmd, words)
            .env(OPTION_ENV, "help")
            .run()
            .fails()
            .says("help is for the command line");
    }
    assert_eq!(job_count(), before, "no job was created");
}

#[test]
fn help_from_the_environment_ignores_the_programs_arguments() {
    let _c = setup("required", &[]);
    let before = job_count();
    // A word of the program (or the batch script) that looks like the
    // option is not the command-line form: the environment's help is
    // refused, as desi_gpu_map(8) says, and nothing runs.
    let script = format!("{}/help-args.sh", state_dir());
    std::fs::write(&script, "#!/bin/bash\ntrue\n").expect("script");
    for job in [
        srun("-w n1 echo --desi-gpu-map-x"),
        srun("-w n1 echo --desi-gpu-map=help"),
        srun("-J --desi-gpu-map=help true"),
        salloc("-w n1 echo --desi-gpu-map=help"),
        sbatch("-o /dev/null")
            .arg(&script)
            .arg("--desi-gpu-map=help"),
    ] {
        let out = job
            .env(OPTION_ENV, "help")
            .run()
            .fails()
            .says("help is for the command line");
        assert!(!out.stdout().contains("Usage:"), "{out}");
    }
    assert_eq!(job_count(), before, "no job was created");
    // srun's own option, spaced or after an option's value, still counts.
    for words in [
        "-n 1 --desi-gpu-map help true",
        "-w n1 --desi-gpu-map=help echo x",
    ] {
        let out = srun(words)
            .env(OPTION_ENV, "help")
            .ok()
            .prints("Usage: --desi-gpu-map=");
        assert!(!out.stdout().contains("\nx\n"), "{out}");
    }
    assert_eq!(job_count(), before, "no job was created");
}

// ------------------------------------------------------------ option values

#[test]
fn bad_values_stop_srun_sbatch_and_salloc_before_allocation() {
    let _c = setup("required", &[]);
    let before = job_count();
    for cmd in ["srun", "sbatch", "salloc"] {
        for bad in ["contigous", "", "verbose,", "round_robin"] {
            trivial_job(cmd, &format!("-N1 --desi-gpu-map={bad}"))
                .run()
                .fails()
                .says("invalid --desi-gpu-map value")
                .says("contiguous, roundrobin");
        }
        trivial_job(cmd, "-N1")
            .env(OPTION_ENV, "bogus")
            .run()
            .fails()
            .says("\"bogus\"");
    }
    assert_eq!(job_count(), before, "no job may be created");
}

#[test]
fn odd_option_values_are_refused_and_never_crash_a_node() {
    let _c = setup("required", &[]);
    let long = format!("--desi-gpu-map={}", "x".repeat(10_000));
    let values: Vec<Vec<u8>> = vec![
        long.into_bytes(),
        b"--desi-gpu-map=contig\xff\xfeous".to_vec(),
        b"--desi-gpu-map=contiguous=1".to_vec(),
        b"--desi-gpu-map=contiguous,roundrobin".to_vec(),
        b"--desi-gpu-map=verbose,,contiguous".to_vec(),
    ];
    for value in &values {
        let out = srun("-N1 -w n1")
            .arg_bytes(value)
            .arg("true")
            .run()
            .fails()
            .says("invalid --desi-gpu-map value");
        assert!(out.stderr().len() < 2000, "a short message: {out}");
    }
    // Marked optional, srun goes on: the node tells the task and runs it unchanged.
    configure("optional", &[]);
    for value in &values {
        let out = srun("-N1 -n2 -w n1 --gpus-per-node=4")
            .arg_bytes(value)
            .probe(probe::GPU)
            .ok()
            .rows_are(&["0 n1 0 0,1,2,3 unset", "1 n1 1 0,1,2,3 unset"]);
        assert!(
            out.said()
                .iter()
                .any(|l| l.contains("invalid --desi-gpu-map value")),
            "{out}"
        );
    }
    assert_eq!(node_state("n1"), "idle");
}

// ------------------------------------------------------------ plugstack arguments

#[test]
fn bad_plugstack_argument_is_a_clear_error_and_never_drains_a_node() {
    let _c = setup("required", &["default=contigous"]);
    let before = job_count();
    for cmd in ["srun", "sbatch", "salloc"] {
        trivial_job(cmd, "-N1 -w n1")
            .run()
            .fails()
            .says("bad plugstack argument \"default=contigous\"")
            .says("valid arguments");
    }
    assert_eq!(job_count(), before, "no job may be created");

    // Marked optional, srun goes on; the nodes report it to the task and stay up.
    configure("optional", &["visible=everything"]);
    srun("-N1 -w n1 --gpus-per-node=4")
        .probe(probe::GPU)
        .ok()
        .rows_are(&["0 n1 0 0,1,2,3 unset"])
        .says("plugin misconfigured");
    assert_eq!(node_state("n1"), "idle", "the node must not drain");
}

#[test]
fn every_plugstack_typo_is_named() {
    let _c = setup("required", &[]);
    for (arg, want) in [
        ("defualt=contiguous", "unknown argument \"defualt\""),
        (
            "default=contigous",
            "default must be contiguous, roundrobin, closest or none",
        ),
        ("visible=all", "visible must be single or rotate"),
        ("nvml=libnvidia-ml.so.1", "absolute library path"),
        ("flag=1X", "upper-case variable name"),
        ("flag=LD_AUDIT", "must not be LD_AUDIT"),
        ("untracked=all", "untracked must be ignore or whole-node"),
        (
            "nvml_timeout=0",
            "nvml_timeout must be whole seconds from 1 to 30",
        ),
        ("verbose=1", "verbose takes no value"),
        ("default=none default=roundrobin", "given twice"),
    ] {
        let args: Vec<&str> = arg.split(' ').collect();
        refused(&args).says(want);
    }
}

/// Issue 15, edge 5: a job cancelled while NVML discovery waits stays
/// COMPLETING until the deadline, so the deadline ends at Slurm's default
/// KillWait (30 s); a longer one is refused before anything is allocated.
#[test]
fn an_nvml_deadline_past_killwait_is_refused() {
    let _c = setup("required", &[]);
    for value in ["31", "90", "300"] {
        refused(&[&format!("nvml_timeout={value}")]).says(&format!(
            "nvml_timeout must be whole seconds from 1 to 30, not \"{value}\""
        ));
    }
    configure("required", &["nvml_timeout=30"]);
    srun("-N1 -w n1 true").ok();
}

// ------------------------------------------------------------ flag names

#[test]
fn a_flag_that_a_loader_reads_is_refused() {
    for flag in ["flag=LD_AUDIT", "flag=BASH_ENV", "flag=lowercase"] {
        let _c = setup("required", &[flag]);
        srun("-N1 -n1 -w n1 true")
            .run()
            .fails()
            .says(&format!("bad plugstack argument \"{flag}\""))
            .says("valid arguments");
        drop(_c);
    }
    let _c = setup("required", &[]);
    // No node drained.
    srun("-N4 -n4 true").ok();
}

/// Issue 15, edge 6: a flag is set to 1 in every mapped task, so a name
/// that a runtime reads (`PYTHONHOME=1` stops python3) is refused before
/// anything is allocated; a project's own prefix is taken.
#[test]
fn flags_that_runtimes_read_are_refused() {
    let _c = setup("required", &[]);
    for (flag, want) in [
        ("PYTHONHOME", "upper-case variable name PREFIX_NAME"),
        ("LOCPATH", "upper-case variable name PREFIX_NAME"),
        ("HOSTALIASES", "upper-case variable name PREFIX_NAME"),
        ("POSIXLY_CORRECT", "names beginning with POSIXLY_ are read"),
        ("FI_PROVIDER", "names beginning with FI_ are read"),
        ("UCX_TLS", "names beginning with UCX_ are read"),
        ("MV2_ENABLE_AFFINITY", "names beginning with MV2_ are read"),
        ("GCONV_PATH", "names beginning with GCONV_ are read"),
    ] {
        refused(&[&format!("flag={flag}")])
            .says(&format!("bad plugstack argument \"flag={flag}\""))
            .says(want);
    }
    configure("required", &["flag=NERSC_GPU_BOUND"]);
    let out = srun("-w n1 -n2 --gpus-per-node=4 --desi-gpu-map=contiguous")
        .probe("echo $CUDA_VISIBLE_DEVICES ${NERSC_GPU_BOUND-unset}")
        .ok();
    assert_eq!(out.lines(""), ["0,1 1", "2,3 1"], "{out}");
}

// ------------------------------------------------------------ plugstack lines

/// Four verbose contiguous tasks on n1's four GPUs, each task's row.
fn four_on_n1() -> Ran {
    srun("-N1 -n4 -w n1 --gpus-per-node=4 --desi-gpu-map=verbose,contiguous")
        .probe(probe::FULL)
        .ok()
}

/// Each of [`four_on_n1`]'s tasks mapped once, to its own GPU.
const FOUR_MAPPED_ONCE: [&str; 4] = [
    "0 n1 0 0 1 contiguous 4",
    "1 n1 1 1 1 contiguous 4",
    "2 n1 2 2 1 contiguous 4",
    "3 n1 3 3 1 contiguous 4",
];

/// Runs [`four_on_n1`] with the plugin on two plugstack lines: each task
/// mapped once, reported once, and no line keeping Slurm's binding (what
/// the second line says when it takes the first one's mapping for Slurm's).
#[track_caller]
fn four_mapped_once() -> Ran {
    let out = four_on_n1().rows_are(&FOUR_MAPPED_ONCE);
    let lines = out.said();
    let reports = lines.iter().filter(|l| l.contains(" rank=")).count();
    assert_eq!(reports, 4, "one report per task: {lines:?}");
    assert!(
        !lines.iter().any(|l| l.contains("keeping Slurm's")),
        "{lines:?}"
    );
    out
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
    four_mapped_once().never_says("provided by both");
    let out = srun("--desi-gpu-map=help true").ok();
    assert_eq!(out.stdout().matches("Usage:").count(), 1, "{out}");
    // The environment form, sbatch and salloc work, and map once.
    srun("-N1 -n2 -w n1 --gpus-per-node=4")
        .env(OPTION_ENV, "roundrobin")
        .probe(probe::FULL)
        .run()
        .rows_are(&["0 n1 0 0,2 1 roundrobin 4", "1 n1 1 1,3 1 roundrobin 4"]);
    let inner = format!("srun -n2 bash -c '{}'", probe::FULL);
    salloc("-N1 -n2 -w n1 --gpus-per-node=4 --desi-gpu-map=contiguous")
        .probe(&inner)
        .run()
        .rows_are(&["0 n1 0 0,1 1 contiguous 4", "1 n1 1 2,3 1 contiguous 4"]);
    let output = format!("{}/two-copies.out", state_dir());
    sbatch("--wait -o")
        .arg(&output)
        .args("-N1 -n2 -w n1 --gpus-per-node=4 --desi-gpu-map=roundrobin --wrap")
        .arg(&inner)
        .ok();
    let batch = std::fs::read_to_string(&output).unwrap_or_default();
    assert_eq!(
        probe_rows(&batch),
        rows(&["0 n1 0 0,2 1 roundrobin 4", "1 n1 1 1,3 1 roundrobin 4"]),
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
    let lines = four_mapped_once().said();
    assert!(
        !lines
            .iter()
            .any(|l| l.contains("narrowed") || l.contains("keeping Slurm's")),
        "the second line took the first one's mapping for Slurm's: {lines:?}"
    );
}

#[test]
fn a_bad_optional_line_never_hides_a_good_required_one() {
    let (_c, _second) = two_lines(&["optional", "bogus=1"], "required SO\n");
    let lines = four_on_n1().rows_are(&FOUR_MAPPED_ONCE).said();
    assert!(
        !lines.iter().any(|l| l.contains("misconfigured")),
        "{lines:?}"
    );
}

#[test]
fn a_required_lines_error_is_never_ignored() {
    let (_c, _second) = two_lines(&["optional"], "required SO bogus=1\n");
    srun("-N1 -w n1 true").run().fails().says("bogus");
}

#[test]
fn a_plugstack_value_that_is_not_utf8_is_named_and_quoted() {
    let _c = setup("required", &[]);
    let path = format!("{}/plugstack.conf.d/desi-gpu-map-test.conf", state_dir());
    let mut line = format!("required {} nvml=/opt/", so()).into_bytes();
    line.extend_from_slice(b"\xff\xfelib.so\n");
    std::fs::write(&path, line).expect("plugstack line");
    srun("-N1 -w n1 true")
        .run()
        .fails()
        .says("nvml=")
        .says("\"/opt/\u{fffd}\u{fffd}lib.so\"")
        .says("UTF-8")
        .never_says("C string");
}
