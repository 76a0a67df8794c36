//! `desi-gpu-map exec -- APP`: the plugin's mapping for users whose site
//! has not installed it. Run as the task itself (srun starts it, or
//! another launcher: [`desi_gpu_map_core::launch`]), it gathers what the
//! task's own process knows, lets the core decide
//! ([`desi_gpu_map_core::start`]: refuse, run APP unchanged, or map), joins
//! the step's MPS daemon where the plan starts one, and execs APP with the
//! task's variables: no child process, so APP keeps the task's pid,
//! signals and exit code.

use super::keeper;
use crate::args::ExecArgs;
use desi_gpu_map_core::env;
use desi_gpu_map_core::error::Error;
use desi_gpu_map_core::files::Files;
use desi_gpu_map_core::launch::watched;
use desi_gpu_map_core::settings::site::{Config, MpsSettings};
use desi_gpu_map_core::start::{decide, Answer, Asked, Mapping, TaskFacts};
use desi_gpu_map_core::step::{carry_out, Node, NvmlAsk};
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
            say(&[exec_line(&why)]);
            ExitCode::from(USAGE)
        }
    }
}

/// The application's command, with the task's variables set; or why
/// nothing may run. The core decides ([`decide`]); this carries it out.
fn prepare(args: &ExecArgs) -> Result<Command, String> {
    let (app, app_args) = args.command.split_first().ok_or_else(|| {
        "no command to run: desi-gpu-map exec [OPTIONS] -- APP [ARGS...]".to_string()
    })?;
    let facts = TaskFacts {
        asked: Asked::read(
            args.method,
            std::env::var(env::METHOD).ok().as_deref(),
            args.verbose,
        )?,
        allow_outside: args.allow_outside_slurm,
        config: config(args),
        ancestry: launch_ancestry(&watched()),
        ancestor_pid: &cpus::ancestor_named,
        uid: rustix::process::getuid().as_raw(),
        gid: rustix::process::getgid().as_raw(),
        token: random_token(),
    };
    let start = decide(&facts, &Process);
    let lines: Vec<String> = start.notes.iter().map(|note| exec_line(note)).collect();
    say(&lines);
    let mut command = Command::new(app);
    command.args(app_args);
    match start.answer {
        Answer::Refuse(why) => return Err(why),
        Answer::Unchanged { why, said } => {
            if said {
                let runs = format!("{why}; {} runs unchanged", app.to_string_lossy());
                say(&[exec_line(&runs)]);
            }
        }
        Answer::Map(mut mapping) => {
            join_mps(&mut mapping);
            let lines = apply(&mapping, &mut command);
            say(&mapping.said(lines));
        }
    }
    Ok(command)
}

/// A line of exec's own.
fn exec_line(text: &str) -> String {
    format!("desi-gpu-map exec: {text}")
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

/// Where the plan starts the step's daemon, this task joins it through
/// the keeper (the node's first task to get here starts it).
fn join_mps(mapping: &mut Mapping) {
    if let Some((daemon, local_id)) = mapping.daemon_to_join() {
        let joined = keeper::join(daemon, cpus::slurmstepd_above(), local_id);
        mapping.joined(joined);
    }
}

/// Sets the task's variables on `command`, reading the CPUs the core
/// asks for; returns the lines the outcome says.
fn apply(mapping: &Mapping, command: &mut Command) -> Vec<String> {
    let own = mapping
        .needs_own_cpus()
        .then(|| cpus::allowed("self"))
        .flatten();
    let stepd = mapping
        .needs_stepd_cpus()
        .then(cpus::slurmstepd_above)
        .flatten()
        .and_then(|pid| cpus::allowed(&pid.to_string()));
    let outcome = mapping.outcome(own, stepd);
    let env = std::cell::RefCell::new(command);
    carry_out(
        &outcome,
        &mapping.node,
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
/// ([`desi_gpu_map_host::deadline`]).
struct Process;

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
}
