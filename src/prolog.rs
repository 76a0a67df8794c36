//! `desi-gpu-map` as the task prolog and epilog that slurmstepd runs for
//! each task (`srun --task-prolog=`/`--task-epilog=`, or
//! `SLURM_TASK_PROLOG`/`SLURM_TASK_EPILOG`), told apart by
//! `SLURM_SCRIPT_CONTEXT` and given no argument: the no-admin way to bind
//! every task, nothing wrapped around the application.
//!
//! - The prolog runs in each task's process after Slurm's own per-task
//!   setup and before the application's `execve`. It decides as `exec`
//!   does, from the same core and the variables that mirror exec's options
//!   (`DESI_GPU_MAP_METHOD`, ...), joins the step's MPS daemon where the
//!   plan starts one, and prints `export NAME=VALUE` and `unset NAME`
//!   lines, which slurmstepd applies to the task's environment. It always
//!   exits 0: a non-zero status would kill the task, and a typo must never
//!   kill a production job, so a bad value prints one `print` line that
//!   names it, and the task runs unchanged.
//! - The epilog runs after each task is reaped, before slurmstepd kills
//!   what is left of the step (it waits up to 5 s for it): it tells the
//!   step's MPS keeper that the task ended, and where it was the node's
//!   last, waits until the daemon is stopped and its directory gone.

use crate::args::exec_from_variables;
use crate::in_task::{apply, decided, join_mps, snapshot};
use crate::keeper;
use desi_gpu_map_core::start::{keeper_to_tell, not_passed, Mapping, Verdict};
use desi_gpu_map_core::step::StepPlan;
use std::io::Write;
use std::time::{Duration, Instant};

/// How long the epilog waits for the keeper: within slurmstepd's 5 s.
const EPILOG_WAIT: Duration = Duration::from_millis(4500);

/// The task prolog: the task's variables as slurmstepd reads them.
pub fn prolog() {
    let lines = match prolog_lines() {
        Ok(lines) => lines,
        Err(why) => vec![print(&format!("{why}; the task runs unchanged"))],
    };
    // One write: standard output is line-buffered, one system call a line.
    let mut text = lines.join("\n");
    text.push('\n');
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

/// The prolog's lines, or why the task runs unchanged.
fn prolog_lines() -> Result<Vec<String>, String> {
    let args = exec_from_variables()?;
    let vars = snapshot();
    let unpassed = not_passed(&vars);
    let start = decided(&args, vars)?;
    let mut lines: Vec<String> = start
        .outer
        .iter()
        .map(|note| print(&note.to_string()))
        .collect();
    match start.verdict {
        Verdict::Refuse(why) => return Err(why.to_string()),
        Verdict::Unchanged { why, said } => {
            if said {
                lines.push(print(&format!("{why}; the task runs unchanged")));
            }
        }
        Verdict::Map(mut mapping) => {
            if let StepPlan::Map(_) = mapping.plan {
                lines.extend(unpassed.map(|why| print(&why.to_string())));
            }
            join_mps(&mut mapping);
            lines.extend(variables(&mapping));
        }
    }
    Ok(lines)
}

/// The lines that set the task's variables, then what the outcome says.
fn variables(mapping: &Mapping) -> Vec<String> {
    let changes = std::cell::RefCell::new(Vec::new());
    let said = apply(
        mapping,
        &mut |var| {
            changes.borrow_mut().push(format!("unset {var}"));
            Ok(())
        },
        &mut |var, value| {
            // slurmstepd reads one line per variable: a value that spans
            // lines could not be set, and the task would be told half.
            if value.contains('\n') {
                return Err(format!("{var}'s value spans lines"));
            }
            changes.borrow_mut().push(format!("export {var}={value}"));
            Ok(())
        },
    );
    let mut lines = changes.into_inner();
    lines.extend(mapping.said(said).iter().map(|line| print(line)));
    lines
}

/// What begins every line the command says.
const SAID: &str = "desi-gpu-map: ";

/// A line slurmstepd writes to the task's standard output, with one
/// prefix: the outcome's lines (the verbose row, why a step stands aside)
/// carry it already, the prolog's own do not.
fn print(text: &str) -> String {
    let text = text.strip_prefix(SAID).unwrap_or(text);
    format!("print {SAID}{}", text.replace('\n', " "))
}

/// The task epilog: tells the step's MPS keeper, if one runs, that this
/// task ended. Says nothing and always exits 0: slurmstepd ignores both.
pub fn epilog() {
    let Ok(args) = exec_from_variables() else {
        return;
    };
    // The epilog only finds the keeper: no control daemon is started.
    let settings = crate::in_task::mps_settings(&args, false);
    let uid = rustix::process::getuid().as_raw();
    if let Some(keeper) = keeper_to_tell(uid, &settings, &snapshot()) {
        let _ = keeper::task_ended(&keeper, Instant::now() + EPILOG_WAIT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_said_is_one_print_line_for_slurmstepd() {
        assert_eq!(print("a\nb"), "print desi-gpu-map: a b");
        // Lines of the outcome carry the prefix already: one, not two.
        assert_eq!(
            print("desi-gpu-map: n1 rank=0"),
            "print desi-gpu-map: n1 rank=0"
        );
        assert_eq!(print("x").lines().count(), 1);
    }
}
