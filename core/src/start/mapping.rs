//! What a mapped task gets ([`Mapping`]): its ids, its step's plan, the
//! daemon it joins, the CPUs it reads, and what is said.

use super::why::UnreadableIds;
use crate::cpuset::CpuSet;
use crate::mps::{Daemon, Mps};
use crate::step::{
    task_outcome, unreadable_task, Aside, StepPlan, TaskCpus, TaskInputs, TaskOutcome, Unmapped,
};
/// Where the task sits: its node-local id, its node's task count and its
/// rank (the launcher's, where one placed it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskIds {
    pub local_id: usize,
    pub local_count: usize,
    pub rank: u32,
}

/// A task whose step was planned: the plan, and what the task needs to
/// get its outcome. The front end joins the daemon the plan starts, if
/// any ([`Mapping::daemon_to_join`], [`Mapping::joined`]), reads the CPUs
/// asked for, and carries out [`Mapping::outcome`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub plan: StepPlan,
    /// The task's ids, or why they cannot be read.
    pub ids: Result<TaskIds, UnreadableIds>,
    /// The node's name, for the lines the task says.
    pub node: String,
    /// `CUDA_VISIBLE_DEVICES` and `SLURMD_TRES_BIND` as the task has them.
    pub cuda: Option<String>,
    pub tres_bind: Option<String>,
    /// Slurm's CPU binding of the task (`None` for a launcher's rank).
    pub bind_type: Option<String>,
    pub bind_list: Option<String>,
    /// A launcher's rank: no slurmstepd's mask above it tells it unbound.
    pub launched: bool,
    pub verbose: bool,
}

impl Mapping {
    /// The daemon the plan starts for the step, and this task's local id,
    /// where the task joins it (the node's first task to get there starts
    /// it).
    pub fn daemon_to_join(&self) -> Option<(&Daemon, usize)> {
        let StepPlan::Map(map) = &self.plan else {
            return None;
        };
        let Mps::Start(daemon) = &map.mps else {
            return None;
        };
        let ids = self.ids.as_ref().ok()?;
        Some((daemon, ids.local_id))
    }

    /// What joining the daemon came to: the daemon that answers, or why
    /// none does (the step then runs mapped without it).
    pub fn joined<E: std::fmt::Display>(&mut self, daemon: Result<Daemon, E>) {
        let StepPlan::Map(map) = &mut self.plan else {
            return;
        };
        match daemon {
            Ok(daemon) => map.mps_started(daemon),
            Err(why) => map.mps_failed(why),
        }
    }

    /// The task's own CPU mask is needed (a `closest` step's GPUs were
    /// located).
    pub fn needs_own_cpus(&self) -> bool {
        self.ids.is_ok() && self.plan.needs_task_cpus()
    }

    /// slurmstepd's mask is needed too: an unbound task's own equals it.
    /// A launcher's rank has none above it that tells.
    pub fn needs_stepd_cpus(&self) -> bool {
        self.needs_own_cpus() && !self.launched
    }

    /// What the task gets, with its own CPUs and slurmstepd's where they
    /// were needed and could be read.
    pub fn outcome(&self, own: Option<CpuSet>, stepd: Option<CpuSet>) -> TaskOutcome {
        let ids = match &self.ids {
            Ok(ids) => ids,
            Err(why) => return unreadable_task(&self.plan, &self.node, &why.to_string()),
        };
        let task = TaskInputs {
            node: &self.node,
            local_id: ids.local_id,
            local_count: ids.local_count,
            rank: ids.rank,
            cuda: self.cuda.as_deref(),
            tres_bind: self.tres_bind.as_deref(),
            cpus: TaskCpus {
                own,
                parent: stepd,
                bind_type: self.bind_type.as_deref(),
                bind_list: self.bind_list.as_deref(),
            },
            container: Default::default(),
        };
        task_outcome(&self.plan, &task)
    }

    /// The lines to say of those the outcome gave: all of them under
    /// `verbose` or where they are news; none where the step runs as its
    /// user expects (no GPUs here, or Slurm binds each task itself).
    pub fn said(&self, lines: Vec<String>) -> Vec<String> {
        match self.verbose || !routine(&self.plan) {
            true => lines,
            false => Vec::new(),
        }
    }
}

/// An unmapped step that the user expects to run unchanged (no GPUs here,
/// or Slurm binds each task itself).
fn routine(plan: &StepPlan) -> bool {
    match plan {
        StepPlan::Untouched => true,
        StepPlan::Unmapped(Unmapped { why, .. }) => why.as_ref().map_or(true, Aside::is_routine),
        StepPlan::Map(_) => false,
    }
}
