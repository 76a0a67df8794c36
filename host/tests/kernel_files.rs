//! The core's readers of the kernel's files on real trees in a temporary
//! folder, read through the front ends' own [`HostFiles`]: the vendor
//! detection, and the GPUs located through sysfs, NVIDIA's driver files
//! and the render nodes, for a step and for `show`. (The core's own tests
//! read files held in memory: the core cannot depend on this crate.)

use desi_gpu_map_core::runtime::{choose, detect, drm, Chosen, Vendor, VendorSetting};
use desi_gpu_map_core::topology::{from_kernel, locate_token, GpuPlace, Unlocated};
use desi_gpu_map_host::files::HostFiles;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fake `/` under the system's temporary directory, removed on drop.
struct FakeRoot(PathBuf);

impl FakeRoot {
    fn new() -> FakeRoot {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("dgm-root-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        FakeRoot(dir)
    }

    /// Writes `text` to `path` under the root, making its folders.
    fn put(&self, path: &str, text: &str) -> &Self {
        let path = self.0.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
        self
    }

    fn touch(&self, path: &str) -> &Self {
        self.put(path, "")
    }

    /// A PCI device with the given vendor and class, as sysfs writes them.
    fn pci(&self, address: &str, vendor: &str, class: &str) -> &Self {
        let dir = format!("sys/bus/pci/devices/{address}");
        self.put(&format!("{dir}/vendor"), &format!("{vendor}\n"))
            .put(&format!("{dir}/class"), &format!("{class}\n"))
    }

    /// A GPU of PCI `vendor` at `bus` with `cpus`, as render node `render`.
    fn render_node(&self, bus: &str, vendor: &str, render: u32, cpus: &str) -> &Self {
        let dev = format!("sys/bus/pci/devices/{bus}");
        let uevent = format!("DRIVER=amdgpu\nPCI_SLOT_NAME={bus}\n");
        self.put(&format!("{dev}/vendor"), &format!("{vendor}\n"))
            .put(&format!("{dev}/uevent"), &uevent)
            .put(&format!("{dev}/numa_node"), "0\n")
            .put(&format!("{dev}/local_cpulist"), &format!("{cpus}\n"));
        let node = self.0.join(format!("sys/class/drm/renderD{render}"));
        std::fs::create_dir_all(&node).unwrap();
        let target = format!("../../../bus/pci/devices/{bus}");
        std::os::unix::fs::symlink(target, node.join("device")).unwrap();
        self
    }

    fn detect(&self) -> Chosen {
        detect(&HostFiles, &self.0)
    }
}

impl Drop for FakeRoot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// ------------------------------------------------------------ detection

#[test]
fn detects_a_single_vendor_from_pci() {
    let r = FakeRoot::new();
    r.pci("0000:00:00.0", "0x8086", "0x060000") // Intel host bridge: not a GPU
        .pci("0000:02:00.0", "0x1a03", "0x030000") // ASPEED BMC graphics
        .pci("0000:c1:00.0", "0x1002", "0x038000"); // AMD Instinct MI250X
    assert_eq!(r.detect().vendor, Vendor::Amd);
    assert!(
        r.detect().why.contains("amd GPUs on PCI"),
        "{}",
        r.detect().why
    );

    let r = FakeRoot::new();
    r.pci("0000:17:00.0", "0x10de", "0x030200"); // H100: 3D controller
    assert_eq!(r.detect().vendor, Vendor::Nvidia);

    let r = FakeRoot::new();
    r.pci("0000:29:00.0", "0x8086", "0x038000"); // Data Center GPU Max
    assert_eq!(r.detect().vendor, Vendor::Intel);

    let r = FakeRoot::new();
    r.pci("0000:05:00.0", "0x1002", "0x120000"); // processing accelerator
    assert_eq!(r.detect().vendor, Vendor::Amd);
}

#[test]
fn several_vendors_are_told_apart_by_the_compute_driver() {
    let r = FakeRoot::new();
    r.pci("0000:00:02.0", "0x8086", "0x030000") // Intel integrated graphics
        .pci("0000:c1:00.0", "0x1002", "0x038000")
        .touch("dev/kfd");
    assert_eq!(r.detect().vendor, Vendor::Amd);

    let r = FakeRoot::new();
    r.pci("0000:00:02.0", "0x8086", "0x030000")
        .pci("0000:17:00.0", "0x10de", "0x030200")
        .touch("sys/module/nvidia/version");
    assert_eq!(r.detect().vendor, Vendor::Nvidia);

    // An old server's AMD BMC graphics (radeon, no kfd) next to NVIDIA GPUs.
    let r = FakeRoot::new();
    r.pci("0000:01:03.0", "0x1002", "0x030000")
        .pci("0000:17:00.0", "0x10de", "0x030200")
        .touch("dev/nvidiactl");
    assert_eq!(r.detect().vendor, Vendor::Nvidia);
}

#[test]
fn unknown_or_mixed_nodes_fall_back_to_nvidia() {
    let r = FakeRoot::new();
    let found = r.detect();
    assert_eq!(found.vendor, Vendor::Nvidia);
    assert_eq!(found.why, "no GPU vendor detected; NVIDIA by default");

    let r = FakeRoot::new();
    r.pci("0000:00:01.0", "0x1af4", "0xffff00") // virtio: this test machine
        .pci("0000:00:03.0", "0x1af4", "0x020000");
    assert_eq!(r.detect().vendor, Vendor::Nvidia);

    let r = FakeRoot::new();
    r.pci("0000:17:00.0", "0x10de", "0x030200")
        .pci("0000:c1:00.0", "0x1002", "0x038000")
        .touch("dev/kfd")
        .touch("sys/module/nvidia/version");
    let found = r.detect();
    assert_eq!(found.vendor, Vendor::Nvidia);
    assert_eq!(
        found.why,
        "GPUs of several vendors (nvidia, amd); NVIDIA by default"
    );

    // Unreadable or odd sysfs files are skipped, not trusted.
    let r = FakeRoot::new();
    r.pci("0000:c1:00.0", "AMD", "0x038000")
        .pci("0000:c2:00.0", "0x1002", "");
    assert_eq!(r.detect().vendor, Vendor::Nvidia);
}

#[test]
fn a_driver_alone_decides_when_pci_shows_no_gpu() {
    let r = FakeRoot::new();
    r.touch("dev/kfd");
    let found = r.detect();
    assert_eq!(found.vendor, Vendor::Amd);
    assert_eq!(found.why, "detected: no GPU on PCI, amd driver present");
}

#[test]
fn the_plugstack_setting_overrides_detection() {
    let r = FakeRoot::new();
    r.pci("0000:17:00.0", "0x10de", "0x030200");
    let found = choose(VendorSetting::Fixed(Vendor::Amd), &HostFiles, &r.0);
    assert_eq!(found.vendor, Vendor::Amd);
    assert_eq!(found.why, "vendor=amd in plugstack.conf");
    assert_eq!(
        choose(VendorSetting::Auto, &HostFiles, &r.0).vendor,
        Vendor::Nvidia
    );
}

// ------------------------------------------------------------ the GPUs located

#[test]
fn the_kernel_files_under_a_root() {
    let r = FakeRoot::new();
    let root = &r.0;
    let put = |path: &str, text: &str| {
        r.put(path, text);
    };
    for (bus, minor, numa, cpus) in [
        ("0000:03:00.0", 0, "1", "4-7\n"),
        ("0000:41:00.0", 1, "0", "0-3\n"),
        ("0000:81:00.0", 2, "-1", "0-7\n"),
    ] {
        put(
            &format!("proc/driver/nvidia/gpus/{bus}/information"),
            &format!(
                "Model: Fake\nGPU UUID: GPU-k{minor}\nDevice Minor: {minor}\nBus Location: {bus}\n"
            ),
        );
        put(
            &format!("sys/bus/pci/devices/{bus}/numa_node"),
            &format!("{numa}\n"),
        );
        put(&format!("sys/bus/pci/devices/{bus}/local_cpulist"), cpus);
    }
    let abs = |l: &[&str]| -> Vec<String> { l.iter().map(|s| s.to_string()).collect() };
    let t = from_kernel(
        &HostFiles,
        root,
        Vendor::Nvidia,
        &["0", "1"],
        Some(&abs(&["0", "1"])),
    )
    .unwrap();
    assert_eq!(
        t.place("0").unwrap().cpus.as_ref().unwrap().to_string(),
        "4-7"
    );
    assert_eq!(t.place("1").unwrap().numa, Some(0));
    assert_eq!(t.cpus.to_string(), "0-7");
    let t = from_kernel(&HostFiles, root, Vendor::Nvidia, &["2"], Some(&abs(&["2"]))).unwrap();
    assert_eq!(t.gpus[0].cpus, None, "NUMA -1: no affinity");
    // UUIDs (Slurm 26.05's env_uuid) by the driver's own `GPU UUID`,
    // with no index to resolve; one it does not name needs NVML.
    let t = from_kernel(
        &HostFiles,
        root,
        Vendor::Nvidia,
        &["GPU-k1", "GPU-k0"],
        None,
    )
    .unwrap();
    let cpus: Vec<String> = t
        .gpus
        .iter()
        .map(|g| g.cpus.as_ref().unwrap().to_string())
        .collect();
    assert_eq!(cpus, ["0-3", "4-7"]);
    let (bus, place) = locate_token(&HostFiles, root, Vendor::Nvidia, "GPU-k1", None).unwrap();
    assert_eq!((bus.as_str(), place.numa), ("0000:41:00.0", Some(0)));
    let err = from_kernel(&HostFiles, root, Vendor::Nvidia, &["GPU-x"], None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("only NVML can locate"), "{err}");
    let none = root.join("nothing");
    assert!(from_kernel(&HostFiles, &none, Vendor::Nvidia, &["0"], None)
        .unwrap_err()
        .to_string()
        .contains("nothing/proc/driver/nvidia/gpus"));
}

#[test]
fn amd_and_intel_gpus_through_their_render_nodes() {
    let r = FakeRoot::new();
    let root = &r.0;
    // Two AMD GCDs in PCI order (render nodes 128, 129), a BMC's
    // graphics (render node 130, another vendor) and a card node.
    for (bus, vendor, render, cpus) in [
        ("0000:c1:00.0", "0x1002", 128, "48-63"),
        ("0000:c6:00.0", "0x1002", 129, "0-15"),
        ("0000:02:00.0", "0x1a03", 130, "0-63"),
    ] {
        r.render_node(bus, vendor, render, cpus);
    }
    std::fs::create_dir_all(root.join("sys/class/drm/card0")).unwrap();
    let abs: Vec<String> = vec!["0".into(), "1".into()];
    let gpus = drm::gpus(&HostFiles, root, Vendor::Amd).unwrap();
    assert_eq!(gpus.len(), 2, "{gpus:?}");
    let t = from_kernel(&HostFiles, root, Vendor::Amd, &["0", "1"], Some(&abs)).unwrap();
    assert_eq!(t.gpus[0].cpus.as_ref().unwrap().to_string(), "48-63");
    assert_eq!(t.gpus[1].cpus.as_ref().unwrap().to_string(), "0-15");
    // Under device constraint, the second GCD alone is renumbered 0.
    let one: Vec<String> = vec!["1".into()];
    let t = from_kernel(&HostFiles, root, Vendor::Amd, &["0"], Some(&one)).unwrap();
    assert_eq!(t.gpus[0].cpus.as_ref().unwrap().to_string(), "0-15");
    let err = from_kernel(&HostFiles, root, Vendor::Intel, &["0"], Some(&abs[..1]))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("no intel GPU among the render nodes in"),
        "{err}"
    );
}

#[test]
fn one_task_gpu_located_for_show() {
    let r = FakeRoot::new();
    let root = &r.0;
    for (g, cpus) in [(1, "0-7"), (2, "8-15"), (3, "16-23"), (4, "24-31")] {
        r.render_node(&format!("0000:0{g}:00.0"), "0x1002", 127 + g, cpus);
    }
    let step = |l: &[&str]| -> Vec<String> { l.iter().map(|s| s.to_string()).collect() };
    let at = |token: &str, s: &[&str]| {
        locate_token(&HostFiles, root, Vendor::Amd, token, Some(&step(s)))
    };
    let cpus = |r: Result<(String, GpuPlace), Unlocated>| r.unwrap().1.cpus.unwrap().to_string();
    assert_eq!(cpus(at("2", &["0", "1", "2", "3"])), "16-23", "whole node");
    assert_eq!(
        cpus(at("3", &["2", "3"])),
        "24-31",
        "absolute: 3 cannot be relative"
    );
    assert_eq!(cpus(at("0", &["2", "3"])), "16-23", "relative: 0 is 2");
    let err = at("1", &["1", "3"]).unwrap_err().to_string();
    assert!(
        err.contains("could be Slurm's index or one renumbered"),
        "{err}"
    );
    let err = at("5", &["2", "3"]).unwrap_err().to_string();
    assert!(err.contains("is not among the step's"), "{err}");
    let err = locate_token(&HostFiles, root, Vendor::Amd, "0", None)
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("SLURM_STEP_GPUS is not set"), "{err}");
}
