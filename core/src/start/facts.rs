//! What a front end running as the task gathers ([`TaskFacts`]), what
//! the user asked it for ([`request`]), and what the task's environment
//! says of its step.

use super::why::{NoMethod, NotPassed};
use crate::launch::Ancestry;
use crate::method::Method;
use crate::settings::config::Config;
use crate::settings::option::{exec_request, Choice, OptionRequest};
use crate::snapshot::{Snapshot, Var, MIRRORS};
use crate::step::{parse_step_id, resolve, special_step_name, Resolved};

/// The method a task is mapped with where neither the front end's own
/// option nor the method variable names one: the `default=` of exec and
/// the task prolog ([`Config::default`] in their [`TaskFacts::config`]),
/// as the site's is the plugin's.
pub const DEFAULT_METHOD: Choice = Choice::Map(Method::Contiguous);

/// What the user asked a front end that runs as the task: its own option
/// (`option`: exec's `--method`, already parsed by
/// [`exec_request`]), else the method variable's value (`variable`:
/// `DESI_GPU_MAP_METHOD`, parsed as `--method` is), else nothing asked
/// beside the front end's settings (its [`DEFAULT_METHOD`], its
/// `--verbose`). `help` names no method to map with.
pub fn request(
    option: Option<OptionRequest>,
    variable: Option<&str>,
) -> Result<OptionRequest, NoMethod> {
    let request = match (option, variable) {
        (Some(request), _) => request,
        (None, Some(value)) => exec_request(value).map_err(|why| NoMethod::BadVariable {
            value: value.to_string(),
            why: Box::new(why),
        })?,
        (None, None) => OptionRequest::Use {
            choice: None,
            verbose: false,
            mps: false,
        },
    };
    match request {
        OptionRequest::Help => Err(NoMethod::Help),
        request => Ok(request),
    }
}

/// What a front end running as the task gathers besides its `Node` (the
/// node's files, NVML): the task's variables, and what else it knows, each
/// read from the task's own process, so that exec and a task prolog gather
/// them alike.
#[derive(Clone)]
pub struct TaskFacts<'a> {
    /// The task's variables, read once by the front end.
    pub vars: Snapshot,
    /// What the user asked for (`--method` or its variable, [`request`]).
    pub request: OptionRequest,
    /// Map outside any Slurm job too (exec's `--allow-outside-slurm`).
    pub allow_outside: bool,
    /// The settings the step is planned with (exec's options; its
    /// `default=` is [`DEFAULT_METHOD`], its `verbose` exec's `--verbose`).
    pub config: Config,
    /// The launchers' variables as this process's ancestors had them
    /// ([`crate::launch::watched`]).
    pub ancestry: Ancestry,
    /// The pid of this process's nearest ancestor of that name (a
    /// launcher's proxy), asked only for a launcher's rank.
    pub ancestor_pid: &'a dyn Fn(&str) -> Option<u32>,
    /// The user's id, for a daemon of the step's own.
    pub uid: u32,
    /// The user's group, beside it.
    pub gid: u32,
    /// A random number for an MPS directory's name.
    pub token: u32,
}

impl TaskFacts<'_> {
    /// What the user's request comes to under the front end's settings:
    /// the one answer every rule of the task reads.
    pub(crate) fn wanted(&self) -> Resolved {
        resolve(Some(self.request), &self.config)
    }
}

/// A task of an srun step (not the batch, interactive or extern step).
pub(super) fn in_step(vars: &Snapshot) -> bool {
    vars.step_id
        .as_deref()
        .and_then(parse_step_id)
        .is_some_and(|id| special_step_name(id).is_none())
}

/// This node's id in the step (`SLURM_NODEID`), where it is one; the MPS
/// daemon's directory is named for it.
pub(super) fn node_id(vars: &Snapshot) -> Option<u32> {
    u32::try_from(vars.number(Var::NodeId)?.ok()?).ok()
}

/// Why a task that is about to be mapped got none of the variables that
/// ask for its mapping, where srun passed it only Slurm's own (no `PATH`:
/// `--export=NONE`, as every srun of an `sbatch --export=NONE` script
/// does, whatever the script exported): it is mapped with their defaults,
/// which its batch script may have asked otherwise. Said by the node's
/// first task; `None` where any of them arrived, or the environment did.
pub fn not_passed(vars: &Snapshot) -> Option<NotPassed> {
    let ours = std::iter::once(Var::Method).chain(MIRRORS);
    if vars.path.is_some() || ours.into_iter().any(|var| vars.value(var).is_some()) {
        return None;
    }
    if vars.local_id.as_deref()?.trim() != "0" {
        return None;
    }
    Some(NotPassed {
        export: vars.export_env.clone(),
    })
}
