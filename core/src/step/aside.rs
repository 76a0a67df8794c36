//! A step the plugin leaves unmapped: why it stands aside ([`Aside`], in
//! words for the user), and the variables its tasks lose.

use super::source::WhyNoList;
use crate::env;
use crate::error::Error;
use crate::runtime::Unbindable;
use crate::text::quote;
use std::fmt;

/// A step the plugin does not map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unmapped {
    /// Said once per node, by its first task; `None`: silent.
    pub(crate) why: Option<Aside>,
    /// Variables removed from every task: the flag and `DESI_GPU_MAP_*`.
    pub(crate) clear: Vec<String>,
}

/// Why a step (or, on a node, its tasks) stands aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Aside {
    /// Slurm would not say which step this is.
    UnreadableStepId(super::ids::UnreadableStep),
    /// The plugstack arguments are unusable.
    Misconfigured(Error),
    /// `init` never ran in this process.
    NotInitialised,
    /// The user's option value is unusable.
    BadRequest(Error),
    /// The step asks Slurm to bind GPUs per task (`request=value`).
    SlurmBindsStep {
        request: &'static str,
        value: String,
    },
    /// Slurm bound the node's tasks itself ([`Error::SlurmBound`]).
    SlurmBoundTasks(Error),
    /// The step has no GPU list to map.
    Missing(WhyNoList),
    /// No list the node's GPU runtimes read can be narrowed.
    Unbindable(Unbindable),
    /// Slurm binds the tasks (an aside above), and the user asked for
    /// MPS, which is started only for a step this maps: said, never
    /// dropped in silence.
    WithoutMps(Box<Aside>),
}

impl Aside {
    /// A step that its user expects to run as Slurm made it: no GPUs here,
    /// or Slurm binds each task itself.
    pub(crate) fn is_routine(&self) -> bool {
        matches!(
            self,
            Aside::SlurmBindsStep { .. }
                | Aside::SlurmBoundTasks(_)
                | Aside::Missing(
                    WhyNoList::NoGpus { .. }
                        | WhyNoList::NoneGranted(_)
                        | WhyNoList::NothingGiven { .. }
                        | WhyNoList::GivenEmpty { .. }
                )
        )
    }
}

impl fmt::Display for Aside {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Aside::UnreadableStepId(e) => {
                write!(f, "cannot read the step id ({e}); tasks left unchanged")
            }
            Aside::Misconfigured(e) => {
                write!(f, "plugin misconfigured, ask your administrators: {e}")
            }
            Aside::NotInitialised => f.write_str("plugin not initialised; tasks left unchanged"),
            Aside::BadRequest(e) => write!(f, "{e}; tasks left unchanged"),
            Aside::SlurmBindsStep { request, value } => write!(
                f,
                "Slurm binds GPUs per task in this step ({request}={}); keeping Slurm's binding",
                quote(value)
            ),
            Aside::SlurmBoundTasks(e) => e.fmt(f),
            Aside::Missing(why) => write!(f, "{why}; tasks left unchanged"),
            Aside::Unbindable(why) => write!(f, "{why}; tasks left unchanged"),
            Aside::WithoutMps(why) => write!(
                f,
                "{why}, and running without MPS, which starts only for a step whose tasks are \
                 mapped here; drop --gpus-per-task or --gpu-bind for MPS"
            ),
        }
    }
}

/// The variables a mapped task gets, which no unmapped task may keep.
pub(crate) fn stale_names(flag: &str) -> Vec<String> {
    vec![
        flag.to_string(),
        env::METHOD.to_string(),
        env::NODE_GPUS.to_string(),
        env::TASK_GPUS.to_string(),
        env::FLUX_IDS.to_string(),
        env::STEP.to_string(),
        env::MPS.to_string(),
        env::MPS_HOST.to_string(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_stand_aside_in_words() {
        let bad = crate::settings::option::bad_option("y");
        for (why, want) in [
            (
                Aside::UnreadableStepId(crate::step::UnreadableStep::Spank("no id".to_string())),
                "cannot read the step id (no id); tasks left unchanged".to_string(),
            ),
            (
                Aside::Misconfigured(Error::NvmlOff),
                "plugin misconfigured, ask your administrators: NVML discovery is off (nvml=off)"
                    .to_string(),
            ),
            (
                Aside::NotInitialised,
                "plugin not initialised; tasks left unchanged".to_string(),
            ),
            (
                Aside::BadRequest(bad.clone()),
                format!("{bad}; tasks left unchanged"),
            ),
            (
                Aside::SlurmBindsStep {
                    request: "SLURM_GPU_BIND",
                    value: "map_gpu:0,1".to_string(),
                },
                "Slurm binds GPUs per task in this step (SLURM_GPU_BIND=\"map_gpu:0,1\"); \
                 keeping Slurm's binding"
                    .to_string(),
            ),
            (
                Aside::Missing(WhyNoList::NoGpus { inherited: None }),
                "no GPUs are allocated to this step on this node; tasks left unchanged".to_string(),
            ),
        ] {
            assert_eq!(why.to_string(), want);
        }
    }
}
