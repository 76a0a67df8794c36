//! Directories a keeper left when Slurm killed it before it cleaned up
//! (proctrack/cgroup, on a busy node): the user's next keeper on the node
//! removes them.

use super::MARK;
use crate::mps::Daemon;

/// The most directories one sweep looks at.
const MOST_SWEPT: usize = 256;

/// Removes the user's marked directories in the daemon's base whose
/// keeper's socket (named after the directory less its random part) is
/// gone: what a keeper killed by Slurm before it cleaned up left.
pub(super) fn sweep(daemon: &Daemon) {
    let prefix = format!("desi-gpu-map-mps.{}.", daemon.uid);
    let Ok(entries) = std::fs::read_dir(&daemon.base) else {
        return;
    };
    let mut stale: Vec<std::path::PathBuf> = entries
        .take(MOST_SWEPT * 16)
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .map(|e| e.path())
        .filter(|dir| marked_by_us(dir, daemon.uid))
        .take(MOST_SWEPT)
        .collect();
    if stale.is_empty() {
        return;
    }
    let bound = bound_names();
    stale.retain(|dir| {
        let stem = dir
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.rsplit_once('.'))
            .map(|(stem, _)| format!("@{stem}"));
        stem.is_some_and(|stem| !bound.contains(&stem))
    });
    for dir in stale {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// A directory (not a link) of `uid`'s that holds a keeper's [`MARK`].
fn marked_by_us(dir: &std::path::Path, uid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let ours = |p: &std::path::Path, dir: bool| {
        std::fs::symlink_metadata(p)
            .is_ok_and(|m| m.uid() == uid && m.is_dir() == dir && !m.file_type().is_symlink())
    };
    ours(dir, true) && ours(&dir.join(MARK), false)
}

/// The abstract unix socket names bound on this host (`@name`), as
/// `/proc/net/unix` lists them.
fn bound_names() -> Vec<String> {
    let text = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    text.lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().nth(7))
        .filter(|name| name.starts_with('@'))
        .map(String::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener};
    use std::path::{Path, PathBuf};
    use std::time::Duration;

    fn daemon_in(base: &Path) -> Daemon {
        Daemon {
            control: PathBuf::from("/bin/false"),
            path: Vec::new(),
            base: base.to_path_buf(),
            stem: "unused".to_string(),
            token: 0,
            gpus: Vec::new(),
            uid: rustix::process::getuid().as_raw(),
            gid: rustix::process::getgid().as_raw(),
            host: None,
            shares: Vec::new(),
            keep_log: false,
            timeout: Duration::from_secs(1),
            local_tasks: 1,
            asked: true,
        }
    }

    /// `base/NAME` with a socket-like file inside, marked where `marked`.
    fn left(base: &Path, name: &str, marked: bool) -> PathBuf {
        let dir = base.join(name);
        std::fs::create_dir_all(dir.join("pipe")).unwrap();
        std::fs::write(dir.join("pipe/control"), "").unwrap();
        if marked {
            std::fs::write(dir.join(MARK), "").unwrap();
        }
        dir
    }

    #[test]
    fn only_the_users_marked_directories_whose_keeper_is_gone_are_removed() {
        let base = std::env::temp_dir().join(format!("dgm-sweep-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let d = daemon_in(&base);
        let job = format!("desi-gpu-map-mps.{}.{}", d.uid, std::process::id());
        let stale = left(&base, &format!("{job}.1.0.00000000000000aa"), true);
        let plugins = left(&base, &format!("{job}.2.0.00000000000000bb"), false);
        let served = left(&base, &format!("{job}.3.0.00000000000000cc"), true);
        let others = left(&base, "desi-gpu-map-mps.99999.1.0.0.00000000000000dd", true);
        // A live keeper holds the socket named after `served`'s stem.
        let name = SocketAddr::from_abstract_name(format!("{job}.3.0").as_bytes()).unwrap();
        let keeper = UnixListener::bind_addr(&name).unwrap();
        sweep(&d);
        assert!(!stale.exists(), "a marked directory whose keeper is gone");
        assert!(plugins.exists(), "the plugin's, never marked");
        assert!(served.exists(), "its keeper still holds the socket");
        assert!(others.exists(), "another uid's name");
        drop(keeper);
        sweep(&d);
        assert!(!served.exists(), "gone once its keeper is");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
