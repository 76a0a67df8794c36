//! The real machine, for the front ends (the plugin and the command): its
//! files ([`files::HostFiles`]) and its NVML ([`nvml`]). Nothing in the
//! core imports this module.

pub mod cpus;
pub mod files;
pub mod nvml;
