//! Intel Level Zero: `ZE_AFFINITY_MASK`, read as a set.

use super::drm;
use super::rules::{own, Blocker, Rendering, Rules, StepLists, Unbindable, Vendor};
use crate::env;
use crate::method::Visible;
use crate::snapshot::Var;

pub(super) const RULES: Rules = Rules {
    pci_id: 0x8086,
    carrier: Var::Ze,
    nvml: false,
    unbindable,
    adjust,
    render,
    kernel_gpus: |files, root| drm::gpus(files, root, Vendor::Intel),
};

fn unbindable(step: &StepLists, _: &[Var]) -> Option<Blocker> {
    if !step.from_slurm {
        Some(Box::new(Unbindable::NvmlUuids))
    } else if let (None, Some(grant)) = (step.list(env::ZE), step.granted) {
        Some(Box::new(move |chosen| {
            Unbindable::NoZeListGranted(grant, chosen)
        }))
    } else if step.list(env::ZE).is_none() {
        Some(Box::new(Unbindable::NoZeList))
    } else {
        None
    }
}

fn adjust(r: &mut Rendering, _: &StepLists, _: Option<&str>, notes: &mut Vec<String>) {
    if r.visible == Visible::Rotate {
        r.visible = Visible::Single;
        notes.push(format!(
            "visible=rotate cannot apply: Level Zero does not reorder devices by {}, so each \
             task keeps its own GPU only",
            env::ZE
        ));
    }
}

fn render(r: &Rendering, step: &StepLists, share: &[usize]) -> Vec<(String, String)> {
    // Read as a set, in the list's order: a share is written in that order
    // too, so that its first entry is the device the task's code sees first.
    let mut share = share.to_vec();
    share.sort_unstable();
    let share = share.as_slice();
    let mut set = Vec::new();
    if let Some(ze) = step.list(env::ZE) {
        set.push((env::ZE.to_string(), own(r, ze, share)));
    }
    // Level Zero ignores it; narrowed so that what the task reads there
    // names the GPU it has, as on NVIDIA nodes.
    set.push((env::CUDA.to_string(), own(r, step.gpus, share)));
    set
}
