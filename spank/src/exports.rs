//! The symbols Slurm looks up in the `.so`: the plugin's identity and the
//! seven hooks it implements.
//!
//! slurm-spank's `SPANK_PLUGIN!` exports every SPANK hook. Slurm calls each
//! hook it finds, in every task, and forks a `slurmstepd spank prolog` and
//! `epilog` for every job once a plugin exports `slurm_spank_job_prolog`.
//! So this module exports only what the plugin uses, through the same
//! slurm-spank entry points the macro calls.

use crate::DesiGpuMap;
use slurm_spank::spank_sys::spank_t;
use slurm_spank::{init_spank_handle, spank_callback_with_globals, Plugin, SpankHandle};
use std::error::Error;
use std::os::raw::{c_char, c_int, c_uint};

#[no_mangle]
pub static plugin_name: [u8; 13] = *b"desi_gpu_map\0";

#[no_mangle]
pub static plugin_type: [u8; 6] = *b"spank\0";

/// Slurm loads a SPANK plugin only when this names its own release series.
#[no_mangle]
pub static plugin_version: c_uint = crate::version::SLURM_VERSION_NUMBER;

type Hook = fn(&mut dyn Plugin, &mut SpankHandle) -> Result<(), Box<dyn Error>>;

/// Runs one hook inside slurm-spank's frame, which catches panics and holds
/// the plugin's state between calls; errors are reported, then returned.
fn call(spank: spank_t, argc: c_int, argv: *const *const c_char, hook: Hook) -> c_int {
    spank_callback_with_globals::<DesiGpuMap, _>(move |plugin, options, need_setup| {
        let mut handle = init_spank_handle(spank, argc, argv, options);
        if need_setup {
            plugin.setup(&mut handle)?;
        }
        hook(plugin, &mut handle).inspect_err(|e| plugin.report_error(&mut handle, e.as_ref()))
    })
}

/// Exports `slurm_spank_NAME` calling the plugin's `NAME` hook.
macro_rules! hooks {
    ($($symbol:ident => $hook:ident),* $(,)?) => {$(
        #[no_mangle]
        pub extern "C" fn $symbol(spank: spank_t, argc: c_int, argv: *const *const c_char) -> c_int {
            call(spank, argc, argv, |plugin, handle| plugin.$hook(handle))
        }
    )*};
}

hooks! {
    slurm_spank_init => init,
    slurm_spank_init_post_opt => init_post_opt,
    slurm_spank_user_init => user_init,
    slurm_spank_task_init_privileged => task_init_privileged,
    slurm_spank_task_init => task_init,
    slurm_spank_task_exit => task_exit,
    slurm_spank_exit => exit,
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_exported_name_is_the_declared_one() {
        let name = super::plugin_name;
        assert_eq!(
            name.split_last(),
            Some((&0, desi_gpu_map_core::settings::option::PLUGIN.as_bytes()))
        );
    }
}
