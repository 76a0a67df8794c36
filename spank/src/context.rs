//! Which of Slurm's contexts the plugin runs in, and what follows from it:
//! where an error stops the user, and where a line standing aside is said.

use slurm_spank::{Context, SpankHandle};

/// True where a hook's failure is the right way to stop the user: srun,
/// sbatch and salloc, before anything is allocated.
pub(crate) fn is_client(spank: &SpankHandle) -> bool {
    matches!(spank.context(), Ok(Context::Local | Context::Allocator))
}

/// Says why a plugstack line stands aside: in slurmd's log once, when
/// slurmd starts (its `init`); every step would repeat it, so there only
/// at debug level.
pub(crate) fn stand_aside(spank: &SpankHandle, why: &str) {
    if matches!(spank.context(), Ok(Context::Slurmd)) {
        log::info!("{why}");
    } else {
        log::debug!("{why}");
    }
}
