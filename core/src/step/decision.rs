//! What the plugin does for a step on this node ([`StepPlan`]): leave it
//! untouched, stand aside, or map it.

use super::aside::{stale_names, Aside, Unmapped};
use super::map::{GpuCpus, StepMap};
use crate::env;

/// What the plugin does for a step on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepPlan {
    /// The batch, extern and interactive steps: never touched, never told.
    Untouched,
    /// Tasks run as Slurm made them, less any flag inherited from a mapped
    /// task (a nested step must not claim a mapping it did not get).
    Unmapped(Unmapped),
    /// Each task gets its share of the step's GPUs.
    Map(StepMap),
}

impl StepPlan {
    /// Whether tasks need their CPUs read (`task_init`'s affinity call and
    /// Slurm's bind list): only a `closest` step whose GPUs were located.
    pub(crate) fn needs_task_cpus(&self) -> bool {
        matches!(self, StepPlan::Map(map) if matches!(map.near, GpuCpus::Located(_)))
    }

    /// What the plan does, in a word, for the plugin's debug log: the
    /// method used, `unmapped` or `untouched`.
    pub fn kind(&self) -> &'static str {
        match self {
            StepPlan::Untouched => "untouched",
            StepPlan::Unmapped(_) => "unmapped",
            StepPlan::Map(map) => crate::names::Named::name(map.method_used()),
        }
    }

    /// Stands aside because Slurm binds the tasks itself (`why`), saying
    /// so where the user asked for MPS.
    pub(crate) fn slurm_binds(flag: &str, why: Aside, mps: bool) -> StepPlan {
        match mps {
            true => StepPlan::aside(flag, Aside::WithoutMps(Box::new(why))),
            false => StepPlan::aside(flag, why),
        }
    }

    /// Stands aside and says why; `flag` is the flag to clear.
    pub(crate) fn aside(flag: &str, why: Aside) -> StepPlan {
        StepPlan::Unmapped(Unmapped {
            why: Some(why),
            clear: stale_names(flag),
        })
    }

    /// Stands aside silently, where the plugin was not asked to map. The
    /// method stays: `DESI_GPU_MAP_METHOD` is also what the user sets for
    /// exec and the task prolog, which may then map the step themselves.
    pub(crate) fn quiet(flag: &str) -> StepPlan {
        let mut clear = stale_names(flag);
        clear.retain(|name| name != env::METHOD);
        StepPlan::Unmapped(Unmapped { why: None, clear })
    }
}
