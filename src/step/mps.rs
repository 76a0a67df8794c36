//! CUDA MPS for a mapped step on one node: whether its tasks share their
//! GPUs through a control daemon the plugin starts for the step, through
//! one that already serves them, or not at all; and what each task gets.
//!
//! The daemon's GPUs are named by UUID: slurmstepd, and a daemon it
//! starts, are not confined to the step's devices, so Slurm's indices
//! (renumbered from 0 under `ConstrainDevices`) could name another job's
//! GPUs there.

use super::{Node, NvmlAsk, StepMap};
use crate::env;
use crate::method::{position, Method};
use crate::settings::site::{Config, MpsMode, MpsShare};
use crate::slurm::gpus::is_uuid;
use crate::text::quote;
use crate::topology::nvml_uuids;
use crate::vendor::Vendor;
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
}

/// MPS for the step on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mps {
    /// Not asked for.
    Off,
    /// The front end starts this daemon before any task execs, then
    /// calls [`StepMap::mps_started`] or [`StepMap::mps_failed`].
    Start(Box<Daemon>),
    /// The plugin's daemon answers: each task is its client.
    Serving(Box<Daemon>),
    /// Another's MPS serves the step (Slurm's `gres/mps`, or a daemon at
    /// the pipe directory the step names): nothing started; said once.
    /// Its tasks get `gpus`, the step's GPUs by UUID, where the daemon is
    /// one at a pipe directory (its devices may be numbered otherwise).
    Theirs {
        why: String,
        loud: bool,
        gpus: Option<Vec<String>>,
    },
    /// Asked for (or `mps=auto`), but the step runs mapped without MPS;
    /// said once, where the user asked or with `verbose`.
    Without { why: String, loud: bool },
}

/// One control daemon for one step on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Daemon {
    pub control: PathBuf,
    /// The step's private directory (mode 0700, the user's), removed at
    /// the end; the pipe and log directories are inside it.
    pub dir: PathBuf,
    pub pipe: PathBuf,
    pub log: PathBuf,
    /// The daemon's `CUDA_VISIBLE_DEVICES`: the step's GPUs' UUIDs, in the
    /// step's order.
    pub gpus: Vec<String>,
    pub uid: u32,
    pub gid: u32,
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
    /// The daemon's environment: nothing of the job's but what MPS reads.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            (env::MPS_PIPE, self.pipe.display().to_string()),
            (env::MPS_LOG, self.log.display().to_string()),
            (env::CUDA, self.gpus.join(",")),
            ("PATH", "/usr/bin:/bin".to_string()),
        ]
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
    map.mps = decide(map, asked, config, node, facts);
    if let Mps::Theirs {
        gpus: Some(gpus), ..
    } = &map.mps
    {
        map.gpus = gpus.clone();
    }
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
    if !asked && !auto {
        return Mps::Off;
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
    // A nested step inherits its parent task's MPS variables: they are the
    // plugin's, not Slurm's or the user's.
    let inherited = node.env(env::MPS).is_some();
    if let Some(share) = node.env(env::MPS_SHARE).filter(|_| !inherited) {
        let why = format!(
            "Slurm's gres/mps serves this step ({}={}); no MPS daemon started",
            env::MPS_SHARE,
            quote(&share)
        );
        return Ok(Mps::Theirs {
            why,
            loud: asked,
            gpus: None,
        });
    }
    // The parent's daemon serves where it runs: on this node (a nested
    // step on another node gets its own).
    let pipe = node
        .env(env::MPS_PIPE)
        .filter(|pipe| !inherited || node.files().exists(&Path::new(pipe).join("control")));
    if let Some(pipe) = pipe {
        let mut why = format!(
            "the MPS daemon at {}={} serves this step; no MPS daemon started",
            env::MPS_PIPE,
            quote(&pipe)
        );
        let gpus = match uuids(map, config, node) {
            Ok(gpus) => Some(gpus),
            Err(e) => {
                why += &format!("; its tasks keep Slurm's indices: {e}");
                None
            }
        };
        return Ok(Mps::Theirs {
            why,
            loud: asked,
            gpus,
        });
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
    let step = map
        .step
        .as_deref()
        .ok_or("Slurm gave no job id to name the MPS directory by")?;
    let dir = base_dir(config, node).join(dir_name(facts.uid, step, facts.node_id));
    let socket = dir.join("pipe").join("control");
    if socket.as_os_str().len() > MAX_SOCKET_PATH {
        return Err(format!(
            "the MPS socket path {} is longer than a socket path may be ({MAX_SOCKET_PATH} \
             bytes); a shorter base is needed (TMPDIR, or the site's mps_dir=)",
            socket.display()
        ));
    }
    let share = |count: usize| match config.mps_share {
        MpsShare::Even => Some(even_share(count)),
        MpsShare::None => None,
    };
    Ok(Mps::Start(Box::new(Daemon {
        control,
        pipe: dir.join("pipe"),
        log: dir.join("log"),
        dir,
        gpus: uuids(map, config, node)?,
        uid: facts.uid,
        gid: facts.gid,
        shares: per_gpu.into_iter().map(share).collect(),
        keep_log: !inherited && node.env(env::MPS_LOG).is_some(),
        timeout: config.nvml_timeout,
        local_tasks: facts.local_tasks,
        asked,
    })))
}

/// The step's MPS directory: `desi-gpu-map-mps.UID.JOBID.STEPID.NODEID`,
/// NODEID the node's place in the step (several slurmd may share a host
/// and its /tmp). Anything but letters, digits, `.`, `-` and `_` is left
/// out of the step's name, so that no name climbs out of the base.
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
        return Ok(path.clone());
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
    /// The daemon answers: tasks get its GPUs' UUIDs, which the MPS
    /// server reads whatever its own numbering.
    pub fn mps_started(&mut self) {
        if let Mps::Start(daemon) = std::mem::replace(&mut self.mps, Mps::Off) {
            self.gpus = daemon.gpus.clone();
            self.mps = Mps::Serving(daemon);
        }
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
    set.push((env::MPS.to_string(), "1".to_string()));
    set
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
        let node = FakeNode::new(&env, nvml);
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
        let dir = PathBuf::from("/tmp/desi-gpu-map-mps.1000.7.0.3");
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
        map.mps_started();
        let plan = StepPlan::Map(map);
        let out = task_outcome(&plan, &task(4, 6, Some("0,1,2,3")));
        assert_eq!(get(&out, env::CUDA), Some("GPU-u2"));
        assert_eq!(
            get(&out, env::MPS_PIPE),
            Some("/tmp/desi-gpu-map-mps.1000.7.0.3/pipe")
        );
        assert_eq!(
            get(&out, env::MPS_LOG),
            Some("/tmp/desi-gpu-map-mps.1000.7.0.3/log")
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
        map.mps_started();
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
        let failed = Err(crate::Error::Discovery(
            "NVML: cannot initialise libnvidia-ml.so.1: Driver Not Loaded".to_string(),
        ));
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
                (env::MPS_PIPE, "/tmp/desi-gpu-map-mps.1000.7.0.3/pipe"),
                (env::MPS_LOG, "/tmp/desi-gpu-map-mps.1000.7.0.3/log"),
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
        assert_eq!(d.dir, PathBuf::from("/var/mps/desi-gpu-map-mps.1000.7.0.3"));
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
}
