//! What failed on the machine: one error type for the host crate
//! ([`Failure`]). It says what could not be done, in words a user can act
//! on, with the context of each caller that adds some (`Failure::within`),
//! and keeps the OS's error as its source, so that a front end can still
//! tell its kind after the message is made. Each front end reports it once,
//! at its edge.

use std::error::Error;
use std::fmt;
use std::io;

/// What could not be done, and why.
#[derive(Debug)]
pub struct Failure {
    /// The whole message: what was being done, then why.
    said: String,
    /// The OS's error at the bottom of it, if one was.
    source: Option<io::Error>,
}

impl Failure {
    /// A failure the machine's code words itself: no OS error under it.
    pub fn new(said: impl Into<String>) -> Failure {
        Failure {
            said: said.into(),
            source: None,
        }
    }

    /// `doing` failed with the OS's error `e`: "DOING: E".
    pub fn os(doing: impl fmt::Display, e: io::Error) -> Failure {
        Failure {
            said: format!("{doing}: {e}"),
            source: Some(e),
        }
    }

    /// The same failure, met while `doing`: "DOING: WHAT FAILED".
    pub(crate) fn within(self, doing: impl fmt::Display) -> Failure {
        Failure {
            said: format!("{doing}: {}", self.said),
            ..self
        }
    }

    /// The same failure, with `more` said after it.
    pub fn then(self, more: impl fmt::Display) -> Failure {
        Failure {
            said: format!("{}{more}", self.said),
            ..self
        }
    }

    /// The OS's error under it, if one was.
    pub fn os_error(&self) -> Option<&io::Error> {
        self.source.as_ref()
    }
}

/// An OS error met with no more context: its own words.
impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Failure {
        Failure {
            said: e.to_string(),
            source: Some(e),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.said)
    }
}

impl Error for Failure {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.source.as_ref().map(|e| e as &(dyn Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_reads_outside_in_and_the_os_error_is_kept() {
        let e = io::Error::from_raw_os_error(13);
        let f = Failure::os("cannot open /x", e)
            .within("cannot start the daemon")
            .then("; its log is empty");
        let said = f.to_string();
        assert!(
            said.starts_with("cannot start the daemon: cannot open /x: Permission denied"),
            "{said}"
        );
        assert!(said.ends_with("; its log is empty"), "{said}");
        assert_eq!(
            f.os_error().map(io::Error::kind),
            Some(io::ErrorKind::PermissionDenied)
        );
        assert!(f.source().is_some());
        let plain = Failure::new("no answer before the deadline");
        assert_eq!(plain.to_string(), "no answer before the deadline");
        assert!(plain.source().is_none());
    }
}
