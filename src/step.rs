//! The decision for one job step on one node, and for each of its tasks.
//!
//! Pure: the plugin hands in what Slurm told it, and applies what comes back.

use crate::bind::{parse_gpu_bind, GpuBind};
use crate::config::{Config, NvmlSource, Untracked, Visible};
use crate::env;
use crate::error::{quote, Error};
use crate::gpus::{check_list, join, parse_gpu_list};
use crate::mapping::{position, visible_list};
use crate::method::{Choice, Method, Request};
use crate::vendor::{render, Chosen, Rendering, StepLists, VendorSetting};

/// Step ids of the batch (0xfffffffb), extern (0xfffffffc) and interactive
/// (0xfffffffa) steps, and Slurm's other reserved ids above them: never mapped.
const FIRST_SPECIAL_STEP: u32 = 0xffff_fff0;

pub fn is_special_step(step_id: u32) -> bool {
    step_id >= FIRST_SPECIAL_STEP
}

/// What the user and the site together ask of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resolved {
    pub choice: Choice,
    pub verbose: bool,
    /// The user gave the option (a method or `verbose`), not only the site
    /// default: only then does a step without GPUs say so.
    pub asked: bool,
}

/// The method and verbosity for a step: the user's option over the site's.
pub fn resolve(request: Option<Request>, config: &Config) -> Resolved {
    let (choice, verbose, asked) = match request {
        Some(Request::Use {
            choice: Some(choice),
            verbose,
        }) => (choice, verbose || config.verbose, choice != Choice::Off),
        Some(Request::Use { choice: None, .. }) => (config.default, true, true),
        // Help never reaches a node: srun, sbatch and salloc exit on it.
        Some(Request::Help) | None => (config.default, config.verbose, false),
    };
    Resolved {
        choice,
        verbose,
        asked,
    }
}

/// What the plugin does for a step on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepPlan {
    /// The batch, extern and interactive steps: never touched, never told.
    Untouched,
    /// Tasks run as Slurm made them, less any flag inherited from a mapped
    /// task (a nested step must not claim a mapping it did not get).
    Unmapped(Unmapped),
    Map(StepMap),
}

/// A step the plugin does not map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unmapped {
    /// Said once per node, by its first task; `None`: silent.
    pub why: Option<String>,
    /// Variables removed from every task: the flag and `DESI_GPU_MAP_*`.
    pub clear: Vec<String>,
}

impl StepPlan {
    /// Stands aside and says why; `flag` is the flag to clear.
    pub fn aside(flag: &str, why: String) -> StepPlan {
        StepPlan::Unmapped(Unmapped {
            why: Some(why),
            clear: stale_names(flag),
        })
    }

    /// Stands aside silently.
    pub fn quiet(flag: &str) -> StepPlan {
        StepPlan::Unmapped(Unmapped {
            why: None,
            clear: stale_names(flag),
        })
    }
}

/// The variables a mapped task gets, which no unmapped task may keep.
fn stale_names(flag: &str) -> Vec<String> {
    vec![
        flag.to_string(),
        env::METHOD.to_string(),
        env::NODE_GPUS.to_string(),
    ]
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
    /// How the lists are written for the node's GPU vendor.
    pub rendering: Rendering,
}

/// What the plugin knows of a step on this node, each part possibly
/// unreadable; [`plan_step`] turns every failure into a stand-aside line.
pub struct StepFacts<'a> {
    pub step_id: Result<u32, String>,
    /// `None`: `init` never ran.
    pub config: Option<&'a Result<Config, Error>>,
    /// `None`: the user gave no option.
    pub request: Option<&'a Result<Request, Error>>,
    /// The node's GPU vendor for a site setting; asked only for a step
    /// that gets mapped (it reads `/sys` and `/dev`).
    pub vendor: &'a dyn Fn(VendorSetting) -> Chosen,
}

/// Decides for a step. `env` reads the step's environment; `nvml` lists the
/// node's GPU UUIDs and is called only when Slurm names no GPU list.
pub fn plan_step(
    facts: &StepFacts,
    env: &dyn Fn(&str) -> Option<String>,
    nvml: &mut dyn FnMut() -> Result<Vec<String>, Error>,
) -> StepPlan {
    let default_flag = crate::config::DEFAULT_FLAG;
    let step_id = match &facts.step_id {
        Ok(id) => *id,
        Err(e) => {
            return StepPlan::aside(
                default_flag,
                format!("cannot read the step id ({e}); tasks left unchanged"),
            )
        }
    };
    if is_special_step(step_id) {
        return StepPlan::Untouched;
    }
    let config = match facts.config {
        Some(Ok(config)) => config,
        Some(Err(e)) => {
            return StepPlan::aside(
                default_flag,
                format!("plugin misconfigured, ask your administrators: {e}"),
            )
        }
        None => {
            return StepPlan::aside(
                default_flag,
                "plugin not initialised; tasks left unchanged".to_string(),
            )
        }
    };
    let request = match facts.request {
        Some(Ok(request)) => Some(*request),
        Some(Err(e)) => return StepPlan::aside(&config.flag, format!("{e}; tasks left unchanged")),
        None => None,
    };
    let want = resolve(request, config);
    plan_mapping(&want, config, facts.vendor, env, nvml)
}

/// Decides for a normal step whose inputs could all be read.
fn plan_mapping(
    want: &Resolved,
    config: &Config,
    vendor: &dyn Fn(VendorSetting) -> Chosen,
    env: &dyn Fn(&str) -> Option<String>,
    nvml: &mut dyn FnMut() -> Result<Vec<String>, Error>,
) -> StepPlan {
    let method = match want.choice {
        Choice::Off => return StepPlan::quiet(&config.flag),
        Choice::Map(method) => method,
    };
    if let Some(why) = slurm_binds_per_task(env) {
        return StepPlan::aside(
            &config.flag,
            format!("Slurm binds GPUs per task in this step ({why}); keeping Slurm's binding"),
        );
    }
    let listed = match from_slurm(env) {
        Some(listed) => listed,
        None => from_nvml(config, env, nvml),
    };
    match listed {
        Ok((gpus, cuda)) => {
            let (others, mut notes) = other_lists(env, gpus.len());
            let lists = StepLists {
                gpus: &gpus,
                from_slurm: cuda.is_some(),
                others: &others,
            };
            let order = env(env::DEVICE_ORDER);
            let rendering = Rendering::plan(
                &vendor(config.vendor),
                config.visible,
                &lists,
                order.as_deref(),
                &mut notes,
            );
            StepPlan::Map(StepMap {
                method,
                visible: config.visible,
                verbose: want.verbose,
                flag: config.flag.clone(),
                others,
                notes,
                rendering,
                gpus,
                cuda,
            })
        }
        Err(NoList::NoGpus(_)) if !want.asked => StepPlan::quiet(&config.flag),
        Err(NoList::NoGpus(why) | NoList::Failed(why)) => {
            StepPlan::aside(&config.flag, format!("{why}; tasks left unchanged"))
        }
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

/// Why a step gets no GPU list.
enum NoList {
    /// Slurm gave the step no GPUs on this node: said only when asked.
    NoGpus(String),
    /// It has GPUs, but they cannot be named safely.
    Failed(String),
}

type Listed = Result<(Vec<String>, Option<String>), NoList>;

/// The GPU list from `CUDA_VISIBLE_DEVICES`, where Slurm set it for this
/// step (`None` otherwise). Slurm overwrites the user's value in every step
/// with GPUs, except on nodes whose gres.conf says `Flags=no_gpu_env`: there
/// a value the user exported survives. So the list is Slurm's only where it
/// agrees with `SLURM_STEP_GPUS`, Slurm's own list, entry for entry, or
/// reads `0..n-1` as Slurm renumbers under cgroup device constraint, with
/// Slurm's companion lists renumbered alike (see [`renumbered_by_slurm`]),
/// and where `SLURM_GPUS_ON_NODE` counts the step's GPUs.
fn from_slurm(env: &dyn Fn(&str) -> Option<String>) -> Option<Listed> {
    let cuda = env(env::CUDA)?;
    // Slurm sets the count in every step with GPUs and removes it from every
    // other step, even when the user exported one (measured on 22.05).
    let count = env(env::GPUS_ON_NODE)?.trim().parse::<usize>().ok()?;
    let step = parse_gpu_list(&env(env::STEP_GPUS)?).ok()?;
    let gpus = match parse_gpu_list(&cuda) {
        Ok(gpus) => gpus,
        Err(e) => return Some(Err(NoList::Failed(format!("{}: {e}", env::CUDA)))),
    };
    if gpus != step && !renumbered_by_slurm(&gpus, step.len(), &cuda, env) {
        return None;
    }
    if count != gpus.len() {
        return Some(Err(NoList::Failed(format!(
            "{}={} lists {} GPUs but {}={count}",
            env::CUDA,
            quote(&cuda),
            gpus.len(),
            env::GPUS_ON_NODE
        ))));
    }
    Some(Ok((gpus, Some(cuda))))
}

/// True when `gpus` is `0..n-1` and one of the lists Slurm sets beside it
/// (`ROCR_VISIBLE_DEVICES`, `GPU_DEVICE_ORDINAL`, `ZE_AFFINITY_MASK`) reads
/// the same: Slurm renumbers them all together under device constraint,
/// while a stray export of the user's is, in practice, one variable. A
/// renumbered list that Slurm sets alone (gres.conf `Flags=nvidia_gpu_env`)
/// is left to NVML, which under device constraint sees the step's GPUs only.
fn renumbered_by_slurm(
    gpus: &[String],
    count: usize,
    cuda: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> bool {
    let renumbered =
        gpus.len() == count && gpus.iter().cloned().eq((0..count).map(|i| i.to_string()));
    renumbered
        && env::OTHER_LISTS
            .iter()
            .any(|name| env(name).is_some_and(|v| v.trim() == cuda.trim()))
}

/// The GPU list from NVML, where Slurm names no list it set itself. Used
/// only when Slurm's count proves NVML's list is the step's, or where the
/// site declared that Slurm tracks no GPUs (`untracked=whole-node`).
fn from_nvml(
    config: &Config,
    env: &dyn Fn(&str) -> Option<String>,
    nvml: &mut dyn FnMut() -> Result<Vec<String>, Error>,
) -> Listed {
    let count = match env(env::GPUS_ON_NODE) {
        Some(v) => match v.trim().parse::<usize>() {
            Ok(0) => return Err(NoList::NoGpus(no_gpus(env))),
            Ok(count) => Some(count),
            Err(_) => {
                return Err(NoList::Failed(format!(
                    "{}={} is not a count",
                    env::GPUS_ON_NODE,
                    quote(&v)
                )))
            }
        },
        None if config.untracked == Untracked::WholeNode => None,
        None => return Err(NoList::NoGpus(no_gpus(env))),
    };
    // Without a count from Slurm, no answer from NVML just means no GPUs.
    let fail = |why: String| match count {
        Some(_) => NoList::Failed(why),
        None => NoList::NoGpus(why),
    };
    if config.nvml == NvmlSource::Off {
        return Err(fail(format!(
            "Slurm set no {} and NVML discovery is off (nvml=off)",
            env::CUDA
        )));
    }
    let uuids = nvml().map_err(|e| fail(format!("Slurm set no {}, and {e}", env::CUDA)))?;
    check_list(&uuids).map_err(|e| fail(format!("NVML's device list is unusable: {e}")))?;
    match count {
        _ if uuids.is_empty() => Err(fail("NVML finds no GPU on this node".to_string())),
        Some(count) if count != uuids.len() => Err(fail(format!(
            "NVML finds {} GPUs but {}={count}, so the step's GPUs cannot be told apart",
            uuids.len(),
            env::GPUS_ON_NODE
        ))),
        _ => Ok((uuids, None)),
    }
}

/// Says that the step has no GPUs here, and why a list it has is not used.
fn no_gpus(env: &dyn Fn(&str) -> Option<String>) -> String {
    let why = "no GPUs are allocated to this step on this node";
    match env(env::CUDA) {
        Some(cuda) => format!(
            "{why} ({}={} was inherited, not set by Slurm)",
            env::CUDA,
            quote(&cuda)
        ),
        None => why.to_string(),
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
    /// Variables to remove first.
    pub unset: Vec<String>,
    /// Variables to set, in order.
    pub set: Vec<(String, String)>,
    /// Lines for the task's stderr.
    pub say: Vec<String>,
}

/// What to do to one task of a step planned as `plan`.
pub fn task_outcome(plan: &StepPlan, task: &TaskInputs) -> TaskOutcome {
    match plan {
        StepPlan::Untouched => TaskOutcome::default(),
        StepPlan::Unmapped(unmapped) => unmapped_task(unmapped, task.node, task.local_id),
        StepPlan::Map(map) => map_task(map, task),
    }
}

/// A task whose ids could not be read: it runs unmapped, and says why.
pub fn unreadable_task(plan: &StepPlan, node: &str, why: &str) -> TaskOutcome {
    match plan {
        StepPlan::Untouched => TaskOutcome::default(),
        StepPlan::Unmapped(unmapped) => TaskOutcome {
            unset: unmapped.clear.clone(),
            ..TaskOutcome::default()
        },
        StepPlan::Map(map) => TaskOutcome {
            unset: stale_names(&map.flag),
            set: Vec::new(),
            say: vec![aside_line(node, &format!("{why}; task left unchanged"))],
        },
    }
}

/// A task of an unmapped step: stale flags go; the node's first task
/// (local id 0) says why, so that each node says it once.
fn unmapped_task(unmapped: &Unmapped, node: &str, local_id: usize) -> TaskOutcome {
    let say = match &unmapped.why {
        Some(why) if local_id == 0 => vec![aside_line(node, why)],
        _ => Vec::new(),
    };
    TaskOutcome {
        unset: unmapped.clear.clone(),
        set: Vec::new(),
        say,
    }
}

/// Maps one task of a mapped step.
pub fn map_task(map: &StepMap, task: &TaskInputs) -> TaskOutcome {
    let mut out = TaskOutcome::default();
    if let Some(why) = slurm_bound_task(map, task) {
        let why = format!("{why}; keeping Slurm's binding");
        let unmapped = Unmapped {
            why: Some(why),
            clear: stale_names(&map.flag),
        };
        return unmapped_task(&unmapped, task.node, task.local_id);
    }
    let p = match position(map.method, task.local_id, task.local_count, map.gpus.len()) {
        Ok(p) => p,
        Err(e) => {
            out.unset = stale_names(&map.flag);
            out.say
                .push(aside_line(task.node, &format!("{e}; task left unchanged")));
            return out;
        }
    };
    let visible = visible_list(&map.gpus, p, map.rendering.visible);
    let lists = StepLists {
        gpus: &map.gpus,
        from_slurm: map.cuda.is_some(),
        others: &map.others,
    };
    out.set.extend(render(&map.rendering, &lists, p));
    out.set
        .push((env::METHOD.to_string(), map.method.name().to_string()));
    out.set
        .push((env::NODE_GPUS.to_string(), map.gpus.len().to_string()));
    // Last: a task whose variables could not all be set gets no flag.
    out.set.push((map.flag.clone(), "1".to_string()));
    if map.verbose {
        out.say.push(verbose_line(map, task, &visible));
        if task.local_id == 0 {
            out.say
                .extend(map.notes.iter().map(|n| aside_line(task.node, n)));
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
