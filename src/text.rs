//! Wording helpers for messages: quoting what a user handed over, and
//! listing choices. Imports nothing, so every module may use it.

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

/// `a, b or c`.
pub fn one_of(names: &[&str]) -> String {
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
    fn quote_escapes_and_cuts() {
        assert_eq!(quote("abc"), "\"abc\"");
        assert_eq!(quote("a\nb"), "\"a\\nb\"");
        let long = "x".repeat(100);
        assert_eq!(quote(&long), format!("\"{}...\"", "x".repeat(63)));
        let odd = "\u{1}".repeat(100);
        assert!(quote(&odd).len() < 80, "{}", quote(&odd));
    }
}
