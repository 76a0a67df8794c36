//! `desi-gpu-map plan` as a user runs it: the tables and JSON it prints
//! for a layout, `closest` with its topologies, and what it refuses.

mod common;

use common::{run, stdout};

/// The table that docs/user-guide.md (once the README) shows for this line.
#[test]
fn plan_prints_the_readme_table() {
    let out = run(&[
        "plan",
        "-N",
        "2",
        "-n",
        "5",
        "-m",
        "cyclic",
        "--gpus",
        "4,2",
        "--method",
        "contiguous",
    ]);
    assert!(out.status.success());
    let want = "\
method contiguous visible single
  rank  node     local      gpu  visible
     0     0       0/3      0,1  0,1
     1     1       0/2        0  0
     2     0       1/3        2  2
     3     1       1/2        1  1
     4     0       2/3        3  3

load per GPU
 node      gpu  tasks
    0        0      1
    0        1      1
    0        2      1
    0        3      1
    1        0      1
    1        1      1
";
    assert_eq!(stdout(&out), want);
}

#[test]
fn plan_json_for_scripts() {
    let out = run(&[
        "plan",
        "--ntasks-per-node",
        "3",
        "--devices",
        "2,3",
        "--visible",
        "rotate",
        "--json",
    ]);
    assert!(out.status.success());
    assert_eq!(
        stdout(&out),
        "{\"method\": \"contiguous\", \"visible\": \"rotate\", \"tasks\": [\
{\"rank\": 0, \"node\": 0, \"local_id\": 0, \"local_count\": 3, \"gpu\": \"2\", \"gpus\": [\"2\"], \"visible\": \"2,3\"}, \
{\"rank\": 1, \"node\": 0, \"local_id\": 1, \"local_count\": 3, \"gpu\": \"2\", \"gpus\": [\"2\"], \"visible\": \"2,3\"}, \
{\"rank\": 2, \"node\": 0, \"local_id\": 2, \"local_count\": 3, \"gpu\": \"3\", \"gpus\": [\"3\"], \"visible\": \"3,2\"}], \
\"load\": [{\"node\": 0, \"gpu\": \"2\", \"tasks\": 2}, {\"node\": 0, \"gpu\": \"3\", \"tasks\": 1}]}\n"
    );
}

/// Fewer tasks than GPUs: each task's share, for each method, and no idle
/// GPU in the load table (the issue's `plan -N1 -n2 --gpus 4`).
#[test]
fn plan_shows_each_tasks_share_where_tasks_are_fewer_than_gpus() {
    for (method, want) in [
        ("contiguous", [["0", "1"], ["2", "3"]]),
        ("roundrobin", [["0", "2"], ["1", "3"]]),
    ] {
        let out = run(&[
            "plan", "-N1", "-n2", "--gpus", "4", "--method", method, "--json",
        ]);
        assert!(out.status.success(), "{out:?}");
        let text = stdout(&out);
        for (l, gpus) in want.iter().enumerate() {
            let row = format!(
                "\"local_id\": {l}, \"local_count\": 2, \"gpu\": \"{}\", \"gpus\": [\"{}\", \"{}\"]",
                gpus.join(","),
                gpus[0],
                gpus[1]
            );
            assert!(text.contains(&row), "{method}: {row} in {text}");
        }
        assert!(!text.contains("\"tasks\": 0"), "an idle GPU: {text}");
    }
    // One task a node, as torchrun's and Flux's launchers run: every GPU.
    let out = run(&["plan", "-N2", "--ntasks-per-node", "1", "--gpus", "4"]);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.contains("     0     0       0/1  0,1,2,3  0,1,2,3\n"),
        "{text}"
    );
    assert!(
        text.contains("     1     1       0/1  0,1,2,3  0,1,2,3\n"),
        "{text}"
    );
}

#[test]
fn plan_mps_shows_each_tasks_share_and_refuses_49_clients() {
    // The seed's case: 32 ranks on a 4-GPU node, 8 per GPU, 12% each.
    let out = run(&["plan", "-n", "32", "--gpus", "4", "--mps"]);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.contains("  rank  node     local      gpu share  visible\n"),
        "{text}"
    );
    assert!(
        text.contains("     0     0      0/32        0    12  0\n"),
        "{text}"
    );
    assert!(
        text.contains("    31     0     31/32        3    12  3\n"),
        "{text}"
    );
    let out = run(&["plan", "-n", "6", "--gpus", "4", "--mps", "--json"]);
    let text = stdout(&out);
    let shares: Vec<&str> = text
        .match_indices("\"share\": ")
        .map(|(i, _)| &text[i + 9..i + 12])
        .collect();
    assert_eq!(shares, ["50}", "50}", "50}", "50}", "100", "100"], "{text}");
    assert!(text.contains("\"mps\": true"), "{text}");
    let out = run(&["plan", "-n", "49", "--gpus", "1", "--mps"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "node 0: 49 tasks would share GPU 0, and MPS serves at most 48 clients per GPU"
        ),
        "{err}"
    );
    // Without --mps, no share column.
    let text = stdout(&run(&["plan", "-n", "6", "--gpus", "4"]));
    assert!(!text.contains("share"), "{text}");
}

#[test]
fn plan_errors_name_the_bad_value() {
    for (args, want) in [
        (
            &["plan", "--method", "contigous"][..],
            "invalid --method \"contigous\"",
        ),
        (
            &["plan", "--method", "verbose,roundrobin"][..],
            "invalid --method \"verbose,roundrobin\"",
        ),
        (
            &["plan", "-N", "2", "--gpus", "4,4,2"][..],
            "--gpus has 3 values for 2 nodes",
        ),
        (&["plan", "--devices", "0,0"][..], "names \"0\" twice"),
        (
            &["plan", "-N", "3", "-n", "2"][..],
            "2 tasks cannot cover 3 nodes",
        ),
        (
            &["plan", "--gpus", "0"][..],
            "every node needs at least one GPU",
        ),
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn plan_closest_with_a_preset() {
    let out = run(&[
        "plan",
        "-n",
        "4",
        "--method",
        "closest",
        "--topology",
        "perlmutter",
    ]);
    assert!(out.status.success(), "{out:?}");
    let want = "\
method closest visible single
  rank  node     local      gpu  visible
     0     0       0/4        3  3  cpus 0-15
     1     0       1/4        2  2  cpus 16-31
     2     0       2/4        1  1  cpus 32-47
     3     0       3/4        0  0  cpus 48-63

load per GPU
 node      gpu  tasks
    0        0      1
    0        1      1
    0        2      1
    0        3      1
";
    assert_eq!(stdout(&out), want);
}

#[test]
fn plan_closest_with_a_file_and_a_partial_step() {
    let dir = std::env::temp_dir().join(format!("dgm-topology-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("node.topo");
    // Two sockets of 4 CPUs; GPUs 0,1 on socket 1, GPUs 2,3 on socket 0.
    std::fs::write(&file, "cpus 0-7\n0 1 4-7\n1 1 4-7\n2 0 0-3\n3 0 0-3\n").unwrap();
    let path = file.to_str().unwrap();
    let gpus = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["plan", "--method", "closest", "--topology", path, "--json"];
        all.extend(args);
        let out = run(&all);
        assert!(out.status.success(), "{out:?}");
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        json["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                format!(
                    "{}@{}",
                    t["gpu"].as_str().unwrap(),
                    t["cpus"].as_str().unwrap()
                )
            })
            .collect()
    };
    assert_eq!(gpus(&["-n", "4"]), ["2@0-1", "3@2-3", "0@4-5", "1@6-7"]);
    // The step holds GPUs 0 and 2 only: one per socket.
    assert_eq!(
        gpus(&["-n", "4", "--devices", "0,2"]),
        ["2@0-1", "2@2-3", "0@4-5", "0@6-7"]
    );
    // A GPU without known affinity: the step previews as contiguous.
    std::fs::write(&file, "0 - -\n1 0 0-3\n").unwrap();
    let out = run(&["plan", "-n", "2", "--method", "closest", "--topology", path]);
    assert!(out.status.success());
    assert!(
        stdout(&out).contains("     1     0       1/2        1  1"),
        "{}",
        stdout(&out)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Fewer tasks than GPUs: the shares keep every task next to its CPUs
/// where one way does (issue 55, item 4).
#[test]
fn plan_closest_shares_keep_each_task_next_to_its_cpus() {
    let dir = std::env::temp_dir().join(format!("dgm-topology-shares-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("node.topo");
    // 64 cores, GPUs 0 and 1 next to 0-31, 2 and 3 next to 32-63; tasks
    // bound to 0-15, 16-31 and 32-47, as srun -n3 -c16 binds them.
    std::fs::write(
        &file,
        "cpus 0-47\n0 0 0-31\n1 0 0-31\n2 1 32-63\n3 1 32-63\n",
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let out = run(&["plan", "-n", "3", "--method", "closest", "--topology", path]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(out.status.success(), "{out:?}");
    let want = "\
method closest visible single
  rank  node     local      gpu  visible
     0     0       0/3        0  0  cpus 0-15
     1     0       1/3        1  1  cpus 16-31
     2     0       2/3      2,3  2,3  cpus 32-47

load per GPU
 node      gpu  tasks
    0        0      1
    0        1      1
    0        2      1
    0        3      1
";
    assert_eq!(stdout(&out), want);
}

#[test]
fn plan_closest_needs_a_topology_and_names_bad_ones() {
    let out = run(&["plan", "--method", "closest"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--method closest needs --topology PRESET|FILE (presets: perlmutter, polaris, lumi-g, dgx-a100, aurora)"),
        "{err}"
    );
    let out = run(&[
        "plan",
        "--method",
        "closest",
        "--topology",
        "/nonexistent/x",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--topology \"/nonexistent/x\""), "{err}");
}

/// `plan` keeps its columns aligned under UUIDs (26.05's env_uuid).
#[test]
fn plan_prints_uuid_lists_in_aligned_columns() {
    let out = run(&[
        "plan",
        "-n",
        "3",
        "--devices",
        "GPU-fake-n1-2,GPU-fake-n1-3",
    ]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        stdout(&out),
        "method contiguous visible single
  rank  node     local           gpu  visible
     0     0       0/3 GPU-fake-n1-2  GPU-fake-n1-2
     1     0       1/3 GPU-fake-n1-2  GPU-fake-n1-2
     2     0       2/3 GPU-fake-n1-3  GPU-fake-n1-3

load per GPU
 node           gpu  tasks
    0 GPU-fake-n1-2      2
    0 GPU-fake-n1-3      1
"
    );
}

/// `plan --topology FILE` that cannot be read: the message names the file.
fn topology_error(name: &str, make: impl FnOnce(&std::path::Path)) -> (String, String) {
    let dir = std::env::temp_dir().join(format!("dgm-topology-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    make(&path);
    let shown = path.to_str().unwrap().to_string();
    let out = run(&["plan", "--method", "closest", "--topology", &shown]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    std::fs::remove_dir_all(&dir).unwrap();
    (err, shown)
}

#[test]
fn plan_topology_file_not_utf8_names_the_file() {
    let (err, path) = topology_error("latin1.topo", |p| {
        std::fs::write(p, b"0 0 0-3 # caf\xe9\n").unwrap()
    });
    assert!(err.contains(&format!("--topology \"{path}\"")), "{err}");
    assert!(err.contains("not UTF-8"), "{err}");
}

#[test]
fn plan_topology_directory_names_the_file() {
    let (err, path) = topology_error("a-directory", |p| std::fs::create_dir(p).unwrap());
    assert!(err.contains(&format!("--topology \"{path}\"")), "{err}");
    assert!(err.contains("is a directory"), "{err}");
}

#[test]
fn plan_topology_file_over_the_bound_is_refused_not_cut() {
    // A GPU line after 1 MiB of comment was cut off silently, which then
    // read as a file without GPUs.
    let size = (1 << 20) + 9;
    let (err, path) = topology_error("huge.topo", |p| {
        let mut text = "#".repeat(1 << 20);
        text.push_str("\n0 0 0-3\n");
        assert_eq!(text.len(), size);
        std::fs::write(p, text).unwrap()
    });
    assert!(err.contains(&format!("--topology \"{path}\"")), "{err}");
    assert!(
        err.contains(&format!("{size} bytes, over the limit of 1048576 bytes")),
        "{err}"
    );
    assert!(!err.contains("no GPU is listed"), "{err}");
}

#[test]
fn plan_refuses_sizes_no_node_or_job_reaches() {
    // Each used to abort allocating gigabytes ("memory allocation of ...
    // failed" and a backtrace). The message names the option, the value
    // and the limit.
    for (args, value, limit) in [
        (
            &["plan", "-N", "10000000000"][..],
            "--nodes 10000000000",
            "1048576 nodes",
        ),
        (
            &["plan", "-n", "10000000000"][..],
            "--ntasks 10000000000",
            "1048576 tasks",
        ),
        (
            &["plan", "--gpus", "100000000000"][..],
            "--gpus 100000000000",
            "1024 GPUs on a node",
        ),
        (
            &["plan", "--ntasks-per-node", "70000"][..],
            "--ntasks-per-node 70000",
            "65533 tasks on a node",
        ),
        // One node: the split puts every task there.
        (
            &["plan", "-n", "70000"][..],
            "--ntasks 70000",
            "65533 tasks on a node",
        ),
        (
            &["plan", "-N", "32", "--ntasks-per-node", "65533"][..],
            "--ntasks-per-node 65533 on 32 nodes is 2097056 tasks",
            "1048576 tasks",
        ),
        (
            &["plan", "-N", "2000", "--gpus", "1024"][..],
            "--gpus 1024 on 2000 nodes is 2048000 GPUs",
            "1048576 GPUs",
        ),
        (
            &["plan", "-N", "300000"][..],
            "--gpus 4 on 300000 nodes is 1200000 GPUs",
            "1048576 GPUs",
        ),
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(value), "{args:?}: {err}");
        assert!(
            err.contains(&format!("limit of {limit}")),
            "{args:?}: {err}"
        );
        assert!(!err.contains("memory allocation"), "{args:?}: {err}");
    }
    // At the limits: Slurm's most tasks on a node, the longest GPU list.
    let out = run(&[
        "plan",
        "--ntasks-per-node",
        "65533",
        "--gpus",
        "1024",
        "--json",
    ]);
    assert!(out.status.success(), "{out:?}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["tasks"].as_array().unwrap().len(), 65533);
    assert_eq!(json["load"].as_array().unwrap().len(), 1024);
}

#[test]
fn plan_at_many_nodes_counts_each_gpus_load() {
    // 65536 nodes of one task and one GPU each: every GPU carries its
    // node's task (the load table was counted node by node over every row).
    let out = run(&[
        "plan", "-N", "65536", "--gpus", "1", "-m", "cyclic", "--json",
    ]);
    assert!(out.status.success(), "{out:?}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tasks = json["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 65536);
    assert_eq!(tasks[65535]["node"], 65535);
    let load = json["load"].as_array().unwrap();
    assert_eq!(load.len(), 65536);
    assert!(load.iter().all(|l| l["tasks"] == 1), "{:?}", &load[..4]);
}

#[test]
fn plan_refuses_rotate_lists_past_the_bound() {
    // Under --visible rotate each task's row lists all its node's GPUs:
    // a million rows of 1024 GPUs would be gigabytes of text.
    let out = run(&[
        "plan",
        "-N",
        "16",
        "--ntasks-per-node",
        "65533",
        "--gpus",
        "1024",
        "--visible",
        "rotate",
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--visible rotate lists 1073692672 GPUs"),
        "{err}"
    );
    assert!(err.contains("limit of 16777216 GPUs listed"), "{err}");
    // One node of them is within it: it prints rows (the first three are
    // read, then the pipe is closed: the whole table is 16777216 GPUs).
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_desi-gpu-map"))
        .args(["plan", "--ntasks-per-node", "16384", "--gpus", "1024"])
        .args(["--visible", "rotate"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let rows = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
    let first: Vec<String> = rows.take(3).map(Result::unwrap).collect();
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    assert_eq!(first[0], "method contiguous visible rotate", "{first:?}");
    assert!(
        first[2].starts_with("     0     0   0/16384        0  0,1,2,"),
        "{first:?}"
    );
    assert!(out.stderr.is_empty(), "{out:?}");
}
