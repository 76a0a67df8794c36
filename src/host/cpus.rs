//! The CPUs a process may run on, as the kernel reports them, and the
//! slurmstepd above a task's process.

use crate::cpuset::CpuSet;

/// `Cpus_allowed_list` of process `pid` (`self` for this one).
pub fn allowed(pid: &str) -> Option<CpuSet> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    CpuSet::parse_list(list.trim()).ok()
}

/// Most parents walked up to find slurmstepd.
const MOST_ANCESTORS: usize = 32;

/// The pid of the nearest slurmstepd above this process (its parent when
/// srun started this process directly; a shell's parent under
/// `srun bash -c ...`), if there is one.
pub fn slurmstepd_above() -> Option<u32> {
    let mut pid = std::os::unix::process::parent_id();
    for _ in 0..MOST_ANCESTORS {
        if pid <= 1 {
            return None;
        }
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        if comm.trim() == "slurmstepd" {
            return Some(pid);
        }
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        pid = status
            .lines()
            .find_map(|l| l.strip_prefix("PPid:"))?
            .trim()
            .parse()
            .ok()?;
    }
    None
}
