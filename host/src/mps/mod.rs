//! CUDA MPS on the machine:
//!
//! - [`daemon`]: a step's control daemon from start to stop, for every
//!   front end that starts one (the SPANK plugin, exec's keeper, the Flux
//!   plugin); a keeper's directory's lock. The keeper itself is the
//!   command's (`src/keeper/`).

pub mod daemon;
