//! `desi-gpu-map`: bind a task where the plugin is not installed (`exec`),
//! preview a layout (`plan`), or report what a task got (`show`). The
//! decisions are the core's (`desi-gpu-map-core`), the machine is the host
//! crate's (`desi-gpu-map-host`). It has two roots, this one and
//! `main_static.rs` (the same modules, linked statically: `make install`
//! installs that build as `desi-gpu-map` and `desi-gpu-map-prolog`, and
//! this one in `libexec`, where the static one asks it for NVML);
//! `entry.rs` parses the command line and runs the subcommand: the one
//! place errors are said and exit codes chosen. Both start without Rust's runtime (`no_main`).
//! The crate denies `unsafe` but at its start (`edge.rs`, and the C
//! `main` in `entry.rs`).
//!
//! Its modules, bottom first (each imports only those listed before it):
//!
//! - [`edge`]: the start: the caller's SIGPIPE disposition and signal
//!   mask, recorded before the command changes them (a function in
//!   `.init_array`, which must not sit in a library slurmstepd loads) and
//!   put back in the application `exec` runs; and what of Rust's runtime
//!   start the command needs, done by itself.
//! - [`handover`]: the static build's NVML: where an answer needs NVML it
//!   hands the whole run to the dynamic build.
//! - [`json`]: the reports' JSON form.
//! - [`keeper`]: exec's MPS keeper, the process that outlives a step's
//!   tasks to end the daemon exec started (`desi-gpu-map mps-keeper`).
//! - [`args`]: the command line, shared with the man page.
//! - [`plan`]: `plan`, the preview's table and JSON.
//! - [`show`]: `show`, what this task got.
//! - [`in_task`]: what a front end that runs as the task gathers (the
//!   core's `TaskFacts` from exec's options or their variables, the process
//!   as a `Node` and as the protocol's `FrontEnd`, which joins the keeper
//!   and reads the task's CPUs), and applying the outcome: exec's and the
//!   task prolog's, shared.
//! - [`exec`]: `exec`, the plugin's mapping run by the task itself.
//! - [`prolog`]: the task prolog and epilog: the prolog prints the task's
//!   variables as `export`/`unset` lines for slurmstepd and always exits 0;
//!   the epilog tells the step's MPS keeper its task ended.
//! - [`entry`]: the command line parsed, the subcommand run, errors said
//!   and exit codes chosen, for either root.
//! - `manpage.rs`: (tests only) desi-gpu-map(1) rendered from `args.rs`
//!   and compared with the committed page.

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

#[cfg(test)]
mod tests {
    /// The static build's root declares the same modules (src/main_static.rs).
    #[test]
    fn both_roots_declare_the_same_modules() {
        let mods = |root: &str| -> Vec<String> {
            root.lines()
                .filter(|line| line.starts_with("mod ") && line.ends_with(';'))
                .map(str::to_string)
                .collect()
        };
        assert_eq!(
            mods(include_str!("main.rs")),
            mods(include_str!("main_static.rs"))
        );
    }
}
