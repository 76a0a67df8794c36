//! The command line, shared with the man page generator. Values are parsed
//! straight into the core's types, by the core's own names.

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Arg, Args, Parser, Subcommand};
use desi_gpu_map_core::env;
use desi_gpu_map_core::launch::LAUNCHERS;
use desi_gpu_map_core::method::{method_names, Method, Visible};
use desi_gpu_map_core::names::{names, Named};
use desi_gpu_map_core::preview::{Distribution, DEFAULT_GPUS, MAX_LISTED_GPUS, MAX_PREVIEW_ROWS};
use desi_gpu_map_core::runtime::VendorSetting;
use desi_gpu_map_core::settings::config::{
    Config, MpsSettings, MpsShare, NvmlSource, DEFAULT_NVML_TIMEOUT_S, NVML_TIMEOUT_RANGE_S,
};
use desi_gpu_map_core::settings::option::{exec_request, option_form, OptionRequest};
use desi_gpu_map_core::slurm::gpus::MAX_LIST_ENTRIES;
use desi_gpu_map_core::slurm::tasks::{MAX_NODES, MAX_TASKS_PER_NODE};
use desi_gpu_map_core::text::quote;
use std::ffi::{OsStr, OsString};
use std::str::FromStr;

/// An option of exec's that a variable mirrors: both names declared here
/// once, for clap's attributes and for the task prolog's own read.
pub struct Mirror {
    /// The option, without its `--`.
    pub long: &'static str,
    /// The variable read where the option is not given.
    pub var: &'static str,
}

impl Mirror {
    const fn new(long: &'static str, var: &'static str) -> Mirror {
        Mirror { long, var }
    }
}

const VISIBLE: Mirror = Mirror::new("visible", env::VISIBLE_OPTION);
const VENDOR: Mirror = Mirror::new("vendor", env::VENDOR_OPTION);
const NVML: Mirror = Mirror::new("nvml", env::NVML_OPTION);
const NVML_TIMEOUT: Mirror = Mirror::new("nvml-timeout", env::NVML_TIMEOUT_OPTION);
const MPS_CONTROL: Mirror = Mirror::new("mps-control", env::MPS_CONTROL_PATH);
const MPS_DIR: Mirror = Mirror::new("mps-dir", env::MPS_DIR_OPTION);
const MPS_SHARE: Mirror = Mirror::new("mps-share", env::MPS_SHARE_OPTION);

/// exec's options that no variable mirrors, each declared here once, for
/// clap's attributes and [`exec_by_hand`].
const METHOD_LONG: &str = "method";
const VERBOSE_LONG: &str = "verbose";
const KERNEL_ROOT_LONG: &str = "kernel-root";
const OUTSIDE_SLURM_LONG: &str = "allow-outside-slurm";

/// Every variable that mirrors one of exec's options (a test checks this
/// against exec's own options).
const MIRRORS: [&Mirror; 7] = [
    &MPS_CONTROL,
    &VISIBLE,
    &VENDOR,
    &NVML,
    &NVML_TIMEOUT,
    &MPS_DIR,
    &MPS_SHARE,
];

/// Bind each task of a Slurm job step to its GPUs before it starts: bind a task
/// where the plugin is not installed (exec), preview a layout, or show what a
/// running task got.
#[derive(Parser, Debug)]
#[command(name = "desi-gpu-map", version, long_about = None, after_help = prolog_help())]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Preview which GPUs each task of a step gets, on any machine.
    Plan(PlanArgs),
    /// Inside a task: report the GPU binding this task got.
    Show(ShowArgs),
    /// Inside a task: bind it to its GPUs as the plugin would, then run APP
    /// in its place (for sites without the plugin).
    Exec(ExecArgs),
    /// A step's MPS daemon on one node, for exec's METHOD,mps.
    #[command(hide = true, name = crate::keeper::KEEPER_COMMAND)]
    MpsKeeper(crate::keeper::KeeperOpts),
}

#[derive(Args, Debug)]
#[command(after_help = exec_help())]
pub struct ExecArgs {
    #[arg(
        long = METHOD_LONG,
        value_name = "METHOD[,MODIFIER...]",
        value_parser = exec_request,
        help = format!(
            "Mapping method and modifiers, the words --desi-gpu-map takes ({}) [default: ${}, \
             else contiguous]",
            option_form(),
            env::METHOD
        )
    )]
    pub method: Option<OptionRequest>,
    /// One line per task on its stderr, and a line where the task runs
    /// unchanged.
    #[arg(long = VERBOSE_LONG)]
    pub verbose: bool,
    /// What stays visible to each task (plugstack visible=).
    #[arg(
        long = VISIBLE.long,
        env = VISIBLE.var,
        default_value = "single",
        value_parser = one_of::<Visible>()
    )]
    pub visible: Visible,
    #[command(flatten)]
    pub devices: DeviceArgs,
    /// Where closest reads the kernel's GPU files (plugstack kernel_root=;
    /// tests give a fake tree).
    #[arg(long = KERNEL_ROOT_LONG, default_value = "/", hide = true)]
    pub kernel_root: std::path::PathBuf,
    #[arg(
        long = MPS_CONTROL.long,
        value_name = "PATH",
        env = MPS_CONTROL.var,
        value_parser = path(),
        help = format!(
            "The MPS control daemon, for METHOD,mps (plugstack mps_control=) [default: {} \
             on PATH]",
            env::MPS_CONTROL
        )
    )]
    pub mps_control: Option<std::path::PathBuf>,
    /// Where each step's private MPS directory is made, for METHOD,mps
    /// (plugstack mps_dir=) [default: $TMPDIR, else /tmp].
    #[arg(long = MPS_DIR.long, value_name = "DIR", env = MPS_DIR.var, value_parser = path())]
    pub mps_dir: Option<std::path::PathBuf>,
    /// Each MPS client's share of its GPU, for METHOD,mps (plugstack
    /// mps_share=).
    #[arg(
        long = MPS_SHARE.long,
        env = MPS_SHARE.var,
        default_value = "none",
        value_parser = one_of::<MpsShare>()
    )]
    pub mps_share: MpsShare,
    /// Map a process that neither srun nor another launcher started, from
    /// the SLURM_* variables given (for tests).
    #[arg(long = OUTSIDE_SLURM_LONG)]
    pub allow_outside_slurm: bool,
    /// The application and its arguments, after --.
    #[arg(last = true, value_name = "APP")]
    pub command: Vec<std::ffi::OsString>,
}

/// The closing help: with no argument, the command is the task prolog and
/// epilog, which slurmstepd runs with no argument and so no `--help`.
fn prolog_help() -> String {
    format!(
        "With no argument, it is the task prolog and epilog that slurmstepd runs for each
task (srun --task-prolog=PATH --task-epilog=PATH, or ${} and
${} exported in a batch script): the prolog binds the task as
exec would, nothing wrapped around the application, the method from
${} (else contiguous) and exec's options from their variables
(exec --help); a bad value is said and the task runs unchanged. The epilog
ends the step's MPS daemon after the node's last task. desi-gpu-map-prolog,
installed beside this command, is the same command linked statically, which
every task starts faster. See desi-gpu-map(1), TASK PROLOG AND EPILOG.

Example:
  export {}=$(command -v desi-gpu-map-prolog) {}=contiguous
  srun -N2 -n8 --gpus-per-node=4 ./app",
        env::TASK_PROLOG,
        env::TASK_EPILOG,
        env::METHOD,
        env::TASK_PROLOG,
        env::METHOD
    )
}

/// exec's closing help: how it runs, then one line per launcher (from
/// [`LAUNCHERS`]) and examples.
fn exec_help() -> String {
    let mut help = String::from(
        "Run it as the task itself: srun (or mpirun, mpiexec, PALS) starts it, it binds the
task's GPU and execs APP (same pid, signals, exit code). Where the plugin already
mapped this step, the step has no GPUs, or it runs outside any srun step and
launcher (a batch script), APP runs unchanged.

Under another launcher its variables place the rank (over Slurm's, which then
describe the launcher's daemon step). Its GPUs are the daemon step's list inside
an allocation; else the runtime list it inherited; else, outside any Slurm job,
every GPU of the node (NVML, or the kernel's listing).
",
    );
    for l in &LAUNCHERS {
        help.push_str(&format!(
            "  {:<44} {} of {}\n",
            l.title, l.local_rank, l.local_size
        ));
    }
    help.push_str(&format!(
        "Flux ({}) and PMIx alone ({}) name no per-node count or local rank: refused
(under Flux, the Flux shell plugin maps the tasks: flux run -o desi-gpu-map=METHOD;
in a task it mapped, APP runs unchanged).

Examples:
  srun -N2 -n8 --gpus-per-node=4 desi-gpu-map exec --method contiguous -- python app.py
  srun ... desi-gpu-map exec -- ./app        # ${}, else contiguous
  srun ... desi-gpu-map exec --verbose --method closest -- ./app
  srun ... desi-gpu-map exec --method contiguous,mps -- ./app   # one MPS daemon per node
",
        env::FLUX_LOCAL_ID,
        env::PMIX_RANK,
        env::METHOD
    ));
    for l in &LAUNCHERS {
        help.push_str(&format!("  {}\n", l.example));
    }
    help.trim_end().to_string()
}

#[derive(Args, Debug)]
#[command(after_help = "\
Examples:
  desi-gpu-map plan -N 2 -n 8 --method contiguous
  desi-gpu-map plan -N 2 -n 5 -m cyclic --gpus 4,2 --method roundrobin
  desi-gpu-map plan -N 1 -n 3 --devices 2,3 --visible rotate --json
  desi-gpu-map plan -n 8 --method closest --topology perlmutter

Topology file (--topology FILE), one GPU a line, # comments:
  cpus 0-63          # optional: the CPUs tasks are bound to, in order
  0  3  48-63,112-127
  1  2  32-47,96-111
  (TOKEN as in CUDA_VISIBLE_DEVICES, NUMA node, local cpulist; - if unknown)")]
pub struct PlanArgs {
    #[arg(
        short = 'N',
        long,
        default_value_t = 1,
        help = format!("Number of nodes (srun -N), at most {MAX_NODES}")
    )]
    pub nodes: usize,
    #[arg(
        short = 'n',
        long,
        conflicts_with = "ntasks_per_node",
        help = format!(
            "Total number of tasks (srun -n), split evenly over the nodes, the first nodes \
             taking one more (srun's split on whole nodes); at most {MAX_TASKS_PER_NODE} on a \
             node (Slurm's limit) and {MAX_PREVIEW_ROWS} in all"
        )
    )]
    pub ntasks: Option<usize>,
    #[arg(
        long,
        value_delimiter = ',',
        help = format!(
            "Tasks on each node: one number for every node, or one per node (5,3); at most \
             {MAX_TASKS_PER_NODE} on a node and {MAX_PREVIEW_ROWS} in all"
        )
    )]
    pub ntasks_per_node: Vec<usize>,
    /// Task distribution over nodes (srun -m).
    #[arg(short = 'm', long, default_value = "block", value_parser = one_of::<Distribution>())]
    pub distribution: Distribution,
    #[arg(
        long,
        value_delimiter = ',',
        conflicts_with = "devices",
        help = format!(
            "GPUs on each node: one count for every node, or one per node (4,4,2); \
             {DEFAULT_GPUS} per node when neither --gpus nor --devices is given; at most \
             {MAX_LIST_ENTRIES} on a node and {MAX_PREVIEW_ROWS} in all"
        )
    )]
    pub gpus: Vec<usize>,
    #[arg(
        long,
        help = format!(
            "A node's GPU list as Slurm sets CUDA_VISIBLE_DEVICES (2,3): give it once for every \
             node, or once per node; at most {MAX_LIST_ENTRIES} GPUs on a node and \
             {MAX_PREVIEW_ROWS} in all"
        )
    )]
    pub devices: Vec<String>,
    #[arg(
        long,
        default_value_t = Method::Contiguous,
        value_parser = core_value::<Method>(method_names),
        help = format!("Mapping method: {}", method_names())
    )]
    pub method: Method,
    /// The node's GPUs and their local CPUs, for --method closest: a preset
    /// (perlmutter, polaris, lumi-g, dgx-a100, aurora) or a topology file.
    /// Tasks are previewed bound to equal blocks of the node's cores; with
    /// fewer tasks than GPUs, each holds its share, chosen to keep the most
    /// tasks next to one of their nearest GPUs.
    #[arg(long, value_name = "PRESET|FILE")]
    pub topology: Option<String>,
    #[arg(
        long,
        default_value = "single",
        value_parser = one_of::<Visible>(),
        help = format!(
            "What stays visible to each task; under rotate every task's row lists its node's \
             GPUs, at most {MAX_LISTED_GPUS} in all"
        )
    )]
    pub visible: Visible,
    /// Preview the step under CUDA MPS (--desi-gpu-map=METHOD,mps): each
    /// task's share of its GPU under mps_share=even; more than 48 tasks on
    /// one GPU is refused, as the plugin runs such a step without MPS.
    #[arg(long)]
    pub mps: bool,
    /// Preview the ranks of another launcher, which reads each rank's place
    /// from its own variables (exec's table) instead of srun's. A Flux job
    /// needs none: the Flux plugin applies srun's rule to each node's task
    /// count, so -N and --ntasks-per-node give its rows.
    #[arg(long, value_name = "LAUNCHER", value_parser = PossibleValuesParser::new(launcher_names()))]
    pub launcher: Option<String>,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// The launchers `plan --launcher` previews, by name.
fn launcher_names() -> Vec<&'static str> {
    LAUNCHERS.iter().map(|l| l.name).collect()
}

/// show takes exec's three device options as their plugstack keys name
/// them, in its own words, listed after `--flag`, and not from exec's
/// variables.
#[derive(Args, Debug)]
#[command(
    mut_arg("nvml", |a| a
        .env(None)
        .help("NVML to ask for device details: auto, off, or a library path")),
    mut_arg("nvml_timeout", |a| a.env(None)),
    mut_arg("vendor", |a| a
        .env(None)
        .display_order(SHOW_VENDOR_ORDER)
        .help("Whose runtime reads the GPU lists (plugstack vendor=): auto detects it. AMD and \
               Intel GPUs are located through their render nodes")),
)]
pub struct ShowArgs {
    /// Name of the skip flag the site configured (plugstack flag=).
    #[arg(long, default_value = env::DEFAULT_FLAG)]
    pub flag: String,
    #[command(flatten)]
    pub devices: DeviceArgs,
    /// Where the kernel's files are read (tests give a fake tree).
    #[arg(long, default_value = "/", hide = true)]
    pub root: std::path::PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// NVML and the runtime's vendor, as exec and show both take them: each
/// option declared once, under its plugstack key's name (`vendor=`, `nvml=`,
/// `nvml_timeout=`), with the variable exec reads where it is not given.
#[derive(Args, Debug)]
pub struct DeviceArgs {
    /// Whose runtime reads the GPU lists (plugstack vendor=); auto detects it.
    #[arg(
        long = VENDOR.long,
        env = VENDOR.var,
        default_value = "auto",
        value_parser = one_of::<VendorSetting>()
    )]
    pub vendor: VendorSetting,
    /// NVML, for steps in which Slurm names no GPU list: auto, off, or an
    /// absolute library path.
    #[arg(
        long = NVML.long,
        env = NVML.var,
        default_value = "auto",
        value_parser = core_value::<NvmlSource>(nvml_forms)
    )]
    pub nvml: NvmlSource,
    #[arg(
        long = NVML_TIMEOUT.long,
        value_name = "SECONDS",
        env = NVML_TIMEOUT.var,
        default_value_t = DEFAULT_NVML_TIMEOUT_S,
        value_parser = seconds(),
        help = timeout_help()
    )]
    pub nvml_timeout: u64,
}

/// Where show's help lists `--vendor`: after `--nvml-timeout` (the
/// positions clap gives show's options in order are 0 for `--flag`, 1 to
/// 3 for the device options, 4 for the hidden `--root`).
const SHOW_VENDOR_ORDER: usize = 4;

/// One of a core type's names, listed in the help as clap lists choices.
fn one_of<T>() -> Text<T>
where
    T: Named + FromStr + Clone + Send + Sync + 'static,
{
    Text {
        parse: |text| {
            let named = names::<T>().contains(&text);
            named.then(|| text.parse().ok()).flatten()
        },
        valid: || names::<T>().join(", "),
        choices: Some(names::<T>),
    }
}

/// How long NVML may take, in the range of the plugin's `nvml_timeout`.
fn timeout_help() -> String {
    let range = NVML_TIMEOUT_RANGE_S;
    format!(
        "How long NVML may take before it is given up on, in whole seconds from {} to {} \
         (plugstack nvml_timeout=)",
        range.start(),
        range.end()
    )
}

/// Whole seconds in the range of the plugin's `nvml_timeout`.
fn seconds() -> Text<u64> {
    Text {
        parse: |text| {
            let secs = text.parse().ok()?;
            NVML_TIMEOUT_RANGE_S.contains(&secs).then_some(secs)
        },
        valid: || {
            let range = NVML_TIMEOUT_RANGE_S;
            format!("whole seconds from {} to {}", range.start(), range.end())
        },
        choices: None,
    }
}

/// A value the core parses, refused in the core's words.
fn core_value<T>(valid: fn() -> String) -> Text<T>
where
    T: FromStr + Clone + Send + Sync + 'static,
{
    Text {
        parse: |text| text.parse().ok(),
        valid,
        choices: None,
    }
}

/// A path that the task's variables may carry: UTF-8 text on one line,
/// as every variable slurmstepd sets from the prolog's lines is.
fn path() -> Text<std::path::PathBuf> {
    Text {
        parse: |text| Some(text.into()),
        valid: || "a path in UTF-8 text, without control characters".to_string(),
        choices: None,
    }
}

fn nvml_forms() -> String {
    NvmlSource::FORMS.to_string()
}

/// An option's value as text: bytes that are not UTF-8 (which a variable
/// that mirrors the option may hold) or a control character make it a bad
/// value, as a typo does, never an unset one. A bad value is refused in one line: the option, the
/// value quoted whole (control characters escaped, U+FFFD for the bytes
/// that are not UTF-8) and the valid values; the error keeps the option
/// ([`error_line`] names the variable it came from).
#[derive(Clone)]
struct Text<T> {
    parse: fn(&str) -> Option<T>,
    valid: fn() -> String,
    /// Names to list in the help, as clap lists choices.
    choices: Option<fn() -> Vec<&'static str>>,
}

impl<T> Text<T> {
    /// `value` parsed, or the line that refuses it as `flag`'s.
    fn read(&self, flag: &str, value: &OsStr) -> Result<T, String> {
        // A control character (a newline) is in no valid value either: a
        // path with one could be neither said on one line nor set in the
        // task through slurmstepd, which reads a line per variable.
        let text = value
            .to_str()
            .filter(|text| !text.contains(char::is_control));
        text.and_then(self.parse).ok_or_else(|| {
            format!(
                "invalid {flag} {}; valid values: {}",
                quote(&value.to_string_lossy()),
                (self.valid)()
            )
        })
    }
}

impl<T> TypedValueParser for Text<T>
where
    T: Clone + Send + Sync + 'static,
{
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&Arg>,
        value: &OsStr,
    ) -> Result<T, clap::Error> {
        let flag = arg
            .and_then(Arg::get_long)
            .map_or_else(|| "value".to_string(), |long| format!("--{long}"));
        let message = match self.read(&flag, value) {
            Ok(parsed) => return Ok(parsed),
            Err(line) => line + "\n",
        };
        let mut error = clap::Error::raw(ErrorKind::InvalidValue, message).with_cmd(cmd);
        if let Some(arg) = arg {
            let shown = ContextValue::String(arg.to_string());
            error.insert(ContextKind::InvalidArg, shown);
        }
        Err(error)
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        let names = self.choices?();
        Some(Box::new(names.into_iter().map(PossibleValue::new)))
    }
}

/// A mirror set to the empty string means "unset", as an empty
/// `--option=` would not: it is taken out of this process's environment
/// before the command line is read (the process is one thread here).
pub fn drop_empty_mirrors() {
    // Each mirror is looked up only where some variable of ours is empty.
    let empty_own = std::env::vars_os().any(|(name, value)| {
        value.is_empty() && name.to_string_lossy().starts_with(env::OWN_PREFIX)
    });
    if !empty_own {
        return;
    }
    for mirror in MIRRORS {
        if std::env::var_os(mirror.var).is_some_and(|v| v.is_empty()) {
            std::env::remove_var(mirror.var);
        }
    }
}

/// exec's options as their variables give them, for the task prolog and
/// epilog, which slurmstepd runs with no argument. Read without clap:
/// they run in every task, and building clap's parser would cost each
/// one a start (docs/performance.md). Each variable is parsed by its
/// option's own parser and refused in clap's words (a test checks that
/// both read alike); an empty one is unset, as for exec.
pub fn exec_from_variables() -> Result<ExecArgs, String> {
    mirrored_options(&[], &|var| std::env::var_os(var))
}

/// exec's options that variables mirror, each from `given` (option and
/// value, as typed), else from its variable (`vars`), else its default,
/// or the line that refuses the first bad one; the rest at their defaults.
fn mirrored_options(
    given: &[(&str, &OsStr)],
    vars: &dyn Fn(&str) -> Option<OsString>,
) -> Result<ExecArgs, String> {
    let plugin = Config::default();
    let read = |mirror| Given {
        given,
        vars,
        mirror,
    };
    Ok(ExecArgs {
        method: None,
        verbose: false,
        visible: read(&VISIBLE).value(one_of())?.unwrap_or(plugin.visible),
        devices: DeviceArgs {
            vendor: read(&VENDOR).value(one_of())?.unwrap_or(plugin.vendor),
            nvml: read(&NVML)
                .value(core_value(nvml_forms))?
                .unwrap_or(plugin.nvml),
            nvml_timeout: read(&NVML_TIMEOUT)
                .value(seconds())?
                .unwrap_or(DEFAULT_NVML_TIMEOUT_S),
        },
        kernel_root: plugin.kernel_root,
        mps_control: read(&MPS_CONTROL).value(path())?,
        mps_dir: read(&MPS_DIR).value(path())?,
        mps_share: read(&MPS_SHARE)
            .value(one_of())?
            .unwrap_or(MpsSettings::default().share),
        allow_outside_slurm: false,
        command: Vec::new(),
    })
}

/// Where one mirrored option's value is looked for.
struct Given<'a> {
    given: &'a [(&'a str, &'a OsStr)],
    vars: &'a dyn Fn(&str) -> Option<OsString>,
    mirror: &'a Mirror,
}

impl Given<'_> {
    /// The option's value parsed by `text`, or clap's line that refuses it
    /// (naming the variable where it came from one); `None` where neither
    /// the option nor its variable (empty is unset) gives one.
    fn value<T>(&self, text: Text<T>) -> Result<Option<T>, String> {
        let flag = format!("--{}", self.mirror.long);
        if let Some((_, value)) = self
            .given
            .iter()
            .find(|(long, _)| *long == self.mirror.long)
        {
            return text.read(&flag, value).map(Some);
        }
        let Some(value) = (self.vars)(self.mirror.var).filter(|v| !v.is_empty()) else {
            return Ok(None);
        };
        let var = self.mirror.var;
        text.read(&flag, &value)
            .map(Some)
            .map_err(|line| format!("{line} (from ${var})"))
    }
}

/// exec's arguments (after `exec`) read by hand, in the forms every task
/// of a step starts with: `--NAME VALUE`, `--NAME=VALUE` and the flags,
/// then `--` and the application; each value parsed by its option's own
/// parser, and a mirrored option not given read from its variable
/// (`vars`). `None` for anything else (help, an unknown, repeated or
/// empty option, a value that starts with `-`, a bad value), which clap's
/// parser then reads and says. A test checks both read alike.
pub fn exec_by_hand(
    words: &[OsString],
    vars: &dyn Fn(&str) -> Option<OsString>,
) -> Option<ExecArgs> {
    const FLAGS: [&str; 2] = [VERBOSE_LONG, OUTSIDE_SLURM_LONG];
    let mut given: Vec<(&str, &OsStr)> = Vec::new();
    let mut flags: Vec<&str> = Vec::new();
    let mut rest = words.iter();
    let command: Vec<OsString> = loop {
        let word = rest.next()?.to_str()?;
        if word == "--" {
            break rest.cloned().collect();
        }
        let name = word.strip_prefix("--")?;
        if FLAGS.contains(&name) {
            if flags.contains(&name) {
                return None;
            }
            flags.push(name);
            continue;
        }
        let (name, value) = match name.split_once('=') {
            Some((name, value)) => (name, OsStr::new(value)),
            None => (name, rest.next()?.as_os_str()),
        };
        let known = name == METHOD_LONG
            || name == KERNEL_ROOT_LONG
            || MIRRORS.iter().any(|m| m.long == name);
        let starts_option = value.as_encoded_bytes().first() == Some(&b'-');
        if !known || value.is_empty() || starts_option || given.iter().any(|(n, _)| *n == name) {
            return None;
        }
        given.push((name, value));
    };
    let option = |long: &str| given.iter().find(|(n, _)| *n == long).map(|(_, v)| *v);
    let mut exec = mirrored_options(&given, vars).ok()?;
    if let Some(method) = option(METHOD_LONG) {
        exec.method = Some(exec_request(method.to_str()?).ok()?);
    }
    if let Some(root) = option(KERNEL_ROOT_LONG) {
        exec.kernel_root = root.into();
    }
    exec.verbose = flags.contains(&VERBOSE_LONG);
    exec.allow_outside_slurm = flags.contains(&OUTSIDE_SLURM_LONG);
    exec.command = command;
    Some(exec)
}

/// A command-line error in one line; where the bad value came from a
/// variable that mirrors an option, the line names the variable.
pub fn error_line(e: &clap::Error) -> String {
    let rendered = e.to_string();
    let first = rendered.lines().next().unwrap_or_default();
    let first = first.strip_prefix("error: ").unwrap_or(first);
    let arg = match e.get(clap::error::ContextKind::InvalidArg) {
        Some(clap::error::ContextValue::String(arg)) => arg.clone(),
        _ => return first.to_string(),
    };
    let option = arg.split(' ').next().unwrap_or_default();
    // args_os: std::env::args would panic on a word that is not UTF-8.
    let given = std::env::args_os().any(|a| {
        let a = a.to_string_lossy();
        a == option || a.starts_with(&format!("{option}="))
    });
    let var = MIRRORS.into_iter().find(|mirror| {
        option.strip_prefix("--") == Some(mirror.long) && std::env::var_os(mirror.var).is_some()
    });
    match (var, given) {
        (Some(mirror), false) => format!("{first} (from ${})", mirror.var),
        _ => first.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStringExt;

    /// NVML's deadline is 10 s for show and exec unless `--nvml-timeout`
    /// (or exec's variable) says otherwise; tests/show.rs times a hung
    /// NVML against a deadline given.
    #[test]
    fn nvmls_deadline_is_ten_seconds_unless_given() {
        let timeout = |args: &[&str]| match Cli::try_parse_from(args).map(|c| c.command) {
            Ok(Command::Show(show)) => show.devices.nvml_timeout,
            Ok(Command::Exec(exec)) => exec.devices.nvml_timeout,
            other => panic!("{args:?}: {other:?}"),
        };
        assert_eq!(timeout(&["desi-gpu-map", "show"]), 10);
        assert_eq!(timeout(&["desi-gpu-map", "exec", "--", "true"]), 10);
        let given = ["desi-gpu-map", "show", "--nvml-timeout", "3"];
        assert_eq!(timeout(&given), 3);
    }

    /// exec's options as the whole command line reads them from `given`
    /// (option, value) pairs; its application left out.
    fn by_clap(given: &[(&str, OsString)]) -> Result<String, String> {
        let mut argv: Vec<OsString> = vec!["desi-gpu-map".into(), "exec".into()];
        for (long, value) in given {
            // One word, as `--nvml-timeout -1` would not be.
            let mut word = OsString::from(format!("--{long}="));
            word.push(value);
            argv.push(word);
        }
        argv.extend(["--".into(), "app".into()]);
        match Cli::try_parse_from(argv).map(|cli| cli.command) {
            Ok(Command::Exec(mut exec)) => {
                exec.command.clear();
                Ok(format!("{exec:?}"))
            }
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(error_line(&e)),
        }
    }

    /// The same from variables, as the task prolog reads them.
    fn by_prolog(given: &[(&str, OsString)]) -> Result<String, String> {
        mirrored_options(&[], &|var| {
            given
                .iter()
                .find(|(v, _)| *v == var)
                .map(|(_, value)| value.clone())
        })
        .map(|exec| format!("{exec:?}"))
    }

    /// The task prolog reads exec's variables without clap, as exec reads
    /// them with it: every option a variable mirrors is in `MIRRORS`, and
    /// each value, good or bad, unset or empty, gives clap's answer.
    #[test]
    fn the_prologs_read_of_exec_variables_agrees_with_clap() {
        let cli = <Cli as clap::CommandFactory>::command();
        let exec = cli.find_subcommand("exec").expect("exec");
        let mut declared: Vec<(&str, String)> = exec
            .get_arguments()
            .filter_map(|arg| Some((arg.get_long()?, arg.get_env()?.to_str()?.to_string())))
            .collect();
        let mut ours: Vec<(&str, String)> = MIRRORS
            .iter()
            .map(|m| (m.long, m.var.to_string()))
            .collect();
        declared.sort();
        ours.sort();
        assert_eq!(declared, ours);

        assert_eq!(by_prolog(&[]), by_clap(&[]));
        let not_utf8 = OsString::from_vec(vec![b'a', 0xff]);
        let mut values: Vec<(&Mirror, Vec<OsString>)> = vec![
            (
                &VISIBLE,
                names::<Visible>().iter().map(Into::into).collect(),
            ),
            (
                &VENDOR,
                names::<VendorSetting>().iter().map(Into::into).collect(),
            ),
            (
                &MPS_SHARE,
                names::<MpsShare>().iter().map(Into::into).collect(),
            ),
            (
                &NVML,
                ["auto", "off", "/lib/libnvidia-ml.so.1", "lib.so"]
                    .map(Into::into)
                    .to_vec(),
            ),
            (
                &NVML_TIMEOUT,
                ["1", "30", "0", "31", "-1", "x"].map(Into::into).to_vec(),
            ),
            (
                &MPS_CONTROL,
                ["/usr/bin/nvidia-cuda-mps-control", "a\nb"]
                    .map(Into::into)
                    .to_vec(),
            ),
            (
                &MPS_DIR,
                ["/scratch/me", "rel", "\u{1}"].map(Into::into).to_vec(),
            ),
        ];
        for (mirror, tried) in &mut values {
            tried.extend(["bogus".into(), " ".into(), not_utf8.clone()]);
            for value in tried.iter() {
                let clap = by_clap(&[(mirror.long, value.clone())]);
                let prolog = by_prolog(&[(mirror.var, value.clone())]);
                let clap = clap.map_err(|line| format!("{line} (from ${})", mirror.var));
                assert_eq!(prolog, clap, "{} {value:?}", mirror.var);
            }
            // Empty is unset.
            assert_eq!(by_prolog(&[(mirror.var, OsString::new())]), by_clap(&[]));
        }
    }
}
