//! The step's CUDA MPS daemon in slurmstepd: the lifecycle is the core's
//! ([`desi_gpu_map_host::mps::daemon`]); the plugin drives it as the job's
//! user ([`JobUser`]) and stops it when the node's last task has exited.

use desi_gpu_map_core::mps::Daemon;
use desi_gpu_map_host::failure::Failure;
use desi_gpu_map_host::mps::daemon::{self, Running};
use desi_gpu_map_host::run::Runner;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// The step's daemon on this node, while it serves.
pub struct Served {
    running: Running,
    user: JobUser,
    /// The node's tasks that have not exited yet; 0: unknown, and the
    /// step's end stops the daemon.
    tasks_left: usize,
}

impl Served {
    /// Starts `planned` as the job's user (`groups`: the job's
    /// supplementary groups).
    pub fn start(planned: &Daemon, groups: Vec<libc::gid_t>) -> Result<Served, Failure> {
        let user = JobUser {
            uid: planned.uid,
            gid: planned.gid,
            groups,
        };
        let running = daemon::start(planned, &user)?;
        for dir in running.taken() {
            log::info!("{} is taken; tried another name", dir.display());
        }
        Ok(Served {
            tasks_left: running.daemon().local_tasks,
            running,
            user,
        })
    }

    pub fn daemon(&self) -> &Daemon {
        self.running.daemon()
    }

    /// One of the node's tasks exited: true when it was the last.
    pub fn task_exited(&mut self) -> bool {
        if self.tasks_left == 0 {
            return false;
        }
        self.tasks_left -= 1;
        self.tasks_left == 0
    }

    /// Stops the daemon; what went wrong, for slurmd's log.
    pub fn stop(self) -> Vec<String> {
        self.running.stop(&self.user)
    }
}

/// The job's user, as the daemon and its helpers run: the job's groups
/// where this process may set them (the exit hook runs as root;
/// `user_init` already has the user's), then gid and uid, real, effective
/// and saved, so that nothing can return to root. Every descriptor of
/// slurmstepd's is closed at exec, so that none of the step's connections
/// is held by the daemon.
struct JobUser {
    uid: u32,
    gid: u32,
    groups: Vec<libc::gid_t>,
}

impl Runner for JobUser {
    fn prepare(&self, cmd: &mut Command) {
        let (uid, gid, groups) = (self.uid, self.gid, self.groups.clone());
        let hook = move || -> std::io::Result<()> {
            let fail = || Err(std::io::Error::last_os_error());
            // SAFETY: between fork and exec only async-signal-safe system
            // calls run here; `groups` is a live slice of `groups.len()` gids.
            unsafe {
                if libc::geteuid() == 0 && libc::setgroups(groups.len(), groups.as_ptr()) != 0 {
                    return fail();
                }
                if libc::setresgid(gid, gid, gid) != 0 || libc::setresuid(uid, uid, uid) != 0 {
                    return fail();
                }
                cloexec_from(3);
            }
            Ok(())
        };
        // SAFETY: the hook above calls only async-signal-safe functions and
        // allocates nothing (its vector was made before the fork).
        unsafe {
            cmd.pre_exec(hook);
        }
    }
}

/// Marks every descriptor from `first` close-on-exec.
///
/// # Safety
/// Only system calls; callable between fork and exec.
unsafe fn cloexec_from(first: libc::c_uint) {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    if crate::fds::close_range(first, libc::c_uint::MAX, CLOSE_RANGE_CLOEXEC) {
        return;
    }
    // Kernels before 5.11: one descriptor at a time, up to the limit.
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into `limit`, live and writable.
    let most = match unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } {
        0 => libc::c_int::try_from(limit.rlim_cur).unwrap_or(libc::c_int::MAX),
        _ => 65_536,
    };
    let first = libc::c_int::try_from(first).unwrap_or(most);
    for fd in first..most {
        // SAFETY: fcntl on a descriptor that may not exist fails harmlessly.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_job_user_runs_as_itself_here_and_closes_inherited_descriptors() {
        // Not root in general: the uid and gid are this process's own.
        // SAFETY: getuid and getgid only return this process's ids.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let user = JobUser {
            uid,
            gid,
            groups: Vec::new(),
        };
        let leaked = std::fs::File::open("/dev/null").unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&leaked);
        // SAFETY: fcntl changes only the flags of a descriptor we own.
        unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
        let mut sh = Command::new("sh");
        sh.args([
            "-c",
            &format!("id -u; [ -e /proc/self/fd/{fd} ] && echo leaked || true"),
        ]);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let ran = desi_gpu_map_host::run::run(sh, &user, "", deadline).unwrap();
        assert_eq!(ran.out, format!("{}\n", user.uid));
    }
}
