//! The objects loaded in this process (the plugin's copies, and the SPANK
//! plugins beside it).

use std::ffi::{c_char, c_int, c_void, CStr, CString};

/// The paths of the objects loaded in this process, in load order (which is
/// plugstack.conf's order for SPANK plugins).
pub fn loaded_objects() -> Vec<CString> {
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

/// The SPANK plugin at `path`, where it is already loaded: the address
/// of its `plugin_name` and the name there. An object without
/// `slurm_spank_init` beside `plugin_name` is no SPANK plugin: `None`, as
/// for one not loaded. Nothing is loaded and no constructor runs.
pub fn loaded_plugin_name(path: &CStr) -> Option<(*const c_void, CString)> {
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
        Some((name.cast_const(), theirs.to_owned()))
    };
    // SAFETY: `handle` came from dlopen above and is closed once.
    unsafe { libc::dlclose(handle) };
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_c_library_is_loaded_and_is_no_spank_plugin() {
        let objects = loaded_objects();
        let libc = objects
            .iter()
            .find(|p| p.to_string_lossy().contains("libc.so"))
            .unwrap_or_else(|| panic!("no C library among {objects:?}"));
        assert_eq!(loaded_plugin_name(libc), None);
        assert_eq!(loaded_plugin_name(c"/no/such/object.so"), None);
    }
}
