//! Where one task of a mapped step sits in the step's GPU lists (the
//! method's rule, or `closest`'s over the CPUs the node's tasks share), and
//! what stays visible to it: its [`Assignment`].

use super::binding::slurm_bound_task;
use super::inputs::TaskInputs;
use super::map::{GpuCpus, StepMap};
use crate::error::Error;
use crate::method::closest::{closest_position, Closeness, NodeCpus};
use crate::method::{share, visible_list, Method, Visible};

/// What one task of a mapped step gets: the one result that both the
/// plugin (`map_task`) and `desi-gpu-map plan` read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// The task's places in the step's GPU lists, its first GPU first: one
    /// where the node's tasks are as many as its GPUs or more, else its
    /// share ([`crate::method::share`]).
    pub(crate) share: Vec<usize>,
    /// The task's GPUs, as its list names them ([`StepMap::task_tokens`]).
    pub(crate) gpus: Vec<String>,
    /// The step's GPUs that stay visible to the task, its own first, named
    /// as its GPUs are.
    pub(crate) visible: Vec<String>,
    /// How `closest` matched it; `None` for the other methods and for a
    /// `closest` step that fell back to `contiguous`.
    pub(crate) closeness: Option<Closeness>,
}

/// The GPU one task of a mapped step gets, and what it keeps visible; or
/// why it keeps what Slurm gave it: Slurm bound it itself
/// ([`Error::SlurmBound`]), or its ids fit no position.
pub fn assign(map: &StepMap, task: &TaskInputs) -> Result<Assignment, Error> {
    let cpus = &task.cpus;
    let node = NodeCpus::new(cpus.bind_type, cpus.bind_list, task.local_count).alone();
    assign_in(map, task, &node)
}

/// [`assign`], with what the node's tasks share made once for them all:
/// `node` must come from this task's own bind type, list and local count
/// (every task of a node has the same), which are not read again here.
pub(crate) fn assign_in(
    map: &StepMap,
    task: &TaskInputs,
    node: &NodeCpus,
) -> Result<Assignment, Error> {
    if let Some(why) = slurm_bound_task(map, task) {
        return Err(Error::SlurmBound(why));
    }
    let (share, closeness) = match (&map.method, &map.near) {
        (Method::Closest, GpuCpus::Located(near)) => {
            let cpus = &task.cpus;
            let ids = (task.local_id, task.local_count);
            let (at, closeness) =
                closest_position(near, cpus.own.as_ref(), cpus.parent.as_ref(), ids, node)?;
            (at, Some(closeness))
        }
        _ => {
            let method = map.method_used();
            let at = share(method, task.local_id, task.local_count, map.gpus.len())?;
            (at, None)
        }
    };
    let tokens = map.task_tokens();
    let named = |list: Vec<&str>| list.into_iter().map(String::from).collect::<Vec<_>>();
    let visible = named(visible_list(tokens, &share, map.rendering.visible));
    let gpus = named(visible_list(tokens, &share, Visible::Single));
    Ok(Assignment {
        share,
        gpus,
        visible,
        closeness,
    })
}

impl Assignment {
    /// The task's first GPU's place in the step's lists: the one a code
    /// that uses its first visible device uses.
    pub fn position(&self) -> usize {
        self.share.first().copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpuset::CpuSet;
    use crate::settings::config::Config;
    use crate::step::testing::*;
    use crate::step::*;

    #[test]
    fn an_exported_cpu_list_counts_only_where_slurm_bound_the_tasks() {
        // GPUs 0 and 1 next to CPU 1, 2 and 3 next to CPU 0; slurmstepd on
        // CPUs 0-1. The user exported a list for 8 tasks (task/none: Slurm
        // writes none, and binds no task).
        let mut map = mapped_4(&Config::default(), Method::Closest);
        let cpus = |l: &str| CpuSet::parse(l).unwrap();
        map.near = GpuCpus::Located(vec![cpus("1"), cpus("1"), cpus("0"), cpus("0")]);
        let list = "0x1,0x1,0x1,0x3,0x3,0x3,0x3,0x3";
        let gpus = |own: &dyn Fn(usize) -> CpuSet| -> Vec<String> {
            (0..8)
                .map(|l| {
                    let t = TaskInputs {
                        cpus: TaskCpus {
                            own: Some(own(l)),
                            parent: Some(cpus("0-1")),
                            bind_type: Some("mask_cpu:"),
                            bind_list: Some(list),
                        },
                        ..task(l, 8, Some("0,1,2,3"))
                    };
                    let out = map_task(&map, &t);
                    get(&out, "CUDA_VISIBLE_DEVICES").unwrap().to_string()
                })
                .collect()
        };
        // Unbound: entries 0x3 equal every task's mask, and prove nothing.
        assert_eq!(
            gpus(&|_| cpus("0-1")),
            ["0", "0", "1", "1", "2", "2", "3", "3"]
        );
        // Had Slurm bound tasks 0-2 to CPU 0 and 3-7 to both, which they
        // cannot tell from unbound: no task takes the list, each its own
        // mask (tasks 0-2 next to CPU 0, the others contiguous).
        let bound = gpus(&|l| if l < 3 { cpus("0") } else { cpus("0-1") });
        assert_eq!(bound, ["2", "3", "2", "1", "2", "2", "3", "3"]);
    }

    /// Each of `masks` (its own mask, as Slurm listed it) with slurmstepd on
    /// `stepd`, on `map`'s four GPUs: what each task gets, and where it
    /// read its CPUs.
    fn closest_tasks(map: &StepMap, masks: &[CpuSet], stepd: &CpuSet) -> Vec<Assignment> {
        let list = masks.iter().map(CpuSet::to_mask).collect::<Vec<_>>();
        let list = list.join(",");
        (0..masks.len())
            .map(|l| {
                let t = TaskInputs {
                    cpus: TaskCpus {
                        own: masks.get(l).cloned(),
                        parent: Some(stepd.clone()),
                        bind_type: Some("mask_cpu:"),
                        bind_list: Some(&list),
                    },
                    ..task(l, masks.len(), Some("0,1,2,3"))
                };
                assign(map, &t).unwrap()
            })
            .collect()
    }

    #[test]
    fn the_tasks_of_a_node_read_their_cpus_from_one_place() {
        // GPUs 0 and 1 next to CPU 0, 2 and 3 next to CPU 1; slurmstepd on
        // CPUs 0-1; `srun -n3 --cpu-bind=mask_cpu:0x2,0x3,0x1`: task 1 is
        // bound to all of slurmstepd's CPUs, which it cannot tell from
        // unbound, so no task takes the list for Slurm's.
        let mut map = mapped_4(&Config::default(), Method::Closest);
        let cpus = |l: &str| CpuSet::parse(l).unwrap();
        map.near = GpuCpus::Located(vec![cpus("0"), cpus("0"), cpus("1"), cpus("1")]);
        let got = closest_tasks(&map, &[cpus("1"), cpus("0-1"), cpus("0")], &cpus("0-1"));
        let from: Vec<&str> = got
            .iter()
            .map(|a| a.closeness.as_ref().unwrap().from)
            .collect();
        assert_eq!(from, ["own", "own", "own"]);
        // Each holds contiguous's block: every GPU is held, once.
        let gpus: Vec<String> = got.iter().map(|a| a.gpus.join(",")).collect();
        assert_eq!(gpus, ["0,1", "2", "3"]);
    }

    proptest::proptest! {
        /// What `plan` does (one [`NodeCpus`] for all of a node's tasks)
        /// gives each task what it gets deciding alone in the plugin.
        #[test]
        fn a_node_shared_binding_gives_each_task_its_own_answer(
            runs in proptest::collection::vec((0usize..128, 1usize..64), 1..40),
            unbound in proptest::collection::vec(proptest::bool::ANY, 40),
        ) {
            let mut map = mapped_4(&Config::default(), Method::Closest);
            let perlmutter = crate::topology::Preset::Perlmutter.topology();
            map.near = locate(&map.gpus, Ok(&perlmutter));
            let node = CpuSet::parse("0-127").unwrap();
            let bound: Vec<CpuSet> = runs
                .iter()
                .map(|&(first, len)| CpuSet::range(first, (first + len - 1).min(127)).unwrap())
                .collect();
            let list = bound.iter().map(CpuSet::to_mask).collect::<Vec<_>>().join(",");
            let n = bound.len();
            // Some tasks unbound (their own mask slurmstepd's): they do not
            // take the list for Slurm's.
            let inputs: Vec<TaskInputs> = (0..n)
                .map(|l| TaskInputs {
                    cpus: TaskCpus {
                        own: Some(if unbound[l] { node.clone() } else { bound[l].clone() }),
                        parent: Some(node.clone()),
                        bind_type: Some("mask_cpu:"),
                        bind_list: Some(&list),
                    },
                    ..task(l, n, Some("0,1,2,3"))
                })
                .collect();
            let shared = NodeCpus::new(Some("mask_cpu:"), Some(&list), n);
            for t in &inputs {
                proptest::prop_assert_eq!(assign_in(&map, t, &shared), assign(&map, t));
            }
        }

        /// Tasks Slurm bound anywhere, some to all of slurmstepd's CPUs:
        /// every task reads its CPUs from the same place, and fewer tasks
        /// than GPUs hold every GPU once.
        #[test]
        fn the_tasks_of_a_node_agree(
            runs in proptest::collection::vec((0usize..128, 1usize..64), 1..8),
            whole in proptest::collection::vec(proptest::bool::ANY, 8),
        ) {
            let mut map = mapped_4(&Config::default(), Method::Closest);
            let perlmutter = crate::topology::Preset::Perlmutter.topology();
            map.near = locate(&map.gpus, Ok(&perlmutter));
            let node = CpuSet::parse("0-127").unwrap();
            let masks: Vec<CpuSet> = runs
                .iter()
                .zip(&whole)
                .map(|(&(first, len), &whole)| match whole {
                    true => node.clone(),
                    false => CpuSet::range(first, (first + len - 1).min(127)).unwrap(),
                })
                .collect();
            let got = closest_tasks(&map, &masks, &node);
            let from: Vec<&str> = got.iter().map(|a| a.closeness.as_ref().unwrap().from).collect();
            proptest::prop_assert!(from.iter().all(|f| *f == from[0]), "{:?}", from);
            if masks.len() < 4 {
                let mut held: Vec<String> = got.iter().flat_map(|a| a.gpus.clone()).collect();
                held.sort();
                proptest::prop_assert_eq!(held, ["0", "1", "2", "3"]);
            }
        }
    }
}
