//! The machine's edge: every `unsafe` call of the workspace but the SPANK
//! plugin's (`spank/src/lib.rs`'s `Plugin` implementation, and the symbols
//! Slurm looks up in `spank/src/exports.rs`), the Flux plugin's (its C
//! functions, `flux/src/ffi.rs`, and its symbol, `flux/src/exports.rs`)
//! and the command's startup record (`src/edge.rs`, which must not sit in
//! a library slurmstepd loads), after mio's and rustix's own system-call
//! modules. Everything else asks the system through rustix's safe calls,
//! or through these. Each operation is here once, with at most one
//! fallback:
//!
//! - `fork_child` (`fork.rs`): fork a child that keeps one descriptor,
//!   runs a closure and `_exit`s; for `crate::deadline`.
//! - [`close_on_exec`] (`fds.rs`): mark a range of descriptors
//!   close-on-exec (or close them, for `fork_child`): close_range(2),
//!   else each one `/proc/self/fd` lists. Callable between fork and exec.
//! - [`as_user`] (`user.rs`): a command's child runs as a user (groups,
//!   gid, uid), its inherited descriptors closed at exec.
//! - [`allowed_cpus`] (`affinity.rs`): the CPUs a process may run on, from
//!   sched_getaffinity(2), which `hidepid` does not hide.
//! - [`session_of`] (`session.rs`): the session a process is in, from
//!   getsid(2), which `hidepid` does not hide either, 0 included.
//! - [`peer_of`] (`peer.rs`): a unix socket's peer (uid, gid, and pid
//!   where it is in this pid namespace), from `SO_PEERCRED`.
//! - [`tie_to_parent`] (`parent.rs`): a command's child is killed when
//!   this process dies.
//! - [`ending_fd`] (`signals.rs`): the signals that end a process, blocked
//!   (the children keep them blocked) and read from a signalfd.
//! - [`loaded_objects`] and [`loaded_plugin_name`] (`objects.rs`): the
//!   objects loaded in this process, and the name a SPANK plugin among
//!   them exports.
//! - [`thread_cpu`] (`clock.rs`): this thread's CPU time, for the plugin's
//!   debug lines.
//!
//! The library is loaded into slurmstepd, which is multithreaded: what
//! runs in a forked child or between fork and exec here calls only
//! async-signal-safe functions and allocates nothing, but for
//! `fork_child`'s closure, whose contract `crate::deadline`'s module
//! comment argues. Every `unsafe` block says which contract makes it
//! sound.

#![allow(unsafe_code)]

mod affinity;
mod clock;
mod fds;
mod fork;
mod objects;
mod parent;
mod peer;
mod session;
mod signals;
mod user;

pub use affinity::allowed_cpus;
pub use clock::thread_cpu;
pub use fds::close_on_exec;
pub(crate) use fork::fork_child;
pub use objects::{loaded_objects, loaded_plugin_name};
pub use parent::tie_to_parent;
pub use peer::{peer_of, Peer};
pub use session::session_of;
pub use signals::ending_fd;
pub use user::as_user;
