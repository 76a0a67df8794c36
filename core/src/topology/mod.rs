//! A node's GPUs and the CPUs local to each: what `closest` matches a
//! task's CPUs against. The plugin reads it from NVML or the kernel; the
//! `desi-gpu-map plan` preview reads it from a file or a named preset.
//!
//! - `gpu_place.rs`: [`GpuPlace`], [`Topology`], [`near_cpus`].
//! - `file.rs`: the topology file, for `plan --topology`.
//! - `presets.rs`: machines whose GPU-to-CPU wiring is public ([`Preset`]).
//! - `tokens.rs`: which GPU each token of a step's list names.
//! - `kernel.rs`: the GPUs located through sysfs.
//! - `nvml_lines.rs`: the GPUs located from NVML's answer.
//! - `unlocated.rs`: why a GPU cannot be located ([`Unlocated`]).
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
mod gpu_place;
mod kernel;
mod nvml_lines;
mod presets;
mod tokens;
mod unlocated;

pub use file::BadTopology;
pub use gpu_place::{near_cpus, GpuPlace, Topology};
pub use kernel::{from_kernel, kernel_place, locate_token};
pub use nvml_lines::{from_nvml_lines, sysfs_bus_id};
pub use presets::Preset;
pub use unlocated::Unlocated;

pub(crate) use nvml_lines::{nvml_uuids, place_uuids};
pub(crate) use tokens::resolve_tokens;
