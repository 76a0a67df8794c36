//! desi-gpu-map(1) is generated from the command line in src/args.rs and
//! committed as packaging/man/desi-gpu-map.1. This test fails when the two
//! drift apart; `make man` (UPDATE_MAN=1) rewrites the committed page.
//! Test code only (here and at its `mod` line in main.rs): no binary
//! holds it, and the plugin never links any of it. What can fail is an
//! error value that the test returns.

#![cfg(test)]

use crate::args as cli;

use clap::CommandFactory;
use clap_mangen::Man;
use roff::{bold, roman, Roff};
use std::error::Error;
use std::path::Path;

const PAGE: &str = "packaging/man/desi-gpu-map.1";

/// roff's preamble, which every clap_mangen render starts with.
const PREAMBLE: &str = ".ie \\n(.g .ds Aq \\(aq\n.el .ds Aq '\n";

type Render = fn(&Man, &mut dyn std::io::Write) -> std::io::Result<()>;

type Rendered = Result<String, Box<dyn Error>>;

/// One clap_mangen section without the preamble and, if `body_only`, without
/// its `.SH` heading, so that sections of subcommands nest under ours.
fn section(man: &Man, render: Render, body_only: bool) -> Rendered {
    let mut out = Vec::new();
    render(man, &mut out)?;
    let text = String::from_utf8(out)?;
    let text = text.strip_prefix(PREAMBLE).unwrap_or(&text).to_string();
    Ok(match text.split_once('\n') {
        Some((first, rest)) if body_only && first.starts_with(".SH") => rest.to_string(),
        _ => text,
    })
}

/// Our own text, escaped by the same roff writer (its preamble removed).
fn ours(roff: &Roff) -> Rendered {
    let mut out = Vec::new();
    roff.to_writer(&mut out)?;
    let text = String::from_utf8(out)?;
    Ok(text.strip_prefix(PREAMBLE).unwrap_or(&text).to_string())
}

fn render_page() -> Rendered {
    let mut cmd = cli::Cli::command();
    cmd.build();
    let top = Man::new(cmd.clone());
    let subs: Vec<_> = cmd
        .get_subcommands()
        .filter(|s| s.get_name() != "help" && !s.is_hide_set())
        .map(|s| (s.clone(), Man::new(s.clone())))
        .collect();

    let mut page = String::from(PREAMBLE);
    // Written here: clap_mangen drops an empty date, which shifts the
    // source and manual fields of .TH one place left.
    page += &format!(
        ".TH DESI-GPU-MAP 1 \"\" \"desi-gpu-map {}\" \"User Commands\"\n",
        cmd.get_version().unwrap_or_default()
    );
    page += &section(&top, Man::render_name_section, false)?;
    page += &section(&top, Man::render_synopsis_section, false)?;
    for (_, man) in &subs {
        page += ".br\n";
        page += &section(man, Man::render_synopsis_section, true)?;
    }
    page += &section(&top, Man::render_description_section, false)?;
    page += &ours(Roff::new().control("PP", []).text([
        roman("The tasks of a job step are bound to GPUs by the "),
        bold("desi_gpu_map"),
        roman(" SPANK plugin, when the user runs "),
        bold("srun --desi-gpu-map=METHOD"),
        roman(" (see "),
        bold("desi_gpu_map"),
        roman("(8)). Where the site has not installed the plugin, "),
        bold("exec"),
        roman(", run as each task, takes the same decision and then runs the application in the task's place. "),
        bold("plan"),
        roman(" needs no Slurm and previews the binding each task would get, and "),
        bold("show"),
        roman(", run inside a task, reports the binding the task got."),
    ]))?;
    page += &section(&top, Man::render_options_section, false)?;
    page += ".SH COMMANDS\n";
    for (sub, man) in &subs {
        let mut head = Roff::new();
        head.control("SS", [format!("desi-gpu-map {}", sub.get_name()).as_str()]);
        page += &ours(&head)?;
        page += &section(man, Man::render_description_section, true)?;
        page += &section(man, Man::render_options_section, true)?;
        if let Some(after) = sub.get_after_long_help().or_else(|| sub.get_after_help()) {
            // Examples keep their lines and indentation: no-fill mode.
            let mut roff = Roff::new();
            roff.control("PP", []).control("nf", []);
            for line in after.to_string().lines() {
                roff.text([roman(line)]);
            }
            roff.control("fi", []);
            page += &ours(&roff)?;
        }
    }
    page += &ours(
        Roff::new()
            .control("SH", ["TASK PROLOG AND EPILOG"])
            .text([
                roman("Run with no argument by slurmstepd as the user's task prolog and epilog ("),
                bold("srun --task-prolog=PATH --task-epilog=PATH"),
                roman(", or "),
                bold("SLURM_TASK_PROLOG"),
                roman(" and "),
                bold("SLURM_TASK_EPILOG"),
                roman(" exported once in a batch script), told apart by "),
                bold("SLURM_SCRIPT_CONTEXT"),
                roman(", the command binds every task as "),
                bold("exec"),
                roman(" would, with nothing wrapped around the application. The prolog reads the method from "),
                bold("DESI_GPU_MAP_METHOD"),
                roman(" (default contiguous) and exec's options from the variables named under "),
                bold("exec"),
                roman(", and prints the task's variables as export and unset lines. It always exits 0: a bad value prints one line, on the task's standard output, that names it, and the task runs unchanged. Where the site's plugin sets a default method, the plugin takes DESI_GPU_MAP_METHOD as the user's request for a step given no option, maps the step itself, and the prolog finds it mapped. Where srun passed the task only Slurm's own variables (sbatch --export=NONE), none of these arrive: the prolog maps with their defaults, and the node's first task says so and how to pass them (srun --export=ALL). The epilog tells the step's MPS keeper that its task ended; after the node's last task it waits, within the 5 seconds slurmstepd gives it, until the daemon is stopped and its directory removed. It matters only with mps, and slurmstepd charges any task epilog about a second per task per node at the step's end. Slurm takes one task prolog and one task epilog per step: one of the user's own replaces this. "),
                bold("desi-gpu-map-prolog"),
                roman(", installed beside this command, is the same file: the command linked statically, which every task starts without the dynamic loader. Where a task's decision needs NVML, it runs the command's dynamic build in its place (installed in PREFIX/libexec/desi-gpu-map/)."),
            ])
            .control("SH", ["EXIT STATUS"])
            .text([roman(
                "0 on success; 2 on a usage error or when the command cannot do what was asked; \
                 1 when its output cannot be written (said on standard error, but for a closed \
                 pipe, as under head, which ends it quietly). \
                 exec returns the application's own status (it becomes the application), or, \
                 where the application cannot run, 127 (not found) or 126 (not executable).",
            )])
            .control("SH", ["SEE ALSO"])
            .text([
                bold("desi_gpu_map"),
                roman("(8), "),
                bold("srun"),
                roman("(1), "),
                bold("spank"),
                roman("(8)"),
            ]),
    )?;
    page += &section(&top, Man::render_version_section, false)?;
    Ok(page)
}

#[test]
fn committed_man_page_matches_the_cli() -> Result<(), Box<dyn Error>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(PAGE);
    let page = render_page()?;
    if std::env::var_os("UPDATE_MAN").is_some_and(|v| v == "1") {
        std::fs::write(&path, &page)?;
        eprintln!("wrote {}", path.display());
        return Ok(());
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == page,
        "{PAGE} is out of date with src/args.rs; run `make man` and commit it"
    );
    Ok(())
}
