//! CUDA MPS for a mapped step on one node: whether its tasks share their
//! GPUs through a control daemon the plugin starts for the step, through
//! one that already serves them, or not at all; and what each task gets.
//! Decided from a small input of its own ([`MpsInput`], [`MpsNode`]),
//! before the step's record is built:
//!
//! - `decide`: serve or not, and why;
//! - `control`: where the control daemon and its server are;
//! - `dirs`: the step's private directory, its name and its base;
//! - `tasks`: each task's share, and the variables it gets or loses.
//!
//! The daemon's GPUs are named by UUID. Under `ConstrainDevices` the
//! daemon starts inside the step's device cgroup (tests/production.rs
//! measures it), but where devices are not constrained it reaches every
//! GPU of the node, and an index, renumbered or not, could name another
//! job's. So is a task's GPU wherever it keeps a daemon's pipe.
//!
//! The daemon's directory has a random part in its name (the front end
//! draws it, see [`MpsFacts::token`]), so that no other user can take the
//! name first, and its base must keep other users from moving it away.

mod control;
mod decide;
mod dirs;
mod tasks;
#[cfg(test)]
mod tests;

pub use control::server_path;
pub use decide::{decide, inherited};
pub use dirs::dir_name;
pub use tasks::{even_share, mps_line, mps_unset, mps_variables, tasks_per_gpu};

use crate::env;
use crate::error::Error;
use crate::files::Files;
use crate::method::Method;
use crate::runtime::Vendor;
use crate::settings::site::MpsSettings;
use std::path::PathBuf;
use std::time::Duration;

/// Volta-and-later MPS serves at most this many clients per GPU.
pub const MAX_CLIENTS: usize = 48;

/// What the front end knows of the step's user and tasks on this node;
/// only slurmstepd starts daemons, so only the plugin gives these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MpsFacts {
    pub uid: u32,
    pub gid: u32,
    pub local_tasks: usize,
    /// The node's place in the step (`S_JOB_NODEID`).
    pub node_id: u32,
    /// A random number for the directory's name, drawn by the front end
    /// (which draws another where the name is taken).
    pub token: u64,
}

/// What MPS is decided from: the parts of a mapped step that bear on it.
pub struct MpsInput<'a> {
    /// The user asked for MPS (`mps`), not only the site's `mps=auto`.
    pub asked: bool,
    pub settings: &'a MpsSettings,
    /// How long the daemon's start and its stop may each wait
    /// (`nvml_timeout`).
    pub timeout: Duration,
    /// The step's GPUs on this node, as listed.
    pub gpus: &'a [String],
    /// Slurm's own list (`SLURM_STEP_GPUS`), which tells absolute indices
    /// from renumbered ones; `None` where NVML listed the GPUs.
    pub step_gpus: Option<&'a [String]>,
    /// The method that places the tasks, which counts them per GPU.
    pub method: Method,
    pub vendor: Vendor,
    /// The step, `JOBID.STEPID`, which names the daemon's directory.
    pub step: Option<&'a str>,
    /// `None`: the front end starts no daemons.
    pub facts: Option<MpsFacts>,
}

/// What MPS asks of the node: its environment, its files, and NVML's
/// place lines (for the GPUs' UUIDs, asked only where needed).
pub struct MpsNode<'a> {
    pub env: &'a dyn Fn(&str) -> Option<String>,
    pub files: &'a dyn Files,
    pub places: &'a dyn Fn() -> Result<Vec<String>, Error>,
}

/// MPS for the step on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mps {
    /// Not asked for, and no daemon's pipe inherited.
    Off,
    /// The front end starts this daemon before any task execs, then
    /// calls [`crate::step::StepMap::mps_started`] or
    /// [`crate::step::StepMap::mps_failed`].
    Start(Box<Daemon>),
    /// The plugin's daemon answers: each task is its client.
    Serving(Box<Daemon>),
    /// Another's MPS serves the step (Slurm's `gres/mps`, or a daemon at
    /// the pipe directory the step inherited): nothing started; said once.
    /// Its tasks get `gpus`, the step's GPUs by UUID, where the daemon is
    /// one at a pipe directory (its devices may be numbered otherwise).
    Theirs {
        why: String,
        loud: bool,
        gpus: Option<Vec<String>>,
        /// The daemon is the plugin's, of a parent task on this host: its
        /// flag stays true.
        ours: bool,
    },
    /// Asked for (or `mps=auto`), but the step runs mapped without MPS;
    /// said once, where the user asked or with `verbose`.
    Without { why: String, loud: bool },
}

impl Mps {
    /// The step's GPUs by UUID where a daemon serving the tasks names them
    /// so: the tasks' lists then carry these, not the step's tokens.
    pub fn task_gpus(&self) -> Option<&[String]> {
        match self {
            Mps::Serving(daemon) => Some(&daemon.gpus),
            Mps::Theirs {
                gpus: Some(gpus), ..
            } => Some(gpus),
            _ => None,
        }
    }
}

/// The MPS variables a step found in its environment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Inherited {
    /// A daemon's pipe directory (`CUDA_MPS_PIPE_DIRECTORY`).
    pub pipe: Option<String>,
    /// The pipe is the plugin's, from a parent task (its flag is set).
    pub ours: bool,
    /// ... and that daemon runs on this host and has its socket there.
    pub here: bool,
    /// Which of the names the plugin writes for MPS are set.
    pub present: Vec<&'static str>,
}

/// The names a task served by the plugin's MPS gets.
const MPS_NAMES: [&str; 5] = [
    env::MPS,
    env::MPS_HOST,
    env::MPS_PIPE,
    env::MPS_LOG,
    env::MPS_SHARE,
];

/// The word before the random part of the name of a directory that exec's
/// keeper made ([`Daemon::kept`]).
pub const KEEPER_MARK: &str = "keeper";

/// One control daemon for one step on one node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Daemon {
    pub control: PathBuf,
    /// Where the control daemon looks for its server (its `PATH`).
    pub path: Vec<PathBuf>,
    /// The folder the step's directory is made in, the directory's name
    /// before its random part, and that part ([`MpsFacts::token`]).
    pub base: PathBuf,
    pub stem: String,
    pub token: u64,
    /// The daemon's `CUDA_VISIBLE_DEVICES`: the step's GPUs' UUIDs, in the
    /// step's order.
    pub gpus: Vec<String>,
    pub uid: u32,
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
