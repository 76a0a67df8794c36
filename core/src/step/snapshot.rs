//! One snapshot of the variables a step's decision reads, taken once by
//! the front end ([`Snapshot::read`]) and handed to the core, which reads
//! no environment itself. Each field is one variable, declared here once
//! with its name (`core/src/env.rs`): the list of what a decision can
//! depend on is this file. The plugin takes it from slurmstepd (the
//! step's in `user_init`, each task's in `task_init`), `exec` and the task
//! prolog from their own process, the preview fills the few a step of its
//! own needs, and a front end with no Slurm (Flux's shell) fills what it
//! knows, field by field.

use crate::env;

/// Declares the snapshot's fields, each with the variable it holds, once:
/// the struct, [`Snapshot::NAMES`], [`Snapshot::read`] and
/// [`Snapshot::get`] all come from the one list.
macro_rules! snapshot {
    ($($(#[$doc:meta])* $field:ident = $name:expr;)*) => {
        /// The variables a step's decision reads, each as the front end
        /// found it (lossy UTF-8); `None`: unset.
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        pub struct Snapshot {
            $($(#[$doc])* pub $field: Option<String>,)*
        }

        impl Snapshot {
            /// Every variable in the snapshot, by name.
            pub const NAMES: &'static [&'static str] = &[$($name),*];

            /// Takes the snapshot through `var`, the front end's way to
            /// read one variable: each is read once.
            pub fn read(var: &dyn Fn(&str) -> Option<String>) -> Snapshot {
                Snapshot {
                    $($field: var($name),)*
                }
            }

            /// Takes only the variables `names` through `var` (the rest
            /// unset): a task's in `task_init`, where each read is a search
            /// through slurmstepd's environment ([`super::TaskVars::NAMES`]).
            pub fn read_only(names: &[&str], var: &dyn Fn(&str) -> Option<String>) -> Snapshot {
                let read = |name: &str| names.contains(&name).then(|| var(name)).flatten();
                Snapshot {
                    $($field: read($name),)*
                }
            }

            /// The variable `name`, where the snapshot holds it; `None`
            /// where it is unset or no field of the snapshot.
            pub(crate) fn get(&self, name: &str) -> Option<&str> {
                $(if name == $name {
                    return self.$field.as_deref();
                })*
                None
            }
        }
    };
}

snapshot! {
    // The GPU lists, as Slurm, a launcher or the user left them.
    /// `CUDA_VISIBLE_DEVICES`.
    cuda = env::CUDA;
    /// `ROCR_VISIBLE_DEVICES`.
    rocr = env::ROCR;
    /// `GPU_DEVICE_ORDINAL`.
    gpu_ordinal = env::GPU_ORDINAL;
    /// `ZE_AFFINITY_MASK`.
    ze = env::ZE;
    /// `HIP_VISIBLE_DEVICES` (the user's: Slurm never sets it).
    hip = env::HIP;
    /// `CUDA_DEVICE_ORDER`.
    device_order = env::DEVICE_ORDER;
    /// Slurm's own list for the step (`SLURM_STEP_GPUS`).
    step_gpus = env::STEP_GPUS;
    /// Its count on this node (`SLURM_GPUS_ON_NODE`).
    gpus_on_node = env::GPUS_ON_NODE;

    // Slurm's own binding: the requests srun exported, what slurmstepd
    // says it bound, and the CPUs task/affinity bound each task to.
    /// `SLURM_GPUS_PER_TASK`.
    gpus_per_task = env::GPUS_PER_TASK;
    /// `SLURM_NTASKS_PER_GPU`.
    ntasks_per_gpu = env::NTASKS_PER_GPU;
    /// `SLURM_GPU_BIND`.
    gpu_bind = env::GPU_BIND;
    /// `SLURM_TRES_BIND`.
    tres_bind_request = env::TRES_BIND_REQUEST;
    /// `SLURMD_TRES_BIND`.
    tres_bind = env::TRES_BIND;
    /// `SLURM_CPU_BIND_TYPE`.
    cpu_bind_type = env::CPU_BIND_TYPE;
    /// `SLURM_CPU_BIND_LIST`.
    cpu_bind_list = env::CPU_BIND_LIST;

    // Which job, step, node and task.
    /// `SLURM_JOB_ID`.
    job_id = env::JOB_ID;
    /// `SLURM_JOBID`.
    job_id_old = env::JOB_ID_OLD;
    /// `SLURM_STEP_ID`.
    step_id = env::STEP_ID;
    /// `SLURM_NODEID`.
    node_id = env::NODE_ID;
    /// `SLURMD_NODENAME`.
    node_name = env::NODE_NAME;
    /// `SLURM_LOCALID`.
    local_id = env::LOCAL_ID;
    /// `SLURM_PROCID`.
    rank = env::RANK;
    /// `SLURM_STEP_TASKS_PER_NODE`.
    tasks_per_node = env::TASKS_PER_NODE;

    // What the plugin or an earlier exec left, and the user's choices in
    // the variables that mirror exec's options.
    /// The step or launch that was mapped (`DESI_GPU_MAP_STEP`).
    mapped_step = env::STEP;
    /// `DESI_GPU_MAP_METHOD`.
    method = env::METHOD;
    /// `DESI_GPU_MAP_MPS_CONTROL`.
    mps_control_path = env::MPS_CONTROL_PATH;
    /// `DESI_GPU_MAP_VISIBLE`.
    visible = env::VISIBLE_OPTION;
    /// `DESI_GPU_MAP_VENDOR`.
    vendor = env::VENDOR_OPTION;
    /// `DESI_GPU_MAP_NVML`.
    nvml = env::NVML_OPTION;
    /// `DESI_GPU_MAP_NVML_TIMEOUT`.
    nvml_timeout = env::NVML_TIMEOUT_OPTION;
    /// `DESI_GPU_MAP_MPS_DIR`.
    mps_dir = env::MPS_DIR_OPTION;
    /// `DESI_GPU_MAP_MPS_SHARE`.
    mps_share_option = env::MPS_SHARE_OPTION;
    /// Whether srun passed more than Slurm's own variables.
    path = env::PATH;
    /// `SLURM_EXPORT_ENV`.
    export_env = env::EXPORT_ENV;

    // A parent's MPS: the plugin's variables and CUDA's.
    /// `DESI_GPU_MAP_MPS`.
    mps = env::MPS;
    /// `DESI_GPU_MAP_MPS_HOST`.
    mps_host = env::MPS_HOST;
    /// `CUDA_MPS_PIPE_DIRECTORY`.
    mps_pipe = env::MPS_PIPE;
    /// `CUDA_MPS_LOG_DIRECTORY`.
    mps_log = env::MPS_LOG;
    /// `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`.
    mps_share = env::MPS_SHARE;
    /// The base of a step's MPS directory where the site names none.
    tmpdir = env::TMPDIR;

    // The launchers' variables (`crate::launch::LAUNCHERS`), and what
    // tells Flux's and a PMIx launcher's ranks.
    /// `OMPI_COMM_WORLD_LOCAL_RANK`.
    ompi_local_rank = env::OMPI_LOCAL_RANK;
    /// `OMPI_COMM_WORLD_LOCAL_SIZE`.
    ompi_local_size = env::OMPI_LOCAL_SIZE;
    /// `OMPI_COMM_WORLD_RANK`.
    ompi_rank = env::OMPI_RANK;
    /// `OMPI_MCA_ess_base_jobid`.
    ompi_jobid = env::OMPI_JOBID;
    /// `PMIX_NAMESPACE`.
    pmix_namespace = env::PMIX_NAMESPACE;
    /// `PMIX_RANK`.
    pmix_rank = env::PMIX_RANK;
    /// `MPI_LOCALRANKID`.
    hydra_local_rank = env::HYDRA_LOCAL_RANK;
    /// `MPI_LOCALNRANKS`.
    hydra_local_size = env::HYDRA_LOCAL_SIZE;
    /// `PMI_RANK`.
    pmi_rank = env::PMI_RANK;
    /// `PMI_LOCAL_RANK`.
    pmi_local_rank = env::PMI_LOCAL_RANK;
    /// `PMI_LOCAL_SIZE`.
    pmi_local_size = env::PMI_LOCAL_SIZE;
    /// `PALS_LOCAL_RANKID`.
    pals_local_rank = env::PALS_LOCAL_RANK;
    /// `PALS_LOCAL_SIZE`.
    pals_local_size = env::PALS_LOCAL_SIZE;
    /// `PALS_RANKID`.
    pals_rank = env::PALS_RANK;
    /// `PALS_APID`.
    pals_apid = env::PALS_APID;
    /// `FLUX_TASK_LOCAL_ID`.
    flux_local_id = env::FLUX_LOCAL_ID;
    /// `FLUX_JOB_ID`.
    flux_job_id = env::FLUX_JOB_ID;
    /// `FLUX_URI`.
    flux_uri = env::FLUX_URI;
}

impl Snapshot {
    /// The variable `name` as an owned value, for the rules that read a
    /// table of names (the launchers', the vendors' lists).
    pub(crate) fn var(&self, name: &str) -> Option<String> {
        self.get(name).map(String::from)
    }

    /// A snapshot holding `pairs` (name, value), for a front end that
    /// knows a few variables (the preview) and for tests. Names the
    /// snapshot does not hold are left out.
    pub fn of(pairs: &[(&str, &str)]) -> Snapshot {
        let find = |name: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        };
        Snapshot::read(&find)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::LAUNCHERS;

    #[test]
    fn every_name_the_rules_read_by_table_is_in_the_snapshot_once() {
        let mut tables: Vec<&str> = Vec::new();
        tables.extend(env::OTHER_LISTS);
        tables.extend(env::PER_TASK_REQUESTS);
        tables.extend(env::MIRRORS);
        tables.extend(crate::mps::MPS_NAMES);
        for l in &LAUNCHERS {
            tables.extend([l.local_rank, l.local_size, l.rank]);
            tables.extend(l.tag_vars);
        }
        for name in tables {
            assert!(Snapshot::NAMES.contains(&name), "{name} is no field");
        }
        let mut names = Snapshot::NAMES.to_vec();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before, "a name twice");
    }

    #[test]
    fn read_once_and_got_by_name() {
        let s = Snapshot::of(&[(env::CUDA, "0,1"), (env::STEP_ID, "3"), ("OTHER", "x")]);
        assert_eq!(s.cuda.as_deref(), Some("0,1"));
        assert_eq!(s.get(env::STEP_ID), Some("3"));
        assert_eq!(s.get("OTHER"), None);
        assert_eq!(s.get(env::ROCR), None);
    }
}
