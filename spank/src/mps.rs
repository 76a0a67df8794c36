//! The step's CUDA MPS daemon in slurmstepd: the lifecycle is the core's
//! ([`desi_gpu_map_host::mps::daemon`]); the plugin drives it as the job's
//! user ([`JobUser`]) and stops it when the node's last task has exited.

use desi_gpu_map_core::mps::Daemon;
use desi_gpu_map_host::failure::Failure;
use desi_gpu_map_host::mps::daemon::{self, Running};
use desi_gpu_map_host::run::Runner;
use desi_gpu_map_host::sys::as_user;
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

/// The job's user, as the daemon and its helpers run
/// ([`as_user`]: the job's groups where this process may set them, then
/// gid and uid, so that nothing can return to root; every descriptor of
/// slurmstepd's closed at exec, so that none of the step's connections
/// is held by the daemon).
struct JobUser {
    uid: u32,
    gid: u32,
    groups: Vec<libc::gid_t>,
}

impl Runner for JobUser {
    fn prepare(&self, cmd: &mut Command) {
        as_user(cmd, self.uid, self.gid, self.groups.clone());
    }
}
