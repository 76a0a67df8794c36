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
use std::path::PathBuf;
use std::sync::MutexGuard;

/// The user whose tasks run in the containers.
const USER: &str = USERS[0].0;

/// Where pyxis runs relative to this plugin in plugstack.conf.
#[derive(Clone, Copy, Debug)]
enum Order {
    /// This plugin's `task_init` first, then pyxis' (a snippet named to
    /// sort before `pyxis.conf`, as 0.1.0's `desi-gpu-map.conf` did).
    PluginThenPyxis,
    /// pyxis' `task_init` first, the packaged order (`zz-desi-gpu-map.conf`
    /// sorts after `pyxis.conf`): this plugin's runs inside the container.
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
/// dropped, even when a test fails, which removes pyxis' runtime dir, the
/// enroot drop-in and every enroot dir the steps left (all the suite's own,
/// [`made_for_pyxis`]).
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

/// The suite's own enroot (`tests/containers/build.sh` installs it there,
/// `tests/containers/paths.sh` says where): its prefix.
fn enroot_prefix() -> PathBuf {
    let out = std::process::Command::new("bash")
        .args([
            "-c",
            ". tests/containers/paths.sh && echo \"$ENROOT_PREFIX\"",
        ])
        .current_dir(repo())
        .env("REPO_DIR", repo())
        .output()
        .expect("run bash");
    assert!(out.status.success(), "tests/containers/paths.sh: {out:?}");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// What `cluster.sh pyxis` makes, all of it the suite's own: pyxis'
/// runtime_path and enroot's per-user dirs under the state dir, and the
/// drop-in of the suite's enroot, in its own prefix. Nothing of the
/// machine's (its `/etc/enroot`, `/run/pyxis`, an enroot of its own).
fn made_for_pyxis() -> [PathBuf; 3] {
    let state = PathBuf::from(state_dir());
    [
        state.join("pyxis"),
        state.join("enroot"),
        enroot_prefix().join("etc/enroot/enroot.conf.d/desi-gpu-map-test.conf"),
    ]
}

/// The enroot dirs steps left under the test user's data dirs (pyxis
/// removes each step's container at its end), under the state dir, which
/// a Slurm root sees at the same path.
fn containers_left() -> Vec<String> {
    let base = format!("{}/enroot/user-{}", state_dir(), USERS[0].1);
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

/// [`in_image`], run as it must: every task inside the image, and no
/// container left after it.
#[track_caller]
fn ran_inside(words: &str, image: &str) -> Ran {
    let ran = in_image(words, image).ok();
    ran_in_the_image(&ran);
    no_containers_left(&ran);
    ran
}

/// A case's words and rows in the image, after the same step without a
/// container: both give the table's rows.
fn check_case(case: &Case, order: Order, image: &str) {
    let _p = with_pyxis(order, case.plugstack);
    let _held = case.held.map(|(node, gres)| hold(node, gres));
    step(case.srun).ok().rows_are(case.rows);
    let ran = ran_inside(case.srun, image);
    let ran = ran.rows_are(case.rows);
    assert!(
        !ran.stderr().contains("desi-gpu-map:"),
        "the plugin spoke ({order:?}): {ran}"
    );
}

/// The shared layout tables in the plain image, pyxis first (the packaged
/// order: `zz-desi-gpu-map.conf` sorts after `pyxis.conf`): this plugin
/// maps inside the container, every task's row as without one.
#[test]
fn plain_image_pyxis_then_plugin_keeps_every_layouts_rows() {
    let image = image("plain");
    for case in EVERY_LAYOUT.iter().chain(PARTIAL_AND_ROTATE) {
        check_case(case, Order::PyxisThenPlugin, &image);
    }
}

/// `rows` as a step whose flag was withheld has them.
fn unflagged(rows: &[&str]) -> Vec<String> {
    rows.iter()
        .map(|r| match r.strip_suffix(" 1") {
            Some(bound) => format!("{bound} unset"),
            None => r.to_string(),
        })
        .collect()
}

/// The nodes of `rows` with a bound task: each says a container's line once.
fn bound_nodes(rows: &[&str]) -> usize {
    let mut nodes: Vec<&str> = rows
        .iter()
        .filter(|r| r.ends_with(" 1"))
        .filter_map(|r| r.split(' ').nth(1))
        .collect();
    nodes.sort_unstable();
    nodes.dedup();
    nodes.len()
}

/// Each node with a bound task said a line holding every one of `parts`
/// once, and no other node did.
#[track_caller]
fn said_once_per_node(ran: &Ran, rows: &[&str], parts: &[&str]) {
    let said = ran
        .said()
        .iter()
        .filter(|l| parts.iter().all(|p| l.contains(p)))
        .count();
    assert_eq!(said, bound_nodes(rows), "one line per node: {ran}");
}

/// pyxis after this plugin, which cannot see what the image will set: each
/// task is bound as without a container, but not flagged, and each node
/// says why once, naming the order to fix.
#[test]
fn plugin_before_pyxis_binds_withholds_the_flag_and_says_why() {
    let image = image("plain");
    for case in EVERY_LAYOUT {
        let _p = with_pyxis(Order::PluginThenPyxis, case.plugstack);
        let _held = case.held.map(|(node, gres)| hold(node, gres));
        let ran = ran_inside(case.srun, &image);
        let want = unflagged(case.rows);
        let want: Vec<&str> = want.iter().map(String::as_str).collect();
        let ran = ran.rows_are(&want);
        said_once_per_node(
            &ran,
            case.rows,
            &["pyxis runs after desi-gpu-map", "zz-desi-gpu-map.conf"],
        );
    }
}

/// `closest` inside pyxis's container, pyxis first: the rows and the
/// plugin's lines are those of the same step without a container (this
/// cluster binds no CPUs, so `closest` says once per node that it places the
/// tasks contiguously, inside as outside).
#[test]
fn closest_inside_pyxis_maps_and_says_as_without_a_container() {
    let image = image("plain");
    let _p = with_pyxis(Order::PyxisThenPlugin, &[]);
    let words = "-N2 -n8 --ntasks-per-node=4 -w n[1-2] --gpus-per-node=4 --desi-gpu-map=closest";
    let outside = step(words).ok().rows_are(&EIGHT_ONE_GPU_EACH);
    let inside = ran_inside(words, &image).rows_are(&EIGHT_ONE_GPU_EACH);
    assert_eq!(
        inside.said(),
        outside.said(),
        "inside: {inside}\noutside: {outside}"
    );
}

/// Steps that ask for no mapping, in the plain image: Slurm's list, no
/// flag, in both orders.
#[test]
fn plain_image_without_the_option_keeps_slurms_list() {
    let image = image("plain");
    for order in ORDERS {
        let _p = with_pyxis(order, &[]);
        ran_inside("-N1 -n2 -w n1 --gpus-per-node=4", &image)
            .rows_are(&["0 n1 0 0,1,2,3 unset", "1 n1 1 0,1,2,3 unset"]);
    }
}

/// The image's `CUDA_VISIBLE_DEVICES` with the user's
/// `--container-env=CUDA_VISIBLE_DEVICES`, which pyxis does not overwrite:
/// the binding holds in both orders (pyxis first: it leaves Slurm's list,
/// which this plugin then maps; pyxis last: flagged only in that order, as
/// this plugin cannot see the user's `--container-env`).
#[test]
fn sets_gpu_image_with_container_env_keeps_the_binding() {
    let image = image("sets-gpu");
    for order in ORDERS {
        for case in &EVERY_LAYOUT[..2] {
            let _p = with_pyxis(order, &[]);
            let ran = ran_inside(
                &format!("--container-env=CUDA_VISIBLE_DEVICES {}", case.srun),
                &image,
            );
            match order {
                Order::PyxisThenPlugin => ran.rows_are(case.rows),
                Order::PluginThenPyxis => {
                    let want = unflagged(case.rows);
                    ran.rows_are(&want.iter().map(String::as_str).collect::<Vec<_>>())
                }
            };
        }
    }
}

/// pyxis first (the packaged order), an image that sets
/// `CUDA_VISIBLE_DEVICES`, which pyxis copies over Slurm's list: this
/// plugin binds each task from Slurm's list over it, flags it, and each
/// node says so once (measured before the fix: every task saw
/// `all-from-image`, unflagged, and the plugin blamed Slurm).
#[test]
fn an_images_gpu_list_after_pyxis_is_bound_over_and_said_once_per_node() {
    let image = image("sets-gpu");
    for case in &EVERY_LAYOUT[..3] {
        let _p = with_pyxis(Order::PyxisThenPlugin, &[]);
        let ran = ran_inside(case.srun, &image);
        let ran = ran.rows_are(case.rows).never_says("Slurm narrowed");
        said_once_per_node(
            &ran,
            case.rows,
            &[
                "the container's environment set CUDA_VISIBLE_DEVICES to \"all-from-image\"",
                "binding each task from Slurm's list over it",
            ],
        );
    }
}

/// pyxis after this plugin, an image that sets `CUDA_VISIBLE_DEVICES`: the
/// image's list replaces the binding after this plugin's `task_init`, so no
/// task may be flagged (measured before the fix: every task saw
/// `all-from-image` with `DESI_GPU_MAPPED=1`), and each node says why.
#[test]
fn an_images_gpu_list_before_pyxis_is_never_flagged() {
    let image = image("sets-gpu");
    for case in &EVERY_LAYOUT[..2] {
        let _p = with_pyxis(Order::PluginThenPyxis, &[]);
        let ran = ran_inside(case.srun, &image);
        let rows = ran.rows();
        assert!(
            rows.lines().all(|r| r.ends_with(" all-from-image unset")),
            "the image's list, never flagged: {ran}"
        );
        said_once_per_node(&ran, case.rows, &["pyxis runs after desi-gpu-map"]);
    }
}

/// The real control daemon, as cluster.sh copied it.
fn control() -> String {
    format!("{}/mps/bin/nvidia-cuda-mps-control", state_dir())
}

/// Each task's row, and `M rank PIPE seen|unseen`: its MPS pipe directory
/// and whether the container sees it.
fn mps_probe() -> String {
    format!(
        r#"{}; p=${{CUDA_MPS_PIPE_DIRECTORY-unset}}; if [ -d "$p" ]; then s=seen; else s=unseen; fi; echo "M $SLURM_PROCID $p $s""#,
        probe::GPU
    )
}

/// A step under MPS in the plain image, pyxis first: enroot mounts a fresh
/// `/tmp`, where the daemon's pipe directory is not, so the tasks run
/// bound without MPS and the node says which directory to mount; with
/// `--container-mounts=/tmp` they are served, the pipe seen inside.
#[test]
fn mps_inside_pyxis_is_served_where_its_pipe_is_mounted_and_said_where_not() {
    let image = image("plain");
    let control = format!("mps_control={}", control());
    let _p = with_pyxis(Order::PyxisThenPlugin, &[&control]);
    let words = format!(
        "--container-image={image} -N1 -n2 -w n1 --gpus-per-node=2 --desi-gpu-map=contiguous,mps"
    );
    let ran = srun(&words)
        .user(USER)
        .words(&["sh", "-c", &mps_probe()])
        .ok()
        .rows_are(&["0 n1 0 GPU-fake-n1-0 1", "1 n1 1 GPU-fake-n1-1 1"]);
    assert!(
        ran.lines("M ").iter().all(|l| l.ends_with(" unset unseen")),
        "no pipe where the container does not see it: {ran}"
    );
    let said: Vec<String> = ran
        .said()
        .into_iter()
        .filter(|l| l.contains("the container does not see the MPS pipe directory"))
        .collect();
    assert_eq!(said.len(), 1, "said once on the node: {ran}");
    assert!(
        said[0].contains("--container-mounts=/tmp") && said[0].ends_with("running without MPS"),
        "{ran}"
    );
    let ran = srun(&format!("--container-mounts=/tmp {words}"))
        .user(USER)
        .words(&["sh", "-c", &mps_probe()])
        .ok()
        .rows_are(&["0 n1 0 GPU-fake-n1-0 1", "1 n1 1 GPU-fake-n1-1 1"])
        .never_says("does not see");
    let pipes = ran.lines("M ");
    assert_eq!(pipes.len(), 2, "{ran}");
    assert!(
        pipes
            .iter()
            .all(|l| l.contains("/tmp/dgm-mps.") && l.ends_with("/pipe seen")),
        "served, the pipe seen inside: {ran}"
    );
    no_containers_left(&ran);
}

/// The harness' own promise: pyxis and enroot run on what the suite made
/// for them alone (pyxis' runtime dir per user, enroot's dirs per user and
/// node, under the state dir), whatever the machine's own enroot and pyxis
/// say; and `pyxis off` (and `down`) leave nothing of it behind, so other
/// modules run without them.
#[test]
fn pyxis_off_takes_pyxis_and_its_dirs_away() {
    let image = image("plain");
    let made = made_for_pyxis();
    let state = PathBuf::from(state_dir());
    let uid = USERS[0].1;
    {
        let _p = with_pyxis(Order::PluginThenPyxis, &[]);
        in_image("-N2 -n2 -w n[1-2] --gpus-per-node=1", &image).ok();
        for made in &made {
            assert!(made.exists(), "{} is missing", made.display());
        }
        // Used: pyxis' dir for the user, and enroot's for each node.
        let used = [
            state.join(format!("pyxis/{uid}")),
            state.join(format!("enroot/user-{uid}/n1/data")),
            state.join(format!("enroot/user-{uid}/n2/data")),
        ];
        for used in used {
            assert!(
                used.is_dir(),
                "pyxis and enroot did not use {}",
                used.display()
            );
        }
    }
    for made in &made {
        assert!(!made.exists(), "pyxis off left {}", made.display());
    }
    let _c = setup("required", &[]);
    // Without pyxis, srun does not know the option.
    let ran = srun(&format!("--container-image={image} -N1 -n1 -w n1 true"))
        .user(USER)
        .run()
        .fails();
    assert!(ran.stderr().contains("container-image"), "{ran}");
}
