//! Applies a step's plan to one task, in `task_init`, just before it
//! execs: the protocol's steps 3 and 4 ([`task_outcome_read`]), with
//! slurmstepd as the front end ([`Slurmstepd`]).

use crate::node::Slurmstepd;
use desi_gpu_map_core::env;
use desi_gpu_map_core::mps::Mps;
use desi_gpu_map_core::snapshot::Snapshot;
use desi_gpu_map_core::step::{
    carry_out, container_plugin_after, task_outcome_read, Container, StepPlan, TaskIds,
    TaskOutcome, TaskVars,
};
use desi_gpu_map_host::process::mount_namespace;
use slurm_spank::SpankHandle;
use std::io::Write;

/// Applies the step's plan to this task: its variables, its ids and, where
/// the plan asks, its CPUs, read by the protocol's steps 3 and 4.
/// `node`: the node's name, the step's, read once in `user_init`.
pub fn apply(spank: &SpankHandle, plan: &StepPlan, beside: &Beside, node: Option<&str>) {
    if *plan == StepPlan::Untouched {
        return;
    }
    let stepd = Slurmstepd::new(spank);
    // Only what the task's decision reads: each read searches slurmstepd's
    // environment.
    let keys = TaskVars::keys(plan, true);
    let vars = Snapshot::read_only(keys, |name| spank.getenv_lossy(name).ok().flatten());
    // The step's node name where user_init read one; else the task's.
    let node = || {
        node.map(str::to_string)
            .or_else(|| spank.getenv_lossy(env::NODE_NAME).ok().flatten())
    };
    let vars = TaskVars::read(&vars, plan, true, &node);
    let ids = task_ids(spank);
    // Where the task stands to a container plugin, for a task whose ids
    // were read (the only one that needs it).
    let container = match ids {
        Ok(_) => beside.container(plan),
        Err(_) => Container::None,
    };
    let outcome = task_outcome_read(plan, &ids, &vars, true, container, &stepd);
    apply_outcome(spank, &outcome, &vars.node);
}

/// What the plugin found of container plugins beside it (core:
/// [`Container`]): in `user_init`, and in the task before any plugin's
/// `task_init`.
#[derive(Debug, Default)]
pub struct Beside {
    /// The task's mount namespace before any plugin's `task_init`: a task
    /// in another at this plugin's was moved into a container by a plugin
    /// that ran first. (Slurm's own job container, where there is one, is
    /// joined before.)
    mount_ns: Option<u64>,
    /// A container plugin that runs after this one.
    after: Option<&'static str>,
}

impl Beside {
    pub fn found() -> Beside {
        Beside {
            mount_ns: None,
            after: container_plugin_after(&crate::copies::loaded_after()),
        }
    }

    /// Called in `task_init_privileged`, which every plugin's runs before
    /// any plugin's `task_init`.
    pub fn before_task_init(&mut self) {
        self.mount_ns = mount_namespace();
    }

    /// Where a container plugin stands to this task, which is in its own
    /// mount namespace now (after the plugins before this one ran).
    fn container(&self, plan: &StepPlan) -> Container<'static> {
        if let Some(plugin) = self.after {
            return Container::After { plugin };
        }
        let moved = self.mount_ns.is_some() && mount_namespace() != self.mount_ns;
        if !moved {
            return Container::None;
        }
        let pipe_seen = match plan {
            StepPlan::Map(map) => match &map.mps {
                Mps::Serving(d) => d.pipe().is_dir(),
                _ => true,
            },
            _ => true,
        };
        Container::Entered { pipe_seen }
    }
}

/// The task's ids, from Slurm's handle (not its variables: slurmstepd
/// knows them), or why they cannot be read.
fn task_ids(spank: &SpankHandle) -> Result<TaskIds, String> {
    let local_id = spank
        .task_id()
        .map_err(|e| format!("cannot read the local task id: {e}"))?;
    let local_count = spank
        .job_local_task_count()
        .map_err(|e| format!("cannot read the local task count: {e}"))?;
    let rank = spank
        .task_global_id()
        .map_err(|e| format!("cannot read the task rank: {e}"))?;
    Ok(TaskIds {
        local_id: usize::try_from(local_id).map_err(|_| format!("odd local task id {local_id}"))?,
        local_count: usize::try_from(local_count).unwrap_or(0),
        rank,
    })
}

/// Changes the task's environment as the core says, and prints the lines.
fn apply_outcome(spank: &SpankHandle, outcome: &TaskOutcome, node: &str) {
    let lines = carry_out(
        outcome,
        node,
        &mut |name| spank.unsetenv(name),
        &mut |name, value| spank.setenv(name, value, true),
    );
    // A stand-aside line also goes to slurmd's log, for the admin.
    for line in &lines {
        if outcome.set.is_empty() {
            log::info!("{line}");
        } else {
            log::debug!("{line}");
        }
    }
    say(&lines);
}

/// Writes to the task's stderr, which slurmstepd has already connected to
/// the user's output; a write error is ignored rather than panicking.
fn say(lines: &[String]) {
    let mut err = std::io::stderr().lock();
    for line in lines {
        let _ = writeln!(err, "{line}");
    }
}
