//! Names of the environment variables the plugin reads and writes.

/// The list CUDA uses, and the first place the step's GPUs are read from.
pub const CUDA: &str = "CUDA_VISIBLE_DEVICES";

/// AMD ROCm's lowest filter, applied before HIP's and OpenCL's lists.
pub const ROCR: &str = "ROCR_VISIBLE_DEVICES";
/// ROCm OpenCL's list, an index list into what ROCR left.
pub(crate) const GPU_ORDINAL: &str = "GPU_DEVICE_ORDINAL";
/// Intel Level Zero's list.
pub const ZE: &str = "ZE_AFFINITY_MASK";
/// HIP's own list: Slurm never sets it, and the plugin never touches it; on
/// an AMD node a user's value makes the step stand aside.
pub const HIP: &str = "HIP_VISIBLE_DEVICES";
/// How CUDA numbers devices: `PCI_BUS_ID` makes its indices Slurm's.
pub const DEVICE_ORDER: &str = "CUDA_DEVICE_ORDER";

/// Slurm's count of the step's GPUs on this node.
pub(crate) const GPUS_ON_NODE: &str = "SLURM_GPUS_ON_NODE";
/// Slurm's own GPU list for the step; it keeps Slurm's list even after
/// `CUDA_VISIBLE_DEVICES` is changed.
pub const STEP_GPUS: &str = "SLURM_STEP_GPUS";
/// Set by slurmstepd when Slurm binds GPUs per task itself.
pub(crate) const TRES_BIND: &str = "SLURMD_TRES_BIND";
/// task/affinity's binding in each task's environment: its kind
/// (`mask_cpu:`, `map_cpu:`, ...) and every task's entry.
pub(crate) const CPU_BIND_TYPE: &str = "SLURM_CPU_BIND_TYPE";
pub(crate) const CPU_BIND_LIST: &str = "SLURM_CPU_BIND_LIST";
/// Requests under which Slurm binds GPUs per task itself (srun exports them).
pub(crate) const GPUS_PER_TASK: &str = "SLURM_GPUS_PER_TASK";
pub(crate) const NTASKS_PER_GPU: &str = "SLURM_NTASKS_PER_GPU";
pub(crate) const GPU_BIND: &str = "SLURM_GPU_BIND";
pub(crate) const TRES_BIND_REQUEST: &str = "SLURM_TRES_BIND";

/// The packaged plugstack snippet's file name. Slurm expands `include
/// DIR/*.conf` in glob(3)'s sorted order and calls plugins in that order:
/// `zz-` sorts after `pyxis.conf`, so the plugin sees what pyxis set.
pub const SNIPPET: &str = "zz-desi-gpu-map.conf";
/// The snippet's name up to 0.1.0; the packages and `make install` rename
/// it (packaging/README.md).
pub const OLD_SNIPPET: &str = "desi-gpu-map.conf";

/// SPANK plugins that move each task into a container, by `plugin_name`:
/// pyxis (NVIDIA's, over enroot).
pub(crate) const CONTAINER_PLUGINS: [&str; 1] = ["pyxis"];

/// The flag set to `1` in every mapped task, unless the site names another
/// (plugstack `flag=`).
pub const DEFAULT_FLAG: &str = "DESI_GPU_MAPPED";

/// Exported to every mapped task: the method it was mapped with.
pub const METHOD: &str = "DESI_GPU_MAP_METHOD";
/// Exported beside it: how many GPUs the step holds on the node.
pub const NODE_GPUS: &str = "DESI_GPU_MAP_NODE_GPUS";
/// The GPUs the task holds, named as its GPU list names them, its first
/// first: one, or its share where the node has fewer tasks than GPUs (under
/// `visible=rotate`, the head of its list).
pub const TASK_GPUS: &str = "DESI_GPU_MAP_GPUS";
/// Beside it in a task the Flux plugin maps: Flux's ids (R's) of those
/// GPUs, in one order, which a Flux instance nested in the task (`flux
/// batch`, `flux alloc`) reads to name the ids its R inherits.
pub const FLUX_IDS: &str = "DESI_GPU_MAP_FLUX_IDS";
/// The step the task was mapped in (`JOBID.STEPID`), so that
/// `desi-gpu-map exec` tells the plugin's mapping of this step from a flag
/// inherited from an outer one.
pub const STEP: &str = "DESI_GPU_MAP_STEP";

/// Set in each task that the plugin's MPS daemon serves (`1`).
pub const MPS: &str = "DESI_GPU_MAP_MPS";
/// Beside it, the host that daemon runs on: a nested step elsewhere
/// (where the pipe directory may be shared) starts its own.
pub const MPS_HOST: &str = "DESI_GPU_MAP_MPS_HOST";
/// Read by `desi-gpu-map exec` and the task prolog, each where its option
/// is not given (`--mps-control`, `--visible`, ...): the variables that
/// mirror exec's options, so that a batch script sets them once.
pub const MPS_CONTROL_PATH: &str = "DESI_GPU_MAP_MPS_CONTROL";
/// Mirrors `--visible`.
pub const VISIBLE_OPTION: &str = "DESI_GPU_MAP_VISIBLE";
/// Mirrors `--vendor`.
pub const VENDOR_OPTION: &str = "DESI_GPU_MAP_VENDOR";
/// Mirrors `--nvml`.
pub const NVML_OPTION: &str = "DESI_GPU_MAP_NVML";
/// Mirrors `--nvml-timeout`.
pub const NVML_TIMEOUT_OPTION: &str = "DESI_GPU_MAP_NVML_TIMEOUT";
/// Mirrors `--mps-dir`.
pub const MPS_DIR_OPTION: &str = "DESI_GPU_MAP_MPS_DIR";
/// Mirrors `--mps-share`.
pub const MPS_SHARE_OPTION: &str = "DESI_GPU_MAP_MPS_SHARE";

/// The command search path, which every shell and login sets: a task
/// without it got only Slurm's own variables from srun (`--export=NONE`,
/// as every srun of an `sbatch --export=NONE` script does; measured on
/// 22.05).
pub const PATH: &str = "PATH";
/// srun's `--export` (sbatch's `--export=NONE` sets `NONE` in the batch
/// script, for each srun there, and its tasks inherit it).
pub(crate) const EXPORT_ENV: &str = "SLURM_EXPORT_ENV";

/// srun's input variables for the user's task prolog and epilog
/// (`--task-prolog`, `--task-epilog`), which a batch script sets once.
pub const TASK_PROLOG: &str = "SLURM_TASK_PROLOG";
/// The epilog's, beside the prolog's.
pub const TASK_EPILOG: &str = "SLURM_TASK_EPILOG";

/// Set by slurmstepd for a task prolog or epilog it runs
/// (`srun --task-prolog`, `SLURM_TASK_PROLOG`; `src/slurmd/slurmstepd/`),
/// and the two values that say which.
pub const SCRIPT_CONTEXT: &str = "SLURM_SCRIPT_CONTEXT";
/// `SLURM_SCRIPT_CONTEXT` in a task prolog.
pub const PROLOG_TASK: &str = "prolog_task";
/// `SLURM_SCRIPT_CONTEXT` in a task epilog.
pub const EPILOG_TASK: &str = "epilog_task";

/// What CUDA's MPS reads: the daemon's pipe and log directories, and a
/// client's share of its GPU (also how Slurm's `gres/mps` marks a step).
pub const MPS_PIPE: &str = "CUDA_MPS_PIPE_DIRECTORY";
/// The daemon's log directory.
pub const MPS_LOG: &str = "CUDA_MPS_LOG_DIRECTORY";
/// A client's share of its GPU, in percent.
pub const MPS_SHARE: &str = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE";
/// The MPS control daemon, and where it is looked for (NVIDIA's packages,
/// the CUDA toolkit's default prefix), in order.
pub const MPS_CONTROL: &str = "nvidia-cuda-mps-control";
/// Where the control daemon is looked for, in order.
pub const MPS_CONTROL_DIRS: [&str; 4] = [
    "/usr/bin",
    "/usr/local/bin",
    "/usr/local/cuda/bin",
    "/usr/sbin",
];
/// The MPS server, which the control daemon execs (through its `PATH`)
/// for its first client.
pub const MPS_SERVER: &str = "nvidia-cuda-mps-server";
/// Where the control daemon looks for its server, after the control
/// binary's own folder and that folder's sibling `sbin` (NVIDIA's and
/// Debian's packages put the server in `sbin`).
pub(crate) const MPS_SERVER_DIRS: [&str; 4] = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"];
/// The kernel's name for this host (per UTS namespace).
pub(crate) const HOSTNAME_FILE: &str = "/proc/sys/kernel/hostname";
/// The job's temporary directory, under which each step's MPS directory
/// is made unless the site names another base (`mps_dir=`).
pub(crate) const TMPDIR: &str = "TMPDIR";

/// What Slurm tells each task of where it sits, in its environment.
pub(crate) const JOB_ID: &str = "SLURM_JOB_ID";
/// The job id's older spelling, which Slurm still sets beside it.
pub(crate) const JOB_ID_OLD: &str = "SLURM_JOBID";
pub(crate) const STEP_ID: &str = "SLURM_STEP_ID";
/// The task's id on its node.
pub const LOCAL_ID: &str = "SLURM_LOCALID";
/// The task's rank among all the step's tasks.
pub const RANK: &str = "SLURM_PROCID";
pub(crate) const NODE_ID: &str = "SLURM_NODEID";
pub(crate) const TASKS_PER_NODE: &str = "SLURM_STEP_TASKS_PER_NODE";
/// The node's name, as Slurm knows it.
pub const NODE_NAME: &str = "SLURMD_NODENAME";

/// What other launchers tell each rank of where it sits (read by
/// `desi-gpu-map exec`; `crate::launch` holds the table): Open MPI's
/// `mpirun`/`prterun`, with its launch's job id (`PMIX_NAMESPACE` in 4.1
/// and 5, `OMPI_MCA_ess_base_jobid` in 4.1).
pub(crate) const OMPI_LOCAL_RANK: &str = "OMPI_COMM_WORLD_LOCAL_RANK";
pub(crate) const OMPI_LOCAL_SIZE: &str = "OMPI_COMM_WORLD_LOCAL_SIZE";
pub(crate) const OMPI_RANK: &str = "OMPI_COMM_WORLD_RANK";
pub(crate) const OMPI_JOBID: &str = "OMPI_MCA_ess_base_jobid";
/// MPICH's Hydra `mpiexec` (`src/pm/hydra/proxy/pmip_cb.c`); its ranks'
/// parent is the proxy named by `HYDRA_PROXY`.
pub(crate) const HYDRA_LOCAL_RANK: &str = "MPI_LOCALRANKID";
pub(crate) const HYDRA_LOCAL_SIZE: &str = "MPI_LOCALNRANKS";
pub(crate) const HYDRA_PROXY: &str = "hydra_pmi_proxy";
/// Cray PALS as ALCF's Aurora documents it, with its application id.
pub(crate) const PALS_LOCAL_RANK: &str = "PALS_LOCAL_RANKID";
pub(crate) const PALS_LOCAL_SIZE: &str = "PALS_LOCAL_SIZE";
pub(crate) const PALS_RANK: &str = "PALS_RANKID";
pub(crate) const PALS_APID: &str = "PALS_APID";
/// Cray PALS's PMI as ALCF's Polaris documents it; also Hydra's global rank.
pub(crate) const PMI_LOCAL_RANK: &str = "PMI_LOCAL_RANK";
pub(crate) const PMI_LOCAL_SIZE: &str = "PMI_LOCAL_SIZE";
pub(crate) const PMI_RANK: &str = "PMI_RANK";
/// Flux's node-local task id (Flux sets no per-node count).
pub const FLUX_LOCAL_ID: &str = "FLUX_TASK_LOCAL_ID";
/// The Flux job a task belongs to, as its job shell writes it (F58,
/// `ƒ` or `f` and base 58; in decimal where that fails).
pub const FLUX_JOB_ID: &str = "FLUX_JOB_ID";
/// The Flux instance a task's job runs in, as its job shell hands it on.
pub const FLUX_URI: &str = "FLUX_URI";
/// PMIx's namespace (a launch's id) and global rank: its local rank and
/// count are `PMIx_Get` keys, not variables.
pub(crate) const PMIX_NAMESPACE: &str = "PMIX_NAMESPACE";
/// PMIx's global rank.
pub const PMIX_RANK: &str = "PMIX_RANK";

/// The plugin's own variables begin with this; a site's flag must not.
pub const OWN_PREFIX: &str = "DESI_GPU_MAP_";

/// First words (before the first `_`) of variables that Slurm, the loader,
/// the C library, shells, interpreters, MPI, network libraries, math
/// libraries and GPU runtimes read: a site's `flag=` must not begin with one,
/// since the flag is set to `1` in every mapped task (`LD_AUDIT=1` makes every
/// task print a loader error, `FI_PROVIDER=1` stops libfabric).
pub(crate) const RESERVED_WORDS: [&str; 62] = [
    // Slurm, the loader, the C library, locales, shells, terminals
    "SLURM", "SLURMD", "SPANK", "SBATCH", "SALLOC", "SRUN", "LD", "GLIBC", "MALLOC", "GCONV", "LC",
    "LANG", "POSIXLY", "BASH", "ZSH", "KSH", "XDG", "SSH", "TERM", "TMP",
    // interpreters
    "PYTHON", "PERL", "RUBY", "JAVA", "NODE", // GPU runtimes and their libraries
    "CUDA", "NVIDIA", "NV", "NCCL", "CUBLAS", "CUDNN", "ROCR", "ROCM", "HIP", "HSA", "AMD", "RCCL",
    "MIOPEN", "GPU", "ZE", "SYCL", "ONEAPI",
    // MPI, process managers and network libraries
    "MPI", "MPICH", "MPIR", "I", "MV2", "OMPI", "OPAL", "ORTE", "PRTE", "PMI", "PMIX", "CRAY", "FI",
    "UCX", "PSM2", "PSM3", // OpenMP and math libraries
    "OMP", "KMP", "MKL", "OPENBLAS",
];

/// Why `name` cannot be a site's flag, if it cannot: it must read
/// `PREFIX_REST` (a one-word name such as `PYTHONHOME` or `LOCPATH` is
/// some program's own), with a prefix of the site's own project.
pub(crate) fn flag_clash(name: &str) -> Option<FlagClash> {
    let word = match name.split_once('_') {
        Some((word, rest)) if !word.is_empty() && !rest.is_empty() => word,
        _ => return Some(FlagClash::NoPrefix),
    };
    if name.starts_with(OWN_PREFIX) {
        return Some(FlagClash::Reserved(OWN_PREFIX.to_string()));
    }
    RESERVED_WORDS
        .contains(&word)
        .then(|| FlagClash::Reserved(format!("{word}_")))
}

/// What is wrong with a flag name (see [`flag_clash`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FlagClash {
    /// Not of the form `PREFIX_REST`.
    NoPrefix,
    /// Its prefix is one that a runtime (or the plugin itself) reads.
    Reserved(String),
}
