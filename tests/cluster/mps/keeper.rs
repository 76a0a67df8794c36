//! exec's daemon and its keeper, without the plugin: one daemon per node
//! for every task, every ending, another user who can neither reach nor
//! stop it or who holds the keeper's name first; the same through the task
//! prolog and epilog; the sweep of what a killed keeper left; stepping
//! aside under the plugin's MPS.

use super::*;

// ------------------------------------------------------------ exec's daemon

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
            .map(|step| format!("dgm-mps.{alice}.{job}.{step}.0.k"))
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
        .env("SLURM_TASK_EPILOG", &prolog_bin())
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

/// A base of the test's own for a step's MPS directory (its `TMPDIR`),
/// `/tmp/dgm-NAME.PID` as the nodes see it (in a series' root, the root's
/// `/tmp`): short, since the daemon's longest socket path,
/// `pipe/control_privileged` in the step's directory, must fit in 107
/// bytes, which the state dir leaves no room for. Removed when dropped.
struct OwnBase {
    /// As the nodes see it.
    node: String,
    /// As this process sees it.
    here: std::path::PathBuf,
}

impl OwnBase {
    /// The base `name`, made anew with `mode`, owned by `uid`.
    fn new(name: &str, mode: u32, uid: u32) -> OwnBase {
        use std::os::unix::fs::PermissionsExt;
        let node = format!("/tmp/dgm-{name}.{}", std::process::id());
        let here = std::path::PathBuf::from(format!("{}{node}", slurm_root().unwrap_or_default()));
        let _ = std::fs::remove_dir_all(&here);
        std::fs::create_dir(&here).unwrap();
        std::os::unix::fs::chown(&here, Some(uid), Some(uid)).unwrap();
        std::fs::set_permissions(&here, std::fs::Permissions::from_mode(mode)).unwrap();
        OwnBase { node, here }
    }

    /// A sticky base of root's (another user than alice), crowded with
    /// 30,000 files of root's.
    fn crowded() -> OwnBase {
        let base = OwnBase::new("cb", 0o1777, 0);
        for n in 0..30_000 {
            std::fs::write(base.here.join(format!("crowd.{n}")), "").unwrap();
        }
        base
    }

    fn path(&self) -> String {
        self.node.clone()
    }

    /// What is in it besides the crowd.
    fn others(&self) -> Vec<String> {
        std::fs::read_dir(&self.here)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|name| !name.starts_with("crowd."))
            .collect()
    }
}

impl Drop for OwnBase {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.here);
    }
}

/// bob holds the keeper's name with a full queue, which sends alice's
/// tasks to the keeper's directory, and 30,000 entries of another user's
/// sit in the MPS base beside it: her exec step is served by one daemon,
/// with no task waiting out its deadline. Before, each task waited 15 s and
/// ran without MPS: a look for the keeper's directory read only the base's
/// first 4096 entries.
#[test]
fn a_squatted_name_and_a_crowded_base_neither_delay_nor_deny_exec_mps() {
    let _c = exec_setup();
    clear_what_others_left();
    let job = alices_allocation();
    let _squat = BobsSquat::new(&job.0, 0, true);
    let base = OwnBase::crowded();
    let step = format!(
        "--jobid={} --overlap -t 1 -n4 -w n1 --gpus-per-node=4",
        job.0
    );
    let started = Instant::now();
    let out = srun(&step)
        .user(ALICE)
        .env("TMPDIR", &base.path())
        .env("SLURM_TASK_EPILOG", &prolog_bin())
        .args(&exec_mps("contiguous,mps"))
        .probe(&task())
        .run();
    assert_four_served_within(&out, started.elapsed(), 10, "exec in a crowded base");
    assert!(
        wait_for(10, || base.others().is_empty()),
        "left in the crowded base: {:?}",
        base.others()
    );
    assert_nothing_left_unswept("exec in a crowded base");
    drop(job);
}

/// What a task that is process 1 of its own pid namespace says.
const FIRST_IN_ITS_OWN: &str = "desi-gpu-map: node n1: this task is process 1 of a pid \
    namespace of its own (a container per task?): an MPS keeper started from it would end with \
    this task, and could not watch the step's other tasks; running without MPS";

/// A container per task (here `unshare`, giving each task a user and a pid
/// namespace of its own in the network namespace the tasks share, as
/// podman, podman-hpc and `apptainer --pid` do), with a `TMPDIR` of
/// alice's (in her user namespace root's `/tmp` is nobody's): every task
/// runs mapped without MPS and says why, local task 1 too, and nothing is
/// left. Before, the first task's keeper served it alone, another task
/// said a misread peer's uid as an errno or nothing, and the keeper died
/// with the first task's namespace, leaving its directory.
#[test]
fn exec_in_a_pid_namespace_per_task_runs_without_mps_and_each_task_says_why() {
    let _c = exec_setup();
    clear_what_others_left();
    let base = OwnBase::new("pn", 0o700, USERS[0].1);
    let out = srun("-n2 -w n1 --gpus-per-node=2")
        .user(ALICE)
        .env("TMPDIR", &base.path())
        .args("unshare --user --map-current-user --pid --fork --mount-proc")
        .args(&exec_mps("contiguous,mps"))
        .probe(&task())
        .ok();
    let rows = out.rows();
    assert_eq!(rows.lines().count(), 2, "{out}");
    assert!(
        rows.lines().all(|r| r.ends_with(" unset unset none none")),
        "{out}"
    );
    assert_eq!(out.said(), [FIRST_IN_ITS_OWN, FIRST_IN_ITS_OWN], "{out}");
    assert!(
        wait_for(10, || base.others().is_empty()),
        "left in the tasks' base: {:?}",
        base.others()
    );
    assert_nothing_left("a pid namespace per task");
}

// ------------------------------------------ the task prolog and epilog

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
        .env("SLURM_TASK_EPILOG", &prolog_bin())
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
    let started = format!("dgm-mps.{}.999.0.0.k.000000ab", USERS[0].1);
    let starting = format!("dgm-mps.{}.999.1.0.k.000000cd", USERS[0].1);
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
