//! `desi-gpu-map`: bind a task where the plugin is not installed (`exec`),
//! preview a layout (`plan`), or report what a task got (`show`); the
//! command lives in the library's `cli` module.

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    desi_gpu_map::cli::main()
}
