//! Where one task of a mapped step sits in the step's GPU lists (the
//! method's rule, or `closest`'s over the CPUs the node's tasks share), and
//! what stays visible to it: its [`Assignment`].

use super::binding::slurm_bound_task;
use super::inputs::TaskInputs;
use super::map::{GpuCpus, StepMap};
use crate::error::Error;
use crate::method::closest::{closest_position, Closeness, NodeCpus};
use crate::method::{position, visible_list, Method};

/// What one task of a mapped step gets: the one result that both the
/// plugin (`map_task`) and `desi-gpu-map plan` read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// The task's place in the step's GPU lists.
    pub position: usize,
    /// The task's GPU, as its list names it ([`StepMap::task_tokens`]).
    pub gpu: String,
    /// The step's GPUs that stay visible to the task, its own first, named
    /// as its GPU is.
    pub visible: Vec<String>,
    /// How `closest` matched it; `None` for the other methods and for a
    /// `closest` step that fell back to `contiguous`.
    pub closeness: Option<Closeness>,
}

/// The GPU one task of a mapped step gets, and what it keeps visible; or
/// why it keeps what Slurm gave it: Slurm bound it itself
/// ([`Error::SlurmBound`]), or its ids fit no position.
pub fn assign(map: &StepMap, task: &TaskInputs) -> Result<Assignment, Error> {
    let cpus = &task.cpus;
    let node = NodeCpus::for_one(cpus.bind_type, cpus.bind_list, task.local_count);
    assign_in(map, task, &node)
}

/// [`assign`], with what the node's tasks share made once for them all:
/// `node` must come from this task's own bind type, list and local count
/// (every task of a node has the same), which are not read again here.
pub fn assign_in(map: &StepMap, task: &TaskInputs, node: &NodeCpus) -> Result<Assignment, Error> {
    if let Some(why) = slurm_bound_task(map, task) {
        return Err(Error::SlurmBound(why));
    }
    let (position, closeness) = match (&map.method, &map.near) {
        (Method::Closest, GpuCpus::Located(near)) => {
            let cpus = &task.cpus;
            let ids = (task.local_id, task.local_count);
            let (at, closeness) =
                closest_position(near, cpus.own.as_ref(), cpus.parent.as_ref(), ids, node)?;
            (at, Some(closeness))
        }
        _ => {
            let method = map.method_used();
            let at = position(method, task.local_id, task.local_count, map.gpus.len())?;
            (at, None)
        }
    };
    let visible: Vec<String> = visible_list(map.task_tokens(), position, map.rendering.visible)
        .into_iter()
        .map(String::from)
        .collect();
    let gpu = visible.first().cloned().unwrap_or_default();
    Ok(Assignment {
        position,
        gpu,
        visible,
        closeness,
    })
}
