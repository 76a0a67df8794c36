//! Where a step's GPU list comes from: Slurm's `CUDA_VISIBLE_DEVICES`, where
//! Slurm set it for the step, else NVML's list, where Slurm's count (or the
//! site's `untracked=whole-node`) proves it is the step's.

use crate::env;
use crate::error::Error;
use crate::grant::Grant;
use crate::settings::config::{Config, NvmlSource, Untracked};
use crate::slurm::gpus::{check_list, is_uuid, parse_gpu_list};
use crate::snapshot::{Snapshot, Var, OTHER_LISTS};
use crate::text::quote;
use std::fmt;

/// Why a step gets no GPU list.
pub(super) enum Missing {
    /// Slurm gave the step no GPUs on this node: said only when asked.
    NoGpus(WhyNoList),
    /// It has GPUs, but they cannot be named safely.
    Failed(WhyNoList),
}

/// What stands between a step and its GPU list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WhyNoList {
    /// Slurm allocated the step no GPUs here; `inherited` is a
    /// `CUDA_VISIBLE_DEVICES` the step has all the same, not Slurm's.
    NoGpus {
        inherited: Option<String>,
    },
    /// Slurm's list and count disagree.
    CountMismatch {
        cuda: String,
        listed: usize,
        count: usize,
    },
    /// `SLURM_GPUS_ON_NODE` is no count.
    BadCount(String),
    /// Only NVML could tell (the step's list is not Slurm's, for the
    /// reason given), and it is off.
    NvmlOff(Box<NotSlurms>),
    /// Only NVML could tell, and it failed.
    Nvml(Box<NotSlurms>, Error),
    /// NVML's list is no usable list.
    BadNvmlList(Error),
    NvmlFindsNone,
    /// NVML finds another number of GPUs than Slurm counts.
    NvmlCountMismatch {
        found: usize,
        count: usize,
    },
    /// A grant that gives no GPU on this node (a Flux job's R).
    NoneGranted(&'static Grant),
    /// No srun step placed the process, and it inherited no GPU list;
    /// `node`: why the node's own GPUs were not listed (`None`: inside a
    /// Slurm job, where they are not the job's).
    NothingGiven {
        node: Option<String>,
    },
    /// The list it inherited is empty: it was given no GPU.
    GivenEmpty {
        var: &'static str,
    },
    /// The list it inherited is no list.
    BadGiven {
        var: &'static str,
        error: Box<Error>,
    },
}

impl fmt::Display for WhyNoList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (cuda, count_var) = (env::CUDA, env::GPUS_ON_NODE);
        match self {
            WhyNoList::NoGpus { inherited } => {
                f.write_str("no GPUs are allocated to this step on this node")?;
                match inherited {
                    Some(list) => write!(
                        f,
                        " ({cuda}={} was inherited, not set by Slurm)",
                        quote(list)
                    ),
                    None => Ok(()),
                }
            }
            WhyNoList::CountMismatch {
                cuda: list,
                listed,
                count,
            } => write!(
                f,
                "{cuda}={} lists {listed} GPUs but {count_var}={count}",
                quote(list)
            ),
            WhyNoList::BadCount(value) => write!(f, "{count_var}={} is not a count", quote(value)),
            WhyNoList::NvmlOff(why) => {
                write!(f, "{why}, and NVML discovery is off (nvml=off)")
            }
            WhyNoList::Nvml(why, e) => write!(f, "{why}, and {e}"),
            WhyNoList::BadNvmlList(e) => write!(f, "NVML's device list is unusable: {e}"),
            WhyNoList::NvmlFindsNone => f.write_str("NVML finds no GPU on this node"),
            WhyNoList::NvmlCountMismatch { found, count } => write!(
                f,
                "NVML finds {found} GPUs but {count_var}={count}, so the step's GPUs cannot be \
                 told apart"
            ),
            WhyNoList::NoneGranted(grant) => f.write_str(&grant.none_here()),
            WhyNoList::NothingGiven { node: None } => f.write_str(
                "this process inherited no GPU list, and in a Slurm job the node's other GPUs \
                 are not its own",
            ),
            WhyNoList::NothingGiven { node: Some(why) } => write!(
                f,
                "this process inherited no GPU list, and the node lists none: {why}"
            ),
            WhyNoList::GivenEmpty { var } => {
                write!(f, "{var} is empty: this process was given no GPU")
            }
            WhyNoList::BadGiven { var, error } => write!(
                f,
                "{var}, the GPU list this process inherited, is unusable: {error}"
            ),
        }
    }
}

/// Why the step's `CUDA_VISIBLE_DEVICES` is not taken for the list Slurm
/// set, so that NVML is asked: said where NVML then cannot tell either.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NotSlurms {
    /// The step has none.
    Unset,
    /// Slurm gives the step no GPU count (`SLURM_GPUS_ON_NODE`).
    NoCount { cuda: String },
    /// Slurm's own list (`SLURM_STEP_GPUS`) is not there to check it by.
    NoStepList { cuda: String },
    /// Slurm's own list is no list.
    BadStepList { cuda: String, error: Box<Error> },
    /// It is no list (too long, an entry twice, ...): Slurm writes lists.
    NotAList(Box<Error>),
    /// It disagrees with Slurm's own list (and is no renumbering of it).
    Disagrees { cuda: String, step: String },
}

impl fmt::Display for NotSlurms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (cuda_var, step_var) = (env::CUDA, env::STEP_GPUS);
        match self {
            NotSlurms::Unset => write!(f, "Slurm set no {cuda_var}"),
            NotSlurms::NoCount { cuda } => write!(
                f,
                "{cuda_var}={} is not Slurm's: Slurm gives this step no GPU count ({})",
                quote(cuda),
                env::GPUS_ON_NODE
            ),
            NotSlurms::NoStepList { cuda } => write!(
                f,
                "{cuda_var}={} is not Slurm's: {step_var}, Slurm's own list, is not set",
                quote(cuda)
            ),
            NotSlurms::BadStepList { cuda, error } => write!(
                f,
                "{cuda_var}={} cannot be checked against Slurm's own list ({step_var}: {error})",
                quote(cuda)
            ),
            NotSlurms::NotAList(error) => write!(f, "{cuda_var} is not Slurm's: {error}"),
            NotSlurms::Disagrees { cuda, step } if self.uuids_beside_indices().is_some() => {
                write!(
                    f,
                    "{cuda_var}={} names its GPUs by UUID beside Slurm's indices ({step_var}={}), \
                     as Slurm writes them under gres.conf Flags=env_uuid, and only NVML can \
                     confirm they are the step's",
                    quote(cuda),
                    quote(step)
                )
            }
            NotSlurms::Disagrees { cuda, step } => write!(
                f,
                "{cuda_var}={} disagrees with Slurm's grant ({step_var}={}), so it is not Slurm's",
                quote(cuda),
                quote(step)
            ),
        }
    }
}

/// A step's GPUs on this node, and where they were listed.
pub(super) struct StepGpus {
    pub(crate) gpus: Vec<String>,
    pub(crate) listed: Listed,
}

/// Where a step's GPU list came from, with what each source leaves to
/// check tasks and locate GPUs by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Listed {
    /// Slurm's `CUDA_VISIBLE_DEVICES` (`cuda`, as the step had it: a task
    /// whose value differs was narrowed by Slurm itself), checked against
    /// Slurm's own list (`SLURM_STEP_GPUS`), which the step's GPUs equal
    /// or renumber from 0 under device constraint. `closest` resolves
    /// indices through `step_gpus`.
    Slurm {
        cuda: String,
        step_gpus: Vec<String>,
    },
    /// NVML's list. `exported` is `CUDA_VISIBLE_DEVICES` as the step had
    /// it: the user's (Slurm sets none there), which each task's GPU
    /// overwrites. A task whose value differs was narrowed by Slurm.
    Nvml { exported: Option<String> },
    /// No srun step placed the process (a launcher's rank, see
    /// [`super::Given`]): the runtime list it inherited, `var` as `value`
    /// reads, its `CUDA_VISIBLE_DEVICES` beside it in `cuda`. Its indices
    /// keep the order the process had (no `CUDA_DEVICE_ORDER` is added).
    Inherited {
        var: &'static str,
        value: String,
        cuda: Option<String>,
    },
    /// A grant ([`super::Given::Granted`]; a Flux job's: the GPUs R gives
    /// it on this node), which its front end hands over in
    /// `CUDA_VISIBLE_DEVICES` (`value`), read as [`Listed::Inherited`] is.
    /// Its indices keep the order the run has (no `CUDA_DEVICE_ORDER` is
    /// added or said).
    Granted {
        value: String,
        grant: &'static Grant,
    },
    /// No srun step placed the process, it inherited no list and runs in
    /// no Slurm job: every GPU the node's kernel lists, in bus order.
    Kernel,
}

impl Listed {
    /// The list is Slurm's `CUDA_VISIBLE_DEVICES`, not NVML's.
    #[cfg(test)]
    pub(crate) fn is_slurms(&self) -> bool {
        matches!(self, Listed::Slurm { .. })
    }

    /// The grant the list is, where a front end handed one over.
    pub(crate) fn granted(&self) -> Option<&'static Grant> {
        match self {
            Listed::Granted { grant, .. } => Some(grant),
            _ => None,
        }
    }

    /// The list names GPUs as the node's runtimes read them (Slurm's, one
    /// inherited, or the kernel's), not as NVML's UUIDs: lists beside it
    /// that read the same are narrowed with it.
    pub(crate) fn is_runtimes(&self) -> bool {
        !matches!(self, Listed::Nvml { .. })
    }

    /// `CUDA_VISIBLE_DEVICES` as the step had it: Slurm's, or where NVML
    /// listed the GPUs the user's (or none), which slurmstepd leaves as
    /// it was; a launcher's rank's own.
    pub(crate) fn step_cuda(&self) -> Option<&str> {
        match self {
            Listed::Slurm { cuda, .. } => Some(cuda),
            Listed::Nvml { exported } => exported.as_deref(),
            Listed::Inherited { cuda, .. } => cuda.as_deref(),
            Listed::Granted { value, .. } => Some(value),
            Listed::Kernel => None,
        }
    }

    /// The user's `CUDA_VISIBLE_DEVICES` that NVML's list replaces.
    pub(crate) fn exported(&self) -> Option<&str> {
        match self {
            Listed::Nvml { exported } => exported.as_deref(),
            _ => None,
        }
    }

    /// Slurm's own list (`SLURM_STEP_GPUS`); `None` where Slurm did not list.
    pub(crate) fn step_gpus(&self) -> Option<&[String]> {
        match self {
            Listed::Slurm { step_gpus, .. } => Some(step_gpus),
            _ => None,
        }
    }

    /// The source, as the `verbose` line names it.
    pub(crate) fn source(&self) -> &'static str {
        match self {
            Listed::Slurm { .. } => "slurm",
            Listed::Nvml { .. } => "nvml",
            Listed::Granted { grant, .. } => grant.source,
            Listed::Inherited { .. } => "inherited",
            Listed::Kernel => "kernel",
        }
    }
}

pub(super) type Sourced = Result<StepGpus, Missing>;

/// The GPU list from `CUDA_VISIBLE_DEVICES`, where Slurm set it for this
/// step (otherwise why it is not Slurm's). Slurm overwrites the user's value in every step
/// with GPUs, except on nodes whose gres.conf says `Flags=no_gpu_env`: there
/// a value the user exported survives. So the list is Slurm's only where it
/// agrees with `SLURM_STEP_GPUS`, Slurm's own list, entry for entry, or
/// reads `0..n-1` as Slurm renumbers under cgroup device constraint, with
/// Slurm's companion lists renumbered alike (see [`renumbered_by_slurm`]),
/// and where `SLURM_GPUS_ON_NODE` counts the step's GPUs. A list that is no
/// list (`0,0`, empty) is neither, so it is the user's, and NVML decides.
pub(super) fn from_slurm(vars: &Snapshot) -> Result<Sourced, NotSlurms> {
    let cuda = vars.cuda.clone().ok_or(NotSlurms::Unset)?;
    // Slurm sets the count in every step with GPUs and removes it from every
    // other step, even when the user exported one (measured on 22.05).
    let Some(count) = gpus_on_node(vars) else {
        return Err(NotSlurms::NoCount { cuda });
    };
    let Some(step_list) = vars.step_gpus.clone() else {
        return Err(NotSlurms::NoStepList { cuda });
    };
    let step = match parse_gpu_list(&step_list) {
        Ok(step) => step,
        Err(error) => {
            let error = Box::new(error);
            return Err(NotSlurms::BadStepList { cuda, error });
        }
    };
    let gpus = parse_gpu_list(&cuda).map_err(|e| NotSlurms::NotAList(Box::new(e)))?;
    if gpus != step && !renumbered_by_slurm(&gpus, step.len(), &cuda, vars) {
        return Err(NotSlurms::Disagrees {
            cuda,
            step: step_list,
        });
    }
    if count != gpus.len() {
        return Ok(Err(Missing::Failed(WhyNoList::CountMismatch {
            listed: gpus.len(),
            cuda,
            count,
        })));
    }
    Ok(Ok(StepGpus {
        gpus,
        listed: Listed::Slurm {
            cuda,
            step_gpus: step,
        },
    }))
}

/// True when `gpus` is `0..n-1` and one of the lists Slurm sets beside it
/// (`ROCR_VISIBLE_DEVICES`, `GPU_DEVICE_ORDINAL`, `ZE_AFFINITY_MASK`) reads
/// the same: Slurm renumbers them all together under device constraint,
/// while a stray export of the user's is, in practice, one variable. A
/// renumbered list that Slurm sets alone (gres.conf `Flags=nvidia_gpu_env`)
/// is left to NVML, which under device constraint sees the step's GPUs only.
pub(super) fn renumbered_by_slurm(
    gpus: &[String],
    count: usize,
    cuda: &str,
    vars: &Snapshot,
) -> bool {
    let renumbered =
        gpus.len() == count && gpus.iter().cloned().eq((0..count).map(|i| i.to_string()));
    renumbered
        && OTHER_LISTS
            .iter()
            .any(|&list| vars.value(list).is_some_and(|v| v.trim() == cuda.trim()))
}

/// Slurm's list as gres.conf `Flags=env_uuid` (26.05) writes it: the GPUs'
/// UUIDs in `CUDA_VISIBLE_DEVICES`, beside `SLURM_STEP_GPUS`'s indices.
/// The environment cannot tell it from a UUID list the user exported on a
/// `no_gpu_env` node, so the node decides ([`UuidList::confirmed_by`]).
pub(super) struct UuidList {
    cuda: String,
    gpus: Vec<String>,
    /// Slurm's indices: device minors.
    pub(crate) step: Vec<String>,
}

impl UuidList {
    /// Slurm's list, where `granted` (the UUIDs of the GPUs whose device
    /// minors are Slurm's indices, from the driver's files or NVML) holds
    /// exactly its UUIDs and `SLURM_GPUS_ON_NODE` counts them.
    pub(super) fn confirmed_by(&self, vars: &Snapshot, granted: &[String]) -> Option<StepGpus> {
        let count = gpus_on_node(vars);
        if count != Some(self.gpus.len()) {
            return None;
        }
        let mut listed = self.gpus.clone();
        listed.sort_unstable();
        let mut granted = granted.to_vec();
        granted.sort_unstable();
        (listed == granted).then(|| StepGpus {
            gpus: self.gpus.clone(),
            listed: Listed::Slurm {
                cuda: self.cuda.clone(),
                step_gpus: self.step.clone(),
            },
        })
    }
}

impl NotSlurms {
    /// A list of UUIDs beside Slurm's own list of as many indices, as
    /// Slurm writes them under `Flags=env_uuid`.
    pub(super) fn uuids_beside_indices(&self) -> Option<UuidList> {
        let NotSlurms::Disagrees { cuda, step } = self else {
            return None;
        };
        let gpus = parse_gpu_list(cuda).ok()?;
        let step = parse_gpu_list(step).ok()?;
        let uuids = gpus.iter().all(|g| is_uuid(g));
        let indices = step.iter().all(|s| s.parse::<usize>().is_ok());
        (uuids && indices && gpus.len() == step.len()).then(|| UuidList {
            cuda: cuda.clone(),
            gpus,
            step,
        })
    }
}

/// Slurm's count of the step's GPUs on this node, where it is a number.
fn gpus_on_node(vars: &Snapshot) -> Option<usize> {
    vars.number(Var::GpusOnNode)?.ok()
}

/// The GPU list from NVML, where Slurm names no list it set itself. Used
/// only when Slurm's count proves NVML's list is the step's, or where the
/// site declared that Slurm tracks no GPUs (`untracked=whole-node`).
/// `not_slurms` says why the step's list was not Slurm's.
pub(super) fn from_nvml(
    config: &Config,
    not_slurms: Box<NotSlurms>,
    vars: &Snapshot,
    nvml: &mut dyn FnMut(&Config) -> Result<Vec<String>, Error>,
) -> Sourced {
    let count = match vars.number(Var::GpusOnNode) {
        Some(Ok(0)) => return Err(Missing::NoGpus(no_gpus(vars))),
        Some(Ok(count)) => Some(count),
        Some(Err(bad)) => return Err(Missing::Failed(WhyNoList::BadCount(bad.value))),
        None if config.untracked == Untracked::WholeNode => None,
        None => return Err(Missing::NoGpus(no_gpus(vars))),
    };
    // Without a count from Slurm, no answer from NVML just means no GPUs.
    let fail = |why: WhyNoList| match count {
        Some(_) => Missing::Failed(why),
        None => Missing::NoGpus(why),
    };
    if config.nvml == NvmlSource::Off {
        return Err(fail(WhyNoList::NvmlOff(not_slurms)));
    }
    let uuids = nvml(config).map_err(|e| fail(WhyNoList::Nvml(not_slurms, e)))?;
    check_list(&uuids).map_err(|e| fail(WhyNoList::BadNvmlList(e)))?;
    match count {
        _ if uuids.is_empty() => Err(fail(WhyNoList::NvmlFindsNone)),
        Some(count) if count != uuids.len() => Err(fail(WhyNoList::NvmlCountMismatch {
            found: uuids.len(),
            count,
        })),
        // A CUDA_VISIBLE_DEVICES the step has is the user's, and each
        // task's is overwritten.
        _ => Ok(StepGpus {
            gpus: uuids,
            listed: Listed::Nvml {
                exported: vars.cuda.clone(),
            },
        }),
    }
}

/// The step has no GPUs here; a list it has is not Slurm's.
fn no_gpus(vars: &Snapshot) -> WhyNoList {
    WhyNoList::NoGpus {
        inherited: vars.cuda.clone(),
    }
}

/// The other GPU lists in the step's environment (`ROCR_VISIBLE_DEVICES`,
/// `GPU_DEVICE_ORDINAL`, `ZE_AFFINITY_MASK`), told apart by who set them.
#[derive(Debug, Default)]
pub(super) struct OtherLists {
    /// Those Slurm set, each with its entries.
    pub(crate) slurms: Vec<(&'static str, Vec<String>)>,
    /// Those the user exported: left as is, and never narrowed.
    pub(crate) users: Vec<Var>,
    /// A note for each of the user's, reported with `verbose`.
    pub(crate) notes: Vec<String>,
}

/// Sorts the other GPU lists. Slurm writes the one list it builds into
/// every variable gres.conf's flags name (`CUDA_VISIBLE_DEVICES` among
/// them; measured on 22.05 to 26.05), so a list is Slurm's only where
/// `cuda`, Slurm's `CUDA_VISIBLE_DEVICES`, exists and it reads the same.
/// Any other survived from the user's environment: on nodes whose gres.conf
/// names `Flags=no_gpu_env` (`cuda` is `None`: NVML listed the GPUs) or
/// leaves that variable out.
pub(super) fn other_lists(vars: &Snapshot, cuda: Option<&[String]>) -> OtherLists {
    let mut lists = OtherLists::default();
    for list in OTHER_LISTS {
        let Some(value) = vars.value(list).map(String::from) else {
            continue;
        };
        let name = list.name();
        let why = match (cuda, parse_gpu_list(&value)) {
            (None, _) => "Slurm set no GPU list for this step".to_string(),
            (Some(cuda), Ok(list)) if list == cuda => {
                lists.slurms.push((name, list));
                continue;
            }
            (Some(_), Ok(_)) => format!("it differs from {}, so Slurm did not set it", env::CUDA),
            (Some(_), Err(e)) => format!("{e}, so Slurm did not set it"),
        };
        lists.users.push(list);
        lists.notes.push(format!(
            "{name}={} left as the user's: {why}",
            quote(&value)
        ));
    }
    // Slurm never sets HIP's own list: one in the step is the user's.
    if let Some(value) = vars.hip.clone() {
        lists.users.push(Var::Hip);
        lists.notes.push(format!(
            "{}={} left as the user's: Slurm never sets it",
            env::HIP,
            quote(&value)
        ));
    }
    lists
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::NvmlFailure;
    use crate::method::Method;
    use crate::settings::config::{Config, NvmlSource};
    use crate::settings::option::Choice;
    use crate::settings::site::parse_args;
    use crate::step::testing::*;
    use crate::step::*;

    #[test]
    fn inherited_or_odd_lists_are_not_trusted() {
        let c = Choice::Map(Method::Contiguous);
        let why = unlisted(plan(&[("CUDA_VISIBLE_DEVICES", "0,1")]));
        assert_eq!(why, gpus_none(Some("0,1")));
        assert_eq!(
            why.to_string(),
            "no GPUs are allocated to this step on this node \
             (CUDA_VISIBLE_DEVICES=\"0,1\" was inherited, not set by Slurm)"
        );
        // A list that is no list cannot be Slurm's, which is always
        // SLURM_STEP_GPUS's text or 0..n-1: NVML decides, and the user's
        // value is kept to tell it from Slurm's per-task binding.
        for cuda in ["", "NoDevFiles", "0,0", "0,,1"] {
            let pairs = [
                ("CUDA_VISIBLE_DEVICES", cuda),
                ("SLURM_GPUS_ON_NODE", "1"),
                ("SLURM_STEP_GPUS", "0"),
            ];
            let (p, calls) = plan_with(&Config::default(), c, &pairs, Ok(uuids(1)));
            let map = mapped(p);
            assert_eq!((map.gpus, calls), (uuids(1), 1), "{cuda:?}");
            let exported = Some(cuda.to_string());
            assert_eq!(map.listed, Listed::Nvml { exported });
        }
        let why = unlisted(plan(&[
            ("CUDA_VISIBLE_DEVICES", "0,1"),
            ("SLURM_GPUS_ON_NODE", "4"),
            ("SLURM_STEP_GPUS", "0,1"),
        ]));
        let want = WhyNoList::CountMismatch {
            cuda: "0,1".to_string(),
            listed: 2,
            count: 4,
        };
        assert_eq!(why, want);
        assert_eq!(
            why.to_string(),
            "CUDA_VISIBLE_DEVICES=\"0,1\" lists 2 GPUs but SLURM_GPUS_ON_NODE=4"
        );
        assert_eq!(unlisted(plan(&[])), gpus_none(None));
        let why = unlisted(plan(&[("SLURM_GPUS_ON_NODE", "two")]));
        assert_eq!(why, WhyNoList::BadCount("two".to_string()));
    }

    #[test]
    fn other_lists_count_only_where_they_read_as_slurms_list() {
        // Slurm writes one list into every variable it sets: one that reads
        // otherwise was exported by the user (a gres.conf Flags= left that
        // variable to the user's environment).
        let slurm = [
            ("CUDA_VISIBLE_DEVICES", "0,1"),
            ("SLURM_GPUS_ON_NODE", "2"),
            ("SLURM_STEP_GPUS", "0,1"),
        ];
        for (ze, why) in [
            (
                "0",
                "it differs from CUDA_VISIBLE_DEVICES, so Slurm did not set it",
            ),
            (
                "7,9",
                "it differs from CUDA_VISIBLE_DEVICES, so Slurm did not set it",
            ),
            (
                "1,0",
                "it differs from CUDA_VISIBLE_DEVICES, so Slurm did not set it",
            ),
            (
                "0,0",
                "GPU list \"0,0\" names \"0\" twice, so Slurm did not set it",
            ),
        ] {
            let map = mapped(plan(
                &[slurm.as_slice(), &[("ZE_AFFINITY_MASK", ze)]].concat(),
            ));
            assert!(map.others.is_empty(), "{ze}");
            let note = format!("ZE_AFFINITY_MASK=\"{ze}\" left as the user's: {why}");
            assert!(map.notes.contains(&note), "{:?}", map.notes);
            let out = map_task(&map, &task(1, 2, Some("0,1")));
            assert_eq!(get(&out, "ZE_AFFINITY_MASK"), None);
        }
        // The same list, spelt alike or not, is Slurm's.
        for ze in ["0,1", " 0,1 "] {
            let map = mapped(plan(
                &[slurm.as_slice(), &[("ZE_AFFINITY_MASK", ze)]].concat(),
            ));
            assert_eq!(
                map.others,
                [("ZE_AFFINITY_MASK", vec!["0".to_string(), "1".to_string()])]
            );
        }
        // Where NVML listed the GPUs, Slurm set no list at all.
        let pairs = [
            ("SLURM_GPUS_ON_NODE", "2"),
            ("ROCR_VISIBLE_DEVICES", "7,9"),
            ("GPU_DEVICE_ORDINAL", "0,1"),
        ];
        let (p, _) = plan_with(
            &Config::default(),
            Choice::Map(Method::Contiguous),
            &pairs,
            Ok(uuids(2)),
        );
        let map = mapped(p);
        assert!(map.others.is_empty(), "{:?}", map.others);
        for name in ["ROCR_VISIBLE_DEVICES=\"7,9\"", "GPU_DEVICE_ORDINAL=\"0,1\""] {
            let note = format!("{name} left as the user's: Slurm set no GPU list for this step");
            assert!(map.notes.contains(&note), "{:?}", map.notes);
        }
    }

    #[test]
    fn nvml_is_used_only_when_its_count_matches() {
        let config = Config::default();
        let c = Choice::Map(Method::RoundRobin);
        let (p, calls) = plan_with(&config, c, &[("SLURM_GPUS_ON_NODE", "4")], Ok(uuids(4)));
        let map = mapped(p);
        assert_eq!(calls, 1);
        assert!(!map.listed.is_slurms());
        let out = map_task(&map, &task(5, 8, None));
        assert_eq!(get(&out, "CUDA_VISIBLE_DEVICES"), Some("GPU-fake-n1-1"));

        let (p, _) = plan_with(&config, c, &[("SLURM_GPUS_ON_NODE", "4")], Ok(uuids(2)));
        let why = unlisted(p);
        assert_eq!(why, WhyNoList::NvmlCountMismatch { found: 2, count: 4 });
        assert_eq!(
            why.to_string(),
            "NVML finds 2 GPUs but SLURM_GPUS_ON_NODE=4, so the step's GPUs cannot be told apart"
        );
        let (p, _) = plan_with(
            &config,
            c,
            &[("SLURM_GPUS_ON_NODE", "4")],
            Err(Error::Discovery {
                kind: NvmlFailure::Init,
                why: "NVML: init failed".into(),
            }),
        );
        let failed = Error::Discovery {
            kind: NvmlFailure::Init,
            why: "NVML: init failed".into(),
        };
        let why = unlisted(p);
        assert_eq!(why, WhyNoList::Nvml(Box::new(NotSlurms::Unset), failed));
        assert_eq!(
            why.to_string(),
            "Slurm set no CUDA_VISIBLE_DEVICES, and NVML: init failed"
        );
        let (p, calls) = plan_with(&config, c, &[("SLURM_GPUS_ON_NODE", "0")], Ok(uuids(4)));
        assert_eq!(unlisted(p), gpus_none(None));
        assert_eq!(calls, 0);
        let (p, calls) = plan_with(&config, c, &[], Ok(uuids(4)));
        assert_eq!(unlisted(p), gpus_none(None));
        assert_eq!(
            calls, 0,
            "no count and not the whole node: NVML is not even loaded"
        );

        let off = Config {
            nvml: NvmlSource::Off,
            ..Config::default()
        };
        let (p, calls) = plan_with(&off, c, &[("SLURM_GPUS_ON_NODE", "4")], Ok(uuids(4)));
        assert_eq!(unlisted(p), WhyNoList::NvmlOff(Box::new(NotSlurms::Unset)));
        assert_eq!(calls, 0);
    }

    #[test]
    fn without_a_count_nvml_is_used_only_where_the_site_opts_in() {
        let c = Choice::Map(Method::Contiguous);
        // A CPU-only step beside a working NVML: no GPUs, NVML not even loaded.
        let (p, calls) = plan_with(&Config::default(), c, &[], Ok(uuids(4)));
        assert_eq!(unlisted(p), gpus_none(None));
        assert_eq!(calls, 0);
        // Not asked (a site default): silent.
        let site = parse_args(&["default=contiguous"]).unwrap();
        let (p, calls) = plan_req(&site, None, &[], Ok(uuids(4)));
        quiet(p);
        assert_eq!(calls, 0);
        // untracked=whole-node: every GPU NVML finds.
        let whole = parse_args(&["untracked=whole-node"]).unwrap();
        let (p, calls) = plan_with(&whole, c, &[], Ok(uuids(2)));
        assert_eq!(mapped(p).gpus, uuids(2));
        assert_eq!(calls, 1);
        // ... and on a node without NVML, silence unless asked.
        let whole_default = parse_args(&["untracked=whole-node", "default=contiguous"]).unwrap();
        let (p, _) = plan_req(
            &whole_default,
            None,
            &[],
            Err(Error::Discovery {
                kind: NvmlFailure::Init,
                why: "NVML: no library".into(),
            }),
        );
        quiet(p);
        let no_library = Error::Discovery {
            kind: NvmlFailure::Init,
            why: "NVML: no library".into(),
        };
        let (p, _) = plan_with(&whole, c, &[], Err(no_library.clone()));
        assert_eq!(
            unlisted(p),
            WhyNoList::Nvml(Box::new(NotSlurms::Unset), no_library)
        );
        // A count of zero is no GPUs, whatever the site says.
        let (p, calls) = plan_with(&whole, c, &[("SLURM_GPUS_ON_NODE", "0")], Ok(uuids(2)));
        assert_eq!(unlisted(p), gpus_none(None));
        assert_eq!(calls, 0);
    }

    #[test]
    fn nvml_lists_are_checked_like_slurm_lists() {
        let c = Choice::Map(Method::Contiguous);
        let config = Config::default();
        let count = [("SLURM_GPUS_ON_NODE", "2")];
        for bad in [
            vec!["GPU-x,100".to_string(), "GPU-y".to_string()],
            vec!["GPU-a".to_string(), "GPU-a".to_string()],
        ] {
            let (p, _) = plan_with(&config, c, &count, Ok(bad.clone()));
            let why = unlisted(p);
            assert!(matches!(why, WhyNoList::BadNvmlList(_)), "{why:?}");
        }
    }

    #[test]
    fn a_list_the_user_exported_on_a_no_gpu_env_node_is_not_trusted() {
        let c = Choice::Map(Method::Contiguous);
        let config = Config::default();
        // Flags=no_gpu_env: Slurm sets only the count and its own list; the
        // user's CUDA_VISIBLE_DEVICES survives (measured on 22.05). The step
        // has GPUs 2,3; the user's list names others.
        for user in ["0,1,2,3", "3,2", "1,2", "0"] {
            let pairs = [
                ("SLURM_GPUS_ON_NODE", "2"),
                ("SLURM_STEP_GPUS", "2,3"),
                ("CUDA_VISIBLE_DEVICES", user),
            ];
            let (p, calls) = plan_with(&config, c, &pairs, Ok(uuids(2)));
            assert_eq!(calls, 1, "{user}: NVML, not the user's list");
            assert_eq!(mapped(p).gpus, uuids(2), "{user}");
        }
        // Slurm's list and a matching CUDA list exported into a step without a
        // count from Slurm (Slurm removes the user's count): no GPUs.
        let pairs = [("SLURM_STEP_GPUS", "0,1"), ("CUDA_VISIBLE_DEVICES", "0,1")];
        let (p, calls) = plan_with(&config, c, &pairs, Ok(uuids(2)));
        assert_eq!(unlisted(p), gpus_none(Some("0,1")));
        assert_eq!(calls, 0);
        // Without Slurm's own list, a list is never Slurm's.
        let pairs = [("SLURM_GPUS_ON_NODE", "2"), ("CUDA_VISIBLE_DEVICES", "0,1")];
        let (p, calls) = plan_with(&config, c, &pairs, Ok(uuids(2)));
        assert_eq!((mapped(p).gpus, calls), (uuids(2), 1));
        // 0..n-1 alone is not Slurm's renumbering: the user's 0 on a step
        // granted GPU 1 (the cluster test's case).
        let pairs = [
            ("SLURM_GPUS_ON_NODE", "1"),
            ("SLURM_STEP_GPUS", "1"),
            ("CUDA_VISIBLE_DEVICES", "0"),
        ];
        let (p, calls) = plan_with(&config, c, &pairs, Ok(uuids(1)));
        assert_eq!((mapped(p).gpus, calls), (uuids(1), 1));
        // A list that agrees with Slurm's is Slurm's, and so is 0..n-1 with
        // Slurm's companion list renumbered alike, as under cgroup device
        // constraint.
        for (cuda, rocr) in [("2,3", "2,3"), ("2,3", "x"), ("0,1", "0,1")] {
            let pairs = [
                ("SLURM_GPUS_ON_NODE", "2"),
                ("SLURM_STEP_GPUS", "2,3"),
                ("CUDA_VISIBLE_DEVICES", cuda),
                ("ROCR_VISIBLE_DEVICES", rocr),
            ];
            let (p, calls) = plan_with(&config, c, &pairs, Ok(uuids(2)));
            let map = mapped(p);
            assert_eq!(calls, 0, "{cuda}");
            assert!(map.listed.is_slurms(), "{cuda}");
            assert_eq!(map.listed.step_cuda(), Some(cuda));
        }
    }

    #[test]
    fn nvml_failures_say_why_the_steps_list_is_not_slurms() {
        // Each reason, in the words both front ends print (the plugin's
        // line and exec's), NVML failing after it.
        let c = Choice::Map(Method::Contiguous);
        let failed = Error::Discovery {
            kind: NvmlFailure::Init,
            why: "NVML: init failed".into(),
        };
        let forged = (0..2000)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let grant = [("SLURM_GPUS_ON_NODE", "2"), ("SLURM_STEP_GPUS", "0,1")];
        for (pairs, why, said) in [
            (
                vec![("CUDA_VISIBLE_DEVICES", "0,1,2,3")],
                NotSlurms::Disagrees {
                    cuda: "0,1,2,3".to_string(),
                    step: "0,1".to_string(),
                },
                "CUDA_VISIBLE_DEVICES=\"0,1,2,3\" disagrees with Slurm's grant \
                 (SLURM_STEP_GPUS=\"0,1\"), so it is not Slurm's",
            ),
            (
                vec![("CUDA_VISIBLE_DEVICES", "0,0")],
                NotSlurms::NotAList(Box::new(parse_gpu_list("0,0").unwrap_err())),
                "CUDA_VISIBLE_DEVICES is not Slurm's: GPU list \"0,0\" names \"0\" twice",
            ),
            (
                vec![("CUDA_VISIBLE_DEVICES", forged.as_str())],
                NotSlurms::NotAList(Box::new(parse_gpu_list(&forged).unwrap_err())),
                "has 2000 entries, more than the 1024 any node holds",
            ),
            (
                vec![],
                NotSlurms::Unset,
                "Slurm set no CUDA_VISIBLE_DEVICES",
            ),
        ] {
            let all = [&grant[..], &pairs].concat();
            let (p, calls) = plan_with(&Config::default(), c, &all, Err(failed.clone()));
            assert_eq!(calls, 1);
            let got = unlisted(p);
            assert_eq!(got, WhyNoList::Nvml(Box::new(why.clone()), failed.clone()));
            let text = got.to_string();
            assert!(text.contains(said), "{text}");
            assert!(text.ends_with(", and NVML: init failed"), "{text}");
            let off = Config {
                nvml: NvmlSource::Off,
                ..Config::default()
            };
            let (p, _) = plan_with(&off, c, &all, Ok(uuids(2)));
            let text = unlisted(p).to_string();
            assert!(text.contains(said), "{text}");
            assert!(
                text.ends_with(", and NVML discovery is off (nvml=off)"),
                "{text}"
            );
        }
        // Without Slurm's own list, or with one that is no list.
        let pairs = [("SLURM_GPUS_ON_NODE", "2"), ("CUDA_VISIBLE_DEVICES", "0,1")];
        let (p, _) = plan_with(&Config::default(), c, &pairs, Err(failed.clone()));
        assert_eq!(
            unlisted(p).to_string(),
            "CUDA_VISIBLE_DEVICES=\"0,1\" is not Slurm's: SLURM_STEP_GPUS, Slurm's own list, \
             is not set, and NVML: init failed"
        );
        let pairs = [
            ("SLURM_GPUS_ON_NODE", "2"),
            ("SLURM_STEP_GPUS", ""),
            ("CUDA_VISIBLE_DEVICES", "0,1"),
        ];
        let (p, _) = plan_with(&Config::default(), c, &pairs, Err(failed.clone()));
        assert_eq!(
            unlisted(p).to_string(),
            "CUDA_VISIBLE_DEVICES=\"0,1\" cannot be checked against Slurm's own list \
             (SLURM_STEP_GPUS: GPU list \"\" is empty), and NVML: init failed"
        );
        // No count from Slurm, where the site has NVML list every GPU.
        let whole = parse_args(&["untracked=whole-node"]).unwrap();
        let pairs = [("SLURM_STEP_GPUS", "0,1"), ("CUDA_VISIBLE_DEVICES", "0,1")];
        let (p, _) = plan_with(&whole, c, &pairs, Err(failed));
        assert_eq!(
            unlisted(p).to_string(),
            "CUDA_VISIBLE_DEVICES=\"0,1\" is not Slurm's: Slurm gives this step no GPU count \
             (SLURM_GPUS_ON_NODE), and NVML: init failed"
        );
    }
}
