//! The task itself: its ids and node, its step's plan, and what it gets
//! once the front end has joined any MPS daemon the plan starts
//! ([`Mapping`]).

use super::facts::{in_step, node_id, TaskFacts};
use super::mapping::Mapping;
use super::verdict::Verdict;
use super::why::{BadStepId, UnreadableIds};
use crate::env;
use crate::files::hostname;
use crate::mps::MpsFacts;
use crate::slurm::tasks::local_count;
use crate::snapshot::{Snapshot, Var};
use crate::step::{
    plan_step, slurm_bound_here, Node, StepFacts, StepIdentity, StepPlan, TaskIds, TaskVars,
    UnreadableStep,
};

/// The task's share of its step (`step`), placed at `ids`; `launched`: a
/// launcher placed it.
pub(super) fn mapping(
    facts: &TaskFacts,
    node: &dyn Node,
    step: Result<StepIdentity, BadStepId>,
    ids: Result<TaskIds, UnreadableIds>,
    launched: bool,
) -> Verdict {
    let vars = &facts.vars;
    let wanted = facts.wanted();
    let local_tasks = ids.as_ref().ok().map(|ids| ids.local_count);
    // Slurm narrowed this task's lists itself: nothing to plan them from.
    let plan = match slurm_bound_here(vars.tres_bind.as_deref()) {
        Some(why) => StepPlan::slurm_binds(&facts.config.flag, why, wanted.mps),
        None => plan(facts, node, step, local_tasks),
    };
    // Outside a step (a launcher's rank, allowed outside Slurm): this
    // host's own name. Slurm's CPU binding describes a launcher's daemon
    // step, not its ranks: a rank's own CPUs are its mask.
    let host = || {
        (launched || !in_step(vars))
            .then(|| hostname(node.files()))
            .flatten()
    };
    let vars = TaskVars::read(vars, &plan, !launched, &host);
    Verdict::Map(Box::new(Mapping {
        plan,
        ids,
        vars,
        launched,
        verbose: wanted.verbose,
    }))
}

/// The step's plan, through the same core as the plugin's.
/// `local_tasks`: the node's task count, for MPS, where it could be read.
fn plan(
    facts: &TaskFacts,
    node: &dyn Node,
    step: Result<StepIdentity, BadStepId>,
    local_tasks: Option<usize>,
) -> StepPlan {
    let vars = &facts.vars;
    let step = match step {
        Ok(step) => step,
        Err(why) => {
            return StepPlan::unreadable_step(UnreadableStep::NoStepId { value: why.value })
        }
    };
    // The user's request as parsed, resolved once, by `plan_step`.
    let facts = StepFacts {
        step,
        config: &facts.config,
        request: Some(facts.request),
        method_variable: None,
        vars,
        mps: local_tasks.and_then(|count| mps_facts(facts, count)),
    };
    plan_step(&facts, node)
}

/// The user and this node's `local_tasks`, for a daemon of the step's own;
/// `None` where the node's id cannot be read.
fn mps_facts(facts: &TaskFacts, local_tasks: usize) -> Option<MpsFacts> {
    let node_id = node_id(&facts.vars)?;
    Some(MpsFacts {
        uid: facts.uid,
        gid: facts.gid,
        local_tasks,
        node_id,
        token: facts.token,
        kept: true,
        dir_step: None,
    })
}

/// The task's node-local id, the node's task count and its rank, from the
/// variables slurmstepd set.
pub(super) fn task_ids(vars: &Snapshot) -> Result<TaskIds, UnreadableIds> {
    let number = |var: Var| -> Result<usize, UnreadableIds> {
        let number = vars.number(var).ok_or(UnreadableIds::NotSet(var.name()))?;
        number.map_err(|bad| UnreadableIds::NotANumber {
            name: bad.var.name(),
            value: bad.value,
        })
    };
    let local_id = number(Var::LocalId)?;
    let node_id = number(Var::NodeId)?;
    let counts = vars
        .tasks_per_node
        .clone()
        .ok_or(UnreadableIds::NotSet(env::TASKS_PER_NODE))?;
    let local_count = match local_count(&counts, node_id) {
        Some(count) => count,
        None => return Err(UnreadableIds::NoTaskCount { counts, node_id }),
    };
    let rank = u32::try_from(number(Var::Rank)?).map_err(|_| UnreadableIds::RankTooLarge)?;
    Ok(TaskIds {
        local_id,
        local_count,
        rank,
    })
}
