//! The `desi_gpu_map` SPANK plugin: gathers what Slurm knows, asks the core
//! (`desi_gpu_map`) what to do, and applies it. It decides nothing itself.
//!
//! Hooks, by context:
//! - srun, sbatch, salloc: `init` reads the plugstack arguments and registers
//!   `--desi-gpu-map`; `init_post_opt` checks its value before any allocation.
//! - slurmstepd: `user_init` plans the step once per node (NVML, if needed,
//!   is asked in a child process with a deadline: the host crate's
//!   `deadline`) and starts its MPS daemon, `task_init` maps each
//!   task before it execs: the core's protocol
//!   (`desi_gpu_map_core::step::FrontEnd`), its steps split between the
//!   two hooks.
//!
//! In slurmstepd nothing may fail: a failing hook there drains the node or
//! fails the job, so every problem becomes a message and the task runs as
//! Slurm made it.
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

mod copies;
mod exports;
mod logger;
mod mps;
mod node;
mod task_init;

use desi_gpu_map_core::env;
use desi_gpu_map_core::mps::Mps;
use desi_gpu_map_core::names::Named;
use desi_gpu_map_core::settings::client_args::Client;
use desi_gpu_map_core::settings::config::Config;
use desi_gpu_map_core::settings::option::{
    check_help_source, option_form, parse_option, usage, OptionRequest, ENV_FORM, OPTION,
};
use desi_gpu_map_core::settings::site::{
    check_request, parse_args, request_from_variable, taken_from_variable,
};
use desi_gpu_map_core::step::{start_daemon, StepPlan};
use desi_gpu_map_core::Error;
use slurm_spank::{Context, Plugin, SpankHandle, SpankOption};
use std::error::Error as StdError;
use std::io::Write;
use std::time::{Duration, Instant};

mod version {
    include!(concat!(env!("OUT_DIR"), "/slurm_version.rs"));
}

type HookResult = Result<(), Box<dyn StdError>>;

/// This thread's CPU time, for the hooks' debug lines: the wall time of a
/// task forked beside many others is mostly waiting.
fn thread_cpu() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `t`, live and writable.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } != 0 {
        return Duration::ZERO;
    }
    let nanos = u32::try_from(t.tv_nsec).unwrap_or(0);
    Duration::new(u64::try_from(t.tv_sec).unwrap_or(0), nanos)
}

#[derive(Default)]
pub(crate) struct DesiGpuMap {
    /// Each plugstack line's arguments, in order (one per `init` call),
    /// or why they are unusable.
    lines: Vec<Result<Config, Error>>,
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
    post_opt_calls: u32,
    user_init_calls: u32,
    task_init_privileged_calls: u32,
    task_init_calls: u32,
    task_exit_calls: u32,
}

impl DesiGpuMap {
    /// Starts the step's MPS daemon where the plan has one, before any task
    /// execs (the protocol's step 2); the plan then serves the tasks
    /// through it, or runs without.
    fn start_mps(&mut self, spank: &SpankHandle, plan: &mut StepPlan) {
        let mut stepd = node::Slurmstepd::new(spank);
        start_daemon(plan, &mut stepd, None);
        if let Some(served) = stepd.served {
            self.daemon = Some(served);
        }
        if let StepPlan::Map(map) = plan {
            if let Mps::Without { why, .. } = &map.mps {
                log::warn!("{why}; running without MPS");
            }
        }
    }

    /// Records one plugstack line's arguments. In srun, sbatch and salloc a
    /// bad one is this line's error (Slurm stops on a `required` line's);
    /// in slurmstepd it is logged, and the line stands aside.
    fn line_read(&mut self, spank: &SpankHandle, config: Result<Config, Error>) -> HookResult {
        let failed = config.as_ref().err().cloned();
        self.lines.push(config);
        match failed {
            Some(e) if is_client(spank) => Err(e.into()),
            Some(e) => {
                log::error!("{e}; this plugstack line stands aside until it is fixed");
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// `init` for a second (third, ...) plugstack line of this `.so`.
    fn init_another_line(
        &mut self,
        spank: &SpankHandle,
        config: Result<Config, Error>,
    ) -> HookResult {
        let acting = self.acting();
        let read = self.line_read(spank, config);
        let now = self.acting();
        let line = self.lines.len();
        let why = if now == acting && self.lines.get(acting).is_some_and(Result::is_ok) {
            format!("loaded again by plugstack.conf (line {line} of the plugin's); line {} acts, this one stands aside", acting + 1)
        } else {
            format!("loaded again by plugstack.conf (line {line} of the plugin's); the first line with good arguments, line {}, acts", now + 1)
        };
        stand_aside(spank, &why);
        read
    }

    /// Where the user gave no option and the site's default would map the
    /// step, the user's request in the job's `DESI_GPU_MAP_METHOD` (read
    /// for exec and the task prolog): the request, and the value, said
    /// under verbose. Bytes that are not UTF-8 read as U+FFFD, a bad value.
    fn request_from_variable(
        &self,
        spank: &SpankHandle,
    ) -> Option<(Result<OptionRequest, Error>, String)> {
        if self.request.is_some() {
            return None;
        }
        let Some(Ok(config)) = self.config() else {
            return None;
        };
        let value = spank.getenv_lossy(env::METHOD).ok().flatten();
        let request = request_from_variable(value.as_deref(), config)?;
        Some((request, value.unwrap_or_default()))
    }

    /// Stops the step's MPS daemon, if one runs; says what went wrong in
    /// slurmd's log.
    fn stop_mps(&mut self) {
        if let Some(served) = self.daemon.take() {
            for line in served.stop() {
                log::warn!("{line}");
            }
            log::info!("MPS daemon of the step stopped");
        }
    }
}

impl DesiGpuMap {
    /// The line that acts: the first whose arguments are good (else the
    /// first, which stands aside with its error).
    fn acting(&self) -> usize {
        self.lines.iter().position(Result::is_ok).unwrap_or(0)
    }

    /// The acting line's arguments.
    fn config(&self) -> Option<&Result<Config, Error>> {
        self.lines.get(self.acting())
    }
}

/// Which plugstack line this call of a hook is for: with the `.so` on
/// several lines, all share this process's state and Slurm calls each
/// hook once per line in a row, in plugstack order.
fn line_of(lines: usize, calls: &mut u32) -> usize {
    let line = usize::try_from(*calls).unwrap_or(0) % lines.max(1);
    *calls = calls.wrapping_add(1);
    line
}

/// `--desi-gpu-map=help` in srun, sbatch or salloc: like srun's own
/// `--gpu-bind=help`, the usage, then exit 0.
fn help(spank: &SpankHandle) -> HookResult {
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let env_form = std::env::var(ENV_FORM).ok();
    let client = match spank.context() {
        Ok(Context::Local) => Client::Srun,
        _ => Client::Allocator,
    };
    check_help_source(env_form.as_deref(), &args, client)?;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(usage().as_bytes()).and_then(|()| out.flush());
    std::process::exit(0);
}

/// True where a hook's failure is the right way to stop the user: srun,
/// sbatch and salloc, before anything is allocated.
fn is_client(spank: &SpankHandle) -> bool {
    matches!(spank.context(), Ok(Context::Local | Context::Allocator))
}

/// Says why a plugstack line stands aside: in slurmd's log once, when
/// slurmd starts (its `init`); every step would repeat it, so there only
/// at debug level.
fn stand_aside(spank: &SpankHandle, why: &str) {
    if matches!(spank.context(), Ok(Context::Slurmd)) {
        log::info!("{why}");
    } else {
        log::debug!("{why}");
    }
}

// SAFETY: slurm-spank requires the plugin to be safe to use across the
// fork that turns slurmstepd into tasks. The plugin starts no thread, and
// NVML, the one library that might, is loaded only in a short-lived child
// process of user_init (the host crate's deadline.rs), never in
// slurmstepd itself.
unsafe impl Plugin for DesiGpuMap {
    fn setup(&mut self, spank: &mut SpankHandle) -> HookResult {
        logger::install(is_client(spank));
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
        let config = node::plugin_args(spank).and_then(|args| parse_args(&args));
        if !self.lines.is_empty() {
            return self.init_another_line(spank, config);
        }
        if let Some((first, this)) = copies::first_elsewhere() {
            self.aside = true;
            stand_aside(
                spank,
                &format!(
                    "{this} stands aside: plugstack.conf loads the plugin from {first} \
                     first, and that copy owns --{OPTION}"
                ),
            );
            return Ok(());
        }
        let registered =
            spank.register_option(SpankOption::new(OPTION).takes_value(&option_form()).usage(
                "Bind each task to one GPU of its node before it starts (see --desi-gpu-map=help)",
            ));
        if is_client(spank) {
            registered.map_err(|e| Error::CannotRegister {
                option: OPTION.to_string(),
                why: e.to_string(),
            })?;
        } else if let Err(e) = &registered {
            log::error!("cannot register --{OPTION}: {e}");
        }
        self.line_read(spank, config)
    }

    fn init_post_opt(&mut self, spank: &mut SpankHandle) -> HookResult {
        if self.aside {
            return Ok(());
        }
        let line = line_of(self.lines.len(), &mut self.post_opt_calls);
        // Slurm hands the value only to the line that registered it.
        if line == 0 {
            let request = node::option_value(spank, OPTION)
                .map(|v| parse_option(&v))
                .transpose();
            if is_client(spank) {
                if let Ok(Some(OptionRequest::Help)) = request {
                    help(spank)?;
                }
            }
            self.request = request.transpose();
        }
        if line != self.acting() || !is_client(spank) {
            return Ok(());
        }
        match (&self.request, self.config()) {
            (Some(Err(e)), _) => Err(e.clone().into()),
            (Some(Ok(request)), Some(Ok(config))) => Ok(check_request(request, config)?),
            _ => Ok(()),
        }
    }

    fn user_init(&mut self, spank: &mut SpankHandle) -> HookResult {
        if self.aside || line_of(self.lines.len(), &mut self.user_init_calls) != self.acting() {
            return Ok(());
        }
        let started = Instant::now();
        let from_variable = self.request_from_variable(spank);
        let request = match &from_variable {
            Some((request, _)) => Some(request),
            None => self.request.as_ref(),
        };
        let mut plan = node::plan(spank, self.config(), request);
        // The variable was the user's request: a step that stands aside
        // keeps it, for exec and the task prolog to read (and refuse) as
        // the plugin did, never to map with their default in its place.
        if let (StepPlan::Unmapped(unmapped), Some(_)) = (&mut plan, &from_variable) {
            unmapped.clear.retain(|name| name != env::METHOD);
        }
        if let (StepPlan::Map(map), Some((_, said)), Some(Ok(config))) =
            (&mut plan, &from_variable, self.config())
        {
            let line = taken_from_variable(said, config);
            log::debug!("{line}");
            map.notes.push(line);
        }
        self.start_mps(spank, &mut plan);
        if let StepPlan::Map(_) = plan {
            self.beside = task_init::Beside::found();
        }
        let took = started.elapsed().as_micros();
        log::debug!("user_init took {took} us ({})", plan.kind());
        if let StepPlan::Map(map) = &plan {
            log::debug!("GPU lists written for {}", map.rendering.vendor.name());
        }
        self.plan = Some(plan);
        Ok(())
    }

    /// In the task, before any plugin's `task_init`: where the task is now,
    /// which a container plugin that runs first changes (pyxis).
    fn task_init_privileged(&mut self, _spank: &mut SpankHandle) -> HookResult {
        let line = line_of(self.lines.len(), &mut self.task_init_privileged_calls);
        if self.aside || line != self.acting() {
            return Ok(());
        }
        if let Some(StepPlan::Map(_)) = self.plan {
            self.beside.before_task_init();
        }
        Ok(())
    }

    fn task_init(&mut self, spank: &mut SpankHandle) -> HookResult {
        if self.aside || line_of(self.lines.len(), &mut self.task_init_calls) != self.acting() {
            return Ok(());
        }
        let started = Instant::now();
        let cpu = thread_cpu();
        let kind = self.plan.as_ref().map_or("no plan", StepPlan::kind);
        if let Some(plan) = &self.plan {
            task_init::apply(spank, plan, &self.beside);
        }
        log::debug!(
            "task_init took {} us ({kind}), thread cpu {} us",
            started.elapsed().as_micros(),
            thread_cpu().saturating_sub(cpu).as_micros()
        );
        Ok(())
    }

    fn task_exit(&mut self, _spank: &mut SpankHandle) -> HookResult {
        if self.aside || line_of(self.lines.len(), &mut self.task_exit_calls) != self.acting() {
            return Ok(());
        }
        // Unknown count: the step's end stops it (`exit`).
        if self.daemon.as_mut().is_some_and(mps::Served::task_exited) {
            self.stop_mps();
        }
        Ok(())
    }

    fn exit(&mut self, _spank: &mut SpankHandle) -> HookResult {
        self.stop_mps();
        Ok(())
    }

    fn report_error(&self, _spank: &mut SpankHandle, error: &dyn StdError) {
        slurm_spank::spank_log(
            slurm_spank::LogLevel::Error,
            &format!("desi-gpu-map: {error}"),
        );
    }
}
