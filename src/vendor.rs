//! Whose GPU runtime reads the lists on a node, and how a task's GPU is
//! written into each list so that this runtime ends up on it.
//!
//! Slurm sets `CUDA_VISIBLE_DEVICES`, `ROCR_VISIBLE_DEVICES`,
//! `GPU_DEVICE_ORDINAL` and `ZE_AFFINITY_MASK` to the same list when
//! gres.conf names no `Flags=*_env` (gres.conf(5), Flags; measured on 22.05
//! here). The runtimes do not read them alike:
//!
//! - CUDA reads `CUDA_VISIBLE_DEVICES`, in the order listed; its indices
//!   follow CUDA's own order, FASTEST_FIRST unless
//!   `CUDA_DEVICE_ORDER=PCI_BUS_ID`, while Slurm and NVML number GPUs by PCI
//!   bus ID (Slurm's gres.html, "GPU Management": "For this numbering to
//!   match the numbering reported by CUDA, the CUDA_DEVICE_ORDER environmental
//!   variable must be set to CUDA_DEVICE_ORDER=PCI_BUS_ID").
//! - AMD ROCm applies `ROCR_VISIBLE_DEVICES` first and surfaces the devices it
//!   keeps in the order listed (ROCR-Runtime `amd_filter_device.cpp`,
//!   `RvdFilter::BuildUsrDeviceList`, and `amd_topology.cpp`,
//!   `gpu_usr_list[devRank]`). HIP then applies `HIP_VISIBLE_DEVICES`, or
//!   `CUDA_VISIBLE_DEVICES` when that is unset, and OpenCL applies
//!   `GPU_DEVICE_ORDINAL`, as indices into what ROCR kept (ROCm CLR
//!   `rocdevice.cpp`, `Device::init`; ROCm "GPU isolation techniques").
//!   gres.conf(5) names this as a known issue of Slurm's own binding
//!   ("ROCR_VISIBLE_DEVICES is processed first, and then
//!   CUDA_VISIBLE_DEVICES"): narrowing both to the same index leaves no
//!   device, or the wrong one.
//! - Intel Level Zero reads `ZE_AFFINITY_MASK` as a set: "The order of the
//!   devices reported by the zeDeviceGet is implementation-specific and not
//!   affected by the order of devices in the affinity mask" (Level Zero
//!   specification, Programming Guide, "Affinity Mask").

use crate::env;
use crate::files::Files;
use crate::method::visible_list;
use crate::method::Visible;
use crate::names::{named, Named};
use crate::slurm::gpus::join;
use crate::text::quote;
use std::fmt;
use std::path::Path;

/// The GPU vendor whose runtimes read the lists on a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vendor {
    Nvidia,
    Amd,
    Intel,
}

impl Vendor {
    pub fn name(self) -> &'static str {
        match self {
            Vendor::Nvidia => "nvidia",
            Vendor::Amd => "amd",
            Vendor::Intel => "intel",
        }
    }

    pub(crate) fn from_pci_vendor(id: u32) -> Option<Vendor> {
        match id {
            0x10de => Some(Vendor::Nvidia),
            0x1002 => Some(Vendor::Amd),
            0x8086 => Some(Vendor::Intel),
            _ => None,
        }
    }
}

/// The site's `vendor=` plugstack argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VendorSetting {
    /// Detected on each node, once per step ([`detect`]).
    Auto,
    Fixed(Vendor),
}

impl Named for VendorSetting {
    const ALL: &'static [Self] = &[
        VendorSetting::Auto,
        VendorSetting::Fixed(Vendor::Nvidia),
        VendorSetting::Fixed(Vendor::Amd),
        VendorSetting::Fixed(Vendor::Intel),
    ];

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
    pub vendor: Vendor,
    pub why: String,
}

/// The vendor for this node: the site's, or detected under `root` (`/` in
/// the plugin; a fake tree in tests).
pub fn choose(setting: VendorSetting, files: &dyn Files, root: &Path) -> Chosen {
    match setting {
        VendorSetting::Fixed(vendor) => Chosen {
            vendor,
            why: format!("vendor={} in plugstack.conf", vendor.name()),
        },
        VendorSetting::Auto => detect(files, root),
    }
}

/// Detects the vendor from the PCI display and accelerator devices under
/// `root/sys/bus/pci/devices`, and from the compute drivers present.
///
/// Unknown or mixed nodes get NVIDIA semantics: the plugin's behaviour before
/// vendors were told apart, and what the nodes without any PCI GPU (where
/// only the count or NVML says GPUs exist) most likely are. A site with
/// mixed nodes sets `vendor=` on each node's plugstack line.
pub fn detect(files: &dyn Files, root: &Path) -> Chosen {
    let on_pci = pci_gpu_vendors(files, root);
    let drivers = compute_drivers(files, root);
    let chosen = |vendor: Vendor, why: String| Chosen { vendor, why };
    match on_pci.as_slice() {
        [one] => chosen(*one, format!("detected: {} GPUs on PCI", one.name())),
        [] => match drivers.as_slice() {
            [one] => chosen(
                *one,
                format!("detected: no GPU on PCI, {} driver present", one.name()),
            ),
            _ => chosen(
                Vendor::Nvidia,
                "no GPU vendor detected; NVIDIA by default".to_string(),
            ),
        },
        several => {
            // Several vendors on PCI (a BMC's or CPU's graphics next to the
            // accelerators): the one whose compute driver is loaded.
            let with_driver: Vec<Vendor> = several
                .iter()
                .copied()
                .filter(|v| drivers.contains(v))
                .collect();
            match with_driver.as_slice() {
                [one] => chosen(
                    *one,
                    format!("detected: {} GPUs with their driver", one.name()),
                ),
                _ => chosen(
                    Vendor::Nvidia,
                    format!(
                        "GPUs of several vendors ({}); NVIDIA by default",
                        names(several)
                    ),
                ),
            }
        }
    }
}

fn names(vendors: &[Vendor]) -> String {
    vendors
        .iter()
        .map(|v| v.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// PCI class 0x03 (display controller: VGA, 3D, other) and 0x12 (processing
/// accelerator, how some Instinct boards present themselves).
fn is_gpu_class(class: u32) -> bool {
    matches!(class >> 16, 0x03 | 0x12)
}

/// Most PCI devices looked at: large nodes have a few hundred.
const MAX_PCI_DEVICES: usize = 4096;

/// The known vendors among the node's PCI GPUs, each once, in a fixed order.
fn pci_gpu_vendors(files: &dyn Files, root: &Path) -> Vec<Vendor> {
    let devices = root.join("sys/bus/pci/devices");
    let Ok(entries) = files.list(&devices, MAX_PCI_DEVICES) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for name in entries {
        let dir = devices.join(name);
        let class = read_hex(files, &dir.join("class"));
        let vendor = read_hex(files, &dir.join("vendor")).and_then(Vendor::from_pci_vendor);
        if let (Some(class), Some(vendor)) = (class, vendor) {
            if is_gpu_class(class) && !found.contains(&vendor) {
                found.push(vendor);
            }
        }
    }
    found.sort_by_key(|v| *v as u8);
    found
}

/// Vendors whose compute driver is present. Intel's i915 and xe also drive
/// integrated graphics, so they prove nothing and are not counted.
fn compute_drivers(files: &dyn Files, root: &Path) -> Vec<Vendor> {
    let present = |path: &str| files.exists(&root.join(path));
    let mut found = Vec::new();
    if present("sys/module/nvidia") || present("dev/nvidiactl") {
        found.push(Vendor::Nvidia);
    }
    if present("dev/kfd") || present("sys/module/amdgpu") {
        found.push(Vendor::Amd);
    }
    found
}

/// A sysfs number such as `0x10de` or `0x030200`.
pub(crate) fn read_hex(files: &dyn Files, path: &Path) -> Option<u32> {
    let text = files.read(path).ok()?;
    let text = text.trim();
    let digits = text.strip_prefix("0x").unwrap_or(text);
    u32::from_str_radix(digits, 16).ok()
}

/// How a step's lists are written into each task; decided once per step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendering {
    pub vendor: Vendor,
    /// The site's `visible=`, as this vendor's runtime can honour it.
    pub visible: Visible,
    /// Set `CUDA_DEVICE_ORDER=PCI_BUS_ID` in each task.
    pub pci_order: bool,
}

/// Why no list that the node's runtimes read can carry a task's GPU. The
/// step then stands aside: the flag must not say a task was bound while
/// its runtime still sees every GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unbindable {
    /// Only NVML listed the step's GPUs: NVIDIA UUIDs, which ROCm and Level
    /// Zero cannot read (HIP would find no GPU in such a
    /// `CUDA_VISIBLE_DEVICES`, and ROCR and Level Zero would see them all).
    NvmlUuids(Chosen),
    /// Slurm set no `ZE_AFFINITY_MASK`, the one list Level Zero reads.
    NoZeList(Chosen),
    /// The user's `ROCR_VISIBLE_DEVICES`, which ROCm applies before the
    /// index lists, would stay under them.
    UsersRocr(Chosen),
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
            Unbindable::UsersRocr(c) => write!(
                f,
                "{} is the user's, not Slurm's, and ROCm applies it before {} ({})",
                env::ROCR,
                env::CUDA,
                c.why
            ),
        }
    }
}

impl Rendering {
    /// Decides for a step whose GPUs are `gpus` (from Slurm's
    /// `CUDA_VISIBLE_DEVICES` when `from_slurm`, else NVML's UUIDs);
    /// `user_lists` names the other lists in the step's environment that
    /// Slurm did not set. `user_order` is `CUDA_DEVICE_ORDER` in the step's
    /// environment. What `verbose` should report goes to `notes`. An error
    /// where nothing the vendor's runtimes read can be narrowed.
    pub fn plan(
        chosen: &Chosen,
        visible: Visible,
        step: &StepLists,
        user_lists: &[&str],
        user_order: Option<&str>,
        notes: &mut Vec<String>,
    ) -> Result<Rendering, Unbindable> {
        let vendor = chosen.vendor;
        let unbindable: Option<fn(Chosen) -> Unbindable> = match vendor {
            Vendor::Amd | Vendor::Intel if !step.from_slurm => Some(Unbindable::NvmlUuids),
            Vendor::Intel if step.list(env::ZE).is_none() => Some(Unbindable::NoZeList),
            Vendor::Amd if user_lists.contains(&env::ROCR) => Some(Unbindable::UsersRocr),
            _ => None,
        };
        if let Some(unbindable) = unbindable {
            return Err(unbindable(chosen.clone()));
        }
        notes.push(format!(
            "GPU lists written for {} runtimes ({})",
            vendor.name(),
            chosen.why
        ));
        let mut rendering = Rendering {
            vendor,
            visible,
            pci_order: false,
        };
        match vendor {
            Vendor::Nvidia if step.from_slurm && step.gpus.iter().all(|g| is_index(g)) => {
                match user_order {
                    None => rendering.pci_order = true,
                    Some(order) => notes.push(format!(
                        "{}={} kept as set; Slurm's indices follow the PCI bus order",
                        env::DEVICE_ORDER,
                        quote(order)
                    )),
                }
            }
            Vendor::Nvidia => {}
            Vendor::Amd if step.list(env::ROCR).is_none() => notes.push(format!(
                "{} not set by Slurm: {} and {} carry the GPU itself",
                env::ROCR,
                env::CUDA,
                env::GPU_ORDINAL
            )),
            Vendor::Amd => {}
            Vendor::Intel if visible == Visible::Rotate => {
                rendering.visible = Visible::Single;
                notes.push(format!(
                    "visible=rotate cannot apply: Level Zero does not reorder devices \
                     by {}, so each task keeps its own GPU only",
                    env::ZE
                ));
            }
            Vendor::Intel => {}
        }
        Ok(rendering)
    }
}

/// A step's GPU lists as Slurm set them: `gpus` (the mapped list) and the
/// other lists of the same length.
pub struct StepLists<'a> {
    pub gpus: &'a [String],
    /// `gpus` is Slurm's `CUDA_VISIBLE_DEVICES` (not NVML's list).
    pub from_slurm: bool,
    pub others: &'a [(&'static str, Vec<String>)],
}

impl StepLists<'_> {
    fn list(&self, name: &str) -> Option<&[String]> {
        self.others
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, list)| list.as_slice())
    }
}

/// The variables for the task at `position` in the step's lists.
pub fn render(r: &Rendering, step: &StepLists, position: usize) -> Vec<(String, String)> {
    let own = |list: &[String]| join(&visible_list(list, position, r.visible));
    // An index list layered on a filter that already holds the task's GPUs
    // in the task's order: its first entries, in order.
    let layered = || {
        let count = visible_list(step.gpus, position, r.visible).len();
        (0..count)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut set = Vec::new();
    let mut put = |name: &str, value: String| set.push((name.to_string(), value));
    match r.vendor {
        Vendor::Nvidia => {
            put(env::CUDA, own(step.gpus));
            if r.pci_order {
                put(env::DEVICE_ORDER, "PCI_BUS_ID".to_string());
            }
        }
        Vendor::Amd => match step.list(env::ROCR) {
            Some(rocr) => {
                put(env::ROCR, own(rocr));
                if step.from_slurm {
                    put(env::CUDA, layered());
                }
                if step.list(env::GPU_ORDINAL).is_some() {
                    put(env::GPU_ORDINAL, layered());
                }
            }
            // Without ROCR, HIP's list and OpenCL's each filter the node's
            // devices directly, in different runtimes.
            None => {
                put(env::CUDA, own(step.gpus));
                if let Some(ordinal) = step.list(env::GPU_ORDINAL) {
                    put(env::GPU_ORDINAL, own(ordinal));
                }
            }
        },
        Vendor::Intel => {
            if let Some(ze) = step.list(env::ZE) {
                put(env::ZE, own(ze));
            }
            // Level Zero ignores it; narrowed so that what the task reads
            // there names the GPU it has, as on NVIDIA nodes.
            put(env::CUDA, own(step.gpus));
        }
    }
    set
}

fn is_index(token: &str) -> bool {
    !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests;
