//! The little JSON the shell hands over (its info objects, an option's
//! value, the plugin's `conf` table), read without a dependency: values
//! are kept as text where the plugin only passes them on.

/// A JSON value; numbers kept as written.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Number(String),
    Str(String),
    Array(Vec<Value>),
    Object(Vec<(String, Value)>),
}

impl Value {
    /// The member `key` of an object.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Object(members) => members.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// A whole number, not negative.
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Value::Number(n) => n.parse().ok(),
            _ => None,
        }
    }
}

/// Parses one JSON text, or says where it stopped making sense.
pub fn parse(text: &str) -> Result<Value, String> {
    let mut reader = Reader {
        chars: text.chars().collect(),
        at: 0,
    };
    let value = reader.value(0)?;
    reader.blank();
    match reader.at == reader.chars.len() {
        true => Ok(value),
        false => Err(reader.fail("text after the value")),
    }
}

/// Nesting deeper than this is no shell's.
const MAX_DEPTH: usize = 64;

struct Reader {
    chars: Vec<char>,
    at: usize,
}

impl Reader {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.at).copied()
    }

    fn next(&mut self) -> Option<char> {
        let c = self.peek();
        self.at += 1;
        c
    }

    fn blank(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_whitespace()) {
            self.at += 1;
        }
    }

    fn fail(&self, what: &str) -> String {
        format!("unreadable JSON at character {}: {what}", self.at)
    }

    fn expect(&mut self, c: char) -> Result<(), String> {
        self.blank();
        match self.next() {
            Some(got) if got == c => Ok(()),
            _ => Err(self.fail(&format!("expected {c:?}"))),
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, String> {
        if depth > MAX_DEPTH {
            return Err(self.fail("nested too deep"));
        }
        self.blank();
        match self.peek() {
            Some('{') => self.object(depth),
            Some('[') => self.array(depth),
            Some('"') => self.string().map(Value::Str),
            Some('t') => self.word("true", Value::Bool(true)),
            Some('f') => self.word("false", Value::Bool(false)),
            Some('n') => self.word("null", Value::Null),
            Some(c) if c == '-' || c.is_ascii_digit() => Ok(self.number()),
            _ => Err(self.fail("expected a value")),
        }
    }

    fn word(&mut self, word: &str, value: Value) -> Result<Value, String> {
        for expected in word.chars() {
            if self.next() != Some(expected) {
                return Err(self.fail(&format!("expected {word}")));
            }
        }
        Ok(value)
    }

    fn number(&mut self) -> Value {
        let start = self.at;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_digit() || "+-.eE".contains(c))
        {
            self.at += 1;
        }
        let text: String = self
            .chars
            .get(start..self.at)
            .unwrap_or_default()
            .iter()
            .collect();
        Value::Number(text)
    }

    fn string(&mut self) -> Result<String, String> {
        self.expect('"')?;
        let mut out = String::new();
        loop {
            match self.next() {
                None => return Err(self.fail("unterminated string")),
                Some('"') => return Ok(out),
                Some('\\') => out.push(self.escape()?),
                Some(c) => out.push(c),
            }
        }
    }

    fn escape(&mut self) -> Result<char, String> {
        Ok(match self.next() {
            Some('n') => '\n',
            Some('t') => '\t',
            Some('r') => '\r',
            Some('b') => '\u{8}',
            Some('f') => '\u{c}',
            Some('u') => {
                let high = self.hex4()?;
                let code = if (0xd800..0xdc00).contains(&high) {
                    self.word("\\u", Value::Null)?;
                    let low = self.hex4()?;
                    0x10000 + ((high - 0xd800) << 10) + (low.wrapping_sub(0xdc00) & 0x3ff)
                } else {
                    high
                };
                char::from_u32(code).unwrap_or('\u{fffd}')
            }
            Some(c @ ('"' | '\\' | '/')) => c,
            _ => return Err(self.fail("bad escape")),
        })
    }

    fn hex4(&mut self) -> Result<u32, String> {
        let mut code = 0;
        for _ in 0..4 {
            let digit = self.next().and_then(|c| c.to_digit(16));
            code = code * 16 + digit.ok_or_else(|| self.fail("bad \\u escape"))?;
        }
        Ok(code)
    }

    fn array(&mut self, depth: usize) -> Result<Value, String> {
        self.expect('[')?;
        let mut items = Vec::new();
        self.blank();
        if self.peek() == Some(']') {
            self.at += 1;
            return Ok(Value::Array(items));
        }
        loop {
            items.push(self.value(depth + 1)?);
            self.blank();
            match self.next() {
                Some(',') => continue,
                Some(']') => return Ok(Value::Array(items)),
                _ => return Err(self.fail("expected , or ]")),
            }
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, String> {
        self.expect('{')?;
        let mut members = Vec::new();
        self.blank();
        if self.peek() == Some('}') {
            self.at += 1;
            return Ok(Value::Object(members));
        }
        loop {
            self.blank();
            let key = self.string()?;
            self.expect(':')?;
            members.push((key, self.value(depth + 1)?));
            self.blank();
            match self.next() {
                Some(',') => continue,
                Some('}') => return Ok(Value::Object(members)),
                _ => return Err(self.fail("expected , or }")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_shells_objects() {
        let info = r#"{"id":1,"name":"vm","broker_rank":1,"ntasks":8,"taskids":"8-15",
            "resources":{"ncores":64,"cores":"0-63","gpus":"0-3"}}"#;
        let v = parse(info).unwrap();
        assert_eq!(v.get("ntasks").and_then(Value::as_u64), Some(8));
        let gpus = v.get("resources").and_then(|r| r.get("gpus"));
        assert_eq!(gpus.and_then(Value::as_str), Some("0-3"));
        assert_eq!(
            parse(r#""contiguous""#).unwrap(),
            Value::Str("contiguous".into())
        );
        assert_eq!(parse("1").unwrap(), Value::Number("1".into()));
        assert_eq!(
            parse(r#"{"a":[1,{"b":null}],"c":true,"d":"\u00e9\/\"\ud83d\ude00"}"#)
                .unwrap()
                .get("d"),
            Some(&Value::Str("é/\"😀".into()))
        );
        assert_eq!(parse("{}").unwrap(), Value::Object(vec![]));
    }

    #[test]
    fn refuses_what_is_no_json() {
        for bad in [
            "", "{", r#"{"a"}"#, r#""open"#, "[1,]", "tru", "1 2", r#""\q""#,
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        let deep = "[".repeat(100) + &"]".repeat(100);
        assert!(parse(&deep).is_err());
    }
}
