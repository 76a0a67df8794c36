//! The one verdict for a task about to start ([`Verdict`]), and what is
//! said first ([`Start`]).

use super::facts::TaskFacts;
use super::mapping::Mapping;
use super::why::{OuterLaunch, WhyRefused, WhyUnchanged};

/// What the front end does, and what it says first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    /// Said before anything else (under `verbose` only): launchers'
    /// variables that came in through srun, which count for nothing.
    pub outer: Option<OuterLaunch>,
    /// What happens to the task.
    pub verdict: Verdict,
}

/// The one verdict for a task about to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing may run, for this reason.
    Refuse(WhyRefused),
    /// The program runs as it is: why, and whether that is said (under
    /// `verbose` only).
    Unchanged {
        /// Why.
        why: WhyUnchanged,
        /// It is said.
        said: bool,
    },
    /// The task gets its share of its step's plan: mapped, or standing
    /// aside with stale flags cleared.
    Map(Box<Mapping>),
}

/// Runs unchanged, saying why under `verbose`.
pub(super) fn unchanged(why: WhyUnchanged, facts: &TaskFacts) -> Verdict {
    Verdict::Unchanged {
        why,
        said: facts.wanted().verbose,
    }
}
