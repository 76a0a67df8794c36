//! AMD ROCm: `ROCR_VISIBLE_DEVICES` filters first; HIP's list (or
//! `CUDA_VISIBLE_DEVICES`) and OpenCL's `GPU_DEVICE_ORDINAL` then index
//! into what it kept.

use super::drm;
use super::rules::{layered, own, Blocker, Rendering, Rules, StepLists, Unbindable, Vendor};
use crate::env;
use crate::snapshot::Var;

pub(super) const RULES: Rules = Rules {
    pci_id: 0x1002,
    carrier: Var::Rocr,
    nvml: false,
    unbindable,
    adjust,
    render,
    kernel_gpus: |files, root| drm::gpus(files, root, Vendor::Amd),
};

fn unbindable(step: &StepLists, user_lists: &[Var]) -> Option<Blocker> {
    if !step.from_slurm {
        Some(Box::new(Unbindable::NvmlUuids))
    } else if user_lists.contains(&Var::Rocr) {
        Some(Box::new(Unbindable::UsersRocr))
    } else if user_lists.contains(&Var::Hip) {
        Some(Box::new(Unbindable::UsersHip))
    } else {
        None
    }
}

fn adjust(_: &mut Rendering, step: &StepLists, _: Option<&str>, notes: &mut Vec<String>) {
    match (step.list(env::ROCR), step.granted) {
        (Some(_), _) => {}
        (None, None) => notes.push(format!(
            "{} not set by Slurm: {} and {} carry the GPU itself",
            env::ROCR,
            env::CUDA,
            env::GPU_ORDINAL
        )),
        (None, Some(grant)) => notes.push(format!(
            "{} not set: {} come to {} in {}, which carries the GPU itself",
            env::ROCR,
            grant.gpus(),
            grant.holder,
            env::CUDA
        )),
    }
}

fn render(r: &Rendering, step: &StepLists, share: &[usize]) -> Vec<(String, String)> {
    let mut set = Vec::new();
    let mut put = |name: &str, value: String| set.push((name.to_string(), value));
    match step.list(env::ROCR) {
        Some(rocr) => {
            put(env::ROCR, own(r, rocr, share));
            // Slurm's list (NVML's is refused in `unbindable`).
            put(env::CUDA, layered(r, step, share));
            if step.list(env::GPU_ORDINAL).is_some() {
                put(env::GPU_ORDINAL, layered(r, step, share));
            }
        }
        // Without ROCR, HIP's list and OpenCL's each filter the node's
        // devices directly, in different runtimes.
        None => {
            put(env::CUDA, own(r, step.gpus, share));
            if let Some(ordinal) = step.list(env::GPU_ORDINAL) {
                put(env::GPU_ORDINAL, own(r, ordinal, share));
            }
        }
    }
    set
}
