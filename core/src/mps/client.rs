//! What each task of a step under MPS gets: its share of its GPU, the
//! variables written for it, those it loses, and what local task 0 says.

use super::serving::{InheritedMps, Mps, MPS_NAMES};
use crate::env;
use crate::method::{share, Method};
use crate::snapshot::Var;

/// A client's share of its GPU under `mps_share=even`: floor(100 / the
/// tasks on it).
pub fn even_share(tasks: usize) -> u32 {
    u32::try_from(100 / tasks.max(1)).unwrap_or(100)
}

/// How many of the node's `tasks` each of the step's `gpus` serves, placed
/// by `method` (with fewer tasks than GPUs, one each). A `closest` step is
/// counted as `contiguous` places it: the tasks' CPUs are known only in
/// each task, and closest splits in blocks as well.
pub(crate) fn tasks_per_gpu(method: Method, gpus: usize, tasks: usize) -> Vec<usize> {
    let method = match method {
        Method::Closest => Method::Contiguous,
        m => m,
    };
    let mut counts = vec![0; gpus];
    for l in 0..tasks {
        for at in share(method, l, tasks, gpus).unwrap_or_default() {
            if let Some(c) = counts.get_mut(at) {
                *c += 1;
            }
        }
    }
    counts
}

/// The MPS variables of a task whose first GPU is at `position`, after its
/// GPU lists.
pub(crate) fn mps_variables(mps: &Mps, position: usize) -> Vec<(String, String)> {
    let Mps::Serving(d) = mps else {
        return Vec::new();
    };
    let mut set = vec![(env::MPS_PIPE.to_string(), d.pipe().display().to_string())];
    if !d.keep_log {
        set.push((env::MPS_LOG.to_string(), d.log().display().to_string()));
    }
    if let Some(share) = d.shares.get(position).copied().flatten() {
        set.push((env::MPS_SHARE.to_string(), share.to_string()));
    }
    if let Some(host) = &d.host {
        set.push((env::MPS_HOST.to_string(), host.clone()));
    }
    set.push((env::MPS.to_string(), "1".to_string()));
    set
}

/// The inherited MPS variables a task whose first GPU is at `position`
/// loses: the flag
/// wherever the plugin's daemon on this host does not serve it, every one
/// of the plugin's where they name another node's daemon, and a parent's
/// share that the step's own daemon does not give.
pub(crate) fn mps_unset(mps: &Mps, inherited: &InheritedMps, position: usize) -> Vec<String> {
    let flags = [Var::Mps, Var::MpsHost];
    let names: &[Var] = match mps {
        Mps::Serving(d) if d.shares.get(position).copied().flatten().is_none() => &[Var::MpsShare],
        Mps::Serving(_) | Mps::Theirs { ours: true, .. } => &[],
        Mps::Theirs { .. } => &flags,
        _ if inherited.ours && !inherited.here => &MPS_NAMES,
        _ => &flags,
    };
    names
        .iter()
        .filter(|var| inherited.present.contains(var))
        .map(|var| var.name().to_string())
        .collect()
}

/// What local task 0 says about MPS, if anything.
pub(crate) fn mps_line(mps: &Mps, verbose: bool) -> Option<String> {
    match mps {
        Mps::Without { why, loud } if *loud || verbose => {
            Some(format!("{why}; running without MPS"))
        }
        Mps::Theirs { why, loud, .. } if *loud || verbose => Some(why.clone()),
        _ => None,
    }
}
