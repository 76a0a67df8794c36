//! Where `tests/desi/fetch.sh` installed desispec 0.70.0 and desiutil
//! 4.0.1 (it needs PyPI once, as root): one place for the two test
//! binaries that run desispec, `tests/cluster/desi.rs` and
//! `tests/contrib.rs` (each includes this file by path).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The folder holding `desispec/` and `desiutil/`, fetched on first use;
/// the test fails, never skips, where that cannot be done.
pub fn installed() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/desi/fetch.sh");
        let out = std::process::Command::new("bash")
            .arg(&script)
            .output()
            .expect("run tests/desi/fetch.sh");
        assert!(
            out.status.success(),
            "tests/desi/fetch.sh failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        assert!(
            dir.join("desispec/gpu.py").is_file(),
            "fetch.sh printed {}, which has no desispec/gpu.py",
            dir.display()
        );
        dir
    })
}
