//! Applies a step's plan to one task, in `task_init`, just before it execs.

use desi_gpu_map_core::cpuset::CpuSet;
use desi_gpu_map_core::env;
use desi_gpu_map_core::mps::Mps;
use desi_gpu_map_core::step::{
    carry_out, container_plugin_after, task_outcome, unreadable_task, Container, StepPlan,
    TaskCpus, TaskInputs, TaskOutcome,
};
use desi_gpu_map_host::process::mount_namespace;
use desi_gpu_map_host::sys::allowed_cpus;
use slurm_spank::SpankHandle;
use std::io::Write;

pub fn apply(spank: &SpankHandle, plan: &StepPlan, beside: &Beside) {
    if *plan == StepPlan::Untouched {
        return;
    }
    let node = node_name(spank);
    let outcome = match task_inputs(spank, plan.needs_task_cpus()) {
        Ok(ids) => task_outcome(plan, &ids.with_node(&node, beside.container(plan))),
        Err(e) => unreadable_task(plan, &node, &e),
    };
    apply_outcome(spank, &outcome, &node);
}

/// What the plugin found of container plugins beside it (core:
/// [`Container`]): in `user_init`, and in the task before any plugin's
/// `task_init`.
#[derive(Debug, Default)]
pub struct Beside {
    /// The task's mount namespace before any plugin's `task_init`: a task
    /// in another at this plugin's was moved into a container by a plugin
    /// that ran first. (Slurm's own job container, where there is one, is
    /// joined before.)
    mount_ns: Option<u64>,
    /// A container plugin that runs after this one.
    after: Option<&'static str>,
}

impl Beside {
    pub fn found() -> Beside {
        Beside {
            mount_ns: None,
            after: container_plugin_after(&crate::copies::loaded_after()),
        }
    }

    /// Called in `task_init_privileged`, which every plugin's runs before
    /// any plugin's `task_init`.
    pub fn before_task_init(&mut self) {
        self.mount_ns = mount_namespace();
    }

    /// Where a container plugin stands to this task, which is in its own
    /// mount namespace now (after the plugins before this one ran).
    fn container(&self, plan: &StepPlan) -> Container<'static> {
        if let Some(plugin) = self.after {
            return Container::After { plugin };
        }
        let moved = self.mount_ns.is_some() && mount_namespace() != self.mount_ns;
        if !moved {
            return Container::None;
        }
        let pipe_seen = match plan {
            StepPlan::Map(map) => match &map.mps {
                Mps::Serving(d) => d.pipe().is_dir(),
                _ => true,
            },
            _ => true,
        };
        Container::Entered { pipe_seen }
    }
}

/// The task's ids, read from Slurm; the node name and the container are
/// filled in after.
struct FromSlurm {
    local_id: usize,
    local_count: usize,
    rank: u32,
    cuda: Option<String>,
    tres_bind: Option<String>,
    own_cpus: Option<CpuSet>,
    parent_cpus: Option<CpuSet>,
    bind_type: Option<String>,
    bind_list: Option<String>,
}

impl FromSlurm {
    fn with_node<'a>(&'a self, node: &'a str, container: Container<'a>) -> TaskInputs<'a> {
        TaskInputs {
            node,
            local_id: self.local_id,
            local_count: self.local_count,
            rank: self.rank,
            cuda: self.cuda.as_deref(),
            tres_bind: self.tres_bind.as_deref(),
            cpus: TaskCpus {
                own: self.own_cpus.clone(),
                parent: self.parent_cpus.clone(),
                bind_type: self.bind_type.as_deref(),
                bind_list: self.bind_list.as_deref(),
            },
            container,
        }
    }
}

/// The task's ids and lists; its CPUs only where `with_cpus` (a located
/// `closest` step): other steps skip the affinity call.
fn task_inputs(spank: &SpankHandle, with_cpus: bool) -> Result<FromSlurm, String> {
    let var = |name: &str| spank.getenv_lossy(name).ok().flatten();
    let local_id = spank
        .task_id()
        .map_err(|e| format!("cannot read the local task id: {e}"))?;
    let local_count = spank
        .job_local_task_count()
        .map_err(|e| format!("cannot read the local task count: {e}"))?;
    let rank = spank
        .task_global_id()
        .map_err(|e| format!("cannot read the task rank: {e}"))?;
    Ok(FromSlurm {
        local_id: usize::try_from(local_id).map_err(|_| format!("odd local task id {local_id}"))?,
        local_count: usize::try_from(local_count).unwrap_or(0),
        rank,
        cuda: var(env::CUDA),
        tres_bind: var(env::TRES_BIND),
        own_cpus: if with_cpus { own_cpus() } else { None },
        parent_cpus: if with_cpus { parent_cpus() } else { None },
        bind_type: with_cpus.then(|| var(env::CPU_BIND_TYPE)).flatten(),
        bind_list: with_cpus.then(|| var(env::CPU_BIND_LIST)).flatten(),
    })
}

/// The CPUs slurmstepd may run on: the task is its fork (`_fork_all_tasks()`
/// in `src/slurmd/slurmstepd/mgr.c`), so an unbound task has exactly these,
/// and a task Slurm bound has fewer (the core decides, `list_is_slurms`).
fn parent_cpus() -> Option<CpuSet> {
    let parent = std::os::unix::process::parent_id();
    // 1: slurmstepd is gone and the task was re-parented; that proves nothing.
    (parent > 1).then(|| allowed_cpus(Some(parent))).flatten()
}

/// The CPUs this task may run on. slurmstepd has already applied the task
/// plugin's binding: `exec_task()` in `src/slurmd/slurmstepd/task.c` calls
/// `setup_env()` (which writes `SLURM_CPU_BIND_*`), then
/// `task_g_pre_launch()` (task/affinity binds), then `spank_user_task()`
/// (our `task_init`), in this order in the Slurm sources read for 19.05,
/// 23.x and 24.11.7; on 22.05.8, 24.11.5 and 26.05.5 the test cluster's
/// tasks see their bound masks here (tests/cluster/closest.rs).
fn own_cpus() -> Option<CpuSet> {
    allowed_cpus(None)
}

/// Changes the task's environment as the core says, and prints the lines.
fn apply_outcome(spank: &SpankHandle, outcome: &TaskOutcome, node: &str) {
    let lines = carry_out(
        outcome,
        node,
        &mut |name| spank.unsetenv(name).map_err(|e| e.to_string()),
        &mut |name, value| spank.setenv(name, value, true).map_err(|e| e.to_string()),
    );
    // A stand-aside line also goes to slurmd's log, for the admin.
    for line in &lines {
        if outcome.set.is_empty() {
            log::info!("{line}");
        } else {
            log::debug!("{line}");
        }
    }
    say(&lines);
}

/// The node's name as Slurm knows it.
fn node_name(spank: &SpankHandle) -> String {
    spank
        .getenv_lossy(env::NODE_NAME)
        .ok()
        .flatten()
        .unwrap_or_else(|| "?".to_string())
}

/// Writes to the task's stderr, which slurmstepd has already connected to
/// the user's output; a write error is ignored rather than panicking.
fn say(lines: &[String]) {
    let mut err = std::io::stderr().lock();
    for line in lines {
        let _ = writeln!(err, "{line}");
    }
}
