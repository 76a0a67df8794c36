//! Starts and stops a step's CUDA MPS control daemon in slurmstepd, as the
//! core planned it ([`Daemon`]). Everything runs as the job's user: the
//! private directories are made and removed by `mkdir` and `rm` children,
//! and the daemon itself, each with the user's uid and gid (see `as_user`).
//! A process is signalled only after its uid, executable and start time
//! show it is the daemon this plugin started (or that daemon's server).
//! Each child starts its own process group, so that what a site's
//! control script left behind goes with it.

use desi_gpu_map::mps::Daemon;
use desi_gpu_map::text::quote;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The MPS server the control daemon starts for CUDA clients.
const SERVER: &str = desi_gpu_map::env::MPS_SERVER;
/// How many random names the step's directory may try.
const NAME_TRIES: usize = 8;
/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(2);
/// The most read of a child's output, or of the daemon's log.
const MAX_OUTPUT: u64 = 4096;

/// The step's daemon, while it runs.
pub struct Running {
    child: Child,
    /// The daemon as `/proc` shows it when it answered.
    identity: Identity,
    daemon: Daemon,
}

/// What tells the daemon from a later process with its pid.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Identity {
    uid: u32,
    exe: PathBuf,
    start_time: u64,
}

impl Running {
    /// The daemon as it runs: in the directory that could be made.
    pub fn daemon(&self) -> &Daemon {
        &self.daemon
    }
}

/// A random number for a directory's name, from the kernel's generator
/// (the clock and pid where it fails, which only makes a name likelier
/// to be taken, and then another is drawn).
pub fn random_token() -> u64 {
    let mut bytes = [0u8; 8];
    // SAFETY: getrandom writes at most `bytes.len()` bytes into `bytes`,
    // live and writable.
    let got = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if usize::try_from(got).ok() == Some(bytes.len()) {
        return u64::from_ne_bytes(bytes);
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    (now as u64) ^ (u64::from(std::process::id()) << 32)
}

/// Makes the step's directories, starts the daemon, and waits until it
/// answers on its pipe, all within the daemon's timeout. On failure
/// nothing is left (the removal has a timeout of its own).
pub fn start(planned: &Daemon, groups: &[libc::gid_t]) -> Result<Running, String> {
    let deadline = Instant::now() + planned.timeout;
    let daemon = make_dir(planned, groups, deadline)?;
    let mut mkdir = Command::new("/bin/mkdir");
    mkdir
        .args(["-m", "0700", "--"])
        .args([&daemon.pipe, &daemon.log]);
    let started = user_tool(mkdir, &daemon, groups, deadline)
        .map_err(|why| {
            format!(
                "cannot make the MPS directories in {}: {why}",
                daemon.dir.display()
            )
        })
        .and_then(|()| spawn_daemon(&daemon, groups))
        .and_then(|child| {
            let mut running = Running {
                child,
                identity: Identity {
                    uid: daemon.uid,
                    exe: PathBuf::new(),
                    start_time: 0,
                },
                daemon: daemon.clone(),
            };
            match answers(&mut running, groups, deadline) {
                Ok(()) => Ok(running),
                Err(why) => {
                    // Our own child, not yet reaped: its pid is still its
                    // own, and so is its process group.
                    kill_group(&running.child);
                    let _ = running.child.wait();
                    Err(format!("{why}{}", last_log_line(&daemon)))
                }
            }
        });
    if started.is_err() {
        let _ = remove_dirs(&daemon, groups);
    }
    started
}

/// Makes the step's own directory, as the user, under a name nobody had:
/// `mkdir` fails where the name exists (a folder or link another user
/// planted, say), and then another random name is tried. Nothing is
/// ever made inside a directory this step did not just make.
fn make_dir(planned: &Daemon, groups: &[libc::gid_t], deadline: Instant) -> Result<Daemon, String> {
    let mut daemon = planned.clone();
    for _ in 0..NAME_TRIES {
        let mut mkdir = Command::new("/bin/mkdir");
        mkdir.args(["-m", "0700", "--"]).arg(&daemon.dir);
        match user_tool(mkdir, &daemon, groups, deadline) {
            Ok(()) => return Ok(daemon),
            Err(_) if daemon.dir.symlink_metadata().is_ok() => {
                log::info!("{} is taken; trying another name", daemon.dir.display());
                daemon = daemon.with_token(random_token());
            }
            Err(why) => {
                return Err(format!(
                    "cannot make the MPS directory {}: {why}",
                    daemon.dir.display()
                ))
            }
        }
    }
    Err(format!(
        "cannot make an MPS directory in {}: {NAME_TRIES} random names were all taken",
        daemon.base.display()
    ))
}

/// SIGKILL to `child`'s process group (its own, see [`as_user`]), while
/// `child` is not yet reaped, so that the group is still its.
fn kill_group(child: &Child) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: killpg only sends a signal, to the group of a child of
        // ours that has not been reaped.
        unsafe { libc::killpg(pid, libc::SIGKILL) };
    }
}

/// The step ended on this node: `quit` and a wait within the timeout,
/// then SIGKILL to what is left of the daemon and its servers, and the
/// directories go. Returns what went wrong, for slurmd's log.
pub fn stop(mut running: Running, groups: &[libc::gid_t]) -> Vec<String> {
    let mut said = Vec::new();
    let deadline = Instant::now() + running.daemon.timeout;
    let pid = running.child.id();
    // Its servers, while the pid is still the daemon's (slurmstepd, which
    // waits for any child, may have reaped a daemon that died early).
    let servers = match identity(pid) {
        Some(now) if now == running.identity => servers_of(pid, running.daemon.uid),
        _ => Vec::new(),
    };
    if let Err(why) = ask(&running.daemon, groups, "quit", deadline) {
        said.push(format!("MPS daemon {pid}: quit: {why}"));
    }
    if !wait_until(&mut running.child, deadline) {
        if identity(pid).as_ref() == Some(&running.identity) {
            kill_group(&running.child);
            said.push(format!("MPS daemon {pid} did not quit in time: killed"));
        }
        wait_until(&mut running.child, Instant::now() + POLL * 100);
    }
    // Servers the daemon left behind (it was killed, say).
    for (server, identity) in servers {
        if signal_if(server, &identity, libc::SIGKILL) {
            said.push(format!("MPS server {server} outlived its daemon: killed"));
        }
    }
    if let Err(why) = remove_dirs(&running.daemon, groups) {
        said.push(why);
    }
    said
}

/// `rm -rf DIR`, as the user, within the daemon's timeout.
fn remove_dirs(d: &Daemon, groups: &[libc::gid_t]) -> Result<(), String> {
    let mut rm = Command::new("/bin/rm");
    rm.args(["-rf", "--one-file-system", "--"]).arg(&d.dir);
    user_tool(rm, d, groups, Instant::now() + d.timeout)
        .map_err(|why| format!("cannot remove the MPS directory {}: {why}", d.dir.display()))
}

/// Runs a tool (`mkdir`, `rm`) as the user; its error output if it fails.
fn user_tool(
    mut cmd: Command,
    d: &Daemon,
    groups: &[libc::gid_t],
    deadline: Instant,
) -> Result<(), String> {
    cmd.env_clear();
    let (status, _, err) = run_as(cmd, d, groups, "", deadline)?;
    match status.success() {
        true => Ok(()),
        false => Err(err.trim().to_string()),
    }
}

/// The end of the daemon's log, for a failure's message: at most
/// [`MAX_OUTPUT`] bytes of a regular file, never following a link or
/// waiting on a pipe the user may have put in its place.
fn last_log_line(d: &Daemon) -> String {
    let read = || -> std::io::Result<String> {
        let mut file = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(d.log.join("control.log"))?;
        let len = file.metadata()?.len();
        if !file.metadata()?.is_file() {
            return Ok(String::new());
        }
        file.seek(SeekFrom::Start(len.saturating_sub(MAX_OUTPUT)))?;
        let mut text = String::new();
        file.take(MAX_OUTPUT).read_to_string(&mut text)?;
        Ok(text)
    };
    match read().unwrap_or_default().lines().last() {
        Some(line) => format!("; its log ends: {}", line.trim()),
        None => "; its log is empty".to_string(),
    }
}

/// The daemon in the foreground (`-f`), as the user, with only MPS's
/// variables, its output in `control.log` in the log directory.
fn spawn_daemon(d: &Daemon, groups: &[libc::gid_t]) -> Result<Child, String> {
    let log = fs::OpenOptions::new()
        .append(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(d.log.join("control.log"))
        .map_err(|e| format!("cannot open the MPS log in {}: {e}", d.log.display()))?;
    let err = log
        .try_clone()
        .map_err(|e| format!("cannot open the MPS log: {e}"))?;
    let mut cmd = Command::new(&d.control);
    cmd.arg("-f")
        .env_clear()
        .envs(d.env())
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err);
    as_user(&mut cmd, d, groups);
    cmd.spawn()
        .map_err(|e| format!("cannot start {}: {e}", d.control.display()))
}

/// Waits until the daemon answers `get_default_active_thread_percentage`
/// with a number, and records who it is.
fn answers(running: &mut Running, groups: &[libc::gid_t], deadline: Instant) -> Result<(), String> {
    let control = running.daemon.control.display().to_string();
    let mut last = "its pipe never appeared".to_string();
    let mut answered = false;
    loop {
        if let Ok(Some(status)) = running.child.try_wait() {
            return Err(format!(
                "the MPS control daemon {control} exited ({status}) before it answered"
            ));
        }
        if running.daemon.pipe.join("control").exists() {
            let asked = ask(
                &running.daemon,
                groups,
                "get_default_active_thread_percentage",
                deadline,
            );
            match asked {
                Ok(answer) if answer.trim().parse::<f64>().is_ok() => {
                    let pid = running.child.id();
                    running.identity = identity(pid).ok_or("the MPS daemon vanished")?;
                    return Ok(());
                }
                Ok(answer) => {
                    last = format!("it answered {}", quote(answer.trim()));
                    answered = true;
                }
                // A later question cut off by the deadline says less.
                Err(why) if !answered => last = why,
                Err(_) => {}
            }
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "the MPS control daemon {control} did not answer within {} s ({last})",
                running.daemon.timeout.as_secs()
            ));
        }
        std::thread::sleep(POLL);
    }
}

/// Sends one command to the daemon through its pipe, as the user; its answer.
fn ask(
    d: &Daemon,
    groups: &[libc::gid_t],
    command: &str,
    deadline: Instant,
) -> Result<String, String> {
    let mut cmd = Command::new(&d.control);
    cmd.env_clear().envs(d.env());
    let (status, out, err) = run_as(cmd, d, groups, &format!("{command}\n"), deadline)?;
    match status.success() {
        true => Ok(out),
        false => Err(format!("{status}: {}", err.trim())),
    }
}

/// Runs `cmd` as the user with `input` on its stdin, killed at `deadline`;
/// its status and the start of its output.
fn run_as(
    mut cmd: Command,
    d: &Daemon,
    groups: &[libc::gid_t],
    input: &str,
    deadline: Instant,
) -> Result<(ExitStatus, String, String), String> {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    as_user(&mut cmd, d, groups);
    let mut child = cmd.spawn().map_err(|e| e.to_string())?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(input.as_bytes());
    }
    if !wait_until(&mut child, deadline) {
        kill_group(&child);
        let _ = child.wait();
        return Err("no answer before the deadline".to_string());
    }
    let out = child.stdout.take().map(drain).unwrap_or_default();
    let err = child.stderr.take().map(drain).unwrap_or_default();
    let status = child.wait().map_err(|e| e.to_string())?;
    Ok((status, out, err))
}

/// What an exited child left in a pipe, without waiting for more: a
/// process it left behind may hold the pipe open.
fn drain<P: Read + AsRawFd>(mut pipe: P) -> String {
    // SAFETY: fcntl changes only the flags of a descriptor `pipe` owns.
    unsafe { libc::fcntl(pipe.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
    let mut bytes = Vec::new();
    let _ = (&mut pipe).take(MAX_OUTPUT).read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// [`desi_gpu_map::host::child::wait_until`], looking every [`POLL`].
fn wait_until(child: &mut Child, deadline: Instant) -> bool {
    desi_gpu_map::host::child::wait_until(child, deadline, POLL)
}

/// Makes `cmd` run as the daemon's user: the job's groups where this
/// process may set them (the exit hook runs as root; `user_init` already
/// has the user's), then gid and uid, real, effective and saved, so that
/// nothing can return to root. Every descriptor of slurmstepd's is
/// closed at exec, so the daemon holds none of the step's connections.
fn as_user(cmd: &mut Command, d: &Daemon, groups: &[libc::gid_t]) {
    let (uid, gid) = (d.uid, d.gid);
    let groups = groups.to_vec();
    let hook = move || -> std::io::Result<()> {
        let fail = || Err(std::io::Error::last_os_error());
        // SAFETY: between fork and exec only async-signal-safe system calls
        // run here; `groups` is a live slice of `groups.len()` gids.
        unsafe {
            if libc::geteuid() == 0 && libc::setgroups(groups.len(), groups.as_ptr()) != 0 {
                return fail();
            }
            if libc::setresgid(gid, gid, gid) != 0 || libc::setresuid(uid, uid, uid) != 0 {
                return fail();
            }
            cloexec_from(3);
        }
        Ok(())
    };
    // Its own process group: the group goes with it when it is killed.
    cmd.process_group(0);
    // SAFETY: the hook above calls only async-signal-safe functions and
    // allocates nothing (its vector was made before the fork).
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// Marks every descriptor from `first` close-on-exec.
///
/// # Safety
/// Only system calls; callable between fork and exec.
unsafe fn cloexec_from(first: libc::c_uint) {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    if crate::fds::close_range(first, libc::c_uint::MAX, CLOSE_RANGE_CLOEXEC) {
        return;
    }
    // Kernels before 5.11: one descriptor at a time, up to the limit.
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into `limit`, live and writable.
    let most = match unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } {
        0 => libc::c_int::try_from(limit.rlim_cur).unwrap_or(libc::c_int::MAX),
        _ => 65_536,
    };
    let first = libc::c_int::try_from(first).unwrap_or(most);
    for fd in first..most {
        // SAFETY: fcntl on a descriptor that may not exist fails harmlessly.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
}

/// `pid`'s uid (all four must agree), executable and start time.
fn identity(pid: u32) -> Option<Identity> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let uids: Vec<u32> = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .map(|u| u.parse().ok())
        .collect::<Option<_>>()?;
    let uid = *uids.first()?;
    if uids.iter().any(|&u| u != uid) {
        return None;
    }
    let exe = fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    Some(Identity {
        uid,
        exe,
        start_time: stat_field(pid, 22)?,
    })
}

/// Field `n` (counted from 1, as proc(5) does) of `/proc/PID/stat`, a
/// number; the command's name, in parentheses, may hold spaces.
fn stat_field(pid: u32, n: usize) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    // `rest` starts at field 3.
    rest.split_whitespace().nth(n.checked_sub(3)?)?.parse().ok()
}

/// The MPS servers the daemon `pid` started, as the user.
fn servers_of(pid: u32, uid: u32) -> Vec<(u32, Identity)> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| stat_field(p, 4) == Some(u64::from(pid)))
        .filter_map(|p| Some((p, identity(p)?)))
        .filter(|(_, id)| id.uid == uid && is_named(&id.exe, SERVER))
        .collect()
}

fn is_named(exe: &Path, name: &str) -> bool {
    exe.file_name().and_then(|n| n.to_str()) == Some(name)
}

/// Sends `signal` to `pid` only if it is still the process `identity`
/// describes; true if sent.
fn signal_if(pid: u32, identity: &Identity, signal: libc::c_int) -> bool {
    if identity.start_time == 0 || self::identity(pid).as_ref() != Some(identity) {
        return false;
    }
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill only sends a signal, to a process just checked.
    unsafe { libc::kill(pid, signal) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_known_by_its_proc_files() {
        let me = std::process::id();
        let id = identity(me).unwrap();
        assert!(id.start_time > 0);
        assert_eq!(
            stat_field(me, 4),
            Some(u64::from(std::os::unix::process::parent_id()))
        );
        assert_eq!(stat_field(me, 2), None, "the name is not a number");
        assert_eq!(stat_field(me, 1), None, "before the name");
        // A different start time is another process: no signal.
        let other = Identity {
            start_time: id.start_time + 1,
            ..id
        };
        assert!(!signal_if(me, &other, 0));
    }
}
