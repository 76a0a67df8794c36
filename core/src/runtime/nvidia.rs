//! NVIDIA: CUDA reads `CUDA_VISIBLE_DEVICES`, in the order listed, by
//! CUDA's own device order (FASTEST_FIRST unless `CUDA_DEVICE_ORDER=PCI_BUS_ID`).

use super::rules::{own, KernelGpu, Rendering, Rules, StepLists, MAX_NODE_GPUS};
use crate::env;
use crate::files::{at, read_text, Files};
use crate::snapshot::Var;
use crate::text::quote;
use std::path::Path;

pub(super) const RULES: Rules = Rules {
    pci_id: 0x10de,
    carrier: Var::Cuda,
    nvml: true,
    // CUDA reads CUDA_VISIBLE_DEVICES, which every step has.
    unbindable: |_, _| None,
    adjust,
    render,
    kernel_gpus,
};

/// Slurm's indices follow the PCI bus order: CUDA is told to read them so,
/// unless the user chose an order.
fn adjust(r: &mut Rendering, step: &StepLists, user_order: Option<&str>, notes: &mut Vec<String>) {
    if !(step.from_slurm && step.gpus.iter().all(|g| is_whole_number(g))) {
        return;
    }
    match user_order {
        None => r.pci_order = true,
        Some(order) => notes.push(format!(
            "{}={} kept as set; Slurm's indices follow the PCI bus order",
            env::DEVICE_ORDER,
            quote(order)
        )),
    }
}

fn render(r: &Rendering, step: &StepLists, share: &[usize]) -> Vec<(String, String)> {
    let mut set = vec![(env::CUDA.to_string(), own(r, step.gpus, share))];
    if r.pci_order {
        set.push((env::DEVICE_ORDER.to_string(), "PCI_BUS_ID".to_string()));
    }
    set
}

fn is_whole_number(token: &str) -> bool {
    !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit())
}

/// Reads the node's NVIDIA GPUs as the driver lists them under `root`
/// (`/` in production): each `proc/driver/nvidia/gpus/<bus id>/information`
/// with its `Device Minor` and, where it names one, its `GPU UUID`.
pub(super) fn kernel_gpus(files: &dyn Files, root: &Path) -> Result<Vec<KernelGpu>, String> {
    let dir = root.join("proc/driver/nvidia/gpus");
    let entries = files
        .list(&dir, MAX_NODE_GPUS + 1)
        .map_err(|e| at(&dir, e))?;
    let mut gpus = Vec::new();
    for name in entries {
        let bus_id = name.to_lowercase();
        let path = dir.join(&name);
        let info = read_text(files, &path.join("information"))?;
        let minor = info
            .lines()
            .find_map(|l| l.strip_prefix("Device Minor:"))
            .and_then(|m| m.trim().parse::<u32>().ok())
            .ok_or_else(|| format!("{}: no Device Minor", path.display()))?;
        let uuid = info
            .lines()
            .find_map(|l| l.strip_prefix("GPU UUID:"))
            .map(|u| u.trim().to_string())
            .filter(|u| crate::slurm::gpus::is_uuid(u));
        gpus.push(KernelGpu {
            bus_id,
            minor,
            uuid,
        });
    }
    if gpus.len() > MAX_NODE_GPUS {
        return Err(format!(
            "more than {MAX_NODE_GPUS} GPUs in {}",
            dir.display()
        ));
    }
    Ok(gpus)
}
