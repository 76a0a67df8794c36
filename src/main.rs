//! `desi-gpu-map`: preview a layout (`plan`), or report what a task got (`show`).

mod cli;
mod json;
mod plan_cmd;
mod show_cmd;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let result = match cli.command {
        cli::Command::Plan(args) => plan_cmd::run(&args),
        cli::Command::Show(args) => show_cmd::run(&args),
    };
    match result {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("desi-gpu-map: {e}");
            ExitCode::from(2)
        }
    }
}
