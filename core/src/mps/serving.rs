//! How a step is served on one node ([`Mps`]): by its own daemon, by one
//! it inherited, or not at all; and the names a served task gets.

use super::daemon::Daemon;
use super::no_mps::NoMps;
use crate::snapshot::Var;

/// MPS for the step on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mps {
    /// Not asked for, and no daemon's pipe inherited.
    Off,
    /// The front end starts this daemon before any task execs, then
    /// calls `crate::step::StepMap::mps_started` or
    /// `crate::step::StepMap::mps_failed`.
    Start(Box<Daemon>),
    /// The plugin's daemon answers: each task is its client.
    Serving(Box<Daemon>),
    /// Another's MPS serves the step (Slurm's `gres/mps`, or a daemon at
    /// the pipe directory the step inherited): nothing started; said once.
    /// Its tasks get `gpus`, the step's GPUs by UUID, where the daemon is
    /// one at a pipe directory (its devices may be numbered otherwise).
    Theirs {
        /// Whose daemon, in words.
        why: String,
        /// Said even without `verbose`.
        loud: bool,
        /// The step's GPUs by UUID, for a daemon at a pipe directory.
        gpus: Option<Vec<String>>,
        /// The daemon is the plugin's, of a parent task on this host: its
        /// flag stays true.
        ours: bool,
    },
    /// Asked for (or `mps=auto`), but the step runs mapped without MPS;
    /// said once, where the user asked or with `verbose`.
    Without {
        /// Why not.
        why: NoMps,
        /// Said even without `verbose` (the user asked).
        loud: bool,
    },
}

impl Mps {
    /// The step's GPUs by UUID where a daemon serving the tasks names them
    /// so: the tasks' lists then carry these, not the step's tokens.
    pub(crate) fn task_gpus(&self) -> Option<&[String]> {
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
pub(crate) struct InheritedMps {
    /// A daemon's pipe directory (`CUDA_MPS_PIPE_DIRECTORY`).
    pub(crate) pipe: Option<String>,
    /// The pipe is the plugin's, from a parent task (its flag is set).
    pub(crate) ours: bool,
    /// ... and that daemon runs on this host and has its socket there.
    pub(crate) here: bool,
    /// Which of the names the plugin writes for MPS are set.
    pub(crate) present: Vec<Var>,
}

/// The names a task served by the plugin's MPS gets.
pub(crate) const MPS_NAMES: [Var; 5] = [
    Var::Mps,
    Var::MpsHost,
    Var::MpsPipe,
    Var::MpsLog,
    Var::MpsShare,
];
