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
use desi_gpu_map_core::step::{start_daemon, StepPlan};
use desi_gpu_map_host::sys::thread_cpu;
use slurm_spank::SpankHandle;
use std::time::Instant;

/// `user_init`: the step's plan on this node, made once, and its MPS
/// daemon started before any task execs.
pub(crate) fn user_init(plugin: &mut DesiGpuMap, spank: &SpankHandle) {
    let started = Instant::now();
    let mut plan = node::plan(spank, plugin.lines.config(), plugin.request.as_ref());
    start_mps(plugin, spank, &mut plan);
    if let StepPlan::Map(_) = plan {
        plugin.beside = task_init::Beside::found();
    }
    plugin.node_name = spank.getenv_lossy(env::NODE_NAME).ok().flatten();
    let took = started.elapsed().as_micros();
    log::debug!("user_init took {took} us ({})", plan.kind());
    if let StepPlan::Map(map) = &plan {
        log::debug!("GPU lists written for {}", map.rendering.vendor.name());
    }
    plugin.plan = Some(plan);
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
        task_init::apply(spank, plan, &plugin.beside, plugin.node_name.as_deref());
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
