//! CUDA MPS per step (`--desi-gpu-map=METHOD,mps`) on the local test
//! cluster, with Debian's real `nvidia-cuda-mps-control` (the control
//! daemon runs and answers without a GPU; tests/nvidia/fetch.sh fetches
//! it, cluster.sh copies it into the state dir). Jobs run as the harness's
//! test users, since the daemon never runs as root.
//!
//! A file per subject: the plugin's daemon (`daemon.rs`), exec's and the
//! task prolog's keeper (`keeper.rs`), and where MPS is not served or is
//! refused (`edges.rs`). What they share, and what the other suites take
//! from here, is in this file.

use crate::common::*;
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

mod daemon;
mod edges;
mod keeper;

pub(crate) const ALICE: &str = USERS[0].0;
const BOB: &str = USERS[1].0;

/// The real control daemon, as cluster.sh copied it.
fn control() -> String {
    let path = format!("{}/mps/bin/nvidia-cuda-mps-control", state_dir());
    assert!(
        std::path::Path::new(&path).is_file(),
        "{path} is missing: run tests/nvidia/fetch.sh (make nvidia), then cluster.sh up"
    );
    path
}

/// The plugin, required, with the real control daemon and `extra`.
fn mps_setup(extra: &[&str]) -> MutexGuard<'static, ()> {
    let at = format!("mps_control={}", control());
    let mut args = Vec::new();
    if !extra.iter().any(|a| a.starts_with("mps_control=")) {
        args.push(at.as_str());
    }
    args.extend_from_slice(extra);
    setup("required", &args)
}

/// Each task's MPS probe ([`probe::mps`]) with the real control daemon.
pub(crate) fn task() -> String {
    probe::mps(&control())
}

/// `srun WORDS bash -c TASK` as alice.
fn alice_step(words: &str) -> Job {
    srun(words).user(ALICE).probe(&task())
}

/// srun's words for 2 tasks on n1 with 2 GPUs, under MPS.
const TWO_ON_N1: &str = "-n2 -w n1 --gpus-per-node=2 --desi-gpu-map=contiguous,mps";

/// The batch script of a job whose step sleeps under MPS.
const SLEEPING_STEP: &str = "srun --desi-gpu-map=contiguous,mps sleep 300";

/// The `T` rows by rank, without the `T`, and the sorted `D` lines.
fn rows_and_daemons(out: &Ran) -> (String, Vec<String>) {
    (out.rows(), out.lines("D "))
}

/// Every control daemon (not a client) of the test users here: (pid, uid).
pub(crate) fn daemons() -> Vec<(u32, u32)> {
    let uids: Vec<u32> = USERS.iter().map(|(_, uid)| *uid).collect();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
        // The daemon runs with -f; a client of it (the plugin's own
        // questions) runs without.
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if !exe.ends_with("nvidia-cuda-mps-control")
            || !cmdline.split(|&b| b == 0).any(|a| a == b"-f")
        {
            continue;
        }
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let uid = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        if uids.contains(&uid) {
            found.push((pid, uid));
        }
    }
    found
}

/// Every keeper of exec's daemons (`desi-gpu-map mps-keeper`) of the test
/// users here: their pids.
pub(crate) fn keepers() -> Vec<u32> {
    let uids: Vec<u32> = USERS.iter().map(|(_, uid)| *uid).collect();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse().ok()) else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if !cmdline.split(|&b| b == 0).any(|a| a == b"mps-keeper") {
            continue;
        }
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let uid: u32 = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        if uids.contains(&uid) {
            found.push(pid);
        }
    }
    found
}

/// The steps' MPS directories under /tmp, as slurmstepd sees it.
fn mps_dirs() -> Vec<String> {
    let tmp = format!("{}/tmp", slurm_root().unwrap_or_default());
    let mut dirs: Vec<String> = std::fs::read_dir(&tmp)
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(String::from))
        .filter(|n| n.starts_with("dgm-mps."))
        .collect();
    dirs.sort();
    dirs
}

/// What the steps' directories hold, for a failure's message.
fn inside_mps_dirs() -> String {
    let tmp = format!("{}/tmp", slurm_root().unwrap_or_default());
    let dirs: Vec<String> = mps_dirs().iter().map(|d| format!("{tmp}/{d}")).collect();
    let out = std::process::Command::new("find")
        .args(&dirs)
        .args(["-printf", "%p %y %TT\n"])
        .output();
    out.map(|o| text(&o.stdout)).unwrap_or_default()
}

/// Waits up to `secs` for `done`.
pub(crate) fn wait_for(secs: u64, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    done()
}

/// The test users' exec directories whose keeper is gone, removed as the
/// user's next `exec METHOD,mps` on the node would (its keeper's sweep).
fn sweep_as_users() {
    let base = format!("{}/tmp", slurm_root().unwrap_or_default());
    for (user, _) in USERS {
        let swept = std::process::Command::new("runuser")
            .args([
                "-u",
                user,
                "--",
                &bin(),
                "mps-keeper",
                "--sweep",
                "--base",
                &base,
            ])
            .args([
                "--control",
                "-",
                "--path",
                "-",
                "--stem",
                "-",
                "--token",
                "0",
            ])
            .args(["--gpus", "-", "--timeout-ms", "0", "--tasks", "0"])
            .status()
            .expect("run the sweep");
        assert!(swept.success(), "the sweep as {user}: {swept}");
    }
}

/// No daemon, keeper or directory of any step is left on the node. Under
/// proctrack/cgroup Slurm kills what is left of a step about 0.3 ms after
/// its last task exits, and on this 2-core machine that can come before
/// exec's keeper removed its directory (never before its processes are
/// gone): the user's next exec METHOD,mps on the node removes it, as
/// [`sweep_as_users`] does here first. What is left fails this test, and
/// is removed before it fails, so that it fails no other.
#[track_caller]
pub(crate) fn assert_nothing_left(after: &str) {
    if production() {
        let gone = wait_for(10, || daemons().is_empty() && keepers().is_empty());
        if !gone {
            let left = format!("daemons {:?}, keepers {:?}", daemons(), keepers());
            clear_what_others_left();
            panic!("after {after}: {left}");
        }
        sweep_as_users();
    }
    let clean = wait_for(10, || {
        daemons().is_empty() && mps_dirs().is_empty() && keepers().is_empty()
    });
    if !clean {
        let left = format!(
            "daemons {:?}, directories {:?}, keepers {:?}",
            daemons(),
            mps_dirs(),
            keepers()
        );
        clear_what_others_left();
        panic!("after {after}: {left}");
    }
}

/// Removes what a test that failed before its end may have left: the
/// test users' daemons and keepers (by pid) and the steps' directories,
/// saying so. Every test starts here; each asserts on its own leftovers.
pub(crate) fn clear_what_others_left() {
    let pids: Vec<u32> = daemons()
        .into_iter()
        .map(|(pid, _)| pid)
        .chain(keepers())
        .collect();
    for pid in &pids {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    let base = format!("{}/tmp", slurm_root().unwrap_or_default());
    let dirs = mps_dirs();
    for dir in &dirs {
        let _ = std::fs::remove_dir_all(format!("{base}/{dir}"));
    }
    if !pids.is_empty() || !dirs.is_empty() {
        eprintln!("cleared what an earlier test left: processes {pids:?}, directories {dirs:?}");
    }
    assert!(
        wait_for(10, || daemons().is_empty() && keepers().is_empty()),
        "cannot clear the test users' daemons {:?} and keepers {:?}",
        daemons(),
        keepers()
    );
}

/// A job submitted with `--parsable`; cancelled when dropped.
pub(crate) fn held(job: Job) -> Held {
    Held(job.ok().stdout().trim().to_string())
}

fn job_done(id: &str) -> bool {
    let out = client("squeue", &format!("-h -j {id} -o %t")).run();
    out.stdout().trim().is_empty()
}

/// Slurm's token for GPU `i` of `node` in a step's list: its index, or
/// under 26.05's env_uuid (production mode) the GPU's UUID.
fn slurms(node: &str, i: u32) -> String {
    if mode() == "uuid" {
        format!("GPU-fake-{node}-{i}")
    } else {
        i.to_string()
    }
}

/// Four GPUs' UUIDs as the fake NVML names them on `node`.
fn uuids(node: &str, indices: &[u32]) -> String {
    let all: Vec<String> = indices
        .iter()
        .map(|i| format!("GPU-fake-{node}-{i}"))
        .collect();
    all.join(",")
}

// ------------------------------------------------------------ serving

/// TWO_NODES_EIGHT_TASKS under contiguous,mps: every task served by its
/// node's one daemon, as alice, on its own GPU by UUID.
pub(crate) fn assert_one_daemon_per_node_serves_all(out: &Ran) {
    let (rows, daemons) = rows_and_daemons(out);
    let want: Vec<String> = (0..8)
        .map(|rank| {
            let node = format!("n{}", rank / 4 + 1);
            let local = rank % 4;
            let gpu = uuids(&node, &[local]);
            format!("{rank} {node} {local} {gpu} 1 unset 100.0 700:{ALICE}")
        })
        .collect();
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    assert_eq!(rows, crate::common::rows(&want), "{out}");
    let uid = USERS[0].1;
    let ids = format!("{uid},{uid},{uid},{uid}");
    assert_eq!(
        daemons,
        [
            format!(
                "D n1 {ids} CUDA_VISIBLE_DEVICES={}",
                uuids("n1", &[0, 1, 2, 3])
            ),
            format!(
                "D n2 {ids} CUDA_VISIBLE_DEVICES={}",
                uuids("n2", &[0, 1, 2, 3])
            ),
        ],
        "one daemon per node, as the user, holding the step's GPUs by UUID\n{out}"
    );
}

/// 6 tasks on 4 GPUs, contiguous (2, 2, 1, 1 tasks per GPU), under
/// mps_share=even: each task's share of its GPU.
fn assert_even_shares_of_six_on_four(out: &Ran) {
    let shares: Vec<String> = out
        .rows()
        .lines()
        .map(|l| l.split(' ').nth(5).unwrap_or("").to_string())
        .collect();
    assert_eq!(shares, ["50", "50", "50", "50", "100", "100"], "{out}");
}

// ------------------------------------------------------------ isolation

/// [`serving_job`], with its daemon's pid.
fn serving_job_pid(user: &str, uid: u32) -> (Held, u32) {
    let before = daemons();
    let job = held(
        sbatch("--parsable -o /dev/null -w n1 -n1 --gres=gpu:1 --wrap")
            .user(user)
            .arg(SLEEPING_STEP),
    );
    let mut new = None;
    let started = wait_for(30, || {
        new = daemons()
            .into_iter()
            .find(|d| d.1 == uid && !before.contains(d))
            .map(|d| d.0);
        new.is_some()
    });
    assert!(started, "no daemon for {user}");
    (job, new.unwrap_or_default())
}

/// The variable `name` in the environment of process `pid`.
pub(crate) fn daemon_env(pid: u32, name: &str) -> Option<String> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{name}=");
    environ
        .split(|&b| b == 0)
        .find_map(|v| text(v).strip_prefix(&prefix).map(String::from))
}

/// Asks the daemon at `pipe` as `user`, from a step of theirs on n1: its
/// answers to `get_default_active_thread_percentage` and `quit`.
fn reach_as(user: &str, pipe: &str) -> String {
    ask_as(
        user,
        pipe,
        &["get_default_active_thread_percentage", "quit"],
    )
}

/// Sends each of `commands` to the daemon at `pipe` as `user`, from a step
/// of theirs on n1: what `ls` says of the pipe, then each answer and its
/// exit status.
fn ask_as(user: &str, pipe: &str, commands: &[&str]) -> String {
    let quoted: Vec<String> = commands.iter().map(|c| format!("'{c}'")).collect();
    let script = format!(
        "ls {pipe} 2>&1 | head -n1; for c in {}; do \
         echo $c | CUDA_MPS_PIPE_DIRECTORY={pipe} {} 2>&1; echo \"rc=$?\"; done",
        quoted.join(" "),
        control()
    );
    srun("-w n1 -n1 --overlap")
        .user(user)
        .probe(&script)
        .run()
        .stdout()
}

/// TWO_ON_N1's tasks on GPUs 0 and 1 by UUID, served by one daemon of
/// alice's; `what` says why, on failure.
fn assert_two_on_n1_served(out: &Ran, what: &str) {
    let (rows, daemons) = rows_and_daemons(out);
    assert_eq!(
        rows,
        crate::common::rows(&[
            &format!("0 n1 0 {} 1 unset 100.0 700:{ALICE}", uuids("n1", &[0])),
            &format!("1 n1 1 {} 1 unset 100.0 700:{ALICE}", uuids("n1", &[1])),
        ]),
        "{what}\n{out}"
    );
    assert_eq!(daemons.len(), 1, "{out}");
}

/// Eight one-task steps, each served by a daemon of its own.
fn assert_eight_steps_each_served_by_its_own(out: &Ran) {
    let (rows, daemons) = rows_and_daemons(out);
    assert_eq!(rows.lines().count(), 8, "{out}");
    assert!(
        rows.lines().all(|r| r.contains(" 1 unset 100.0 700:")),
        "a step unmapped or unserved:\n{rows}\n{out}"
    );
    assert_eq!(daemons.len(), 8, "one daemon per step\n{out}");
}

// ------------------------------------------------------------ exec's daemon

/// `desi-gpu-map exec` asking for `method` (with `mps`), with the real
/// control daemon and the cluster's fake NVML; APP follows.
pub(crate) fn exec_mps(method: &str) -> String {
    exec_mps_with(&format!("--mps-control {}", control()), method)
}

/// [`exec_mps`] with exec's MPS options `options` in place of the real
/// control daemon.
fn exec_mps_with(options: &str, method: &str) -> String {
    format!(
        "{} exec {options} --nvml {} --method {method} --",
        bin(),
        fake_nvml()
    )
}

/// The plugin's MPS tests' setup, with the plugin taken out: exec alone.
pub(crate) fn exec_setup() -> MutexGuard<'static, ()> {
    let guard = mps_setup(&[]);
    cluster(&["plugin", "off"]);
    guard
}

/// A job of alice's whose exec step on n1 runs for 300 s with its MPS
/// daemon and keeper: the job, and the daemon's pipe directory.
pub(crate) fn alices_exec_daemon_on_n1() -> (Held, String) {
    let before = daemons();
    let job = held(
        sbatch("--parsable -o /dev/null -w n1 -n1 --gres=gpu:1 --wrap")
            .user(ALICE)
            .arg(format!("srun {} sleep 300", exec_mps("contiguous,mps"))),
    );
    let mut pid = None;
    let started = wait_for(30, || {
        pid = daemons()
            .into_iter()
            .find(|d| !before.contains(d))
            .map(|d| d.0);
        pid.is_some() && keepers().len() == 1
    });
    assert!(started, "no daemon and keeper for alice");
    let pipe = daemon_env(pid.unwrap_or_default(), "CUDA_MPS_PIPE_DIRECTORY").expect("its pipe");
    (job, pipe)
}

// ------------------------------------------ the task prolog and epilog

/// What a step's end must leave where a task epilog tells the keeper:
/// nothing, at once and in both tracking modes, with no sweep (unlike
/// [`assert_nothing_left`]). What is left fails this test, and is removed
/// before it fails, so that it fails no other.
#[track_caller]
pub(crate) fn assert_nothing_left_unswept(after: &str) {
    let clean = wait_for(10, || {
        daemons().is_empty() && mps_dirs().is_empty() && keepers().is_empty()
    });
    if !clean {
        let left = format!(
            "daemons {:?}, directories {:?} (holding {:?}), keepers {:?}",
            daemons(),
            mps_dirs(),
            inside_mps_dirs(),
            keepers()
        );
        clear_what_others_left();
        panic!("after {after}, with the task epilog: {left}");
    }
}

/// The srun options that make `desi-gpu-map` the task prolog and epilog.
pub(crate) fn prolog_and_epilog() -> String {
    format!("--task-prolog={b} --task-epilog={b}", b = prolog_bin())
}

/// `job` asking the prolog for `method` through the variables, with the
/// real control daemon and the cluster's fake NVML.
pub(crate) fn prolog_asks(job: Job, method: &str) -> Job {
    job.env("DESI_GPU_MAP_METHOD", method)
        .env("DESI_GPU_MAP_MPS_CONTROL", &control())
        .env("DESI_GPU_MAP_NVML", &fake_nvml())
}
