//! NVML for the static build (glibc's crt-static, Cargo.toml), installed as
//! `desi-gpu-map` and `desi-gpu-map-prolog`: glibc loads a library into a
//! static program only where the machine's C library is the very one it
//! was linked with, and then as a second copy beside its own, so the
//! static build never loads NVML. Where its answer needs NVML, it hands the
//! whole run over to the dynamic build, which starts afresh with the same
//! arguments, environment and process: nothing was said or changed before
//! NVML is asked (a decision only reads). The dynamic build asks NVML
//! itself.

use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Whether this build is linked statically.
pub const STATIC: bool = cfg!(target_feature = "crt-static");

/// The dynamic build's name, in both places it is looked for.
const DYNAMIC: &str = env!("CARGO_PKG_NAME");

/// Replaces this process with the dynamic build, given this one's
/// arguments and the caller's signal dispositions; returns only why it
/// could not.
pub fn to_dynamic() -> String {
    let dynamic = match std::env::current_exe() {
        Ok(exe) => match dynamic_build(&exe) {
            Some(dynamic) => dynamic,
            None => {
                return format!(
                    "cannot find the dynamic {DYNAMIC} that asks NVML: neither {} nor {} \
                     (make install puts it in the first)",
                    installed(&exe).display(),
                    beside(&exe).display()
                )
            }
        },
        Err(e) => return format!("cannot find the {DYNAMIC} that asks NVML: {e}"),
    };
    let mut command = Command::new(&dynamic);
    command.args(std::env::args_os().skip(1));
    crate::edge::signals::keep_callers(&mut command);
    let e = command.exec();
    format!("cannot run {} to ask NVML: {e}", dynamic.display())
}

/// The dynamic build for the static one at `exe`: where `make install`
/// puts it (`PREFIX/libexec/desi-gpu-map/`, the static one being
/// `PREFIX/bin/desi-gpu-map`), else beside it under its own name (the
/// build tree, `target/release/`), unless that is `exe` itself.
fn dynamic_build(exe: &Path) -> Option<PathBuf> {
    let same_file = |a: &Path, b: &Path| match (a.metadata(), b.metadata()) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    };
    [installed(exe), beside(exe)]
        .into_iter()
        .find(|path| path.is_file() && !same_file(path, exe))
}

fn installed(exe: &Path) -> PathBuf {
    let bin = exe.parent().unwrap_or(Path::new("/"));
    bin.join("../libexec").join(DYNAMIC).join(DYNAMIC)
}

fn beside(exe: &Path) -> PathBuf {
    exe.with_file_name(DYNAMIC)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Installed, the static build finds the dynamic one in libexec; in
    /// the build tree, beside it; and never itself, which would exec
    /// itself for ever.
    #[test]
    fn the_dynamic_build_is_found_where_it_is_installed_and_never_is_the_caller() {
        let dir = std::env::temp_dir().join(format!("dgm-handover-{}", std::process::id()));
        let bin = dir.join("bin");
        let libexec = dir.join("libexec").join(DYNAMIC);
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&libexec).unwrap();
        let installed_static = bin.join(DYNAMIC);
        std::fs::write(&installed_static, "static").unwrap();
        // Only the static one: nothing to hand over to.
        assert_eq!(dynamic_build(&installed_static), None);
        std::fs::write(libexec.join(DYNAMIC), "dynamic").unwrap();
        let found = dynamic_build(&installed_static).unwrap();
        assert_eq!(std::fs::read_to_string(found).unwrap(), "dynamic");
        // The build tree: the static build under its own name, the
        // dynamic one beside it.
        let tree = dir.join("target/release");
        std::fs::create_dir_all(&tree).unwrap();
        let prolog = tree.join("desi-gpu-map-prolog");
        std::fs::write(&prolog, "static").unwrap();
        std::fs::write(tree.join(DYNAMIC), "dynamic").unwrap();
        assert_eq!(dynamic_build(&prolog), Some(tree.join(DYNAMIC)));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
