//! The layout tables that the plugin's tests (tests/cluster/methods.rs) and
//! `exec`'s (tests/cluster/exec.rs) both run, task for task.
//!
//! Each case: srun's arguments as one string, the plugstack arguments, a GPU
//! request another job holds first, and each task's probe row
//! `rank node local CUDA_VISIBLE_DEVICES flag`, written out by hand.

use super::EIGHT_ONE_GPU_EACH;

pub struct Case {
    pub srun: &'static str,
    pub plugstack: &'static [&'static str],
    pub held: Option<(&'static str, &'static str)>,
    pub rows: &'static [&'static str],
}

/// A case on whole allocations with the default plugstack line.
pub const fn case(srun: &'static str, rows: &'static [&'static str]) -> Case {
    Case {
        srun,
        plugstack: &[],
        held: None,
        rows,
    }
}

/// Both methods in every layout.
pub const EVERY_LAYOUT: &[Case] = &[
        // 4 tasks on each node's 4 GPUs: both methods give each task its own GPU.
        case(
            "-N2 -n8 --ntasks-per-node=4 -w n[1-2] --gpus-per-node=4 --desi-gpu-map=contiguous",
            &EIGHT_ONE_GPU_EACH,
        ),
        case(
            "-N2 -n8 --ntasks-per-node=4 -w n[1-2] --gpus-per-node=4 --desi-gpu-map=roundrobin",
            &EIGHT_ONE_GPU_EACH,
        ),
        // 11 tasks on 2 whole nodes: 6 on n1, 5 on n2.
        case(
            "-N2 -n11 --exclusive -w n[1-2] --gpus-per-node=4 --desi-gpu-map=contiguous",
            &[
                "0 n1 0 0 1", "1 n1 1 0 1", "2 n1 2 1 1", "3 n1 3 1 1", "4 n1 4 2 1",
                "5 n1 5 3 1", "6 n2 0 0 1", "7 n2 1 0 1", "8 n2 2 1 1", "9 n2 3 2 1",
                "10 n2 4 3 1",
            ],
        ),
        case(
            "-N2 -n11 --exclusive -w n[1-2] --gpus-per-node=4 --desi-gpu-map=roundrobin",
            &[
                "0 n1 0 0 1", "1 n1 1 1 1", "2 n1 2 2 1", "3 n1 3 3 1", "4 n1 4 0 1",
                "5 n1 5 1 1", "6 n2 0 0 1", "7 n2 1 1 1", "8 n2 2 2 1", "9 n2 3 3 1",
                "10 n2 4 0 1",
            ],
        ),
        case(
            "-N2 -n5 --exclusive -w n[1-2] --gpus-per-node=2 --desi-gpu-map=contiguous",
            &["0 n1 0 0 1", "1 n1 1 0 1", "2 n1 2 1 1", "3 n2 0 0 1", "4 n2 1 1 1"],
        ),
        // -m cyclic: even ranks on n1, odd ranks on n2; local ids follow rank order.
        case(
            "-N2 -n10 --ntasks-per-node=5 -m cyclic -w n[1-2] --gpus-per-node=4 --desi-gpu-map=contiguous",
            &[
                "0 n1 0 0 1", "1 n2 0 0 1", "2 n1 1 0 1", "3 n2 1 0 1", "4 n1 2 1 1",
                "5 n2 2 1 1", "6 n1 3 2 1", "7 n2 3 2 1", "8 n1 4 3 1", "9 n2 4 3 1",
            ],
        ),
        case(
            "-N2 -n10 --ntasks-per-node=5 -m cyclic -w n[1-2] --gpus-per-node=4 --desi-gpu-map=roundrobin",
            &[
                "0 n1 0 0 1", "1 n2 0 0 1", "2 n1 1 1 1", "3 n2 1 1 1", "4 n1 2 2 1",
                "5 n2 2 2 1", "6 n1 3 3 1", "7 n2 3 3 1", "8 n1 4 0 1", "9 n2 4 0 1",
            ],
        ),
        // Fewer tasks than GPUs: each task holds its share, no GPU idle.
        case(
            "-N1 -n3 -w n1 --gpus-per-node=4 --desi-gpu-map=contiguous",
            &["0 n1 0 0,1 1", "1 n1 1 2 1", "2 n1 2 3 1"],
        ),
        case(
            "-N1 -n3 -w n1 --gpus-per-node=4 --desi-gpu-map=roundrobin",
            &["0 n1 0 0,3 1", "1 n1 1 1 1", "2 n1 2 2 1"],
        ),
        case(
            "-N1 -n2 -w n1 --gpus-per-node=4 --desi-gpu-map=contiguous",
            &["0 n1 0 0,1 1", "1 n1 1 2,3 1"],
        ),
        case(
            "-N1 -n2 -w n1 --gpus-per-node=4 --desi-gpu-map=roundrobin",
            &["0 n1 0 0,2 1", "1 n1 1 1,3 1"],
        ),
        // One task a node (torchrun, flux start, Dask, Ray): every GPU.
        case(
            "-N2 --ntasks-per-node=1 -w n[1-2] --gpus-per-node=4 --desi-gpu-map=contiguous",
            &["0 n1 0 0,1,2,3 1", "1 n2 0 0,1,2,3 1"],
        ),
        case(
            "-N2 --ntasks-per-node=1 -w n[1-2] --gpus-per-node=4 --desi-gpu-map=roundrobin",
            &["0 n1 0 0,1,2,3 1", "1 n2 0 0,1,2,3 1"],
        ),
        // -m cyclic, 2 tasks a node on 4 GPUs: ranks 0, 2 on n1, 1, 3 on n2.
        case(
            "-N2 -n4 --ntasks-per-node=2 -m cyclic -w n[1-2] --gpus-per-node=4 --desi-gpu-map=contiguous",
            &["0 n1 0 0,1 1", "1 n2 0 0,1 1", "2 n1 1 2,3 1", "3 n2 1 2,3 1"],
        ),
        case(
            "-N2 -n4 --ntasks-per-node=2 -m cyclic -w n[1-2] --gpus-per-node=4 --desi-gpu-map=roundrobin",
            &["0 n1 0 0,2 1", "1 n2 0 0,2 1", "2 n1 1 1,3 1", "3 n2 1 1,3 1"],
        ),
        // Mixed nodes, two tasks each: n2's 4 GPUs in halves, n3's 2 one
        // a task.
        case(
            "-N2 -n4 -w n[2-3] --gpus=6 --ntasks-per-node=2 --desi-gpu-map=contiguous",
            &["0 n2 0 0,1 1", "1 n2 1 2,3 1", "2 n3 0 0 1", "3 n3 1 1 1"],
        ),
        // n2 has 4 GPUs, n3 has 2: --gpus=6 takes all of both.
        case(
            "-N2 -n8 --ntasks-per-node=4 -w n[2-3] --gpus=6 --desi-gpu-map=contiguous",
            &[
                "0 n2 0 0 1", "1 n2 1 1 1", "2 n2 2 2 1", "3 n2 3 3 1", "4 n3 0 0 1",
                "5 n3 1 0 1", "6 n3 2 1 1", "7 n3 3 1 1",
            ],
        ),
];

/// Partial grants, GPUs another job holds, and `visible=rotate`.
pub const PARTIAL_AND_ROTATE: &[Case] = &[
    case(
        "-N1 -n3 -w n1 --gres=gpu:2 --desi-gpu-map=contiguous",
        &["0 n1 0 0 1", "1 n1 1 0 1", "2 n1 2 1 1"],
    ),
    // Another job holds GPUs 0 and 1: Slurm's tokens are kept.
    Case {
        held: Some(("n1", "gpu:2")),
        ..case(
            "-N1 -n3 -w n1 --gres=gpu:2 --desi-gpu-map=contiguous",
            &["0 n1 0 2 1", "1 n1 1 2 1", "2 n1 2 3 1"],
        )
    },
    // Fewer tasks than GPUs on a partial grant: the two held GPUs split.
    Case {
        held: Some(("n1", "gpu:1")),
        ..case(
            "-N1 -n2 -w n1 --gres=gpu:3 --desi-gpu-map=contiguous",
            &["0 n1 0 1,2 1", "1 n1 1 3 1"],
        )
    },
    // rotate with fewer tasks than GPUs: its own GPUs first, then the rest.
    Case {
        plugstack: &["visible=rotate"],
        ..case(
            "-N1 -n2 -w n1 --gpus-per-node=4 --desi-gpu-map=contiguous",
            &["0 n1 0 0,1,2,3 1", "1 n1 1 2,3,0,1 1"],
        )
    },
    Case {
        plugstack: &["visible=rotate"],
        ..case(
            "-N1 -n2 -w n1 --gpus-per-node=4 --desi-gpu-map=roundrobin",
            &["0 n1 0 0,2,1,3 1", "1 n1 1 1,3,2,0 1"],
        )
    },
    Case {
        plugstack: &["visible=rotate"],
        ..case(
            "-N1 -n4 -w n1 --gpus-per-node=4 --desi-gpu-map=roundrobin",
            &[
                "0 n1 0 0,1,2,3 1",
                "1 n1 1 1,2,3,0 1",
                "2 n1 2 2,3,0,1 1",
                "3 n1 3 3,0,1,2 1",
            ],
        )
    },
];
