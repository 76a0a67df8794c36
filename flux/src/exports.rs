//! The symbol flux-shell looks up, `flux_plugin_init`, and the one handler
//! it registers for the plugin's topics. A panic never crosses into C:
//! each call is fenced with `catch_unwind`, and a caught one fails the
//! call with a message.

use crate::ffi::{log, FluxPlugin, FluxPluginArg, Level, Plugin};
use crate::plugin;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};

const SHELL_INIT: &CStr = c"shell.init";
const TASK_INIT: &CStr = c"task.init";
const TASK_EXIT: &CStr = c"task.exit";
const SHELL_EXIT: &CStr = c"shell.exit";

/// Set by the first load: the same file loaded again (an initrc and a
/// user's `userrc` naming one path) is one library, whose state a second
/// registration would share; it registers nothing. (Copies at other paths
/// are libraries of their own, and carry the same plugin name, of which
/// Flux's plugin stack keeps one: measured, each task is mapped once.)
static LOADED: AtomicBool = AtomicBool::new(false);
/// Set by the first load with a `conf` table: a site's `lua.d` file that
/// loads the plugin with its conf, after the default initrc's
/// `plugin.load { file = "*.so", conf = {} }` loaded it from the plugin
/// directory, registers again, and Flux's plugin stack keeps it (the
/// same name) in place of the load without one.
static CONF_LOADED: AtomicBool = AtomicBool::new(false);

/// Runs `work`, catching a panic; failure is -1 with the message logged.
fn fenced(what: &str, work: impl FnOnce() -> Result<(), String>) -> c_int {
    let result = catch_unwind(AssertUnwindSafe(work)).unwrap_or_else(|_| {
        Err(format!(
            "{what}: an internal error (a panic); please report it"
        ))
    });
    match result {
        Ok(()) => 0,
        Err(why) => {
            log(Level::Error, &why);
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
        let has_conf = plugin.conf().is_some_and(|c| c.trim() != "{}");
        let takes_over = has_conf && !CONF_LOADED.swap(true, Ordering::SeqCst);
        if LOADED.swap(true, Ordering::SeqCst) && !takes_over {
            log(
                Level::Debug,
                "loaded again (the same .so): the first load acts, this one stands aside",
            );
            return Ok(());
        }
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
        t if t == TASK_EXIT => plugin::task_exit(),
        t if t == SHELL_EXIT => plugin::shell_exit(),
        _ => Ok(()),
    })
}
