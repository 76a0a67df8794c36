//! A task's side of exec's MPS: meet the node's keeper at its socket's
//! name (the first task to bind it starts the keeper), or, where another
//! user holds that name, in the keeper's own directory; and take its
//! answer.

use super::meet::{Answer, Ended, Request, KEEPER_COMMAND, SOCKET};
use crate::failure::Failure;
use crate::process::command_lines_of;
use crate::run::POLL;
use desi_gpu_map_core::mps::Daemon;
use desi_gpu_map_core::text::quote;
use rustix::net::sockopt::socket_peercred;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::os::fd::OwnedFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How much longer than the daemon's own timeout a task waits for the
/// keeper's answer (the keeper starts the daemon first).
const ANSWER_MARGIN: Duration = Duration::from_secs(5);
/// The longest answer line read from a keeper.
const MAX_ANSWER: u64 = 4096;
/// How long the name may stay bound by a socket that takes no connection
/// before it counts as another user's: the job's own tasks bind and
/// listen in one go.
const SQUAT_GRACE: Duration = Duration::from_millis(250);
/// The most entries of the base one look for the keeper's directory reads.
const MOST_ENTRIES: usize = 4096;

/// A task of the step joins its node's daemon: the keeper's, started here
/// if no task started one yet. `local_id`: the task's node-local id (task
/// 0 starts the keeper where the name is another user's). The daemon as
/// it runs (in the directory the keeper made), or why the step runs
/// without MPS.
pub fn join(planned: &Daemon, stepd: Option<u32>, local_id: usize) -> Result<Daemon, Failure> {
    let daemon = planned.kept();
    let deadline = Instant::now() + daemon.timeout + ANSWER_MARGIN;
    match by_name(&daemon, stepd, deadline) {
        Met::Answered(answer) => answer,
        Met::Taken(who) => by_directory(&daemon, stepd, local_id == 0, deadline, &who),
    }
}

/// What the keeper's name led to.
enum Met {
    /// The keeper answered, or the task could not wait for it: the end.
    Answered(Result<Daemon, Failure>),
    /// Another user holds the name: who, for messages.
    Taken(String),
}

/// Meets the keeper at its abstract name, starting it where no task did.
fn by_name(daemon: &Daemon, stepd: Option<u32>, deadline: Instant) -> Met {
    let name = match SocketAddr::from_abstract_name(daemon.stem.as_bytes()) {
        Ok(name) => name,
        Err(e) => {
            let why = Failure::os("cannot name the MPS keeper's socket", e);
            return Met::Answered(Err(why));
        }
    };
    let mut bound_since: Option<Instant> = None;
    loop {
        match UnixStream::connect_addr(&name) {
            Ok(stream) => return theirs_or_answer(stream, daemon, deadline),
            Err(e) if e.kind() != ErrorKind::ConnectionRefused => {
                let why = Failure::os(
                    format_args!("cannot reach the MPS keeper @{}", daemon.stem),
                    e,
                );
                return Met::Answered(Err(why));
            }
            Err(_) => {}
        }
        // No keeper yet: this task starts one, unless another just bound
        // the name, whose keeper answers the next connect.
        match UnixListener::bind_addr(&name) {
            Ok(listener) => {
                if let Err(why) = start_keeper(Some(listener), daemon, stepd) {
                    return Met::Answered(Err(why));
                }
                bound_since = None;
            }
            Err(e) if e.kind() == ErrorKind::AddrInUse => {
                if bound_since.get_or_insert_with(Instant::now).elapsed() > SQUAT_GRACE {
                    return Met::Taken(format!(
                        "a socket that takes no connection holds the name @{}",
                        daemon.stem
                    ));
                }
                std::thread::sleep(POLL);
            }
            Err(e) => {
                let why = Failure::os(
                    format_args!("cannot start the MPS keeper @{}", daemon.stem),
                    e,
                );
                return Met::Answered(Err(why));
            }
        }
        if Instant::now() >= deadline {
            return Met::Answered(Err(no_answer(daemon)));
        }
    }
}

/// The keeper's answer where the job's user holds the name; else who does.
fn theirs_or_answer(stream: UnixStream, daemon: &Daemon, deadline: Instant) -> Met {
    match peer(&stream) {
        Ok((uid, _)) if uid == rustix::process::getuid().as_raw() => {
            Met::Answered(answer(stream, daemon, deadline))
        }
        Ok((uid, pid)) => Met::Taken(format!(
            "another user's process (uid {uid}, pid {pid}) holds the name @{}",
            daemon.stem
        )),
        Err(why) => Met::Answered(Err(why)),
    }
}

/// The peer's uid and pid.
fn peer(stream: &UnixStream) -> Result<(u32, i32), Failure> {
    let peer = socket_peercred(stream)
        .map_err(|e| Failure::os("cannot tell who holds the MPS keeper's socket", e.into()))?;
    Ok((peer.uid.as_raw(), peer.pid.as_raw_nonzero().get()))
}

/// Meets the keeper in its directory, where another user holds its name:
/// `first` (the node's local task 0) starts it. Only a directory of the
/// job's user's, mode 0700, is ever entered, and only its keeper's socket.
fn by_directory(
    daemon: &Daemon,
    stepd: Option<u32>,
    first: bool,
    deadline: Instant,
    who: &str,
) -> Result<Daemon, Failure> {
    let mut started = false;
    loop {
        let dirs = keepers_bases(daemon).into_iter().flat_map(|base| {
            keepers_dirs(&Daemon {
                base,
                ..daemon.clone()
            })
        });
        for dir in dirs {
            if let Ok(stream) = UnixStream::connect(dir.join(SOCKET)) {
                return answer(stream, daemon, deadline)
                    .map_err(|why| why.then(format_args!(" ({who})")));
            }
        }
        if first && !started {
            start_keeper(None, daemon, stepd).map_err(|why| why.then(format_args!(" ({who})")))?;
            started = true;
        }
        if Instant::now() >= deadline {
            return Err(Failure::new(format!(
                "{who}, and no keeper of this step's answered in {} within {} s; local task \
                 0 starts it there",
                daemon.base.display(),
                (daemon.timeout + ANSWER_MARGIN).as_secs()
            )));
        }
        std::thread::sleep(POLL * 10);
    }
}

/// Where the step's keeper may have made its directory: this task's base,
/// and the base of each keeper of this step that runs as the job's user
/// (its command line says; another task's `TMPDIR` may differ).
fn keepers_bases(daemon: &Daemon) -> Vec<PathBuf> {
    let mut bases = vec![daemon.base.clone()];
    let uid = rustix::process::getuid().as_raw();
    for args in command_lines_of(uid) {
        let value = |flag: &str| {
            let at = args.iter().position(|a| a == flag)?;
            args.get(at + 1)
        };
        let keeper = args.iter().any(|a| a == KEEPER_COMMAND);
        if let (true, Some(stem), Some(base)) = (keeper, value("--stem"), value("--base")) {
            if *stem == daemon.stem && !bases.iter().any(|b| b.as_os_str() == base.as_str()) {
                bases.push(PathBuf::from(base));
            }
        }
    }
    bases
}

/// The job's user's keeper directories of this step in the daemon's
/// base: named `STEM.TOKEN`, not links, mode 0700.
fn keepers_dirs(daemon: &Daemon) -> Vec<PathBuf> {
    let prefix = format!("{}.", daemon.stem);
    let Ok(entries) = std::fs::read_dir(&daemon.base) else {
        return Vec::new();
    };
    entries
        .take(MOST_ENTRIES)
        .filter_map(|e| e.ok())
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_str().unwrap_or_default();
            name.strip_prefix(&prefix)
                .is_some_and(|token| u64::from_str_radix(token, 16).is_ok())
        })
        .map(|e| e.path())
        .filter(|dir| private(dir))
        .collect()
}

/// A directory (not a link) of this user's, mode 0700.
fn private(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir).is_ok_and(|m| {
        m.is_dir()
            && m.uid() == rustix::process::getuid().as_raw()
            && m.permissions().mode() & 0o777 == 0o700
    })
}

/// The keeper's answer to this task: it must be the job's user's, and the
/// directory it names this user's private one.
fn answer(stream: UnixStream, daemon: &Daemon, deadline: Instant) -> Result<Daemon, Failure> {
    let uid = rustix::process::getuid().as_raw();
    let (peer_uid, pid) = peer(&stream)?;
    if peer_uid != uid {
        return Err(Failure::new(format!(
            "the MPS keeper's socket @{} is held by uid {peer_uid} (pid {pid}), not by the \
             job's user",
            daemon.stem
        )));
    }
    let line = ask(stream, Request::Join, deadline).map_err(|e| {
        Failure::os(
            format_args!("no answer from the MPS keeper @{}", daemon.stem),
            e,
        )
    })?;
    match Answer::parse(line.trim_end()) {
        Some(Answer::Ok { token, base }) => served(daemon, token, base),
        Some(Answer::No(why)) => Err(Failure::new(why)),
        None => Err(Failure::new(format!(
            "the MPS keeper @{} answered {}",
            daemon.stem,
            quote(line.trim_end())
        ))),
    }
}

/// Writes `request` and reads the keeper's one line, until `deadline`.
fn ask(stream: UnixStream, request: Request, deadline: Instant) -> std::io::Result<String> {
    let left = deadline.saturating_duration_since(Instant::now()).max(POLL);
    stream.set_read_timeout(Some(left))?;
    stream.set_write_timeout(Some(left))?;
    (&stream).write_all(request.line().as_bytes())?;
    let mut line = String::new();
    BufReader::new(stream.take(MAX_ANSWER)).read_line(&mut line)?;
    Ok(line)
}

/// A task of the step ended (its task epilog tells): the keeper of
/// `daemon`'s step, if one runs, is told; where the task was the node's
/// last, this waits until `deadline` for the keeper to stop the daemon
/// and remove its directory. No keeper: [`Ended::Done`].
pub fn task_ended(daemon: &Daemon, deadline: Instant) -> Result<Ended, Failure> {
    let daemon = daemon.kept();
    let stream = match SocketAddr::from_abstract_name(daemon.stem.as_bytes())
        .and_then(|name| UnixStream::connect_addr(&name))
    {
        Ok(stream) => stream,
        Err(_) => {
            let dirs = keepers_dirs(&daemon);
            match dirs
                .iter()
                .find_map(|d| UnixStream::connect(d.join(SOCKET)).ok())
            {
                Some(stream) => stream,
                None => return Ok(Ended::Done),
            }
        }
    };
    let (uid, pid) = peer(&stream)?;
    if uid != rustix::process::getuid().as_raw() {
        return Err(Failure::new(format!(
            "the MPS keeper's socket @{} is held by uid {uid} (pid {pid}), not by the job's \
             user",
            daemon.stem
        )));
    }
    match ask(stream, Request::Ended, deadline) {
        Ok(line) => Ended::parse(line.trim_end()).ok_or_else(|| {
            Failure::new(format!(
                "the MPS keeper @{} answered {}",
                daemon.stem,
                quote(line.trim_end())
            ))
        }),
        // The keeper closed its sockets: it has ended.
        Err(e) if e.kind() == ErrorKind::ConnectionReset => Ok(Ended::Done),
        Err(e) => Err(Failure::os(
            format_args!("no answer from the MPS keeper @{}", daemon.stem),
            e,
        )),
    }
}

/// The daemon in the directory the keeper named, which must be there.
fn served(daemon: &Daemon, token: u64, base: PathBuf) -> Result<Daemon, Failure> {
    let served = Daemon {
        base,
        ..daemon.with_token(token)
    };
    match private(&served.dir()) && served.pipe().is_dir() {
        true => Ok(served),
        false => Err(Failure::new(format!(
            "the MPS keeper named {}, which is not the job's user's private directory with a \
             pipe directory in it",
            served.dir().display()
        ))),
    }
}

fn no_answer(daemon: &Daemon) -> Failure {
    Failure::new(format!(
        "no MPS keeper answered at @{} within {} s",
        daemon.stem,
        (daemon.timeout + ANSWER_MARGIN).as_secs()
    ))
}

/// Starts the keeper, with `listener` (the name, where this task holds
/// it) as its standard input, and waits for the first of its two
/// processes, which starts the second detached and exits at once.
fn start_keeper(
    listener: Option<UnixListener>,
    daemon: &Daemon,
    stepd: Option<u32>,
) -> Result<(), Failure> {
    let exe = std::env::current_exe().map_err(|e| Failure::os("cannot find this program", e))?;
    let paths: Vec<String> = daemon
        .path
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let mut cmd = Command::new(exe);
    cmd.arg(KEEPER_COMMAND)
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
    let stdin = match listener {
        Some(listener) => Stdio::from(OwnedFd::from(listener)),
        None => {
            cmd.arg("--unnamed");
            Stdio::null()
        }
    };
    let status = cmd
        .env_clear()
        .stdin(stdin)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .status()
        .map_err(|e| Failure::os("cannot start the MPS keeper", e))?;
    match status.success() {
        true => Ok(()),
        false => Err(Failure::new(format!(
            "the MPS keeper did not start ({status})"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_users_private_directories_of_the_step_are_looked_in() {
        let base = std::env::temp_dir().join(format!("dgm-join-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let daemon = Daemon {
            base: base.clone(),
            stem: format!(
                "desi-gpu-map-mps.1.2.3.0.{}",
                desi_gpu_map_core::mps::KEEPER_MARK
            ),
            ..desi_gpu_map_core::mps::Daemon::default()
        };
        let make = |name: &str, mode: u32| {
            let dir = base.join(name);
            std::fs::create_dir(&dir).unwrap();
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
            dir
        };
        let ours = make(&format!("{}.00000000000000ab", daemon.stem), 0o700);
        make(&format!("{}.00000000000000cd", daemon.stem), 0o755);
        make(&format!("{}.not-a-token", daemon.stem), 0o700);
        make("desi-gpu-map-mps.1.2.4.0.keeper.00000000000000ab", 0o700);
        std::os::unix::fs::symlink(
            &ours,
            base.join(format!("{}.0000000000000001", daemon.stem)),
        )
        .unwrap();
        assert_eq!(keepers_dirs(&daemon), vec![ours]);
        std::fs::remove_dir_all(&base).unwrap();
    }
}
