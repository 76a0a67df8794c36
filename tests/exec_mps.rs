//! `desi-gpu-map exec METHOD,mps` on this host, with no Slurm: where it
//! steps aside or refuses, the plugin's limit of clients per GPU, and the
//! keeper that runs a step's one daemon (`KeptStep`). Each `KeptStep` has a
//! step number of its own in this binary: with the binary's pid it names
//! the keeper's socket.

mod common;

use common::{exec_in_task, exec_with, fake_nvml, stdout, words_of, SHOW_ENV};
use std::process::{Command, Output};

/// exec's `mps` starts nothing where a daemon already serves the step: one
/// at the pipe directory it inherited (its GPU then by UUID, for that
/// daemon), or Slurm's gres/mps; local task 0 says which.
#[test]
fn exec_mps_steps_aside_under_a_daemon_it_inherited_or_gres_mps() {
    let (dir, lib) = fake_nvml("mps-aside", "count=4\n");
    let args = [
        "--nvml",
        lib.as_str(),
        "--method",
        "contiguous,mps",
        "--",
        "sh",
        "-c",
        "echo $CUDA_VISIBLE_DEVICES ${CUDA_MPS_PIPE_DIRECTORY-unset}",
    ];
    let site = [("CUDA_MPS_PIPE_DIRECTORY", "/run/site-mps")];
    let out = exec_in_task("0", &args, &site);
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "the MPS daemon at CUDA_MPS_PIPE_DIRECTORY=\"/run/site-mps\" serves this step; no MPS daemon started"
        ),
        "{err}"
    );
    let words = words_of(&out);
    assert!(words[0].starts_with("GPU-fake-"), "{out:?}");
    assert_eq!(words[1], "/run/site-mps", "{out:?}");
    // Another task of the step says nothing.
    let out = exec_in_task("1", &args, &site);
    assert!(out.stderr.is_empty(), "{out:?}");
    let gres = [("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "25")];
    let out = exec_in_task("0", &args, &gres);
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Slurm's gres/mps serves this step (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=\"25\"); no MPS daemon started"),
        "{err}"
    );
    assert_eq!(words_of(&out), ["0", "unset"], "{out:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn exec_refuses_mps_under_another_launcher() {
    let rank = [
        ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
        ("CUDA_VISIBLE_DEVICES", "0,1"),
    ];
    let out = exec_with(&rank, &["--method", "contiguous,mps", "--", "echo", "ran"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(stdout(&out).is_empty(), "nothing ran: {out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("mps is for srun's tasks") && err.ends_with("nothing was run\n"),
        "{err}"
    );
}

#[test]
fn exec_mps_keeps_the_plugins_limit_of_48_clients_per_gpu() {
    // 49 tasks on one GPU: mapped, without MPS, said by local task 0 only.
    let one_gpu = [
        ("SLURM_STEP_TASKS_PER_NODE", "49"),
        ("CUDA_VISIBLE_DEVICES", "0"),
        ("SLURM_STEP_GPUS", "0"),
        ("SLURM_GPUS_ON_NODE", "1"),
    ];
    let args = ["--method", "contiguous,mps", "--", "sh", "-c", SHOW_ENV];
    let out = exec_in_task("0", &args, &one_gpu);
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("49 tasks would share one GPU, and MPS serves at most 48 clients per GPU")
            && err.trim_end().ends_with("; running without MPS"),
        "{err}"
    );
    assert_eq!(words_of(&out)[1..3], ["0", "1"], "{out:?}");
    let out = exec_in_task("7", &args, &one_gpu);
    assert!(out.stderr.is_empty(), "{out:?}");
}

/// The user the keeper tests' tasks run as.
const TASKS_USER: &str = "nobody";

fn tasks_uid() -> u32 {
    let out = Command::new("id")
        .args(["-u", TASKS_USER])
        .output()
        .unwrap();
    stdout(&out).trim().parse().unwrap()
}

/// One step's tasks on this host, run as srun would run them (no
/// slurmstepd above them) as user `nobody` (MPS never serves root): a
/// stand-in control daemon, a fake NVML with 2 GPUs, and a base folder
/// of the test's own for each task (`t0`, `t1`), named short: the daemon's
/// longest socket path, `pipe/control_privileged` in the step's directory,
/// must fit in 107 bytes. Removed when dropped.
struct KeptStep {
    dir: std::path::PathBuf,
    bases: std::path::PathBuf,
    lib: String,
    step: u32,
}

impl KeptStep {
    fn new(name: &str, step: u32) -> KeptStep {
        let (dir, lib) = fake_nvml(&format!("k{name}"), "count=2\n");
        // `-f` makes its socket and sleeps; a question gets a number,
        // `quit` ends it.
        let control = "#!/bin/sh\nif [ \"$1\" = -f ]; then echo $$ > \"$CUDA_MPS_PIPE_DIRECTORY/pid\"\n\
             touch \"$CUDA_MPS_PIPE_DIRECTORY/control\"; exec sleep 60; fi\nread cmd\n\
             case $cmd in quit) kill $(cat \"$CUDA_MPS_PIPE_DIRECTORY/pid\");; *) echo 100.0;; esac\n";
        // The server is looked for beside the control daemon.
        for (name, text) in [
            ("nvidia-cuda-mps-control", control),
            ("nvidia-cuda-mps-server", "#!/bin/sh\n"),
        ] {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
            std::fs::set_permissions(&path, mode).unwrap();
        }
        let bases = std::env::temp_dir().join(format!("dgm-k{name}{}", std::process::id()));
        for tmp in ["t0", "t1"] {
            std::fs::create_dir_all(bases.join(tmp)).unwrap();
        }
        let owned = Command::new("chown")
            .arg("-R")
            .arg(TASKS_USER)
            .args([&dir, &bases])
            .status();
        assert!(owned.is_ok_and(|s| s.success()), "chown {}", dir.display());
        KeptStep {
            dir,
            bases,
            lib,
            step,
        }
    }

    /// The base folder `tmp` (`t0` or `t1`), a task's `TMPDIR`.
    fn base(&self, tmp: &str) -> std::path::PathBuf {
        self.bases.join(tmp)
    }

    /// The keeper's socket name, which the step's tasks meet at.
    fn name(&self) -> String {
        let uid = tasks_uid();
        format!("dgm-mps.{uid}.{}.{}.0.k", std::process::id(), self.step)
    }

    /// Local task `local` of 2, its `TMPDIR` the folder `tmp` of the
    /// step's, running `script` under exec METHOD,mps.
    fn task(&self, local: usize, tmp: &str, script: &str) -> std::process::Child {
        self.task_in(local, tmp, &[], script)
    }

    /// [`KeptStep::task`], its exec run by the words `wrap` (the command
    /// that starts it, its arguments following), as a container runs it.
    fn task_in(&self, local: usize, tmp: &str, wrap: &[&str], script: &str) -> std::process::Child {
        self.as_task(local, 2, tmp)
            .args(wrap)
            .arg(env!("CARGO_BIN_EXE_desi-gpu-map"))
            .args(["exec", "--nvml", &self.lib, "--mps-control"])
            .arg(self.dir.join("nvidia-cuda-mps-control"))
            .args(["--method", "contiguous,mps", "--", "sh", "-c", script])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start desi-gpu-map exec")
    }

    /// Both tasks at once, each run by `wrap` ([`KeptStep::task_in`]).
    fn both_in(&self, wrap: &[&str], script: &str) -> [Output; 2] {
        let tasks = [
            self.task_in(0, "t0", wrap, script),
            self.task_in(1, "t1", wrap, script),
        ];
        tasks.map(|t| t.wait_with_output().expect("wait for a task"))
    }

    /// `runuser` as the tasks' user, with the variables of local task
    /// `local` of `count`; its command to follow.
    fn as_task(&self, local: usize, count: usize, tmp: &str) -> Command {
        let gpus = ["0", "0,1"][count - 1];
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", TASKS_USER, "--"])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("TMPDIR", self.base(tmp))
            .envs([
                ("SLURM_JOB_ID", std::process::id().to_string()),
                ("SLURM_STEP_ID", self.step.to_string()),
                ("SLURM_LOCALID", local.to_string()),
                ("SLURM_PROCID", local.to_string()),
                ("SLURM_NODEID", "0".to_string()),
                ("SLURM_STEP_TASKS_PER_NODE", count.to_string()),
                ("SLURMD_NODENAME", "n1".to_string()),
                ("CUDA_VISIBLE_DEVICES", gpus.to_string()),
                ("SLURM_STEP_GPUS", gpus.to_string()),
                ("SLURM_GPUS_ON_NODE", count.to_string()),
            ]);
        cmd
    }

    /// Both tasks at once, each with its own `TMPDIR`; their outputs.
    fn both(&self, script: &str) -> [Output; 2] {
        let tasks = [self.task(0, "t0", script), self.task(1, "t1", script)];
        tasks.map(|t| t.wait_with_output().expect("wait for a task"))
    }

    /// The keeper's directories left in either task's base.
    fn left(&self) -> Vec<String> {
        ["t0", "t1"]
            .iter()
            .flat_map(|t| std::fs::read_dir(self.base(t)).unwrap())
            .filter_map(|e| e.ok()?.file_name().to_str().map(String::from))
            .collect()
    }

    /// Nothing is left once the tasks are gone: no directory, no keeper,
    /// no daemon of this step's.
    fn assert_nothing_left(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while (!self.left().is_empty() || !self.processes().is_empty())
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert_eq!(self.left(), Vec::<String>::new(), "directories left");
        assert_eq!(self.processes(), Vec::<u32>::new(), "keeper or daemon left");
    }

    /// The step's keepers (their command line names the step's socket)
    /// and their children (the daemon).
    fn processes(&self) -> Vec<u32> {
        let name = self.name();
        let pids: Vec<u32> = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .collect();
        let keepers: Vec<u32> = pids
            .iter()
            .copied()
            .filter(|pid| {
                let bytes = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                String::from_utf8_lossy(&bytes).contains(&name)
            })
            .collect();
        let parent = |pid: u32| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let after = stat
                .rsplit_once(')')
                .map(|(_, r)| r.to_string())
                .unwrap_or_default();
            after
                .split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u32>().ok())
        };
        let children = pids
            .iter()
            .copied()
            .filter(|&pid| parent(pid).is_some_and(|p| keepers.contains(&p)));
        let mut all: Vec<u32> = keepers.iter().copied().chain(children).collect();
        all.sort_unstable();
        all
    }
}

/// Each of `pids` with its state, parent and command line, for a failure's
/// message.
fn described(pids: &[u32]) -> String {
    let one = |pid: &u32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or("", |(_, r)| r)
            .split_whitespace()
            .take(2)
            .collect();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        format!("{pid} {fields:?} {cmdline}")
    };
    pids.iter().map(one).collect::<Vec<_>>().join("; ")
}

impl Drop for KeptStep {
    fn drop(&mut self) {
        for pid in self.processes() {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_dir_all(&self.bases);
    }
}

/// What each task prints: its GPU, whether its pipe directory is there,
/// and that directory.
const PIPE: &str = r#"test -d "$CUDA_MPS_PIPE_DIRECTORY" && t=there || t=missing; echo "$CUDA_VISIBLE_DEVICES $t $CUDA_MPS_PIPE_DIRECTORY"; sleep 1"#;

/// Both tasks were served by one daemon, each on its own GPU, in a pipe
/// directory that was there: that directory.
fn served_alike(out: &[Output; 2]) -> String {
    let words: Vec<Vec<String>> = out.iter().map(words_of).collect();
    for (i, w) in words.iter().enumerate() {
        assert_eq!(w.len(), 3, "task {i}: {:?}", out[i]);
        let gpu = &w[0];
        let own = gpu.starts_with("GPU-fake-") && gpu.ends_with(&format!("-{i}"));
        assert!(own, "task {i}: {:?}", out[i]);
        assert_eq!(w[1], "there", "task {i}: {:?}", out[i]);
    }
    assert_eq!(words[0][2], words[1][2], "one daemon: {out:?}");
    words[0][2].clone()
}

#[test]
fn tasks_with_their_own_tmpdir_are_told_the_keepers_directory() {
    let step = KeptStep::new("t", 1);
    let pipe = served_alike(&step.both(PIPE));
    assert!(pipe.contains(".k."), "named as a keeper's: {pipe}");
    step.assert_nothing_left();
}

/// A keeper that ends before it answers (here a stand-in of the job's
/// user that listens on the name, waits for a task's connection and
/// closes it unanswered, as a keeper killed at its start does) costs the
/// step nothing: a task starts the keeper again, and both are served.
#[test]
fn a_keeper_that_ends_before_it_answers_is_started_again() {
    let step = KeptStep::new("e", 6);
    let script = "import os, select, socket\n\
                  s = socket.socket(socket.AF_UNIX)\n\
                  s.bind('\\0' + os.environ['KEEPER_NAME'])\n\
                  s.listen(8)\n\
                  print('ready', flush=True)\n\
                  select.select([s], [], [], 30)\n\
                  s.close()\n";
    let mut stand_in = Command::new("runuser")
        .args(["-u", TASKS_USER, "--", "python3", "-c", script])
        .env("KEEPER_NAME", step.name())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run python3 as the tasks' user");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(stand_in.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line, "ready\n", "the stand-in keeper");
    let out = step.both(PIPE);
    assert!(stand_in.wait().unwrap().success(), "the stand-in keeper");
    let pipe = served_alike(&out);
    assert!(pipe.contains(".k."), "named as a keeper's: {pipe}");
    step.assert_nothing_left();
}

#[test]
fn a_name_another_process_holds_neither_denies_nor_delays_mps() {
    let step = KeptStep::new("s", 2);
    // Bound and never listening: a connect is refused, a bind finds the
    // name in use.
    let squat = rustix::net::socket(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::STREAM,
        None,
    )
    .unwrap();
    let name = rustix::net::SocketAddrUnix::new_abstract_name(step.name().as_bytes()).unwrap();
    rustix::net::bind(&squat, &name).unwrap();
    let started = std::time::Instant::now();
    let pipe = served_alike(&step.both(PIPE));
    // Local task 0 started the keeper, without the name.
    assert!(
        pipe.starts_with(&step.base("t0").display().to_string()),
        "{pipe}"
    );
    // Each task sleeps 1 s; the name's grace is a quarter of that.
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{started:?}"
    );
    step.assert_nothing_left();
    drop(squat);
    // Another user (root, here) listening on the name: found out at the
    // first connect.
    let step = KeptStep::new("l", 3);
    use std::os::linux::net::SocketAddrExt;
    let name = std::os::unix::net::SocketAddr::from_abstract_name(step.name().as_bytes()).unwrap();
    let squatter = std::os::unix::net::UnixListener::bind_addr(&name).unwrap();
    served_alike(&step.both(PIPE));
    step.assert_nothing_left();
    drop(squatter);
}

#[test]
fn the_keeper_holds_none_of_the_tasks_descriptors_and_takes_its_daemon_along() {
    let step = KeptStep::new("f", 4);
    let file = step.dir.join("task-file");
    // The task holds a file open without close-on-exec when it runs exec,
    // as after `exec 3>FILE` in a shell.
    let script = format!(
        "exec 3>{}; exec {} exec --nvml {} --mps-control {} --method contiguous,mps -- sh -c 'echo ok; sleep 3'",
        file.display(),
        env!("CARGO_BIN_EXE_desi-gpu-map"),
        step.lib,
        step.dir.join("nvidia-cuda-mps-control").display()
    );
    let mut cmd = step.as_task(0, 1, "t0");
    cmd.args(["sh", "-c", &script])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit());
    let mut task = cmd.spawn().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(task.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "ok", "{:?}", task.stderr);
    // A child the keeper runs for a moment (a control client) may be
    // listed beside them: the two are what stays.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut kept = step.processes();
    while kept.len() != 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
        kept = step.processes();
    }
    assert_eq!(
        kept.len(),
        2,
        "a keeper and its daemon: {}",
        described(&kept)
    );
    for pid in &kept {
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap();
        for fd in fds.flatten() {
            let to = std::fs::read_link(fd.path()).unwrap_or_default();
            assert_ne!(
                to,
                file,
                "pid {pid} holds the task's file as {:?}",
                fd.path()
            );
        }
    }
    // A keeper killed by pid takes its daemon along.
    let keeper = kept
        .iter()
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("mps-keeper"))
        })
        .expect("the keeper");
    Command::new("kill")
        .args(["-9", &keeper.to_string()])
        .status()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !step.processes().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(
        step.processes(),
        Vec::<u32>::new(),
        "the daemon outlived its keeper"
    );
    task.wait().unwrap();
}

/// The next keeper's sweep, run in another network namespace (as a keeper
/// on another node of a shared base runs it), keeps a live keeper's
/// directory: the keeper's sockets are not seen there, its lock is.
#[test]
fn a_sweep_from_another_network_namespace_keeps_a_live_keepers_directory() {
    use std::io::{BufRead, Read, Write};
    let step = KeptStep::new("n", 5);
    // The task says its pipe directory, waits for a line, and says whether
    // the directory is still there.
    let script = r#"echo "$CUDA_MPS_PIPE_DIRECTORY"; read line; test -d "$CUDA_MPS_PIPE_DIRECTORY" && echo there || echo missing"#;
    let mut cmd = step.as_task(0, 1, "t0");
    cmd.arg(env!("CARGO_BIN_EXE_desi-gpu-map"))
        .args(["exec", "--nvml", &step.lib, "--mps-control"])
        .arg(step.dir.join("nvidia-cuda-mps-control"))
        .args(["--method", "contiguous,mps", "--", "sh", "-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit());
    let mut task = cmd.spawn().unwrap();
    let mut out = std::io::BufReader::new(task.stdout.take().unwrap());
    let mut pipe = String::new();
    out.read_line(&mut pipe).unwrap();
    let kept = std::path::Path::new(pipe.trim()).parent();
    let kept = kept.unwrap_or_else(|| panic!("the task was not served: {pipe:?}"));
    assert!(kept.join("pipe").is_dir(), "served: {pipe}");
    let swept = Command::new("unshare")
        .args(["--net", "runuser", "-u", TASKS_USER, "--"])
        .arg(env!("CARGO_BIN_EXE_desi-gpu-map"))
        .args([
            "mps-keeper",
            "--serve",
            "--sweep",
            "--control",
            "/bin/false",
        ])
        .arg("--base")
        .arg(kept.parent().unwrap())
        .args(["--stem", "unused", "--token", "0"])
        .args(["--timeout-ms", "1000", "--tasks", "1"])
        .stdin(std::process::Stdio::null())
        .status()
        .expect("run unshare (util-linux)");
    assert!(swept.success(), "the sweep: {swept}");
    assert!(kept.is_dir(), "a live keeper's directory was swept: {pipe}");
    writeln!(task.stdin.take().unwrap(), "on").unwrap();
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert_eq!(rest, "there\n", "the task's directory, after the sweep");
    assert!(task.wait().unwrap().success());
    step.assert_nothing_left();
}

/// What `unshare` gives each task: a user and a pid namespace of its own,
/// and its own `/proc`, in the network namespace the step's tasks share
/// (podman's, podman-hpc's and `apptainer --pid`'s layout: a container
/// per task).
const OWN_PID_NAMESPACE: [&str; 6] = [
    "unshare",
    "--user",
    "--map-current-user",
    "--pid",
    "--fork",
    "--mount-proc",
];

/// What a task that is process 1 of its pid namespace says.
const FIRST_IN_ITS_OWN: &str = "desi-gpu-map: node n1: this task is process 1 of a pid namespace \
    of its own (a container per task?): an MPS keeper started from it would end with this task, \
    and could not watch the step's other tasks; running without MPS";

/// A step whose tasks each run as process 1 of a pid namespace of their
/// own: no keeper starts (one would be killed with its task, before it
/// removed its directory), and every task, local task 1 too, says why it
/// runs without MPS. Nothing is left.
#[test]
fn tasks_each_first_in_a_pid_namespace_of_their_own_say_why_they_run_without_mps() {
    let step = KeptStep::new("p", 7);
    let out = step.both_in(&OWN_PID_NAMESPACE, PIPE);
    for (i, out) in out.iter().enumerate() {
        assert!(out.status.success(), "task {i}: {out:?}");
        let words = words_of(out);
        assert_eq!(words.len(), 2, "task {i}, no pipe directory: {out:?}");
        assert_eq!(
            words[0],
            i.to_string(),
            "task {i}, its GPU by index: {out:?}"
        );
        assert_eq!(words[1], "missing", "task {i}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        let said: Vec<&str> = err.lines().collect();
        assert_eq!(said, [FIRST_IN_ITS_OWN], "task {i}: {out:?}");
    }
    step.assert_nothing_left();
}

/// A step whose tasks each have a pid namespace of their own, where the
/// task is neither its namespace's process 1 nor that one's child (an init
/// and a shell above it), and the namespace outlives the task a moment:
/// the task whose keeper it is gets MPS; the other, which the keeper
/// cannot see (its pid reads 0 there, as the keeper's does to it), is
/// told so and says it, whatever its local id; no peer's credentials are
/// misread. Nothing is left.
#[test]
fn a_task_the_keeper_cannot_see_is_told_why_and_says_it() {
    let step = KeptStep::new("q", 8);
    let mut wrap = OWN_PID_NAMESPACE.to_vec();
    wrap.extend(["sh", "-c", r#"sh -c '"$0" "$@"; true' "$@"; sleep 1"#, "sh"]);
    let out = step.both_in(&wrap, PIPE);
    let unseen = "desi-gpu-map: node n1: this task is in a pid namespace that the step's MPS \
                  keeper, started by another task, cannot see into (a container per task?): the \
                  keeper cannot tell when this task ends, and ends with that task's namespace; \
                  running without MPS";
    let mut served = 0;
    for (i, out) in out.iter().enumerate() {
        assert!(out.status.success(), "task {i}: {out:?}");
        let words = words_of(out);
        let err = String::from_utf8_lossy(&out.stderr);
        if words.get(1).map(String::as_str) == Some("there") {
            served += 1;
            assert!(words[0].ends_with(&format!("-{i}")), "task {i}: {out:?}");
            assert!(err.is_empty(), "task {i}: {out:?}");
        } else {
            assert_eq!(
                words,
                [i.to_string(), "missing".into()],
                "task {i}: {out:?}"
            );
            assert_eq!(
                err.lines().collect::<Vec<_>>(),
                [unseen],
                "task {i}: {out:?}"
            );
        }
    }
    assert_eq!(served, 1, "the keeper's own task only: {out:?}");
    step.assert_nothing_left();
}

/// Another user holds the step's keeper's name with a full queue, which
/// sends the tasks to the keeper's directory, and puts 30,000 entries in
/// the base it is made in: the tasks are served by one daemon all the same,
/// without waiting out their deadline.
#[test]
fn a_squatted_name_and_a_crowded_base_neither_delay_nor_deny_mps() {
    let step = KeptStep::new("c", 9);
    // Root's, here: another user than the tasks'.
    let name = rustix::net::SocketAddrUnix::new_abstract_name(step.name().as_bytes()).unwrap();
    let squat = rustix::net::socket_with(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::STREAM,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )
    .unwrap();
    rustix::net::bind(&squat, &name).unwrap();
    rustix::net::listen(&squat, 0).unwrap();
    let mut queued = Vec::new();
    loop {
        let fd = rustix::net::socket_with(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::STREAM,
            rustix::net::SocketFlags::CLOEXEC | rustix::net::SocketFlags::NONBLOCK,
            None,
        )
        .unwrap();
        if rustix::net::connect(&fd, &name).is_err() {
            break;
        }
        queued.push(fd);
        assert!(queued.len() < 64, "a queue of listen(0) never fills");
    }
    let base = step.base("t0");
    let crowd: Vec<std::path::PathBuf> = (0..30_000)
        .map(|n| base.join(format!("crowd.{n}")))
        .collect();
    // Names of one file: entries as many, made at a link's cost.
    let one = base.join("crowd");
    std::fs::write(&one, "").unwrap();
    for file in &crowd {
        std::fs::hard_link(&one, file).unwrap();
    }
    let started = std::time::Instant::now();
    let pipe = served_alike(&step.both(PIPE));
    let took = started.elapsed();
    assert!(
        pipe.starts_with(&base.display().to_string()),
        "local task 0 started the keeper, without the name: {pipe}"
    );
    // Each task sleeps 1 s.
    assert!(took < std::time::Duration::from_secs(5), "{took:?}");
    drop((queued, squat));
    for file in crowd.iter().chain([&one]) {
        std::fs::remove_file(file).unwrap();
    }
    step.assert_nothing_left();
}
