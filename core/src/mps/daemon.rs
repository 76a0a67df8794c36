//! One control daemon for one step on one node ([`Daemon`]): its
//! directory from base, stem and token; and where exec's keeper of one is
//! met ([`KeeperAddr`]).

use crate::env;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The word before the random part of the name of a directory that exec's
/// keeper made ([`KeeperAddr::of`]).
pub const KEEPER_MARK: &str = "k";

/// The keeper's socket inside its directory.
const KEEPER_SOCKET: &str = "keeper.sock";

/// One control daemon for one step on one node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Daemon {
    /// The control daemon's program (`nvidia-cuda-mps-control`).
    pub control: PathBuf,
    /// Where the control daemon looks for its server (its `PATH`).
    pub path: Vec<PathBuf>,
    /// The folder the step's directory is made in.
    pub base: PathBuf,
    /// The directory's name before its random part.
    pub stem: String,
    /// The random part (`MpsFacts::token`).
    pub token: u32,
    /// The daemon's `CUDA_VISIBLE_DEVICES`: the step's GPUs' UUIDs, in the
    /// step's order.
    pub gpus: Vec<String>,
    /// The job's user, whom the daemon runs as and serves.
    pub uid: u32,
    /// The job user's group.
    pub gid: u32,
    /// This host's name, for a nested step's [`env::MPS_HOST`] check.
    pub host: Option<String>,
    /// Each GPU's share for its clients (`mps_share=even`), in the step's order.
    pub shares: Vec<Option<u32>>,
    /// The user set `CUDA_MPS_LOG_DIRECTORY`: theirs stays.
    pub keep_log: bool,
    /// How long its start and its stop may each wait (`nvml_timeout`).
    pub timeout: Duration,
    /// The step's tasks on this node: the last one's exit stops it.
    pub local_tasks: usize,
    /// The user asked for MPS (not only `mps=auto`): a failure is said.
    pub asked: bool,
}

impl Daemon {
    /// The daemon's environment: nothing of the job's but what MPS reads,
    /// and a `PATH` that finds its server.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let path: Vec<String> = self.path.iter().map(|d| d.display().to_string()).collect();
        vec![
            (env::MPS_PIPE, self.pipe().display().to_string()),
            (env::MPS_LOG, self.log().display().to_string()),
            (env::CUDA, self.gpus.join(",")),
            ("PATH", path.join(":")),
        ]
    }

    /// The step's private directory (mode 0700, the user's), removed at
    /// the end; the pipe and log directories are inside it. Named
    /// `STEM.TOKEN`, the token in 8 hex digits: 32 random bits, which no
    /// other user can fill a base's names for, and a name taken is
    /// skipped for another.
    pub fn dir(&self) -> PathBuf {
        self.base.join(format!("{}.{:08x}", self.stem, self.token))
    }

    /// Where the daemon's socket is, which its clients are told.
    pub fn pipe(&self) -> PathBuf {
        self.dir().join("pipe")
    }

    /// The daemon's log directory, beside its pipe directory.
    pub fn log(&self) -> PathBuf {
        self.dir().join("log")
    }

    /// The same daemon in a directory named with another `token`: what
    /// the front end makes where the name was taken.
    pub fn with_token(&self, token: u32) -> Daemon {
        Daemon {
            token,
            ..self.clone()
        }
    }
}

/// Where exec's keeper of a step's daemon is met, built once from the
/// daemon a task planned (or its task epilog named) and taken by every
/// call that meets it: its abstract socket's name, and its socket inside
/// each directory it may have made. The keeper keeps the daemon in a
/// directory named as a keeper's, [`KEEPER_MARK`] before the random part,
/// so that what a killed keeper left is known by its name alone; the
/// abstract name is that directory's stem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeeperAddr {
    /// The daemon as the keeper keeps it: its stem marked.
    kept: Daemon,
}

impl KeeperAddr {
    /// The address of the keeper of `daemon` (as planned, its stem
    /// unmarked).
    pub fn of(daemon: &Daemon) -> KeeperAddr {
        KeeperAddr {
            kept: Daemon {
                stem: format!("{}.{KEEPER_MARK}", daemon.stem),
                ..daemon.clone()
            },
        }
    }

    /// The keeper's abstract socket's name (`@NAME` in messages): its
    /// directory's stem.
    pub fn name(&self) -> &str {
        &self.kept.stem
    }

    /// The daemon as the keeper keeps it, in the directory the task
    /// planned (its base and token).
    pub fn daemon(&self) -> &Daemon {
        &self.kept
    }

    /// The keeper's socket inside its directory `dir`.
    pub fn socket_in(dir: &Path) -> PathBuf {
        dir.join(KEEPER_SOCKET)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keepers_address_is_its_marked_stem_and_its_socket_in_its_directory() {
        let daemon = Daemon {
            base: PathBuf::from("/tmp"),
            stem: "dgm-mps.1000.7.0.0".to_string(),
            token: 0xab,
            ..Daemon::default()
        };
        let addr = KeeperAddr::of(&daemon);
        assert_eq!(addr.name(), "dgm-mps.1000.7.0.0.k");
        let dir = addr.daemon().dir();
        assert_eq!(dir, Path::new("/tmp/dgm-mps.1000.7.0.0.k.000000ab"));
        assert_eq!(KeeperAddr::socket_in(&dir), dir.join("keeper.sock"));
        assert_eq!(addr.daemon().base, daemon.base);
    }
}
