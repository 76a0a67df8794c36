//! What people type: the site's plugstack arguments ([`site`]), the user's
//! `--desi-gpu-map` value ([`option`]), and where on the client's command
//! line it was typed ([`client_args`]).

pub mod client_args;
pub mod option;
pub mod site;
