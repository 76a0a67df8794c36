//! slurmstepd as the core's [`Node`]: the step's environment through the
//! SPANK handle, the machine's files, and NVML asked in a child process
//! with a deadline. Also reads the plugstack arguments and the option value.

use desi_gpu_map_core::files::Files;
use desi_gpu_map_core::mps::MpsFacts;
use desi_gpu_map_core::settings::config::Config;
use desi_gpu_map_core::settings::option::OptionRequest;
use desi_gpu_map_core::step::{plan_step, Node, NvmlAsk, StepFacts, StepIdentity, StepPlan};
use desi_gpu_map_core::Error;
use desi_gpu_map_host::files::HostFiles;
use desi_gpu_map_host::nvml::ask_within;
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
    let facts = StepFacts {
        step: spank
            .job_stepid()
            .map(StepIdentity::Slurm)
            .map_err(|e| e.to_string()),
        config,
        request,
        mps: mps_facts(spank),
    };
    plan_step(&facts, &Slurmstepd(spank))
}

/// The job's user and the step's tasks on this node, for an MPS daemon.
fn mps_facts(spank: &SpankHandle) -> Option<MpsFacts> {
    Some(MpsFacts {
        uid: spank.job_uid().ok()?,
        gid: spank.job_gid().ok()?,
        local_tasks: usize::try_from(spank.job_local_task_count().ok()?).ok()?,
        node_id: spank.job_nodeid().ok()?,
        token: desi_gpu_map_host::mps::daemon::random_token(),
    })
}

/// The node as slurmstepd sees it, in `user_init`.
struct Slurmstepd<'a, 'b>(&'a SpankHandle<'b>);

impl Node for Slurmstepd<'_, '_> {
    fn env(&self, name: &str) -> Option<String> {
        self.0.getenv_lossy(name).ok().flatten()
    }

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
