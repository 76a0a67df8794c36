//! Work in a child process with a deadline: work that may hang (asking
//! NVML, whose `nvmlInit` blocks when a GPU fell off the bus) runs in a
//! forked child, and is given up on at the deadline, so that neither
//! slurmstepd (the plugin's `user_init`) nor a task (`exec`) nor a user
//! (`show`) is held past it. NVML is then never loaded into the process
//! that asks: not into slurmstepd, and not into the process that `exec`
//! turns into the application.
//!
//! The child runs the work, writes its answer to a pipe in the wire's
//! encoding ([`desi_gpu_map_core::wire`]: lines, or an error with its
//! kind) and `_exit`s (`sys::fork_child`, in the machine's
//! edge). The parent reads the pipe with `poll` (and
//! [`crate::child::drain`]) until the child closes it or the deadline
//! passes, then SIGKILLs the child if needed and reaps it without ever
//! blocking.
//!
//! Why `fork` in slurmstepd, which is multithreaded, is acceptable here: the
//! child holds only the forking thread, and any lock another thread held at
//! the fork stays held for ever in the child. glibc's `fork` (posix/fork.c
//! since 2.34, nptl's fork.c before) takes the malloc arena locks before the
//! fork and releases them in the child, resets the stdio locks, and
//! re-initialises the dynamic loader's lock (`dl_load_lock`). The child's
//! work needs only those: `malloc`, `dlopen` of libnvidia-ml and the NVML
//! calls, whose library is not loaded in slurmstepd itself (so none of its
//! state was copied). The child touches no Slurm function and does not log
//! (Slurm's log lock might be held); its stdin, stdout and stderr are
//! /dev/null.
//!
//! Why it is fine in the command: `exec` and `show` ask NVML while the
//! command has its main thread only. The command starts no thread (no
//! `std::thread`, and none of its libraries does; NVML, which may, is
//! loaded only in the child), and exec's MPS keeper, a process of its own,
//! is joined only after the plan, so the fork copies one thread and every
//! lock is free in the child. What the child inherits of the command
//! (buffered standard output, say) is never flushed: it `_exit`s.
//!
//! Reaping: slurmstepd reaps its tasks with `wait3(-1)` in
//! `_wait_for_any_task` (src/slurmd/slurmstepd/mgr.c, read for 22.05 and
//! later). It is called from `_wait_for_all_tasks`, on the thread that ran
//! `user_init`, after `_fork_all_tasks` (which calls `spank_user` before it
//! forks the tasks) has returned; no other wait for any child shows there.
//! So in the normal case the child is reaped here, by pid, before slurmstepd
//! waits for anything: it can neither be stolen nor confuse slurmstepd. Were
//! it reaped elsewhere all the same, the answer still comes from the pipe
//! (`waitpid` then fails with ECHILD, taken as gone). A pid that `wait3`
//! returns but that is no task's (`job_task_info_by_pid` finds none) is
//! ignored there, so a child left behind (below) is harmless too. In the
//! command nobody else waits: the child is reaped here.
//!
//! A child stuck in uninterruptible sleep (a GPU that fell off the bus)
//! does not die at SIGKILL until the kernel call returns. It is then left
//! behind: the signal is pending, and it dies as soon as the call returns,
//! to be reaped by slurmstepd's `wait3` (and ignored), or by init once
//! slurmstepd has exited (after `exec`: by the application, which inherits
//! it as a child, or by init). Because it closed every descriptor it
//! inherited first, it holds none of the step's pipes or sockets open (nor
//! a task's output pipe), so the step's I/O ends normally.

use crate::child::{drain, Pipe, REAP_GRACE};
use crate::sys::fork_child;
use desi_gpu_map_core::wire::{self, broken, MAX_ANSWER};
use desi_gpu_map_core::Error;
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::pipe::{pipe_with, PipeFlags};
use rustix::process::{kill_process, waitpid, Pid, Signal, WaitOptions, WaitStatus};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

/// How often a finished or killed child is looked at until it is reaped.
const REAP_POLL: Duration = Duration::from_millis(2);

/// Runs `work` in a child process and returns its lines, or why there are
/// none, within `timeout` (plus at most [`REAP_GRACE`] to reap a killed
/// child): past it, [`Error::NvmlTimedOut`]; the work's own error keeps
/// its kind ([`desi_gpu_map_core::error::NvmlFailure`]) across, and its
/// message as one line. `work` runs after a `fork`: it must use no
/// descriptor opened before (the child closed them all) and, where the
/// caller has other threads, only what the module comment allows.
pub(crate) fn lines_in_child(
    timeout: Duration,
    work: impl FnOnce() -> Result<Vec<String>, Error>,
) -> Result<Vec<String>, Error> {
    let deadline = Instant::now() + timeout;
    let (reader, writer) =
        pipe_with(PipeFlags::CLOEXEC).map_err(|e| broken(format!("cannot make a pipe: {e}")))?;
    let pid = fork_child(writer.as_fd(), |out| answer(out, work))
        .map_err(|e| broken(format!("cannot fork: {e}")))?;
    // The child has its own copy: without closing ours, no end of file.
    drop(writer);
    let read = read_answer(File::from(reader), deadline);
    let reaped = end_child(pid, matches!(read, Heard::Ended(_)), deadline);
    match read {
        Heard::Ended(bytes) if bytes.is_empty() => Err(wire::no_answer(&describe(reaped))),
        Heard::Ended(bytes) => wire::decode(&bytes),
        Heard::TimedOut => Err(Error::NvmlTimedOut {
            seconds: timeout.as_secs(),
        }),
        Heard::TooLong => Err(wire::too_long()),
        Heard::Broken(e) => Err(broken(format!(
            "cannot read the discovery process's answer: {e}"
        ))),
    }
}

// ------------------------------------------------------------ the child

/// Runs in the child: the work, and its answer on `out`; the exit status.
fn answer(mut out: File, work: impl FnOnce() -> Result<Vec<String>, Error>) -> i32 {
    let answer = catch_unwind(AssertUnwindSafe(work))
        .unwrap_or_else(|_| Err(broken("the discovery process panicked".to_string())));
    match out.write_all(&wire::encode(&answer)) {
        Ok(()) => 0,
        Err(_) => 1,
    }
}

// ------------------------------------------------------------ the parent

/// What the parent heard from the child, by the deadline.
enum Heard {
    /// The child closed the pipe (it exited): everything it wrote.
    Ended(Vec<u8>),
    TimedOut,
    TooLong,
    Broken(io::Error),
}

/// Reads until end of file or the deadline, whichever comes first.
fn read_answer(pipe: File, deadline: Instant) -> Heard {
    let mut answer = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Heard::TimedOut;
        }
        let mut fds = [PollFd::new(&pipe, PollFlags::IN)];
        match poll(&mut fds, Some(&timespec(left))) {
            Ok(0) | Err(Errno::INTR) => continue,
            Ok(_) => {}
            Err(e) => return Heard::Broken(e.into()),
        }
        match drain(&pipe, &mut answer, MAX_ANSWER + 1) {
            Ok(Pipe::Ended) => return Heard::Ended(answer),
            Ok(Pipe::Open) if answer.len() > MAX_ANSWER => return Heard::TooLong,
            Ok(Pipe::Open) => {}
            Err(e) => return Heard::Broken(e),
        }
    }
}

fn timespec(d: Duration) -> Timespec {
    Timespec {
        tv_sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: i64::from(d.subsec_nanos()),
    }
}

/// What became of the child.
#[derive(Clone, Copy)]
enum Reaped {
    Status(WaitStatus),
    /// Already reaped by someone else (or SIGCHLD is ignored).
    Gone,
    /// Still there after SIGKILL: left behind (see the module comment).
    LeftBehind,
}

/// Reaps the child: one that ended is given until the deadline to exit, then
/// any child still there is killed and given `REAP_GRACE`.
fn end_child(pid: Pid, ended: bool, deadline: Instant) -> Reaped {
    if ended {
        if let Some(done) = reap(pid, deadline.max(Instant::now() + REAP_GRACE)) {
            return done;
        }
    }
    // `pid` is our unreaped child, so the pid cannot have been reused by
    // another process; one that exited meanwhile makes this fail harmlessly.
    let _ = kill_process(pid, Signal::KILL);
    reap(pid, Instant::now() + REAP_GRACE).unwrap_or_else(|| {
        log::warn!(
            "the NVML discovery process {} is stuck in the kernel and ignores SIGKILL; \
             it is left to end on its own",
            pid.as_raw_pid()
        );
        Reaped::LeftBehind
    })
}

/// Polls `waitpid(pid, WNOHANG)` until `until`; never blocks.
fn reap(pid: Pid, until: Instant) -> Option<Reaped> {
    loop {
        match waitpid(Some(pid), WaitOptions::NOHANG) {
            Ok(Some((_, status))) => return Some(Reaped::Status(status)),
            Ok(None) | Err(Errno::INTR) => {}
            Err(_) => return Some(Reaped::Gone),
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(REAP_POLL);
    }
}

/// How the child ended, for an empty answer.
fn describe(reaped: Reaped) -> String {
    match reaped {
        Reaped::Status(s) => match (s.exit_status(), s.terminating_signal()) {
            (Some(code), _) => format!("exit status {code}"),
            (_, Some(signal)) => format!("signal {signal}"),
            _ => format!("wait status {:#x}", s.as_raw()),
        },
        Reaped::Gone => "reaped elsewhere".to_string(),
        Reaped::LeftBehind => "still running".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use desi_gpu_map_core::error::NvmlFailure;
    use std::os::fd::AsRawFd;
    use std::path::Path;

    fn lines(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn within_10_s(
        work: impl FnOnce() -> Result<Vec<String>, Error>,
    ) -> Result<Vec<String>, Error> {
        lines_in_child(Duration::from_secs(10), work)
    }

    /// `pid`, a child of this process, was reaped: this process has no
    /// child of that pid (asked of the kernel, not of `/proc`, where
    /// another process of the machine may have the pid by now).
    fn reaped(pid: i32) -> bool {
        let pid = Pid::from_raw(pid).unwrap();
        matches!(waitpid(Some(pid), WaitOptions::NOHANG), Err(Errno::CHILD))
    }

    #[test]
    fn the_childs_lines_come_back() {
        let got = within_10_s(|| Ok(lines(&["GPU-a", "GPU-b"])));
        assert_eq!(got, Ok(lines(&["GPU-a", "GPU-b"])));
        assert_eq!(within_10_s(|| Ok(vec![])), Ok(vec![]));
    }

    /// With its kind.
    #[test]
    fn the_childs_error_comes_back_as_one_line() {
        let got = within_10_s(|| Err(broken("NVML: no\nluck".to_string())));
        assert_eq!(got, Err(broken("NVML: no luck".to_string())));
        let got = within_10_s(|| Err(Error::NvmlOff));
        let off = Error::Discovery {
            kind: NvmlFailure::Off,
            why: Error::NvmlOff.to_string(),
        };
        assert_eq!(got, Err(off));
        // Not an NVML error of its own: a child that misbehaved.
        let got = within_10_s(|| Err(Error::UnreadableArguments("x".to_string())));
        assert!(
            matches!(
                got,
                Err(Error::Discovery {
                    kind: NvmlFailure::Misbehaved,
                    ..
                })
            ),
            "{got:?}"
        );
    }

    /// And reaped: no zombie is left.
    #[test]
    fn a_child_that_hangs_is_killed_at_the_deadline() {
        // The child says its pid through a file, then hangs.
        let dir = std::env::temp_dir().join(format!("dgm-deadline-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let said = dir.join("pid");
        let path = said.clone();
        let started = Instant::now();
        let got = lines_in_child(Duration::from_millis(300), move || {
            let me = rustix::process::getpid().as_raw_pid();
            std::fs::write(&path, me.to_string()).map_err(|e| broken(e.to_string()))?;
            std::thread::sleep(Duration::from_secs(60));
            Ok(vec![])
        });
        let took = started.elapsed();
        assert_eq!(got, Err(Error::NvmlTimedOut { seconds: 0 }));
        assert!(took >= Duration::from_millis(300), "{took:?}");
        assert!(took < Duration::from_secs(3), "{took:?}");
        let pid: i32 = std::fs::read_to_string(&said).unwrap().parse().unwrap();
        assert!(reaped(pid), "child {pid} is still there (a zombie?)");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_child_that_panics_or_dies_is_an_error() {
        let got = within_10_s(|| panic!("boom"));
        assert_eq!(
            got,
            Err(broken("the discovery process panicked".to_string()))
        );
        let got = within_10_s(|| {
            let _ = kill_process(rustix::process::getpid(), Signal::KILL);
            Ok(vec![])
        });
        assert_eq!(got, Err(wire::no_answer("signal 9")));
    }

    #[test]
    fn the_child_holds_no_inherited_descriptor() {
        // Above 3, which the child reuses for its answer, and not marked
        // close-on-exec: a fork keeps those, only the child's closing ends them.
        let (keep_r, keep_w) = pipe_with(PipeFlags::empty()).unwrap();
        let high = |fd| rustix::io::fcntl_dupfd_cloexec(fd, 100).unwrap();
        let (high_r, high_w) = (high(&keep_r), high(&keep_w));
        let (r, w) = (high_r.as_raw_fd(), high_w.as_raw_fd());
        let (low_r, low_w) = (keep_r.as_raw_fd(), keep_w.as_raw_fd());
        assert!(r >= 100 && w >= 100);
        let got = within_10_s(move || {
            // 3 is the answer's pipe, whatever it was before the fork.
            let open = |fd| fd != 3 && Path::new(&format!("/proc/self/fd/{fd}")).exists();
            let stdio_is_null = [0, 1, 2].iter().all(|fd| {
                std::fs::read_link(format!("/proc/self/fd/{fd}"))
                    .is_ok_and(|p| p == Path::new("/dev/null"))
            });
            // Nothing else past stderr and the answer's pipe is open.
            let others: Vec<String> = std::fs::read_dir("/proc/self/fd")
                .map_err(|e| broken(e.to_string()))?
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|fd| fd.parse::<i32>().is_ok_and(|fd| fd > 3))
                .collect();
            Ok(vec![format!(
                "{} {} {} {} {} {}",
                open(r),
                open(w),
                open(low_r),
                open(low_w),
                stdio_is_null,
                others.len() <= 1, // read_dir's own descriptor
            )])
        });
        assert_eq!(got, Ok(lines(&["false false false false true true"])));
        drop((high_r, high_w));
    }
}
