//! Where the MPS control daemon is, and where it finds its server.

use super::MpsNode;
use crate::env;
use crate::settings::site::MpsSettings;
use std::path::{Path, PathBuf};

/// The control daemon: the site's, or the first in the standard places.
pub(super) fn control(settings: &MpsSettings, node: &MpsNode) -> Result<PathBuf, String> {
    if let Some(path) = &settings.control {
        return match node.files.exists(path) {
            true => Ok(path.clone()),
            false => Err(format!(
                "cannot start {}: it does not exist ({})",
                path.display(),
                settings.control_named_by
            )),
        };
    }
    let found = env::MPS_CONTROL_DIRS
        .iter()
        .map(|dir| Path::new(dir).join(env::MPS_CONTROL))
        .find(|path| node.files.exists(path));
    found.ok_or_else(|| {
        format!(
            "{} is not in {}; {} names it",
            env::MPS_CONTROL,
            env::MPS_CONTROL_DIRS.join(", "),
            settings.control_named_by
        )
    })
}

/// The control daemon's `PATH`, where it looks for its server: its own
/// folder, that folder's sibling `sbin`, then [`env::MPS_SERVER_DIRS`].
pub fn server_path(control: &Path) -> Vec<PathBuf> {
    let own = control.parent().filter(|d| !d.as_os_str().is_empty());
    let mut path: Vec<PathBuf> = own.iter().map(|d| d.to_path_buf()).collect();
    if let Some(prefix) = own.and_then(Path::parent) {
        path.push(prefix.join("sbin"));
    }
    for dir in env::MPS_SERVER_DIRS {
        let dir = PathBuf::from(dir);
        if !path.contains(&dir) {
            path.push(dir);
        }
    }
    path
}

/// The server must be on the daemon's `PATH`: else every CUDA client of
/// the step would fail at its first GPU call.
pub(super) fn find_server(path: &[PathBuf], node: &MpsNode) -> Result<(), String> {
    if path
        .iter()
        .any(|dir| node.files.exists(&dir.join(env::MPS_SERVER)))
    {
        return Ok(());
    }
    let dirs: Vec<String> = path.iter().map(|d| d.display().to_string()).collect();
    Err(format!(
        "{}, which the control daemon starts for its clients, is not in {}; it belongs \
         beside the control daemon or in its sibling sbin",
        env::MPS_SERVER,
        dirs.join(", ")
    ))
}
