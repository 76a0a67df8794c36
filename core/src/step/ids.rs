//! Step ids: the ones Slurm reserves (never mapped) and their names, how
//! `SLURM_STEP_ID` is read, which step a plan is for ([`StepIdentity`]:
//! Slurm's, or a launcher's), and the tag mapped tasks carry.

use super::given::Given;
use crate::snapshot::Snapshot;

/// Step ids of the batch (0xfffffffb), extern (0xfffffffc) and interactive
/// (0xfffffffa) steps, and Slurm's other reserved ids above them: never mapped.
const FIRST_SPECIAL_STEP: u32 = 0xffff_fff0;

pub(crate) fn is_special_step(step_id: u32) -> bool {
    step_id >= FIRST_SPECIAL_STEP
}

/// A step id as Slurm writes it in `SLURM_STEP_ID`: unsigned, or (26.05
/// writes the batch step's as `-5`) the same 32 bits signed.
pub(crate) fn parse_step_id(value: &str) -> Option<u32> {
    let value = value.trim();
    value
        .parse::<u32>()
        .ok()
        .or_else(|| value.parse::<i32>().ok().map(|id| id as u32))
}

/// What a special step is, in words: `the batch step`, and so on.
pub(crate) fn special_step_name(step_id: u32) -> Option<&'static str> {
    match step_id {
        0xffff_fffa => Some("the interactive step"),
        0xffff_fffb => Some("the batch step"),
        0xffff_fffc => Some("the extern step"),
        id if is_special_step(id) => Some("a step Slurm reserves"),
        _ => None,
    }
}

/// This step as mapped tasks record it in `DESI_GPU_MAP_STEP`:
/// `JOBID.STEPID` (`None`: Slurm gave no job id).
pub(crate) fn step_tag(vars: &Snapshot, step_id: u32) -> Option<String> {
    vars.job_id
        .as_ref()
        .map(|job| format!("{}.{step_id}", job.trim()))
}

/// Which step a plan is for: a step of Slurm's, or the ranks of another
/// launcher, which are no step of Slurm's and have an identity of their
/// own. Its record (`StepIdentity::record`) is what mapped tasks carry
/// in `DESI_GPU_MAP_STEP`, so that a later `exec` knows this very step
/// (or launch) is mapped already.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepIdentity {
    /// A step of Slurm's, by its id (`S_JOB_STEPID`, `SLURM_STEP_ID`).
    Slurm(u32),
    /// The ranks of one launch of `mpirun`, `mpiexec` or PALS
    /// ([`crate::launch`]).
    Launch {
        /// What tells this launch from any other (`crate::launch::Launch::tag`);
        /// `None`: nothing does, and nothing is recorded.
        tag: Option<String>,
        /// What its process was given ([`Given`]); `None`: it runs in an
        /// srun step, whose list it takes as Slurm set it.
        given: Option<Given>,
    },
}

/// Why the front end cannot say which step this is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnreadableStep {
    /// SPANK would not give `S_JOB_STEPID`: its error, in its words.
    Spank(String),
    /// The task's `SLURM_STEP_ID` (`value`) is no step id (exec, the task
    /// prolog).
    NoStepId {
        /// The variable's value.
        value: String,
    },
}

impl std::fmt::Display for UnreadableStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UnreadableStep::Spank(why) => f.write_str(why),
            UnreadableStep::NoStepId { value } => write!(
                f,
                "{}={} is not a step id",
                crate::env::STEP_ID,
                crate::text::quote(value)
            ),
        }
    }
}

impl StepIdentity {
    /// The step's record, as its mapped tasks carry it: `JOBID.STEPID` for
    /// Slurm's (`None`: Slurm gave no job id), the launch's tag for a
    /// launcher's.
    pub(crate) fn record(&self, vars: &Snapshot) -> Option<String> {
        match self {
            StepIdentity::Slurm(id) => step_tag(vars, *id),
            StepIdentity::Launch { tag, .. } => tag.clone(),
        }
    }

    /// Where no srun step placed the process, what it was given.
    pub(crate) fn given(&self) -> Option<Given> {
        match self {
            StepIdentity::Slurm(_) => None,
            StepIdentity::Launch { given, .. } => *given,
        }
    }

    /// One of the steps Slurm reserves (batch, interactive, extern, ...),
    /// which are never touched; a launch never is one.
    pub(crate) fn is_special(&self) -> bool {
        matches!(self, StepIdentity::Slurm(id) if is_special_step(*id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_ids_are_read_signed_or_unsigned() {
        assert_eq!(parse_step_id("0"), Some(0));
        assert_eq!(parse_step_id(" 4294967291"), Some(0xffff_fffb));
        assert_eq!(parse_step_id("-5"), Some(0xffff_fffb));
        assert_eq!(
            special_step_name(parse_step_id("-6").unwrap()),
            Some("the interactive step")
        );
        assert_eq!(parse_step_id("x"), None);
        assert_eq!(parse_step_id("4294967296"), None);
    }

    #[test]
    fn a_step_records_its_tag_and_a_launch_its_own() {
        use crate::step::testing::FakeNode;
        let node = FakeNode::new(&[("SLURM_JOB_ID", " 7 ")], Ok(vec![])).vars();
        assert_eq!(StepIdentity::Slurm(3).record(&node).as_deref(), Some("7.3"));
        assert!(StepIdentity::Slurm(0xffff_fffb).is_special());
        assert_eq!(StepIdentity::Slurm(3).given(), None);
        let launch = StepIdentity::Launch {
            tag: Some("pals:77".to_string()),
            given: Some(Given::InJob),
        };
        assert_eq!(launch.record(&node).as_deref(), Some("pals:77"));
        assert_eq!(launch.given(), Some(Given::InJob));
        assert!(!launch.is_special());
        let untagged = StepIdentity::Launch {
            tag: None,
            given: None,
        };
        assert_eq!(untagged.record(&node), None);
        let no_job = FakeNode::new(&[], Ok(vec![])).vars();
        assert_eq!(StepIdentity::Slurm(3).record(&no_job), None);
    }
}
