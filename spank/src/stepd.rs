//! The plugin in slurmstepd, from `user_init` to `exit`: the core's
//! protocol (`desi_gpu_map_core::step::FrontEnd`), its steps split
//! between the hooks. `user_init` plans the step once per node and starts
//! its MPS daemon, `task_init` maps each task before it execs, and
//! `task_exit` and `exit` stop the daemon after the node's last task.
//!
//! In slurmstepd nothing may fail: a failing hook there drains the node or
//! fails the job, so every problem becomes a message and the task runs as
//! Slurm made it.

use crate::{mps, node, task_init, DesiGpuMap};
use desi_gpu_map_core::env;
use desi_gpu_map_core::mps::Mps;
use desi_gpu_map_core::names::Named;
use desi_gpu_map_core::settings::option::OptionRequest;
use desi_gpu_map_core::settings::site::{request_from_variable, taken_from_variable};
use desi_gpu_map_core::step::{start_daemon, StepPlan};
use desi_gpu_map_core::Error;
use desi_gpu_map_host::sys::thread_cpu;
use slurm_spank::SpankHandle;
use std::time::Instant;

/// `user_init`: the step's plan on this node, made once, and its MPS
/// daemon started before any task execs.
pub(crate) fn user_init(plugin: &mut DesiGpuMap, spank: &SpankHandle) {
    let started = Instant::now();
    let from_variable = request_in_variable(plugin, spank);
    let request = match &from_variable {
        Some((request, _)) => Some(request),
        None => plugin.request.as_ref(),
    };
    let config = plugin.lines.config();
    let mut plan = node::plan(spank, config, request);
    // The variable was the user's request: a step that stands aside
    // keeps it, for exec and the task prolog to read (and refuse) as
    // the plugin did, never to map with their default in its place.
    if let (StepPlan::Unmapped(unmapped), Some(_)) = (&mut plan, &from_variable) {
        unmapped.clear.retain(|name| name != env::METHOD);
    }
    if let (StepPlan::Map(map), Some((_, said)), Some(Ok(config))) =
        (&mut plan, &from_variable, config)
    {
        let line = taken_from_variable(said, config);
        log::debug!("{line}");
        map.notes.push(line);
    }
    start_mps(plugin, spank, &mut plan);
    if let StepPlan::Map(_) = plan {
        plugin.beside = task_init::Beside::found();
    }
    let took = started.elapsed().as_micros();
    log::debug!("user_init took {took} us ({})", plan.kind());
    if let StepPlan::Map(map) = &plan {
        log::debug!("GPU lists written for {}", map.rendering.vendor.name());
    }
    plugin.plan = Some(plan);
}

/// Where the user gave no option and the site's default would map the
/// step, the user's request in the job's `DESI_GPU_MAP_METHOD` (read for
/// exec and the task prolog): the request, and the value, said under
/// verbose. Bytes that are not UTF-8 read as U+FFFD, a bad value.
fn request_in_variable(
    plugin: &DesiGpuMap,
    spank: &SpankHandle,
) -> Option<(Result<OptionRequest, Error>, String)> {
    if plugin.request.is_some() {
        return None;
    }
    let Some(Ok(config)) = plugin.lines.config() else {
        return None;
    };
    let value = spank.getenv_lossy(env::METHOD).ok().flatten();
    let request = request_from_variable(value.as_deref(), config)?;
    Some((request, value.unwrap_or_default()))
}

/// Starts the step's MPS daemon where the plan has one, before any task
/// execs (the protocol's step 2); the plan then serves the tasks through
/// it, or runs without.
fn start_mps(plugin: &mut DesiGpuMap, spank: &SpankHandle, plan: &mut StepPlan) {
    let mut stepd = node::Slurmstepd::new(spank);
    start_daemon(plan, &mut stepd, None);
    if let Some(served) = stepd.served {
        plugin.daemon = Some(served);
    }
    if let StepPlan::Map(map) = plan {
        if let Mps::Without { why, .. } = &map.mps {
            log::warn!("{why}; running without MPS");
        }
    }
}

/// `task_init_privileged`, in the task before any plugin's `task_init`:
/// where the task is now, which a container plugin that runs first
/// changes (pyxis).
pub(crate) fn task_init_privileged(plugin: &mut DesiGpuMap) {
    if let Some(StepPlan::Map(_)) = plugin.plan {
        plugin.beside.before_task_init();
    }
}

/// `task_init`: the task's share applied before it execs.
pub(crate) fn task_init(plugin: &DesiGpuMap, spank: &SpankHandle) {
    let started = Instant::now();
    let cpu = thread_cpu();
    let kind = plugin.plan.as_ref().map_or("no plan", StepPlan::kind);
    if let Some(plan) = &plugin.plan {
        task_init::apply(spank, plan, &plugin.beside);
    }
    log::debug!(
        "task_init took {} us ({kind}), thread cpu {} us",
        started.elapsed().as_micros(),
        thread_cpu().saturating_sub(cpu).as_micros()
    );
}

/// `task_exit`: the daemon stops after the node's last task (with an
/// unknown count, the step's end stops it: `exit`).
pub(crate) fn task_exit(plugin: &mut DesiGpuMap) {
    if plugin.daemon.as_mut().is_some_and(mps::Served::task_exited) {
        stop_mps(plugin);
    }
}

/// Stops the step's MPS daemon, if one runs; says what went wrong in
/// slurmd's log.
pub(crate) fn stop_mps(plugin: &mut DesiGpuMap) {
    if let Some(served) = plugin.daemon.take() {
        for line in served.stop() {
            log::warn!("{line}");
        }
        log::info!("MPS daemon of the step stopped");
    }
}
