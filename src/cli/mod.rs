//! The `desi-gpu-map` command, behind the `cli` feature (the plugin links
//! neither clap nor serde): its command line ([`args`]), `plan` (the
//! preview, over [`layout`]), `show`, and `exec` (the plugin's mapping,
//! run by the task itself).

pub mod args;
mod exec;
mod json;
pub mod keeper;
mod layout;
mod nvml;
mod plan;
mod show;

/// The plan `desi-gpu-map plan` previews a node's tasks with, for
/// tests/bench/closest.rs: not a stable interface.
#[doc(hidden)]
pub use layout::preview_map;

use clap::Parser;
use std::io::Write;
use std::process::ExitCode;

/// What the binary does to the application's command just before `exec`
/// replaces the process with it: `src/main.rs`, the crate that holds the
/// FFI edge this library forbids, puts back the caller's signal
/// dispositions and mask there, which std's `Command` changes.
pub type BeforeExec = fn(&mut std::process::Command);

/// What only `src/main.rs`, the crate that holds the FFI edge, can do.
pub struct Edge {
    pub before_exec: BeforeExec,
    /// What exec's MPS keeper takes from the FFI edge ([`keeper`]).
    pub keeper: keeper::KeeperEdge,
}

/// Runs the command with the process's arguments.
pub fn main(edge: Edge) -> ExitCode {
    let cli = args::Cli::parse();
    let result = match cli.command {
        args::Command::Plan(args) => plan::run(&args),
        args::Command::Show(args) => show::run(&args),
        args::Command::Exec(args) => return exec::run(&args, edge.before_exec),
        args::Command::MpsKeeper(args) => return keeper::run(&args, edge.keeper),
        args::Command::NvmlQuery(args) => return nvml::nvml_query(&args.ask, &args.nvml),
    };
    match result {
        // A closed pipe (`| head`) is not an error worth a panic.
        Ok(text) => match std::io::stdout().lock().write_all(text.as_bytes()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(_) => ExitCode::from(1),
        },
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "desi-gpu-map: {e}");
            ExitCode::from(2)
        }
    }
}
