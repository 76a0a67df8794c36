//! Reads what the core needs from Slurm: plugstack arguments, the option
//! value, and the step's environment on this node.

use crate::deadline::{self, Failure};
use desi_gpu_map::host::files::HostFiles;
use desi_gpu_map::host::nvml;
use desi_gpu_map::method::Method;
use desi_gpu_map::names::Named;
use desi_gpu_map::settings::option::Request;
use desi_gpu_map::settings::site::Config;
use desi_gpu_map::step::{locate, plan_step, step_topology, StepFacts, StepPlan};
use desi_gpu_map::topology::place_uuids;
use desi_gpu_map::vendor::{choose, Chosen, VendorSetting};
use desi_gpu_map::Error;
use slurm_spank::SpankHandle;
use std::path::Path;
use std::time::Instant;

/// The words after the plugin's path on its plugstack.conf line.
pub fn plugin_args(spank: &SpankHandle) -> Result<Vec<String>, Error> {
    spank
        .plugin_argv()
        .map(|args| args.iter().map(|a| a.to_string()).collect())
        .map_err(|e| Error::UnreadableArguments(e.to_string()))
}

/// The option's value, if the user gave the option. Bytes that are not
/// UTF-8 become U+FFFD, which no valid value contains.
pub fn option_value(spank: &SpankHandle, name: &str) -> Option<String> {
    spank.get_option_value_lossy(name).map(|v| v.into_owned())
}

/// NVML's answer (`ask`: UUIDs, or `closest`'s places), asked in a child
/// process that is killed at the deadline: an `nvmlInit` that blocks (a GPU
/// fell off the bus) must not hold the step.
fn nvml_within_deadline(
    config: &Config,
    ask: fn(&desi_gpu_map::settings::site::NvmlSource) -> Result<Vec<String>, Error>,
) -> Result<Vec<String>, Error> {
    let source = &config.nvml;
    let work = || ask(source).map_err(|e| e.to_string());
    deadline::lines_within(config.nvml_timeout, work).map_err(|failure| match failure {
        Failure::TimedOut => {
            let timed_out = Error::NvmlTimedOut {
                seconds: config.nvml_timeout.as_secs(),
            };
            log::warn!("{timed_out}; the discovery process was killed");
            timed_out
        }
        Failure::Failed(why) => Error::Discovery(why),
    })
}

/// Plans the step on this node: once, in `user_init`.
pub fn plan(
    spank: &SpankHandle,
    config: Option<&Result<Config, Error>>,
    request: Option<&Result<Request, Error>>,
) -> StepPlan {
    let facts = StepFacts {
        step_id: spank.job_stepid().map_err(|e| e.to_string()),
        config,
        request,
        vendor: &node_vendor,
    };
    let env = |name: &str| spank.getenv_lossy(name).ok().flatten();
    // A closest step whose GPUs only NVML lists reads their places in the
    // discovery load, kept here for step_topology: NVML loads once.
    let mut placed: Option<Result<Vec<String>, Error>> = None;
    let mut nvml = |config: &Config, method: Method| {
        let started = Instant::now();
        let found = discover(config, method, &mut placed);
        log::debug!("NVML discovery took {} us", started.elapsed().as_micros());
        found
    };
    let mut plan = plan_step(&facts, &env, &mut nvml);
    if let (StepPlan::Map(map), Some(Ok(config))) = (&mut plan, config) {
        if map.method == Method::Closest {
            // Once per step per node: tasks then do only set arithmetic.
            let started = Instant::now();
            let mut places = |config: &Config| {
                placed
                    .take()
                    .unwrap_or_else(|| nvml_within_deadline(config, nvml::places))
            };
            let topology = step_topology(&HostFiles, config, map, &mut places);
            locate(map, topology.as_ref().map_err(Clone::clone));
            log::debug!("GPU locations read in {} us", started.elapsed().as_micros());
        }
    }
    plan
}

/// The node's GPU UUIDs through NVML. For a `closest` step, their places
/// too, kept in `placed`; where a call of that load fails (CPU affinity,
/// say), the UUIDs alone, so that the step still maps (not after a
/// timeout: that would wait twice).
fn discover(
    config: &Config,
    method: Method,
    placed: &mut Option<Result<Vec<String>, Error>>,
) -> Result<Vec<String>, Error> {
    if method != Method::Closest {
        return nvml_within_deadline(config, nvml::uuids);
    }
    let lines = nvml_within_deadline(config, nvml::places);
    let uuids = lines.as_ref().map(|l| place_uuids(l)).map_err(Clone::clone);
    *placed = Some(lines);
    match uuids {
        Err(Error::Discovery(_)) => nvml_within_deadline(config, nvml::uuids),
        found => found,
    }
}

/// The node's GPU vendor, read from `/sys` and `/dev` (only for steps that
/// get mapped).
fn node_vendor(setting: VendorSetting) -> Chosen {
    let started = Instant::now();
    let chosen = choose(setting, &HostFiles, Path::new("/"));
    log::debug!(
        "vendor {} ({}) in {} us",
        chosen.vendor.name(),
        chosen.why,
        started.elapsed().as_micros()
    );
    chosen
}
