//! Names of the environment variables the plugin reads and writes.

/// The list CUDA uses, and the first place the step's GPUs are read from.
pub const CUDA: &str = "CUDA_VISIBLE_DEVICES";

/// AMD ROCm's lowest filter, applied before HIP's and OpenCL's lists.
pub const ROCR: &str = "ROCR_VISIBLE_DEVICES";
/// ROCm OpenCL's list, an index list into what ROCR left.
pub const GPU_ORDINAL: &str = "GPU_DEVICE_ORDINAL";
/// Intel Level Zero's list.
pub const ZE: &str = "ZE_AFFINITY_MASK";
/// HIP's own list: Slurm never sets it, and the plugin never touches it.
pub const HIP: &str = "HIP_VISIBLE_DEVICES";
/// How CUDA numbers devices: `PCI_BUS_ID` makes its indices Slurm's.
pub const DEVICE_ORDER: &str = "CUDA_DEVICE_ORDER";

/// The other GPU lists Slurm may set next to `CUDA_VISIBLE_DEVICES`; each is
/// written for the node's vendor (see `vendor`) only when Slurm set it, never
/// added.
pub const OTHER_LISTS: [&str; 3] = [ROCR, GPU_ORDINAL, ZE];

/// Slurm's count of the step's GPUs on this node.
pub const GPUS_ON_NODE: &str = "SLURM_GPUS_ON_NODE";
/// Slurm's own GPU list for the step; it keeps Slurm's list even after
/// `CUDA_VISIBLE_DEVICES` is changed.
pub const STEP_GPUS: &str = "SLURM_STEP_GPUS";
/// Set by slurmstepd when Slurm binds GPUs per task itself.
pub const TRES_BIND: &str = "SLURMD_TRES_BIND";
/// task/affinity's binding in each task's environment: its kind
/// (`mask_cpu:`, `map_cpu:`, ...) and every task's entry.
pub const CPU_BIND_TYPE: &str = "SLURM_CPU_BIND_TYPE";
pub const CPU_BIND_LIST: &str = "SLURM_CPU_BIND_LIST";
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
    /// Read by the loader, the C library, shells, MPI and GPU runtimes.
    const PREFIXES: [&str; 16] = [
        "SLURM", "LD_", "GLIBC_", "MALLOC_", "BASH_", "CUDA_", "NVIDIA_", "ROCR_", "HIP_", "HSA_",
        "GPU_", "ZE_", "OMPI_", "PMI", "MPICH_", "I_MPI_",
    ];
    const NAMES: [&str; 12] = [
        "PATH", "HOME", "SHELL", "USER", "ENV", "IFS", "TMPDIR", "TZ", "LANG", "PS4", METHOD,
        NODE_GPUS,
    ];
    PREFIXES.iter().any(|p| name.starts_with(p)) || NAMES.contains(&name) || name.starts_with("LC_")
}
