//! `desi-gpu-map`: bind a task where the plugin is not installed (`exec`),
//! preview a layout (`plan`), or report what a task got (`show`). The
//! decisions are the core's (`desi-gpu-map-core`), the machine is the host
//! crate's (`desi-gpu-map-host`); this crate holds the command line
//! ([`args`]), each subcommand's front end, exec's MPS keeper ([`keeper`]),
//! its startup record ([`edge`]), and how its static build, the task
//! prolog's, has NVML asked ([`handover`]).

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
