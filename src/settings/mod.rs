//! What people type: the site's plugstack arguments ([`site`]) and the
//! user's `--desi-gpu-map` value ([`option`]).

pub mod client_args;
pub mod option;
pub mod site;
