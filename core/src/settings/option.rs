//! The user's option value, `--desi-gpu-map=VALUE`.

use crate::env::DEFAULT_FLAG;
use crate::error::Error;
use crate::method::Method;
use crate::names::{named, names, with_aliases, Named};
use crate::settings::client_args::{typed_option, Client};

/// A method, or `none`: mapping turned off (also a site default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// `none`: leave the step alone.
    Off,
    /// Map with this method.
    Map(Method),
}

// Every method, then `none`, built from [`Method`]'s own list.
crate::names::with_one_more!(CHOICES: Choice = Choice::Off, last, Choice::Map, Method);

impl Named for Choice {
    const ALL: &'static [Self] = &CHOICES;

    fn name(self) -> &'static str {
        match self {
            Choice::Off => "none",
            Choice::Map(method) => method.name(),
        }
    }

    fn aliases(self) -> &'static [&'static str] {
        match self {
            Choice::Off => &[],
            Choice::Map(method) => method.aliases(),
        }
    }
}

impl Choice {
    fn described(self) -> &'static [&'static str] {
        match self {
            Choice::Off => &["no mapping, even if the site set a default"],
            Choice::Map(method) => method.described(),
        }
    }
}

named!(from_str Choice);

/// A word that may stand beside the method, in any order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Modifier {
    /// Each task reports its GPUs on stderr.
    Verbose,
    /// The step's tasks run as clients of a CUDA MPS daemon per node.
    Mps,
}

named!(Modifier {
    Verbose => "verbose",
    Mps => "mps",
});

impl Modifier {
    fn described(self, front: Front) -> &'static [&'static str] {
        match (self, front) {
            (Modifier::Verbose, _) => &["each task reports its GPUs on stderr"],
            (Modifier::Mps, Front::Slurm) => &[
                "the step's tasks share their GPUs through one CUDA MPS",
                "daemon per node, started as the job's user and",
                "stopped when the step ends",
            ],
            (Modifier::Mps, Front::Flux) => &[
                "the job's tasks share their GPUs through one CUDA MPS",
                "daemon per node, started as the job's user and",
                "stopped after the node's last task",
            ],
        }
    }
}

/// The option's value as the plugin registers it with Slurm:
/// `[verbose,]contiguous|roundrobin|closest[,mps]|none|help`.
pub fn option_form() -> String {
    format!(
        "[{}]{}[,{}]|{}|help",
        modifier_prefix(Modifier::Verbose),
        names::<Method>().join("|"),
        Modifier::Mps.name(),
        Choice::Off.name()
    )
}

fn modifier_prefix(modifier: Modifier) -> String {
    format!("{},", modifier.name())
}

/// What the user asked for, parsed once, by [`parse_option`] (or
/// [`exec_request`]), from whichever front end's spelling:
/// `--desi-gpu-map` or its environment form (the plugin),
/// `DESI_GPU_MAP_METHOD` (the plugin, where the site's default would ask;
/// exec and the task prolog), exec's `--method`, Flux's `-o desi-gpu-map`.
/// The one type of the user's request that every front end passes to the
/// core ([`crate::step::StepFacts::request`],
/// [`crate::start::TaskFacts::request`]), which resolves it once, over
/// the site's settings, to the step's answer ([`crate::step::resolve`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionRequest {
    /// Print the usage and exit 0.
    Help,
    /// `choice` is `None` for modifiers alone: the site default.
    Use {
        /// The method, or `none`.
        choice: Option<Choice>,
        /// `verbose`: each task says what it got.
        verbose: bool,
        /// `mps`: the tasks share their GPUs under CUDA MPS.
        mps: bool,
    },
}

/// The values listed in every error message about the option:
/// `contiguous, roundrobin (or round-robin), closest, none, help; with
/// "verbose" or "mps" beside them, comma-separated`.
pub(crate) fn valid_values() -> String {
    let modifiers: Vec<String> = Modifier::ALL
        .iter()
        .map(|m| format!("\"{}\"", m.name()))
        .collect();
    format!(
        "{}, help; with {} beside them, comma-separated",
        with_aliases::<Choice>(),
        modifiers.join(" or ")
    )
}

/// Parses one option value, as typed by the user or read from the
/// environment form of the option: a method (or `none` or `help`) and
/// modifiers, comma-separated, in any order, each at most once.
pub fn parse_option(value: &str) -> Result<OptionRequest, Error> {
    let (mut choice, mut help, mut modifiers) = (None, false, Vec::new());
    for word in value.split(',') {
        if let Ok(modifier) = word.parse::<Modifier>() {
            if modifiers.contains(&modifier) {
                return Err(bad_option(value));
            }
            modifiers.push(modifier);
        } else if word == "help" && !help && choice.is_none() {
            help = true;
        } else {
            match word.parse::<Choice>() {
                Ok(c) if choice.is_none() && !help => choice = Some(c),
                _ => return Err(bad_option(value)),
            }
        }
    }
    let mps = modifiers.contains(&Modifier::Mps);
    if help {
        return match mps {
            false => Ok(OptionRequest::Help),
            true => Err(bad_combination(
                value,
                "help prints the usage and runs nothing",
            )),
        };
    }
    if mps && choice == Some(Choice::Off) {
        return Err(bad_combination(
            value,
            "none maps no task, and MPS needs mapped tasks",
        ));
    }
    Ok(OptionRequest::Use {
        choice,
        verbose: modifiers.contains(&Modifier::Verbose),
        mps,
    })
}

/// A value whose words are valid alone but not together.
fn bad_combination(value: &str, why: &'static str) -> Error {
    Error::BadCombination {
        value: value.to_string(),
        why,
    }
}

/// The option's name, as users type it after `--` (declared with the
/// scan of the clients' command lines).
pub use crate::settings::client_args::{OPTION, PLUGIN};

/// The environment form of the option, as Slurm reads it: the plugin's
/// and the option's names with `-` turned into `_`.
pub const ENV_FORM: &str = "SLURM_SPANK__SLURM_SPANK_OPTION_desi_gpu_map_desi_gpu_map";

/// `help` prints the usage and exits 0 without running anything: right when
/// typed, wrong from the environment form, where it would replace every
/// `srun` of a job script with the usage. `env_form` is that variable's
/// value, `args` the client's command line. Typed means among the client's
/// own options: a word of the program or the batch script is not the
/// command-line form (see [`crate::settings::client_args`]).
pub fn check_help_source(
    env_form: Option<&str>,
    args: &[String],
    client: Client,
) -> Result<(), Error> {
    let from_env = env_form.is_some_and(|v| parse_option(v) == Ok(OptionRequest::Help));
    if from_env && !typed_option(args, client) {
        return Err(help_from_environment());
    }
    Ok(())
}

/// A value that names no choice, with the valid ones.
pub(crate) fn bad_option(value: &str) -> Error {
    Error::BadOption {
        value: value.to_string(),
        valid: valid_values(),
    }
}

/// `help` from the environment form, with the valid values.
pub(crate) fn help_from_environment() -> Error {
    Error::HelpFromEnvironment {
        env_form: ENV_FORM,
        valid: valid_values(),
    }
}

/// The usage text printed for `--desi-gpu-map=help`.
pub fn usage() -> String {
    format!(
        "\
Usage: --{OPTION}=METHOD[,verbose][,mps]

{}
METHOD:
{}  help         print this text and exit

{}
srun, sbatch and salloc need a command: srun --{OPTION}=help true
Environment form: {ENV_FORM}=VALUE
(any value but help, which is for the command line).
See {PLUGIN}(8) and `desi-gpu-map plan --help`.
",
        binds("a job step"),
        choices(),
        modifiers(Front::Slurm)
    )
}

/// The usage text the Flux shell plugin prints for `-o desi-gpu-map=help`.
pub fn flux_usage() -> String {
    format!(
        "\
Usage: flux run -o {OPTION}=METHOD[,verbose][,mps] ...

{}
METHOD:
{}  help         print this text and run nothing

{}
A site sets its default and other settings in the conf table of the
plugin's plugin.load in the shell's initrc; {PLUGIN}(8) lists the keys.
See {PLUGIN}(8) and `desi-gpu-map plan --help`.
",
        binds("a Flux job"),
        choices(),
        modifiers(Front::Flux)
    )
}

/// Which front end's usage: the words that differ.
#[derive(Clone, Copy)]
enum Front {
    Slurm,
    Flux,
}

/// What the option does, for `what`'s tasks (a job step, a Flux job).
fn binds(what: &str) -> String {
    format!(
        "\
Binds each task of {what} to one GPU of its node before the task starts
(to its share of them where the node has fewer tasks than GPUs, so that no
GPU is left idle), and sets {DEFAULT_FLAG}=1 so that the application skips
its own binding.
"
    )
}

/// Each choice, described, for the usage.
fn choices() -> String {
    let mut choices = String::new();
    for choice in Choice::ALL {
        let also = match choice.aliases() {
            [] => String::new(),
            aliases => format!(" (also: {})", aliases.join(", ")),
        };
        let mut lines = choice.described().iter();
        let first = lines.next().copied().unwrap_or_default();
        choices += &format!("  {:<12} {first}", choice.name());
        for line in lines {
            choices += &format!("\n{:15}{line}", "");
        }
        choices += &also;
        choices.push('\n');
    }
    choices
}

/// Each modifier, described, for `front`'s usage.
fn modifiers(front: Front) -> String {
    let mut modifiers = String::from(
        "Modifiers, before or after METHOD, comma-separated; alone, they apply to\n\
         the site default method:\n",
    );
    for modifier in Modifier::ALL {
        let mut lines = modifier.described(front).iter();
        let first = lines.next().copied().unwrap_or_default();
        modifiers += &format!("  {:<12} {first}\n", modifier.name());
        for line in lines {
            modifiers += &format!("{:15}{line}\n", "");
        }
    }
    modifiers
}

/// `--method`'s value: the words `--desi-gpu-map` takes, refused as the
/// plugin refuses them; `help` names nothing to run.
pub fn exec_request(value: &str) -> Result<OptionRequest, Error> {
    match parse_option(value) {
        Ok(OptionRequest::Help) | Err(Error::BadOption { .. }) => Err(Error::BadMethod {
            value: value.to_string(),
            valid: valid_values().replace(", help;", ";"),
        }),
        Err(Error::BadCombination { why, .. }) => Err(Error::BadMethodCombination {
            value: value.to_string(),
            why,
        }),
        Err(e) => Err(e),
        Ok(request) => Ok(request),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::method_names;

    fn use_(choice: Choice, verbose: bool) -> OptionRequest {
        OptionRequest::Use {
            choice: Some(choice),
            verbose,
            mps: false,
        }
    }

    #[test]
    fn exec_refuses_in_its_own_words() {
        assert_eq!(
            exec_request("help").unwrap_err().to_string(),
            format!(
                "invalid --method \"help\"; valid values: {}",
                valid_values().replace(", help;", ";")
            )
        );
        assert_eq!(
            exec_request("none,mps").unwrap_err().to_string(),
            "invalid --method \"none,mps\": none maps no task, and MPS needs mapped tasks; give \
             a method with mps, as in contiguous,mps"
        );
    }

    #[test]
    fn accepts_every_documented_value() {
        let c = Choice::Map(Method::Contiguous);
        let r = Choice::Map(Method::RoundRobin);
        assert_eq!(parse_option("contiguous"), Ok(use_(c, false)));
        assert_eq!(parse_option("roundrobin"), Ok(use_(r, false)));
        assert_eq!(parse_option("round-robin"), Ok(use_(r, false)));
        assert_eq!(parse_option("none"), Ok(use_(Choice::Off, false)));
        let near = Choice::Map(Method::Closest);
        assert_eq!(parse_option("closest"), Ok(use_(near, false)));
        assert_eq!(parse_option("verbose,closest"), Ok(use_(near, true)));
        assert_eq!(parse_option("verbose,contiguous"), Ok(use_(c, true)));
        assert_eq!(parse_option("verbose,round-robin"), Ok(use_(r, true)));
        assert_eq!(parse_option("verbose,none"), Ok(use_(Choice::Off, true)));
        assert_eq!(parse_option("help"), Ok(OptionRequest::Help));
        assert_eq!(parse_option("verbose,help"), Ok(OptionRequest::Help));
        assert_eq!(
            parse_option("verbose"),
            Ok(OptionRequest::Use {
                choice: None,
                verbose: true,
                mps: false
            })
        );
    }

    #[test]
    fn rejects_typos_with_the_value_and_the_choices() {
        for bad in [
            "",
            "contigous",
            "Contiguous",
            " contiguous",
            "contiguous,",
            "verbose,",
            "verbose,verbose,contiguous",
            "verbosecontiguous",
            "round_robin",
            "contiguous=1",
            "a,b",
        ] {
            let err = parse_option(bad).expect_err(bad);
            assert_eq!(err, bad_option(bad));
        }
        // The wording, once.
        let err = parse_option("contigous").unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid --desi-gpu-map value \"contigous\"; valid values: contiguous, roundrobin \
             (or round-robin), closest, none, help; with \"verbose\" or \"mps\" beside them, \
             comma-separated"
        );
        let err = parse_option("").unwrap_err();
        assert!(err.to_string().contains("an empty value"), "{err}");
    }

    #[test]
    fn modifiers_stand_anywhere_once_and_mps_needs_a_method() {
        let c = Some(Choice::Map(Method::Contiguous));
        let req = |choice, verbose, mps| {
            Ok(OptionRequest::Use {
                choice,
                verbose,
                mps,
            })
        };
        for value in ["contiguous,mps", "mps,contiguous"] {
            assert_eq!(parse_option(value), req(c, false, true), "{value}");
        }
        for value in [
            "verbose,contiguous,mps",
            "mps,verbose,contiguous",
            "contiguous,verbose,mps",
        ] {
            assert_eq!(parse_option(value), req(c, true, true), "{value}");
        }
        assert_eq!(parse_option("contiguous,verbose"), req(c, true, false));
        assert_eq!(parse_option("mps"), req(None, false, true));
        assert_eq!(parse_option("verbose,mps"), req(None, true, true));
        for bad in [
            "mps,mps",
            "contiguous,closest",
            "mps,",
            ",mps",
            "contiguous,help",
        ] {
            assert_eq!(parse_option(bad), Err(bad_option(bad)), "{bad}");
        }
        for (bad, why) in [
            ("none,mps", "none maps no task"),
            ("mps,none", "none maps no task"),
            ("help,mps", "help prints the usage"),
        ] {
            let err = parse_option(bad).unwrap_err().to_string();
            assert!(
                err.contains(why) && err.contains(&format!("{bad:?}")),
                "{err}"
            );
        }
        assert!(Error::MpsOff
            .to_string()
            .contains("mps=off in plugstack.conf"));
    }

    #[test]
    fn help_only_from_the_command_line() {
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let check = |env_form, args: &[String]| check_help_source(env_form, args, Client::Srun);
        let typed = args(&["srun", "--desi-gpu-map=help", "true"]);
        let plain = args(&["srun", "true"]);
        assert!(check(None, &typed).is_ok());
        assert!(check(None, &plain).is_ok(), "#SBATCH line");
        assert!(check(Some("help"), &typed).is_ok());
        assert!(check(Some("contiguous"), &plain).is_ok());
        let spaced = args(&["srun", "--desi-gpu-map", "help", "true"]);
        assert!(check(Some("help"), &spaced).is_ok());
        for env_form in ["help", "verbose,help"] {
            let err = check(Some(env_form), &plain).unwrap_err();
            assert_eq!(err, help_from_environment());
        }
        // Words of the program are not the command-line form.
        for line in [
            &["srun", "-w", "n1", "echo", "--desi-gpu-map-x"][..],
            &["srun", "-w", "n1", "echo", "--desi-gpu-map=help"],
        ] {
            let err = check(Some("help"), &args(line)).unwrap_err();
            assert_eq!(err, help_from_environment(), "{line:?}");
        }
        let script = args(&["sbatch", "job.sh", "--desi-gpu-map=help"]);
        let err = check_help_source(Some("help"), &script, Client::Allocator).unwrap_err();
        assert_eq!(err, help_from_environment());
        let msg = help_from_environment().to_string();
        assert!(msg.contains("help is for the command line"), "{msg}");
        assert!(msg.starts_with(ENV_FORM), "{msg}");
        assert!(msg.contains("contiguous, roundrobin"), "{msg}");
    }

    #[test]
    fn the_environment_form_is_slurms_spelling_of_the_names() {
        let derived =
            format!("SLURM_SPANK__SLURM_SPANK_OPTION_{PLUGIN}_{OPTION}").replace('-', "_");
        assert_eq!(ENV_FORM, derived);
    }

    #[test]
    fn names_are_defined_once() {
        assert_eq!(
            method_names(),
            "contiguous, roundrobin (or round-robin), closest"
        );
        assert_eq!(
            option_form(),
            "[verbose,]contiguous|roundrobin|closest[,mps]|none|help"
        );
        assert_eq!(
            valid_values(),
            "contiguous, roundrobin (or round-robin), closest, none, help; with \"verbose\" or \"mps\" beside them, comma-separated"
        );
        assert_eq!("closest".parse(), Ok(Method::Closest));
        assert_eq!("round-robin".parse(), Ok(Method::RoundRobin));
        assert_eq!("none".parse(), Ok(Choice::Off));
        for bad in ["none", "verbose,roundrobin", "help", ""] {
            assert!(bad.parse::<Method>().is_err(), "{bad}");
        }
        assert!("verbose,none".parse::<Choice>().is_err());
    }

    #[test]
    fn usage_lists_every_choice() {
        let want = "\
Usage: --desi-gpu-map=METHOD[,verbose][,mps]

Binds each task of a job step to one GPU of its node before the task starts
(to its share of them where the node has fewer tasks than GPUs, so that no
GPU is left idle), and sets DESI_GPU_MAPPED=1 so that the application skips
its own binding.

METHOD:
  contiguous   consecutive blocks of node-local tasks share a GPU
               (numpy.array_split order: 6 tasks on 4 GPUs -> 0 0 1 1 2 3;
               fewer tasks than GPUs hold blocks: 3 on 4 -> 0,1 2 3)
  roundrobin   node-local task l gets GPU l mod k; fewer tasks than
               GPUs hold every n-th (2 on 4 -> 0,2 1,3) (also: round-robin)
  closest      a GPU attached to the task's own CPUs, split in blocks
               among the tasks near the same GPUs (fewer tasks than
               GPUs: the shares that keep the most tasks next to their
               CPUs, nearest first); the GPUs' CPUs come from the
               kernel (sysfs) or NVML; contiguous where they are
               unknown (said in one line)
  none         no mapping, even if the site set a default
  help         print this text and exit

Modifiers, before or after METHOD, comma-separated; alone, they apply to
the site default method:
  verbose      each task reports its GPUs on stderr
  mps          the step's tasks share their GPUs through one CUDA MPS
               daemon per node, started as the job's user and
               stopped when the step ends

srun, sbatch and salloc need a command: srun --desi-gpu-map=help true
Environment form: SLURM_SPANK__SLURM_SPANK_OPTION_desi_gpu_map_desi_gpu_map=VALUE
(any value but help, which is for the command line).
See desi_gpu_map(8) and `desi-gpu-map plan --help`.
";
        assert_eq!(usage(), want);
    }

    #[test]
    fn fluxs_usage_names_flux_and_shares_the_methods() {
        let flux = flux_usage();
        assert!(flux.starts_with(
            "Usage: flux run -o desi-gpu-map=METHOD[,verbose][,mps] ...\n\n\
             Binds each task of a Flux job to one GPU of its node before the task starts\n"
        ));
        assert!(flux.contains(&choices()), "{flux}");
        assert!(flux.contains("  help         print this text and run nothing\n"));
        assert!(flux.contains(
            "  mps          the job's tasks share their GPUs through one CUDA MPS\n\
             \x20              daemon per node, started as the job's user and\n\
             \x20              stopped after the node's last task\n"
        ));
        for slurms in [
            "srun",
            "sbatch",
            "step",
            "SLURM_",
            "plugstack",
            "--desi-gpu-map",
        ] {
            assert!(!flux.contains(slurms), "{slurms}: {flux}");
        }
    }

    #[test]
    fn long_and_odd_values_give_a_short_message() {
        let long = "x".repeat(100_000);
        let err = parse_option(&long).unwrap_err();
        assert!(err.to_string().len() < 300);
        let err = parse_option("con\u{0}tig\u{fffd}").unwrap_err();
        assert!(err.to_string().contains("\\0"), "{err}");
    }
}
