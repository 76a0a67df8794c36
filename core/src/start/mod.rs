//! A task about to start, as a front end that runs as the task itself
//! sees it: `desi-gpu-map exec` today, and tomorrow the user's own task
//! prolog (`SLURM_SCRIPT_CONTEXT=prolog_task`), which sees the task's
//! environment, ancestors and CPUs the same way. The front end gathers
//! [`TaskFacts`] and its [`Node`], calls [`decide`], and carries out the
//! one answer it gets ([`Answer`]): refuse, run the program unchanged, or
//! carry out the task's share of its step's plan ([`Mapping`]). Every rule
//! of which is here; the front end decides nothing.
//!
//! - `place`: where the task runs (a launcher's rank, a task of an srun
//!   step, or neither), which step it is, and whether it is mapped already;
//! - `task`: the task's ids and node, and what it gets ([`Mapping`]);
//! - `tests`: (tests only) each rule, on the step's fakes.

mod place;
mod task;
#[cfg(test)]
mod tests;

pub use task::{Mapping, TaskIds};

use crate::env;
use crate::launch::{launched, Ancestry, Launched};
use crate::method::Method;
use crate::settings::option::{exec_request, Choice, Request};
use crate::settings::site::Config;
use crate::step::Node;
use crate::text::quote;

/// What the user asked the front end for: the method, and the modifiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Asked {
    pub choice: Choice,
    pub verbose: bool,
    pub mps: bool,
}

impl Asked {
    /// What the user asked: the front end's own option (`option`: exec's
    /// `--method`, already checked), else the method variable's value
    /// (`variable`: `DESI_GPU_MAP_METHOD`, read as `--method` is), else
    /// `contiguous`; verbose where the request or the front end's own flag
    /// (`verbose`) says so. `help` names no method to map with.
    pub fn read(
        option: Option<Request>,
        variable: Option<&str>,
        verbose: bool,
    ) -> Result<Asked, String> {
        let request = match (option, variable) {
            (Some(request), _) => request,
            (None, Some(value)) => exec_request(value)
                .map_err(|e| format!("{}={}: {e}; give --method", env::METHOD, quote(value)))?,
            (None, None) => Request::Use {
                choice: None,
                verbose: false,
                mps: false,
            },
        };
        match request {
            Request::Use {
                choice,
                verbose: said,
                mps,
            } => Ok(Asked {
                choice: choice.unwrap_or(Choice::Map(Method::Contiguous)),
                verbose: said || verbose,
                mps,
            }),
            Request::Help => Err("help names no method to map with; give --method".to_string()),
        }
    }
}

/// What a front end running as the task gathers besides its [`Node`] (the
/// task's environment, the node's files, NVML): each read from the task's
/// own process, so that exec and a task prolog gather them alike.
pub struct TaskFacts<'a> {
    pub asked: Asked,
    /// Map outside any Slurm job too (exec's `--allow-outside-slurm`).
    pub allow_outside: bool,
    pub config: Config,
    /// The launchers' variables as this process's ancestors had them
    /// ([`crate::launch::watched`]).
    pub ancestry: Ancestry,
    /// The pid of this process's nearest ancestor of that name (a
    /// launcher's proxy), asked only for a launcher's rank.
    pub ancestor_pid: &'a dyn Fn(&str) -> Option<u32>,
    /// The user's ids, for a daemon of the step's own.
    pub uid: u32,
    pub gid: u32,
    /// A random number for an MPS directory's name.
    pub token: u64,
}

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

/// Decides for the task that `node` is, from `facts`. Checked in order:
/// which launcher placed it (a launcher's rank, refused where its
/// variables cannot say where it sits); MPS under a launcher (refused);
/// outside any srun step (unchanged, or refused outside any job); this
/// step or launch mapped already (unchanged); else its step's plan.
pub fn decide(facts: &TaskFacts, node: &dyn Node) -> Start {
    let env = |name: &str| node.env(name);
    let (launch, ignored) = match launched(&env, &facts.ancestry) {
        Ok(Launched::By(launch)) => (Some(launch), Vec::new()),
        Ok(Launched::Slurm { ignored }) => (None, ignored),
        Err(why) => {
            return Start {
                notes: Vec::new(),
                answer: Answer::Refuse(format!("{why}; nothing was run")),
            }
        }
    };
    let notes = match (facts.asked.verbose, ignored.is_empty()) {
        (true, false) => vec![format!(
            "{} came in through srun from an outer launch, not from a launcher of this task: \
             ignored",
            ignored.join(", ")
        )],
        _ => Vec::new(),
    };
    let answer = match launch {
        Some(launch) => place::for_launch(facts, node, &launch),
        None => place::for_slurm(facts, node),
    };
    Start { notes, answer }
}

/// Runs unchanged, saying why under `verbose`.
fn unchanged(why: String, facts: &TaskFacts) -> Answer {
    Answer::Unchanged {
        why,
        said: facts.asked.verbose,
    }
}
