//! The plan for one job step on one node: whether it is mapped, and with
//! which list, made in one pass by [`plan_step`] from what a front end
//! hands it ([`StepFacts`], its variables one [`crate::snapshot::Snapshot`]) and what its
//! [`Node`] answers of files and NVML; then what each task gets
//! ([`task_outcome`]), by the protocol every front end follows
//! ([`FrontEnd`]). CUDA MPS is decided in [`crate::mps`], inside the pass.
//! No I/O. One rule per file, its tests beside it:
//!
//! - what comes in: `node.rs` (the node), `ids.rs` (which step: Slurm's, or a launcher's launch), `resolve.rs`
//!   (the user's request over the site's settings), `inputs.rs` (one
//!   task, its variables read once);
//! - the step's GPUs: `source.rs` (Slurm's list, or NVML's), `given.rs`
//!   (those of a process no srun step placed), `locate.rs` (where
//!   `closest`'s sit), `binding.rs` (when Slurm's own binding wins),
//!   `container.rs` (pyxis, run before or after);
//! - the plan: `plan.rs` (the pass), `decision.rs` ([`StepPlan`]),
//!   `aside.rs` (why a step stands aside), `map.rs` (a mapped step's
//!   record, [`StepMap`], built once);
//! - each task: `assign.rs` (its place in the lists), `outcome.rs` (its
//!   variables), `lines.rs` (what it says), `protocol.rs` (the round trip);
//! - `testing.rs`: (tests only) the fixtures, `FakeNode` and `FakeFiles`.

mod aside;
mod assign;
mod binding;
mod container;
mod decision;
mod given;
mod ids;
mod inputs;
mod lines;
mod locate;
mod map;
mod node;
mod outcome;
mod plan;
mod protocol;
mod resolve;
mod source;
#[cfg(test)]
pub(crate) mod testing;

pub use aside::Unmapped;
pub use assign::{assign, Assignment};
pub use container::{container_plugin_after, Container};
pub use decision::StepPlan;
pub use given::Given;
pub use ids::{StepIdentity, UnreadableStep};
pub use inputs::{TaskCpus, TaskIds, TaskInputs, TaskVars};
pub use map::StepMap;
pub use node::{NoTopology, Node, NvmlAsk};
pub use outcome::{carry_out, task_outcome, TaskOutcome};
pub use plan::{plan_step, Deferred, Ready, StepFacts};
pub use protocol::{start_daemon, task_outcome_read, FrontEnd};
pub use resolve::{resolve, Resolved};

pub(crate) use aside::Aside;
pub(crate) use assign::assign_in;
pub(crate) use binding::slurm_bound_here;
pub(crate) use ids::{parse_step_id, special_step_name, step_tag};
pub(crate) use lines::aside_line;

// Only the tests import these through the face.
#[cfg(test)]
pub(crate) use locate::locate;
#[cfg(test)]
pub(crate) use map::GpuCpus;
#[cfg(test)]
pub(crate) use outcome::map_task;
#[cfg(test)]
pub(crate) use source::{Listed, WhyNoList};
