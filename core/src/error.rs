//! The core's errors: one variant per cause, each rendered as a complete,
//! user-facing line in one place ([`fmt::Display`]).

use crate::text::quote;
use std::fmt;
use std::sync::Arc;

/// Why something the user, the site, Slurm or NVML handed over cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A `--desi-gpu-map` value that names no choice; `valid` lists them.
    BadOption {
        /// The value as given.
        value: String,
        /// The choices, listed for the message.
        valid: String,
    },
    /// A `--desi-gpu-map` value whose words do not go together.
    BadCombination {
        /// The value as given.
        value: String,
        /// Which words clash.
        why: &'static str,
    },
    /// `mps` asked where the site turned it off (`mps=off`).
    MpsOff,
    /// `mps` asked beside no method, where the site's default is `none`.
    MpsWithoutMethod,
    /// `help` given through the option's environment form (`env_form`).
    HelpFromEnvironment {
        /// The variable that carried it.
        env_form: &'static str,
        /// The choices, listed for the message.
        valid: String,
    },
    /// A plugstack.conf argument the plugin cannot use; `valid` lists them.
    BadArgument {
        /// The argument as written.
        arg: String,
        /// What is wrong with it.
        why: ArgProblem,
        /// The arguments the plugin takes, listed for the message.
        valid: String,
    },
    /// Slurm could not hand the plugstack arguments over.
    UnreadableArguments(String),
    /// A plugstack argument that is not UTF-8 text, as shown with U+FFFD
    /// for the bytes that are not.
    ArgumentNotUtf8 {
        /// The argument, made text.
        shown: String,
    },
    /// The option could not be registered with Slurm.
    CannotRegister {
        /// The option's name, without `--`.
        option: String,
        /// What Slurm said.
        why: String,
    },
    /// A GPU list that no task may be given.
    BadGpuList {
        /// The list as found.
        list: String,
        /// What is wrong with it.
        why: ListProblem,
    },
    /// NVML discovery is off (`nvml=off`).
    NvmlOff,
    /// NVML could not be loaded and initialised.
    NvmlInit {
        /// The library asked for.
        library: String,
        /// NVML's own error.
        source: NvmlCause,
    },
    /// An NVML call failed.
    NvmlCall {
        /// The function that failed.
        call: &'static str,
        /// NVML's own error.
        source: NvmlCause,
    },
    /// The NVML wrapper panicked (a library that lacks a function).
    NvmlMisbehaved,
    /// NVML gave no answer within `nvml_timeout`.
    NvmlTimedOut {
        /// The deadline it missed.
        seconds: u64,
    },
    /// The discovery process failed: its message as it came across the
    /// process boundary (where the NVML error itself cannot follow), and
    /// what kind of failure it was.
    Discovery {
        /// Which way it failed.
        kind: NvmlFailure,
        /// The child's message.
        why: String,
    },
    /// A node without GPUs to map onto.
    NoGpusToMap,
    /// A local task id at or past the node's task count.
    LocalIdOutOfRange {
        /// The task's node-local id.
        local_id: usize,
        /// The node's task count.
        local_count: usize,
    },
    /// A task that Slurm bound itself, where a mapping was expected.
    SlurmBound(String),
    /// The user's `DESI_GPU_MAP_METHOD`, which the plugin takes over its
    /// site's default, is no request: the value, and why (as exec and
    /// the task prolog say it).
    MethodVariable {
        /// The variable's value.
        value: String,
        /// Why it is no request.
        why: Box<Error>,
    },
    /// An `exec --method` value (or its variable's) that names no choice;
    /// `valid` lists them.
    BadMethod {
        /// The value as given.
        value: String,
        /// The choices, listed for the message.
        valid: String,
    },
    /// An `exec --method` value whose words do not go together.
    BadMethodCombination {
        /// The value as given.
        value: String,
        /// Which words clash.
        why: &'static str,
    },
}

/// How asking NVML in a child process failed, carried across the process
/// boundary beside the message ([`Error::Discovery`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NvmlFailure {
    /// NVML discovery is off ([`Error::NvmlOff`]).
    Off,
    /// The library could not be loaded or initialised ([`Error::NvmlInit`]).
    Init,
    /// A call failed after NVML started ([`Error::NvmlCall`]).
    Call,
    /// The library or the child broke: it panicked, died, wrote garbage or
    /// too much, or could not be started.
    Misbehaved,
}

/// What is wrong with a plugstack argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgProblem {
    /// A key the plugin does not take.
    Unknown(String),
    /// A key given more than once.
    GivenTwice(String),
    /// A key given without its `=value`.
    NeedsValue(String),
    /// A switch given a value.
    TakesNoValue(String),
    /// A value outside what `key` accepts (`expected`, in words).
    BadValue {
        /// The argument's key.
        key: &'static str,
        /// The value as written.
        value: String,
        /// What the key accepts, in words.
        expected: String,
    },
    /// A flag name whose prefix Slurm, a loader, a shell, MPI or a GPU
    /// runtime reads (or the plugin's own variables share).
    ReservedFlag {
        /// The flag name asked for.
        name: String,
        /// The reserved prefix it begins with.
        prefix: String,
    },
}

/// What is wrong with a GPU list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListProblem {
    /// The list names no GPU.
    Empty,
    /// More entries than any node holds GPUs.
    TooLong {
        /// The list's entries.
        entries: usize,
        /// The most a node holds.
        most: usize,
    },
    /// Slurm's `NoDevFiles`: it found no device files for the GPUs.
    NoDevFiles,
    /// An empty entry, as in `0,,1`.
    EmptyEntry,
    /// An entry longer than `most` characters.
    LongEntry {
        /// The longest an entry may be, in characters.
        most: usize,
    },
    /// An entry that is neither an index nor a UUID.
    BadEntry(String),
    /// An entry named twice.
    Twice(String),
    /// Indices beside UUIDs: the first of each. A runtime reads such a
    /// list its own way (CUDA stops at the first entry it cannot match),
    /// so no task could be told which device an entry names.
    Mixed {
        /// The first index.
        index: String,
        /// The first UUID.
        uuid: String,
    },
}

/// An NVML error, kept as the source of [`Error::NvmlInit`] and
/// [`Error::NvmlCall`]. Shared so that errors stay cheap to clone; two are
/// equal when they say the same.
#[derive(Debug, Clone)]
pub struct NvmlCause(
    /// The error NVML's wrapper returned.
    pub Arc<dyn std::error::Error + Send + Sync>,
);

impl PartialEq for NvmlCause {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_string() == other.0.to_string()
    }
}

impl Eq for NvmlCause {}

impl fmt::Display for NvmlCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// What every message about a GPU list entry says is valid.
const VALID_ENTRIES: &str = "entries must be indices (3, or 0.1) or GPU-/MIG- UUIDs";

impl Error {
    /// Whether this came back from an NVML child whose `nvmlInit` worked
    /// and a later call failed ([`NvmlFailure::Call`]): asking again for
    /// less may then succeed, while a failed init or a broken child would
    /// only fail again, as slowly.
    pub(crate) fn is_failed_nvml_call(&self) -> bool {
        matches!(
            self,
            Error::Discovery {
                kind: NvmlFailure::Call,
                ..
            }
        )
    }
}

/// An option's value as its messages name it: quoted, or `an empty value`.
pub(crate) fn option_value(value: &str) -> String {
    if value.is_empty() {
        "an empty value".to_string()
    } else {
        quote(value)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::BadOption { value, valid } => {
                let what = option_value(value);
                write!(
                    f,
                    "invalid --desi-gpu-map value {what}; valid values: {valid}"
                )
            }
            Error::BadCombination { value, why } => write!(
                f,
                "invalid --desi-gpu-map value {}: {why}; give a method with mps, \
                 as in contiguous,mps",
                quote(value)
            ),
            Error::MpsOff => f.write_str(
                "--desi-gpu-map: this site turned mps off (mps=off in plugstack.conf); \
                 give the method alone, as in --desi-gpu-map=contiguous",
            ),
            Error::MpsWithoutMethod => f.write_str(
                "--desi-gpu-map: mps needs a method, and this site's default is none; \
                 give one, as in --desi-gpu-map=contiguous,mps",
            ),
            Error::HelpFromEnvironment { env_form, valid } => write!(
                f,
                "{env_form}=help: help is for the command line (srun --desi-gpu-map=help true); \
                 in the environment give a method; valid values: {valid}"
            ),
            Error::BadArgument { arg, why, valid } => write!(
                f,
                "bad plugstack argument {}: {why}; valid arguments: {valid}",
                quote(arg)
            ),
            Error::UnreadableArguments(why) => write!(f, "bad plugstack argument: {why}"),
            Error::ArgumentNotUtf8 { shown } => match shown.split_once('=') {
                Some((key, value)) => write!(
                    f,
                    "bad plugstack argument {key}={}: its value is not UTF-8 text (the bytes \
                     that are not are shown as U+FFFD)",
                    quote(value)
                ),
                None => write!(
                    f,
                    "bad plugstack argument {}: it is not UTF-8 text",
                    quote(shown)
                ),
            },
            Error::CannotRegister { option, why } => {
                write!(f, "cannot register --{option}: {why}")
            }
            Error::BadGpuList { list, why } => write!(f, "GPU list {} {why}", quote(list)),
            Error::NvmlOff => f.write_str("NVML discovery is off (nvml=off)"),
            Error::NvmlInit { library, source } => {
                write!(f, "NVML: cannot initialise {library}: {source}")
            }
            Error::NvmlCall { call, source } => write!(f, "NVML: {call} failed: {source}"),
            Error::NvmlMisbehaved => {
                f.write_str("NVML: the library misbehaved (a required function is missing)")
            }
            Error::NvmlTimedOut { seconds } => {
                write!(f, "NVML did not answer within {seconds} s (nvml_timeout)")
            }
            Error::Discovery { why, .. } => f.write_str(why),
            Error::NoGpusToMap => f.write_str("no GPUs to map onto"),
            Error::LocalIdOutOfRange {
                local_id,
                local_count,
            } => write!(
                f,
                "local task id {local_id} is not below the node's task count {local_count}"
            ),
            Error::SlurmBound(why) => write!(f, "{why}; keeping Slurm's binding"),
            Error::MethodVariable { value, why } => {
                write!(f, "{}={}: {why}", crate::env::METHOD, quote(value))
            }
            Error::BadMethod { value, valid } => {
                write!(
                    f,
                    "invalid --method {}; valid values: {valid}",
                    quote(value)
                )
            }
            Error::BadMethodCombination { value, why } => write!(
                f,
                "invalid --method {}: {why}; give a method with mps, as in contiguous,mps",
                quote(value)
            ),
        }
    }
}

impl fmt::Display for ArgProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgProblem::Unknown(key) => write!(f, "unknown argument {}", quote(key)),
            ArgProblem::GivenTwice(key) => write!(f, "{} is given twice", quote(key)),
            ArgProblem::NeedsValue(key) => write!(f, "{key} needs a value ({key}=...)"),
            ArgProblem::TakesNoValue(key) => write!(f, "{key} takes no value"),
            ArgProblem::BadValue {
                key,
                value,
                expected,
            } => write!(f, "{key} must be {expected}, not {}", quote(value)),
            ArgProblem::ReservedFlag { name, prefix } => write!(
                f,
                "flag must not be {name}: names beginning with {prefix} are read by Slurm, a \
                 loader, the C library, a shell, MPI or a GPU runtime, or are the plugin's own; \
                 use a prefix of your project's, as in DESI_GPU_MAPPED"
            ),
        }
    }
}

impl fmt::Display for ListProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListProblem::Empty => f.write_str("is empty"),
            ListProblem::TooLong { entries, most } => write!(
                f,
                "has {entries} entries, more than the {most} any node holds"
            ),
            ListProblem::NoDevFiles => {
                f.write_str("says NoDevFiles: Slurm found no device files for the GPUs")
            }
            ListProblem::EmptyEntry => write!(f, "has an empty entry; {VALID_ENTRIES}"),
            ListProblem::LongEntry { most } => {
                write!(f, "has an entry longer than {most} characters")
            }
            ListProblem::BadEntry(token) => {
                write!(f, "has the entry {}; {VALID_ENTRIES}", quote(token))
            }
            ListProblem::Twice(token) => write!(f, "names {} twice", quote(token)),
            ListProblem::Mixed { index, uuid } => write!(
                f,
                "mixes indices and UUIDs ({} and {}); a list must name every GPU one way",
                quote(index),
                quote(uuid)
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::NvmlInit { source, .. } | Error::NvmlCall { source, .. } => Some(&*source.0),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_failed_call_is_worth_asking_again() {
        let crossed = |kind| Error::Discovery {
            kind,
            why: "NVML: said".to_string(),
        };
        assert!(crossed(NvmlFailure::Call).is_failed_nvml_call());
        for kind in [NvmlFailure::Off, NvmlFailure::Init, NvmlFailure::Misbehaved] {
            assert!(!crossed(kind).is_failed_nvml_call(), "{kind:?}");
        }
        assert!(!Error::NvmlTimedOut { seconds: 10 }.is_failed_nvml_call());
        assert_eq!(crossed(NvmlFailure::Call).to_string(), "NVML: said");
    }
}
