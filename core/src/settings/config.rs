//! The settings a step is planned with ([`Config`]), whoever gives them:
//! the site's plugstack arguments for the plugin (`site`), exec's options
//! for exec, which has no site; and their defaults.

use crate::method::Visible;
use crate::names::named;
use crate::runtime::VendorSetting;
use crate::settings::option::Choice;
use std::path::PathBuf;
use std::time::Duration;

/// Where NVML comes from, for steps in which Slurm names no GPU list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NvmlSource {
    /// `libnvidia-ml.so.1` from the loader's search path.
    Auto,
    /// Never load NVML.
    Off,
    /// This library file (an absolute path: from plugstack.conf for the
    /// plugin, from the user for `desi-gpu-map exec`, which runs as the user).
    Path(PathBuf),
}

/// What to do where Slurm tracks no GPUs for a step (no GPU GRES).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Untracked {
    /// Such a step has no GPUs: it is left alone.
    Ignore,
    /// Every GPU NVML finds belongs to the step: right only on sites
    /// without GPU GRES whose GPU jobs hold their nodes whole.
    WholeNode,
}

named!(Untracked {
    Ignore => "ignore",
    WholeNode => "whole-node",
});

/// When a step's tasks run under CUDA MPS (`mps=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MpsMode {
    /// Never: the `mps` modifier is refused before allocation.
    Off,
    /// When the user asks (`--desi-gpu-map=METHOD,mps`).
    Allow,
    /// Also wherever a node's tasks outnumber the step's GPUs there.
    Auto,
}

named!(MpsMode {
    Off => "off",
    Allow => "allow",
    Auto => "auto",
});

/// How much of its GPU each MPS client may use (`mps_share=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MpsShare {
    /// `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` = floor(100 / tasks on its GPU).
    Even,
    /// No limit set: MPS's own default.
    None,
}

named!(MpsShare {
    Even => "even",
    None => "none",
});

/// The settings a step is planned with: the site's plugstack arguments
/// for the plugin ([`super::site::parse_args`]), exec's options for exec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The method where the user asks for none (`default=`).
    pub default: Choice,
    /// The variable set to `1` in every mapped task (`flag=`).
    pub flag: String,
    /// How much of the step's GPU list each task keeps visible (`visible=`).
    pub visible: Visible,
    /// Where NVML comes from (`nvml=`).
    pub nvml: NvmlSource,
    /// What to do where Slurm tracks no GPUs (`untracked=`).
    pub untracked: Untracked,
    /// How long NVML discovery may take before the step stands aside.
    pub nvml_timeout: Duration,
    /// Whose runtime reads the GPU lists on the node (see `vendor`).
    pub vendor: VendorSetting,
    /// Every mapped task says what it got, asked or not (`verbose`).
    pub verbose: bool,
    /// Where `closest` reads the kernel's GPU files (`proc/driver/nvidia`,
    /// `sys/bus/pci`): `/`, or a fake tree in tests. Only plugstack.conf
    /// sets it for the plugin, so no user can point the plugin at files of
    /// their own (exec's hidden `--kernel-root` misleads only the user's
    /// own task).
    pub kernel_root: std::path::PathBuf,
    /// CUDA MPS: the `mps`, `mps_share`, `mps_dir` and `mps_control` keys.
    pub mps: MpsSettings,
}

/// The CUDA MPS settings: the site's `mps`, `mps_share`, `mps_dir` and
/// `mps_control` keys, or exec's options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpsSettings {
    /// When tasks run under MPS (`mps=`).
    pub mode: MpsMode,
    /// Each client's share of its GPU (`mps_share=`).
    pub share: MpsShare,
    /// Where each step's private MPS directory is made (`mps_dir=`);
    /// `None`: the step's `TMPDIR`, else `/tmp`.
    pub dir: Option<PathBuf>,
    /// The MPS control daemon (`mps_control=`); `None`: found in
    /// [`crate::env::MPS_CONTROL_DIRS`].
    pub control: Option<PathBuf>,
    /// What names the control daemon, in messages: the site's key, or
    /// exec's option and variable.
    pub control_named_by: String,
}

/// The site's key that names the MPS control daemon, as messages say it.
pub(crate) const SITE_CONTROL_KEY: &str = "the site's mps_control=";

impl Default for MpsSettings {
    fn default() -> Self {
        MpsSettings {
            mode: MpsMode::Allow,
            share: MpsShare::None,
            dir: None,
            control: None,
            control_named_by: SITE_CONTROL_KEY.to_string(),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            default: Choice::Off,
            flag: DEFAULT_FLAG.to_string(),
            visible: Visible::Single,
            nvml: NvmlSource::Auto,
            untracked: Untracked::Ignore,
            nvml_timeout: Duration::from_secs(DEFAULT_NVML_TIMEOUT_S),
            vendor: VendorSetting::Auto,
            verbose: false,
            kernel_root: std::path::PathBuf::from("/"),
            mps: MpsSettings::default(),
        }
    }
}

pub(crate) use crate::env::DEFAULT_FLAG;

/// NVML discovery's deadline, in whole seconds: the default and the range.
/// A job cancelled while discovery waits stays COMPLETING until the
/// deadline (slurmstepd is inside `user_init`), so the range ends at Slurm's
/// default `KillWait` (30 s): no longer than a task ignoring SIGTERM holds
/// a cancelled job anyway.
pub const DEFAULT_NVML_TIMEOUT_S: u64 = 10;
/// The deadlines accepted, in whole seconds.
pub const NVML_TIMEOUT_RANGE_S: std::ops::RangeInclusive<u64> = 1..=30;

impl NvmlSource {
    /// The accepted forms, for messages.
    pub const FORMS: &'static str = "auto, off, /ABSOLUTE/PATH";
}

/// As it is written in plugstack.conf (and `FromStr` reads it back).
impl std::fmt::Display for NvmlSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NvmlSource::Auto => f.write_str("auto"),
            NvmlSource::Off => f.write_str("off"),
            NvmlSource::Path(path) => write!(f, "{}", path.display()),
        }
    }
}
