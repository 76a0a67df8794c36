//! `desi-gpu-map`: bind a task where the plugin is not installed (`exec`),
//! preview a layout (`plan`), or report what a task got (`show`). The
//! decisions are the core's (`desi-gpu-map-core`), the machine is the host
//! crate's (`desi-gpu-map-host`). This file parses the command line and
//! runs the subcommand: the one place errors are said and exit codes
//! chosen. The crate denies `unsafe` but in its startup record.
//!
//! Its modules, bottom first (each imports only those listed before it):
//!
//! - [`edge`]: the startup record: the caller's SIGPIPE disposition and
//!   signal mask, recorded before Rust's runtime changes them (a function
//!   in `.init_array`, which must not sit in a library slurmstepd loads)
//!   and put back in the application `exec` runs.
//! - [`json`]: the reports' JSON form.
//! - [`keeper`]: exec's MPS keeper, the process that outlives a step's
//!   tasks to end the daemon exec started (`desi-gpu-map mps-keeper`).
//! - [`args`]: the command line, shared with the man page.
//! - [`plan`]: `plan`, the preview's table and JSON.
//! - [`show`]: `show`, what this task got.
//! - [`in_task`]: what a front end that runs as the task gathers (the
//!   core's `TaskFacts` from exec's options or their variables, the process
//!   as a `Node` and as the protocol's `FrontEnd`, which joins the keeper
//!   and reads the task's CPUs), and applying the outcome: exec's and the
//!   task prolog's, shared.
//! - [`exec`]: `exec`, the plugin's mapping run by the task itself.
//! - [`prolog`]: the task prolog and epilog: the prolog prints the task's
//!   variables as `export`/`unset` lines for slurmstepd and always exits 0;
//!   the epilog tells the step's MPS keeper its task ended.
//! - `manpage.rs`: (tests only) desi-gpu-map(1) rendered from `args.rs`
//!   and compared with the committed page.

#![deny(unsafe_code)]
// Outside tests the command never panics: errors are values.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![cfg_attr(not(test), deny(clippy::panic, clippy::indexing_slicing))]

mod args;
mod edge;
mod exec;
mod in_task;
mod json;
mod keeper;
mod plan;
mod prolog;
mod show;

#[cfg(test)]
mod manpage;

use desi_gpu_map_core::env;
use edge::signals;

use clap::Parser;
use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    args::drop_empty_mirrors();
    if std::env::args_os().len() == 1 {
        match std::env::var(env::SCRIPT_CONTEXT).as_deref() {
            Ok(env::PROLOG_TASK) => return prolog::prolog(),
            Ok(env::EPILOG_TASK) => return prolog::epilog(),
            _ => {}
        }
    }
    let cli = match args::Cli::try_parse() {
        Ok(cli) => cli,
        // Help and version go to standard output, whose write can fail.
        Err(e) if !e.use_stderr() => {
            let what = match e.kind() {
                clap::error::ErrorKind::DisplayVersion => "the version",
                _ => "the help",
            };
            return written(e.print(), "desi-gpu-map", what);
        }
        Err(e) => {
            // A bad value from a variable: say which variable.
            let line = args::error_line(&e);
            if line.contains("(from $") {
                let _ = writeln!(std::io::stderr(), "error: {line}");
                return ExitCode::from(2);
            }
            e.exit()
        }
    };
    let (result, who, what) = match cli.command {
        args::Command::Plan(args) => (plan::run(&args), "desi-gpu-map plan", "the plan"),
        args::Command::Show(args) => (show::run(&args), "desi-gpu-map show", "the report"),
        args::Command::Exec(args) => return exec::run(&args, signals::keep_callers),
        args::Command::MpsKeeper(args) => return keeper::run(&args),
    };
    match result {
        Ok(text) => written(std::io::stdout().write_all(text.as_bytes()), who, what),
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "desi-gpu-map: {e}");
            ExitCode::from(2)
        }
    }
}

/// How the command ends once `who` wrote `what` to standard output (with
/// `wrote`'s result): a failed write is said, but a closed pipe (`| head`)
/// ends quietly, as Unix tools do; both exit 1.
fn written(wrote: std::io::Result<()>, who: &str, what: &str) -> ExitCode {
    // Standard output is line-buffered: a last line without its newline
    // would fail only at exit, unsaid.
    match wrote.and_then(|()| std::io::stdout().flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::from(1),
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "{who}: cannot write {what} to standard output: {e}"
            );
            ExitCode::from(1)
        }
    }
}
