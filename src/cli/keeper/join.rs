//! A task's side of exec's MPS: meet the node's keeper at its socket (the
//! first task to bind it starts the keeper), and take its answer.

use super::Answer;
use crate::host::run::POLL;
use crate::mps::Daemon;
use crate::text::quote;
use rustix::net::sockopt::socket_peercred;
use std::io::{BufRead, BufReader, Read};
use std::os::fd::OwnedFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How much longer than the daemon's own timeout a task waits for the
/// keeper's answer (the keeper starts the daemon first).
const ANSWER_MARGIN: Duration = Duration::from_secs(5);
/// The longest answer line read from a keeper.
const MAX_ANSWER: u64 = 4096;

/// A task of the step joins its node's daemon: the keeper's, started here
/// if no task started one yet. The daemon as it runs (in the directory the
/// keeper made), or why the step runs without MPS.
pub fn join(daemon: &Daemon, stepd: Option<u32>) -> Result<Daemon, String> {
    let name = SocketAddr::from_abstract_name(daemon.stem.as_bytes())
        .map_err(|e| format!("cannot name the MPS keeper's socket: {e}"))?;
    let deadline = Instant::now() + daemon.timeout + ANSWER_MARGIN;
    loop {
        match UnixStream::connect_addr(&name) {
            Ok(stream) => return answer(stream, daemon, deadline),
            Err(e) if e.kind() != std::io::ErrorKind::ConnectionRefused => {
                return Err(format!("cannot reach the MPS keeper @{}: {e}", daemon.stem));
            }
            Err(_) => {}
        }
        // No keeper yet: this task starts one, unless another just bound
        // the name, whose keeper answers the next connect.
        match UnixListener::bind_addr(&name) {
            Ok(listener) => start_keeper(listener, daemon, stepd)?,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => std::thread::sleep(POLL),
            Err(e) => return Err(format!("cannot start the MPS keeper @{}: {e}", daemon.stem)),
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "no MPS keeper answered at @{} within {} s",
                daemon.stem,
                (daemon.timeout + ANSWER_MARGIN).as_secs()
            ));
        }
    }
}

/// The keeper's answer to this task: it must be the job's user's.
fn answer(stream: UnixStream, daemon: &Daemon, deadline: Instant) -> Result<Daemon, String> {
    let uid = rustix::process::getuid().as_raw();
    let peer = socket_peercred(&stream)
        .map_err(|e| format!("cannot tell who holds the MPS keeper's socket: {e}"))?;
    if peer.uid.as_raw() != uid {
        return Err(format!(
            "the MPS keeper's socket @{} is held by uid {} (pid {}), not by the job's user",
            daemon.stem,
            peer.uid.as_raw(),
            peer.pid.as_raw_nonzero()
        ));
    }
    let left = deadline.saturating_duration_since(Instant::now());
    stream
        .set_read_timeout(Some(left.max(POLL)))
        .map_err(|e| format!("cannot wait for the MPS keeper: {e}"))?;
    let mut line = String::new();
    BufReader::new(stream.take(MAX_ANSWER))
        .read_line(&mut line)
        .map_err(|e| format!("no answer from the MPS keeper @{}: {e}", daemon.stem))?;
    match Answer::parse(line.trim_end()) {
        Some(Answer::Ok(token)) => Ok(daemon.with_token(token)),
        Some(Answer::No(why)) => Err(why),
        None => Err(format!(
            "the MPS keeper @{} answered {}",
            daemon.stem,
            quote(line.trim_end())
        )),
    }
}

/// Starts the keeper with `listener` as its standard input, and waits for
/// the first of its two processes, which starts the second detached and
/// exits at once.
fn start_keeper(listener: UnixListener, daemon: &Daemon, stepd: Option<u32>) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let paths: Vec<String> = daemon
        .path
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let mut cmd = Command::new(exe);
    cmd.arg("mps-keeper")
        .arg("--control")
        .arg(&daemon.control)
        .arg(format!("--path={}", paths.join(":")))
        .arg("--base")
        .arg(&daemon.base)
        .args(["--stem", &daemon.stem])
        .args(["--token", &daemon.token.to_string()])
        .arg(format!("--gpus={}", daemon.gpus.join(",")))
        .args(["--timeout-ms", &daemon.timeout.as_millis().to_string()])
        .args(["--tasks", &daemon.local_tasks.to_string()]);
    if let Some(pid) = stepd {
        cmd.args(["--stepd", &pid.to_string()]);
    }
    let status = cmd
        .env_clear()
        .stdin(Stdio::from(OwnedFd::from(listener)))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .status()
        .map_err(|e| format!("cannot start the MPS keeper: {e}"))?;
    match status.success() {
        true => Ok(()),
        false => Err(format!("the MPS keeper did not start ({status})")),
    }
}
