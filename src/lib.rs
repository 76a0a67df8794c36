//! desi-gpu-map's core: every decision the SPANK plugin and the
//! `desi-gpu-map` command make, as plain functions over plain data.
//!
//! - [`method`]: the user's `--desi-gpu-map` value;
//! - [`client_args`]: whether srun, sbatch or salloc got the option itself;
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

pub mod bind;
pub mod client_args;
pub mod closest;
pub mod config;
pub mod cpuset;
pub mod env;
pub mod error;
pub mod gpus;
pub mod layout;
pub mod mapping;
pub mod method;
pub mod names;
pub mod nvml;
pub mod step;
pub mod topology;
pub mod vendor;

pub use error::Error;
