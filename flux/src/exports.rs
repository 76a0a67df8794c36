//! The symbol flux-shell looks up, `flux_plugin_init`, and the one handler
//! it registers for the plugin's topics. A panic never crosses into C:
//! each call is fenced with `catch_unwind`, and a caught one fails the
//! call with a message.

use crate::error::PluginError;
use crate::ffi::{log, FluxPlugin, FluxPluginArg, Level, Plugin, Slot};
use crate::plugin;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

const SHELL_INIT: &CStr = c"shell.init";
const TASK_INIT: &CStr = c"task.init";
const TASK_EXIT: &CStr = c"task.exit";
const SHELL_EXIT: &CStr = c"shell.exit";

/// Set in the shell by the load that acts: whether it came with a site's
/// `conf` table. Loaded again (an initrc, a site's `lua.d` file, a user's
/// `userrc`; the same file or a copy), a second registration under the
/// same name replaces the first in Flux's plugin stack, and with it the
/// first's `conf`. So a later load stands aside, but for one with a `conf`
/// after one without (the default initrc's `plugin.load { file = "*.so",
/// conf = {} }` from the plugin directory, then the site's file with its
/// table), which takes over: the site's settings hold either way.
const LOADED: Slot<bool> = Slot::named(c"desi-gpu-map::loaded");

/// Runs `work`, catching a panic; failure is -1 with the message logged.
fn fenced(what: &str, work: impl FnOnce() -> Result<(), PluginError>) -> c_int {
    let result = catch_unwind(AssertUnwindSafe(work)).unwrap_or_else(|_| {
        Err(PluginError::Panic {
            what: what.to_string(),
        })
    });
    match result {
        Ok(()) => 0,
        Err(why) => {
            log(Level::Error, &why.to_string());
            -1
        }
    }
}

/// Registers the handlers, once per process.
///
/// # Safety
/// Called by flux-shell with a live plugin handle.
#[no_mangle]
pub unsafe extern "C" fn flux_plugin_init(p: *mut FluxPlugin) -> c_int {
    // SAFETY: flux-shell passes its live handle for this call.
    let Some(plugin) = (unsafe { Plugin::from_raw(p) }) else {
        return -1;
    };
    fenced("flux_plugin_init", || {
        let shell = plugin.shell().ok_or(PluginError::NoShell)?;
        let has_conf = plugin
            .conf()
            .is_some_and(|c| !matches!(c.trim(), "" | "{}" | "[]"));
        let takes_over = has_conf && shell.kept(&LOADED) == Some(&false);
        if shell.kept(&LOADED).is_some() && !takes_over {
            log(
                Level::Debug,
                "loaded again: the first load acts (with its conf), this one stands aside",
            );
            return Ok(());
        }
        shell.keep(&LOADED, has_conf)?;
        plugin.register(&[SHELL_INIT, TASK_INIT, TASK_EXIT, SHELL_EXIT], handle)
    })
}

/// Every topic's handler.
///
/// # Safety
/// Called by flux-shell with a live plugin handle and a topic string.
unsafe extern "C" fn handle(
    p: *mut FluxPlugin,
    topic: *const c_char,
    _args: *mut FluxPluginArg,
    _data: *mut c_void,
) -> c_int {
    // SAFETY: flux-shell passes its live handle for this call.
    let Some(plugin) = (unsafe { Plugin::from_raw(p) }) else {
        return -1;
    };
    if topic.is_null() {
        return -1;
    }
    // SAFETY: a non-NULL topic is the NUL-terminated name flux-shell calls.
    let topic = unsafe { CStr::from_ptr(topic) };
    let name = topic.to_string_lossy();
    fenced(&name, || match topic {
        t if t == SHELL_INIT => plugin::shell_init(plugin),
        t if t == TASK_INIT => plugin::task_init(plugin),
        t if t == TASK_EXIT => plugin::task_exit(plugin),
        t if t == SHELL_EXIT => plugin::shell_exit(plugin),
        _ => Ok(()),
    })
}
