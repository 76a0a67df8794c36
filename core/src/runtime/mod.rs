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
//!
//! This file is the table's dispatch (`Vendor::rules`, [`choose`],
//! `render`, `kernel_gpus`); behind it:
//!
//! - `rules.rs`: what the vendors' files share: [`Vendor`], `Rules`,
//!   [`Rendering`], `StepLists`, `Unbindable`, [`KernelGpu`].
//! - `nvidia.rs`, `amd.rs`, `intel.rs`: one vendor each, filling `Rules`:
//!   its PCI id, the list that carries a task's GPU, when a step cannot be
//!   bound, its variables, its kernel lister.
//! - `detect.rs`: the vendor from PCI devices and drivers.
//! - [`drm`]: AMD's and Intel's render nodes.
//! - `tests.rs`: (tests only) rendering against a model of each runtime;
//!   detection reads files, so it is tested on real trees
//!   (`host/tests/kernel_files.rs`).

mod amd;
mod detect;
pub mod drm;
mod intel;
mod nvidia;
mod rules;

pub use detect::detect;
pub use rules::{Chosen, KernelGpu, Rendering, Vendor, VendorSetting};

pub(crate) use rules::{StepLists, Unbindable, MAX_NODE_GPUS};

use rules::Rules;

use crate::files::Files;
use crate::method::Visible;
use crate::names::Named;
use crate::snapshot::Var;
use std::path::Path;

impl Vendor {
    /// Its rules: one file per vendor fills them.
    fn rules(self) -> &'static Rules {
        match self {
            Vendor::Nvidia => &nvidia::RULES,
            Vendor::Amd => &amd::RULES,
            Vendor::Intel => &intel::RULES,
        }
    }

    /// The variable that carries a task's GPU for this vendor's runtime.
    pub fn carrier(self) -> Var {
        self.rules().carrier
    }

    /// Whether NVML lists and locates this vendor's GPUs.
    pub fn has_nvml(self) -> bool {
        self.rules().nvml
    }

    /// The vendor whose PCI vendor id this is.
    pub(crate) fn from_pci_vendor(id: u32) -> Option<Vendor> {
        Vendor::ALL.iter().copied().find(|v| v.rules().pci_id == id)
    }
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

impl Rendering {
    /// Decides for a step whose GPUs are `gpus` (from Slurm's
    /// `CUDA_VISIBLE_DEVICES` when `from_slurm`, else NVML's UUIDs);
    /// `user_lists` names the other lists in the step's environment that
    /// Slurm did not set. `user_order` is `CUDA_DEVICE_ORDER` in the step's
    /// environment. What `verbose` should report goes to `notes`. An error
    /// where nothing the vendor's runtimes read can be narrowed.
    pub(crate) fn plan(
        chosen: &Chosen,
        visible: Visible,
        step: &StepLists,
        user_lists: &[Var],
        user_order: Option<&str>,
        notes: &mut Vec<String>,
    ) -> Result<Rendering, Unbindable> {
        let vendor = chosen.vendor;
        let rules = vendor.rules();
        if let Some(unbindable) = (rules.unbindable)(step, user_lists) {
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
        (rules.adjust)(&mut rendering, step, user_order, notes);
        Ok(rendering)
    }
}

/// The variables for the task holding `share` (positions in the step's
/// lists, its first GPU first).
pub(crate) fn render(r: &Rendering, step: &StepLists, share: &[usize]) -> Vec<(String, String)> {
    (r.vendor.rules().render)(r, step, share)
}

/// The node's GPUs of `vendor` as the kernel lists them under `root`:
/// NVIDIA's driver files, AMD's and Intel's render nodes.
pub(crate) fn kernel_gpus(
    files: &dyn Files,
    root: &Path,
    vendor: Vendor,
) -> Result<Vec<KernelGpu>, String> {
    (vendor.rules().kernel_gpus)(files, root)
}

#[cfg(test)]
mod tests;
