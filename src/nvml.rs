//! NVML for the command, asked in a child process (the hidden
//! `desi-gpu-map nvml-query`) that is killed at a deadline, as the plugin
//! asks it: a hung `nvmlInit` (a GPU fallen off the bus) must not hold a
//! task (`exec`) or a user (`show`), and NVML is never loaded into the
//! process that becomes the application.

use desi_gpu_map_core::error::Error;
use desi_gpu_map_core::settings::site::NvmlSource;
use desi_gpu_map_core::step::NvmlAsk;
use desi_gpu_map_core::text::quote;
use desi_gpu_map_core::wire::{self, MAX_ANSWER};
use desi_gpu_map_host::child::{drain, wait_until, REAP_GRACE};
use desi_gpu_map_host::nvml::Device;
use std::io::{self, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ChildStdout, Command, ExitCode, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How often the child is looked at while NVML runs.
const POLL: Duration = Duration::from_millis(5);

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

/// NVML's answer, one line each, from a child killed at `timeout`; the
/// child answers on the wire ([`desi_gpu_map_core::wire`]), as the plugin's does.
pub(super) fn ask(
    query: Query,
    source: &NvmlSource,
    timeout: Duration,
) -> Result<Vec<String>, Error> {
    let broke = |why: String| wire::broken(format!("NVML discovery: {why}"));
    let me = std::env::current_exe().map_err(|e| broke(format!("cannot find myself: {e}")))?;
    // Its stderr, a line for people, is not read: the wire says it all.
    let mut child = Command::new(me)
        .arg("nvml-query")
        .arg(query.word())
        .arg("--nvml")
        .arg(source.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| broke(e.to_string()))?;
    let mut answer = Vec::new();
    let heard = match child.stdout.take() {
        Some(mut out) => hear(&mut child, &mut out, &mut answer, Instant::now() + timeout),
        None => Err(io::Error::other("its stdout is no pipe")),
    };
    let status = child.try_wait();
    if !matches!(status, Ok(Some(_))) {
        // Timed out, or answering too much: waiting on would not help.
        let _ = child.kill();
        wait_until(&mut child, Instant::now() + REAP_GRACE, POLL);
    }
    match heard {
        Ok(false) => Err(Error::NvmlTimedOut {
            seconds: timeout.as_secs(),
        }),
        Err(e) => Err(wire::broken(format!(
            "cannot read the discovery process's answer: {e}"
        ))),
        Ok(true) if answer.is_empty() => Err(wire::no_answer(&describe(status))),
        Ok(true) => wire::decode(&answer),
    }
}

/// Reads the child's answer into `answer` while it runs, so that a long
/// one cannot fill the pipe and pass for a hang. True once it exited or
/// said more than an answer may; false at `deadline`.
fn hear(
    child: &mut Child,
    out: &mut ChildStdout,
    answer: &mut Vec<u8>,
    deadline: Instant,
) -> io::Result<bool> {
    loop {
        let exited = wait_until(child, deadline.min(Instant::now() + POLL), POLL);
        // After the exit, what it left.
        drain(&mut *out, answer, MAX_ANSWER + 1)?;
        if exited || answer.len() > MAX_ANSWER {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
    }
}

/// How the child ended, in the plugin's words.
fn describe(status: io::Result<Option<ExitStatus>>) -> String {
    match status {
        Ok(Some(s)) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("exit status {code}"),
            (_, Some(signal)) => format!("signal {signal}"),
            _ => s.to_string(),
        },
        Ok(None) => "still running".to_string(),
        Err(_) => "reaped elsewhere".to_string(),
    }
}

/// Every GPU NVML enumerates, with its details (show), within `timeout`.
pub(super) fn devices(source: &NvmlSource, timeout: Duration) -> Result<Vec<Device>, Error> {
    ask(Query::Devices, source, timeout)?
        .iter()
        .map(|line| {
            device_from_line(line).ok_or_else(|| {
                wire::broken(format!(
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

/// The child's side: NVML's answer on stdout, on the wire; an error also
/// on stderr, for people, with exit status 1.
pub fn nvml_query(ask: &str, source: &str) -> ExitCode {
    let answer = query_answer(ask, source);
    if let Err(why) = &answer {
        let _ = writeln!(std::io::stderr(), "{why}");
    }
    let _ = std::io::stdout().lock().write_all(&wire::encode(&answer));
    match answer {
        Ok(_) => ExitCode::SUCCESS,
        Err(_) => ExitCode::from(1),
    }
}

/// NVML's answer to the query `ask` names, loaded from `source`.
fn query_answer(ask: &str, source: &str) -> Result<Vec<String>, Error> {
    let source = source
        .parse::<NvmlSource>()
        .map_err(|e| wire::broken(e.to_string()))?;
    match Query::ALL.into_iter().find(|q| q.word() == ask) {
        Some(Query::Core(NvmlAsk::Uuids)) => desi_gpu_map_host::nvml::uuids(&source),
        Some(Query::Core(NvmlAsk::Places)) => desi_gpu_map_host::nvml::places(&source),
        Some(Query::Devices) => desi_gpu_map_host::nvml::devices(&source)
            .map(|found| found.iter().map(device_line).collect()),
        None => {
            let words: Vec<&str> = Query::ALL.iter().map(|q| q.word()).collect();
            Err(wire::broken(format!(
                "nvml-query: {} is none of {}",
                quote(ask),
                words.join(", ")
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_childs_errors_keep_their_kind() {
        use desi_gpu_map_core::error::NvmlFailure;
        assert_eq!(query_answer("uuids", "off"), Err(Error::NvmlOff));
        let bad = query_answer("bogus", "off").unwrap_err();
        assert_eq!(
            bad.to_string(),
            "nvml-query: \"bogus\" is none of uuids, places, devices"
        );
        assert!(matches!(
            bad,
            Error::Discovery {
                kind: NvmlFailure::Misbehaved,
                ..
            }
        ));
    }

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
