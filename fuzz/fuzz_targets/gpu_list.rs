//! The GPU-list parser, and the mapping over whatever it accepts: every
//! task's share stays in the list, and with fewer tasks than GPUs every
//! GPU is held by exactly one task.
#![no_main]
use desi_gpu_map_core::method::Visible;
use desi_gpu_map_core::method::{share, visible_list};
use desi_gpu_map_core::method::{Method};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let value = String::from_utf8_lossy(data);
    if let Ok(gpus) = desi_gpu_map_core::slurm::gpus::parse_gpu_list(&value) {
        let k = gpus.len();
        for n in [1, k / 2 + 1, k, k * 2 + 1] {
            let mut held = vec![0usize; k];
            for l in 0..n {
                let own = share(Method::Contiguous, l, n, k).unwrap();
                assert!(own.iter().all(|&p| p < k));
                own.iter().for_each(|&p| held[p] += 1);
                assert_eq!(visible_list(&gpus, &own, Visible::Rotate).len(), k);
            }
            if n < k {
                assert!(held.iter().all(|&h| h == 1));
            }
        }
    }
});
