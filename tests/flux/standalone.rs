//! The plugin in a standalone Flux instance: every layout against srun's
//! rule, where it loads from, the site's conf, bad values, Flux's own
//! `gpu-affinity` beside it, and MPS with NVIDIA's real control daemon,
//! ended on every ending.

use crate::common::*;

const ALL: [&str; 4] = ["0", "1", "2", "3"];

#[test]
fn every_layout_maps_as_srun_would_more_tasks_than_gpus_and_fewer() {
    let scratch = Scratch::new("layouts");
    let layouts = [
        ("n8", "-N1 --tasks-per-node=8 --gpus-per-node=4"),
        ("n3", "-N1 --tasks-per-node=3 --gpus-per-node=4"),
        ("n4", "-N1 --tasks-per-node=4 --gpus-per-node=4"),
        ("n1", "-N1 --tasks-per-node=1 --gpus-per-node=4"),
        ("n64", "-N1 --tasks-per-node=64 --gpus-per-node=4"),
        ("N2n5", "-N2 -n5 --exclusive"),
        ("N2n7", "-N2 -n7 --exclusive"),
    ];
    let mut script = String::new();
    for method in ["contiguous", "roundrobin", "closest"] {
        for (name, layout) in layouts {
            script += &format!(
                "job {method}-{name} flux run {layout} -o cpu-affinity=off -o userrc=$USERRC \
                 -o desi-gpu-map={method} sh -c \"$ROW\"\n"
            );
        }
    }
    let jobs = in_flux(&scratch, Load::User, &script);
    for method in ["contiguous", "roundrobin", "closest"] {
        for (name, _) in layouts {
            let job = format!("{method}-{name}");
            assert_eq!(jobs.get(&job).0, 0, "{job}: {}", jobs.said(&job));
            // closest without located GPUs places as contiguous does.
            let rule = if method == "closest" {
                "contiguous"
            } else {
                method
            };
            assert_srun_rule(&jobs, &job, rule, &ALL);
        }
    }
    assert_eq!(jobs.rows("contiguous-n64").len(), 64);
    let n5: Vec<String> = jobs
        .rows("contiguous-N2n5")
        .into_iter()
        .map(|r| r[3].clone())
        .collect();
    assert_eq!(n5, ["0,1", "2", "3", "0,1", "2,3"]);
}

#[test]
fn it_loads_from_the_plugin_directory_and_maps_only_what_is_asked() {
    let scratch = Scratch::new("plugindir");
    let jobs = in_flux(
        &scratch,
        Load::PluginDir,
        "job plain flux run -N1 --tasks-per-node=2 --gpus-per-node=4 sh -c \"$ROW\"\n\
         job asked flux run -N1 --tasks-per-node=2 --gpus-per-node=4 -o desi-gpu-map=roundrobin sh -c \"$ROW\"\n",
    );
    for row in jobs.rows("plain") {
        assert_eq!(
            (row[3].as_str(), row[4].as_str()),
            ("0,1,2,3", "unset"),
            "{row:?}"
        );
    }
    assert_srun_rule(&jobs, "asked", "roundrobin", &ALL);
}

#[test]
fn a_sites_conf_sets_the_default_and_none_turns_it_off() {
    let scratch = Scratch::new("siteconf");
    let jobs = in_flux(
        &scratch,
        Load::SiteConf("{ default = \"contiguous\", verbose = true }"),
        "job default flux run -N1 --tasks-per-node=6 --gpus-per-node=4 sh -c \"$ROW\"\n\
         job none flux run -N1 --tasks-per-node=2 --gpus-per-node=4 -o desi-gpu-map=none sh -c \"$ROW\"\n\
         holder=$(flux submit -N1 -n1 -g2 --requires=rank:0 -o desi-gpu-map=none sleep 300)\n\
         flux job wait-event $holder start\n\
         job partial flux run -N1 -n1 -g2 --requires=rank:0 sh -c \"$ROW\"\n\
         flux cancel $holder\n\
         job twice flux run -N1 --tasks-per-node=3 --gpus-per-node=4 -o userrc=$USERRC sh -c \"$ROW\"\n",
    );
    assert_srun_rule(&jobs, "default", "contiguous", &ALL);
    // The same .so loaded again by the user's userrc: one plugin acts,
    // and each task is mapped, and says so, once.
    assert_srun_rule(&jobs, "twice", "contiguous", &ALL);
    let said = jobs.said("twice");
    assert_eq!(said.matches("gpu=").count(), 3, "{said}");
    assert!(
        jobs.said("default").contains("desi-gpu-map"),
        "{}",
        jobs.said("default")
    );
    for row in jobs.rows("none") {
        assert_eq!(
            (row[3].as_str(), row[4].as_str()),
            ("0,1,2,3", "unset"),
            "{row:?}"
        );
    }
    // Two of the four GPUs, while another job holds the other two: only
    // those.
    let rows = jobs.rows("partial");
    assert_eq!(rows.len(), 1, "{}", jobs.all);
    assert_eq!(
        (rows[0][3].as_str(), rows[0][5].as_str()),
        ("2,3", "2,3"),
        "{rows:?}"
    );
}

#[test]
fn bad_values_refuse_the_job_before_any_task_starts() {
    let scratch = Scratch::new("bad");
    let jobs = in_flux(
        &scratch,
        Load::User,
        "job typo flux run -n2 -o userrc=$USERRC -o desi-gpu-map=contigous sh -c \"$ROW\"\n\
         job bare flux run -n2 -o userrc=$USERRC -o desi-gpu-map sh -c \"$ROW\"\n\
         job combo flux run -n2 -o userrc=$USERRC -o desi-gpu-map=none,mps sh -c \"$ROW\"\n\
         job help flux run -n2 -o userrc=$USERRC -o desi-gpu-map=help sh -c \"$ROW\"\n",
    );
    for (name, says) in [
        ("typo", "\"contigous\""),
        ("bare", "\"1\""),
        ("combo", "none maps no task"),
        ("help", "Usage:"),
    ] {
        let (rc, _) = jobs.get(name);
        let said = jobs.said(name);
        assert_ne!(*rc, 0, "{name}: {said}");
        assert!(jobs.rows(name).is_empty(), "{name}: a task ran: {said}");
        assert!(said.contains(says), "{name}: {said}");
        if name != "help" {
            assert!(
                said.contains("roundrobin") || said.contains("contiguous,mps"),
                "{name}: {said}"
            );
            assert!(
                said.contains("ERROR: desi-gpu-map: invalid -o desi-gpu-map value \""),
                "{name}: {said}"
            );
        }
        assert_no_slurm_words(name, &said);
    }
    assert!(
        jobs.said("help")
            .contains("Usage: flux run -o desi-gpu-map=METHOD[,verbose][,mps] ..."),
        "{}",
        jobs.said("help")
    );
    let scratch = Scratch::new("badconf");
    let jobs = in_flux(
        &scratch,
        Load::SiteConf("{ default = \"closests\" }"),
        "job any flux run -n1 sh -c \"$ROW\"\n",
    );
    let said = jobs.said("any");
    assert_ne!(jobs.get("any").0, 0, "{said}");
    assert!(jobs.rows("any").is_empty());
    assert!(
        said.contains("closests") && said.contains("roundrobin") && said.contains("conf"),
        "{said}"
    );
    assert!(said.contains("bad entry default = \"closests\""), "{said}");
    assert_no_slurm_words("any", &said);
}

/// Words that only make sense under Slurm, which nothing the plugin says
/// under Flux may use.
fn assert_no_slurm_words(name: &str, said: &str) {
    for word in [
        "Slurm",
        "srun",
        "sbatch",
        "slurmstepd",
        "plugstack",
        "step",
        "--desi-gpu-map",
    ] {
        assert!(!said.contains(word), "{name}: {word:?} in {said}");
    }
}

/// What the plugin says under Flux, `verbose` on: each line in Flux's
/// words, the GPUs R gives the job (`source=flux`), and why a job runs
/// without MPS said once a node.
#[test]
fn what_the_plugin_says_is_in_fluxs_words() {
    let scratch = Scratch::new("words");
    let jobs = in_flux(
        &scratch,
        Load::User,
        "job mapped flux run -N2 --tasks-per-node=3 --gpus-per-node=4 -o cpu-affinity=off -o userrc=$USERRC -o desi-gpu-map=contiguous,verbose sh -c \"$ROW\"\n\
         job closest flux run -N1 --tasks-per-node=3 --gpus-per-node=4 -o cpu-affinity=off -o userrc=$USERRC -o desi-gpu-map=closest,verbose sh -c \"$ROW\"\n\
         job nogpu flux run -N1 -n2 -o cpu-affinity=off -o userrc=$USERRC -o desi-gpu-map=contiguous,verbose sh -c \"$ROW\"\n\
         job mps flux run -N1 --tasks-per-node=2 --gpus-per-node=4 -o cpu-affinity=off -o userrc=$USERRC -o desi-gpu-map=contiguous,mps sh -c \"$ROW\"\n",
    );
    for name in ["mapped", "closest", "nogpu", "mps"] {
        assert_eq!(jobs.get(name).0, 0, "{name}: {}", jobs.said(name));
        assert_no_slurm_words(name, &jobs.said(name));
    }
    let said = jobs.said("mapped");
    assert_eq!(said.matches(" source=flux").count(), 6, "{said}");
    assert_srun_rule(&jobs, "mapped", "contiguous", &ALL);
    // No NVML here to locate R's GPUs: contiguous, said once.
    let said = jobs.said("closest");
    let fallback = said.lines().filter(|l| {
        l.contains("desi-gpu-map: node vm: closest: ") && l.ends_with("; using contiguous")
    });
    assert_eq!(fallback.count(), 1, "{said}");
    assert_srun_rule(&jobs, "closest", "contiguous", &ALL);
    let said = jobs.said("nogpu");
    assert!(
        said.contains("R gives this Flux job no GPU on this node; tasks left unchanged"),
        "{said}"
    );
    // The instance runs as root, whom MPS never serves: said once.
    let said = jobs.said("mps");
    assert_eq!(
        said.matches("the job runs as root, and the MPS daemon never does; running without MPS")
            .count(),
        1,
        "{said}"
    );
}

/// `desi-gpu-map exec` in a task the plugin mapped runs its program
/// unchanged (the plugin's list); in an unmapped Flux task, and in a job
/// whose only record is an outer job's, it refuses, naming the plugin.
#[test]
fn exec_runs_unchanged_in_a_task_the_plugin_mapped_and_refuses_elsewhere() {
    let scratch = Scratch::new("exec");
    let exec = bin().display().to_string();
    let script = format!("export EXEC={exec}\n")
        + "job mapped flux run -N1 --tasks-per-node=6 --gpus-per-node=4 -o cpu-affinity=off -o userrc=$USERRC -o desi-gpu-map=contiguous sh -c \"$EXEC exec --verbose -- sh -c '$ROW' 2>&1\"\n\
         job quiet flux run -N2 -n5 --exclusive -o cpu-affinity=off -o userrc=$USERRC -o desi-gpu-map=roundrobin $EXEC exec -- sh -c \"$ROW\"\n\
         job unmapped flux run -N1 --tasks-per-node=2 --gpus-per-node=4 -o cpu-affinity=off -o userrc=$USERRC $EXEC exec -- sh -c \"$ROW\"\n\
         job outer flux run -N1 --tasks-per-node=1 --gpus-per-node=4 -o cpu-affinity=off -o userrc=$USERRC -o desi-gpu-map=contiguous sh -c 'echo OUTER $DESI_GPU_MAP_STEP; flux run -n1 -o cpu-affinity=off $EXEC exec -- true'\n";
    let jobs = in_flux(&scratch, Load::User, &script);
    // The plugin's lists, which exec left as they were: srun's rule. (The
    // task's stderr goes with its stdout: flux run's two streams in one
    // pipe may cut a line.)
    assert_eq!(jobs.get("mapped").0, 0, "{}", jobs.said("mapped"));
    assert_eq!(jobs.rows("mapped").len(), 6, "{}", jobs.all);
    assert_srun_rule(&jobs, "mapped", "contiguous", &ALL);
    let said = jobs.said("mapped");
    assert_eq!(
        said.matches(
            "desi-gpu-map exec: this Flux job is mapped already (by the Flux shell plugin); sh \
             runs unchanged"
        )
        .count(),
        6,
        "{said}"
    );
    assert_eq!(jobs.get("quiet").0, 0, "{}", jobs.said("quiet"));
    assert_srun_rule(&jobs, "quiet", "roundrobin", &ALL);
    assert!(
        !jobs.said("quiet").contains("desi-gpu-map exec"),
        "{}",
        jobs.said("quiet")
    );
    // Without the option, and in a job whose record is its outer job's.
    for name in ["unmapped", "outer"] {
        let said = jobs.said(name);
        assert_ne!(jobs.get(name).0, 0, "{name}: {said}");
        assert!(jobs.rows(name).is_empty(), "{name}: a task ran: {said}");
        assert!(
            said.contains("desi-gpu-map exec: Flux sets FLUX_TASK_LOCAL_ID=")
                && said.contains(
                    "run the job with the desi-gpu-map Flux shell plugin (flux run -o \
                     desi-gpu-map=METHOD)"
                )
                && said.contains("; nothing was run"),
            "{name}: {said}"
        );
    }
    assert!(
        jobs.said("outer").contains("OUTER flux-"),
        "{}",
        jobs.said("outer")
    );
}

#[test]
fn the_option_replaces_gpu_affinity_and_gpu_affinity_the_sites_default() {
    let scratch = Scratch::new("affinity");
    let jobs = in_flux(
        &scratch,
        Load::SiteConf("{ default = \"contiguous\" }"),
        "job flux8 flux run -N1 --tasks-per-node=8 --gpus-per-node=4 -o gpu-affinity=per-task sh -c \"$ROW\"\n\
         job both flux run -N2 --tasks-per-node=8 --gpus-per-node=4 -o gpu-affinity=per-task -o desi-gpu-map=contiguous sh -c \"$ROW\"\n",
    );
    // Flux's own per-task binding, asked by name over the site's default:
    // 8 tasks on 4 GPUs each get an empty list (flux-core #4723).
    for row in jobs.rows("flux8") {
        assert_eq!(row[4], "unset", "{row:?}");
    }
    let said = jobs.said("flux8");
    assert_eq!(said.matches("over the site's default").count(), 1, "{said}");
    assert_srun_rule(&jobs, "both", "contiguous", &ALL);
    let said = jobs.said("both");
    assert_eq!(
        said.matches("is replaced by -o desi-gpu-map").count(),
        1,
        "{said}"
    );
}

/// MPS with NVIDIA's real control daemon (GPU UUIDs from the fake NVML):
/// one daemon per job and node, its pipe private to the job, and nothing
/// left after a normal end, a failed task, or `flux cancel`.
#[test]
fn mps_serves_each_node_and_nothing_is_left_on_any_ending() {
    let scratch = Scratch::new("mps");
    let lib = fake_nvml(&scratch, "count=4\n");
    // A base of its own: the daemon's sockets must fit in 108 bytes.
    let base = ShortDir::new();
    // No mps_control: the control daemon is found on the job's PATH.
    let site = format!(
        "{{ nvml = \"{}\", mps_dir = \"{}\" }}",
        lib.display(),
        base.0.display()
    );
    let control_dir = mps_control().parent().unwrap().display().to_string();
    let script = format!("BASE={}\nexport PATH={control_dir}:$PATH\n", base.0.display())
        + "job normal flux run -N2 --tasks-per-node=8 --gpus-per-node=4 -o desi-gpu-map=contiguous,mps sh -c \"$ROW\"\n\
         for d in $(ls -d $BASE/dgm-mps.* 2>/dev/null); do echo \"LEFT $d\"; done; echo == left-normal 0\n\
         job failed flux run -N1 --tasks-per-node=4 --gpus-per-node=4 -o desi-gpu-map=contiguous,mps sh -c \"$ROW; [ \\$FLUX_TASK_LOCAL_ID != 2 ] || exit 3; sleep 1\"\n\
         for d in $(ls -d $BASE/dgm-mps.* 2>/dev/null); do echo \"LEFT $d\"; done; echo == left-failed 0\n\
         id=$(flux submit -N1 --tasks-per-node=4 --gpus-per-node=4 -o desi-gpu-map=contiguous,mps sh -c 'echo $CUDA_MPS_PIPE_DIRECTORY > pipe-$FLUX_TASK_LOCAL_ID; sleep 300')\n\
         for i in $(seq 100); do [ -s pipe-3 ] && break; sleep 0.1; done\n\
         echo \"PIPE $(cat pipe-0)\"; ls -d $BASE/dgm-mps.* | sed 's/^/RUNNING /'; flux cancel $id; flux job wait-event -t 60 $id clean >/dev/null; echo == cancel $?\n\
         for d in $(ls -d $BASE/dgm-mps.* 2>/dev/null); do echo \"LEFT $d\"; done; echo == left-cancel 0\n\
         id=$(flux submit -N1 --tasks-per-node=2 --gpus-per-node=4 -o desi-gpu-map=contiguous,mps sh -c 'echo $CUDA_MPS_PIPE_DIRECTORY > raised-$FLUX_TASK_LOCAL_ID; sleep 300')\n\
         for i in $(seq 100); do [ -s raised-1 ] && break; sleep 0.1; done\n\
         echo \"PIPE $(cat raised-0)\"; flux job raise --type=test $id; flux job wait-event -t 60 $id clean >/dev/null; echo == raise $?\n\
         for d in $(ls -d $BASE/dgm-mps.* 2>/dev/null); do echo \"LEFT $d\"; done; echo == left-raise 0\n\
         FLUX=$(command -v flux); job nocontrol env PATH=/usr/bin:/bin $FLUX run -N1 --tasks-per-node=2 --gpus-per-node=4 -o desi-gpu-map=contiguous,mps sh -c \"$ROW\"\n";
    let jobs = in_flux_as(&scratch, Load::SiteConf(&site), &script, Some("nobody"));
    let rows = jobs.rows("normal");
    assert_eq!(rows.len(), 16, "{}", jobs.all);
    let pipes: std::collections::BTreeSet<&str> = rows.iter().map(|r| r[6].as_str()).collect();
    assert_eq!(
        pipes.len(),
        2,
        "one daemon per node: {pipes:?}\n{}",
        jobs.said("normal")
    );
    for row in &rows {
        assert!(
            row[3].starts_with("GPU-fake-"),
            "MPS names GPUs by UUID: {row:?}"
        );
        // Named for the job as its FLUX_JOB_ID shows it (F58, `f...`).
        assert!(
            row[6].contains("dgm-mps.") && row[6].contains(".f"),
            "{row:?}"
        );
    }
    assert_ne!(jobs.get("failed").0, 0);
    assert_eq!(jobs.rows("failed").len(), 4, "{}", jobs.said("failed"));
    let cancel = jobs.said("cancel");
    assert!(
        cancel.contains("PIPE ") && cancel.contains("RUNNING "),
        "the job ran under MPS: {cancel}"
    );
    assert_eq!(jobs.get("cancel").0, 0, "the cancelled job ended: {cancel}");
    assert_eq!(jobs.get("raise").0, 0, "the raised job ended");
    let raise = jobs.said("raise");
    assert!(
        raise.contains("PIPE /"),
        "the raised job ran under MPS: {raise}"
    );
    // No control daemon where the site or the job's PATH names one: said
    // once, in Flux's words; the job runs mapped, without MPS.
    let said = jobs.said("nocontrol");
    assert_eq!(jobs.get("nocontrol").0, 0, "{said}");
    assert_eq!(
        said.matches("; the site's mps_control = \"...\" in the plugin's conf, or the job's PATH, names it; running without MPS")
            .count(),
        1,
        "{said}"
    );
    assert_no_slurm_words("nocontrol", &said);
    for row in jobs.rows("nocontrol") {
        assert_eq!(
            (row[4].as_str(), row[6].as_str()),
            ("1", "unset"),
            "{row:?}"
        );
    }
    for left in ["left-normal", "left-failed", "left-cancel", "left-raise"] {
        assert_eq!(jobs.said(left), "", "{left}: a daemon's directory is left");
    }
    // No daemon of this test's is left: each had its pipe under this
    // test's own TMPDIR.
    let mine = base.0.display().to_string();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let environ = String::from_utf8_lossy(&environ);
        if String::from_utf8_lossy(&cmdline).contains("nvidia-cuda-mps") {
            assert!(
                !environ.contains(&mine),
                "a daemon of this test's is left: {:?}",
                entry.path()
            );
        }
    }
}

/// The script a nested instance runs: its broker's grant, then one job
/// given one GPU and one of three tasks, mapped, and Flux's own binding
/// of one GPU beside them.
const NESTED: &str = r#"cat >inner.sh <<'INNER'
echo "BROKER ${CUDA_VISIBLE_DEVICES-unset} ${DESI_GPU_MAP_FLUX_IDS-unset} $(flux resource list -no {ngpus})"
flux run -n1 -g1 -o cpu-affinity=off -o userrc=$USERRC -o desi-gpu-map=contiguous sh -c 'echo ONE ${CUDA_VISIBLE_DEVICES-unset} ${DESI_GPU_MAPPED-unset}'
flux run -n3 -g1 -o cpu-affinity=off -o userrc=$USERRC -o desi-gpu-map=contiguous sh -c 'echo THREE $FLUX_TASK_LOCAL_ID ${CUDA_VISIBLE_DEVICES-unset}' | sort
flux run -n1 -g1 -o cpu-affinity=off sh -c 'echo FLUX ${CUDA_VISIBLE_DEVICES-unset}'
INNER
"#;

/// The lines of a job that start with `mark`, without it.
fn marked(jobs: &Jobs, name: &str, mark: &str) -> Vec<String> {
    jobs.get(name)
        .1
        .iter()
        .filter_map(|l| l.strip_prefix(mark))
        .map(str::to_string)
        .collect()
}

/// Round 7: `flux alloc` makes a nested instance whose R keeps the
/// enclosing instance's GPU ids (gpu[1-3] on a grant of 1,2,3; gpu[2-3] on
/// 2,3), and whose broker holds those GPUs by the same names. A job given
/// R's GPU 1 gets GPU 1 (as Flux's own binding gives it), never the
/// broker's second; a grant of 2,3 is mapped, not refused; with the
/// enclosing job bound by Flux's own binding or mapped by the plugin.
#[test]
fn nested_instances_name_the_gpus_their_r_inherits() {
    let scratch = Scratch::new("nested");
    let alloc = "flux alloc -N1 -n1 -c4 -o cpu-affinity=off";
    let mapped = "-o userrc=$USERRC -o desi-gpu-map=contiguous";
    let script = format!(
        "{NESTED}\
         flux submit --wait-event=start -N2 -n2 -c1 -g1 sleep 600 >/dev/null\n\
         job flux13 {alloc} -g3 bash inner.sh\n\
         job plugin13 {alloc} -g3 {mapped} bash inner.sh\n\
         flux cancel --all >/dev/null; flux queue drain\n\
         flux submit --wait-event=start -N2 -n2 -c1 -g2 sleep 600 >/dev/null\n\
         job flux23 {alloc} -g2 bash inner.sh\n\
         job plugin23 {alloc} -g2 {mapped} bash inner.sh\n\
         flux cancel --all >/dev/null; flux queue drain\n"
    );
    let jobs = in_flux(&scratch, Load::User, &script);
    for (name, broker, ids, three) in [
        ("flux13", "1,2,3 unset 3", "1", ["0 1", "1 2", "2 3"]),
        ("plugin13", "1,2,3 1,2,3 3", "1", ["0 1", "1 2", "2 3"]),
        ("flux23", "2,3 unset 2", "2", ["0 2", "1 3", "2 3"]),
        ("plugin23", "2,3 2,3 2", "2", ["0 2", "1 3", "2 3"]),
    ] {
        let all = &jobs.all;
        assert_eq!(jobs.get(name).0, 0, "{name}: {all}");
        assert_eq!(marked(&jobs, name, "BROKER "), [broker], "{name}: {all}");
        assert_eq!(
            marked(&jobs, name, "ONE "),
            [format!("{ids} 1")],
            "{name}: {all}"
        );
        // Flux's own binding in the nested instance names the same GPU.
        assert_eq!(marked(&jobs, name, "FLUX "), [ids], "{name}: {all}");
        if name.ends_with("13") {
            assert_eq!(marked(&jobs, name, "THREE "), three, "{name}: {all}");
        }
    }
}

/// Round 7: under a grant above the instance (its brokers hold GPUs 4 to
/// 7, as Slurm gives them), a job the plugin maps onto the instance's
/// GPUs 1 to 3 holds the node's 5, 6 and 7, and records R's ids of them:
/// an instance nested in it maps its R's GPU 1 to 5, and its three tasks
/// to 5, 6 and 7.
#[test]
fn an_instance_nested_in_a_mapped_job_reads_its_record() {
    let scratch = Scratch::new("nested-record");
    let script = format!(
        "{NESTED}\
         flux submit --wait-event=start -N2 -n2 -c1 -g1 sleep 600 >/dev/null\n\
         job plugin flux alloc -N1 -n1 -c4 -g3 -o cpu-affinity=off -o userrc=$USERRC \
         -o desi-gpu-map=contiguous bash inner.sh\n\
         flux cancel --all >/dev/null; flux queue drain\n"
    );
    let jobs = in_flux_env(
        &scratch,
        Load::User,
        &script,
        None,
        &[("CUDA_VISIBLE_DEVICES", "4,5,6,7")],
        FAKE_CORES,
    );
    let all = &jobs.all;
    assert_eq!(jobs.get("plugin").0, 0, "{all}");
    assert_eq!(
        marked(&jobs, "plugin", "BROKER "),
        ["5,6,7 1,2,3 3"],
        "{all}"
    );
    assert_eq!(marked(&jobs, "plugin", "ONE "), ["5 1"], "{all}");
    assert_eq!(
        marked(&jobs, "plugin", "THREE "),
        ["0 5", "1 6", "2 7"],
        "{all}"
    );
}

/// `closest` under Flux places each job's tasks by the CPUs Flux's
/// `cpu-affinity` bound its shell to (brokers given the host's CPUs 0 and
/// 1, so that Flux can bind them): a job on CPU 0 lists GPUs 2 and 3
/// first, one on CPU 1 GPUs 0 and 1; a job on both, or one run with
/// `-o cpu-affinity=off`, is as near to every GPU, gets contiguous's
/// blocks and says so once, in Flux's words.
#[test]
fn closest_places_a_job_by_the_cpus_flux_bound_it_to() {
    let scratch = Scratch::new("closest");
    // GPUs 0 and 1 next to CPU 1, 2 and 3 next to CPU 0: not the identity.
    let lib = fake_nvml(&scratch, "count=4\naffinity=0x2,0x2,0x1,0x1\n");
    let site = format!("{{ nvml = \"{}\" }}", lib.display());
    let cpus = "grep Cpus_allowed_list: /proc/self/status | tr -d '\\t'";
    let script = format!("CPUS=\"{cpus}\"\n")
        + "job first flux run -N1 -n1 -c1 -g4 --requires=rank:0 -o desi-gpu-map=closest sh -c \"$ROW; $CPUS\"\n\
           holder=$(flux submit -N1 -n1 -c1 --requires=rank:0 -o desi-gpu-map=none sleep 300)\n\
           flux job wait-event $holder start\n\
           job second flux run -N1 -n1 -c1 -g4 --requires=rank:0 -o desi-gpu-map=closest sh -c \"$ROW; $CPUS\"\n\
           flux cancel $holder\n\
           job both flux run -N1 -n2 -c1 -g2 --requires=rank:1 -o desi-gpu-map=closest sh -c \"$ROW\"\n\
           job off flux run -N1 -n2 -c1 -g2 --requires=rank:1 -o cpu-affinity=off -o desi-gpu-map=closest sh -c \"$ROW\"\n";
    let jobs = in_flux_env(&scratch, Load::SiteConf(&site), &script, None, &[], "0-1");
    let mut seen = Vec::new();
    for name in ["first", "second"] {
        let said = jobs.said(name);
        let cpu = said
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap_or_else(|| panic!("{name}: no CPUs: {}", jobs.all))
            .trim()
            .to_string();
        let want = match cpu.as_str() {
            "0" => "2,3,0,1",
            "1" => "0,1,2,3",
            other => panic!("{name}: bound to {other}, not one CPU: {}", jobs.all),
        };
        let rows = jobs.rows(name);
        assert_eq!(rows.len(), 1, "{}", jobs.all);
        assert_eq!(
            (rows[0][3].as_str(), rows[0][4].as_str()),
            (want, "1"),
            "{name}: {rows:?}"
        );
        seen.push(cpu);
    }
    assert_ne!(
        seen[0], seen[1],
        "the holder kept the first job's CPU: {}",
        jobs.all
    );
    for name in ["both", "off"] {
        let lists: Vec<String> = jobs.rows(name).iter().map(|r| r[3].clone()).collect();
        assert_eq!(lists, ["0,1", "2,3"], "{name}: {}", jobs.all);
        let said = jobs.said(name);
        assert_eq!(
            said.matches("as near to every GPU as to any").count(),
            1,
            "{name}: {said}"
        );
        assert!(
            said.contains("cpu-affinity") && !said.contains("srun"),
            "{name}: {said}"
        );
    }
}
