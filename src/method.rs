//! The user's option value, `--desi-gpu-map=VALUE`.

use crate::error::{quote, Error};
use std::fmt;

/// How tasks are spread over a node's GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// Consecutive blocks of local tasks per GPU, larger blocks first.
    Contiguous,
    /// Local task `l` gets GPU `l mod k`.
    RoundRobin,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::Contiguous => "contiguous",
            Method::RoundRobin => "roundrobin",
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A method, or `none`: mapping turned off (also a site default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    Off,
    Map(Method),
}

impl Choice {
    pub fn name(self) -> &'static str {
        match self {
            Choice::Off => "none",
            Choice::Map(method) => method.name(),
        }
    }
}

/// What the user asked for with `--desi-gpu-map`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// Print the usage and exit 0.
    Help,
    /// `choice` is `None` for a bare `verbose`: the site default, reported.
    Use {
        choice: Option<Choice>,
        verbose: bool,
    },
}

/// The values listed in every error message about the option.
pub const VALID_VALUES: &str =
    "contiguous, roundrobin (or round-robin), none, help, each optionally after \"verbose,\"";

/// Parses one option value, as typed by the user or read from the
/// environment form of the option.
pub fn parse_option(value: &str) -> Result<Request, Error> {
    let (verbose, rest) = match value.strip_prefix("verbose") {
        Some("") => {
            return Ok(Request::Use {
                choice: None,
                verbose: true,
            })
        }
        Some(rest) => match rest.strip_prefix(',') {
            Some(rest) => (true, rest),
            None => (false, value),
        },
        None => (false, value),
    };
    let choice = match rest {
        "contiguous" => Choice::Map(Method::Contiguous),
        "roundrobin" | "round-robin" => Choice::Map(Method::RoundRobin),
        "none" => Choice::Off,
        "help" => return Ok(Request::Help),
        _ => return Err(bad_value(value)),
    };
    Ok(Request::Use {
        choice: Some(choice),
        verbose,
    })
}

/// The environment form of the option, as Slurm reads it: the plugin's
/// and the option's names with `-` turned into `_`.
pub const ENV_FORM: &str = "SLURM_SPANK__SLURM_SPANK_OPTION_desi_gpu_map_desi_gpu_map";

/// `help` prints the usage and exits 0 without running anything: right when
/// typed, wrong from the environment form, where it would replace every
/// `srun` of a job script with the usage. `env_form` is that variable's
/// value, `args` the client's command line.
pub fn check_help_source(env_form: Option<&str>, args: &[String]) -> Result<(), Error> {
    let from_env = env_form.is_some_and(|v| parse_option(v) == Ok(Request::Help));
    let typed = args.iter().any(|a| a.starts_with("--desi-gpu-map"));
    if from_env && !typed {
        return Err(Error::new(format!(
            "{ENV_FORM}=help: help is for the command line (srun --desi-gpu-map=help true); \
             in the environment give a method; valid values: {VALID_VALUES}"
        )));
    }
    Ok(())
}

fn bad_value(value: &str) -> Error {
    let what = if value.is_empty() {
        "an empty value".to_string()
    } else {
        quote(value)
    };
    Error::new(format!(
        "invalid --desi-gpu-map value {what}; valid values: {VALID_VALUES}"
    ))
}

/// The usage text printed for `--desi-gpu-map=help`.
pub fn usage() -> String {
    "\
Usage: --desi-gpu-map=[verbose,]METHOD

Binds each task of a job step to one GPU of its node before the task starts,
and sets DESI_GPU_MAPPED=1 so that the application skips its own binding.

METHOD:
  contiguous   consecutive blocks of node-local tasks share a GPU
               (numpy.array_split order: 6 tasks on 4 GPUs -> 0 0 1 1 2 3)
  roundrobin   node-local task l gets GPU l mod k (also: round-robin)
  none         no mapping, even if the site set a default
  help         print this text and exit
  verbose      prefix: each task reports its GPU on stderr; alone, it
               reports with the site default method

srun, sbatch and salloc need a command: srun --desi-gpu-map=help true
Environment form: SLURM_SPANK__SLURM_SPANK_OPTION_desi_gpu_map_desi_gpu_map=VALUE
(a method or verbose; help only on the command line).
See desi_gpu_map(8) and `desi-gpu-map plan --help`.
"
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn use_(choice: Choice, verbose: bool) -> Request {
        Request::Use {
            choice: Some(choice),
            verbose,
        }
    }

    #[test]
    fn accepts_every_documented_value() {
        let c = Choice::Map(Method::Contiguous);
        let r = Choice::Map(Method::RoundRobin);
        assert_eq!(parse_option("contiguous"), Ok(use_(c, false)));
        assert_eq!(parse_option("roundrobin"), Ok(use_(r, false)));
        assert_eq!(parse_option("round-robin"), Ok(use_(r, false)));
        assert_eq!(parse_option("none"), Ok(use_(Choice::Off, false)));
        assert_eq!(parse_option("verbose,contiguous"), Ok(use_(c, true)));
        assert_eq!(parse_option("verbose,round-robin"), Ok(use_(r, true)));
        assert_eq!(parse_option("verbose,none"), Ok(use_(Choice::Off, true)));
        assert_eq!(parse_option("help"), Ok(Request::Help));
        assert_eq!(parse_option("verbose,help"), Ok(Request::Help));
        assert_eq!(
            parse_option("verbose"),
            Ok(Request::Use {
                choice: None,
                verbose: true
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
            assert!(
                err.message().contains("invalid --desi-gpu-map value"),
                "{err}"
            );
            assert!(err.message().contains("contiguous, roundrobin"), "{err}");
        }
        let err = parse_option("contigous").unwrap_err();
        assert!(err.message().contains("\"contigous\""), "{err}");
        let err = parse_option("").unwrap_err();
        assert!(err.message().contains("an empty value"), "{err}");
    }

    #[test]
    fn help_only_from_the_command_line() {
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let typed = args(&["srun", "--desi-gpu-map=help", "true"]);
        let plain = args(&["srun", "true"]);
        assert!(check_help_source(None, &typed).is_ok());
        assert!(check_help_source(None, &plain).is_ok(), "#SBATCH line");
        assert!(check_help_source(Some("help"), &typed).is_ok());
        assert!(check_help_source(Some("contiguous"), &plain).is_ok());
        let spaced = args(&["srun", "--desi-gpu-map", "help", "true"]);
        assert!(check_help_source(Some("help"), &spaced).is_ok());
        for env_form in ["help", "verbose,help"] {
            let err = check_help_source(Some(env_form), &plain).unwrap_err();
            assert!(
                err.message().contains("help is for the command line"),
                "{err}"
            );
            assert!(err.message().contains(ENV_FORM), "{err}");
            assert!(err.message().contains("contiguous, roundrobin"), "{err}");
        }
    }

    #[test]
    fn long_and_odd_values_give_a_short_message() {
        let long = "x".repeat(100_000);
        let err = parse_option(&long).unwrap_err();
        assert!(err.message().len() < 300);
        let err = parse_option("con\u{0}tig\u{fffd}").unwrap_err();
        assert!(err.message().contains("\\0"), "{err}");
    }
}
