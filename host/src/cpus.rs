//! The CPUs a process may run on, as the kernel reports them, and the
//! slurmstepd above a task's process.

use crate::process::{ancestors, comm, parent_of, status_field, task_pid, SLURMSTEPD};
use desi_gpu_map_core::cpuset::CpuSet;
use rustix::process::Pid;
use rustix::thread::{sched_getaffinity, CpuSet as RawCpuSet};

/// `Cpus_allowed_list` of process `pid` (`self` for this one). Where
/// `/proc` hides the process (another user's under `hidepid`: slurmstepd),
/// the kernel still tells any process's CPUs (sched_getaffinity(2) asks no
/// permission).
pub fn allowed(pid: &str) -> Option<CpuSet> {
    if let Some(list) = status_field(pid, "Cpus_allowed_list") {
        return CpuSet::parse_list(&list).ok();
    }
    told_by_the_kernel(pid.parse().ok()?)
}

/// Process `pid`'s CPUs as sched_getaffinity(2) tells them.
fn told_by_the_kernel(pid: i32) -> Option<CpuSet> {
    let set = sched_getaffinity(Some(Pid::from_raw(pid)?)).ok()?;
    let cpus: Vec<usize> = (0..RawCpuSet::MAX_CPU)
        .filter(|&cpu| set.is_set(cpu))
        .collect();
    CpuSet::of(&cpus)
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_tells_the_cpus_proc_does() {
        let me = i32::try_from(std::process::id()).unwrap();
        let from_proc = allowed(&me.to_string()).unwrap();
        assert!(!from_proc.is_empty());
        assert_eq!(told_by_the_kernel(me), Some(from_proc));
        assert_eq!(told_by_the_kernel(i32::MAX), None, "no such process");
        assert_eq!(allowed("not-a-pid"), None);
    }
}
