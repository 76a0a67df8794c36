//! What Slurm writes, read as plain data: GPU lists ([`gpus`]), its own
//! per-task GPU binding requests ([`bind`]), and the CPUs it bound each
//! task to ([`cpu_bind`]).

pub mod bind;
pub mod cpu_bind;
pub mod gpus;
