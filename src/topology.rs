//! A node's GPUs and the CPUs local to each: what `closest` matches a
//! task's CPUs against. The plugin reads it from NVML or the kernel; the
//! `desi-gpu-map plan` preview reads it from a file or a named preset.
//!
//! The file format, one GPU per line, `#` starts a comment:
//!
//! ```text
//! # TOKEN  NUMA  LOCAL-CPUS
//! 0        3     48-63,112-127
//! 1        2     32-47,96-111
//! ```
//!
//! TOKEN is the GPU as the step's list names it (an index or a UUID), NUMA
//! its NUMA node or `-` when the firmware reports none (`-1`), LOCAL-CPUS a
//! cpulist or `-` when unknown. An optional line `cpus CPULIST` gives the
//! CPUs srun binds tasks to, in order (otherwise the union of the GPUs'
//! local CPUs).

use crate::cpuset::CpuSet;
use crate::files::{read_text, Files};
use crate::method::closest::Fallback;
use crate::names::named;
use crate::text::quote;
use crate::vendor::{KernelGpu, Vendor, MAX_NODE_GPUS};
use std::fmt;
use std::path::Path;

/// One GPU and where it sits. `None`: not known (the firmware reported
/// NUMA node -1, or the driver said "N/A").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuPlace {
    pub token: String,
    pub numa: Option<u32>,
    pub cpus: Option<CpuSet>,
}

/// A node's CPUs and its GPUs' places, in the node's GPU order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// The CPUs tasks are bound to, in order: a file's `cpus` line or a
    /// preset's physical cores, else the union of the GPUs' local CPUs.
    /// Only the `plan` preview reads it, splitting it into equal blocks.
    pub cpus: CpuSet,
    pub gpus: Vec<GpuPlace>,
}

/// Why a topology file cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadTopology {
    pub line: usize,
    pub why: String,
}

impl fmt::Display for BadTopology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "topology line {}: {}; each line is TOKEN NUMA LOCAL-CPUS (`-` for unknown) \
             or `cpus CPULIST`",
            self.line, self.why
        )
    }
}

impl std::error::Error for BadTopology {}

impl Topology {
    /// Reads the file format above.
    pub fn parse(text: &str) -> Result<Topology, BadTopology> {
        let mut gpus: Vec<GpuPlace> = Vec::new();
        let mut node: Option<CpuSet> = None;
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let fail = |why: String| BadTopology { line, why };
            let content = raw.split('#').next().unwrap_or_default().trim();
            let words: Vec<&str> = content.split_whitespace().collect();
            match words.as_slice() {
                [] => {}
                ["cpus", list] => {
                    let set = CpuSet::parse_list(list).map_err(|e| fail(e.to_string()))?;
                    node = Some(set);
                }
                [token, numa, cpus] => {
                    if gpus.iter().any(|g| g.token == *token) {
                        return Err(fail(format!("GPU {} is listed twice", quote(token))));
                    }
                    if gpus.len() >= MAX_NODE_GPUS {
                        return Err(fail(format!("more than {MAX_NODE_GPUS} GPUs")));
                    }
                    gpus.push(GpuPlace {
                        token: (*token).to_string(),
                        numa: parse_numa(numa).map_err(fail)?,
                        cpus: parse_cpus(cpus).map_err(|e| fail(e.to_string()))?,
                    });
                }
                _ => return Err(fail(format!("cannot read {}", quote(content)))),
            }
        }
        if gpus.is_empty() {
            return Err(BadTopology {
                line: 0,
                why: "no GPU is listed".to_string(),
            });
        }
        let cpus = node.unwrap_or_else(|| union_of(&gpus));
        Ok(Topology { cpus, gpus })
    }

    /// The place of the GPU the step's list calls `token`.
    pub fn place(&self, token: &str) -> Option<&GpuPlace> {
        self.gpus.iter().find(|g| g.token == token)
    }

    /// The node's GPU tokens, in order.
    pub fn tokens(&self) -> Vec<String> {
        self.gpus.iter().map(|g| g.token.clone()).collect()
    }
}

fn parse_numa(text: &str) -> Result<Option<u32>, String> {
    match text {
        "-" | "-1" | "N/A" => Ok(None),
        _ => text
            .parse::<u32>()
            .map(Some)
            .map_err(|_| format!("NUMA node {} is not a number or -", quote(text))),
    }
}

fn parse_cpus(text: &str) -> Result<Option<CpuSet>, crate::cpuset::BadCpuSet> {
    match text {
        "-" | "N/A" => Ok(None),
        _ => CpuSet::parse_list(text).map(Some),
    }
}

fn union_of(gpus: &[GpuPlace]) -> CpuSet {
    gpus.iter()
        .filter_map(|g| g.cpus.as_ref())
        .fold(CpuSet::new(), |all, c| all.union(c))
}

/// Machines whose GPU-to-CPU wiring is public, for `desi-gpu-map plan`
/// and the tests. Local CPUs are what the kernel reports
/// (`local_cpulist`: the GPU's NUMA node, hyperthreads included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// NERSC Perlmutter GPU node: one 64-core EPYC 7763, 4 NUMA nodes of 16
    /// cores (+64 hyperthreads), GPU i on NUMA node 3-i.
    Perlmutter,
    /// ALCF Polaris: one 32-core EPYC 7543P, 4 domains of 8 cores (+32),
    /// GPU i on domain 3-i.
    Polaris,
    /// LUMI-G: one 64-core EPYC 7A53, 4 NUMA nodes of 2 CCDs each (+64), 8
    /// GCDs; CCD c's nearest GCD is 4,5,2,3,6,7,0,1 (c = 0..7).
    LumiG,
    /// DGX A100: two 64-core EPYC 7742, 8 NUMA nodes of 16 cores (+128);
    /// GPUs 0-7 on NUMA nodes 2,3,0,1,6,7,4,5.
    DgxA100,
    /// Aurora-like: two 52-core sockets (+104), one NUMA node each, GPUs
    /// 0-5 on socket 0 and 6-11 on socket 1.
    Aurora,
}

named!(Preset {
    Perlmutter => "perlmutter",
    Polaris => "polaris",
    LumiG => "lumi-g",
    DgxA100 => "dgx-a100",
    Aurora => "aurora",
});

/// NUMA node `n` of `nodes`, each `cores` wide, hyperthreads following all
/// the cores: `n*cores..` and `nodes*cores + n*cores..`.
fn numa_cpus(n: usize, cores: usize, nodes: usize) -> CpuSet {
    let first = n * cores;
    let second = nodes * cores + first;
    let cores_part = CpuSet::range(first, first + cores - 1).unwrap_or_default();
    let threads = CpuSet::range(second, second + cores - 1).unwrap_or_default();
    cores_part.union(&threads)
}

impl Preset {
    /// The preset's topology: per GPU, its NUMA node (`numa_of[gpu]`) over
    /// `nodes` NUMA nodes of `cores` cores.
    pub fn topology(self) -> Topology {
        let (numa_of, cores, nodes): (&[usize], usize, usize) = match self {
            Preset::Perlmutter => (&[3, 2, 1, 0], 16, 4),
            Preset::Polaris => (&[3, 2, 1, 0], 8, 4),
            Preset::LumiG => (&[3, 3, 1, 1, 0, 0, 2, 2], 16, 4),
            Preset::DgxA100 => (&[2, 3, 0, 1, 6, 7, 4, 5], 16, 8),
            Preset::Aurora => (&[0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1], 52, 2),
        };
        let gpus = numa_of
            .iter()
            .enumerate()
            .map(|(i, &n)| GpuPlace {
                token: i.to_string(),
                numa: u32::try_from(n).ok(),
                cpus: Some(numa_cpus(n, cores, nodes)),
            })
            .collect();
        // The physical cores, hyperthreads left out.
        let cpus = CpuSet::range(0, nodes * cores - 1).unwrap_or_default();
        Topology { cpus, gpus }
    }
}

/// Resolves each token of the step's list to a GPU of `devices` (the
/// node's NVIDIA GPUs), and refuses to guess:
///
/// - An index `i` is absolute when the step's list equals Slurm's own
///   (`SLURM_STEP_GPUS`, `absolute`; without it nothing is resolved): it names the `i`-th GPU in PCI bus
///   order, the order CUDA reads it in (the plugin sets
///   `CUDA_DEVICE_ORDER=PCI_BUS_ID`). Slurm's index is a position in
///   gres.conf's `File=` list, so it is accepted only when that GPU's
///   device minor is also `i` (`File=/dev/nvidia[0-N]` in bus order);
///   otherwise the two orders may differ and the token is refused.
/// - Under device constraint Slurm renumbers the list from 0 (`0..n`)
///   while `SLURM_STEP_GPUS` keeps the absolute indices: relative index `j`
///   is the `j`-th smallest absolute index (the task sees its GPUs in bus
///   order), resolved as above. Any other shape is refused.
/// - A UUID (`GPU-...`, `MIG-...`) needs NVML to be located: refused here.
pub fn resolve_tokens<S: AsRef<str>>(
    tokens: &[S],
    absolute: Option<&[String]>,
    devices: &[KernelGpu],
) -> Result<Vec<KernelGpu>, String> {
    let mut by_bus: Vec<&KernelGpu> = devices.iter().collect();
    by_bus.sort_by(|a, b| a.bus_id.cmp(&b.bus_id));
    let tokens: Vec<&str> = tokens.iter().map(AsRef::as_ref).collect();
    let Some(absolute) = absolute else {
        return Err(format!(
            "{} is not set: cannot tell absolute indices from renumbered ones",
            crate::env::STEP_GPUS
        ));
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
    indices
        .iter()
        .map(|&i| {
            let gpu = by_bus
                .get(i)
                .ok_or_else(|| format!("GPU index {i} is past the node's {} GPUs", by_bus.len()))?;
            if usize::try_from(gpu.minor).ok() != Some(i) {
                return Err(format!(
                    "GPU index {i} is {} in PCI order but has device minor {}: gres.conf's order is unknown",
                    gpu.bus_id, gpu.minor
                ));
            }
            Ok((*gpu).clone())
        })
        .collect()
}

fn index(token: &str) -> Result<usize, String> {
    if crate::slurm::gpus::is_uuid(token) {
        return Err(format!(
            "GPU {} is a UUID, which only NVML can locate",
            quote(token)
        ));
    }
    token
        .parse::<usize>()
        .map_err(|_| format!("cannot locate GPU {}", quote(token)))
}

/// Relative tokens `0..n` under device constraint, as absolute indices.
fn relative(tokens: &[&str], absolute: &[String]) -> Result<Vec<usize>, String> {
    let mut sorted: Vec<usize> = absolute
        .iter()
        .map(|a| index(a))
        .collect::<Result<_, _>>()?;
    sorted.sort_unstable();
    let renumbered =
        tokens.len() == sorted.len() && tokens.iter().enumerate().all(|(j, t)| *t == j.to_string());
    if !renumbered {
        return Err(format!(
            "the step's GPUs {} are neither Slurm's {} nor renumbered from 0",
            quote(&tokens.join(",")),
            quote(&absolute.join(","))
        ));
    }
    Ok(sorted)
}

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
/// render nodes ([`crate::vendor::kernel_gpus`]); see
/// [`resolve_tokens`].
pub fn from_kernel<S: AsRef<str>>(
    files: &dyn Files,
    root: &Path,
    vendor: Vendor,
    tokens: &[S],
    absolute: Option<&[String]>,
) -> Result<Topology, String> {
    let devices = crate::vendor::kernel_gpus(files, root, vendor)?;
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
    let devices = crate::vendor::kernel_gpus(files, root, vendor)?;
    let wanted = [absolute.to_string()];
    let gpu = resolve_tokens(&wanted, Some(&wanted), &devices)?
        .into_iter()
        .next()
        .ok_or_else(|| format!("cannot locate GPU {}", quote(token)))?;
    let place = kernel_place(files, root, token, &gpu.bus_id)?;
    Ok((gpu.bus_id, place))
}

/// The UUIDs in NVML's place lines ([`crate::host::nvml::places`], the first
/// word of each), in order: a `closest` step whose GPUs only NVML lists
/// discovers them from the same load that places them.
pub fn place_uuids(lines: &[String]) -> Vec<String> {
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

/// The step's GPUs located from NVML's answer ([`crate::host::nvml::places`]
/// lines: `UUID BUS-ID MINOR CPULIST`). A UUID token names its device
/// directly; an index resolves as in [`resolve_tokens`], with NVML's bus
/// ids and minors. An empty affinity (`-`) is unknown.
pub fn from_nvml_lines<S: AsRef<str>>(
    lines: &[String],
    tokens: &[S],
    absolute: Option<&[String]>,
) -> Result<Topology, String> {
    let mut found: Vec<(String, KernelGpu, Option<CpuSet>)> = Vec::new();
    if lines.len() > MAX_NODE_GPUS {
        return Err(format!("NVML lists more than {MAX_NODE_GPUS} GPUs"));
    }
    for line in lines {
        let bad = || format!("NVML gave the odd line {}", quote(line));
        let words: Vec<&str> = line.split_whitespace().collect();
        let [uuid, bus, minor, cpus] = words.as_slice() else {
            return Err(bad());
        };
        let bus_id = sysfs_bus_id(bus).ok_or_else(bad)?;
        let minor = minor.parse::<u32>().map_err(|_| bad())?;
        let cpus = match *cpus {
            "-" => None,
            list => Some(CpuSet::parse_list(list).map_err(|e| e.to_string())?),
        };
        found.push(((*uuid).to_string(), KernelGpu { bus_id, minor }, cpus));
    }
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
                    .ok_or_else(|| format!("NVML does not list GPU {}", quote(t)))
            })
            .collect::<Result<_, _>>()?
    } else {
        let devices: Vec<KernelGpu> = found.iter().map(|(_, g, _)| g.clone()).collect();
        resolve_tokens(&tokens, absolute, &devices)?
            .into_iter()
            .map(|g| g.bus_id)
            .collect()
    };
    let gpus: Vec<GpuPlace> = tokens
        .iter()
        .zip(&buses)
        .map(|(token, bus)| GpuPlace {
            token: (*token).to_string(),
            numa: None,
            cpus: found
                .iter()
                .find(|(_, g, _)| &g.bus_id == bus)
                .and_then(|(_, _, c)| c.clone()),
        })
        .collect();
    Ok(Topology {
        cpus: union_of(&gpus),
        gpus,
    })
}

/// The local CPUs of each of the step's GPUs, in the step's order; or why
/// the step falls back to `contiguous`.
pub fn near_cpus<S: AsRef<str>>(gpus: &[S], topology: &Topology) -> Result<Vec<CpuSet>, Fallback> {
    gpus.iter()
        .map(|token| {
            let token = token.as_ref();
            let place = topology
                .place(token)
                .ok_or_else(|| Fallback::UnknownGpu(token.to_string()))?;
            match &place.cpus {
                Some(cpus) if !cpus.is_empty() => Ok(cpus.clone()),
                _ => Err(Fallback::NoAffinity(token.to_string())),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::files::HostFiles;
    use crate::names::parse_name;

    #[test]
    fn presets_match_the_published_wiring() {
        let p = Preset::Perlmutter.topology();
        assert_eq!(p.gpus.len(), 4);
        let shown: Vec<String> = p
            .gpus
            .iter()
            .map(|g| format!("{} {:?} {}", g.token, g.numa, g.cpus.clone().unwrap()))
            .collect();
        assert_eq!(
            shown,
            [
                "0 Some(3) 48-63,112-127",
                "1 Some(2) 32-47,96-111",
                "2 Some(1) 16-31,80-95",
                "3 Some(0) 0-15,64-79"
            ]
        );
        assert_eq!(p.cpus.to_string(), "0-63");
        let d = Preset::DgxA100.topology();
        assert_eq!(d.gpus[0].cpus.clone().unwrap().to_string(), "32-47,160-175");
        assert_eq!(d.cpus.len(), 128);
        let a = Preset::Aurora.topology();
        assert_eq!(
            a.gpus[6].cpus.clone().unwrap().to_string(),
            "52-103,156-207"
        );
        let l = Preset::LumiG.topology();
        assert_eq!(l.gpus[4].cpus.clone().unwrap().to_string(), "0-15,64-79");
        assert_eq!(parse_name::<Preset>("lumi-g"), Ok(Preset::LumiG));
        assert_eq!(Preset::Polaris.topology().cpus.to_string(), "0-31");
    }

    #[test]
    fn files_parse() {
        let t = Topology::parse(
            "# a test node\ncpus 0-7\n0 1 4-7   # far\n1 0 0-3\nGPU-ab -1 -\n2 N/A N/A\n",
        )
        .unwrap();
        assert_eq!(t.cpus.to_string(), "0-7");
        assert_eq!(t.tokens(), ["0", "1", "GPU-ab", "2"]);
        assert_eq!(t.place("0").unwrap().numa, Some(1));
        assert_eq!(t.place("GPU-ab").unwrap().cpus, None);
        assert_eq!(t.place("2").unwrap().numa, None);
        assert!(t.place("9").is_none());
        let t = Topology::parse("0 0 0-3\n1 1 4-7\n").unwrap();
        assert_eq!(t.cpus.to_string(), "0-7");
    }

    #[test]
    fn bad_files_name_the_line() {
        for (text, line, part) in [
            ("", 0, "no GPU is listed"),
            ("0 0 0-3\n0 1 4-7\n", 2, "listed twice"),
            ("0 x 0-3\n", 1, "NUMA node \"x\""),
            ("0 0 0-z\n", 1, "CPU set \"0-z\""),
            ("0 0\n", 1, "cannot read \"0 0\""),
            ("cpus a\n0 0 0\n", 1, "CPU set \"a\""),
        ] {
            let err = Topology::parse(text).unwrap_err();
            assert_eq!(err.line, line, "{text}");
            assert!(err.to_string().contains(part), "{err}");
        }
        let many: String = (0..65).map(|i| format!("{i} 0 0\n")).collect();
        assert!(Topology::parse(&many).is_err());
    }

    fn gpu(bus_id: &str, minor: u32) -> KernelGpu {
        KernelGpu {
            bus_id: bus_id.to_string(),
            minor,
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
        let err = resolve_tokens(&["0"], Some(&zero), &node).unwrap_err();
        assert!(err.contains("has device minor 1"), "{err}");
        let err = resolve_tokens(&["0"], None, &node).unwrap_err();
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
        let err = resolve_tokens(&["5"], Some(&five), &node).unwrap_err();
        assert!(err.contains("past the node's 4"), "{err}");
        let uuid: Vec<String> = vec!["GPU-abc".into()];
        let err = resolve_tokens(&["GPU-abc"], Some(&uuid), &node).unwrap_err();
        assert!(err.contains("only NVML can locate"), "{err}");
    }

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
            .contains("does not list"));
        let many = vec!["GPU-a 00000000:01:00.0 0 1".to_string(); MAX_NODE_GPUS + 1];
        assert!(from_nvml_lines(&many, &["GPU-a"], None)
            .unwrap_err()
            .contains(&format!("more than {MAX_NODE_GPUS} GPUs")));
        let odd = vec!["GPU-a 1 2".to_string()];
        assert!(from_nvml_lines(&odd, &["0"], None)
            .unwrap_err()
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
                &format!("Model: Fake\nDevice Minor: {minor}\nBus Location: {bus}\n"),
            );
            put(
                &format!("sys/bus/pci/devices/{bus}/numa_node"),
                &format!("{numa}\n"),
            );
            put(&format!("sys/bus/pci/devices/{bus}/local_cpulist"), cpus);
        }
        let abs = |l: &[&str]| -> Vec<String> { l.iter().map(|s| s.to_string()).collect() };
        let t = from_kernel(
            &HostFiles,
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
            &HostFiles,
            &root,
            Vendor::Nvidia,
            &["2"],
            Some(&abs(&["2"])),
        )
        .unwrap();
        assert_eq!(t.gpus[0].cpus, None, "NUMA -1: no affinity");
        let none = root.join("nothing");
        assert!(from_kernel(&HostFiles, &none, Vendor::Nvidia, &["0"], None)
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
        let gpus = crate::vendor::drm::gpus(&HostFiles, &root, Vendor::Amd).unwrap();
        assert_eq!(gpus.len(), 2, "{gpus:?}");
        let t = from_kernel(&HostFiles, &root, Vendor::Amd, &["0", "1"], Some(&abs)).unwrap();
        assert_eq!(t.gpus[0].cpus.as_ref().unwrap().to_string(), "48-63");
        assert_eq!(t.gpus[1].cpus.as_ref().unwrap().to_string(), "0-15");
        // Under device constraint, the second GCD alone is renumbered 0.
        let one: Vec<String> = vec!["1".into()];
        let t = from_kernel(&HostFiles, &root, Vendor::Amd, &["0"], Some(&one)).unwrap();
        assert_eq!(t.gpus[0].cpus.as_ref().unwrap().to_string(), "0-15");
        let err =
            from_kernel(&HostFiles, &root, Vendor::Intel, &["0"], Some(&abs[..1])).unwrap_err();
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
            locate_token(&HostFiles, &root, Vendor::Amd, token, Some(&step(s)))
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
        let err = locate_token(&HostFiles, &root, Vendor::Amd, "0", None).unwrap_err();
        assert!(err.starts_with("SLURM_STEP_GPUS is not set"), "{err}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
