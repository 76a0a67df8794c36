//! The keeper's command line, declared once: clap parses it in the keeper
//! ([`KeeperOpts`]), and the task that starts the keeper writes it from
//! the same struct ([`KeeperOpts::words`]).

use clap::{Args, FromArgMatches};
use desi_gpu_map_core::mps::{Daemon, KeeperAddr};
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// The keeper's hidden subcommand, by which tasks find a keeper too.
pub const KEEPER_COMMAND: &str = "mps-keeper";

/// The step's MPS daemon on one node, kept by the first of its tasks that
/// runs exec with METHOD,mps (src/keeper/): its listening socket is
/// standard input, and these are what the task planned.
#[derive(Args, Debug, Clone, PartialEq, Eq)]
pub struct KeeperOpts {
    #[arg(long)]
    pub control: PathBuf,
    /// The control daemon's PATH, where it finds its server.
    #[arg(long, value_delimiter = ':')]
    pub path: Vec<PathBuf>,
    #[arg(long)]
    pub base: PathBuf,
    #[arg(long)]
    pub stem: String,
    #[arg(long)]
    pub token: u32,
    /// The step's GPUs by UUID.
    #[arg(long, value_delimiter = ',')]
    pub gpus: Vec<String>,
    #[arg(long)]
    pub timeout_ms: u64,
    /// The step's tasks on this node.
    #[arg(long)]
    pub tasks: usize,
    /// The step's slurmstepd: its end ends the keeper.
    #[arg(long)]
    pub stepd: Option<u32>,
    /// Run in the foreground: the first keeper starts this one detached and
    /// exits, so that no task's process is its parent.
    #[arg(long)]
    pub serve: bool,
    /// Only remove the user's keeper directories in --base whose keeper is
    /// gone (what every keeper does first), then exit.
    #[arg(long)]
    pub sweep: bool,
    /// Another user holds the socket's name: no listener on standard
    /// input, only the socket inside the keeper's directory.
    #[arg(long)]
    pub unnamed: bool,
}

impl KeeperOpts {
    /// The keeper a task starts for the daemon it planned, at `addr`;
    /// `unnamed` where another user holds the socket's name.
    pub fn planned(addr: &KeeperAddr, stepd: Option<u32>, unnamed: bool) -> KeeperOpts {
        let daemon = addr.daemon();
        KeeperOpts {
            control: daemon.control.clone(),
            path: daemon.path.clone(),
            base: daemon.base.clone(),
            stem: addr.name().to_string(),
            token: daemon.token,
            gpus: daemon.gpus.clone(),
            timeout_ms: u64::try_from(daemon.timeout.as_millis()).unwrap_or(u64::MAX),
            tasks: daemon.local_tasks,
            stepd,
            serve: false,
            sweep: false,
            unnamed,
        }
    }

    /// Another keeper's options, read back from its command line (`words`,
    /// as `/proc/PID/cmdline` holds them: the program, then
    /// [`KEEPER_COMMAND`] and the options [`KeeperOpts::words`] wrote) by
    /// the same declaration clap parses in the keeper; `None` where the
    /// words are no keeper's.
    pub fn read_back(words: &[String]) -> Option<KeeperOpts> {
        // The kernel ends the command line with a NUL: no word follows it.
        let words = match words.split_last() {
            Some((last, rest)) if last.is_empty() => rest,
            _ => words,
        };
        let at = words.iter().position(|word| word == KEEPER_COMMAND)?;
        let command = KeeperOpts::augment_args(clap::Command::new(KEEPER_COMMAND));
        let matches = command.try_get_matches_from(words.get(at..)?).ok()?;
        KeeperOpts::from_arg_matches(&matches).ok()
    }

    /// The daemon the task planned, run as this process's user.
    pub fn daemon(&self) -> Daemon {
        Daemon {
            control: self.control.clone(),
            path: self.path.clone(),
            base: self.base.clone(),
            stem: self.stem.clone(),
            token: self.token,
            gpus: self.gpus.clone(),
            uid: rustix::process::getuid().as_raw(),
            gid: rustix::process::getgid().as_raw(),
            host: None,
            shares: Vec::new(),
            keep_log: false,
            timeout: Duration::from_millis(self.timeout_ms),
            local_tasks: self.tasks,
            asked: true,
        }
    }

    /// The subcommand and its options, as the program's arguments: what
    /// tasks read back from other keepers' command lines
    /// ([`KeeperOpts::read_back`], for `join`).
    pub fn words(&self) -> Vec<OsString> {
        let mut words: Vec<OsString> = vec![
            KEEPER_COMMAND.into(),
            "--control".into(),
            self.control.clone().into(),
            joined("--path=", &self.path, ":"),
            "--base".into(),
            self.base.clone().into(),
            "--stem".into(),
            self.stem.clone().into(),
            "--token".into(),
            self.token.to_string().into(),
            joined("--gpus=", &self.gpus, ","),
            "--timeout-ms".into(),
            self.timeout_ms.to_string().into(),
            "--tasks".into(),
            self.tasks.to_string().into(),
        ];
        if let Some(pid) = self.stepd {
            words.extend(["--stepd".into(), pid.to_string().into()]);
        }
        let flags = [
            (self.unnamed, "--unnamed"),
            (self.serve, "--serve"),
            (self.sweep, "--sweep"),
        ];
        words.extend(flags.iter().filter(|f| f.0).map(|f| f.1.into()));
        words
    }
}

/// `--option=` and the values, `between` each two.
fn joined<T: AsRef<std::ffi::OsStr>>(option: &str, values: &[T], between: &str) -> OsString {
    let mut word = OsString::from(option);
    for (i, value) in values.iter().enumerate() {
        if i > 0 {
            word.push(between);
        }
        word.push(value);
    }
    word
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{Cli, Command};
    use clap::Parser;

    /// Every field set, none to its default (a field added to the struct
    /// must be set here, and so shows if `words` leaves it out).
    /// The sample with no stepd and no flag set.
    fn plain() -> KeeperOpts {
        KeeperOpts {
            stepd: None,
            serve: false,
            sweep: false,
            unnamed: false,
            ..sample()
        }
    }

    fn sample() -> KeeperOpts {
        KeeperOpts {
            control: "/c".into(),
            path: vec!["/a".into(), "/b".into()],
            base: "/tmp".into(),
            stem: "S".into(),
            token: 7,
            gpus: vec!["G0".into(), "G1".into()],
            timeout_ms: 5,
            tasks: 3,
            stepd: Some(11),
            serve: true,
            sweep: true,
            unnamed: true,
        }
    }

    fn parsed(words: Vec<OsString>) -> KeeperOpts {
        let line = std::iter::once(OsString::from("desi-gpu-map")).chain(words);
        match Cli::try_parse_from(line).unwrap().command {
            Command::MpsKeeper(opts) => opts,
            other => panic!("not the keeper: {other:?}"),
        }
    }

    #[test]
    fn the_keepers_line_as_written_parses_back_to_itself() {
        let written = KeeperOpts {
            base: "/tmp/base dir".into(),
            token: 0x1234_5678,
            ..sample()
        };
        assert_eq!(parsed(written.words()), written);
        let plain = plain();
        assert_eq!(parsed(plain.words()), plain);
    }

    #[test]
    fn a_planned_daemon_is_the_keepers_daemon() {
        let started = KeeperOpts {
            serve: false,
            sweep: false,
            ..sample()
        };
        // The task's plan, its stem not yet marked as a keeper's.
        let planned = Daemon {
            stem: "S".into(),
            ..started.daemon()
        };
        let addr = KeeperAddr::of(&planned);
        let opts = KeeperOpts::planned(&addr, Some(11), true);
        assert_eq!(
            opts,
            KeeperOpts {
                stem: "S.k".into(),
                ..started
            }
        );
        assert_eq!(opts.daemon(), *addr.daemon());
    }

    #[test]
    fn another_keepers_line_reads_back_through_the_same_declaration() {
        let written = KeeperOpts {
            base: "/tmp/base dir".into(),
            ..sample()
        };
        // As /proc/PID/cmdline holds it: the program first, a NUL last.
        let cmdline = |opts: &KeeperOpts| -> Vec<String> {
            std::iter::once("/usr/bin/desi-gpu-map".to_string())
                .chain(
                    opts.words()
                        .iter()
                        .map(|w| w.to_string_lossy().into_owned()),
                )
                .chain([String::new()])
                .collect()
        };
        assert_eq!(KeeperOpts::read_back(&cmdline(&written)), Some(written));
        let plain = plain();
        assert_eq!(KeeperOpts::read_back(&cmdline(&plain)), Some(plain.clone()));
        // No keeper's: another program, or a keeper's words cut short.
        let words = |line: &[&str]| line.iter().map(|w| w.to_string()).collect::<Vec<_>>();
        assert_eq!(KeeperOpts::read_back(&words(&["sleep", "100", ""])), None);
        assert_eq!(
            KeeperOpts::read_back(&words(&[
                "x",
                KEEPER_COMMAND,
                "--stem",
                "S",
                "--base",
                "/b"
            ])),
            None
        );
        assert_eq!(KeeperOpts::read_back(&[]), None);
    }

    #[test]
    fn the_line_is_the_one_tasks_and_the_cluster_tests_read() {
        let started = KeeperOpts {
            serve: false,
            sweep: false,
            ..sample()
        };
        let line: Vec<String> = started
            .words()
            .iter()
            .map(|w| w.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            line.join(" "),
            "mps-keeper --control /c --path=/a:/b --base /tmp --stem S --token 7 \
             --gpus=G0,G1 --timeout-ms 5 --tasks 3 --stepd 11 --unnamed"
        );
    }
}
