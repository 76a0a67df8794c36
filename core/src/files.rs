//! The one way the core reads the node's kernel files (`/proc`, `/sys`,
//! `/dev`): through [`Files`], which a front end implements. The core
//! itself opens nothing, so every rule over those files runs on a fake
//! tree in tests.

use std::io;
use std::path::{Path, PathBuf};

/// The longest file the core reads: sysfs and procfs files hold a few bytes.
pub const MAX_FILE: u64 = 65_536;

/// The node's files. Paths come joined to their root (`/`, or the site's
/// `kernel_root`).
pub trait Files {
    /// The text of `path`, at most [`MAX_FILE`] bytes of it.
    fn read(&self, path: &Path) -> io::Result<String>;
    /// The names of the entries of the folder `dir`, at most `most` of them
    /// (read lazily: a folder may be huge).
    fn list(&self, dir: &Path, most: usize) -> io::Result<Vec<String>>;
    /// Whether `path` exists.
    fn exists(&self, path: &Path) -> bool;
    /// Who owns `path` (followed if a link) and its mode.
    fn stat(&self, path: &Path) -> io::Result<Stat>;
    /// The file `path` names, every link on the way followed (realpath(3)).
    fn resolve(&self, path: &Path) -> io::Result<PathBuf>;
}

/// This host's name, as the kernel gives it (per UTS namespace).
pub(crate) fn hostname(files: &dyn Files) -> Option<String> {
    let name = files.read(Path::new(crate::env::HOSTNAME_FILE)).ok()?;
    Some(name.trim().to_string()).filter(|n| !n.is_empty())
}

/// A file's owner and mode, as stat(2) gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// The owner's uid.
    pub uid: u32,
    /// The permission bits, with set-id and sticky (`0o7777`).
    pub mode: u32,
    /// It is a directory.
    pub is_dir: bool,
}

/// No files at all: every read fails as a missing file does.
pub(crate) struct NoFiles;

/// `ENOENT`, as the kernel reports a missing file.
const NO_SUCH_FILE: i32 = 2;

impl Files for NoFiles {
    fn read(&self, _: &Path) -> io::Result<String> {
        Err(io::Error::from_raw_os_error(NO_SUCH_FILE))
    }

    fn list(&self, _: &Path, _: usize) -> io::Result<Vec<String>> {
        Err(io::Error::from_raw_os_error(NO_SUCH_FILE))
    }

    fn exists(&self, _: &Path) -> bool {
        false
    }

    fn stat(&self, _: &Path) -> io::Result<Stat> {
        Err(io::Error::from_raw_os_error(NO_SUCH_FILE))
    }

    fn resolve(&self, _: &Path) -> io::Result<PathBuf> {
        Err(io::Error::from_raw_os_error(NO_SUCH_FILE))
    }
}

/// The text of `path`, or why not in the form every message about a file
/// takes (`"PATH: ERROR"`).
pub(crate) fn read_text(files: &dyn Files, path: &Path) -> Result<String, String> {
    files.read(path).map_err(|e| at(path, e))
}

/// `"PATH: ERROR"`, the form every message about a file takes.
pub(crate) fn at(path: &Path, e: io::Error) -> String {
    format!("{}: {e}", path.display())
}
