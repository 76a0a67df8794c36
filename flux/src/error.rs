//! Why a call of the plugin fails ([`PluginError`]): one variant a
//! reason, with the values its line names. `exports.rs` logs the line.

use desi_gpu_map_core::flux::{ConfError, OptionError};
use desi_gpu_map_core::job::Refusal;
use desi_gpu_map_core::settings::site::keys;
use desi_gpu_map_core::text::quote;
use desi_gpu_map_core::Error;
use std::ffi::CStr;
use std::fmt;
use std::io;

/// Where the site's settings come from, for messages.
const CONF: &str = "the conf table of desi-gpu-map's plugin.load in the shell's initrc";

/// Why a call of the plugin fails.
#[derive(Debug)]
pub enum PluginError {
    /// The plugin handle gives no shell.
    NoShell,
    /// A call of the plugin panicked (`what`: the call).
    Panic { what: String },
    /// The shell gives none of one of its JSON objects (`what`).
    NoJson { what: &'static str },
    /// One of the shell's JSON objects (`what`) does not read.
    Json {
        what: &'static str,
        error: serde_json::Error,
    },
    /// A flux-shell call failed, with its errno.
    Call(io::Error),
    /// flux-shell took no handler for `topic`.
    Register { topic: &'static CStr },
    /// The task has no command to set its variables on.
    NoCommand,
    /// A `task.*` call without a current task.
    NoTask,
    /// The job kept by the shell was poisoned by a panic.
    StateLost,
    /// The shell has no handle on its broker.
    NoBroker,
    /// The broker gives no `broker.pid`.
    NoBrokerPid,
    /// The broker's `broker.pid` is no process id.
    BadBrokerPid { pid: String },
    /// The broker's process environment (`path`) cannot be read.
    Environ { path: String, error: io::Error },
    /// A KVS lookup of `key` failed.
    Kvs { key: String, error: io::Error },
    /// A KVS lookup of `key` gave no value.
    KvsEmpty { key: String },
    /// The resource eventlog (`key`) has no `resource-define` event.
    NoDefine { key: &'static str },
    /// The built-in settings refused (no `conf` table given).
    Defaults(Error),
    /// The `conf` table is no JSON.
    ConfJson(serde_json::Error),
    /// The `conf` table (`text`) is no table of keys.
    ConfNoTable { text: String },
    /// An entry of the `conf` table (`text`) is no value.
    ConfNoValue { key: String, text: String },
    /// The `conf` table's words refused, in Flux's words.
    Conf(Error),
    /// `-o desi-gpu-map`'s value refused, in Flux's words.
    Option(Error),
    /// The core refused the job; its lines before are logged already.
    Refused(Refusal),
}

impl fmt::Display for PluginError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PluginError::NoShell => f.write_str("the plugin has no shell"),
            PluginError::Panic { what } => {
                write!(f, "{what}: an internal error (a panic); please report it")
            }
            PluginError::NoJson { what } => write!(f, "the shell gives no {what}"),
            PluginError::Json { what, error } => write!(f, "the shell's {what}: {error}"),
            PluginError::Call(error) => write!(f, "{error}"),
            PluginError::Register { topic } => {
                write!(f, "cannot register a handler for {topic:?}")
            }
            PluginError::NoCommand => f.write_str("the task has no command"),
            PluginError::NoTask => f.write_str("no current task"),
            PluginError::StateLost => f.write_str("the plugin's state is lost"),
            PluginError::NoBroker => f.write_str("the shell has no handle on its broker"),
            PluginError::NoBrokerPid => f.write_str("the broker gives no broker.pid"),
            PluginError::BadBrokerPid { pid } => {
                write!(f, "the broker's broker.pid {pid:?} is no process id")
            }
            PluginError::Environ { path, error } => write!(f, "{path}: {error}"),
            PluginError::Kvs { key, error } => write!(f, "{key}: {error}"),
            PluginError::KvsEmpty { key } => write!(f, "{key}: empty"),
            PluginError::NoDefine { key } => write!(f, "{key} has no resource-define event"),
            PluginError::Defaults(e) => write!(f, "{e}"),
            PluginError::ConfJson(error) => write!(f, "{CONF}: {error}"),
            PluginError::ConfNoTable { text } => write!(f, "{CONF} is no table of keys: {text}"),
            PluginError::ConfNoValue { key, text } => write!(
                f,
                "{CONF}: {} = {text} is no value: give a string, a number or true; \
                 valid keys: {}",
                quote(key),
                keys()
            ),
            PluginError::Conf(e) => write!(f, "{CONF}: {}", ConfError(e)),
            PluginError::Option(e) => write!(f, "{}", OptionError(e)),
            PluginError::Refused(refusal) => f.write_str(&refusal.why),
        }
    }
}

impl std::error::Error for PluginError {}

#[cfg(test)]
mod tests {
    use super::*;
    use desi_gpu_map_core::settings::option::parse_option;
    use desi_gpu_map_core::settings::site::parse_args;

    /// Each line as the plugin worded it before this type.
    #[test]
    fn each_reason_reads_as_before() {
        let errno = || io::Error::from_raw_os_error(2);
        let json = || serde_json::from_str::<serde_json::Value>("{").unwrap_err();
        let conf = parse_args(&["defualt=contiguous"]).unwrap_err();
        let option = parse_option("contigous").unwrap_err();
        let cases = [
            (PluginError::NoShell, "the plugin has no shell".to_string()),
            (
                PluginError::Panic {
                    what: "task.init".into(),
                },
                "task.init: an internal error (a panic); please report it".into(),
            ),
            (
                PluginError::NoJson { what: "job info" },
                "the shell gives no job info".into(),
            ),
            (
                PluginError::Json {
                    what: "task info",
                    error: json(),
                },
                format!("the shell's task info: {}", json()),
            ),
            (PluginError::Call(errno()), errno().to_string()),
            (
                PluginError::Register {
                    topic: c"task.init",
                },
                "cannot register a handler for \"task.init\"".into(),
            ),
            (PluginError::NoCommand, "the task has no command".into()),
            (PluginError::NoTask, "no current task".into()),
            (PluginError::StateLost, "the plugin's state is lost".into()),
            (
                PluginError::NoBroker,
                "the shell has no handle on its broker".into(),
            ),
            (
                PluginError::NoBrokerPid,
                "the broker gives no broker.pid".into(),
            ),
            (
                PluginError::BadBrokerPid { pid: "x".into() },
                "the broker's broker.pid \"x\" is no process id".into(),
            ),
            (
                PluginError::Environ {
                    path: "/proc/7/environ".into(),
                    error: errno(),
                },
                format!("/proc/7/environ: {}", errno()),
            ),
            (
                PluginError::Kvs {
                    key: "resource.eventlog".into(),
                    error: errno(),
                },
                format!("resource.eventlog: {}", errno()),
            ),
            (
                PluginError::KvsEmpty {
                    key: "resource.eventlog".into(),
                },
                "resource.eventlog: empty".into(),
            ),
            (
                PluginError::NoDefine {
                    key: "resource.eventlog",
                },
                "resource.eventlog has no resource-define event".into(),
            ),
            (PluginError::Defaults(conf.clone()), conf.to_string()),
            (PluginError::ConfJson(json()), format!("{CONF}: {}", json())),
            (
                PluginError::ConfNoTable { text: "1".into() },
                format!("{CONF} is no table of keys: 1"),
            ),
            (
                PluginError::ConfNoValue {
                    key: "default".into(),
                    text: "{}".into(),
                },
                format!(
                    "{CONF}: \"default\" = {{}} is no value: give a string, a number or true; \
                     valid keys: {}",
                    keys()
                ),
            ),
            (
                PluginError::Conf(conf.clone()),
                format!("{CONF}: {}", ConfError(&conf)),
            ),
            (
                PluginError::Option(option.clone()),
                OptionError(&option).to_string(),
            ),
            (
                PluginError::Refused(Refusal {
                    say: vec!["usage".into()],
                    why: "refused".into(),
                }),
                "refused".into(),
            ),
        ];
        for (why, line) in cases {
            assert_eq!(why.to_string(), line);
        }
    }
}
