//! The integration suites that need the local Slurm test cluster: one test
//! binary (`cargo test --features cluster-tests --test cluster`), one module
//! per subject, all through one runner (`common/`). Each test is named by
//! its module (`mps::...`), and `tests/run-cluster-tests.sh` runs each
//! module on the cluster it needs with a filter (`-- mps::`). They fail,
//! never skip, when the cluster is not up. The harness that brings the
//! cluster up and down (`cluster.sh`) is in this folder too; the tests that
//! need no cluster are the other binaries of `tests/` (tests/README.md).

mod common;

mod closest;
mod desi;
mod exec;
mod faults;
mod flux;
mod hidepid;
mod input;
mod methods;
mod mpi;
mod mps;
mod podman;
mod production;
mod prolog;
mod pyxis;
mod sources;
mod vendors;
