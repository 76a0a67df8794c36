//! A step's CUDA MPS control daemon, from start to stop, as the core
//! planned it ([`Daemon`]): one implementation that both front ends drive
//! through their [`Runner`] (the plugin's runs everything as the job's
//! user, from slurmstepd). The private directories are made and removed
//! by `mkdir` and `rm` children, so that they belong to whoever the
//! runner runs as. A process is signalled only after its uid,
//! executable and start time show it is the daemon started here (or that
//! daemon's server).
//!
//! A keeper's directory is swept by the user's next keeper on the node
//! once its own keeper is gone (the command's `src/keeper/`), and gone means
//! [`lock`] can be taken: the keeper holds it from right after the
//! directory's making for as long as it lives.

use crate::failure::Failure;
use crate::process::{children_named, identity, signal_if, Identity};
use crate::run::{kill_group, run, spawn, tool, Runner, MAX_OUTPUT, POLL};
use desi_gpu_map_core::env;
use desi_gpu_map_core::mps::{Daemon, KEEPER_MARK};
use desi_gpu_map_core::text::quote;
use rustix::fs::{flock, fstat, lstat, open, openat, FlockOperation, Mode, OFlags};
use rustix::io::Errno;
use rustix::process::Signal;
use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

/// How many random names the step's directory may try.
const NAME_TRIES: usize = 8;
/// The file in a keeper's directory whose `flock` is its keeper's life.
pub const LOCK: &str = "lock";
/// The question whose numeric answer shows the daemon serves.
const READY_QUESTION: &str = "get_default_active_thread_percentage";

/// The step's daemon, once it answered: made only with its identity known.
pub struct Running {
    child: Child,
    /// The daemon as `/proc` showed it when it answered.
    identity: Identity,
    daemon: Daemon,
    /// Directories whose names were taken before this one's was made.
    taken: Vec<PathBuf>,
    /// A keeper's directory's [`lock`], held until the directory is gone.
    held: Option<OwnedFd>,
}

/// A random number for a directory's name, from the kernel's generator
/// (the clock and pid where it fails, which only makes a name likelier
/// to be taken, and then another is drawn).
pub fn random_token() -> u32 {
    let mut bytes = [0u8; 4];
    let flags = rustix::rand::GetRandomFlags::empty();
    if rustix::rand::getrandom(&mut bytes, flags).ok() == Some(bytes.len()) {
        return u32::from_ne_bytes(bytes);
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    (now as u32) ^ std::process::id().rotate_left(16)
}

/// Makes the step's directories, starts the daemon, and waits until it
/// answers on its pipe, all within the daemon's timeout. On failure
/// nothing is left (the removal has a timeout of its own).
pub fn start(planned: &Daemon, runner: &dyn Runner) -> Result<Running, Failure> {
    start_in(make(planned, runner)?, runner)
}

/// The step's own directory, made ([`make`]) and not yet used.
pub struct Made {
    daemon: Daemon,
    /// Directories whose names were taken before this one's was made.
    taken: Vec<PathBuf>,
    /// When the daemon's timeout, counted from the directory's making, ends.
    deadline: Instant,
    /// A keeper's directory's [`lock`], held from its making on.
    held: Option<OwnedFd>,
}

impl Made {
    /// The directory made: the daemon's.
    pub fn dir(&self) -> PathBuf {
        self.daemon.dir()
    }
}

/// Makes the step's own directory (mode 0700) under a name nobody had.
pub fn make(planned: &Daemon, runner: &dyn Runner) -> Result<Made, Failure> {
    let deadline = Instant::now() + planned.timeout;
    let (daemon, taken, held) = make_dir(planned, runner, deadline)?;
    Ok(Made {
        daemon,
        taken,
        deadline,
        held,
    })
}

/// Makes the pipe and log directories in `made`, starts the daemon, and
/// waits until it answers, within what is left of the timeout. On failure
/// the directory is removed (before its lock goes).
pub fn start_in(made: Made, runner: &dyn Runner) -> Result<Running, Failure> {
    let Made {
        daemon,
        taken,
        deadline,
        held,
    } = made;
    let mut mkdir = Command::new("/bin/mkdir");
    mkdir
        .args(["-m", "0700", "--"])
        .args([&daemon.pipe(), &daemon.log()]);
    let started = tool(mkdir, runner, deadline)
        .map_err(|why| {
            why.within(format_args!(
                "cannot make the MPS directories in {}",
                daemon.dir().display()
            ))
        })
        .and_then(|()| spawn_daemon(&daemon, runner))
        .and_then(|child| until_it_answers(child, &daemon, runner, deadline));
    match started {
        Ok(running) => Ok(Running {
            taken,
            held,
            ..running
        }),
        Err(why) => {
            let _ = remove_dirs(&daemon, runner);
            drop(held);
            Err(why)
        }
    }
}

impl Running {
    /// The daemon as it runs: in the directory that could be made.
    pub fn daemon(&self) -> &Daemon {
        &self.daemon
    }

    /// The directories whose names another had taken, for the log.
    pub fn taken(&self) -> &[PathBuf] {
        &self.taken
    }

    /// The step ended on this node: `quit` and a wait within the timeout,
    /// then SIGKILL to what is left of the daemon and its servers, and the
    /// directories go. Returns what went wrong, for the front end's log.
    pub fn stop(mut self, runner: &dyn Runner) -> Vec<String> {
        let mut said = Vec::new();
        let deadline = Instant::now() + self.daemon.timeout;
        let pid = self.child.id();
        let servers = self.servers();
        if let Err(why) = ask(&self.daemon, runner, "quit", deadline) {
            said.push(format!("MPS daemon {pid}: quit: {why}"));
        }
        if !self.wait_until(deadline) {
            if identity(pid).as_ref() == Some(&self.identity) {
                kill_group(&self.child);
                said.push(format!("MPS daemon {pid} did not quit in time: killed"));
            }
            self.wait_until(Instant::now() + POLL * 100);
        }
        // Servers the daemon left behind (it was killed, say).
        for (server, identity) in servers {
            if signal_if(server, &identity, Signal::KILL) {
                said.push(format!("MPS server {server} outlived its daemon: killed"));
            }
        }
        if let Err(why) = remove_dirs(&self.daemon, runner) {
            said.push(why.to_string());
        }
        drop(self.held.take());
        said
    }

    /// The daemon's pid: this process's child until [`Running::stop`] or
    /// [`Running::end_now`] reaps it.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The step ends where what is left of it may be killed at any moment:
    /// under proctrack/cgroup, Slurm kills the step's remaining processes
    /// about 0.3 ms after its last task exits (measured on 22.05), and
    /// exec's keeper with them. So the directories go first, by this
    /// process's own calls (only for a runner that runs as this process:
    /// exec's keeper, the user itself), then the daemon and its servers are
    /// killed: its socket is gone with its directory, so no `quit` can
    /// reach it, and it has no client left. What went wrong, as for `stop`.
    pub fn end_now(mut self) -> Vec<String> {
        // First, before anything that reads /proc.
        let first = fs::remove_dir_all(self.daemon.dir());
        let servers = self.servers();
        kill_group(&self.child);
        self.wait_until(Instant::now() + self.daemon.timeout);
        for (server, identity) in servers {
            signal_if(server, &identity, Signal::KILL);
        }
        // The daemon, alive at the first try, may have written a file
        // there in between (rmdir then fails, ENOTEMPTY): once more, now
        // that it is gone.
        let last = match first {
            Ok(()) => Ok(()),
            Err(_) => fs::remove_dir_all(self.daemon.dir()).or_else(gone_already),
        };
        drop(self.held.take());
        match last {
            Ok(()) => Vec::new(),
            Err(e) => vec![format!(
                "cannot remove the MPS directory {}: {e}",
                self.daemon.dir().display()
            )],
        }
    }

    /// The daemon's servers, while its pid is still the daemon's
    /// (slurmstepd, which waits for any child, may have reaped a daemon
    /// that died).
    fn servers(&self) -> Vec<(u32, Identity)> {
        let pid = self.child.id();
        match identity(pid) {
            Some(now) if now == self.identity => {
                children_named(pid, self.daemon.uid, env::MPS_SERVER)
            }
            _ => Vec::new(),
        }
    }

    fn wait_until(&mut self, deadline: Instant) -> bool {
        crate::child::wait_until(&mut self.child, deadline, POLL)
    }
}

/// A directory that is not there was removed.
fn gone_already(e: std::io::Error) -> std::io::Result<()> {
    match e.kind() {
        std::io::ErrorKind::NotFound => Ok(()),
        _ => Err(e),
    }
}

/// Makes the step's own directory under a name nobody had: `mkdir`
/// fails where the name exists (a folder or link another user planted,
/// say), and then another random name is tried. Nothing is ever made
/// inside a directory this step did not just make.
///
/// A keeper's directory (named as one: the only ones a sweep looks at) is
/// [`lock`]ed at once, and the lock returned, to be held as long as the
/// keeper lives. A sweep that came between the `mkdir` and the lock has
/// the directory (it removes it): another random name is tried. So too
/// where `mkdir` failed and left no directory: `mkdir -m` sets the mode
/// after it makes the directory, and a sweep between the two removed it
/// ("cannot change permissions": 1 of 8 concurrent steps ran without MPS
/// under load); a failure that is no sweep's fails again under every
/// name, and the last one is said. The
/// plugin's directories are not locked: no sweep removes them (slurmstepd
/// outlives the step and removes them itself), and the plugin runs as
/// root, which would have to make the lock's file in the user's directory
/// (and cannot on a root-squashed share).
fn make_dir(
    planned: &Daemon,
    runner: &dyn Runner,
    deadline: Instant,
) -> Result<(Daemon, Vec<PathBuf>, Option<OwnedFd>), Failure> {
    let (mut daemon, mut taken) = (planned.clone(), Vec::new());
    let keepers = daemon.stem.ends_with(&format!(".{KEEPER_MARK}"));
    // A keeper's last mkdir failure that left no directory, said if every
    // name fails.
    let mut failed = None;
    for _ in 0..NAME_TRIES {
        let mut mkdir = Command::new("/bin/mkdir");
        mkdir.args(["-m", "0700", "--"]).arg(daemon.dir());
        match tool(mkdir, runner, deadline) {
            Ok(()) if !keepers => return Ok((daemon, taken, None)),
            Ok(()) => match lock(&daemon.dir(), daemon.uid) {
                Lock::Held(held) => return Ok((daemon, taken, Some(held))),
                // Where no lock can be taken, no sweep can take it either.
                Lock::Unknown => return Ok((daemon, taken, None)),
                Lock::Busy | Lock::Gone => daemon = daemon.with_token(random_token()),
            },
            Err(_) if daemon.dir().symlink_metadata().is_ok() => {
                taken.push(daemon.dir());
                daemon = daemon.with_token(random_token());
            }
            Err(why) if keepers && Instant::now() < deadline => {
                failed = Some(why.within(format_args!(
                    "cannot make the MPS directory {}",
                    daemon.dir().display()
                )));
                daemon = daemon.with_token(random_token());
            }
            Err(why) => {
                return Err(why.within(format_args!(
                    "cannot make the MPS directory {}",
                    daemon.dir().display()
                )))
            }
        }
    }
    Err(failed.unwrap_or_else(|| {
        Failure::new(format!(
            "cannot make an MPS directory in {}: {NAME_TRIES} random names were all taken \
             (or their directories swept as soon as made)",
            daemon.base.display()
        ))
    }))
}

/// What a try at a keeper's directory's [`lock`] found.
pub enum Lock {
    /// Taken: held for as long as this descriptor is open.
    Held(OwnedFd),
    /// Another holds it: the directory's keeper lives.
    Busy,
    /// The directory is gone, or its name no longer names the directory
    /// opened, or is not the user's.
    Gone,
    /// Not known: the file system takes no lock, say. Nothing is proven.
    Unknown,
}

/// Takes, without waiting, the exclusive `flock` on the file [`LOCK`] in
/// `dir`, a directory of `uid`'s (the file is made where it is missing):
/// the lock a keeper holds on its directory for as long as it lives, and
/// that a sweep must take before it removes the directory. A lock is the
/// kernel's (or the file server's) and goes with its holder however it
/// ends; unlike a socket, it is seen from every network namespace and,
/// on a shared file system, from every node.
///
/// A file in the directory, not the directory itself: NFS takes `flock`
/// on a regular file to the server (as a lock on the whole file, since
/// Linux 2.6.12), but on a directory only on this node (its directories
/// have no lock operation), and a base on a shared file system is what
/// the lock is for. Opened for writing, which NFS needs for an exclusive
/// lock. Once locked, the directory and the file must still be linked and
/// the name still the directory's: a sweep may have removed them between
/// the open and the lock.
pub fn lock(dir: &Path, uid: u32) -> Lock {
    let flags = OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let opened = open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | flags,
        Mode::empty(),
    );
    let dir_fd = match opened {
        Ok(fd) => fd,
        Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => return Lock::Gone,
        Err(_) => return Lock::Unknown,
    };
    let Ok(made) = fstat(&dir_fd) else {
        return Lock::Unknown;
    };
    if made.st_uid != uid {
        return Lock::Gone;
    }
    let mode = Mode::RUSR | Mode::WUSR;
    let file = match openat(&dir_fd, LOCK, OFlags::RDWR | OFlags::CREATE | flags, mode) {
        Ok(fd) => fd,
        // Made in a directory removed meanwhile.
        Err(Errno::NOENT) => return Lock::Gone,
        Err(_) => return Lock::Unknown,
    };
    match flock(&file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(Errno::WOULDBLOCK) => return Lock::Busy,
        Err(_) => return Lock::Unknown,
    }
    let linked = |fd: &OwnedFd| fstat(fd).is_ok_and(|s| s.st_nlink > 0);
    let named = lstat(dir).is_ok_and(|s| (s.st_dev, s.st_ino) == (made.st_dev, made.st_ino));
    match linked(&dir_fd) && linked(&file) && named {
        true => Lock::Held(file),
        false => Lock::Gone,
    }
}

/// `rm -rf DIR` within the daemon's timeout.
fn remove_dirs(d: &Daemon, runner: &dyn Runner) -> Result<(), Failure> {
    let mut rm = Command::new("/bin/rm");
    rm.args(["-rf", "--one-file-system", "--"]).arg(d.dir());
    tool(rm, runner, Instant::now() + d.timeout).map_err(|why| {
        why.within(format_args!(
            "cannot remove the MPS directory {}",
            d.dir().display()
        ))
    })
}

/// The daemon in the foreground (`-f`), with only MPS's variables, its
/// output in `control.log` in the log directory.
fn spawn_daemon(d: &Daemon, runner: &dyn Runner) -> Result<Child, Failure> {
    let log = fs::OpenOptions::new()
        .append(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(no_follow())
        .open(d.log().join("control.log"))
        .map_err(|e| {
            Failure::os(
                format_args!("cannot open the MPS log in {}", d.log().display()),
                e,
            )
        })?;
    let err = log
        .try_clone()
        .map_err(|e| Failure::os("cannot open the MPS log", e))?;
    let mut cmd = Command::new(&d.control);
    cmd.arg("-f")
        .env_clear()
        .envs(d.env())
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err);
    spawn(cmd, runner)
        .map_err(|e| Failure::os(format_args!("cannot start {}", d.control.display()), e))
}

/// `O_NOFOLLOW`, for `custom_flags`: a log the user replaced by a link is
/// not opened.
fn no_follow() -> i32 {
    rustix::fs::OFlags::NOFOLLOW.bits() as i32
}

/// Waits until the daemon answers; it is then [`Running`], and otherwise
/// killed with its group, and the failure says how its log ends.
fn until_it_answers(
    mut child: Child,
    daemon: &Daemon,
    runner: &dyn Runner,
    deadline: Instant,
) -> Result<Running, Failure> {
    match answers(&mut child, daemon, runner, deadline) {
        Ok(identity) => Ok(Running {
            child,
            identity,
            daemon: daemon.clone(),
            taken: Vec::new(),
            held: None,
        }),
        Err(why) => {
            // Our own child, not yet reaped: its pid is still its own, and
            // so is its process group.
            kill_group(&child);
            let _ = child.wait();
            Err(why.then(last_log_line(daemon)))
        }
    }
}

/// Waits until the daemon answers [`READY_QUESTION`] with a number; who
/// it is, as `/proc` shows it then.
fn answers(
    child: &mut Child,
    daemon: &Daemon,
    runner: &dyn Runner,
    deadline: Instant,
) -> Result<Identity, Failure> {
    let control = daemon.control.display().to_string();
    let mut last = "its pipe never appeared".to_string();
    let mut answered = false;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(Failure::new(format!(
                "the MPS control daemon {control} exited ({status}) before it answered"
            )));
        }
        if daemon.pipe().join("control").exists() {
            match ask(daemon, runner, READY_QUESTION, deadline) {
                Ok(answer) if answer.trim().parse::<f64>().is_ok() => {
                    return identity(child.id())
                        .ok_or_else(|| Failure::new("the MPS daemon vanished"));
                }
                Ok(answer) => {
                    last = format!("it answered {}", quote(answer.trim()));
                    answered = true;
                }
                // A later question cut off by the deadline says less.
                Err(why) if !answered => last = why.to_string(),
                Err(_) => {}
            }
        }
        if Instant::now() >= deadline {
            return Err(Failure::new(format!(
                "the MPS control daemon {control} did not answer within {} s ({last})",
                daemon.timeout.as_secs()
            )));
        }
        std::thread::sleep(POLL);
    }
}

/// Sends one command to the daemon through its pipe; its answer.
fn ask(
    d: &Daemon,
    runner: &dyn Runner,
    command: &str,
    deadline: Instant,
) -> Result<String, Failure> {
    let mut cmd = Command::new(&d.control);
    cmd.env_clear().envs(d.env());
    let ran = run(cmd, runner, &format!("{command}\n"), deadline)?;
    match ran.status.success() {
        true => Ok(ran.out),
        false => Err(Failure::new(format!("{}: {}", ran.status, ran.err.trim()))),
    }
}

/// The end of the daemon's log, for a failure's message: at most
/// [`MAX_OUTPUT`] bytes of a regular file, never following a link or
/// waiting on a pipe the user may have put in its place.
fn last_log_line(d: &Daemon) -> String {
    let read = || -> std::io::Result<String> {
        let mut file = fs::OpenOptions::new()
            .read(true)
            .custom_flags(no_follow() | rustix::fs::OFlags::NONBLOCK.bits() as i32)
            .open(d.log().join("control.log"))?;
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Ok(String::new());
        }
        let most = MAX_OUTPUT as u64;
        file.seek(SeekFrom::Start(meta.len().saturating_sub(most)))?;
        let mut text = String::new();
        file.take(most).read_to_string(&mut text)?;
        Ok(text)
    };
    match read().unwrap_or_default().lines().last() {
        Some(line) => format!("; its log ends: {}", line.trim()),
        None => "; its log is empty".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::AsThisProcess;
    use desi_gpu_map_core::mps::KeeperAddr;
    use std::path::Path;
    use std::time::Duration;

    /// A stand-in control daemon: `-f` logs `started`, then makes its
    /// socket (in that order: once it is there, the log line is, however
    /// late the script runs) and waits; a client's `quit` ends it, and its
    /// question gets `answer`.
    fn stand_in(dir: &Path, answer: &str) -> PathBuf {
        let script = dir.join("control");
        let text = format!(
            "#!/bin/sh\nif [ \"$1\" = -f ]; then echo $$ > \"$CUDA_MPS_PIPE_DIRECTORY/pid\"\n\
             echo started; touch \"$CUDA_MPS_PIPE_DIRECTORY/control\"; exec sleep 30; fi\n\
             read cmd; case $cmd in quit) kill $(cat \"$CUDA_MPS_PIPE_DIRECTORY/pid\");;\n\
             *) echo {answer};; esac\n"
        );
        fs::write(&script, text).unwrap();
        let mut mode = fs::metadata(&script).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut mode, 0o755);
        fs::set_permissions(&script, mode).unwrap();
        script
    }

    fn planned(base: &Path, control: PathBuf) -> Daemon {
        Daemon {
            control,
            path: vec![PathBuf::from("/bin"), PathBuf::from("/usr/bin")],
            base: base.to_path_buf(),
            stem: "dgm-mps.1000.7.0.0".to_string(),
            gpus: vec!["GPU-a".to_string()],
            uid: identity(std::process::id()).unwrap().uid,
            gid: 0,
            host: None,
            shares: vec![None],
            keep_log: false,
            timeout: Duration::from_secs(5),
            local_tasks: 1,
            asked: true,
            token: 1,
        }
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("dgm-daemon-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Runs the first `mkdir` as it runs where a keeper's sweep removes
    /// the directory between its making and `mkdir -m`'s mode change: made,
    /// removed, and the failure GNU mkdir then reports; every other child
    /// as asked.
    struct SweptOnce(std::cell::Cell<bool>);

    impl Runner for SweptOnce {
        fn prepare(&self, cmd: &mut Command) {
            let dir = cmd.get_args().last().map(|a| a.to_os_string());
            let (Some(dir), false) = (dir, self.0.replace(true)) else {
                return;
            };
            let script = "mkdir -m 0700 -- \"$1\" && rmdir -- \"$1\" && echo \"/bin/mkdir: \
                          cannot change permissions of '$1': No such file or directory\" >&2; \
                          exit 1";
            *cmd = Command::new("/bin/sh");
            cmd.args(["-c", script, "sh"]).arg(dir);
            cmd.stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
        }
    }

    #[test]
    fn a_keepers_directory_swept_before_mkdir_set_its_mode_is_made_under_another_name() {
        let dir = scratch("swept");
        let planned = KeeperAddr::of(&planned(&dir, PathBuf::from("/bin/false")))
            .daemon()
            .clone();
        let made = make(&planned, &SweptOnce(std::cell::Cell::new(false))).unwrap();
        let Made { daemon, held, .. } = made;
        assert_ne!(daemon.dir(), planned.dir());
        assert!(!planned.dir().exists());
        let mode = fs::metadata(daemon.dir()).unwrap().permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o700
        );
        assert!(held.is_some(), "its lock is held");
        drop(held);
        // A failure that is no sweep's is said as mkdir said it.
        let missing = Daemon {
            base: dir.join("missing"),
            ..planned
        };
        let why = make(&missing, &AsThisProcess).err().unwrap().to_string();
        assert!(why.contains("cannot make the MPS directory"), "{why}");
        assert!(why.contains("No such file or directory"), "{why}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_daemon_starts_answers_and_leaves_nothing_when_stopped() {
        let dir = scratch("ok");
        let control = stand_in(&dir, "100.0");
        // A planted name is skipped for another random one.
        let first = planned(&dir, control);
        fs::create_dir(first.dir()).unwrap();
        let running = start(&first, &AsThisProcess).unwrap();
        assert_eq!(running.taken(), std::slice::from_ref(&first.dir()));
        let made = running.daemon().dir();
        assert!(made.join("pipe/control").exists());
        assert!(fs::read_to_string(made.join("log/control.log"))
            .unwrap()
            .contains("started"));
        let pid = running.child.id();
        assert_eq!(running.stop(&AsThisProcess), Vec::<String>::new());
        assert!(!made.exists());
        assert!(identity(pid).is_none(), "the daemon is gone");
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Whether another process can take `dir`'s lock (util-linux's
    /// `flock`, which exits 1 where it is held).
    fn lockable_elsewhere(dir: &Path) -> bool {
        let status = Command::new("flock")
            .args(["--nonblock", "--exclusive"])
            .arg(dir.join(LOCK))
            .arg("true")
            .status()
            .expect("run util-linux's flock");
        assert!(matches!(status.code(), Some(0 | 1)), "flock: {status}");
        status.success()
    }

    #[test]
    fn a_keepers_directory_is_locked_from_its_making_until_it_is_removed() {
        let dir = scratch("lock");
        let kept = KeeperAddr::of(&planned(&dir, stand_in(&dir, "100.0")))
            .daemon()
            .clone();
        let made = make(&kept, &AsThisProcess).unwrap();
        assert!(!lockable_elsewhere(&made.dir()), "locked once made");
        let running = start_in(made, &AsThisProcess).unwrap();
        let made = running.daemon().dir();
        assert!(!lockable_elsewhere(&made), "locked while it runs");
        assert_eq!(running.end_now(), Vec::<String>::new());
        assert!(!made.exists());
        // The plugin's, which no sweep removes, has no lock.
        let plugins = start(&planned(&dir, stand_in(&dir, "100.0")), &AsThisProcess).unwrap();
        assert!(!plugins.daemon().dir().join(LOCK).exists());
        assert_eq!(plugins.stop(&AsThisProcess), Vec::<String>::new());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_daemon_that_answers_nonsense_is_killed_and_its_directory_removed() {
        let dir = scratch("bad");
        let mut d = planned(&dir, stand_in(&dir, "nonsense"));
        // Waited for in full. The timeout also bounds each of the mkdir and
        // the rm that removes the directory: 300 ms was not always enough
        // for the rm beside a CPU burner per core.
        d.timeout = Duration::from_secs(1);
        let why = start(&d, &AsThisProcess).err().unwrap().to_string();
        assert!(
            why.contains("did not answer within 1 s (it answered \"nonsense\")"),
            "{why}"
        );
        assert!(why.ends_with("; its log ends: started"), "{why}");
        assert!(!d.dir().exists());
        // Fails at once: the plan's timeout, which only the rm runs into.
        d.timeout = Duration::from_secs(5);
        d.control = dir.join("missing");
        let failed = start(&d, &AsThisProcess).err().unwrap();
        let why = failed.to_string();
        assert!(why.starts_with("cannot start "), "{why}");
        // The OS's error stays the source, under the words.
        assert_eq!(
            failed.os_error().map(std::io::Error::kind),
            Some(std::io::ErrorKind::NotFound)
        );
        assert!(!d.dir().exists());
        fs::remove_dir_all(&dir).unwrap();
    }

    /// NVIDIA's real control daemon (tests/nvidia/fetch.sh), which starts
    /// and answers without a GPU.
    fn real_control() -> PathBuf {
        let dir = std::env::var("DGM_NVIDIA_DIR")
            .unwrap_or_else(|_| "/var/tmp/desi-gpu-map-nvidia/current".to_string());
        let control = Path::new(&dir).join("nvidia-cuda-mps-control");
        assert!(
            control.is_file(),
            "{} is missing: run tests/nvidia/fetch.sh (make nvidia) as root",
            control.display()
        );
        control
    }

    /// `planned` in a base under `dir` whose length makes the daemon's
    /// longest socket path, `pipe/control_privileged`, `len` bytes long.
    fn with_socket_of(len: usize, dir: &Path, control: &Path) -> Daemon {
        let socket = |d: &Daemon| d.pipe().join("control_privileged").as_os_str().len();
        let short = planned(dir, control.to_path_buf());
        let pad = len - socket(&short) - 1;
        let base = dir.join("b".repeat(pad));
        fs::create_dir(&base).unwrap();
        let d = planned(&base, control.to_path_buf());
        assert_eq!(socket(&d), len);
        d
    }

    #[test]
    fn the_real_control_daemon_starts_where_the_core_allows_and_not_a_byte_past() {
        use desi_gpu_map_core::mps::MAX_SOCKET_PATH;
        let dir = scratch("edge");
        let control = real_control();
        let most = with_socket_of(MAX_SOCKET_PATH, &dir, &control);
        let running = start(&most, &AsThisProcess).unwrap();
        let made = running.daemon().dir();
        assert!(made.join("pipe/control_privileged").exists());
        assert_eq!(running.stop(&AsThisProcess), Vec::<String>::new());
        assert!(!made.exists());
        // One byte more, which the core refuses: the daemon exits at once,
        // its log empty or holding only its start (535.261.03 writes that
        // line or not, by how far it got: seen in 1 run of 6 on 2 busy
        // cores), never having answered.
        let past = with_socket_of(MAX_SOCKET_PATH + 1, &dir, &control);
        let why = start(&past, &AsThisProcess).err().unwrap().to_string();
        assert!(
            why.contains("exited (exit status: 1) before it answered"),
            "{why}"
        );
        let said = why.ends_with("; its log is empty")
            || why.contains("its log ends: ") && why.contains("Starting control daemon");
        assert!(said, "{why}");
        assert!(!past.dir().exists());
        fs::remove_dir_all(&dir).unwrap();
    }
}
