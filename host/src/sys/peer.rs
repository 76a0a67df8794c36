//! Who is at the other end of a unix socket.

use std::io;
use std::os::fd::{AsFd, AsRawFd};

/// A unix socket's peer, as `SO_PEERCRED` gives it in this process's
/// namespaces: the credentials it had when it connected (or listened).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// Its uid, in this process's user namespace.
    pub uid: u32,
    /// Its gid, in this process's user namespace.
    pub gid: u32,
    /// Its pid in this process's pid namespace; `None` where it is
    /// outside it (the kernel says 0): a process of another container's
    /// pid namespace, or of one above this.
    pub pid: Option<u32>,
}

/// The peer of the connected unix socket `socket`, from getsockopt(2)'s
/// `SO_PEERCRED`.
///
/// Not rustix's `socket_peercred`, whose `Pid` cannot hold the 0 that a
/// peer outside this pid namespace reads as: it takes that reply for an
/// error, and the uid for its errno.
pub fn peer_of(socket: &impl AsFd) -> io::Result<Peer> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = libc::socklen_t::try_from(std::mem::size_of::<libc::ucred>())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: the kernel writes at most `len` bytes, a `ucred`, into
    // `cred`, which is live and writable for that many bytes, and writes
    // the length it used into `len`; the descriptor is borrowed for the
    // call and only read.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_fd().as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            std::ptr::addr_of_mut!(cred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    if usize::try_from(len).ok() != Some(std::mem::size_of::<libc::ucred>()) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("SO_PEERCRED gave {len} bytes, not a ucred"),
        ));
    }
    Ok(Peer {
        uid: cred.uid,
        gid: cred.gid,
        pid: u32::try_from(cred.pid).ok().filter(|&pid| pid > 0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::{UnixListener, UnixStream};
    use std::process::{Command, Stdio};

    #[test]
    fn a_peer_in_this_namespace_is_named_by_its_pid() {
        let (a, b) = UnixStream::pair().unwrap();
        let me = Peer {
            uid: rustix::process::getuid().as_raw(),
            gid: rustix::process::getgid().as_raw(),
            pid: Some(std::process::id()),
        };
        assert_eq!(peer_of(&a).unwrap(), me);
        assert_eq!(peer_of(&b).unwrap(), me);
        let file = std::fs::File::open("/").unwrap();
        assert!(peer_of(&file).is_err(), "not a socket");
    }

    /// The variable that makes [`read_from_a_pid_namespace_of_its_own`]
    /// connect to the socket it names and print what it reads there.
    const HELPER: &str = "DGM_PEER_TEST_SOCKET";

    /// Run by the test below, in a pid namespace of its own: connects to
    /// the socket `HELPER` names and prints the listener's credentials as
    /// [`peer_of`] reads them. Without `HELPER`, nothing.
    #[test]
    fn read_from_a_pid_namespace_of_its_own() {
        let Some(path) = std::env::var_os(HELPER) else {
            return;
        };
        let stream = UnixStream::connect(path).unwrap();
        println!("peer {:?}", peer_of(&stream).map_err(|e| e.to_string()));
        let mut line = String::new();
        BufReader::new(&stream).read_line(&mut line).unwrap();
    }

    /// A listener outside the reader's pid namespace (this process, read
    /// from this test binary run again under util-linux's `unshare
    /// --pid`, root's) has no pid there, and its uid is still read; the
    /// reader, below this namespace, is named by its pid here.
    #[test]
    fn a_peer_outside_this_pid_namespace_has_no_pid() {
        if !rustix::process::getuid().is_root() {
            eprintln!("a pid namespace of its own needs root: that case is left out");
            return;
        }
        let dir = std::env::temp_dir().join(format!("dgm-peer-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s");
        let listener = UnixListener::bind(&path).unwrap();
        let child = Command::new("unshare")
            .args(["--pid", "--fork", "--kill-child"])
            .arg(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "sys::peer::tests::read_from_a_pid_namespace_of_its_own",
            ])
            .args(["--nocapture", "--test-threads=1"])
            .env(HELPER, &path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run util-linux's unshare");
        let (stream, _) = listener.accept().unwrap();
        let reader = peer_of(&stream).unwrap();
        (&stream).write_all(b"done\n").unwrap();
        let out = child.wait_with_output().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let out = String::from_utf8_lossy(&out.stdout);
        let me = Peer {
            uid: rustix::process::getuid().as_raw(),
            gid: rustix::process::getgid().as_raw(),
            pid: None,
        };
        // libtest prints the line after the test's name.
        let want = format!("peer {:?}", Ok::<_, String>(me));
        assert!(out.lines().any(|l| l.ends_with(&want)), "{out}");
        assert!(reader.pid.is_some_and(|pid| pid > 1), "{reader:?}");
    }
}
