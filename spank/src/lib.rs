//! The `desi_gpu_map` SPANK plugin: gathers what Slurm knows, asks the core
//! (`desi_gpu_map`) what to do, and applies it. It decides nothing itself.
//!
//! This file holds the hooks Slurm calls and their dispatch, one file per
//! context:
//! - srun, sbatch, salloc (`client.rs`): `init` reads the plugstack
//!   arguments and registers `--desi-gpu-map`; `init_post_opt` checks its
//!   value before any allocation.
//! - slurmstepd (`stepd.rs`): `user_init` plans the step once per node
//!   (NVML, if needed, is asked in a child process with a deadline: the
//!   host crate's `deadline`) and starts its MPS daemon, `task_init` maps
//!   each task before it execs, `task_exit` and `exit` stop the daemon.
//! - every context (`lines.rs`): which plugstack line each call is for;
//!   (`context.rs`) where an error stops the user.
//!
//! The same `.so` on several plugstack lines is one library: each line's
//! arguments are read, and a bad one is that line's error (so a
//! `required` line's stops srun), but only the first line whose arguments
//! are good acts. A copy of the plugin at another path stands aside in
//! every hook and context. Either says so once, in slurmd's log when
//! slurmd starts.

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
