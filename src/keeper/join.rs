//! A task's side of exec's MPS: meet the node's keeper at its socket's
//! name (the first task to bind it starts the keeper), or, where another
//! user holds that name, in the keeper's own directory; and take its
//! answer.

use super::command::KeeperOpts;
use super::meet::{Answer, Ended, Request};
use super::reach::{self, Unreached};
use desi_gpu_map_core::mps::{Daemon, KeeperAddr};
use desi_gpu_map_core::text::quote;
use desi_gpu_map_host::failure::Failure;
use desi_gpu_map_host::process::{command_lines_of, this_program};
use desi_gpu_map_host::run::POLL;
use desi_gpu_map_host::sys::{peer_of, session_of};
use rustix::net::SocketAddrUnix;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::os::fd::OwnedFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// How much longer than the daemon's own timeout a task waits for the
/// keeper's answer (the keeper starts the daemon first).
const ANSWER_MARGIN: Duration = Duration::from_secs(5);
/// How many times a task starts the keeper again where one ended before
/// it answered (killed at its start, say): once, so that a keeper that
/// cannot live costs the step its MPS, not its deadline.
const MOST_RESTARTS: u32 = 1;
/// The longest answer line read from a keeper.
const MAX_ANSWER: u64 = 4096;
/// How long the name may stay bound by a socket that takes no connection
/// before it counts as another user's: the job's own tasks bind and
/// listen in one go.
const SQUAT_GRACE: Duration = Duration::from_millis(250);
/// The longest one look through a base for the keeper's directory may
/// take: the base may be `/tmp`, where anyone may make as many entries as
/// they like. Not a count: a directory's entries come in its file system's
/// order, and the keeper's may come last.
const SCAN_BOUND: Duration = Duration::from_secs(1);

/// A task of the step joins its node's daemon: the keeper's, started here
/// if no task started one yet. `local_id`: the task's node-local id (task
/// 0 starts the keeper where the name is another user's). The daemon as
/// it runs (in the directory the keeper made), or why the step runs
/// without MPS.
pub fn join(planned: &Daemon, stepd: Option<u32>, local_id: usize) -> Result<Daemon, Failure> {
    if let Some(why) = ends_with_its_namespace() {
        return Err(Failure::new(why));
    }
    let keeper = KeeperAddr::of(planned);
    let deadline = Instant::now() + keeper.daemon().timeout + ANSWER_MARGIN;
    match by_name(&keeper, stepd, deadline) {
        Met::Answered(answer) => answer,
        Met::Taken(who) => by_directory(&keeper, stepd, local_id == 0, deadline, &who),
    }
}

/// Why a keeper started from this task would end with it, where it
/// would: this task is process 1 of its pid namespace, or its parent is
/// and the step's session began outside that namespace (a container per
/// task: `unshare --pid --fork`, podman or apptainer with a pid namespace
/// of their own, with or without an init). The kernel kills every process
/// of a pid namespace when its process 1 ends, a keeper and its daemon
/// too, before the keeper can remove its directory; and the step's other
/// tasks, in namespaces of their own, could not be watched from it
/// anyway. So no keeper starts, and each such task runs without MPS.
fn ends_with_its_namespace() -> Option<String> {
    let first = "process 1 of a pid namespace of its own (a container per task?)";
    let why = "an MPS keeper started from it would end with this task, and could not watch \
               the step's other tasks";
    if std::process::id() == 1 {
        return Some(format!("this task is {first}: {why}"));
    }
    let below = session_of(None) == Some(0);
    (below && std::os::unix::process::parent_id() == 1)
        .then(|| format!("this task's parent is {first}: {why}"))
}

/// What the keeper's name led to.
enum Met {
    /// The keeper answered, or the task could not wait for it: the end.
    Answered(Result<Daemon, Failure>),
    /// Another user holds the name: who, for messages.
    Taken(String),
}

/// Meets the keeper at its abstract name, starting it where no task did.
fn by_name(keeper: &KeeperAddr, stepd: Option<u32>, deadline: Instant) -> Met {
    let (name, addr) = match names(keeper) {
        Ok(names) => names,
        Err(why) => return Met::Answered(Err(why)),
    };
    let mut bound_since: Option<Instant> = None;
    let mut restarts = 0;
    loop {
        match reach::connect(&addr, Instant::now() + SQUAT_GRACE) {
            Ok(stream) => match theirs_or_answer(stream, keeper, deadline) {
                // Its listener is gone with it: the next connect is
                // refused, and this task (or another) starts a keeper.
                Met::Answered(Err(why))
                    if ended_unanswered(&why)
                        && restarts < MOST_RESTARTS
                        && Instant::now() < deadline =>
                {
                    restarts += 1;
                    continue;
                }
                met => return met,
            },
            Err(Unreached::Full(waited)) => {
                return Met::Taken(format!(
                    "a socket whose queue stayed full for {} ms holds the name @{}",
                    waited.as_millis(),
                    keeper.name()
                ))
            }
            Err(Unreached::Failed(e)) => {
                let why = Failure::os(
                    format_args!("cannot reach the MPS keeper @{}", keeper.name()),
                    e,
                );
                return Met::Answered(Err(why));
            }
            Err(Unreached::Refused) => {}
        }
        // No keeper yet: this task starts one, unless another just bound
        // the name, whose keeper answers the next connect.
        match UnixListener::bind_addr(&name) {
            Ok(listener) => {
                if let Err(why) = start_keeper(Some(listener), keeper, stepd) {
                    return Met::Answered(Err(why));
                }
                bound_since = None;
            }
            Err(e) if e.kind() == ErrorKind::AddrInUse => {
                if bound_since.get_or_insert_with(Instant::now).elapsed() > SQUAT_GRACE {
                    return Met::Taken(format!(
                        "a socket that takes no connection holds the name @{}",
                        keeper.name()
                    ));
                }
                std::thread::sleep(POLL);
            }
            Err(e) => {
                let why = Failure::os(
                    format_args!("cannot start the MPS keeper @{}", keeper.name()),
                    e,
                );
                return Met::Answered(Err(why));
            }
        }
        if Instant::now() >= deadline {
            return Met::Answered(Err(no_answer(keeper)));
        }
    }
}

/// The keeper's abstract name, to bind and to connect to.
fn names(keeper: &KeeperAddr) -> Result<(SocketAddr, SocketAddrUnix), Failure> {
    let name = keeper.name().as_bytes();
    SocketAddr::from_abstract_name(name)
        .and_then(|bound| Ok((bound, SocketAddrUnix::new_abstract_name(name)?)))
        .map_err(|e| {
            Failure::os(
                format_args!("cannot name the MPS keeper's socket @{}", keeper.name()),
                e,
            )
        })
}

/// The keeper's answer where the job's user holds the name; else who does.
fn theirs_or_answer(stream: UnixStream, keeper: &KeeperAddr, deadline: Instant) -> Met {
    match peer(&stream) {
        Ok((uid, _)) if uid == rustix::process::getuid().as_raw() => {
            Met::Answered(answer(stream, keeper, deadline))
        }
        Ok((uid, pid)) => Met::Taken(format!(
            "another user's process (uid {uid}, {}) holds the name @{}",
            pid_text(pid),
            keeper.name()
        )),
        Err(why) => Met::Answered(Err(why)),
    }
}

/// The peer's uid and, where it is in this task's pid namespace, pid.
fn peer(stream: &UnixStream) -> Result<(u32, Option<u32>), Failure> {
    let peer = peer_of(stream)
        .map_err(|e| Failure::os("cannot tell who holds the MPS keeper's socket", e))?;
    Ok((peer.uid, peer.pid))
}

/// A peer's pid, for messages.
fn pid_text(pid: Option<u32>) -> String {
    match pid {
        Some(pid) => format!("pid {pid}"),
        None => "outside this task's pid namespace".to_string(),
    }
}

/// Meets the keeper in its directory, where another user holds its name:
/// `first` (the node's local task 0) starts it. Only a directory of the
/// job's user's, mode 0700, is ever entered, and only its keeper's socket.
fn by_directory(
    keeper: &KeeperAddr,
    stepd: Option<u32>,
    first: bool,
    deadline: Instant,
    who: &str,
) -> Result<Daemon, Failure> {
    let mut started = false;
    let daemon = keeper.daemon();
    loop {
        if let Some(stream) = in_directory(keeper, deadline) {
            return stream
                .and_then(|stream| answer(stream, keeper, deadline))
                .map_err(|why| why.then(format_args!(" ({who})")));
        }
        if first && !started {
            start_keeper(None, keeper, stepd).map_err(|why| why.then(format_args!(" ({who})")))?;
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

/// The first keeper's socket of the step's directories that takes a
/// connection by `deadline`; an error where one's queue stays full until
/// then; None where no keeper listens in any. In each base, the directory
/// a keeper of the step was started to make is looked at first, by its
/// name; then the base is read, within [`SCAN_BOUND`].
fn in_directory(keeper: &KeeperAddr, deadline: Instant) -> Option<Result<UnixStream, Failure>> {
    for (base, tokens) in keepers_bases(keeper) {
        let here = Daemon {
            base,
            ..keeper.daemon().clone()
        };
        let named = tokens
            .iter()
            .map(|&token| here.with_token(token).dir())
            .filter(|dir| private(dir));
        for dir in named {
            if let Some(reached) = keeper_in(&dir, deadline) {
                return Some(reached);
            }
        }
        for dir in keepers_dirs(keeper, &here.base, deadline) {
            if let Some(reached) = keeper_in(&dir, deadline) {
                return Some(reached);
            }
        }
    }
    None
}

/// The keeper's socket in `dir`, where it takes a connection by
/// `deadline`; an error where its queue stays full until then; None where
/// no keeper listens there.
fn keeper_in(dir: &Path, deadline: Instant) -> Option<Result<UnixStream, Failure>> {
    let socket = KeeperAddr::socket_in(dir);
    let addr = SocketAddrUnix::new(&socket).ok()?;
    match reach::connect(&addr, deadline) {
        Ok(stream) => Some(Ok(stream)),
        Err(Unreached::Full(waited)) => Some(Err(Failure::new(format!(
            "the MPS keeper's socket {} took no connection in {} ms: its queue stayed full",
            socket.display(),
            waited.as_millis()
        )))),
        Err(Unreached::Refused | Unreached::Failed(_)) => None,
    }
}

/// Where the step's keeper may have made its directory: this task's base,
/// and the base of each keeper of this step that runs as the job's user
/// (its command line says, read back through [`KeeperOpts`]; another
/// task's `TMPDIR` may differ), each with the tokens such keepers were
/// started with: a keeper's directory has that name unless another's was
/// there first.
fn keepers_bases(keeper: &KeeperAddr) -> Vec<(PathBuf, Vec<u32>)> {
    let mut bases: Vec<(PathBuf, Vec<u32>)> = vec![(keeper.daemon().base.clone(), Vec::new())];
    let uid = rustix::process::getuid().as_raw();
    let others = command_lines_of(uid)
        .into_iter()
        .filter_map(|words| KeeperOpts::read_back(&words))
        .filter(|other| other.stem == keeper.name());
    for other in others {
        let at = match bases
            .iter()
            .position(|(b, _)| b.as_os_str() == other.base.as_os_str())
        {
            Some(at) => at,
            None => {
                bases.push((other.base, Vec::new()));
                bases.len() - 1
            }
        };
        if let Some((_, tokens)) = bases.get_mut(at) {
            tokens.push(other.token);
        }
    }
    bases
}

/// The job's user's keeper directories of this step in `base`: named
/// `STEM.TOKEN`, not links, mode 0700; as many as the base yields within
/// [`SCAN_BOUND`] (and `deadline`), however many entries others put
/// beside them.
fn keepers_dirs(keeper: &KeeperAddr, base: &Path, deadline: Instant) -> Vec<PathBuf> {
    let until = deadline.min(Instant::now() + SCAN_BOUND);
    let prefix = format!("{}.", keeper.name());
    let Ok(entries) = std::fs::read_dir(base) else {
        return Vec::new();
    };
    let mut dirs = Vec::new();
    for entry in entries {
        if Instant::now() >= until {
            break;
        }
        let Ok(entry) = entry else {
            continue;
        };
        let name = entry.file_name();
        let ours = name
            .to_str()
            .and_then(|name| name.strip_prefix(&prefix))
            .is_some_and(|token| u32::from_str_radix(token, 16).is_ok());
        if ours && private(&entry.path()) {
            dirs.push(entry.path());
        }
    }
    dirs
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
fn answer(stream: UnixStream, keeper: &KeeperAddr, deadline: Instant) -> Result<Daemon, Failure> {
    let uid = rustix::process::getuid().as_raw();
    let (peer_uid, pid) = peer(&stream)?;
    if peer_uid != uid {
        return Err(Failure::new(format!(
            "the MPS keeper's socket @{} is held by uid {peer_uid} ({}), not by the job's user",
            keeper.name(),
            pid_text(pid)
        )));
    }
    let line = ask(stream, Request::Join, deadline).map_err(|e| {
        Failure::os(
            format_args!("no answer from the MPS keeper @{}", keeper.name()),
            e,
        )
    })?;
    match Answer::parse(line.trim_end()) {
        Some(Answer::Ok { token, base }) => served(keeper, token, base),
        Some(Answer::No(why)) => Err(Failure::new(why)),
        None => Err(Failure::new(format!(
            "the MPS keeper @{} answered {}",
            keeper.name(),
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
    match BufReader::new(stream.take(MAX_ANSWER)).read_line(&mut line)? {
        0 => Err(ErrorKind::UnexpectedEof.into()),
        _ => Ok(line),
    }
}

/// The keeper closed the connection without a word (before the request
/// was written, a broken pipe; after, a reset or the end of its stream):
/// it ended before it answered.
fn closed_unanswered(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::BrokenPipe | ErrorKind::ConnectionReset | ErrorKind::UnexpectedEof
    )
}

/// `why` is a keeper's end before it answered.
fn ended_unanswered(why: &Failure) -> bool {
    why.os_error().is_some_and(closed_unanswered)
}

/// A task of the step ended (its task epilog tells): the step's keeper
/// at `keeper`, if one runs, is told; where the task was the node's
/// last, this waits until `deadline` for the keeper to stop the daemon
/// and remove its directory. No keeper: [`Ended::Done`].
pub fn task_ended(keeper: &KeeperAddr, deadline: Instant) -> Result<Ended, Failure> {
    // The name first, where the job's user holds it and it takes the
    // connection soon; else the keeper's directory.
    let named = names(keeper).ok().and_then(|(_, addr)| {
        let stream = reach::connect(&addr, deadline.min(Instant::now() + SQUAT_GRACE)).ok()?;
        let (uid, _) = peer(&stream).ok()?;
        (uid == rustix::process::getuid().as_raw()).then_some(stream)
    });
    let stream = match named {
        Some(stream) => stream,
        None => match in_directory(keeper, deadline) {
            Some(stream) => stream?,
            None => return Ok(Ended::Done),
        },
    };
    let (uid, pid) = peer(&stream)?;
    if uid != rustix::process::getuid().as_raw() {
        return Err(Failure::new(format!(
            "the MPS keeper's socket for @{} is held by uid {uid} ({}), not by the job's user",
            keeper.name(),
            pid_text(pid)
        )));
    }
    match ask(stream, Request::Ended, deadline) {
        Ok(line) => Ended::parse(line.trim_end()).ok_or_else(|| {
            Failure::new(format!(
                "the MPS keeper @{} answered {}",
                keeper.name(),
                quote(line.trim_end())
            ))
        }),
        // The keeper closed its sockets: it has ended.
        Err(e) if closed_unanswered(&e) => Ok(Ended::Done),
        Err(e) => Err(Failure::os(
            format_args!("no answer from the MPS keeper @{}", keeper.name()),
            e,
        )),
    }
}

/// The daemon in the directory the keeper named, which must be there.
fn served(keeper: &KeeperAddr, token: u32, base: PathBuf) -> Result<Daemon, Failure> {
    let served = Daemon {
        base,
        ..keeper.daemon().with_token(token)
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

fn no_answer(keeper: &KeeperAddr) -> Failure {
    Failure::new(format!(
        "no MPS keeper answered at @{} within {} s",
        keeper.name(),
        (keeper.daemon().timeout + ANSWER_MARGIN).as_secs()
    ))
}

/// Starts the keeper, with `listener` (the name, where this task holds
/// it) as its standard input, and waits for the first of its two
/// processes, which starts the second detached and exits at once.
fn start_keeper(
    listener: Option<UnixListener>,
    keeper: &KeeperAddr,
    stepd: Option<u32>,
) -> Result<(), Failure> {
    let opts = KeeperOpts::planned(keeper, stepd, listener.is_none());
    let stdin = match listener {
        Some(listener) => Stdio::from(OwnedFd::from(listener)),
        None => Stdio::null(),
    };
    let status = this_program()
        .args(opts.words())
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
    use std::process::Command;

    /// A base of this test's own, emptied, and the keeper of step 1.2.3
    /// on node 0 in it.
    fn keepers_base(name: &str) -> (std::path::PathBuf, KeeperAddr) {
        let base = std::env::temp_dir().join(format!("dgm-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let keeper = KeeperAddr::of(&Daemon {
            base: base.clone(),
            stem: "dgm-mps.1.2.3.0".to_string(),
            ..Daemon::default()
        });
        assert_eq!(
            keeper.name(),
            format!("dgm-mps.1.2.3.0.{}", desi_gpu_map_core::mps::KEEPER_MARK)
        );
        (base, keeper)
    }

    #[test]
    fn only_the_users_private_directories_of_the_step_are_looked_in() {
        let (base, keeper) = keepers_base("join");
        let make = |name: &str, mode: u32| {
            let dir = base.join(name);
            std::fs::create_dir(&dir).unwrap();
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
            dir
        };
        let ours = make(&format!("{}.000000ab", keeper.name()), 0o700);
        make(&format!("{}.000000cd", keeper.name()), 0o755);
        make(&format!("{}.not-a-token", keeper.name()), 0o700);
        make("dgm-mps.1.2.4.0.k.000000ab", 0o700);
        std::os::unix::fs::symlink(&ours, base.join(format!("{}.00000001", keeper.name())))
            .unwrap();
        assert_eq!(
            keepers_dirs(&keeper, &base, Instant::now() + Duration::from_secs(5)),
            vec![ours.clone()]
        );
        std::fs::remove_dir_all(&base).unwrap();
    }

    /// Where `name` comes in `dir` as read_dir(3) yields its entries.
    fn read_at(dir: &Path, name: &str) -> Option<usize> {
        std::fs::read_dir(dir)
            .unwrap()
            .position(|e| e.is_ok_and(|e| e.file_name() == name))
    }

    #[test]
    fn a_keepers_directory_is_found_however_many_entries_come_before_it() {
        let (base, keeper) = keepers_base("crowd");
        let make = |token: u32| {
            let dir = keeper.daemon().with_token(token).dir();
            std::fs::create_dir(&dir).unwrap();
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
            dir
        };
        // The keeper's first (as tmpfs reads newest first), then what
        // another user puts beside it: 20,000 entries.
        let mut ours = make(1);
        // Names of one file: entries as many, made at a link's cost.
        let one = base.join("crowd");
        std::fs::write(&one, "").unwrap();
        for n in 0..20_000 {
            std::fs::hard_link(&one, base.join(format!("crowd.{n}"))).unwrap();
        }
        // Where the file system reads entries in its own order (ext4's
        // hash), another name until the keeper's comes after 4096 others,
        // as in the case found: a look that read only so many missed it.
        let mut token = 1;
        let late = |dir: &Path| {
            let name = dir.file_name().unwrap().to_str().unwrap();
            read_at(&base, name).is_some_and(|at| at > 4096)
        };
        while !late(&ours) && token < 64 {
            std::fs::remove_dir(&ours).unwrap();
            token += 1;
            ours = make(token);
        }
        assert!(
            late(&ours),
            "no name of the keeper's came after 4096 others"
        );
        let started = Instant::now();
        let found = keepers_dirs(&keeper, &base, Instant::now() + Duration::from_secs(5));
        assert_eq!(found, vec![ours]);
        assert!(started.elapsed() < SCAN_BOUND, "{:?}", started.elapsed());
        std::fs::remove_dir_all(&base).unwrap();
    }

    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A step no other test or process uses: its plan's daemon, in a base
    /// of its own.
    fn unique_step() -> Daemon {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let stem = format!("dgm-join-test.{}.{n}", std::process::id());
        let base = std::env::temp_dir().join(&stem);
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        Daemon {
            base,
            stem,
            timeout: Duration::from_secs(1),
            ..Daemon::default()
        }
    }

    /// A listener of `listen(0)` at `addr` and what fills its queue.
    fn full(addr: &SocketAddrUnix) -> (OwnedFd, Vec<UnixStream>) {
        let fd = rustix::net::socket_with(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::STREAM,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        rustix::net::bind(&fd, addr).unwrap();
        rustix::net::listen(&fd, 0).unwrap();
        let mut queued = Vec::new();
        while let Ok(stream) = reach::connect(addr, Instant::now()) {
            queued.push(stream);
            assert!(queued.len() < 64, "a queue of listen(0) never fills");
        }
        (fd, queued)
    }

    /// Another user's process (uid 65534, as root can start it) holding
    /// the name `name` with a listener of `backlog` that accepts nothing,
    /// its queue filled where `fill`: killed by its pid when dropped.
    struct Squatter(std::process::Child);

    const SQUAT: &str = "import socket, sys, time
n = b'\\0' + sys.argv[1].encode()
s = socket.socket(socket.AF_UNIX); s.bind(n); s.listen(int(sys.argv[2]))
q = []
while sys.argv[3] == 'fill':
    c = socket.socket(socket.AF_UNIX); c.setblocking(False)
    try: c.connect(n)
    except BlockingIOError: break
    q.append(c)
print('ready', flush=True)
time.sleep(300)
";

    impl Squatter {
        fn new(name: &str, backlog: u32, fill: bool) -> Squatter {
            let fill = if fill { "fill" } else { "" };
            let mut child = Command::new("/usr/bin/python3")
                .args(["-c", SQUAT, name, &backlog.to_string(), fill])
                .uid(65534)
                .current_dir("/")
                .stdout(Stdio::piped())
                .spawn()
                .expect("run python3 as uid 65534");
            let mut line = String::new();
            let out = child.stdout.take().unwrap();
            let squatter = Squatter(child);
            BufReader::new(out).read_line(&mut line).unwrap();
            assert_eq!(line.trim(), "ready");
            squatter
        }
    }

    impl Drop for Squatter {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// Root can run another user's squatter; anyone else cannot.
    fn root() -> bool {
        let root = rustix::process::getuid().is_root();
        if !root {
            eprintln!("another user's squatter needs root: that case is left out");
        }
        root
    }

    /// `f`'s result and how long it took, which must be under `secs`: a
    /// call that waits for ever fails the test rather than hanging it.
    fn within<T: Send + 'static>(
        secs: u64,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> (T, Duration) {
        let (tx, rx) = std::sync::mpsc::channel();
        let started = Instant::now();
        std::thread::spawn(move || tx.send(f()));
        let out = rx
            .recv_timeout(Duration::from_secs(secs))
            .unwrap_or_else(|e| panic!("no end within {secs} s: {e}"));
        (out, started.elapsed())
    }

    /// What [`by_name`] says, as text.
    fn met(keeper: &KeeperAddr) -> (String, Duration) {
        let keeper = keeper.clone();
        within(10, move || {
            let deadline = Instant::now() + keeper.daemon().timeout + ANSWER_MARGIN;
            match by_name(&keeper, None, deadline) {
                Met::Taken(who) => format!("taken: {who}"),
                Met::Answered(answer) => format!("answered: {answer:?}"),
            }
        })
    }

    #[test]
    fn a_name_that_takes_no_connection_is_taken_within_the_grace() {
        // The job's user's own listener whose queue stays full.
        let keeper = KeeperAddr::of(&unique_step());
        let (_, addr) = names(&keeper).unwrap();
        let held = full(&addr);
        let (said, took) = met(&keeper);
        assert!(
            said.starts_with("taken: a socket whose queue stayed full"),
            "{said}"
        );
        assert!(took < Duration::from_secs(3), "{took:?}");
        drop(held);
        std::fs::remove_dir_all(&keeper.daemon().base).unwrap();
        if !root() {
            return;
        }
        // Another user's: its queue filled, or not.
        for fill in [true, false] {
            let keeper = KeeperAddr::of(&unique_step());
            let squatter = Squatter::new(keeper.name(), if fill { 0 } else { 4 }, fill);
            let (said, took) = met(&keeper);
            let who = match fill {
                true => "taken: a socket whose queue stayed full",
                false => "taken: another user's process (uid 65534",
            };
            assert!(said.starts_with(who), "{said}");
            assert!(took < Duration::from_secs(3), "{took:?}");
            drop(squatter);
            std::fs::remove_dir_all(&keeper.daemon().base).unwrap();
        }
    }

    /// A directory of the keeper at `keeper` in its base, and a keeper
    /// there that answers one `ended` with `done` (until 10 s): what it
    /// was asked.
    fn keeper_in_directory(keeper: &KeeperAddr) -> std::thread::JoinHandle<String> {
        let dir = keeper.daemon().with_token(0xab).dir();
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let listener = UnixListener::bind(KeeperAddr::socket_in(&dir)).unwrap();
        listener.set_nonblocking(true).unwrap();
        std::thread::spawn(move || {
            let until = Instant::now() + Duration::from_secs(10);
            while Instant::now() < until {
                let Ok((stream, _)) = listener.accept() else {
                    std::thread::sleep(POLL);
                    continue;
                };
                stream.set_nonblocking(false).unwrap();
                let mut line = String::new();
                BufReader::new(&stream).read_line(&mut line).unwrap();
                (&stream).write_all(Ended::Done.line().as_bytes()).unwrap();
                return line;
            }
            String::from("never asked")
        })
    }

    #[test]
    fn the_epilog_tells_the_keeper_in_its_directory_where_the_name_is_not_the_users() {
        // The job's user's own listener whose queue stays full, and
        // another user's, filled or not.
        let squats: &[Option<bool>] = match root() {
            true => &[None, Some(true), Some(false)],
            false => &[None],
        };
        for squat in squats {
            let daemon = unique_step();
            let kept = KeeperAddr::of(&daemon);
            let (_, addr) = names(&kept).unwrap();
            let own = squat.is_none().then(|| full(&addr));
            let theirs =
                squat.map(|fill| Squatter::new(kept.name(), if fill { 0 } else { 4 }, fill));
            let keeper = keeper_in_directory(&kept);
            let told = kept.clone();
            let (ended, took) = within(10, move || {
                task_ended(&told, Instant::now() + Duration::from_millis(4500))
            });
            assert_eq!(
                ended.map_err(|e| e.to_string()),
                Ok(Ended::Done),
                "{squat:?}"
            );
            assert!(took < Duration::from_secs(3), "{squat:?}: {took:?}");
            assert_eq!(keeper.join().unwrap(), "ended\n", "{squat:?}");
            drop((own, theirs));
            std::fs::remove_dir_all(&daemon.base).unwrap();
        }
    }

    #[test]
    fn a_keepers_directory_socket_that_stays_full_is_named_at_the_deadline() {
        let daemon = unique_step();
        let dir = KeeperAddr::of(&daemon).daemon().with_token(0xcd).dir();
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let socket = KeeperAddr::socket_in(&dir);
        let held = full(&SocketAddrUnix::new(&socket).unwrap());
        let joining = KeeperAddr::of(&daemon);
        let (joined, took) = within(10, move || {
            let deadline = Instant::now() + Duration::from_millis(300);
            by_directory(&joining, None, false, deadline, "squatted").map_err(|e| e.to_string())
        });
        let why = joined.unwrap_err();
        let want = format!(
            "the MPS keeper's socket {} took no connection in ",
            socket.display()
        );
        assert!(
            why.starts_with(&want) && why.ends_with(" (squatted)"),
            "{why}"
        );
        assert!(took < Duration::from_secs(3), "{took:?}");
        let told = KeeperAddr::of(&daemon);
        let (ended, took) = within(10, move || {
            task_ended(&told, Instant::now() + Duration::from_millis(300))
                .map_err(|e| e.to_string())
        });
        assert!(ended.unwrap_err().starts_with(&want));
        assert!(took < Duration::from_secs(3), "{took:?}");
        drop(held);
        std::fs::remove_dir_all(&daemon.base).unwrap();
    }
}
