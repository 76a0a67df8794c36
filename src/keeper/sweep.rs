//! Directories a keeper left when Slurm killed it before it cleaned up
//! (proctrack/cgroup, on a busy node), at any point after it made one: the
//! user's next keeper on the node removes them.
//!
//! A keeper is gone when the lock it holds on its directory for its whole
//! life ([`lock`]) can be taken. Not when its sockets are missing from
//! `/proc/net/unix`: that lists only this network namespace's, and on a
//! base on a shared file system (`--mps-dir`, a `TMPDIR` there) another
//! node's keepers are in the same base too. What cannot be told (a file
//! system without locks) is kept.

use desi_gpu_map_core::mps::{Daemon, DIR_MARK, KEEPER_MARK};
use desi_gpu_map_host::mps::daemon::{lock, Lock};
use std::time::{Duration, Instant};

/// The most directories one sweep looks at.
const MOST_SWEPT: usize = 256;
/// The longest one sweep reads the base: it may be `/tmp`, where anyone may
/// make as many entries as they like, in whatever order its file system
/// reads them. A bound by time, not by a count of entries, so that a
/// crowded base delays a keeper's start by at most this, and what it left
/// is found however many entries come before it.
const SWEEP_BOUND: Duration = Duration::from_secs(1);

/// Removes the user's keeper directories in the daemon's base (named
/// `dgm-mps.UID.JOB.STEP.NODE.k.TOKEN` from the moment they
/// are made) whose keeper is gone: their lock could be taken, and is held
/// while they are removed.
pub(super) fn sweep(daemon: &Daemon) {
    let prefix = format!("{DIR_MARK}.{}.", daemon.uid);
    let Ok(entries) = std::fs::read_dir(&daemon.base) else {
        return;
    };
    let until = Instant::now() + SWEEP_BOUND;
    let named = entries
        .take_while(|_| Instant::now() < until)
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_str().is_some_and(|n| keepers(n, &prefix)))
        .take(MOST_SWEPT);
    for entry in named {
        let dir = entry.path();
        if let Lock::Held(held) = lock(&dir, daemon.uid) {
            let _ = std::fs::remove_dir_all(&dir);
            drop(held);
        }
    }
}

/// Whether `name` is a keeper's directory's under `prefix`: ending in
/// [`KEEPER_MARK`] and its random part.
fn keepers(name: &str, prefix: &str) -> bool {
    name.rsplit_once('.').is_some_and(|(stem, token)| {
        stem.starts_with(prefix)
            && stem.ends_with(&format!(".{KEEPER_MARK}"))
            && u32::from_str_radix(token, 16).is_ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use desi_gpu_map_host::mps::daemon::LOCK;
    use std::io::BufRead;
    use std::path::{Path, PathBuf};
    use std::process::{Child, Command, Stdio};

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

    /// A live keeper's stand-in: killed by its pid and reaped when dropped
    /// (a failed assertion included), and its lock is gone with it.
    struct LockHolder(Child);

    impl Drop for LockHolder {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// A live keeper of `dir`, as the sweep sees one: a process of its own
    /// (util-linux's `flock`, then `sleep`), in a network namespace of its
    /// own where `netns`, that holds the directory's lock until it is
    /// killed. Returned once it holds it. Nothing of it is in this
    /// process, whose other tests' children inherit what it holds.
    fn keeper_of(dir: &Path, netns: bool) -> LockHolder {
        let mut cmd = Command::new(if netns { "unshare" } else { "flock" });
        if netns {
            cmd.args(["--net", "flock"]);
        }
        cmd.args(["--no-fork", "--exclusive"])
            .arg(dir.join(LOCK))
            .args(["sh", "-c", "echo ready; exec sleep 600"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        let mut keeper = LockHolder(cmd.spawn().expect("run util-linux's flock and unshare"));
        let mut line = String::new();
        std::io::BufReader::new(keeper.0.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "ready\n", "the stand-in keeper of {}", dir.display());
        keeper
    }

    #[test]
    fn only_the_users_keeper_directories_whose_keeper_is_gone_are_removed() {
        let base = std::env::temp_dir().join(format!("dgm-sweep-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let d = daemon_in(&base);
        let job = format!("dgm-mps.{}.{}", d.uid, std::process::id());
        let stale = left(&base, &format!("{job}.1.0.k.000000aa"), true);
        // Killed while its daemon was starting: nothing inside yet.
        let empty = left(&base, &format!("{job}.4.0.k.000000ee"), false);
        let plugins = left(&base, &format!("{job}.2.0.000000bb"), true);
        let served = left(&base, &format!("{job}.3.0.k.000000cc"), true);
        // Its keeper runs in another network namespace (or on another node
        // of a shared base): no socket of it is seen from here.
        let apart = left(&base, &format!("{job}.5.0.k.000000ff"), true);
        let others = left(&base, "dgm-mps.99999.1.0.0.k.000000dd", true);
        let keepers = [keeper_of(&served, false), keeper_of(&apart, true)];
        sweep(&d);
        assert!(!stale.exists(), "a keeper's directory whose keeper is gone");
        assert!(!empty.exists(), "one left before its daemon started");
        assert!(plugins.exists(), "the plugin's, never a keeper's");
        assert!(served.exists(), "its keeper still holds the lock");
        assert!(apart.exists(), "its keeper in another namespace holds it");
        assert!(others.exists(), "another uid's name");
        drop(keepers);
        sweep(&d);
        assert!(!served.exists(), "gone once its keeper is");
        assert!(!apart.exists(), "gone once its keeper is");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
