//! What a front end that runs as the task itself gathers, and how it
//! carries out the core's answer, by the protocol every front end follows
//! ([`desi_gpu_map_core::step::FrontEnd`]): `exec` (which then becomes the
//! application) and the task prolog (which prints the task's variables
//! for slurmstepd) share all of it, so they decide and apply alike.

use crate::args::ExecArgs;
use crate::handover;
use crate::keeper;
use desi_gpu_map_core::cpuset::CpuSet;
use desi_gpu_map_core::env;
use desi_gpu_map_core::error::Error;
use desi_gpu_map_core::files::Files;
use desi_gpu_map_core::launch::watched;
use desi_gpu_map_core::mps::Daemon;
use desi_gpu_map_core::settings::config::{Config, MpsSettings, NvmlSource};
use desi_gpu_map_core::settings::option::OptionRequest;
use desi_gpu_map_core::snapshot::Snapshot;
use desi_gpu_map_core::start::{decide, request, Mapping, Start, TaskFacts, DEFAULT_METHOD};
use desi_gpu_map_core::step::{carry_out, FrontEnd, Node, NvmlAsk};
use desi_gpu_map_core::wire;
use desi_gpu_map_host::failure::Failure;
use desi_gpu_map_host::files::HostFiles;
use desi_gpu_map_host::mps::daemon::random_token;
use desi_gpu_map_host::nvml::ask_within;
use desi_gpu_map_host::process::{comm, launch_ancestry, task_pid, SLURMSTEPD};
use desi_gpu_map_host::stepd;
use desi_gpu_map_host::sys::allowed_cpus;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The core's decision for this task, from its variables (`vars`, read
/// by [`snapshot`]), what else its own process knows and `args` (exec's
/// options, or the variables that mirror them); or why `args` cannot be
/// read.
pub fn decided(args: &ExecArgs, vars: Snapshot) -> Result<Start, String> {
    let request = request(args.method, vars.method.as_deref()).map_err(|e| e.to_string())?;
    // Only MPS needs the control daemon: no search of PATH for a task
    // that does not ask for it (exec's MPS mode is Allow: asked or none).
    let wants_mps = matches!(request, OptionRequest::Use { mps: true, .. });
    let facts = TaskFacts {
        request,
        vars,
        allow_outside: args.allow_outside_slurm,
        config: config(args, wants_mps),
        ancestry: launch_ancestry(&watched()),
        ancestor_pid: &stepd::ancestor_named,
        uid: rustix::process::getuid().as_raw(),
        gid: rustix::process::getgid().as_raw(),
        token: random_token(),
    };
    Ok(decide(&facts, &PROCESS))
}

/// The plugin's settings that exec takes as options (clap checked each),
/// and exec's own default method; the rest are the plugin's defaults.
/// The MPS control daemon is looked for only where the task `wants_mps`.
fn config(args: &ExecArgs, wants_mps: bool) -> Config {
    Config {
        default: DEFAULT_METHOD,
        verbose: args.verbose,
        visible: args.visible,
        vendor: args.devices.vendor,
        nvml: args.devices.nvml.clone(),
        nvml_timeout: std::time::Duration::from_secs(args.devices.nvml_timeout),
        kernel_root: args.kernel_root.clone(),
        mps: mps_settings(args, wants_mps),
        ..Config::default()
    }
}

/// The plugin's MPS settings that exec takes as options; the control
/// daemon only `with_control` (it is read only where a daemon starts).
pub fn mps_settings(args: &ExecArgs, with_control: bool) -> MpsSettings {
    MpsSettings {
        share: args.mps_share,
        dir: args.mps_dir.clone(),
        control: with_control.then(|| mps_control(args)).flatten(),
        control_named_by: format!("--mps-control or ${}", env::MPS_CONTROL_PATH),
        ..MpsSettings::default()
    }
}

/// The MPS control daemon: `--mps-control` (or its variable), else the
/// first on `PATH`; `None` where none is found (the core then looks where
/// NVIDIA's packages put it).
fn mps_control(args: &ExecArgs) -> Option<PathBuf> {
    if let Some(path) = &args.mps_control {
        return Some(path.clone());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(env::MPS_CONTROL))
        .find(|file| file.is_file())
}

/// Where the plan starts the step's daemon, this task joins it through
/// the keeper (the node's first task to get here starts it).
pub fn join_mps(mapping: &mut Mapping) {
    mapping.start_daemon(&mut InTask);
}

/// Why the keeper could not know this task: a task prolog exits before
/// its task's application starts, so the keeper watches the prolog's
/// parent, which must be the task that `SLURM_TASK_PID` names; else it
/// would stop the daemon before any application could reach it. A task
/// prolog's parent is the task before its exec: named slurmstepd, or
/// hidden where `/proc` is mounted `hidepid`. (The application inherits
/// `SLURM_SCRIPT_CONTEXT` too, but its parents are its own.)
fn task_unknown() -> Option<NotJoined> {
    let context = std::env::var_os("SLURM_SCRIPT_CONTEXT")?;
    let task = task_pid();
    let parent = std::os::unix::process::parent_id();
    let known = task == Some(std::process::id()) || task == Some(parent);
    let prolog = context == "prolog_task" && comm(parent).map_or(true, |name| name == SLURMSTEPD);
    (prolog && !known).then_some(NotJoined::TaskUnknown { parent, task })
}

/// Why a task of exec or the task prolog joined no MPS daemon.
#[derive(Debug)]
pub enum NotJoined {
    /// The task prolog runs beside its task, not as it: no keeper could
    /// tell when the task ends.
    TaskUnknown { parent: u32, task: Option<u32> },
    /// The keeper did not serve it.
    Keeper(Failure),
}

impl std::fmt::Display for NotJoined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotJoined::TaskUnknown { parent, task } => write!(
                f,
                "the task prolog's parent (pid {parent}) is not its task (SLURM_TASK_PID={}), so \
                 no MPS keeper could tell when the task ends",
                task.map_or("unset".to_string(), |t| t.to_string())
            ),
            NotJoined::Keeper(failure) => failure.fmt(f),
        }
    }
}

/// Carries out the task's outcome through `unset` and `set`, reading the
/// CPUs the core asks for; returns the lines the outcome says.
pub fn apply<E: std::fmt::Display>(
    mapping: &Mapping,
    unset: &mut dyn FnMut(&str) -> Result<(), E>,
    set: &mut dyn FnMut(&str, &str) -> Result<(), E>,
) -> Vec<String> {
    let outcome = mapping.outcome(&InTask);
    carry_out(&outcome, &mapping.vars.node, unset, set)
}

/// The task's own process as the protocol's front end
/// ([`desi_gpu_map_core::step::FrontEnd`]): it joins the step's daemon
/// through the keeper, and reads CPUs from the kernel.
struct InTask;

impl FrontEnd for InTask {
    type NoDaemon = NotJoined;

    fn start_daemon(&mut self, daemon: &Daemon, task: Option<usize>) -> Result<Daemon, NotJoined> {
        if let Some(why) = task_unknown() {
            return Err(why);
        }
        // The task names itself: exec's `Mapping` asks with its local id.
        let local_id = task.unwrap_or(0);
        keeper::join(daemon, stepd(), local_id).map_err(NotJoined::Keeper)
    }

    fn own_cpus(&self) -> Option<CpuSet> {
        allowed_cpus(None)
    }

    fn stepd_cpus(&self) -> Option<CpuSet> {
        stepd().and_then(|pid| allowed_cpus(Some(pid)))
    }
}

/// The step's slurmstepd above this process, read from `/proc` once: the
/// keeper and `closest` both ask for it.
fn stepd() -> Option<u32> {
    static STEPD: OnceLock<Option<u32>> = OnceLock::new();
    *STEPD.get_or_init(stepd::slurmstepd_above)
}

/// The task's own process as the core's node: its environment, the
/// machine's files, and NVML asked in a child process with a deadline
/// ([`desi_gpu_map_host::deadline`]).
pub struct Process;

/// This process, as the core's node.
pub const PROCESS: Process = Process;

/// The variables a decision reads, as this process has them, each read
/// once. Not UTF-8 is a bad value, never an unset one: U+FFFD names no
/// method, and no list.
pub fn snapshot() -> Snapshot {
    Snapshot::read(|name: &str| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()))
}

impl Node for Process {
    fn files(&self) -> &dyn Files {
        &HostFiles
    }

    fn nvml(&self, ask: NvmlAsk, config: &Config) -> Result<Vec<String>, Error> {
        if handover::STATIC && config.nvml != NvmlSource::Off {
            return Err(wire::broken(handover::to_dynamic()));
        }
        ask_within(ask, &config.nvml, config.nvml_timeout)
    }
}
