//! A node's GPUs and the CPUs local to each: what `closest` matches a
//! task's CPUs against. The plugin reads it from NVML or the kernel; the
//! `desi-gpu-map plan` preview reads it from a file or a named preset.
//!
//! The file format, one GPU per line, `#` starts a comment:
//!
//! ```text
//! # TOKEN  NUMA  LOCAL-CPUS
//! 0        3     48-63,112-127
//! 1        2     32-47,96-111
//! ```
//!
//! TOKEN is the GPU as the step's list names it (an index or a UUID), NUMA
//! its NUMA node or `-` when the firmware reports none (`-1`), LOCAL-CPUS a
//! cpulist or `-` when unknown. An optional line `cpus CPULIST` gives the
//! CPUs srun binds tasks to, in order (otherwise the union of the GPUs'
//! local CPUs).

mod file;
mod kernel;
mod nvml_lines;
mod presets;
mod resolve;

pub use file::BadTopology;
pub use kernel::{from_kernel, kernel_place, locate_token};
pub use nvml_lines::{from_nvml_lines, nvml_uuids, place_uuids, sysfs_bus_id};
pub use presets::Preset;
pub use resolve::resolve_tokens;

use crate::cpuset::CpuSet;
use crate::method::closest::Fallback;

/// One GPU and where it sits. `None`: not known (the firmware reported
/// NUMA node -1, or the driver said "N/A").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuPlace {
    pub token: String,
    pub numa: Option<u32>,
    pub cpus: Option<CpuSet>,
}

/// A node's CPUs and its GPUs' places, in the node's GPU order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// The CPUs tasks are bound to, in order: a file's `cpus` line or a
    /// preset's physical cores, else the union of the GPUs' local CPUs.
    /// Only the `plan` preview reads it, splitting it into equal blocks.
    pub cpus: CpuSet,
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

fn union_of(gpus: &[GpuPlace]) -> CpuSet {
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
