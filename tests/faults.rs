//! Load, fault and security cases on the local test cluster (run with the
//! integration suite by `tests/run-cluster-tests.sh`). Every case checks
//! that nothing is lost: each task ran, with the right GPU or with its
//! environment intact, and the plugin said what happened.
#![cfg(feature = "cluster-tests")]

mod common;
use common::*;
use std::ffi::OsStr;
use std::fs::FileTimes;
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The lines the plugin printed on the tasks' stderr.
fn said(out: &std::process::Output) -> Vec<String> {
    sorted_lines(&out.stderr, |l| l.starts_with("desi-gpu-map: "))
}

/// salloc's arguments for 4 tasks on each of n1 and n2, 4 GPUs each.
const TWO_NODE_ALLOCATION: [&str; 5] = [
    "-N2",
    "--ntasks-per-node=4",
    "-w",
    "n[1-2]",
    "--gpus-per-node=4",
];

// ------------------------------------------------------------ load

#[test]
fn three_hundred_consecutive_steps() {
    let _c = setup("required", &[]);
    let script = format!(
        "for i in $(seq 300); do srun -n8 --desi-gpu-map=roundrobin bash -c '{PROBE}' | sort -n -k2 | tr '\\n' ';'; echo; done"
    );
    let out = run(
        "salloc",
        &[&TWO_NODE_ALLOCATION[..], &["bash", "-c", &script]].concat(),
    );
    assert!(out.status.success(), "{}", show(&out));
    let want: String = EIGHT_ONE_GPU_EACH
        .iter()
        .map(|r| format!("T {r};"))
        .collect();
    let lines: Vec<String> = text(&out.stdout).lines().map(String::from).collect();
    assert_eq!(lines.len(), 300, "{}", show(&out));
    let wrong: Vec<(usize, &String)> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| **l != want)
        .collect();
    assert!(
        wrong.is_empty(),
        "{} of 300 steps mapped wrongly, first: {:?}",
        wrong.len(),
        wrong.first()
    );
}

#[test]
fn eight_overlapping_steps() {
    let _c = setup("required", &[]);
    let dir = format!("{}/overlap", state_dir());
    let script = format!(
        "rm -rf {dir}; mkdir -p {dir}; for i in $(seq 8); do \
         srun --overlap -n8 --desi-gpu-map=roundrobin bash -c '{PROBE}; sleep 1' > {dir}/$i & done; wait"
    );
    let out = run(
        "salloc",
        &[&TWO_NODE_ALLOCATION[..], &["bash", "-c", &script]].concat(),
    );
    assert!(out.status.success(), "{}", show(&out));
    for i in 1..=8 {
        let got = std::fs::read_to_string(format!("{dir}/{i}")).unwrap_or_default();
        assert_eq!(
            probe_rows(&got),
            rows(&EIGHT_ONE_GPU_EACH),
            "step {i}: {}",
            show(&out)
        );
    }
}

// ------------------------------------------------------------ NVML faults

/// A step that needs NVML: 2 GPUs on n4, where Slurm sets only
/// SLURM_GPUS_ON_NODE (Flags=no_gpu_env), with NVML found by the loader.
fn nvml_step(fault: &[&str]) -> std::process::Output {
    if !fault.is_empty() {
        let mut set = vec!["nvml", "set"];
        set.extend_from_slice(fault);
        cluster(&set);
    }
    run(
        "srun",
        &[
            "-N1",
            "-n2",
            "-w",
            "n4",
            "--gres=gpu:2",
            "--desi-gpu-map=roundrobin",
            "bash",
            "-c",
            PROBE,
        ],
    )
}

fn assert_unchanged_with_one_line(out: &std::process::Output, want: &str) {
    assert!(out.status.success(), "{}", show(out));
    assert_eq!(
        probe_rows(&text(&out.stdout)),
        rows(&["0 n4 0 unset unset", "1 n4 1 unset unset"]),
        "{}",
        show(out)
    );
    let lines = said(out);
    assert_eq!(lines.len(), 1, "one line: {}", show(out));
    assert!(lines[0].contains(want), "want {want:?}: {}", show(out));
}

#[test]
fn nvml_counts_one_initialisation_per_node_per_step() {
    // Whole nodes without a GPU request: NVML's list, where the site says
    // Slurm tracks no GPUs.
    let _c = setup("required", &["untracked=whole-node"]);
    cluster(&["nvml", "clear-log"]);
    let out = run(
        "srun",
        &[
            "-N2",
            "-n8",
            "--exclusive",
            "-w",
            "n[1-2]",
            "--desi-gpu-map=roundrobin",
            "bash",
            "-c",
            PROBE,
        ],
    );
    assert_eq!(
        probe_rows(&text(&out.stdout)),
        rows(&[
            "0 n1 0 GPU-fake-n1-0 1",
            "1 n1 1 GPU-fake-n1-1 1",
            "2 n1 2 GPU-fake-n1-2 1",
            "3 n1 3 GPU-fake-n1-3 1",
            "4 n2 0 GPU-fake-n2-0 1",
            "5 n2 1 GPU-fake-n2-1 1",
            "6 n2 2 GPU-fake-n2-2 1",
            "7 n2 3 GPU-fake-n2-3 1",
        ]),
        "{}",
        show(&out)
    );
    let log = cluster(&["nvml", "log"]);
    let inits: Vec<&str> = log.lines().filter(|l| l.starts_with("init ")).collect();
    assert_eq!(inits.len(), 2, "one init per node for 8 tasks:\n{log}");
    assert!(
        inits.iter().any(|l| l.starts_with("init n1 "))
            && inits.iter().any(|l| l.starts_with("init n2 ")),
        "{log}"
    );
}

#[test]
fn nvml_library_missing() {
    let _c = setup("required", &[]);
    cluster(&["nvml", "lib", "off"]);
    let out = nvml_step(&[]);
    cluster(&["nvml", "lib", "on"]);
    assert_unchanged_with_one_line(&out, "NVML: cannot initialise libnvidia-ml.so.1");
}

#[test]
fn nvml_init_fails() {
    let _c = setup("required", &[]);
    assert_unchanged_with_one_line(
        &nvml_step(&["fail=init"]),
        "NVML: cannot initialise libnvidia-ml.so.1",
    );
}

#[test]
fn nvml_count_fails() {
    let _c = setup("required", &[]);
    assert_unchanged_with_one_line(
        &nvml_step(&["fail=count"]),
        "NVML: nvmlDeviceGetCount failed",
    );
}

#[test]
fn nvml_uuid_fails() {
    let _c = setup("required", &[]);
    assert_unchanged_with_one_line(&nvml_step(&["fail=uuid"]), "NVML: nvmlDeviceGetUUID failed");
}

#[test]
fn nvml_reports_fewer_gpus_than_slurm_counts() {
    let _c = setup("required", &[]);
    assert_unchanged_with_one_line(
        &nvml_step(&["report.n4=1"]),
        "NVML finds 1 GPUs but SLURM_GPUS_ON_NODE=2",
    );
}

#[test]
fn nvml_cannot_tell_a_partial_allocation_apart() {
    // One of n4's two GPUs: NVML lists both, so which is the step's is unknown.
    let _c = setup("required", &[]);
    let out = run(
        "srun",
        &[
            "-N1",
            "-n1",
            "-w",
            "n4",
            "--gres=gpu:1",
            "--desi-gpu-map=roundrobin",
            "bash",
            "-c",
            PROBE,
        ],
    );
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        probe_rows(&text(&out.stdout)),
        rows(&["0 n4 0 unset unset"])
    );
    let lines = said(&out);
    assert_eq!(lines.len(), 1, "{}", show(&out));
    assert!(
        lines[0].contains("NVML finds 2 GPUs but SLURM_GPUS_ON_NODE=1"),
        "{}",
        show(&out)
    );
}

/// n4, where NVML is asked, with a fake NVML whose nvmlInit sleeps 120 s
/// and a 2 s deadline.
fn hung_nvml() -> std::sync::MutexGuard<'static, ()> {
    let nvml = format!("nvml={}", fake_nvml());
    let guard = setup("required", &[&nvml, "nvml_timeout=2"]);
    cluster(&["nvml", "set", "hang.n4=120"]);
    cluster(&["nvml", "clear-log"]);
    guard
}

#[test]
fn a_hung_nvml_is_given_up_at_the_deadline() {
    let _c = hung_nvml();
    let started = Instant::now();
    let out = run(
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
            PROBE,
        ],
    );
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(30),
        "took {took:?}: {}",
        show(&out)
    );
    assert_unchanged_with_one_line(&out, "NVML did not answer within 2 s");
    // NVML was really asked (and hung), and slurmd's log says so too.
    assert!(
        took >= Duration::from_secs(2),
        "took {took:?}: {}",
        show(&out)
    );
    let inits = cluster(&["nvml", "log"]);
    assert!(inits.contains("init n4 "), "{inits}");
    let log =
        std::fs::read_to_string(format!("{}/log/slurmd-n4.log", state_dir())).unwrap_or_default();
    assert!(
        log.contains("NVML did not answer within 2 s"),
        "slurmd-n4.log: {}",
        log.lines().rev().take(20).collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn scancel_ends_a_job_whose_nvml_hangs() {
    let _c = hung_nvml();
    let out = run(
        "sbatch",
        &[
            "--parsable",
            "-o",
            "/dev/null",
            "-w",
            "n4",
            "-n1",
            "--gpus-per-node=2",
            "--wrap",
            "srun --desi-gpu-map=contiguous sleep 300",
        ],
    );
    assert!(out.status.success(), "{}", show(&out));
    let id = text(&out.stdout).trim().to_string();
    let _held = Held(id.clone());
    // Cancel once the step's NVML discovery on n4 has begun (and hangs).
    let asked = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        cluster(&["nvml", "log"]).contains("init n4 ")
    });
    assert!(asked, "the step never asked NVML on n4");
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let cancelled = run("scancel", &[&id]);
    assert!(cancelled.status.success(), "{}", show(&cancelled));
    let gone = loop {
        let left = run("squeue", &["-h", "-j", &id, "-o", "%t"]);
        if text(&left.stdout).trim().is_empty() {
            break true;
        }
        if started.elapsed() > Duration::from_secs(40) {
            break false;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let took = started.elapsed();
    assert!(
        gone && took < Duration::from_secs(20),
        "job {id} still listed {took:?} after scancel"
    );
    let state = run("sinfo", &["-h", "-n", "n4", "-o", "%t"]);
    assert!(
        !text(&state.stdout).contains("drain"),
        "n4: {}",
        show(&state)
    );
}

// ------------------------------------------------------------ the real NVML

/// What NVML's `nvmlInit` says without a driver (NVML_ERROR_DRIVER_NOT_LOADED,
/// as nvml-wrapper words it; nvmlErrorString says "Driver Not Loaded").
const NO_DRIVER: &str = "NVIDIA driver is not loaded";

/// 2000-01-01: an access time that any read of a file replaces, under
/// `relatime` too.
fn long_ago() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(946_684_800)
}

/// Marks `path` as unread since long ago.
fn age(path: &str) {
    let file = std::fs::File::options()
        .write(true)
        .open(path)
        .expect("open to set times");
    file.set_times(FileTimes::new().set_accessed(long_ago()))
        .expect("set the access time");
}

/// Whether `path` was read since [`age`].
fn was_read(path: &str) -> bool {
    let accessed = std::fs::metadata(path).and_then(|m| m.accessed());
    accessed.expect("access time") != long_ago()
}

/// The real NVML for the cluster, on a file system that records reads in
/// access times (what tells whether the plugin loaded it); checked here.
fn real_nvml_watched() -> String {
    let lib = real_nvml();
    age(&lib);
    let mut head = [0u8; 4];
    std::fs::File::open(&lib)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
        .expect("read the real NVML");
    assert!(
        was_read(&lib),
        "{lib}: this file system records no reads (noatime), so the tests cannot tell whether NVML was loaded"
    );
    age(&lib);
    lib
}

#[test]
fn the_real_nvml_without_a_driver_leaves_a_no_gpu_env_step_unmapped_with_its_error() {
    // n4 says Flags=no_gpu_env: only NVML could list its GPUs, and Debian's
    // real libnvidia-ml fails to initialise without a driver.
    let lib = real_nvml_watched();
    let _c = setup("required", &[&format!("nvml={lib}"), "nvml_timeout=5"]);
    let started = Instant::now();
    let out = nvml_step(&[]);
    let took = started.elapsed();
    let want = format!("NVML: cannot initialise {lib}: {NO_DRIVER}");
    assert_unchanged_with_one_line(&out, &want);
    assert!(
        took < Duration::from_secs(5),
        "took {took:?}: {}",
        show(&out)
    );
    assert!(
        was_read(&lib),
        "the plugin never loaded {lib}: {}",
        show(&out)
    );
    let log =
        std::fs::read_to_string(format!("{}/log/slurmd-n4.log", state_dir())).unwrap_or_default();
    assert!(
        log.contains(&want),
        "slurmd-n4.log: {}",
        log.lines().rev().take(20).collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn the_real_nvml_is_not_loaded_where_slurm_lists_the_gpus() {
    let lib = real_nvml_watched();
    let _c = setup("required", &[&format!("nvml={lib}")]);
    let out = run(
        "srun",
        &[
            "-N1",
            "-n2",
            "-w",
            "n1",
            "--gpus-per-node=2",
            "--desi-gpu-map=contiguous",
            "bash",
            "-c",
            PROBE,
        ],
    );
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        probe_rows(&text(&out.stdout)),
        rows(&["0 n1 0 0 1", "1 n1 1 1 1"]),
        "{}",
        show(&out)
    );
    assert!(said(&out).is_empty(), "{}", show(&out));
    assert!(!was_read(&lib), "the plugin loaded {lib}: {}", show(&out));
}

// ------------------------------------------------------------ bad input

#[test]
fn odd_inherited_gpu_lists_are_left_intact() {
    // A step without GPUs, run from an environment with an odd list: each
    // task's environment is exactly what it is without the plugin.
    let _c = setup("required", &[]);
    let many: Vec<String> = (0..5000).map(|i| i.to_string()).collect();
    let many = many.join(",");
    let probe = r#"echo "L $SLURM_LOCALID ${CUDA_VISIBLE_DEVICES-unset} ${DESI_GPU_MAPPED-unset}""#;
    for value in ["", "garbage,,x", "0,0", "NoDevFiles", many.as_str()] {
        let step = |option: Option<&str>| {
            let mut args = vec!["-N1", "-n1", "-w", "n1"];
            args.extend(option);
            args.extend(["bash", "-c", probe]);
            let mut c = slurm("srun", &args);
            c.env("CUDA_VISIBLE_DEVICES", value);
            c.output().unwrap()
        };
        let plain = step(None);
        let mapped = step(Some("--desi-gpu-map=contiguous"));
        assert!(mapped.status.success(), "{value:.40}: {}", show(&mapped));
        assert_eq!(text(&mapped.stdout), text(&plain.stdout), "{value:.40}");
        assert!(
            text(&mapped.stdout).starts_with("L 0 ")
                && text(&mapped.stdout).trim_end().ends_with(" unset")
        );
        let lines = said(&mapped);
        assert_eq!(lines.len(), 1, "{value:.40}: {}", show(&mapped));
        assert!(
            lines[0].contains("no GPUs are allocated"),
            "{}",
            show(&mapped)
        );
        assert!(lines[0].len() < 400, "{}", lines[0]);
    }
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
        configure("required", &args);
        let out = run("srun", &["-N1", "-w", "n1", "true"]);
        assert!(!out.status.success(), "{arg}: {}", show(&out));
        assert!(
            text(&out.stderr).contains(want),
            "{arg}: want {want:?}: {}",
            show(&out)
        );
    }
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
        configure("required", &[&format!("flag={flag}")]);
        let out = run("srun", &["-N1", "-w", "n1", "true"]);
        assert!(!out.status.success(), "flag={flag}: {}", show(&out));
        let err = text(&out.stderr);
        assert!(
            err.contains(&format!("bad plugstack argument \"flag={flag}\"")) && err.contains(want),
            "flag={flag}: want {want:?}: {}",
            show(&out)
        );
    }
    configure("required", &["flag=NERSC_GPU_BOUND"]);
    let out = run(
        "srun",
        &[
            "-w",
            "n1",
            "-n2",
            "--gpus-per-node=4",
            "--desi-gpu-map=contiguous",
            "bash",
            "-c",
            "echo $CUDA_VISIBLE_DEVICES ${NERSC_GPU_BOUND-unset}",
        ],
    );
    assert!(out.status.success(), "{}", show(&out));
    let mut got: Vec<String> = text(&out.stdout).lines().map(String::from).collect();
    got.sort();
    assert_eq!(got, ["0 1", "1 1"], "{}", show(&out));
}

/// Issue 15, edge 5: a job cancelled while NVML discovery waits stays
/// COMPLETING until the deadline, so the deadline ends at Slurm's default
/// KillWait (30 s); a longer one is refused before anything is allocated.
#[test]
fn an_nvml_deadline_past_killwait_is_refused() {
    let _c = setup("required", &[]);
    for value in ["31", "90", "300"] {
        configure("required", &[&format!("nvml_timeout={value}")]);
        let out = run("srun", &["-N1", "-w", "n1", "true"]);
        assert!(
            !out.status.success(),
            "nvml_timeout={value}: {}",
            show(&out)
        );
        let want = format!("nvml_timeout must be whole seconds from 1 to 30, not \"{value}\"");
        assert!(text(&out.stderr).contains(&want), "{}", show(&out));
    }
    configure("required", &["nvml_timeout=30"]);
    let out = run("srun", &["-N1", "-w", "n1", "true"]);
    assert!(out.status.success(), "nvml_timeout=30: {}", show(&out));
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
        let shown = String::from_utf8_lossy(&value[..value.len().min(40)]).into_owned();
        let mut c = slurm("srun", &["-N1", "-w", "n1"]);
        c.arg(OsStr::from_bytes(value)).arg("true");
        let out = c.output().unwrap();
        assert!(!out.status.success(), "{shown}: {}", show(&out));
        assert!(
            text(&out.stderr).contains("invalid --desi-gpu-map value"),
            "{shown}: {}",
            show(&out)
        );
        assert!(
            text(&out.stderr).len() < 2000,
            "{shown}: a short message: {}",
            show(&out)
        );
    }
    // Marked optional, srun goes on: the node tells the task and runs it unchanged.
    configure("optional", &[]);
    for value in &values {
        let shown = String::from_utf8_lossy(&value[..value.len().min(40)]).into_owned();
        let mut c = slurm("srun", &["-N1", "-n2", "-w", "n1", "--gpus-per-node=4"]);
        c.arg(OsStr::from_bytes(value)).args(["bash", "-c", PROBE]);
        let out = c.output().unwrap();
        assert!(out.status.success(), "{shown}: {}", show(&out));
        assert_eq!(
            probe_rows(&text(&out.stdout)),
            rows(&["0 n1 0 0,1,2,3 unset", "1 n1 1 0,1,2,3 unset"]),
            "{shown}"
        );
        assert!(
            said(&out)
                .iter()
                .any(|l| l.contains("invalid --desi-gpu-map value")),
            "{shown}: {}",
            show(&out)
        );
    }
    let state = run("sinfo", &["-h", "-n", "n1", "-o", "%t"]);
    assert_eq!(text(&state.stdout).trim(), "idle");
}

// ------------------------------------------------------------ operations

#[test]
fn slurmd_restart_between_steps() {
    let _c = setup("required", &[]);
    let args = [&TWO_NODES_EIGHT_TASKS[..], &["--desi-gpu-map=roundrobin"]].concat();
    assert_eq!(srun_map(&args), rows(&EIGHT_ONE_GPU_EACH));
    cluster(&["restart-node", "n1"]);
    assert_eq!(srun_map(&args), rows(&EIGHT_ONE_GPU_EACH));
}

/// Covers a directory on one node for the life of a test.
struct Hidden<'a>(&'a str, String);

impl Drop for Hidden<'_> {
    fn drop(&mut self) {
        let _ = std::process::Command::new("bash")
            .arg(repo().join("tests/cluster/cluster.sh"))
            .args(["unhide", self.0, &self.1])
            .status();
    }
}

#[test]
fn plugin_missing_on_one_node_while_optional() {
    let _c = setup("optional", &[]);
    // A copy of the .so in its own directory, which n2 alone cannot see.
    let dir = format!("{}/plugin-copy", state_dir());
    std::fs::create_dir_all(&dir).unwrap();
    let copy = format!("{dir}/desi_gpu_map.so");
    std::fs::copy(so(), &copy).unwrap();
    cluster(&["plugin", "optional", &copy]);
    cluster(&["hide", "n2", &dir]);
    let hidden = Hidden("n2", dir);
    let out = run(
        "srun",
        &[
            &TWO_NODES_EIGHT_TASKS[..],
            &["--desi-gpu-map=roundrobin", "bash", "-c", PROBE],
        ]
        .concat(),
    );
    drop(hidden);
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        probe_rows(&text(&out.stdout)),
        rows(&[
            "0 n1 0 0 1",
            "1 n1 1 1 1",
            "2 n1 2 2 1",
            "3 n1 3 3 1",
            "4 n2 0 0,1,2,3 unset",
            "5 n2 1 0,1,2,3 unset",
            "6 n2 2 0,1,2,3 unset",
            "7 n2 3 0,1,2,3 unset",
        ]),
        "{}",
        show(&out)
    );
}

#[test]
fn export_none_still_carries_the_option() {
    // SPANK options travel in the launch request, not in the environment,
    // so --export=NONE keeps them (it also drops PATH: bash by full path).
    let _c = setup("required", &[]);
    let out = run(
        "srun",
        &[
            "--export=NONE",
            "-N1",
            "-n2",
            "-w",
            "n1",
            "--gpus-per-node=4",
            "--desi-gpu-map=roundrobin",
            "/bin/bash",
            "-c",
            PROBE,
        ],
    );
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        probe_rows(&text(&out.stdout)),
        rows(&["0 n1 0 0 1", "1 n1 1 1 1"])
    );
}

// ------------------------------------------------------------ security

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
        let mut c = slurm(
            "srun",
            &[
                "-N1",
                "-n4",
                "-w",
                "n1",
                "--gres=gpu:2",
                "--desi-gpu-map=roundrobin",
                "bash",
                "-c",
                r#"echo "S $SLURM_LOCALID $CUDA_VISIBLE_DEVICES ${ROCR_VISIBLE_DEVICES-unset} ${GPU_DEVICE_ORDINAL-unset} ${ZE_AFFINITY_MASK-unset}""#,
            ],
        );
        for var in [
            "CUDA_VISIBLE_DEVICES",
            "ROCR_VISIBLE_DEVICES",
            "GPU_DEVICE_ORDINAL",
            "ZE_AFFINITY_MASK",
            "SLURM_STEP_GPUS",
        ] {
            c.env(var, "0,1");
        }
        c.env("SLURM_GPUS_ON_NODE", "4");
        let out = c.output().unwrap();
        assert!(out.status.success(), "{vendor}: {}", show(&out));
        let lines = sorted_lines(&out.stdout, |l| l.starts_with("S "));
        assert_eq!(lines, want, "{vendor}: {}", show(&out));
    }
}
