//! The binding inside containers: NVIDIA's real pyxis 0.24.0 (a SPANK
//! plugin: `srun --container-image=IMAGE`) driving NVIDIA's real enroot
//! 4.1.2, both built from the sources in `tests/containers/thirdparty/` by
//! `tests/containers/build.sh`, beside this plugin in the test plugstack,
//! in both orders (`cluster.sh pyxis SO before|after`). The images are
//! local squashfs files of busybox (`tests/containers/image.sh`): `plain`,
//! and `sets-gpu`, whose `/etc/environment` sets
//! `CUDA_VISIBLE_DEVICES=all-from-image`.
//!
//! pyxis starts one container per node, copies the container process's
//! environment into every task with overwrite, and joins its namespaces,
//! all in its `task_init`. enroot does not hand the caller's environment
//! into the container, so a plain image leaves the binding alone, whichever
//! plugin runs first; an image that sets a GPU variable replaces it.
//!
//! The tasks run as the unprivileged test user `dgm-alice`, as enroot
//! runs for users on real sites, and print their rows with the image's
//! busybox `sh`. Run on the local test cluster that
//! `tests/run-cluster-tests.sh` brings up (nodes n1 and n2 with 4 fake GPUs
//! each, n3 with 2, n4 with 2 that Slurm names by count only); these tests
//! fail, never skip, when it is not up or pyxis and enroot are not built.

use crate::common::layouts::{Case, EVERY_LAYOUT, PARTIAL_AND_ROTATE};
use crate::common::*;
use std::path::{Path, PathBuf};
use std::sync::MutexGuard;

/// The user whose tasks run in the containers.
const USER: &str = USERS[0].0;

/// Where pyxis runs relative to this plugin in plugstack.conf.
#[derive(Clone, Copy, Debug)]
enum Order {
    /// This plugin's `task_init` first, then pyxis' (the order of the
    /// packaged snippets' names, `desi-gpu-map.conf` < `pyxis.conf`).
    PluginThenPyxis,
    /// pyxis' `task_init` first: this plugin's runs inside the container.
    PyxisThenPlugin,
}

const ORDERS: [Order; 2] = [Order::PluginThenPyxis, Order::PyxisThenPlugin];

impl Order {
    /// `cluster.sh pyxis SO WORD`: where pyxis' snippet sorts.
    fn word(self) -> &'static str {
        match self {
            Order::PluginThenPyxis => "after",
            Order::PyxisThenPlugin => "before",
        }
    }
}

/// pyxis built for the series under test: `DGM_PYXIS_SO`
/// (run-cluster-tests.sh sets it), else build.sh's output.
fn pyxis_so() -> String {
    let so = std::env::var("DGM_PYXIS_SO")
        .ok()
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(format!("target/containers/{}/spank_pyxis.so", series())));
    assert!(
        so.is_file(),
        "{} is missing: run tests/containers/build.sh {} [ROOT] as root",
        so.display(),
        series()
    );
    so.display().to_string()
}

/// The image `name` (`plain` or `sets-gpu`), copied from
/// `target/containers/images/` into the state dir, where the test user and
/// a Slurm root see it at the same path.
fn image(name: &str) -> String {
    let built = repo().join(format!("target/containers/images/{name}.sqsh"));
    assert!(
        built.is_file(),
        "{} is missing: run tests/containers/build.sh (it runs tests/containers/image.sh)",
        built.display()
    );
    let dir = format!("{}/images", state_dir());
    std::fs::create_dir_all(&dir).expect("make the images' dir");
    let path = format!("{dir}/{name}.sqsh");
    std::fs::copy(&built, &path).expect("copy the image");
    path
}

/// The cluster with this plugin and pyxis in `order`; `pyxis off` when
/// dropped, even when a test fails, which removes /run/pyxis, the enroot
/// drop-in and every enroot dir the steps left.
struct WithPyxis {
    _cluster: MutexGuard<'static, ()>,
}

impl Drop for WithPyxis {
    fn drop(&mut self) {
        let _ = std::process::Command::new("bash")
            .arg(repo().join("tests/cluster/cluster.sh"))
            .args(["pyxis", "off"])
            .output();
    }
}

fn with_pyxis(order: Order, plugstack: &[&str]) -> WithPyxis {
    let guard = setup("required", plugstack);
    cluster(&["pyxis", &pyxis_so(), order.word()]);
    WithPyxis { _cluster: guard }
}

/// What each task prints: its [`probe::GPU`] row, and a `C rank SHELL`
/// line naming what `/bin/sh` is where it runs (`busybox` in the images).
fn container_probe() -> String {
    format!(
        r#"{}; echo "C $SLURM_PROCID $(readlink /bin/sh)""#,
        probe::GPU
    )
}

/// `srun WORDS` as the test user, each task running the probe with `sh`
/// (the image has busybox, no bash).
fn step(words: &str) -> Job {
    srun(words)
        .user(USER)
        .words(&["sh", "-c", &container_probe()])
}

/// [`step`] in the image at `image`.
fn in_image(words: &str, image: &str) -> Job {
    srun(&format!("--container-image={image} {words}"))
        .user(USER)
        .words(&["sh", "-c", &container_probe()])
}

/// Every task of `ran` ran inside the image: its `/bin/sh` is busybox.
#[track_caller]
fn ran_in_the_image(ran: &Ran) {
    let shells = ran.lines("C ");
    assert_eq!(
        shells.len(),
        ran.rows().lines().count(),
        "one C line per task: {ran}"
    );
    assert!(
        shells.iter().all(|l| l.ends_with(" busybox")),
        "a task ran outside the image: {ran}"
    );
}

/// The enroot dirs steps left under the test user's data dirs (pyxis
/// removes each step's container at its end); a Slurm root's /tmp is its
/// own.
fn containers_left() -> Vec<String> {
    let base = format!(
        "{}/tmp/enroot-run/user-{}",
        slurm_root().unwrap_or_default(),
        USERS[0].1
    );
    let mut left = Vec::new();
    for node in std::fs::read_dir(&base).into_iter().flatten().flatten() {
        let data = node.path().join("data");
        for c in std::fs::read_dir(&data).into_iter().flatten().flatten() {
            left.push(c.path().display().to_string());
        }
    }
    left.sort();
    left
}

#[track_caller]
fn no_containers_left(after: &Ran) {
    let left = containers_left();
    assert!(left.is_empty(), "pyxis left {left:?} after: {after}");
}

/// A case's words and rows in the image, after the same step without a
/// container: both give the table's rows.
fn check_case(case: &Case, order: Order, image: &str) {
    let _p = with_pyxis(order, case.plugstack);
    let _held = case.held.map(|(node, gres)| hold(node, gres));
    step(case.srun).ok().rows_are(case.rows);
    let ran = in_image(case.srun, image).ok();
    ran_in_the_image(&ran);
    no_containers_left(&ran);
    let ran = ran.rows_are(case.rows);
    assert!(
        !ran.stderr().contains("desi-gpu-map:"),
        "the plugin spoke ({order:?}): {ran}"
    );
}

/// The shared layout tables in the plain image, pyxis after this plugin:
/// every task's row as without a container (enroot hands the container none
/// of the caller's variables, so pyxis copies back no GPU list).
#[test]
fn plain_image_plugin_then_pyxis_keeps_every_layouts_rows() {
    let image = image("plain");
    for case in EVERY_LAYOUT.iter().chain(PARTIAL_AND_ROTATE) {
        check_case(case, Order::PluginThenPyxis, &image);
    }
}

/// The same with pyxis first: this plugin maps inside the container.
#[test]
fn plain_image_pyxis_then_plugin_keeps_every_layouts_rows() {
    let image = image("plain");
    for case in EVERY_LAYOUT.iter().chain(PARTIAL_AND_ROTATE) {
        check_case(case, Order::PyxisThenPlugin, &image);
    }
}

/// Steps that ask for no mapping, in the plain image: Slurm's list, no
/// flag, in both orders.
#[test]
fn plain_image_without_the_option_keeps_slurms_list() {
    let image = image("plain");
    for order in ORDERS {
        let _p = with_pyxis(order, &[]);
        let ran = in_image("-N1 -n2 -w n1 --gpus-per-node=4", &image)
            .ok()
            .rows_are(&["0 n1 0 0,1,2,3 unset", "1 n1 1 0,1,2,3 unset"]);
        ran_in_the_image(&ran);
        no_containers_left(&ran);
    }
}

/// The image's `CUDA_VISIBLE_DEVICES` with the user's
/// `--container-env=CUDA_VISIBLE_DEVICES`, which pyxis does not overwrite:
/// the binding holds in both orders (pyxis first: it leaves Slurm's list,
/// which this plugin then maps).
#[test]
fn sets_gpu_image_with_container_env_keeps_the_binding() {
    let image = image("sets-gpu");
    for order in ORDERS {
        for case in &EVERY_LAYOUT[..2] {
            let _p = with_pyxis(order, &[]);
            let ran = in_image(
                &format!("--container-env=CUDA_VISIBLE_DEVICES {}", case.srun),
                &image,
            )
            .ok();
            ran_in_the_image(&ran);
            no_containers_left(&ran);
            ran.rows_are(case.rows);
        }
    }
}

/// What a task's row may be when the image sets `CUDA_VISIBLE_DEVICES`:
/// the binding held (`want`, flag 1), or no flag at all with a line from
/// the plugin that says why. Never the flag over a list the plugin did not
/// give. Returns the rows that lost their binding.
#[track_caller]
fn held_or_unflagged(ran: &Ran, want: &[&str]) -> usize {
    let got = ran.rows();
    let got: Vec<&str> = got.lines().collect();
    assert_eq!(got.len(), want.len(), "one row per task: {ran}");
    let mut lost = 0;
    for (got, want) in got.iter().zip(want) {
        if got == want {
            continue;
        }
        lost += 1;
        let words: Vec<&str> = got.split(' ').collect();
        assert_eq!(
            words.get(4),
            Some(&"unset"),
            "task {}: DESI_GPU_MAPPED=1 over CUDA_VISIBLE_DEVICES={}, which the plugin did not \
             give (its binding: {want:?}): {ran}",
            words[0],
            words.get(3).unwrap_or(&"?"),
        );
    }
    if lost > 0 {
        assert!(
            !ran.said().is_empty(),
            "{lost} tasks lost their binding and the plugin said nothing: {ran}"
        );
    }
    lost
}

/// EXPECTED TO FAIL until the plugin detects a container plugin's
/// overwrite. pyxis after this plugin, an image that sets
/// `CUDA_VISIBLE_DEVICES`: measured with pyxis 0.24.0 on 22.05, every task
/// sees `all-from-image` with `DESI_GPU_MAPPED=1`, a flag that claims a
/// binding the task no longer has. Right: the binding held, or no flag and
/// a line that says why.
#[test]
fn sets_gpu_image_plugin_then_pyxis_never_flags_a_lost_binding() {
    let image = image("sets-gpu");
    for case in &EVERY_LAYOUT[..2] {
        let _p = with_pyxis(Order::PluginThenPyxis, &[]);
        let ran = in_image(case.srun, &image).ok();
        ran_in_the_image(&ran);
        no_containers_left(&ran);
        held_or_unflagged(&ran, case.rows);
    }
}

/// EXPECTED TO FAIL until the plugin tells a container plugin's overwrite
/// from Slurm's own per-task binding. pyxis first, an image that sets
/// `CUDA_VISIBLE_DEVICES`: measured with pyxis 0.24.0 on 22.05, every task
/// sees `all-from-image` with no flag, and the plugin says "Slurm narrowed
/// CUDA_VISIBLE_DEVICES per task (now "all-from-image"); keeping Slurm's
/// binding": Slurm did not, and no binding of Slurm's is kept. Right: the
/// binding held, or no flag and a line that does not blame Slurm.
#[test]
fn sets_gpu_image_pyxis_then_plugin_keeps_the_binding_or_says_why() {
    let image = image("sets-gpu");
    for case in &EVERY_LAYOUT[..2] {
        let _p = with_pyxis(Order::PyxisThenPlugin, &[]);
        let ran = in_image(case.srun, &image).ok();
        ran_in_the_image(&ran);
        no_containers_left(&ran);
        if held_or_unflagged(&ran, case.rows) > 0 {
            assert!(
                !ran.stderr().contains("Slurm narrowed"),
                "the image set CUDA_VISIBLE_DEVICES, not Slurm: {ran}"
            );
        }
    }
}

/// The harness' own promise: `pyxis off` (and `down`) leave nothing of
/// pyxis or enroot behind, so other modules run without them.
#[test]
fn pyxis_off_takes_pyxis_and_its_dirs_away() {
    let image = image("plain");
    let root = slurm_root().unwrap_or_default();
    {
        let _p = with_pyxis(Order::PluginThenPyxis, &[]);
        in_image("-N2 -n2 -w n[1-2] --gpus-per-node=1", &image).ok();
        for made in [
            "/run/pyxis",
            "/tmp/enroot-run",
            "/etc/enroot/enroot.conf.d/desi-gpu-map-test.conf",
        ] {
            assert!(
                Path::new(&format!("{root}{made}")).exists(),
                "{root}{made} is missing"
            );
        }
    }
    for made in [
        "/run/pyxis",
        "/tmp/enroot-run",
        "/etc/enroot/enroot.conf.d/desi-gpu-map-test.conf",
    ] {
        assert!(
            !Path::new(&format!("{root}{made}")).exists(),
            "pyxis off left {root}{made}"
        );
    }
    let _c = setup("required", &[]);
    // Without pyxis, srun does not know the option.
    let ran = srun(&format!("--container-image={image} -N1 -n1 -w n1 true"))
        .user(USER)
        .run()
        .fails();
    assert!(ran.stderr().contains("container-image"), "{ran}");
}
