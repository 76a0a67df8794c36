//! The CPU binding Slurm's task/affinity plugin writes into each task's
//! environment (`SLURM_CPU_BIND_TYPE`, `SLURM_CPU_BIND_LIST`), read as
//! every task's CPUs.

use crate::cpuset::CpuSet;

#[cfg(test)]
thread_local! {
    /// Entries [`bind_list_cpus`] read on this thread, for tests that count
    /// work.
    pub(crate) static ENTRIES_READ: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Every task's CPUs, from what Slurm's task/affinity plugin writes into
/// the step's environment: `SLURM_CPU_BIND_TYPE` (`mask_cpu:` or
/// `map_cpu:`, possibly after flags such as `verbose,`) and
/// `SLURM_CPU_BIND_LIST` (one entry per task, hex masks or CPU numbers).
/// Slurm reuses the list from its start when it has fewer entries than
/// tasks (task `l` takes entry `l mod len`), and so does this. `None` when
/// the binding is of another kind (none, rank, map_ldom, mask_ldom: no
/// per-task CPU list; Slurm writes sockets, ldoms, cores and threads as
/// mask_cpu, measured on 22.05) or the list cannot be read.
pub fn bind_list_cpus(
    bind_type: Option<&str>,
    bind_list: Option<&str>,
    local_count: usize,
) -> Option<Vec<CpuSet>> {
    let kinds: Vec<&str> = bind_type?
        .split([',', ':'])
        .filter(|w| !w.is_empty())
        .collect();
    let masks = kinds.contains(&"mask_cpu");
    let maps = kinds.contains(&"map_cpu");
    if !(masks || maps) || local_count == 0 {
        return None;
    }
    let mut entries: Vec<CpuSet> = bind_list?
        .split(',')
        .map(|entry| {
            #[cfg(test)]
            ENTRIES_READ.with(|c| c.set(c.get() + 1));
            if masks {
                mask(entry)
            } else {
                one_cpu(entry)
            }
        })
        .collect::<Option<_>>()?;
    if entries.is_empty() {
        return None;
    }
    // An entry for every task (Slurm's usual list): the entries themselves.
    if entries.len() >= local_count {
        entries.truncate(local_count);
        return Some(entries);
    }
    (0..local_count)
        .map(|l| entries.get(l % entries.len()).cloned())
        .collect()
}

fn mask(entry: &str) -> Option<CpuSet> {
    CpuSet::parse_mask(entry).ok()
}

/// A `map_cpu` entry: a CPU number, decimal or `0x` hex.
fn one_cpu(entry: &str) -> Option<CpuSet> {
    let cpu = match entry.strip_prefix("0x") {
        Some(hex) => usize::from_str_radix(hex, 16).ok()?,
        None => entry.parse::<usize>().ok()?,
    };
    CpuSet::of(&[cpu])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_bind_lists() {
        let got = bind_list_cpus(Some("mask_cpu:"), Some("0x3,0xC"), 3).unwrap();
        let shown: Vec<String> = got.iter().map(|c| c.to_string()).collect();
        assert_eq!(shown, ["0-1", "2-3", "0-1"], "the list wraps round");
        let got = bind_list_cpus(Some("verbose,map_cpu:"), Some("5,0x7"), 2).unwrap();
        let shown: Vec<String> = got.iter().map(|c| c.to_string()).collect();
        assert_eq!(shown, ["5", "7"]);
        // More entries than tasks: the first ones, one per task.
        let got = bind_list_cpus(Some("mask_cpu:"), Some("0x3,0xC,0x30"), 2).unwrap();
        let shown: Vec<String> = got.iter().map(|c| c.to_string()).collect();
        assert_eq!(shown, ["0-1", "2-3"]);
        assert_eq!(bind_list_cpus(Some("none"), Some("0x3"), 1), None);
        assert_eq!(bind_list_cpus(Some("mask_cpu:"), None, 1), None);
        assert_eq!(bind_list_cpus(None, Some("0x3"), 1), None);
        assert_eq!(bind_list_cpus(Some("mask_cpu:"), Some("0x3,zz"), 2), None);
        assert_eq!(bind_list_cpus(Some("mask_cpu:"), Some("0x3"), 0), None);
    }
}
