//! The command's one FFI edge, and the only `unsafe` in it: [`signals`]
//! (the caller's signal dispositions and mask, kept for the application
//! `exec` runs; the keeper's signalfd) and [`descriptors`] (what the
//! keeper inherits and its tie to its parent).

/// The caller's signal dispositions and mask, for the application that
/// `exec` runs. Rust's runtime sets SIGPIPE to ignored before `main`, and
/// std's `Command` sets it back to the default in what it execs, whatever
/// the caller had: a task started under `trap '' PIPE` would lose it. So
/// the caller's SIGPIPE and signal mask are recorded before the runtime
/// starts (a function in `.init_array`, which the C library runs before
/// `main`), and put back in a `pre_exec` hook, which std runs after its own
/// reset, just before `execvp` (`do_exec` in std's
/// `library/std/src/sys/process/unix/unix.rs`). Caught signals need
/// nothing: `execve` resets them to the default, in the caller's exec of
/// this command already. Other dispositions the runtime leaves alone.
#[allow(unsafe_code)]
pub mod signals {
    use std::io;
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::os::unix::process::CommandExt;
    use std::process::Command;
    use std::sync::OnceLock;

    /// What the caller handed over, each part where it could be read.
    struct Caller {
        /// SIGPIPE was ignored.
        pipe_ignored: Option<bool>,
        /// The signals it blocked.
        mask: Option<libc::sigset_t>,
    }

    static CALLER: OnceLock<Caller> = OnceLock::new();

    /// Run by the C library before Rust's runtime starts, while SIGPIPE is
    /// still as the caller left it.
    #[used]
    #[link_section = ".init_array"]
    static RECORD_CALLER: extern "C" fn() = record_caller;

    extern "C" fn record_caller() {
        // SAFETY: sigaction with a null new action only reads the current
        // one into `old`, a zeroed plain C struct that it may overwrite.
        let pipe_ignored = unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            (libc::sigaction(libc::SIGPIPE, std::ptr::null(), &mut old) == 0)
                .then_some(old.sa_sigaction == libc::SIG_IGN)
        };
        // SAFETY: pthread_sigmask with a null new set only reads this
        // thread's mask (the process's only thread here) into `mask`.
        let mask = unsafe {
            let mut mask: libc::sigset_t = std::mem::zeroed();
            (libc::pthread_sigmask(libc::SIG_SETMASK, std::ptr::null(), &mut mask) == 0)
                .then_some(mask)
        };
        let _ = CALLER.set(Caller { pipe_ignored, mask });
    }

    /// Has `command` put back the caller's SIGPIPE and mask as it execs.
    pub fn keep_callers(command: &mut Command) {
        let Some(caller) = CALLER.get() else { return };
        let (pipe_ignored, mask) = (caller.pipe_ignored, caller.mask);
        // SAFETY: the hook runs between std's signal reset and execvp, in
        // the process about to become the application; it only calls
        // sigaction and pthread_sigmask, which are async-signal-safe, on
        // values copied in beforehand, and neither allocates nor locks.
        unsafe {
            command.pre_exec(move || restore(pipe_ignored, mask.as_ref()));
        }
    }

    /// Ignores SIGPIPE again where the caller did (std left it at the
    /// default, as the caller's otherwise was), and sets the caller's mask.
    fn restore(pipe_ignored: Option<bool>, mask: Option<&libc::sigset_t>) -> io::Result<()> {
        if pipe_ignored == Some(true) {
            // SAFETY: a zeroed sigaction is a valid one (no flags, an
            // empty mask) once its handler is set to SIG_IGN; the old
            // action is not asked for.
            let set = unsafe {
                let mut ignore: libc::sigaction = std::mem::zeroed();
                ignore.sa_sigaction = libc::SIG_IGN;
                libc::sigaction(libc::SIGPIPE, &ignore, std::ptr::null_mut())
            };
            if set != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        if let Some(mask) = mask {
            // SAFETY: `mask` is a sigset_t the C library filled in; the
            // old mask is not asked for.
            let set =
                unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, mask, std::ptr::null_mut()) };
            if set != 0 {
                return Err(io::Error::from_raw_os_error(set));
            }
        }
        Ok(())
    }

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

    /// Blocks [`ENDING`] in this thread (exec's MPS keeper calls it first,
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
}

/// What exec's MPS keeper must not hold of the task that started it, and
/// what it must not leave behind.
#[allow(unsafe_code)]
pub mod descriptors {
    use std::io;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    /// Marks every descriptor past standard error close-on-exec, so that
    /// none that the task left open (its output pipe, a file it opened
    /// without `O_CLOEXEC`) reaches the keeper's own children: one would
    /// keep srun's I/O open after the step. `close_range(2)` where the
    /// kernel has it (5.11), else each descriptor `/proc/self/fd` lists.
    pub fn close_inherited() {
        // SAFETY: close_range with CLOSE_RANGE_CLOEXEC closes nothing; it
        // only sets a flag on descriptors this process holds.
        let done = unsafe {
            libc::syscall(
                libc::SYS_close_range,
                3u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            )
        } == 0;
        if done {
            return;
        }
        let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
            return;
        };
        let fds: Vec<i32> = entries
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .filter(|&fd| fd > 2)
            .collect();
        for fd in fds {
            // SAFETY: F_SETFD on a number that is no descriptor fails with
            // EBADF and changes nothing; on one, it only sets its flag.
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        }
    }

    /// Has `command`'s process killed when this one dies
    /// (`PR_SET_PDEATHSIG`): a keeper killed by pid, or by the OOM
    /// killer, takes its MPS daemon along. This process is single-threaded
    /// where it starts children, so its death is its thread's.
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
}
