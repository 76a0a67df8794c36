//! Running a short program for a front end, with a deadline: as whom it
//! runs, and what it may inherit, is the front end's [`Runner`] (the
//! plugin's runs it as the job's user, holding none of slurmstepd's
//! descriptors). Each child leads its own process group, so that what it
//! leaves behind goes with it when it is killed.

use crate::child::{drain, wait_until};
use crate::failure::Failure;
use rustix::process::{kill_process_group, Pid, Signal};
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How often a wait looks again.
pub const POLL: Duration = Duration::from_millis(2);
/// The most read of a child's output.
pub(crate) const MAX_OUTPUT: usize = 4096;

/// How a front end runs its children: as whom, and holding what (not an
/// MPI launcher, which is [`desi_gpu_map_core::launch::Launcher`]). `prepare` is called
/// on every command before it is spawned; it may set the user, the groups
/// and what is closed at exec, and must leave the process group as it
/// finds it.
pub trait Runner {
    /// Readies `cmd` to be spawned.
    fn prepare(&self, cmd: &mut Command);
}

/// A child that runs as this process does.
pub struct AsThisProcess;

impl Runner for AsThisProcess {
    fn prepare(&self, _cmd: &mut Command) {}
}

/// How a program ended, and the start of what it wrote.
#[derive(Debug)]
pub(crate) struct Ran {
    pub(crate) status: ExitStatus,
    pub(crate) out: String,
    pub(crate) err: String,
}

/// Spawns `cmd` through `runner`, leading its own process group.
pub(crate) fn spawn(mut cmd: Command, runner: &dyn Runner) -> std::io::Result<Child> {
    runner.prepare(&mut cmd);
    cmd.process_group(0);
    cmd.spawn()
}

/// Runs `cmd` with `input` on its stdin, killed with its group at
/// `deadline`.
pub(crate) fn run(
    mut cmd: Command,
    runner: &dyn Runner,
    input: &str,
    deadline: Instant,
) -> Result<Ran, Failure> {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = spawn(cmd, runner)?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(input.as_bytes());
    }
    if !wait_until(&mut child, deadline, POLL) {
        kill_group(&child);
        let _ = child.wait();
        return Err(Failure::new("no answer before the deadline"));
    }
    let out = child.stdout.take().map(text_of).unwrap_or_default();
    let err = child.stderr.take().map(text_of).unwrap_or_default();
    let status = child.wait()?;
    Ok(Ran { status, out, err })
}

/// Runs a tool (`mkdir`, `rm`) with an empty environment; its error
/// output if it fails.
pub(crate) fn tool(
    mut cmd: Command,
    runner: &dyn Runner,
    deadline: Instant,
) -> Result<(), Failure> {
    cmd.env_clear();
    let ran = run(cmd, runner, "", deadline)?;
    match ran.status.success() {
        true => Ok(()),
        false => Err(Failure::new(ran.err.trim())),
    }
}

/// SIGKILL to `child`'s process group (its own, see [`spawn`]), while
/// `child` is not yet reaped, so that the group is still its.
pub(crate) fn kill_group(child: &Child) {
    if let Some(pid) = i32::try_from(child.id()).ok().and_then(Pid::from_raw) {
        let _ = kill_process_group(pid, Signal::KILL);
    }
}

/// What an exited child left in a pipe, as text, at most [`MAX_OUTPUT`]
/// bytes ([`drain`] waits for no one who still holds it).
fn text_of(pipe: impl Read + std::os::fd::AsFd) -> String {
    let mut bytes = Vec::new();
    let _ = drain(pipe, &mut bytes, MAX_OUTPUT);
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    #[test]
    fn a_program_gets_its_input_and_gives_its_output() {
        let ran = run(Command::new("cat"), &AsThisProcess, "hello\n", soon()).unwrap();
        assert!(ran.status.success());
        assert_eq!(ran.out, "hello\n");
        let mut sh = Command::new("sh");
        sh.args(["-c", "echo no >&2; exit 3"]);
        let ran = run(sh, &AsThisProcess, "", soon()).unwrap();
        assert_eq!((ran.status.code(), ran.err.as_str()), (Some(3), "no\n"));
    }

    #[test]
    fn a_tool_says_its_error_and_a_hung_one_is_killed_with_its_group() {
        let mut ls = Command::new("ls");
        ls.arg("/no/such/dir");
        let err = tool(ls, &AsThisProcess, soon()).unwrap_err().to_string();
        assert!(err.contains("/no/such/dir"), "{err}");
        // The grandchild holds the pipes; it goes with the group.
        let mut sh = Command::new("sh");
        sh.args(["-c", "sleep 30 & sleep 30"]);
        let started = Instant::now();
        let late = run(sh, &AsThisProcess, "", started + Duration::from_millis(200));
        assert_eq!(
            late.unwrap_err().to_string(),
            "no answer before the deadline"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_left_behind_process_holding_the_pipe_does_not_stall_the_drain() {
        let mut sh = Command::new("sh");
        sh.args(["-c", "echo done; (sleep 4 &)"]);
        let started = Instant::now();
        let ran = run(sh, &AsThisProcess, "", soon()).unwrap();
        assert_eq!(ran.out, "done\n");
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    struct Marked;
    impl Runner for Marked {
        fn prepare(&self, cmd: &mut Command) {
            cmd.env("PREPARED", "yes");
        }
    }

    #[test]
    fn the_launcher_prepares_every_child() {
        let mut sh = Command::new("sh");
        sh.args(["-c", "echo $PREPARED"]);
        assert_eq!(run(sh, &Marked, "", soon()).unwrap().out, "yes\n");
    }
}
