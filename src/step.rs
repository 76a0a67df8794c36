//! The decision for one job step on one node, and for each of its tasks.
//!
//! Pure: the plugin hands in what Slurm told it, and applies what comes back.

use crate::bind::{parse_gpu_bind, GpuBind};
use crate::config::{Config, Visible};
use crate::env;
use crate::error::{quote, Error};
use crate::gpus::{join, parse_gpu_list};
use crate::mapping::{position, visible_list};
use crate::method::{Choice, Method, Request};

/// Step ids of the batch (0xfffffffb), extern (0xfffffffc) and interactive
/// (0xfffffffa) steps, and Slurm's other reserved ids above them: never mapped.
const FIRST_SPECIAL_STEP: u32 = 0xffff_fff0;

pub fn is_special_step(step_id: u32) -> bool {
    step_id >= FIRST_SPECIAL_STEP
}

/// The method and verbosity for a step: the user's option over the site's.
pub fn resolve(request: Option<Request>, config: &Config) -> (Choice, bool) {
    match request {
        Some(Request::Use {
            choice: Some(choice),
            verbose,
        }) => (choice, verbose || config.verbose),
        Some(Request::Use { choice: None, .. }) => (config.default, true),
        // Help never reaches a node: srun, sbatch and salloc exit on it.
        Some(Request::Help) | None => (config.default, config.verbose),
    }
}

/// What the plugin does for a step on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepPlan {
    /// Nothing asked, or a step never mapped: say nothing, change nothing.
    Idle,
    /// Leave every task as Slurm made it, and say why once.
    Aside(String),
    Map(StepMap),
}

/// A step whose tasks get mapped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepMap {
    pub method: Method,
    pub visible: Visible,
    pub verbose: bool,
    pub flag: String,
    /// The step's GPUs on this node, in Slurm's (or NVML's) order.
    pub gpus: Vec<String>,
    /// `CUDA_VISIBLE_DEVICES` as the step had it; `None` when the list came
    /// from NVML. A task whose value differs was narrowed by Slurm itself.
    pub cuda: Option<String>,
    /// The other GPU lists Slurm set, each the same length as `gpus`.
    pub others: Vec<(&'static str, Vec<String>)>,
    /// Lists left alone, each with the reason, reported with `verbose`.
    pub notes: Vec<String>,
}

/// What the step looks like on this node.
pub struct StepInputs<'a> {
    pub step_id: u32,
    pub choice: Choice,
    pub verbose: bool,
    pub config: &'a Config,
    /// True when the job holds every CPU of the node, so every GPU too.
    pub whole_node: bool,
}

/// Decides for a step. `env` reads the step's environment; `nvml` lists the
/// node's GPU UUIDs and is called only when Slurm names no GPU list.
pub fn plan_step(
    step: &StepInputs,
    env: &dyn Fn(&str) -> Option<String>,
    nvml: &mut dyn FnMut() -> Result<Vec<String>, Error>,
) -> StepPlan {
    let method = match step.choice {
        _ if is_special_step(step.step_id) => return StepPlan::Idle,
        Choice::Off => return StepPlan::Idle,
        Choice::Map(method) => method,
    };
    if let Some(why) = slurm_binds_per_task(env) {
        return StepPlan::Aside(format!(
            "Slurm binds GPUs per task in this step ({why}); keeping Slurm's binding"
        ));
    }
    let listed = match env(env::CUDA) {
        Some(cuda) => from_slurm(&cuda, env),
        None => from_nvml(step, env, nvml),
    };
    match listed {
        Ok((gpus, cuda)) => {
            let (others, notes) = other_lists(env, gpus.len());
            StepPlan::Map(StepMap {
                method,
                visible: step.config.visible,
                verbose: step.verbose,
                flag: step.config.flag.clone(),
                others,
                notes,
                gpus,
                cuda,
            })
        }
        Err(why) => StepPlan::Aside(format!("{why}; tasks left unchanged")),
    }
}

/// Names the request under which Slurm already narrows GPUs per task.
/// `--gpus-per-task` and `--ntasks-per-gpu` always bind; a bind request
/// binds unless it is `none` (see [`crate::bind`]).
fn slurm_binds_per_task(env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    for name in env::PER_TASK_REQUESTS {
        let Some(value) = env(name) else { continue };
        let binds = !env::BIND_REQUESTS.contains(&name)
            || matches!(parse_gpu_bind(&value), GpuBind::PerTask(_));
        if binds {
            return Some(format!("{name}={}", quote(&value)));
        }
    }
    None
}

type Listed = Result<(Vec<String>, Option<String>), String>;

/// The GPU list from `CUDA_VISIBLE_DEVICES`, trusted only when Slurm
/// allocated GPUs to the step: otherwise it was inherited from the user.
fn from_slurm(cuda: &str, env: &dyn Fn(&str) -> Option<String>) -> Listed {
    let on_node = env(env::GPUS_ON_NODE);
    if on_node.is_none() && env(env::STEP_GPUS).is_none() {
        return Err(format!(
            "no GPUs are allocated to this step on this node ({} and {} unset; \
             {}={} was inherited, not set by Slurm)",
            env::GPUS_ON_NODE,
            env::STEP_GPUS,
            env::CUDA,
            quote(cuda)
        ));
    }
    let gpus = parse_gpu_list(cuda).map_err(|e| format!("{} from Slurm: {e}", env::CUDA))?;
    if let Some(count) = on_node
        .as_deref()
        .and_then(|v| v.trim().parse::<usize>().ok())
    {
        if count != gpus.len() {
            return Err(format!(
                "{}={} lists {} GPUs but {}={count}",
                env::CUDA,
                quote(cuda),
                gpus.len(),
                env::GPUS_ON_NODE
            ));
        }
    }
    Ok((gpus, Some(cuda.to_string())))
}

/// The GPU list from NVML, for steps where Slurm set only a count
/// (`--gpu-bind=none`). Used only when the count proves the list is the
/// step's: it matches `SLURM_GPUS_ON_NODE`, or the job holds the node.
fn from_nvml(
    step: &StepInputs,
    env: &dyn Fn(&str) -> Option<String>,
    nvml: &mut dyn FnMut() -> Result<Vec<String>, Error>,
) -> Listed {
    let on_node = match env(env::GPUS_ON_NODE) {
        Some(v) => match v.trim().parse::<usize>() {
            Ok(0) => return Err("no GPUs are allocated to this step on this node".to_string()),
            Ok(count) => Some(count),
            Err(_) => {
                return Err(format!(
                    "{}={} is not a count",
                    env::GPUS_ON_NODE,
                    quote(&v)
                ))
            }
        },
        None if step.whole_node => None,
        None => return Err("no GPUs are allocated to this step on this node".to_string()),
    };
    if step.config.nvml == crate::config::NvmlSource::Off {
        return Err(format!(
            "Slurm set no {} and NVML discovery is off (nvml=off)",
            env::CUDA
        ));
    }
    let uuids = nvml().map_err(|e| format!("Slurm set no {}, and {e}", env::CUDA))?;
    match on_node {
        _ if uuids.is_empty() => Err("NVML finds no GPU on this node".to_string()),
        Some(count) if count != uuids.len() => Err(format!(
            "NVML finds {} GPUs but {}={count}, so the step's GPUs cannot be told apart",
            uuids.len(),
            env::GPUS_ON_NODE
        )),
        _ => Ok((uuids, None)),
    }
}

/// The other GPU lists Slurm set that can be narrowed alongside
/// `CUDA_VISIBLE_DEVICES` (those with `count` entries), and a note for each
/// one left as is.
type OtherLists = (Vec<(&'static str, Vec<String>)>, Vec<String>);

fn other_lists(env: &dyn Fn(&str) -> Option<String>, count: usize) -> OtherLists {
    let (mut others, mut notes) = (Vec::new(), Vec::new());
    for name in env::OTHER_LISTS {
        let Some(value) = env(name) else { continue };
        match parse_gpu_list(&value) {
            Ok(list) if list.len() == count => others.push((name, list)),
            Ok(list) => notes.push(format!(
                "{name} left as is: {} entries, not {count}",
                list.len()
            )),
            Err(e) => notes.push(format!("{name} left as is: {e}")),
        }
    }
    (others, notes)
}

/// One task, as slurmstepd sees it in `task_init`.
pub struct TaskInputs<'a> {
    pub node: &'a str,
    pub local_id: usize,
    pub local_count: usize,
    pub rank: u32,
    /// `CUDA_VISIBLE_DEVICES` in the task's environment now.
    pub cuda: Option<&'a str>,
    /// `SLURMD_TRES_BIND` in the task's environment: Slurm's own binding.
    pub tres_bind: Option<&'a str>,
}

/// What to do to one task.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TaskOutcome {
    /// Variables to set, in order.
    pub set: Vec<(String, String)>,
    /// Lines for the task's stderr.
    pub say: Vec<String>,
}

/// Maps one task of a mapped step.
pub fn map_task(map: &StepMap, task: &TaskInputs) -> TaskOutcome {
    let mut out = TaskOutcome::default();
    if let Some(why) = slurm_bound_task(map, task) {
        if task.local_id == 0 {
            out.say.push(format!(
                "desi-gpu-map: node {}: {why}; keeping Slurm's binding",
                task.node
            ));
        }
        return out;
    }
    let p = match position(map.method, task.local_id, task.local_count, map.gpus.len()) {
        Ok(p) => p,
        Err(e) => {
            out.say.push(format!(
                "desi-gpu-map: node {}: {e}; task left unchanged",
                task.node
            ));
            return out;
        }
    };
    let visible = visible_list(&map.gpus, p, map.visible);
    out.set.push((env::CUDA.to_string(), join(&visible)));
    for (name, list) in &map.others {
        out.set
            .push((name.to_string(), join(&visible_list(list, p, map.visible))));
    }
    out.set.push((map.flag.clone(), "1".to_string()));
    out.set
        .push((env::METHOD.to_string(), map.method.name().to_string()));
    out.set
        .push((env::NODE_GPUS.to_string(), map.gpus.len().to_string()));
    if map.verbose {
        out.say.push(verbose_line(map, task, &visible));
        if task.local_id == 0 {
            out.say.extend(
                map.notes
                    .iter()
                    .map(|n| format!("desi-gpu-map: node {}: {n}", task.node)),
            );
        }
    }
    out
}

/// Says why Slurm's own per-task binding applies to this task, if it does.
/// slurmstepd binds after `user_init`, so only the task's environment
/// shows it: `SLURMD_TRES_BIND`, or a list that differs from the step's.
/// `--gpu-bind=none` (`gpu:none`) removes the list without binding: the
/// step's list, as Slurm allocated it, is then mapped.
fn slurm_bound_task(map: &StepMap, task: &TaskInputs) -> Option<String> {
    match task.tres_bind.map(parse_gpu_bind) {
        Some(GpuBind::Unbound) => return None,
        Some(GpuBind::PerTask(how)) => {
            return Some(format!(
                "Slurm binds GPUs per task ({}={how})",
                env::TRES_BIND
            ))
        }
        None => {}
    }
    if map.cuda.as_deref() == task.cuda {
        return None;
    }
    Some(format!(
        "Slurm narrowed {} per task (now {})",
        env::CUDA,
        task.cuda.map_or_else(|| "unset".to_string(), quote)
    ))
}

/// The `verbose` report: one `key=value` line per task.
fn verbose_line(map: &StepMap, task: &TaskInputs, visible: &[&str]) -> String {
    format!(
        "desi-gpu-map: node={} rank={} local={}/{} gpu={} visible={} gpus={} method={} source={}",
        task.node,
        task.rank,
        task.local_id,
        task.local_count,
        visible.first().copied().unwrap_or("-"),
        join(visible),
        join(&map.gpus),
        map.method.name(),
        if map.cuda.is_some() { "slurm" } else { "nvml" },
    )
}

/// The line a task prints when its step stands aside (local task 0 only,
/// so each node says it once).
pub fn aside_line(node: &str, why: &str) -> String {
    format!("desi-gpu-map: node {node}: {why}")
}

#[cfg(test)]
mod tests;
