//! An NVML child's answer as it crosses the process boundary: the child
//! of the host crate's `deadline` (the plugin's, exec's and show's) writes
//! it, its parent reads it back. Pure: bytes in, bytes out.
//!
//! `ok N`, then N lines; or `err KIND`, then one line of message, KIND
//! being what [`NvmlFailure`] the child met (`off`, `init`, `call`,
//! `misbehaved`), so that the parent decides from the kind, never from
//! the message's words. An answer holds at most [`MAX_ANSWER`] bytes.

use crate::error::{Error, NvmlFailure};

/// The largest answer; a longer one is an error.
pub const MAX_ANSWER: usize = 64 * 1024;
/// The longest error message passed on from the child.
const MAX_MESSAGE: usize = 512;

/// Each kind with its word on the wire.
const KINDS: [(NvmlFailure, &str); 4] = [
    (NvmlFailure::Off, "off"),
    (NvmlFailure::Init, "init"),
    (NvmlFailure::Call, "call"),
    (NvmlFailure::Misbehaved, "misbehaved"),
];

/// The child's answer on the wire: its lines, or its error with the kind.
/// Lines that cannot cross (empty, multi-line, too many) become an error.
pub fn encode(answer: &Result<Vec<String>, Error>) -> Vec<u8> {
    match answer {
        Ok(lines) => encode_lines(lines),
        Err(e) => encode_error(kind_of(e), &e.to_string()),
    }
}

fn encode_lines(lines: &[String]) -> Vec<u8> {
    if lines
        .iter()
        .any(|l| l.is_empty() || l.contains(['\n', '\r']))
    {
        let why = "the discovery returned an empty or multi-line entry";
        return encode_error(NvmlFailure::Misbehaved, why);
    }
    let mut out = format!("ok {}\n", lines.len());
    for line in lines {
        out.push_str(line);
        out.push('\n');
    }
    if out.len() > MAX_ANSWER {
        let why = "the discovery returned too long a list";
        return encode_error(NvmlFailure::Misbehaved, why);
    }
    out.into_bytes()
}

fn encode_error(kind: NvmlFailure, why: &str) -> Vec<u8> {
    format!("err {}\n{}\n", word(kind), one_line(why)).into_bytes()
}

/// What kind of failure an error of the child's work is; one that is no
/// NVML error of its own (a bad query, say) is a child that misbehaved.
fn kind_of(e: &Error) -> NvmlFailure {
    match e {
        Error::NvmlOff => NvmlFailure::Off,
        Error::NvmlInit { .. } => NvmlFailure::Init,
        Error::NvmlCall { .. } => NvmlFailure::Call,
        Error::Discovery { kind, .. } => *kind,
        _ => NvmlFailure::Misbehaved,
    }
}

fn word(kind: NvmlFailure) -> &'static str {
    KINDS
        .iter()
        .find(|(k, _)| *k == kind)
        .map_or("misbehaved", |(_, w)| w)
}

/// A message as one line of at most `MAX_MESSAGE` bytes.
fn one_line(why: &str) -> String {
    let mut line: String = why
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if line.len() > MAX_MESSAGE {
        let mut cut = MAX_MESSAGE;
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        line.truncate(cut);
        line.push_str("...");
    }
    line
}

/// The child's lines, its error with its kind, or why the answer is
/// garbage. An empty answer is garbage too: the parent, which knows how
/// the child ended, says so first ([`no_answer`]).
pub fn decode(bytes: &[u8]) -> Result<Vec<String>, Error> {
    if bytes.len() > MAX_ANSWER {
        return Err(too_long());
    }
    let garbled = || broken("the discovery process answered garbage".to_string());
    let text = std::str::from_utf8(bytes).map_err(|_| garbled())?;
    let (head, body) = text.split_once('\n').ok_or_else(garbled)?;
    if let Some(word) = head.strip_prefix("err ") {
        let (kind, _) = KINDS.iter().find(|(_, w)| *w == word).ok_or_else(garbled)?;
        return Err(Error::Discovery {
            kind: *kind,
            why: one_line(body.strip_suffix('\n').unwrap_or(body)),
        });
    }
    let count: usize = head
        .strip_prefix("ok ")
        .and_then(|n| n.parse().ok())
        .ok_or_else(garbled)?;
    let lines: Vec<String> = body.lines().map(String::from).collect();
    let complete = body.is_empty() || body.ends_with('\n');
    if !complete || lines.len() != count || lines.iter().any(|l| l.is_empty()) {
        return Err(garbled());
    }
    Ok(lines)
}

/// A child that broke, or could not be asked at all, in the parent's words.
pub fn broken(why: String) -> Error {
    Error::Discovery {
        kind: NvmlFailure::Misbehaved,
        why,
    }
}

/// A child that ended without a word; `how` is how it ended.
pub fn no_answer(how: &str) -> Error {
    broken(format!(
        "the discovery process ended without an answer ({how})"
    ))
}

/// A child that wrote more than [`MAX_ANSWER`] bytes.
pub fn too_long() -> Error {
    broken(format!(
        "the discovery process answered more than {MAX_ANSWER} bytes"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::NvmlCause;
    use std::sync::Arc;

    /// NVML's errors as the host crate's library words them.
    fn nvml(said: &str) -> NvmlCause {
        NvmlCause(Arc::new(std::io::Error::other(said.to_string())))
    }

    fn lines(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn crossed(answer: Result<Vec<String>, Error>) -> Result<Vec<String>, Error> {
        decode(&encode(&answer))
    }

    fn failure(kind: NvmlFailure, why: &str) -> Error {
        Error::Discovery {
            kind,
            why: why.to_string(),
        }
    }

    #[test]
    fn lines_and_each_kind_of_error_cross() {
        assert_eq!(
            crossed(Ok(lines(&["GPU-a", "GPU-b"]))),
            Ok(lines(&["GPU-a", "GPU-b"]))
        );
        assert_eq!(crossed(Ok(vec![])), Ok(vec![]));
        let init = Error::NvmlInit {
            library: "libnvidia-ml.so.1".to_string(),
            source: nvml("a libnvidia-ml-related error occurred: driver not loaded"),
        };
        let call = Error::NvmlCall {
            call: "nvmlDeviceGetCpuAffinity",
            source: nvml("an unknown error occurred"),
        };
        for (e, kind) in [
            (Error::NvmlOff, NvmlFailure::Off),
            (init, NvmlFailure::Init),
            (call, NvmlFailure::Call),
            (Error::NvmlMisbehaved, NvmlFailure::Misbehaved),
            (Error::NoGpusToMap, NvmlFailure::Misbehaved),
            (failure(NvmlFailure::Call, "again"), NvmlFailure::Call),
        ] {
            let said = e.to_string();
            assert_eq!(crossed(Err(e)), Err(failure(kind, &said)), "{said}");
        }
    }

    #[test]
    fn only_a_call_after_init_is_worth_asking_again() {
        let call = Error::NvmlCall {
            call: "nvmlDeviceGetCpuAffinity",
            source: nvml("an unknown error occurred"),
        };
        assert!(crossed(Err(call)).unwrap_err().is_failed_nvml_call());
        let init = Error::NvmlInit {
            library: "libnvidia-ml.so.1".to_string(),
            source: nvml("a libnvidia-ml-related error occurred: driver not loaded"),
        };
        assert!(!crossed(Err(init)).unwrap_err().is_failed_nvml_call());
        assert!(!no_answer("signal 9").is_failed_nvml_call());
    }

    #[test]
    fn garbage_is_an_error() {
        let garbled = Err(broken("the discovery process answered garbage".to_string()));
        for bytes in [
            &b"hello"[..],
            b"ok\nGPU-a\n",
            b"ok 2\nGPU-a\n",
            b"ok 1\nGPU-a",
            b"ok 1\n\n",
            b"ok x\nGPU-a\n",
            b"ok 1\nGPU-\xff\n",
            b"err\nno driver\n",
            b"err sideways\nno driver\n",
            b"",
        ] {
            assert_eq!(decode(bytes), garbled, "{bytes:?}");
        }
        assert_eq!(decode(b"ok 0\n"), Ok(vec![]));
        assert_eq!(decode(b"ok 1\nGPU-a\n"), Ok(lines(&["GPU-a"])));
        assert_eq!(
            decode(b"err init\nno driver\n"),
            Err(failure(NvmlFailure::Init, "no driver"))
        );
    }

    #[test]
    fn answers_stay_bounded() {
        let many = vec!["GPU-".repeat(100); 1000];
        let too_many = failure(
            NvmlFailure::Misbehaved,
            "the discovery returned too long a list",
        );
        assert_eq!(crossed(Ok(many)), Err(too_many));
        let multi = failure(
            NvmlFailure::Misbehaved,
            "the discovery returned an empty or multi-line entry",
        );
        assert_eq!(crossed(Ok(lines(&["a\nb"]))), Err(multi.clone()));
        assert_eq!(crossed(Ok(lines(&[""]))), Err(multi));
        let long = encode(&Err(broken("x".repeat(10_000))));
        assert!(long.len() < MAX_MESSAGE + 24, "{}", long.len());
        let one = crossed(Err(broken("NVML: no\nluck".to_string())));
        assert_eq!(one, Err(broken("NVML: no luck".to_string())));
        assert_eq!(decode(&vec![b'x'; MAX_ANSWER + 1]), Err(too_long()));
    }
}
