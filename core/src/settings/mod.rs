//! What people type: the site's plugstack arguments ([`site`]), read into
//! the settings a step is planned with ([`config`]), the user's
//! `--desi-gpu-map` value ([`option`]), and where on the client's command
//! line it was typed ([`client_args`]).

pub mod client_args;
pub mod config;
pub mod option;
pub mod site;
