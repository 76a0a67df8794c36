//! A mapped step's record ([`StepMap`]): every part decided before it is
//! built once, and what the tasks read from it.

use super::source::Listed;
use crate::cpuset::CpuSet;
use crate::method::closest::Fallback;
use crate::method::{Method, Visible};
use crate::mps::{Daemon, InheritedMps, Mps, NoMps};
use crate::runtime::Rendering;

/// A step whose tasks get mapped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepMap {
    pub(crate) method: Method,
    pub(crate) visible: Visible,
    pub(crate) verbose: bool,
    pub(crate) flag: String,
    /// The step's GPUs on this node, in Slurm's (or NVML's) order.
    pub(crate) gpus: Vec<String>,
    /// Where `gpus` came from.
    pub(crate) listed: Listed,
    /// The other GPU lists Slurm set, each the same length as `gpus`.
    pub(crate) others: Vec<(&'static str, Vec<String>)>,
    /// Lists left alone, each with the reason, reported with `verbose`.
    pub(crate) notes: Vec<String>,
    /// How the lists are written for the node's GPU vendor.
    pub rendering: Rendering,
    /// Where the step's GPUs sit, for `closest`.
    pub(crate) near: GpuCpus,
    /// This step, `JOBID.STEPID` (`None`: Slurm gave no job id), exported
    /// so that `desi-gpu-map exec` knows the plugin mapped it.
    pub(crate) step: Option<String>,
    /// CUDA MPS for the step on this node.
    pub mps: Mps,
    /// The MPS variables the step inherited (from a parent task, the site
    /// or the user), which decide what its tasks keep.
    pub(crate) mps_inherited: InheritedMps,
}

impl StepMap {
    /// The method that places the tasks, as `DESI_GPU_MAP_METHOD` and the
    /// `verbose` line name it: `contiguous` where a `closest` step fell
    /// back (its first task on each node says why, naming both).
    pub(crate) fn method_used(&self) -> Method {
        placing(self.method, &self.near)
    }

    /// The tokens the tasks' lists carry, one per GPU of `gpus`: the GPUs'
    /// UUIDs where an MPS daemon serving the tasks names them so (the MPS
    /// server reads them whatever its own numbering), else `gpus`.
    pub(crate) fn task_tokens(&self) -> &[String] {
        self.mps.task_gpus().unwrap_or(&self.gpus)
    }

    /// `daemon` (the planned one, in the directory the front end could
    /// make) answers: each task is its client.
    pub(crate) fn mps_started(&mut self, daemon: Daemon) {
        self.mps = Mps::Serving(Box::new(daemon));
    }

    /// The daemon could not be started: the step runs mapped without it,
    /// saying so where the user asked for MPS or with `verbose`.
    pub(crate) fn mps_failed(&mut self, why: impl std::fmt::Display) {
        let why = NoMps::NotStarted(why.to_string());
        let loud = match &self.mps {
            Mps::Start(daemon) => daemon.asked,
            _ => true,
        };
        self.mps = Mps::Without { why, loud };
    }
}

/// The method that places a step planned with `method` whose GPUs sit as
/// `near` says.
pub(super) fn placing(method: Method, near: &GpuCpus) -> Method {
    match (method, near) {
        (Method::Closest, GpuCpus::Fallback(_)) => Method::Contiguous,
        (method, _) => method,
    }
}

/// The local CPUs of the step's GPUs, for `closest`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GpuCpus {
    /// Another method: not needed.
    Unused,
    /// Each step GPU's local CPUs, in the step's order.
    Located(Vec<CpuSet>),
    /// Unknown: the step maps as `contiguous`, and its first task says why.
    Fallback(Fallback),
}
