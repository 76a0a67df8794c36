//! The one narrow interface through which the core asks about the node it
//! plans a step for: its files and NVML. slurmstepd (the plugin), a task's own process
//! (`desi-gpu-map exec`) and the preview (`desi-gpu-map plan`) each
//! implement it; none decides anything.

use crate::error::Error;
use crate::files::Files;
use crate::settings::config::Config;
use crate::topology::Topology;

/// What NVML is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NvmlAsk {
    /// The node's GPU UUIDs, one a line.
    Uuids,
    /// Each GPU's UUID, PCI bus id, minor and local CPUs, one a line
    /// (read by [`crate::topology::from_nvml_lines`]).
    Places,
}

/// The node, as the core sees it: its files and NVML. Its variables are
/// no question the core asks: the front end hands them in, read once
/// ([`super::Snapshot`]).
pub trait Node {
    /// The node's kernel files.
    fn files(&self) -> &dyn Files;

    /// NVML's answer to `ask`, loaded from `config.nvml`, within
    /// `config.nvml_timeout`: [`Error::NvmlTimedOut`] past it, and
    /// [`Error::Discovery`] where the asking broke down.
    fn nvml(&self, ask: NvmlAsk, config: &Config) -> Result<Vec<String>, Error>;

    /// The GPUs' places where the front end was handed them rather than
    /// reading the node (the preview's topology, or that it has none);
    /// `None`: the core locates the GPUs itself.
    fn given_places(&self) -> Option<Result<Topology, NoTopology>> {
        None
    }
}

/// A front end that hands the GPUs' places was given none (`plan`
/// without `--topology`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoTopology;

impl std::fmt::Display for NoTopology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("no topology was given")
    }
}
