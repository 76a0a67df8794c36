//! Waiting for a child process until a deadline, never past it: the
//! plugin's MPS daemon and its helpers, and `exec`'s NVML child.

use std::process::Child;
use std::time::{Duration, Instant};

/// True once `child` has exited, or can no longer be waited for (another
/// waiter reaped it: slurmstepd waits for any child); false at `deadline`.
/// Looks again every `poll`.
pub fn wait_until(child: &mut Child, deadline: Instant, poll: Duration) -> bool {
    loop {
        match child.try_wait() {
            Ok(Some(_)) | Err(_) => return true,
            Ok(None) if Instant::now() >= deadline => return false,
            Ok(None) => std::thread::sleep(poll),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn waits_for_an_exit_and_gives_up_at_the_deadline() {
        let poll = Duration::from_millis(2);
        let mut quick = Command::new("true").spawn().unwrap();
        assert!(wait_until(
            &mut quick,
            Instant::now() + Duration::from_secs(5),
            poll
        ));
        let mut slow = Command::new("sleep").arg("5").spawn().unwrap();
        let started = Instant::now();
        assert!(!wait_until(
            &mut slow,
            started + Duration::from_millis(50),
            poll
        ));
        assert!(started.elapsed() < Duration::from_secs(2));
        slow.kill().unwrap();
        assert!(wait_until(
            &mut slow,
            Instant::now() + Duration::from_secs(5),
            poll
        ));
    }
}
