//! From a step's facts to its plan, in one pass: each part of a mapped
//! step's record (its list, how the lists are written, where its GPUs sit,
//! MPS) is decided first, and the record is built once.

use super::aside::Aside;
use super::binding::slurm_binds_per_task;
use super::decision::StepPlan;
use super::given::{from_given, whole_node};
use super::ids::{StepIdentity, UnreadableStep};
use super::locate::{discover, gpu_cpus, uuids_of_places};
use super::map::{placing, GpuCpus, StepMap};
use super::node::{Node, NvmlAsk};
use super::resolve::{resolve, Resolved};
use super::source::{from_nvml, from_slurm, other_lists, Listed, Missing, StepGpus};
use crate::env;
use crate::error::Error;
use crate::method::Method;
use crate::mps::{InheritedMps, Mps, MpsFacts, MpsInput, MpsNode, Whose};
use crate::runtime::{choose, Rendering, StepLists, Unbindable, Vendor, VendorSetting};
use crate::settings::config::{Config, NvmlSource};
use crate::settings::option::{Choice, OptionRequest};
use crate::settings::site::{request_from_variable, taken_from_variable};
use crate::snapshot::Snapshot;
use crate::text::quote;
use crate::topology::{nvml_uuids, resolve_tokens};
use std::path::Path;

/// What the front end knows of a step on this node, each part as it has
/// it ready.
pub struct StepFacts<'a> {
    /// Which step this is (Slurm's, or a launch of its own).
    pub step: StepIdentity,
    /// The site's settings.
    pub config: &'a Config,
    /// What the user asked for, parsed once by the front end (the one
    /// type every front end passes: [`OptionRequest`]); `None`: the user
    /// gave no option.
    pub request: Option<OptionRequest>,
    /// The job's `DESI_GPU_MAP_METHOD` as the plugin found it (lossy
    /// UTF-8): where the user gave no option and the site's default would
    /// map the step, it is the user's request, as exec and the task prolog
    /// read it (`request_from_variable`). `None` for every other front
    /// end, which reads it as its own method.
    pub method_variable: Option<&'a str>,
    /// The step's variables, read once by the front end.
    pub vars: &'a Snapshot,
    /// The step's user and task count on this node, for MPS; `None`: the
    /// front end starts no daemons.
    pub mps: Option<MpsFacts>,
}

/// What SPANK hands the plugin by `user_init`, each part possibly
/// unreadable: the step's id, the settings `init` parsed (`None`: `init`
/// never ran), the option `--desi-gpu-map` parsed where given. Its errors
/// are deferred to here, where the step's plan stands aside with them.
pub struct Deferred<'a> {
    /// Which step this is, or why SPANK would not say.
    pub step: Result<StepIdentity, UnreadableStep>,
    /// The site's settings, or why they are unusable; `None`: `init` never
    /// ran.
    pub config: Option<&'a Result<Config, Error>>,
    /// The option's value, or why it is unusable; `None`: not given.
    pub request: Option<&'a Result<OptionRequest, Error>>,
}

/// The plan where a step cannot be planned, or the parts it is planned
/// from: a special step (batch, extern) is untouched whatever else failed.
pub type Ready<'a> = Result<(StepIdentity, &'a Config, Option<OptionRequest>), Box<StepPlan>>;

impl<'a> Deferred<'a> {
    /// The parts, or the plan that stands aside with the first error: the
    /// step's id, then the settings, then the option.
    pub fn ready(self) -> Ready<'a> {
        let aside = |flag: &str, why| Err(Box::new(StepPlan::aside(flag, why)));
        let step = match self.step {
            Ok(step) => step,
            Err(why) => return Err(Box::new(StepPlan::unreadable_step(why))),
        };
        if step.is_special() {
            return Err(Box::new(StepPlan::Untouched));
        }
        let default_flag = crate::settings::config::DEFAULT_FLAG;
        let config = match self.config {
            Some(Ok(config)) => config,
            Some(Err(e)) => return aside(default_flag, Aside::Misconfigured(e.clone())),
            None => return aside(default_flag, Aside::NotInitialised),
        };
        let request = match self.request {
            Some(Err(e)) => return aside(&config.flag, Aside::BadRequest(e.clone())),
            Some(Ok(request)) => Some(*request),
            None => None,
        };
        Ok((step, config, request))
    }
}

impl StepPlan {
    /// The plan of a step whose id cannot be read: it stands aside, saying
    /// why.
    pub fn unreadable_step(why: UnreadableStep) -> StepPlan {
        StepPlan::aside(
            crate::settings::config::DEFAULT_FLAG,
            Aside::UnreadableStepId(why),
        )
    }
}

/// Decides for a step, in one pass from Slurm's facts to the plan: the
/// step's GPUs (Slurm's list, or NVML's where Slurm's count proves it the
/// step's), the node's vendor, and for `closest` where the GPUs sit. The
/// node is asked only what the step needs: NVML only where Slurm names no
/// list (once, with a `closest` step's places in the same load), the
/// vendor and the kernel's files only for a step that gets mapped.
///
/// # Example
///
/// Two tasks of a `contiguous` step that Slurm gave a node's four GPUs,
/// on a node with no files to read and no NVML: each task gets a block of
/// two.
///
/// ```
/// use desi_gpu_map_core::files::{Files, Stat};
/// use desi_gpu_map_core::method::Method;
/// use desi_gpu_map_core::settings::config::Config;
/// use desi_gpu_map_core::settings::option::{Choice, OptionRequest};
/// use desi_gpu_map_core::snapshot::Snapshot;
/// use desi_gpu_map_core::step::{
///     plan_step, task_outcome, Node, NvmlAsk, StepFacts, StepIdentity, StepPlan, TaskInputs,
/// };
/// use desi_gpu_map_core::Error;
/// use std::io;
/// use std::path::{Path, PathBuf};
///
/// /// A node without files, whose NVML is off.
/// struct Bare;
///
/// impl Files for Bare {
///     fn read(&self, _: &Path) -> io::Result<String> {
///         Err(io::ErrorKind::NotFound.into())
///     }
///     fn list(&self, _: &Path, _: usize) -> io::Result<Vec<String>> {
///         Err(io::ErrorKind::NotFound.into())
///     }
///     fn exists(&self, _: &Path) -> bool {
///         false
///     }
///     fn stat(&self, _: &Path) -> io::Result<Stat> {
///         Err(io::ErrorKind::NotFound.into())
///     }
///     fn resolve(&self, _: &Path) -> io::Result<PathBuf> {
///         Err(io::ErrorKind::NotFound.into())
///     }
/// }
///
/// impl Node for Bare {
///     fn files(&self) -> &dyn Files {
///         self
///     }
///     fn nvml(&self, _: NvmlAsk, _: &Config) -> Result<Vec<String>, Error> {
///         Err(Error::NvmlOff)
///     }
/// }
///
/// // What slurmstepd's environment says of the step.
/// let vars = Snapshot {
///     cuda: Some("0,1,2,3".into()),
///     step_gpus: Some("0,1,2,3".into()),
///     gpus_on_node: Some("4".into()),
///     ..Snapshot::default()
/// };
/// let config = Config::default();
/// let request = OptionRequest::Use {
///     choice: Some(Choice::Map(Method::Contiguous)),
///     verbose: false,
///     mps: false,
/// };
/// let facts = StepFacts {
///     step: StepIdentity::Slurm(0),
///     config: &config,
///     request: Some(request),
///     method_variable: None,
///     vars: &vars,
///     mps: None,
/// };
/// let plan = plan_step(&facts, &Bare);
/// assert!(matches!(plan, StepPlan::Map(_)), "{plan:?}");
///
/// for (local_id, gpus) in [(0, "0,1"), (1, "2,3")] {
///     let task = TaskInputs {
///         node: "node1",
///         local_id,
///         local_count: 2,
///         rank: local_id as u32,
///         cuda: vars.cuda.as_deref(),
///         tres_bind: None,
///         cpus: Default::default(),
///         container: Default::default(),
///     };
///     let outcome = task_outcome(&plan, &task);
///     let cuda = outcome.set.iter().find(|(name, _)| name == "CUDA_VISIBLE_DEVICES");
///     assert_eq!(cuda.map(|(_, value)| value.as_str()), Some(gpus));
/// }
/// ```
pub fn plan_step(facts: &StepFacts, node: &dyn Node) -> StepPlan {
    let step = &facts.step;
    if step.is_special() {
        return StepPlan::Untouched;
    }
    let config = facts.config;
    let from_variable = match facts.request {
        Some(_) => None,
        None => facts
            .method_variable
            .and_then(|value| Some((request_from_variable(Some(value), config)?, value))),
    };
    let asked = match &from_variable {
        Some((request, _)) => Some(request.clone()),
        None => facts.request.map(Ok),
    };
    let mut plan = match asked {
        Some(Err(e)) => StepPlan::aside(&config.flag, Aside::BadRequest(e)),
        Some(Ok(request)) => {
            plan_mapping(&resolve(Some(request), config), config, node, step, facts)
        }
        None => plan_mapping(&resolve(None, config), config, node, step, facts),
    };
    if let Some((_, value)) = from_variable {
        taken_from(&mut plan, value, config);
    }
    plan
}

/// A step the job's `DESI_GPU_MAP_METHOD` asked for: one that stands
/// aside keeps the variable, for exec and the task prolog to read (and
/// refuse) as the plugin did, never to map with their default in its
/// place; a mapped one says, under `verbose`, where its method came from.
fn taken_from(plan: &mut StepPlan, value: &str, config: &Config) {
    match plan {
        StepPlan::Unmapped(unmapped) => unmapped.clear.retain(|name| name != env::METHOD),
        StepPlan::Map(map) => map.notes.push(taken_from_variable(value, config)),
        StepPlan::Untouched => {}
    }
}

/// Decides for a normal step whose inputs could all be read.
fn plan_mapping(
    want: &Resolved,
    config: &Config,
    node: &dyn Node,
    identity: &StepIdentity,
    facts: &StepFacts,
) -> StepPlan {
    let method = match want.choice {
        Choice::Off => return StepPlan::quiet(&config.flag),
        Choice::Map(method) => method,
    };
    let vars = facts.vars;
    // Slurm's per-task requests bind an srun step's tasks, not a
    // launcher's ranks.
    if let (None, Some(binds)) = (identity.given(), slurm_binds_per_task(vars)) {
        return StepPlan::slurm_binds(&config.flag, binds, want.mps);
    }
    // A closest step's places from the NVML load that listed its GPUs.
    let mut placed = None;
    let listed = match identity.given() {
        Some(given) => {
            let vendor = choose(config.vendor, node.files(), Path::new("/")).vendor;
            from_given(given, vars, vendor)
                .unwrap_or_else(|| whole_node(config, node, method, vendor, &mut placed))
        }
        None => list_step(config, node, vars, method, &mut placed),
    };
    let step = match listed {
        Ok(step) => step,
        Err(Missing::NoGpus(_)) if !want.asked => return StepPlan::quiet(&config.flag),
        Err(Missing::NoGpus(why) | Missing::Failed(why)) => {
            return StepPlan::aside(&config.flag, Aside::Missing(why))
        }
    };
    let written = match written(step, config, node, vars) {
        Ok(written) => written,
        Err(why) => return StepPlan::aside(&config.flag, Aside::Unbindable(why)),
    };
    let vendor = written.rendering.vendor;
    let near = gpu_cpus(node, config, method, &written.step, vendor, placed);
    let parts = Parts {
        method,
        written,
        near,
        step: identity.record(vars),
    };
    StepPlan::Map(record(parts, want, config, node, vars, facts.mps.clone()))
}

/// The step's list: Slurm's; else Slurm's UUIDs (`Flags=env_uuid`) where
/// the driver's files, or else NVML's places, confirm them; else NVML's
/// own, from the same load. NVML is loaded at most once; its places stay
/// in `placed` for `closest`.
fn list_step(
    config: &Config,
    node: &dyn Node,
    vars: &Snapshot,
    method: Method,
    placed: &mut Option<Result<Vec<String>, Error>>,
) -> Result<StepGpus, Missing> {
    let not_slurms = match from_slurm(vars) {
        Ok(listed) => return listed,
        Err(not_slurms) => not_slurms,
    };
    if let Some(list) = not_slurms.uuids_beside_indices() {
        let by_driver = driver_uuids(node, config, &list.step);
        if let Some(step) = by_driver.and_then(|g| list.confirmed_by(vars, &g)) {
            return Ok(step);
        }
        if config.nvml != NvmlSource::Off {
            let lines = node.nvml(NvmlAsk::Places, config);
            let by_nvml = lines
                .as_ref()
                .ok()
                .and_then(|l| nvml_uuids(l, &list.step, Some(&list.step)).ok());
            *placed = Some(lines);
            if let Some(step) = by_nvml.and_then(|g| list.confirmed_by(vars, &g)) {
                return Ok(step);
            }
        }
    }
    from_nvml(
        config,
        Box::new(not_slurms),
        vars,
        &mut |config: &Config| match placed.as_ref() {
            Some(lines) => uuids_of_places(node, config, lines),
            None => discover(node, config, method, placed),
        },
    )
}

/// The UUIDs NVIDIA's driver files name for Slurm's indices `step`
/// (under the site's `kernel_root`), located as every index is
/// ([`resolve_tokens`]), without loading NVML.
fn driver_uuids(node: &dyn Node, config: &Config, step: &[String]) -> Option<Vec<String>> {
    let gpus =
        crate::runtime::kernel_gpus(node.files(), &config.kernel_root, Vendor::Nvidia).ok()?;
    let located = resolve_tokens(step, Some(step), &gpus).ok()?;
    located.into_iter().map(|g| g.uuid).collect()
}

/// A listed step's lists, sorted and planned for the node's vendor.
struct Written {
    step: StepGpus,
    others: Vec<(&'static str, Vec<String>)>,
    notes: Vec<String>,
    rendering: Rendering,
}

/// Sorts the step's other lists and plans how its lists are written, or
/// says why none can be narrowed.
fn written(
    step: StepGpus,
    config: &Config,
    node: &dyn Node,
    vars: &Snapshot,
) -> Result<Written, Unbindable> {
    let runtimes = step.listed.is_runtimes().then_some(step.gpus.as_slice());
    let lists = other_lists(vars, runtimes);
    let (mut others, mut notes) = (lists.slurms, lists.notes);
    if let Some(value) = step.listed.exported() {
        notes.push(format!(
            "{}={} was the user's, not Slurm's: replaced by NVML's list",
            env::CUDA,
            quote(value)
        ));
    }
    // A grant's list names the GPUs as its front end gives them (a Flux
    // job's broker's, as R gives them): CUDA_DEVICE_ORDER stays as the run
    // has it, nothing is said of Slurm's indices, and the site's settings
    // are named as the grant's front end writes them.
    let granted = step.listed.granted();
    let order = vars.device_order.clone().filter(|_| granted.is_none());
    let mut chosen = choose(config.vendor, node.files(), Path::new("/"));
    if let (Some(grant), VendorSetting::Fixed(vendor)) = (granted, config.vendor) {
        chosen.why = grant.entry("vendor", crate::names::Named::name(vendor));
    }
    let carrier = chosen.vendor.carrier().name();
    // The kernel's listing of a node's AMD or Intel GPUs: their runtime's
    // own list carries each rank's GPU.
    if step.listed == Listed::Kernel && carrier != env::CUDA {
        others.push((carrier, step.gpus.clone()));
    }
    let mut rendering = Rendering::plan(
        &chosen,
        config.visible,
        &StepLists::new(&step.gpus, step.listed.is_runtimes(), &others).granted(granted),
        &lists.users,
        order.as_deref(),
        &mut notes,
    )?;
    match (&step.listed, rendering.pci_order) {
        (Listed::Inherited { var, .. }, true) => {
            rendering.pci_order = false;
            notes.push(format!(
                "{} not set: {var}'s indices keep the order this process inherited",
                env::DEVICE_ORDER
            ));
        }
        (Listed::Granted { .. }, true) => rendering.pci_order = false,
        _ => {}
    }
    Ok(Written {
        step,
        others,
        notes,
        rendering,
    })
}

/// What a mapped step's record is built from, besides MPS.
struct Parts {
    method: Method,
    written: Written,
    near: GpuCpus,
    step: Option<String>,
}

/// The step's record, built once: MPS is decided first, from its parts.
fn record(
    parts: Parts,
    want: &Resolved,
    config: &Config,
    node: &dyn Node,
    vars: &Snapshot,
    facts: Option<MpsFacts>,
) -> StepMap {
    let (mps, mps_inherited) = plan_mps(&parts, want, config, node, vars, facts);
    let Parts {
        method,
        written,
        near,
        step,
    } = parts;
    StepMap {
        method,
        visible: config.visible,
        verbose: want.verbose,
        flag: config.flag.clone(),
        gpus: written.step.gpus,
        listed: written.step.listed,
        others: written.others,
        notes: written.notes,
        rendering: written.rendering,
        near,
        step,
        mps,
        mps_inherited,
    }
}

/// MPS for the step, from its parts and what the node answers, and the
/// MPS variables it inherited.
fn plan_mps(
    parts: &Parts,
    want: &Resolved,
    config: &Config,
    node: &dyn Node,
    vars: &Snapshot,
    facts: Option<MpsFacts>,
) -> (Mps, InheritedMps) {
    let input = MpsInput {
        asked: want.mps,
        settings: &config.mps,
        timeout: config.nvml_timeout,
        gpus: &parts.written.step.gpus,
        step_gpus: parts.written.step.listed.step_gpus(),
        method: placing(parts.method, &parts.near),
        vendor: parts.written.rendering.vendor,
        step: parts.step.as_deref(),
        facts,
        whose: match parts.written.step.listed.granted() {
            Some(grant) => Whose::Granted(grant),
            None => Whose::Step,
        },
    };
    let places = || node.nvml(NvmlAsk::Places, config);
    let asks = MpsNode {
        vars,
        files: node.files(),
        places: &places,
    };
    let inherited = crate::mps::inherited(&asks);
    (crate::mps::decide(&input, &inherited, &asks), inherited)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::site::parse_args;
    use crate::step::testing::*;
    use crate::step::*;

    #[test]
    fn off_steps_only_lose_stale_flags_and_special_steps_are_untouched() {
        let config = Config::default();
        let (p, calls) = plan_with(&config, Choice::Off, &SLURM_4, Ok(vec![]));
        let u = quiet(p);
        // The method stays: it is the user's, for exec and the task prolog.
        assert_eq!(
            u.clear,
            [
                "DESI_GPU_MAPPED",
                "DESI_GPU_MAP_NODE_GPUS",
                "DESI_GPU_MAP_GPUS",
                "DESI_GPU_MAP_FLUX_IDS",
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

    /// The job's `DESI_GPU_MAP_METHOD`, where the user gave no option and
    /// the site's default would map: the user's request, as exec reads it.
    #[test]
    fn the_method_variable_asks_over_the_site_default_and_a_bad_one_keeps_it() {
        let node = FakeNode::new(&SLURM_4, Ok(vec![]));
        let vars = node.vars();
        let site = parse_args(&["default=contiguous"]).unwrap();
        let facts = |value| StepFacts {
            step: StepIdentity::Slurm(1),
            config: &site,
            request: None,
            method_variable: value,
            vars: &vars,
            mps: None,
        };
        let map = mapped(plan_step(&facts(Some("roundrobin")), &node));
        assert_eq!(map.method, Method::RoundRobin);
        assert_eq!(
            map.notes.last().map(String::as_str),
            Some("DESI_GPU_MAP_METHOD=\"roundrobin\" asks for this step over the site's default=contiguous")
        );
        // A bad value stands aside and keeps the variable, for exec and
        // the task prolog to refuse as the plugin did.
        let StepPlan::Unmapped(unmapped) = plan_step(&facts(Some("bogus")), &node) else {
            panic!("a bad variable must stand aside");
        };
        assert!(matches!(unmapped.why, Some(Aside::BadRequest(_))));
        assert!(!unmapped.clear.iter().any(|n| n == env::METHOD));
        // No variable: the site's default, said nowhere.
        let map = mapped(plan_step(&facts(None), &node));
        assert_eq!(map.method, Method::Contiguous);
        assert!(!map.notes.iter().any(|n| n.contains("asks for this step")));
        // The option, where given, is the request: the variable is not read.
        let given = StepFacts {
            request: Some(asking(Choice::Map(Method::Contiguous))),
            ..facts(Some("bogus"))
        };
        assert_eq!(mapped(plan_step(&given, &node)).method, Method::Contiguous);
        // A site without a default: the variable is exec's, never the plugin's.
        let off = Config::default();
        let quiet = StepFacts {
            config: &off,
            ..facts(Some("roundrobin"))
        };
        assert!(matches!(plan_step(&quiet, &node), StepPlan::Unmapped(_)));
    }

    /// What SPANK defers to `user_init` stands aside with its reason, the
    /// step's id first; a special step is untouched whatever else failed.
    #[test]
    fn unreadable_facts_stand_aside_with_the_reason() {
        let bad_config = parse_args(&["x"]);
        let bad_request = Err(crate::settings::option::bad_option("y"));
        let config = Ok(Config::default());
        let deferred = |step, config, request| Deferred {
            step,
            config,
            request,
        };
        let unreadable = || Err(UnreadableStep::Spank("no id".to_string()));
        let cases = [
            (
                deferred(unreadable(), None, Some(&bad_request)),
                Aside::UnreadableStepId(UnreadableStep::Spank("no id".to_string())),
            ),
            (
                deferred(
                    Ok(StepIdentity::Slurm(1)),
                    Some(&bad_config),
                    Some(&bad_request),
                ),
                Aside::Misconfigured(bad_config.clone().unwrap_err()),
            ),
            (
                deferred(Ok(StepIdentity::Slurm(1)), None, None),
                Aside::NotInitialised,
            ),
            (
                deferred(
                    Ok(StepIdentity::Slurm(1)),
                    Some(&config),
                    Some(&bad_request),
                ),
                Aside::BadRequest(bad_request.clone().unwrap_err()),
            ),
        ];
        for (facts, want) in cases {
            let plan = facts.ready().map(|_| ()).unwrap_err();
            assert_eq!(aside(*plan), want);
        }
        // SLURM_BATCH_SCRIPT.
        let batch = deferred(Ok(StepIdentity::Slurm(0xffff_fffb)), None, None);
        assert_eq!(*batch.ready().map(|_| ()).unwrap_err(), StepPlan::Untouched);
        let fine = deferred(Ok(StepIdentity::Slurm(1)), Some(&config), None);
        assert!(fine.ready().is_ok());
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
}
