//! Reads SLURM_VERSION_NUMBER from the target Slurm's `slurm_version.h`:
//! Slurm loads a SPANK plugin only when its `plugin_version` names the same
//! release series, so the `.so` is built for one series.

use std::env;
use std::fs;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    let include = env::var_os("SLURM_INCLUDE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/include"));
    let header = include.join("slurm").join("slurm_version.h");
    println!("cargo:rerun-if-changed={}", header.display());
    let text = match fs::read_to_string(&header) {
        Ok(text) => text,
        Err(e) => fail(&format!(
            "cannot read {}: {e}.\n  Install Slurm's development headers for the Slurm you run \
             (Debian/Ubuntu: apt-get install libslurm-dev; RHEL family: dnf install slurm-devel),\n  \
             or set SLURM_INCLUDE_DIR to the directory that holds slurm/slurm_version.h.",
            header.display()
        )),
    };
    let Some(number) = version_number(&text) else {
        fail(&format!(
            "{} defines no SLURM_VERSION_NUMBER",
            header.display()
        ))
    };
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap_or_default()).join("slurm_version.rs");
    let code = format!(
        "/// SLURM_VERSION_NUMBER of the Slurm this plugin was built for ({}).\n\
         pub const SLURM_VERSION_NUMBER: u32 = {number:#08x};\n",
        header.display()
    );
    if let Err(e) = fs::write(&out, code) {
        fail(&format!("cannot write {}: {e}", out.display()));
    }
}

/// The value of `#define SLURM_VERSION_NUMBER 0x160508`.
fn version_number(header: &str) -> Option<u32> {
    header.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some("#define"), Some("SLURM_VERSION_NUMBER"), Some(value)) => {
                let hex = value
                    .strip_prefix("0x")
                    .or_else(|| value.strip_prefix("0X"))?;
                u32::from_str_radix(hex, 16).ok()
            }
            _ => None,
        }
    })
}

fn fail(message: &str) -> ! {
    eprintln!("error: desi-gpu-map-spank build: {message}");
    std::process::exit(1);
}
