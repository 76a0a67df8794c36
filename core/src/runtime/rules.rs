//! The runtime table's parts, shared by the vendors' files: [`Vendor`]
//! and the site's setting, the [`Rules`] each vendor gives, how a step's
//! lists are rendered ([`Rendering`], [`StepLists`]), and the kernel's
//! GPUs. The table's dispatch is the folder's face.

use crate::env;
use crate::files::Files;
use crate::grant::Grant;
use crate::method::{visible_list, Visible};
use crate::names::{named, Named};
use crate::slurm::gpus::join;
use crate::snapshot::Var;
use std::fmt;
use std::path::Path;

/// The GPU vendor whose runtimes read the lists on a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vendor {
    /// NVIDIA's: CUDA reads `CUDA_VISIBLE_DEVICES`.
    Nvidia,
    /// AMD's: ROCm reads `ROCR_VISIBLE_DEVICES` and its kin.
    Amd,
    /// Intel's: Level Zero reads `ZE_AFFINITY_MASK`.
    Intel,
}

named!(Vendor {
    Nvidia => "nvidia",
    Amd => "amd",
    Intel => "intel",
});

/// Why a step cannot be bound, given the node's vendor and why it was chosen.
pub(super) type Blocker = Box<dyn FnOnce(Chosen) -> Unbindable>;

/// What one vendor's runtimes need, filled by that vendor's file.
pub(super) struct Rules {
    /// Its PCI vendor id.
    pub(super) pci_id: u32,
    /// The variable that carries a task's GPU for its runtime.
    pub(super) carrier: Var,
    /// NVML lists and locates its GPUs.
    pub(super) nvml: bool,
    /// Why no list its runtimes read can carry a task's GPU in this step
    /// (given the lists the user set), if none can.
    pub(super) unbindable: fn(&StepLists, &[Var]) -> Option<Blocker>,
    /// Fits the rendering to what its runtimes honour (`CUDA_DEVICE_ORDER`
    /// as the user set it), with notes for `verbose`.
    pub(super) adjust: fn(&mut Rendering, &StepLists, Option<&str>, &mut Vec<String>),
    /// The variables for the task holding a share (positions) of the
    /// step's lists.
    pub(super) render: Render,
    /// Its GPUs as the kernel lists them under a root.
    pub(super) kernel_gpus: fn(&dyn Files, &Path) -> Result<Vec<KernelGpu>, String>,
}

/// The site's `vendor=` plugstack argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VendorSetting {
    /// Detected on each node, once per step (`detect`).
    Auto,
    /// This vendor on every node.
    Fixed(Vendor),
}

// `auto`, then every vendor, built from [`Vendor`]'s own list.
crate::names::with_one_more!(SETTINGS: VendorSetting = VendorSetting::Auto, first, VendorSetting::Fixed, Vendor);

impl Named for VendorSetting {
    const ALL: &'static [Self] = &SETTINGS;

    fn name(self) -> &'static str {
        match self {
            VendorSetting::Auto => "auto",
            VendorSetting::Fixed(vendor) => vendor.name(),
        }
    }
}

named!(from_str VendorSetting);

/// A node's vendor, and why, for the verbose report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chosen {
    /// The vendor.
    pub vendor: Vendor,
    /// Why, in words.
    pub why: String,
}

/// How a step's lists are written into each task; decided once per step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendering {
    /// The vendor whose runtime reads the lists.
    pub vendor: Vendor,
    /// The site's `visible=`, as this vendor's runtime can honour it.
    pub(crate) visible: Visible,
    /// Set `CUDA_DEVICE_ORDER=PCI_BUS_ID` in each task.
    pub(crate) pci_order: bool,
}

/// Why no list that the node's runtimes read can carry a task's GPU. The
/// step then stands aside: the flag must not say a task was bound while
/// its runtime still sees every GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unbindable {
    /// Only NVML listed the step's GPUs: NVIDIA UUIDs, which ROCm and Level
    /// Zero cannot read (HIP would find no GPU in such a
    /// `CUDA_VISIBLE_DEVICES`, and ROCR and Level Zero would see them all).
    NvmlUuids(Chosen),
    /// Slurm set no `ZE_AFFINITY_MASK`, the one list Level Zero reads.
    NoZeList(Chosen),
    /// A grant (a Flux job's R) comes in `CUDA_VISIBLE_DEVICES` only, and
    /// Level Zero reads `ZE_AFFINITY_MASK` alone.
    NoZeListGranted(&'static Grant, Chosen),
    /// The user's `ROCR_VISIBLE_DEVICES`, which ROCm applies before the
    /// index lists, would stay under them.
    UsersRocr(Chosen),
    /// The user's `HIP_VISIBLE_DEVICES`, which HIP reads instead of
    /// `CUDA_VISIBLE_DEVICES`, would name the task's devices.
    UsersHip(Chosen),
}

impl fmt::Display for Unbindable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unbindable::NvmlUuids(c) => write!(
                f,
                "only NVML lists the step's GPUs, as NVIDIA UUIDs, which {} runtimes do not \
                 read ({})",
                c.vendor.name(),
                c.why
            ),
            Unbindable::NoZeList(c) => write!(
                f,
                "Slurm set no {} for this step, the one list Level Zero reads ({})",
                env::ZE,
                c.why
            ),
            Unbindable::NoZeListGranted(grant, c) => write!(
                f,
                "{} come to {} in {} only, and Level Zero reads {} alone ({})",
                grant.gpus(),
                grant.holder,
                env::CUDA,
                env::ZE,
                c.why
            ),
            Unbindable::UsersRocr(c) => write!(
                f,
                "{} is the user's, not Slurm's, and ROCm applies it before {} ({})",
                env::ROCR,
                env::CUDA,
                c.why
            ),
            Unbindable::UsersHip(c) => write!(
                f,
                "{} is the user's, and HIP reads it instead of {} ({})",
                env::HIP,
                env::CUDA,
                c.why
            ),
        }
    }
}

/// A step's GPU lists as Slurm set them: `gpus` (the mapped list) and the
/// other lists of the same length.
pub(crate) struct StepLists<'a> {
    pub(crate) gpus: &'a [String],
    /// `gpus` is Slurm's `CUDA_VISIBLE_DEVICES` (not NVML's list).
    pub(crate) from_slurm: bool,
    /// `gpus` are a grant's (a Flux job's R), in `CUDA_VISIBLE_DEVICES`
    /// alone.
    pub(crate) granted: Option<&'static Grant>,
    pub(crate) others: &'a [(&'static str, Vec<String>)],
}

impl<'a> StepLists<'a> {
    /// The step's lists: `gpus` as the tasks' lists carry them, whether
    /// they are Slurm's, and the other lists Slurm set.
    pub(crate) fn new(
        gpus: &'a [String],
        from_slurm: bool,
        others: &'a [(&'static str, Vec<String>)],
    ) -> Self {
        StepLists {
            gpus,
            from_slurm,
            granted: None,
            others,
        }
    }

    /// The lists of a grant: its GPUs in `CUDA_VISIBLE_DEVICES`.
    pub(crate) fn granted(mut self, granted: Option<&'static Grant>) -> Self {
        self.granted = granted;
        self
    }

    pub(crate) fn list(&self, name: &str) -> Option<&[String]> {
        self.others
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, list)| list.as_slice())
    }
}

/// The task's own part of `list`: its GPUs, or the rotated list.
pub(super) fn own(r: &Rendering, list: &[String], share: &[usize]) -> String {
    join(&visible_list(list, share, r.visible))
}

/// An index list layered on a filter that already holds the task's GPUs
/// in the task's order: its first entries, in order.
pub(super) fn layered(r: &Rendering, step: &StepLists, share: &[usize]) -> String {
    let count = visible_list(step.gpus, share, r.visible).len();
    let indices: Vec<String> = (0..count).map(|i| i.to_string()).collect();
    join(&indices)
}

/// A vendor's rendering: the variables for the task holding a share
/// (positions) of the step's lists.
pub(super) type Render = fn(&Rendering, &StepLists, &[usize]) -> Vec<(String, String)>;

/// Most GPUs on one node: more make `closest` fall back (nodes hold a few
/// dozen at most).
pub(crate) const MAX_NODE_GPUS: usize = 64;

/// How the kernel locates a GPU: its PCI bus id and device minor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelGpu {
    /// As sysfs names it: `0000:c1:00.0`.
    pub(crate) bus_id: String,
    /// `Device Minor` in the NVIDIA driver's information file
    /// (`/dev/nvidiaN`); for AMD and Intel GPUs the DRM render node's
    /// number less 128 (`/dev/dri/renderD128` is 0).
    pub(crate) minor: u32,
    /// `GPU UUID` in the NVIDIA driver's information file; `None` where the
    /// kernel's files name none (AMD and Intel render nodes).
    pub(crate) uuid: Option<String>,
}
