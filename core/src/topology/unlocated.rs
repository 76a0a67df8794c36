//! Why a step's GPUs cannot be located, or a topology's value read
//! ([`Unlocated`]): one variant a reason, with the values its line names.

use crate::cpuset::BadCpuSet;
use crate::env::STEP_GPUS;
use crate::runtime::MAX_NODE_GPUS;
use crate::text::quote;
use std::fmt;
use std::io;
use std::path::PathBuf;

/// Why a GPU cannot be located, or its place read.
#[derive(Debug)]
pub enum Unlocated {
    /// An index, with no `SLURM_STEP_GPUS` to tell Slurm's from renumbered.
    NoStepGpus,
    /// A token that is neither an index nor a UUID found.
    CannotLocate {
        /// The token, as the list names it.
        token: String,
    },
    /// A UUID where an index is needed: only NVML locates it.
    UuidNeedsNvml {
        /// The UUID.
        token: String,
    },
    /// A UUID the kernel's files do not name.
    UuidNotInKernel {
        /// The UUID.
        uuid: String,
    },
    /// No GPU listed has the device minor an index names.
    NoMinor {
        /// Slurm's index.
        index: usize,
        /// How many GPUs are listed.
        listed: usize,
    },
    /// The GPU an index names stands elsewhere in PCI order.
    OrderUnknown {
        /// Slurm's index.
        index: usize,
        /// The GPU at that place in PCI order.
        bus_id: String,
        /// That GPU's device minor.
        minor: u32,
    },
    /// The GPU an index names has no place in PCI order.
    NoPciPlace {
        /// Slurm's index.
        index: usize,
    },
    /// The step's list is neither Slurm's nor renumbered from 0.
    NotRenumbered {
        /// The step's list.
        tokens: Vec<String>,
        /// Slurm's (`SLURM_STEP_GPUS`).
        absolute: Vec<String>,
    },
    /// A task's index that could be Slurm's or renumbered.
    Ambiguous {
        /// The task's index.
        token: String,
        /// The step's list (`SLURM_STEP_GPUS`).
        step: Vec<String>,
    },
    /// A task's index that is not among the step's.
    NotInStep {
        /// The task's index.
        token: String,
        /// The step's list (`SLURM_STEP_GPUS`).
        step: Vec<String>,
    },
    /// A kernel file that cannot be read.
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why not.
        error: io::Error,
    },
    /// A GPU's `numa_node` that is no number.
    OddNuma {
        /// The GPU's sysfs folder.
        dir: PathBuf,
        /// What the file holds.
        text: String,
    },
    /// A list of CPUs that does not parse.
    BadCpus(BadCpuSet),
    /// The kernel's GPUs cannot be listed (the runtime's words).
    KernelGpus(String),
    /// A UUID NVML does not list.
    NotInNvml {
        /// The UUID.
        uuid: String,
    },
    /// A bus id NVML does not list.
    NoBus {
        /// The bus id, as sysfs names it.
        bus_id: String,
    },
    /// NVML lists more GPUs than a node has.
    TooMany,
    /// A line of NVML's answer that does not read.
    OddLine {
        /// The line.
        line: String,
    },
    /// A topology file's NUMA node that is no number.
    BadNuma {
        /// The file's word.
        text: String,
    },
}

impl fmt::Display for Unlocated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unlocated::NoStepGpus => write!(
                f,
                "{STEP_GPUS} is not set: cannot tell absolute indices from renumbered ones"
            ),
            Unlocated::CannotLocate { token } => write!(f, "cannot locate GPU {}", quote(token)),
            Unlocated::UuidNeedsNvml { token } => write!(
                f,
                "GPU {} is a UUID, which only NVML can locate",
                quote(token)
            ),
            Unlocated::UuidNotInKernel { uuid } => write!(
                f,
                "GPU {} is a UUID that the kernel's files do not list, which only NVML can locate",
                quote(uuid)
            ),
            Unlocated::NoMinor { index, listed } => write!(
                f,
                "GPU index {index} names none of the {listed} GPUs listed here \
                 (no device minor {index})"
            ),
            Unlocated::OrderUnknown {
                index,
                bus_id,
                minor,
            } => write!(
                f,
                "GPU index {index} is {bus_id} in PCI order but has device minor {minor}: \
                 gres.conf's order is unknown"
            ),
            Unlocated::NoPciPlace { index } => {
                write!(f, "GPU index {index} has no place in PCI order")
            }
            Unlocated::NotRenumbered { tokens, absolute } => write!(
                f,
                "the step's GPUs {} are neither Slurm's {} nor renumbered from 0",
                quote(&tokens.join(",")),
                quote(&absolute.join(","))
            ),
            Unlocated::Ambiguous { token, step } => write!(
                f,
                "GPU {} could be Slurm's index or one renumbered from the step's {}",
                quote(token),
                quote(&step.join(","))
            ),
            Unlocated::NotInStep { token, step } => write!(
                f,
                "GPU {} is not among the step's {}",
                quote(token),
                quote(&step.join(","))
            ),
            // The form every message about a file takes (`crate::files::at`).
            Unlocated::Unreadable { path, error } => write!(f, "{}: {error}", path.display()),
            Unlocated::OddNuma { dir, text } => {
                write!(f, "{}: odd NUMA node {}", dir.display(), quote(text))
            }
            Unlocated::BadCpus(e) => write!(f, "{e}"),
            Unlocated::KernelGpus(why) => f.write_str(why),
            Unlocated::NotInNvml { uuid } => write!(f, "NVML does not list GPU {}", quote(uuid)),
            Unlocated::NoBus { bus_id } => write!(f, "NVML does not list the GPU at {bus_id}"),
            Unlocated::TooMany => write!(f, "NVML lists more than {MAX_NODE_GPUS} GPUs"),
            Unlocated::OddLine { line } => write!(f, "NVML gave the odd line {}", quote(line)),
            Unlocated::BadNuma { text } => {
                write!(f, "NUMA node {} is not a number or -", quote(text))
            }
        }
    }
}

impl std::error::Error for Unlocated {}

impl From<BadCpuSet> for Unlocated {
    fn from(e: BadCpuSet) -> Unlocated {
        Unlocated::BadCpus(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpuset::CpuSet;

    /// Each line as the functions worded it before this type.
    #[test]
    fn each_reason_reads_as_before() {
        let list = |l: &[&str]| -> Vec<String> { l.iter().map(|s| s.to_string()).collect() };
        let bad_cpus = CpuSet::parse_list("0-z").unwrap_err();
        let cases = [
            (
                Unlocated::NoStepGpus,
                "SLURM_STEP_GPUS is not set: cannot tell absolute indices from renumbered ones"
                    .to_string(),
            ),
            (
                Unlocated::CannotLocate { token: "x".into() },
                "cannot locate GPU \"x\"".into(),
            ),
            (
                Unlocated::UuidNeedsNvml {
                    token: "GPU-a".into(),
                },
                "GPU \"GPU-a\" is a UUID, which only NVML can locate".into(),
            ),
            (
                Unlocated::UuidNotInKernel {
                    uuid: "GPU-a".into(),
                },
                "GPU \"GPU-a\" is a UUID that the kernel's files do not list, \
                 which only NVML can locate"
                    .into(),
            ),
            (
                Unlocated::NoMinor {
                    index: 5,
                    listed: 4,
                },
                "GPU index 5 names none of the 4 GPUs listed here (no device minor 5)".into(),
            ),
            (
                Unlocated::OrderUnknown {
                    index: 0,
                    bus_id: "0000:03:00.0".into(),
                    minor: 1,
                },
                "GPU index 0 is 0000:03:00.0 in PCI order but has device minor 1: \
                 gres.conf's order is unknown"
                    .into(),
            ),
            (
                Unlocated::NoPciPlace { index: 2 },
                "GPU index 2 has no place in PCI order".into(),
            ),
            (
                Unlocated::NotRenumbered {
                    tokens: list(&["1", "0"]),
                    absolute: list(&["3", "2"]),
                },
                "the step's GPUs \"1,0\" are neither Slurm's \"3,2\" nor renumbered from 0".into(),
            ),
            (
                Unlocated::Ambiguous {
                    token: "1".into(),
                    step: list(&["1", "3"]),
                },
                "GPU \"1\" could be Slurm's index or one renumbered from the step's \"1,3\"".into(),
            ),
            (
                Unlocated::NotInStep {
                    token: "5".into(),
                    step: list(&["2", "3"]),
                },
                "GPU \"5\" is not among the step's \"2,3\"".into(),
            ),
            (
                Unlocated::Unreadable {
                    path: "/sys/x/numa_node".into(),
                    error: io::Error::from_raw_os_error(2),
                },
                crate::files::at(
                    std::path::Path::new("/sys/x/numa_node"),
                    io::Error::from_raw_os_error(2),
                ),
            ),
            (
                Unlocated::OddNuma {
                    dir: "/sys/x".into(),
                    text: "a".into(),
                },
                "/sys/x: odd NUMA node \"a\"".into(),
            ),
            (Unlocated::BadCpus(bad_cpus.clone()), bad_cpus.to_string()),
            (
                Unlocated::KernelGpus("no intel GPU".into()),
                "no intel GPU".into(),
            ),
            (
                Unlocated::NotInNvml {
                    uuid: "GPU-x".into(),
                },
                "NVML does not list GPU \"GPU-x\"".into(),
            ),
            (
                Unlocated::NoBus {
                    bus_id: "0000:01:00.0".into(),
                },
                "NVML does not list the GPU at 0000:01:00.0".into(),
            ),
            (
                Unlocated::TooMany,
                format!("NVML lists more than {MAX_NODE_GPUS} GPUs"),
            ),
            (
                Unlocated::OddLine {
                    line: "GPU-a 1 2".into(),
                },
                "NVML gave the odd line \"GPU-a 1 2\"".into(),
            ),
            (
                Unlocated::BadNuma { text: "x".into() },
                "NUMA node \"x\" is not a number or -".into(),
            ),
        ];
        for (why, line) in cases {
            assert_eq!(why.to_string(), line);
        }
    }
}
