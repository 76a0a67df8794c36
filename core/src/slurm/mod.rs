//! What Slurm writes, read as plain data: GPU lists ([`gpus`]), its own
//! per-task GPU binding requests (`bind`), the CPUs it bound each
//! task to ([`cpu_bind`]), and where a step's tasks sit ([`tasks`]).

pub(crate) mod bind;
pub mod cpu_bind;
pub mod gpus;
pub mod tasks;
