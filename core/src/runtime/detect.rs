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
        // The class first: a node's other devices (a few hundred on a
        // large one) cost one read each, not two, in every task's prolog.
        if !read_hex(files, &dir.join("class")).is_some_and(is_gpu_class) {
            continue;
        }
        let vendor = read_hex(files, &dir.join("vendor")).and_then(Vendor::from_pci_vendor);
        if let Some(vendor) = vendor.filter(|v| !found.contains(v)) {
            found.push(vendor);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::testing::FakeFiles;
    use std::cell::RefCell;
    use std::io;
    use std::path::PathBuf;

    /// [`FakeFiles`] that records each path read.
    struct Counted(FakeFiles, RefCell<Vec<PathBuf>>);

    impl Files for Counted {
        fn read(&self, path: &Path) -> io::Result<String> {
            self.1.borrow_mut().push(path.to_path_buf());
            self.0.read(path)
        }
        fn list(&self, dir: &Path, most: usize) -> io::Result<Vec<String>> {
            self.0.list(dir, most)
        }
        fn exists(&self, path: &Path) -> bool {
            self.0.exists(path)
        }
        fn stat(&self, path: &Path) -> io::Result<crate::files::Stat> {
            self.0.stat(path)
        }
        fn resolve(&self, path: &Path) -> io::Result<PathBuf> {
            self.0.resolve(path)
        }
    }

    #[test]
    fn only_a_gpus_vendor_is_read() {
        let mut files = FakeFiles::default();
        let mut device = |name: &str, class: &str, vendor: &str| {
            let dir = PathBuf::from("/sys/bus/pci/devices").join(name);
            files.texts.insert(dir.join("class"), format!("{class}\n"));
            files
                .texts
                .insert(dir.join("vendor"), format!("{vendor}\n"));
        };
        for bridge in 0..20 {
            device(&format!("0000:00:{bridge:02x}.0"), "0x060400", "0x8086");
        }
        device("0000:41:00.0", "0x030200", "0x10de");
        let counted = Counted(files, RefCell::default());
        assert_eq!(detect(&counted, Path::new("/")).vendor, Vendor::Nvidia);
        let reads = counted.1.into_inner();
        let vendors: Vec<&PathBuf> = reads.iter().filter(|p| p.ends_with("vendor")).collect();
        assert_eq!(
            vendors,
            [&PathBuf::from("/sys/bus/pci/devices/0000:41:00.0/vendor")]
        );
        assert_eq!(reads.len(), 22);
    }
}
