//! A node's GPUs and the CPUs local to each ([`Topology`]), and the
//! local CPUs of a step's GPUs ([`near_cpus`]).

use crate::cpuset::CpuSet;
use crate::method::closest::Fallback;

/// One GPU and where it sits. `None`: not known (the firmware reported
/// NUMA node -1, or the driver said "N/A").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuPlace {
    pub(crate) token: String,
    /// Its NUMA node.
    pub numa: Option<u32>,
    /// The CPUs local to it.
    pub cpus: Option<CpuSet>,
}

/// A node's CPUs and its GPUs' places, in the node's GPU order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// The CPUs tasks are bound to, in order: a file's `cpus` line or a
    /// preset's physical cores, else the union of the GPUs' local CPUs.
    /// Only the `plan` preview reads it, splitting it into equal blocks.
    pub cpus: CpuSet,
    /// Each GPU's place.
    pub gpus: Vec<GpuPlace>,
}

impl Topology {
    /// The place of the GPU the step's list calls `token`.
    pub fn place(&self, token: &str) -> Option<&GpuPlace> {
        self.gpus.iter().find(|g| g.token == token)
    }

    /// The node's GPU tokens, in order.
    pub fn tokens(&self) -> Vec<String> {
        self.gpus.iter().map(|g| g.token.clone()).collect()
    }
}

pub(super) fn union_of(gpus: &[GpuPlace]) -> CpuSet {
    gpus.iter()
        .filter_map(|g| g.cpus.as_ref())
        .fold(CpuSet::new(), |all, c| all.union(c))
}

/// The local CPUs of each of the step's GPUs, in the step's order; or why
/// the step falls back to `contiguous`.
pub fn near_cpus<S: AsRef<str>>(gpus: &[S], topology: &Topology) -> Result<Vec<CpuSet>, Fallback> {
    gpus.iter()
        .map(|token| {
            let token = token.as_ref();
            let place = topology
                .place(token)
                .ok_or_else(|| Fallback::UnknownGpu(token.to_string()))?;
            match &place.cpus {
                Some(cpus) if !cpus.is_empty() => Ok(cpus.clone()),
                _ => Err(Fallback::NoAffinity(token.to_string())),
            }
        })
        .collect()
}
