//! CUDA MPS for a mapped step on one node: whether its tasks share their
//! GPUs through a control daemon the front end starts for the step,
//! through one that already serves them, or not at all; and what each task
//! gets. Decided from a small input of its own, before the step's record
//! is built:
//!
//! - `input.rs`: what it is decided from ([`MpsFacts`], `MpsInput`,
//!   `MpsNode`).
//! - `daemon.rs`: one daemon ([`Daemon`]), its directory from base, stem
//!   and token; a keeper's mark; the address of exec's keeper of one
//!   ([`KeeperAddr`]: its abstract socket's name and its socket in its
//!   directory), built once and taken by every call that meets the keeper.
//! - `no_mps.rs`: why a step runs without MPS ([`NoMps`]), each reason
//!   worded once, naming whose daemon ([`Whose`]); the client limit.
//! - `serving.rs`: how a step is served ([`Mps`], `InheritedMps`), and the
//!   names a served task gets.
//! - `control.rs`: where the control daemon and its server are.
//! - `dirs.rs`: the step's private directory: name, base, socket length.
//! - `client.rs`: each task as the daemon's client: its share, and the
//!   variables it gets or loses.
//! - `decide.rs`: serve or not, and why; the daemon's GPUs by UUID.
//! - `tests.rs`: (tests only) MPS as a planned step gets it.
//!
//! The daemon's GPUs are named by UUID. Under `ConstrainDevices` the
//! daemon starts inside the step's device cgroup (tests/cluster/production.rs
//! measures it), but where devices are not constrained it reaches every
//! GPU of the node, and an index, renumbered or not, could name another
//! job's. So is a task's GPU wherever it keeps a daemon's pipe.
//!
//! The daemon's directory has a random part in its name (the front end
//! draws it, see [`MpsFacts::token`]), so that no other user can take the
//! name first, and its base must keep other users from moving it away.

mod client;
mod control;
mod daemon;
mod decide;
mod dirs;
mod input;
mod no_mps;
mod serving;
#[cfg(test)]
mod tests;

pub use client::even_share;
pub use control::granted_control;
pub use daemon::{Daemon, KeeperAddr, KEEPER_MARK};
pub use dirs::{DIR_MARK, MAX_SOCKET_PATH};
pub use input::MpsFacts;
pub use no_mps::{NoMps, Whose, MAX_CLIENTS};
pub use serving::Mps;

pub(crate) use client::{mps_line, mps_unset, mps_variables, tasks_per_gpu};
pub(crate) use decide::{decide, inherited};
pub(crate) use dirs::named_daemon;
pub(crate) use input::{MpsInput, MpsNode};
pub(crate) use serving::InheritedMps;

// Only the tests import these through the face.
#[cfg(test)]
pub(crate) use control::server_path;
#[cfg(test)]
pub(crate) use dirs::dir_name;
