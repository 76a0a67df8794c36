//! The CPUs a process may run on, as the kernel reports them.

use crate::cpuset::CpuSet;

/// `Cpus_allowed_list` of process `pid` (`self` for this one).
pub fn allowed(pid: &str) -> Option<CpuSet> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    CpuSet::parse_list(list.trim()).ok()
}
