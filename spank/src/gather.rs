//! Reads what the core needs from Slurm: plugstack arguments, the option
//! value, and the step's environment on this node.

use desi_gpu_map::config::Config;
use desi_gpu_map::method::{Choice, Request};
use desi_gpu_map::step::{is_special_step, plan_step, resolve, StepInputs, StepPlan};
use desi_gpu_map::vendor::{choose, Chosen, Vendor};
use desi_gpu_map::{nvml, Error};
use slurm_spank::SpankHandle;
use std::path::Path;
use std::time::Instant;

/// The words after the plugin's path on its plugstack.conf line.
pub fn plugin_args(spank: &SpankHandle) -> Result<Vec<String>, Error> {
    spank
        .plugin_argv()
        .map(|args| args.iter().map(|a| a.to_string()).collect())
        .map_err(|e| Error::new(format!("bad plugstack argument: {e}")))
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
    request: Option<&Result<Request, Error>>,
) -> StepPlan {
    let step_id = match spank.job_stepid() {
        Ok(id) => id,
        Err(e) => {
            return StepPlan::Aside(format!(
                "cannot read the step id ({e}); tasks left unchanged"
            ))
        }
    };
    // The batch, extern and interactive steps are never touched, nor told.
    if is_special_step(step_id) {
        return StepPlan::Idle;
    }
    let config = match config {
        Some(Ok(config)) => config,
        Some(Err(e)) => {
            return StepPlan::Aside(format!(
                "plugin misconfigured, ask your administrators: {e}"
            ))
        }
        None => return StepPlan::Aside("plugin not initialised; tasks left unchanged".to_string()),
    };
    let request = match request {
        Some(Ok(request)) => Some(*request),
        Some(Err(e)) => return StepPlan::Aside(format!("{e}; tasks left unchanged")),
        None => None,
    };
    let (choice, verbose) = resolve(request, config);
    let inputs = StepInputs {
        step_id,
        choice,
        verbose,
        config,
        whole_node: holds_whole_node(spank),
        vendor: node_vendor(config, choice),
    };
    let env = |name: &str| spank.getenv_lossy(name).ok().flatten();
    let mut nvml = || {
        let started = Instant::now();
        let found = nvml::uuids(&config.nvml);
        log::debug!("NVML discovery took {} us", started.elapsed().as_micros());
        found
    };
    plan_step(&inputs, &env, &mut nvml)
}

/// The node's GPU vendor, read from `/sys` and `/dev` only for steps that
/// may be mapped.
fn node_vendor(config: &Config, choice: Choice) -> Chosen {
    if choice == Choice::Off {
        return Chosen {
            vendor: Vendor::Nvidia,
            why: "not mapped".to_string(),
        };
    }
    let started = Instant::now();
    let chosen = choose(config.vendor, Path::new("/"));
    log::debug!(
        "vendor {} ({}) in {} us",
        chosen.vendor.name(),
        chosen.why,
        started.elapsed().as_micros()
    );
    chosen
}

/// True when the job holds every CPU of this node, and so every GPU: the one
/// case in which NVML's full list is the step's without a count from Slurm.
fn holds_whole_node(spank: &SpankHandle) -> bool {
    // SAFETY: sysconf only reads a system constant; it has no preconditions.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    match spank.job_ncpus() {
        Ok(ncpus) => online > 0 && i64::from(ncpus) >= i64::from(online as i32),
        Err(_) => false,
    }
}
