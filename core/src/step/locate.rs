//! Where a `closest` step's GPUs sit: read once per step per node, from
//! the kernel's files or NVML, and turned into each GPU's local CPUs.

use super::map::GpuCpus;
use super::node::{Node, NvmlAsk};
use super::source::{Listed, StepGpus};
use crate::error::Error;
use crate::method::closest::Fallback;
use crate::method::Method;
use crate::runtime::Vendor;
use crate::settings::config::{Config, NvmlSource};
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
    let uuids = uuids_of_places(node, config, &lines);
    *placed = Some(lines);
    uuids
}

/// The UUIDs of an NVML places load; where a call of that load failed
/// after NVML started, NVML is asked for the UUIDs alone.
pub(super) fn uuids_of_places(
    node: &dyn Node,
    config: &Config,
    lines: &Result<Vec<String>, Error>,
) -> Result<Vec<String>, Error> {
    match lines {
        Ok(lines) => Ok(place_uuids(lines)),
        Err(e) if e.is_failed_nvml_call() => node.nvml(NvmlAsk::Uuids, config),
        Err(e) => Err(e.clone()),
    }
}

/// Where a step mapped with `method` finds its GPUs: for `closest`, each
/// GPU's local CPUs, from the places the front end was given or else read
/// from the node (`placed`: those of NVML's load that listed the GPUs).
pub(super) fn gpu_cpus(
    node: &dyn Node,
    config: &Config,
    method: Method,
    step: &StepGpus,
    vendor: Vendor,
    placed: Option<Result<Vec<String>, Error>>,
) -> GpuCpus {
    if method != Method::Closest {
        return GpuCpus::Unused;
    }
    let places = match node.given_places() {
        Some(given) => given.map_err(|none| none.to_string()),
        None => step_topology(node, config, step, vendor, placed),
    };
    locate(&step.gpus, places.as_ref().map_err(Clone::clone))
}

/// A `closest` step's GPUs located: through the kernel files under the
/// site's `kernel_root` for Slurm's own list (NVIDIA's driver files, or AMD's
/// and Intel's render nodes), and through NVML (`places`,
/// [`NvmlAsk::Places`] lines) for a list NVML gave, or where NVIDIA's
/// kernel files fail and NVML is on. Indices resolve through Slurm's own
/// list as [`Listed::Slurm`] keeps it (see
/// [`crate::topology::resolve_tokens`]).
pub(super) fn step_topology(
    node: &dyn Node,
    config: &Config,
    step: &StepGpus,
    vendor: Vendor,
    placed: Option<Result<Vec<String>, Error>>,
) -> Result<Topology, String> {
    // A list the process inherited, or the kernel's, names the node's
    // GPUs by their own indices.
    let absolute = match &step.listed {
        Listed::Inherited { .. } | Listed::Granted { .. } | Listed::Kernel => {
            Some(step.gpus.as_slice())
        }
        listed => listed.step_gpus(),
    };
    let from_nvml = || {
        let lines = placed
            .unwrap_or_else(|| node.nvml(NvmlAsk::Places, config))
            .map_err(|e| e.to_string())?;
        from_nvml_lines(&lines, &step.gpus, absolute).map_err(|e| e.to_string())
    };
    if !step.listed.is_runtimes() {
        return from_nvml();
    }
    let files = node.files();
    match from_kernel(files, &config.kernel_root, vendor, &step.gpus, absolute) {
        Ok(topology) => Ok(topology),
        Err(kernel) if vendor.has_nvml() && config.nvml != NvmlSource::Off => {
            from_nvml().map_err(|nvml| format!("{kernel}; NVML: {nvml}"))
        }
        Err(kernel) => Err(kernel.to_string()),
    }
}

/// Each of `gpus`' local CPUs in the node's topology (read once per step
/// per node), or why they are unknown: the step then falls back.
pub(crate) fn locate(gpus: &[String], topology: Result<&Topology, String>) -> GpuCpus {
    match topology {
        Ok(topology) => match near_cpus(gpus, topology) {
            Ok(near) => GpuCpus::Located(near),
            Err(why) => GpuCpus::Fallback(why),
        },
        Err(why) => GpuCpus::Fallback(Fallback::Unreadable(why)),
    }
}

#[cfg(test)]
mod tests {
    use crate::error::Error;
    use crate::method::Method;
    use crate::settings::option::Choice;
    use crate::settings::site::parse_args;
    use crate::step::testing::*;
    use crate::step::{locate, source};

    #[test]
    fn closest_locates_through_the_kernel_then_nvml() {
        let lines = || -> Result<Vec<String>, Error> {
            Ok(vec![
                "GPU-a 00000000:01:00.0 0 1".to_string(),
                "GPU-b 00000000:02:00.0 1 0".to_string(),
            ])
        };
        let no_files = parse_args(&["kernel_root=/nonexistent"]).unwrap();
        let (p, _) = plan_with(
            &no_files,
            Choice::Map(Method::Closest),
            &[
                ("CUDA_VISIBLE_DEVICES", "0,1"),
                ("SLURM_STEP_GPUS", "0,1"),
                ("SLURM_GPUS_ON_NODE", "2"),
            ],
            Ok(vec![]),
        );
        let map = mapped(p);
        let step = source::StepGpus {
            gpus: map.gpus.clone(),
            listed: map.listed.clone(),
        };
        let nvidia = map.rendering.vendor;
        let node = |nvml| FakeNode {
            places: None,
            ..FakeNode::new(&[], nvml)
        };
        let asked = node(lines());
        let t = locate::step_topology(&asked, &no_files, &step, nvidia, None).unwrap();
        assert_eq!(t.gpus[1].cpus.as_ref().unwrap().to_string(), "0");
        assert_eq!(
            asked.calls.get(),
            1,
            "NVML asked once, after the kernel files failed"
        );
        let off = parse_args(&["kernel_root=/nonexistent", "nvml=off"]).unwrap();
        let err = locate::step_topology(&node(lines()), &off, &step, nvidia, None).unwrap_err();
        assert!(
            err.starts_with("/nonexistent/proc/driver/nvidia/gpus"),
            "{err}"
        );
        let err = locate::step_topology(&node(Err(Error::NvmlOff)), &no_files, &step, nvidia, None)
            .unwrap_err();
        assert!(
            err.ends_with("; NVML: NVML discovery is off (nvml=off)"),
            "{err}"
        );
        // AMD and Intel GPUs: their render nodes only, never NVML.
        let amd = crate::runtime::Vendor::Amd;
        let never = node(lines());
        let err = locate::step_topology(&never, &no_files, &step, amd, None).unwrap_err();
        assert_eq!(
            err,
            "/nonexistent/sys/class/drm: No such file or directory (os error 2)"
        );
        assert_eq!(never.calls.get(), 0);
    }
}
