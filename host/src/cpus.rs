//! The CPUs a process may run on, as the kernel reports them, and the
//! slurmstepd above a task's process.

use crate::process::{ancestors, comm, status_field, SLURMSTEPD};
use desi_gpu_map_core::cpuset::CpuSet;

/// `Cpus_allowed_list` of process `pid` (`self` for this one).
pub fn allowed(pid: &str) -> Option<CpuSet> {
    CpuSet::parse_list(&status_field(pid, "Cpus_allowed_list")?).ok()
}

/// The pid of the nearest slurmstepd above this process (its parent when
/// srun started this process directly; a shell's parent under
/// `srun bash -c ...`), if there is one.
pub fn slurmstepd_above() -> Option<u32> {
    ancestor_named(SLURMSTEPD)
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
