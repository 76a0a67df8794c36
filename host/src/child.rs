//! A child process, bounded in time and in what it says: waiting for it
//! until a deadline, never past it, and reading its pipes without waiting
//! on whoever else holds them open. For the MPS daemon and its helpers,
//! short programs ([`crate::run`]), and the pipe of a child with a
//! deadline ([`crate::deadline`]).

use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
use std::io::{self, Read};
use std::os::fd::AsFd;
use std::process::Child;
use std::time::{Duration, Instant};

/// How long a killed (or finished) child is given to be reaped before it
/// is left (to slurmstepd in the plugin, to init after `exec`): waiting
/// for one stuck in the kernel would hold the step or the task.
pub(crate) const REAP_GRACE: Duration = Duration::from_millis(200);

/// True once `child` has exited, or can no longer be waited for (another
/// waiter reaped it: slurmstepd waits for any child); false at `deadline`.
/// Looks again every `poll`.
pub(crate) fn wait_until(child: &mut Child, deadline: Instant, poll: Duration) -> bool {
    loop {
        match child.try_wait() {
            Ok(Some(_)) | Err(_) => return true,
            Ok(None) if Instant::now() >= deadline => return false,
            Ok(None) => std::thread::sleep(poll),
        }
    }
}

/// What a [`drain`] left of a pipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pipe {
    /// Every writer closed it: nothing more will come.
    Ended,
    /// A writer still holds it open, or `most` bytes were read.
    Open,
}

/// Appends to `into` what `pipe` holds now, until `into` holds `most`
/// bytes, and returns without waiting for more: the pipe is made
/// non-blocking, so that a writer that keeps it open (a grandchild the
/// child left behind, say) cannot hold the reader. Called on a child's
/// stdout or stderr after it exited, or between looks while it runs. For
/// text, read it lossily: `let mut out = Vec::new(); let _ = drain(stdout,
/// &mut out, MOST); String::from_utf8_lossy(&out)`.
pub(crate) fn drain(
    mut pipe: impl Read + AsFd,
    into: &mut Vec<u8>,
    most: usize,
) -> io::Result<Pipe> {
    let flags = fcntl_getfl(&pipe)?;
    fcntl_setfl(&pipe, flags | OFlags::NONBLOCK)?;
    let mut chunk = [0u8; 4096];
    while into.len() < most {
        let room = chunk.len().min(most - into.len());
        let buf = chunk.get_mut(..room).unwrap_or_default();
        match pipe.read(buf) {
            Ok(0) => return Ok(Pipe::Ended),
            Ok(n) => into.extend_from_slice(buf.get(..n).unwrap_or_default()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Pipe::Open),
            Err(e) => return Err(e),
        }
    }
    Ok(Pipe::Open)
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

    #[test]
    fn a_drain_takes_what_is_there_and_never_waits() {
        // The shell exits at once; its sleeping child keeps stdout open.
        let mut child = Command::new("sh")
            .args(["-c", "printf 'said\\n'; sleep 3 & exit 0"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = child.stdout.take().unwrap();
        child.wait().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let (mut got, started) = (Vec::new(), Instant::now());
        assert_eq!(drain(&mut out, &mut got, 1 << 10).unwrap(), Pipe::Open);
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(got, b"said\n");
        // Bounded, and at the end of a pipe whose writers all closed it.
        let mut child = Command::new("printf")
            .arg("0123456789")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = child.stdout.take().unwrap();
        child.wait().unwrap();
        let mut got = Vec::new();
        assert_eq!(drain(&mut out, &mut got, 4).unwrap(), Pipe::Open);
        assert_eq!(got, b"0123");
        assert_eq!(drain(&mut out, &mut got, 100).unwrap(), Pipe::Ended);
        assert_eq!(got, b"0123456789");
    }
}
