//! Where a `closest` step's GPUs sit: read once per step per node, from
//! the kernel's files or NVML, and turned into each GPU's local CPUs.

use super::{GpuCpus, Node, NvmlAsk, StepMap};
use crate::error::Error;
use crate::method::closest::Fallback;
use crate::method::Method;
use crate::settings::site::{Config, NvmlSource};
use crate::topology::{from_kernel, from_nvml_lines, near_cpus, place_uuids, Topology};

/// The node's GPU UUIDs through NVML, for a step mapped with `method`. A
/// `closest` step asks for the GPUs' places instead, in the same load, and
/// keeps them in `placed` for [`step_topology`]; where a call of that load
/// fails after NVML started (CPU affinity, say) it asks for the UUIDs
/// alone, so that the step still maps. Not after a failed start or a
/// timeout: that would only wait again, past the deadline's bound.
pub(super) fn discover(
    node: &dyn Node,
    config: &Config,
    method: Method,
    placed: &mut Option<Result<Vec<String>, Error>>,
) -> Result<Vec<String>, Error> {
    if method != Method::Closest {
        return node.nvml(NvmlAsk::Uuids, config);
    }
    let lines = node.nvml(NvmlAsk::Places, config);
    let uuids = lines.as_ref().map(|l| place_uuids(l)).map_err(Clone::clone);
    *placed = Some(lines);
    match uuids {
        Err(e) if e.is_failed_nvml_call() => node.nvml(NvmlAsk::Uuids, config),
        found => found,
    }
}

/// A `closest` step's GPUs located: through the kernel files under the
/// site's `kernel_root` for Slurm's own list (NVIDIA's driver files, or AMD's
/// and Intel's render nodes), and through NVML (`places`,
/// [`NvmlAsk::Places`] lines) for a list NVML gave, or where NVIDIA's
/// kernel files fail and NVML is on. Indices resolve through Slurm's own
/// list as [`StepMap::step_gpus`] keeps it (see
/// [`crate::topology::resolve_tokens`]).
pub fn step_topology(
    node: &dyn Node,
    config: &Config,
    map: &StepMap,
    placed: Option<Result<Vec<String>, Error>>,
) -> Result<Topology, String> {
    let absolute = map.step_gpus.as_deref();
    let from_nvml = || {
        let lines = placed
            .unwrap_or_else(|| node.nvml(NvmlAsk::Places, config))
            .map_err(|e| e.to_string())?;
        from_nvml_lines(&lines, &map.gpus, absolute)
    };
    let vendor = map.rendering.vendor;
    if map.cuda.is_none() {
        return from_nvml();
    }
    let files = node.files();
    match from_kernel(files, &config.kernel_root, vendor, &map.gpus, absolute) {
        Ok(topology) => Ok(topology),
        Err(kernel) if vendor.has_nvml() && config.nvml != NvmlSource::Off => {
            from_nvml().map_err(|nvml| format!("{kernel}; NVML: {nvml}"))
        }
        Err(kernel) => Err(kernel),
    }
}

/// Locates a `closest` step's GPUs in the node's topology (read once per
/// step per node, or why it could not be read); other steps are left.
pub fn locate(map: &mut StepMap, topology: Result<&Topology, String>) {
    if map.method != Method::Closest {
        return;
    }
    map.near = match topology {
        Ok(topology) => match near_cpus(&map.gpus, topology) {
            Ok(near) => GpuCpus::Located(near),
            Err(why) => GpuCpus::Fallback(why),
        },
        Err(why) => GpuCpus::Fallback(Fallback::Unreadable(why)),
    };
}
