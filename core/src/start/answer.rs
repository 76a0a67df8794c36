//! The one answer for a task about to start ([`Answer`]), and what is
//! said first ([`Start`]).

use super::facts::TaskFacts;
use super::mapping::Mapping;

/// What the front end does, and what it says first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    /// Lines said before anything else (under `verbose` only): launchers'
    /// variables that came in through srun, which count for nothing.
    pub notes: Vec<String>,
    pub answer: Answer,
}

/// The one answer for a task about to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Nothing may run, for this reason.
    Refuse(String),
    /// The program runs as it is: why, and whether that is said (under
    /// `verbose` only).
    Unchanged { why: String, said: bool },
    /// The task gets its share of its step's plan: mapped, or standing
    /// aside with stale flags cleared.
    Map(Box<Mapping>),
}

/// Runs unchanged, saying why under `verbose`.
pub(super) fn unchanged(why: String, facts: &TaskFacts) -> Answer {
    Answer::Unchanged {
        why,
        said: facts.asked.verbose,
    }
}
