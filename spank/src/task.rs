//! Applies a step's plan to one task, in `task_init`, just before it execs.

use desi_gpu_map::env;
use desi_gpu_map::step::{
    aside_line, task_outcome, unreadable_task, StepPlan, TaskInputs, TaskOutcome,
};
use slurm_spank::SpankHandle;
use std::io::Write;

pub fn apply(spank: &SpankHandle, plan: &StepPlan) {
    if *plan == StepPlan::Untouched {
        return;
    }
    let node = node_name(spank);
    let outcome = match task_inputs(spank) {
        Ok(ids) => task_outcome(plan, &ids.with_node(&node)),
        Err(e) => unreadable_task(plan, &node, &e),
    };
    apply_outcome(spank, &outcome, &node);
}

/// The task's ids, read from Slurm; the node name is filled in after.
struct Ids {
    local_id: usize,
    local_count: usize,
    rank: u32,
    cuda: Option<String>,
    tres_bind: Option<String>,
}

impl Ids {
    fn with_node<'a>(&'a self, node: &'a str) -> TaskInputs<'a> {
        TaskInputs {
            node,
            local_id: self.local_id,
            local_count: self.local_count,
            rank: self.rank,
            cuda: self.cuda.as_deref(),
            tres_bind: self.tres_bind.as_deref(),
        }
    }
}

fn task_inputs(spank: &SpankHandle) -> Result<Ids, String> {
    let local_id = spank
        .task_id()
        .map_err(|e| format!("cannot read the local task id: {e}"))?;
    let local_count = spank
        .job_local_task_count()
        .map_err(|e| format!("cannot read the local task count: {e}"))?;
    let rank = spank
        .task_global_id()
        .map_err(|e| format!("cannot read the task rank: {e}"))?;
    Ok(Ids {
        local_id: usize::try_from(local_id).map_err(|_| format!("odd local task id {local_id}"))?,
        local_count: usize::try_from(local_count).unwrap_or(0),
        rank,
        cuda: spank.getenv_lossy(env::CUDA).ok().flatten(),
        tres_bind: spank.getenv_lossy(env::TRES_BIND).ok().flatten(),
    })
}

/// Removes, then sets the variables in order and prints the lines; a
/// failure stops the rest, since a half-set environment is better than a
/// wrong flag (the flag is set last).
fn apply_outcome(spank: &SpankHandle, outcome: &TaskOutcome, node: &str) {
    let mut lines = outcome.say.clone();
    for name in &outcome.unset {
        if let Err(e) = spank.unsetenv(name) {
            lines.push(aside_line(node, &format!("cannot unset {name}: {e}")));
        }
    }
    for (name, value) in &outcome.set {
        if let Err(e) = spank.setenv(name, value, true) {
            lines.push(aside_line(
                node,
                &format!("cannot set {name}: {e}; later variables not set"),
            ));
            break;
        }
    }
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

/// The node's name as Slurm knows it.
fn node_name(spank: &SpankHandle) -> String {
    spank
        .getenv_lossy("SLURMD_NODENAME")
        .ok()
        .flatten()
        .unwrap_or_else(|| "?".to_string())
}

/// Writes to the task's stderr, which slurmstepd has already connected to
/// the user's output; a write error is ignored rather than panicking.
fn say(lines: &[String]) {
    let mut err = std::io::stderr().lock();
    for line in lines {
        let _ = writeln!(err, "{line}");
    }
}
