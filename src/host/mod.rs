//! The real machine, for the front ends (the plugin and the command): its
//! files ([`files::HostFiles`]), its NVML ([`nvml`]) and waiting for
//! child processes ([`child`]). Nothing in the
//! core imports this module.

pub mod child;
pub mod cpus;
pub mod files;
pub mod nvml;
