//! Forking a child that keeps one descriptor, for [`crate::deadline`].

use super::fds::close_now;
use rustix::process::Pid;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, RawFd};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The exit status of a child whose `child` closure panicked outside any
/// catch of its own: it must never unwind into the parent's copied stack.
const PANICKED: i32 = 101;

/// Forks. In the child: stdin, stdout and stderr become /dev/null, every
/// other descriptor but `keep` is closed, `child` runs with `keep` as a
/// [`File`], and the child `_exit`s with what `child` returned: it never
/// returns there, so no destructor and no atexit handler of the parent's
/// state runs in it. In the parent: the child's pid.
///
/// The contract (the caller's): `child` uses no descriptor from before the
/// fork but the one it is handed (all others are closed), and in a
/// multithreaded parent it does only what is safe after `fork` there
/// ([`crate::deadline`]'s module comment argues what that is for NVML).
pub(crate) fn fork_child(keep: BorrowedFd<'_>, child: impl FnOnce(File) -> i32) -> io::Result<Pid> {
    // SAFETY: fork has no memory-safety preconditions of its own; what the
    // child may do after it is the contract above, and the child's branch
    // below never returns (it ends in `_exit`).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        let out = detach(keep.as_raw_fd());
        let code = catch_unwind(AssertUnwindSafe(|| child(out))).unwrap_or(PANICKED);
        // SAFETY: _exit takes a number and ends the process at once.
        unsafe { libc::_exit(code) }
    }
    Pid::from_raw(pid).ok_or_else(|| io::Error::other("fork returned pid 0 to the parent"))
}

/// In the forked child only: points stdin, stdout and stderr at /dev/null
/// and closes every other descriptor but `out`, so that a child stuck in
/// the kernel holds none of its parent's pipes or sockets open. Returns
/// `out`, moved to 3.
fn detach(out: RawFd) -> File {
    // SAFETY: open gets a NUL-terminated literal; dup2 acts only on
    // descriptor numbers. Closing descriptors that something else may own
    // is sound here: this process is a forked child that only runs the
    // `child` of `fork_child`, which by its contract uses none of them.
    let out = unsafe {
        // Moved to 3, `out` leaves one range to close: 4 and up.
        let out = if libc::dup2(out, 3) == 3 { 3 } else { out };
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for fd in (0..3).filter(|&fd| fd != out) {
                libc::dup2(null, fd);
            }
        }
        out
    };
    let kept = u32::try_from(out).unwrap_or(3);
    // SAFETY: as above: this forked child uses none of them.
    unsafe {
        if kept > 3 {
            close_now(3..=kept - 1);
        }
        close_now(kept.saturating_add(1)..=u32::MAX);
    }
    // SAFETY: `out` is open (dup2 made it, or it is the one kept), and
    // nothing else in this process uses it: the caller's copy is never
    // used again in the child, which `_exit`s.
    unsafe { File::from_raw_fd(out) }
}
