//! The site's plugstack arguments: `key=value` words after the plugin path
//! on its `plugstack.conf` line, read into the plugin's [`Config`].

use super::config::{
    Config, MpsMode, MpsShare, NvmlSource, Untracked, DEFAULT_FLAG, DEFAULT_NVML_TIMEOUT_S,
    NVML_TIMEOUT_RANGE_S,
};
use crate::env::FlagClash;
use crate::error::{ArgProblem, Error};
use crate::method::Visible;
use crate::names::{names, Named};
use crate::runtime::VendorSetting;
use crate::settings::option::{exec_request, Choice, OptionRequest};
use crate::text::{one_of, quote};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

/// One plugstack argument, declared once: messages, the man page and the
/// packaging's texts (`packaging/README.md`'s table among them) are checked
/// against this table (`tests/names.rs`).
pub struct Key {
    /// The key, as written before `=`.
    pub name: &'static str,
    /// What follows `name=` in messages (`None`: a word without a value).
    pub form: fn() -> Option<String>,
    /// The default, as the value is written (`None`: unset).
    pub default: fn() -> Option<String>,
    /// What an unset key means, in the docs' words.
    pub unset: &'static str,
    /// Sets the key's value in `config` from `value`.
    set: fn(&mut Config, &str) -> Result<(), ArgProblem>,
}

/// The key that names the MPS control daemon.
pub const CONTROL_KEY: &str = "mps_control";

/// Every plugstack argument, in the order messages list them.
pub const KEYS: [Key; 13] = [
    Key {
        name: "default",
        form: || Some(names::<Choice>().join("|")),
        default: || Some(Config::default().default.name().to_string()),
        unset: "",
        set: |c, v| {
            c.default = named("default", v)?;
            Ok(())
        },
    },
    Key {
        name: "flag",
        form: || Some("NAME".to_string()),
        default: || Some(DEFAULT_FLAG.to_string()),
        unset: "",
        set: |c, v| {
            c.flag = parse_flag(v)?;
            Ok(())
        },
    },
    Key {
        name: "visible",
        form: || Some(names::<Visible>().join("|")),
        default: || Some(Config::default().visible.name().to_string()),
        unset: "",
        set: |c, v| {
            c.visible = named("visible", v)?;
            Ok(())
        },
    },
    Key {
        name: "nvml",
        form: || Some("auto|off|/ABSOLUTE/PATH".to_string()),
        default: || Some(Config::default().nvml.to_string()),
        unset: "",
        set: |c, v| {
            c.nvml = v.parse()?;
            Ok(())
        },
    },
    Key {
        name: "nvml_timeout",
        form: || {
            let range = NVML_TIMEOUT_RANGE_S;
            Some(format!("{}..{}", range.start(), range.end()))
        },
        default: || Some(DEFAULT_NVML_TIMEOUT_S.to_string()),
        unset: "",
        set: |c, v| {
            c.nvml_timeout = parse_nvml_timeout(v)?;
            Ok(())
        },
    },
    Key {
        name: "untracked",
        form: || Some(names::<Untracked>().join("|")),
        default: || Some(Config::default().untracked.name().to_string()),
        unset: "",
        set: |c, v| {
            c.untracked = named("untracked", v)?;
            Ok(())
        },
    },
    Key {
        name: "vendor",
        form: || Some(names::<VendorSetting>().join("|")),
        default: || Some(Config::default().vendor.name().to_string()),
        unset: "",
        set: |c, v| {
            c.vendor = named("vendor", v)?;
            Ok(())
        },
    },
    Key {
        name: "verbose",
        form: || None,
        default: || None,
        unset: "off",
        set: |c, _| {
            c.verbose = true;
            Ok(())
        },
    },
    Key {
        name: "kernel_root",
        form: || Some("/ABSOLUTE/PATH".to_string()),
        default: || Some(Config::default().kernel_root.display().to_string()),
        unset: "",
        set: |c, v| {
            c.kernel_root = parse_root("kernel_root", v)?;
            Ok(())
        },
    },
    Key {
        name: "mps",
        form: || Some(names::<MpsMode>().join("|")),
        default: || Some(Config::default().mps.mode.name().to_string()),
        unset: "",
        set: |c, v| {
            c.mps.mode = named("mps", v)?;
            Ok(())
        },
    },
    Key {
        name: CONTROL_KEY,
        form: || Some("/ABSOLUTE/PATH".to_string()),
        default: || None,
        unset: "found",
        set: |c, v| {
            c.mps.control = Some(parse_root(CONTROL_KEY, v)?);
            Ok(())
        },
    },
    Key {
        name: "mps_dir",
        form: || Some("/ABSOLUTE/PATH".to_string()),
        default: || None,
        unset: "`$TMPDIR`, else `/tmp`",
        set: |c, v| {
            c.mps.dir = Some(parse_root("mps_dir", v)?);
            Ok(())
        },
    },
    Key {
        name: "mps_share",
        form: || Some(names::<MpsShare>().join("|")),
        default: || Some(Config::default().mps.share.name().to_string()),
        unset: "",
        set: |c, v| {
            c.mps.share = named("mps_share", v)?;
            Ok(())
        },
    },
];

/// Every argument, for messages: `default=contiguous|..., flag=NAME, verbose`.
pub fn keys() -> String {
    KEYS.iter()
        .map(|key| match (key.form)() {
            Some(form) => format!("{}={form}", key.name),
            None => key.name.to_string(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Parses the plugstack arguments. Every key may appear once.
pub fn parse_args<S: AsRef<str>>(args: &[S]) -> Result<Config, Error> {
    let mut config = Config::default();
    let mut seen: Vec<&str> = Vec::new();
    for arg in args {
        let arg = arg.as_ref();
        let (key, value) = match arg.split_once('=') {
            Some((key, value)) => (key, Some(value)),
            None => (arg, None),
        };
        let bad = |why| Error::BadArgument {
            arg: arg.to_string(),
            why,
            valid: keys(),
        };
        if seen.contains(&key) {
            return Err(bad(ArgProblem::GivenTwice(key.to_string())));
        }
        apply(&mut config, key, value).map_err(bad)?;
        seen.push(key);
    }
    Ok(config)
}

/// Sets one argument: a known key, with a value exactly where it takes one.
fn apply(config: &mut Config, key: &str, value: Option<&str>) -> Result<(), ArgProblem> {
    let Some(known) = KEYS.iter().find(|k| k.name == key) else {
        return Err(ArgProblem::Unknown(key.to_string()));
    };
    match ((known.form)().is_some(), value) {
        (true, Some(value)) => (known.set)(config, value),
        (true, None) => Err(ArgProblem::NeedsValue(key.to_string())),
        (false, None) => (known.set)(config, ""),
        (false, Some(_)) => Err(ArgProblem::TakesNoValue(key.to_string())),
    }
}

/// A path argument (`kernel_root`, `mps_control`, `mps_dir`): absolute,
/// since slurmstepd's working directory is no place to search from.
fn parse_root(key: &'static str, value: &str) -> Result<std::path::PathBuf, ArgProblem> {
    let path = std::path::PathBuf::from(value);
    if path.is_absolute() {
        Ok(path)
    } else {
        Err(bad_value(key, value, "an absolute path".to_string()))
    }
}

/// A value outside what `key` accepts.
fn bad_value(key: &'static str, value: &str, expected: String) -> ArgProblem {
    ArgProblem::BadValue {
        key,
        value: value.to_string(),
        expected,
    }
}

/// One of `T`'s names, for the argument `key`.
fn named<T: Named + FromStr>(key: &'static str, value: &str) -> Result<T, ArgProblem> {
    value
        .parse()
        .map_err(|_| bad_value(key, value, one_of(&names::<T>())))
}

impl FromStr for NvmlSource {
    type Err = ArgProblem;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value {
            "auto" => Ok(NvmlSource::Auto),
            "off" => Ok(NvmlSource::Off),
            // Relative paths would be searched from slurmstepd's working directory.
            path if path.starts_with('/') => Ok(NvmlSource::Path(PathBuf::from(path))),
            _ => Err(bad_value(
                "nvml",
                value,
                "auto, off or an absolute library path".to_string(),
            )),
        }
    }
}

/// Whole seconds, so that the value reads the same in every message.
fn parse_nvml_timeout(value: &str) -> Result<Duration, ArgProblem> {
    match value.parse::<u64>() {
        Ok(secs) if NVML_TIMEOUT_RANGE_S.contains(&secs) => Ok(Duration::from_secs(secs)),
        _ => Err(bad_value(
            "nvml_timeout",
            value,
            format!(
                "whole seconds from {} to {}",
                NVML_TIMEOUT_RANGE_S.start(),
                NVML_TIMEOUT_RANGE_S.end()
            ),
        )),
    }
}

/// Longest flag name accepted.
const FLAG_MAX: usize = 64;

/// The flag is exported as `NAME=1` into every mapped task, so only a
/// conservative name is accepted: `PREFIX_REST` in upper-case letters,
/// digits and `_`, starting with a letter, with a prefix that no loader,
/// shell, runtime or Slurm reads ([`crate::env::flag_clash`]).
fn parse_flag(value: &str) -> Result<String, ArgProblem> {
    let mut chars = value.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_uppercase());
    let rest_ok = chars.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    let clash = crate::env::flag_clash(value);
    if !first_ok || !rest_ok || value.len() > FLAG_MAX || clash == Some(FlagClash::NoPrefix) {
        return Err(bad_value(
            "flag",
            value,
            format!(
                "an upper-case variable name PREFIX_NAME (A-Z, 0-9, _; starting with a \
                 letter; at most {FLAG_MAX} characters)"
            ),
        ));
    }
    match clash {
        Some(FlagClash::Reserved(prefix)) => Err(ArgProblem::ReservedFlag {
            name: value.to_string(),
            prefix,
        }),
        _ => Ok(value.to_string()),
    }
}

/// Refuses, before anything is allocated, what this site does not allow:
/// `mps` where plugstack.conf says `mps=off`, and `mps` beside a site
/// default of `none`.
pub fn check_request(request: &OptionRequest, config: &Config) -> Result<(), Error> {
    let OptionRequest::Use {
        choice, mps: true, ..
    } = request
    else {
        return Ok(());
    };
    if config.mps.mode == MpsMode::Off {
        return Err(Error::MpsOff);
    }
    if choice.unwrap_or(config.default) == Choice::Off {
        return Err(Error::MpsWithoutMethod);
    }
    Ok(())
}

/// The user's request where the plugin's option was not given and the
/// site's default would map the step: `DESI_GPU_MAP_METHOD` (`variable`),
/// which exec and the task prolog take as their `--method`, read by the
/// same parser, so that the site's method never replaces the user's
/// unsaid. `None`: nothing asked, and the site's default (or nothing)
/// applies. The option, where given, is the request, and a default of
/// `none` maps nothing the user did not ask with it.
pub(crate) fn request_from_variable(
    variable: Option<&str>,
    config: &Config,
) -> Option<Result<OptionRequest, Error>> {
    if config.default == Choice::Off {
        return None;
    }
    let value = variable?;
    Some(exec_request(value).map_err(|why| Error::MethodVariable {
        value: value.to_string(),
        why: Box::new(why),
    }))
}

/// What the plugin says, under `verbose`, where it took the request from
/// `DESI_GPU_MAP_METHOD` (`value`) over the site's default.
pub(crate) fn taken_from_variable(value: &str, config: &Config) -> String {
    format!(
        "{}={} asks for this step over the site's default={}",
        crate::env::METHOD,
        quote(value),
        config.default.name()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::Method;
    use crate::runtime::Vendor;

    #[test]
    fn the_users_method_variable_asks_only_where_the_site_default_would() {
        let none = Config::default();
        assert_eq!(request_from_variable(Some("roundrobin,mps"), &none), None);
        let site = parse_args(&["default=contiguous"]).unwrap();
        assert_eq!(request_from_variable(None, &site), None);
        let rr = Choice::Map(Method::RoundRobin);
        assert_eq!(
            request_from_variable(Some("roundrobin,mps,verbose"), &site),
            Some(Ok(OptionRequest::Use {
                choice: Some(rr),
                verbose: true,
                mps: true
            }))
        );
        // The user's none wins over the site's method too.
        assert_eq!(
            request_from_variable(Some("none"), &site),
            Some(Ok(OptionRequest::Use {
                choice: Some(Choice::Off),
                verbose: false,
                mps: false
            }))
        );
        // A typo, or bytes that were not UTF-8 (U+FFFD), is named.
        for bad in ["nearest", "roundrobin,mps\u{fffd}", "help", ""] {
            let err = request_from_variable(Some(bad), &site)
                .unwrap()
                .unwrap_err();
            let said = err.to_string();
            assert!(said.starts_with("DESI_GPU_MAP_METHOD=\""), "{said}");
            assert!(said.contains("valid values: contiguous"), "{said}");
        }
        assert_eq!(
            taken_from_variable("roundrobin,mps", &site),
            "DESI_GPU_MAP_METHOD=\"roundrobin,mps\" asks for this step over the site's \
             default=contiguous"
        );
    }

    #[test]
    fn defaults_without_arguments() {
        let none: [&str; 0] = [];
        assert_eq!(parse_args(&none), Ok(Config::default()));
        let c = Config::default();
        assert_eq!(c.default, Choice::Off);
        assert_eq!(c.flag, "DESI_GPU_MAPPED");
        assert_eq!(c.visible, Visible::Single);
        assert_eq!(c.nvml, NvmlSource::Auto);
        assert_eq!(c.nvml_timeout, Duration::from_secs(10));
        assert_eq!(c.vendor, VendorSetting::Auto);
        assert!(!c.verbose);
    }

    #[test]
    fn nvml_sources_read_back_as_written() {
        for written in ["auto", "off", "/opt/nvidia/libnvidia-ml.so.1"] {
            let source: NvmlSource = written.parse().unwrap();
            assert_eq!(source.to_string(), written);
        }
    }

    #[test]
    fn every_argument() {
        let c = parse_args(&[
            "default=roundrobin",
            "flag=MY_FLAG",
            "visible=rotate",
            "nvml=/opt/nvidia/lib/libnvidia-ml.so.1",
            "untracked=whole-node",
            "vendor=amd",
            "verbose",
        ])
        .unwrap();
        assert_eq!(c.untracked, Untracked::WholeNode);
        assert_eq!(
            parse_args(&["untracked=ignore"]).unwrap().untracked,
            Untracked::Ignore
        );
        assert_eq!(c.default, Choice::Map(Method::RoundRobin));
        assert_eq!(c.flag, "MY_FLAG");
        assert_eq!(c.visible, Visible::Rotate);
        assert_eq!(
            c.nvml,
            NvmlSource::Path(PathBuf::from("/opt/nvidia/lib/libnvidia-ml.so.1"))
        );
        assert_eq!(c.vendor, VendorSetting::Fixed(Vendor::Amd));
        assert!(c.verbose);
        for (value, want) in [
            ("auto", VendorSetting::Auto),
            ("nvidia", VendorSetting::Fixed(Vendor::Nvidia)),
            ("intel", VendorSetting::Fixed(Vendor::Intel)),
        ] {
            assert_eq!(
                parse_args(&[format!("vendor={value}")]).unwrap().vendor,
                want
            );
        }
        assert_eq!(
            parse_args(&["default=contiguous"]).unwrap().default,
            Choice::Map(Method::Contiguous)
        );
        assert_eq!(
            parse_args(&["default=round-robin"]).unwrap().default,
            Choice::Map(Method::RoundRobin)
        );
        assert_eq!(parse_args(&["default=none"]).unwrap().default, Choice::Off);
        assert_eq!(parse_args(&["nvml=off"]).unwrap().nvml, NvmlSource::Off);
        assert_eq!(parse_args(&["nvml=auto"]).unwrap().nvml, NvmlSource::Auto);
        assert_eq!(
            parse_args(&["visible=single"]).unwrap().visible,
            Visible::Single
        );
    }

    /// Why `arg` alone is refused.
    fn problem(arg: &str) -> ArgProblem {
        match parse_args(&[arg]) {
            Err(Error::BadArgument {
                arg: named, why, ..
            }) if named == arg => why,
            other => panic!("{arg}: {other:?}"),
        }
    }

    #[test]
    fn errors_name_the_argument_and_the_cause() {
        for (arg, key) in [("defualt=contiguous", "defualt"), ("", ""), ("x=1", "x")] {
            assert_eq!(problem(arg), ArgProblem::Unknown(key.to_string()), "{arg}");
        }
        for key in [
            "default",
            "flag",
            "untracked",
            "vendor",
            "nvml",
            "nvml_timeout",
        ] {
            assert_eq!(problem(key), ArgProblem::NeedsValue(key.to_string()));
        }
        assert_eq!(
            problem("verbose=yes"),
            ArgProblem::TakesNoValue("verbose".to_string())
        );
        for (arg, want_key, want_value) in [
            ("default=contigous", "default", "contigous"),
            ("default=", "default", ""),
            ("visible=all", "visible", "all"),
            ("nvml=lib/libnvidia-ml.so", "nvml", "lib/libnvidia-ml.so"),
            ("nvml=", "nvml", ""),
            ("flag=1BAD", "flag", "1BAD"),
            ("flag=A-B", "flag", "A-B"),
            ("flag=", "flag", ""),
            ("flag=lower_case", "flag", "lower_case"),
            ("flag=_LEADING", "flag", "_LEADING"),
            ("flag=PATH", "flag", "PATH"),
            ("flag=PYTHONHOME", "flag", "PYTHONHOME"),
            ("flag=LOCPATH", "flag", "LOCPATH"),
            ("flag=HOSTALIASES", "flag", "HOSTALIASES"),
            ("flag=MYFLAG_", "flag", "MYFLAG_"),
            ("untracked=yes", "untracked", "yes"),
            ("vendor=AMD", "vendor", "AMD"),
            ("vendor=", "vendor", ""),
            ("nvml_timeout=0", "nvml_timeout", "0"),
        ] {
            match problem(arg) {
                ArgProblem::BadValue { key, value, .. } => {
                    assert_eq!((key, value.as_str()), (want_key, want_value), "{arg}")
                }
                other => panic!("{arg}: {other:?}"),
            }
        }
        for (name, prefix) in [
            ("POSIXLY_CORRECT", "POSIXLY_"),
            ("FI_PROVIDER", "FI_"),
            ("UCX_TLS", "UCX_"),
            ("MV2_ENABLE_AFFINITY", "MV2_"),
            ("GCONV_PATH", "GCONV_"),
            ("I_MPI_PIN", "I_"),
            ("PMIX_RANK", "PMIX_"),
            ("DESI_GPU_MAP_METHOD", "DESI_GPU_MAP_"),
            ("DESI_GPU_MAP_X", "DESI_GPU_MAP_"),
        ]
        .into_iter()
        .chain(
            [
                "CUDA_VISIBLE_DEVICES",
                "LD_AUDIT",
                "LD_BIND_NOW",
                "BASH_ENV",
                "MALLOC_CHECK_",
                "GLIBC_TUNABLES",
                "HIP_VISIBLE_DEVICES",
                "CUDA_LAUNCH_BLOCKING",
                "SLURM_CPU_BIND",
            ]
            .map(|name| (name, name.split('_').next().unwrap())),
        ) {
            let prefix = format!("{}_", prefix.trim_end_matches('_'));
            assert_eq!(
                problem(&format!("flag={name}")),
                ArgProblem::ReservedFlag {
                    name: name.to_string(),
                    prefix
                },
                "{name}"
            );
        }
        for name in [
            "DESI_GPU_MAPPED",
            "MY_FLAG",
            "DESI_MAPPED",
            "NERSC_GPU_BOUND",
        ] {
            assert_eq!(parse_flag(name), Ok(name.to_string()));
        }
    }

    #[test]
    fn each_cause_in_words() {
        for (arg, want) in [
            ("defualt=contiguous", "unknown argument \"defualt\""),
            ("default", "default needs a value (default=...)"),
            ("verbose=yes", "verbose takes no value"),
            (
                "visible=all",
                "visible must be single or rotate, not \"all\"",
            ),
            (
                "nvml=lib",
                "nvml must be auto, off or an absolute library path, not \"lib\"",
            ),
            (
                "untracked=yes",
                "untracked must be ignore or whole-node, not \"yes\"",
            ),
            (
                "vendor=AMD",
                "vendor must be auto, nvidia, amd or intel, not \"AMD\"",
            ),
            (
                "flag=1BAD",
                "flag must be an upper-case variable name PREFIX_NAME (A-Z, 0-9, _; starting \
                 with a letter; at most 64 characters), not \"1BAD\"",
            ),
            (
                "flag=PYTHON_X",
                "flag must not be PYTHON_X: names beginning with PYTHON_ are read by Slurm, a \
                 loader, the C library, a shell, MPI or a GPU runtime, or are the plugin's own; \
                 use a prefix of your project's, as in DESI_GPU_MAPPED",
            ),
        ] {
            assert_eq!(problem(arg).to_string(), want);
        }
    }

    #[test]
    fn nvml_timeout_takes_whole_seconds_from_1_to_30() {
        for (value, secs) in [("1", 1), ("2", 2), ("10", 10), ("30", 30)] {
            let c = parse_args(&[format!("nvml_timeout={value}")]).unwrap();
            assert_eq!(c.nvml_timeout, Duration::from_secs(secs), "{value}");
        }
        for value in [
            "0",
            "31",
            "90",
            "300",
            "0.5",
            "-1",
            "",
            "10s",
            "1e3",
            "99999999999999999999",
        ] {
            let arg = format!("nvml_timeout={value}");
            let msg = parse_args(&[arg.as_str()]).unwrap_err().to_string();
            assert!(
                msg.contains(&format!(
                    "nvml_timeout must be whole seconds from 1 to 30, not \"{value}\""
                )),
                "{msg}"
            );
            assert!(msg.contains("nvml_timeout=1..30,"), "{msg}");
        }
        assert_eq!(
            problem("nvml_timeout"),
            ArgProblem::NeedsValue("nvml_timeout".to_string())
        );
    }

    #[test]
    fn mps_keys_parse_and_name_the_bad_value() {
        let c = parse_args(&[
            "mps=auto",
            "mps_control=/opt/nv/nvidia-cuda-mps-control",
            "mps_dir=/scratch/mps",
            "mps_share=even",
        ])
        .unwrap();
        assert_eq!(c.mps.mode, MpsMode::Auto);
        assert_eq!(c.mps.share, MpsShare::Even);
        assert_eq!(
            c.mps.control.unwrap(),
            PathBuf::from("/opt/nv/nvidia-cuda-mps-control")
        );
        assert_eq!(c.mps.dir.unwrap(), PathBuf::from("/scratch/mps"));
        let d = Config::default();
        assert_eq!(
            (d.mps.mode, d.mps.share, d.mps.control, d.mps.dir),
            (MpsMode::Allow, MpsShare::None, None, None)
        );
        for (arg, want) in [
            ("mps=on", "mps must be off, allow or auto, not \"on\""),
            (
                "mps_share=half",
                "mps_share must be even or none, not \"half\"",
            ),
            (
                "mps_dir=tmp",
                "mps_dir must be an absolute path, not \"tmp\"",
            ),
            (
                "mps_control=bin/x",
                "mps_control must be an absolute path, not \"bin/x\"",
            ),
        ] {
            let err = parse_args(&[arg]).unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        }
    }

    #[test]
    fn the_message_lists_every_argument() {
        let err = parse_args(&["default=x"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "bad plugstack argument \"default=x\": default must be contiguous, roundrobin, closest or \
             none, not \"x\"; valid arguments: default=contiguous|roundrobin|closest|none, flag=NAME, \
             visible=single|rotate, nvml=auto|off|/ABSOLUTE/PATH, nvml_timeout=1..30, \
             untracked=ignore|whole-node, vendor=auto|nvidia|amd|intel, verbose, \
             kernel_root=/ABSOLUTE/PATH, mps=off|allow|auto, mps_control=/ABSOLUTE/PATH, \
             mps_dir=/ABSOLUTE/PATH, mps_share=even|none"
        );
        let err = parse_args(&["kernel_root=tmp"]).unwrap_err();
        assert!(
            err.to_string()
                .contains("kernel_root must be an absolute path, not \"tmp\""),
            "{err}"
        );
        let c = parse_args(&["kernel_root=/tmp/fake"]).unwrap();
        assert_eq!(c.kernel_root, std::path::PathBuf::from("/tmp/fake"));
        assert_eq!(Config::default().kernel_root, std::path::PathBuf::from("/"));
    }

    #[test]
    fn a_key_given_twice_is_an_error() {
        let err = parse_args(&["default=contiguous", "default=none"]).unwrap_err();
        assert_eq!(
            err,
            Error::BadArgument {
                arg: "default=none".to_string(),
                why: ArgProblem::GivenTwice("default".to_string()),
                valid: keys(),
            }
        );
        assert!(
            err.to_string().contains("\"default\" is given twice"),
            "{err}"
        );
    }

    #[test]
    fn mps_requests_meet_the_site_settings() {
        let parse_option = crate::settings::option::parse_option;
        let site = parse_args;
        let asked = parse_option("contiguous,mps").unwrap();
        assert_eq!(
            check_request(&asked, &site(&["mps=off"]).unwrap()),
            Err(Error::MpsOff)
        );
        assert!(check_request(&asked, &site(&["mps=auto"]).unwrap()).is_ok());
        let alone = parse_option("mps").unwrap();
        let none = Config::default();
        assert_eq!(check_request(&alone, &none), Err(Error::MpsWithoutMethod));
        let with_default = site(&["default=roundrobin"]).unwrap();
        assert!(check_request(&alone, &with_default).is_ok());
        assert!(check_request(&parse_option("contiguous").unwrap(), &none).is_ok());
    }
}
