//! The Flux shell plugin (`flux/`) in a real Flux, built from its source
//! snapshot by `tests/flux/build.sh` into `target/flux/install` (against
//! flux-security, built there too): each test starts its own
//! `flux start --test-size=2` (two brokers on this host, four fake GPUs
//! each, from an R file) and ends it; `system` runs it as a multi-user
//! system instance, with the setuid IMP and users of its own (as root). Run with
//! `cargo test --features flux-tests --test flux` (`make flux-test`); they
//! fail, never skip, where Flux or the plugin is missing or cannot start.

mod common;
mod prototypes;
mod standalone;
mod system;
