//! exec's CUDA MPS: one control daemon per step and node, as the plugin's
//! (the same [`Daemon`], started and stopped by [`crate::host::daemon`]),
//! where no plugin runs one. exec replaces itself with the application,
//! so something else must outlive the node's tasks and end the daemon:
//! the **keeper**, one small process per step and node.
//!
//! - The node's tasks meet at an abstract socket named after the daemon's
//!   directory stem (`desi-gpu-map-mps.UID.JOBID.STEPID.NODEID`): nothing
//!   on disk, and gone with the process that holds it. The first task to
//!   bind it starts the keeper, which holds it from then on; every task
//!   then connects and is answered `ok TOKEN` (the daemon's directory) or
//!   `no WHY` (the step runs without MPS).
//! - Each end proves its peer is the job's user (`SO_PEERCRED`), and the
//!   keeper takes only tasks of its own slurmstepd.
//! - The keeper holds a pidfd of every task that joined and of every
//!   process slurmstepd had forked when it started (all of the node's
//!   tasks: slurmstepd forks them all before it lets any run), so the
//!   node's **last** task's end is an event, however it ended (SIGKILL
//!   included). Then, or when slurmstepd itself is gone, or when a
//!   signal that ends a step reaches it, it removes the directory and
//!   kills the daemon ([`daemon::Running::end_now`]).
//! - Under proctrack/cgroup Slurm kills what is left of a step about
//!   0.3 ms after its last task exits, and on a busy node that can come
//!   before the keeper has removed the directory. So each keeper marks its
//!   directory ([`MARK`]), and every keeper first removes the user's marked
//!   directories in its base whose keeper's socket is gone ([`sweep`]):
//!   what one step leaves, the user's next `exec METHOD,mps` on that node
//!   removes. Processes are never left: the daemon and its server are in
//!   the step, which Slurm kills.
//! - It is detached (its parent exits at once): no task is its parent,
//!   and under proctrack/linuxproc it outlives the step's end to clean up.
//!   Under proctrack/cgroup it is in the step, and Slurm's signals reach
//!   it: it ends at once on TERM, INT, HUP or QUIT, and ignores the rest.

use super::args::KeeperArgs;
use crate::host::daemon;
use crate::host::process::parent_of;
use crate::host::run::{AsThisProcess, POLL};
use crate::mps::Daemon;
use crate::text::quote;
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::net::sockopt::socket_peercred;
use rustix::process::{pidfd_open, Pid, PidfdFlags, Signal};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// How much longer than the daemon's own timeout a task waits for the
/// keeper's answer (the keeper starts the daemon first).
const ANSWER_MARGIN: Duration = Duration::from_secs(5);
/// The longest answer line read from a keeper.
const MAX_ANSWER: u64 = 4096;
/// Most parents walked up from a task to its slurmstepd.
const MOST_ANCESTORS: usize = 32;
/// The file a keeper puts in its daemon's directory: only such directories
/// are ever swept (the plugin's are removed by the plugin).
const MARK: &str = "keeper";
/// The most directories one sweep looks at.
const MOST_SWEPT: usize = 256;

/// A task of the step joins its node's daemon: the keeper's, started here
/// if no task started one yet. The daemon as it runs (in the directory the
/// keeper made), or why the step runs without MPS.
pub fn join(daemon: &Daemon, stepd: Option<u32>) -> Result<Daemon, String> {
    let name = SocketAddr::from_abstract_name(daemon.stem.as_bytes())
        .map_err(|e| format!("cannot name the MPS keeper's socket: {e}"))?;
    let deadline = Instant::now() + daemon.timeout + ANSWER_MARGIN;
    loop {
        match UnixStream::connect_addr(&name) {
            Ok(stream) => return answer(stream, daemon, deadline),
            Err(e) if e.kind() != std::io::ErrorKind::ConnectionRefused => {
                return Err(format!("cannot reach the MPS keeper @{}: {e}", daemon.stem));
            }
            Err(_) => {}
        }
        // No keeper yet: this task starts one, unless another just bound
        // the name, whose keeper answers the next connect.
        match UnixListener::bind_addr(&name) {
            Ok(listener) => start_keeper(listener, daemon, stepd)?,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => std::thread::sleep(POLL),
            Err(e) => return Err(format!("cannot start the MPS keeper @{}: {e}", daemon.stem)),
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "no MPS keeper answered at @{} within {} s",
                daemon.stem,
                (daemon.timeout + ANSWER_MARGIN).as_secs()
            ));
        }
    }
}

/// The keeper's answer to this task: it must be the job's user's.
fn answer(stream: UnixStream, daemon: &Daemon, deadline: Instant) -> Result<Daemon, String> {
    let uid = rustix::process::getuid().as_raw();
    let peer = socket_peercred(&stream)
        .map_err(|e| format!("cannot tell who holds the MPS keeper's socket: {e}"))?;
    if peer.uid.as_raw() != uid {
        return Err(format!(
            "the MPS keeper's socket @{} is held by uid {} (pid {}), not by the job's user",
            daemon.stem,
            peer.uid.as_raw(),
            peer.pid.as_raw_nonzero()
        ));
    }
    let left = deadline.saturating_duration_since(Instant::now());
    stream
        .set_read_timeout(Some(left.max(POLL)))
        .map_err(|e| format!("cannot wait for the MPS keeper: {e}"))?;
    let mut line = String::new();
    BufReader::new(stream.take(MAX_ANSWER))
        .read_line(&mut line)
        .map_err(|e| format!("no answer from the MPS keeper @{}: {e}", daemon.stem))?;
    match Answer::parse(line.trim_end()) {
        Some(Answer::Ok(token)) => Ok(daemon.with_token(token)),
        Some(Answer::No(why)) => Err(why),
        None => Err(format!(
            "the MPS keeper @{} answered {}",
            daemon.stem,
            quote(line.trim_end())
        )),
    }
}

/// What the keeper answers each task.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    /// The daemon serves, in the directory with this token.
    Ok(u64),
    /// No daemon serves: why.
    No(String),
}

impl Answer {
    fn line(&self) -> String {
        match self {
            Answer::Ok(token) => format!("ok {token:016x}\n"),
            Answer::No(why) => format!("no {}\n", why.replace('\n', " ")),
        }
    }

    fn parse(line: &str) -> Option<Answer> {
        let (word, rest) = line.split_once(' ')?;
        match word {
            "ok" => u64::from_str_radix(rest, 16).ok().map(Answer::Ok),
            "no" => Some(Answer::No(rest.to_string())),
            _ => None,
        }
    }
}

/// Starts the keeper with `listener` as its standard input, and waits for
/// the first of its two processes, which starts the second detached and
/// exits at once.
fn start_keeper(listener: UnixListener, daemon: &Daemon, stepd: Option<u32>) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let paths: Vec<String> = daemon
        .path
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let mut cmd = Command::new(exe);
    cmd.arg("mps-keeper")
        .arg("--control")
        .arg(&daemon.control)
        .arg(format!("--path={}", paths.join(":")))
        .arg("--base")
        .arg(&daemon.base)
        .args(["--stem", &daemon.stem])
        .args(["--token", &daemon.token.to_string()])
        .arg(format!("--gpus={}", daemon.gpus.join(",")))
        .args(["--timeout-ms", &daemon.timeout.as_millis().to_string()])
        .args(["--tasks", &daemon.local_tasks.to_string()]);
    if let Some(pid) = stepd {
        cmd.args(["--stepd", &pid.to_string()]);
    }
    let status = cmd
        .env_clear()
        .stdin(Stdio::from(OwnedFd::from(listener)))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .status()
        .map_err(|e| format!("cannot start the MPS keeper: {e}"))?;
    match status.success() {
        true => Ok(()),
        false => Err(format!("the MPS keeper did not start ({status})")),
    }
}

/// `desi-gpu-map mps-keeper`: without `--serve`, starts itself again with
/// it, detached, and exits; with it, keeps the step's daemon.
pub fn run(args: &KeeperArgs, signal_fd: fn() -> std::io::Result<OwnedFd>) -> ExitCode {
    if !args.serve {
        let again = std::env::current_exe().and_then(|exe| {
            Command::new(exe)
                .args(std::env::args_os().skip(1))
                .arg("--serve")
                .stdin(Stdio::inherit())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .process_group(0)
                .spawn()
        });
        return match again {
            Ok(_) => ExitCode::SUCCESS,
            Err(_) => ExitCode::FAILURE,
        };
    }
    let daemon = planned(args);
    sweep(&daemon);
    if args.sweep {
        return ExitCode::SUCCESS;
    }
    // Slurm's signals are events from here on, never this process's end.
    let signals = signal_fd().ok();
    let listener = match std::io::stdin().as_fd().try_clone_to_owned() {
        Ok(fd) => UnixListener::from(fd),
        Err(_) => return ExitCode::FAILURE,
    };
    let _ = listener.set_nonblocking(true);
    let mut keeper = Keeper::new(&daemon, args.stepd);
    let started = daemon::start(&daemon, &AsThisProcess);
    if let Ok(running) = &started {
        let _ = std::fs::File::create(running.daemon().dir().join(MARK));
    }
    let reply = match &started {
        Ok(running) => Answer::Ok(running.daemon().token),
        Err(why) => Answer::No(why.clone()),
    };
    let daemon_fd = started.as_ref().ok().and_then(|r| open_pidfd(r.pid()));
    keeper.serve(&listener, &reply, signals.as_ref(), daemon_fd.as_ref());
    drop(listener);
    if let Ok(running) = started {
        let _ = running.end_now();
    }
    ExitCode::SUCCESS
}

/// Removes the user's marked directories in the daemon's base whose
/// keeper's socket (named after the directory less its random part) is
/// gone: what a keeper killed by Slurm before it cleaned up left.
fn sweep(daemon: &Daemon) {
    let prefix = format!("desi-gpu-map-mps.{}.", daemon.uid);
    let Ok(entries) = std::fs::read_dir(&daemon.base) else {
        return;
    };
    let mut stale: Vec<std::path::PathBuf> = entries
        .take(MOST_SWEPT * 16)
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .map(|e| e.path())
        .filter(|dir| marked_by_us(dir, daemon.uid))
        .take(MOST_SWEPT)
        .collect();
    if stale.is_empty() {
        return;
    }
    let bound = bound_names();
    stale.retain(|dir| {
        let stem = dir
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.rsplit_once('.'))
            .map(|(stem, _)| format!("@{stem}"));
        stem.is_some_and(|stem| !bound.contains(&stem))
    });
    for dir in stale {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// A directory (not a link) of `uid`'s that holds a keeper's [`MARK`].
fn marked_by_us(dir: &std::path::Path, uid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let ours = |p: &std::path::Path, dir: bool| {
        std::fs::symlink_metadata(p)
            .is_ok_and(|m| m.uid() == uid && m.is_dir() == dir && !m.file_type().is_symlink())
    };
    ours(dir, true) && ours(&dir.join(MARK), false)
}

/// The abstract unix socket names bound on this host (`@name`), as
/// `/proc/net/unix` lists them.
fn bound_names() -> Vec<String> {
    let text = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    text.lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().nth(7))
        .filter(|name| name.starts_with('@'))
        .map(String::from)
        .collect()
}

/// The daemon the task planned, run as this process's user.
fn planned(args: &KeeperArgs) -> Daemon {
    Daemon {
        control: args.control.clone(),
        path: args.path.clone(),
        base: args.base.clone(),
        stem: args.stem.clone(),
        token: args.token,
        gpus: args.gpus.clone(),
        uid: rustix::process::getuid().as_raw(),
        gid: rustix::process::getgid().as_raw(),
        host: None,
        shares: Vec::new(),
        keep_log: false,
        timeout: Duration::from_millis(args.timeout_ms),
        local_tasks: args.tasks,
        asked: true,
    }
}

fn open_pidfd(pid: u32) -> Option<OwnedFd> {
    let pid = Pid::from_raw(i32::try_from(pid).ok()?)?;
    pidfd_open(pid, PidfdFlags::empty()).ok()
}

/// The keeper's view of the node's tasks.
struct Keeper {
    uid: u32,
    stepd: Option<u32>,
    stepd_fd: Option<OwnedFd>,
    /// Tasks (and slurmstepd's other children) not yet exited, by pid.
    live: Vec<(u32, OwnedFd)>,
    tally: Tally,
}

impl Keeper {
    fn new(daemon: &Daemon, stepd: Option<u32>) -> Keeper {
        let forked = stepd.map(children_of).unwrap_or_default();
        let live: Vec<(u32, OwnedFd)> = forked
            .iter()
            .filter_map(|&pid| Some((pid, open_pidfd(pid)?)))
            .collect();
        Keeper {
            uid: daemon.uid,
            stepd,
            stepd_fd: stepd.and_then(open_pidfd),
            tally: Tally::new(
                daemon.local_tasks,
                live.len(),
                daemon.timeout,
                Instant::now(),
            ),
            live,
        }
    }

    /// Answers tasks until the node's last one has exited, slurmstepd is
    /// gone, the daemon died, or a signal ends the step.
    fn serve(
        &mut self,
        listener: &UnixListener,
        reply: &Answer,
        signals: Option<&OwnedFd>,
        daemon: Option<&OwnedFd>,
    ) {
        loop {
            let now = Instant::now();
            if self.tally.done(self.live.len(), now) {
                return;
            }
            let wait = self.tally.wait(self.live.len(), now);
            let Some(ready) = self.poll(listener, [signals, daemon], wait) else {
                std::thread::sleep(POLL);
                continue;
            };
            let (joining, signalled, stepd_gone, daemon_gone, exited) = ready;
            if stepd_gone || daemon_gone || signalled.is_some_and(ends_step) {
                return;
            }
            let before = self.live.len();
            let mut gone = exited.into_iter();
            self.live.retain(|_| !gone.next().unwrap_or(false));
            if self.live.len() < before {
                self.tally.exited(Instant::now());
            }
            if joining {
                self.take_tasks(listener, reply);
            }
        }
    }

    /// Waits at most `wait` (`None`: until something happens) for a task
    /// to join or exit, a signal, or the end of slurmstepd or the daemon:
    /// which happened (the signalfd, where it is readable), and each live
    /// task's end in order; `None` where poll failed.
    #[allow(clippy::type_complexity)]
    fn poll<'a>(
        &self,
        listener: &UnixListener,
        [signals, daemon]: [Option<&'a OwnedFd>; 2],
        wait: Option<Duration>,
    ) -> Option<(bool, Option<&'a OwnedFd>, bool, bool, Vec<bool>)> {
        let watched = [signals, self.stepd_fd.as_ref(), daemon];
        let mut fds = vec![PollFd::new(listener, PollFlags::IN)];
        fds.extend(
            watched
                .iter()
                .flatten()
                .map(|fd| PollFd::new(*fd, PollFlags::IN)),
        );
        fds.extend(
            self.live
                .iter()
                .map(|(_, fd)| PollFd::new(fd, PollFlags::IN)),
        );
        let timeout = wait.and_then(|w| Timespec::try_from(w).ok());
        poll(&mut fds, timeout.as_ref()).ok()?;
        let mut ready = fds.iter().map(|f| !f.revents().is_empty());
        let joining = ready.next().unwrap_or(false);
        let mut fired = [false; 3];
        for (slot, fd) in watched.iter().enumerate() {
            if fd.is_some() {
                if let Some(f) = fired.get_mut(slot) {
                    *f = ready.next().unwrap_or(false);
                }
            }
        }
        let [signal, stepd, gone] = fired;
        Some((
            joining,
            signals.filter(|_| signal),
            stepd,
            gone,
            ready.collect(),
        ))
    }

    /// Answers every task waiting to join; each one of the job's user under
    /// this keeper's slurmstepd is watched from then on.
    fn take_tasks(&mut self, listener: &UnixListener, reply: &Answer) {
        while let Ok((mut stream, _)) = listener.accept() {
            let _ = stream.set_nonblocking(false);
            let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
            let answer = match self.task_of_step(&stream) {
                Ok(pid) => {
                    if !self.live.iter().any(|(p, _)| *p == pid) {
                        if let Some(fd) = open_pidfd(pid) {
                            self.live.push((pid, fd));
                        }
                    }
                    self.tally.joined();
                    reply.clone()
                }
                Err(why) => Answer::No(why),
            };
            let _ = stream.write_all(answer.line().as_bytes());
        }
    }

    /// The peer's pid, where it is the job's user's and under this step's
    /// slurmstepd.
    fn task_of_step(&self, stream: &UnixStream) -> Result<u32, String> {
        let peer = socket_peercred(stream).map_err(|e| e.to_string())?;
        if peer.uid.as_raw() != self.uid {
            return Err("not the job's user".to_string());
        }
        let pid = u32::try_from(peer.pid.as_raw_nonzero().get()).map_err(|e| e.to_string())?;
        match self.stepd {
            Some(stepd) if !descends_from(pid, stepd) => {
                Err(format!("pid {pid} is not a task of this step"))
            }
            _ => Ok(pid),
        }
    }
}

/// Reads a signal waiting on `fd` (a signalfd): true where it ends the
/// step (TERM, INT, HUP, QUIT); the others (USR1, USR2, ALRM, which users
/// and Slurm send steps that go on) are read and ignored.
fn ends_step(fd: &OwnedFd) -> bool {
    /// `struct signalfd_siginfo`'s size; its first field is the signal.
    const INFO: usize = 128;
    let mut info = [0u8; INFO];
    let ending = [Signal::TERM, Signal::INT, Signal::HUP, Signal::QUIT];
    match (rustix::io::read(fd, &mut info), info.first_chunk::<4>()) {
        (Ok(INFO), Some(signo)) => {
            let signo = i32::from_ne_bytes(*signo);
            ending.iter().any(|s| s.as_raw() == signo)
        }
        _ => false,
    }
}

/// When the keeper is done: the node's tasks, as far as it knows them.
#[derive(Debug, Clone, Copy)]
struct Tally {
    /// The step's tasks on this node (`SLURM_STEP_TASKS_PER_NODE`).
    expected: usize,
    /// How many slurmstepd had forked when the keeper started.
    forked: usize,
    /// How many joined.
    joined: usize,
    /// How long to wait for more tasks once every known one has exited,
    /// where not all are known.
    grace: Duration,
    /// Since when no known task has lived: the keeper's start, then the
    /// last known task's exit; `None` while a task that joined may live.
    quiet_since: Option<Instant>,
}

impl Tally {
    fn new(expected: usize, forked: usize, grace: Duration, now: Instant) -> Tally {
        Tally {
            expected,
            forked,
            joined: 0,
            grace,
            quiet_since: Some(now),
        }
    }

    fn joined(&mut self) {
        self.joined += 1;
        self.quiet_since = None;
    }

    fn exited(&mut self, now: Instant) {
        self.quiet_since = Some(now);
    }

    /// Every task is known: slurmstepd's children were read (it forks all
    /// of the node's tasks before any runs), or all joined.
    fn all_known(&self) -> bool {
        self.forked >= self.expected || self.joined >= self.expected
    }

    /// Done: no known task lives, and either every task was known or none
    /// joined within the grace.
    fn done(&self, live: usize, now: Instant) -> bool {
        live == 0 && (self.all_known() || self.quiet_since.is_some_and(|t| now >= t + self.grace))
    }

    /// How long to wait for the next event: forever while tasks live.
    fn wait(&self, live: usize, now: Instant) -> Option<Duration> {
        match (live, self.quiet_since) {
            (0, Some(t)) => Some((t + self.grace).saturating_duration_since(now)),
            (0, None) => Some(self.grace),
            _ => None,
        }
    }
}

/// The processes `pid` has forked and not yet reaped (every thread's
/// `/proc/PID/task/TID/children`).
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(threads) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut children: Vec<u32> = threads
        .filter_map(|t| {
            let path = t.ok()?.path().join("children");
            std::fs::read_to_string(path).ok()
        })
        .flat_map(|text| {
            text.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect();
    children.sort_unstable();
    children.dedup();
    children
}

/// `pid` is `ancestor` or below it.
fn descends_from(pid: u32, ancestor: u32) -> bool {
    let mut at = pid;
    for _ in 0..MOST_ANCESTORS {
        if at == ancestor {
            return true;
        }
        match parent_of(at) {
            Some(parent) if parent > 1 => at = parent,
            _ => return false,
        }
    }
    false
}
