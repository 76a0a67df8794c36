//! What people type, one file each:
//!
//! - [`site`]: the site's plugstack arguments, read into a [`config::Config`];
//!   `check_request`; the user's `DESI_GPU_MAP_METHOD` where only the
//!   site's default would ask (`request_from_variable`).
//! - [`config`]: the settings a step is planned with (`Config`, MPS's four
//!   in one group), whoever gives them (the site's arguments, or exec's
//!   options), and their defaults.
//! - [`option`]: the user's `--desi-gpu-map` value, parsed once into an
//!   `OptionRequest`, and its usage text.
//! - [`client_args`]: whether srun, sbatch or salloc got the option itself,
//!   or the program after it did.

pub mod client_args;
pub mod config;
pub mod option;
pub mod site;
