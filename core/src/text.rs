//! Wording helpers for messages: quoting or escaping what a user handed
//! over, and listing choices. Imports nothing, so every module may use it.

/// Longest quoted value, escapes included: a value can be arbitrarily long
/// or made of control bytes, and a message must stay one readable line.
const SHOWN_MAX: usize = 64;

/// Quotes a user-supplied value for a message: control and odd characters
/// escaped, long values cut, so that the message is one safe, short line.
pub fn quote(value: &str) -> String {
    let mut shown = String::from("\"");
    for c in value.chars() {
        let escaped: String = c.escape_debug().collect();
        if shown.len() + escaped.len() > SHOWN_MAX {
            shown.push_str("...");
            break;
        }
        shown.push_str(&escaped);
    }
    shown.push('"');
    shown
}

/// A value shown bare in a line of text, such as an environment variable's
/// in `show`: what a terminal would act on or not print (control
/// characters, the ESC that starts its sequences) escaped as [`quote`]
/// escapes it (`\u{1b}`, `\n`), so that the value stays on its line and
/// changes nothing of the terminal. Quotes and backslashes stay, so that a
/// message that already quotes a value reads the same.
pub fn bare(value: &str) -> String {
    let mut shown = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '"' | '\'' | '\\' => shown.push(c),
            _ => shown.extend(c.escape_debug()),
        }
    }
    shown
}

/// `a, b or c`.
pub(crate) fn one_of(names: &[&str]) -> String {
    match names.split_last() {
        Some((last, [])) => (*last).to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_escapes_what_a_terminal_acts_on_and_cuts_nothing() {
        assert_eq!(bare("GPU-1,\"2\" 'x'"), "GPU-1,\"2\" 'x'");
        assert_eq!(bare("0\u{1b}[2J\r\n\\"), "0\\u{1b}[2J\\r\\n\\");
        let long = "x".repeat(100);
        assert_eq!(bare(&long), long);
    }

    #[test]
    fn quote_escapes_and_cuts() {
        assert_eq!(quote("abc"), "\"abc\"");
        assert_eq!(quote("a\nb"), "\"a\\nb\"");
        let long = "x".repeat(100);
        assert_eq!(quote(&long), format!("\"{}...\"", "x".repeat(63)));
        let odd = "\u{1}".repeat(100);
        assert!(quote(&odd).len() < 80, "{}", quote(&odd));
    }
}
