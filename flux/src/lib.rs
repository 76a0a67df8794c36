//! The desi-gpu-map Flux shell plugin: the third front end, beside the
//! SPANK plugin and the command, a cdylib loaded into every flux-shell
//! (one per job and node) with flux-shell's symbols left undefined. In
//! each job shell it gathers what the shell knows into the core's
//! `JobFacts` (the site's and the user's words, this node's tasks, the
//! GPUs R gives the job, the grant of the broker it runs under, the job's
//! environment), lets the core's `plan_job` make every choice, and carries
//! each task's outcome out on its command before it starts. It decides
//! nothing itself.
//!
//! Loaded by flux-shell from its plugin directory or a user's initrc
//! (`plugin.load { file = ".../desi_gpu_map_flux.so" }`); asked with
//! `flux run -o desi-gpu-map=METHOD[,mps][,verbose]`.
//!
//! Its modules, bottom first (each imports only those listed before it):
//!
//! - `error.rs`: why a call of the plugin fails (`PluginError`),
//!   each reason's line worded once.
//! - `conf.rs`: the site's `conf` table (JSON, read with serde_json) into
//!   the plugstack arguments' words, and `-o desi-gpu-map` into the
//!   option's.
//! - `ffi.rs`: the edge: the flux-shell functions the plugin calls,
//!   declared by hand (checked against flux-core's headers by
//!   `tests/flux/prototypes.rs`), and safe wrappers (the shell and what it
//!   keeps for the plugin, its broker's attributes and KVS, a task's
//!   command, the shell's log).
//! - `broker.rs`: the grant of the node's own broker (rank 0's environment
//!   is every shell's, so another node's broker is read from its process)
//!   and where the instance's R came from (`resource.eventlog`).
//! - `mps.rs`: the job's MPS daemon on this node, run as the shell (the
//!   job's user), until the node's last task exits.
//! - `node.rs`: the job shell as the core's `Node` (the job's environment,
//!   less Slurm's variables and other lists) and the protocol's
//!   `FrontEnd`; the job's facts from the shell's info (typed, serde_json).
//! - `plugin.rs`: `shell.init` (gathers `JobFacts`, applies `plan_job`'s
//!   answer), `task.init`, `task.exit`, `shell.exit`; the job is kept by
//!   the shell.
//! - `exports.rs`: `flux_plugin_init` (the first load in a shell registers;
//!   a later one stands aside, marked in the shell) and the one handler,
//!   each call fenced with `catch_unwind`.

// flux-shell hosts the plugin: outside tests nothing may panic, and every
// unsafe block says why it is sound.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![cfg_attr(not(test), deny(clippy::panic, clippy::indexing_slicing))]
#![deny(clippy::undocumented_unsafe_blocks)]

mod broker;
mod conf;
mod error;
mod exports;
mod ffi;
mod mps;
mod node;
mod plugin;
