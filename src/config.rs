//! The site's plugstack arguments: `key=value` words after the plugin path
//! on its `plugstack.conf` line.

use crate::error::{quote, Error};
use crate::method::{Choice, Method};
use crate::vendor::{parse_vendor, VendorSetting};
use std::path::PathBuf;
use std::time::Duration;

/// How much of the node's GPU list a task keeps visible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visible {
    /// Only the task's own GPU.
    Single,
    /// All of the step's GPUs, the task's own first, the rest wrapping round,
    /// so that peers stay reachable for CUDA IPC.
    Rotate,
}

impl Visible {
    pub fn name(self) -> &'static str {
        match self {
            Visible::Single => "single",
            Visible::Rotate => "rotate",
        }
    }
}

/// Where NVML comes from, for steps in which Slurm names no GPU list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NvmlSource {
    /// `libnvidia-ml.so.1` from the loader's search path.
    Auto,
    /// Never load NVML.
    Off,
    /// This library file (an absolute path from plugstack.conf only).
    Path(PathBuf),
}

/// What to do where Slurm tracks no GPUs for a step (no GPU GRES).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Untracked {
    /// Such a step has no GPUs: it is left alone.
    Ignore,
    /// Every GPU NVML finds belongs to the step: right only on sites
    /// without GPU GRES whose GPU jobs hold their nodes whole.
    WholeNode,
}

/// The site configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub default: Choice,
    pub flag: String,
    pub visible: Visible,
    pub nvml: NvmlSource,
    pub untracked: Untracked,
    /// How long NVML discovery may take before the step stands aside.
    pub nvml_timeout: Duration,
    /// Whose runtime reads the GPU lists on the node (see `vendor`).
    pub vendor: VendorSetting,
    pub verbose: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            default: Choice::Off,
            flag: DEFAULT_FLAG.to_string(),
            visible: Visible::Single,
            nvml: NvmlSource::Auto,
            untracked: Untracked::Ignore,
            nvml_timeout: Duration::from_secs(DEFAULT_NVML_TIMEOUT_S),
            vendor: VendorSetting::Auto,
            verbose: false,
        }
    }
}

pub const DEFAULT_FLAG: &str = "DESI_GPU_MAPPED";

/// NVML discovery's deadline, in whole seconds: the default and the range.
pub const DEFAULT_NVML_TIMEOUT_S: u64 = 10;
const NVML_TIMEOUT_RANGE_S: std::ops::RangeInclusive<u64> = 1..=300;

const KEYS: &str = "default=contiguous|roundrobin|none, flag=NAME, visible=single|rotate, \
nvml=auto|off|/ABSOLUTE/PATH, nvml_timeout=1..300, untracked=ignore|whole-node, \
vendor=auto|nvidia|amd|intel, verbose";

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
        if seen.contains(&key) {
            return Err(arg_error(arg, &format!("{} is given twice", quote(key))));
        }
        apply(&mut config, key, value).map_err(|why| arg_error(arg, &why))?;
        seen.push(key);
    }
    Ok(config)
}

fn apply(config: &mut Config, key: &str, value: Option<&str>) -> Result<(), String> {
    match (key, value) {
        ("default", Some(v)) => config.default = parse_default(v)?,
        ("flag", Some(v)) => config.flag = parse_flag(v)?,
        ("visible", Some(v)) => config.visible = parse_visible(v)?,
        ("nvml", Some(v)) => config.nvml = parse_nvml(v)?,
        ("untracked", Some(v)) => config.untracked = parse_untracked(v)?,
        ("vendor", Some(v)) => config.vendor = parse_vendor(v)?,
        ("nvml_timeout", Some(v)) => config.nvml_timeout = parse_nvml_timeout(v)?,
        ("nvml_timeout", None) => {
            return Err("nvml_timeout needs a value (nvml_timeout=...)".to_string())
        }
        ("verbose", None) => config.verbose = true,
        ("verbose", Some(_)) => return Err("verbose takes no value".to_string()),
        ("default" | "flag" | "visible" | "nvml" | "untracked" | "vendor", None) => {
            return Err(format!("{key} needs a value ({key}=...)"))
        }
        _ => return Err(format!("unknown argument {}", quote(key))),
    }
    Ok(())
}

fn arg_error(arg: &str, why: &str) -> Error {
    Error::new(format!(
        "bad plugstack argument {}: {why}; valid arguments: {KEYS}",
        quote(arg)
    ))
}

fn parse_default(value: &str) -> Result<Choice, String> {
    match value {
        "contiguous" => Ok(Choice::Map(Method::Contiguous)),
        "roundrobin" | "round-robin" => Ok(Choice::Map(Method::RoundRobin)),
        "none" => Ok(Choice::Off),
        _ => Err(format!(
            "default must be contiguous, roundrobin or none, not {}",
            quote(value)
        )),
    }
}

fn parse_visible(value: &str) -> Result<Visible, String> {
    match value {
        "single" => Ok(Visible::Single),
        "rotate" => Ok(Visible::Rotate),
        _ => Err(format!(
            "visible must be single or rotate, not {}",
            quote(value)
        )),
    }
}

fn parse_nvml(value: &str) -> Result<NvmlSource, String> {
    match value {
        "auto" => Ok(NvmlSource::Auto),
        "off" => Ok(NvmlSource::Off),
        // Relative paths would be searched from slurmstepd's working directory.
        path if path.starts_with('/') => Ok(NvmlSource::Path(PathBuf::from(path))),
        _ => Err(format!(
            "nvml must be auto, off or an absolute library path, not {}",
            quote(value)
        )),
    }
}

fn parse_untracked(value: &str) -> Result<Untracked, String> {
    match value {
        "ignore" => Ok(Untracked::Ignore),
        "whole-node" => Ok(Untracked::WholeNode),
        _ => Err(format!(
            "untracked must be ignore or whole-node, not {}",
            quote(value)
        )),
    }
}

/// Whole seconds, so that the value reads the same in every message.
fn parse_nvml_timeout(value: &str) -> Result<Duration, String> {
    match value.parse::<u64>() {
        Ok(secs) if NVML_TIMEOUT_RANGE_S.contains(&secs) => Ok(Duration::from_secs(secs)),
        _ => Err(format!(
            "nvml_timeout must be whole seconds from {} to {}, not {}",
            NVML_TIMEOUT_RANGE_S.start(),
            NVML_TIMEOUT_RANGE_S.end(),
            quote(value)
        )),
    }
}

/// Longest flag name accepted.
const FLAG_MAX: usize = 64;

/// The flag is exported as `NAME=1` into every mapped task, so only a
/// conservative name is accepted: upper-case letters, digits and `_`,
/// starting with a letter, and none that a loader, shell, runtime or Slurm
/// reads (`LD_AUDIT=1` would make every task print a loader error).
fn parse_flag(value: &str) -> Result<String, String> {
    let mut chars = value.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_uppercase());
    let rest_ok = chars.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    if !first_ok || !rest_ok || value.len() > FLAG_MAX {
        return Err(format!(
            "flag must be an upper-case variable name (A-Z, 0-9, _; starting with a letter; \
             at most {FLAG_MAX} characters), not {}",
            quote(value)
        ));
    }
    if crate::env::is_reserved(value) {
        return Err(format!(
            "flag must not be {value}, a variable that Slurm, a loader, a shell or a GPU runtime reads"
        ));
    }
    Ok(value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vendor::Vendor;

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

    #[test]
    fn errors_name_the_argument_and_the_choices() {
        let cases = [
            ("defualt=contiguous", "unknown argument \"defualt\""),
            ("default=contigous", "not \"contigous\""),
            ("default=", "not \"\""),
            ("default", "default needs a value"),
            ("visible=all", "visible must be single or rotate"),
            ("nvml=lib/libnvidia-ml.so", "absolute library path"),
            ("nvml=", "absolute library path"),
            ("flag=1BAD", "upper-case variable name"),
            ("flag=A-B", "upper-case variable name"),
            ("flag=", "upper-case variable name"),
            ("flag=CUDA_VISIBLE_DEVICES", "must not be"),
            ("flag=PATH", "must not be PATH"),
            ("flag=LD_AUDIT", "must not be LD_AUDIT"),
            ("flag=LD_BIND_NOW", "must not be"),
            ("flag=BASH_ENV", "must not be"),
            ("flag=MALLOC_CHECK_", "must not be"),
            ("flag=GLIBC_TUNABLES", "must not be"),
            ("flag=HIP_VISIBLE_DEVICES", "must not be"),
            ("flag=CUDA_LAUNCH_BLOCKING", "must not be"),
            ("flag=SLURM_CPU_BIND", "must not be"),
            ("flag=lower_case", "upper-case variable name"),
            ("flag=_LEADING", "upper-case variable name"),
            ("untracked=yes", "untracked must be ignore or whole-node"),
            ("untracked", "untracked needs a value"),
            ("verbose=yes", "verbose takes no value"),
            (
                "vendor=AMD",
                "vendor must be auto, nvidia, amd or intel, not \"AMD\"",
            ),
            ("vendor=", "vendor must be auto, nvidia, amd or intel"),
            ("vendor", "vendor needs a value"),
            ("", "unknown argument \"\""),
        ];
        for (arg, want) in cases {
            let err = parse_args(&[arg]).expect_err(arg);
            let msg = err.message();
            assert!(msg.contains(want), "{arg}: {msg}");
            assert!(msg.starts_with("bad plugstack argument"), "{msg}");
            assert!(msg.contains("valid arguments: default="), "{msg}");
        }
    }

    #[test]
    fn nvml_timeout_takes_whole_seconds_from_1_to_300() {
        for (value, secs) in [("1", 1), ("2", 2), ("10", 10), ("300", 300)] {
            let c = parse_args(&[format!("nvml_timeout={value}")]).unwrap();
            assert_eq!(c.nvml_timeout, Duration::from_secs(secs), "{value}");
        }
        for value in [
            "0",
            "301",
            "0.5",
            "-1",
            "",
            "10s",
            "1e3",
            "99999999999999999999",
        ] {
            let arg = format!("nvml_timeout={value}");
            let msg = parse_args(&[arg.as_str()])
                .unwrap_err()
                .message()
                .to_string();
            assert!(
                msg.contains(&format!(
                    "nvml_timeout must be whole seconds from 1 to 300, not \"{value}\""
                )),
                "{msg}"
            );
            assert!(msg.contains("nvml_timeout=1..300"), "{msg}");
        }
        let msg = parse_args(&["nvml_timeout"]).unwrap_err();
        assert!(
            msg.message().contains("nvml_timeout needs a value"),
            "{msg}"
        );
    }

    #[test]
    fn a_key_given_twice_is_an_error() {
        let err = parse_args(&["default=contiguous", "default=none"]).unwrap_err();
        assert!(err.message().contains("given twice"), "{err}");
    }
}
