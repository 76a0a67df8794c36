//! One way to run a cluster command in a test: a [`Job`] (srun, sbatch,
//! salloc or any client) built from its words, method, environment, user
//! and probe, run once into a [`Ran`], whose `#[track_caller]` assertions
//! name the command and show its whole output when they fail.

use super::{probe_rows, show, slurm_as, sorted_lines, text};
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::process::Output;

/// A Slurm client command to run on the test cluster.
pub struct Job {
    cmd: String,
    args: Vec<OsString>,
    env: Vec<(String, String)>,
    unset: Vec<String>,
    user: String,
}

/// `srun WORDS`, the words split at spaces.
pub fn srun(words: &str) -> Job {
    client("srun", words)
}

/// `sbatch WORDS`, the words split at spaces.
pub fn sbatch(words: &str) -> Job {
    client("sbatch", words)
}

/// `salloc WORDS`, the words split at spaces.
pub fn salloc(words: &str) -> Job {
    client("salloc", words)
}

/// Any client (`scontrol`, `squeue`, ...) with `words` split at spaces.
pub fn client(cmd: &str, words: &str) -> Job {
    Job {
        cmd: cmd.to_string(),
        args: Vec::new(),
        env: Vec::new(),
        unset: Vec::new(),
        user: "root".to_string(),
    }
    .args(words)
}

impl Job {
    /// More words, split at spaces.
    pub fn args(mut self, words: &str) -> Self {
        self.args
            .extend(words.split_whitespace().map(OsString::from));
        self
    }

    /// One word, spaces kept (a script, a path with spaces).
    pub fn arg(mut self, word: impl Into<String>) -> Self {
        self.args.push(OsString::from(word.into()));
        self
    }

    /// One word of any bytes (a value that is not UTF-8).
    pub fn arg_bytes(mut self, word: &[u8]) -> Self {
        self.args.push(OsStr::from_bytes(word).to_os_string());
        self
    }

    /// Several words, each kept whole.
    pub fn words(mut self, words: &[&str]) -> Self {
        self.args.extend(words.iter().map(OsString::from));
        self
    }

    /// `--desi-gpu-map=VALUE`.
    pub fn method(self, value: &str) -> Self {
        self.arg(format!("--desi-gpu-map={value}"))
    }

    /// A variable in the client's environment (which srun hands the tasks).
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.push((name.to_string(), value.to_string()));
        self
    }

    /// A variable removed from the client's environment, wherever it came
    /// from (the tests' own environment included).
    pub fn env_remove(mut self, name: &str) -> Self {
        self.unset.push(name.to_string());
        self
    }

    /// Run as `user` (one of [`super::USERS`]), from `/tmp`.
    pub fn user(mut self, user: &str) -> Self {
        self.user = user.to_string();
        self
    }

    /// Each task runs `bash -c SCRIPT` (a probe from [`super::probe`]).
    pub fn probe(self, script: &str) -> Self {
        self.words(&["bash", "-c", script])
    }

    /// The command line, as a failure message shows it.
    fn line(&self) -> String {
        let mut line = self.cmd.clone();
        for (name, value) in &self.env {
            line = format!("{name}={value} {line}");
        }
        if self.user != "root" {
            line = format!("({}) {line}", self.user);
        }
        for arg in &self.args {
            let arg = arg.to_string_lossy();
            let shown: String = arg.chars().take(80).collect();
            if arg.contains(char::is_whitespace) || arg.is_empty() {
                line += &format!(" {shown:?}");
            } else {
                line += &format!(" {shown}");
            }
        }
        line
    }

    /// Runs the command to its end.
    pub fn run(self) -> Ran {
        let mut cmd = slurm_as(&self.user, &self.cmd, &[]);
        cmd.args(&self.args);
        for (name, value) in &self.env {
            cmd.env(name, value);
        }
        for name in &self.unset {
            cmd.env_remove(name);
        }
        let out = cmd.output().expect("run a Slurm client");
        Ran {
            line: self.line(),
            out,
        }
    }

    /// Runs the command, which must succeed.
    #[track_caller]
    pub fn ok(self) -> Ran {
        self.run().ok()
    }
}

/// A command that ran: its output, and its command line for messages.
pub struct Ran {
    pub line: String,
    pub out: Output,
}

impl fmt::Display for Ran {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}\n{}", self.line, show(&self.out))
    }
}

impl Ran {
    pub fn success(&self) -> bool {
        self.out.status.success()
    }

    /// The exit code (None: killed by a signal).
    pub fn code(&self) -> Option<i32> {
        self.out.status.code()
    }

    pub fn stdout(&self) -> String {
        text(&self.out.stdout)
    }

    pub fn stderr(&self) -> String {
        text(&self.out.stderr)
    }

    /// The probe rows (`T ...` lines) sorted by rank, without the `T`.
    pub fn rows(&self) -> String {
        probe_rows(&self.stdout())
    }

    /// The stdout lines that start with `prefix`, sorted.
    pub fn lines(&self, prefix: &str) -> Vec<String> {
        sorted_lines(&self.out.stdout, |l| l.starts_with(prefix))
    }

    /// The lines the plugin (or `exec`) printed on stderr, sorted.
    pub fn said(&self) -> Vec<String> {
        sorted_lines(&self.out.stderr, |l| l.starts_with("desi-gpu-map: "))
    }

    /// The command succeeded.
    #[track_caller]
    pub fn ok(self) -> Self {
        assert!(self.success(), "expected success: {self}");
        self
    }

    /// The command failed.
    #[track_caller]
    pub fn fails(self) -> Self {
        assert!(!self.success(), "expected a failure: {self}");
        self
    }

    /// The command exited with `code`.
    #[track_caller]
    pub fn exits(self, code: i32) -> Self {
        assert_eq!(self.code(), Some(code), "exit code: {self}");
        self
    }

    /// The probe rows are exactly `want`, in rank order.
    #[track_caller]
    pub fn rows_are(self, want: &[&str]) -> Self {
        assert_eq!(self.rows(), super::rows(want), "rows: {self}");
        self
    }

    /// stderr holds `part`.
    #[track_caller]
    pub fn says(self, part: &str) -> Self {
        assert!(
            self.stderr().contains(part),
            "stderr lacks {part:?}: {self}"
        );
        self
    }

    /// stdout holds `part`.
    #[track_caller]
    pub fn prints(self, part: &str) -> Self {
        assert!(
            self.stdout().contains(part),
            "stdout lacks {part:?}: {self}"
        );
        self
    }

    /// stderr does not hold `part`.
    #[track_caller]
    pub fn never_says(self, part: &str) -> Self {
        assert!(!self.stderr().contains(part), "stderr has {part:?}: {self}");
        self
    }

    /// The plugin said nothing.
    #[track_caller]
    pub fn quiet(self) -> Self {
        assert!(self.said().is_empty(), "the plugin spoke: {self}");
        self
    }
}
