//! NVML for the command, asked in a child process (the hidden
//! `desi-gpu-map nvml-query`) that is killed at a deadline, as the plugin
//! asks it: a hung `nvmlInit` (a GPU fallen off the bus) must not hold a
//! task (`exec`) or a user (`show`), and NVML is never loaded into the
//! process that becomes the application.

use crate::error::Error;
use crate::host::child::wait_until;
use crate::host::nvml::Device;
use crate::settings::site::NvmlSource;
use crate::step::NvmlAsk;
use crate::text::quote;
use std::io::{Read, Write};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// How often the child is looked at while NVML runs.
const POLL: Duration = Duration::from_millis(5);
/// How long a killed child is given to be reaped, so that the application
/// does not inherit it as a child of its own (one stuck in the kernel is
/// left: waiting for it would hold the task).
const REAP_GRACE: Duration = Duration::from_millis(200);
/// Most bytes read from the child.
const MOST_OUTPUT: u64 = 1 << 20;

/// What the child is asked, by the word on its command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Query {
    /// The core's questions (exec).
    Core(NvmlAsk),
    /// Every device with its details, one line each (show).
    Devices,
}

impl Query {
    const ALL: [Query; 3] = [
        Query::Core(NvmlAsk::Uuids),
        Query::Core(NvmlAsk::Places),
        Query::Devices,
    ];

    fn word(self) -> &'static str {
        match self {
            Query::Core(NvmlAsk::Uuids) => "uuids",
            Query::Core(NvmlAsk::Places) => "places",
            Query::Devices => "devices",
        }
    }
}

/// NVML's answer, one line each, from a child killed at `timeout`.
pub(super) fn ask(
    query: Query,
    source: &NvmlSource,
    timeout: Duration,
) -> Result<Vec<String>, Error> {
    let broke = |why: String| Error::Discovery(format!("NVML discovery: {why}"));
    let me = std::env::current_exe().map_err(|e| broke(format!("cannot find myself: {e}")))?;
    let mut child = Command::new(me)
        .arg("nvml-query")
        .arg(query.word())
        .arg("--nvml")
        .arg(source.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| broke(e.to_string()))?;
    // Read while it runs, so that a long answer cannot fill a pipe and
    // pass for a hang.
    let out = child.stdout.take().map(drain);
    let err = child.stderr.take().map(drain);
    if !wait_until(&mut child, Instant::now() + timeout, POLL) {
        let _ = child.kill();
        wait_until(&mut child, Instant::now() + REAP_GRACE, POLL);
        return Err(Error::NvmlTimedOut {
            seconds: timeout.as_secs(),
        });
    }
    let status = child.wait().map_err(|e| broke(e.to_string()))?;
    let text = |reader: Option<std::thread::JoinHandle<String>>| {
        reader.and_then(|r| r.join().ok()).unwrap_or_default()
    };
    let (out, err) = (text(out), text(err));
    if !status.success() {
        return Err(Error::Discovery(err.trim().to_string()));
    }
    Ok(out.lines().map(String::from).collect())
}

/// Every GPU NVML enumerates, with its details (show), within `timeout`.
pub(super) fn devices(source: &NvmlSource, timeout: Duration) -> Result<Vec<Device>, Error> {
    ask(Query::Devices, source, timeout)?
        .iter()
        .map(|line| {
            device_from_line(line).ok_or_else(|| {
                Error::Discovery(format!(
                    "NVML discovery: unreadable device line {}",
                    quote(line)
                ))
            })
        })
        .collect()
}

/// A device as the child writes it: `INDEX UUID BUS-ID USED TOTAL`
/// (UUIDs and bus ids hold no spaces).
fn device_line(d: &Device) -> String {
    format!(
        "{} {} {} {} {}",
        d.index, d.uuid, d.pci_bus_id, d.memory_used, d.memory_total
    )
}

fn device_from_line(line: &str) -> Option<Device> {
    let mut words = line.split_whitespace();
    let mut next = || words.next();
    let device = Device {
        index: next()?.parse().ok()?,
        uuid: next()?.to_string(),
        pci_bus_id: next()?.to_string(),
        memory_used: next()?.parse().ok()?,
        memory_total: next()?.parse().ok()?,
    };
    next().is_none().then_some(device)
}

/// Reads a pipe to its end in a thread of its own.
fn drain(pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = pipe.take(MOST_OUTPUT).read_to_string(&mut text);
        text
    })
}

/// The child's side: NVML's answer on stdout, one line each, or its error
/// on stderr and exit status 1.
pub fn nvml_query(ask: &str, source: &str) -> ExitCode {
    let answer = source
        .parse::<NvmlSource>()
        .map_err(|e| e.to_string())
        .and_then(|source| {
            let query = Query::ALL.into_iter().find(|q| q.word() == ask);
            match query {
                Some(Query::Core(NvmlAsk::Uuids)) => crate::host::nvml::uuids(&source),
                Some(Query::Core(NvmlAsk::Places)) => crate::host::nvml::places(&source),
                Some(Query::Devices) => crate::host::nvml::devices(&source)
                    .map(|found| found.iter().map(device_line).collect()),
                None => {
                    let words: Vec<&str> = Query::ALL.iter().map(|q| q.word()).collect();
                    return Err(format!(
                        "nvml-query: {} is none of {}",
                        quote(ask),
                        words.join(", ")
                    ));
                }
            }
            .map_err(|e| e.to_string())
        });
    match answer {
        Ok(lines) => {
            let mut out = std::io::stdout().lock();
            for line in lines {
                let _ = writeln!(out, "{line}");
            }
            ExitCode::SUCCESS
        }
        Err(why) => {
            let _ = writeln!(std::io::stderr(), "{why}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_lines_read_back() {
        let d = Device {
            index: 3,
            uuid: "GPU-fake-n1-3".to_string(),
            pci_bus_id: "00000000:04:00.0".to_string(),
            memory_used: 1 << 20,
            memory_total: 80 << 30,
        };
        assert_eq!(device_from_line(&device_line(&d)), Some(d));
        for bad in [
            "",
            "3 GPU-a 0000:04:00.0 1",
            "x GPU-a b 1 2",
            "3 GPU-a b 1 2 extra",
        ] {
            assert_eq!(device_from_line(bad), None, "{bad:?}");
        }
    }
}
