//! The protocol every front end follows, the plugin, `exec` and the task
//! prolog alike, from a step's plan to what each of its tasks gets:
//!
//! 1. decide: the step's plan ([`super::plan_step`]; exec and the task
//!    prolog ask `start::decide`, which plans through it);
//! 2. start what the plan names, the step's MPS daemon ([`start_daemon`],
//!    through the front end's [`FrontEnd::start_daemon`]);
//! 3. per task, read what it asks for: the task's variables, read in one
//!    place ([`TaskVars::read`]), and for a located `closest` step its
//!    CPUs, its own and slurmstepd's ([`FrontEnd::own_cpus`],
//!    [`FrontEnd::stepd_cpus`]);
//! 4. get the task's outcome ([`task_outcome_read`]), which the front end
//!    carries out ([`super::carry_out`]).
//!
//! The plugin takes steps 1 and 2 once per node in `user_init`, and steps
//! 3 and 4 in each task's `task_init`; exec and the task prolog take all
//! four in one pass, as the task.

use super::container::Container;
use super::decision::StepPlan;
use super::inputs::{TaskIds, TaskVars};
use super::outcome::{task_outcome, unreadable_task, TaskOutcome};
use crate::cpuset::CpuSet;
use crate::mps::{Daemon, Mps};

/// What a front end does for the core: what it alone can start and read.
pub trait FrontEnd {
    /// Why the front end could not start or join a daemon, in its own
    /// terms; the core words the step's line from it (`NoMps::NotStarted`).
    type NoDaemon: std::fmt::Display;

    /// Starts the daemon the plan names (the plugin, as the job's user), or
    /// joins the one the node's first task started (exec, through the
    /// keeper); `task`: the node-local id of the task that asks (`None`:
    /// slurmstepd, for every task). The daemon that serves, or why none
    /// does.
    fn start_daemon(
        &mut self,
        daemon: &Daemon,
        task: Option<usize>,
    ) -> Result<Daemon, Self::NoDaemon>;

    /// The CPUs the task may run on.
    fn own_cpus(&self) -> Option<CpuSet>;

    /// The CPUs of the slurmstepd above the task: an unbound task's own
    /// equal them.
    fn stepd_cpus(&self) -> Option<CpuSet>;
}

/// Step 2: starts the daemon the plan names, if any, through `front`;
/// the plan then serves the tasks through it, or runs without it.
pub fn start_daemon<F: FrontEnd + ?Sized>(plan: &mut StepPlan, front: &mut F, task: Option<usize>) {
    let StepPlan::Map(map) = plan else {
        return;
    };
    let Mps::Start(daemon) = &map.mps else {
        return;
    };
    match front.start_daemon(daemon, task) {
        Ok(daemon) => map.mps_started(daemon),
        Err(why) => map.mps_failed(why),
    }
}

/// Steps 3 and 4 for one task of a step planned as `plan`, at `ids`, with
/// its variables `vars`: its CPUs read through `front` where the plan
/// needs them (slurmstepd's only where `stepd_above` tells: not above a
/// launcher's rank), and what it gets.
pub fn task_outcome_read<E: std::fmt::Display, F: FrontEnd + ?Sized>(
    plan: &StepPlan,
    ids: &Result<TaskIds, E>,
    vars: &TaskVars,
    stepd_above: bool,
    container: Container,
    front: &F,
) -> TaskOutcome {
    let ids = match ids {
        Ok(ids) => ids,
        Err(why) => return unreadable_task(plan, &vars.node, &why.to_string()),
    };
    let needs = plan.needs_task_cpus();
    let own = needs.then(|| front.own_cpus()).flatten();
    let stepd = (needs && stepd_above).then(|| front.stepd_cpus()).flatten();
    task_outcome(plan, &vars.inputs(ids, own, stepd, container))
}
