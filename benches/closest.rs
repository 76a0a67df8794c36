//! `closest` as each task of a node decides it alone, in slurmstepd's
//! `task_init` ([`assign`], the plugin's per-task path): 256 tasks on a
//! node of 256 CPUs and 4 GPUs, every task bound to one CPU and reading
//! Slurm's list of all 256 masks (`SLURM_CPU_BIND_LIST`). Prints the
//! median, over interleaved rounds, of one task's decision and of all 256
//! (what the node's tasks spend together), measured in this run. Asserts
//! nothing. Run by benches/plan.sh, or
//! `cargo bench --locked --bench closest [ROUNDS] [TASKS]`.

use desi_gpu_map_core::cpuset::CpuSet;
use desi_gpu_map_core::method::{Method, Visible};
use desi_gpu_map_core::preview::preview_map;
use desi_gpu_map_core::step::{assign, TaskCpus, TaskInputs};
use desi_gpu_map_core::topology::Topology;
use std::hint::black_box;
use std::time::Instant;

/// 4 GPUs on 64 CPUs each, wired in reverse (GPU 0 next to CPUs 192-255).
const NODE: &str = "cpus 0-255\n0 3 192-255\n1 2 128-191\n2 1 64-127\n3 0 0-63\n";

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let rounds: usize = args.next().map_or(200, |a| a.parse().expect("ROUNDS"));
    let tasks: usize = args.next().map_or(256, |a| a.parse().expect("TASKS"));
    let topology = Topology::parse(NODE).expect("the bench topology");
    let all = topology.cpus.clone();
    let cpus: Vec<usize> = all.cpus().collect();
    let bound: Vec<CpuSet> = (0..tasks)
        .map(|l| CpuSet::of(&[cpus[l % cpus.len()]]).expect("a CPU"))
        .collect();
    let list = bound
        .iter()
        .map(CpuSet::to_mask)
        .collect::<Vec<_>>()
        .join(",");
    // The node's plan, made as `desi-gpu-map plan` makes it: the step holds
    // GPUs 0-3 (Slurm's list), no NVML, and the topology given.
    let map = preview_map(
        "0,1,2,3",
        4,
        Method::Closest,
        Visible::Single,
        Some(&topology),
    )
    .expect("the bench node maps");
    let task = |l: usize| TaskInputs {
        node: "n1",
        local_id: l,
        local_count: tasks,
        rank: u32::try_from(l).expect("a rank"),
        cuda: Some("0,1,2,3"),
        tres_bind: None,
        cpus: TaskCpus {
            own: Some(bound[l].clone()),
            parent: Some(all.clone()),
            bind_type: Some("mask_cpu:"),
            bind_list: Some(&list),
        },
        container: Default::default(),
    };
    let inputs: Vec<TaskInputs> = (0..tasks).map(task).collect();
    let mut per_node = Vec::with_capacity(rounds);
    let mut gpus = vec![0usize; 4];
    for round in 0..rounds {
        let t0 = Instant::now();
        for t in &inputs {
            let got = assign(&map, black_box(t)).expect("a closest task");
            if round == 0 {
                gpus[got.position()] += 1;
            }
        }
        per_node.push(t0.elapsed().as_secs_f64());
    }
    let node_us = median(per_node) * 1e6;
    println!(
        "closest per task (the plugin's assign, each task alone), {tasks} tasks on a node of \
         {} CPUs and 4 GPUs, median of {rounds} rounds: {:.2} us a task, {:.0} us for all {tasks}; \
         tasks per GPU {gpus:?}",
        cpus.len(),
        node_us / tasks as f64,
        node_us
    );
}
