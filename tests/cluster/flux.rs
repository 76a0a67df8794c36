//! Flux inside a Slurm allocation: `srun --mpi=pmi2 flux start` starts one
//! broker per node under the SPANK plugin, and the Flux shell plugin maps
//! the jobs inside. Each broker holds what Slurm (and the SPANK plugin)
//! gave it; a Flux job's GPU `i` is the `i`-th of those, and a job that
//! asks for more is refused, never handed a GPU outside the step.
//!
//! Run on the host's series only (tests/run-cluster-tests.sh): Flux is
//! built on the host (tests/flux/build.sh), not in the 24.11 and 26.05
//! roots.

use crate::common::*;
use std::path::PathBuf;

/// Flux, as tests/flux/build.sh installed it.
fn flux() -> String {
    let prefix = std::env::var("DGM_FLUX_PREFIX")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo().join("target/flux/install"));
    let flux = prefix.join("bin/flux");
    assert!(
        flux.is_file(),
        "no Flux at {}: run tests/flux/build.sh",
        flux.display()
    );
    flux.display().to_string()
}

/// The Flux plugin, as `make build` built it.
fn flux_plugin() -> String {
    let so = std::env::var("DGM_FLUX_PLUGIN")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo().join("target/release/libdesi_gpu_map_flux.so"));
    assert!(
        so.is_file(),
        "no Flux plugin at {}: cargo build --release -p desi-gpu-map-flux",
        so.display()
    );
    so.display().to_string()
}

/// A folder of this test's own the nodes see (not their private /tmp),
/// with Flux's resource config for `gpus` fake GPUs on `hosts`, and a
/// userrc that loads the plugin; removed when dropped.
struct Instance(PathBuf);

impl Instance {
    fn new(name: &str, hosts: &str, ranks: &str, gpus: &str) -> Instance {
        let dir = repo()
            .join("target/tmp")
            .join(format!("cluster-flux-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("conf")).unwrap();
        let r = std::process::Command::new(flux())
            .args([
                "R", "encode", "-r", ranks, "-c", "0-3", "-g", gpus, "-H", hosts,
            ])
            .output()
            .unwrap();
        assert!(r.status.success(), "flux R encode: {}", text(&r.stderr));
        std::fs::write(dir.join("R.json"), &r.stdout).unwrap();
        std::fs::write(
            dir.join("conf/resource.toml"),
            format!(
                "[resource]\npath = \"{}/R.json\"\nnoverify = true\n",
                dir.display()
            ),
        )
        .unwrap();
        std::fs::write(
            dir.join("userrc.lua"),
            format!("plugin.load {{ file = \"{}\" }}\n", flux_plugin()),
        )
        .unwrap();
        Instance(dir)
    }

    /// `srun WORDS flux start` running `script` (bash) on the first broker.
    fn start(&self, words: &str, script: &str) -> Ran {
        let path = self.0.join("script.sh");
        let body = format!(
            "cd {}\nROW='echo R $FLUX_TASK_RANK $(hostname) $FLUX_TASK_LOCAL_ID ${{CUDA_VISIBLE_DEVICES-unset}} ${{DESI_GPU_MAPPED-unset}}'\n{script}\n",
            self.0.display()
        );
        std::fs::write(&path, body).unwrap();
        srun(words)
            .args("--mpi=pmi2")
            .arg(flux())
            .arg("start")
            .arg(format!("--config-path={}/conf", self.0.display()))
            .args("bash")
            .arg(path.display().to_string())
            .run()
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The rows (`R ...`) of a run, sorted by rank.
fn rows(ran: &Ran) -> Vec<String> {
    let mut rows: Vec<(u32, String)> = ran
        .stdout()
        .lines()
        .filter_map(|l| l.strip_prefix("R "))
        .map(|l| {
            (
                l.split(' ')
                    .next()
                    .and_then(|r| r.parse().ok())
                    .unwrap_or(0),
                l.to_string(),
            )
        })
        .collect();
    rows.sort();
    rows.into_iter().map(|(_, l)| l).collect()
}

/// Under a site default, each broker (one task a node) keeps its node's
/// four GPUs, and the Flux jobs inside are mapped as srun's would be.
#[test]
fn brokers_keep_their_nodes_gpus_and_flux_jobs_are_mapped_inside() {
    let _c = setup("required", &["default=contiguous"]);
    let instance = Instance::new("two", "n1,n2", "0-1", "0-3");
    let ran = instance.start(
        "-N2 -w n[1-2] --ntasks-per-node=1 --gpus-per-node=4",
        "echo \"BROKER $(flux getattr rank) $CUDA_VISIBLE_DEVICES ${DESI_GPU_MAPPED-unset}\"\n\
         flux exec -r 1 sh -c 'echo \"BROKER $(flux getattr rank) $CUDA_VISIBLE_DEVICES ${DESI_GPU_MAPPED-unset}\"'\n\
         flux run -N2 --tasks-per-node=6 --gpus-per-node=4 -o cpu-affinity=off -o userrc=userrc.lua -o desi-gpu-map=contiguous sh -c \"$ROW\"",
    );
    let ran = ran.ok();
    let out = ran.stdout();
    let mut said: Vec<&str> = out.lines().filter(|l| l.starts_with("BROKER ")).collect();
    said.sort();
    assert_eq!(said, ["BROKER 0 0,1,2,3 1", "BROKER 1 0,1,2,3 1"], "{out}");
    let want: Vec<String> = [("n1", 0), ("n2", 6)]
        .iter()
        .flat_map(|(node, first)| {
            ["0", "0", "1", "1", "2", "3"]
                .iter()
                .enumerate()
                .map(move |(l, gpu)| format!("{} {node} {l} {gpu} 1", first + l))
        })
        .collect();
    assert_eq!(rows(&ran), want, "{out}");
}

/// A step that Slurm gives GPUs 2 and 3 of a shared node (another job holds
/// 0 and 1): its Flux tasks get only those. Flux's own `gpu-affinity`,
/// which hands out its own ids, names GPUs 0 and 1 there; and a Flux
/// whose R claims the node's four GPUs has its mapped jobs refused.
#[test]
fn a_step_given_gpus_2_and_3_hands_its_flux_tasks_only_those() {
    let _c = setup("required", &["default=contiguous"]);
    let _held = hold("n1", "gpu:2");
    let instance = Instance::new("shared", "n1", "0", "0-1");
    let ran = instance
        .start(
            "-N1 -n1 -w n1 --gres=gpu:2",
            "echo \"BROKER $CUDA_VISIBLE_DEVICES\"\n\
             flux run -N1 --tasks-per-node=4 --gpus-per-node=2 -o cpu-affinity=off -o userrc=userrc.lua -o desi-gpu-map=contiguous sh -c \"$ROW\"\n\
             flux run -N1 --tasks-per-node=2 --gpus-per-node=2 -o cpu-affinity=off -o gpu-affinity=per-task sh -c 'echo FLUX $FLUX_TASK_LOCAL_ID $CUDA_VISIBLE_DEVICES'",
        )
        .ok();
    let out = ran.stdout();
    assert!(out.contains("BROKER 2,3"), "{out}");
    assert_eq!(
        rows(&ran),
        ["0 n1 0 2 1", "1 n1 1 2 1", "2 n1 2 3 1", "3 n1 3 3 1"],
        "{out}"
    );
    // Flux's own binding names its ids, not the step's: 0 and 1.
    let mut flux: Vec<&str> = out.lines().filter(|l| l.starts_with("FLUX ")).collect();
    flux.sort();
    assert_eq!(flux, ["FLUX 0 0", "FLUX 1 1"], "{out}");
    drop(instance);
    let naive = Instance::new("naive", "n1", "0", "0-3");
    let ran = naive
        .start(
            "-N1 -n1 -w n1 --gres=gpu:2",
            "flux run -N1 --tasks-per-node=4 --gpus-per-node=4 -o cpu-affinity=off -o userrc=userrc.lua -o desi-gpu-map=contiguous sh -c \"$ROW\"; echo \"RC $?\"",
        )
        .ok();
    let all = format!("{}{}", ran.stdout(), ran.stderr());
    assert!(
        rows(&ran).is_empty(),
        "a task ran with GPUs beyond the step's: {all}"
    );
    assert!(!all.contains("RC 0"), "{all}");
    assert!(
        all.contains("R gives the job GPU 2") && all.contains("\"2,3\""),
        "{all}"
    );
}

/// Round 7: a step whose nodes were given different GPUs (another job
/// holds 0 and 1 of n1, so the step has 2 and 3 there and 0 and 1 on n2).
/// flux-core starts every node's job shell with rank 0's environment; each
/// node's tasks still get their own broker's GPUs, never another node's.
#[test]
fn each_node_maps_its_own_brokers_gpus_not_the_first_brokers() {
    let _c = setup("required", &["default=contiguous"]);
    let _held = hold("n1", "gpu:2");
    let instance = Instance::new("pernode", "n1,n2", "0-1", "0-1");
    let ran = instance
        .start(
            "-N2 -w n[1-2] --ntasks-per-node=1 --gpus-per-node=2",
            "flux run -N2 --tasks-per-node=2 --gpus-per-node=2 -o cpu-affinity=off -o userrc=userrc.lua -o desi-gpu-map=contiguous sh -c \"$ROW\"\n\
             flux run -N2 --tasks-per-node=1 --gpus-per-node=2 -o cpu-affinity=off -o userrc=userrc.lua -o desi-gpu-map=contiguous sh -c 'echo BROKER $(hostname) $DESI_GPU_MAP_GPUS'",
        )
        .ok();
    let out = ran.stdout();
    assert_eq!(
        rows(&ran),
        ["0 n1 0 2 1", "1 n1 1 3 1", "2 n2 0 0 1", "3 n2 1 1 1"],
        "{out}{}",
        ran.stderr()
    );
    let mut lone: Vec<&str> = out.lines().filter(|l| l.starts_with("BROKER ")).collect();
    lone.sort();
    assert_eq!(lone, ["BROKER n1 2,3", "BROKER n2 0,1"], "{out}");
}
