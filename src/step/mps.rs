//! CUDA MPS for a mapped step on one node: whether its tasks share their
//! GPUs through a control daemon the plugin starts for the step, through
//! one that already serves them, or not at all; and what each task gets.
//!
//! The daemon's GPUs are named by UUID: slurmstepd, and a daemon it
//! starts, are not confined to the step's devices, so Slurm's indices
//! (renumbered from 0 under `ConstrainDevices`) could name another job's
//! GPUs there. So is a task's GPU wherever it keeps a daemon's pipe.
//!
//! The daemon's directory has a random part in its name (the front end
//! draws it, see [`MpsFacts::token`]), so that no other user can take the
//! name first, and its base must keep other users from moving it away.

use super::{Node, NvmlAsk, StepMap};
use crate::env;
use crate::files::Stat;
use crate::method::{position, Method};
use crate::runtime::Vendor;
use crate::settings::site::{Config, MpsMode, MpsShare};
use crate::slurm::gpus::is_uuid;
use crate::text::quote;
use crate::topology::nvml_uuids;
use std::path::{Path, PathBuf};

/// Volta-and-later MPS serves at most this many clients per GPU.
pub const MAX_CLIENTS: usize = 48;

/// The longest path of a Unix socket (`sun_path` holds 108 bytes with its
/// terminating NUL): the daemon's `pipe/control` must fit.
const MAX_SOCKET_PATH: usize = 107;

/// What the front end knows of the step's user and tasks on this node;
/// only slurmstepd starts daemons, so only the plugin gives these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MpsFacts {
    pub uid: u32,
    pub gid: u32,
    pub local_tasks: usize,
    /// The node's place in the step (`S_JOB_NODEID`).
    pub node_id: u32,
    /// A random number for the directory's name, drawn by the front end
    /// (which draws another where the name is taken).
    pub token: u64,
}

/// MPS for the step on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mps {
    /// Not asked for, and no daemon's pipe inherited.
    Off,
    /// The front end starts this daemon before any task execs, then
    /// calls [`StepMap::mps_started`] or [`StepMap::mps_failed`].
    Start(Box<Daemon>),
    /// The plugin's daemon answers: each task is its client.
    Serving(Box<Daemon>),
    /// Another's MPS serves the step (Slurm's `gres/mps`, or a daemon at
    /// the pipe directory the step inherited): nothing started; said once.
    /// Its tasks get `gpus`, the step's GPUs by UUID, where the daemon is
    /// one at a pipe directory (its devices may be numbered otherwise).
    Theirs {
        why: String,
        loud: bool,
        gpus: Option<Vec<String>>,
        /// The daemon is the plugin's, of a parent task on this host: its
        /// flag stays true.
        ours: bool,
    },
    /// Asked for (or `mps=auto`), but the step runs mapped without MPS;
    /// said once, where the user asked or with `verbose`.
    Without { why: String, loud: bool },
}

/// The MPS variables a step found in its environment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Inherited {
    /// A daemon's pipe directory (`CUDA_MPS_PIPE_DIRECTORY`).
    pub pipe: Option<String>,
    /// The pipe is the plugin's, from a parent task (its flag is set).
    pub ours: bool,
    /// ... and that daemon runs on this host and has its socket there.
    pub here: bool,
    /// Which of the names the plugin writes for MPS are set.
    pub present: Vec<&'static str>,
}

/// The names a task served by the plugin's MPS gets.
const MPS_NAMES: [&str; 5] = [
    env::MPS,
    env::MPS_HOST,
    env::MPS_PIPE,
    env::MPS_LOG,
    env::MPS_SHARE,
];

/// One control daemon for one step on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Daemon {
    pub control: PathBuf,
    /// Where the control daemon looks for its server (its `PATH`).
    pub path: Vec<PathBuf>,
    /// The step's private directory (mode 0700, the user's), removed at
    /// the end; the pipe and log directories are inside it.
    pub dir: PathBuf,
    pub pipe: PathBuf,
    pub log: PathBuf,
    /// The folder `dir` is made in, and its name before the random part.
    pub base: PathBuf,
    pub stem: String,
    /// The daemon's `CUDA_VISIBLE_DEVICES`: the step's GPUs' UUIDs, in the
    /// step's order.
    pub gpus: Vec<String>,
    pub uid: u32,
    pub gid: u32,
    /// This host's name, for a nested step's [`env::MPS_HOST`] check.
    pub host: Option<String>,
    /// Each GPU's share for its clients (`mps_share=even`), in the step's order.
    pub shares: Vec<Option<u32>>,
    /// The user set `CUDA_MPS_LOG_DIRECTORY`: theirs stays.
    pub keep_log: bool,
    /// How long its start and its stop may each wait (`nvml_timeout`).
    pub timeout: std::time::Duration,
    /// The step's tasks on this node: the last one's exit stops it.
    pub local_tasks: usize,
    /// The user asked for MPS (not only `mps=auto`): a failure is said.
    pub asked: bool,
}

impl Daemon {
    /// The daemon's environment: nothing of the job's but what MPS reads,
    /// and a `PATH` that finds its server.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let path: Vec<String> = self.path.iter().map(|d| d.display().to_string()).collect();
        vec![
            (env::MPS_PIPE, self.pipe.display().to_string()),
            (env::MPS_LOG, self.log.display().to_string()),
            (env::CUDA, self.gpus.join(",")),
            ("PATH", path.join(":")),
        ]
    }

    /// The same daemon in a directory named with another `token`: what
    /// the front end makes where the name was taken.
    pub fn with_token(&self, token: u64) -> Daemon {
        let mut d = self.clone();
        d.dir = d.base.join(format!("{}.{token:016x}", d.stem));
        d.pipe = d.dir.join("pipe");
        d.log = d.dir.join("log");
        d
    }
}

/// Decides MPS for a mapped step, and names its tasks' GPUs by UUID where
/// a daemon at a pipe directory serves them. The node is asked for NVML's
/// UUIDs only where MPS will run and Slurm's list names GPUs by index.
pub fn plan_mps(
    map: &mut StepMap,
    asked: bool,
    config: &Config,
    node: &dyn Node,
    facts: Option<MpsFacts>,
) {
    map.mps_inherited = inherited(node);
    map.mps = decide(map, asked, config, node, facts);
    if let Mps::Theirs {
        gpus: Some(gpus), ..
    } = &map.mps
    {
        map.gpus = gpus.clone();
    }
}

/// What the step inherited: the plugin's own variables count as a parent
/// task's only where its flag is set, and its daemon as this node's only
/// where the host matches and the socket is there (a base such as a
/// shared `TMPDIR` may show another node's).
fn inherited(node: &dyn Node) -> Inherited {
    let pipe = node.env(env::MPS_PIPE);
    let ours = pipe.is_some() && node.env(env::MPS).is_some();
    let host = this_host(node);
    let here = ours
        && host.is_some()
        && node.env(env::MPS_HOST) == host
        && pipe
            .as_ref()
            .is_some_and(|p| node.files().exists(&Path::new(p).join("control")));
    let present = MPS_NAMES
        .into_iter()
        .filter(|name| node.env(name).is_some())
        .collect();
    Inherited {
        pipe,
        ours,
        here,
        present,
    }
}

/// This host's name, as the kernel gives it.
fn this_host(node: &dyn Node) -> Option<String> {
    let name = node.files().read(Path::new(env::HOSTNAME_FILE)).ok()?;
    Some(name.trim().to_string()).filter(|n| !n.is_empty())
}

fn decide(
    map: &StepMap,
    asked: bool,
    config: &Config,
    node: &dyn Node,
    facts: Option<MpsFacts>,
) -> Mps {
    let tasks = facts.map_or(0, |f| f.local_tasks);
    let auto = config.mps == MpsMode::Auto && tasks > map.gpus.len();
    let inherited = &map.mps_inherited;
    if !asked && !auto {
        // A task that keeps a daemon's pipe names its GPU by UUID.
        return match &inherited.pipe {
            Some(pipe)
                if (!inherited.ours || inherited.here)
                    && map.rendering.vendor == Vendor::Nvidia =>
            {
                theirs(map, config, node, pipe, false)
            }
            _ => Mps::Off,
        };
    }
    if asked && config.mps == MpsMode::Off {
        let why = "this site turned mps off (mps=off)".to_string();
        return Mps::Without { why, loud: true };
    }
    match serve(map, asked, config, node, facts) {
        Ok(mps) => mps,
        Err(why) => Mps::Without { why, loud: asked },
    }
}

/// The daemon at `pipe` serves the step: its tasks' GPUs by UUID.
fn theirs(map: &StepMap, config: &Config, node: &dyn Node, pipe: &str, loud: bool) -> Mps {
    let mut why = format!(
        "the MPS daemon at {}={} serves this step; no MPS daemon started",
        env::MPS_PIPE,
        quote(pipe)
    );
    let gpus = match uuids(map, config, node) {
        Ok(gpus) => Some(gpus),
        Err(e) => {
            why += &format!("; its tasks keep Slurm's indices: {e}");
            None
        }
    };
    Mps::Theirs {
        why,
        loud,
        gpus,
        ours: map.mps_inherited.here,
    }
}

fn serve(
    map: &StepMap,
    asked: bool,
    config: &Config,
    node: &dyn Node,
    facts: Option<MpsFacts>,
) -> Result<Mps, String> {
    let facts = facts.ok_or("only the plugin, in slurmstepd, starts MPS daemons")?;
    let vendor = map.rendering.vendor;
    if vendor != Vendor::Nvidia {
        return Err(format!(
            "MPS serves NVIDIA GPUs only, and this node's are {}",
            crate::names::Named::name(vendor)
        ));
    }
    let inherited = &map.mps_inherited;
    // A nested step inherits its parent task's share: the plugin's, not
    // Slurm's or the user's.
    if let Some(share) = node.env(env::MPS_SHARE).filter(|_| !inherited.ours) {
        let why = format!(
            "Slurm's gres/mps serves this step ({}={}); no MPS daemon started",
            env::MPS_SHARE,
            quote(&share)
        );
        return Ok(Mps::Theirs {
            why,
            loud: asked,
            gpus: None,
            ours: false,
        });
    }
    // The parent's daemon serves where it runs: on this node (a nested
    // step on another node gets its own).
    if let Some(pipe) = inherited
        .pipe
        .as_ref()
        .filter(|_| !inherited.ours || inherited.here)
    {
        return Ok(theirs(map, config, node, pipe, asked));
    }
    let per_gpu = tasks_per_gpu(map, facts.local_tasks);
    if let Some(most) = per_gpu.iter().copied().max().filter(|&m| m > MAX_CLIENTS) {
        return Err(format!(
            "{most} tasks would share one GPU, and MPS serves at most {MAX_CLIENTS} clients \
             per GPU; fewer tasks per node, or more GPUs, would fit"
        ));
    }
    if facts.uid == 0 {
        return Err("the job runs as root, and the MPS daemon never does".to_string());
    }
    let control = control(config, node)?;
    let path = server_path(&control);
    find_server(&path, node)?;
    let step = map
        .step
        .as_deref()
        .ok_or("Slurm gave no job id to name the MPS directory by")?;
    let base = base_dir(config, node);
    let stem = dir_name(facts.uid, step, facts.node_id);
    let share = |count: usize| match config.mps_share {
        MpsShare::Even => Some(even_share(count)),
        MpsShare::None => None,
    };
    let daemon = Daemon {
        control,
        path,
        dir: PathBuf::new(),
        pipe: PathBuf::new(),
        log: PathBuf::new(),
        base,
        stem,
        gpus: Vec::new(),
        uid: facts.uid,
        gid: facts.gid,
        host: this_host(node),
        shares: per_gpu.into_iter().map(share).collect(),
        keep_log: !inherited.ours && node.env(env::MPS_LOG).is_some(),
        timeout: config.nvml_timeout,
        local_tasks: facts.local_tasks,
        asked,
    }
    .with_token(facts.token);
    let socket = daemon.pipe.join("control");
    if socket.as_os_str().len() > MAX_SOCKET_PATH {
        return Err(format!(
            "the MPS socket path {} is longer than a socket path may be ({MAX_SOCKET_PATH} \
             bytes); a shorter base is needed (TMPDIR, or the site's mps_dir=)",
            socket.display()
        ));
    }
    check_base(&daemon.base, facts.uid, node)?;
    Ok(Mps::Start(Box::new(Daemon {
        gpus: uuids(map, config, node)?,
        ..daemon
    })))
}

/// The step's MPS directory's name before its random part:
/// `desi-gpu-map-mps.UID.JOBID.STEPID.NODEID`, NODEID the node's place in
/// the step (several slurmd may share a host and its /tmp). Anything but
/// letters, digits, `.`, `-` and `_` is left out of the step's name, so
/// that no name climbs out of the base.
pub fn dir_name(uid: u32, step: &str, node_id: u32) -> String {
    let step: String = step
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        .collect();
    format!(
        "desi-gpu-map-mps.{uid}.{}.{node_id}",
        step.trim_matches('.')
    )
}

/// A client's share of its GPU under `mps_share=even`: floor(100 / the
/// tasks on it).
pub fn even_share(tasks: usize) -> u32 {
    u32::try_from(100 / tasks.max(1)).unwrap_or(100)
}

/// How many of the node's `tasks` each of the step's GPUs serves. A
/// `closest` step is counted as `contiguous` places it: the tasks' CPUs
/// are known only in each task, and closest splits in blocks as well.
pub fn tasks_per_gpu(map: &StepMap, tasks: usize) -> Vec<usize> {
    let k = map.gpus.len();
    let method = match map.method_used() {
        Method::Closest => Method::Contiguous,
        m => m,
    };
    let mut counts = vec![0; k];
    for l in 0..tasks {
        if let Some(c) = position(method, l, tasks, k)
            .ok()
            .and_then(|at| counts.get_mut(at))
        {
            *c += 1;
        }
    }
    counts
}

/// The control daemon: the site's, or the first in the standard places.
fn control(config: &Config, node: &dyn Node) -> Result<PathBuf, String> {
    if let Some(path) = &config.mps_control {
        return match node.files().exists(path) {
            true => Ok(path.clone()),
            false => Err(format!(
                "cannot start {}: it does not exist (the site's mps_control=)",
                path.display()
            )),
        };
    }
    let found = env::MPS_CONTROL_DIRS
        .iter()
        .map(|dir| Path::new(dir).join(env::MPS_CONTROL))
        .find(|path| node.files().exists(path));
    found.ok_or_else(|| {
        format!(
            "{} is not in {}; the site can name it (mps_control=PATH)",
            env::MPS_CONTROL,
            env::MPS_CONTROL_DIRS.join(", ")
        )
    })
}

/// The control daemon's `PATH`, where it looks for its server: its own
/// folder, that folder's sibling `sbin`, then [`env::MPS_SERVER_DIRS`].
pub fn server_path(control: &Path) -> Vec<PathBuf> {
    let own = control.parent().filter(|d| !d.as_os_str().is_empty());
    let mut path: Vec<PathBuf> = own.iter().map(|d| d.to_path_buf()).collect();
    if let Some(prefix) = own.and_then(Path::parent) {
        path.push(prefix.join("sbin"));
    }
    for dir in env::MPS_SERVER_DIRS {
        let dir = PathBuf::from(dir);
        if !path.contains(&dir) {
            path.push(dir);
        }
    }
    path
}

/// The server must be on the daemon's `PATH`: else every CUDA client of
/// the step would fail at its first GPU call.
fn find_server(path: &[PathBuf], node: &dyn Node) -> Result<(), String> {
    if path
        .iter()
        .any(|dir| node.files().exists(&dir.join(env::MPS_SERVER)))
    {
        return Ok(());
    }
    let dirs: Vec<String> = path.iter().map(|d| d.display().to_string()).collect();
    Err(format!(
        "{}, which the control daemon starts for its clients, is not in {}; it belongs \
         beside the control daemon or in its sibling sbin",
        env::MPS_SERVER,
        dirs.join(", ")
    ))
}

/// The base of the step's MPS directory: the site's, else the step's
/// `TMPDIR` where absolute, else `/tmp`.
fn base_dir(config: &Config, node: &dyn Node) -> PathBuf {
    if let Some(dir) = &config.mps_dir {
        return dir.clone();
    }
    node.env(env::TMPDIR)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| PathBuf::from("/tmp"))
}

/// The base must be a folder of root's or the user's, and sticky where
/// others may write in it: else another user could move the step's
/// directory away and put their own in its place.
fn check_base(base: &Path, uid: u32, node: &dyn Node) -> Result<(), String> {
    let shown = base.display();
    let Stat {
        uid: owner,
        mode,
        is_dir,
    } = node
        .files()
        .stat(base)
        .map_err(|e| format!("cannot use the MPS base {shown}: {e}"))?;
    if !is_dir {
        return Err(format!("the MPS base {shown} is not a directory"));
    }
    if owner != 0 && owner != uid {
        return Err(format!(
            "the MPS base {shown} belongs to uid {owner}, neither root nor the job's user; \
             a base of theirs or root's is needed (TMPDIR, or the site's mps_dir=)"
        ));
    }
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(format!(
            "the MPS base {shown} is writable by others without the sticky bit (mode \
             {mode:04o}), so another user could replace the step's directory; it needs \
             mode 1777, as /tmp has, or no write for others"
        ));
    }
    Ok(())
}

/// The step's GPUs by UUID: NVML's list already is; Slurm's indices are
/// located through NVML by device minor (with `SLURM_STEP_GPUS` telling
/// absolute indices from renumbered ones).
fn uuids(map: &StepMap, config: &Config, node: &dyn Node) -> Result<Vec<String>, String> {
    if map.gpus.iter().all(|g| is_uuid(g)) {
        return Ok(map.gpus.clone());
    }
    let named = node
        .nvml(NvmlAsk::Places, config)
        .map_err(|e| e.to_string())
        .and_then(|lines| nvml_uuids(&lines, &map.gpus, map.step_gpus.as_deref()));
    named.map_err(|e| {
        format!(
            "cannot name the step's GPUs by UUID ({e}); the MPS daemon is not confined to \
             the step's devices, so their indices could name another job's GPUs"
        )
    })
}

impl StepMap {
    /// `daemon` (the planned one, in the directory the front end could
    /// make) answers: tasks get its GPUs' UUIDs, which the MPS server
    /// reads whatever its own numbering.
    pub fn mps_started(&mut self, daemon: Daemon) {
        self.gpus = daemon.gpus.clone();
        self.mps = Mps::Serving(Box::new(daemon));
    }

    /// The daemon could not be started: the step runs mapped without it,
    /// saying so where the user asked for MPS or with `verbose`.
    pub fn mps_failed(&mut self, why: String) {
        let loud = match &self.mps {
            Mps::Start(daemon) => daemon.asked,
            _ => true,
        };
        self.mps = Mps::Without { why, loud };
    }
}

/// The MPS variables of a task on GPU `position`, after its GPU lists.
pub fn mps_variables(mps: &Mps, position: usize) -> Vec<(String, String)> {
    let Mps::Serving(d) = mps else {
        return Vec::new();
    };
    let mut set = vec![(env::MPS_PIPE.to_string(), d.pipe.display().to_string())];
    if !d.keep_log {
        set.push((env::MPS_LOG.to_string(), d.log.display().to_string()));
    }
    if let Some(share) = d.shares.get(position).copied().flatten() {
        set.push((env::MPS_SHARE.to_string(), share.to_string()));
    }
    if let Some(host) = &d.host {
        set.push((env::MPS_HOST.to_string(), host.clone()));
    }
    set.push((env::MPS.to_string(), "1".to_string()));
    set
}

/// The inherited MPS variables a task on GPU `position` loses: the flag
/// wherever the plugin's daemon on this host does not serve it, every one
/// of the plugin's where they name another node's daemon, and a parent's
/// share that the step's own daemon does not give.
pub fn mps_unset(mps: &Mps, inherited: &Inherited, position: usize) -> Vec<String> {
    let flags = [env::MPS, env::MPS_HOST];
    let names: &[&str] = match mps {
        Mps::Serving(d) if d.shares.get(position).copied().flatten().is_none() => &[env::MPS_SHARE],
        Mps::Serving(_) | Mps::Theirs { ours: true, .. } => &[],
        Mps::Theirs { .. } => &flags,
        _ if inherited.ours && !inherited.here => &MPS_NAMES,
        _ => &flags,
    };
    names
        .iter()
        .filter(|name| inherited.present.contains(name))
        .map(|name| name.to_string())
        .collect()
}

/// What local task 0 says about MPS, if anything.
pub fn mps_line(mps: &Mps, verbose: bool) -> Option<String> {
    match mps {
        Mps::Without { why, loud } if *loud || verbose => {
            Some(format!("{why}; running without MPS"))
        }
        Mps::Theirs { why, loud, .. } if *loud || verbose => Some(why.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::NvmlFailure;
    use crate::files::Stat;
    use crate::settings::option::{Choice, Request};
    use crate::settings::site::parse_args;
    use crate::step::testing::*;
    use crate::step::{plan_step, task_outcome, StepFacts, StepPlan};

    /// NVML's place lines for 4 GPUs, minor i at bus i+1.
    fn places() -> Result<Vec<String>, crate::Error> {
        Ok((0..4)
            .map(|i| format!("GPU-u{i} 00000000:0{}:00.0 {i} -", i + 1))
            .collect())
    }

    const USER: MpsFacts = MpsFacts {
        uid: 1000,
        gid: 100,
        local_tasks: 6,
        node_id: 3,
        token: 0xabc,
    };

    /// Plans step 0 of job 7 with `--desi-gpu-map=contiguous,mps` (or
    /// `asked: false`, contiguous alone) under plugstack `args`.
    fn plan_mps_with(
        args: &[&str],
        asked: bool,
        pairs: &[(&str, &str)],
        nvml: Result<Vec<String>, crate::Error>,
        facts: Option<MpsFacts>,
    ) -> (StepPlan, usize) {
        plan_mps_files(args, asked, pairs, nvml, facts, |_| {})
    }

    /// [`plan_mps_with`] on a node whose files `change` changed.
    fn plan_mps_files(
        args: &[&str],
        asked: bool,
        pairs: &[(&str, &str)],
        nvml: Result<Vec<String>, crate::Error>,
        facts: Option<MpsFacts>,
        change: impl FnOnce(&mut FakeFiles),
    ) -> (StepPlan, usize) {
        // The fake node has this control binary, and its server beside it.
        let mut all = vec!["mps_control=/opt/nv/nvidia-cuda-mps-control"];
        all.extend_from_slice(args);
        let config = Ok(parse_args(&all).unwrap());
        let request = Ok(Request::Use {
            choice: Some(Choice::Map(Method::Contiguous)),
            verbose: false,
            mps: asked,
        });
        let mut env = vec![("SLURM_JOB_ID", "7")];
        env.extend_from_slice(pairs);
        let mut node = FakeNode::new(&env, nvml);
        change(&mut node.files);
        let facts = StepFacts {
            step_id: Ok(0),
            config: Some(&config),
            request: Some(&request),
            mps: facts,
        };
        (plan_step(&facts, &node), node.calls.get())
    }

    fn mps_of(plan: &StepPlan) -> Mps {
        mapped(plan.clone()).mps
    }

    fn without(plan: &StepPlan) -> String {
        match mps_of(plan) {
            Mps::Without { why, loud: true } => why,
            other => panic!("expected no MPS, got {other:?}"),
        }
    }

    #[test]
    fn a_daemon_for_slurms_gpus_named_by_uuid_with_even_shares() {
        let (plan, calls) =
            plan_mps_with(&["mps_share=even"], true, &SLURM_4, places(), Some(USER));
        assert_eq!(calls, 1, "NVML asked once, for the UUIDs");
        let Mps::Start(d) = mps_of(&plan) else {
            panic!("{plan:?}")
        };
        assert_eq!(d.gpus, ["GPU-u0", "GPU-u1", "GPU-u2", "GPU-u3"]);
        // 6 tasks, contiguous on 4 GPUs: 2 2 1 1.
        assert_eq!(d.shares, [Some(50), Some(50), Some(100), Some(100)]);
        let dir = PathBuf::from("/tmp/desi-gpu-map-mps.1000.7.0.3.0000000000000abc");
        assert_eq!(
            (&d.dir, &d.pipe, &d.log),
            (&dir, &dir.join("pipe"), &dir.join("log"))
        );
        assert_eq!((d.uid, d.gid, d.keep_log), (1000, 100, false));
        assert!(d
            .env()
            .contains(&(env::CUDA, "GPU-u0,GPU-u1,GPU-u2,GPU-u3".to_string())));
        // Once it answers, each task is its client.
        let mut map = mapped(plan);
        map.mps_started(*d);
        let plan = StepPlan::Map(map);
        let out = task_outcome(&plan, &task(4, 6, Some("0,1,2,3")));
        assert_eq!(get(&out, env::CUDA), Some("GPU-u2"));
        assert_eq!(
            get(&out, env::MPS_PIPE),
            Some("/tmp/desi-gpu-map-mps.1000.7.0.3.0000000000000abc/pipe")
        );
        assert_eq!(
            get(&out, env::MPS_LOG),
            Some("/tmp/desi-gpu-map-mps.1000.7.0.3.0000000000000abc/log")
        );
        assert_eq!(get(&out, env::MPS_SHARE), Some("100"));
        assert_eq!(get(&out, env::MPS), Some("1"));
        assert_eq!(get(&out, "DESI_GPU_MAPPED"), Some("1"));
        // A failed start: mapped as before, one line from local task 0.
        let (plan, _) = plan_mps_with(&[], true, &SLURM_4, places(), Some(USER));
        let mut map = mapped(plan);
        map.mps_failed("the daemon did not answer within 10 s".to_string());
        let plan = StepPlan::Map(map);
        let first = task_outcome(&plan, &task(0, 6, Some("0,1,2,3")));
        assert_eq!(get(&first, env::CUDA), Some("0"));
        assert_eq!(get(&first, env::MPS_PIPE), None);
        assert_eq!(
            first.say,
            ["desi-gpu-map: node n1: the daemon did not answer within 10 s; running without MPS"]
        );
        assert!(task_outcome(&plan, &task(1, 6, Some("0,1,2,3")))
            .say
            .is_empty());
    }

    #[test]
    fn renumbered_indices_name_the_step_gpus_by_their_absolute_minors() {
        let pairs = [
            ("CUDA_VISIBLE_DEVICES", "0,1"),
            ("GPU_DEVICE_ORDINAL", "0,1"),
            ("SLURM_STEP_GPUS", "2,3"),
            ("SLURM_GPUS_ON_NODE", "2"),
        ];
        let (plan, _) = plan_mps_with(&[], true, &pairs, places(), Some(USER));
        let Mps::Start(d) = mps_of(&plan) else {
            panic!("{plan:?}")
        };
        assert_eq!(d.gpus, ["GPU-u2", "GPU-u3"]);
        let mut map = mapped(plan);
        map.mps_started(*d);
        let out = task_outcome(&StepPlan::Map(map), &task(1, 2, Some("0,1")));
        assert_eq!(get(&out, env::CUDA), Some("GPU-u3"));
    }

    #[test]
    fn each_reason_to_run_without_mps_is_one_line() {
        let root = MpsFacts { uid: 0, ..USER };
        let crowd = MpsFacts {
            local_tasks: 4 * MAX_CLIENTS + 1,
            ..USER
        };
        let failed = Err(crate::Error::Discovery {
            kind: NvmlFailure::Init,
            why: "NVML: cannot initialise libnvidia-ml.so.1: Driver Not Loaded".to_string(),
        });
        for (args, facts, nvml, want) in [
            (
                &[][..],
                Some(root),
                places(),
                "the job runs as root, and the MPS daemon never does",
            ),
            (
                &[],
                Some(crowd),
                places(),
                "49 tasks would share one GPU, and MPS serves at most 48",
            ),
            (
                &[],
                None,
                places(),
                "only the plugin, in slurmstepd, starts MPS daemons",
            ),
            (
                &["mps=off"],
                Some(USER),
                places(),
                "this site turned mps off (mps=off)",
            ),
            (
                &[],
                Some(USER),
                failed,
                "cannot name the step's GPUs by UUID (NVML: cannot initialise",
            ),
        ] {
            let (plan, _) = plan_mps_with(args, true, &SLURM_4, nvml, facts);
            let why = without(&plan);
            assert!(why.starts_with(want), "{why}");
        }
        // Not found in the standard places (the fake node has no files).
        let config = Ok(Config::default());
        let request = Ok(parse_option_mps());
        let node = FakeNode::new(&[&SLURM_4[..], &[("SLURM_JOB_ID", "7")]].concat(), places());
        let facts = StepFacts {
            step_id: Ok(0),
            config: Some(&config),
            request: Some(&request),
            mps: Some(USER),
        };
        let why = without(&plan_step(&facts, &node));
        assert!(
            why.starts_with("nvidia-cuda-mps-control is not in /usr/bin, /usr/local/bin")
                && why.ends_with("the site can name it (mps_control=PATH)"),
            "{why}"
        );
    }

    fn parse_option_mps() -> Request {
        crate::settings::option::parse_option("contiguous,mps").unwrap()
    }

    #[test]
    fn another_mps_serves_where_slurm_or_the_step_names_one() {
        for (var, value, want) in [
            (
                env::MPS_SHARE,
                "25",
                "Slurm's gres/mps serves this step (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=\"25\")",
            ),
            (
                env::MPS_PIPE,
                "/site/mps",
                "the MPS daemon at CUDA_MPS_PIPE_DIRECTORY=\"/site/mps\" serves this step",
            ),
        ] {
            let pairs = [&SLURM_4[..], &[(var, value)]].concat();
            let (plan, calls) = plan_mps_with(&[], true, &pairs, places(), Some(USER));
            let asked = usize::from(var == env::MPS_PIPE);
            assert_eq!(calls, asked, "NVML only for a pipe directory's daemon");
            let Mps::Theirs {
                why, loud: true, ..
            } = mps_of(&plan)
            else {
                panic!("{plan:?}")
            };
            assert!(
                why.starts_with(want) && why.ends_with("; no MPS daemon started"),
                "{why}"
            );
            let out = task_outcome(&plan, &task(0, 6, Some("0,1,2,3")));
            assert_eq!(out.say.len(), 1);
            assert_eq!(get(&out, env::MPS_PIPE), None, "the step's own values stay");
            // A daemon at a pipe directory: the tasks name their GPU by UUID.
            let gpu = if var == env::MPS_PIPE { "GPU-u0" } else { "0" };
            assert_eq!(get(&out, env::CUDA), Some(gpu));
        }
        // The user's log directory stays too.
        let pairs = [&SLURM_4[..], &[(env::MPS_LOG, "/home/u/log")]].concat();
        let (plan, _) = plan_mps_with(&[], true, &pairs, places(), Some(USER));
        let Mps::Start(d) = mps_of(&plan) else {
            panic!("{plan:?}")
        };
        assert!(d.keep_log);
    }

    #[test]
    fn auto_serves_only_where_tasks_outnumber_gpus() {
        let four = MpsFacts {
            local_tasks: 4,
            ..USER
        };
        let (plan, calls) = plan_mps_with(&["mps=auto"], false, &SLURM_4, places(), Some(four));
        assert_eq!((mps_of(&plan), calls), (Mps::Off, 0));
        let (plan, _) = plan_mps_with(&["mps=auto"], false, &SLURM_4, places(), Some(USER));
        assert!(matches!(mps_of(&plan), Mps::Start(_)), "{plan:?}");
        let (plan, _) = plan_mps_with(&[], false, &SLURM_4, places(), Some(USER));
        assert_eq!(mps_of(&plan), Mps::Off, "allow: only on request");
        // Under auto alone a failure is said only with verbose.
        let root = MpsFacts { uid: 0, ..USER };
        let (plan, _) = plan_mps_with(&["mps=auto"], false, &SLURM_4, places(), Some(root));
        let quiet = mps_of(&plan);
        assert!(
            matches!(quiet, Mps::Without { loud: false, .. }),
            "{quiet:?}"
        );
        assert_eq!(mps_line(&quiet, false), None);
        assert!(mps_line(&quiet, true).is_some());
        // auto's own notes are quiet unless verbose; failures are not.
        let theirs = Mps::Theirs {
            why: "x".to_string(),
            loud: false,
            gpus: None,
            ours: false,
        };
        assert_eq!(mps_line(&theirs, false), None);
        assert_eq!(mps_line(&theirs, true).as_deref(), Some("x"));
    }

    #[test]
    fn a_nested_steps_inherited_values_are_its_parents() {
        // The parent's share and pipe, inherited: not gres/mps; the
        // parent's daemon where it runs here (the fake node has no files,
        // so it does not), else a daemon of the step's own.
        let inherited = [
            &SLURM_4[..],
            &[
                (env::MPS, "1"),
                (env::MPS_SHARE, "50"),
                (
                    env::MPS_PIPE,
                    "/tmp/desi-gpu-map-mps.1000.7.0.3.0000000000000abc/pipe",
                ),
                (
                    env::MPS_LOG,
                    "/tmp/desi-gpu-map-mps.1000.7.0.3.0000000000000abc/log",
                ),
            ],
        ]
        .concat();
        let (plan, _) = plan_mps_with(&[], true, &inherited, places(), Some(USER));
        let Mps::Start(d) = mps_of(&plan) else {
            panic!("{plan:?}")
        };
        assert!(!d.keep_log, "the parent's log directory is not the user's");
        assert_eq!(even_share(8), 12);
        assert_eq!(even_share(0), 100);
    }

    #[test]
    fn directories_go_under_the_site_base_else_tmpdir_else_tmp() {
        let tmpdir = [&SLURM_4[..], &[("TMPDIR", "/local/job7")]].concat();
        let (plan, _) = plan_mps_with(&[], true, &tmpdir, places(), Some(USER));
        let Mps::Start(d) = mps_of(&plan) else {
            panic!()
        };
        assert!(d.dir.starts_with("/local/job7"), "{:?}", d.dir);
        let (plan, _) = plan_mps_with(&["mps_dir=/var/mps"], true, &tmpdir, places(), Some(USER));
        let Mps::Start(d) = mps_of(&plan) else {
            panic!()
        };
        assert_eq!(
            d.dir,
            PathBuf::from("/var/mps/desi-gpu-map-mps.1000.7.0.3.0000000000000abc")
        );
        assert_eq!(dir_name(5, "1/../2.0", 1), "desi-gpu-map-mps.5.1..2.0.1");
        let long = format!("/{}", "d".repeat(80));
        let deep = [&SLURM_4[..], &[("TMPDIR", long.as_str())]].concat();
        let (plan, _) = plan_mps_with(&[], true, &deep, places(), Some(USER));
        assert!(without(&plan).contains("longer than a socket path may be"));
        assert_eq!(dir_name(5, "./x", 0), "desi-gpu-map-mps.5.x.0");
    }

    #[test]
    fn closest_steps_are_counted_in_blocks() {
        let (plan, _) = plan_mps_with(&[], true, &SLURM_4, places(), Some(USER));
        let map = mapped(plan);
        assert_eq!(tasks_per_gpu(&map, 6), [2, 2, 1, 1]);
        assert_eq!(tasks_per_gpu(&map, 0), [0, 0, 0, 0]);
    }

    #[test]
    fn the_daemons_path_finds_its_server_beside_it_in_sbin_or_the_systems() {
        assert_eq!(
            server_path(Path::new("/opt/nv/bin/nvidia-cuda-mps-control")),
            [
                "/opt/nv/bin",
                "/opt/nv/sbin",
                "/usr/sbin",
                "/sbin",
                "/usr/bin",
                "/bin"
            ]
            .map(PathBuf::from)
        );
        assert_eq!(
            server_path(Path::new("/usr/bin/nvidia-cuda-mps-control")),
            ["/usr/bin", "/usr/sbin", "/sbin", "/bin"].map(PathBuf::from)
        );
        let (plan, _) = plan_mps_with(&[], true, &SLURM_4, places(), Some(USER));
        let Mps::Start(d) = mps_of(&plan) else {
            panic!("{plan:?}")
        };
        assert!(d.env().contains(&(
            "PATH",
            "/opt/nv:/opt/sbin:/usr/sbin:/sbin:/usr/bin:/bin".to_string()
        )));
        // No server on that path: every client would fail, so no daemon.
        let (plan, _) = plan_mps_files(&[], true, &SLURM_4, places(), Some(USER), |f| {
            f.exists.retain(|p| !p.ends_with(env::MPS_SERVER))
        });
        let why = without(&plan);
        assert!(
            why.starts_with(
                "nvidia-cuda-mps-server, which the control daemon starts for its clients, \
                 is not in /opt/nv, /opt/sbin, /usr/sbin"
            ),
            "{why}"
        );
    }

    #[test]
    fn a_name_taken_gives_another_random_name_in_the_same_base() {
        let (plan, _) = plan_mps_with(&[], true, &SLURM_4, places(), Some(USER));
        let Mps::Start(d) = mps_of(&plan) else {
            panic!("{plan:?}")
        };
        let other = d.with_token(0xfeed);
        let dir = PathBuf::from("/tmp/desi-gpu-map-mps.1000.7.0.3.000000000000feed");
        assert_eq!((&other.dir, &other.pipe), (&dir, &dir.join("pipe")));
        assert_eq!(other.host.as_deref(), Some("n1"));
    }

    #[test]
    fn a_base_others_could_empty_is_refused() {
        let stat = |uid, mode, is_dir| Stat { uid, mode, is_dir };
        for (base, why) in [
            (
                stat(0, 0o777, true),
                "is writable by others without the sticky bit (mode 0777)",
            ),
            (
                stat(0, 0o775, true),
                "is writable by others without the sticky bit (mode 0775)",
            ),
            (
                stat(2000, 0o1777, true),
                "belongs to uid 2000, neither root nor the job's user",
            ),
            (stat(0, 0o1777, false), "is not a directory"),
        ] {
            let (plan, _) = plan_mps_files(&[], true, &SLURM_4, places(), Some(USER), |f| {
                f.stats.insert(PathBuf::from("/tmp"), base);
            });
            let got = without(&plan);
            assert!(
                got.starts_with(&format!("the MPS base /tmp {why}")),
                "{got}"
            );
        }
        let (plan, _) = plan_mps_files(&[], true, &SLURM_4, places(), Some(USER), |f| {
            f.stats.clear()
        });
        assert!(without(&plan).starts_with("cannot use the MPS base /tmp: "));
        // The user's own, or root's sticky one, serve.
        for ok in [
            stat(1000, 0o700, true),
            stat(0, 0o1777, true),
            stat(0, 0o755, true),
        ] {
            let (plan, _) = plan_mps_files(&[], true, &SLURM_4, places(), Some(USER), |f| {
                f.stats.insert(PathBuf::from("/tmp"), ok);
            });
            assert!(matches!(mps_of(&plan), Mps::Start(_)), "{ok:?}");
        }
    }

    /// What task `local` of a planned step gets: its GPU, and what it loses.
    fn gpu_and_unset(plan: &StepPlan, local: usize) -> (String, Vec<String>) {
        let out = task_outcome(plan, &task(local, 2, Some("0,1,2,3")));
        (get(&out, env::CUDA).unwrap_or("-").to_string(), out.unset)
    }

    #[test]
    fn a_task_that_keeps_a_daemons_pipe_gets_its_gpu_by_uuid() {
        // Inside a parent's MPS task on this host, without asking for mps.
        let parent = [
            &SLURM_4[..],
            &[
                (env::MPS, "1"),
                (env::MPS_HOST, "n1"),
                (env::MPS_PIPE, "/tmp/d/pipe"),
                (env::MPS_LOG, "/tmp/d/log"),
            ],
        ]
        .concat();
        let socket = |f: &mut FakeFiles| f.exists.push(PathBuf::from("/tmp/d/pipe/control"));
        let (plan, _) = plan_mps_files(&[], false, &parent, places(), Some(USER), socket);
        assert!(matches!(mps_of(&plan), Mps::Theirs { ours: true, .. }));
        assert_eq!(gpu_and_unset(&plan, 1), ("GPU-u1".to_string(), vec![]));
        // A site's (or the user's) daemon: UUIDs too, and no flag of ours.
        let site = [&SLURM_4[..], &[(env::MPS_PIPE, "/site/mps")]].concat();
        let (plan, _) = plan_mps_with(&[], false, &site, places(), Some(USER));
        assert!(matches!(
            mps_of(&plan),
            Mps::Theirs {
                ours: false,
                loud: false,
                ..
            }
        ));
        assert_eq!(gpu_and_unset(&plan, 0), ("GPU-u0".to_string(), vec![]));
        // A stale flag alone goes.
        let stale = [&SLURM_4[..], &[(env::MPS, "1")]].concat();
        let (plan, _) = plan_mps_with(&[], false, &stale, places(), Some(USER));
        assert_eq!(mps_of(&plan), Mps::Off);
        assert_eq!(
            gpu_and_unset(&plan, 0),
            ("0".to_string(), vec![env::MPS.to_string()])
        );
    }

    #[test]
    fn another_hosts_daemon_is_never_this_steps() {
        let elsewhere = [
            &SLURM_4[..],
            &[
                (env::MPS, "1"),
                (env::MPS_HOST, "n2"),
                (env::MPS_PIPE, "/tmp/d/pipe"),
                (env::MPS_SHARE, "50"),
            ],
        ]
        .concat();
        // The socket is visible (a shared /tmp), but the host is another.
        let socket = |f: &mut FakeFiles| f.exists.push(PathBuf::from("/tmp/d/pipe/control"));
        let (plan, _) = plan_mps_files(&[], true, &elsewhere, places(), Some(USER), socket);
        let Mps::Start(d) = mps_of(&plan) else {
            panic!("{plan:?}")
        };
        // Its own daemon; the parent's share is not given.
        let mut map = mapped(plan);
        map.mps_started(*d);
        let plan = StepPlan::Map(map);
        assert_eq!(
            gpu_and_unset(&plan, 0),
            ("GPU-u0".to_string(), vec![env::MPS_SHARE.to_string()])
        );
        // Not asking: the other host's variables all go.
        let (plan, _) = plan_mps_files(&[], false, &elsewhere, places(), Some(USER), socket);
        assert_eq!(mps_of(&plan), Mps::Off);
        let (gpu, mut unset) = gpu_and_unset(&plan, 0);
        unset.sort();
        assert_eq!(gpu, "0");
        assert_eq!(
            unset,
            [env::MPS_SHARE, env::MPS_PIPE, env::MPS, env::MPS_HOST].map(String::from)
        );
    }
}
