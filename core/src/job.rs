//! A Flux job on one node, planned once from what its job shell gathered
//! ([`JobFacts`]): the user's and the site's words, who binds beside
//! Flux's own `gpu-affinity`, the job's GPUs through its broker's grant
//! (by UUID where MPS serves them), the control daemon on the job's
//! `PATH`, and the step's plan. The Flux shell plugin carries the answer
//! out and decides nothing.
//!
//! Its tests, `tests.rs` in the folder beside this file, plan jobs on the
//! step's fake node.

use crate::env;
use crate::files::Files;
use crate::flux::OptionError;
use crate::flux::{by_uuid, f58, job_gpus, tag, who_binds, Binder, BrokerGrant, JobGpus, GRANT};
use crate::mps::{granted_control, MpsFacts};
use crate::settings::config::{Config, MpsSettings};
use crate::settings::option::{flux_usage, Choice, OptionRequest, OPTION};
use crate::settings::site::check_request;
use crate::slurm::gpus::join;
use crate::snapshot::Snapshot;
use crate::step::{plan_step, resolve, Given, Node, NvmlAsk, StepFacts};
use crate::step::{StepIdentity, StepPlan};
use std::path::{Path, PathBuf};

/// What the job shell knows of the job on its node.
#[derive(Debug, Clone)]
pub struct JobFacts {
    /// The site's settings (the plugin's `conf` table).
    pub config: Config,
    /// The user's `-o desi-gpu-map`, parsed; `None`: not given.
    pub asked: Option<OptionRequest>,
    /// The user's `-o gpu-affinity` value; `None`: not given.
    pub affinity: Option<String>,
    /// The job's id.
    pub jobid: u64,
    /// This shell's rank in the job: the node's place in it.
    pub shell_rank: u32,
    /// The job's tasks on this node.
    pub ntasks: usize,
    /// R's GPU ids on this node (an id set); `None`: none.
    pub r_gpus: Option<String>,
    /// The grant of the broker this shell runs under.
    pub grant: BrokerGrant,
    /// The `FLUX_URI` the shell hands its tasks (its instance's).
    pub uri: Option<String>,
    /// The job's environment, less Slurm's variables and the GPU lists.
    pub vars: Snapshot,
    /// The job's user and group.
    pub uid: u32,
    /// The job user's group.
    pub gid: u32,
    /// A random number for the MPS directory's name.
    pub token: u32,
}

/// The job's plan on this node.
#[derive(Debug, Clone)]
pub struct JobPlan {
    /// The step's plan, as srun's tasks would get it.
    pub plan: StepPlan,
    /// The job's GPUs on this node, as its tasks name them.
    pub gpus: JobGpus,
    /// The job's environment as its tasks read it: its GPU list is R's.
    pub vars: Snapshot,
    /// Lines for the job's log, once.
    pub say: Vec<String>,
}

/// Why the job runs nothing: lines for its log, then the refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Lines said before it (the usage, for `help`).
    pub say: Vec<String>,
    /// The refusal, naming the bad value and the valid ones.
    pub why: String,
}

impl Refusal {
    fn because(why: String) -> Refusal {
        Refusal {
            say: Vec::new(),
            why,
        }
    }
}

/// The job's plan on this node, or why it runs nothing.
pub fn plan_job(facts: JobFacts, node: &dyn Node) -> Result<JobPlan, Refusal> {
    // Only the settings change here (the control daemon found on PATH).
    let mut config = facts.config.clone();
    let asked = facts.asked;
    if asked == Some(OptionRequest::Help) {
        return Err(Refusal {
            say: flux_usage().lines().map(str::to_string).collect(),
            why: format!("-o {OPTION}=help prints the usage above and runs nothing"),
        });
    }
    if let Some(asked) = &asked {
        check_request(asked, &config).map_err(|e| Refusal::because(OptionError(&e).to_string()))?;
    }
    if resolve(asked, &config).mps {
        control_on_path(&mut config.mps, facts.vars.path.as_deref(), node.files());
    }
    let (asked, say) = binding(asked, facts.affinity.as_deref(), &config, facts.shell_rank);
    let wanted = resolve(asked, &config);
    let gpus = match job_gpus(facts.r_gpus.as_deref(), &facts.grant) {
        Ok(gpus) => gpus,
        Err(e) if wanted.choice != Choice::Off => return Err(Refusal::because(e.to_string())),
        // Not mapped: the plan stands aside quietly, whatever R names.
        Err(_) => JobGpus::none(),
    };
    let gpus = match wanted.mps {
        true => by_uuid_where_named(gpus, &config, node),
        false => gpus,
    };
    let vars = Snapshot {
        cuda: (!gpus.list.is_empty()).then(|| join(&gpus.list)),
        ..facts.vars.clone()
    };
    let plan = step_plan(&facts, &config, asked, &vars, node);
    Ok(JobPlan {
        plan,
        gpus,
        vars,
        say,
    })
}

/// The step's plan: a launch of its own, tagged with the job's id and its
/// instance, whose GPUs are only those R gives it.
fn step_plan(
    facts: &JobFacts,
    config: &Config,
    asked: Option<OptionRequest>,
    vars: &Snapshot,
    node: &dyn Node,
) -> StepPlan {
    let step = StepIdentity::Launch {
        tag: Some(tag(facts.jobid, facts.uri.as_deref())),
        given: Some(Given::Granted(&GRANT)),
    };
    let mps = MpsFacts {
        uid: facts.uid,
        gid: facts.gid,
        local_tasks: facts.ntasks,
        node_id: facts.shell_rank,
        token: facts.token,
        kept: false,
        dir_step: Some(f58(facts.jobid)),
    };
    let facts = StepFacts {
        step,
        config,
        request: asked,
        method_variable: None,
        vars,
        mps: Some(mps),
    };
    plan_step(&facts, node)
}

/// The request that binds, where the user also gave Flux's own
/// `gpu-affinity` ([`who_binds`]), and what the job's first shell says of it.
fn binding(
    asked: Option<OptionRequest>,
    affinity: Option<&str>,
    config: &Config,
    shell_rank: u32,
) -> (Option<OptionRequest>, Vec<String>) {
    let first = |line: String| (shell_rank == 0).then_some(line).into_iter().collect();
    match who_binds(affinity, asked.is_some()) {
        Binder::Plugin { say } => (asked, say.map_or_else(Vec::new, first)),
        Binder::Flux { say } => {
            let say = match config.default {
                Choice::Off => Vec::new(),
                _ => first(say),
            };
            let off = OptionRequest::Use {
                choice: Some(Choice::Off),
                verbose: false,
                mps: false,
            };
            (Some(off), say)
        }
    }
}

/// The job's GPUs by UUID, as MPS needs them and a Slurm step's are named,
/// where NVML names them; else as listed, and the plan says why the job
/// runs without MPS.
fn by_uuid_where_named(gpus: JobGpus, config: &Config, node: &dyn Node) -> JobGpus {
    if gpus.list.is_empty() {
        return gpus;
    }
    let uuids = node
        .nvml(NvmlAsk::Places, config)
        .map_err(|e| e.to_string())
        .and_then(|lines| by_uuid(&gpus, &lines));
    match uuids {
        Ok(list) => JobGpus { list, ..gpus },
        Err(_) => gpus,
    }
}

/// Where the site names no control daemon and none is in the usual
/// directories, the first on the job's `PATH` (`path`); said in Flux's
/// words either way ([`granted_control`]).
fn control_on_path(settings: &mut MpsSettings, path: Option<&str>, files: &dyn Files) {
    let control = |dir: &Path| dir.join(env::MPS_CONTROL);
    let usual = env::MPS_CONTROL_DIRS
        .iter()
        .any(|dir| files.exists(&control(Path::new(dir))));
    let found = match settings.control.is_none() && !usual {
        true => path
            .unwrap_or_default()
            .split(':')
            .map(PathBuf::from)
            .filter(|dir| dir.is_absolute())
            .map(|dir| control(&dir))
            .find(|file| files.stat(file).is_ok_and(|stat| !stat.is_dir)),
        false => None,
    };
    granted_control(settings, found, &GRANT);
}

#[cfg(test)]
mod tests;
