//! The desi-gpu-map Flux shell plugin: the third front end, beside the
//! SPANK plugin and the command. In each job shell (one per job and
//! node) it gathers what the shell knows (this node's tasks, the GPUs R
//! gives the job, read through the broker's own grant), asks the core
//! for the plan (`plan_step`, the same decision srun's tasks get), and
//! carries each task's outcome out on its command before it starts. It
//! decides nothing itself.
//!
//! Loaded by flux-shell from its plugin directory or a user's initrc
//! (`plugin.load { file = ".../desi_gpu_map_flux.so" }`); asked with
//! `flux run -o desi-gpu-map=METHOD[,mps][,verbose]`.

// flux-shell hosts the plugin: outside tests nothing may panic, and every
// unsafe block says why it is sound.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![cfg_attr(not(test), deny(clippy::panic, clippy::indexing_slicing))]
#![deny(clippy::undocumented_unsafe_blocks)]

mod broker;
mod conf;
mod exports;
mod ffi;
mod mps;
mod node;
mod plugin;
