//! Why a step runs without MPS ([`NoMps`]): each reason with what its
//! message needs, worded once.

use crate::env;
use crate::grant::Grant;
use crate::names::Named;
use crate::runtime::Vendor;
use std::fmt;
use std::path::PathBuf;

/// Volta-and-later MPS serves at most this many clients per GPU.
pub const MAX_CLIENTS: usize = 48;

/// Whose daemon a message names: a Slurm step's (or a launch's), or a
/// Flux job's, whose GPUs R gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Whose {
    /// A step of Slurm's, or a launcher's launch.
    Step,
    /// A grant's run (a Flux job, planned by the Flux shell plugin).
    Granted(&'static Grant),
}

impl Whose {
    /// What it is called: `step`, or `job`.
    pub(crate) fn noun(self) -> &'static str {
        match self {
            Whose::Step => "step",
            Whose::Granted(grant) => grant.noun,
        }
    }

    /// Whose GPU indices its tasks keep: Slurm's, or R's.
    pub(crate) fn indices(self) -> String {
        match self {
            Whose::Step => "Slurm's".to_string(),
            Whose::Granted(grant) => grant.indices(),
        }
    }
}

/// Why no MPS daemon serves a step that asked for one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoMps {
    /// The site's `mps=off`.
    SiteOff,
    /// A front end other than slurmstepd's.
    NotSlurmstepd,
    /// The node's GPUs are another vendor's.
    NotNvidia(Vendor),
    /// This many tasks would share one GPU.
    TooManyClients(usize),
    /// The job runs as root, which the daemon never serves.
    Root,
    /// The site's control daemon does not exist; what named it.
    NoControl {
        /// Where it was looked for.
        path: PathBuf,
        /// The setting or variable that named it.
        named_by: String,
    },
    /// No control daemon in the standard places; what names one.
    ControlNotFound {
        /// The setting or variable that would.
        named_by: String,
    },
    /// No server on the control daemon's `PATH`.
    NoServer {
        /// The directories looked in.
        path: Vec<PathBuf>,
    },
    /// Slurm gave no job id to name the step's directory by.
    NoJobId,
    /// The daemon's socket path is longer than its control daemon binds.
    SocketTooLong {
        /// The path it would have.
        socket: PathBuf,
        /// Its length, in bytes.
        len: usize,
        /// The most the control daemon binds, in bytes.
        most: usize,
    },
    /// The base could not be looked up (`stat`).
    BaseUnusable {
        /// The base directory.
        base: PathBuf,
        /// The system's error.
        why: String,
    },
    /// The base is no directory.
    BaseNotDir(PathBuf),
    /// The base belongs to neither root nor the job's user.
    BaseOwner {
        /// The base directory.
        base: PathBuf,
        /// Its owner's uid.
        owner: u32,
    },
    /// Others may write the base without the sticky bit, so another user
    /// could replace the step's directory.
    BaseOpen {
        /// The base directory.
        base: PathBuf,
        /// Its mode bits.
        mode: u32,
        /// Whose directory it would hold.
        whose: Whose,
    },
    /// The step's GPUs could not be named by UUID: why.
    NoUuids {
        /// Why.
        why: String,
        /// Whose GPUs.
        whose: Whose,
    },
    /// The front end could not start the daemon, or reach it: why.
    NotStarted(String),
    /// The task is in a container that does not see the daemon's pipe
    /// directory, inside `base`.
    NotInContainer {
        /// The daemon's pipe directory.
        pipe: PathBuf,
        /// The base to mount into the container.
        base: PathBuf,
    },
}

impl fmt::Display for NoMps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let base_hint = "(TMPDIR, or the site's mps_dir=)";
        match self {
            NoMps::SiteOff => write!(f, "this site turned mps off (mps=off)"),
            NoMps::NotSlurmstepd => {
                write!(f, "only the plugin, in slurmstepd, starts MPS daemons")
            }
            NoMps::NotNvidia(vendor) => write!(
                f,
                "MPS serves NVIDIA GPUs only, and this node's are {}",
                vendor.name()
            ),
            NoMps::TooManyClients(most) => write!(
                f,
                "{most} tasks would share one GPU, and MPS serves at most {MAX_CLIENTS} \
                 clients per GPU; fewer tasks per node, or more GPUs, would fit"
            ),
            NoMps::Root => write!(f, "the job runs as root, and the MPS daemon never does"),
            NoMps::NoControl { path, named_by } => write!(
                f,
                "cannot start {}: it does not exist ({named_by})",
                path.display()
            ),
            NoMps::ControlNotFound { named_by } => write!(
                f,
                "{} is not in {}; {named_by} names it",
                env::MPS_CONTROL,
                env::MPS_CONTROL_DIRS.join(", ")
            ),
            NoMps::NoServer { path } => {
                let dirs: Vec<String> = path.iter().map(|d| d.display().to_string()).collect();
                write!(
                    f,
                    "{}, which the control daemon starts for its clients, is not in {}; it \
                     belongs beside the control daemon or in its sibling sbin",
                    env::MPS_SERVER,
                    dirs.join(", ")
                )
            }
            NoMps::NoJobId => write!(f, "Slurm gave no job id to name the MPS directory by"),
            NoMps::SocketTooLong { socket, len, most } => write!(
                f,
                "the MPS socket path {} is {len} bytes, longer than the MPS control daemon \
                 takes (at most {most}); a shorter base is needed {base_hint}",
                socket.display()
            ),
            NoMps::BaseUnusable { base, why } => {
                write!(f, "cannot use the MPS base {}: {why}", base.display())
            }
            NoMps::BaseNotDir(base) => {
                write!(f, "the MPS base {} is not a directory", base.display())
            }
            NoMps::BaseOwner { base, owner } => write!(
                f,
                "the MPS base {} belongs to uid {owner}, neither root nor the job's user; a \
                 base of theirs or root's is needed {base_hint}",
                base.display()
            ),
            NoMps::BaseOpen { base, mode, whose } => write!(
                f,
                "the MPS base {} is writable by others without the sticky bit (mode \
                 {mode:04o}), so another user could replace the {}'s directory; it needs \
                 mode 1777, as /tmp has, or no write for others",
                base.display(),
                whose.noun()
            ),
            NoMps::NoUuids { why, whose } => write!(
                f,
                "cannot name the {}'s GPUs by UUID ({why}); by index, the MPS daemon \
                 could reach another job's GPUs wherever devices are not constrained",
                whose.noun()
            ),
            NoMps::NotStarted(why) => write!(f, "{why}"),
            NoMps::NotInContainer { pipe, base } => write!(
                f,
                "the container does not see the MPS pipe directory {}; mount {} into it \
                 (pyxis: --container-mounts={}; enroot: a line in a mounts.d file)",
                pipe.display(),
                base.display(),
                base.display()
            ),
        }
    }
}
