//! `desi-gpu-map-prolog`: the task prolog and epilog that slurmstepd runs
//! in every task before it starts, linked statically (glibc's crt-static,
//! `make build`: no dynamic loader, no shared library to map) and started
//! without Rust's runtime (`no_main`: no stack guard read from
//! `/proc/self/maps`, no signal stack), which it does not need. Run any
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

/// The C library's `main`, in place of Rust's runtime start. std still
/// reads the arguments and environment itself (glibc hands them to its
/// `.init_array` function), and standard output is flushed as it returns.
#[cfg(not(test))]
// SAFETY: `no_mangle` makes this the one C `main` of the program, which
// the C library's start calls once with argc and argv; neither is read.
#[allow(unsafe_code)]
#[no_mangle]
extern "C" fn main(
    _argc: std::ffi::c_int,
    _argv: *const *const std::ffi::c_char,
) -> std::ffi::c_int {
    std::ffi::c_int::from(entry::static_main())
}
