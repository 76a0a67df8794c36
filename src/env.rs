//! Names of the environment variables the plugin reads and writes.

/// The list CUDA uses, and the first place the step's GPUs are read from.
pub const CUDA: &str = "CUDA_VISIBLE_DEVICES";

/// The other GPU lists Slurm may set next to `CUDA_VISIBLE_DEVICES`, each
/// narrowed the same way when Slurm set it, never added.
pub const OTHER_LISTS: [&str; 3] = [
    "ROCR_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
    "ZE_AFFINITY_MASK",
];

/// Slurm's count of the step's GPUs on this node.
pub const GPUS_ON_NODE: &str = "SLURM_GPUS_ON_NODE";
/// Slurm's own GPU list for the step; it keeps Slurm's list even after
/// `CUDA_VISIBLE_DEVICES` is changed.
pub const STEP_GPUS: &str = "SLURM_STEP_GPUS";
/// Set by slurmstepd when Slurm binds GPUs per task itself.
pub const TRES_BIND: &str = "SLURMD_TRES_BIND";
/// Requests under which Slurm binds GPUs per task itself (srun exports them).
pub const PER_TASK_REQUESTS: [&str; 4] = [
    "SLURM_GPUS_PER_TASK",
    "SLURM_NTASKS_PER_GPU",
    "SLURM_GPU_BIND",
    "SLURM_TRES_BIND",
];
/// Those of them that may ask for no binding (`none`).
pub const BIND_REQUESTS: [&str; 2] = ["SLURM_GPU_BIND", "SLURM_TRES_BIND"];

/// Exported to every mapped task.
pub const METHOD: &str = "DESI_GPU_MAP_METHOD";
pub const NODE_GPUS: &str = "DESI_GPU_MAP_NODE_GPUS";

/// Variables a site's `flag=` must not name: the flag is set to `1`.
pub fn is_reserved(name: &str) -> bool {
    const RESERVED: [&str; 8] = [
        "PATH",
        "LD_LIBRARY_PATH",
        "LD_PRELOAD",
        "HOME",
        "SHELL",
        "USER",
        METHOD,
        NODE_GPUS,
    ];
    name == CUDA
        || OTHER_LISTS.contains(&name)
        || RESERVED.contains(&name)
        || name.starts_with("SLURM")
}
