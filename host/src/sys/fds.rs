//! Descriptors closed, or marked close-on-exec, by range: what a child
//! must not inherit (slurmstepd's, for the MPS daemon's children; the
//! task's, for exec's keeper) and what a forked NVML child must not hold.

use std::mem::MaybeUninit;
use std::ops::RangeInclusive;
use std::os::fd::AsRawFd;

/// What becomes of each descriptor.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Close {
    /// Closed at once.
    Now,
    /// Closed when the process execs (`FD_CLOEXEC`).
    OnExec,
}

/// Marks the descriptors in `fds` close-on-exec. Callable between fork
/// and exec (see `close`).
pub fn close_on_exec(fds: RangeInclusive<u32>) {
    // SAFETY: marking a descriptor close-on-exec closes nothing that this
    // process uses.
    unsafe { close(fds, Close::OnExec) }
}

/// Closes the descriptors in `fds` at once.
///
/// # Safety
/// Nothing in this process uses a descriptor in `fds` again (a forked
/// child that uses none of them).
pub(super) unsafe fn close_now(fds: RangeInclusive<u32>) {
    // SAFETY: the caller's contract above.
    unsafe { close(fds, Close::Now) }
}

/// Closes the descriptors in `fds`, now or at exec: close_range(2) (Linux
/// 5.9, 5.11 for the flag), called as a system call so that glibc 2.34 is
/// not needed; else each one that `/proc/self/fd` lists, read with
/// getdents64 into a buffer on the stack. Only system calls, and nothing
/// allocated: callable between fork and exec.
///
/// # Safety
/// With [`Close::Now`], nothing in this process uses a descriptor in
/// `fds` again.
unsafe fn close(fds: RangeInclusive<u32>, when: Close) {
    let flags = match when {
        Close::Now => 0,
        Close::OnExec => libc::CLOSE_RANGE_CLOEXEC,
    };
    let (first, last) = (*fds.start(), *fds.end());
    // SAFETY: close_range takes two numbers and flags, no pointer, and
    // changes only this process's descriptor table (the caller's contract
    // says which descriptors may be closed).
    if unsafe { libc::syscall(libc::SYS_close_range, first, last, flags) } == 0 {
        return;
    }
    // SAFETY: the same contract.
    unsafe { each_listed(&fds, when) };
}

/// [`close`]'s fallback: each descriptor in `fds` that `/proc/self/fd`
/// lists, but the listing's own.
///
/// # Safety
/// As [`close`].
unsafe fn each_listed(fds: &RangeInclusive<u32>, when: Close) {
    let Ok(dir) = rustix::fs::open(
        c"/proc/self/fd",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    ) else {
        return;
    };
    let own = dir.as_raw_fd();
    let mut buf = [MaybeUninit::<u8>::uninit(); 2048];
    let mut entries = rustix::fs::RawDir::new(&dir, &mut buf);
    while let Some(Ok(entry)) = entries.next() {
        let Some(fd) = number(entry.file_name().to_bytes()) else {
            continue;
        };
        if fd == own || !u32::try_from(fd).is_ok_and(|n| fds.contains(&n)) {
            continue;
        }
        // SAFETY: close and fcntl take a number; a stale one fails with
        // EBADF and changes nothing (the caller's contract says which may
        // be closed).
        unsafe {
            match when {
                Close::Now => libc::close(fd),
                Close::OnExec => libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC),
            };
        }
    }
}

/// A descriptor's number from its name in `/proc/self/fd`, without
/// allocating.
fn number(name: &[u8]) -> Option<i32> {
    if name.is_empty() {
        return None;
    }
    name.iter().try_fold(0i32, |n, &b| {
        let digit = b.checked_sub(b'0').filter(|d| *d <= 9)?;
        n.checked_mul(10)?.checked_add(i32::from(digit))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::io::{fcntl_getfd, FdFlags};
    use std::os::fd::{AsFd, OwnedFd};

    /// A descriptor without `FD_CLOEXEC`, as one a task inherited.
    fn inheritable() -> OwnedFd {
        let fd: OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
        rustix::io::fcntl_setfd(&fd, FdFlags::empty()).unwrap();
        fd
    }

    fn raw(fd: &OwnedFd) -> u32 {
        u32::try_from(fd.as_raw_fd()).unwrap()
    }

    #[test]
    fn names_in_proc_are_numbers() {
        assert_eq!(number(b"17"), Some(17));
        assert_eq!(number(b"."), None);
        assert_eq!(number(b""), None);
        assert_eq!(number(b"99999999999"), None);
    }

    #[test]
    fn the_fallback_marks_only_the_range_close_on_exec() {
        let (inside, outside) = (inheritable(), inheritable());
        let at = raw(&inside);
        // SAFETY: only marks them.
        unsafe { each_listed(&(at..=at), Close::OnExec) };
        assert_eq!(fcntl_getfd(inside.as_fd()).unwrap(), FdFlags::CLOEXEC);
        assert_eq!(fcntl_getfd(outside.as_fd()).unwrap(), FdFlags::empty());
    }

    #[test]
    fn close_on_exec_marks_the_range() {
        let fd = inheritable();
        close_on_exec(raw(&fd)..=raw(&fd));
        assert_eq!(fcntl_getfd(fd.as_fd()).unwrap(), FdFlags::CLOEXEC);
    }
}
