//! `desi-gpu-map-prolog`: the task prolog and epilog that slurmstepd runs
//! in every task before it starts, linked statically (glibc's crt-static,
//! `make build`: no dynamic loader, no shared library to map), and started
//! without Rust's runtime as src/main.rs is. Run any
//! other way (with an argument, or outside a task's script), it becomes
//! the dynamic `desi-gpu-map` beside it, as it does where an answer needs
//! NVML ([`handover`]). It declares the same modules as src/main.rs (a test
//! there checks); what only the other commands use is left out by the
//! linker.

#![cfg_attr(not(test), no_main)]
#![deny(unsafe_code)]
// Outside tests the command never panics: errors are values.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![cfg_attr(not(test), deny(clippy::panic, clippy::indexing_slicing))]
// Only the task's scripts and the handover are reached from this root.
#![allow(dead_code)]

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

/// The C library's `main` ([`entry::c_main`]).
// SAFETY: `no_mangle` makes this the one C `main` of the program, which
// the C library's start calls once with argc and argv; neither is read
// (std reads them itself, from glibc's `.init_array` call).
#[allow(unsafe_code)]
#[cfg_attr(not(test), no_mangle)]
extern "C" fn main(
    _argc: std::ffi::c_int,
    _argv: *const *const std::ffi::c_char,
) -> std::ffi::c_int {
    std::ffi::c_int::from(entry::c_main(entry::static_main))
}
