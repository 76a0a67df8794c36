//! The `desi_gpu_map` SPANK plugin, the cdylib slurmstepd and Slurm's
//! clients load: gathers what Slurm knows, asks the core
//! (`desi_gpu_map_core`) what to do, and applies it. It decides nothing
//! itself.
//!
//! This file holds the hooks Slurm calls and their dispatch, one file per
//! context (`client.rs` in srun, sbatch and salloc; `stepd.rs` in
//! slurmstepd), and what the plugin holds across hooks. The same `.so` on
//! several plugstack lines is one library: each line's arguments are read,
//! and a bad one is that line's error (so a `required` line's stops srun),
//! but only the first line whose arguments are good acts. A copy of the
//! plugin at another path stands aside in every hook and context. Either
//! says so once, in slurmd's log when slurmd starts.
//!
//! Its modules, bottom first (each imports only those listed before it):
//!
//! - `logger.rs`: the plugin's own small `log` bridge to Slurm's log,
//!   rather than slurm-spank's tracing subscriber: a few lines, and no
//!   dependency added to a library loaded into every slurmstepd.
//! - `exports.rs`: the symbols Slurm looks up: only the seven hooks the
//!   plugin implements (`init`, `init_post_opt`, `user_init`,
//!   `task_init_privileged`, which notes the task's mount namespace before
//!   a container plugin's `task_init` can move it, `task_init`, and
//!   `task_exit` and `exit`, which stop a step's MPS daemon).
//!   slurm-spank's `SPANK_PLUGIN!` would export all of them, and Slurm then
//!   calls each in every task and forks a spank prolog and epilog for every
//!   job.
//! - `copies.rs`: an earlier copy of the plugin at another path owns the
//!   option (the loaded objects, read through the host's `sys`).
//! - `mps.rs`: `JobUser`, the `Runner` that runs the daemon's children as
//!   the job's user (groups, gid and uid set, slurmstepd's descriptors
//!   closed); `Served`, the daemon until the node's last task exits.
//! - `node.rs`: slurmstepd as the core's `Node` and as the protocol's
//!   `FrontEnd` (the daemon started as the job's user, a task's CPUs);
//!   reads the plugstack arguments and the option value.
//! - `task_init.rs`: applies a task's share in `task_init`.
//! - `context.rs`: which of Slurm's contexts the plugin runs in: where an
//!   error stops the user, where a line standing aside is said.
//! - `lines.rs`: the plugstack lines that load the `.so`: each line's
//!   arguments, the line that acts, and which line each hook's call is for
//!   (each hook counts its own calls).
//! - `client.rs`: srun, sbatch and salloc: `init` registers the option and
//!   reads the arguments, `init_post_opt` checks the value before
//!   allocation, `help`.
//! - `stepd.rs`: slurmstepd, `user_init` to `exit`: the step's plan once
//!   per node (NVML, if needed, asked in a child with a deadline) and its
//!   MPS daemon, each task's share, the daemon's stop.
//!
//! `spank/build.rs` reads `SLURM_VERSION_NUMBER` from the target Slurm's
//! `slurm/slurm_version.h` (under `/usr/include` or `$SLURM_INCLUDE_DIR`)
//! for `plugin_version`; no libclang is needed.

// Slurm's processes host the plugin: outside tests nothing may panic, and
// every unsafe block says why it is sound.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![cfg_attr(not(test), deny(clippy::panic, clippy::indexing_slicing))]
#![deny(clippy::undocumented_unsafe_blocks)]

mod client;
mod context;
mod copies;
mod exports;
mod lines;
mod logger;
mod mps;
mod node;
mod stepd;
mod task_init;

use desi_gpu_map_core::settings::option::OptionRequest;
use desi_gpu_map_core::step::StepPlan;
use desi_gpu_map_core::Error;
use lines::{Hook, Lines};
use slurm_spank::{Plugin, SpankHandle};
use std::error::Error as StdError;

mod version {
    include!(concat!(env!("OUT_DIR"), "/slurm_version.rs"));
}

type HookResult = Result<(), Box<dyn StdError>>;

/// What the plugin holds in one process, across its hooks.
#[derive(Default)]
pub(crate) struct DesiGpuMap {
    /// The plugstack lines that load this `.so`, and each hook's calls.
    lines: Lines,
    /// The user's option value (`None`: not given), or why it is unusable.
    request: Option<Result<OptionRequest, Error>>,
    /// The step's plan on this node, made once in `user_init`.
    plan: Option<StepPlan>,
    /// True when another copy of the plugin, loaded first from another
    /// path, owns the option (see copies.rs): every hook returns at once.
    aside: bool,
    /// The step's MPS daemon on this node, while it serves.
    daemon: Option<mps::Served>,
    /// What `user_init` found of container plugins, for each task.
    beside: task_init::Beside,
    /// The node's name (`SLURMD_NODENAME`), read once in `user_init` for
    /// the lines each task says.
    node_name: Option<String>,
}

impl DesiGpuMap {
    /// Whether this call of `hook` acts: no copy elsewhere owns the option,
    /// and it is the acting line's call.
    fn acts(&mut self, hook: Hook) -> bool {
        !self.aside && self.lines.acts(hook)
    }
}

// SAFETY: slurm-spank requires the plugin to be safe to use across the
// fork that turns slurmstepd into tasks. The plugin starts no thread, and
// NVML, the one library that might, is loaded only in a short-lived child
// process of user_init (the host crate's deadline.rs), never in
// slurmstepd itself.
unsafe impl Plugin for DesiGpuMap {
    fn setup(&mut self, spank: &mut SpankHandle) -> HookResult {
        logger::install(context::is_client(spank));
        // A panic is caught and becomes an error line; the default hook
        // would also print it (and a backtrace) on the user's terminal. The
        // hook stays silent: it may run in the NVML child, where Slurm's log
        // lock may be held by a thread that did not survive the fork.
        std::panic::set_hook(Box::new(|_| {}));
        Ok(())
    }

    fn init(&mut self, spank: &mut SpankHandle) -> HookResult {
        if self.aside {
            return Ok(());
        }
        client::init(self, spank)
    }

    fn init_post_opt(&mut self, spank: &mut SpankHandle) -> HookResult {
        if self.aside {
            return Ok(());
        }
        let line = self.lines.line_of(Hook::InitPostOpt);
        client::init_post_opt(self, spank, line)
    }

    fn user_init(&mut self, spank: &mut SpankHandle) -> HookResult {
        if self.acts(Hook::UserInit) {
            stepd::user_init(self, spank);
        }
        Ok(())
    }

    fn task_init_privileged(&mut self, _spank: &mut SpankHandle) -> HookResult {
        // Counted whether or not a copy elsewhere owns the option.
        let acting = self.lines.acts(Hook::TaskInitPrivileged);
        if !self.aside && acting {
            stepd::task_init_privileged(self);
        }
        Ok(())
    }

    fn task_init(&mut self, spank: &mut SpankHandle) -> HookResult {
        if self.acts(Hook::TaskInit) {
            stepd::task_init(self, spank);
        }
        Ok(())
    }

    fn task_exit(&mut self, _spank: &mut SpankHandle) -> HookResult {
        if self.acts(Hook::TaskExit) {
            stepd::task_exit(self);
        }
        Ok(())
    }

    fn exit(&mut self, _spank: &mut SpankHandle) -> HookResult {
        stepd::stop_mps(self);
        Ok(())
    }

    fn report_error(&self, _spank: &mut SpankHandle, error: &dyn StdError) {
        slurm_spank::spank_log(
            slurm_spank::LogLevel::Error,
            &format!("desi-gpu-map: {error}"),
        );
    }
}
