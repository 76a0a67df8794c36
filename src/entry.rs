//! What the command does with its arguments, whichever build runs it: the
//! dynamic `desi-gpu-map` (src/main.rs) or the static
//! `desi-gpu-map-prolog` (src/main_static.rs).

use crate::edge::{runtime, signals};
use crate::{args, exec, keeper, plan, prolog, show};
use desi_gpu_map_core::env;

use clap::Parser;
use std::io::Write;
use std::process::ExitCode;

/// The command, as either build runs it.
fn run() -> ExitCode {
    args::drop_empty_mirrors();
    if let Some(script) = task_script() {
        script.run();
        return ExitCode::SUCCESS;
    }
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(exec) = exec_alone(&argv) {
        return exec::run(&exec, signals::keep_callers);
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

/// Either build's C `main` (both roots are `no_main`): started without
/// Rust's runtime ([`runtime::start`] does what of it the command needs),
/// it runs the command, flushes standard output (as the runtime would at
/// exit) and returns the status as a number.
// SAFETY: `no_mangle` makes this the one C `main` of the program, which
// the C library's start calls once with argc and argv; neither is read
// (std reads them itself, from glibc's `.init_array` call).
#[allow(unsafe_code)]
#[cfg_attr(not(test), no_mangle)]
#[cfg_attr(test, allow(dead_code))] // tests start through their own harness
extern "C" fn main(
    _argc: std::ffi::c_int,
    _argv: *const *const std::ffi::c_char,
) -> std::ffi::c_int {
    runtime::start();
    let code = run();
    let _ = std::io::stdout().flush();
    std::ffi::c_int::from(status(code))
}

/// `code`'s number: std gives no stable way back to it, but compares codes.
fn status(code: ExitCode) -> u8 {
    (0..=u8::MAX)
        .find(|&n| ExitCode::from(n) == code)
        .unwrap_or(1)
}

/// Which of a task's scripts slurmstepd runs this as: given no argument,
/// and told by `SLURM_SCRIPT_CONTEXT`.
enum TaskScript {
    Prolog,
    Epilog,
}

impl TaskScript {
    /// Runs it; both always end in success (slurmstepd would kill a task
    /// whose prolog failed).
    fn run(self) {
        match self {
            TaskScript::Prolog => prolog::prolog(),
            TaskScript::Epilog => prolog::epilog(),
        }
    }
}

fn task_script() -> Option<TaskScript> {
    if std::env::args_os().len() != 1 {
        return None;
    }
    match std::env::var(env::SCRIPT_CONTEXT).as_deref() {
        Ok(env::PROLOG_TASK) => Some(TaskScript::Prolog),
        Ok(env::EPILOG_TASK) => Some(TaskScript::Epilog),
        _ => None,
    }
}

/// `exec`'s arguments, read by hand ([`args::exec_by_hand`]) where they
/// take its common forms: every task of a step starts through it, and
/// clap's parser (every option's help built, then matched) costs each one
/// a start. `None` for any other subcommand, and for help, version and
/// every error, which the whole parser says as always; where both parse,
/// the two agree (a test checks).
fn exec_alone(argv: &[std::ffi::OsString]) -> Option<args::ExecArgs> {
    let after = argv.get(1..)?;
    if after.first()? != "exec" {
        return None;
    }
    args::exec_by_hand(after.get(1..)?, &|var| std::env::var_os(var))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(line: &str) -> Vec<std::ffi::OsString> {
        std::iter::once("desi-gpu-map")
            .chain(line.split(' ').filter(|w| !w.is_empty()))
            .map(Into::into)
            .collect()
    }

    /// Where `exec`'s parser alone reads the arguments, the whole command
    /// line's reads them alike; where it does not, the whole one speaks.
    #[test]
    fn exec_alone_agrees_with_the_whole_parser() {
        let parsed = [
            "exec -- true",
            "exec --method roundrobin,mps -- app -x --method y",
            "exec --visible rotate --verbose -- app",
            "exec --method=closest --nvml off -- app arg",
            "exec --vendor nvidia --nvml-timeout 3 --mps-share even --mps-dir /scratch \
             --mps-control /usr/bin/x --kernel-root /fake --allow-outside-slurm -- app",
            "exec --visible=rotate --nvml=/lib/libnvidia-ml.so.1 --mps-share=none -- a",
            "exec --verbose --allow-outside-slurm --method contiguous,mps -- a b",
            "exec --",
        ];
        for line in parsed {
            let alone = exec_alone(&argv(line)).map(|a| format!("{a:?}"));
            let whole = match args::Cli::try_parse_from(argv(line)).map(|c| c.command) {
                Ok(args::Command::Exec(a)) => Some(format!("{a:?}")),
                other => panic!("{line}: {other:?}"),
            };
            assert_eq!(alone, whole, "{line}");
        }
        for line in [
            "exec --help",
            "exec -V",
            "exec --method bogus -- app",
            "exec --visible single --visible all -- a",
            "exec --verbose --verbose -- a",
            "exec --mps-dir --verbose -- a",
            "exec --nvml-timeout 0 -- a",
            "exec --mps-dir= -- a",
            "exec --bogus -- a",
            "exec -v -- a",
            "exec app",
            "exec --method",
            "plan -N 1",
            "",
        ] {
            assert!(exec_alone(&argv(line)).is_none(), "{line}");
        }
    }
}
