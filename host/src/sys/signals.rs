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
/// that a signal is an event it waits on, never its end.
///
/// Its children keep that blocked set: std's `Command` leaves the signal
/// mask as it is (it resets only SIGPIPE's disposition), and the keeper
/// runs its children without a hook that would unblock. This is the
/// choice, not an accident: the MPS control daemon and its server, the
/// keeper's children, are in the step, and a signal meant for the
/// application (`scancel --signal=USR1`, which an application may trap
/// to checkpoint; Slurm's TERM before its KILL) stays pending in them
/// rather than ending them under the application; the keeper, which reads
/// the signals that end a step, ends them itself (SIGKILL, or its death
/// through `tie_to_parent`).
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The mask of `status` (`/proc/PID/status`'s text), `SigBlk`.
    fn blocked(status: &str) -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix("SigBlk:"))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
            .unwrap_or_else(|| panic!("no SigBlk in {status}"))
    }

    /// Run in a thread of its own (this test's), which the mask stays on:
    /// a child started through std's `Command` keeps every signal of
    /// `ENDING` blocked, as the keeper's daemon and its server do.
    #[test]
    fn the_children_keep_the_blocked_signals() {
        let fd = ending_fd().unwrap();
        let out = std::process::Command::new("cat")
            .arg("/proc/self/status")
            .output()
            .unwrap();
        drop(fd);
        let mask = blocked(&String::from_utf8_lossy(&out.stdout));
        for signal in ENDING {
            let bit = 1u64 << (signal - 1);
            assert_eq!(mask & bit, bit, "signal {signal} unblocked: {mask:#x}");
        }
    }
}
