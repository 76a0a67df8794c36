//! The node's real files, through [`Files`].

use desi_gpu_map_core::files::{Files, Stat, MAX_FILE};
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The machine's own file system.
pub struct HostFiles;

impl Files for HostFiles {
    fn read(&self, path: &Path) -> io::Result<String> {
        let mut text = String::new();
        std::fs::File::open(path)?
            .take(MAX_FILE)
            .read_to_string(&mut text)?;
        Ok(text)
    }

    fn list(&self, dir: &Path, most: usize) -> io::Result<Vec<String>> {
        std::fs::read_dir(dir)?
            .take(most)
            .map(|entry| entry.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect()
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn stat(&self, path: &Path) -> io::Result<Stat> {
        let meta = std::fs::metadata(path)?;
        Ok(Stat {
            uid: meta.uid(),
            mode: meta.mode() & 0o7777,
            is_dir: meta.is_dir(),
        })
    }

    fn resolve(&self, path: &Path) -> io::Result<PathBuf> {
        std::fs::canonicalize(path)
    }
}
