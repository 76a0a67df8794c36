//! `desi-gpu-map exec -- APP`: the plugin's mapping for users whose site
//! has not installed it. Run as the task itself (srun starts it), it plans
//! the step through the same core as the plugin, from what slurmstepd left
//! in the task's environment, and then execs APP with the task's variables:
//! no child process, so APP keeps the task's pid, signals and exit code.
//! Under another launcher (`mpirun`, `mpiexec`, PALS: [`desi_gpu_map_core::launch`])
//! the launcher's variables place the rank instead of Slurm's, and its
//! GPUs are those the process was given ([`Given`]).

use super::keeper;
use crate::args::{exec_request, ExecArgs};
use desi_gpu_map_core::env;
use desi_gpu_map_core::error::Error;
use desi_gpu_map_core::files::{hostname, Files};
use desi_gpu_map_core::launch::{launched, watched, Launch, Launched};
use desi_gpu_map_core::method::Method;
use desi_gpu_map_core::mps::{Mps, MpsFacts};
use desi_gpu_map_core::settings::option::{Choice, Request};
use desi_gpu_map_core::settings::site::{Config, MpsSettings};
use desi_gpu_map_core::slurm::tasks::local_count;
use desi_gpu_map_core::step::{
    carry_out, parse_step_id, plan_step, slurm_bound_here, special_step_name, step_tag,
    task_outcome, unreadable_task, Aside, Given, Node, NvmlAsk, StepFacts, StepPlan, TaskCpus,
    TaskInputs, Unmapped,
};
use desi_gpu_map_core::text::quote;
use desi_gpu_map_host::cpus;
use desi_gpu_map_host::files::HostFiles;
use desi_gpu_map_host::mps::daemon::random_token;
use desi_gpu_map_host::nvml::ask_within;
use desi_gpu_map_host::process::launch_ancestry;
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

/// The shell's exit codes for a command that cannot be found or run.
const NOT_FOUND: u8 = 127;
const NOT_EXECUTABLE: u8 = 126;
/// Bad input: nothing was run.
const USAGE: u8 = 2;

/// Maps this task and execs the application, `before_exec` done to its
/// command last (the binary keeps the caller's signals there); returns
/// only on failure.
pub fn run(args: &ExecArgs, before_exec: fn(&mut std::process::Command)) -> ExitCode {
    match prepare(args) {
        Ok(mut command) => {
            let app = args.command.first().cloned().unwrap_or_default();
            before_exec(&mut command);
            failed(&app, command.exec())
        }
        Err(why) => {
            say(&[format!("desi-gpu-map exec: {why}")]);
            ExitCode::from(USAGE)
        }
    }
}

/// The application's command, with the task's variables set; or why
/// nothing may run.
fn prepare(args: &ExecArgs) -> Result<Command, String> {
    let (app, app_args) = args.command.split_first().ok_or_else(|| {
        "no command to run: desi-gpu-map exec [OPTIONS] -- APP [ARGS...]".to_string()
    })?;
    let asked = asked(args)?;
    let config = config(args);
    let ancestry = launch_ancestry(&watched());
    let (launch, ignored) = match launched(&|name| Process::SLURM.env(name), &ancestry) {
        Ok(Launched::By(launch)) => (Some(launch), Vec::new()),
        Ok(Launched::Slurm { ignored }) => (None, ignored),
        Err(why) => return Err(format!("{why}; nothing was run")),
    };
    if asked.verbose && !ignored.is_empty() {
        say(&[format!(
            "desi-gpu-map exec: {} came in through srun from an outer launch, not from a \
             launcher of this task: ignored",
            ignored.join(", ")
        )]);
    }
    if let (Some(launch), true) = (&launch, asked.mps) {
        return Err(format!(
            "mps is for srun's tasks, and these are {}'s ranks: start the MPS daemon around \
             the launch, or launch with srun; nothing was run",
            launch.launcher.title
        ));
    }
    let node = Process::new(launch.as_ref());
    let aside = match launch {
        Some(_) => None,
        None => outside_step(&node, args.allow_outside_slurm)?,
    };
    let mut command = Command::new(app);
    command.args(app_args);
    let this = this_record(&node, launch.as_ref());
    let aside = aside.or_else(|| {
        mapped_already(&node, this.as_deref()).then(|| match launch {
            Some(_) => "this launch is mapped already (by an earlier exec)".to_string(),
            None => "this step is mapped already (by the plugin)".to_string(),
        })
    });
    if let Some(why) = aside {
        if asked.verbose {
            say(&[format!(
                "desi-gpu-map exec: {why}; {} runs unchanged",
                app.to_string_lossy()
            )]);
        }
        return Ok(command);
    }
    let ids = match &launch {
        Some(l) => Ok((l.local_id, l.local_count, l.rank)),
        None => task_ids(&node),
    };
    let local_tasks = ids.as_ref().ok().map(|&(_, count, _)| count);
    // Slurm narrowed this task's lists itself: nothing to plan them from.
    let mut plan = match slurm_bound_here(node.env(env::TRES_BIND).as_deref()) {
        Some(why) => StepPlan::slurm_binds(&config.flag, why, asked.mps),
        None => plan(&node, config, asked, launch.as_ref(), local_tasks),
    };
    if let (StepPlan::Map(map), true) = (&mut plan, launch.is_some()) {
        map.step = this;
    }
    if let Ok((local_id, _, _)) = ids {
        join_mps(&mut plan, local_id);
    }
    let lines = apply(&node, &plan, &mut command, launch.as_ref(), ids);
    if asked.verbose || !routine(&plan) {
        say(&lines);
    }
    Ok(command)
}

/// Why the application runs unchanged where exec is not a task of an srun
/// step: in the batch, interactive or extern step (which the plugin never
/// touches either), or in a job outside any step (a batch script or an
/// allocation's shell: only srun steps get `SLURM_STEP_ID`). `None`: a
/// task of a step, or `--allow-outside-slurm`. Outside any Slurm job,
/// nothing may run.
fn outside_step(node: &Process, allow_outside: bool) -> Result<Option<String>, String> {
    if let Some(value) = node.env(env::STEP_ID) {
        let special = parse_step_id(&value).and_then(special_step_name);
        return Ok(special.map(|name| {
            format!(
                "this is {name} ({}={}), which is never mapped",
                env::STEP_ID,
                value.trim()
            )
        }));
    }
    if allow_outside {
        return Ok(None);
    }
    let job = [env::JOB_ID, env::JOB_ID_OLD]
        .into_iter()
        .find_map(|name| node.env(name).map(|value| (name, value)));
    match job {
        Some((name, value)) => Ok(Some(format!(
            "not in an srun step ({name}={} is set, {} is not: a batch script or an \
             allocation's shell), so nothing is mapped",
            quote(&value),
            env::STEP_ID
        ))),
        None => Err(format!(
            "not inside a Slurm job (neither {} nor {} is set), so nothing was run; start it \
             with srun, or give --allow-outside-slurm to test",
            env::STEP_ID,
            env::JOB_ID
        )),
    }
}

/// What exec was asked for: the method, and the modifiers.
#[derive(Debug, Clone, Copy)]
struct Asked {
    choice: Choice,
    verbose: bool,
    mps: bool,
}

/// `--method`, else `$DESI_GPU_MAP_METHOD`, else contiguous; `--verbose`
/// or the `verbose` word.
fn asked(args: &ExecArgs) -> Result<Asked, String> {
    let request = match (args.method, std::env::var(env::METHOD)) {
        (Some(request), _) => request,
        (None, Ok(value)) => exec_request(&value)
            .map_err(|e| format!("{}={}: {e}; give --method", env::METHOD, quote(&value)))?,
        (None, Err(_)) => Request::Use {
            choice: None,
            verbose: false,
            mps: false,
        },
    };
    match request {
        Request::Use {
            choice,
            verbose,
            mps,
        } => Ok(Asked {
            choice: choice.unwrap_or(Choice::Map(Method::Contiguous)),
            verbose: verbose || args.verbose,
            mps,
        }),
        Request::Help => Err("help names no method to map with; give --method".to_string()),
    }
}

/// The plugin's settings that exec takes as options (clap checked each);
/// the rest are the plugin's defaults.
fn config(args: &ExecArgs) -> Config {
    Config {
        visible: args.visible,
        vendor: args.vendor,
        nvml: args.nvml.clone(),
        nvml_timeout: std::time::Duration::from_secs(args.nvml_timeout),
        kernel_root: args.kernel_root.clone(),
        mps: MpsSettings {
            share: args.mps_share,
            dir: args.mps_dir.clone(),
            control: mps_control(args),
            control_named_by: format!("--mps-control or ${}", env::MPS_CONTROL_PATH),
            ..MpsSettings::default()
        },
        ..Config::default()
    }
}

/// The MPS control daemon: `--mps-control`, else its variable, else the
/// first on `PATH`; `None` where none is found (the core then looks where
/// NVIDIA's packages put it).
fn mps_control(args: &ExecArgs) -> Option<PathBuf> {
    if let Some(path) = &args.mps_control {
        return Some(path.clone());
    }
    if let Some(path) = std::env::var_os(env::MPS_CONTROL_PATH).filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(env::MPS_CONTROL))
        .find(|file| file.is_file())
}

/// What `DESI_GPU_MAP_STEP` holds where this very step is mapped: the
/// step's tag (`JOBID.STEPID`), or a launcher's rank's launch tag (its job
/// id, or its proxy's pid above this process), which a nested launch does
/// not share.
fn this_record(node: &Process, launch: Option<&Launch>) -> Option<String> {
    match launch {
        Some(launch) => launch.tag(&|name| node.env(name), &cpus::ancestor_named),
        None => node
            .env(env::STEP_ID)
            .and(step_id(node).ok())
            .and_then(|id| step_tag(node, id)),
    }
}

/// This very step is mapped already: the plugin (or an earlier exec)
/// recorded it in `DESI_GPU_MAP_STEP` ([`this_record`]), which it writes
/// only where it maps and removes everywhere else, whatever the site's flag
/// is called. An outer step's record names another step.
fn mapped_already(node: &Process, this: Option<&str>) -> bool {
    this.is_some() && node.env(env::STEP).as_deref() == this
}

/// This step's id (0 outside a step, with `--allow-outside-slurm`).
fn step_id(node: &Process) -> Result<u32, String> {
    let value = node.env(env::STEP_ID).unwrap_or_else(|| "0".to_string());
    parse_step_id(&value)
        .ok_or_else(|| format!("{}={} is not a step id", env::STEP_ID, quote(&value)))
}

/// The step's plan, through the same core as the plugin's. A launcher's
/// rank is no step of Slurm's (its tag stands in for the step's): where it
/// runs in the batch step, or in no step, it is not left untouched.
/// `local_tasks`: the node's task count, for MPS, where it could be read.
fn plan(
    node: &Process,
    config: Config,
    asked: Asked,
    launch: Option<&Launch>,
    local_tasks: Option<usize>,
) -> StepPlan {
    let step_id = match launch {
        Some(_) => Ok(0),
        None => step_id(node),
    };
    let config = Ok(config);
    let request = Ok(Request::Use {
        choice: Some(asked.choice),
        verbose: asked.verbose,
        mps: asked.mps,
    });
    let facts = StepFacts {
        step_id,
        config: Some(&config),
        request: Some(&request),
        mps: local_tasks.and_then(|count| mps_facts(node, count)),
    };
    plan_step(&facts, node)
}

/// The user and this node's `local_tasks`, for a daemon of the step's own;
/// `None` where the node's id cannot be read.
fn mps_facts(node: &Process, local_tasks: usize) -> Option<MpsFacts> {
    let node_id = node.env(env::NODE_ID)?.trim().parse().ok()?;
    Some(MpsFacts {
        uid: rustix::process::getuid().as_raw(),
        gid: rustix::process::getgid().as_raw(),
        local_tasks,
        node_id,
        token: random_token(),
    })
}

/// Where the plan starts the step's daemon, this task (node-local
/// `local_id`) joins it (the node's first task to get here starts it,
/// through the keeper).
fn join_mps(plan: &mut StepPlan, local_id: usize) {
    let StepPlan::Map(map) = plan else { return };
    let Mps::Start(daemon) = &map.mps else { return };
    match keeper::join(daemon, cpus::slurmstepd_above(), local_id) {
        Ok(daemon) => map.mps_started(daemon),
        Err(why) => map.mps_failed(why),
    }
}

/// Sets the task's variables on `command`; returns the lines to say. `ids`:
/// the task's local id, its node's task count and its rank (the launcher's
/// where one placed it), or why they cannot be read.
fn apply(
    node: &Process,
    plan: &StepPlan,
    command: &mut Command,
    launch: Option<&Launch>,
    ids: Result<(usize, usize, u32), String>,
) -> Vec<String> {
    let name = node
        .env(env::NODE_NAME)
        // Outside a step (a launcher's rank, --allow-outside-slurm):
        // this host's own name.
        .or_else(|| hostname(&HostFiles).filter(|_| launch.is_some() || !in_step(node)))
        .unwrap_or_else(|| "?".to_string());
    let cuda = node.env(env::CUDA);
    let tres_bind = node.env(env::TRES_BIND);
    // Slurm's CPU binding describes a launcher's daemon step, not its
    // ranks: a rank's own CPUs are its mask.
    let slurms = |var| node.env(var).filter(|_| launch.is_none());
    let bind_type = slurms(env::CPU_BIND_TYPE);
    let bind_list = slurms(env::CPU_BIND_LIST);
    let outcome = match ids {
        Ok((local_id, local_count, rank)) => {
            let closest = plan.needs_task_cpus();
            let task = TaskInputs {
                node: &name,
                local_id,
                local_count,
                rank,
                cuda: cuda.as_deref(),
                tres_bind: tres_bind.as_deref(),
                cpus: TaskCpus {
                    own: closest.then(|| cpus::allowed("self")).flatten(),
                    // slurmstepd's mask: an unbound task's own equals it.
                    parent: (closest && launch.is_none())
                        .then(cpus::slurmstepd_above)
                        .flatten()
                        .and_then(|pid| cpus::allowed(&pid.to_string())),
                    bind_type: bind_type.as_deref(),
                    bind_list: bind_list.as_deref(),
                },
            };
            task_outcome(plan, &task)
        }
        Err(why) => unreadable_task(plan, &name, &why),
    };
    let env = std::cell::RefCell::new(command);
    carry_out(
        &outcome,
        &name,
        &mut |var| {
            env.borrow_mut().env_remove(var);
            Ok(())
        },
        &mut |var, value| {
            env.borrow_mut().env(var, value);
            Ok(())
        },
    )
}

/// The task's node-local id, the node's task count and its rank, from the
/// variables slurmstepd set.
fn task_ids(node: &Process) -> Result<(usize, usize, u32), String> {
    let number = |name: &str| -> Result<usize, String> {
        let value = node.env(name).ok_or_else(|| format!("{name} is not set"))?;
        value
            .trim()
            .parse::<usize>()
            .map_err(|_| format!("{name}={value:?} is not a number"))
    };
    let local_id = number(env::LOCAL_ID)?;
    let node_id = number(env::NODE_ID)?;
    let counts = node
        .env(env::TASKS_PER_NODE)
        .ok_or_else(|| format!("{} is not set", env::TASKS_PER_NODE))?;
    let local_count = local_count(&counts, node_id).ok_or_else(|| {
        format!(
            "{}={counts:?} gives no task count for node {node_id}",
            env::TASKS_PER_NODE
        )
    })?;
    let rank = u32::try_from(number(env::RANK)?).map_err(|_| "rank too large".to_string())?;
    Ok((local_id, local_count, rank))
}

/// An unmapped step that the user expects to run unchanged (no GPUs here,
/// or Slurm binds each task itself): said only under `--verbose`.
fn routine(plan: &StepPlan) -> bool {
    match plan {
        StepPlan::Untouched => true,
        StepPlan::Unmapped(Unmapped { why, .. }) => why.as_ref().map_or(true, Aside::is_routine),
        StepPlan::Map(_) => false,
    }
}

/// The shell's words and exit code for an application that cannot run.
fn failed(app: &OsString, e: std::io::Error) -> ExitCode {
    let app = app.to_string_lossy();
    let (code, why) = match e.kind() {
        std::io::ErrorKind::NotFound => (NOT_FOUND, "command not found".to_string()),
        std::io::ErrorKind::PermissionDenied => (NOT_EXECUTABLE, "Permission denied".to_string()),
        _ => (NOT_EXECUTABLE, e.to_string()),
    };
    say(&[format!("desi-gpu-map exec: {app}: {why}")]);
    ExitCode::from(code)
}

fn say(lines: &[String]) {
    let mut err = std::io::stderr().lock();
    for line in lines {
        let _ = writeln!(err, "{line}");
    }
}

/// The task's own process as the core's node: its environment, the
/// machine's files, and NVML asked in a child process with a deadline
/// ([`desi_gpu_map_host::deadline`]); for a launcher's rank, what it was given.
struct Process {
    given: Option<Given>,
}

/// A task of an srun step (not the batch, interactive or extern step).
fn in_step(node: &Process) -> bool {
    node.env(env::STEP_ID)
        .and_then(|id| parse_step_id(&id))
        .is_some_and(|id| special_step_name(id).is_none())
}

impl Process {
    /// A task of an srun step: Slurm's list.
    const SLURM: Process = Process { given: None };

    /// A launcher's rank in an srun step (its daemon's, inside an
    /// allocation) takes that step's list as Slurm set it; elsewhere the
    /// list it inherited, or outside any Slurm job every GPU of the node.
    fn new(launch: Option<&Launch>) -> Process {
        let node = Process::SLURM;
        let in_step = in_step(&node);
        let in_job = [env::JOB_ID, env::JOB_ID_OLD]
            .iter()
            .any(|name| node.env(name).is_some());
        let given = match (launch, in_step, in_job) {
            (None, _, _) | (Some(_), true, _) => None,
            (Some(_), false, true) => Some(Given::Inherited),
            (Some(_), false, false) => Some(Given::InheritedOrNode),
        };
        Process { given }
    }
}

impl Node for Process {
    fn env(&self, name: &str) -> Option<String> {
        std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
    }

    fn files(&self) -> &dyn Files {
        &HostFiles
    }

    fn nvml(&self, ask: NvmlAsk, config: &Config) -> Result<Vec<String>, Error> {
        ask_within(ask, &config.nvml, config.nvml_timeout)
    }

    fn given(&self) -> Option<Given> {
        self.given
    }
}
