//! One error type for the whole core: a message a user can act on.

use std::fmt;

/// An error that carries a complete, user-facing message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(String);

impl Error {
    pub fn new(message: impl Into<String>) -> Self {
        Error(message.into())
    }

    pub fn message(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

/// Longest part of a bad value quoted back in a message: a value can be
/// arbitrarily long, and a message must stay one readable line.
const SHOWN_MAX: usize = 64;

/// Quotes a user-supplied value for a message: control characters escaped,
/// very long values cut, so that the message is one safe, readable line.
pub fn quote(value: &str) -> String {
    let mut shown: String = value.chars().take(SHOWN_MAX).collect();
    if value.chars().count() > SHOWN_MAX {
        shown.push_str("...");
    }
    format!("{:?}", shown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_escapes_and_cuts() {
        assert_eq!(quote("abc"), "\"abc\"");
        assert_eq!(quote("a\nb"), "\"a\\nb\"");
        let long = "x".repeat(100);
        assert_eq!(quote(&long), format!("\"{}...\"", "x".repeat(64)));
    }
}
