//! CUDA MPS on the machine: a step's control daemon from start to stop
//! ([`daemon`], the plugin's and exec's), and exec's keeper ([`keeper`]),
//! the process that outlives a step's tasks to end the daemon exec started.

pub mod daemon;
pub mod keeper;
