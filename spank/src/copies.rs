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
use desi_gpu_map_host::sys::{loaded_objects, loaded_plugin_name};
use std::ffi::{c_void, CStr};

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

/// The address of the object's `plugin_name` when the object is a SPANK
/// plugin named like this one (a copy of it).
fn plugin_in(path: &CStr) -> Option<*const c_void> {
    let ours = CStr::from_bytes_until_nul(&plugin_name).ok()?;
    let (at, theirs) = loaded_plugin_name(path)?;
    (theirs.as_c_str() == ours).then_some(at)
}

/// The names of the SPANK plugins loaded after this copy, in
/// plugstack.conf's order (pyxis's is "pyxis"): their hooks run after
/// this one's.
pub fn loaded_after() -> Vec<String> {
    let ours: *const c_void = plugin_name.as_ptr().cast();
    let mut after = Vec::new();
    let mut seen = false;
    for path in loaded_objects() {
        match loaded_plugin_name(&path) {
            Some((at, _)) if at == ours => seen = true,
            Some((_, name)) if seen => after.push(name.to_string_lossy().into_owned()),
            _ => {}
        }
    }
    after
}
