//! One snapshot of the variables a step's decision reads, taken once by
//! the front end ([`Snapshot::read`]) and handed to the core, which reads
//! no environment itself. Each field is one variable, declared here once
//! with its name (`core/src/env.rs`) and its key ([`Var`]): the list of
//! what a decision can depend on is this file. The plugin takes it from
//! slurmstepd (the step's in `user_init`, each task's in `task_init`),
//! `exec` and the task prolog from their own process, the preview fills
//! the few a step of its own needs, and a front end with no Slurm (Flux's
//! shell) fills what it knows, field by field.
//!
//! Names meet fields here only: the rules read a field, or a [`Var`] of a
//! typed table ([`OTHER_LISTS`], the launchers', MPS's) through
//! [`Snapshot::value`], so "find references" on a field or a key leads
//! from the front end's read to each rule that reads it.

use crate::env;

/// Declares the snapshot's fields, each with its key and the variable it
/// holds, once: the struct, [`Var`], [`Snapshot::read`] and
/// [`Snapshot::value`] all come from the one list.
macro_rules! snapshot {
    ($($(#[$doc:meta])* $field:ident / $key:ident = $name:expr;)*) => {
        /// The variables a step's decision reads, each as the front end
        /// found it (lossy UTF-8); `None`: unset.
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        pub struct Snapshot {
            $($(#[$doc])* pub $field: Option<String>,)*
        }

        /// The key of each field of the [`Snapshot`], for the rules that
        /// read a table of variables (the launchers', the vendors' lists).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Var {
            $($(#[$doc])* $key,)*
        }

        impl Var {
            /// Every key, in the snapshot's order.
            pub const ALL: &'static [Var] = &[$(Var::$key),*];

            /// The variable's name.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Var::$key => $name,)*
                }
            }
        }

        impl Snapshot {
            /// Takes the snapshot through `read`, the front end's way to
            /// read one variable by its name: each is read once.
            pub fn read(read: impl Fn(&str) -> Option<String>) -> Snapshot {
                Snapshot {
                    $($field: read($name),)*
                }
            }

            /// Takes only the variables `vars` through `read` (the rest
            /// unset): a task's in `task_init`, where each read is a search
            /// through slurmstepd's environment
            /// ([`crate::step::TaskVars::KEYS`]).
            pub fn read_only(vars: &[Var], read: impl Fn(&str) -> Option<String>) -> Snapshot {
                let read = |var: Var| vars.contains(&var).then(|| read(var.name())).flatten();
                Snapshot {
                    $($field: read(Var::$key),)*
                }
            }

            /// The field that `var` keys.
            pub fn value(&self, var: Var) -> Option<&str> {
                match var {
                    $(Var::$key => self.$field.as_deref(),)*
                }
            }
        }
    };
}

snapshot! {
    // The GPU lists, as Slurm, a launcher or the user left them.
    /// `CUDA_VISIBLE_DEVICES`.
    cuda / Cuda = env::CUDA;
    /// `ROCR_VISIBLE_DEVICES`.
    rocr / Rocr = env::ROCR;
    /// `GPU_DEVICE_ORDINAL`.
    gpu_ordinal / GpuOrdinal = env::GPU_ORDINAL;
    /// `ZE_AFFINITY_MASK`.
    ze / Ze = env::ZE;
    /// `HIP_VISIBLE_DEVICES` (the user's: Slurm never sets it).
    hip / Hip = env::HIP;
    /// `CUDA_DEVICE_ORDER`.
    device_order / DeviceOrder = env::DEVICE_ORDER;
    /// Slurm's own list for the step (`SLURM_STEP_GPUS`).
    step_gpus / StepGpus = env::STEP_GPUS;
    /// Its count on this node (`SLURM_GPUS_ON_NODE`).
    gpus_on_node / GpusOnNode = env::GPUS_ON_NODE;

    // Slurm's own binding: the requests srun exported, what slurmstepd
    // says it bound, and the CPUs task/affinity bound each task to.
    /// `SLURM_GPUS_PER_TASK`.
    gpus_per_task / GpusPerTask = env::GPUS_PER_TASK;
    /// `SLURM_NTASKS_PER_GPU`.
    ntasks_per_gpu / NtasksPerGpu = env::NTASKS_PER_GPU;
    /// `SLURM_GPU_BIND`.
    gpu_bind / GpuBind = env::GPU_BIND;
    /// `SLURM_TRES_BIND`.
    tres_bind_request / TresBindRequest = env::TRES_BIND_REQUEST;
    /// `SLURMD_TRES_BIND`.
    tres_bind / TresBind = env::TRES_BIND;
    /// `SLURM_CPU_BIND_TYPE`.
    cpu_bind_type / CpuBindType = env::CPU_BIND_TYPE;
    /// `SLURM_CPU_BIND_LIST`.
    cpu_bind_list / CpuBindList = env::CPU_BIND_LIST;

    // Which job, step, node and task.
    /// `SLURM_JOB_ID`.
    job_id / JobId = env::JOB_ID;
    /// `SLURM_JOBID`.
    job_id_old / JobIdOld = env::JOB_ID_OLD;
    /// `SLURM_STEP_ID`.
    step_id / StepId = env::STEP_ID;
    /// `SLURM_NODEID`.
    node_id / NodeId = env::NODE_ID;
    /// `SLURMD_NODENAME`.
    node_name / NodeName = env::NODE_NAME;
    /// `SLURM_LOCALID`.
    local_id / LocalId = env::LOCAL_ID;
    /// `SLURM_PROCID`.
    rank / Rank = env::RANK;
    /// `SLURM_STEP_TASKS_PER_NODE`.
    tasks_per_node / TasksPerNode = env::TASKS_PER_NODE;

    // What the plugin or an earlier exec left, and the user's choices in
    // the variables that mirror exec's options.
    /// The step or launch that was mapped (`DESI_GPU_MAP_STEP`).
    mapped_step / MappedStep = env::STEP;
    /// `DESI_GPU_MAP_METHOD`.
    method / Method = env::METHOD;
    /// `DESI_GPU_MAP_MPS_CONTROL`.
    mps_control_path / MpsControlPath = env::MPS_CONTROL_PATH;
    /// `DESI_GPU_MAP_VISIBLE`.
    visible / Visible = env::VISIBLE_OPTION;
    /// `DESI_GPU_MAP_VENDOR`.
    vendor / Vendor = env::VENDOR_OPTION;
    /// `DESI_GPU_MAP_NVML`.
    nvml / Nvml = env::NVML_OPTION;
    /// `DESI_GPU_MAP_NVML_TIMEOUT`.
    nvml_timeout / NvmlTimeout = env::NVML_TIMEOUT_OPTION;
    /// `DESI_GPU_MAP_MPS_DIR`.
    mps_dir / MpsDir = env::MPS_DIR_OPTION;
    /// `DESI_GPU_MAP_MPS_SHARE`.
    mps_share_option / MpsShareOption = env::MPS_SHARE_OPTION;
    /// Whether srun passed more than Slurm's own variables.
    path / Path = env::PATH;
    /// `SLURM_EXPORT_ENV`.
    export_env / ExportEnv = env::EXPORT_ENV;

    // A parent's MPS: the plugin's variables and CUDA's.
    /// `DESI_GPU_MAP_MPS`.
    mps / Mps = env::MPS;
    /// `DESI_GPU_MAP_MPS_HOST`.
    mps_host / MpsHost = env::MPS_HOST;
    /// `CUDA_MPS_PIPE_DIRECTORY`.
    mps_pipe / MpsPipe = env::MPS_PIPE;
    /// `CUDA_MPS_LOG_DIRECTORY`.
    mps_log / MpsLog = env::MPS_LOG;
    /// `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`.
    mps_share / MpsShare = env::MPS_SHARE;
    /// The base of a step's MPS directory where the site names none.
    tmpdir / Tmpdir = env::TMPDIR;

    // The launchers' variables (`crate::launch::LAUNCHERS`), and what
    // tells Flux's and a PMIx launcher's ranks.
    /// `OMPI_COMM_WORLD_LOCAL_RANK`.
    ompi_local_rank / OmpiLocalRank = env::OMPI_LOCAL_RANK;
    /// `OMPI_COMM_WORLD_LOCAL_SIZE`.
    ompi_local_size / OmpiLocalSize = env::OMPI_LOCAL_SIZE;
    /// `OMPI_COMM_WORLD_RANK`.
    ompi_rank / OmpiRank = env::OMPI_RANK;
    /// `OMPI_MCA_ess_base_jobid`.
    ompi_jobid / OmpiJobid = env::OMPI_JOBID;
    /// `PMIX_NAMESPACE`.
    pmix_namespace / PmixNamespace = env::PMIX_NAMESPACE;
    /// `PMIX_RANK`.
    pmix_rank / PmixRank = env::PMIX_RANK;
    /// `MPI_LOCALRANKID`.
    hydra_local_rank / HydraLocalRank = env::HYDRA_LOCAL_RANK;
    /// `MPI_LOCALNRANKS`.
    hydra_local_size / HydraLocalSize = env::HYDRA_LOCAL_SIZE;
    /// `PMI_RANK`.
    pmi_rank / PmiRank = env::PMI_RANK;
    /// `PMI_LOCAL_RANK`.
    pmi_local_rank / PmiLocalRank = env::PMI_LOCAL_RANK;
    /// `PMI_LOCAL_SIZE`.
    pmi_local_size / PmiLocalSize = env::PMI_LOCAL_SIZE;
    /// `PALS_LOCAL_RANKID`.
    pals_local_rank / PalsLocalRank = env::PALS_LOCAL_RANK;
    /// `PALS_LOCAL_SIZE`.
    pals_local_size / PalsLocalSize = env::PALS_LOCAL_SIZE;
    /// `PALS_RANKID`.
    pals_rank / PalsRank = env::PALS_RANK;
    /// `PALS_APID`.
    pals_apid / PalsApid = env::PALS_APID;
    /// `FLUX_TASK_LOCAL_ID`.
    flux_local_id / FluxLocalId = env::FLUX_LOCAL_ID;
    /// `FLUX_JOB_ID`.
    flux_job_id / FluxJobId = env::FLUX_JOB_ID;
    /// `FLUX_URI`.
    flux_uri / FluxUri = env::FLUX_URI;
}

impl std::fmt::Display for Var {
    /// The variable's name, as every message spells it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The other GPU lists Slurm may set next to `CUDA_VISIBLE_DEVICES`; each is
/// written for the node's vendor (see `vendor`) only when Slurm set it, never
/// added.
pub const OTHER_LISTS: [Var; 3] = [Var::Rocr, Var::GpuOrdinal, Var::Ze];

/// Requests under which Slurm binds GPUs per task itself (srun exports them).
pub(crate) const PER_TASK_REQUESTS: [Var; 4] = [
    Var::GpusPerTask,
    Var::NtasksPerGpu,
    Var::GpuBind,
    Var::TresBindRequest,
];

/// Those of them that may ask for no binding (`none`).
pub(crate) const BIND_REQUESTS: [Var; 2] = [Var::GpuBind, Var::TresBindRequest];

/// Every variable that mirrors one of exec's options, which exec and the
/// task prolog read where the option is not given.
pub const MIRRORS: [Var; 7] = [
    Var::MpsControlPath,
    Var::Visible,
    Var::Vendor,
    Var::Nvml,
    Var::NvmlTimeout,
    Var::MpsDir,
    Var::MpsShareOption,
];

/// A variable that holds no whole number where the rules need one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotANumber {
    /// The variable.
    pub var: Var,
    /// Its value, as it was.
    pub value: String,
}

impl Snapshot {
    /// The whole number `var` holds (spaces around it allowed), parsed
    /// here once for every rule that counts; `None` where it is unset.
    pub fn number(&self, var: Var) -> Option<Result<usize, NotANumber>> {
        let value = self.value(var)?;
        Some(value.trim().parse().map_err(|_| NotANumber {
            var,
            value: value.to_string(),
        }))
    }

    /// A snapshot holding `pairs` (name, value), for a front end that
    /// knows a few variables (the preview) and for tests. Names the
    /// snapshot does not hold are left out.
    pub fn of(pairs: &[(&str, &str)]) -> Snapshot {
        Snapshot::read(|name| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_name_is_one_key() {
        let mut names: Vec<&str> = Var::ALL.iter().map(|v| v.name()).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before, "a name twice");
    }

    #[test]
    fn read_once_and_got_by_key() {
        let s = Snapshot::of(&[(env::CUDA, "0,1"), (env::STEP_ID, "3"), ("OTHER", "x")]);
        assert_eq!(s.cuda.as_deref(), Some("0,1"));
        assert_eq!(s.value(Var::StepId), Some("3"));
        assert_eq!(s.value(Var::Rocr), None);
        let only = Snapshot::read_only(&[Var::Cuda], |n| (n == env::CUDA).then(|| "7".to_string()));
        assert_eq!(only, Snapshot::of(&[(env::CUDA, "7")]));
    }

    #[test]
    fn a_number_is_parsed_once_with_its_error() {
        let s = Snapshot::of(&[(env::LOCAL_ID, " 3 "), (env::NODE_ID, "x")]);
        assert_eq!(s.number(Var::LocalId), Some(Ok(3)));
        let bad = NotANumber {
            var: Var::NodeId,
            value: "x".to_string(),
        };
        assert_eq!(s.number(Var::NodeId), Some(Err(bad)));
        assert_eq!(s.number(Var::Rank), None);
    }
}
