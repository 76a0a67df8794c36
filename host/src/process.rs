//! Processes as `/proc` shows them: one reader of `/proc/PID/status` and
//! `/proc/PID/stat`, what tells a process from a later one with its pid,
//! and signals sent only to the process that was meant.

use desi_gpu_map_core::launch::{Above, Ancestry};
use desi_gpu_map_core::snapshot::{Snapshot, Var};
use rustix::process::{kill_process, Pid, Signal};
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Most parents walked up from a process to an ancestor.
const MOST_ANCESTORS: usize = 32;
/// The most of one process's environment read.
const MOST_ENVIRON: u64 = 1 << 20;
/// slurmstepd's command name: the processes above it are Slurm's.
pub const SLURMSTEPD: &str = "slurmstepd";
/// The variable in which slurmstepd tells each task its own pid.
pub const TASK_PID: &str = "SLURM_TASK_PID";

/// Room first made for a `/proc` file, in bytes: its whole text in one
/// read where it fits (`/proc` files have no size, and std's reader would
/// start at 32 bytes and double, one system call each time).
const STATUS_SIZE: usize = 4096;
const COMM_SIZE: usize = 64;
const ENVIRON_SIZE: usize = 16384;

/// A `/proc` file's text, with room for `size` bytes made first.
fn read_proc(path: String, size: usize) -> Option<String> {
    let mut text = String::with_capacity(size);
    fs::File::open(path).ok()?.read_to_string(&mut text).ok()?;
    Some(text)
}

/// What tells a process from a later one with the same pid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    pub(crate) uid: u32,
    pub(crate) exe: PathBuf,
    /// Clock ticks after boot (field 22 of `/proc/PID/stat`).
    pub(crate) start_time: u64,
}

/// The value of `key` (`PPid`, `Uid`, ...) in `/proc/PID/status`; `pid`
/// may be `self`.
pub(crate) fn status_field(pid: &str, key: &str) -> Option<String> {
    let status = read_proc(format!("/proc/{pid}/status"), STATUS_SIZE)?;
    status.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        (name == key).then(|| value.trim().to_string())
    })
}

/// Field `n` (counted from 1, as proc(5) does) of `/proc/PID/stat`, a
/// number; the command's name, in parentheses, may hold spaces.
pub(crate) fn stat_field(pid: u32, n: usize) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    // `rest` starts at field 3.
    rest.split_whitespace().nth(n.checked_sub(3)?)?.parse().ok()
}

/// `pid`'s parent.
pub fn parent_of(pid: u32) -> Option<u32> {
    status_field(&pid.to_string(), "PPid")?.parse().ok()
}

/// `pid`'s uid (real, effective, saved and filesystem must agree: a
/// process between two users is nobody's), executable and start time.
pub(crate) fn identity(pid: u32) -> Option<Identity> {
    let uids = status_field(&pid.to_string(), "Uid")?;
    let uids: Vec<u32> = uids
        .split_whitespace()
        .map(|u| u.parse().ok())
        .collect::<Option<_>>()?;
    let uid = *uids.first()?;
    if uids.iter().any(|&u| u != uid) {
        return None;
    }
    Some(Identity {
        uid,
        exe: fs::read_link(format!("/proc/{pid}/exe")).ok()?,
        start_time: stat_field(pid, 22)?,
    })
}

/// The children of `parent` that run `name` as `uid`, each with its
/// identity.
pub(crate) fn children_named(parent: u32, uid: u32, name: &str) -> Vec<(u32, Identity)> {
    pids()
        .filter(|&pid| stat_field(pid, 4) == Some(u64::from(parent)))
        .filter_map(|pid| Some((pid, identity(pid)?)))
        .filter(|(_, id)| id.uid == uid && is_named(&id.exe, name))
        .collect()
}

fn is_named(exe: &Path, name: &str) -> bool {
    exe.file_name().and_then(|n| n.to_str()) == Some(name)
}

/// Sends `signal` to `pid` only if it is still the process `identity`
/// describes; true if sent.
pub(crate) fn signal_if(pid: u32, identity: &Identity, signal: Signal) -> bool {
    if self::identity(pid).as_ref() != Some(identity) {
        return false;
    }
    let pid = i32::try_from(pid).ok().and_then(Pid::from_raw);
    pid.is_some_and(|pid| kill_process(pid, signal).is_ok())
}

/// A pidfd of `pid`: readable once that process has exited, whoever its
/// parent is (pidfd_open(2); no permission is needed to watch).
pub fn pidfd(pid: u32) -> Option<std::os::fd::OwnedFd> {
    let pid = Pid::from_raw(i32::try_from(pid).ok()?)?;
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
}

/// The processes `pid` has forked and not yet reaped (every thread's
/// `/proc/PID/task/TID/children`).
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(threads) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut children: Vec<u32> = threads
        .filter_map(|t| {
            let path = t.ok()?.path().join("children");
            std::fs::read_to_string(path).ok()
        })
        .flat_map(|text| {
            text.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect();
    children.sort_unstable();
    children.dedup();
    children
}

/// `pid`, then its parent, its parent's parent, ...: at most
/// [`MOST_ANCESTORS`] of them, and never init (pid 1) or the kernel's 0.
/// Each parent is read only once it is asked for: a walk that stops at a
/// process reads nothing above it.
pub(crate) fn ancestors(pid: u32) -> impl Iterator<Item = u32> {
    let above_init = |p: &u32| *p > 1;
    let mut next = Some(pid).filter(above_init);
    let mut first = true;
    std::iter::from_fn(move || {
        if !first {
            next = next.and_then(parent_of).filter(above_init);
        }
        first = false;
        next
    })
    .take(MOST_ANCESTORS)
}

/// What this process's ancestors had of `watched` (the launchers'
/// variables, [`desi_gpu_map_core::launch::watched`]), from its parent up to
/// the step's boundary ([`Ancestry::walked`]): slurmstepd, the step's task
/// (`SLURM_TASK_PID`: found without reading slurmstepd's `/proc`, which
/// `hidepid` hides), or the first whose environment cannot be read.
pub fn launch_ancestry(watched: &[Var]) -> Ancestry {
    let task = task_pid();
    let had = |pid: u32| -> Option<Snapshot> {
        let env = environ(pid)?;
        let value = |name: &str| env.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
        Some(Snapshot::read_only(watched, value))
    };
    let walk = ancestors(std::os::unix::process::parent_id()).map(|pid| {
        if Some(pid) == task {
            Above::Task(had(pid))
        } else if comm(pid).as_deref() == Some(SLURMSTEPD) {
            Above::Stepd
        } else {
            had(pid).map_or(Above::Hidden, Above::Read)
        }
    });
    Ancestry::walked(task.is_some(), task == Some(std::process::id()), walk)
}

/// The pid of this process's step task, as slurmstepd set it in the
/// task's environment (`SLURM_TASK_PID`; a task prolog inherits it).
pub fn task_pid() -> Option<u32> {
    std::env::var(TASK_PID)
        .ok()?
        .trim()
        .parse()
        .ok()
        .filter(|&p| p > 1)
}

/// This process's mount namespace (the inode of `/proc/self/ns/mnt`): a
/// plugin that moved the task into a container's changed it.
pub fn mount_namespace() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    fs::metadata("/proc/self/ns/mnt").ok().map(|m| m.ino())
}

/// `pid`'s command name (`/proc/PID/comm`).
pub fn comm(pid: u32) -> Option<String> {
    let comm = read_proc(format!("/proc/{pid}/comm"), COMM_SIZE)?;
    Some(comm.trim_end_matches('\n').to_string())
}

/// The environment `pid` was started with (`/proc/PID/environ`: readable
/// only for the user's own processes), at most `MOST_ENVIRON` bytes.
pub fn environ(pid: u32) -> Option<Vec<(String, String)>> {
    let file = fs::File::open(format!("/proc/{pid}/environ")).ok()?;
    let mut bytes = Vec::with_capacity(ENVIRON_SIZE);
    file.take(MOST_ENVIRON).read_to_end(&mut bytes).ok()?;
    let pairs = bytes
        .split(|&b| b == 0)
        .filter_map(|entry| {
            let entry = String::from_utf8_lossy(entry);
            let (name, value) = entry.split_once('=')?;
            Some((name.to_string(), value.to_string()))
        })
        .collect();
    Some(pairs)
}

/// The command lines of `uid`'s processes (each as its arguments): the
/// uid is the kernel's, which no other user can take.
pub fn command_lines_of(uid: u32) -> Vec<Vec<String>> {
    pids()
        .filter(|&pid| identity(pid).is_some_and(|id| id.uid == uid))
        .filter_map(|pid| fs::read(format!("/proc/{pid}/cmdline")).ok())
        .map(|bytes| {
            bytes
                .split(|&b| b == 0)
                .map(|arg| String::from_utf8_lossy(arg).into_owned())
                .collect()
        })
        .collect()
}

/// A command that runs this very program again, named as this program in
/// the child's `argv[0]` for `ps`: by its path, so that the child's
/// command name (`comm`) is the program's; `/proc/self/exe`, the file
/// this process was started from, only where that path is gone (a
/// rebuild or an upgrade between the unlink and the new file). A child
/// run as `/proc/self/exe` is named `exe` to `ps`, `top` and the
/// kernel's accounting, the mark of a re-executed container runtime that
/// process monitors watch for.
pub fn this_program() -> std::process::Command {
    use std::os::unix::process::CommandExt;
    let path = std::env::current_exe()
        .ok()
        .filter(|path| path.is_file())
        .unwrap_or_else(|| PathBuf::from("/proc/self/exe"));
    let mut cmd = std::process::Command::new(path);
    let name = std::env::args_os()
        .next()
        .unwrap_or_else(|| "desi-gpu-map".into());
    cmd.arg0(name);
    cmd
}

/// Every process `/proc` lists now (none where it cannot be read).
fn pids() -> impl Iterator<Item = u32> {
    fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
}

/// `pid` is `ancestor` or below it.
pub fn descends_from(pid: u32, ancestor: u32) -> bool {
    ancestors(pid).any(|p| p == ancestor)
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
        assert_eq!(parent_of(me), Some(std::os::unix::process::parent_id()));
        assert_eq!(stat_field(me, 2), None, "the name is not a number");
        assert_eq!(stat_field(me, 1), None, "before the name");
        assert!(status_field("self", "Cpus_allowed_list").is_some());
        assert_eq!(status_field("self", "No_such_key"), None);
        // A different start time is another process: no signal.
        let other = Identity {
            start_time: id.start_time + 1,
            ..id.clone()
        };
        assert!(!signal_if(me, &other, Signal::TERM));
    }

    /// The walk up goes parent by parent, each once, and ends above init.
    #[test]
    fn ancestors_are_each_parent_once_up_to_init() {
        let me = std::process::id();
        let walk: Vec<u32> = ancestors(me).collect();
        assert_eq!(walk.first(), Some(&me));
        assert_eq!(walk.get(1), Some(&std::os::unix::process::parent_id()));
        for pair in walk.windows(2) {
            assert_eq!(parent_of(pair[0]), Some(pair[1]), "{walk:?}");
        }
        let mut seen = walk.clone();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), walk.len(), "{walk:?}");
        assert!(walk.iter().all(|&p| p > 1), "{walk:?}");
        assert_eq!(ancestors(1).count(), 0);
        // A pid that is no process is given back alone: no parent to read.
        assert_eq!(ancestors(u32::MAX).collect::<Vec<_>>(), [u32::MAX]);
    }

    #[test]
    fn this_program_runs_this_very_file_again() {
        // This test binary, run again with a filter that selects nothing.
        let out = this_program()
            .args(["--exact", "no::such::test"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("running 0 tests"));
        // By its path, not as `exe`.
        let path = std::env::current_exe().unwrap();
        assert_eq!(this_program().get_program(), path.as_os_str());
    }

    #[test]
    fn a_childs_name_and_uid_find_it() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let me = std::process::id();
        let uid = identity(me).unwrap().uid;
        // Other tests of this process may run a sleep too.
        let found = children_named(me, uid, "sleep");
        let (_, id) = found.iter().find(|(pid, _)| *pid == child.id()).unwrap();
        assert!(children_named(me, uid + 1, "sleep").is_empty());
        assert!(children_named(me, uid, "sleepy").is_empty());
        assert!(signal_if(child.id(), id, Signal::KILL));
        child.wait().unwrap();
    }

    #[test]
    fn a_child_is_listed_watched_and_below_its_parent() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let me = std::process::id();
        assert!(children_of(me).contains(&child.id()));
        assert!(descends_from(child.id(), me));
        assert!(!descends_from(me, child.id()));
        let fd = pidfd(child.id()).expect("a pidfd of a live child");
        child.kill().unwrap();
        let mut fds = [rustix::event::PollFd::new(
            &fd,
            rustix::event::PollFlags::IN,
        )];
        let timeout = rustix::event::Timespec {
            tv_sec: 5,
            tv_nsec: 0,
        };
        assert_eq!(rustix::event::poll(&mut fds, Some(&timeout)).unwrap(), 1);
        child.wait().unwrap();
        assert!(pidfd(u32::MAX).is_none());
    }
}
