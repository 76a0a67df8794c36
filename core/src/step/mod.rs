//! The decision for one job step on one node: whether it is mapped, and
//! with which list, made in one pass by [`plan_step`] from the facts a
//! front end hands it ([`StepFacts`], its variables one [`Snapshot`]) and
//! what its [`Node`] answers of files and NVML. Every part of a mapped step's record ([`StepMap`]) is
//! decided before the record is built once. Each rule lives in its own
//! module, its tests beside it:
//!
//! - `snapshot`: the variables a decision reads, taken once by the front
//!   end ([`Snapshot`]);
//! - `node`: the interface the front ends implement (files, NVML);
//! - `ids`: the step ids Slurm reserves, which step a plan is for
//!   ([`StepIdentity`]: Slurm's, or a launcher's), and the tag mapped
//!   tasks carry;
//! - `resolve`: what the user and the site together ask ([`Resolved`]);
//! - `source`: where the step's GPU list comes from (Slurm's list, or NVML),
//!   kept as `Listed`;
//! - `given`: where a process no srun step placed finds its GPUs;
//! - `binding`: when Slurm's own per-task binding wins;
//! - `container`: a container plugin beside the plugin's (pyxis), run
//!   before or after it;
//! - `locate`: where a `closest` step's GPUs sit;
//! - `plan`: the pass from the step's facts to its plan;
//! - `decision`: the plan itself ([`StepPlan`]);
//! - `aside`: why a step stands aside (`Aside`), and what its tasks lose;
//! - `map`: a mapped step's record ([`StepMap`]);
//! - `inputs`: one task as a front end knows it ([`TaskInputs`]), its
//!   variables read in one place ([`TaskVars`]);
//! - `assign`: where each task sits in the step's lists ([`Assignment`]),
//!   `closest`'s position coming from its rule
//!   (`crate::method::closest::closest_position`);
//! - `lines`: what a task says (its `verbose` report, why it stands aside);
//! - `outcome`: what each task gets, and the variables written for it
//!   (through [`crate::runtime`], which writes the lists for the node's
//!   vendor);
//! - `protocol`: the round trip every front end follows, from the plan to
//!   each task's outcome ([`FrontEnd`]).
//!
//! CUDA MPS is decided in [`crate::mps`], from a small input this module
//! hands it; the record keeps the decision, and each task's list names its
//! GPU as that decision says (`StepMap::task_tokens`).
//!
//! No I/O: the front end hands in the node, and applies what comes back.
//! This file is the folder's face: its modules, and what they export.

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
mod snapshot;
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
pub use plan::{plan_step, StepFacts};
pub use protocol::{start_daemon, task_outcome_read, FrontEnd};
pub use resolve::{resolve, Resolved};
pub use snapshot::Snapshot;

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
