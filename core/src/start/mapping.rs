//! What a mapped task gets ([`Mapping`]): its ids, its step's plan, the
//! daemon it joins, the CPUs it reads, and what is said.

use super::why::UnreadableIds;
use crate::mps::{mps_line, Mps, NoMps};
use crate::step::{
    aside_line, start_daemon, task_outcome_read, Aside, Container, FrontEnd, StepPlan, TaskIds,
    TaskOutcome, TaskVars, Unmapped,
};

/// A task whose step was planned: the plan, and what the task needs to
/// get its outcome, by the protocol every front end follows
/// ([`crate::step::FrontEnd`]): the front end joins the daemon the plan
/// starts, if any ([`Mapping::start_daemon`]), and carries out
/// [`Mapping::outcome`], which reads the CPUs the plan asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// The step's plan on this node.
    pub plan: StepPlan,
    /// The task's ids, or why they cannot be read.
    pub(crate) ids: Result<TaskIds, UnreadableIds>,
    /// The task's variables (its node's name, its lists, Slurm's CPU
    /// binding of it).
    pub vars: TaskVars,
    /// A launcher's rank: no slurmstepd's mask above it tells it unbound.
    pub(crate) launched: bool,
    pub(crate) verbose: bool,
}

impl Mapping {
    /// Joins, through `front`, the daemon the plan starts for the step,
    /// where the task's ids could be read (the node's first task to get
    /// there starts it).
    pub fn start_daemon<F: FrontEnd + ?Sized>(&mut self, front: &mut F) {
        if let Ok(ids) = &self.ids {
            start_daemon(&mut self.plan, front, Some(ids.local_id));
        }
    }

    /// What the task gets, with the CPUs the plan asks for read through
    /// `front` (its own and slurmstepd's, which a launcher's rank has not).
    ///
    /// A task whose own join failed says why, whatever its local id: exec
    /// and the task prolog join the daemon task by task, so where one task
    /// runs without MPS another may be served (local task 0 says a step's
    /// reason in the outcome already, as the plugin's task 0 does).
    pub fn outcome<F: FrontEnd + ?Sized>(&self, front: &F) -> TaskOutcome {
        let stepd_above = !self.launched;
        let container = Container::None;
        let mut outcome = task_outcome_read(
            &self.plan,
            &self.ids,
            &self.vars,
            stepd_above,
            container,
            front,
        );
        if let Some(line) = self.join_failed() {
            outcome.say.insert(0, aside_line(&self.vars.node, &line));
        }
        outcome
    }

    /// What a task other than local task 0 says where its own join of the
    /// daemon failed.
    fn join_failed(&self) -> Option<String> {
        let (StepPlan::Map(map), Ok(ids)) = (&self.plan, &self.ids) else {
            return None;
        };
        match &map.mps {
            Mps::Without {
                why: NoMps::NotStarted(_),
                ..
            } if ids.local_id != 0 => mps_line(&map.mps, map.verbose),
            _ => None,
        }
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
