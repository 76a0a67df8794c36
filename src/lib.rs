//! desi-gpu-map's core: every decision the SPANK plugin and the
//! `desi-gpu-map` command make, as plain functions over plain data.
//!
//! - [`method`]: the user's `--desi-gpu-map` value;
//! - [`names`]: the names of methods and settings, defined once;
//! - [`bind`]: Slurm's own GPU binding requests;
//! - [`config`]: the site's plugstack arguments;
//! - [`gpus`]: GPU lists as Slurm writes them;
//! - [`mapping`]: which GPU a node-local task gets;
//! - [`closest`], [`cpuset`], [`topology`]: the `closest` rule, the CPU
//!   sets it compares and the node's GPU places;
//! - [`step`]: the decision for a step and its tasks on one node;
//! - [`layout`]: where srun places tasks, for `desi-gpu-map plan`;
//! - [`nvml`]: the node's GPUs as NVML lists them;
//! - [`vendor`]: whose runtime reads the lists on a node, and how each is
//!   written.

#![forbid(unsafe_code)]
// Outside tests the core never panics: errors are values (see Error).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![cfg_attr(not(test), deny(clippy::panic, clippy::indexing_slicing))]

#[cfg(feature = "cli")]
pub mod cli;
pub mod cpuset;
pub mod env;
pub mod error;
pub mod files;
pub mod host;
pub mod method;
pub mod names;
pub mod settings;
pub mod slurm;
pub mod step;
pub mod text;
pub mod topology;
pub mod vendor;

pub use error::Error;
