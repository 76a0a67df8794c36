//! The `--desi-gpu-map` value parser, on arbitrary bytes made text as the
//! plugin makes them (lossy UTF-8).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let value = String::from_utf8_lossy(data);
    if let Err(e) = desi_gpu_map_core::settings::option::parse_option(&value) {
        assert!(e.to_string().len() < 512);
    }
});
