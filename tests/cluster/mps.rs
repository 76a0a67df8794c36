//! CUDA MPS per step (`--desi-gpu-map=METHOD,mps`) on the local test
//! cluster, with Debian's real `nvidia-cuda-mps-control` (the control
//! daemon runs and answers without a GPU; tests/nvidia/fetch.sh fetches
//! it, cluster.sh copies it into the state dir). Jobs run as the harness's
//! test users, since the daemon never runs as root.

use crate::common::*;
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

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
        .filter(|n| n.starts_with("desi-gpu-map-mps."))
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

#[test]
fn one_daemon_per_step_per_node_as_the_user_serves_every_task() {
    let _c = mps_setup(&[]);
    clear_what_others_left();
    let _busy = Burner::on_every_core();
    let out = alice_step(&format!(
        "{TWO_NODES_EIGHT_TASKS} --desi-gpu-map=contiguous,mps"
    ))
    .ok();
    assert_one_daemon_per_node_serves_all(&out);
    assert_nothing_left("a normal end");
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

#[test]
fn mps_share_even_gives_each_task_its_share_of_its_gpu() {
    let _c = mps_setup(&["mps_share=even"]);
    // 6 tasks on 4 GPUs, contiguous: 2, 2, 1, 1 tasks per GPU.
    let out = alice_step("-n6 -w n1 --gpus-per-node=4 --desi-gpu-map=mps,contiguous").ok();
    assert_even_shares_of_six_on_four(&out);
    assert_nothing_left("mps_share=even");
}

#[test]
fn slurm_indices_become_the_uuids_of_the_same_gpus() {
    let _c = mps_setup(&[]);
    // Another job holds GPUs 0 and 1: the step gets 2 and 3.
    let _held = hold("n1", "gpu:2");
    let out = alice_step("-n2 -w n1 --gres=gpu:2 --desi-gpu-map=verbose,contiguous,mps").ok();
    let (rows, daemons) = rows_and_daemons(&out);
    let two = uuids("n1", &[2]);
    let three = uuids("n1", &[3]);
    assert_eq!(
        rows,
        crate::common::rows(&[
            &format!("0 n1 0 {two} 1 unset 100.0 700:{ALICE}"),
            &format!("1 n1 1 {three} 1 unset 100.0 700:{ALICE}"),
        ])
    );
    assert_eq!(daemons.len(), 1, "{daemons:?}");
    assert!(
        daemons[0].ends_with(&format!("CUDA_VISIBLE_DEVICES={two},{three}")),
        "{daemons:?}"
    );
    let verbose = out.said();
    assert!(
        verbose.iter().any(|l| l.contains(&format!("gpu={two}")) && l.contains(" mps=/tmp/desi-gpu-map-mps.")),
        "{verbose:?}"
    );
}

#[test]
fn mps_auto_serves_steps_whose_tasks_outnumber_their_gpus() {
    let _c = mps_setup(&["mps=auto", "default=contiguous"]);
    let out = alice_step("-n4 -w n3 --gpus-per-node=2").run();
    let (rows, daemons) = rows_and_daemons(&out);
    assert!(rows.lines().all(|r| r.contains(" 1 unset 100.0 ")), "{out}");
    assert_eq!(daemons.len(), 1, "{out}");
    alice_step("-n2 -w n3 --gpus-per-node=2").run().rows_are(&[
        &format!("0 n3 0 {} unset unset none none", slurms("n3", 0)),
        &format!("1 n3 1 {} unset unset none none", slurms("n3", 1)),
    ]);
    assert_nothing_left("mps=auto");
}

// ------------------------------------------------------------ teardown

/// Runs a job of ALICE's with three steps that sleep under MPS, the
/// plugin's, exec's and the task prolog's, with sbatch's `words` too and
/// `desi-gpu-map` as every step's task epilog (as a batch script sets it
/// once), waits for their daemons, ends the job with `end` under a
/// [`Burner`], and checks nothing is left, with no sweep.
fn teardown_after(what: &str, words: &str, end: impl FnOnce(&str)) {
    clear_what_others_left();
    let steps = format!(
        "srun --overlap -n1 --gpus-per-node=1 --desi-gpu-map=contiguous,mps sleep 300 & \
         srun --overlap -n2 --gpus-per-node=2 {} sleep 300 & \
         srun --overlap -n2 --gpus-per-node=2 --task-prolog={} sleep 300 & wait",
        exec_mps("contiguous,mps"),
        bin()
    );
    let job = sbatch(&format!(
        "--parsable -o /dev/null -w n1 -n2 --gpus-per-node=2 {words} --wrap"
    ))
    .user(ALICE)
    .env("SLURM_TASK_EPILOG", &bin())
    .arg(steps);
    let job = held(prolog_asks(job, "contiguous,mps"));
    assert!(
        wait_for(30, || daemons().len() == 3 && keepers().len() == 2),
        "{what}: the plugin's, exec's and the prolog's daemons did not all start; daemons \
         {:?}, keepers {:?}",
        daemons(),
        keepers()
    );
    let _busy = Burner::on_every_core();
    end(&job.0);
    assert!(
        wait_for(150, || job_done(&job.0)),
        "{what}: the job never ended"
    );
    assert_nothing_left_unswept(what);
}

#[test]
fn teardown_after_scancel() {
    let _c = mps_setup(&[]);
    teardown_after("scancel", "", |job| {
        client("scancel", job).ok();
    });
}

#[test]
fn teardown_after_a_slurmd_restart_during_the_step() {
    let _c = mps_setup(&[]);
    teardown_after("a slurmd restart", "", |job| {
        cluster(&["restart-node", "n1"]);
        assert_eq!(
            daemons().len(),
            3,
            "the steps' daemons outlive slurmd's restart"
        );
        assert_eq!(
            keepers().len(),
            2,
            "exec's and the prolog's keepers outlive it too"
        );
        client("scancel", job).ok();
    });
}

#[test]
fn teardown_after_the_time_limit() {
    let _c = mps_setup(&[]);
    // One minute, Slurm's smallest limit; slurmctld checks every 30 s.
    teardown_after("the time limit", "-t 1", |_| {});
}

#[test]
fn teardown_after_a_crashing_task() {
    let _c = mps_setup(&[]);
    clear_what_others_left();
    let _busy = Burner::on_every_core();
    srun(TWO_ON_N1)
        .user(ALICE)
        .probe("[ $SLURM_LOCALID = 1 ] && kill -SEGV $$; sleep 1")
        .run()
        .fails();
    assert_nothing_left("a crashing task");
}

// ------------------------------------------------------------ isolation

/// Submits a job of `user` on n1 whose step sleeps under MPS; waits until
/// its daemon answers; returns the job and its pipe directory (as the
/// daemon's environment names it).
fn serving_job(user: &str, uid: u32) -> (Held, String) {
    let (job, pid) = serving_job_pid(user, uid);
    let pipe = daemon_env(pid, "CUDA_MPS_PIPE_DIRECTORY").expect("the daemon's pipe");
    (job, pipe)
}

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

#[test]
fn another_user_on_a_shared_node_cannot_reach_the_daemon() {
    let _c = mps_setup(&[]);
    clear_what_others_left();
    let (job, pipe) = serving_job(ALICE, USERS[0].1);
    let bob = reach_as(BOB, &pipe);
    assert!(bob.contains("Permission denied"), "{bob}");
    assert!(!bob.contains("rc=0"), "bob reached alice's daemon:\n{bob}");
    assert_eq!(daemons().len(), 1, "alice's daemon survives bob's quit");
    drop(job);
    assert_nothing_left("alice's job");
}

#[test]
fn two_jobs_of_one_user_get_separate_daemons_and_neither_stops_the_other() {
    let _c = mps_setup(&[]);
    clear_what_others_left();
    let uid = USERS[0].1;
    let (first, _) = serving_job(ALICE, uid);
    let (second, pipe) = serving_job(ALICE, uid);
    assert_eq!(daemons().len(), 2);
    drop(first);
    assert!(wait_for(20, || daemons().len() == 1), "{:?}", daemons());
    let answer = reach_as(ALICE, &pipe);
    assert!(
        answer.contains("100.0\nrc=0"),
        "the second job's daemon still answers:\n{answer}"
    );
    drop(second);
    assert_nothing_left("both jobs");
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

#[test]
fn eight_concurrent_steps_get_eight_daemons_and_leave_none() {
    let _c = mps_setup(&[]);
    clear_what_others_left();
    let script = format!(
        "for i in $(seq 8); do srun --overlap -n1 --gpus-per-node=1 --desi-gpu-map=contiguous,mps bash -c '{}' & done; wait",
        task().replace('\'', "'\\''")
    );
    let out = salloc("-w n1 -n8 --gpus-per-node=4")
        .user(ALICE)
        .probe(&script)
        .ok();
    assert_eight_steps_each_served_by_its_own(&out);
    assert_nothing_left("8 concurrent steps");
}

#[test]
fn a_nested_step_uses_its_parents_daemon_and_never_stops_it() {
    // mps_share=even: the inherited share is the parent's, not gres/mps.
    let _c = mps_setup(&["verbose", "mps_share=even"]);
    let inner = format!(
        "srun --overlap -n1 --gpus-per-node=1 --desi-gpu-map=contiguous,mps bash -c 'echo inner $CUDA_VISIBLE_DEVICES' 2>&1; \
         echo get_default_active_thread_percentage | {} ; echo outer-rc=$?",
        control()
    );
    let out = srun("-n1 -w n1 --gpus-per-node=2 --desi-gpu-map=contiguous,mps")
        .user(ALICE)
        .probe(&inner)
        .ok();
    let stdout = out.stdout();
    assert!(
        stdout.contains("serves this step; no MPS daemon started"),
        "{stdout}"
    );
    assert!(
        stdout.contains("inner GPU-fake-n1-"),
        "the inner task's GPU by UUID:\n{stdout}"
    );
    assert!(
        stdout.contains("100.0\nouter-rc=0"),
        "the parent's daemon still answers:\n{stdout}"
    );
    assert_nothing_left("a nested step");
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

#[test]
fn exec_runs_the_plugins_daemon_one_per_node_for_every_task() {
    let _c = exec_setup();
    clear_what_others_left();
    let _busy = Burner::on_every_core();
    let out = srun(TWO_NODES_EIGHT_TASKS)
        .user(ALICE)
        .args(&exec_mps("contiguous,mps"))
        .probe(&task())
        .ok();
    assert_one_daemon_per_node_serves_all(&out);
    assert_nothing_left("exec's normal end");
}

/// srun run from inside an MPI rank hands every task of its step the
/// rank's variables (srun passes on its environment, as here): they came
/// in through srun, and the tasks are served as srun's, not refused as a
/// launcher's ranks.
#[test]
fn exec_serves_srun_tasks_that_inherited_an_mpi_ranks_variables() {
    let _c = exec_setup();
    clear_what_others_left();
    let out = srun(TWO_NODES_EIGHT_TASKS)
        .user(ALICE)
        .env("OMPI_COMM_WORLD_LOCAL_RANK", "0")
        .env("OMPI_COMM_WORLD_LOCAL_SIZE", "1")
        .env("MPI_LOCALRANKID", "0")
        .env("MPI_LOCALNRANKS", "1")
        .args(&exec_mps("contiguous,mps"))
        .probe(&task())
        .ok();
    assert_one_daemon_per_node_serves_all(&out);
    assert_nothing_left("tasks with a rank's variables");
}

#[test]
fn exec_gives_the_plugins_shares_and_says_why_it_runs_without_mps_once() {
    let _c = exec_setup();
    clear_what_others_left();
    // 6 tasks on 4 GPUs, contiguous: 2, 2, 1, 1 tasks per GPU.
    let options = format!("--mps-control {} --mps-share even", control());
    let out = srun("-n6 -w n1 --gpus-per-node=4")
        .user(ALICE)
        .args(&exec_mps_with(&options, "contiguous,mps"))
        .probe(&task())
        .ok();
    assert_even_shares_of_six_on_four(&out);
    // No control daemon where it was named: mapped without MPS, said once.
    let out = srun(
        TWO_ON_N1
            .replace(" --desi-gpu-map=contiguous,mps", "")
            .as_str(),
    )
    .user(ALICE)
    .args(&exec_mps_with(
        "--mps-control /nonexistent/nvidia-cuda-mps-control",
        "contiguous,mps",
    ))
    .probe(&task())
    .ok();
    assert!(
        out.rows()
            .lines()
            .all(|r| r.ends_with(" unset unset none none")),
        "{out}"
    );
    assert_eq!(
        out.said(),
        ["desi-gpu-map: node n1: cannot start /nonexistent/nvidia-cuda-mps-control: it does not \
          exist (--mps-control or $DESI_GPU_MAP_MPS_CONTROL); running without MPS"],
        "{out}"
    );
    assert_nothing_left("exec's shares and a missing control daemon");
}

/// Runs `job` (3 tasks on n1's 2 GPUs under roundrobin,mps), whose local
/// task 0 is SIGKILLed while the others wait, under a [`Burner`]: the
/// daemon still answers them.
fn served_after_task_0_is_killed(job: Job) {
    let _busy = Burner::on_every_core();
    let probe = format!(
        "if [ $SLURM_LOCALID = 0 ]; then sleep 0.5; kill -KILL $$; fi; sleep 2; {}",
        task()
    );
    let out = job.probe(&probe).run().fails();
    let rows = out.rows();
    assert_eq!(rows.lines().count(), 2, "{out}");
    assert!(
        rows.lines()
            .all(|r| r.ends_with(&format!(" 1 unset 100.0 700:{ALICE}"))),
        "the daemon answers after local task 0 was killed:\n{out}"
    );
}

#[test]
fn exec_keeps_the_daemon_until_the_last_task_even_if_task_0_is_killed() {
    let _c = exec_setup();
    clear_what_others_left();
    let job = srun("-n3 -w n1 --gpus-per-node=2")
        .user(ALICE)
        .args(&exec_mps("roundrobin,mps"));
    served_after_task_0_is_killed(job);
    assert_nothing_left("a SIGKILLed task 0");
}

#[test]
fn exec_leaves_nothing_after_20_sequential_and_8_concurrent_steps() {
    let _c = exec_setup();
    clear_what_others_left();
    let _busy = Burner::on_every_core();
    let exec = exec_mps("contiguous,mps");
    let script = format!(
        "for i in $(seq 20); do srun --overlap -n2 --gpus-per-node=2 {exec} true || echo failed; done; \
         for i in $(seq 8); do srun --overlap -n1 --gpus-per-node=1 {exec} bash -c '{}' & done; wait",
        task().replace('\'', "'\\''")
    );
    let out = salloc("-w n1 -n8 --gpus-per-node=4")
        .user(ALICE)
        .probe(&script)
        .ok();
    assert!(
        !out.stdout().contains("failed"),
        "a sequential step failed\n{out}"
    );
    assert_eight_steps_each_served_by_its_own(&out);
    assert_nothing_left("20 sequential and 8 concurrent steps");
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

#[test]
fn another_user_can_neither_reach_nor_stop_execs_daemon() {
    let _c = exec_setup();
    clear_what_others_left();
    let (job, pipe) = alices_exec_daemon_on_n1();
    let bob = reach_as(BOB, &pipe);
    assert!(bob.contains("Permission denied"), "{bob}");
    assert!(!bob.contains("rc=0"), "bob reached alice's daemon:\n{bob}");
    // The keeper's socket is named after the directory, less its random part.
    let dir = pipe.trim_end_matches("/pipe");
    let stem = &dir[dir.rfind('/').unwrap() + 1..dir.rfind('.').unwrap()];
    // Abstract sockets are the host's (a series' root shares its network):
    // bob knocks from the host, with the host's Python.
    let knock = "import socket,sys; s=socket.socket(socket.AF_UNIX); \
         s.connect(b'\\0' + sys.argv[1].encode()); print('K', s.recv(200).decode().strip())";
    let answer = std::process::Command::new("runuser")
        .args(["-u", BOB, "--", "/usr/bin/python3", "-c", knock, stem])
        .output()
        .expect("run python3 as bob");
    let said = String::from_utf8_lossy(&answer.stdout);
    assert!(said.contains("K no not the job's user"), "{answer:?}");
    assert_eq!(daemons().len(), 1, "alice's daemon survives bob");
    assert_eq!(keepers().len(), 1, "and so does its keeper");
    drop(job);
    assert_nothing_left("alice's job");
}

// ------------------------------------------ another user holds the keeper's name

/// bob's process on the host holding abstract names as listeners of
/// `listen(BACKLOG)` that accept nothing, their queues filled where
/// asked: each name's queue then stays full.
const SQUAT: &str = "import socket, sys, time
held = []
for name in sys.argv[3:]:
    n = b'\\0' + name.encode()
    s = socket.socket(socket.AF_UNIX); s.bind(n); s.listen(int(sys.argv[1])); held.append(s)
    while sys.argv[2] == 'fill':
        c = socket.socket(socket.AF_UNIX); c.setblocking(False)
        try: c.connect(n)
        except BlockingIOError: break
        held.append(c)
print('ready', flush=True)
time.sleep(600)
";

/// bob holding the keeper's names of `job`'s first steps on its first
/// node, alice's: abstract sockets are the host's (a series' root shares
/// its network), so bob squats from the host. Killed by pid when dropped.
struct BobsSquat(std::process::Child);

impl BobsSquat {
    fn new(job: &str, backlog: u32, fill: bool) -> BobsSquat {
        use std::io::BufRead;
        use std::os::unix::process::CommandExt;
        let alice = USERS[0].1;
        let names: Vec<String> = (0..4)
            .map(|step| format!("desi-gpu-map-mps.{alice}.{job}.{step}.0.keeper"))
            .collect();
        let mut child = std::process::Command::new("/usr/bin/python3")
            .args([
                "-c",
                SQUAT,
                &backlog.to_string(),
                if fill { "fill" } else { "-" },
            ])
            .args(&names)
            .uid(USERS[1].1)
            .gid(USERS[1].1)
            .current_dir("/")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("run python3 as bob");
        let out = child.stdout.take().expect("its output");
        let squat = BobsSquat(child);
        let mut line = String::new();
        std::io::BufReader::new(out).read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready", "bob's squat of {names:?}");
        squat
    }
}

impl Drop for BobsSquat {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A job of alice's holding n1's 4 GPUs for 4 tasks, running.
fn alices_allocation() -> Held {
    let job = held(
        sbatch("--parsable -o /dev/null -w n1 -n4 --gpus-per-node=4 --wrap")
            .user(ALICE)
            .arg("sleep 300"),
    );
    let id = job.0.clone();
    let running = wait_for(30, || {
        let out = client("squeue", &format!("-h -j {id} -o %t")).run();
        out.stdout().trim() == "R"
    });
    assert!(running, "alice's job {id} never ran");
    job
}

/// The step's 4 tasks, each on its own GPU of n1, served by one daemon of
/// alice's, within `secs` (srun's `-t 1` ends a step that hangs).
#[track_caller]
fn assert_four_served_within(out: &Ran, took: Duration, secs: u64, what: &str) {
    let want: Vec<String> = (0..4)
        .map(|i| format!("{i} n1 {i} {} 1 unset 100.0 700:{ALICE}", uuids("n1", &[i])))
        .collect();
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    assert_eq!(out.rows(), crate::common::rows(&want), "{what}\n{out}");
    assert_eq!(out.lines("D ").len(), 1, "one daemon: {what}\n{out}");
    assert!(
        !out.stderr().contains("TaskEpilog failed"),
        "slurmstepd killed an epilog: {what}\n{out}"
    );
    assert!(
        took < Duration::from_secs(secs),
        "{what} took {took:?}: a task or its epilog waited\n{out}"
    );
}

/// bob holds the names of alice's next steps' keepers with listeners of
/// `listen(backlog)` that accept nothing (filled where `fill`): a prolog
/// step and an exec step of hers are served all the same, by the keeper
/// in its directory, and every epilog tells it in time, so the step ends
/// with nothing left. slurmstepd runs the epilogs one after another, each
/// at least a second (docs/performance.md); one it kills takes 5 s. Under
/// a burner on every core each step took 4.3 to 4.8 s here; on 783ea03
/// the prolog's took 16 s (3 epilogs killed) or hung to its time limit.
fn served_though_bob_holds_the_keepers_name(backlog: u32, fill: bool) {
    let _c = exec_setup();
    clear_what_others_left();
    let job = alices_allocation();
    let _busy = Burner::on_every_core();
    let _squat = BobsSquat::new(&job.0, backlog, fill);
    let step = format!(
        "--jobid={} --overlap -t 1 -n4 -w n1 --gpus-per-node=4",
        job.0
    );
    let started = Instant::now();
    let prolog = srun(&step).user(ALICE).args(&prolog_and_epilog());
    let out = prolog_asks(prolog, "contiguous,mps").probe(&task()).run();
    assert_four_served_within(&out, started.elapsed(), 10, "the prolog");
    assert_nothing_left_unswept("the prolog's step");
    let started = Instant::now();
    let out = srun(&step)
        .user(ALICE)
        .env("SLURM_TASK_EPILOG", &bin())
        .args(&exec_mps("contiguous,mps"))
        .probe(&task())
        .run();
    assert_four_served_within(&out, started.elapsed(), 10, "exec");
    assert_nothing_left_unswept("exec's step");
    drop(job);
}

#[test]
fn a_keepers_name_whose_queue_another_user_keeps_full_neither_hangs_nor_denies_mps() {
    served_though_bob_holds_the_keepers_name(0, true);
}

#[test]
fn a_keepers_name_another_user_listens_on_and_never_accepts_is_filled_in_vain() {
    served_though_bob_holds_the_keepers_name(4, false);
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
    format!("--task-prolog={b} --task-epilog={b}", b = bin())
}

/// `job` asking the prolog for `method` through the variables, with the
/// real control daemon and the cluster's fake NVML.
pub(crate) fn prolog_asks(job: Job, method: &str) -> Job {
    job.env("DESI_GPU_MAP_METHOD", method)
        .env("DESI_GPU_MAP_MPS_CONTROL", &control())
        .env("DESI_GPU_MAP_NVML", &fake_nvml())
}

#[test]
fn prolog_runs_execs_daemon_one_per_node_and_its_epilog_ends_it() {
    let _c = exec_setup();
    clear_what_others_left();
    let _busy = Burner::on_every_core();
    let job = srun(TWO_NODES_EIGHT_TASKS)
        .user(ALICE)
        .args(&prolog_and_epilog());
    let out = prolog_asks(job, "contiguous,mps").probe(&task()).ok();
    assert_one_daemon_per_node_serves_all(&out);
    assert_nothing_left_unswept("the prolog's normal end");
}

#[test]
fn prolog_keeps_the_daemon_until_the_last_task_even_if_task_0_is_killed() {
    let _c = exec_setup();
    clear_what_others_left();
    let job = srun("-n3 -w n1 --gpus-per-node=2")
        .user(ALICE)
        .args(&prolog_and_epilog());
    served_after_task_0_is_killed(prolog_asks(job, "roundrobin,mps"));
    assert_nothing_left_unswept("a SIGKILLed task 0");
}

/// One task a sequential step: slurmstepd waits about a second for each
/// task's epilog (docs/performance.md), and the race this checks is the
/// step's last task's.
#[test]
fn prolog_leaves_nothing_after_20_sequential_and_8_concurrent_steps() {
    let _c = exec_setup();
    clear_what_others_left();
    let _busy = Burner::on_every_core();
    let hooks = prolog_and_epilog();
    let script = format!(
        "for i in $(seq 20); do srun --overlap -n1 --gpus-per-node=2 {hooks} true || echo failed; done; \
         for i in $(seq 8); do srun --overlap -n1 --gpus-per-node=1 {hooks} bash -c '{}' & done; wait",
        task().replace('\'', "'\\''")
    );
    let job = salloc("-w n1 -n8 --gpus-per-node=4").user(ALICE);
    let out = prolog_asks(job, "contiguous,mps").probe(&script).ok();
    assert!(
        !out.stdout().contains("failed"),
        "a sequential step failed\n{out}"
    );
    assert_eight_steps_each_served_by_its_own(&out);
    assert_nothing_left_unswept("20 sequential and 8 concurrent steps");
}

#[test]
fn exec_with_the_task_epilog_ends_deterministically() {
    let _c = exec_setup();
    clear_what_others_left();
    let _busy = Burner::on_every_core();
    // Two tasks: slurmstepd waits about a second for each task's epilog.
    let out = srun("-n2 -w n1 --gpus-per-node=2")
        .user(ALICE)
        .env("SLURM_TASK_EPILOG", &bin())
        .args(&exec_mps("contiguous,mps"))
        .probe(&task())
        .ok();
    assert_two_on_n1_served(&out, "exec under the task epilog");
    assert_nothing_left_unswept("exec's normal end");
}

#[test]
fn the_users_next_exec_removes_what_a_killed_keeper_left() {
    let _c = exec_setup();
    clear_what_others_left();
    // What a keeper killed before it cleaned up leaves, its daemon started
    // or not: a directory named as a keeper's, whose lock nothing holds.
    let started = format!(
        "desi-gpu-map-mps.{}.999.0.0.keeper.00000000000000ab",
        USERS[0].1
    );
    let starting = format!(
        "desi-gpu-map-mps.{}.999.1.0.keeper.00000000000000cd",
        USERS[0].1
    );
    let made = format!(
        "mkdir -m 0700 /tmp/{started} /tmp/{started}/pipe /tmp/{starting} && touch /tmp/{started}/pipe/control && echo made"
    );
    srun("-w n1 -n1")
        .user(ALICE)
        .probe(&made)
        .ok()
        .prints("made");
    assert_eq!(mps_dirs(), [started.clone(), starting.clone()]);
    srun("-w n1 -n1 --gpus-per-node=1")
        .user(ALICE)
        .args(&exec_mps("contiguous,mps"))
        .arg("true")
        .ok();
    assert!(
        wait_for(10, || !mps_dirs()
            .iter()
            .any(|d| *d == started || *d == starting)),
        "the stale directories are still there: {:?}",
        mps_dirs()
    );
    assert_nothing_left("the sweep");
}

#[test]
fn exec_steps_aside_under_the_plugins_mps() {
    let _c = mps_setup(&[]);
    clear_what_others_left();
    let out = srun("-n2 -w n1 --gpus-per-node=2 --desi-gpu-map=contiguous,mps")
        .user(ALICE)
        .args(&exec_mps("roundrobin,mps,verbose"))
        .probe(&task())
        .ok();
    assert_two_on_n1_served(&out, "the plugin's GPUs and daemon, kept");
    out.says("this step is mapped already (by the plugin)");
    assert_nothing_left("exec under the plugin's MPS");
}

// ------------------------------------------------------------ failures

/// A site's control script `name` in the harness's `bin/` (beside the
/// real server's `sbin/`), holding `script`: its `mps_control=` argument.
fn stand_in(name: &str, script: &str) -> String {
    let path = format!("{}/mps/bin/{name}", state_dir());
    std::fs::write(&path, script).unwrap();
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(&path, mode).unwrap();
    format!("mps_control={path}")
}

/// A step of alice's (srun's `words`) asking for MPS that must run mapped
/// without it, saying `why` once per node, here and in slurmd's log.
fn runs_without(extra: &[&str], words: &str, why: &str) {
    let _c = mps_setup(extra);
    let started = Instant::now();
    let out = alice_step(words).ok();
    let (rows, daemons) = rows_and_daemons(&out);
    assert!(daemons.is_empty(), "{daemons:?}");
    assert!(
        rows.lines().all(|r| r.ends_with(" unset unset none none")),
        "{rows}"
    );
    let lines = out.said();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains(why) && lines[0].ends_with("; running without MPS"),
        "{lines:?}"
    );
    let log = std::fs::read_to_string(format!("{}/log/slurmd-n1.log", state_dir())).unwrap();
    assert!(log.contains(why), "slurmd's log lacks {why:?}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert_nothing_left(why);
}

#[test]
fn a_missing_control_binary_runs_the_step_without_mps() {
    runs_without(
        &["mps_control=/nonexistent/nvidia-cuda-mps-control"],
        TWO_ON_N1,
        "cannot start /nonexistent/nvidia-cuda-mps-control: it does not exist (the site's mps_control=)",
    );
}

#[test]
fn a_daemon_that_never_answers_is_bounded_by_the_deadline() {
    let at = stand_in("stuck-control", "#!/bin/sh\nexec sleep 1000\n");
    runs_without(
        &[&at, "nvml_timeout=2"],
        TWO_ON_N1,
        "did not answer within 2 s",
    );
    assert!(
        !std::process::Command::new("pgrep")
            .args(["-fx", "sleep 1000"])
            .status()
            .unwrap()
            .success(),
        "the stand-in was killed"
    );
}

#[test]
fn more_than_48_clients_per_gpu_run_without_mps() {
    runs_without(
        &[],
        "-n49 -w n1 --gres=gpu:1 --desi-gpu-map=contiguous,mps",
        "49 tasks would share one GPU, and MPS serves at most 48 clients per GPU",
    );
}

#[test]
fn slurms_gres_mps_serves_the_step_and_nothing_starts() {
    let _c = mps_setup(&[]);
    let out = alice_step(TWO_ON_N1)
        .env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "25")
        .ok();
    let (rows, daemons) = rows_and_daemons(&out);
    assert!(daemons.is_empty());
    assert_eq!(
        rows,
        crate::common::rows(&[
            &format!("0 n1 0 {} unset 25 none none", slurms("n1", 0)),
            &format!("1 n1 1 {} unset 25 none none", slurms("n1", 1)),
        ])
    );
    assert_eq!(
        out.said(),
        ["desi-gpu-map: node n1: Slurm's gres/mps serves this step \
          (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=\"25\"); no MPS daemon started"]
    );
}

#[test]
fn without_nvml_uuids_no_daemon_starts_and_nvmls_error_is_said() {
    let real = real_nvml();
    let at = format!("nvml={real}");
    if mode() == "uuid" {
        // Slurm's own UUIDs (env_uuid) need NVML to be confirmed as the
        // step's: without it nothing is mapped, and no daemon starts.
        let _c = mps_setup(&[&at]);
        let out = alice_step(TWO_ON_N1).ok();
        assert!(rows_and_daemons(&out).1.is_empty(), "{out}");
        let said = out.said();
        assert_eq!(said.len(), 1, "{out}");
        assert!(
            said[0].contains("only NVML can confirm they are the step's, and NVML: ")
                && said[0].ends_with("; tasks left unchanged"),
            "{out}"
        );
        assert_nothing_left("NVML's failure");
        return;
    }
    runs_without(
        &[&at],
        TWO_ON_N1,
        "cannot name the step's GPUs by UUID (NVML: ",
    );
}

// ------------------------------------------------------------ refused

#[test]
fn bad_combinations_and_a_site_without_mps_are_refused_before_allocation() {
    let _c = mps_setup(&[]);
    let jobs = job_count();
    for (value, want) in [
        ("none,mps", "none maps no task, and MPS needs mapped tasks"),
        ("help,mps", "help prints the usage and runs nothing"),
        ("mps,mps", "invalid --desi-gpu-map value \"mps,mps\""),
    ] {
        srun("-n1")
            .method(value)
            .arg("true")
            .run()
            .fails()
            .says(want);
    }
    // The site default is none: mps alone names no method.
    sbatch("-n1 --desi-gpu-map=mps --wrap true")
        .run()
        .fails()
        .says("mps needs a method");
    drop(_c);
    let _c = mps_setup(&["mps=off"]);
    srun("-n1 --desi-gpu-map=contiguous,mps true")
        .run()
        .fails()
        .says("this site turned mps off (mps=off in plugstack.conf)");
    assert_eq!(job_count(), jobs, "no job was created");
}

#[test]
fn show_reports_the_mps_daemon_serving_the_task() {
    let _c = mps_setup(&["mps_share=even"]);
    let stdout = srun("-n2 -w n1 --gpus-per-node=1 --desi-gpu-map=contiguous,mps")
        .user(ALICE)
        .arg(bin())
        .args("show --nvml off")
        .ok()
        .stdout();
    assert_eq!(stdout.matches("\nmps: 1\n").count(), 2, "{stdout}");
    assert_eq!(
        stdout
            .matches("\nmps_active_thread_percentage: 50\n")
            .count(),
        2,
        "{stdout}"
    );
    let pipe = format!(
        "\nmps_pipe_directory: /tmp/desi-gpu-map-mps.{}.",
        USERS[0].1
    );
    assert_eq!(stdout.matches(&pipe).count(), 2, "{stdout}");
    assert!(
        stdout.contains("cuda_visible_devices: GPU-fake-n1-0\n"),
        "{stdout}"
    );
    assert_nothing_left("show");
}

#[test]
fn sbatch_and_the_environment_form_ask_for_mps_too() {
    let _c = mps_setup(&[]);
    // The environment form, on srun.
    let out = srun("-n2 -w n1 --gpus-per-node=2")
        .user(ALICE)
        .env(OPTION_ENV, "contiguous,mps")
        .probe(&task())
        .run();
    let (rows, daemons) = rows_and_daemons(&out);
    assert!(
        rows.lines().all(|r| r.contains(" 1 unset 100.0 700:")),
        "{out}"
    );
    assert_eq!(daemons.len(), 1, "{out}");
    // sbatch's option reaches the script's srun.
    let name = format!("dgm-mps-sbatch-{}.out", std::process::id());
    let inside = format!("/tmp/{name}");
    let script = format!("srun -n2 bash -c '{}'", task().replace('\'', "'\\''"));
    let job = held(
        sbatch(&format!(
            "--parsable -o /dev/null -w n1 -n2 --gpus-per-node=2 --desi-gpu-map=contiguous,mps -o {inside} --wrap"
        ))
        .user(ALICE)
        .arg(script),
    );
    assert!(
        wait_for(60, || job_done(&job.0)),
        "the batch job never ended"
    );
    let file = format!("{}{inside}", slurm_root().unwrap_or_default());
    let output = std::fs::read_to_string(&file).unwrap_or_default();
    let _ = std::fs::remove_file(&file);
    let rows = probe_rows(&output);
    assert_eq!(rows.lines().count(), 2, "{output}");
    assert!(
        rows.lines().all(|r| r.contains(" 1 unset 100.0 700:")),
        "{output}"
    );
    assert_nothing_left("sbatch and the environment form");
}

// ------------------------------------------------------------ edges

/// Traces `pid`'s execve calls (and its children's) while `during` runs;
/// the trace.
fn trace_execs(pid: u32, during: impl FnOnce()) -> String {
    let file = format!("{}/log/execve-{pid}.trace", state_dir());
    let mut strace = std::process::Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=execve", "-o", &file, "-p"])
        .arg(pid.to_string())
        .spawn()
        .expect("strace (tests/deps.sh installs it)");
    let traced = wait_for(10, || {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_default()
            .lines()
            .any(|l| l.starts_with("TracerPid:") && l.split_whitespace().nth(1) != Some("0"))
    });
    assert!(traced, "strace never attached to {pid}");
    during();
    std::thread::sleep(Duration::from_millis(500));
    // SIGINT detaches strace from the daemon and ends it.
    client("kill", &format!("-INT {}", strace.id())).run();
    let _ = strace.wait();
    std::fs::read_to_string(&file).unwrap_or_default()
}

#[test]
fn the_daemon_execs_its_server_from_where_the_package_put_it() {
    let _c = mps_setup(&[]);
    clear_what_others_left();
    let (job, pid) = serving_job_pid(ALICE, USERS[0].1);
    let pipe = daemon_env(pid, "CUDA_MPS_PIPE_DIRECTORY").expect("pipe");
    let trace = trace_execs(pid, || {
        let asked = ask_as(
            ALICE,
            &pipe,
            &[&format!("start_server -uid {}", USERS[0].1)],
        );
        assert!(asked.contains("rc=0"), "{asked}");
    });
    let server = format!("{}/mps/sbin/nvidia-cuda-mps-server", state_dir());
    let server = server.trim_start_matches(&slurm_root().unwrap_or_default());
    assert!(
        trace
            .lines()
            .any(|l| l.contains(&format!("execve(\"{server}\"")) && l.ends_with("= 0")),
        "the daemon never exec'd {server}:\n{trace}"
    );
    drop(job);
    assert_nothing_left("the server's job");
}

#[test]
fn a_control_daemon_with_no_server_to_start_runs_the_step_without_mps() {
    // The control binary alone, with no server beside it or in sbin.
    let lonely = format!("{}/mps/lonely/bin/nvidia-cuda-mps-control", state_dir());
    std::fs::create_dir_all(format!("{}/mps/lonely/bin", state_dir())).unwrap();
    std::fs::copy(control(), &lonely).unwrap();
    let at = format!("mps_control={lonely}");
    runs_without(
        &[&at],
        TWO_ON_N1,
        "nvidia-cuda-mps-server, which the control daemon starts for its clients, is not in",
    );
}

#[test]
fn a_planted_directory_neither_denies_mps_nor_receives_the_users_files() {
    let _c = mps_setup(&[]);
    clear_what_others_left();
    let (alice, bob) = (USERS[0].1, USERS[1].1);
    // The next job ids, after a probe job's.
    let probe_job = sbatch("--parsable -o /dev/null --wrap true")
        .user(BOB)
        .run();
    let last: u64 = probe_job.stdout().trim().parse().expect("a job id");
    let tmp = format!("{}/tmp", slurm_root().unwrap_or_default());
    let bait = format!("{tmp}/dgm-bob-bait");
    let mut planted = Vec::new();
    let plant = |script: &str| {
        client("bash", "-c").user(BOB).arg(script).ok();
    };
    plant("mkdir -m 0777 /tmp/dgm-bob-bait");
    for id in last + 1..last + 6 {
        let dir = format!("/tmp/desi-gpu-map-mps.{alice}.{id}.0.0");
        plant(&format!("mkdir -m 0777 {dir}"));
        planted.push(format!("{tmp}{}", dir.trim_start_matches("/tmp")));
        let link = format!("/tmp/desi-gpu-map-mps.{alice}.{id}.0.1");
        plant(&format!("ln -s /tmp/dgm-bob-bait {link}"));
        planted.push(format!("{tmp}{}", link.trim_start_matches("/tmp")));
    }
    let out = alice_step(TWO_ON_N1).run();
    let contents: Vec<String> = planted
        .iter()
        .chain([&bait])
        .flat_map(|d| std::fs::read_dir(d).into_iter().flatten().flatten())
        .map(|e| e.path().display().to_string())
        .collect();
    for d in &planted {
        let _ = std::fs::remove_file(d).or_else(|_| std::fs::remove_dir_all(d));
    }
    let _ = std::fs::remove_dir_all(&bait);
    let out = out.ok();
    assert_two_on_n1_served(&out, "the step still gets MPS");
    assert!(contents.is_empty(), "created inside {bob}'s: {contents:?}");
    assert_nothing_left("a planted directory");
}

/// `srun` as alice on n1 from inside an MPS task, in an allocation of
/// salloc's `allocation` words: an outer step of `outer` asking
/// `contiguous,mps`, whose task runs `inner`.
fn nested(allocation: &str, outer: &str, inner: &str) -> Ran {
    salloc(&format!(
        "{allocation} srun {outer} --desi-gpu-map=contiguous,mps"
    ))
    .user(ALICE)
    .probe(inner)
    .run()
}

#[test]
fn a_nested_step_without_mps_names_its_gpus_by_uuid_for_the_parents_daemon() {
    let _c = mps_setup(&[]);
    clear_what_others_left();
    // Another job holds GPUs 0 and 1: the allocation gets 2 and 3.
    let _held = hold("n1", "gpu:2");
    let inner = "srun --overlap -n2 --desi-gpu-map=contiguous bash -c \
                 'echo \"inner $SLURM_LOCALID ${CUDA_VISIBLE_DEVICES-unset} ${DESI_GPU_MAP_MPS-unset} ${CUDA_MPS_PIPE_DIRECTORY:+pipe}\"'";
    let out = nested("-w n1 -n3 --gpus-per-node=2", "-n1", inner).ok();
    assert_eq!(
        out.lines("inner "),
        [
            format!("inner 0 {} 1 pipe", uuids("n1", &[2])),
            format!("inner 1 {} 1 pipe", uuids("n1", &[3])),
        ],
        "{out}"
    );
    assert_nothing_left("a nested step without mps");
}

#[test]
fn a_stale_mps_flag_never_reaches_a_mapped_task() {
    let _c = mps_setup(&[]);
    let out = srun("-n2 -w n1 --gpus-per-node=2")
        .method("contiguous")
        .user(ALICE)
        .env("DESI_GPU_MAP_MPS", "1")
        .probe("echo \"flag ${DESI_GPU_MAP_MPS-unset} ${DESI_GPU_MAPPED-unset}\"")
        .ok();
    assert_eq!(
        out.lines("flag "),
        ["flag unset 1", "flag unset 1"],
        "{out}"
    );
}

#[test]
fn a_nested_mps_step_on_another_node_gets_that_nodes_own_daemon() {
    let _c = mps_setup(&[]);
    clear_what_others_left();
    // Each inner task: its node, its pipe, its daemon's answer, and
    // whether a daemon at that pipe runs in its own node's namespace.
    let probe = format!(
        "a=$(echo get_default_active_thread_percentage | {} 2>/dev/null); own=no; \
         for p in /proc/[0-9]*; do case \"$(readlink $p/exe 2>/dev/null)\" in */nvidia-cuda-mps-control) ;; *) continue ;; esac; \
         tr '\\0' '\\n' <$p/environ 2>/dev/null | grep -qx \"CUDA_MPS_PIPE_DIRECTORY=$CUDA_MPS_PIPE_DIRECTORY\" || continue; \
         [ \"$(readlink $p/ns/uts)\" = \"$(readlink /proc/self/ns/uts)\" ] && own=yes; done; \
         echo \"inner $(hostname) ${{CUDA_MPS_PIPE_DIRECTORY-none}} ${{a:-none}} $own ${{DESI_GPU_MAP_MPS-unset}}\"",
        control()
    );
    let inner = format!(
        "srun --overlap -N2 -n2 --ntasks-per-node=1 --desi-gpu-map=contiguous,mps bash -c '{}'",
        probe.replace('\'', "'\\''")
    );
    let out = nested(
        "-w n1,n2 -N2 -n8 --gpus-per-node=4",
        "-N1 -w n1 -n1",
        &inner,
    )
    .ok();
    let rows = out.lines("inner ");
    assert_eq!(rows.len(), 2, "{out}");
    let fields: Vec<Vec<&str>> = rows.iter().map(|r| r.split(' ').collect()).collect();
    for (f, node) in fields.iter().zip(["n1", "n2"]) {
        assert_eq!(
            (f[1], f[3], f[4], f[5]),
            (node, "100.0", "yes", "1"),
            "each node's task is served by its own node's daemon\n{out}"
        );
    }
    assert_ne!(fields[0][2], fields[1][2], "n2 got n1's pipe\n{out}");
    assert_nothing_left("a nested step on two nodes");
}

#[test]
fn a_base_others_can_write_without_the_sticky_bit_is_refused() {
    let open = format!("{}/mps/open", state_dir());
    std::fs::create_dir_all(&open).unwrap();
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o777);
    std::fs::set_permissions(&open, mode).unwrap();
    let inside = open.trim_start_matches(&slurm_root().unwrap_or_default());
    let at = format!("mps_dir={inside}");
    runs_without(
        &[&at],
        TWO_ON_N1,
        &format!("the MPS base {inside} is writable by others without the sticky bit"),
    );
}

#[test]
fn a_stand_in_that_hangs_leaves_no_process_behind() {
    let at = stand_in(
        "stuck-child-control",
        "#!/bin/sh\nsleep 1001 &\nexec sleep 1000\n",
    );
    runs_without(
        &[&at, "nvml_timeout=2"],
        TWO_ON_N1,
        "did not answer within 2 s",
    );
    let left = wait_for(5, || {
        !std::process::Command::new("pgrep")
            .args(["-f", "^sleep 100[01]$"])
            .output()
            .unwrap()
            .status
            .success()
    });
    assert!(left, "the stand-in's child was left running");
}

#[test]
fn a_stand_in_that_answers_garbage_is_quoted() {
    let at = stand_in("garbage-control", "#!/bin/sh\nif [ \"$1\" = -f ]; then : >\"$CUDA_MPS_PIPE_DIRECTORY/control\"; exec sleep 1000; fi\nsleep 0.8\necho garbage\n");
    runs_without(
        &[&at, "nvml_timeout=2"],
        TWO_ON_N1,
        "did not answer within 2 s (it answered \"garbage\")",
    );
}
