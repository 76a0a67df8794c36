//! One task as a front end knows it: where it runs, its ids, its
//! environment's lists, and its CPUs.

use super::container::Container;
use crate::cpuset::CpuSet;

/// One task, as slurmstepd sees it in `task_init`, or as the task itself
/// sees it (`desi-gpu-map exec`).
pub struct TaskInputs<'a> {
    pub node: &'a str,
    pub local_id: usize,
    pub local_count: usize,
    pub rank: u32,
    /// `CUDA_VISIBLE_DEVICES` in the task's environment now.
    pub cuda: Option<&'a str>,
    /// `SLURMD_TRES_BIND` in the task's environment: Slurm's own binding.
    pub tres_bind: Option<&'a str>,
    /// The task's CPUs, for `closest`.
    pub cpus: TaskCpus<'a>,
    /// A container plugin beside the plugin's, if any.
    pub container: Container<'a>,
}

/// What a task knows of CPUs in `task_init`: slurmstepd has bound it
/// already (`exec_task()` in `src/slurmd/slurmstepd/task.c` calls
/// `task_g_pre_launch()`, which applies task/affinity's binding, before
/// `spank_user_task()`).
#[derive(Debug, Clone, Default)]
pub struct TaskCpus<'a> {
    /// Its own affinity mask (`sched_getaffinity`).
    pub own: Option<CpuSet>,
    /// slurmstepd's (the plugin's task is its fork; exec looks above
    /// itself): an unbound task's own mask equals it.
    pub parent: Option<CpuSet>,
    /// `SLURM_CPU_BIND_TYPE` in its environment.
    pub bind_type: Option<&'a str>,
    /// `SLURM_CPU_BIND_LIST` in its environment: every task's CPUs.
    pub bind_list: Option<&'a str>,
}
