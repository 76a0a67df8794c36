//! The plugin's three moments in a job shell: `shell.init` plans the job on
//! this node once (the core's `plan_step`, over the shell's facts) and
//! starts its MPS daemon, or refuses the job before any task starts;
//! `task.init` carries out each task's outcome on its command before it
//! starts; `task.exit` and `shell.exit` stop the daemon after the node's
//! last task. The core decides; this file only moves facts and answers.

use crate::broker::grant;
use crate::conf::{request, site_config};
use crate::ffi::{log, user, Level, Plugin, Shell};
use crate::json::{parse, Value};
use crate::mps::Served;
use crate::node::{job_facts, FluxNode, JobFacts};
use desi_gpu_map_core::env;
use desi_gpu_map_core::flux::{
    by_uuid, f58, job_gpus, tag, who_binds, Binder, JobGpus, OptionError, AFFINITY,
};
use desi_gpu_map_core::mps::{flux_control, MpsFacts};
use desi_gpu_map_core::settings::config::Config;
use desi_gpu_map_core::settings::option::{flux_usage, Choice, OptionRequest, OPTION};
use desi_gpu_map_core::settings::site::check_request;
use desi_gpu_map_core::step::{
    carry_out, plan_step, resolve, start_daemon, task_outcome_read, Container, Given, NvmlAsk,
    StepFacts, StepIdentity, StepPlan, TaskIds, TaskVars,
};
use desi_gpu_map_host::mps::daemon::random_token;
use desi_gpu_map_host::nvml::ask_within;
use std::path::Path;
use std::sync::Mutex;

/// The job on this node, planned once in `shell.init`.
struct Job {
    plan: StepPlan,
    facts: JobFacts,
    gpus: JobGpus,
    served: Option<Served>,
}

/// One job shell runs one job: its plan lives for the process.
static JOB: Mutex<Option<Job>> = Mutex::new(None);

/// `shell.init`: plans the job on this node, or refuses it with a message
/// naming the bad value and the valid ones.
pub fn shell_init(plugin: Plugin) -> Result<(), String> {
    let shell = plugin.shell().ok_or("the plugin has no shell")?;
    let config = site_config(plugin.conf().as_deref())?;
    let asked = request(shell.option(OPTION).as_deref()).transpose()?;
    if asked == Some(OptionRequest::Help) {
        for line in flux_usage().lines() {
            log(Level::Notice, line);
        }
        return Err(format!(
            "-o {OPTION}=help prints the usage above and runs nothing"
        ));
    }
    if let Some(asked) = &asked {
        check_request(asked, &config).map_err(|e| OptionError(&e).to_string())?;
    }
    let mut config = config;
    if resolve(asked, &config).mps {
        control_on_path(&mut config, shell);
    }
    let facts = job_facts(shell.info().as_deref(), shell.rank_info().as_deref())?;
    let asked = who_wins(shell, asked, &config, facts.shell_rank);
    let would_map = resolve(asked, &config).choice != Choice::Off;
    let gpus = match job_gpus(facts.gpus.as_deref(), &grant(shell)) {
        Ok(gpus) => gpus,
        Err(e) if would_map => return Err(e.to_string()),
        // Not mapped: the plan stands aside quietly, whatever R names.
        Err(_) => JobGpus::none(),
    };
    let names = named_for_mps(&gpus, asked, &config);
    let gpus = JobGpus {
        list: names,
        ..gpus
    };
    let mut node = FluxNode {
        shell,
        gpus: &gpus.list,
        served: None,
    };
    let mut plan = plan_job(&node, &facts, &config, asked);
    // Why the job runs without MPS is the node's first task's to say (the
    // core's line), once: the shell's log is the job's stderr.
    start_daemon(&mut plan, &mut node, None);
    let served = node.served.take();
    let job = Job {
        plan,
        facts,
        gpus,
        served,
    };
    *JOB.lock().map_err(|_| "the plugin's state is lost")? = Some(job);
    Ok(())
}

/// The job's list, by UUID where the user asks for MPS and NVML names
/// them (as MPS needs, and as a Slurm step's are named); else as listed,
/// and the core then says why the job runs without MPS.
fn named_for_mps(gpus: &JobGpus, asked: Option<OptionRequest>, config: &Config) -> Vec<String> {
    if !resolve(asked, config).mps || gpus.list.is_empty() {
        return gpus.list.clone();
    }
    let lines = ask_within(NvmlAsk::Places, &config.nvml, config.nvml_timeout);
    match lines
        .map_err(|e| e.to_string())
        .and_then(|l| by_uuid(gpus, &l))
    {
        Ok(uuids) => uuids,
        Err(_) => gpus.list.clone(),
    }
}

/// Where the site names no control daemon and none is in the usual
/// directories (where the core looks), the first on the job's `PATH`.
fn control_on_path(config: &mut Config, shell: Shell) {
    let control = |dir: &Path| dir.join(env::MPS_CONTROL);
    let usual = env::MPS_CONTROL_DIRS
        .iter()
        .any(|d| control(Path::new(d)).is_file());
    let looked = config.mps.control.is_none() && !usual;
    let path = shell
        .getenv(env::PATH)
        .filter(|_| looked)
        .unwrap_or_default();
    let found = std::env::split_paths(&path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| control(&dir))
        .find(|file| file.is_file());
    // The core words what names it, found or not, in Flux's words.
    flux_control(&mut config.mps, found);
}

/// The request that binds, where the user also gave Flux's own
/// `gpu-affinity` (the core's [`who_binds`]), said once, by the job's
/// first shell.
fn who_wins(
    shell: Shell,
    asked: Option<OptionRequest>,
    config: &Config,
    rank: u32,
) -> Option<OptionRequest> {
    let affinity = shell.option(AFFINITY).map(|text| match parse(&text) {
        Ok(Value::Str(value)) => value,
        _ => text,
    });
    let say = |line: &str| {
        if rank == 0 {
            log(Level::Notice, line);
        }
    };
    match who_binds(affinity.as_deref(), asked.is_some()) {
        Binder::Plugin { say: Some(line) } => say(&line),
        Binder::Plugin { say: None } => {}
        Binder::Flux { say: line } => {
            if config.default != Choice::Off {
                say(&line);
            }
            return Some(OptionRequest::Use {
                choice: Some(Choice::Off),
                verbose: false,
                mps: false,
            });
        }
    }
    asked
}

/// The core's plan for the job on this node: a launch of its own, tagged
/// with the job's id and its instance (the `FLUX_URI` the shell hands its
/// tasks: its own), whose GPUs are only those R gives it.
fn plan_job(
    node: &FluxNode,
    facts: &JobFacts,
    config: &Config,
    asked: Option<OptionRequest>,
) -> StepPlan {
    let step = StepIdentity::Launch {
        tag: Some(tag(
            facts.jobid,
            std::env::var(env::FLUX_URI).ok().as_deref(),
        )),
        given: Some(Given::Flux),
    };
    let config = Ok(config.clone());
    let asked = asked.map(Ok);
    let mps = MpsFacts {
        uid: user().0,
        gid: user().1,
        local_tasks: facts.ntasks,
        node_id: facts.shell_rank,
        token: random_token(),
        kept: false,
        dir_step: Some(f58(facts.jobid)),
    };
    let vars = node.snapshot();
    let facts = StepFacts {
        step: Ok(step),
        config: Some(&config),
        request: asked.as_ref(),
        method_variable: None,
        vars: &vars,
        mps: Some(mps),
    };
    plan_step(&facts, node)
}

/// `task.init`: the task's outcome, carried out on its command.
pub fn task_init(plugin: Plugin) -> Result<(), String> {
    let shell = plugin.shell().ok_or("the plugin has no shell")?;
    let task = shell.current_task().ok_or("no current task")?;
    let guard = JOB.lock().map_err(|_| "the plugin's state is lost")?;
    let Some(job) = guard.as_ref() else {
        return Ok(());
    };
    let node = FluxNode {
        shell,
        gpus: &job.gpus.list,
        served: None,
    };
    let name = job.facts.node.clone();
    let vars = TaskVars::read(&node.snapshot(), &job.plan, false, &|| Some(name.clone()));
    let ids = task_ids(task.info().as_deref(), job.facts.ntasks);
    let mut outcome = task_outcome_read(&job.plan, &ids, &vars, false, Container::None, &node);
    outcome.record_flux_ids(&job.gpus);
    let lines = carry_out(
        &outcome,
        &vars.node,
        &mut |name| task.unsetenv(name),
        &mut |name, value| task.setenv(name, value),
    );
    for line in lines {
        log(Level::Notice, &line);
    }
    Ok(())
}

/// The task's ids, from the shell's task info.
fn task_ids(info: Option<&str>, local_count: usize) -> Result<TaskIds, String> {
    let info = parse(info.ok_or("the shell gives no task info")?)?;
    let number = |key: &str| {
        info.get(key)
            .and_then(Value::as_u64)
            .ok_or_else(|| format!("the task's info has no {key}"))
    };
    Ok(TaskIds {
        local_id: usize::try_from(number("localid")?).map_err(|e| e.to_string())?,
        local_count,
        rank: u32::try_from(number("rank")?).map_err(|e| e.to_string())?,
    })
}

/// `task.exit`: after the node's last task, the daemon goes.
pub fn task_exit() -> Result<(), String> {
    let mut guard = JOB.lock().map_err(|_| "the plugin's state is lost")?;
    let last = guard
        .as_mut()
        .and_then(|job| job.served.as_mut())
        .is_some_and(Served::task_exited);
    if last {
        stop(guard.as_mut());
    }
    Ok(())
}

/// `shell.exit`: whatever ended the job, nothing is left.
pub fn shell_exit() -> Result<(), String> {
    let mut guard = JOB.lock().map_err(|_| "the plugin's state is lost")?;
    stop(guard.as_mut());
    Ok(())
}

fn stop(job: Option<&mut Job>) {
    if let Some(served) = job.and_then(|job| job.served.take()) {
        for line in served.stop() {
            log(Level::Warn, &line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tasks_ids_come_from_its_info() {
        let ids = task_ids(Some(r#"{"localid":3,"rank":11,"state":"Running"}"#), 8).unwrap();
        assert_eq!(
            ids,
            TaskIds {
                local_id: 3,
                local_count: 8,
                rank: 11
            }
        );
        assert!(task_ids(Some(r#"{"rank":1}"#), 8)
            .unwrap_err()
            .contains("localid"));
        assert!(task_ids(None, 8).is_err());
    }
}
