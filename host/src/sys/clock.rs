//! This thread's CPU time, for the plugin's debug lines: the wall time of
//! a task forked beside many others is mostly waiting.

use std::time::Duration;

/// The CPU time this thread has used (clock_gettime(2),
/// `CLOCK_THREAD_CPUTIME_ID`); zero where the clock cannot be read.
pub fn thread_cpu() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `t`, live and writable;
    // it is async-signal-safe and allocates nothing.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } != 0 {
        return Duration::ZERO;
    }
    let nanos = u32::try_from(t.tv_nsec).unwrap_or(0);
    Duration::new(u64::try_from(t.tv_sec).unwrap_or(0), nanos)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_busy_thread_uses_cpu_time() {
        let before = super::thread_cpu();
        let mut x = 0u64;
        while super::thread_cpu() == before {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(super::thread_cpu() > before);
    }
}
