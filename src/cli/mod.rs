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
        Err(e) => e.exit(),
    };
    let (result, who, what) = match cli.command {
        args::Command::Plan(args) => (plan::run(&args), "desi-gpu-map plan", "the plan"),
        args::Command::Show(args) => (show::run(&args), "desi-gpu-map show", "the report"),
        args::Command::Exec(args) => return exec::run(&args, edge.before_exec),
        args::Command::MpsKeeper(args) => return keeper::run(&args, edge.keeper),
        args::Command::NvmlQuery(args) => return nvml::nvml_query(&args.ask, &args.nvml),
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
