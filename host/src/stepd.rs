//! The slurmstepd above a task's process, and other processes above this
//! one by name. (The CPUs a process may run on are the machine edge's:
//! [`crate::sys::allowed_cpus`].)

use crate::process::{ancestors, comm, parent_of, task_pid, SLURMSTEPD};

/// The pid of the step's slurmstepd above this process (its parent when
/// srun started this process directly; a shell's parent under
/// `srun bash -c ...`), if there is one. First through the step's task
/// (`SLURM_TASK_PID`), whose parent slurmstepd is: this process, or an
/// ancestor whose `/proc` can be read; that needs nothing of slurmstepd's
/// own `/proc`, which `hidepid` hides. Else by name: a task's own process
/// is named slurmstepd too until it execs the application, and a task
/// prolog runs as its child, so the step's slurmstepd is the topmost of
/// such a chain.
pub fn slurmstepd_above() -> Option<u32> {
    let above = |pid: u32| Some(pid).filter(|&p| p > 1);
    if let Some(task) = task_pid() {
        if task == std::process::id() {
            return above(std::os::unix::process::parent_id());
        }
        if let Some(pid) = ancestors(std::os::unix::process::parent_id()).find(|&p| p == task) {
            if let Some(stepd) = parent_of(pid).and_then(above) {
                return Some(stepd);
            }
        }
    }
    let mut found = None;
    for pid in ancestors(std::os::unix::process::parent_id()) {
        match (comm(pid)?.trim() == SLURMSTEPD, found) {
            (true, _) => found = Some(pid),
            (false, Some(_)) => break,
            (false, None) => {}
        }
    }
    found
}

/// The pid of the nearest process above this one whose command name
/// (`/proc/PID/comm`) is `name`, if there is one.
pub fn ancestor_named(name: &str) -> Option<u32> {
    for pid in ancestors(std::os::unix::process::parent_id()) {
        if comm(pid)?.trim() == name {
            return Some(pid);
        }
    }
    None
}
