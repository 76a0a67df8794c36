//! A throw-away Flux instance per test: its folder under `target/tmp`,
//! the plugin loaded as the test says, a script run as its initial
//! program, and what each job printed, by name.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Flux's install prefix (`DGM_FLUX_PREFIX`, else tests/flux/build.sh's).
pub fn prefix() -> PathBuf {
    let prefix = std::env::var_os("DGM_FLUX_PREFIX")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/flux/install"));
    assert!(
        prefix.join("bin/flux").is_file(),
        "no Flux at {}: run tests/flux/build.sh (or set DGM_FLUX_PREFIX)",
        prefix.display()
    );
    prefix
}

/// The plugin (`DGM_FLUX_PLUGIN`, else the newer of the release and debug
/// builds, so that a stale one is never tested).
pub fn plugin() -> PathBuf {
    if let Some(so) = std::env::var_os("DGM_FLUX_PLUGIN") {
        return PathBuf::from(so);
    }
    let built = ["release", "debug"]
        .iter()
        .map(|p| repo().join(format!("target/{p}/libdesi_gpu_map_flux.so")))
        .filter_map(|so| Some((fs::metadata(&so).ok()?.modified().ok()?, so)))
        .max();
    built.map(|(_, so)| so).expect(
        "no libdesi_gpu_map_flux.so: cargo build -p desi-gpu-map-flux (or set DGM_FLUX_PLUGIN)",
    )
}

/// The command's binary, for `plan` (the rule srun's tasks get).
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_desi-gpu-map"))
}

/// NVIDIA's real MPS binaries, unpacked by tests/nvidia/fetch.sh.
pub fn mps_control() -> PathBuf {
    let out = Command::new("bash")
        .arg(repo().join("tests/nvidia/fetch.sh"))
        .output()
        .expect("run tests/nvidia/fetch.sh");
    assert!(
        out.status.success(),
        "tests/nvidia/fetch.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let control = PathBuf::from(dir).join("nvidia-cuda-mps-control");
    assert!(control.is_file(), "no {}", control.display());
    control
}

/// NVIDIA's library as the fake NVML (tests/fakes/nvml) stands for it,
/// built in `scratch` to read `conf` (its lines: `count=4`, and where the
/// GPUs sit, `affinity=...`).
pub fn fake_nvml(scratch: &Scratch, conf: &str) -> PathBuf {
    let dir = scratch.0.join("nvml");
    fs::create_dir_all(&dir).unwrap();
    let file = dir.join("fake-nvml.conf");
    fs::write(&file, conf).unwrap();
    let lib = dir.join("libnvidia-ml.so.1");
    let built = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&lib)
        .arg(repo().join("tests/fakes/nvml/fake_nvml.c"))
        .arg(format!("-DFAKE_NVML_CONF=\"{}\"", file.display()))
        .arg("-lpthread")
        .status()
        .unwrap();
    assert!(built.success(), "build the fake NVML");
    lib
}

/// How the instance's shells load the plugin.
pub enum Load<'a> {
    /// From the shell's plugin directory, through the default initrc
    /// (`plugin.load { file = "*.so" }`), with no conf.
    PluginDir,
    /// By an initrc of the site's own, with this `conf` table (Lua).
    SiteConf(&'a str),
    /// Not at all: jobs load it with `-o userrc=$USERRC`.
    User,
}

/// A folder of this test's own, removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::SeqCst);
        let dir = repo()
            .join("target/tmp")
            .join(format!("flux-{name}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// What a script's jobs printed: `job NAME CMD...` lines run CMD with its
/// stdout and stderr together, then print `== NAME RC`.
pub struct Jobs {
    pub all: String,
    pub jobs: BTreeMap<String, (i32, Vec<String>)>,
}

impl Jobs {
    pub fn get(&self, name: &str) -> &(i32, Vec<String>) {
        self.jobs
            .get(name)
            .unwrap_or_else(|| panic!("job {name} did not run; the instance said:\n{}", self.all))
    }

    /// The job's rows (lines starting `R `), without the prefix.
    pub fn rows(&self, name: &str) -> Vec<Vec<String>> {
        let mut rows: Vec<Vec<String>> = self
            .get(name)
            .1
            .iter()
            .filter_map(|l| l.strip_prefix("R "))
            .map(|l| l.split_whitespace().map(String::from).collect())
            .collect();
        rows.sort_by_key(|r| r.first().and_then(|n| n.parse::<u32>().ok()));
        rows
    }

    /// The job's lines that are no row.
    pub fn said(&self, name: &str) -> String {
        let lines = &self.get(name).1;
        let said: Vec<&str> = lines
            .iter()
            .filter(|l| !l.starts_with("R "))
            .map(String::as_str)
            .collect();
        said.join("\n")
    }
}

/// The row each task prints: rank, broker, local id, its list, the flag,
/// the GPUs it holds, its MPS pipe.
pub const ROW: &str = r#"echo "R $FLUX_TASK_RANK ${FLUX_URI##*local-} $FLUX_TASK_LOCAL_ID ${CUDA_VISIBLE_DEVICES-unset} ${DESI_GPU_MAPPED-unset} ${DESI_GPU_MAP_GPUS-unset} ${CUDA_MPS_PIPE_DIRECTORY-unset}""#;

/// Starts `flux start --test-size=2` with four fake GPUs a broker, the
/// plugin loaded as `load` says, runs `script` (bash, with `job`, `$USERRC`
/// and `$ROW` defined) as its initial program, and ends it.
pub fn in_flux(scratch: &Scratch, load: Load, script: &str) -> Jobs {
    in_flux_as(scratch, load, script, None)
}

/// [`in_flux`], the instance run as `user` (MPS never serves root).
pub fn in_flux_as(scratch: &Scratch, load: Load, script: &str, user: Option<&str>) -> Jobs {
    in_flux_env(scratch, load, script, user, &[], FAKE_CORES)
}

/// The cores R gives each broker by default: more than the host has, so
/// jobs run with `-o cpu-affinity=off` (Flux cannot bind them).
pub const FAKE_CORES: &str = "0-63";

/// [`in_flux_as`], the brokers started with `env` too (a grant of GPUs
/// above the instance, as Slurm gives its brokers), each given `cores`.
pub fn in_flux_env(
    scratch: &Scratch,
    load: Load,
    script: &str,
    user: Option<&str>,
    env: &[(&str, &str)],
    cores: &str,
) -> Jobs {
    let dir = &scratch.0;
    let flux = prefix().join("bin/flux");
    let conf = dir.join("conf");
    fs::create_dir_all(&conf).unwrap();
    fs::write(conf.join("resource.toml"), resource_toml(dir, cores)).unwrap();
    let so = plugin();
    let userrc = dir.join("userrc.lua");
    fs::write(
        &userrc,
        format!("plugin.load {{ file = \"{}\" }}\n", so.display()),
    )
    .unwrap();
    let mut settings = vec![format!("--config-path={}", conf.display())];
    match load {
        Load::PluginDir => {
            let plugins = dir.join("plugins");
            fs::create_dir_all(&plugins).unwrap();
            fs::copy(&so, plugins.join("desi_gpu_map.so")).unwrap();
            settings.push(format!("-Sconf.shell_pluginpath={}", plugins.display()));
        }
        Load::SiteConf(conf) => {
            let initrc = dir.join("initrc.lua");
            let default = prefix().join("etc/flux/shell/initrc.lua");
            let body = fs::read_to_string(&default).unwrap_or_default();
            let load = format!(
                "plugin.load {{ file = \"{}\", conf = {conf} }}\n",
                so.display()
            );
            fs::write(&initrc, load + &body).unwrap();
            settings.push(format!("-Sconf.shell_initrc={}", initrc.display()));
        }
        Load::User => {}
    }
    let script_file = dir.join("script.sh");
    let body = format!(
        "set -u\nexport USERRC={}\nROW='{}'\njob() {{ local name=$1; shift; \"$@\" 2>&1 | sed -u 's/\\r$//'; echo \"== $name ${{PIPESTATUS[0]}}\"; }}\n{script}\n",
        userrc.display(),
        ROW.replace('\'', "'\\''")
    );
    fs::write(&script_file, body).unwrap();
    let mut cmd = match user {
        Some(user) => {
            let owned = Command::new("chown")
                .args(["-R", user])
                .arg(dir)
                .status()
                .unwrap();
            assert!(owned.success(), "chown {user} {}", dir.display());
            let mut cmd = Command::new("runuser");
            cmd.args(["-u", user, "--", "timeout", "300"]).arg(&flux);
            cmd
        }
        None => {
            let mut cmd = Command::new("timeout");
            cmd.arg("300").arg(&flux);
            cmd
        }
    };
    let out = cmd
        .arg("start")
        .arg("--test-size=2")
        .args(&settings)
        .arg("bash")
        .arg(&script_file)
        .env("PATH", path_with(&prefix().join("bin")))
        .env("TMPDIR", dir)
        .envs(env.iter().copied())
        .current_dir(dir)
        .output()
        .expect("run flux start");
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "flux start failed:\n{all}");
    Jobs {
        jobs: parse_jobs(&String::from_utf8_lossy(&out.stdout)),
        all,
    }
}

/// Writes `dir/R.json`, two brokers on this host with 64 cores and four
/// fake GPUs each, and returns the `[resource]` table that gives it to an
/// instance.
pub fn resource_toml(dir: &Path, cores: &str) -> String {
    let host = String::from_utf8(Command::new("hostname").output().unwrap().stdout).unwrap();
    let host = host.trim();
    let r = Command::new(prefix().join("bin/flux"))
        .args(["R", "encode", "-r", "0-1", "-c", cores, "-g", "0-3", "-H"])
        .arg(format!("{host},{host}"))
        .output()
        .unwrap();
    assert!(
        r.status.success(),
        "flux R encode: {}",
        String::from_utf8_lossy(&r.stderr)
    );
    fs::write(dir.join("R.json"), &r.stdout).unwrap();
    format!(
        "[resource]\npath = \"{}\"\nnoverify = true\n",
        dir.join("R.json").display()
    )
}

pub fn path_with(dir: &Path) -> String {
    let path = std::env::var("PATH").unwrap_or_default();
    format!("{}:{path}", dir.display())
}

fn parse_jobs(out: &str) -> BTreeMap<String, (i32, Vec<String>)> {
    let mut jobs = BTreeMap::new();
    let mut lines = Vec::new();
    for line in out.lines() {
        match line.strip_prefix("== ").and_then(|l| l.rsplit_once(' ')) {
            Some((name, rc)) => {
                jobs.insert(
                    name.to_string(),
                    (rc.parse().unwrap_or(-1), std::mem::take(&mut lines)),
                );
            }
            None => lines.push(line.to_string()),
        }
    }
    jobs
}

/// Each task's list as srun's tasks would get it: rows grouped by broker
/// (the job's nodes, in order), against `desi-gpu-map plan`.
pub fn assert_srun_rule(jobs: &Jobs, name: &str, method: &str, devices: &[&str]) {
    let rows = jobs.rows(name);
    assert!(!rows.is_empty(), "{name}: no task ran:\n{}", jobs.all);
    let mut per_broker: BTreeMap<String, usize> = BTreeMap::new();
    for row in &rows {
        *per_broker.entry(row[1].clone()).or_default() += 1;
    }
    let brokers: Vec<&String> = per_broker.keys().collect();
    let counts: Vec<usize> = per_broker.values().copied().collect();
    let want = srun_rule(method, &counts, devices);
    for row in &rows {
        let node = brokers.iter().position(|b| **b == row[1]).unwrap();
        let local: usize = row[2].parse().unwrap();
        let list = &want[&(node, local)];
        assert_eq!(
            (&row[3], row[4].as_str(), &row[5]),
            (list, "1", list),
            "{name}: task {} (node {node}, local {local}) got {row:?}; srun's rule gives {list}",
            row[0]
        );
    }
}

/// What srun's tasks would get (`desi-gpu-map plan`) for these tasks per
/// node on these GPUs: `(node, local id) -> list`.
pub fn srun_rule(
    method: &str,
    per_node: &[usize],
    devices: &[&str],
) -> BTreeMap<(usize, usize), String> {
    let counts: Vec<String> = per_node.iter().map(usize::to_string).collect();
    let out = Command::new(bin())
        .args(["plan", "--json", "--method", method, "-N"])
        .arg(per_node.len().to_string())
        .arg("--ntasks-per-node")
        .arg(counts.join(","))
        .arg("--devices")
        .arg(devices.join(","))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "plan: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    plan["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let key = (
                t["node"].as_u64().unwrap() as usize,
                t["local_id"].as_u64().unwrap() as usize,
            );
            (key, t["visible"].as_str().unwrap().to_string())
        })
        .collect()
}

/// A short folder of this test's own under /tmp (mode 1777, as /tmp),
/// removed when dropped: an MPS daemon's socket paths, its longest
/// `pipe/control_privileged` under a directory named for a Flux job id of a
/// dozen digits, must fit in 108 bytes.
pub struct ShortDir(pub PathBuf);

impl ShortDir {
    pub fn new() -> ShortDir {
        let out = Command::new("mktemp")
            .args(["-d", "/tmp/dgfXXXX"])
            .output()
            .unwrap();
        assert!(out.status.success());
        let dir = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
        let mode = Command::new("chmod")
            .arg("1777")
            .arg(&dir)
            .status()
            .unwrap();
        assert!(mode.success());
        ShortDir(dir)
    }
}

impl Drop for ShortDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}
