//! Where the MPS control daemon is, and where it finds its server.

use super::input::MpsNode;
use super::no_mps::NoMps;
use crate::env;
use crate::grant::Grant;
use crate::settings::config::MpsSettings;
use crate::settings::site::CONTROL_KEY;
use std::path::{Path, PathBuf};

/// The control daemon: the site's, or the first in the standard places.
pub(super) fn control(settings: &MpsSettings, node: &MpsNode) -> Result<PathBuf, NoMps> {
    if let Some(path) = &settings.control {
        return match node.files.exists(path) {
            true => Ok(path.clone()),
            false => Err(NoMps::NoControl {
                path: path.clone(),
                named_by: settings.control_named_by.clone(),
            }),
        };
    }
    let found = env::MPS_CONTROL_DIRS
        .iter()
        .map(|dir| Path::new(dir).join(env::MPS_CONTROL))
        .find(|path| node.files.exists(path));
    found.ok_or_else(|| NoMps::ControlNotFound {
        named_by: settings.control_named_by.clone(),
    })
}

/// A grant's run's control daemon (a Flux job's), and what names it in its
/// lines, in its front end's words: the site's (`mps_control` as its
/// settings write it), else the one found on the run's `PATH`
/// (`on_path`), else what would name one.
pub fn granted_control(settings: &mut MpsSettings, on_path: Option<PathBuf>, grant: &Grant) {
    let site = format!("the site's {}", grant.entry(CONTROL_KEY, "..."));
    let path = format!("the {}'s PATH", grant.noun);
    settings.control_named_by = match (&settings.control, on_path) {
        (Some(_), _) => site,
        (None, Some(found)) => {
            settings.control = Some(found);
            path
        }
        (None, None) => format!("{site}, or {path},"),
    };
}

/// The control daemon's `PATH`, where it looks for its server: the real
/// file's folder (`real`: `control` with its links followed, as a site
/// links it into `/usr/local/bin`) and that folder's sibling `sbin`, then
/// the same of `control`'s own folder, then [`env::MPS_SERVER_DIRS`].
pub(crate) fn server_path(control: &Path, real: &Path) -> Vec<PathBuf> {
    let dirs = [real, control]
        .into_iter()
        .flat_map(own_and_sbin)
        .chain(env::MPS_SERVER_DIRS.iter().map(PathBuf::from));
    let mut path: Vec<PathBuf> = Vec::new();
    for dir in dirs {
        if !path.contains(&dir) {
            path.push(dir);
        }
    }
    path
}

/// `file`'s folder and that folder's sibling `sbin`.
fn own_and_sbin(file: &Path) -> Vec<PathBuf> {
    let own = file.parent().filter(|d| !d.as_os_str().is_empty());
    let sbin = own.and_then(Path::parent).map(|prefix| prefix.join("sbin"));
    own.map(Path::to_path_buf).into_iter().chain(sbin).collect()
}

/// The server must be on the daemon's `PATH`: else every CUDA client of
/// the step would fail at its first GPU call.
pub(super) fn find_server(path: &[PathBuf], node: &MpsNode) -> Result<(), NoMps> {
    if path
        .iter()
        .any(|dir| node.files.exists(&dir.join(env::MPS_SERVER)))
    {
        return Ok(());
    }
    Err(NoMps::NoServer {
        path: path.to_vec(),
    })
}
