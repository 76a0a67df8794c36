//! The job's CUDA MPS daemon on this node: the lifecycle is the host
//! crate's ([`desi_gpu_map_host::mps::daemon`]), run as this process,
//! since the job shell already runs as the job's user; stopped after the
//! node's last task exits, and in any case when the shell exits.

use desi_gpu_map_core::mps::Daemon;
use desi_gpu_map_host::failure::Failure;
use desi_gpu_map_host::mps::daemon::{self, Running};
use desi_gpu_map_host::run::AsThisProcess;

/// The job's daemon on this node, while it serves.
pub struct Served {
    running: Running,
    /// The node's tasks that have not exited yet.
    tasks_left: usize,
}

impl Served {
    pub fn start(planned: &Daemon) -> Result<Served, Failure> {
        let running = daemon::start(planned, &AsThisProcess)?;
        Ok(Served {
            tasks_left: running.daemon().local_tasks,
            running,
        })
    }

    pub fn daemon(&self) -> &Daemon {
        self.running.daemon()
    }

    /// One of the node's tasks exited: true when it was the last.
    pub fn task_exited(&mut self) -> bool {
        self.tasks_left = self.tasks_left.saturating_sub(1);
        self.tasks_left == 0
    }

    /// Stops the daemon; what went wrong, for the job's log.
    pub fn stop(self) -> Vec<String> {
        self.running.stop(&AsThisProcess)
    }
}
