//! The plugstack lines that load this `.so`: each line's arguments, which
//! line acts, and which line each call of a hook is for.
//!
//! With the `.so` on several lines, all share this process's state and
//! Slurm calls each hook once per line in a row, in plugstack order: a
//! count of each hook's calls tells the line.

use crate::context::{is_client, stand_aside};
use crate::HookResult;
use desi_gpu_map_core::settings::config::Config;
use desi_gpu_map_core::Error;
use slurm_spank::SpankHandle;

/// The hooks called once per line, each with its own count.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Hook {
    InitPostOpt,
    UserInit,
    TaskInitPrivileged,
    TaskInit,
    TaskExit,
}

/// Each line's arguments, in order (one per `init` call), or why they are
/// unusable; and each hook's calls so far.
#[derive(Default)]
pub(crate) struct Lines {
    configs: Vec<Result<Config, Error>>,
    calls: [u32; 5],
}

impl Lines {
    /// How many lines were read.
    pub(crate) fn len(&self) -> usize {
        self.configs.len()
    }

    /// No line was read yet (the first `init`).
    pub(crate) fn is_empty(&self) -> bool {
        self.configs.is_empty()
    }

    /// The line that acts: the first whose arguments are good (else the
    /// first, which stands aside with its error).
    pub(crate) fn acting(&self) -> usize {
        self.configs.iter().position(Result::is_ok).unwrap_or(0)
    }

    /// The acting line's arguments.
    pub(crate) fn config(&self) -> Option<&Result<Config, Error>> {
        self.configs.get(self.acting())
    }

    /// Which line this call of `hook` is for.
    pub(crate) fn line_of(&mut self, hook: Hook) -> usize {
        let Some(calls) = self.calls.get_mut(hook as usize) else {
            return 0;
        };
        let line = usize::try_from(*calls).unwrap_or(0) % self.configs.len().max(1);
        *calls = calls.wrapping_add(1);
        line
    }

    /// Whether this call of `hook` is the acting line's.
    pub(crate) fn acts(&mut self, hook: Hook) -> bool {
        self.line_of(hook) == self.acting()
    }

    /// Records one line's arguments. In srun, sbatch and salloc a bad one
    /// is this line's error (Slurm stops on a `required` line's); in
    /// slurmstepd it is logged, and the line stands aside.
    pub(crate) fn read(
        &mut self,
        spank: &SpankHandle,
        config: Result<Config, Error>,
    ) -> HookResult {
        let failed = config.as_ref().err().cloned();
        self.configs.push(config);
        match failed {
            Some(e) if is_client(spank) => Err(e.into()),
            Some(e) => {
                log::error!("{e}; this plugstack line stands aside until it is fixed");
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// `init` for a second (third, ...) line of this `.so`.
    pub(crate) fn read_another(
        &mut self,
        spank: &SpankHandle,
        config: Result<Config, Error>,
    ) -> HookResult {
        let acting = self.acting();
        let read = self.read(spank, config);
        let now = self.acting();
        let line = self.len();
        let why = if now == acting && self.configs.get(acting).is_some_and(Result::is_ok) {
            format!("loaded again by plugstack.conf (line {line} of the plugin's); line {} acts, this one stands aside", acting + 1)
        } else {
            format!("loaded again by plugstack.conf (line {line} of the plugin's); the first line with good arguments, line {}, acts", now + 1)
        };
        stand_aside(spank, &why);
        read
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_hook_counts_its_own_calls_round_the_lines() {
        let mut lines = Lines {
            configs: vec![Ok(Config::default()), Ok(Config::default())],
            ..Lines::default()
        };
        let seen: Vec<usize> = (0..4).map(|_| lines.line_of(Hook::UserInit)).collect();
        assert_eq!(seen, [0, 1, 0, 1]);
        assert_eq!(lines.line_of(Hook::TaskInit), 0);
        assert_eq!(lines.line_of(Hook::TaskExit), 0);
        assert!(lines.acts(Hook::InitPostOpt));
        assert!(!lines.acts(Hook::InitPostOpt));
    }
}
