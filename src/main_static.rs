//! `desi-gpu-map-prolog`: the command of src/main.rs linked statically
//! (glibc's crt-static, `make build`), for the task prolog that slurmstepd
//! runs in every task before it starts: no dynamic loader, no shared
//! library to map. It has the dynamic `desi-gpu-map` beside it ask NVML
//! ([`handover`]). The same modules as src/main.rs (a test there checks).

#![deny(unsafe_code)]
// Outside tests the command never panics: errors are values.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![cfg_attr(not(test), deny(clippy::panic, clippy::indexing_slicing))]

mod args;
mod edge;
mod entry;
mod exec;
mod handover;
mod in_task;
mod json;
mod keeper;
mod plan;
mod prolog;
mod show;

#[cfg(test)]
mod manpage;

fn main() -> std::process::ExitCode {
    entry::main()
}
