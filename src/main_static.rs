//! The command linked statically (glibc's crt-static, `make build`: no
//! dynamic loader, no shared library to map), built as
//! `desi-gpu-map-prolog` and installed as both `desi-gpu-map` and
//! `desi-gpu-map-prolog`: every task of a step starts it, as `exec` or as
//! the task prolog. Where an answer needs NVML it runs the dynamic build in
//! its place ([`handover`]). It declares the same modules as src/main.rs
//! (a test there checks), and starts without Rust's runtime as it does.

#![cfg_attr(not(test), no_main)]
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
