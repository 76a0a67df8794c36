//! The decision for one job step on one node: whether it is mapped, and
//! with which list, made in one pass by [`plan_step`] from what a front end's
//! [`Node`] answers. Every part of a mapped step's record ([`StepMap`]) is
//! decided before the record is built once. Each rule lives in its own
//! module, its tests beside it:
//!
//! - `node`: the interface the front ends implement;
//! - `source`: where the step's GPU list comes from (Slurm's list, or NVML),
//!   kept as [`Listed`];
//! - `binding`: when Slurm's own per-task binding wins;
//! - `locate`: where a `closest` step's GPUs sit;
//! - `plan`: the pass from the step's facts to its plan;
//! - `task`: what each task gets, and the variables written for it
//!   (through [`crate::runtime`], which writes the lists for the node's
//!   vendor).
//!
//! CUDA MPS is decided in [`crate::mps`], from a small input this module
//! hands it; the record keeps the decision, and each task's list names its
//! GPU as that decision says ([`StepMap::task_tokens`]).
//!
//! No I/O: the front end hands in the node, and applies what comes back.

mod binding;
mod given;
mod locate;
mod node;
mod plan;
mod source;
mod task;
#[cfg(test)]
pub(crate) mod testing;

pub use task::{
    aside_line, assign, assign_in, carry_out, map_task, task_outcome, unreadable_task, variables,
    Assignment, Closeness, NodeCpus, TaskCpus, TaskInputs, TaskOutcome,
};

use crate::cpuset::CpuSet;
use crate::env;
use crate::error::Error;
use crate::method::closest::Fallback;
use crate::method::{Method, Visible};
use crate::mps::{Daemon, Inherited, Mps};
use crate::runtime::{Rendering, Unbindable};
use crate::settings::option::{Choice, Request};
use crate::settings::site::Config;
use crate::text::quote;
use std::fmt;

pub use binding::slurm_bound_here;
pub use given::Given;
pub use locate::locate;
// spank/src/node.rs still names it here; its home is crate::mps.
pub use node::{Node, NvmlAsk};
pub use plan::{plan_step, StepFacts};
pub use source::{Listed, NotSlurms, WhyNoList};

/// Step ids of the batch (0xfffffffb), extern (0xfffffffc) and interactive
/// (0xfffffffa) steps, and Slurm's other reserved ids above them: never mapped.
const FIRST_SPECIAL_STEP: u32 = 0xffff_fff0;

pub fn is_special_step(step_id: u32) -> bool {
    step_id >= FIRST_SPECIAL_STEP
}

/// A step id as Slurm writes it in `SLURM_STEP_ID`: unsigned, or (26.05
/// writes the batch step's as `-5`) the same 32 bits signed.
pub fn parse_step_id(value: &str) -> Option<u32> {
    let value = value.trim();
    value
        .parse::<u32>()
        .ok()
        .or_else(|| value.parse::<i32>().ok().map(|id| id as u32))
}

/// What a special step is, in words: `the batch step`, and so on.
pub fn special_step_name(step_id: u32) -> Option<&'static str> {
    match step_id {
        0xffff_fffa => Some("the interactive step"),
        0xffff_fffb => Some("the batch step"),
        0xffff_fffc => Some("the extern step"),
        id if is_special_step(id) => Some("a step Slurm reserves"),
        _ => None,
    }
}

/// What the user and the site together ask of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resolved {
    pub choice: Choice,
    pub verbose: bool,
    /// The user gave the option (a method or `verbose`), not only the site
    /// default: only then does a step without GPUs say so.
    pub asked: bool,
    /// The user asked for MPS (`mps`).
    pub mps: bool,
}

/// The method and verbosity for a step: the user's option over the site's.
pub fn resolve(request: Option<Request>, config: &Config) -> Resolved {
    let (choice, verbose, asked, mps) = match request {
        Some(Request::Use {
            choice: Some(choice),
            verbose,
            mps,
        }) => (
            choice,
            verbose || config.verbose,
            choice != Choice::Off,
            mps,
        ),
        Some(Request::Use {
            choice: None,
            verbose,
            mps,
        }) => (config.default, verbose || config.verbose, true, mps),
        // Help never reaches a node: srun, sbatch and salloc exit on it.
        Some(Request::Help) | None => (config.default, config.verbose, false, false),
    };
    Resolved {
        choice,
        verbose,
        asked,
        mps,
    }
}

/// What the plugin does for a step on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepPlan {
    /// The batch, extern and interactive steps: never touched, never told.
    Untouched,
    /// Tasks run as Slurm made them, less any flag inherited from a mapped
    /// task (a nested step must not claim a mapping it did not get).
    Unmapped(Unmapped),
    Map(StepMap),
}

impl StepPlan {
    /// Whether tasks need their CPUs read (`task_init`'s affinity call and
    /// Slurm's bind list): only a `closest` step whose GPUs were located.
    pub fn needs_task_cpus(&self) -> bool {
        matches!(self, StepPlan::Map(map) if matches!(map.near, GpuCpus::Located(_)))
    }

    /// What the plan does, in a word, for the plugin's debug log: the
    /// method used, `unmapped` or `untouched`.
    pub fn kind(&self) -> &'static str {
        match self {
            StepPlan::Untouched => "untouched",
            StepPlan::Unmapped(_) => "unmapped",
            StepPlan::Map(map) => crate::names::Named::name(map.method_used()),
        }
    }
}

/// A step the plugin does not map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unmapped {
    /// Said once per node, by its first task; `None`: silent.
    pub why: Option<Aside>,
    /// Variables removed from every task: the flag and `DESI_GPU_MAP_*`.
    pub clear: Vec<String>,
}

/// Why a step (or, on a node, its tasks) stands aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Aside {
    /// Slurm would not say which step this is.
    UnreadableStepId(String),
    /// The plugstack arguments are unusable.
    Misconfigured(Error),
    /// `init` never ran in this process.
    NotInitialised,
    /// The user's option value is unusable.
    BadRequest(Error),
    /// The step asks Slurm to bind GPUs per task (`request=value`).
    SlurmBindsStep {
        request: &'static str,
        value: String,
    },
    /// Slurm bound the node's tasks itself ([`Error::SlurmBound`]).
    SlurmBoundTasks(Error),
    /// The step has no GPU list to map.
    Missing(WhyNoList),
    /// No list the node's GPU runtimes read can be narrowed.
    Unbindable(Unbindable),
    /// Slurm binds the tasks (an aside above), and the user asked for
    /// MPS, which is started only for a step this maps: said, never
    /// dropped in silence.
    WithoutMps(Box<Aside>),
}

impl Aside {
    /// A step that its user expects to run as Slurm made it: no GPUs here,
    /// or Slurm binds each task itself.
    pub fn is_routine(&self) -> bool {
        matches!(
            self,
            Aside::SlurmBindsStep { .. }
                | Aside::SlurmBoundTasks(_)
                | Aside::Missing(
                    WhyNoList::NoGpus { .. }
                        | WhyNoList::NothingGiven { .. }
                        | WhyNoList::GivenEmpty { .. }
                )
        )
    }
}

impl fmt::Display for Aside {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Aside::UnreadableStepId(e) => {
                write!(f, "cannot read the step id ({e}); tasks left unchanged")
            }
            Aside::Misconfigured(e) => {
                write!(f, "plugin misconfigured, ask your administrators: {e}")
            }
            Aside::NotInitialised => f.write_str("plugin not initialised; tasks left unchanged"),
            Aside::BadRequest(e) => write!(f, "{e}; tasks left unchanged"),
            Aside::SlurmBindsStep { request, value } => write!(
                f,
                "Slurm binds GPUs per task in this step ({request}={}); keeping Slurm's binding",
                quote(value)
            ),
            Aside::SlurmBoundTasks(e) => e.fmt(f),
            Aside::Missing(why) => write!(f, "{why}; tasks left unchanged"),
            Aside::Unbindable(why) => write!(f, "{why}; tasks left unchanged"),
            Aside::WithoutMps(why) => write!(
                f,
                "{why}, and running without MPS, which starts only for a step whose tasks are \
                 mapped here; drop --gpus-per-task or --gpu-bind for MPS"
            ),
        }
    }
}

impl StepPlan {
    /// Stands aside and says why; `flag` is the flag to clear.
    /// Stands aside because Slurm binds the tasks itself (`why`), saying
    /// so where the user asked for MPS.
    pub fn slurm_binds(flag: &str, why: Aside, mps: bool) -> StepPlan {
        match mps {
            true => StepPlan::aside(flag, Aside::WithoutMps(Box::new(why))),
            false => StepPlan::aside(flag, why),
        }
    }

    pub fn aside(flag: &str, why: Aside) -> StepPlan {
        StepPlan::Unmapped(Unmapped {
            why: Some(why),
            clear: stale_names(flag),
        })
    }

    /// Stands aside silently.
    pub fn quiet(flag: &str) -> StepPlan {
        StepPlan::Unmapped(Unmapped {
            why: None,
            clear: stale_names(flag),
        })
    }
}

/// The variables a mapped task gets, which no unmapped task may keep.
pub(crate) fn stale_names(flag: &str) -> Vec<String> {
    vec![
        flag.to_string(),
        env::METHOD.to_string(),
        env::NODE_GPUS.to_string(),
        env::STEP.to_string(),
        env::MPS.to_string(),
        env::MPS_HOST.to_string(),
    ]
}

/// A step whose tasks get mapped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepMap {
    pub method: Method,
    pub visible: Visible,
    pub verbose: bool,
    pub flag: String,
    /// The step's GPUs on this node, in Slurm's (or NVML's) order.
    pub gpus: Vec<String>,
    /// Where `gpus` came from.
    pub listed: Listed,
    /// The other GPU lists Slurm set, each the same length as `gpus`.
    pub others: Vec<(&'static str, Vec<String>)>,
    /// Lists left alone, each with the reason, reported with `verbose`.
    pub notes: Vec<String>,
    /// How the lists are written for the node's GPU vendor.
    pub rendering: Rendering,
    /// Where the step's GPUs sit, for `closest`.
    pub near: GpuCpus,
    /// This step, `JOBID.STEPID` (`None`: Slurm gave no job id), exported
    /// so that `desi-gpu-map exec` knows the plugin mapped it.
    pub step: Option<String>,
    /// CUDA MPS for the step on this node.
    pub mps: Mps,
    /// The MPS variables the step inherited (from a parent task, the site
    /// or the user), which decide what its tasks keep.
    pub mps_inherited: Inherited,
}

impl StepMap {
    /// The method that places the tasks, as `DESI_GPU_MAP_METHOD` and the
    /// `verbose` line name it: `contiguous` where a `closest` step fell
    /// back (its first task on each node says why, naming both).
    pub fn method_used(&self) -> Method {
        placing(self.method, &self.near)
    }

    /// The tokens the tasks' lists carry, one per GPU of `gpus`: the GPUs'
    /// UUIDs where an MPS daemon serving the tasks names them so (the MPS
    /// server reads them whatever its own numbering), else `gpus`.
    pub fn task_tokens(&self) -> &[String] {
        self.mps.task_gpus().unwrap_or(&self.gpus)
    }

    /// `daemon` (the planned one, in the directory the front end could
    /// make) answers: each task is its client.
    pub fn mps_started(&mut self, daemon: Daemon) {
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

/// The method that places a step planned with `method` whose GPUs sit as
/// `near` says.
fn placing(method: Method, near: &GpuCpus) -> Method {
    match (method, near) {
        (Method::Closest, GpuCpus::Fallback(_)) => Method::Contiguous,
        (method, _) => method,
    }
}

/// The local CPUs of the step's GPUs, for `closest`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuCpus {
    /// Another method: not needed.
    Unused,
    /// Each step GPU's local CPUs, in the step's order.
    Located(Vec<CpuSet>),
    /// Unknown: the step maps as `contiguous`, and its first task says why.
    Fallback(Fallback),
}

/// This step as mapped tasks record it in `DESI_GPU_MAP_STEP`:
/// `JOBID.STEPID` (`None`: Slurm gave no job id).
pub fn step_tag(node: &dyn Node, step_id: u32) -> Option<String> {
    node.env(env::JOB_ID)
        .map(|job| format!("{}.{step_id}", job.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::site::parse_args;
    use crate::step::testing::*;

    #[test]
    fn step_ids_are_read_signed_or_unsigned() {
        assert_eq!(parse_step_id("0"), Some(0));
        assert_eq!(parse_step_id(" 4294967291"), Some(0xffff_fffb));
        assert_eq!(parse_step_id("-5"), Some(0xffff_fffb));
        assert_eq!(
            special_step_name(parse_step_id("-6").unwrap()),
            Some("the interactive step")
        );
        assert_eq!(parse_step_id("x"), None);
        assert_eq!(parse_step_id("4294967296"), None);
    }

    #[test]
    fn off_steps_only_lose_stale_flags_and_special_steps_are_untouched() {
        let config = Config::default();
        let (p, calls) = plan_with(&config, Choice::Off, &SLURM_4, Ok(vec![]));
        let u = quiet(p);
        assert_eq!(
            u.clear,
            [
                "DESI_GPU_MAPPED",
                "DESI_GPU_MAP_METHOD",
                "DESI_GPU_MAP_NODE_GPUS",
                "DESI_GPU_MAP_STEP",
                "DESI_GPU_MAP_MPS",
                "DESI_GPU_MAP_MPS_HOST"
            ]
        );
        assert_eq!(calls, 0);
        let (p, _) = plan_req(&config, None, &SLURM_4, Ok(vec![]));
        quiet(p);
        let custom = parse_args(&["flag=MY_FLAG"]).unwrap();
        let (p, _) = plan_req(&custom, None, &[], Ok(vec![]));
        assert_eq!(quiet(p).clear[0], "MY_FLAG");
        assert_eq!(special_step_name(0xffff_fffb), Some("the batch step"));
        assert_eq!(
            special_step_name(0xffff_fff0),
            Some("a step Slurm reserves")
        );
        assert_eq!(special_step_name(0xffff_ffef), None);
        for step_id in [0xffff_fffa, 0xffff_fffb, 0xffff_fffc] {
            let c = Some(asking(Choice::Map(Method::Contiguous)));
            let (p, _) = plan_step_id(step_id, &config, c, &SLURM_4, Ok(vec![]));
            assert_eq!(p, StepPlan::Untouched, "step {step_id:#x}");
            let out = task_outcome(&p, &task(0, 1, Some("0,1,2,3")));
            assert_eq!(out, TaskOutcome::default());
        }
    }

    #[test]
    fn unreadable_facts_stand_aside_with_the_reason() {
        let node = FakeNode::new(&SLURM_4, Ok(vec![]));
        let bad_config = parse_args(&["x"]);
        let bad_request = Err(crate::settings::option::bad_option("y"));
        let config = Ok(Config::default());
        let cases: [(StepFacts, Aside); 4] = [
            (
                StepFacts {
                    step_id: Err("no id".to_string()),
                    config: Some(&config),
                    request: None,
                    mps: None,
                },
                Aside::UnreadableStepId("no id".to_string()),
            ),
            (
                StepFacts {
                    step_id: Ok(1),
                    config: Some(&bad_config),
                    request: None,
                    mps: None,
                },
                Aside::Misconfigured(bad_config.clone().unwrap_err()),
            ),
            (
                StepFacts {
                    step_id: Ok(1),
                    config: None,
                    request: None,
                    mps: None,
                },
                Aside::NotInitialised,
            ),
            (
                StepFacts {
                    step_id: Ok(1),
                    config: Some(&config),
                    request: Some(&bad_request),
                    mps: None,
                },
                Aside::BadRequest(bad_request.clone().unwrap_err()),
            ),
        ];
        for (facts, want) in cases {
            let why = aside(plan_step(&facts, &node));
            assert_eq!(why, want);
        }
    }

    #[test]
    fn each_stand_aside_in_words() {
        let bad = crate::settings::option::bad_option("y");
        for (why, want) in [
            (
                Aside::UnreadableStepId("no id".to_string()),
                "cannot read the step id (no id); tasks left unchanged".to_string(),
            ),
            (
                Aside::Misconfigured(Error::NvmlOff),
                "plugin misconfigured, ask your administrators: NVML discovery is off (nvml=off)"
                    .to_string(),
            ),
            (
                Aside::NotInitialised,
                "plugin not initialised; tasks left unchanged".to_string(),
            ),
            (
                Aside::BadRequest(bad.clone()),
                format!("{bad}; tasks left unchanged"),
            ),
            (
                Aside::SlurmBindsStep {
                    request: "SLURM_GPU_BIND",
                    value: "map_gpu:0,1".to_string(),
                },
                "Slurm binds GPUs per task in this step (SLURM_GPU_BIND=\"map_gpu:0,1\"); \
                 keeping Slurm's binding"
                    .to_string(),
            ),
            (
                Aside::Missing(WhyNoList::NoGpus { inherited: None }),
                "no GPUs are allocated to this step on this node; tasks left unchanged".to_string(),
            ),
        ] {
            assert_eq!(why.to_string(), want);
        }
    }

    #[test]
    fn resolve_prefers_the_user() {
        let config = parse_args(&["default=roundrobin"]).unwrap();
        let rr = Choice::Map(Method::RoundRobin);
        let c = Choice::Map(Method::Contiguous);
        let got = |request: Option<Request>| {
            let r = resolve(request, &config);
            (r.choice, r.verbose, r.asked)
        };
        assert_eq!(got(None), (rr, false, false));
        assert_eq!(got(Some(asking(Choice::Off))), (Choice::Off, false, false));
        let verbose = |choice| Request::Use {
            choice,
            verbose: true,
            mps: false,
        };
        assert_eq!(got(Some(verbose(Some(c)))), (c, true, true));
        assert_eq!(got(Some(verbose(None))), (rr, true, true));
    }

    /// Slurm 26.05's `Flags=env_uuid` lists, beside SLURM_STEP_GPUS's
    /// indices: Slurm's once NVML's places confirm them (one load, whose
    /// places `closest` would reuse); else, as any list the user could
    /// have exported, NVML's own list from that same load decides.
    #[test]
    fn slurms_uuid_lists_are_slurms_where_nvml_confirms_them() {
        let places = Ok((0..4)
            .map(|i| format!("GPU-u{i} 00000000:0{}:00.0 {i} -", i + 1))
            .collect::<Vec<_>>());
        let config = Config::default();
        let step_with = |cuda: &str, step: &str, nvml| {
            let pairs = [
                ("CUDA_VISIBLE_DEVICES", cuda),
                ("SLURM_STEP_GPUS", step),
                ("SLURM_GPUS_ON_NODE", "2"),
            ];
            plan_with(&config, Choice::Map(Method::Contiguous), &pairs, nvml)
        };
        let step = |cuda: &str, step: &str| step_with(cuda, step, places.clone());
        let (p, calls) = step("GPU-u3,GPU-u2", "2,3");
        let map = mapped(p);
        assert_eq!(
            (map.gpus.clone(), calls),
            (vec!["GPU-u3".to_string(), "GPU-u2".into()], 1)
        );
        assert!(map.listed.is_slurms());
        // UUIDs of GPUs Slurm did not grant: not Slurm's; NVML lists four
        // where Slurm counts two, so nothing maps.
        let (p, calls) = step("GPU-u0,GPU-u1", "2,3");
        assert_eq!(calls, 1);
        assert!(matches!(
            aside(p),
            Aside::Missing(WhyNoList::NvmlCountMismatch { found: 4, count: 2 })
        ));
        // Where NVIDIA's driver files name each GPU's UUID, they confirm
        // the list: NVML is not loaded.
        let mut node = FakeNode::new(
            &[
                ("CUDA_VISIBLE_DEVICES", "GPU-u3,GPU-u2"),
                ("SLURM_STEP_GPUS", "2,3"),
                ("SLURM_GPUS_ON_NODE", "2"),
            ],
            places.clone(),
        );
        for i in 0..4 {
            let info = format!("GPU UUID: GPU-u{i}\nDevice Minor: {i}\n");
            let path = format!("/proc/driver/nvidia/gpus/0000:0{}:00.0/information", i + 1);
            node.files.texts.insert(path.into(), info);
        }
        let request = Some(asking(Choice::Map(Method::Contiguous)));
        let map = mapped(plan_on(&node, 0, &config, request));
        assert_eq!((map.gpus.len(), node.calls.get()), (2, 0));
        assert!(map.listed.is_slurms());
        // A call of the places load that fails after NVML started (the CPU
        // affinity) cannot confirm the list; NVML is asked for the UUIDs
        // alone, as for any step, before the step stands aside.
        let call = Err(Error::Discovery {
            kind: crate::error::NvmlFailure::Call,
            why: "nvmlDeviceGetCpuAffinity failed".into(),
        });
        let (_, calls) = step_with("GPU-u3,GPU-u2", "2,3", call);
        assert_eq!(calls, 2);
    }

    #[test]
    fn closest_locates_through_the_kernel_then_nvml() {
        let lines = || -> Result<Vec<String>, Error> {
            Ok(vec![
                "GPU-a 00000000:01:00.0 0 1".to_string(),
                "GPU-b 00000000:02:00.0 1 0".to_string(),
            ])
        };
        let no_files = parse_args(&["kernel_root=/nonexistent"]).unwrap();
        let (p, _) = plan_with(
            &no_files,
            Choice::Map(Method::Closest),
            &[
                ("CUDA_VISIBLE_DEVICES", "0,1"),
                ("SLURM_STEP_GPUS", "0,1"),
                ("SLURM_GPUS_ON_NODE", "2"),
            ],
            Ok(vec![]),
        );
        let map = mapped(p);
        let step = source::StepGpus {
            gpus: map.gpus.clone(),
            listed: map.listed.clone(),
        };
        let nvidia = map.rendering.vendor;
        let node = |nvml| FakeNode {
            places: None,
            ..FakeNode::new(&[], nvml)
        };
        let asked = node(lines());
        let t = locate::step_topology(&asked, &no_files, &step, nvidia, None).unwrap();
        assert_eq!(t.gpus[1].cpus.as_ref().unwrap().to_string(), "0");
        assert_eq!(
            asked.calls.get(),
            1,
            "NVML asked once, after the kernel files failed"
        );
        let off = parse_args(&["kernel_root=/nonexistent", "nvml=off"]).unwrap();
        let err = locate::step_topology(&node(lines()), &off, &step, nvidia, None).unwrap_err();
        assert!(
            err.starts_with("/nonexistent/proc/driver/nvidia/gpus"),
            "{err}"
        );
        let err = locate::step_topology(&node(Err(Error::NvmlOff)), &no_files, &step, nvidia, None)
            .unwrap_err();
        assert!(
            err.ends_with("; NVML: NVML discovery is off (nvml=off)"),
            "{err}"
        );
        // AMD and Intel GPUs: their render nodes only, never NVML.
        let amd = crate::runtime::Vendor::Amd;
        let never = node(lines());
        let err = locate::step_topology(&never, &no_files, &step, amd, None).unwrap_err();
        assert_eq!(
            err,
            "/nonexistent/sys/class/drm: No such file or directory (os error 2)"
        );
        assert_eq!(never.calls.get(), 0);
    }
}
