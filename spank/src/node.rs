//! slurmstepd as the core's [`Node`]: the step's environment through the
//! SPANK handle, the machine's files, and NVML asked in a child process
//! with a deadline; and as the protocol's [`FrontEnd`]: the step's MPS
//! daemon started as the job's user, a task's CPUs read by
//! sched_getaffinity. Also reads the plugstack arguments and the option
//! value.

use crate::mps::Served;
use desi_gpu_map_core::cpuset::CpuSet;
use desi_gpu_map_core::files::Files;
use desi_gpu_map_core::mps::{Daemon, MpsFacts};
use desi_gpu_map_core::settings::config::Config;
use desi_gpu_map_core::settings::option::OptionRequest;
use desi_gpu_map_core::snapshot::Snapshot;
use desi_gpu_map_core::step::{
    plan_step, Deferred, FrontEnd, Node, NvmlAsk, StepFacts, StepIdentity, StepPlan, UnreadableStep,
};
use desi_gpu_map_core::Error;
use desi_gpu_map_host::failure::Failure;
use desi_gpu_map_host::files::HostFiles;
use desi_gpu_map_host::nvml::ask_within;
use desi_gpu_map_host::sys::allowed_cpus;
use slurm_spank::{SpankError, SpankHandle};
use std::time::Instant;

/// The words after the plugin's path on its plugstack.conf line.
pub fn plugin_args(spank: &SpankHandle) -> Result<Vec<String>, Error> {
    spank
        .plugin_argv()
        .map(|args| args.iter().map(|a| a.to_string()).collect())
        .map_err(|e| match e {
            // The argument, as slurm-spank shows one that is not UTF-8.
            SpankError::CStringError(shown) => Error::ArgumentNotUtf8 { shown },
            e => Error::UnreadableArguments(e.to_string()),
        })
}

/// The option's value, if the user gave the option. Bytes that are not
/// UTF-8 become U+FFFD, which no valid value contains.
pub fn option_value(spank: &SpankHandle, name: &str) -> Option<String> {
    spank.get_option_value_lossy(name).map(|v| v.into_owned())
}

/// Plans the step on this node: once, in `user_init`.
pub fn plan(
    spank: &SpankHandle,
    config: Option<&Result<Config, Error>>,
    request: Option<&Result<OptionRequest, Error>>,
) -> StepPlan {
    let deferred = Deferred {
        step: spank
            .job_stepid()
            .map(StepIdentity::Slurm)
            .map_err(|e| UnreadableStep::Spank(e.to_string())),
        config,
        request,
    };
    let (step, config, request) = match deferred.ready() {
        Ok(ready) => ready,
        Err(plan) => return *plan,
    };
    let vars = snapshot(spank);
    let facts = StepFacts {
        step,
        config,
        request,
        // Bytes that are not UTF-8 read as U+FFFD, a bad value; the core
        // reads it only where no option was given.
        method_variable: vars.method.as_deref(),
        vars: &vars,
        mps: mps_facts(spank),
    };
    plan_step(&facts, &Slurmstepd::new(spank))
}

/// The job's user and the step's tasks on this node, for an MPS daemon.
fn mps_facts(spank: &SpankHandle) -> Option<MpsFacts> {
    Some(MpsFacts {
        uid: spank.job_uid().ok()?,
        gid: spank.job_gid().ok()?,
        local_tasks: usize::try_from(spank.job_local_task_count().ok()?).ok()?,
        node_id: spank.job_nodeid().ok()?,
        token: desi_gpu_map_host::mps::daemon::random_token(),
        kept: false,
        dir_step: None,
    })
}

/// The node as slurmstepd sees it (the step's environment in `user_init`,
/// the task's in `task_init`), and the daemon it starts (kept in
/// `served`).
pub struct Slurmstepd<'a, 'b> {
    spank: &'a SpankHandle<'b>,
    /// The step's daemon, once started.
    pub served: Option<Served>,
}

impl<'a, 'b> Slurmstepd<'a, 'b> {
    pub fn new(spank: &'a SpankHandle<'b>) -> Self {
        Slurmstepd {
            spank,
            served: None,
        }
    }
}

/// The variables a decision reads, as slurmstepd holds them (the step's
/// in `user_init`, the task's in `task_init`), each read once; bytes that
/// are not UTF-8 read as U+FFFD.
pub fn snapshot(spank: &SpankHandle) -> Snapshot {
    Snapshot::read(|name: &str| spank.getenv_lossy(name).ok().flatten())
}

impl Node for Slurmstepd<'_, '_> {
    fn files(&self) -> &dyn Files {
        &HostFiles
    }

    /// Asked in a child process that is killed at the deadline
    /// ([`desi_gpu_map_host::deadline`]): an `nvmlInit` that blocks (a GPU
    /// fell off the bus) must not hold the step, and NVML is never loaded
    /// into slurmstepd itself.
    fn nvml(&self, ask: NvmlAsk, config: &Config) -> Result<Vec<String>, Error> {
        let started = Instant::now();
        let answer = ask_within(ask, &config.nvml, config.nvml_timeout);
        if let Err(timed_out @ Error::NvmlTimedOut { .. }) = &answer {
            log::warn!("{timed_out}; the discovery process was killed");
        }
        log::debug!(
            "NVML discovery ({ask:?}) took {} us",
            started.elapsed().as_micros()
        );
        answer
    }
}

impl FrontEnd for Slurmstepd<'_, '_> {
    /// Starts the daemon as the job's user, with the job's supplementary
    /// groups, before any task execs.
    type NoDaemon = Failure;

    fn start_daemon(&mut self, daemon: &Daemon, _task: Option<usize>) -> Result<Daemon, Failure> {
        let groups = self.spank.job_supplementary_gids().unwrap_or_default();
        let served = Served::start(daemon, groups)?;
        let daemon = served.daemon().clone();
        log::info!(
            "MPS daemon started for the step in {} (GPUs {})",
            daemon.dir().display(),
            daemon.gpus.join(",")
        );
        self.served = Some(served);
        Ok(daemon)
    }

    /// The CPUs this task may run on. slurmstepd has already applied the
    /// task plugin's binding: `exec_task()` in
    /// `src/slurmd/slurmstepd/task.c` calls `setup_env()` (which writes
    /// `SLURM_CPU_BIND_*`), then `task_g_pre_launch()` (task/affinity
    /// binds), then `spank_user_task()` (our `task_init`), in this order
    /// in the Slurm sources read for 19.05, 23.x and 24.11.7; on 22.05.8,
    /// 24.11.5 and 26.05.5 the test cluster's tasks see their bound masks
    /// here (tests/cluster/closest.rs).
    fn own_cpus(&self) -> Option<CpuSet> {
        allowed_cpus(None)
    }

    /// The CPUs slurmstepd may run on: the task is its fork
    /// (`_fork_all_tasks()` in `src/slurmd/slurmstepd/mgr.c`), so an
    /// unbound task has exactly these, and a task Slurm bound has fewer
    /// (the core decides, `list_is_slurms`).
    fn stepd_cpus(&self) -> Option<CpuSet> {
        let parent = std::os::unix::process::parent_id();
        // 1: slurmstepd is gone and the task was re-parented; that proves
        // nothing.
        (parent > 1).then(|| allowed_cpus(Some(parent))).flatten()
    }
}
