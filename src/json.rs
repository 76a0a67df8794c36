//! JSON output through serde_json, in the form the reports have always had:
//! one line, with a space after each `,` and `:`.

use serde::Serialize;
use std::io::{self, Write};

/// serde_json's compact form, with `, ` and `: ` between items.
struct Spaced;

impl serde_json::ser::Formatter for Spaced {
    fn begin_array_value<W: ?Sized + Write>(&mut self, out: &mut W, first: bool) -> io::Result<()> {
        separate(out, first)
    }

    fn begin_object_key<W: ?Sized + Write>(&mut self, out: &mut W, first: bool) -> io::Result<()> {
        separate(out, first)
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, out: &mut W) -> io::Result<()> {
        out.write_all(b": ")
    }
}

fn separate<W: ?Sized + Write>(out: &mut W, first: bool) -> io::Result<()> {
    if first {
        Ok(())
    } else {
        out.write_all(b", ")
    }
}

/// `value` as one line of JSON, newline included.
pub fn line<T: Serialize>(value: &T) -> Result<String, serde_json::Error> {
    let mut out = Vec::new();
    value.serialize(&mut serde_json::Serializer::with_formatter(
        &mut out, Spaced,
    ))?;
    out.push(b'\n');
    // serde_json writes UTF-8 only.
    String::from_utf8(out).map_err(serde::ser::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Sample<'a> {
        a: u32,
        b: Option<&'a str>,
        c: Vec<&'a str>,
        d: Vec<u8>,
    }

    #[test]
    fn spaced_one_line() {
        let sample = Sample {
            a: 1,
            b: None,
            c: vec!["x\"\\\n\u{1}", "y"],
            d: vec![],
        };
        assert_eq!(
            line(&sample).unwrap(),
            "{\"a\": 1, \"b\": null, \"c\": [\"x\\\"\\\\\\n\\u0001\", \"y\"], \"d\": []}\n"
        );
    }
}
