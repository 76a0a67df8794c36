//! The step's GPUs located from NVML's answer: one line per GPU (UUID, PCI
//! bus id, minor, local CPUs), as the front end's NVML query writes it.

use super::gpu_place::{union_of, GpuPlace, Topology};
use super::tokens::resolve_tokens;
use super::unlocated::Unlocated;
use crate::cpuset::CpuSet;
use crate::runtime::{KernelGpu, MAX_NODE_GPUS};

/// The UUIDs in NVML's place lines (`desi_gpu_map_host::nvml::places`, the first
/// word of each), in order: a `closest` step whose GPUs only NVML lists
/// discovers them from the same load that places them.
pub(crate) fn place_uuids(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter_map(|l| l.split_whitespace().next())
        .map(String::from)
        .collect()
}

/// NVML's PCI bus id (`00000000:C1:00.0`, an 8-digit domain) as sysfs
/// names the device (`0000:c1:00.0`).
pub fn sysfs_bus_id(nvml: &str) -> Option<String> {
    let (domain, rest) = nvml.split_once(':')?;
    let domain = u32::from_str_radix(domain, 16).ok()?;
    let rest = rest.to_lowercase();
    let ok = rest.len() == 7
        && rest
            .chars()
            .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.');
    ok.then(|| format!("{domain:04x}:{rest}"))
}

/// One GPU of NVML's answer: its UUID, where it sits, its local CPUs.
type Found = (String, KernelGpu, Option<CpuSet>);

/// The step's GPUs located from NVML's answer (`desi_gpu_map_host::nvml::places`
/// lines: `UUID BUS-ID MINOR CPULIST`). A UUID token names its device
/// directly; an index resolves as in `resolve_tokens`, with NVML's bus
/// ids and minors. An empty affinity (`-`) is unknown.
pub fn from_nvml_lines<S: AsRef<str>>(
    lines: &[String],
    tokens: &[S],
    absolute: Option<&[String]>,
) -> Result<Topology, Unlocated> {
    let found = resolve_lines(lines, tokens, absolute)?;
    let gpus: Vec<GpuPlace> = tokens
        .iter()
        .zip(found)
        .map(|(token, (_, _, cpus))| GpuPlace {
            token: token.as_ref().to_string(),
            numa: None,
            cpus,
        })
        .collect();
    Ok(Topology {
        cpus: union_of(&gpus),
        gpus,
    })
}

/// The UUID of each of the step's GPUs, located as in [`from_nvml_lines`].
pub(crate) fn nvml_uuids<S: AsRef<str>>(
    lines: &[String],
    tokens: &[S],
    absolute: Option<&[String]>,
) -> Result<Vec<String>, Unlocated> {
    let found = resolve_lines(lines, tokens, absolute)?;
    Ok(found.into_iter().map(|(uuid, _, _)| uuid).collect())
}

/// NVML's entry for each token, in the tokens' order.
fn resolve_lines<S: AsRef<str>>(
    lines: &[String],
    tokens: &[S],
    absolute: Option<&[String]>,
) -> Result<Vec<Found>, Unlocated> {
    let found = parse_lines(lines)?;
    let tokens: Vec<&str> = tokens.iter().map(AsRef::as_ref).collect();
    let all_uuids = tokens.iter().all(|t| crate::slurm::gpus::is_uuid(t));
    let buses: Vec<String> = if all_uuids {
        tokens
            .iter()
            .map(|t| {
                found
                    .iter()
                    .find(|(uuid, _, _)| uuid == t)
                    .map(|(_, g, _)| g.bus_id.clone())
                    .ok_or_else(|| Unlocated::NotInNvml {
                        uuid: (*t).to_string(),
                    })
            })
            .collect::<Result<_, _>>()?
    } else {
        let devices: Vec<KernelGpu> = found.iter().map(|(_, g, _)| g.clone()).collect();
        resolve_tokens(&tokens, absolute, &devices)?
            .into_iter()
            .map(|g| g.bus_id)
            .collect()
    };
    buses
        .iter()
        .map(|bus| {
            found
                .iter()
                .find(|(_, g, _)| &g.bus_id == bus)
                .cloned()
                .ok_or_else(|| Unlocated::NoBus {
                    bus_id: bus.clone(),
                })
        })
        .collect()
}

/// NVML's lines, each checked.
fn parse_lines(lines: &[String]) -> Result<Vec<Found>, Unlocated> {
    if lines.len() > MAX_NODE_GPUS {
        return Err(Unlocated::TooMany);
    }
    lines
        .iter()
        .map(|line| {
            let bad = || Unlocated::OddLine { line: line.clone() };
            let words: Vec<&str> = line.split_whitespace().collect();
            let [uuid, bus, minor, cpus] = words.as_slice() else {
                return Err(bad());
            };
            let bus_id = sysfs_bus_id(bus).ok_or_else(bad)?;
            let minor = minor.parse::<u32>().map_err(|_| bad())?;
            let cpus = match *cpus {
                "-" => None,
                list => Some(CpuSet::parse_list(list)?),
            };
            let gpu = KernelGpu {
                bus_id,
                minor,
                uuid: Some((*uuid).to_string()),
            };
            Ok(((*uuid).to_string(), gpu, cpus))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvml_answers_locate_uuids_and_indices() {
        let lines: Vec<String> = [
            "GPU-a 00000000:01:00.0 0 1",
            "GPU-b 00000000:02:00.0 1 1",
            "GPU-c 00000000:03:00.0 2 0",
            "GPU-d 00000000:04:00.0 3 -",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(place_uuids(&lines), ["GPU-a", "GPU-b", "GPU-c", "GPU-d"]);
        let t = from_nvml_lines(&lines, &["GPU-c", "GPU-a"], None).unwrap();
        assert_eq!(t.tokens(), ["GPU-c", "GPU-a"]);
        assert_eq!(t.gpus[0].cpus.as_ref().unwrap().to_string(), "0");
        assert_eq!(t.gpus[1].cpus.as_ref().unwrap().to_string(), "1");
        let abs: Vec<String> = vec!["2".into(), "3".into()];
        let t = from_nvml_lines(&lines, &["2", "3"], Some(&abs)).unwrap();
        assert_eq!(t.gpus[0].cpus.as_ref().unwrap().to_string(), "0");
        assert_eq!(t.gpus[1].cpus, None, "no affinity");
        assert!(from_nvml_lines(&lines, &["GPU-x"], None)
            .unwrap_err()
            .to_string()
            .contains("does not list"));
        let many = vec!["GPU-a 00000000:01:00.0 0 1".to_string(); MAX_NODE_GPUS + 1];
        assert!(from_nvml_lines(&many, &["GPU-a"], None)
            .unwrap_err()
            .to_string()
            .contains(&format!("more than {MAX_NODE_GPUS} GPUs")));
        // Renumbered under device constraint: 0,1 are absolute 2,3.
        let rel: Vec<String> = vec!["0".into(), "1".into()];
        assert_eq!(
            nvml_uuids(&lines, &rel, Some(&abs)).unwrap(),
            ["GPU-c", "GPU-d"]
        );
        assert_eq!(
            nvml_uuids(
                &lines,
                &["3", "2"],
                Some(&["3".to_string(), "2".to_string()])
            )
            .unwrap(),
            ["GPU-d", "GPU-c"]
        );
        assert!(
            nvml_uuids(&lines, &["0"], None).is_err(),
            "no SLURM_STEP_GPUS"
        );
        let odd = vec!["GPU-a 1 2".to_string()];
        assert!(from_nvml_lines(&odd, &["0"], None)
            .unwrap_err()
            .to_string()
            .contains("odd line"));
    }

    #[test]
    fn nvml_bus_ids_as_sysfs_names_them() {
        assert_eq!(
            sysfs_bus_id("00000000:C1:00.0").as_deref(),
            Some("0000:c1:00.0")
        );
        assert_eq!(
            sysfs_bus_id("0001:03:00.0").as_deref(),
            Some("0001:03:00.0")
        );
        assert_eq!(sysfs_bus_id("C1:00.0"), None);
        assert_eq!(sysfs_bus_id("0000:../../x"), None);
    }
}
