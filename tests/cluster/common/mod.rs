//! Helpers shared by the suites that drive the local test cluster.

mod job;
pub mod layouts;
pub mod probe;
pub use job::{client, salloc, sbatch, srun, Job, Ran};

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};

/// Plugstack and fake-NVML settings are global to the cluster: one test at a time.
pub static CLUSTER: Mutex<()> = Mutex::new(());

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn state_dir() -> String {
    std::env::var("DGM_CLUSTER_DIR").unwrap_or_else(|_| "/tmp/desi-gpu-map-cluster".to_string())
}

pub fn so() -> String {
    std::env::var("DGM_PLUGIN_SO").unwrap_or_else(|_| {
        repo()
            .join("target/release/libdesi_gpu_map_spank.so")
            .display()
            .to_string()
    })
}

pub fn fake_nvml() -> String {
    format!("{}/nvml/libnvidia-ml.so.1", state_dir())
}

pub fn bin() -> String {
    repo()
        .join("target/release/desi-gpu-map")
        .display()
        .to_string()
}

/// The task prolog's and epilog's binary: the command linked statically
/// (`make build`), which has the dynamic `bin()` beside it ask NVML.
pub fn prolog_bin() -> String {
    repo()
        .join("target/release/desi-gpu-map-prolog")
        .display()
        .to_string()
}

/// Debian's real NVML (`libnvidia-ml1`), as `tests/nvidia/fetch.sh`
/// unpacked it (`make nvidia`); `DGM_NVIDIA_DIR` names another such dir.
pub fn real_nvml_unpacked() -> PathBuf {
    let dir = std::env::var("DGM_NVIDIA_DIR")
        .unwrap_or_else(|_| "/var/tmp/desi-gpu-map-nvidia/current".to_string());
    let lib = PathBuf::from(dir).join("libnvidia-ml.so.1");
    assert!(
        lib.is_file(),
        "{} is missing: run tests/nvidia/fetch.sh (make nvidia) as root",
        lib.display()
    );
    lib
}

/// A copy of the real NVML in the state dir, where a Slurm root sees it at
/// the same path (cluster.sh binds the state dir and the repo into it, not
/// the NVML's dir).
pub fn real_nvml() -> String {
    let dir = format!("{}/real-nvml", state_dir());
    std::fs::create_dir_all(&dir).expect("make the real NVML's dir");
    let lib = format!("{dir}/libnvidia-ml.so.1");
    std::fs::copy(real_nvml_unpacked(), &lib).expect("copy the real NVML");
    lib
}

pub const OPTION_ENV: &str = "SLURM_SPANK__SLURM_SPANK_OPTION_desi_gpu_map_desi_gpu_map";

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub fn show(out: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    )
}

/// Runs the harness; a failure here fails the test.
pub fn cluster(args: &[&str]) -> String {
    script("tests/cluster/cluster.sh", args)
}

/// Runs one of the repository's bash scripts (`path` from its root) and
/// returns its standard output; a failure here fails the test.
pub fn script(path: &str, args: &[&str]) -> String {
    let out = Command::new("bash")
        .arg(repo().join(path))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {path}: {e}"));
    assert!(
        out.status.success(),
        "{path} {args:?} failed:\n{}",
        show(&out)
    );
    text(&out.stdout)
}

/// Takes the cluster for one test, with the plugin loaded as `mode` with
/// `args`, and the fake NVML in its default state.
pub fn setup(mode: &str, args: &[&str]) -> MutexGuard<'static, ()> {
    let guard = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    configure(mode, args);
    guard
}

/// Loads the plugin as `mode` with `args`, and resets the fake NVML.
pub fn configure(mode: &str, args: &[&str]) {
    let mut all = vec!["plugin", mode];
    let so = so();
    all.push(&so);
    all.extend_from_slice(args);
    cluster(&all);
    cluster(&["nvml", "reset"]);
    cluster(&["nvml", "lib", "on"]);
}

/// The Debian root whose Slurm runs the cluster (`DGM_SLURM_ROOT`, see
/// tests/cluster/slurm-root.sh), or None for the host's Slurm.
pub fn slurm_root() -> Option<String> {
    std::env::var("DGM_SLURM_ROOT")
        .ok()
        .filter(|r| !r.is_empty())
}

/// The Slurm release series under test, e.g. "22.05" or "24.11", from
/// `DGM_SLURM_SERIES` (set by tests/run-cluster-tests.sh); the host's
/// 22.05 when unset.
pub fn series() -> String {
    std::env::var("DGM_SLURM_SERIES").unwrap_or_else(|_| "22.05".to_string())
}

/// The series under test is `major.minor` or later.
pub fn series_at_least(major_minor: &str) -> bool {
    let number = |s: &str| -> (u32, u32) {
        let mut parts = s.split('.').map(|p| p.parse().unwrap_or(0));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
    };
    number(&series()) >= number(major_minor)
}

/// A Slurm client command with a clean environment: no option or GPU list
/// inherited from whoever runs the tests. With a Slurm root the command
/// runs inside it (`chroot`), where the state dir and the repo have the
/// same paths as here.
pub fn slurm(cmd: &str, args: &[&str]) -> Command {
    slurm_as("root", cmd, args)
}

/// The test users cluster.sh makes (`TEST_USERS` there), and their uids.
pub const USERS: [(&str, u32); 2] = [("dgm-alice", 3901), ("dgm-bob", 3902)];

/// [`slurm`] run as `user`, from `/tmp` (the repository may be closed to them).
pub fn slurm_as(user: &str, cmd: &str, args: &[&str]) -> Command {
    let mut c = Command::new("timeout");
    c.arg("120");
    match (slurm_root(), user) {
        (Some(root), "root") => c.arg("chroot").arg(root),
        (Some(root), user) => c
            .arg("chroot")
            .arg(format!("--userspec={user}:{user}"))
            .arg(root),
        (None, "root") => &mut c,
        (None, user) => c.args(["runuser", "-u", user, "--"]),
    };
    if user != "root" {
        c.current_dir("/tmp").env("HOME", "/tmp");
    }
    c.arg(cmd).args(args);
    c.env("SLURM_CONF", format!("{}/slurm.conf", state_dir()));
    for var in [
        OPTION_ENV,
        "CUDA_VISIBLE_DEVICES",
        "DESI_GPU_MAPPED",
        "SLURM_JOB_ID",
        "SLURM_JOBID",
    ] {
        c.env_remove(var);
    }
    c
}

pub fn run(cmd: &str, args: &[&str]) -> Output {
    slurm(cmd, args).output().expect("run a Slurm client")
}

pub fn probe_rows(stdout: &str) -> String {
    let mut rows: Vec<(u32, String)> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("T "))
        .map(|l| {
            (
                l.split(' ')
                    .next()
                    .and_then(|r| r.parse().ok())
                    .unwrap_or(u32::MAX),
                l.to_string(),
            )
        })
        .collect();
    rows.sort();
    rows.into_iter().map(|(_, l)| l + "\n").collect()
}

/// The expected table, written as literal lines.
pub fn rows(lines: &[&str]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// Jobs the controller knows about, finished ones included.
pub fn job_count() -> usize {
    let out = run("squeue", &["-h", "-t", "all", "-o", "%i"]);
    text(&out.stdout).lines().count()
}

/// A job holding GPUs; cancelled when dropped, even when a test fails.
pub struct Held(pub String);

impl Drop for Held {
    fn drop(&mut self) {
        let _ = run("scancel", &[&self.0]);
    }
}

/// Submits a job that holds `gres` on `node`, and waits until it runs.
pub fn hold(node: &str, gres: &str) -> Held {
    hold_in("debug", node, gres)
}

/// [`hold`] in `partition`.
pub fn hold_in(partition: &str, node: &str, gres: &str) -> Held {
    let out = run(
        "sbatch",
        &[
            "-p",
            partition,
            "--parsable",
            "-o",
            "/dev/null",
            "-w",
            node,
            "-n1",
            &format!("--gres={gres}"),
            "--wrap",
            "sleep 300",
        ],
    );
    assert!(out.status.success(), "{}", show(&out));
    let id = text(&out.stdout).trim().to_string();
    let waited = run(
        "bash",
        &[
            "-c",
            &format!("for i in $(seq 100); do [ \"$(squeue -h -j {id} -o %t)\" = R ] && exit 0; sleep 0.1; done; exit 1"),
        ],
    );
    let held = Held(id);
    assert!(
        waited.status.success(),
        "the job holding {gres} on {node} never ran"
    );
    held
}

/// srun's words for 8 tasks on n1 and n2, 4 per node, 4 GPUs each.
pub const TWO_NODES_EIGHT_TASKS: &str = "-N2 -n8 --ntasks-per-node=4 -w n[1-2] --gpus-per-node=4";

/// Their probe rows when every task gets its own GPU.
pub const EIGHT_ONE_GPU_EACH: [&str; 8] = [
    "0 n1 0 0 1",
    "1 n1 1 1 1",
    "2 n1 2 2 1",
    "3 n1 3 3 1",
    "4 n2 0 0 1",
    "5 n2 1 1 1",
    "6 n2 2 2 1",
    "7 n2 3 3 1",
];

/// The lines of `output` that `keep` selects, sorted (tasks print in any
/// order).
pub fn sorted_lines(output: &[u8], keep: impl Fn(&str) -> bool) -> Vec<String> {
    let mut lines: Vec<String> = text(output)
        .lines()
        .filter(|l| keep(l))
        .map(String::from)
        .collect();
    lines.sort();
    lines
}

/// The running cluster's mode, as cluster.sh recorded it at `up`: `plain`
/// (proctrack/linuxproc, File= lines), or under DGM_PRODUCTION=1 `cgroup`
/// (proctrack/cgroup, task/cgroup, ConstrainDevices; File= lines),
/// `autodetect` (and AutoDetect=nvml) or `uuid` (and Flags=env_uuid).
pub fn mode() -> String {
    std::fs::read_to_string(format!("{}/mode", state_dir()))
        .map(|m| m.trim().to_string())
        .unwrap_or_else(|_| "plain".to_string())
}

/// The cluster runs as production sites do (DGM_PRODUCTION=1 at `up`).
pub fn production() -> bool {
    mode() != "plain"
}

/// A CPU burner: one spinning thread per core of the machine (every node
/// of the test cluster is on it), from `on_every_core` until dropped. A
/// busy node is where production steps end; the teardown tests run their
/// ends under one, since a race that a quiet node wins is lost there.
pub struct Burner {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Burner {
    pub fn on_every_core() -> Burner {
        use std::sync::atomic::{AtomicBool, Ordering};
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let threads = (0..cores)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        Burner { stop, threads }
    }
}

impl Drop for Burner {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}
