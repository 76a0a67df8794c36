//! desi-gpu-map's core: every decision the SPANK plugin and the
//! `desi-gpu-map` command make, as plain functions over plain data.
//!
//! - [`method`]: the user's `--desi-gpu-map` value;
//! - [`bind`]: Slurm's own GPU binding requests;
//! - [`config`]: the site's plugstack arguments;
//! - [`gpus`]: GPU lists as Slurm writes them;
//! - [`mapping`]: which GPU a node-local task gets;
//! - [`step`]: the decision for a step and its tasks on one node;
//! - [`layout`]: where srun places tasks, for `desi-gpu-map plan`;
//! - [`nvml`]: the node's GPUs as NVML lists them;
//! - [`vendor`]: whose runtime reads the lists on a node, and how each is
//!   written.

pub mod bind;
pub mod config;
pub mod env;
pub mod error;
pub mod gpus;
pub mod layout;
pub mod mapping;
pub mod method;
pub mod nvml;
pub mod step;
pub mod vendor;

pub use error::Error;
