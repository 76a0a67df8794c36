//! desi-gpu-map's core: every decision its front ends make (the SPANK
//! plugin, the `desi-gpu-map` command, the Flux shell plugin), as plain
//! functions over plain data. It depends on nothing, so it can reach no
//! NVML, system call or C library: what it needs from a node it asks
//! through [`step::Node`] and [`files::Files`], and the front ends and
//! `desi-gpu-map-host` carry out its answers. Its lints forbid `unsafe`
//! and, outside tests, every panic (`unwrap`, `expect`, `panic!`,
//! panicking indexing).
//!
//! Its modules, bottom first: each imports only those listed before it
//! (`tests/layers.rs` checks that, and that each folder's module names
//! every file in it).
//!
//! - [`text`]: quoting and listing for messages; imports nothing.
//! - [`env`](mod@env): every variable name read or written, and which a
//!   site's `flag=` may not take.
//! - [`snapshot`]: the variables a decision may read, each a field with
//!   its key ([`snapshot::Var`]), taken once by the front end.
//! - [`error`]: the core's errors, each carrying what its message needs.
//! - [`wire`]: an NVML child's answer across the process boundary
//!   (`ok N` / `err KIND`).
//! - [`files`]: how the core reads `/proc`, `/sys` and `/dev`.
//! - [`names`]: values users spell by name (`named!`), each named once.
//! - [`grant`]: a grant of GPUs a front end hands over as the list itself
//!   (a Flux job's R), as data: the words the rules say it with.
//! - [`cpuset`]: CPU sets, as the kernel and Slurm write them.
//! - [`slurm`]: what Slurm writes: GPU lists, its own binding requests,
//!   the CPUs it bound each task to, a task's node-local ids.
//! - [`launch`]: launchers other than srun (`mpirun`, `mpiexec`, PALS):
//!   each one's variables, which one placed a rank, and where.
//! - [`method`]: the mapping methods, declared once, one rule per file.
//! - [`runtime`]: whose GPU runtime reads the lists on a node, one file
//!   per vendor.
//! - [`topology`]: where a node's GPUs sit, for `closest`.
//! - [`settings`]: what people type: the site's arguments, the user's
//!   option.
//! - [`flux`]: a Flux job's GPUs through its broker's grant (one beyond
//!   it refused), who binds beside Flux's own `gpu-affinity`, the job's
//!   record (`tag`) and the job a task's `FLUX_JOB_ID` names (for exec in
//!   a task the plugin mapped), and the option's and the `conf` table's
//!   errors in Flux's words.
//! - [`mps`]: CUDA MPS for a mapped step, decided from its own small input.
//! - [`step`]: the plan for a step on one node, in one pass, and what each
//!   task gets.
//! - [`job`]: a Flux job on one node, planned once from its shell's facts
//!   ([`job::plan_job`]: the Flux plugin's every choice).
//! - [`start`]: a task about to start, for a front end that runs as the
//!   task (exec, the task prolog): refuse, run unchanged, or map.
//! - [`preview`]: where srun would place a layout's tasks, and what each
//!   would get, for `desi-gpu-map plan`.

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
pub mod grant;
pub mod job;
pub mod launch;
pub mod method;
pub mod mps;
pub mod names;
pub mod preview;
pub mod runtime;
pub mod settings;
pub mod slurm;
pub mod snapshot;
pub mod start;
pub mod step;
pub mod text;
pub mod topology;
pub mod wire;

pub use error::Error;
