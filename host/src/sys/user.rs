//! A child run as another user.

use super::fds::close_on_exec;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Has `cmd`'s child run as `uid` and `gid`, real, effective and saved,
/// so that nothing can return to root, with `groups` where this process
/// may set them (as root: the plugin's exit hook; `user_init` already
/// has the user's); every descriptor past standard error is closed at
/// exec, so that the child holds none of its parent's (slurmstepd's
/// connections, for the MPS daemon).
pub fn as_user(cmd: &mut Command, uid: u32, gid: u32, groups: Vec<libc::gid_t>) {
    let hook = move || -> std::io::Result<()> {
        let fail = || Err(std::io::Error::last_os_error());
        // SAFETY: between fork and exec only async-signal-safe system
        // calls run here; `groups` is a live slice of `groups.len()` gids.
        unsafe {
            if libc::geteuid() == 0 && libc::setgroups(groups.len(), groups.as_ptr()) != 0 {
                return fail();
            }
            if libc::setresgid(gid, gid, gid) != 0 || libc::setresuid(uid, uid, uid) != 0 {
                return fail();
            }
        }
        close_on_exec(3..=u32::MAX);
        Ok(())
    };
    // SAFETY: the hook above calls only async-signal-safe functions and
    // allocates nothing (its vector was made before the fork).
    unsafe {
        cmd.pre_exec(hook);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::io::{fcntl_setfd, FdFlags};
    use std::os::fd::AsRawFd;

    #[test]
    fn the_user_runs_as_itself_here_and_closes_inherited_descriptors() {
        // Not root in general: the uid and gid are this process's own.
        let uid = rustix::process::getuid().as_raw();
        let gid = rustix::process::getgid().as_raw();
        let leaked = std::fs::File::open("/dev/null").unwrap();
        fcntl_setfd(&leaked, FdFlags::empty()).unwrap();
        let fd = leaked.as_raw_fd();
        let mut sh = Command::new("sh");
        sh.args([
            "-c",
            &format!("id -u; [ -e /proc/self/fd/{fd} ] && echo leaked || true"),
        ]);
        as_user(&mut sh, uid, gid, Vec::new());
        let out = sh.output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{uid}\n"));
    }
}
