//! A task about to start, as a front end that runs as the task itself
//! sees it: `desi-gpu-map exec`, and the same command as the user's own
//! task prolog (`SLURM_SCRIPT_CONTEXT=prolog_task`), which sees the task's
//! environment, ancestors and CPUs the same way. The front end gathers
//! [`TaskFacts`] and its [`Node`], calls [`decide`], and carries out the
//! one verdict it gets ([`Verdict`]): refuse, run the program unchanged, or
//! carry out the task's share of its step's plan ([`Mapping`]), by the
//! protocol every front end follows, the plugin's included
//! ([`crate::step::FrontEnd`]). Every rule of which is here; the front end
//! decides nothing.
//!
//! - `facts.rs`: what the front end gathers ([`TaskFacts`]); what the user
//!   asked ([`request`]: the option, else the method variable, as one
//!   `OptionRequest`; [`DEFAULT_METHOD`], the task's `default=`); whether
//!   the task is in an srun step; what did not arrive where srun passed
//!   only Slurm's variables ([`not_passed`]).
//! - `place.rs`: where the task runs (a launcher's rank, a task of a Flux
//!   job, a task of an srun step, or neither), its step's identity, and
//!   whether it is mapped already (by the plugin, an earlier exec, or the
//!   Flux plugin).
//! - `share.rs`: the task's ids and node, and its step's plan.
//! - `mapping.rs`: what a mapped task gets ([`Mapping`]: its plan, ids and
//!   variables; the protocol's steps for it; what is said).
//! - `verdict.rs`: the one verdict ([`Verdict`]) and what is said first
//!   ([`Start`]).
//! - `ended.rs`: a task that has ended: the keeper its task epilog tells
//!   ([`keeper_to_tell`]).
//! - `why.rs`: why a task is refused ([`WhyRefused`]), runs unchanged
//!   ([`WhyUnchanged`]), or gets less than it asked for, each reason
//!   worded once.
//! - `tests.rs`: (tests only) each rule, on the step's fakes.

mod ended;
mod facts;
mod mapping;
mod place;
mod share;
#[cfg(test)]
mod tests;
mod verdict;
mod why;

pub use crate::step::TaskIds;
pub use ended::keeper_to_tell;
pub use facts::{not_passed, request, TaskFacts, DEFAULT_METHOD};
pub use mapping::Mapping;
pub use verdict::{Start, Verdict};
pub use why::{NoMethod, NotPassed, OuterLaunch, WhyRefused, WhyUnchanged};

// Only the tests import these through the face.
#[cfg(test)]
pub(crate) use why::UnreadableIds;

use crate::launch::{launched, Launched};
use crate::step::Node;

/// Decides for the task that `node` is, from `facts`. Checked in order:
/// which launcher placed it (a launcher's rank, refused where its
/// variables cannot say where it sits; a task of a Flux job, unchanged
/// where the Flux plugin mapped it, else refused); MPS under a launcher
/// (refused);
/// outside any srun step (unchanged, or refused outside any job); this
/// step or launch mapped already (unchanged); else its step's plan.
pub fn decide(facts: &TaskFacts, node: &dyn Node) -> Start {
    let (verdict, ignored) = match launched(&facts.vars, &facts.ancestry) {
        Ok(Launched::By(launch)) => (place::for_launch(facts, node, &launch), Vec::new()),
        Ok(Launched::Flux { value, ignored }) => (place::for_flux(facts, value), ignored),
        Ok(Launched::Slurm { ignored }) => (place::for_slurm(facts, node), ignored),
        Err(why) => {
            return Start {
                outer: None,
                verdict: Verdict::Refuse(WhyRefused::Unplaced(why)),
            }
        }
    };
    let outer =
        (facts.wanted().verbose && !ignored.is_empty()).then_some(OuterLaunch { names: ignored });
    Start { outer, verdict }
}
