//! What MPS is decided from: the front end's facts, the mapped step's
//! parts, and what it asks of the node.

use super::no_mps::Whose;
use crate::error::Error;
use crate::files::Files;
use crate::method::Method;
use crate::runtime::Vendor;
use crate::settings::config::MpsSettings;
use crate::snapshot::Snapshot;
use std::time::Duration;

/// What the front end knows of the step's user and tasks on this node;
/// only slurmstepd starts daemons, so only the plugin gives these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpsFacts {
    /// The job's user.
    pub uid: u32,
    /// The job user's group.
    pub gid: u32,
    /// The step's tasks on this node.
    pub local_tasks: usize,
    /// The node's place in the step (`S_JOB_NODEID`).
    pub node_id: u32,
    /// A random number for the directory's name, drawn by the front end
    /// (which draws another where the name is taken).
    pub token: u32,
    /// The daemon is kept by exec's keeper, whose directory's name carries
    /// the keeper's mark ([`super::KeeperAddr`]); the plugin's and the
    /// Flux plugin's do not.
    pub kept: bool,
    /// The step's name in its directory's, where shorter than its tag: a
    /// Flux job's id as its tasks' `FLUX_JOB_ID` shows it (F58), which
    /// leaves room for the job's own `TMPDIR` as the base; `None`: its tag.
    pub dir_step: Option<String>,
}

/// What MPS is decided from: the parts of a mapped step that bear on it.
pub(crate) struct MpsInput<'a> {
    /// The user asked for MPS (`mps`), not only the site's `mps=auto`.
    pub(crate) asked: bool,
    pub(crate) settings: &'a MpsSettings,
    /// How long the daemon's start and its stop may each wait
    /// (`nvml_timeout`).
    pub(crate) timeout: Duration,
    /// The step's GPUs on this node, as listed.
    pub(crate) gpus: &'a [String],
    /// Slurm's own list (`SLURM_STEP_GPUS`), which tells absolute indices
    /// from renumbered ones; `None` where NVML listed the GPUs.
    pub(crate) step_gpus: Option<&'a [String]>,
    /// The method that places the tasks, which counts them per GPU.
    pub(crate) method: Method,
    pub(crate) vendor: Vendor,
    /// The step, `JOBID.STEPID`, which names the daemon's directory.
    pub(crate) step: Option<&'a str>,
    /// `None`: the front end starts no daemons.
    pub(crate) facts: Option<MpsFacts>,
    /// Whose daemon it is, as messages name it.
    pub(crate) whose: Whose,
}

/// What MPS asks of the node: its environment, its files, and NVML's
/// place lines (for the GPUs' UUIDs, asked only where needed).
pub(crate) struct MpsNode<'a> {
    pub(crate) vars: &'a Snapshot,
    pub(crate) files: &'a dyn Files,
    pub(crate) places: &'a dyn Fn() -> Result<Vec<String>, Error>,
}
