//! Which vendor's GPUs a node holds, read from its PCI devices and the
//! compute drivers present.

use super::rules::{Chosen, Vendor};
use crate::files::Files;
use crate::names::Named;
use std::collections::HashMap;
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
    let listed = listed_vendors(files, root);
    let mut found = Vec::new();
    for name in entries {
        let dir = devices.join(&name);
        // A device the kernel's list gives another vendor's id costs no
        // read; else the class first: a node's other devices (a few
        // hundred on a large one) cost one read each, not two, in every
        // task's prolog.
        let listed_id = place(&name).and_then(|place| listed.get(place).copied().flatten());
        if listed_id.is_some_and(|id| Vendor::from_pci_vendor(id).is_none()) {
            continue;
        }
        if !read_hex(files, &dir.join("class")).is_some_and(is_gpu_class) {
            continue;
        }
        let vendor = listed_id
            .or_else(|| read_hex(files, &dir.join("vendor")))
            .and_then(Vendor::from_pci_vendor);
        if let Some(vendor) = vendor.filter(|v| !found.contains(v)) {
            found.push(vendor);
        }
    }
    found.sort_by_key(|v| *v as u8);
    found
}

/// The kernel's one-file list of the PCI devices (`/proc/bus/pci/devices`)
/// as each one's vendor id by its place (`BB:DD.F`): one read where the
/// node has hundreds. The list gives no domain, so a place that it names
/// twice has no id here (`None`), and a device it does not name (the list
/// unreadable, or cut at [`crate::files::MAX_FILE`]) is read from its own
/// files, as every one was before.
fn listed_vendors(files: &dyn Files, root: &Path) -> HashMap<String, Option<u32>> {
    let mut listed = HashMap::new();
    let Ok(text) = files.read(&root.join("proc/bus/pci/devices")) else {
        return listed;
    };
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let hex = |field: Option<&str>| u32::from_str_radix(field?, 16).ok();
        let (Some(at), Some(ids)) = (hex(fields.next()), hex(fields.next())) else {
            continue;
        };
        let (bus, slot, function) = ((at >> 8) & 0xff, (at >> 3) & 0x1f, at & 7);
        let place = format!("{bus:02x}:{slot:02x}.{function:x}");
        listed
            .entry(place)
            .and_modify(|id| *id = None)
            .or_insert(Some(ids >> 16));
    }
    listed
}

/// A sysfs PCI device's place without its domain (`0000:41:00.0` gives
/// `41:00.0`).
fn place(name: &str) -> Option<&str> {
    name.split_once(':').map(|(_, place)| place)
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
        // 20 classes, the GPU's class and vendor, and the kernel's list
        // (absent here).
        assert_eq!(reads.len(), 23);
    }

    /// With the kernel's list of PCI devices, a device of another vendor
    /// costs no read, and a GPU only its class; a device the list does not
    /// name, or names in two domains, is read from its own files.
    #[test]
    fn the_kernels_list_spares_other_vendors_devices_any_read() {
        let mut files = FakeFiles::default();
        let mut list = String::new();
        let mut device = |name: &str, class: &str, vendor: u32, listed: bool| {
            let dir = PathBuf::from("/sys/bus/pci/devices").join(name);
            files.texts.insert(dir.join("class"), format!("{class}\n"));
            files
                .texts
                .insert(dir.join("vendor"), format!("0x{vendor:04x}\n"));
            if listed {
                let (bus, rest) = name[5..].split_once(':').unwrap();
                let (slot, function) = rest.split_once('.').unwrap();
                let at = u32::from_str_radix(bus, 16).unwrap() << 8
                    | u32::from_str_radix(slot, 16).unwrap() << 3
                    | u32::from_str_radix(function, 16).unwrap();
                list.push_str(&format!("{at:04x}\t{vendor:04x}1234\t0\tnvidia\n"));
            }
        };
        // An AMD CPU's bridges (0x1022 is no GPU vendor's id).
        for bridge in 0..20 {
            device(&format!("0000:00:{bridge:02x}.0"), "0x060400", 0x1022, true);
        }
        device("0000:41:00.0", "0x030200", 0x10de, true);
        device("0000:42:00.0", "0x060400", 0x1022, false);
        device("0000:43:00.0", "0x020000", 0x15b3, true);
        device("0001:43:00.0", "0x030000", 0x1002, true);
        files
            .texts
            .insert(PathBuf::from("/proc/bus/pci/devices"), list);
        let counted = Counted(files, RefCell::default());
        // NVIDIA and AMD both on PCI, no driver: NVIDIA by default, as
        // without the list.
        let chosen = detect(&counted, Path::new("/"));
        assert!(
            chosen.why.contains("several vendors (nvidia, amd)"),
            "{}",
            chosen.why
        );
        let reads = counted.1.into_inner();
        let read: Vec<&str> = reads.iter().map(|p| p.to_str().unwrap()).collect();
        assert_eq!(
            read,
            [
                "/proc/bus/pci/devices",
                "/sys/bus/pci/devices/0000:41:00.0/class",
                "/sys/bus/pci/devices/0000:42:00.0/class",
                "/sys/bus/pci/devices/0000:43:00.0/class",
                "/sys/bus/pci/devices/0001:43:00.0/class",
                "/sys/bus/pci/devices/0001:43:00.0/vendor",
            ]
        );
    }
}
