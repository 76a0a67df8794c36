//! The job shell as the core's [`Node`] and the protocol's [`FrontEnd`]:
//! the job's facts on this node as the shell knows them (its tasks here,
//! the GPUs R gives it, read through the broker's own grant), the job's
//! environment for the rest, the machine's files, NVML asked in a child
//! with a deadline, and the MPS daemon started as this process (the job's
//! user).

use crate::error::PluginError;
use crate::ffi::Shell;
use crate::mps::Served;
use desi_gpu_map_core::cpuset::CpuSet;
use desi_gpu_map_core::env;
use desi_gpu_map_core::files::Files;
use desi_gpu_map_core::mps::Daemon;
use desi_gpu_map_core::settings::config::Config;
use desi_gpu_map_core::snapshot::{Snapshot, Var, OTHER_LISTS};
use desi_gpu_map_core::step::{FrontEnd, Node, NvmlAsk};
use desi_gpu_map_core::Error;
use desi_gpu_map_host::failure::Failure;
use desi_gpu_map_host::files::HostFiles;
use desi_gpu_map_host::nvml::ask_within;
use serde::Deserialize;

/// The job on this node, as the shell's info tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellInfo {
    pub jobid: u64,
    /// This shell's rank in the job: the node's place in it.
    pub shell_rank: u32,
    /// The node's name.
    pub node: String,
    /// The job's tasks on this node.
    pub ntasks: usize,
    /// R's GPU ids on this node (an id set); `None`: none.
    pub gpus: Option<String>,
}

/// The shell's job info (`flux_shell_get_info`), as far as it is read.
#[derive(Deserialize)]
struct Info {
    jobid: u64,
    rank: u32,
}

/// This node's part of the job (`flux_shell_get_rank_info`).
#[derive(Deserialize)]
struct RankInfo {
    name: Option<String>,
    ntasks: usize,
    #[serde(default)]
    resources: Resources,
}

#[derive(Deserialize, Default)]
struct Resources {
    gpus: Option<String>,
}

/// Reads the job's facts from the shell's info (`info`) and this node's
/// (`rank_info`), both JSON.
pub fn shell_info(info: Option<&str>, rank_info: Option<&str>) -> Result<ShellInfo, PluginError> {
    let info: Info = read("job info", info)?;
    let rank: RankInfo = read("rank info", rank_info)?;
    Ok(ShellInfo {
        jobid: info.jobid,
        shell_rank: info.rank,
        node: rank.name.unwrap_or_else(|| "?".to_string()),
        ntasks: rank.ntasks,
        gpus: rank.resources.gpus,
    })
}

/// One of the shell's JSON objects (`what`), into `T`.
pub fn read<T: for<'a> Deserialize<'a>>(
    what: &'static str,
    text: Option<&str>,
) -> Result<T, PluginError> {
    let text = text.ok_or(PluginError::NoJson { what })?;
    serde_json::from_str(text).map_err(|error| PluginError::Json { what, error })
}

/// The shell, for one handler's call, as the core's node.
pub struct FluxNode {
    pub shell: Shell,
    /// The job's daemon, once started.
    pub served: Option<Served>,
    /// The CPUs the job's shell is bound to ([`FrontEnd::own_cpus`]).
    pub cpus: Option<CpuSet>,
}

/// Whether the job's own environment answers for `name`: not Slurm's
/// variables, which describe the step the broker runs in (inside an
/// allocation), not this job; and not the GPU lists, whose only source is
/// R through the broker's grant.
fn from_job_env(name: &str) -> bool {
    let list = |var: &Var| var.name() == name;
    !name.starts_with("SLURM") && !OTHER_LISTS.iter().any(list) && name != env::HIP
}

impl FluxNode {
    /// The job's environment for the core, never Slurm's variables or the
    /// other GPU lists ([`from_job_env`]); the core lists R's GPUs.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot::read(|name: &str| {
            from_job_env(name)
                .then(|| self.shell.getenv(name))
                .flatten()
        })
    }
}

impl Node for FluxNode {
    fn files(&self) -> &dyn Files {
        &HostFiles
    }

    /// In a child process killed at the deadline: NVML is never loaded
    /// into the shell itself.
    fn nvml(&self, ask: NvmlAsk, config: &Config) -> Result<Vec<String>, Error> {
        ask_within(ask, &config.nvml, config.nvml_timeout)
    }
}

impl FrontEnd for FluxNode {
    type NoDaemon = Failure;

    fn start_daemon(&mut self, daemon: &Daemon, _task: Option<usize>) -> Result<Daemon, Failure> {
        let served = Served::start(daemon)?;
        let daemon = served.daemon().clone();
        self.served = Some(served);
        Ok(daemon)
    }

    /// The CPUs Flux's `cpu-affinity` bound the job's shell to on this
    /// node (its `shell.init`, before this plugin's): under its default
    /// (`on`) every task runs on exactly these. A task's own subset under
    /// `cpu-affinity=per-task` is set in the task (`task.exec`), whose
    /// environment no plugin can change any more; so each task is placed
    /// by the shell's, alike on the node.
    fn own_cpus(&self) -> Option<CpuSet> {
        self.cpus.clone()
    }

    fn stepd_cpus(&self) -> Option<CpuSet> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shells_info_gives_the_jobs_facts_here() {
        let info = r#"{"jobid":123456,"rank":1,"size":2,"ntasks":16,"R":{}}"#;
        let rank = r#"{"id":1,"name":"vm","ntasks":5,"resources":{"cores":"0-3","gpus":"0-3"}}"#;
        let facts = shell_info(Some(info), Some(rank)).unwrap();
        assert_eq!(
            facts,
            ShellInfo {
                jobid: 123456,
                shell_rank: 1,
                node: "vm".into(),
                ntasks: 5,
                gpus: Some("0-3".into())
            }
        );
        let no_gpus = r#"{"name":"vm","ntasks":1,"resources":{"cores":"0"}}"#;
        assert_eq!(shell_info(Some(info), Some(no_gpus)).unwrap().gpus, None);
        assert_eq!(
            shell_info(None, Some(rank)).unwrap_err().to_string(),
            "the shell gives no job info"
        );
        assert!(shell_info(Some("{}"), Some(rank))
            .unwrap_err()
            .to_string()
            .starts_with("the shell's job info: missing field `jobid`"));
    }

    #[test]
    fn slurms_variables_and_other_lists_are_not_the_jobs() {
        assert!(from_job_env("TMPDIR") && from_job_env("DESI_GPU_MAPPED"));
        for name in [
            "SLURM_STEP_GPUS",
            "SLURMD_TRES_BIND",
            "ROCR_VISIBLE_DEVICES",
            "HIP_VISIBLE_DEVICES",
        ] {
            assert!(!from_job_env(name), "{name}");
        }
    }
}
