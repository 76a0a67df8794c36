//! The plugstack argument parser: words split on spaces, as Slurm splits
//! the plugstack.conf line.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let line = String::from_utf8_lossy(data);
    let args: Vec<&str> = line.split(' ').collect();
    if let Err(e) = desi_gpu_map_core::settings::site::parse_args(&args) {
        assert!(e.to_string().starts_with("bad plugstack argument"));
    }
});
