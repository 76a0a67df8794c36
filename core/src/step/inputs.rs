//! One task as a front end knows it: where it runs, its ids, its
//! environment's lists, and its CPUs. Its variables are read here, once,
//! for every front end ([`TaskVars::read`]).

use super::container::Container;
use super::decision::StepPlan;
use crate::cpuset::CpuSet;
use crate::snapshot::{Snapshot, Var};

/// Where the task sits: its node-local id, its node's task count and its
/// rank (the launcher's, where one placed it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskIds {
    /// The task's id on its node.
    pub local_id: usize,
    /// Its node's task count.
    pub local_count: usize,
    /// Its rank in the step.
    pub rank: u32,
}

/// The task's own variables, as every front end reads them: the plugin in
/// `task_init`, exec and the task prolog as the task itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskVars {
    /// The node's name, for the lines the task says.
    pub node: String,
    /// `CUDA_VISIBLE_DEVICES` and `SLURMD_TRES_BIND` as the task has them.
    pub(crate) cuda: Option<String>,
    pub(crate) tres_bind: Option<String>,
    /// Slurm's CPU binding of the task, where its CPUs are needed.
    pub(crate) bind_type: Option<String>,
    pub(crate) bind_list: Option<String>,
}

impl TaskVars {
    /// Every variable of its own a task's decision reads: a front end that
    /// pays for each read (the plugin's `task_init`) takes only these
    /// ([`Snapshot::read_only`]); the CPU binding's two last. The node's
    /// name is the step's: such a front end reads it once, and hands it
    /// to [`TaskVars::read`] as `host`.
    pub const KEYS: &'static [Var] =
        &[Var::Cuda, Var::TresBind, Var::CpuBindType, Var::CpuBindList];

    /// The variables a task of a step planned as `plan` reads, of
    /// [`TaskVars::KEYS`]: Slurm's CPU binding only where it is read.
    pub fn keys(plan: &StepPlan, by_slurm: bool) -> &'static [Var] {
        let count = match by_slurm && plan.needs_task_cpus() {
            true => Self::KEYS.len(),
            false => Self::KEYS.len() - 2,
        };
        Self::KEYS.get(..count).unwrap_or(Self::KEYS)
    }

    /// The variables of a task of a step planned as `plan`, from the
    /// task's snapshot `vars`. Slurm's CPU binding is read only where the plan needs the
    /// task's CPUs and `by_slurm`: slurmstepd started the task (a
    /// launcher's rank's describes its launcher's daemon step, not it).
    /// `host`: the node's name where Slurm set none (else `?`).
    pub fn read(
        vars: &Snapshot,
        plan: &StepPlan,
        by_slurm: bool,
        host: &dyn Fn() -> Option<String>,
    ) -> TaskVars {
        let cpus = by_slurm && plan.needs_task_cpus();
        let binding = |value: &Option<String>| value.clone().filter(|_| cpus);
        TaskVars {
            node: vars
                .node_name
                .clone()
                .or_else(host)
                .unwrap_or_else(|| "?".to_string()),
            cuda: vars.cuda.clone(),
            tres_bind: vars.tres_bind.clone(),
            bind_type: binding(&vars.cpu_bind_type),
            bind_list: binding(&vars.cpu_bind_list),
        }
    }

    /// The task's inputs: these variables, its `ids`, its CPUs (`own`,
    /// and its parent slurmstepd's) and where a container plugin stands.
    pub(crate) fn inputs<'a>(
        &'a self,
        ids: &TaskIds,
        own: Option<CpuSet>,
        parent: Option<CpuSet>,
        container: Container<'a>,
    ) -> TaskInputs<'a> {
        TaskInputs {
            node: &self.node,
            local_id: ids.local_id,
            local_count: ids.local_count,
            rank: ids.rank,
            cuda: self.cuda.as_deref(),
            tres_bind: self.tres_bind.as_deref(),
            cpus: TaskCpus {
                own,
                parent,
                bind_type: self.bind_type.as_deref(),
                bind_list: self.bind_list.as_deref(),
            },
            container,
        }
    }
}

/// One task, as slurmstepd sees it in `task_init`, or as the task itself
/// sees it (`desi-gpu-map exec`).
pub struct TaskInputs<'a> {
    /// The node's name.
    pub node: &'a str,
    /// The task's id on its node.
    pub local_id: usize,
    /// Its node's task count.
    pub local_count: usize,
    /// Its rank in the step.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::Method;
    use crate::settings::config::Config;
    use crate::step::testing::*;
    use crate::step::{locate, StepPlan};

    #[test]
    fn slurms_cpu_binding_is_read_only_for_a_task_whose_cpus_are_asked_for() {
        let bind = [
            ("SLURM_CPU_BIND_TYPE", "mask_cpu:"),
            ("SLURM_CPU_BIND_LIST", "0x1"),
            ("CUDA_VISIBLE_DEVICES", "0,1"),
        ];
        let node = FakeNode::new(&bind, Ok(vec![])).vars();
        let no_host = || None;
        let config = Config::default();
        let mut map = mapped_4(&config, Method::Closest);
        let unlocated = StepPlan::Map(map.clone());
        let perlmutter = crate::topology::Preset::Perlmutter.topology();
        map.near = locate(&map.gpus, Ok(&perlmutter));
        let located = StepPlan::Map(map);
        let read = |plan: &StepPlan, by_slurm| {
            let vars = TaskVars::read(&node, plan, by_slurm, &no_host);
            (vars.bind_type.is_some(), vars.bind_list.is_some())
        };
        assert_eq!(read(&located, true), (true, true));
        assert_eq!(read(&located, false), (false, false), "a launcher's rank");
        assert_eq!(read(&unlocated, true), (false, false));
        let vars = TaskVars::read(&node, &located, true, &no_host);
        assert_eq!(
            (vars.node.as_str(), vars.cuda.as_deref()),
            ("?", Some("0,1"))
        );
        let host = || Some("h1".to_string());
        assert_eq!(TaskVars::read(&node, &located, true, &host).node, "h1");
    }

    /// What a task reads from its variables is the same from a snapshot of
    /// only [`TaskVars::keys`] as from the whole environment's.
    #[test]
    fn a_task_reads_only_its_names() {
        let all = [
            ("SLURM_CPU_BIND_TYPE", "mask_cpu:"),
            ("SLURM_CPU_BIND_LIST", "0x1"),
            ("CUDA_VISIBLE_DEVICES", "0,1"),
            ("SLURMD_TRES_BIND", "gres/gpu:closest"),
            ("SLURMD_NODENAME", "n1"),
            ("SLURM_STEP_GPUS", "0,1"),
            ("SLURM_JOB_ID", "7"),
        ];
        let node = FakeNode::new(&all, Ok(vec![]));
        let config = Config::default();
        let mut map = mapped_4(&config, Method::Closest);
        let perlmutter = crate::topology::Preset::Perlmutter.topology();
        let unlocated = StepPlan::Map(map.clone());
        map.near = locate(&map.gpus, Ok(&perlmutter));
        let located = StepPlan::Map(map);
        let no_host = || None;
        // The node's name, the step's, comes from the front end once.
        let step_node = || Some("n1".to_string());
        for (plan, by_slurm, count) in [
            (&located, true, 4),
            (&located, false, 2),
            (&unlocated, true, 2),
        ] {
            let keys = TaskVars::keys(plan, by_slurm);
            assert_eq!(keys.len(), count);
            let only = Snapshot::read_only(keys, |name| node.env.get(name).cloned());
            assert_eq!(
                TaskVars::read(&only, plan, by_slurm, &step_node),
                TaskVars::read(&node.vars(), plan, by_slurm, &no_host)
            );
            assert_eq!(only.step_gpus, None, "read only what the task reads");
        }
    }
}
