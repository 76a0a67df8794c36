//! Directories a keeper left when Slurm killed it before it cleaned up
//! (proctrack/cgroup, on a busy node), at any point after it made one: the
//! user's next keeper on the node removes them.

use super::meet::SOCKET;
use desi_gpu_map_core::mps::{Daemon, KEEPER_MARK};
use std::path::{Path, PathBuf};

/// The most directories one sweep looks at.
const MOST_SWEPT: usize = 256;

/// Removes the user's keeper directories in the daemon's base (named
/// `desi-gpu-map-mps.UID.JOB.STEP.NODE.keeper.TOKEN` from the moment they
/// are made) whose keeper is gone: no process holds the socket named
/// after the directory less its random part, nor the socket inside it.
pub(super) fn sweep(daemon: &Daemon) {
    let prefix = format!("desi-gpu-map-mps.{}.", daemon.uid);
    let Ok(entries) = std::fs::read_dir(&daemon.base) else {
        return;
    };
    let stale: Vec<(PathBuf, String)> = entries
        .take(MOST_SWEPT * 16)
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let stem = keepers_stem(e.file_name().to_str()?, &prefix)?;
            Some((e.path(), stem))
        })
        .filter(|(dir, _)| ours(dir, daemon.uid))
        .take(MOST_SWEPT)
        .collect();
    if stale.is_empty() {
        return;
    }
    let bound = bound_names();
    for (dir, stem) in stale {
        let socket = dir.join(SOCKET).display().to_string();
        if !bound.contains(&format!("@{stem}")) && !bound.contains(&socket) {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The stem (the socket's name) of a keeper directory's `name` under
/// `prefix`: the name less its random part, ending in [`KEEPER_MARK`].
fn keepers_stem(name: &str, prefix: &str) -> Option<String> {
    let (stem, token) = name.rsplit_once('.')?;
    let keepers = stem.starts_with(prefix) && stem.ends_with(&format!(".{KEEPER_MARK}"));
    (keepers && u64::from_str_radix(token, 16).is_ok()).then(|| stem.to_string())
}

/// A directory (not a link) of `uid`'s.
fn ours(dir: &Path, uid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(dir).is_ok_and(|m| m.uid() == uid && m.is_dir())
}

/// The unix socket names bound on this host (`@name` for an abstract
/// one, else its path), as `/proc/net/unix` lists them.
fn bound_names() -> Vec<String> {
    let text = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    text.lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().nth(7))
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

    /// `base/NAME`, as a keeper killed at any point leaves it: empty where
    /// the daemon never started, else with its pipe directory.
    fn left(base: &Path, name: &str, started: bool) -> PathBuf {
        let dir = base.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        if started {
            std::fs::create_dir_all(dir.join("pipe")).unwrap();
            std::fs::write(dir.join("pipe/control"), "").unwrap();
        }
        dir
    }

    #[test]
    fn only_the_users_keeper_directories_whose_keeper_is_gone_are_removed() {
        let base = std::env::temp_dir().join(format!("dgm-sweep-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let d = daemon_in(&base);
        let job = format!("desi-gpu-map-mps.{}.{}", d.uid, std::process::id());
        let stale = left(&base, &format!("{job}.1.0.keeper.00000000000000aa"), true);
        // Killed while its daemon was starting: nothing inside yet.
        let empty = left(&base, &format!("{job}.4.0.keeper.00000000000000ee"), false);
        let plugins = left(&base, &format!("{job}.2.0.00000000000000bb"), true);
        let served = left(&base, &format!("{job}.3.0.keeper.00000000000000cc"), true);
        let unnamed = left(&base, &format!("{job}.5.0.keeper.00000000000000ff"), true);
        let others = left(
            &base,
            "desi-gpu-map-mps.99999.1.0.0.keeper.00000000000000dd",
            true,
        );
        // A live keeper holds the socket named after `served`'s stem, and
        // another (whose name another user took) only its own socket.
        let name = SocketAddr::from_abstract_name(format!("{job}.3.0.keeper").as_bytes()).unwrap();
        let keeper = UnixListener::bind_addr(&name).unwrap();
        let inside = UnixListener::bind(unnamed.join(SOCKET)).unwrap();
        sweep(&d);
        assert!(!stale.exists(), "a keeper's directory whose keeper is gone");
        assert!(!empty.exists(), "one left before its daemon started");
        assert!(plugins.exists(), "the plugin's, never a keeper's");
        assert!(served.exists(), "its keeper still holds the name");
        assert!(unnamed.exists(), "its keeper still holds the socket inside");
        assert!(others.exists(), "another uid's name");
        drop((keeper, inside));
        sweep(&d);
        assert!(!served.exists(), "gone once its keeper is");
        assert!(!unnamed.exists(), "gone once its keeper is");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
