//! Machines whose GPU-to-CPU wiring is public, as topologies.

use super::gpu_place::{GpuPlace, Topology};
use crate::cpuset::CpuSet;
use crate::names::named;

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

#[cfg(test)]
mod tests {
    use super::*;
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
}
