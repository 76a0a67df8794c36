//! The GPU-list parser, and the mapping over whatever it accepts.
#![no_main]
use desi_gpu_map_core::method::Visible;
use desi_gpu_map_core::method::{position, visible_list};
use desi_gpu_map_core::method::{Method};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let value = String::from_utf8_lossy(data);
    if let Ok(gpus) = desi_gpu_map_core::slurm::gpus::parse_gpu_list(&value) {
        let n = gpus.len() * 2 + 1;
        for l in 0..n {
            let p = position(Method::Contiguous, l, n, gpus.len()).unwrap();
            assert!(p < gpus.len());
            assert_eq!(visible_list(&gpus, p, Visible::Rotate).len(), gpus.len());
        }
    }
});
