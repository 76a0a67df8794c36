//! No parser panics, whatever it is fed; every error names the bad input.

use desi_gpu_map_core::cpuset::CpuSet;
use desi_gpu_map_core::settings::option::parse_option;
use desi_gpu_map_core::settings::site::parse_args;
use desi_gpu_map_core::slurm::cpu_bind::bind_list_cpus;
use desi_gpu_map_core::slurm::gpus::parse_gpu_list;
use desi_gpu_map_core::topology::Topology;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn option_parser_never_panics(s in any::<String>()) {
        if let Err(e) = parse_option(&s) {
            prop_assert!(e.to_string().contains("valid values"));
            prop_assert!(e.to_string().len() < 512, "one short line");
        }
    }

    #[test]
    fn option_parser_on_option_like_text(s in "(verbose,)?[a-z,=-]{0,20}") {
        let _ = parse_option(&s);
    }

    #[test]
    fn plugstack_parser_never_panics(args in proptest::collection::vec(any::<String>(), 0..6)) {
        if let Err(e) = parse_args(&args) {
            prop_assert!(e.to_string().starts_with("bad plugstack argument"));
            prop_assert!(e.to_string().len() < 768, "one line: every key, and the value cut short");
        }
    }

    #[test]
    fn plugstack_parser_on_argument_like_text(args in proptest::collection::vec("[a-z]{0,8}(=[a-z/._-]{0,12})?", 0..6)) {
        let _ = parse_args(&args);
    }

    #[test]
    fn gpu_list_parser_never_panics(s in any::<String>()) {
        match parse_gpu_list(&s) {
            Ok(list) => prop_assert!(!list.is_empty()),
            Err(e) => {
                prop_assert!(e.to_string().starts_with("GPU list"));
                prop_assert!(e.to_string().len() < 512, "one short line");
            }
        }
    }

    #[test]
    fn gpu_list_parser_on_list_like_text(s in "[0-9GPUMI, -]{0,40}") {
        if let Ok(list) = parse_gpu_list(&s) {
            let mut unique = list.clone();
            unique.sort();
            unique.dedup();
            prop_assert_eq!(unique.len(), list.len(), "no duplicates survive");
        }
    }

    #[test]
    fn cpu_set_parser_never_panics(s in any::<String>()) {
        if let Err(e) = CpuSet::parse(&s) {
            prop_assert!(e.to_string().starts_with("CPU set"));
            prop_assert!(e.to_string().len() < 512, "one short line");
        }
    }

    #[test]
    fn cpu_bind_lists_never_panic(list in "[0-9a-fx,]{0,40}", count in 0usize..20) {
        for kind in ["mask_cpu:", "map_cpu:", "verbose,mask_cpu:"] {
            if let Some(tasks) = bind_list_cpus(Some(kind), Some(&list), count) {
                prop_assert_eq!(tasks.len(), count);
            }
        }
    }

    #[test]
    fn topology_parser_never_panics(s in any::<String>()) {
        if let Err(e) = Topology::parse(&s) {
            prop_assert!(e.to_string().len() < 512, "one short line");
        }
    }

    #[test]
    fn topology_parser_on_file_like_text(s in "(cpus [0-9,-]{1,8}\n)?([0-9]{1,2} (-|[0-9]) [0-9,-]{1,8}\n){0,6}") {
        if let Ok(t) = Topology::parse(&s) {
            prop_assert!(!t.gpus.is_empty());
        }
    }
}
