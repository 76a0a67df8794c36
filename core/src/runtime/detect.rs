//! Which vendor's GPUs a node holds, read from its PCI devices and the
//! compute drivers present.

use super::rules::{Chosen, Vendor};
use crate::files::Files;
use crate::names::Named;
use std::path::Path;

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
                        vendor_list(several)
                    ),
                ),
            }
        }
    }
}

fn vendor_list(vendors: &[Vendor]) -> String {
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
