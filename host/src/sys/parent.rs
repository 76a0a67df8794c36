//! A child tied to this process's death.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Has `command`'s process killed when this one dies
/// (`PR_SET_PDEATHSIG`): a keeper killed by pid, or by the OOM killer,
/// takes its MPS daemon along. The signal follows the thread that forked
/// the child: the caller starts children from a process with one thread,
/// so that its death is its thread's.
pub fn tie_to_parent(command: &mut Command) {
    let parent = std::process::id();
    // SAFETY: the hook runs in the child between fork and exec; prctl
    // and getppid are async-signal-safe, and it neither allocates nor
    // locks.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent died before the signal was set: none will come.
            match u32::try_from(libc::getppid()) {
                Ok(ppid) if ppid == parent => Ok(()),
                _ => Err(io::Error::from(io::ErrorKind::BrokenPipe)),
            }
        });
    }
}
