//! A Flux job on one node, for the Flux shell plugin (`flux/`): the GPUs
//! the job was given, as the job's tasks must name them, and who binds
//! them where the user also gave Flux's own `gpu-affinity`. Plain data in,
//! plain data out; the plugin gathers the facts from the shell.

use crate::env;
use crate::error::{option_value, Error};
use crate::grant::Grant;
use crate::settings::option::OPTION;
use crate::slurm::gpus::parse_gpu_list;
use crate::text::quote;
use crate::topology::nvml_uuids;
use std::fmt;

/// A Flux job's grant, as the core speaks of it: the GPUs its R gives it.
pub static GRANT: Grant = Grant {
    giver: "R",
    holder: "this Flux job",
    noun: "job",
    source: "flux",
    cpu_hint: "give the job CPUs near its GPUs; Flux's cpu-affinity binds them unless -o \
               cpu-affinity=off",
    settings: "the plugin's conf",
};

/// Flux's own GPU binding, the shell option of its builtin `gpu-affinity`
/// plugin (`src/shell/gpubind.c`).
pub const AFFINITY: &str = "gpu-affinity";

/// The tag a mapped Flux job's tasks carry in `DESI_GPU_MAP_STEP`, which
/// also names its MPS directory: `flux-JOBID.INSTANCE`, the job id in
/// decimal and the instance that runs it, as 8 hex digits of a hash of
/// its `FLUX_URI` (`uri`, which the job shell hands its tasks). Job ids
/// start afresh in each instance, so a job of an instance nested in a
/// mapped job may share that job's id: never its instance.
pub fn tag(jobid: u64, uri: Option<&str>) -> String {
    format!("flux-{jobid}.{:08x}", fnv1a(uri.unwrap_or_default()))
}

/// The 32-bit FNV-1a hash: short, stable across builds and machines.
fn fnv1a(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    })
}

/// The user's `-o desi-gpu-map` value refused, or the site's settings
/// beside it (the core's [`Error`], as `--desi-gpu-map`'s would be), in
/// Flux's words: the option as Flux spells it, the site's settings in the
/// plugin's `conf` table.
pub struct OptionError<'a>(pub &'a Error);

impl fmt::Display for OptionError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let option = format!("-o {OPTION}");
        match self.0 {
            Error::BadOption { value, valid } => write!(
                f,
                "invalid {option} value {}; valid values: {valid}",
                option_value(value)
            ),
            Error::BadCombination { value, why } => write!(
                f,
                "invalid {option} value {}: {why}; give a method with mps, as in \
                 {option}=contiguous,mps",
                quote(value)
            ),
            Error::MpsOff => write!(
                f,
                "{option}: this site turned mps off (mps=off in the plugin's conf); give the \
                 method alone, as in {option}=contiguous"
            ),
            Error::MpsWithoutMethod => write!(
                f,
                "{option}: mps needs a method, and this site's default is none; give one, as \
                 in {option}=contiguous,mps"
            ),
            other => write!(f, "{option}: {other}"),
        }
    }
}

/// A site's `conf` table refused (the core's [`Error`], as its plugstack
/// arguments would be), in Flux's words: each entry as the table writes
/// it, `key = "value"`.
pub struct ConfError<'a>(pub &'a Error);

impl fmt::Display for ConfError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Error::BadArgument { arg, why, valid } => {
                let entry = match arg.split_once('=') {
                    Some((key, value)) => format!("{key} = {}", quote(value)),
                    None => format!("{arg} = true"),
                };
                write!(
                    f,
                    "bad entry {entry}: {why}; valid keys, as key = \"value\" (or verbose = \
                     true): {valid}"
                )
            }
            other => other.fmt(f),
        }
    }
}

/// F58's digits (`src/common/libutil/fluid.c`).
const F58_DIGITS: &str = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";

/// A job id in F58 as the shell writes it outside a UTF-8 locale: `f`
/// then base-58 digits (`ƒQmmV5h` is `fQmmV5h`), at most 13 bytes where
/// the decimal takes up to 20.
pub fn f58(jobid: u64) -> String {
    let digits = F58_DIGITS.as_bytes();
    let mut out = Vec::new();
    let mut rest = jobid;
    loop {
        let at = usize::try_from(rest % 58).unwrap_or_default();
        out.push(char::from(digits.get(at).copied().unwrap_or(b'1')));
        rest /= 58;
        if rest == 0 {
            break;
        }
    }
    std::iter::once('f').chain(out.into_iter().rev()).collect()
}

/// The job id a task's `FLUX_JOB_ID` names (`value`), as the shell writes
/// it (`src/shell/shell.c`, `idf58`): F58, the prefix `ƒ` (`f` outside a
/// UTF-8 locale, or under `FLUX_F58_FORCE_ASCII`) then at most 12 base-58
/// digits (`src/common/libutil/fluid.c`); in decimal where that encoding
/// fails. `None`: neither.
pub fn job_id(value: &str) -> Option<u64> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        return value.parse().ok();
    }
    let digits = value
        .strip_prefix('ƒ')
        .or_else(|| value.strip_prefix('f'))?;
    if digits.is_empty() || digits.len() > 12 {
        return None;
    }
    digits.chars().try_fold(0u64, |id, c| {
        let digit = F58_DIGITS.find(c)?;
        id.checked_mul(58)?.checked_add(u64::try_from(digit).ok()?)
    })
}

/// Where the instance's R came from, as the `resource-define` event of
/// its `resource.eventlog` says (`method`): its own (a configured R, or
/// one discovered on its nodes) numbers a node's GPUs by their place in
/// the broker's list; an R inherited from the enclosing job (`job-info`:
/// `flux batch`, `flux alloc`, a job that runs `flux start`) keeps the
/// enclosing instance's ids, which flux-core never renumbers
/// (`librlist`'s `noremap` holds `gpu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Configured or discovered: R's GPU `i` is the broker's `i`-th.
    Own,
    /// Inherited from the enclosing job: R's ids are that job's.
    Inherited,
}

impl Origin {
    /// The origin a `resource-define` method names.
    pub fn of_method(method: &str) -> Origin {
        match method {
            "job-info" => Origin::Inherited,
            _ => Origin::Own,
        }
    }
}

/// The grant of the broker a job shell runs under, as its own environment
/// holds it: what Slurm, or a binding above it, gave that broker.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrokerVars {
    /// Its `CUDA_VISIBLE_DEVICES`.
    pub list: Option<String>,
    /// Its `SLURM_STEP_GPUS`, where it runs in a Slurm step.
    pub step_gpus: Option<String>,
    /// Its `DESI_GPU_MAP_GPUS`, where this plugin mapped it as a task of an
    /// enclosing Flux job.
    pub held: Option<String>,
    /// Beside it, that job's ids of those GPUs (`DESI_GPU_MAP_FLUX_IDS`).
    pub held_ids: Option<String>,
}

impl BrokerVars {
    /// Reads the grant from an environment, through `var`, the front end's
    /// way to read one variable by its name: the one place its names meet
    /// these fields, as [`crate::snapshot::Snapshot::read`] is the step's.
    pub fn read(var: impl Fn(&str) -> Option<String>) -> BrokerVars {
        BrokerVars {
            list: var(env::CUDA),
            step_gpus: var(env::STEP_GPUS),
            held: var(env::TASK_GPUS),
            held_ids: var(env::FLUX_IDS),
        }
    }

    fn is_empty(&self) -> bool {
        self.list.is_none() && self.step_gpus.is_none()
    }
}

/// What a job shell knows of its broker's grant. flux-core's job-exec
/// starts every node's shell with rank 0's environment
/// (`src/modules/job-exec/exec_cmd.c`), so a shell reads its own broker's
/// from that broker (`own`); `inherited` is its own environment, rank 0's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerGrant {
    /// The node's own broker's, or why it could not be read.
    pub own: Result<BrokerVars, String>,
    /// The shell's own environment: the instance's rank 0 broker's.
    pub inherited: BrokerVars,
    /// Where the instance's R came from, where it could be read.
    pub origin: Result<Origin, String>,
}

/// Why the job's GPUs on this node cannot be named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadGrant {
    /// R's GPU ids on this node are no id set.
    BadIds {
        /// The ids as R gives them.
        ids: String,
    },
    /// The broker's own list is unreadable.
    BadBrokerList {
        /// The broker's `CUDA_VISIBLE_DEVICES`.
        value: String,
        /// Why it is unreadable.
        why: String,
    },
    /// R gives the job a GPU the broker was not given.
    Beyond {
        /// Flux's id of the GPU.
        id: usize,
        /// The broker's `CUDA_VISIBLE_DEVICES`.
        value: String,
    },
    /// An R inherited from the enclosing job names a GPU by an id this
    /// node's broker holds under no name it can tell.
    NotHeld {
        /// The enclosing job's id of the GPU.
        id: usize,
        /// The broker's `CUDA_VISIBLE_DEVICES`.
        value: String,
    },
    /// The instance runs under a grant (rank 0's broker holds a list), and
    /// this node's broker's own could not be read.
    UnknownBroker {
        /// Why it could not be read.
        why: String,
    },
    /// The broker holds a list, and where the instance's R came from could
    /// not be read.
    UnknownOrigin {
        /// Why it could not be read.
        why: String,
    },
}

impl fmt::Display for BadGrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadGrant::BadIds { ids } => write!(
                f,
                "R's GPU ids on this node, {}, are no id set (valid: 0-3,5)",
                quote(ids)
            ),
            BadGrant::BadBrokerList { value, why } => write!(
                f,
                "the Flux broker's own CUDA_VISIBLE_DEVICES={} is unreadable ({why}), so the \
                 GPUs it was given are unknown",
                quote(value)
            ),
            BadGrant::Beyond { id, value } => {
                let count = value.split(',').count();
                write!(
                    f,
                    "R gives the job GPU {id}, but the Flux broker on this node was given \
                     {count} GPU{} (CUDA_VISIBLE_DEVICES={}): Flux's GPU i is the i-th of \
                     those, 0 to {}; fix the instance's resource configuration (R) to the \
                     GPUs the broker holds",
                    if count == 1 { "" } else { "s" },
                    quote(value),
                    count.saturating_sub(1)
                )
            }
            BadGrant::NotHeld { id, value } => write!(
                f,
                "this instance's R, inherited from the job that runs it, gives the job GPU \
                 {id}, and the Flux broker on this node holds CUDA_VISIBLE_DEVICES={}, which \
                 names no GPU {id}: the enclosing job's binding renamed its GPUs; map the \
                 enclosing job with -o {OPTION} (its tasks then record the names), or give it \
                 -o {AFFINITY}=on",
                quote(value)
            ),
            BadGrant::UnknownBroker { why } => write!(
                f,
                "this instance runs under a grant of GPUs (its first broker holds a \
                 CUDA_VISIBLE_DEVICES), and the grant of the broker on this node cannot be \
                 read ({why}): the GPUs this node was given are unknown, so no task is mapped"
            ),
            BadGrant::UnknownOrigin { why } => write!(
                f,
                "the Flux broker on this node holds a list of GPUs, and where this \
                 instance's R came from cannot be read ({why}), so R's ids cannot be told \
                 from places in that list"
            ),
        }
    }
}

/// The job's GPUs on this node: as its tasks name them, and by absolute
/// index on the node where that is known (for naming them by UUID).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobGpus {
    /// R's ids of them, in order.
    pub ids: Vec<usize>,
    /// As its tasks name them, in the same order.
    pub list: Vec<String>,
    /// By absolute index on the node, where known.
    pub absolute: Option<Vec<String>>,
}

impl JobGpus {
    /// No GPU.
    pub fn none() -> JobGpus {
        JobGpus {
            ids: Vec::new(),
            list: Vec::new(),
            absolute: None,
        }
    }

    /// R's ids of the GPUs a task holds (`held`: its `DESI_GPU_MAP_GPUS`,
    /// named as the job's list names them, in its order), for the record
    /// an instance nested in the task reads (`DESI_GPU_MAP_FLUX_IDS`);
    /// `None` where one is not the job's.
    pub fn ids_of(&self, held: &str) -> Option<String> {
        let ids: Option<Vec<String>> = held
            .split(',')
            .map(|name| {
                let at = self.list.iter().position(|n| n == name)?;
                self.ids.get(at).map(usize::to_string)
            })
            .collect();
        ids.map(|ids| ids.join(","))
    }
}

/// The GPUs R gives the job on this node (`ids`, an id set such as `0-3`;
/// `None`: none), as its tasks must name them, through the grant of the
/// node's own broker (`grant`).
///
/// - A broker without a list of its own: Flux's ids are the node's.
/// - An R of the instance's own (configured or discovered): Flux's GPU `i`
///   is the `i`-th GPU of the broker's list (indices or UUIDs), as Slurm
///   or a binding above it set it.
/// - An R inherited from the enclosing job: its ids are that job's. Where
///   this plugin mapped the broker as that job's task, its record names
///   them (`DESI_GPU_MAP_FLUX_IDS` beside `DESI_GPU_MAP_GPUS`); else the
///   binding above was Flux's own, which names each GPU by its id.
///
/// A GPU the broker holds under no name it can tell is refused, never
/// guessed; so is a node whose broker's grant cannot be read while the
/// instance runs under one.
pub fn job_gpus(ids: Option<&str>, grant: &BrokerGrant) -> Result<JobGpus, BadGrant> {
    let ids = match ids.map(str::trim) {
        None | Some("") => Vec::new(),
        Some(ids) => parse_ids(ids)?,
    };
    let broker = match &grant.own {
        Ok(own) => own.clone(),
        // No broker of the instance was started under a grant (rank 0's
        // holds none): a system instance's, whose shells cannot read it.
        Err(_) if grant.inherited.is_empty() => BrokerVars::default(),
        Err(why) => return Err(BadGrant::UnknownBroker { why: why.clone() }),
    };
    let Some(value) = broker.list.as_deref() else {
        let list: Vec<String> = ids.iter().map(usize::to_string).collect();
        return Ok(JobGpus {
            ids,
            absolute: Some(list.clone()),
            list,
        });
    };
    let given = parse_gpu_list(value).map_err(|e| BadGrant::BadBrokerList {
        value: value.to_string(),
        why: e.to_string(),
    })?;
    let origin = grant
        .origin
        .clone()
        .map_err(|why| BadGrant::UnknownOrigin { why })?;
    let places = match origin {
        Origin::Own => ids.clone(),
        Origin::Inherited => places_of_inherited(&ids, &given, &broker, value)?,
    };
    let list = through(&places, &given, value)?;
    let step = broker
        .step_gpus
        .as_deref()
        .and_then(|s| parse_gpu_list(s).ok());
    let absolute = step
        .filter(|step| step.len() == given.len())
        .and_then(|step| through(&places, &step, value).ok());
    Ok(JobGpus {
        ids,
        list,
        absolute,
    })
}

/// The places in the broker's list (`given`) of an inherited R's ids: by
/// this plugin's record where it mapped the broker (its held GPUs and their
/// ids, in one order), else by name, as Flux's own binding names them.
fn places_of_inherited(
    ids: &[usize],
    given: &[String],
    broker: &BrokerVars,
    value: &str,
) -> Result<Vec<usize>, BadGrant> {
    let record: Option<Vec<(String, String)>> = broker
        .held
        .as_deref()
        .zip(broker.held_ids.as_deref())
        .map(|(held, held_ids)| {
            held.split(',')
                .map(str::to_string)
                .zip(held_ids.split(',').map(str::to_string))
                .collect()
        });
    ids.iter()
        .map(|&id| {
            let name = match &record {
                Some(record) => record
                    .iter()
                    .find(|(_, of)| of.trim() == id.to_string())
                    .map(|(name, _)| name.clone()),
                None => Some(id.to_string()),
            };
            name.and_then(|name| given.iter().position(|g| *g == name))
                .ok_or_else(|| BadGrant::NotHeld {
                    id,
                    value: value.to_string(),
                })
        })
        .collect()
}

/// Flux's places `places` as the entries of `given` (the broker's list
/// `value`).
fn through(places: &[usize], given: &[String], value: &str) -> Result<Vec<String>, BadGrant> {
    places
        .iter()
        .map(|&id| {
            given.get(id).cloned().ok_or_else(|| BadGrant::Beyond {
                id,
                value: value.to_string(),
            })
        })
        .collect()
}

/// The job's GPUs by UUID, for MPS: located in NVML's place lines
/// (`lines`) by their absolute indices, as a Slurm step's are.
pub fn by_uuid(gpus: &JobGpus, lines: &[String]) -> Result<Vec<String>, String> {
    nvml_uuids(lines, &gpus.list, gpus.absolute.as_deref()).map_err(|e| e.to_string())
}

/// An id set as Flux writes one (`0-3,5`, in order, no repeat).
fn parse_ids(text: &str) -> Result<Vec<usize>, BadGrant> {
    let bad = || BadGrant::BadIds {
        ids: text.to_string(),
    };
    let mut ids: Vec<usize> = Vec::new();
    for part in text.split(',') {
        let (first, last) = part.split_once('-').unwrap_or((part, part));
        let first: usize = first.trim().parse().map_err(|_| bad())?;
        let last: usize = last.trim().parse().map_err(|_| bad())?;
        // Far more than any node holds: a typo, not a GPU.
        if last < first || last >= 4096 || ids.last().is_some_and(|&l| first <= l) {
            return Err(bad());
        }
        ids.extend(first..=last);
    }
    Ok(ids)
}

/// Who binds a Flux job's GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Binder {
    /// The plugin maps the tasks, as it was asked or as the site's default
    /// says; `say`: what it tells the job once (the `gpu-affinity` it
    /// replaces).
    Plugin {
        /// What it tells the job once, if anything.
        say: Option<String>,
    },
    /// Flux's own `gpu-affinity`, which the user asked for by name, over
    /// the site's default: the plugin stands aside, and says so once.
    Flux {
        /// What the plugin tells the job once.
        say: String,
    },
}

/// Who binds where the user gave `-o gpu-affinity=VALUE` (`affinity`) and,
/// or not (`asked`), `-o desi-gpu-map`: the plugin's option, asked by name,
/// wins over Flux's (which it replaces in every task it maps); Flux's,
/// asked by name, wins over the site's default, as the user's own word
/// over the site's.
pub fn who_binds(affinity: Option<&str>, asked: bool) -> Binder {
    match (affinity, asked) {
        (None, _) => Binder::Plugin { say: None },
        (Some(value), true) => Binder::Plugin {
            say: Some(format!(
                "-o {AFFINITY}={} is replaced by -o {}: each mapped task gets the GPUs the \
                 mapping gives it",
                quote(value),
                crate::settings::option::OPTION
            )),
        },
        (Some(value), false) => Binder::Flux {
            say: format!(
                "-o {AFFINITY}={} binds this job's GPUs, over the site's default; give -o {}=METHOD \
                 to map the tasks instead",
                quote(value),
                crate::settings::option::OPTION
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_options_errors_in_fluxs_words() {
        use crate::settings::option::parse_option;
        use crate::settings::site::{check_request, parse_args};
        let said = |value: &str| OptionError(&parse_option(value).unwrap_err()).to_string();
        assert_eq!(
            said("contigous"),
            "invalid -o desi-gpu-map value \"contigous\"; valid values: contiguous, roundrobin \
             (or round-robin), closest, none, help; with \"verbose\" or \"mps\" beside them, \
             comma-separated"
        );
        assert!(said("").starts_with("invalid -o desi-gpu-map value an empty value; "));
        assert_eq!(
            said("none,mps"),
            "invalid -o desi-gpu-map value \"none,mps\": none maps no task, and MPS needs \
             mapped tasks; give a method with mps, as in -o desi-gpu-map=contiguous,mps"
        );
        let checked = |args: &[&str], value: &str| {
            let config = parse_args(args).unwrap();
            let asked = parse_option(value).unwrap();
            OptionError(&check_request(&asked, &config).unwrap_err()).to_string()
        };
        assert_eq!(
            checked(&["mps=off"], "contiguous,mps"),
            "-o desi-gpu-map: this site turned mps off (mps=off in the plugin's conf); give the \
             method alone, as in -o desi-gpu-map=contiguous"
        );
        assert_eq!(
            checked(&[], "mps"),
            "-o desi-gpu-map: mps needs a method, and this site's default is none; give one, \
             as in -o desi-gpu-map=contiguous,mps"
        );
        // Slurm's words stay Slurm's.
        assert!(parse_option("contigous")
            .unwrap_err()
            .to_string()
            .starts_with("invalid --desi-gpu-map value \"contigous\""));
    }

    #[test]
    fn a_sites_conf_refused_in_fluxs_words() {
        use crate::settings::site::parse_args;
        let said = |args: &[&str]| ConfError(&parse_args(args).unwrap_err()).to_string();
        let bad = said(&["default=closests"]);
        assert!(
            bad.starts_with(
                "bad entry default = \"closests\": default must be contiguous, roundrobin, \
                 closest or none, not \"closests\"; valid keys, as key = \"value\" (or verbose = \
                 true): default=contiguous|roundrobin|closest|none, "
            ),
            "{bad}"
        );
        assert!(said(&["bogus=1"]).starts_with("bad entry bogus = \"1\": unknown argument"));
        assert!(!bad.contains("plugstack"), "{bad}");
        // Slurm's words stay Slurm's.
        assert!(parse_args(&["default=closests"])
            .unwrap_err()
            .to_string()
            .starts_with("bad plugstack argument \"default=closests\": "));
    }

    #[test]
    fn a_tasks_job_id_reads_as_the_shell_writes_it() {
        // Measured in flux-core 0.88.0: the shell's info gives the job id
        // 15602810880 and its tasks FLUX_JOB_ID=ƒQmmV5h.
        assert_eq!(job_id("ƒQmmV5h"), Some(15_602_810_880));
        assert_eq!(job_id("fQmmV5h"), Some(15_602_810_880));
        assert_eq!(job_id("15602810880"), Some(15_602_810_880));
        assert_eq!(job_id("ƒ1"), Some(0));
        assert_eq!(job_id("ƒz"), Some(57));
        assert_eq!(job_id("ƒ21"), Some(58));
        for id in [0, 57, 58, 15_602_810_880, u64::MAX] {
            assert_eq!(job_id(&f58(id)), Some(id), "{}", f58(id));
        }
        assert_eq!(f58(15_602_810_880), "fQmmV5h");
        assert_eq!(f58(u64::MAX), "fjpXCZedGfVQ");
        // u64::MAX is ƒjpXCZedGfVQ; one more overflows.
        assert_eq!(job_id("ƒjpXCZedGfVQ"), Some(u64::MAX));
        for bad in [
            "",
            "ƒ",
            "f",
            "ƒ0",
            "ƒl",
            "ƒI",
            "ƒO",
            "ƒjpXCZedGfVR",
            "ƒ1111111111111",
            "x12",
            "0000.0000.0001",
            "-1",
            "18446744073709551616",
        ] {
            assert_eq!(job_id(bad), None, "{bad:?}");
        }
    }

    /// A grant read from the node's own broker, of an instance whose R is
    /// `origin`'s.
    fn own(list: Option<&str>, step: Option<&str>, origin: Origin) -> BrokerGrant {
        BrokerGrant {
            own: Ok(BrokerVars {
                list: list.map(str::to_string),
                step_gpus: step.map(str::to_string),
                ..BrokerVars::default()
            }),
            inherited: BrokerVars::default(),
            origin: Ok(origin),
        }
    }

    #[test]
    fn flux_ids_name_the_brokers_gpus_by_position() {
        let list = |ids, broker| job_gpus(ids, &own(broker, None, Origin::Own)).unwrap().list;
        assert_eq!(list(Some("0-3"), None), ["0", "1", "2", "3"]);
        assert_eq!(list(Some("1,3"), Some("2,3,4,5")), ["3", "5"]);
        assert_eq!(list(Some("0-1"), Some("2,3")), ["2", "3"]);
        assert_eq!(list(Some("1"), Some("GPU-a,GPU-b")), ["GPU-b"]);
        assert_eq!(list(None, Some("2,3")), Vec::<String>::new());
        assert_eq!(list(Some(""), None), Vec::<String>::new());
        assert_eq!(
            job_gpus(Some("1,3"), &own(Some("2,3,4,5"), None, Origin::Own))
                .unwrap()
                .ids,
            [1, 3]
        );
        // Absolute indices: Flux's own without a broker's list; through
        // Slurm's SLURM_STEP_GPUS beside a list it renumbered.
        let abs = |ids, broker, step| {
            job_gpus(ids, &own(broker, step, Origin::Own))
                .unwrap()
                .absolute
        };
        assert_eq!(abs(Some("1"), None, None), Some(vec!["1".to_string()]));
        assert_eq!(
            abs(Some("1"), Some("0,1"), Some("2,3")),
            Some(vec!["3".to_string()])
        );
        assert_eq!(abs(Some("1"), Some("0,1"), None), None);
        assert_eq!(abs(Some("1"), Some("0,1"), Some("2")), None);
    }

    /// Round 7: flux-core starts every node's shell with rank 0's
    /// environment; a node's GPUs are its own broker's, never rank 0's.
    #[test]
    fn each_node_reads_its_own_brokers_grant_not_rank_0s() {
        let rank0 = BrokerVars {
            list: Some("2,3".into()),
            step_gpus: Some("2,3".into()),
            ..BrokerVars::default()
        };
        let second = BrokerVars {
            list: Some("0,1".into()),
            step_gpus: Some("0,1".into()),
            ..BrokerVars::default()
        };
        let grant = BrokerGrant {
            own: Ok(second),
            inherited: rank0.clone(),
            origin: Ok(Origin::Own),
        };
        let gpus = job_gpus(Some("0-1"), &grant).unwrap();
        assert_eq!(gpus.list, ["0", "1"]);
        assert_eq!(gpus.absolute, Some(vec!["0".into(), "1".into()]));
        // Unreadable where the instance runs under a grant: refused.
        let unread = BrokerGrant {
            own: Err("/proc/42/environ: Permission denied".into()),
            inherited: rank0,
            origin: Ok(Origin::Own),
        };
        let e = job_gpus(Some("0-1"), &unread).unwrap_err();
        assert!(matches!(e, BadGrant::UnknownBroker { .. }));
        assert!(
            e.to_string().contains("Permission denied")
                && e.to_string().contains("no task is mapped"),
            "{e}"
        );
        // A system instance, started under no grant, whose guest shells
        // cannot read the broker: R's ids are the node's.
        let system = BrokerGrant {
            own: Err("/proc/42/environ: Permission denied".into()),
            inherited: BrokerVars::default(),
            origin: Err("resource.eventlog: Operation not permitted".into()),
        };
        assert_eq!(job_gpus(Some("1-2"), &system).unwrap().list, ["1", "2"]);
    }

    /// Round 7: an instance nested in a job (`flux batch`, `flux alloc`)
    /// inherits that job's R, ids and all; its brokers hold the GPUs under
    /// the names the enclosing binding gave them.
    #[test]
    fn an_inherited_r_names_gpus_by_the_enclosing_jobs_ids() {
        let inherited = |list| own(Some(list), None, Origin::Inherited);
        // Under Flux's own gpu-affinity, which names each GPU by its id.
        let list = |ids, grant: &BrokerGrant| job_gpus(ids, grant).unwrap().list;
        assert_eq!(list(Some("1"), &inherited("1,2,3")), ["1"]);
        assert_eq!(list(Some("1-3"), &inherited("1,2,3")), ["1", "2", "3"]);
        assert_eq!(list(Some("2-3"), &inherited("2,3")), ["2", "3"]);
        // The same values read as places would be GPU 2, and refused.
        assert_eq!(
            list(Some("1"), &own(Some("1,2,3"), None, Origin::Own)),
            ["2"]
        );
        // Under this plugin's mapping, by its record: the enclosing job's
        // GPUs 0 and 1 were the broker's 2 and 3 (inside Slurm).
        let recorded = BrokerGrant {
            own: Ok(BrokerVars {
                list: Some("2,3".into()),
                held: Some("2,3".into()),
                held_ids: Some("0,1".into()),
                ..BrokerVars::default()
            }),
            inherited: BrokerVars::default(),
            origin: Ok(Origin::Inherited),
        };
        assert_eq!(list(Some("1"), &recorded), ["3"]);
        assert_eq!(list(Some("0-1"), &recorded), ["2", "3"]);
        // Nearest first, as closest lists a share: the record says which.
        let shuffled = BrokerGrant {
            own: Ok(BrokerVars {
                list: Some("1,0".into()),
                held: Some("1,0".into()),
                held_ids: Some("1,0".into()),
                ..BrokerVars::default()
            }),
            ..recorded.clone()
        };
        assert_eq!(list(Some("0"), &shuffled), ["0"]);
        // A GPU the broker holds under no name it can tell: refused.
        let e = job_gpus(Some("0"), &inherited("2,3")).unwrap_err();
        assert_eq!(
            e,
            BadGrant::NotHeld {
                id: 0,
                value: "2,3".into()
            }
        );
        assert!(e.to_string().contains("-o desi-gpu-map"), "{e}");
        assert!(matches!(
            job_gpus(Some("2"), &recorded),
            Err(BadGrant::NotHeld { id: 2, .. })
        ));
        // Where R came from unknown, a broker's list cannot be read.
        let unknown = BrokerGrant {
            origin: Err("resource.eventlog: No such file or directory".into()),
            ..recorded
        };
        assert!(matches!(
            job_gpus(Some("0"), &unknown),
            Err(BadGrant::UnknownOrigin { .. })
        ));
        assert_eq!(Origin::of_method("job-info"), Origin::Inherited);
        assert_eq!(Origin::of_method("configuration"), Origin::Own);
        assert_eq!(Origin::of_method("dynamic-discovery"), Origin::Own);
    }

    #[test]
    fn a_tasks_held_gpus_are_recorded_by_rs_ids() {
        let gpus = job_gpus(Some("1,3"), &own(Some("4,5,6,7"), None, Origin::Own)).unwrap();
        assert_eq!(gpus.list, ["5", "7"]);
        assert_eq!(gpus.ids_of("7").as_deref(), Some("3"));
        assert_eq!(gpus.ids_of("7,5").as_deref(), Some("3,1"));
        assert_eq!(gpus.ids_of("6"), None);
    }

    #[test]
    fn a_gpu_beyond_the_brokers_grant_is_refused_with_both_lists() {
        let places = |ids, list: &str| job_gpus(ids, &own(Some(list), None, Origin::Own));
        let e = places(Some("0-3"), "2,3").unwrap_err();
        assert_eq!(
            e,
            BadGrant::Beyond {
                id: 2,
                value: "2,3".to_string()
            }
        );
        let said = e.to_string();
        assert!(said.contains("GPU 2") && said.contains("\"2,3\"") && said.contains("0 to 1"));
        assert!(matches!(
            places(Some("0"), ""),
            Err(BadGrant::BadBrokerList { .. })
        ));
        for bad in ["x", "3-1", "0,0", "2,1", "0-99999", "-1"] {
            assert_eq!(
                job_gpus(Some(bad), &own(None, None, Origin::Own)),
                Err(BadGrant::BadIds {
                    ids: bad.to_string()
                }),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_plugins_option_wins_over_gpu_affinity_and_gpu_affinity_over_the_default() {
        assert_eq!(who_binds(None, false), Binder::Plugin { say: None });
        assert_eq!(who_binds(None, true), Binder::Plugin { say: None });
        let Binder::Plugin { say: Some(say) } = who_binds(Some("per-task"), true) else {
            panic!("the option wins");
        };
        assert!(say.contains("gpu-affinity=\"per-task\" is replaced by -o desi-gpu-map"));
        let Binder::Flux { say } = who_binds(Some("off"), false) else {
            panic!("gpu-affinity wins over the default");
        };
        assert!(say.contains("over the site's default"));
        let uri = "local:///tmp/flux-Ab12Cd/local-0";
        assert_eq!(tag(42, Some(uri)), tag(42, Some(uri)));
        assert!(tag(42, Some(uri)).starts_with("flux-42."));
        assert_eq!(tag(42, Some(uri)).len(), "flux-42.".len() + 8);
        assert_ne!(
            tag(42, Some(uri)),
            tag(42, Some("local:///tmp/flux-Xy34Zw/local-0"))
        );
        assert_ne!(tag(42, Some(uri)), tag(43, Some(uri)));
        // FNV-1a's published values.
        assert_eq!(fnv1a(""), 0x811c_9dc5);
        assert_eq!(fnv1a("a"), 0xe40c_292c);
    }
}
