//! Where a task about to start runs: a launcher's rank, a task of a Flux
//! job, a task of an srun step, or neither (the batch, interactive or extern step, a job outside
//! any step, no job at all); which step it is ([`StepIdentity`]); and
//! whether that very step is mapped already.

use super::facts::{in_step, TaskFacts};
use super::share::{mapping, task_ids};
use super::verdict::{unchanged, Verdict};
use super::why::{BadStepId, WhyRefused, WhyUnchanged};
use crate::flux;
use crate::launch::{Launch, Refusal};
use crate::snapshot::{Snapshot, Var};
use crate::step::{parse_step_id, special_step_name, step_tag, Given, Node, StepIdentity, TaskIds};

/// A launcher's rank: its launch is its identity (no step of Slurm's),
/// its variables its place, and its GPUs what it was given.
pub(super) fn for_launch(facts: &TaskFacts, node: &dyn Node, launch: &Launch) -> Verdict {
    let vars = &facts.vars;
    if facts.wanted().mps {
        return Verdict::Refuse(WhyRefused::MpsUnderLauncher {
            launcher: launch.launcher.title,
        });
    }
    let tag = launch.tag(vars, facts.ancestor_pid);
    if mapped_already(vars, tag.as_deref()) {
        return unchanged(WhyUnchanged::LaunchMapped, facts);
    }
    let step = StepIdentity::Launch {
        tag,
        given: given(vars),
    };
    let ids = Ok(TaskIds {
        local_id: launch.local_id,
        local_count: launch.local_count,
        rank: launch.rank,
    });
    mapping(facts, node, Ok(step), ids, true)
}

/// A task of a Flux job (`value`: its `FLUX_TASK_LOCAL_ID`): Flux names
/// no per-node count, so exec cannot place it; but where the Flux shell
/// plugin mapped it, its record names this very job (`flux-JOBID.INSTANCE`,
/// from the task's `FLUX_JOB_ID` and `FLUX_URI`), and it runs unchanged,
/// as a task of a step the SPANK plugin mapped does. An outer job's record
/// (a job submitted from a mapped task, or one of an instance nested in
/// it, whose id may be the same) names another job, and counts for nothing.
pub(super) fn for_flux(facts: &TaskFacts, value: String) -> Verdict {
    let vars = &facts.vars;
    let uri = vars.flux_uri.as_deref();
    let this = vars
        .flux_job_id
        .as_deref()
        .and_then(flux::job_id)
        .map(|id| flux::tag(id, uri));
    if mapped_already(vars, this.as_deref()) {
        return unchanged(WhyUnchanged::FluxMapped, facts);
    }
    Verdict::Refuse(WhyRefused::Unplaced(Refusal::Flux { value }))
}

/// A process no launcher placed: a task of an srun step is mapped as the
/// plugin would; elsewhere it runs unchanged, or outside any job nothing
/// runs (unless allowed).
pub(super) fn for_slurm(facts: &TaskFacts, node: &dyn Node) -> Verdict {
    let vars = &facts.vars;
    match outside_step(vars, facts.allow_outside) {
        Err(why) => return Verdict::Refuse(why),
        Ok(Some(why)) => return unchanged(why, facts),
        Ok(None) => {}
    }
    // Only a task of a step can find its step recorded.
    let this = vars
        .step_id
        .as_ref()
        .and(step_id(vars).ok())
        .and_then(|id| step_tag(vars, id));
    if mapped_already(vars, this.as_deref()) {
        return unchanged(WhyUnchanged::StepMapped, facts);
    }
    // Outside any step (allowed), the step's id reads as 0, as before.
    let step = step_id(vars).map(StepIdentity::Slurm);
    mapping(facts, node, step, task_ids(vars), false)
}

/// Why the program runs unchanged where this is no task of an srun step:
/// in the batch, interactive or extern step (which the plugin never
/// touches either), or in a job outside any step (a batch script or an
/// allocation's shell: only srun steps get `SLURM_STEP_ID`). `None`: a
/// task of a step, or `allow_outside`. Outside any Slurm job, nothing may
/// run.
pub(super) fn outside_step(
    vars: &Snapshot,
    allow_outside: bool,
) -> Result<Option<WhyUnchanged>, WhyRefused> {
    if let Some(value) = vars.step_id.clone() {
        let special = parse_step_id(&value).and_then(special_step_name);
        return Ok(special.map(|name| WhyUnchanged::NeverMapped { name, value }));
    }
    if allow_outside {
        return Ok(None);
    }
    let job = [Var::JobId, Var::JobIdOld]
        .into_iter()
        .find_map(|var| vars.value(var).map(|value| (var.name(), value.to_string())));
    match job {
        Some((var, value)) => Ok(Some(WhyUnchanged::OutsideStep { var, value })),
        None => Err(WhyRefused::OutsideJob),
    }
}

/// This very step (or launch, or Flux job) is mapped already: the plugin
/// (or an earlier exec, or the Flux plugin) recorded `this` in
/// `DESI_GPU_MAP_STEP`, which it writes
/// only where it maps and removes everywhere else, whatever the site's
/// flag is called. An outer step's record names another step.
fn mapped_already(vars: &Snapshot, this: Option<&str>) -> bool {
    this.is_some() && vars.mapped_step.as_deref() == this
}

/// This step's id (0 outside a step, where that is allowed).
fn step_id(vars: &Snapshot) -> Result<u32, BadStepId> {
    let value = vars.step_id.clone().unwrap_or_else(|| "0".to_string());
    parse_step_id(&value).ok_or(BadStepId { value })
}

/// What a launcher's rank was given: in an srun step (its daemon's,
/// inside an allocation) that step's list as Slurm set it; elsewhere in a
/// job the list it inherited; outside any job that, or every GPU of the
/// node.
fn given(vars: &Snapshot) -> Option<Given> {
    let in_job = vars.job_id.is_some() || vars.job_id_old.is_some();
    match (in_step(vars), in_job) {
        (true, _) => None,
        (false, true) => Some(Given::InJob),
        (false, false) => Some(Given::OutsideJob),
    }
}
