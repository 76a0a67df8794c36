//! The real machine, for the front ends (the plugin and the command): its
//! files ([`files::HostFiles`]), its NVML ([`nvml`]), its processes
//! ([`process`]: `/proc` and signals), work in a child process with a
//! deadline (`deadline`: how NVML is asked), waiting for children (`child`),
//! running short programs with a deadline as a front end's [`run::Runner`]
//! says ([`run`]), and CUDA MPS on the machine ([`mps`]: a step's daemon
//! from start to stop). The core (`desi-gpu-map-core`)
//! decides; this crate carries out what it decided.

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
