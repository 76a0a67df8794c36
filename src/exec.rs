//! `desi-gpu-map exec -- APP`: the plugin's mapping for users whose site
//! has not installed it. Run as the task itself (srun starts it, or
//! another launcher: [`desi_gpu_map_core::launch`]), it gathers what the
//! task's own process knows, lets the core decide
//! ([`desi_gpu_map_core::start`]: refuse, run APP unchanged, or map), joins
//! the step's MPS daemon where the plan starts one, and execs APP with the
//! task's variables: no child process, so APP keeps the task's pid,
//! signals and exit code.

use crate::args::ExecArgs;
use crate::in_task::{apply, decided, join_mps, snapshot};
use desi_gpu_map_core::start::{Mapping, Verdict};
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::CommandExt;
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
    let start = decided(args, snapshot())?;
    let lines: Vec<String> = start
        .outer
        .iter()
        .map(|note| exec_line(&note.to_string()))
        .collect();
    say(&lines);
    let mut command = Command::new(app);
    command.args(app_args);
    match start.verdict {
        Verdict::Refuse(why) => return Err(why.to_string()),
        Verdict::Unchanged { why, said } => {
            if said {
                let runs = format!("{why}; {} runs unchanged", app.to_string_lossy());
                say(&[exec_line(&runs)]);
            }
        }
        Verdict::Map(mut mapping) => {
            join_mps(&mut mapping);
            let lines = apply_to(&mapping, &mut command);
            say(&mapping.said(lines));
        }
    }
    Ok(command)
}

/// A line of exec's own.
fn exec_line(text: &str) -> String {
    format!("desi-gpu-map exec: {text}")
}

/// Sets the task's variables on `command`; returns the lines the
/// outcome says.
fn apply_to(mapping: &Mapping, command: &mut Command) -> Vec<String> {
    let env = std::cell::RefCell::new(command);
    // A Command's environment takes every change.
    apply::<std::convert::Infallible>(
        mapping,
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
