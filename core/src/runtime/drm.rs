//! AMD's and Intel's GPUs as the kernel lists them: the DRM render nodes.

use super::rules::{KernelGpu, Vendor, MAX_NODE_GPUS};
use crate::files::{at, read_text, Files};
use crate::names::Named;
use std::path::Path;

/// The first DRM render node's number (`/dev/dri/renderD128`).
const FIRST_RENDER_NODE: u32 = 128;

/// Reads the node's AMD or Intel GPUs from the DRM render nodes under
/// `root`: each `sys/class/drm/renderD<N>` whose PCI device (`device/vendor`)
/// is `vendor`'s, its bus id from `device/uevent` (`PCI_SLOT_NAME`), its
/// minor `N - 128`. gres.conf names these GPUs `File=/dev/dri/renderD<N>`,
/// and ROCm and Level Zero number them in the order the driver probed
/// them, which is the render nodes' order; `crate::topology::resolve_tokens` accepts an
/// index only where that order is also PCI order.
pub fn gpus(files: &dyn Files, root: &Path, vendor: Vendor) -> Result<Vec<KernelGpu>, String> {
    let dir = root.join("sys/class/drm");
    let entries = files
        .list(&dir, 4 * MAX_NODE_GPUS)
        .map_err(|e| at(&dir, e))?;
    let mut gpus = Vec::new();
    for name in entries {
        let path = dir.join(&name);
        let Some(number) = name
            .strip_prefix("renderD")
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let device = path.join("device");
        let ours = super::detect::read_hex(files, &device.join("vendor"))
            .and_then(Vendor::from_pci_vendor)
            == Some(vendor);
        if !ours {
            continue;
        }
        let uevent = read_text(files, &device.join("uevent"))?;
        let bus_id = uevent
            .lines()
            .find_map(|l| l.strip_prefix("PCI_SLOT_NAME="))
            .map(|b| b.trim().to_lowercase())
            .ok_or_else(|| format!("{}: no PCI_SLOT_NAME", device.join("uevent").display()))?;
        let minor = number.checked_sub(FIRST_RENDER_NODE).ok_or_else(|| {
            format!(
                "{}: a render node numbered below {FIRST_RENDER_NODE}",
                path.display()
            )
        })?;
        gpus.push(KernelGpu {
            bus_id,
            minor,
            uuid: None,
        });
    }
    if gpus.is_empty() {
        return Err(format!(
            "no {} GPU among the render nodes in {}",
            vendor.name(),
            dir.display()
        ));
    }
    if gpus.len() > MAX_NODE_GPUS {
        return Err(format!(
            "more than {MAX_NODE_GPUS} GPUs in {}",
            dir.display()
        ));
    }
    Ok(gpus)
}
