//! The step's private MPS directory: its name, the base it is made in,
//! and the checks that keep other users from taking or moving it.

use super::daemon::{Daemon, KeeperAddr};
use super::input::MpsNode;
use super::no_mps::{NoMps, Whose};
use crate::files::Stat;
use crate::settings::config::MpsSettings;
use crate::snapshot::Snapshot;
use std::path::{Path, PathBuf};

/// The longest socket path NVIDIA's control daemon binds: one byte short
/// of a Unix socket's (`sun_path` holds 108 bytes with its terminating
/// NUL). Measured with 535.261.03: with `pipe/control_privileged` 106
/// bytes long it starts; at 107 it exits 1 at once, its log empty.
pub const MAX_SOCKET_PATH: usize = 106;

/// The longest name of the sockets the control daemon binds in its pipe
/// directory (`control`, and `control_privileged` beside it): where it
/// does not fit, the daemon exits at its start with an empty log.
const LONGEST_SOCKET: &str = "control_privileged";

/// The first word of every MPS directory's name (`dgm-mps`: desi-gpu-map's
/// MPS), short so that the socket paths below it fit
/// ([`MAX_SOCKET_PATH`]).
pub const DIR_MARK: &str = "dgm-mps";

/// The step's MPS directory's name before its random part:
/// `dgm-mps.UID.JOBID.STEPID.NODEID`: the user, so that one user's keeper
/// is never met at another's name (the keeper's abstract socket is this
/// name, seen by every user); the step, which the keeper's tasks meet by;
/// NODEID the node's place in the step (several slurmd may share a host
/// and its /tmp). Anything but
/// letters, digits, `.`, `-` and `_` is left out of the step's name, so
/// that no name climbs out of the base.
pub(crate) fn dir_name(uid: u32, step: &str, node_id: u32) -> String {
    let step: String = step
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        .collect();
    format!("{DIR_MARK}.{uid}.{}.{node_id}", step.trim_matches('.'))
}

/// The base of the step's MPS directory: the site's, else the step's
/// `TMPDIR` where absolute, else `/tmp`.
pub(super) fn base_dir(settings: &MpsSettings, node: &MpsNode) -> PathBuf {
    base_of(settings, node.vars)
}

/// The site's base, else `TMPDIR` where absolute, else `/tmp`.
fn base_of(settings: &MpsSettings, vars: &Snapshot) -> PathBuf {
    if let Some(dir) = &settings.dir {
        return dir.clone();
    }
    vars.tmpdir
        .as_deref()
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| PathBuf::from("/tmp"))
}

/// The daemon of `uid`'s step `step` (its tag) on node `node_id`, by the
/// name and base its directory gets: what a task epilog asks the keeper
/// after, where nothing else of the daemon is known.
pub(crate) fn named_daemon(
    uid: u32,
    step: &str,
    node_id: u32,
    settings: &MpsSettings,
    vars: &Snapshot,
) -> Daemon {
    Daemon {
        base: base_of(settings, vars),
        stem: dir_name(uid, step, node_id),
        uid,
        ..Daemon::default()
    }
}

/// The daemon's sockets must fit in a socket's path, under the name its
/// directory gets: exec's keeper (`kept`) marks its directory's.
pub(super) fn check_socket(daemon: &Daemon, kept: bool) -> Result<(), NoMps> {
    let pipe = match kept {
        true => KeeperAddr::of(daemon).daemon().pipe(),
        false => daemon.pipe(),
    };
    let socket = pipe.join(LONGEST_SOCKET);
    let len = socket.as_os_str().len();
    if len > MAX_SOCKET_PATH {
        return Err(NoMps::SocketTooLong {
            socket,
            len,
            most: MAX_SOCKET_PATH,
        });
    }
    Ok(())
}

/// The base must be a folder of root's or the user's, and sticky where
/// others may write in it: else another user could move the step's
/// directory away and put their own in its place.
pub(super) fn check_base(base: &Path, uid: u32, whose: Whose, node: &MpsNode) -> Result<(), NoMps> {
    let Stat {
        uid: owner,
        mode,
        is_dir,
    } = node.files.stat(base).map_err(|e| NoMps::BaseUnusable {
        base: base.to_path_buf(),
        why: e.to_string(),
    })?;
    if !is_dir {
        return Err(NoMps::BaseNotDir(base.to_path_buf()));
    }
    if owner != 0 && owner != uid {
        return Err(NoMps::BaseOwner {
            base: base.to_path_buf(),
            owner,
        });
    }
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(NoMps::BaseOpen {
            base: base.to_path_buf(),
            mode,
            whose,
        });
    }
    Ok(())
}
