//! The command line, shared with the man page generator.

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Bind each task of a Slurm job step to a GPU before it starts: preview a
/// layout, or show what a running task got.
#[derive(Parser, Debug)]
#[command(name = "desi-gpu-map", version, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Preview which GPU each task of a step gets, on any machine.
    Plan(PlanArgs),
    /// Inside a task: report the GPU binding this task got.
    Show(ShowArgs),
}

#[derive(Args, Debug)]
#[command(after_help = "\
Examples:
  desi-gpu-map plan -N 2 -n 8 --method contiguous
  desi-gpu-map plan -N 2 -n 5 -m cyclic --gpus 4,2 --method roundrobin
  desi-gpu-map plan -N 1 -n 3 --devices 2,3 --visible rotate --json")]
pub struct PlanArgs {
    /// Number of nodes (srun -N).
    #[arg(short = 'N', long, default_value_t = 1)]
    pub nodes: usize,
    /// Total number of tasks (srun -n), split evenly over the nodes, the
    /// first nodes taking one more (srun's split on whole nodes).
    #[arg(short = 'n', long, conflicts_with = "ntasks_per_node")]
    pub ntasks: Option<usize>,
    /// Tasks on each node: one number for every node, or one per node (5,3).
    #[arg(long, value_delimiter = ',')]
    pub ntasks_per_node: Vec<usize>,
    /// Task distribution over nodes (srun -m).
    #[arg(short = 'm', long, value_enum, default_value_t = DistArg::Block)]
    pub distribution: DistArg,
    /// GPUs on each node: one count for every node, or one per node (4,4,2);
    /// 4 per node when neither --gpus nor --devices is given.
    #[arg(long, value_delimiter = ',', conflicts_with = "devices")]
    pub gpus: Vec<usize>,
    /// A node's GPU list as Slurm sets CUDA_VISIBLE_DEVICES (2,3): give it
    /// once for every node, or once per node.
    #[arg(long)]
    pub devices: Vec<String>,
    /// Mapping method: contiguous, roundrobin (or round-robin).
    #[arg(long, default_value = "contiguous")]
    pub method: String,
    /// What stays visible to each task.
    #[arg(long, value_enum, default_value_t = VisibleArg::Single)]
    pub visible: VisibleArg,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct ShowArgs {
    /// Name of the skip flag the site configured (plugstack flag=).
    #[arg(long, default_value = "DESI_GPU_MAPPED")]
    pub flag: String,
    /// NVML to ask for device details: auto, off, or a library path.
    #[arg(long, default_value = "auto")]
    pub nvml: String,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DistArg {
    Block,
    Cyclic,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum VisibleArg {
    Single,
    Rotate,
}
