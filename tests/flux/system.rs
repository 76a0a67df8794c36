//! The plugin in a multi-user system instance, as a site runs Flux: an
//! instance owned by an unprivileged user, the jobs of other users
//! started through flux-security's setuid IMP (`flux-imp exec`), each job
//! shell running as its job's user, the plugin installed in the
//! instance's shell plugin directory and loaded by the site's initrc
//! (`lua.d/`) with a `conf` table. Jobs are signed with MUNGE, by a munged
//! of the test's own.
//!
//! What it makes it removes, and it takes nothing of the machine's: its
//! users and group (named with this process's id, refused if they exist),
//! the IMP's and the signing library's configuration (under flux-core's
//! install prefix, `target/flux/install/etc/flux`, where
//! tests/flux/build.sh configured flux-security to look, never `/etc`),
//! a setuid copy of the IMP, its munged and its instance (ended by PID).
//! One run at a time holds that configuration, under a lock.

use crate::common::*;
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// What this test made outside its scratch folder, and the processes it
/// started: removed and ended when dropped, also when the test fails.
#[derive(Default)]
struct Made {
    /// The instance, then munged: ended in that order, by PID.
    children: Vec<Child>,
    /// The instance's initial program reads this; closing it ends the
    /// instance.
    instance_stdin: Option<ChildStdin>,
    users: Vec<String>,
    groups: Vec<String>,
    files: Vec<PathBuf>,
    /// Made here, removed when empty, the last first.
    dirs: Vec<PathBuf>,
}

impl Drop for Made {
    fn drop(&mut self) {
        // The instance ends when its initial program's input closes;
        // munged on SIGTERM.
        let closed = self.instance_stdin.take().is_some();
        for (n, child) in self.children.iter_mut().enumerate() {
            end(child, n == 0 && closed);
        }
        let uids: Vec<u32> = self.users.iter().filter_map(|u| uid_of(u)).collect();
        // Whatever the users' jobs left (a failed test's tasks): ended
        // by PID, so that userdel finds no process of theirs.
        for _ in 0..50 {
            let left: Vec<u32> = processes()
                .into_iter()
                .filter(|p| uids.contains(&p.uid))
                .map(|p| p.pid)
                .collect();
            if left.is_empty() {
                break;
            }
            for pid in left {
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        for user in self.users.iter().rev() {
            let _ = Command::new("userdel").arg(user).status();
            // Its own group, where userdel keeps it (USERGROUPS_ENAB no).
            let _ = Command::new("groupdel")
                .arg(user)
                .stderr(Stdio::null())
                .status();
        }
        for group in &self.groups {
            let _ = Command::new("groupdel").arg(group).status();
        }
        for file in &self.files {
            let _ = fs::remove_file(file);
        }
        for dir in self.dirs.iter().rev() {
            let _ = fs::remove_dir(dir);
        }
    }
}

/// Ends a child of the test's, by its PID: SIGTERM, then SIGKILL; one
/// `ending` already (the instance, its input closed) is waited for first.
fn end(child: &mut Child, ending: bool) {
    let first = if ending { None } else { Some(libc::SIGTERM) };
    for signal in [first, Some(libc::SIGTERM), Some(libc::SIGKILL)] {
        if let Some(signal) = signal {
            unsafe { libc::kill(child.id() as i32, signal) };
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

struct Process {
    pid: u32,
    uid: u32,
    cmdline: String,
    environ: String,
}

/// Every process, with its real uid, command line and environment.
fn processes() -> Vec<Process> {
    let mut all = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let status = fs::read_to_string(entry.path().join("status")).unwrap_or_default();
        let Some(uid) = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|u| u.parse().ok())
        else {
            continue;
        };
        if status.contains("State:\tZ") {
            continue;
        }
        let read = |name: &str| {
            String::from_utf8_lossy(&fs::read(entry.path().join(name)).unwrap_or_default())
                .replace('\0', " ")
        };
        all.push(Process {
            pid,
            uid,
            cmdline: read("cmdline"),
            environ: read("environ"),
        });
    }
    all
}

fn uid_of(user: &str) -> Option<u32> {
    let out = Command::new("id").args(["-u", user]).output().ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

fn gid_of(group: &str) -> u32 {
    let out = Command::new("getent")
        .args(["group", group])
        .output()
        .unwrap();
    let line = String::from_utf8_lossy(&out.stdout).to_string();
    line.split(':')
        .nth(2)
        .and_then(|g| g.trim().parse().ok())
        .unwrap_or_else(|| panic!("no group {group}"))
}

fn run_ok(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

fn chown(path: &Path, user: &str, group: &str) {
    std::os::unix::fs::chown(path, uid_of(user), Some(gid_of(group))).unwrap();
}

/// A directory of flux-security's configuration, made root's and not
/// writable by others, as the IMP requires; remembered in `made` if this
/// test made it.
fn conf_dir(dir: &Path, made: &mut Made) {
    let mut missing = Vec::new();
    let mut at = dir;
    while !at.exists() {
        missing.push(at.to_path_buf());
        at = at.parent().unwrap();
    }
    for dir in missing.into_iter().rev() {
        fs::create_dir(&dir).unwrap();
        made.dirs.push(dir);
    }
    let meta = fs::metadata(dir).unwrap();
    assert_eq!(
        (meta.uid(), meta.mode() & 0o022),
        (0, 0),
        "{} must be root's and not writable by others (tests/flux/build.sh run as root)",
        dir.display()
    );
}

/// The instance: its users, its URI, and where each user's jobs run.
struct System {
    made: Made,
    scratch: Scratch,
    uri: String,
    /// The instance's owner, then alice and bob (who may use the MPS
    /// control daemon), then carol (who may not).
    owner: String,
    alice: String,
    bob: String,
    carol: String,
    /// The MPS daemons' base folder.
    base: ShortDir,
    /// The plugin, as the site installed it.
    installed: PathBuf,
    control: PathBuf,
    log: PathBuf,
}

impl System {
    fn home(&self, user: &str) -> PathBuf {
        self.scratch.0.join("home").join(user)
    }

    /// `flux VERB` of a job as `user`: LAYOUT's words, `-o
    /// cpu-affinity=off` (R's cores are more than the host has:
    /// `FAKE_CORES`), each of OPTIONS as `-o`, then `sh -c SCRIPT`.
    fn job(
        &self,
        user: &str,
        verb: &str,
        layout: &str,
        options: &[&str],
        script: &str,
    ) -> (i32, String) {
        let mut args = vec![verb];
        args.extend(layout.split(' '));
        for option in std::iter::once("cpu-affinity=off").chain(options.iter().copied()) {
            args.extend(["-o", option]);
        }
        args.extend(["sh", "-c", script]);
        self.flux(user, &args)
    }

    /// `flux ARGS` run as `user`, in their folder, against the instance.
    fn flux(&self, user: &str, args: &[&str]) -> (i32, String) {
        // Captured, and shown with a failure: how far the test got.
        eprintln!("system: {user}: flux {}", args.first().unwrap_or(&""));
        let home = self.home(user);
        let out = Command::new("setpriv")
            .args(["--reuid", user, "--regid", user, "--init-groups", "--"])
            .args(["timeout", "-k", "5", "180"])
            .arg(prefix().join("bin/flux"))
            .args(args)
            .env_clear()
            .env(
                "PATH",
                format!("{}:/usr/bin:/bin", prefix().join("bin").display()),
            )
            .env("HOME", &home)
            .env("TMPDIR", &home)
            .env("FLUX_URI", &self.uri)
            .current_dir(&home)
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code().unwrap_or(-1), said)
    }

    /// The instance's log, for a failure's message.
    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for `files` in `user`'s folder, which a running job writes.
    fn wait_for(&self, user: &str, id: &str, files: &[&str]) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !files.iter().all(|f| self.home(user).join(f).exists()) {
            if Instant::now() > deadline {
                let (_, said) = self.flux(user, &["job", "attach", id]);
                panic!("{user}'s job {id} did not start: {said}\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Makes the users, the configuration, munged and the instance.
fn start_system(made: &mut Made) -> System {
    let id = std::process::id();
    let [owner, alice, bob, carol, group] =
        ["flux", "alice", "bob", "carol", "mps"].map(|n| format!("dgm{n}{id}"));
    for name in [&owner, &alice, &bob, &carol] {
        let taken = Command::new("getent")
            .args(["passwd", name])
            .output()
            .unwrap();
        assert!(
            !taken.status.success(),
            "a user {name} exists; this test makes its own and takes no other"
        );
    }
    let scratch = Scratch::new("system");
    chmod(&scratch.0, 0o755);
    let home = scratch.0.join("home");
    fs::create_dir(&home).unwrap();
    chmod(&home, 0o755);
    run_ok(Command::new("groupadd").arg(&group));
    made.groups.push(group.clone());
    for (user, groups) in [
        (&owner, None),
        (&alice, Some(&group)),
        (&bob, Some(&group)),
        (&carol, None),
    ] {
        let mut cmd = Command::new("useradd");
        cmd.args([
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            "--user-group",
        ])
        .arg("--home-dir")
        .arg(home.join(user));
        if let Some(group) = groups {
            cmd.args(["--groups", group]);
        }
        run_ok(cmd.arg(user));
        made.users.push(user.clone());
        let dir = home.join(user);
        fs::create_dir(&dir).unwrap();
        chown(&dir, user, user);
        chmod(&dir, 0o700);
    }

    // The IMP, setuid root, runnable by the instance's owner only.
    let flux_prefix = prefix();
    let imp_dir = scratch.0.join("imp");
    fs::create_dir(&imp_dir).unwrap();
    chmod(&imp_dir, 0o755);
    let imp = imp_dir.join("flux-imp");
    fs::copy(flux_prefix.join("libexec/flux/flux-imp"), &imp).unwrap();
    made.files.push(imp.clone());
    chown(&imp, "root", &owner);
    chmod(&imp, 0o4750);

    // munged of the test's own, run as the owner: its key, socket and
    // logs in a folder that clients can reach.
    let munge = scratch.0.join("munge");
    fs::create_dir(&munge).unwrap();
    chown(&munge, &owner, &owner);
    chmod(&munge, 0o755);
    let socket = munge.join("socket");
    let as_owner = |cmd: &mut Command| {
        cmd.uid(uid_of(&owner).unwrap())
            .gid(gid_of(&owner))
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
    };
    let mut key = Command::new("mungekey");
    key.arg("--create")
        .arg(format!("--keyfile={}", munge.join("key").display()));
    as_owner(&mut key);
    run_ok(&mut key);
    let mut munged = Command::new("munged");
    munged
        .arg("--foreground")
        .arg(format!("--socket={}", socket.display()))
        .arg(format!("--key-file={}", munge.join("key").display()))
        .arg(format!("--log-file={}", munge.join("log").display()))
        .arg(format!("--pid-file={}", munge.join("pid").display()))
        .arg(format!("--seed-file={}", munge.join("seed").display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(scratch.0.join("munged.stderr")).unwrap());
    as_owner(&mut munged);
    made.children.push(munged.spawn().expect("start munged"));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ok = Command::new("sh")
            .arg("-c")
            .arg("munge -n -S \"$1\" | unmunge -S \"$1\" >/dev/null")
            .args(["sh"])
            .arg(&socket)
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .success();
        if ok {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "munged did not answer: {}{}",
            fs::read_to_string(scratch.0.join("munged.stderr")).unwrap_or_default(),
            fs::read_to_string(munge.join("log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // flux-security's configuration, where the build told it to look:
    // jobs of guests signed with MUNGE through this munged; the IMP lets
    // the owner start the installed job shell as a job's user.
    let etc = flux_prefix.join("etc/flux");
    let security = etc.join("security/conf.d");
    let imp_conf = etc.join("imp/conf.d");
    conf_dir(&security, made);
    conf_dir(&imp_conf, made);
    let write_conf = |path: PathBuf, body: String, made: &mut Made| {
        assert!(!path.exists(), "{} exists", path.display());
        made.files.push(path.clone());
        fs::write(&path, body).unwrap();
        chmod(&path, 0o644);
    };
    // This file's [sign] replaces sign.toml's, read before it.
    write_conf(
        security.join("zz-system-suite.toml"),
        format!(
            "[sign]\nmax-ttl = 3600\ndefault-type = \"munge\"\nallowed-types = [ \"munge\" ]\n\
             [sign.munge]\nsocket-path = \"{}\"\n",
            socket.display()
        ),
        made,
    );
    write_conf(
        imp_conf.join("system-suite.toml"),
        format!(
            "[exec]\nallowed-users = [ \"{owner}\" ]\nallowed-shells = [ \"{}\" ]\n",
            flux_prefix.join("libexec/flux/flux-shell").display()
        ),
        made,
    );

    // The site's MPS control daemon (a copy, with its server beside it as
    // a package installs them), which only the group `mps` (alice and
    // bob, not carol) may run.
    let real_control = mps_control();
    let mps = scratch.0.join("mps");
    fs::create_dir_all(mps.join("bin")).unwrap();
    fs::create_dir_all(mps.join("sbin")).unwrap();
    let control = mps.join("bin/nvidia-cuda-mps-control");
    fs::copy(&real_control, &control).unwrap();
    chown(&control, "root", &group);
    chmod(&control, 0o750);
    let server = fs::canonicalize(real_control.with_file_name("nvidia-cuda-mps-server")).unwrap();
    std::os::unix::fs::symlink(server, mps.join("sbin/nvidia-cuda-mps-server")).unwrap();

    // The site's shell: the plugin in its plugin directory, loaded by a
    // file of the initrc's lua.d with the site's conf.
    let nvml = fake_nvml(&scratch, "count=4\n");
    let base = ShortDir::new();
    let site = scratch.0.join("site");
    let plugins = site.join("plugins");
    let lua_d = site.join("shell/lua.d");
    fs::create_dir_all(&plugins).unwrap();
    fs::create_dir_all(&lua_d).unwrap();
    fs::copy(plugin(), plugins.join("desi_gpu_map.so")).unwrap();
    let initrc = site.join("shell/initrc.lua");
    fs::copy(flux_prefix.join("etc/flux/shell/initrc.lua"), &initrc).unwrap();
    fs::write(
        lua_d.join("desi-gpu-map.lua"),
        format!(
            "plugin.load {{ file = \"desi_gpu_map.so\", conf = {{ nvml = \"{}\", mps_dir = \"{}\", mps_control = \"{}\" }} }}\n",
            nvml.display(),
            base.0.display(),
            control.display()
        ),
    )
    .unwrap();

    // The instance's own configuration, as a system instance's.
    let conf = scratch.0.join("conf");
    fs::create_dir(&conf).unwrap();
    fs::write(
        conf.join("system.toml"),
        format!(
            "[exec]\nimp = \"{}\"\n\n[access]\nallow-guest-user = true\n\n{}",
            imp.display(),
            resource_toml(&scratch.0, FAKE_CORES)
        ),
    )
    .unwrap();
    let run = scratch.0.join("run");
    fs::create_dir(&run).unwrap();
    chown(&run, &owner, &owner);
    chmod(&run, 0o755);
    let log = scratch.0.join("instance.log");
    let owner_home = home.join(&owner);
    let mut instance = Command::new(prefix().join("bin/flux"));
    instance
        .arg("start")
        .arg("--test-size=2")
        .arg(format!("--test-rundir={}", run.display()))
        .arg(format!("--config-path={}", conf.display()))
        .arg(format!("-Sconf.shell_initrc={}", initrc.display()))
        .arg(format!("-Sconf.shell_pluginpath={}", plugins.display()))
        .args(["sh", "-c", "echo up; exec cat >/dev/null"])
        .env_clear()
        .env(
            "PATH",
            format!("{}:/usr/bin:/bin", prefix().join("bin").display()),
        )
        .env("HOME", &owner_home)
        .env("TMPDIR", &owner_home)
        .current_dir(&owner_home)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(File::create(&log).unwrap())
        .uid(uid_of(&owner).unwrap())
        .gid(gid_of(&owner));
    let mut child = instance.spawn().expect("start the instance");
    made.instance_stdin = child.stdin.take();
    let stdout = child.stdout.take().unwrap();
    made.children.insert(0, child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    assert_eq!(
        line.trim(),
        "up",
        "the instance did not start:\n{}",
        fs::read_to_string(&log).unwrap_or_default()
    );
    System {
        made: Made::default(),
        uri: format!("local://{}/local-0", run.display()),
        scratch,
        owner,
        alice,
        bob,
        carol,
        base,
        installed: plugins.join("desi_gpu_map.so"),
        control,
        log,
    }
}

/// A job's lines as [`Jobs`] reads them.
fn record(jobs: &mut Jobs, name: &str, (rc, said): (i32, String)) {
    jobs.all += &format!("== {name} {rc}\n{said}");
    let lines = said.lines().map(str::to_string).collect();
    jobs.jobs.insert(name.to_string(), (rc, lines));
}

/// The daemons serving `pipe`: (PID, uid).
fn daemons_of(pipe: &str) -> Vec<(u32, u32)> {
    processes()
        .into_iter()
        .filter(|p| p.cmdline.contains("nvidia-cuda-mps") && p.environ.contains(pipe))
        .map(|p| (p.pid, p.uid))
        .collect()
}

fn alive(pid: u32) -> bool {
    processes().iter().any(|p| p.pid == pid)
}

/// The job's daemon's own folder (`dgm-mps.*`), above its pipe.
fn daemon_dir(pipe: &str) -> PathBuf {
    Path::new(pipe)
        .ancestors()
        .find(|d| {
            d.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("dgm-mps."))
        })
        .unwrap_or_else(|| panic!("no dgm-mps.* above {pipe}"))
        .to_path_buf()
}

const ALL: [&str; 4] = ["0", "1", "2", "3"];

#[test]
fn a_system_instance_maps_each_users_jobs_and_keeps_their_daemons_apart() {
    // One run at a time holds flux-security's configuration.
    let lock = File::create(prefix().with_file_name(".system-suite.lock")).unwrap();
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).unwrap();
    let mut made = Made::default();
    let mut system = start_system(&mut made);
    system.made = made;
    let s = &system;
    let (alice, bob, carol) = (s.alice.as_str(), s.bob.as_str(), s.carol.as_str());
    let uid = |u: &str| uid_of(u).unwrap();
    let mut jobs = Jobs {
        all: String::new(),
        jobs: BTreeMap::new(),
    };
    let row_and_user = format!("{ROW}; echo \"U $(id -un)\"");

    // Each user's job, started by the IMP as that user, mapped as srun
    // maps the same layout.
    for (user, name, method, layout) in [
        (
            alice,
            "alice-map",
            "contiguous",
            "-N2 --tasks-per-node=3 --gpus-per-node=4",
        ),
        (
            bob,
            "bob-map",
            "roundrobin",
            "-N1 --tasks-per-node=6 --gpus-per-node=4",
        ),
    ] {
        let option = format!("desi-gpu-map={method}");
        let ran = s.job(user, "run", layout, &[&option], &row_and_user);
        record(&mut jobs, name, ran);
        assert_eq!(
            jobs.get(name).0,
            0,
            "{name}: {}\n{}",
            jobs.said(name),
            s.log()
        );
        assert_srun_rule(&jobs, name, method, &ALL);
        let users: Vec<String> = jobs
            .get(name)
            .1
            .iter()
            .filter_map(|l| l.strip_prefix("U "))
            .map(str::to_string)
            .collect();
        assert_eq!(users.len(), jobs.rows(name).len(), "{}", jobs.all);
        assert!(users.iter().all(|u| u == user), "{name} ran as {users:?}");
    }

    // A user's -o userrc loading the installed plugin again changes
    // nothing: the site's conf holds (its mps_dir).
    let userrc = s.home(alice).join("userrc.lua");
    fs::write(
        &userrc,
        format!("plugin.load {{ file = \"{}\" }}\n", s.installed.display()),
    )
    .unwrap();
    let userrc = format!("userrc={}", userrc.display());
    record(
        &mut jobs,
        "alice-userrc",
        s.job(
            alice,
            "run",
            "-n2 -g2",
            &[&userrc, "desi-gpu-map=contiguous,mps"],
            ROW,
        ),
    );
    let rows = jobs.rows("alice-userrc");
    assert_eq!(rows.len(), 2, "{}", jobs.all);
    for row in rows {
        assert!(
            row[6].starts_with(&s.base.0.display().to_string()),
            "not the site's mps_dir: {row:?}\n{}",
            jobs.said("alice-userrc")
        );
    }

    // MPS: alice's job on the first node's four GPUs, bob's on the
    // second's, both running until the test releases them (-n2 -g2, not
    // -N1 with per-node counts, which takes the whole node).
    let mps_job = format!(
        "{ROW}; echo $CUDA_MPS_PIPE_DIRECTORY > pipe-$FLUX_TASK_LOCAL_ID; \
         while [ ! -e release ]; do sleep 0.1; done"
    );
    let mut running = BTreeMap::new();
    for (user, rank) in [(alice, "rank:0"), (bob, "rank:1")] {
        let layout = format!("-n2 -g2 --requires={rank}");
        let options = ["desi-gpu-map=contiguous,mps"];
        let (rc, said) = s.job(user, "submit", &layout, &options, &mps_job);
        assert_eq!(rc, 0, "{user}: {said}");
        let id = said.lines().last().unwrap_or_default().trim().to_string();
        s.wait_for(user, &id, &["pipe-0", "pipe-1"]);
        let pipe = fs::read_to_string(s.home(user).join("pipe-0"))
            .unwrap()
            .trim()
            .to_string();
        if !pipe.starts_with(&s.base.0.display().to_string()) {
            File::create(s.home(user).join("release")).unwrap();
            let (_, said) = s.flux(user, &["job", "attach", &id]);
            panic!("{user}'s job runs without MPS ({pipe:?}): {said}");
        }
        let daemons = daemons_of(&pipe);
        assert!(!daemons.is_empty(), "{user}: no daemon serves {pipe}");
        for (pid, owner) in &daemons {
            assert_eq!(
                *owner,
                uid(user),
                "{user}'s daemon {pid} runs as uid {owner}"
            );
        }
        let dir = daemon_dir(&pipe);
        let meta = fs::metadata(&dir).unwrap();
        assert_eq!(
            (meta.uid(), meta.mode() & 0o777),
            (uid(user), 0o700),
            "{}",
            dir.display()
        );
        running.insert(user, (id, pipe, dir, daemons));
    }
    let (_, alice_pipe, alice_dir, alice_daemons) = &running[alice];
    let (_, bob_pipe, _, bob_daemons) = &running[bob];
    assert_ne!(alice_pipe, bob_pipe);

    // Bob's job cannot see alice's daemon's folder, reach its pipe, tell
    // it to quit or signal it.
    let probe = format!(
        "probe() {{ name=$1; shift; \"$@\" >/dev/null 2>&1; echo \"PROBE $name $?\"; }}\n\
         probe list ls {dir}\n\
         probe pipe ls {alice_pipe}\n\
         probe quit sh -c 'echo quit | CUDA_MPS_PIPE_DIRECTORY={alice_pipe} timeout 20 {control}'\n\
         probe stop kill -STOP {pid}\n\
         probe term kill -TERM {pid}\n",
        dir = alice_dir.display(),
        control = s.control.display(),
        pid = alice_daemons[0].0,
    );
    record(
        &mut jobs,
        "bob-probe",
        s.job(bob, "run", "-n1", &[], &probe),
    );
    let said = jobs.said("bob-probe");
    assert_eq!(jobs.get("bob-probe").0, 0, "{said}");
    let probes: Vec<&str> = said.lines().filter(|l| l.starts_with("PROBE ")).collect();
    assert_eq!(probes.len(), 5, "{said}");
    for line in probes {
        let rc = line.rsplit(' ').next().unwrap();
        assert!(
            rc != "0" && rc != "124",
            "bob's job reached alice's daemon: {line}"
        );
    }
    // A bad option fails that job only, before any task starts.
    record(
        &mut jobs,
        "alice-bad",
        s.job(alice, "run", "-n1", &["desi-gpu-map=contigous"], ROW),
    );
    let said = jobs.said("alice-bad");
    assert_ne!(jobs.get("alice-bad").0, 0, "{said}");
    assert!(jobs.rows("alice-bad").is_empty(), "{said}");
    assert!(
        said.contains("invalid -o desi-gpu-map value \"contigous\""),
        "{said}"
    );
    for (pid, _) in alice_daemons.iter().chain(bob_daemons) {
        assert!(alive(*pid), "daemon {pid} ended early:\n{}", jobs.all);
    }

    // Alice's job ends: its daemon stops, its folder goes, and bob's
    // daemon serves on; then bob's.
    for user in [alice, bob] {
        let (id, pipe, dir, daemons) = &running[user];
        let release = s.home(user).join("release");
        File::create(&release).unwrap();
        let name = format!("{user}-mps");
        record(&mut jobs, &name, s.flux(user, &["job", "attach", id]));
        assert_eq!(jobs.get(&name).0, 0, "{}\n{}", jobs.said(&name), s.log());
        let rows = jobs.rows(&name);
        assert_eq!(rows.len(), 2, "{}", jobs.all);
        for row in &rows {
            assert_eq!((row[4].as_str(), &row[6]), ("1", pipe), "{row:?}");
            assert!(row[3].starts_with("GPU-fake-"), "{row:?}");
        }
        let (rc, said) = s.flux(user, &["job", "wait-event", "-t", "60", id, "clean"]);
        assert_eq!(rc, 0, "{said}");
        for (pid, _) in daemons {
            assert!(!alive(*pid), "{user}'s daemon {pid} outlived the job");
        }
        assert!(
            daemons_of(pipe).is_empty(),
            "{user}'s daemon outlived the job"
        );
        assert!(!dir.exists(), "{} is left", dir.display());
        if user == alice {
            for (pid, _) in bob_daemons {
                assert!(alive(*pid), "alice's job's end stopped bob's daemon {pid}");
            }
        }
    }

    // Carol may not run the site's control daemon: her job runs mapped,
    // without MPS, and says why.
    record(
        &mut jobs,
        "carol-mps",
        s.job(
            carol,
            "run",
            "-N1 --tasks-per-node=2 --gpus-per-node=4",
            &["desi-gpu-map=contiguous,mps"],
            ROW,
        ),
    );
    let said = jobs.said("carol-mps");
    assert_eq!(jobs.get("carol-mps").0, 0, "{said}");
    assert_eq!(
        said.matches(&format!("cannot start {}: ", s.control.display()))
            .count(),
        1,
        "{said}"
    );
    assert!(
        said.contains("Permission denied") && said.contains("running without MPS"),
        "{said}"
    );
    for row in jobs.rows("carol-mps") {
        assert_eq!(
            (row[4].as_str(), row[6].as_str()),
            ("1", "unset"),
            "{row:?}"
        );
    }

    // Nothing of the users' is left running, and no daemon's folder.
    let uids = [uid(alice), uid(bob), uid(carol)];
    let left: Vec<String> = processes()
        .into_iter()
        .filter(|p| uids.contains(&p.uid))
        .map(|p| format!("{} {}", p.pid, p.cmdline))
        .collect();
    assert!(left.is_empty(), "left running: {left:?}");
    let dirs: Vec<_> = fs::read_dir(&s.base.0)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(dirs.is_empty(), "left: {dirs:?}");

    // Ending it removes what it made.
    let users = [
        s.owner.clone(),
        alice.to_string(),
        bob.to_string(),
        carol.to_string(),
    ];
    let files = system.made.files.clone();
    let groups = system.made.groups.clone();
    let scratch = system.scratch.0.clone();
    drop(system);
    for user in users {
        assert!(uid_of(&user).is_none(), "user {user} is left");
        let group = Command::new("getent")
            .args(["group", &user])
            .output()
            .unwrap();
        assert!(!group.status.success(), "group {user} is left");
    }
    for group in groups {
        let left = Command::new("getent")
            .args(["group", &group])
            .output()
            .unwrap();
        assert!(!left.status.success(), "group {group} is left");
    }
    for file in files {
        assert!(!file.exists(), "{} is left", file.display());
    }
    assert!(!scratch.exists(), "{} is left", scratch.display());
    drop(lock);
}
