//! Where srun places a step's tasks, and what each task then gets: the
//! preview behind `desi-gpu-map plan`, computed with the plugin's own
//! `assign`.

use crate::cpuset::CpuSet;
use crate::error::Error;
use crate::files::{Files, NoFiles};
use crate::method::closest::NodeCpus;
use crate::method::{Method, Visible};
use crate::names::named;
use crate::runtime::{Vendor, VendorSetting};
use crate::settings::config::{Config, NvmlSource};
use crate::settings::option::{Choice, OptionRequest};
use crate::slurm::gpus::join;
use crate::snapshot::Snapshot;
use crate::step::{
    assign_in, plan_step, NoTopology, Node, NvmlAsk, StepFacts, StepMap, StepPlan, TaskCpus,
    TaskInputs, Unmapped,
};
use crate::topology::Topology;
use std::collections::HashMap;
use std::fmt;

/// Why `desi-gpu-map plan` cannot preview what it was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanError {
    /// `desi-gpu-map plan` without a node.
    NoNodes,
    /// Fewer tasks than nodes.
    TooFewTasks {
        /// The tasks asked for.
        tasks: usize,
        /// The nodes asked for.
        nodes: usize,
    },
    /// Not one GPU list per node.
    ListsPerNode {
        /// The GPU lists given.
        lists: usize,
        /// The nodes asked for.
        nodes: usize,
    },
    /// A per-node option with neither one value nor one per node.
    ValuesPerNode {
        /// The option.
        option: &'static str,
        /// The values given.
        values: usize,
        /// The nodes asked for.
        nodes: usize,
    },
    /// A node given no task.
    NodeWithoutTasks,
    /// A node given no GPU.
    NodeWithoutGpus,
    /// The plugin would not map such a node (why).
    NotPreviewed(String),
    /// The core refused an input (a GPU list, a task).
    Core(Error),
    /// `--mps`: more tasks on one GPU than MPS serves.
    TooManyClients {
        /// The node, from 0.
        node: usize,
        /// The GPU, as its list names it.
        gpu: String,
        /// The tasks on it.
        tasks: usize,
    },
    /// A size past one of the preview's [`Limit`]s: `said` names the
    /// option and its value ("--nodes 10000000000 is").
    OverLimit {
        /// The option and its value, in words.
        said: String,
        /// The limit it passes.
        limit: Limit,
    },
}

/// The most tasks, and the most GPUs, one preview lists: each is a row of
/// its tables, and a million rows (up to about 700 MB as they are held,
/// measured) is more than any step a person previews.
pub const MAX_PREVIEW_ROWS: usize = 1 << 20;

/// GPUs on each node when neither `--gpus`, `--devices` nor a topology
/// says.
pub const DEFAULT_GPUS: usize = 4;

/// The most GPU entries the task rows' visible lists hold in all: under
/// `--visible rotate` each row lists its node's every GPU (16M entries
/// are about 100 MB of text).
pub const MAX_LISTED_GPUS: usize = 1 << 24;

/// The sizes `desi-gpu-map plan` takes, each bounded so that no command line
/// makes it allocate more than memory holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// Nodes in the step: [`crate::slurm::tasks::MAX_NODES`].
    Nodes,
    /// Tasks on one node: Slurm's own ceiling,
    /// [`crate::slurm::tasks::MAX_TASKS_PER_NODE`].
    NodeTasks,
    /// GPUs on one node: the longest GPU list the plugin reads,
    /// [`crate::slurm::gpus::MAX_LIST_ENTRIES`].
    NodeGpus,
    /// Tasks in all: [`MAX_PREVIEW_ROWS`].
    Tasks,
    /// GPUs in all: [`MAX_PREVIEW_ROWS`].
    Gpus,
    /// Entries of the visible lists in all: [`MAX_LISTED_GPUS`].
    Listed,
}

impl Limit {
    /// The largest size allowed.
    pub(crate) fn most(self) -> usize {
        match self {
            Limit::Nodes => crate::slurm::tasks::MAX_NODES,
            Limit::NodeTasks => crate::slurm::tasks::MAX_TASKS_PER_NODE,
            Limit::NodeGpus => crate::slurm::gpus::MAX_LIST_ENTRIES,
            Limit::Tasks | Limit::Gpus => MAX_PREVIEW_ROWS,
            Limit::Listed => MAX_LISTED_GPUS,
        }
    }

    /// `Err` naming `said` when `size` is past the limit.
    pub fn check(self, size: usize, said: impl FnOnce() -> String) -> Result<(), PlanError> {
        if size > self.most() {
            return Err(PlanError::OverLimit {
                said: said(),
                limit: self,
            });
        }
        Ok(())
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let most = self.most();
        match self {
            Limit::Nodes => write!(f, "{most} nodes in a step"),
            Limit::NodeTasks => write!(
                f,
                "{most} tasks on a node (Slurm's MaxTasksPerNode may not exceed it)"
            ),
            Limit::NodeGpus => write!(
                f,
                "{most} GPUs on a node (the longest GPU list the plugin reads)"
            ),
            Limit::Tasks => write!(f, "{most} tasks in a preview"),
            Limit::Gpus => write!(f, "{most} GPUs in a preview"),
            Limit::Listed => write!(f, "{most} GPUs listed in a preview's visible lists"),
        }
    }
}

impl From<Error> for PlanError {
    fn from(e: Error) -> Self {
        PlanError::Core(e)
    }
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanError::NoNodes => f.write_str("at least one node is needed"),
            PlanError::TooFewTasks { tasks, nodes } => write!(
                f,
                "{tasks} tasks cannot cover {nodes} nodes (srun needs at least one task per node)"
            ),
            PlanError::ListsPerNode { lists, nodes } => {
                write!(f, "{lists} GPU lists for {nodes} nodes")
            }
            PlanError::ValuesPerNode {
                option,
                values,
                nodes,
            } => write!(
                f,
                "{option} has {values} values for {nodes} nodes: give one, or one per node"
            ),
            PlanError::NodeWithoutTasks => f.write_str("every node needs at least one task"),
            PlanError::NodeWithoutGpus => f.write_str("every node needs at least one GPU"),
            PlanError::NotPreviewed(why) => {
                write!(f, "the plugin would not map this node: {why}")
            }
            PlanError::Core(e) => e.fmt(f),
            PlanError::TooManyClients { node, gpu, tasks } => write!(
                f,
                "node {node}: {tasks} tasks would share GPU {gpu}, and MPS serves at most {} \
                 clients per GPU; the plugin would run this step without MPS",
                crate::mps::MAX_CLIENTS
            ),
            PlanError::OverLimit { said, limit } => {
                write!(f, "{said} over the limit of {limit}")
            }
        }
    }
}

impl std::error::Error for PlanError {}

/// srun's `-m` task distribution over nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distribution {
    /// Consecutive ranks fill a node before the next (srun's default).
    Block,
    /// Rank `r` goes to the next node, in turn, that has room.
    Cyclic,
}

named!(Distribution {
    Block => "block",
    Cyclic => "cyclic",
});

/// Splits `ntasks` over `nodes` as evenly as possible, the first nodes
/// taking one more: srun's split when every node offers the same CPUs
/// (whole nodes). On shared nodes srun follows the allocation instead; give
/// the real split with `--ntasks-per-node`.
pub fn even_split(ntasks: usize, nodes: usize) -> Result<Vec<usize>, PlanError> {
    if nodes == 0 {
        return Err(PlanError::NoNodes);
    }
    if ntasks < nodes {
        return Err(PlanError::TooFewTasks {
            tasks: ntasks,
            nodes,
        });
    }
    let (each, extra) = (ntasks / nodes, ntasks % nodes);
    Ok((0..nodes).map(|i| each + usize::from(i < extra)).collect())
}

/// The global ranks on each node, in local-id order.
pub fn place(per_node: &[usize], distribution: Distribution) -> Vec<Vec<usize>> {
    let total: usize = per_node.iter().sum();
    let mut ranks: Vec<Vec<usize>> = per_node.iter().map(|&n| Vec::with_capacity(n)).collect();
    match distribution {
        Distribution::Block => {
            let mut next = 0;
            for (node, &count) in ranks.iter_mut().zip(per_node) {
                node.extend(next..next + count);
                next += count;
            }
        }
        Distribution::Cyclic => {
            // Round by round, over the nodes that still have room: a node
            // leaves once full, so the work is the tasks, not rounds times
            // nodes.
            let mut open: Vec<(&mut Vec<usize>, usize)> =
                ranks.iter_mut().zip(per_node.iter().copied()).collect();
            let mut rank = 0;
            while rank < total && !open.is_empty() {
                open.retain_mut(|(node, count)| {
                    if node.len() < *count && rank < total {
                        node.push(rank);
                        rank += 1;
                    }
                    node.len() < *count
                });
            }
        }
    }
    ranks
}

/// One task of a previewed step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The task's rank in the step.
    pub rank: usize,
    /// Its node, from 0.
    pub node: usize,
    /// Its id on the node.
    pub local_id: usize,
    /// Its node's task count.
    pub local_count: usize,
    /// The task's GPUs: one, or its share where the node has fewer tasks
    /// than GPUs; the first entries of `visible`.
    pub gpus: Vec<String>,
    /// The list the task sees (its `CUDA_VISIBLE_DEVICES`, or its vendor's).
    pub visible: String,
    /// `closest`: the CPUs the task is bound to in the preview.
    pub cpus: Option<String>,
    /// The tasks sharing its first GPU as the plugin counts them for MPS
    /// (`crate::mps::tasks_per_gpu`).
    pub clients: usize,
    /// `--mps`: its `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` under `mps_share=even`.
    pub share: Option<u32>,
}

impl Row {
    /// The task's GPUs as one list (`0` or `0,1`), as `plan` prints them.
    pub fn gpu(&self) -> String {
        join(&self.gpus)
    }
}

/// The whole step: each node's GPU list, and what each task gets from the
/// plugin, sorted by rank.
pub fn preview(
    ranks: &[Vec<usize>],
    gpus: &[Vec<String>],
    method: Method,
    visible: Visible,
    topology: Option<&Topology>,
) -> Result<Vec<Row>, PlanError> {
    if gpus.len() != ranks.len() {
        return Err(PlanError::ListsPerNode {
            lists: gpus.len(),
            nodes: ranks.len(),
        });
    }
    let mut rows = Vec::new();
    for (node, (node_ranks, node_gpus)) in ranks.iter().zip(gpus).enumerate() {
        rows.extend(node_rows(
            node, node_ranks, node_gpus, method, visible, topology,
        )?);
    }
    rows.sort_by_key(|row| row.rank);
    Ok(rows)
}

fn node_rows(
    node: usize,
    ranks: &[usize],
    gpus: &[String],
    method: Method,
    visible: Visible,
    topology: Option<&Topology>,
) -> Result<Vec<Row>, PlanError> {
    let cuda = join(gpus);
    let map = preview_map(&cuda, gpus.len(), method, visible, topology)?;
    let bound = match (method, topology) {
        (Method::Closest, Some(topology)) => bind_blocks(&topology.cpus, ranks.len()),
        _ => Vec::new(),
    };
    let bind_list = bound
        .iter()
        .map(CpuSet::to_mask)
        .collect::<Vec<_>>()
        .join(",");
    let bind_type = Some("mask_cpu:");
    let bind_list = Some(&bind_list)
        .filter(|l| !l.is_empty())
        .map(String::as_str);
    // Every task of the node reads the same list: read once for them all.
    let shared = NodeCpus::new(bind_type, bind_list, ranks.len());
    let name = format!("node{node}");
    let clients = crate::mps::tasks_per_gpu(map.method_used(), map.gpus.len(), ranks.len());
    let mut rows = Vec::with_capacity(ranks.len());
    for (local_id, &rank) in ranks.iter().enumerate() {
        let task = TaskInputs {
            node: &name,
            local_id,
            local_count: ranks.len(),
            rank: u32::try_from(rank).unwrap_or(u32::MAX),
            cuda: Some(&cuda),
            tres_bind: None,
            cpus: TaskCpus {
                own: bound.get(local_id).cloned(),
                // slurmstepd's mask: the node's CPUs.
                parent: topology.map(|t| t.cpus.clone()),
                bind_type,
                bind_list,
            },
            container: Default::default(),
        };
        let got = assign_in(&map, &task, &shared)?;
        rows.push(Row {
            rank,
            node,
            local_id,
            local_count: ranks.len(),
            visible: join(&got.visible),
            cpus: bound.get(local_id).map(ToString::to_string),
            clients: clients.get(got.position()).copied().unwrap_or(0),
            gpus: got.gpus,
            share: None,
        });
    }
    Ok(rows)
}

/// The plugin's plan for a node whose step has the GPUs `cuda` (`count` of
/// them, Slurm's list), through the same [`plan_step`] as the plugin. Also
/// benches/closest.rs's plan.
pub fn preview_map(
    cuda: &str,
    count: usize,
    method: Method,
    visible: Visible,
    topology: Option<&Topology>,
) -> Result<StepMap, PlanError> {
    let config = Config {
        visible,
        nvml: NvmlSource::Off,
        vendor: VendorSetting::Fixed(Vendor::Nvidia),
        ..Config::default()
    };
    let request = OptionRequest::Use {
        choice: Some(Choice::Map(method)),
        verbose: false,
        mps: false,
    };
    // The step's GPUs as Slurm would list them.
    let vars = Snapshot {
        cuda: Some(cuda.to_string()),
        step_gpus: Some(cuda.to_string()),
        gpus_on_node: Some(count.to_string()),
        ..Snapshot::default()
    };
    let facts = StepFacts {
        step: crate::step::StepIdentity::Slurm(0),
        config: &config,
        request: Some(request),
        method_variable: None,
        vars: &vars,
        mps: None,
    };
    let node = Preview { topology };
    match plan_step(&facts, &node) {
        StepPlan::Map(map) => Ok(map),
        StepPlan::Unmapped(Unmapped { why: Some(why), .. }) => {
            Err(PlanError::NotPreviewed(why.to_string()))
        }
        _ => Err(PlanError::NotPreviewed("it would stand aside".to_string())),
    }
}

/// A node described by the preview's arguments: no files, no NVML, and
/// the given topology.
struct Preview<'a> {
    topology: Option<&'a Topology>,
}

impl Node for Preview<'_> {
    fn files(&self) -> &dyn Files {
        &NoFiles
    }

    fn nvml(&self, _: NvmlAsk, _: &Config) -> Result<Vec<String>, Error> {
        Err(Error::NvmlOff)
    }

    fn given_places(&self) -> Option<Result<Topology, NoTopology>> {
        Some(self.topology.cloned().ok_or(NoTopology))
    }
}

/// Binds `count` tasks to equal consecutive blocks of `cpus`, as
/// task/affinity does with `--cpu-bind=cores -c` (all CPUs / tasks); with
/// more tasks than CPUs, one CPU each, wrapping round.
pub(crate) fn bind_blocks(cpus: &CpuSet, count: usize) -> Vec<CpuSet> {
    let all: Vec<usize> = cpus.cpus().collect();
    if all.is_empty() || count == 0 {
        return Vec::new();
    }
    let each = (all.len() / count).max(1);
    (0..count)
        .map(|l| {
            let first = (l * each) % all.len();
            let block = all
                .get(first..(first + each).min(all.len()))
                .unwrap_or_default();
            CpuSet::of(block).unwrap_or_default()
        })
        .collect()
}

/// How many tasks of a previewed step share one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Load {
    /// The node, from 0.
    pub node: usize,
    /// The GPU, as the node's list names it.
    pub gpu: String,
    /// The tasks that hold it.
    pub tasks: usize,
}

/// Tasks per GPU on each node, in GPU-list order (a task counts on each
/// GPU it holds): one pass over the rows.
pub fn loads(rows: &[Row], gpus: &[Vec<String>]) -> Vec<Load> {
    let mut counts: Vec<HashMap<&str, usize>> = gpus
        .iter()
        .map(|list| list.iter().map(|g| (g.as_str(), 0)).collect())
        .collect();
    for row in rows {
        for gpu in &row.gpus {
            if let Some(c) = counts
                .get_mut(row.node)
                .and_then(|node| node.get_mut(gpu.as_str()))
            {
                *c += 1;
            }
        }
    }
    let mut out = Vec::new();
    for (node, (node_gpus, node_counts)) in gpus.iter().zip(&counts).enumerate() {
        for gpu in node_gpus {
            out.push(Load {
                node,
                gpu: gpu.clone(),
                tasks: node_counts.get(gpu.as_str()).copied().unwrap_or(0),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus(n: usize) -> Vec<String> {
        (0..n).map(|i| i.to_string()).collect()
    }

    #[test]
    fn even_split_like_srun() {
        assert_eq!(even_split(5, 2).unwrap(), [3, 2]);
        assert_eq!(even_split(8, 2).unwrap(), [4, 4]);
        assert_eq!(even_split(7, 3).unwrap(), [3, 2, 2]);
        assert!(even_split(1, 2).is_err());
        assert!(even_split(1, 0).is_err());
    }

    #[test]
    fn block_and_cyclic_placement() {
        assert_eq!(
            place(&[3, 2], Distribution::Block),
            [vec![0, 1, 2], vec![3, 4]]
        );
        assert_eq!(
            place(&[3, 2], Distribution::Cyclic),
            [vec![0, 2, 4], vec![1, 3]]
        );
        assert_eq!(
            place(&[1, 3], Distribution::Cyclic),
            [vec![0], vec![1, 2, 3]]
        );
    }

    #[test]
    fn preview_of_two_uneven_nodes() {
        let ranks = place(&[3, 2], Distribution::Cyclic);
        let g = [gpus(4), gpus(2)];
        let rows = preview(&ranks, &g, Method::Contiguous, Visible::Single, None).unwrap();
        let table: Vec<(usize, usize, usize, String)> = rows
            .iter()
            .map(|r| (r.rank, r.node, r.local_id, r.gpu()))
            .collect();
        let row = |rank, node, local, gpu: &str| (rank, node, local, gpu.to_string());
        // Node 0 has 3 tasks on 4 GPUs: the first holds two, none is idle.
        assert_eq!(
            table,
            [
                row(0, 0, 0, "0,1"),
                row(1, 1, 0, "0"),
                row(2, 0, 1, "2"),
                row(3, 1, 1, "1"),
                row(4, 0, 2, "3")
            ]
        );
        let l = loads(&rows, &g);
        let load = |node, gpu: &str, tasks| Load {
            node,
            gpu: gpu.to_string(),
            tasks,
        };
        assert!(l.iter().all(|l| l.tasks == 1), "no idle GPU: {l:?}");
        assert_eq!(l[3], load(0, "3", 1));
        assert_eq!(l[4], load(1, "0", 1));
    }

    #[test]
    fn preview_rotate_shows_the_whole_list() {
        let rows = preview(
            &[vec![0, 1]],
            &[gpus(2)],
            Method::RoundRobin,
            Visible::Rotate,
            None,
        )
        .unwrap();
        assert_eq!(rows[1].visible, "1,0");
        assert_eq!(rows[1].gpu(), "1");
    }

    #[test]
    fn closest_preview_uses_the_topology() {
        use crate::topology::Preset;
        let t = Preset::Perlmutter.topology();
        let rows = preview(
            &[(0..8).collect()],
            &[t.tokens()],
            Method::Closest,
            Visible::Single,
            Some(&t),
        )
        .unwrap();
        let got: Vec<(String, &str)> = rows
            .iter()
            .map(|r| (r.gpu(), r.cpus.as_deref().unwrap()))
            .collect();
        let got: Vec<(&str, &str)> = got.iter().map(|(g, c)| (g.as_str(), *c)).collect();
        assert_eq!(
            got,
            [
                ("3", "0-7"),
                ("3", "8-15"),
                ("2", "16-23"),
                ("2", "24-31"),
                ("1", "32-39"),
                ("1", "40-47"),
                ("0", "48-55"),
                ("0", "56-63")
            ]
        );
        // Without a topology: contiguous, no CPUs shown; 2 tasks on 4
        // GPUs hold two each.
        let rows = preview(
            &[vec![0, 1]],
            &[gpus(4)],
            Method::Closest,
            Visible::Single,
            None,
        )
        .unwrap();
        assert_eq!(
            (rows[1].gpu(), rows[1].cpus.as_deref()),
            ("2,3".to_string(), None)
        );
    }

    /// The cyclic placement and the load count as first written: rounds
    /// over every node, and every row once per GPU.
    fn place_cyclic_before(per_node: &[usize]) -> Vec<Vec<usize>> {
        let total: usize = per_node.iter().sum();
        let mut ranks: Vec<Vec<usize>> = per_node.iter().map(|_| Vec::new()).collect();
        let mut rank = 0;
        while rank < total {
            for (node, &count) in ranks.iter_mut().zip(per_node) {
                if node.len() < count && rank < total {
                    node.push(rank);
                    rank += 1;
                }
            }
        }
        ranks
    }

    fn loads_before(rows: &[Row], gpus: &[Vec<String>]) -> Vec<Load> {
        let mut out = Vec::new();
        for (node, node_gpus) in gpus.iter().enumerate() {
            for gpu in node_gpus {
                let tasks = rows
                    .iter()
                    .filter(|r| r.node == node && r.gpus.contains(gpu))
                    .count();
                out.push(Load {
                    node,
                    gpu: gpu.clone(),
                    tasks,
                });
            }
        }
        out
    }

    proptest::proptest! {
        #[test]
        fn cyclic_placement_and_loads_as_before(
            per_node in proptest::collection::vec(1usize..12, 1..9),
            gpus_per_node in proptest::collection::vec(1usize..6, 1..9),
            method in 0usize..3,
        ) {
            let nodes = per_node.len();
            let g: Vec<Vec<String>> = (0..nodes)
                .map(|i| gpus(gpus_per_node[i % gpus_per_node.len()]))
                .collect();
            let ranks = place(&per_node, Distribution::Cyclic);
            proptest::prop_assert_eq!(&ranks, &place_cyclic_before(&per_node));
            let method = [Method::Contiguous, Method::RoundRobin, Method::Closest][method];
            let rows = preview(&ranks, &g, method, Visible::Single, None).unwrap();
            proptest::prop_assert_eq!(loads(&rows, &g), loads_before(&rows, &g));
        }
    }

    #[test]
    fn closest_preview_reads_each_tasks_cpus_once() {
        // Each task of the plugin decides alone and reads every task's
        // CPUs; the preview of a node must not do that once per task, which
        // made it quadratic (2.4 s at 4000 tasks, 45 s at 16000).
        use crate::method::closest::CANDIDATE_CALLS;
        use crate::slurm::cpu_bind::ENTRIES_READ;
        use crate::topology::Preset;
        let t = Preset::Perlmutter.topology();
        for n in [100, 400] {
            CANDIDATE_CALLS.with(|c| c.set(0));
            ENTRIES_READ.with(|c| c.set(0));
            let rows = preview(
                &[(0..n).collect()],
                &[t.tokens()],
                Method::Closest,
                Visible::Single,
                Some(&t),
            )
            .unwrap();
            assert_eq!(rows.len(), n);
            let (matched, read) = (
                CANDIDATE_CALLS.with(|c| c.get()),
                ENTRIES_READ.with(|c| c.get()),
            );
            // Once per task, and once more for local task 0's "alike" check.
            assert!(
                matched <= 2 * n,
                "{n} tasks: candidates computed {matched} times"
            );
            assert!(read <= n, "{n} tasks: {read} bind list entries read");
        }
    }

    #[test]
    fn blocks_like_task_affinity() {
        let cpus = CpuSet::parse("0-7").unwrap();
        let shown = |n| -> Vec<String> {
            bind_blocks(&cpus, n)
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        assert_eq!(shown(2), ["0-3", "4-7"]);
        assert_eq!(shown(3), ["0-1", "2-3", "4-5"]);
        assert_eq!(
            shown(10),
            ["0", "1", "2", "3", "4", "5", "6", "7", "0", "1"]
        );
        assert!(bind_blocks(&CpuSet::new(), 2).is_empty());
    }
}
