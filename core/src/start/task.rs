//! The task itself: its ids and node, its step's plan, and what it gets
//! once the front end has joined any MPS daemon the plan starts
//! ([`Mapping`]).

use super::place::in_step;
use super::{Answer, TaskFacts};
use crate::cpuset::CpuSet;
use crate::env;
use crate::files::hostname;
use crate::mps::{Daemon, Mps, MpsFacts};
use crate::settings::option::Request;
use crate::slurm::tasks::local_count;
use crate::step::{
    plan_step, slurm_bound_here, task_outcome, unreadable_task, Aside, Node, StepFacts,
    StepIdentity, StepPlan, TaskCpus, TaskInputs, TaskOutcome, Unmapped,
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
    pub ids: Result<TaskIds, String>,
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
    pub fn joined(&mut self, daemon: Result<Daemon, String>) {
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
            Err(why) => return unreadable_task(&self.plan, &self.node, why),
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

/// The task's share of its step (`step`), placed at `ids`; `launched`: a
/// launcher placed it.
pub(super) fn mapping(
    facts: &TaskFacts,
    node: &dyn Node,
    step: Result<StepIdentity, String>,
    ids: Result<TaskIds, String>,
    launched: bool,
) -> Answer {
    let local_tasks = ids.as_ref().ok().map(|ids| ids.local_count);
    // Slurm narrowed this task's lists itself: nothing to plan them from.
    let plan = match slurm_bound_here(node.env(env::TRES_BIND).as_deref()) {
        Some(why) => StepPlan::slurm_binds(&facts.config.flag, why, facts.asked.mps),
        None => plan(facts, node, step, local_tasks),
    };
    let name = node
        .env(env::NODE_NAME)
        // Outside a step (a launcher's rank, allowed outside Slurm): this
        // host's own name.
        .or_else(|| hostname(node.files()).filter(|_| launched || !in_step(node)))
        .unwrap_or_else(|| "?".to_string());
    // Slurm's CPU binding describes a launcher's daemon step, not its
    // ranks: a rank's own CPUs are its mask.
    let slurms = |var| node.env(var).filter(|_| !launched);
    Answer::Map(Box::new(Mapping {
        plan,
        ids,
        node: name,
        cuda: node.env(env::CUDA),
        tres_bind: node.env(env::TRES_BIND),
        bind_type: slurms(env::CPU_BIND_TYPE),
        bind_list: slurms(env::CPU_BIND_LIST),
        launched,
        verbose: facts.asked.verbose,
    }))
}

/// The step's plan, through the same core as the plugin's.
/// `local_tasks`: the node's task count, for MPS, where it could be read.
fn plan(
    facts: &TaskFacts,
    node: &dyn Node,
    step: Result<StepIdentity, String>,
    local_tasks: Option<usize>,
) -> StepPlan {
    let config = Ok(facts.config.clone());
    let asked = facts.asked;
    let request = Ok(Request::Use {
        choice: Some(asked.choice),
        verbose: asked.verbose,
        mps: asked.mps,
    });
    let facts = StepFacts {
        step,
        config: Some(&config),
        request: Some(&request),
        mps: local_tasks.and_then(|count| mps_facts(facts, node, count)),
    };
    plan_step(&facts, node)
}

/// The user and this node's `local_tasks`, for a daemon of the step's own;
/// `None` where the node's id cannot be read.
fn mps_facts(facts: &TaskFacts, node: &dyn Node, local_tasks: usize) -> Option<MpsFacts> {
    let node_id = node.env(env::NODE_ID)?.trim().parse().ok()?;
    Some(MpsFacts {
        uid: facts.uid,
        gid: facts.gid,
        local_tasks,
        node_id,
        token: facts.token,
    })
}

/// The task's node-local id, the node's task count and its rank, from the
/// variables slurmstepd set.
pub(super) fn task_ids(node: &dyn Node) -> Result<TaskIds, String> {
    let number = |name: &str| -> Result<usize, String> {
        let value = node.env(name).ok_or_else(|| format!("{name} is not set"))?;
        value
            .trim()
            .parse::<usize>()
            .map_err(|_| format!("{name}={value:?} is not a number"))
    };
    let local_id = number(env::LOCAL_ID)?;
    let node_id = number(env::NODE_ID)?;
    let counts = node
        .env(env::TASKS_PER_NODE)
        .ok_or_else(|| format!("{} is not set", env::TASKS_PER_NODE))?;
    let local_count = local_count(&counts, node_id).ok_or_else(|| {
        format!(
            "{}={counts:?} gives no task count for node {node_id}",
            env::TASKS_PER_NODE
        )
    })?;
    let rank = u32::try_from(number(env::RANK)?).map_err(|_| "rank too large".to_string())?;
    Ok(TaskIds {
        local_id,
        local_count,
        rank,
    })
}
