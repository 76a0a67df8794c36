//! Compiled only under #[cfg(test)] (see step/mod.rs).
//! Fixtures shared by the step's unit tests (each module's tests stand
//! beside it): a step planned from a few variables, and a task of it.

use super::{
    plan_step, Aside, FrontEnd, NoTopology, Node, NvmlAsk, StepFacts, StepIdentity, StepMap,
    StepPlan, TaskInputs, TaskOutcome, Unmapped, WhyNoList,
};
use crate::cpuset::CpuSet;
use crate::error::Error;
use crate::files::{Files, Stat};
use crate::method::Method;
use crate::mps::Daemon;
use crate::settings::config::Config;
use crate::settings::option::{Choice, OptionRequest};
use crate::snapshot::Snapshot;
use crate::topology::Topology;
use std::cell::Cell;
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

/// A node of a few variables, a few files (none that vendor detection
/// reads, so it says NVIDIA; src/runtime/tests.rs covers the others), an
/// NVML answer, and given GPU places; it counts NVML's calls.
pub(crate) struct FakeNode {
    pub env: HashMap<String, String>,
    pub files: FakeFiles,
    pub nvml: Result<Vec<String>, Error>,
    pub calls: Cell<usize>,
    /// `None`: the core locates `closest` GPUs itself.
    pub places: Option<Result<Topology, NoTopology>>,
}

impl FakeNode {
    pub(crate) fn new(pairs: &[(&str, &str)], nvml: Result<Vec<String>, Error>) -> FakeNode {
        FakeNode {
            env: env_of(pairs),
            files: FakeFiles::default(),
            nvml,
            calls: Cell::new(0),
            // What a step whose GPUs were not located gets.
            places: Some(Err(NoTopology)),
        }
    }

    /// Its variables, as a front end hands them to the core.
    pub(crate) fn vars(&self) -> Snapshot {
        Snapshot::read(|name: &str| self.env.get(name).cloned())
    }
}

impl Node for FakeNode {
    fn files(&self) -> &dyn Files {
        &self.files
    }

    fn nvml(&self, _: NvmlAsk, _: &Config) -> Result<Vec<String>, Error> {
        self.calls.set(self.calls.get() + 1);
        self.nvml.clone()
    }

    fn given_places(&self) -> Option<Result<Topology, NoTopology>> {
        self.places.clone()
    }
}

/// The fake node's files: the MPS server beside the tests' control
/// binary (`/opt/nv`), the host's name, and the MPS bases' owners and
/// modes; nothing else exists, and no file is a link.
pub(crate) struct FakeFiles {
    pub exists: Vec<PathBuf>,
    pub texts: HashMap<PathBuf, String>,
    pub stats: HashMap<PathBuf, Stat>,
    /// Symbolic links, to the file each names (itself no link).
    pub links: HashMap<PathBuf, PathBuf>,
}

impl Default for FakeFiles {
    fn default() -> FakeFiles {
        let dir = |uid, mode| Stat {
            uid,
            mode,
            is_dir: true,
        };
        FakeFiles {
            exists: ["control", "server"]
                .map(|b| PathBuf::from(format!("/opt/nv/nvidia-cuda-mps-{b}")))
                .into(),
            texts: [(
                PathBuf::from("/proc/sys/kernel/hostname"),
                "n1\n".to_string(),
            )]
            .into(),
            stats: [
                (PathBuf::from("/tmp"), dir(0, 0o1777)),
                (PathBuf::from("/local/job7"), dir(1000, 0o700)),
                (PathBuf::from("/var/mps"), dir(0, 0o755)),
            ]
            .into(),
            links: HashMap::new(),
        }
    }
}

/// `ENOENT`, as the kernel reports a missing file.
fn missing() -> io::Error {
    io::Error::from_raw_os_error(2)
}

impl Files for FakeFiles {
    fn read(&self, path: &Path) -> io::Result<String> {
        self.texts.get(path).cloned().ok_or_else(missing)
    }

    /// The names of the files given in `texts` directly below `dir`'s
    /// subfolders (`dir/NAME/...`); none: ENOENT.
    fn list(&self, dir: &Path, _: usize) -> io::Result<Vec<String>> {
        let mut names: Vec<String> = self
            .texts
            .keys()
            .filter_map(|p| p.strip_prefix(dir).ok()?.iter().next())
            .filter_map(|n| n.to_str().map(String::from))
            .collect();
        names.sort();
        names.dedup();
        if names.is_empty() {
            return Err(missing());
        }
        Ok(names)
    }

    fn exists(&self, path: &Path) -> bool {
        let path = self.links.get(path).map_or(path, PathBuf::as_path);
        self.exists.iter().any(|p| p == path)
            || self.texts.contains_key(path)
            || self.stats.contains_key(path)
    }

    fn stat(&self, path: &Path) -> io::Result<Stat> {
        self.stats.get(path).copied().ok_or_else(missing)
    }

    fn resolve(&self, path: &Path) -> io::Result<PathBuf> {
        let real = self.links.get(path).map_or(path, PathBuf::as_path);
        match self.exists(real) {
            true => Ok(real.to_path_buf()),
            false => Err(missing()),
        }
    }
}

pub(crate) fn env_of(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The user's option giving `choice`.
pub(crate) fn asking(choice: Choice) -> OptionRequest {
    OptionRequest::Use {
        choice: Some(choice),
        verbose: false,
        mps: false,
    }
}

/// Plans step 0 with `request`; returns the plan and how often NVML was
/// called.
pub(crate) fn plan_req(
    config: &Config,
    request: Option<OptionRequest>,
    pairs: &[(&str, &str)],
    nvml: Result<Vec<String>, Error>,
) -> (StepPlan, usize) {
    plan_step_id(0, config, request, pairs, nvml)
}

pub(crate) fn plan_step_id(
    step_id: u32,
    config: &Config,
    request: Option<OptionRequest>,
    pairs: &[(&str, &str)],
    nvml: Result<Vec<String>, Error>,
) -> (StepPlan, usize) {
    let node = FakeNode::new(pairs, nvml);
    let plan = plan_on(&node, step_id, config, request);
    (plan, node.calls.get())
}

/// Plans step `step_id` on a node the test prepared, with `request`.
pub(crate) fn plan_on(
    node: &FakeNode,
    step_id: u32,
    config: &Config,
    request: Option<OptionRequest>,
) -> StepPlan {
    plan_as(node, StepIdentity::Slurm(step_id), config, request)
}

/// Plans `step` (Slurm's, or a launcher's) on a node the test prepared.
pub(crate) fn plan_as(
    node: &FakeNode,
    step: StepIdentity,
    config: &Config,
    request: Option<OptionRequest>,
) -> StepPlan {
    let facts = StepFacts {
        step,
        config,
        request,
        method_variable: None,
        vars: &node.vars(),
        mps: None,
    };
    plan_step(&facts, node)
}

/// Plans with the user asking for `choice`.
pub(crate) fn plan_with(
    config: &Config,
    choice: Choice,
    pairs: &[(&str, &str)],
    nvml: Result<Vec<String>, Error>,
) -> (StepPlan, usize) {
    plan_req(config, Some(asking(choice)), pairs, nvml)
}

pub(crate) fn plan(pairs: &[(&str, &str)]) -> StepPlan {
    let config = Config::default();
    plan_with(&config, Choice::Map(Method::Contiguous), pairs, Ok(vec![])).0
}

/// The mapped plan of Slurm's four GPUs (SLURM_4) with `method`.
pub(crate) fn mapped_4(config: &Config, method: Method) -> StepMap {
    mapped(plan_with(config, Choice::Map(method), &SLURM_4, Ok(vec![])).0)
}

pub(crate) fn mapped(plan: StepPlan) -> StepMap {
    match plan {
        StepPlan::Map(map) => map,
        other => panic!("expected a mapping, got {other:?}"),
    }
}

/// The reason a step stands aside with; panics when it maps or is silent.
pub(crate) fn aside(plan: StepPlan) -> Aside {
    match plan {
        StepPlan::Unmapped(Unmapped { why: Some(why), .. }) => why,
        other => panic!("expected to stand aside, got {other:?}"),
    }
}

/// Why a step has no list to map; panics when it maps or says another thing.
pub(crate) fn unlisted(plan: StepPlan) -> WhyNoList {
    match aside(plan) {
        Aside::Missing(why) => why,
        other => panic!("expected no list, got {other:?}"),
    }
}

/// The step's stand-aside for a step without GPUs here.
pub(crate) fn gpus_none(inherited: Option<&str>) -> WhyNoList {
    WhyNoList::NoGpus {
        inherited: inherited.map(String::from),
    }
}

pub(crate) fn quiet(plan: StepPlan) -> Unmapped {
    match plan {
        StepPlan::Unmapped(u) if u.why.is_none() => u,
        other => panic!("expected a silent stand-aside, got {other:?}"),
    }
}

pub(crate) fn task(local_id: usize, local_count: usize, cuda: Option<&str>) -> TaskInputs<'_> {
    TaskInputs {
        node: "n1",
        local_id,
        local_count,
        rank: local_id as u32,
        cuda,
        tres_bind: None,
        cpus: super::TaskCpus::default(),
        container: Default::default(),
    }
}

/// A front end that reads no CPUs and starts no daemon, and counts what
/// it was asked: daemons, own CPUs, slurmstepd's.
#[derive(Default)]
pub(crate) struct FakeFront {
    pub asked: Cell<(usize, usize, usize)>,
}

impl FrontEnd for FakeFront {
    type NoDaemon = &'static str;

    fn start_daemon(&mut self, _: &Daemon, _: Option<usize>) -> Result<Daemon, &'static str> {
        let (d, o, s) = self.asked.get();
        self.asked.set((d + 1, o, s));
        Err("not started")
    }

    fn own_cpus(&self) -> Option<CpuSet> {
        let (d, o, s) = self.asked.get();
        self.asked.set((d, o + 1, s));
        None
    }

    fn stepd_cpus(&self) -> Option<CpuSet> {
        let (d, o, s) = self.asked.get();
        self.asked.set((d, o, s + 1));
        None
    }
}

pub(crate) fn get<'a>(out: &'a TaskOutcome, name: &str) -> Option<&'a str> {
    out.set
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// What Slurm 22.05 sets for `--gpus-per-node=4` (measured on the test
/// cluster; it also sets ZE_AFFINITY_MASK, left out here to test that
/// lists are narrowed only where Slurm set them).
pub(crate) const SLURM_4: [(&str, &str); 5] = [
    ("CUDA_VISIBLE_DEVICES", "0,1,2,3"),
    ("GPU_DEVICE_ORDINAL", "0,1,2,3"),
    ("ROCR_VISIBLE_DEVICES", "0,1,2,3"),
    ("SLURM_GPUS_ON_NODE", "4"),
    ("SLURM_STEP_GPUS", "0,1,2,3"),
];

pub(crate) fn uuids(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("GPU-fake-n1-{i}")).collect()
}
