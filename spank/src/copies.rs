//! Other copies of this plugin in the process. plugstack.conf may name the
//! plugin from two paths (an old install next to a new one): each file is
//! then its own library with its own state, and Slurm gives
//! `--desi-gpu-map` to the copy that registers it first (spank.c disables
//! a later registration of the same name, and hands the value only to the
//! first). Slurm loads the plugstack lines in order and calls `init` in that
//! order, so the first copy loaded is the one that registers first; the
//! others must stand aside. (The same path twice is one library, see
//! `is_repeat` in lib.rs.)

use crate::exports::plugin_name;
use std::ffi::{c_char, c_int, c_void, CStr, CString};

/// Where this copy and the first copy of the plugin were loaded from, when
/// they differ: `(first, this)`.
pub fn first_elsewhere() -> Option<(String, String)> {
    let ours: *const c_void = plugin_name.as_ptr().cast();
    let mut first = None;
    for path in loaded_objects() {
        let Some(found) = plugin_in(&path) else {
            continue;
        };
        let path = path.to_string_lossy().into_owned();
        if found == ours {
            return first.map(|first| (first, path));
        }
        first.get_or_insert(path);
    }
    None
}

/// The paths of the objects loaded in this process, in load order (which is
/// plugstack.conf's order for SPANK plugins).
fn loaded_objects() -> Vec<CString> {
    let mut paths: Vec<CString> = Vec::new();
    // SAFETY: `collect` matches the callback type dl_iterate_phdr expects,
    // and `paths` outlives the call, which uses it only through `collect`.
    unsafe { libc::dl_iterate_phdr(Some(collect), std::ptr::addr_of_mut!(paths).cast()) };
    paths
}

/// Keeps each object's path (the main program and the vDSO have none).
unsafe extern "C" fn collect(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    paths: *mut c_void,
) -> c_int {
    // SAFETY: dl_iterate_phdr passes a valid `info` for this call, and
    // `paths` is the vector that loaded_objects passed in, not aliased
    // during the call.
    let (name, paths) = unsafe { ((*info).dlpi_name, &mut *paths.cast::<Vec<CString>>()) };
    if !name.is_null() {
        // SAFETY: dlpi_name is a NUL-terminated string owned by the loader,
        // valid while the object is loaded (the whole call).
        let name = unsafe { CStr::from_ptr(name) };
        if name.to_bytes().first() == Some(&b'/') {
            paths.push(name.to_owned());
        }
    }
    0
}

/// The address of the object's `plugin_name` when the object is a SPANK
/// plugin named like this one (a copy of it).
fn plugin_in(path: &CStr) -> Option<*const c_void> {
    let ours = CStr::from_bytes_until_nul(&plugin_name).ok()?;
    spank_plugin(path, |name, theirs| (theirs == ours).then_some(name))
}

/// The names of the SPANK plugins loaded after this copy, in
/// plugstack.conf's order (pyxis's is "pyxis"): their hooks run after
/// this one's.
pub fn loaded_after() -> Vec<String> {
    let ours: *const c_void = plugin_name.as_ptr().cast();
    let mut after = Vec::new();
    let mut seen = false;
    for path in loaded_objects() {
        let found = spank_plugin(&path, |at, name| {
            Some((at, name.to_string_lossy().into_owned()))
        });
        match found {
            Some((at, _)) if at == ours => seen = true,
            Some((_, name)) if seen => after.push(name),
            _ => {}
        }
    }
    after
}

/// What `read` makes of the object at `path` when it is a SPANK plugin
/// already loaded: the address of its `plugin_name`, and the name.
fn spank_plugin<T>(path: &CStr, read: impl FnOnce(*const c_void, &CStr) -> Option<T>) -> Option<T> {
    // SAFETY: RTLD_NOLOAD only looks up an object that is already loaded (it
    // runs no constructor); the handle is closed below, which only drops
    // the reference taken here.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        return None;
    }
    let symbol = |name: &CStr| {
        // SAFETY: `handle` is a live dlopen handle and `name` a C string.
        unsafe { libc::dlsym(handle, name.as_ptr()) }
    };
    let name = symbol(c"plugin_name");
    let found = if name.is_null() || symbol(c"slurm_spank_init").is_null() {
        None
    } else {
        // SAFETY: a SPANK plugin's `plugin_name` is a NUL-terminated char
        // array (Slurm's plugin ABI: Slurm reads it as a C string too), in
        // an object that stays loaded while this copy is (plugstack.conf's
        // stack); it is read before the handle is closed.
        let theirs = unsafe { CStr::from_ptr(name.cast::<c_char>()) };
        read(name.cast_const(), theirs)
    };
    // SAFETY: `handle` came from dlopen above and is closed once.
    unsafe { libc::dlclose(handle) };
    found
}
