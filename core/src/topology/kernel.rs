//! The step's GPUs located through the kernel's files (read through
//! [`Files`]): their NUMA node and local CPUs from sysfs.

use super::place::{union_of, GpuPlace, Topology};
use super::resolve::{index, resolve_tokens};
use crate::cpuset::CpuSet;
use crate::files::{read_text, Files};
use crate::runtime::Vendor;
use crate::text::quote;
use std::path::Path;

/// A GPU's place from sysfs under `root`: `numa_node` (-1: none, so no
/// affinity) and `local_cpulist`.
pub fn kernel_place(
    files: &dyn Files,
    root: &Path,
    token: &str,
    bus_id: &str,
) -> Result<GpuPlace, String> {
    let dir = root.join("sys/bus/pci/devices").join(bus_id);
    let numa_text = read_text(files, &dir.join("numa_node"))?;
    let numa = numa_text.trim().parse::<i64>().map_err(|_| {
        format!(
            "{}: odd NUMA node {}",
            dir.display(),
            quote(numa_text.trim())
        )
    })?;
    let numa = u32::try_from(numa).ok();
    let cpus = match numa {
        None => None,
        Some(_) => {
            let list = read_text(files, &dir.join("local_cpulist"))?;
            Some(CpuSet::parse_list(list.trim()).map_err(|e| e.to_string())?)
        }
    };
    Ok(GpuPlace {
        token: token.to_string(),
        numa,
        cpus,
    })
}

/// The step's GPUs located through the kernel under `root`, without NVML:
/// NVIDIA's through its driver's files, AMD's and Intel's through their
/// render nodes ([`crate::runtime::kernel_gpus`]); see
/// [`resolve_tokens`].
pub fn from_kernel<S: AsRef<str>>(
    files: &dyn Files,
    root: &Path,
    vendor: Vendor,
    tokens: &[S],
    absolute: Option<&[String]>,
) -> Result<Topology, String> {
    let devices = crate::runtime::kernel_gpus(files, root, vendor)?;
    let resolved = resolve_tokens(tokens, absolute, &devices)?;
    let gpus = tokens
        .iter()
        .zip(&resolved)
        .map(|(token, gpu)| kernel_place(files, root, token.as_ref(), &gpu.bus_id))
        .collect::<Result<Vec<_>, _>>()?;
    let cpus = union_of(&gpus);
    Ok(Topology { cpus, gpus })
}

/// Locates one GPU a task was given (`token`, from its vendor's list) for
/// `desi-gpu-map show`: its bus id and place. The task's list is narrowed,
/// so whether an index is Slurm's own or renumbered under device
/// constraint is told from the step's list (`SLURM_STEP_GPUS`, `step`):
/// an index in it that cannot be relative (or a step of GPUs `0..n`) is
/// absolute, one outside it is relative; one that could be either is
/// refused. The index then resolves as in [`resolve_tokens`].
pub fn locate_token(
    files: &dyn Files,
    root: &Path,
    vendor: Vendor,
    token: &str,
    step: Option<&[String]>,
) -> Result<(String, GpuPlace), String> {
    if crate::slurm::gpus::is_uuid(token) {
        let devices = crate::runtime::kernel_gpus(files, root, vendor)?;
        let gpu = resolve_tokens(&[token], None, &devices)?
            .into_iter()
            .next()
            .ok_or_else(|| format!("cannot locate GPU {}", quote(token)))?;
        let place = kernel_place(files, root, token, &gpu.bus_id)?;
        return Ok((gpu.bus_id, place));
    }
    let step = step.ok_or_else(|| {
        format!(
            "{} is not set: cannot tell absolute indices from renumbered ones",
            crate::env::STEP_GPUS
        )
    })?;
    let i = index(token)?;
    let in_step = step.iter().any(|s| s == token);
    let identity = step.iter().enumerate().all(|(j, s)| *s == j.to_string());
    let absolute = match (in_step, i < step.len()) {
        (true, false) => i,
        (true, true) if identity => i,
        (false, true) => {
            let mut sorted: Vec<usize> = step.iter().map(|a| index(a)).collect::<Result<_, _>>()?;
            sorted.sort_unstable();
            sorted
                .get(i)
                .copied()
                .ok_or_else(|| format!("cannot locate GPU {}", quote(token)))?
        }
        (true, true) => {
            return Err(format!(
                "GPU {} could be Slurm's index or one renumbered from the step's {}",
                quote(token),
                quote(&step.join(","))
            ))
        }
        (false, false) => {
            return Err(format!(
                "GPU {} is not among the step's {}",
                quote(token),
                quote(&step.join(","))
            ))
        }
    };
    let devices = crate::runtime::kernel_gpus(files, root, vendor)?;
    let wanted = [absolute.to_string()];
    let gpu = resolve_tokens(&wanted, Some(&wanted), &devices)?
        .into_iter()
        .next()
        .ok_or_else(|| format!("cannot locate GPU {}", quote(token)))?;
    let place = kernel_place(files, root, token, &gpu.bus_id)?;
    Ok((gpu.bus_id, place))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::testing::DiskFiles;

    /// Writes `text` to `path` under `root`, making its folders.
    fn put_file(root: &Path, path: &str, text: &str) {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    /// A GPU of PCI `vendor` at `bus` with `cpus`, as render node `render`.
    fn put_render_node(root: &Path, bus: &str, vendor: &str, render: u32, cpus: &str) {
        let dev = format!("sys/bus/pci/devices/{bus}");
        put_file(root, &format!("{dev}/vendor"), &format!("{vendor}\n"));
        let uevent = format!("DRIVER=amdgpu\nPCI_SLOT_NAME={bus}\n");
        put_file(root, &format!("{dev}/uevent"), &uevent);
        put_file(root, &format!("{dev}/numa_node"), "0\n");
        put_file(root, &format!("{dev}/local_cpulist"), &format!("{cpus}\n"));
        let node = root.join(format!("sys/class/drm/renderD{render}"));
        std::fs::create_dir_all(&node).unwrap();
        let target = format!("../../../bus/pci/devices/{bus}");
        std::os::unix::fs::symlink(target, node.join("device")).unwrap();
    }

    #[test]
    fn the_kernel_files_under_a_root() {
        let root = std::env::temp_dir().join(format!("dgm-kernel-{}", std::process::id()));
        let put = |path: &str, text: &str| put_file(&root, path, text);
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
            &DiskFiles,
            &root,
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
        let t = from_kernel(
            &DiskFiles,
            &root,
            Vendor::Nvidia,
            &["2"],
            Some(&abs(&["2"])),
        )
        .unwrap();
        assert_eq!(t.gpus[0].cpus, None, "NUMA -1: no affinity");
        // UUIDs (Slurm 26.05's env_uuid) by the driver's own `GPU UUID`,
        // with no index to resolve; one it does not name needs NVML.
        let t = from_kernel(
            &DiskFiles,
            &root,
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
        let (bus, place) = locate_token(&DiskFiles, &root, Vendor::Nvidia, "GPU-k1", None).unwrap();
        assert_eq!((bus.as_str(), place.numa), ("0000:41:00.0", Some(0)));
        let err = from_kernel(&DiskFiles, &root, Vendor::Nvidia, &["GPU-x"], None).unwrap_err();
        assert!(err.contains("only NVML can locate"), "{err}");
        let none = root.join("nothing");
        assert!(from_kernel(&DiskFiles, &none, Vendor::Nvidia, &["0"], None)
            .unwrap_err()
            .contains("nothing/proc/driver/nvidia/gpus"));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn amd_and_intel_gpus_through_their_render_nodes() {
        let root = std::env::temp_dir().join(format!("dgm-drm-{}", std::process::id()));
        // Two AMD GCDs in PCI order (render nodes 128, 129), a BMC's
        // graphics (render node 130, another vendor) and a card node.
        for (bus, vendor, render, cpus) in [
            ("0000:c1:00.0", "0x1002", 128, "48-63"),
            ("0000:c6:00.0", "0x1002", 129, "0-15"),
            ("0000:02:00.0", "0x1a03", 130, "0-63"),
        ] {
            put_render_node(&root, bus, vendor, render, cpus);
        }
        std::fs::create_dir_all(root.join("sys/class/drm/card0")).unwrap();
        let abs: Vec<String> = vec!["0".into(), "1".into()];
        let gpus = crate::runtime::drm::gpus(&DiskFiles, &root, Vendor::Amd).unwrap();
        assert_eq!(gpus.len(), 2, "{gpus:?}");
        let t = from_kernel(&DiskFiles, &root, Vendor::Amd, &["0", "1"], Some(&abs)).unwrap();
        assert_eq!(t.gpus[0].cpus.as_ref().unwrap().to_string(), "48-63");
        assert_eq!(t.gpus[1].cpus.as_ref().unwrap().to_string(), "0-15");
        // Under device constraint, the second GCD alone is renumbered 0.
        let one: Vec<String> = vec!["1".into()];
        let t = from_kernel(&DiskFiles, &root, Vendor::Amd, &["0"], Some(&one)).unwrap();
        assert_eq!(t.gpus[0].cpus.as_ref().unwrap().to_string(), "0-15");
        let err =
            from_kernel(&DiskFiles, &root, Vendor::Intel, &["0"], Some(&abs[..1])).unwrap_err();
        assert!(
            err.starts_with("no intel GPU among the render nodes in"),
            "{err}"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn one_task_gpu_located_for_show() {
        let root = std::env::temp_dir().join(format!("dgm-show-{}", std::process::id()));
        for (g, cpus) in [(1, "0-7"), (2, "8-15"), (3, "16-23"), (4, "24-31")] {
            put_render_node(&root, &format!("0000:0{g}:00.0"), "0x1002", 127 + g, cpus);
        }
        let step = |l: &[&str]| -> Vec<String> { l.iter().map(|s| s.to_string()).collect() };
        let at = |token: &str, s: &[&str]| {
            locate_token(&DiskFiles, &root, Vendor::Amd, token, Some(&step(s)))
        };
        let cpus = |r: Result<(String, GpuPlace), String>| r.unwrap().1.cpus.unwrap().to_string();
        assert_eq!(cpus(at("2", &["0", "1", "2", "3"])), "16-23", "whole node");
        assert_eq!(
            cpus(at("3", &["2", "3"])),
            "24-31",
            "absolute: 3 cannot be relative"
        );
        assert_eq!(cpus(at("0", &["2", "3"])), "16-23", "relative: 0 is 2");
        let err = at("1", &["1", "3"]).unwrap_err();
        assert!(
            err.contains("could be Slurm's index or one renumbered"),
            "{err}"
        );
        let err = at("5", &["2", "3"]).unwrap_err();
        assert!(err.contains("is not among the step's"), "{err}");
        let err = locate_token(&DiskFiles, &root, Vendor::Amd, "0", None).unwrap_err();
        assert!(err.starts_with("SLURM_STEP_GPUS is not set"), "{err}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
