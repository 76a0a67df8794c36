//! Why a task about to start is refused ([`WhyRefused`]), runs unchanged
//! ([`WhyUnchanged`]), or is mapped with less than it asked for
//! ([`NoMethod`], [`UnreadableIds`], [`BadStepId`], [`NotPassed`]), and
//! what came in through srun for nothing ([`OuterLaunch`]): each reason
//! worded once, in its `Display`.

use crate::env;
use crate::error::Error;
use crate::launch::Refusal;
use crate::text::quote;
use std::fmt;

/// Why nothing may run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WhyRefused {
    /// A launcher's variables cannot say where this rank sits.
    Unplaced(Refusal),
    /// MPS was asked for a launcher's ranks (`launcher`: its title).
    MpsUnderLauncher {
        /// The launcher's title.
        launcher: &'static str,
    },
    /// Neither a step nor a job is set, and running outside was not
    /// allowed.
    OutsideJob,
}

impl fmt::Display for WhyRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WhyRefused::Unplaced(why) => write!(f, "{why}; nothing was run"),
            WhyRefused::MpsUnderLauncher { launcher } => write!(
                f,
                "mps is for srun's tasks, and these are {launcher}'s ranks: start the MPS daemon \
                 around the launch, or launch with srun; nothing was run"
            ),
            WhyRefused::OutsideJob => write!(
                f,
                "not inside a Slurm job (neither {} nor {} is set), so nothing was run; start \
                 it with srun, or give --allow-outside-slurm to test",
                env::STEP_ID,
                env::JOB_ID
            ),
        }
    }
}

/// Why the program runs as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WhyUnchanged {
    /// The batch, interactive or extern step (`name`), whose id the step
    /// variable reads as `value`.
    NeverMapped {
        /// The step's name.
        name: &'static str,
        /// The step variable's value.
        value: String,
    },
    /// A job (`var` is `value`) outside any srun step.
    OutsideStep {
        /// The job's variable.
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// The plugin mapped this very step.
    StepMapped,
    /// An earlier exec mapped this very launch.
    LaunchMapped,
    /// The Flux shell plugin mapped this very Flux job.
    FluxMapped,
}

impl fmt::Display for WhyUnchanged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WhyUnchanged::NeverMapped { name, value } => write!(
                f,
                "this is {name} ({}={}), which is never mapped",
                env::STEP_ID,
                value.trim()
            ),
            WhyUnchanged::OutsideStep { var, value } => write!(
                f,
                "not in an srun step ({var}={} is set, {} is not: a batch script or an \
                 allocation's shell), so nothing is mapped",
                quote(value),
                env::STEP_ID
            ),
            WhyUnchanged::StepMapped => f.write_str("this step is mapped already (by the plugin)"),
            WhyUnchanged::LaunchMapped => {
                f.write_str("this launch is mapped already (by an earlier exec)")
            }
            WhyUnchanged::FluxMapped => {
                f.write_str("this Flux job is mapped already (by the Flux shell plugin)")
            }
        }
    }
}

/// Why the user's request names no method to map with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoMethod {
    /// The method variable's `value` is refused, as `--method`'s would be.
    BadVariable {
        /// The variable's value.
        value: String,
        /// Why it is refused.
        why: Box<Error>,
    },
    /// `help` was asked for.
    Help,
}

impl fmt::Display for NoMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoMethod::BadVariable { value, why } => {
                write!(f, "{}={}: {why}; give --method", env::METHOD, quote(value))
            }
            NoMethod::Help => f.write_str("help names no method to map with; give --method"),
        }
    }
}

/// Why a task's ids cannot be read from the variables slurmstepd set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UnreadableIds {
    /// The variable is not set.
    NotSet(&'static str),
    /// The variable's `value` is not a number.
    NotANumber { name: &'static str, value: String },
    /// The step's per-node task counts (`counts`) name no count for
    /// `node_id`.
    NoTaskCount { counts: String, node_id: usize },
    /// The rank does not fit a rank's width.
    RankTooLarge,
}

impl fmt::Display for UnreadableIds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnreadableIds::NotSet(name) => write!(f, "{name} is not set"),
            UnreadableIds::NotANumber { name, value } => {
                write!(f, "{name}={value:?} is not a number")
            }
            UnreadableIds::NoTaskCount { counts, node_id } => write!(
                f,
                "{}={counts:?} gives no task count for node {node_id}",
                env::TASKS_PER_NODE
            ),
            UnreadableIds::RankTooLarge => f.write_str("rank too large"),
        }
    }
}

/// The step variable's value is no step id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BadStepId {
    pub(crate) value: String,
}

impl fmt::Display for BadStepId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}={} is not a step id",
            env::STEP_ID,
            quote(&self.value)
        )
    }
}

/// A task that got none of the variables that ask for its mapping, where
/// srun passed it only Slurm's own: `export` is `SLURM_EXPORT_ENV`'s
/// value, where set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotPassed {
    pub(crate) export: Option<String>,
}

impl fmt::Display for NotPassed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let export = match &self.export {
            Some(value) => format!("{}={}", env::EXPORT_ENV, quote(value)),
            None => "srun --export=NONE".to_string(),
        };
        write!(
            f,
            "srun passed this task only Slurm's own variables ({export}, no {}), none of {} \
             and exec's other variables: it is mapped with their defaults (contiguous, without \
             mps); pass them with srun --export=ALL (in a batch script: export {}=ALL), or by \
             value, as in srun --export=NONE,{}=roundrobin",
            env::PATH,
            env::METHOD,
            env::EXPORT_ENV,
            env::METHOD
        )
    }
}

/// A launcher's variables that came in through srun from an outer launch
/// (`names`), which count for nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OuterLaunch {
    pub(crate) names: Vec<&'static str>,
}

impl fmt::Display for OuterLaunch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} came in through srun from an outer launch, not from a launcher of this task: \
             ignored",
            self.names.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_in_words() {
        let refused = [
            (
                WhyRefused::OutsideJob,
                "not inside a Slurm job (neither SLURM_STEP_ID nor SLURM_JOB_ID is set), so \
                 nothing was run; start it with srun, or give --allow-outside-slurm to test",
            ),
            (
                WhyRefused::MpsUnderLauncher {
                    launcher: "Open MPI (mpirun, prterun)",
                },
                "mps is for srun's tasks, and these are Open MPI (mpirun, prterun)'s ranks: \
                 start the MPS daemon around the launch, or launch with srun; nothing was run",
            ),
        ];
        for (why, want) in refused {
            assert_eq!(why.to_string(), want);
        }
        let mut unchanged = vec![
            (
                WhyUnchanged::StepMapped,
                "this step is mapped already (by the plugin)".to_string(),
            ),
            (
                WhyUnchanged::LaunchMapped,
                "this launch is mapped already (by an earlier exec)".to_string(),
            ),
            (
                WhyUnchanged::FluxMapped,
                "this Flux job is mapped already (by the Flux shell plugin)".to_string(),
            ),
        ];
        for (id, name) in [
            ("4294967291", "the batch step"),
            (" -5\n", "the batch step"),
        ] {
            let why = WhyUnchanged::NeverMapped {
                name,
                value: id.to_string(),
            };
            let id = id.trim();
            let want = format!("this is {name} (SLURM_STEP_ID={id}), which is never mapped");
            unchanged.push((why, want));
        }
        for var in ["SLURM_JOB_ID", "SLURM_JOBID"] {
            let why = WhyUnchanged::OutsideStep {
                var,
                value: "7".to_string(),
            };
            let want = format!(
                "not in an srun step ({var}=\"7\" is set, SLURM_STEP_ID is not: a batch script \
                 or an allocation's shell), so nothing is mapped"
            );
            unchanged.push((why, want));
        }
        for (why, want) in unchanged {
            assert_eq!(why.to_string(), want);
        }
        assert_eq!(
            NoMethod::Help.to_string(),
            "help names no method to map with; give --method"
        );
        let bad = NoMethod::BadVariable {
            value: "x".to_string(),
            why: Box::new(Error::BadMethod {
                value: "x".to_string(),
                valid: "contiguous".to_string(),
            }),
        };
        assert_eq!(
            bad.to_string(),
            "DESI_GPU_MAP_METHOD=\"x\": invalid --method \"x\"; valid values: contiguous; give \
             --method"
        );
    }

    #[test]
    fn each_unreadable_id_in_words() {
        for (why, want) in [
            (
                UnreadableIds::NotSet("SLURM_LOCALID"),
                "SLURM_LOCALID is not set",
            ),
            (
                UnreadableIds::NotANumber {
                    name: "SLURM_NODEID",
                    value: "x".to_string(),
                },
                "SLURM_NODEID=\"x\" is not a number",
            ),
            (
                UnreadableIds::NoTaskCount {
                    counts: "4".to_string(),
                    node_id: 1,
                },
                "SLURM_STEP_TASKS_PER_NODE=\"4\" gives no task count for node 1",
            ),
            (UnreadableIds::RankTooLarge, "rank too large"),
        ] {
            assert_eq!(why.to_string(), want);
        }
        let bad = BadStepId {
            value: "x".to_string(),
        };
        assert_eq!(bad.to_string(), "SLURM_STEP_ID=\"x\" is not a step id");
    }

    #[test]
    fn what_came_in_for_nothing_in_words() {
        let outer = OuterLaunch {
            names: vec!["OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"],
        };
        assert_eq!(
            outer.to_string(),
            "OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE came in through srun from an \
             outer launch, not from a launcher of this task: ignored"
        );
        let none = NotPassed { export: None }.to_string();
        assert!(
            none.starts_with(
                "srun passed this task only Slurm's own variables (srun \
                                  --export=NONE, no PATH), none of DESI_GPU_MAP_METHOD "
            ),
            "{none}"
        );
    }
}
