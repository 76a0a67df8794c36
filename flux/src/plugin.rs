//! The plugin's moments in a job shell: `shell.init` gathers the job's
//! facts on this node, hands them to the core (`job::plan_job`), says what
//! the core says and starts the daemon it planned, or refuses the job
//! before any task starts; `task.init` carries out each task's outcome on
//! its command before it starts; `task.exit` and `shell.exit` stop the
//! daemon after the node's last task. The core decides; this file only
//! moves facts and answers.

use crate::broker::grant;
use crate::conf::{request, site_config, string_or_text};
use crate::error::PluginError;
use crate::ffi::{log, user, Level, Plugin, Shell, Slot};
use crate::mps::Served;
use crate::node::{read, shell_info, FluxNode};
use desi_gpu_map_core::cpuset::CpuSet;
use desi_gpu_map_core::env;
use desi_gpu_map_core::flux::{JobGpus, AFFINITY};
use desi_gpu_map_core::job::{plan_job, JobFacts};
use desi_gpu_map_core::settings::option::OPTION;
use desi_gpu_map_core::snapshot::Snapshot;
use desi_gpu_map_core::step::{
    carry_out, start_daemon, task_outcome_read, Container, StepPlan, TaskIds, TaskVars,
};
use desi_gpu_map_host::mps::daemon::random_token;
use desi_gpu_map_host::sys::allowed_cpus;
use serde::Deserialize;
use std::sync::Mutex;

/// The job on this node, planned once in `shell.init`, kept by the shell.
struct Job {
    plan: StepPlan,
    vars: Snapshot,
    gpus: JobGpus,
    cpus: Option<CpuSet>,
    node: String,
    ntasks: usize,
    served: Option<Served>,
}

/// Where the shell keeps the job.
const JOB: Slot<Mutex<Job>> = Slot::named(c"desi-gpu-map::job");

/// `shell.init`: plans the job on this node, or refuses it with a message
/// naming the bad value and the valid ones.
pub fn shell_init(plugin: Plugin) -> Result<(), PluginError> {
    let shell = plugin.shell().ok_or(PluginError::NoShell)?;
    let info = shell_info(shell.info().as_deref(), shell.rank_info().as_deref())?;
    let mut node = FluxNode {
        shell,
        served: None,
        // Bound by cpu-affinity's shell.init, which runs before this one.
        cpus: allowed_cpus(None),
    };
    let facts = JobFacts {
        config: site_config(plugin.conf().as_deref())?,
        asked: request(shell.option(OPTION).as_deref()).transpose()?,
        affinity: shell.option(AFFINITY).map(|text| string_or_text(&text)),
        jobid: info.jobid,
        shell_rank: info.shell_rank,
        ntasks: info.ntasks,
        r_gpus: info.gpus.clone(),
        grant: grant(shell),
        uri: std::env::var(env::FLUX_URI).ok(),
        vars: node.snapshot(),
        uid: user().0,
        gid: user().1,
        token: random_token(),
    };
    let job = match plan_job(facts, &node) {
        Ok(job) => job,
        Err(refusal) => {
            refusal.say.iter().for_each(|l| log(Level::Notice, l));
            return Err(PluginError::Refused(refusal));
        }
    };
    job.say.iter().for_each(|l| log(Level::Notice, l));
    let mut plan = job.plan;
    // Why the job runs without MPS is the node's first task's to say (the
    // core's line), once: the shell's log is the job's stderr.
    start_daemon(&mut plan, &mut node, None);
    let job = Job {
        plan,
        vars: job.vars,
        gpus: job.gpus,
        cpus: node.cpus.clone(),
        node: info.node,
        ntasks: info.ntasks,
        served: node.served.take(),
    };
    shell.keep(&JOB, Mutex::new(job))
}

/// The job this plugin planned, for one handler's call.
fn with_job<T>(
    plugin: Plugin,
    work: impl FnOnce(Shell, &mut Job) -> T,
) -> Result<Option<T>, PluginError> {
    let shell = plugin.shell().ok_or(PluginError::NoShell)?;
    let Some(job) = shell.kept(&JOB) else {
        return Ok(None);
    };
    let mut job = job.lock().map_err(|_| PluginError::StateLost)?;
    Ok(Some(work(shell, &mut job)))
}

/// `task.init`: the task's outcome, carried out on its command.
pub fn task_init(plugin: Plugin) -> Result<(), PluginError> {
    let lines = with_job(plugin, |shell, job| {
        let task = shell.current_task().ok_or(PluginError::NoTask)?;
        let node = FluxNode {
            shell,
            served: None,
            cpus: job.cpus.clone(),
        };
        let name = job.node.clone();
        let vars = TaskVars::read(&job.vars, &job.plan, false, &|| Some(name.clone()));
        let ids = task_ids(task.info().as_deref(), job.ntasks);
        let mut outcome = task_outcome_read(&job.plan, &ids, &vars, false, Container::None, &node);
        outcome.record_flux_ids(&job.gpus);
        Ok::<_, PluginError>(carry_out(
            &outcome,
            &vars.node,
            &mut |name| task.unsetenv(name),
            &mut |name, value| task.setenv(name, value),
        ))
    })?;
    for line in lines.transpose()?.unwrap_or_default() {
        log(Level::Notice, &line);
    }
    Ok(())
}

/// A task's info (`flux_shell_task_get_info`), as far as it is read.
#[derive(Deserialize)]
struct TaskInfo {
    localid: usize,
    rank: u32,
}

/// The task's ids, from the shell's task info.
fn task_ids(info: Option<&str>, local_count: usize) -> Result<TaskIds, PluginError> {
    let info: TaskInfo = read("task info", info)?;
    Ok(TaskIds {
        local_id: info.localid,
        local_count,
        rank: info.rank,
    })
}

/// `task.exit`: after the node's last task, the daemon goes.
pub fn task_exit(plugin: Plugin) -> Result<(), PluginError> {
    with_job(plugin, |_, job| {
        let last = job.served.as_mut().is_some_and(Served::task_exited);
        if last {
            stop(job);
        }
    })?;
    Ok(())
}

/// `shell.exit`: whatever ended the job, nothing is left.
pub fn shell_exit(plugin: Plugin) -> Result<(), PluginError> {
    with_job(plugin, |_, job| stop(job))?;
    Ok(())
}

fn stop(job: &mut Job) {
    if let Some(served) = job.served.take() {
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
            .to_string()
            .contains("localid"));
        assert!(task_ids(Some(r#"{"localid":-1,"rank":1}"#), 8).is_err());
        assert!(task_ids(None, 8).is_err());
    }
}
