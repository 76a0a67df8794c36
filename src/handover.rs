//! NVML for the static build, `desi-gpu-map-prolog` (glibc's crt-static,
//! Cargo.toml): glibc loads a library into a static program only where the
//! machine's C library is the very one it was linked with, and then as a
//! second copy beside its own, so the static build never loads NVML.
//! Where its answer needs NVML, it hands the whole run over to the dynamic
//! `desi-gpu-map` beside it, which starts afresh with the same arguments,
//! environment and process: nothing was said or changed before NVML is
//! asked (a decision only reads). The dynamic build asks NVML itself.

use std::os::unix::process::CommandExt;
use std::process::Command;

/// Whether this build is linked statically.
pub const STATIC: bool = cfg!(target_feature = "crt-static");

/// The static build's name (Cargo.toml).
#[allow(dead_code)] // the static root's alone (src/main_static.rs)
pub const STATIC_NAME: &str = "desi-gpu-map-prolog";

/// Replaces this process with the dynamic command beside it, given this
/// one's arguments and the caller's signal dispositions; returns only why
/// it could not.
pub fn to_dynamic() -> String {
    let dynamic = match std::env::current_exe() {
        Ok(exe) => exe.with_file_name(env!("CARGO_PKG_NAME")),
        Err(e) => {
            return format!(
                "cannot find the {} that asks NVML: {e}",
                env!("CARGO_PKG_NAME")
            )
        }
    };
    let mut command = Command::new(&dynamic);
    command.args(std::env::args_os().skip(1));
    crate::edge::signals::keep_callers(&mut command);
    let e = command.exec();
    format!("cannot run {} to ask NVML: {e}", dynamic.display())
}
