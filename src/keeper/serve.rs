//! The keeper's process: starts the step's daemon, answers the node's
//! tasks, and ends the daemon after the last of them.

use super::command::KeeperOpts;
use super::meet::{Answer, Ended, Request, MAX_REQUEST};
use super::sweep::sweep;
use super::tally::Tally;
use desi_gpu_map_core::mps::{Daemon, KeeperAddr};
use desi_gpu_map_host::failure::Failure;
use desi_gpu_map_host::mps::daemon;
use desi_gpu_map_host::process::{
    children_of, descends_from, environ, parent_of, pidfd, this_program, TASK_PID,
};
use desi_gpu_map_host::run::{Runner, POLL};
use desi_gpu_map_host::sys::{
    allowed_cpus, close_on_exec, ending_fd, peer_of, session_of, tie_to_parent,
};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::process::Signal;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// `desi-gpu-map mps-keeper`: without `--serve`, starts itself again with
/// it, detached, and exits; with it, keeps the step's daemon.
pub fn run(args: &KeeperOpts) -> ExitCode {
    // None of the task's descriptors (its output pipe, files it opened
    // without O_CLOEXEC) may reach the keeper's children: one would keep
    // srun's I/O open after the step.
    close_on_exec(3..=u32::MAX);
    if !args.serve {
        let again = this_program()
            .args(std::env::args_os().skip(1))
            .arg("--serve")
            .stdin(Stdio::inherit())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn();
        return match again {
            Ok(_) => ExitCode::SUCCESS,
            Err(_) => ExitCode::FAILURE,
        };
    }
    let daemon = args.daemon();
    sweep(&daemon);
    if args.sweep {
        return ExitCode::SUCCESS;
    }
    // Slurm's signals are events from here on, never this process's end.
    let signals = ending_fd().ok();
    let named = match args.unnamed {
        true => None,
        false => match std::io::stdin().as_fd().try_clone_to_owned() {
            Ok(fd) => Some(UnixListener::from(fd)),
            Err(_) => return ExitCode::FAILURE,
        },
    };
    on_the_steps_cpus(args.stepd);
    let made = daemon::make(&daemon, &Tied);
    // Its own socket, in the directory just made, before anything slow.
    let own = made
        .as_ref()
        .ok()
        .and_then(|m| UnixListener::bind(KeeperAddr::socket_in(&m.dir())).ok());
    let started = made.and_then(|made| daemon::start_in(made, &Tied));
    let reply = match &started {
        Ok(running) => Answer::Ok {
            token: running.daemon().token,
            base: running.daemon().base.clone(),
        },
        Err(why) => Answer::No(why.to_string()),
    };
    let listeners: Vec<UnixListener> = named.into_iter().chain(own).collect();
    for listener in &listeners {
        let _ = listener.set_nonblocking(true);
    }
    let daemon_fd = started.as_ref().ok().and_then(|r| pidfd(r.pid()));
    let mut keeper = Keeper::new(&daemon, args.stepd);
    keeper.serve(&listeners, &reply, signals.as_ref(), daemon_fd.as_ref());
    if let Ok(running) = started {
        let _ = running.end_now();
    }
    // Only now: a task epilog that asked is answered once the daemon and
    // its directory are gone, and slurmstepd, which waits for it, kills
    // the step's processes only after that.
    keeper.finish(&listeners);
    ExitCode::SUCCESS
}

/// Runs the keeper (and so its daemon and the daemon's servers, which
/// inherit it) on slurmstepd's CPUs, the step's: the task that started
/// it may be bound to one core.
fn on_the_steps_cpus(stepd: Option<u32>) {
    let Some(cpus) = stepd.and_then(|pid| allowed_cpus(Some(pid))) else {
        return;
    };
    let mut set = rustix::thread::CpuSet::new();
    for cpu in cpus.cpus().filter(|&c| c < rustix::thread::CpuSet::MAX_CPU) {
        set.set(cpu);
    }
    let _ = rustix::thread::sched_setaffinity(None, &set);
}

/// Children started as this process runs, each killed when it dies (a
/// keeper killed by pid takes its daemon along).
struct Tied;

impl Runner for Tied {
    fn prepare(&self, cmd: &mut Command) {
        tie_to_parent(cmd);
    }
}

/// What one poll found.
struct Ready {
    /// A task waits to join, at each listener.
    joining: Vec<bool>,
    /// A signal waits on the signalfd.
    signal: bool,
    stepd_gone: bool,
    daemon_gone: bool,
    /// Each live task's end, in the keeper's order.
    exited: Vec<bool>,
}

/// The keeper's view of the node's tasks.
struct Keeper {
    uid: u32,
    stepd: Option<u32>,
    stepd_fd: Option<OwnedFd>,
    /// Tasks (and slurmstepd's other children) not yet exited, by pid.
    live: Vec<(u32, OwnedFd)>,
    tally: Tally,
    /// Task epilogs of the node's last tasks, answered at the end.
    waiting: Vec<UnixStream>,
}

impl Keeper {
    fn new(daemon: &Daemon, stepd: Option<u32>) -> Keeper {
        let forked = stepd.map(children_of).unwrap_or_default();
        let live: Vec<(u32, OwnedFd)> = forked
            .iter()
            .filter_map(|&pid| Some((pid, pidfd(pid)?)))
            .collect();
        Keeper {
            uid: daemon.uid,
            stepd,
            stepd_fd: stepd.and_then(pidfd),
            tally: Tally::new(
                daemon.local_tasks,
                live.len(),
                daemon.timeout,
                Instant::now(),
            ),
            live,
            waiting: Vec::new(),
        }
    }

    /// Answers tasks until the node's last one has exited, slurmstepd is
    /// gone, the daemon died, or a signal ends the step.
    fn serve(
        &mut self,
        listeners: &[UnixListener],
        reply: &Answer,
        signals: Option<&OwnedFd>,
        daemon: Option<&OwnedFd>,
    ) {
        loop {
            let now = Instant::now();
            if !self.waiting.is_empty() || self.tally.done(self.live.len(), now) {
                return;
            }
            let wait = self.tally.wait(self.live.len(), now);
            let Some(ready) = self.poll(listeners, [signals, daemon], wait) else {
                std::thread::sleep(POLL);
                continue;
            };
            let signalled = signals.filter(|_| ready.signal);
            if ready.stepd_gone || ready.daemon_gone || signalled.is_some_and(ends_step) {
                return;
            }
            self.forget(&ready.exited);
            for (listener, joining) in listeners.iter().zip(&ready.joining) {
                if *joining {
                    self.take_tasks(listener, reply);
                }
            }
        }
    }

    /// Waits at most `wait` (`None`: until something happens) for a task
    /// to join or exit, a signal, or the end of slurmstepd or the daemon;
    /// `None` where poll failed.
    fn poll(
        &self,
        listeners: &[UnixListener],
        [signals, daemon]: [Option<&OwnedFd>; 2],
        wait: Option<Duration>,
    ) -> Option<Ready> {
        let watched = [signals, self.stepd_fd.as_ref(), daemon];
        let mut fds: Vec<PollFd> = listeners
            .iter()
            .map(|l| PollFd::new(l, PollFlags::IN))
            .collect();
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
        let joining: Vec<bool> = ready.by_ref().take(listeners.len()).collect();
        let mut fired = [false; 3];
        for (slot, fd) in watched.iter().enumerate() {
            if fd.is_some() {
                if let Some(f) = fired.get_mut(slot) {
                    *f = ready.next().unwrap_or(false);
                }
            }
        }
        let [signal, stepd_gone, daemon_gone] = fired;
        Some(Ready {
            joining,
            signal,
            stepd_gone,
            daemon_gone,
            exited: ready.collect(),
        })
    }

    /// Forgets the tasks whose end `exited` marks, in `live`'s order.
    fn forget(&mut self, exited: &[bool]) {
        let before = self.live.len();
        let mut gone = exited.iter();
        self.live.retain(|_| !gone.next().copied().unwrap_or(false));
        if self.live.len() < before {
            self.tally.exited(Instant::now());
        }
    }

    /// Answers every client waiting at `listener`: a task that joins gets
    /// `reply`, and each one of the job's user under this keeper's
    /// slurmstepd is watched from then on; a task epilog is told to go on,
    /// or kept for the end where its task was the node's last.
    fn take_tasks(&mut self, listener: &UnixListener, reply: &Answer) {
        while let Ok((stream, _)) = listener.accept() {
            // Who it is first: another user's process is answered at once,
            // and never waited for.
            let pid = match self.task_of_step(&stream) {
                Ok(pid) => pid,
                // The job's user's, where the keeper cannot see: a task
                // epilog's word is taken (it tells no pid, and the keeper
                // looks at its own tasks); a task is refused, and known
                // all the same, so that the keeper ends with the last task
                // it serves, not a grace after it.
                Err(Refused::Unseen) => {
                    match request_of(&stream) {
                        Some(Request::Ended) => self.task_ended(stream),
                        _ => {
                            self.tally.apart();
                            say(stream, &Answer::No(Refused::Unseen.to_string()).line());
                        }
                    }
                    continue;
                }
                Err(why) => {
                    say(stream, &Answer::No(why.to_string()).line());
                    continue;
                }
            };
            match request_of(&stream) {
                Some(Request::Join) => {
                    if let Some((task, fd)) = task_of(pid) {
                        if !self.live.iter().any(|(p, _)| *p == task) {
                            self.live.push((task, fd));
                            self.tally.joined();
                        }
                    }
                    say(stream, &reply.line());
                }
                Some(Request::Ended) => self.task_ended(stream),
                None => say(stream, &Answer::No("an unknown request".into()).line()),
            }
        }
    }

    /// A task epilog says its task ended: where no task of the node lives
    /// any more, the keeper ends now and answers it then.
    fn task_ended(&mut self, stream: UnixStream) {
        let exited = self.exited_now();
        self.forget(&exited);
        match self.tally.done(self.live.len(), Instant::now()) {
            true => self.waiting.push(stream),
            false => say(stream, Ended::Later.line()),
        }
    }

    /// Which live tasks have exited, as of now.
    fn exited_now(&self) -> Vec<bool> {
        let mut fds: Vec<PollFd> = self
            .live
            .iter()
            .map(|(_, fd)| PollFd::new(fd, PollFlags::IN))
            .collect();
        let now = Timespec::try_from(Duration::ZERO).ok();
        if poll(&mut fds, now.as_ref()).is_err() {
            return Vec::new();
        }
        fds.iter().map(|f| !f.revents().is_empty()).collect()
    }

    /// The daemon and its directory are gone: tells every task epilog that
    /// waits, or asks now, that it is done; a task that joins now is told
    /// the step has ended.
    fn finish(mut self, listeners: &[UnixListener]) {
        for stream in self.waiting.drain(..) {
            say(stream, Ended::Done.line());
        }
        for listener in listeners {
            while let Ok((stream, _)) = listener.accept() {
                match request_of(&stream) {
                    Some(Request::Ended) => say(stream, Ended::Done.line()),
                    _ => say(stream, &Answer::No("the step has ended".into()).line()),
                }
            }
        }
    }

    /// The peer's pid, where it is the job's user's and a process of this
    /// step: in the step's session (slurmd makes one per step, every task
    /// and task prolog is in it, the keeper too, and no process can enter
    /// a session it is not in; [`session_of`] needs no `/proc`, which
    /// `hidepid` hides), or under this step's slurmstepd. Where neither
    /// can be told, it is refused; so is a process outside the keeper's
    /// pid namespace ([`Refused::Unseen`]).
    fn task_of_step(&self, stream: &UnixStream) -> Result<u32, Refused> {
        let peer = peer_of(stream).map_err(|e| {
            Refused::Other(Failure::os(
                "cannot tell who connected to the MPS keeper",
                e,
            ))
        })?;
        if peer.uid != self.uid {
            return Err(Refused::Other(Failure::new("not the job's user")));
        }
        let Some(pid) = peer.pid else {
            return Err(Refused::Unseen);
        };
        let under_stepd = self.stepd.is_some_and(|stepd| descends_from(pid, stepd));
        match in_this_session(pid) || under_stepd {
            true => Ok(pid),
            false => Err(Refused::Other(Failure::new(format!(
                "pid {pid} is not a process of this step"
            )))),
        }
    }
}

/// Why the keeper answers a client `no` before it reads its request.
enum Refused {
    /// The job's user's process outside the keeper's pid namespace (a
    /// task in a container of its own, where another task's started the
    /// keeper): its pid reads 0 here, so its end cannot be watched, and the
    /// keeper ends with its own namespace, whichever task's that is.
    Unseen,
    /// Anything else: another user's process, or not one of the step's.
    Other(Failure),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Unseen => write!(
                f,
                "this task is in a pid namespace that the step's MPS keeper, started by \
                 another task, cannot see into (a container per task?): the keeper cannot \
                 tell when this task ends, and ends with that task's namespace"
            ),
            Refused::Other(why) => write!(f, "{why}"),
        }
    }
}

/// `pid` is in this process's session ([`session_of`], getsid(2), which
/// needs no `/proc`). Inside a pid namespace that the step's session
/// began outside of (a container's), every process of the step is in
/// session 0, the keeper too: equal there as well, as far as this
/// namespace can tell (the peer is the job's user's in any case).
fn in_this_session(pid: u32) -> bool {
    let theirs = session_of(Some(pid));
    theirs.is_some() && theirs == session_of(None)
}

/// The task a process that joins stands for, and a pidfd of it: the
/// process itself where it is its step's task (`SLURM_TASK_PID` in its
/// environment names it), or no task is named; its parent where that is
/// the task (a task prolog's, which exits before the application starts;
/// a shell's that srun started). The parent's pidfd is taken while the
/// joining process, its child, still names it as its parent, so it is
/// that task's and no later process's.
fn task_of(peer: u32) -> Option<(u32, OwnedFd)> {
    let named = environ(peer).and_then(|env| {
        env.into_iter()
            .find(|(name, _)| name == TASK_PID)
            .and_then(|(_, value)| value.trim().parse::<u32>().ok())
    });
    match named {
        Some(task) if task != peer && parent_of(peer) == Some(task) => {
            let fd = pidfd(task)?;
            (parent_of(peer) == Some(task)).then_some((task, fd))
        }
        _ => Some((peer, pidfd(peer)?)),
    }
}

/// How long a client may take to say what it asks.
const REQUEST_WAIT: Duration = Duration::from_secs(1);

/// The request a client writes first, within [`REQUEST_WAIT`].
fn request_of(stream: &UnixStream) -> Option<Request> {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(REQUEST_WAIT));
    let mut line = String::new();
    BufReader::new(stream.take(MAX_REQUEST))
        .read_line(&mut line)
        .ok()?;
    Request::parse(line.trim_end())
}

/// Writes `line` to a client, waiting at most a second for it to read.
fn say(mut stream: UnixStream, line: &str) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let _ = stream.write_all(line.as_bytes());
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Child, Command};

    /// `sh -c SCRIPT`, its output unread.
    fn sh(script: &str) -> Child {
        Command::new("sh")
            .args(["-c", script])
            .stdout(Stdio::null())
            .spawn()
            .unwrap()
    }

    /// Waits up to 5 s for `pid`'s one child.
    fn only_child(pid: u32) -> u32 {
        for _ in 0..500 {
            if let [child] = children_of(pid)[..] {
                return child;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("no child of {pid}")
    }

    /// Waits up to 5 s for `pid` to run sleep (its environment is then
    /// sleep's).
    fn sleeping(pid: u32) -> u32 {
        for _ in 0..500 {
            if desi_gpu_map_host::process::comm(pid).as_deref() == Some("sleep") {
                return pid;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("{pid} never ran sleep")
    }

    #[test]
    fn a_joiner_stands_for_the_task_its_environment_names() {
        // srun started it: SLURM_TASK_PID is its own pid.
        let mut task = sh("exec env SLURM_TASK_PID=$$ sleep 5");
        // A task prolog: its parent is the task it names; the parent's end
        // is what the keeper waits for.
        let mut parent = sh("export SLURM_TASK_PID=$$; sleep 5 & wait");
        // A process further down, or one that names another pid: itself.
        let mut other = sh("exec env SLURM_TASK_PID=1234567 sleep 5");
        let prolog = sleeping(only_child(parent.id()));
        assert_eq!(task_of(sleeping(task.id())).map(|t| t.0), Some(task.id()));
        assert_eq!(task_of(prolog).map(|t| t.0), Some(parent.id()));
        assert_eq!(task_of(sleeping(other.id())).map(|t| t.0), Some(other.id()));
        // The parent's child first: the parent reaps it, and then ends.
        let prolog = rustix::process::Pid::from_raw(i32::try_from(prolog).unwrap()).unwrap();
        rustix::process::kill_process(prolog, Signal::KILL).unwrap();
        for child in [&mut task, &mut parent, &mut other] {
            let _ = child.kill();
            child.wait().unwrap();
        }
    }

    #[test]
    fn only_a_process_of_the_keepers_session_is_of_its_step() {
        let mut same = sh("exec sleep 5");
        // setsid(1) in a process that leads no group: a session of its own,
        // as a process outside the step has.
        let mut outside = Command::new("setsid").args(["sleep", "5"]).spawn().unwrap();
        assert!(in_this_session(sleeping(same.id())));
        assert!(!in_this_session(sleeping(outside.id())));
        assert!(!in_this_session(u32::MAX));
        for child in [&mut same, &mut outside] {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }
}
