//! The real machine, for the front ends (the plugin and the command): its
//! files ([`files::HostFiles`]), its NVML ([`nvml`]), its processes
//! ([`process`]: `/proc` and signals), waiting for children ([`child`]),
//! running short programs with a deadline as a front end's [`run::Runner`]
//! says ([`run`]), and a step's MPS daemon from start to stop ([`daemon`]).
//! Nothing in the core imports this module.

pub mod child;
pub mod cpus;
pub mod daemon;
pub mod files;
pub mod nvml;
pub mod process;
pub mod run;
