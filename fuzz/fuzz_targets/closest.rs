//! What `closest` parses in the plugin and in `plan`: a topology file,
//! Slurm's per-task CPU bind list, NVML's place lines; then the rule over
//! whatever they accept. Input: three parts split at the first two NUL
//! bytes (topology, bind list, NVML lines).
#![no_main]
use desi_gpu_map_core::method::closest::{closest_all, closest_shares};
use desi_gpu_map_core::topology::near_cpus;
use desi_gpu_map_core::slurm::cpu_bind::bind_list_cpus;
use desi_gpu_map_core::topology::{from_nvml_lines, Topology};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.splitn(3, '\0');
    let (file, list, lines) = (
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
    );
    let Ok(topology) = Topology::parse(file) else {
        return;
    };
    let tokens = topology.tokens();
    let lines: Vec<String> = lines.lines().map(String::from).collect();
    let _ = from_nvml_lines(&lines, &tokens, Some(&tokens));
    let Ok(near) = near_cpus(&tokens, &topology) else {
        return;
    };
    for kind in ["mask_cpu:", "map_cpu:"] {
        let count = tokens.len() * 2 + 1;
        if let Some(tasks) = bind_list_cpus(Some(kind), Some(list), count) {
            let picks = closest_all(&tasks, &near).unwrap();
            assert_eq!(picks.len(), count);
            assert!(picks.iter().all(|&p| p < near.len()));
        }
        // Fewer tasks than GPUs: each GPU held once.
        let fewer = near.len().saturating_sub(1).max(1);
        if let Some(tasks) = bind_list_cpus(Some(kind), Some(list), fewer) {
            let shares = closest_shares(&tasks, &near).unwrap();
            let held: usize = shares.iter().map(Vec::len).sum();
            assert!(fewer >= near.len() || held == near.len());
        }
    }
});
