//! One control daemon for one step on one node ([`Daemon`]): its
//! directory from base, stem and token.

use crate::env;
use std::path::PathBuf;
use std::time::Duration;

/// The word before the random part of the name of a directory that exec's
/// keeper made ([`Daemon::kept`]).
pub const KEEPER_MARK: &str = "keeper";

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
    pub token: u64,
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
    /// the end; the pipe and log directories are inside it.
    pub fn dir(&self) -> PathBuf {
        self.base.join(format!("{}.{:016x}", self.stem, self.token))
    }

    /// Where the daemon's socket is, which its clients are told.
    pub fn pipe(&self) -> PathBuf {
        self.dir().join("pipe")
    }

    /// The daemon's log directory, beside its pipe directory.
    pub fn log(&self) -> PathBuf {
        self.dir().join("log")
    }

    /// The same daemon as exec's keeper keeps it: its directory (and its
    /// keeper's socket) named as a keeper's, [`KEEPER_MARK`] before the
    /// random part, so that what a killed keeper left is known by its
    /// name alone.
    pub fn kept(&self) -> Daemon {
        Daemon {
            stem: format!("{}.{KEEPER_MARK}", self.stem),
            ..self.clone()
        }
    }

    /// The same daemon in a directory named with another `token`: what
    /// the front end makes where the name was taken.
    pub fn with_token(&self, token: u64) -> Daemon {
        Daemon {
            token,
            ..self.clone()
        }
    }
}
