//! The lines a task says: its `verbose` report, why `closest` placed the
//! node's tasks contiguously, and why a step or task stands aside.

use super::assign::Assignment;
use super::inputs::TaskInputs;
use super::map::StepMap;
use crate::grant::Grant;
use crate::method::closest::Closeness;
use crate::mps::Mps;
use crate::slurm::gpus::join;

/// The `verbose` report: one `key=value` line per task.
pub(super) fn verbose_line(
    map: &StepMap,
    mps: &Mps,
    task: &TaskInputs,
    assignment: &Assignment,
) -> String {
    let line = format!(
        "desi-gpu-map: node={} rank={} local={}/{} gpu={} visible={} gpus={} method={} source={}",
        task.node,
        task.rank,
        task.local_id,
        task.local_count,
        if assignment.gpus.is_empty() {
            "-".to_string()
        } else {
            join(&assignment.gpus)
        },
        join(&assignment.visible),
        join(map.task_tokens()),
        map.method_used(),
        map.listed.source(),
    );
    let line = match &assignment.closeness {
        Some(c) => format!(
            "{line} cpus={} cpus_from={} gpu_cpus={} near={}",
            c.cpus.as_ref().map_or("-".to_string(), ToString::to_string),
            c.from,
            c.gpu_cpus,
            if c.matches() { "yes" } else { "no" }
        ),
        None => line,
    };
    match mps {
        Mps::Serving(d) => {
            let share = d.shares.get(assignment.position()).copied().flatten();
            let share = share.map_or("-".to_string(), |s| s.to_string());
            format!("{line} mps={} mps_share={share}", d.pipe().display())
        }
        _ => line,
    }
}

/// What local task 0 says when nearness told no GPU apart; `granted`: the
/// grant the step is, whose front end binds CPUs its own way.
pub(super) fn unbound_line(c: &Closeness, granted: Option<&Grant>) -> String {
    let cpus = c
        .cpus
        .as_ref()
        .map_or("unknown".to_string(), ToString::to_string);
    let how = granted.map_or("bind tasks to CPUs, e.g. srun --cpu-bind=cores", |g| {
        g.cpu_hint
    });
    format!(
        "closest: the tasks' CPUs ({cpus} for local task 0) are as near to every GPU as \
         to any ({how}); using contiguous"
    )
}

/// The line a task prints when its step stands aside (local task 0 only,
/// so each node says it once).
pub(crate) fn aside_line(node: &str, why: &str) -> String {
    format!("desi-gpu-map: node {node}: {why}")
}
