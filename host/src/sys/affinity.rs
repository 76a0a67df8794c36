//! The CPUs a process may run on.

use desi_gpu_map_core::cpuset::{CpuSet, MAX_CPUS};

/// The CPUs process `pid` (`None`: this thread) may run on, as
/// sched_getaffinity(2) tells them: it asks no permission, so it tells
/// another user's process's CPUs where `/proc` hides them (`hidepid`:
/// slurmstepd's, for a task). As many CPUs as the core's sets hold
/// (8192), not glibc's `cpu_set_t` (1024) or rustix's, so that larger
/// nodes are read too.
pub fn allowed_cpus(pid: Option<u32>) -> Option<CpuSet> {
    const BITS: u32 = libc::c_ulong::BITS;
    let pid = match pid {
        Some(pid) => libc::pid_t::try_from(pid).ok()?,
        None => 0,
    };
    let mut words: [libc::c_ulong; MAX_CPUS / BITS as usize] = [0; MAX_CPUS / BITS as usize];
    let size = std::mem::size_of_val(&words);
    // SAFETY: the kernel writes at most `size` bytes, a bit array of
    // unsigned longs (cpu_set_t's layout), into `words`, which is live and
    // writable for `size` bytes; `pid` is only read by the kernel.
    let rc = unsafe { libc::sched_getaffinity(pid, size, words.as_mut_ptr().cast()) };
    if rc != 0 {
        return None;
    }
    // c_ulong: 64 bits here, 32 on some targets.
    #[allow(clippy::useless_conversion)]
    let words = words.iter().map(|&w| u64::from(w));
    CpuSet::from_words(words, BITS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::status_field;

    #[test]
    fn the_kernel_tells_the_cpus_proc_does() {
        let from_proc = status_field("self", "Cpus_allowed_list").unwrap();
        let from_proc = CpuSet::parse_list(&from_proc).unwrap();
        assert!(!from_proc.is_empty());
        assert_eq!(
            allowed_cpus(Some(std::process::id())),
            Some(from_proc.clone())
        );
        assert_eq!(allowed_cpus(None), Some(from_proc));
        assert_eq!(allowed_cpus(Some(u32::MAX)), None, "no such process");
        assert_eq!(
            allowed_cpus(Some(i32::MAX.unsigned_abs())),
            None,
            "no such process"
        );
    }
}
