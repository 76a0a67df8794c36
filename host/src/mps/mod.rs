//! CUDA MPS on the machine: a step's control daemon from start to stop
//! ([`daemon`], the plugin's and exec's keeper's; the keeper itself is the
//! command's, `src/keeper/`).

pub mod daemon;
