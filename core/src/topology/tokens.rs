//! Which of the node's GPUs each token of a step's list names, refusing to
//! guess where Slurm's and the kernel's numbering may differ.

use super::unlocated::Unlocated;
use crate::runtime::KernelGpu;

/// Resolves each token of the step's list to a GPU of `devices` (the
/// node's NVIDIA GPUs, or only the step's where NVML runs inside a device
/// cgroup), and refuses to guess:
///
/// - An index `i` is absolute when the step's list equals Slurm's own
///   (`SLURM_STEP_GPUS`, `absolute`; without it nothing is resolved).
///   Slurm's index is a position in gres.conf's `File=` list
///   (`File=/dev/nvidia[0-N]`), so it names the GPU whose device minor is
///   `i`. That GPU must also hold `i`'s place in PCI bus order, the order
///   CUDA reads it in (the plugin sets `CUDA_DEVICE_ORDER=PCI_BUS_ID`);
///   otherwise the two orders may differ and the token is refused.
/// - Under device constraint Slurm renumbers the list from 0 (`0..n`)
///   while `SLURM_STEP_GPUS` keeps the absolute indices: relative index `j`
///   is the `j`-th smallest absolute index (the task sees its GPUs in bus
///   order), resolved as above. Any other shape is refused.
/// - A list of UUIDs (`GPU-...`, `MIG-...`) is located by the UUIDs the
///   kernel's files name (NVIDIA's driver information files do); a UUID
///   they do not name needs NVML, and is refused here.
pub(crate) fn resolve_tokens<S: AsRef<str>>(
    tokens: &[S],
    absolute: Option<&[String]>,
    devices: &[KernelGpu],
) -> Result<Vec<KernelGpu>, Unlocated> {
    let mut by_bus: Vec<&KernelGpu> = devices.iter().collect();
    by_bus.sort_by(|a, b| a.bus_id.cmp(&b.bus_id));
    let tokens: Vec<&str> = tokens.iter().map(AsRef::as_ref).collect();
    if !tokens.is_empty() && tokens.iter().all(|t| crate::slurm::gpus::is_uuid(t)) {
        return tokens.iter().map(|t| by_uuid(t, devices)).collect();
    }
    let Some(absolute) = absolute else {
        return Err(Unlocated::NoStepGpus);
    };
    let same = absolute
        .iter()
        .map(String::as_str)
        .eq(tokens.iter().copied());
    let indices: Vec<usize> = if same {
        tokens.iter().map(|t| index(t)).collect::<Result<_, _>>()?
    } else {
        relative(&tokens, absolute)?
    };
    indices.iter().map(|&i| by_index(i, &by_bus)).collect()
}

/// The GPU whose UUID is `uuid`, where the kernel's files name UUIDs
/// (NVIDIA's driver does); otherwise only NVML can locate it.
fn by_uuid(uuid: &str, devices: &[KernelGpu]) -> Result<KernelGpu, Unlocated> {
    devices
        .iter()
        .find(|g| g.uuid.as_deref() == Some(uuid))
        .cloned()
        .ok_or_else(|| Unlocated::UuidNotInKernel {
            uuid: uuid.to_string(),
        })
}

/// The GPU that Slurm's absolute index `i` names: the one with device minor
/// `i`, which must also stand where `i` stands among the listed minors in
/// bus order. The listed GPUs may be a few of the node's: NVML inside a
/// device cgroup lists only those the process may open.
fn by_index(i: usize, by_bus: &[&KernelGpu]) -> Result<KernelGpu, Unlocated> {
    let mut minors: Vec<u32> = by_bus.iter().map(|g| g.minor).collect();
    minors.sort_unstable();
    let rank = minors
        .iter()
        .position(|&m| usize::try_from(m).ok() == Some(i))
        .ok_or(Unlocated::NoMinor {
            index: i,
            listed: by_bus.len(),
        })?;
    match by_bus.get(rank) {
        Some(gpu) if usize::try_from(gpu.minor).ok() == Some(i) => Ok((*gpu).clone()),
        Some(gpu) => Err(Unlocated::OrderUnknown {
            index: i,
            bus_id: gpu.bus_id.clone(),
            minor: gpu.minor,
        }),
        None => Err(Unlocated::NoPciPlace { index: i }),
    }
}

pub(super) fn index(token: &str) -> Result<usize, Unlocated> {
    if crate::slurm::gpus::is_uuid(token) {
        return Err(Unlocated::UuidNeedsNvml {
            token: token.to_string(),
        });
    }
    token.parse::<usize>().map_err(|_| Unlocated::CannotLocate {
        token: token.to_string(),
    })
}

/// Relative tokens `0..n` under device constraint, as absolute indices.
fn relative(tokens: &[&str], absolute: &[String]) -> Result<Vec<usize>, Unlocated> {
    let mut sorted: Vec<usize> = absolute
        .iter()
        .map(|a| index(a))
        .collect::<Result<_, _>>()?;
    sorted.sort_unstable();
    let renumbered =
        tokens.len() == sorted.len() && tokens.iter().enumerate().all(|(j, t)| *t == j.to_string());
    if !renumbered {
        return Err(Unlocated::NotRenumbered {
            tokens: tokens.iter().map(|t| t.to_string()).collect(),
            absolute: absolute.to_vec(),
        });
    }
    Ok(sorted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(bus_id: &str, minor: u32) -> KernelGpu {
        KernelGpu {
            bus_id: bus_id.to_string(),
            minor,
            uuid: None,
        }
    }

    #[test]
    fn tokens_resolve_or_are_refused() {
        let node = [
            gpu("0000:c1:00.0", 0),
            gpu("0000:03:00.0", 1),
            gpu("0000:41:00.0", 2),
            gpu("0000:81:00.0", 3),
        ];
        // Minors in bus order: 03 has minor 1, but sorts first: refused.
        let zero: Vec<String> = vec!["0".into()];
        let err = resolve_tokens(&["0"], Some(&zero), &node)
            .unwrap_err()
            .to_string();
        assert!(err.contains("has device minor 1"), "{err}");
        let err = resolve_tokens(&["0"], None, &node).unwrap_err().to_string();
        assert!(err.starts_with("SLURM_STEP_GPUS is not set"), "{err}");
        let node = [
            gpu("0000:c1:00.0", 3),
            gpu("0000:03:00.0", 0),
            gpu("0000:41:00.0", 1),
            gpu("0000:81:00.0", 2),
        ];
        let bus = |r: Vec<KernelGpu>| -> Vec<String> { r.into_iter().map(|g| g.bus_id).collect() };
        let abs: Vec<String> = vec!["2".into(), "3".into()];
        assert_eq!(
            bus(resolve_tokens(&["2", "3"], Some(&abs), &node).unwrap()),
            ["0000:81:00.0", "0000:c1:00.0"]
        );
        // Under device constraint: 0,1 stand for Slurm's 3,2 sorted.
        let abs: Vec<String> = vec!["3".into(), "2".into()];
        assert_eq!(
            bus(resolve_tokens(&["0", "1"], Some(&abs), &node).unwrap()),
            ["0000:81:00.0", "0000:c1:00.0"]
        );
        assert!(resolve_tokens(&["1", "0"], Some(&abs), &node).is_err());
        let five: Vec<String> = vec!["5".into()];
        let err = resolve_tokens(&["5"], Some(&five), &node)
            .unwrap_err()
            .to_string();
        assert!(err.contains("none of the 4 GPUs"), "{err}");
        // NVML inside a device cgroup lists only the step's GPUs: Slurm's
        // 2,3 renumbered 0,1, or kept, still name minors 2 and 3.
        let fenced = [gpu("0000:c1:00.0", 3), gpu("0000:81:00.0", 2)];
        let abs: Vec<String> = vec!["2".into(), "3".into()];
        for tokens in [["0", "1"], ["2", "3"]] {
            assert_eq!(
                bus(resolve_tokens(&tokens, Some(&abs), &fenced).unwrap()),
                ["0000:81:00.0", "0000:c1:00.0"]
            );
        }
        let crossed = [gpu("0000:c1:00.0", 2), gpu("0000:81:00.0", 3)];
        let err = resolve_tokens(&["2"], Some(&abs[..1]), &crossed)
            .unwrap_err()
            .to_string();
        assert!(err.contains("has device minor 3"), "{err}");
        let uuid: Vec<String> = vec!["GPU-abc".into()];
        let err = resolve_tokens(&["GPU-abc"], Some(&uuid), &node)
            .unwrap_err()
            .to_string();
        assert!(err.contains("only NVML can locate"), "{err}");
    }
}
