//! `desi-gpu-map`: preview a layout (`plan`), or report what a task got (`show`).

#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![cfg_attr(not(test), deny(clippy::panic, clippy::indexing_slicing))]

mod cli;
mod json;
mod plan_cmd;
mod show_cmd;

use clap::Parser;
use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let result = match cli.command {
        cli::Command::Plan(args) => plan_cmd::run(&args),
        cli::Command::Show(args) => show_cmd::run(&args),
    };
    match result {
        // A closed pipe (`| head`) is not an error worth a panic.
        Ok(text) => match std::io::stdout().lock().write_all(text.as_bytes()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(_) => ExitCode::from(1),
        },
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "desi-gpu-map: {e}");
            ExitCode::from(2)
        }
    }
}
