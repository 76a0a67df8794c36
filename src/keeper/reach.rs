//! A connect to a keeper's socket, by its abstract name or its path, that
//! never waits past a bound. A blocking connect to a listener whose queue
//! is full waits until it accepts, and another user's listener that
//! accepts nothing never does; a non-blocking one is told so at once
//! (EAGAIN), and is tried again until the bound.

use desi_gpu_map_host::run::POLL;
use rustix::io::Errno;
use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// Why a socket was not reached.
#[derive(Debug)]
pub(super) enum Unreached {
    /// Nothing listens there: no such socket, or one bound that does not
    /// listen.
    Refused,
    /// A listener whose queue stayed full this long.
    Full(Duration),
    /// Anything else.
    Failed(std::io::Error),
}

/// Connects to `addr`, trying again while its listener's queue is full,
/// until `until`: the stream, blocking (its reads and writes need their
/// own deadlines), or why not.
pub(super) fn connect(addr: &SocketAddrUnix, until: Instant) -> Result<UnixStream, Unreached> {
    let started = Instant::now();
    loop {
        let fd = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
            None,
        )
        .map_err(|e| Unreached::Failed(e.into()))?;
        match rustix::net::connect(&fd, addr) {
            // A unix socket connects at once or not at all: never
            // EINPROGRESS.
            Ok(()) => {
                let stream = UnixStream::from(fd);
                stream.set_nonblocking(false).map_err(Unreached::Failed)?;
                return Ok(stream);
            }
            Err(Errno::CONNREFUSED | Errno::NOENT) => return Err(Unreached::Refused),
            Err(Errno::AGAIN | Errno::INTR) if Instant::now() < until => {}
            Err(Errno::AGAIN | Errno::INTR) => return Err(Unreached::Full(started.elapsed())),
            Err(e) => return Err(Unreached::Failed(e.into())),
        }
        std::thread::sleep(POLL.min(until.saturating_duration_since(Instant::now())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// An abstract name no other test or process uses.
    fn unique_name() -> SocketAddrUnix {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "dgm-reach-test.{}.{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        SocketAddrUnix::new_abstract_name(name.as_bytes()).unwrap()
    }

    /// A socket bound to `addr`, listening with `backlog` where given.
    fn bound(addr: &SocketAddrUnix, backlog: Option<i32>) -> rustix::fd::OwnedFd {
        let fd = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        rustix::net::bind(&fd, addr).unwrap();
        if let Some(backlog) = backlog {
            rustix::net::listen(&fd, backlog).unwrap();
        }
        fd
    }

    #[test]
    fn a_full_queue_is_told_at_the_bound_and_no_listener_at_once() {
        let addr = unique_name();
        let listener = bound(&addr, Some(0));
        // Fill its queue, as a listener that accepts nothing is filled.
        let mut queued = Vec::new();
        loop {
            match connect(&addr, Instant::now()) {
                Ok(stream) => queued.push(stream),
                Err(Unreached::Full(_)) => break,
                Err(other) => panic!("{other:?}"),
            }
            assert!(queued.len() < 64, "a queue of listen(0) never fills");
        }
        let bound_for = Duration::from_millis(200);
        let started = Instant::now();
        let full = connect(&addr, started + bound_for);
        let took = started.elapsed();
        assert!(matches!(full, Err(Unreached::Full(_))), "{full:?}");
        assert!(took >= bound_for, "{took:?}");
        assert!(took < Duration::from_secs(3), "{took:?}");
        // Once one is accepted, the next connects, and blocks on its own.
        let taken = rustix::net::accept(&listener).unwrap();
        let stream = connect(&addr, Instant::now() + bound_for).unwrap();
        let flags = rustix::fs::fcntl_getfl(&stream).unwrap();
        assert!(!flags.contains(rustix::fs::OFlags::NONBLOCK));
        drop((taken, stream, queued, listener));
        // A name bound that does not listen, and a name no one holds.
        let addr = unique_name();
        let quiet = bound(&addr, None);
        let started = Instant::now();
        assert!(matches!(connect(&addr, started), Err(Unreached::Refused)));
        drop(quiet);
        let nobody = unique_name();
        let far = Instant::now() + Duration::from_secs(60);
        assert!(matches!(connect(&nobody, far), Err(Unreached::Refused)));
        let missing = SocketAddrUnix::new("/nonexistent/keeper.sock").unwrap();
        assert!(matches!(connect(&missing, far), Err(Unreached::Refused)));
        assert!(started.elapsed() < Duration::from_secs(3));
    }
}
