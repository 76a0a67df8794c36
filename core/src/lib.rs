//! desi-gpu-map's core: every decision the SPANK plugin and the
//! `desi-gpu-map` command make, as plain functions over plain data. Each
//! module imports only the modules listed before it (`tests/layers.rs`
//! checks this), and none does I/O: what the core needs
//! from a node it asks through [`step::Node`] and [`files::Files`].
//!
//! - [`text`]: quoting and listing for messages;
//! - [`env`](mod@env): the names of the variables read and written;
//! - [`error`]: the core's errors, each carrying what its message needs;
//! - [`wire`]: an NVML child's answer as it crosses to its parent;
//! - [`files`]: how the core reads the node's kernel files;
//! - [`names`]: values users spell by name, each named once;
//! - [`cpuset`]: CPU sets, as the kernel and Slurm write them;
//! - [`slurm`]: what Slurm writes (GPU lists, binding requests, CPU binds);
//! - [`launch`]: other launchers (mpirun, mpiexec, PALS): which placed a rank, and where;
//! - [`method`]: the mapping methods, one rule per file;
//! - [`runtime`]: whose GPU runtime reads the lists on a node, one file per vendor;
//! - [`topology`]: where a node's GPUs sit, for `closest`;
//! - [`settings`]: what people type (plugstack arguments, the option);
//! - [`mps`]: CUDA MPS for a mapped step: serve or not, and what each task gets;
//! - [`step`]: the plan for a step on one node, in one pass, and each task's share;
//! - [`job`]: a Flux job on one node, planned once from its shell's facts;
//! - [`start`]: a task about to start, for a front end that runs as the task
//!   (exec and the task prolog): refuse, run unchanged, or map;
//! - [`preview`]: a layout's tasks on made-up nodes, for `desi-gpu-map plan`;
//! - [`flux`]: a Flux job on one node, for the Flux shell plugin: its GPUs
//!   through the broker's grant, and who binds beside Flux's `gpu-affinity`.
//!
//! The crate depends on nothing that can touch the machine: the front ends
//! and `desi-gpu-map-host` gather the facts and carry out the answers.

#![forbid(unsafe_code)]
// Only what another crate names is public, and each of it is documented;
// what another crate can reach, it can name.
#![warn(missing_docs, unnameable_types)]
// Outside tests the core never panics: errors are values (see Error).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![cfg_attr(not(test), deny(clippy::panic, clippy::indexing_slicing))]

pub mod cpuset;
pub mod env;
pub mod error;
pub mod files;
pub mod flux;
pub mod job;
pub mod launch;
pub mod method;
pub mod mps;
pub mod names;
pub mod preview;
pub mod runtime;
pub mod settings;
pub mod slurm;
pub mod start;
pub mod step;
pub mod text;
pub mod topology;
pub mod wire;

pub use error::Error;
