//! Signals read as events, from a signalfd.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

/// The signals that end a process or that Slurm and users send a step.
const ENDING: [libc::c_int; 7] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGTERM,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGALRM,
];

/// Blocks `ENDING` in this thread (exec's MPS keeper calls it first,
/// while it has no other) and returns a signalfd that reads them, so
/// that a signal is an event it waits on, never its end. Its children
/// get the default mask back from std's `Command`.
pub fn ending_fd() -> io::Result<OwnedFd> {
    // SAFETY: sigemptyset and sigaddset fill a zeroed sigset_t that this
    // function owns; pthread_sigmask sets this thread's mask from it and
    // does not ask for the old one; signalfd with -1 makes a new
    // descriptor, which is owned here alone once it is checked.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in ENDING {
            libc::sigaddset(&mut set, signal);
        }
        let blocked = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if blocked != 0 {
            return Err(io::Error::from_raw_os_error(blocked));
        }
        let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}
