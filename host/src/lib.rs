//! The real machine, for the front ends (the SPANK plugin, the command,
//! the Flux plugin): the core (`desi-gpu-map-core`) decides, this crate
//! carries out what it decided. Its system calls go through rustix's safe
//! wrappers, but for those in its machine edge, [`sys`]. What fails is a
//! [`failure::Failure`], which each front end reports once, at its edge
//! (the plugin's log, exec's stderr, or the keeper's `no WHY` answer).
//!
//! Its modules, bottom first (each imports only those listed before it):
//!
//! - [`failure`]: the crate's one error: what could not be done, with each
//!   caller's context, the OS's error kept as its source.
//! - [`sys`]: the machine's edge: every `unsafe` call of the workspace but
//!   the plugins' exports and the command's startup record, each operation
//!   once.
//! - [`files`]: `HostFiles`, the node's real files, as the core's `Files`.
//! - [`process`]: `/proc` read in one place: identity, parents, ancestors'
//!   environments, signals to the one meant.
//! - [`stepd`]: the slurmstepd above a task, and other processes above
//!   this one by name.
//! - `child.rs`: waiting for a child until a deadline; draining its pipes.
//! - [`run`]: a short program with a deadline, as a front end's
//!   [`run::Runner`] says (as this process, or as the job's user).
//! - `deadline.rs`: work in a child process with a deadline (the answer on
//!   the wire, `core/src/wire.rs`, through a pipe; SIGKILL and reaping at
//!   the deadline), for the plugins, `exec` and `show`; why `fork` is safe
//!   in slurmstepd and in the command.
//! - [`nvml`]: NVML, loaded only when called, and asked within a deadline.
//! - [`mps`]: a step's CUDA MPS daemon from start to stop.
//!
//! `host/tests/kernel_files.rs` tests the core's readers of the kernel's
//! files (vendor detection, the GPUs located through sysfs, NVIDIA's
//! driver files, the render nodes) on real trees in a temporary folder,
//! through `HostFiles`: the core cannot depend on this crate, so its own
//! tests read files held in memory.

// All unsafe is in one module, the machine's edge (sys/), and says why.
#![deny(unsafe_code)]
// Only what another crate names is public, and each of it is documented;
// what another crate can reach, it can name.
#![warn(missing_docs, unnameable_types)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![cfg_attr(not(test), deny(clippy::panic, clippy::indexing_slicing))]

pub(crate) mod child;
pub(crate) mod deadline;
pub mod failure;
pub mod files;
pub mod mps;
pub mod nvml;
pub mod process;
pub mod run;
pub mod stepd;
pub mod sys;
