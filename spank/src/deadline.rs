//! Runs work that may hang (NVML discovery) in a forked child, and gives up
//! on it at a deadline, so that slurmstepd is never held past it.
//!
//! The child runs the work, writes its answer to a pipe in the wire's
//! encoding ([`desi_gpu_map_core::wire`], which `desi-gpu-map nvml-query`
//! speaks too) and `_exit`s. The parent reads the pipe with `poll` (and
//! [`desi_gpu_map_host::child::drain`]) until the child closes it or the
//! deadline passes, then SIGKILLs the child if needed and reaps it without
//! ever blocking.
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
//! ignored there, so a child left behind (below) is harmless too.
//!
//! A child stuck in uninterruptible sleep (a GPU that fell off the bus)
//! does not die at SIGKILL until the kernel call returns. It is then left
//! behind: the signal is pending, and it dies as soon as the call returns,
//! to be reaped by slurmstepd's `wait3` (and ignored), or by init once
//! slurmstepd has exited. Because it closed every descriptor it inherited
//! first, it holds none of the step's pipes or sockets open, so the step's
//! I/O ends normally.

use desi_gpu_map_core::wire::{self, broken, MAX_ANSWER};
use desi_gpu_map_core::Error;
use desi_gpu_map_host::child::{drain, Pipe, REAP_GRACE};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

/// Runs `work` in a child process and returns its lines, or why there are
/// none, within `timeout` (plus at most `REAP_GRACE` to reap a killed
/// child): past it, [`Error::NvmlTimedOut`]; the work's own error keeps
/// its kind ([`desi_gpu_map_core::error::NvmlFailure`]) across.
pub fn lines_within(
    timeout: Duration,
    work: impl FnOnce() -> Result<Vec<String>, Error>,
) -> Result<Vec<String>, Error> {
    let deadline = Instant::now() + timeout;
    let (reader, writer) = pipe().map_err(|e| broken(format!("cannot make a pipe: {e}")))?;
    // SAFETY: fork has no memory-safety preconditions of its own; what the
    // child may do after it is argued in the module comment, and `child`
    // never returns (it ends in `_exit`).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(broken(format!(
            "cannot fork: {}",
            io::Error::last_os_error()
        )));
    }
    if pid == 0 {
        child(writer.as_raw_fd(), work);
    }
    // The child has its own copy: without closing ours, no end of file.
    drop(writer);
    let read = read_answer(File::from(reader), deadline);
    let status = end_child(pid, matches!(read, Answer::Ended(_)), deadline);
    match read {
        Answer::Ended(bytes) if bytes.is_empty() => Err(wire::no_answer(&describe(status))),
        Answer::Ended(bytes) => wire::decode(&bytes),
        Answer::TimedOut => Err(Error::NvmlTimedOut {
            seconds: timeout.as_secs(),
        }),
        Answer::TooLong => Err(wire::too_long()),
        Answer::Broken(e) => Err(broken(format!(
            "cannot read the discovery process's answer: {e}"
        ))),
    }
}

// ------------------------------------------------------------ the child

/// Runs in the child: the work, its answer, `_exit`. Never returns, so no
/// destructor of slurmstepd's state and no atexit handler runs here.
fn child(out: RawFd, work: impl FnOnce() -> Result<Vec<String>, Error>) -> ! {
    let out = detach(out);
    let answer = catch_unwind(AssertUnwindSafe(work))
        .unwrap_or_else(|_| Err(broken("the discovery process panicked".to_string())));
    let answer = wire::encode(&answer);
    let code = if write_all(out, &answer) { 0 } else { 1 };
    // SAFETY: _exit ends the process at once; it takes no pointer.
    unsafe { libc::_exit(code) }
}

/// Points stdin, stdout and stderr at /dev/null and closes every other
/// descriptor but `out`, so that a child stuck in the kernel holds none of
/// slurmstepd's pipes or sockets open. Returns `out`'s new number.
fn detach(out: RawFd) -> RawFd {
    // SAFETY: open gets a NUL-terminated literal; dup2 and close act only on
    // descriptor numbers, and this process owns nothing else that uses them.
    unsafe {
        // Moved to 3, `out` leaves one range to close: 4 and up.
        let out = if libc::dup2(out, 3) == 3 { 3 } else { out };
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for fd in (0..3).filter(|&fd| fd != out) {
                libc::dup2(null, fd);
            }
        }
        if out > 3 {
            close_range(3, out - 1);
        }
        close_range(out + 1, RawFd::MAX);
        out
    }
}

/// Closes descriptors `first..=last`: with close_range(2)
/// ([`crate::fds::close_range`]), else one by one as /proc lists them.
fn close_range(first: RawFd, last: RawFd) {
    let (Ok(lo), Ok(hi)) = (u32::try_from(first), u32::try_from(last)) else {
        return;
    };
    if crate::fds::close_range(lo, hi, 0) {
        return;
    }
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    // Listed in full first: the directory's own descriptor closes with it.
    let open: Vec<RawFd> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    for fd in open.into_iter().filter(|fd| (first..=last).contains(fd)) {
        // SAFETY: close takes a number; a stale one fails with EBADF.
        unsafe { libc::close(fd) };
    }
}

fn write_all(fd: RawFd, mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        // SAFETY: the pointer and length describe `bytes`, which is live.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        match usize::try_from(n) {
            Ok(n) if n > 0 => bytes = bytes.get(n..).unwrap_or_default(),
            _ if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
            _ => return false,
        }
    }
    true
}

// ------------------------------------------------------------ the parent

enum Answer {
    /// The child closed the pipe (it exited): everything it wrote.
    Ended(Vec<u8>),
    TimedOut,
    TooLong,
    Broken(io::Error),
}

/// Reads until end of file or the deadline, whichever comes first.
fn read_answer(pipe: File, deadline: Instant) -> Answer {
    let mut answer = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Answer::TimedOut;
        }
        // Rounded up, so that a last fraction of a millisecond is waited too.
        let ms = i32::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
        let mut poll = libc::pollfd {
            fd: pipe.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, and the count says one.
        let ready = unsafe { libc::poll(&mut poll, 1, ms) };
        if ready < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Answer::Broken(e);
        }
        if ready == 0 {
            continue;
        }
        match drain(&pipe, &mut answer, MAX_ANSWER + 1) {
            Ok(Pipe::Ended) => return Answer::Ended(answer),
            Ok(Pipe::Open) if answer.len() > MAX_ANSWER => return Answer::TooLong,
            Ok(Pipe::Open) => {}
            Err(e) => return Answer::Broken(e),
        }
    }
}

/// What became of the child.
#[derive(Clone, Copy)]
enum Reaped {
    Status(libc::c_int),
    /// Already reaped by someone else (or SIGCHLD is ignored).
    Gone,
    /// Still there after SIGKILL: left to slurmstepd (see the module comment).
    LeftBehind,
}

/// Reaps the child: one that ended is given until the deadline to exit, then
/// any child still there is killed and given `REAP_GRACE`.
fn end_child(pid: libc::pid_t, ended: bool, deadline: Instant) -> Reaped {
    if ended {
        if let Some(done) = reap(pid, deadline.max(Instant::now() + REAP_GRACE)) {
            return done;
        }
    }
    // SAFETY: kill takes numbers; `pid` is our unreaped child, so the pid
    // cannot have been reused by another process.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    reap(pid, Instant::now() + REAP_GRACE).unwrap_or_else(|| {
        log::warn!(
            "the NVML discovery process {pid} is stuck in the kernel and ignores SIGKILL; \
             it is left to end on its own"
        );
        Reaped::LeftBehind
    })
}

/// Polls `waitpid(pid, WNOHANG)` until `until`; never blocks.
fn reap(pid: libc::pid_t, until: Instant) -> Option<Reaped> {
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes one int through a pointer to a live one.
        let got = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if got == pid {
            return Some(Reaped::Status(status));
        }
        if got < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return Some(Reaped::Gone);
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn describe(reaped: Reaped) -> String {
    match reaped {
        Reaped::Status(s) if libc::WIFEXITED(s) => format!("exit status {}", libc::WEXITSTATUS(s)),
        Reaped::Status(s) if libc::WIFSIGNALED(s) => format!("signal {}", libc::WTERMSIG(s)),
        Reaped::Status(s) => format!("wait status {s:#x}"),
        Reaped::Gone => "reaped elsewhere".to_string(),
        Reaped::LeftBehind => "still running".to_string(),
    }
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds: [RawFd; 2] = [-1; 2];
    // SAFETY: pipe2 writes two descriptors into an array of two.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded: both are open and owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use desi_gpu_map_core::error::NvmlFailure;

    fn lines(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_childs_lines_come_back() {
        let got = lines_within(Duration::from_secs(10), || Ok(lines(&["GPU-a", "GPU-b"])));
        assert_eq!(got, Ok(lines(&["GPU-a", "GPU-b"])));
        assert_eq!(
            lines_within(Duration::from_secs(10), || Ok(vec![])),
            Ok(vec![])
        );
    }

    #[test]
    fn the_childs_error_comes_back_as_one_line() {
        let got = lines_within(Duration::from_secs(10), || {
            Err(broken("NVML: no\nluck".to_string()))
        });
        assert_eq!(got, Err(broken("NVML: no luck".to_string())));
        let got = lines_within(Duration::from_secs(10), || Err(Error::NvmlOff));
        let off = Error::Discovery {
            kind: NvmlFailure::Off,
            why: Error::NvmlOff.to_string(),
        };
        assert_eq!(got, Err(off));
    }

    #[test]
    fn a_child_that_hangs_is_killed_at_the_deadline() {
        let started = Instant::now();
        let got = lines_within(Duration::from_millis(300), || {
            std::thread::sleep(Duration::from_secs(60));
            Ok(vec![])
        });
        let took = started.elapsed();
        assert_eq!(got, Err(Error::NvmlTimedOut { seconds: 0 }));
        assert!(took >= Duration::from_millis(300), "{took:?}");
        assert!(took < Duration::from_secs(3), "{took:?}");
    }

    #[test]
    fn a_child_that_panics_or_dies_is_an_error() {
        let got = lines_within(Duration::from_secs(10), || panic!("boom"));
        assert_eq!(
            got,
            Err(broken("the discovery process panicked".to_string()))
        );
        // SAFETY: ends the test's child only.
        let got = lines_within(Duration::from_secs(10), || unsafe { libc::_exit(7) });
        assert_eq!(got, Err(wire::no_answer("exit status 7")));
    }

    #[test]
    fn the_child_holds_no_inherited_descriptor() {
        // Above 3, which the child reuses for its answer.
        let (keep_r, keep_w) = pipe().unwrap();
        // SAFETY: fcntl on a descriptor this test owns; the copies are
        // owned by the OwnedFds below.
        let high = |fd: &OwnedFd| unsafe {
            OwnedFd::from_raw_fd(libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 100))
        };
        let (high_r, high_w) = (high(&keep_r), high(&keep_w));
        let (r, w) = (high_r.as_raw_fd(), high_w.as_raw_fd());
        assert!(r >= 100 && w >= 100);
        let got = lines_within(Duration::from_secs(10), move || {
            // SAFETY: fcntl on numbers; F_GETFD fails on a closed one.
            let open = |fd| unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0;
            let stdio_is_null = std::fs::read_link("/proc/self/fd/1")
                .is_ok_and(|p| p == std::path::Path::new("/dev/null"));
            Ok(vec![format!("{} {} {}", open(r), open(w), stdio_is_null)])
        });
        assert_eq!(got, Ok(lines(&["false false true"])));
    }
}
