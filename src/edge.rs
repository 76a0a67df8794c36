//! The command's start, and the only `unsafe` in it but its C `main`
//! (`entry.rs`): [`signals`], the caller's signal dispositions and mask, kept
//! for the application `exec` runs, and [`runtime`], what Rust's runtime
//! would do before `main`. It is the command's, not the machine edge's
//! (`host/src/sys/`): a function in `.init_array` would run in every
//! process that loads the host library, slurmstepd among them.

/// The caller's signal dispositions and mask, for the application that
/// `exec` runs. The command's start sets SIGPIPE to ignored before its
/// work, as Rust's runtime would ([`runtime::start`]), and std's `Command`
/// sets it back to the default in what it execs, whatever the caller had:
/// a task started under `trap '' PIPE` would lose it. So the caller's
/// SIGPIPE and signal mask are recorded before that (a function in
/// `.init_array`, which the C library runs before `main`), and put back
/// in a `pre_exec` hook, which std runs after its own reset, just before
/// `execvp` (`do_exec` in std's `library/std/src/sys/process/unix/unix.rs`). Caught signals need
/// nothing: `execve` resets them to the default, in the caller's exec of
/// this command already. Other dispositions the start leaves alone.
#[allow(unsafe_code)]
pub mod signals {
    use std::io;
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
            super::ignore_pipe()?;
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
}

/// What Rust's runtime does before `main`, done by the command itself: both
/// builds start without it (`no_main`, src/main.rs), since every task of a
/// step starts the command, and the runtime's stack guard (it reads
/// `/proc/self/maps`) and signal stack cost each start about 40 us that the
/// command has no use for.
#[allow(unsafe_code)]
pub mod runtime {
    /// Opens `/dev/null` on each standard descriptor that is closed, so that
    /// no file the command opens takes its place (as the runtime does), then
    /// ignores SIGPIPE, so that a write to a closed pipe fails and is said
    /// instead of killing the process.
    pub fn start() {
        let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
            fd,
            events: 0,
            revents: 0,
        });
        // SAFETY: poll reads and writes only the three pollfd structs given,
        // by their count; a zero timeout returns at once.
        let polled = unsafe { libc::poll(fds.as_mut_ptr(), 3, 0) };
        if polled >= 0 {
            for closed in fds.iter().filter(|p| p.revents & libc::POLLNVAL != 0) {
                // SAFETY: open with a constant C path and flags; it returns
                // the lowest free descriptor, this closed one (they are
                // opened in order), kept open for the process's life.
                let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
                if fd != closed.fd {
                    break;
                }
            }
        }
        // Ignoring SIGPIPE fails only for a bad signal number.
        let _ = super::ignore_pipe();
    }
}

/// Ignores SIGPIPE, for the command's start and for the caller's
/// disposition put back in what `exec` runs: one `sigaction`, which is
/// async-signal-safe (the `pre_exec` hook may call it) and allocates
/// nothing.
#[allow(unsafe_code)]
fn ignore_pipe() -> std::io::Result<()> {
    // SAFETY: a zeroed sigaction is a valid one (no flags, an empty mask)
    // once its handler is set to SIG_IGN; the old action is not asked for.
    let set = unsafe {
        let mut ignore: libc::sigaction = std::mem::zeroed();
        ignore.sa_sigaction = libc::SIG_IGN;
        libc::sigaction(libc::SIGPIPE, &ignore, std::ptr::null_mut())
    };
    if set != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
