//! Load, NVML faults (a failing, hung or panicking library, the real NVML
//! without a driver) and operations (a slurmd restart, the plugin missing
//! on a node) on the local test cluster (run with the integration suite by
//! `tests/run-cluster-tests.sh`; the real NVML's cases need
//! tests/nvidia/fetch.sh, `make nvidia`). Every case checks that nothing is
//! lost: each task ran, with the right GPU or with its environment intact,
//! and the plugin said what happened.

use crate::common::*;
use std::fs::FileTimes;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// salloc's words for 4 tasks on each of n1 and n2, 4 GPUs each.
const TWO_NODE_ALLOCATION: &str = "-N2 --ntasks-per-node=4 -w n[1-2] --gpus-per-node=4";

/// The plugin said exactly one line, and it holds `want`.
#[track_caller]
fn says_once(out: &Ran, want: &str) {
    let lines = out.said();
    assert_eq!(lines.len(), 1, "one line: {out}");
    assert!(lines[0].contains(want), "want {want:?}: {out}");
}

/// The last lines of node `node`'s slurmd log hold `want`.
#[track_caller]
fn slurmd_log_says(node: &str, want: &str) {
    let log = std::fs::read_to_string(format!("{}/log/slurmd-{node}.log", state_dir()))
        .unwrap_or_default();
    assert!(
        log.contains(want),
        "slurmd-{node}.log: {}",
        log.lines().rev().take(20).collect::<Vec<_>>().join("\n")
    );
}

// ------------------------------------------------------------ load

#[test]
fn three_hundred_consecutive_steps() {
    let _c = setup("required", &[]);
    let script = format!(
        "for i in $(seq 300); do srun -n8 --desi-gpu-map=roundrobin bash -c '{}' | sort -n -k2 | tr '\\n' ';'; echo; done",
        probe::GPU
    );
    let out = salloc(TWO_NODE_ALLOCATION).probe(&script).ok();
    let want: String = EIGHT_ONE_GPU_EACH
        .iter()
        .map(|r| format!("T {r};"))
        .collect();
    let stdout = out.stdout();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 300, "{out}");
    let wrong: Vec<(usize, &&str)> = lines
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
         srun --overlap -n8 --desi-gpu-map=roundrobin bash -c '{}; sleep 1' > {dir}/$i & done; wait",
        probe::GPU
    );
    let out = salloc(TWO_NODE_ALLOCATION).probe(&script).ok();
    for i in 1..=8 {
        let got = std::fs::read_to_string(format!("{dir}/{i}")).unwrap_or_default();
        assert_eq!(
            probe_rows(&got),
            rows(&EIGHT_ONE_GPU_EACH),
            "step {i}: {out}"
        );
    }
}

// ------------------------------------------------------------ NVML faults

/// A step that needs NVML: 2 GPUs on n4, where Slurm sets only
/// SLURM_GPUS_ON_NODE (Flags=no_gpu_env), with NVML found by the loader.
fn nvml_step(fault: &str) -> Ran {
    if !fault.is_empty() {
        cluster(&["nvml", "set", fault]);
    }
    srun("-N1 -n2 -w n4 --gres=gpu:2")
        .method("roundrobin")
        .probe(probe::GPU)
        .run()
}

/// Both tasks ran unmapped, and the plugin said one line holding `want`.
#[track_caller]
fn assert_unchanged_with_one_line(out: Ran, want: &str) -> Ran {
    let out = out
        .ok()
        .rows_are(&["0 n4 0 unset unset", "1 n4 1 unset unset"]);
    says_once(&out, want);
    out
}

#[test]
fn nvml_counts_one_initialisation_per_node_per_step() {
    // Whole nodes without a GPU request: NVML's list, where the site says
    // Slurm tracks no GPUs.
    let _c = setup("required", &["untracked=whole-node"]);
    cluster(&["nvml", "clear-log"]);
    srun("-N2 -n8 --exclusive -w n[1-2]")
        .method("roundrobin")
        .probe(probe::GPU)
        .run()
        .rows_are(&[
            "0 n1 0 GPU-fake-n1-0 1",
            "1 n1 1 GPU-fake-n1-1 1",
            "2 n1 2 GPU-fake-n1-2 1",
            "3 n1 3 GPU-fake-n1-3 1",
            "4 n2 0 GPU-fake-n2-0 1",
            "5 n2 1 GPU-fake-n2-1 1",
            "6 n2 2 GPU-fake-n2-2 1",
            "7 n2 3 GPU-fake-n2-3 1",
        ]);
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
    let out = nvml_step("");
    cluster(&["nvml", "lib", "on"]);
    assert_unchanged_with_one_line(out, "NVML: cannot initialise libnvidia-ml.so.1");
}

#[test]
fn nvml_init_fails() {
    let _c = setup("required", &[]);
    assert_unchanged_with_one_line(
        nvml_step("fail=init"),
        "NVML: cannot initialise libnvidia-ml.so.1",
    );
}

#[test]
fn nvml_count_fails() {
    let _c = setup("required", &[]);
    assert_unchanged_with_one_line(nvml_step("fail=count"), "NVML: nvmlDeviceGetCount failed");
}

#[test]
fn nvml_uuid_fails() {
    let _c = setup("required", &[]);
    assert_unchanged_with_one_line(nvml_step("fail=uuid"), "NVML: nvmlDeviceGetUUID failed");
}

#[test]
fn nvml_reports_fewer_gpus_than_slurm_counts() {
    let _c = setup("required", &[]);
    assert_unchanged_with_one_line(
        nvml_step("report.n4=1"),
        "NVML finds 1 GPUs but SLURM_GPUS_ON_NODE=2",
    );
}

#[test]
fn nvml_cannot_tell_a_partial_allocation_apart() {
    // One of n4's two GPUs: NVML lists both, so which is the step's is unknown.
    let _c = setup("required", &[]);
    let out = srun("-N1 -n1 -w n4 --gres=gpu:1")
        .method("roundrobin")
        .probe(probe::GPU)
        .ok()
        .rows_are(&["0 n4 0 unset unset"]);
    says_once(&out, "NVML finds 2 GPUs but SLURM_GPUS_ON_NODE=1");
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
        .arg(repo().join("tests/fakes/nvml/fake_nvml.c"))
        .arg(format!(
            "-DFAKE_NVML_CONF=\"{}/nvml/fake-nvml.conf\"",
            state_dir()
        ))
        .status()
        .expect("cc");
    assert!(built.success());
    let _c = setup("required", &[&format!("nvml={lib}")]);
    let out = srun("-N1 -n2 -w n4 --gres=gpu:2")
        .method("contiguous")
        .env("RUST_BACKTRACE", "1")
        .probe(probe::FULL)
        .ok()
        .never_says("panicked")
        .never_says("backtrace");
    says_once(&out, "NVML: the library misbehaved");
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
    let out = srun("-N1 -n2 -w n4 --gpus-per-node=2")
        .method("contiguous")
        .probe(probe::GPU)
        .run();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(30), "took {took:?}: {out}");
    let out = assert_unchanged_with_one_line(out, "NVML did not answer within 2 s");
    // NVML was really asked (and hung), and slurmd's log says so too.
    assert!(took >= Duration::from_secs(2), "took {took:?}: {out}");
    let inits = cluster(&["nvml", "log"]);
    assert!(inits.contains("init n4 "), "{inits}");
    slurmd_log_says("n4", "NVML did not answer within 2 s");
}

#[test]
fn scancel_ends_a_job_whose_nvml_hangs() {
    let _c = hung_nvml();
    let out = sbatch("--parsable -o /dev/null -w n4 -n1 --gpus-per-node=2 --wrap")
        .arg("srun --desi-gpu-map=contiguous sleep 300")
        .ok();
    let id = out.stdout().trim().to_string();
    let _held = Held(id.clone());
    // Cancel once the step's NVML discovery on n4 has begun (and hangs).
    let asked = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        cluster(&["nvml", "log"]).contains("init n4 ")
    });
    assert!(asked, "the step never asked NVML on n4");
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    client("scancel", &id).ok();
    let gone = loop {
        let left = client("squeue", &format!("-h -j {id} -o %t")).run();
        if left.stdout().trim().is_empty() {
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
    let state = client("sinfo", "-h -n n4 -o %t").run();
    assert!(!state.stdout().contains("drain"), "n4: {state}");
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
    let out = nvml_step("");
    let took = started.elapsed();
    let want = format!("NVML: cannot initialise {lib}: {NO_DRIVER}");
    let out = assert_unchanged_with_one_line(out, &want);
    assert!(took < Duration::from_secs(5), "took {took:?}: {out}");
    assert!(was_read(&lib), "the plugin never loaded {lib}: {out}");
    slurmd_log_says("n4", &want);
}

#[test]
fn the_real_nvml_is_not_loaded_where_slurm_lists_the_gpus() {
    let lib = real_nvml_watched();
    let _c = setup("required", &[&format!("nvml={lib}")]);
    let out = srun("-N1 -n2 -w n1 --gpus-per-node=2")
        .method("contiguous")
        .probe(probe::GPU)
        .ok()
        .rows_are(&["0 n1 0 0 1", "1 n1 1 1 1"])
        .quiet();
    assert!(!was_read(&lib), "the plugin loaded {lib}: {out}");
}

// ------------------------------------------------------------ operations

#[test]
fn slurmd_restart_between_steps() {
    let _c = setup("required", &[]);
    let step = || {
        srun(TWO_NODES_EIGHT_TASKS)
            .method("roundrobin")
            .probe(probe::GPU)
            .ok()
            .rows_are(&EIGHT_ONE_GPU_EACH)
    };
    step();
    cluster(&["restart-node", "n1"]);
    step();
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
    let out = srun(TWO_NODES_EIGHT_TASKS)
        .method("roundrobin")
        .probe(probe::GPU)
        .run();
    drop(hidden);
    out.ok().rows_are(&[
        "0 n1 0 0 1",
        "1 n1 1 1 1",
        "2 n1 2 2 1",
        "3 n1 3 3 1",
        "4 n2 0 0,1,2,3 unset",
        "5 n2 1 0,1,2,3 unset",
        "6 n2 2 0,1,2,3 unset",
        "7 n2 3 0,1,2,3 unset",
    ]);
}
