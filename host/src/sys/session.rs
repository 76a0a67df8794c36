//! The session a process is in.

/// The session of `pid` (`None`: this process), as getsid(2) gives it in
/// this process's pid namespace: 0 where the session's leader is outside
/// that namespace (a step's processes, seen from inside a container's pid
/// namespace or a sandbox's). `None` where there is no such process.
///
/// Not rustix's `getsid`, whose `Pid` cannot hold that 0: a debug build
/// panics on it, and a release build reads it as no session.
pub fn session_of(pid: Option<u32>) -> Option<u32> {
    let raw = match pid {
        Some(pid) => libc::pid_t::try_from(pid).ok().filter(|&p| p > 0)?,
        None => 0,
    };
    // SAFETY: getsid takes a number and reads nothing through a pointer; a
    // pid that is no process fails with ESRCH.
    let sid = unsafe { libc::getsid(raw) };
    u32::try_from(sid).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_session_is_its_own_and_another_setsids_is_not() {
        let me = session_of(None).expect("this process's session");
        assert_eq!(session_of(Some(std::process::id())), Some(me));
        assert_eq!(session_of(Some(u32::MAX)), None);
        assert_eq!(session_of(Some(0)), None);
        // A session of its own: led by that process, so named by its pid
        // in any namespace that sees it.
        let mut child = std::process::Command::new("setsid")
            .args(["--wait", "sleep", "5"])
            .spawn()
            .unwrap();
        let pid = child.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut theirs = session_of(Some(pid));
        while theirs == Some(me) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
            theirs = session_of(Some(pid));
        }
        let _ = child.kill();
        let _ = child.wait();
        assert_ne!(theirs, Some(me));
    }
}
