//! The site's plugstack arguments: `key=value` words after the plugin path
//! on its `plugstack.conf` line.

use crate::error::{quote, Error};
use crate::method::{Choice, Method};
use crate::vendor::{parse_vendor, VendorSetting};
use std::path::PathBuf;

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

/// The site configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub default: Choice,
    pub flag: String,
    pub visible: Visible,
    pub nvml: NvmlSource,
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
            vendor: VendorSetting::Auto,
            verbose: false,
        }
    }
}

pub const DEFAULT_FLAG: &str = "DESI_GPU_MAPPED";

const KEYS: &str = "default=contiguous|roundrobin|none, flag=NAME, visible=single|rotate, \
nvml=auto|off|/ABSOLUTE/PATH, vendor=auto|nvidia|amd|intel, verbose";

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
        ("vendor", Some(v)) => config.vendor = parse_vendor(v)?,
        ("verbose", None) => config.verbose = true,
        ("verbose", Some(_)) => return Err("verbose takes no value".to_string()),
        ("default" | "flag" | "visible" | "nvml" | "vendor", None) => {
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

/// The flag is exported into the task's environment: it must be a valid
/// variable name, and must not clobber a variable Slurm or CUDA relies on.
fn parse_flag(value: &str) -> Result<String, String> {
    let mut chars = value.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !first_ok || !rest_ok || value.len() > 128 {
        return Err(format!(
            "flag must be an environment variable name (letters, digits, _; not starting with a digit), not {}",
            quote(value)
        ));
    }
    if crate::env::is_reserved(value) {
        return Err(format!("flag must not be the reserved variable {value}"));
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
            "vendor=amd",
            "verbose",
        ])
        .unwrap();
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
            ("flag=1BAD", "environment variable name"),
            ("flag=A-B", "environment variable name"),
            ("flag=", "environment variable name"),
            ("flag=CUDA_VISIBLE_DEVICES", "reserved"),
            ("flag=PATH", "reserved"),
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
    fn a_key_given_twice_is_an_error() {
        let err = parse_args(&["default=contiguous", "default=none"]).unwrap_err();
        assert!(err.message().contains("given twice"), "{err}");
    }
}
