//! The edge with flux-shell: the few C functions the plugin calls, declared
//! here (flux-core's `src/shell/shell.h`, `src/common/libflux/plugin.h`,
//! `src/common/libsubprocess/command.h`), and safe wrappers over them.
//! The symbols stay undefined in the `.so`: the flux-shell that loads it
//! defines them. Every `unsafe` block of the crate but the exports' is
//! here. JSON the shell allocates is copied and freed at once.

use crate::error::PluginError;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr;

/// flux-core's opaque types.
#[repr(C)]
pub struct FluxPlugin {
    _private: [u8; 0],
}
#[repr(C)]
pub struct FluxShell {
    _private: [u8; 0],
}
#[repr(C)]
pub struct FluxTask {
    _private: [u8; 0],
}
#[repr(C)]
pub struct FluxCmd {
    _private: [u8; 0],
}
#[repr(C)]
pub struct FluxHandle {
    _private: [u8; 0],
}
#[repr(C)]
pub struct FluxFuture {
    _private: [u8; 0],
}
#[repr(C)]
pub struct FluxPluginArg {
    _private: [u8; 0],
}

/// A handler, as `flux_plugin_add_handler` takes one.
pub type Handler = unsafe extern "C" fn(
    p: *mut FluxPlugin,
    topic: *const c_char,
    args: *mut FluxPluginArg,
    data: *mut c_void,
) -> c_int;

extern "C" {
    fn flux_plugin_set_name(p: *mut FluxPlugin, name: *const c_char) -> c_int;
    fn flux_plugin_add_handler(
        p: *mut FluxPlugin,
        topic: *const c_char,
        cb: Handler,
        data: *mut c_void,
    ) -> c_int;
    fn flux_plugin_get_conf(p: *mut FluxPlugin) -> *const c_char;
    fn flux_plugin_get_shell(p: *mut FluxPlugin) -> *mut FluxShell;
    fn flux_shell_getopt(
        shell: *mut FluxShell,
        name: *const c_char,
        json: *mut *mut c_char,
    ) -> c_int;
    fn flux_shell_getenv(shell: *mut FluxShell, name: *const c_char) -> *const c_char;
    fn flux_shell_get_flux(shell: *mut FluxShell) -> *mut FluxHandle;
    fn flux_shell_aux_set(
        shell: *mut FluxShell,
        name: *const c_char,
        aux: *mut c_void,
        free_fn: Option<unsafe extern "C" fn(*mut c_void)>,
    ) -> c_int;
    fn flux_shell_aux_get(shell: *mut FluxShell, name: *const c_char) -> *mut c_void;
    fn flux_attr_get(h: *mut FluxHandle, name: *const c_char) -> *const c_char;
    fn flux_get_rank(h: *mut FluxHandle, rank: *mut u32) -> c_int;
    fn flux_kvs_lookup(
        h: *mut FluxHandle,
        ns: *const c_char,
        flags: c_int,
        key: *const c_char,
    ) -> *mut FluxFuture;
    fn flux_kvs_lookup_get(f: *mut FluxFuture, value: *mut *const c_char) -> c_int;
    fn flux_future_destroy(f: *mut FluxFuture);
    fn flux_shell_get_info(shell: *mut FluxShell, json: *mut *mut c_char) -> c_int;
    fn flux_shell_get_rank_info(
        shell: *mut FluxShell,
        rank: c_int,
        json: *mut *mut c_char,
    ) -> c_int;
    fn flux_shell_current_task(shell: *mut FluxShell) -> *mut FluxTask;
    fn flux_shell_task_get_info(task: *mut FluxTask, json: *mut *mut c_char) -> c_int;
    fn flux_shell_task_cmd(task: *mut FluxTask) -> *mut FluxCmd;
    fn flux_cmd_setenvf(
        cmd: *mut FluxCmd,
        overwrite: c_int,
        name: *const c_char,
        fmt: *const c_char,
        ...
    ) -> c_int;
    fn flux_cmd_unsetenv(cmd: *mut FluxCmd, name: *const c_char);
    fn flux_shell_log(
        component: *const c_char,
        level: c_int,
        file: *const c_char,
        line: c_int,
        fmt: *const c_char,
        ...
    );
}

/// The plugin's name, as flux-shell shows it in its messages.
pub const NAME: &CStr = c"desi-gpu-map";

/// Why the flux-shell call just made failed: its errno.
fn call_failed() -> PluginError {
    PluginError::Call(std::io::Error::last_os_error())
}

/// A text as C wants it; an inner NUL (which no name or value of the
/// plugin's has) becomes U+FFFD's replacement, never a panic.
fn c_text(text: &str) -> CString {
    CString::new(text.replace('\0', "\u{fffd}")).unwrap_or_default()
}

/// Copies a JSON text the shell allocated for us, and frees it.
///
/// # Safety
/// `json` is NULL or a NUL-terminated string from `malloc`, ours to free.
unsafe fn take_json(json: *mut c_char) -> Option<String> {
    if json.is_null() {
        return None;
    }
    // SAFETY: per this function's contract, `json` is a live C string.
    let text = unsafe { CStr::from_ptr(json) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: `json` came from the shell's malloc and is freed once, here.
    unsafe { libc::free(json.cast()) };
    Some(text)
}

/// Copies a C string the shell keeps.
///
/// # Safety
/// `text` is NULL or a live NUL-terminated string.
unsafe fn borrowed(text: *const c_char) -> Option<String> {
    if text.is_null() {
        return None;
    }
    // SAFETY: per this function's contract, a live C string.
    let text = unsafe { CStr::from_ptr(text) };
    Some(text.to_string_lossy().into_owned())
}

/// The plugin handle flux-shell gave `flux_plugin_init` or a handler; valid
/// for that call.
#[derive(Clone, Copy)]
pub struct Plugin(*mut FluxPlugin);

impl Plugin {
    /// # Safety
    /// `p` is the handle flux-shell passed to the running call.
    pub unsafe fn from_raw(p: *mut FluxPlugin) -> Option<Plugin> {
        (!p.is_null()).then_some(Plugin(p))
    }

    /// Names the plugin, and registers `handler` for each of `topics`.
    pub fn register(&self, topics: &[&'static CStr], handler: Handler) -> Result<(), PluginError> {
        // SAFETY: self.0 is live for this call; NAME is a static C string
        // that flux copies.
        unsafe { flux_plugin_set_name(self.0, NAME.as_ptr()) };
        for topic in topics {
            // SAFETY: the topic is a static C string; the handler is an
            // extern "C" function of the right type, which lives as long as
            // the library, and takes no data.
            let rc = unsafe {
                flux_plugin_add_handler(self.0, topic.as_ptr(), handler, ptr::null_mut())
            };
            if rc < 0 {
                return Err(PluginError::Register { topic });
            }
        }
        Ok(())
    }

    /// The `conf` table of its `plugin.load`, as JSON; `None`: none.
    pub fn conf(&self) -> Option<String> {
        // SAFETY: self.0 is live; the string returned is the plugin's own.
        unsafe { borrowed(flux_plugin_get_conf(self.0)) }
    }

    pub fn shell(&self) -> Option<Shell> {
        // SAFETY: self.0 is live; the shell outlives its plugins' calls.
        let shell = unsafe { flux_plugin_get_shell(self.0) };
        (!shell.is_null()).then_some(Shell(shell))
    }
}

/// The job shell, for one handler's call.
#[derive(Clone, Copy)]
pub struct Shell(*mut FluxShell);

impl Shell {
    /// A shell option (`-o NAME=VALUE`) as JSON; `None`: not given.
    pub fn option(&self, name: &str) -> Option<String> {
        let name = c_text(name);
        let mut json = ptr::null_mut();
        // SAFETY: the shell is live; `json` receives a malloc'd string.
        let rc = unsafe { flux_shell_getopt(self.0, name.as_ptr(), &mut json) };
        // SAFETY: NULL, or a malloc'd string now ours.
        let text = unsafe { take_json(json) };
        (rc > 0).then_some(text).flatten()
    }

    /// A variable of the job's environment (what its tasks start with).
    pub fn getenv(&self, name: &str) -> Option<String> {
        let name = c_text(name);
        // SAFETY: the shell is live; it keeps the string it returns.
        unsafe { borrowed(flux_shell_getenv(self.0, name.as_ptr())) }
    }

    /// The job's info (`jobid`, `rank`, `size`, `ntasks`, ...), as JSON.
    pub fn info(&self) -> Option<String> {
        let mut json = ptr::null_mut();
        // SAFETY: the shell is live; `json` receives a malloc'd string.
        let rc = unsafe { flux_shell_get_info(self.0, &mut json) };
        // SAFETY: NULL, or a malloc'd string now ours.
        let text = unsafe { take_json(json) };
        (rc == 0).then_some(text).flatten()
    }

    /// This node's part of the job (`ntasks`, `name`, `resources`), as JSON.
    pub fn rank_info(&self) -> Option<String> {
        let mut json = ptr::null_mut();
        // SAFETY: the shell is live; -1 is this shell's rank.
        let rc = unsafe { flux_shell_get_rank_info(self.0, -1, &mut json) };
        // SAFETY: NULL, or a malloc'd string now ours.
        let text = unsafe { take_json(json) };
        (rc == 0).then_some(text).flatten()
    }

    /// Gives the shell `value` to keep under `slot`'s name, dropped when the
    /// shell is destroyed (or the name set again).
    pub fn keep<T: 'static>(&self, slot: &Slot<T>, value: T) -> Result<(), PluginError> {
        let raw = Box::into_raw(Box::new(value)).cast::<c_void>();
        // SAFETY: the shell is live; `raw` is a live Box<T> that the shell
        // now owns and frees once with `drop_box::<T>`, of the same T.
        let rc =
            unsafe { flux_shell_aux_set(self.0, slot.name.as_ptr(), raw, Some(drop_box::<T>)) };
        match rc {
            0 => Ok(()),
            _ => {
                // errno first: freeing may change it.
                let error = call_failed();
                // SAFETY: on failure the shell took nothing: ours to free.
                drop(unsafe { Box::from_raw(raw.cast::<T>()) });
                Err(error)
            }
        }
    }

    /// What the shell keeps under `slot`'s name, for this call.
    pub fn kept<T: 'static>(&self, slot: &Slot<T>) -> Option<&T> {
        // SAFETY: the shell is live; a value under this name was set only
        // by `keep` through a `Slot<T>` of the same name, so of type T, and
        // lives until the shell is destroyed, after every handler's call.
        let raw = unsafe { flux_shell_aux_get(self.0, slot.name.as_ptr()) };
        // SAFETY: NULL, or a live T (above).
        unsafe { raw.cast::<T>().as_ref() }
    }

    /// The shell's handle on its own broker (the one on this node).
    pub fn broker(&self) -> Option<Broker> {
        // SAFETY: the shell is live; the handle is the shell's, and lives as
        // long as it.
        let h = unsafe { flux_shell_get_flux(self.0) };
        (!h.is_null()).then_some(Broker(h))
    }

    /// The task of a `task.*` call.
    pub fn current_task(&self) -> Option<Task> {
        // SAFETY: the shell is live.
        let task = unsafe { flux_shell_current_task(self.0) };
        (!task.is_null()).then_some(Task(task))
    }
}

/// A name the shell keeps a value of type `T` under: one `Slot` a name,
/// so that what is kept under it is read back as what it is.
pub struct Slot<T> {
    name: &'static CStr,
    kind: std::marker::PhantomData<fn() -> T>,
}

impl<T> Slot<T> {
    pub const fn named(name: &'static CStr) -> Slot<T> {
        Slot {
            name,
            kind: std::marker::PhantomData,
        }
    }
}

/// Frees what `keep` gave the shell.
///
/// # Safety
/// `raw` is a `Box<T>` from `keep`, freed once, by the shell.
unsafe extern "C" fn drop_box<T>(raw: *mut c_void) {
    if !raw.is_null() {
        // SAFETY: per this function's contract.
        drop(unsafe { Box::from_raw(raw.cast::<T>()) });
    }
}

/// The shell's own broker, through the shell's handle, for one call.
#[derive(Clone, Copy)]
pub struct Broker(*mut FluxHandle);

impl Broker {
    /// A broker attribute (`flux getattr NAME`); `None`: not set.
    pub fn attr(&self, name: &str) -> Option<String> {
        let name = c_text(name);
        // SAFETY: the handle is live; the broker's cache keeps the string.
        unsafe { borrowed(flux_attr_get(self.0, name.as_ptr())) }
    }

    /// The broker's rank in its instance.
    pub fn rank(&self) -> Result<u32, PluginError> {
        let mut rank = 0u32;
        // SAFETY: the handle is live; `rank` is ours to write.
        match unsafe { flux_get_rank(self.0, &mut rank) } {
            0 => Ok(rank),
            _ => Err(call_failed()),
        }
    }

    /// A key of the instance's KVS (primary namespace), as stored.
    pub fn kvs(&self, key: &str) -> Result<String, PluginError> {
        let lookup_failed = || PluginError::Kvs {
            key: key.to_string(),
            error: std::io::Error::last_os_error(),
        };
        let empty = || PluginError::KvsEmpty {
            key: key.to_string(),
        };
        let key = c_text(key);
        // SAFETY: the handle is live; the namespace is named, since a job
        // shell's default is its job's own (FLUX_KVS_NAMESPACE).
        let f = unsafe { flux_kvs_lookup(self.0, c"primary".as_ptr(), 0, key.as_ptr()) };
        if f.is_null() {
            return Err(lookup_failed());
        }
        let mut value: *const c_char = ptr::null();
        // SAFETY: f is the live future made above; it waits for the answer
        // and keeps the string it gives until destroyed.
        let rc = unsafe { flux_kvs_lookup_get(f, &mut value) };
        let got = match rc {
            // SAFETY: NULL, or a live string the future keeps.
            0 => unsafe { borrowed(value) }.ok_or_else(empty),
            _ => Err(lookup_failed()),
        };
        // SAFETY: f is ours and destroyed once, after its string was copied.
        unsafe { flux_future_destroy(f) };
        got
    }
}

/// A task of the job, for one `task.*` call.
#[derive(Clone, Copy)]
pub struct Task(*mut FluxTask);

impl Task {
    /// The task's `localid` and `rank`, as JSON.
    pub fn info(&self) -> Option<String> {
        let mut json = ptr::null_mut();
        // SAFETY: the task is live; `json` receives a malloc'd string.
        let rc = unsafe { flux_shell_task_get_info(self.0, &mut json) };
        // SAFETY: NULL, or a malloc'd string now ours.
        let text = unsafe { take_json(json) };
        (rc == 0).then_some(text).flatten()
    }

    /// Sets a variable of the task's command, before it starts.
    pub fn setenv(&self, name: &str, value: &str) -> Result<(), PluginError> {
        let cmd = self.cmd()?;
        let (name, value) = (c_text(name), c_text(value));
        // SAFETY: cmd is the task's live command; "%s" takes exactly the one
        // C string passed, which flux copies.
        let rc = unsafe { flux_cmd_setenvf(cmd, 1, name.as_ptr(), c"%s".as_ptr(), value.as_ptr()) };
        match rc {
            0 => Ok(()),
            _ => Err(call_failed()),
        }
    }

    /// Removes a variable from the task's command.
    pub fn unsetenv(&self, name: &str) -> Result<(), PluginError> {
        let cmd = self.cmd()?;
        let name = c_text(name);
        // SAFETY: cmd is the task's live command; flux reads the name only.
        unsafe { flux_cmd_unsetenv(cmd, name.as_ptr()) };
        Ok(())
    }

    fn cmd(&self) -> Result<*mut FluxCmd, PluginError> {
        // SAFETY: the task is live.
        let cmd = unsafe { flux_shell_task_cmd(self.0) };
        match cmd.is_null() {
            true => Err(PluginError::NoCommand),
            false => Ok(cmd),
        }
    }
}

/// How loud a line is, as flux-shell's levels.
#[derive(Clone, Copy)]
pub enum Level {
    Error = 3,
    Warn = 4,
    Notice = 5,
    Debug = 6,
}

/// A line in the job shell's log: what the user sees on the job's stderr
/// (`flux-shell[RANK]: LEVEL: desi-gpu-map: ...`), at `Notice` and above.
pub fn log(level: Level, line: &str) {
    // The core's lines name the plugin already; the shell names it too.
    let line = line.strip_prefix("desi-gpu-map: ").unwrap_or(line);
    let line = c_text(line);
    // SAFETY: every pointer is a live C string; "%s" takes exactly the one
    // passed, so no text of ours is read as a format.
    unsafe {
        flux_shell_log(
            NAME.as_ptr(),
            level as c_int,
            c"desi-gpu-map".as_ptr(),
            0,
            c"%s".as_ptr(),
            line.as_ptr(),
        )
    };
}

/// This process's user and group: the job shell runs as the job's user.
pub fn user() -> (u32, u32) {
    // SAFETY: getuid and getgid take nothing and cannot fail.
    unsafe { (libc::getuid(), libc::getgid()) }
}
