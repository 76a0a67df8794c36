//! What Slurm writes, read as plain data:
//!
//! - [`gpus`]: GPU lists (`CUDA_VISIBLE_DEVICES` and its kin).
//! - `bind.rs`: Slurm's own per-task GPU binding requests, by series.
//! - [`cpu_bind`]: the CPUs task/affinity bound each task to.
//! - [`tasks`]: a task's node-local id and its node's task count.

pub(crate) mod bind;
pub mod cpu_bind;
pub mod gpus;
pub mod tasks;
