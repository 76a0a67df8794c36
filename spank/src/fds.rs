//! Descriptors a child must not inherit from slurmstepd: the close_range(2)
//! call that the MPS daemon's children (mps.rs) make before falling back.
//! (The NVML child closes its own in the host crate's edge.rs.)

/// close_range(2) on `first..=last` with `flags` (0 closes them;
/// `CLOSE_RANGE_CLOEXEC` marks them close-on-exec), called as a system call
/// so that glibc 2.34 is not needed. False where the kernel lacks it (Linux
/// 5.9 for closing, 5.11 for the flag): the caller falls back. Only a
/// system call: callable between fork and exec.
pub fn close_range(first: u32, last: u32, flags: libc::c_uint) -> bool {
    // SAFETY: close_range takes two numbers and flags, no pointer, and
    // changes only this process's descriptor table.
    unsafe { libc::syscall(libc::SYS_close_range, first, last, flags) == 0 }
}
