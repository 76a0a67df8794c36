//! The step's GPUs located through the kernel's files (read through
//! [`Files`]): their NUMA node and local CPUs from sysfs.

use super::gpu_place::{union_of, GpuPlace, Topology};
use super::tokens::{index, resolve_tokens};
use super::unlocated::Unlocated;
use crate::cpuset::CpuSet;
use crate::files::Files;
use crate::runtime::{KernelGpu, Vendor};
use std::path::Path;

/// The text of the kernel file `path`.
fn kernel_file(files: &dyn Files, path: &Path) -> Result<String, Unlocated> {
    files.read(path).map_err(|error| Unlocated::Unreadable {
        path: path.to_path_buf(),
        error,
    })
}

/// The node's GPUs of `vendor`, as `crate::runtime::kernel_gpus` lists them.
fn listed_gpus(
    files: &dyn Files,
    root: &Path,
    vendor: Vendor,
) -> Result<Vec<KernelGpu>, Unlocated> {
    crate::runtime::kernel_gpus(files, root, vendor).map_err(Unlocated::KernelGpus)
}

/// A GPU's place from sysfs under `root`: `numa_node` (-1: none, so no
/// affinity) and `local_cpulist`.
pub fn kernel_place(
    files: &dyn Files,
    root: &Path,
    token: &str,
    bus_id: &str,
) -> Result<GpuPlace, Unlocated> {
    let dir = root.join("sys/bus/pci/devices").join(bus_id);
    let numa_text = kernel_file(files, &dir.join("numa_node"))?;
    let numa = numa_text
        .trim()
        .parse::<i64>()
        .map_err(|_| Unlocated::OddNuma {
            text: numa_text.trim().to_string(),
            dir: dir.clone(),
        })?;
    let numa = u32::try_from(numa).ok();
    let cpus = match numa {
        None => None,
        Some(_) => {
            let list = kernel_file(files, &dir.join("local_cpulist"))?;
            Some(CpuSet::parse_list(list.trim())?)
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
/// render nodes (`crate::runtime::kernel_gpus`); see
/// `resolve_tokens`.
pub fn from_kernel<S: AsRef<str>>(
    files: &dyn Files,
    root: &Path,
    vendor: Vendor,
    tokens: &[S],
    absolute: Option<&[String]>,
) -> Result<Topology, Unlocated> {
    let devices = listed_gpus(files, root, vendor)?;
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
/// refused. The index then resolves as in `resolve_tokens`.
pub fn locate_token(
    files: &dyn Files,
    root: &Path,
    vendor: Vendor,
    token: &str,
    step: Option<&[String]>,
) -> Result<(String, GpuPlace), Unlocated> {
    let cannot = || Unlocated::CannotLocate {
        token: token.to_string(),
    };
    if crate::slurm::gpus::is_uuid(token) {
        let devices = listed_gpus(files, root, vendor)?;
        let gpu = resolve_tokens(&[token], None, &devices)?
            .into_iter()
            .next()
            .ok_or_else(cannot)?;
        let place = kernel_place(files, root, token, &gpu.bus_id)?;
        return Ok((gpu.bus_id, place));
    }
    let step = step.ok_or(Unlocated::NoStepGpus)?;
    let i = index(token)?;
    let in_step = step.iter().any(|s| s == token);
    let identity = step.iter().enumerate().all(|(j, s)| *s == j.to_string());
    let absolute = match (in_step, i < step.len()) {
        (true, false) => i,
        (true, true) if identity => i,
        (false, true) => {
            let mut sorted: Vec<usize> = step.iter().map(|a| index(a)).collect::<Result<_, _>>()?;
            sorted.sort_unstable();
            sorted.get(i).copied().ok_or_else(cannot)?
        }
        (true, true) => {
            return Err(Unlocated::Ambiguous {
                token: token.to_string(),
                step: step.to_vec(),
            })
        }
        (false, false) => {
            return Err(Unlocated::NotInStep {
                token: token.to_string(),
                step: step.to_vec(),
            })
        }
    };
    let devices = listed_gpus(files, root, vendor)?;
    let wanted = [absolute.to_string()];
    let gpu = resolve_tokens(&wanted, Some(&wanted), &devices)?
        .into_iter()
        .next()
        .ok_or_else(cannot)?;
    let place = kernel_place(files, root, token, &gpu.bus_id)?;
    Ok((gpu.bus_id, place))
}
