//! JSON values as PostgreSQL reads, compares and writes them.
//!
//! [`parse`] reads JSON text into a [`Json`] tree that remembers where each
//! value came from in the text, so that `json` (which PostgreSQL keeps as
//! written) can hand back a member exactly as written, and `jsonb` can be
//! written in PostgreSQL's normal form ([`Json::write_jsonb`]): object keys
//! sorted shorter first then bytewise, duplicate keys resolved to the last,
//! numbers as `numeric` prints them (`1e2` is `100`, `1.50` stays `1.50`),
//! `", "` and `": "` between items.
//!
//! A hand-written parser rather than `serde_json`: numbers must keep their
//! exact digits (`serde_json` reads them as `f64` unless its
//! `arbitrary_precision` feature is on, which would change every other
//! crate's use of it), and nesting must stop at a limit with an error
//! instead of a stack overflow.

use std::cmp::Ordering;
use std::fmt::Write;
use std::ops::Range;

/// Deepest nesting of arrays and objects accepted; deeper input fails with
/// 54001 as PostgreSQL's stack-depth check does.
pub const MAX_DEPTH: usize = 1_000;

/// Longest exponent accepted in a number (numeric's range).
const MAX_EXPONENT: i64 = 131_072;

/// A parsed JSON value; `span` is where it is in the text it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Json {
    /// The value.
    pub kind: Kind,
    /// Its bytes in the source text.
    pub span: Range<usize>,
}

/// The kinds of JSON value.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number, as numeric prints it (`1e2` is `100`).
    Number(String),
    /// A string, unescaped.
    String(String),
    /// An array.
    Array(Vec<Json>),
    /// An object's members in the order written (duplicates kept).
    Object(Vec<(String, Json)>),
}

/// Why a text is not JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// Not JSON (22P02).
    Syntax(String),
    /// Nested deeper than [`MAX_DEPTH`] (54001).
    TooDeep,
    /// A number beyond numeric's range (22003).
    OutOfRange,
    /// `\u0000`, which text cannot hold (22P05).
    NulEscape,
}

/// Reads `text` as one JSON value.
pub fn parse(text: &str) -> Result<Json, ParseError> {
    let mut parser = Parser {
        text,
        bytes: text.as_bytes(),
        at: 0,
        depth: 0,
    };
    parser.skip_space();
    let value = parser.value()?;
    parser.skip_space();
    if parser.at != parser.bytes.len() {
        return Err(parser.error("Expected end of input"));
    }
    Ok(value)
}

struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
    depth: usize,
}

impl Parser<'_> {
    fn error(&self, what: &str) -> ParseError {
        let rest: String = self.text[self.at.min(self.text.len())..]
            .chars()
            .take(20)
            .collect();
        if rest.is_empty() {
            ParseError::Syntax(format!("{what} at end of input"))
        } else {
            ParseError::Syntax(format!("{what} near \"{rest}\""))
        }
    }

    fn skip_space(&mut self) {
        while self
            .bytes
            .get(self.at)
            .is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        {
            self.at += 1;
        }
    }

    fn value(&mut self) -> Result<Json, ParseError> {
        let start = self.at;
        let kind = match self.bytes.get(self.at) {
            Some(b'{') => Kind::Object(self.nested(b'}', |p| {
                let key = match p.bytes.get(p.at) {
                    Some(b'"') => p.string()?,
                    _ => return Err(p.error("Expected string")),
                };
                p.skip_space();
                if p.bytes.get(p.at) != Some(&b':') {
                    return Err(p.error("Expected \":\""));
                }
                p.at += 1;
                p.skip_space();
                Ok((key, p.value()?))
            })?),
            Some(b'[') => Kind::Array(self.nested(b']', Self::value)?),
            Some(b'"') => Kind::String(self.string()?),
            Some(b'-' | b'0'..=b'9') => Kind::Number(self.number()?),
            Some(_) if self.keyword("true") => Kind::Bool(true),
            Some(_) if self.keyword("false") => Kind::Bool(false),
            Some(_) if self.keyword("null") => Kind::Null,
            _ => return Err(self.error("Expected JSON value")),
        };
        Ok(Json {
            kind,
            span: start..self.at,
        })
    }

    fn keyword(&mut self, word: &str) -> bool {
        let end = self.at + word.len();
        let matches = self.bytes.get(self.at..end) == Some(word.as_bytes())
            && !self
                .bytes
                .get(end)
                .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_');
        if matches {
            self.at = end;
        }
        matches
    }

    /// The members of an array or object, each read by `member`, up to
    /// `close`.
    fn nested<T>(
        &mut self,
        close: u8,
        member: impl Fn(&mut Self) -> Result<T, ParseError>,
    ) -> Result<Vec<T>, ParseError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(ParseError::TooDeep);
        }
        self.at += 1;
        self.skip_space();
        let mut members = Vec::new();
        if self.bytes.get(self.at) == Some(&close) {
            self.at += 1;
        } else {
            loop {
                members.push(member(self)?);
                self.skip_space();
                match self.bytes.get(self.at) {
                    Some(b',') => {
                        self.at += 1;
                        self.skip_space();
                    }
                    Some(b) if *b == close => {
                        self.at += 1;
                        break;
                    }
                    _ => {
                        let expected = if close == b'}' {
                            "Expected \",\" or \"}\""
                        } else {
                            "Expected \",\" or \"]\""
                        };
                        return Err(self.error(expected));
                    }
                }
            }
        }
        self.depth -= 1;
        Ok(members)
    }

    fn string(&mut self) -> Result<String, ParseError> {
        self.at += 1;
        let mut out = String::new();
        loop {
            let run_start = self.at;
            while self
                .bytes
                .get(self.at)
                .is_some_and(|b| !matches!(b, b'"' | b'\\') && *b >= 0x20)
            {
                self.at += 1;
            }
            out.push_str(&self.text[run_start..self.at]);
            match self.bytes.get(self.at) {
                Some(b'"') => {
                    self.at += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.at += 1;
                    self.escape(&mut out)?;
                }
                Some(_) => return Err(self.error("Character with value 0x00-0x1f must be escaped")),
                None => return Err(self.error("Invalid string")),
            }
        }
    }

    fn escape(&mut self, out: &mut String) -> Result<(), ParseError> {
        let Some(&c) = self.bytes.get(self.at) else {
            return Err(self.error("Invalid escape"));
        };
        self.at += 1;
        match c {
            b'"' => out.push('"'),
            b'\\' => out.push('\\'),
            b'/' => out.push('/'),
            b'b' => out.push('\u{8}'),
            b'f' => out.push('\u{c}'),
            b'n' => out.push('\n'),
            b'r' => out.push('\r'),
            b't' => out.push('\t'),
            b'u' => {
                let high = self.hex4()?;
                let code = if (0xD800..0xDC00).contains(&high) {
                    if self.bytes.get(self.at..self.at + 2) != Some(b"\\u") {
                        return Err(
                            self.error("Unicode low surrogate must follow a high surrogate")
                        );
                    }
                    self.at += 2;
                    let low = self.hex4()?;
                    if !(0xDC00..0xE000).contains(&low) {
                        return Err(
                            self.error("Unicode low surrogate must follow a high surrogate")
                        );
                    }
                    0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)
                } else {
                    high
                };
                if code == 0 {
                    return Err(ParseError::NulEscape);
                }
                match char::from_u32(code) {
                    Some(ch) => out.push(ch),
                    None => {
                        return Err(self.error("Unicode low surrogate must follow a high surrogate"))
                    }
                }
            }
            _ => {
                self.at -= 2;
                return Err(self.error("Escape sequence is invalid"));
            }
        }
        Ok(())
    }

    fn hex4(&mut self) -> Result<u32, ParseError> {
        let digits = self
            .text
            .get(self.at..self.at + 4)
            .filter(|d| d.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| self.error("\"\\u\" must be followed by four hexadecimal digits"))?;
        self.at += 4;
        Ok(u32::from_str_radix(digits, 16).expect("four hex digits"))
    }

    /// A JSON number, returned as numeric prints it.
    fn number(&mut self) -> Result<String, ParseError> {
        let start = self.at;
        let negative = self.bytes[self.at] == b'-';
        if negative {
            self.at += 1;
        }
        let int_start = self.at;
        match self.bytes.get(self.at) {
            Some(b'0') => self.at += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(self.error("Invalid number")),
        }
        let int_digits = &self.text[int_start..self.at];
        let mut frac_digits = "";
        if self.bytes.get(self.at) == Some(&b'.') {
            self.at += 1;
            let frac_start = self.at;
            self.digits();
            if self.at == frac_start {
                return Err(self.error("Invalid number"));
            }
            frac_digits = &self.text[frac_start..self.at];
        }
        let mut exponent = 0i64;
        if matches!(self.bytes.get(self.at), Some(b'e' | b'E')) {
            self.at += 1;
            let exp_start = self.at;
            if matches!(self.bytes.get(self.at), Some(b'+' | b'-')) {
                self.at += 1;
            }
            let digits_start = self.at;
            self.digits();
            if self.at == digits_start {
                return Err(self.error("Invalid number"));
            }
            exponent = self.text[exp_start..self.at]
                .parse::<i64>()
                .unwrap_or(i64::MAX)
                .clamp(-MAX_EXPONENT - 1, MAX_EXPONENT + 1);
            if exponent.abs() > MAX_EXPONENT {
                return Err(ParseError::OutOfRange);
            }
        }
        if self
            .bytes
            .get(self.at)
            .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'.')
        {
            self.at = start;
            return Err(self.error("Invalid number"));
        }
        Ok(numeric_text(negative, int_digits, frac_digits, exponent))
    }

    fn digits(&mut self) {
        while self.bytes.get(self.at).is_some_and(u8::is_ascii_digit) {
            self.at += 1;
        }
    }
}

/// `[-]int.frac × 10^exponent` as numeric prints it: as many fraction
/// digits as the text implies (`frac - exponent`, at least none), no
/// exponent, no negative zero.
fn numeric_text(negative: bool, int: &str, frac: &str, exponent: i64) -> String {
    let digits: String = [int, frac].concat();
    let point = int.len() as i64 + exponent;
    let scale = (frac.len() as i64 - exponent).max(0) as usize;
    let (whole, fraction) = if point <= 0 {
        (String::new(), "0".repeat((-point) as usize) + &digits)
    } else if point as usize >= digits.len() {
        (
            digits.clone() + &"0".repeat(point as usize - digits.len()),
            String::new(),
        )
    } else {
        (
            digits[..point as usize].to_owned(),
            digits[point as usize..].to_owned(),
        )
    };
    let whole = whole.trim_start_matches('0');
    let mut fraction = fraction;
    fraction.truncate(scale);
    while fraction.len() < scale {
        fraction.push('0');
    }
    let zero = whole.is_empty() && fraction.bytes().all(|b| b == b'0');
    let mut out = String::with_capacity(whole.len() + fraction.len() + 3);
    if negative && !zero {
        out.push('-');
    }
    out.push_str(if whole.is_empty() { "0" } else { whole });
    if !fraction.is_empty() {
        out.push('.');
        out.push_str(&fraction);
    }
    out
}

impl Json {
    /// A value built in memory (no source text).
    pub fn new(kind: Kind) -> Self {
        Json { kind, span: 0..0 }
    }

    /// This value as `jsonb` keeps it: object members sorted by key
    /// (shorter first, then bytewise), the last of duplicate keys kept.
    pub fn into_jsonb(self) -> Json {
        let kind = match self.kind {
            Kind::Array(items) => Kind::Array(items.into_iter().map(Json::into_jsonb).collect()),
            Kind::Object(members) => {
                let mut members: Vec<(String, Json)> = members
                    .into_iter()
                    .map(|(k, v)| (k, v.into_jsonb()))
                    .collect();
                // Stable sort, then keep the last of each run of equal keys.
                members.sort_by(|a, b| key_order(&a.0, &b.0));
                let mut kept: Vec<(String, Json)> = Vec::with_capacity(members.len());
                for member in members {
                    match kept.last_mut() {
                        Some(last) if last.0 == member.0 => *last = member,
                        _ => kept.push(member),
                    }
                }
                Kind::Object(kept)
            }
            other => other,
        };
        Json {
            kind,
            span: self.span,
        }
    }

    /// Writes this value in `jsonb`'s text form.
    pub fn write_jsonb(&self, out: &mut String) {
        match &self.kind {
            Kind::Null => out.push_str("null"),
            Kind::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Kind::Number(n) => out.push_str(n),
            Kind::String(s) => write_string(s, out),
            Kind::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    item.write_jsonb(out);
                }
                out.push(']');
            }
            Kind::Object(members) => {
                out.push('{');
                for (i, (key, value)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    write_string(key, out);
                    out.push_str(": ");
                    value.write_jsonb(out);
                }
                out.push('}');
            }
        }
    }

    /// This value in `jsonb`'s text form.
    pub fn to_jsonb_text(&self) -> String {
        let mut out = String::new();
        self.write_jsonb(&mut out);
        out
    }

    /// This value's text: as written in `source` (`json`), or in normal
    /// form (`jsonb`, or a value built in memory).
    pub fn text(&self, source: Option<&str>) -> String {
        match source {
            Some(source) if self.span.end > self.span.start => source[self.span.clone()].to_owned(),
            _ => self.to_jsonb_text(),
        }
    }

    /// The member `key` of an object (the last one, if written twice).
    pub fn field(&self, key: &str) -> Option<&Json> {
        match &self.kind {
            Kind::Object(members) => members.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Element `index` of an array; a negative index counts from the end.
    pub fn element(&self, index: i64) -> Option<&Json> {
        match &self.kind {
            Kind::Array(items) => {
                let i = if index < 0 {
                    items.len() as i64 + index
                } else {
                    index
                };
                usize::try_from(i).ok().and_then(|i| items.get(i))
            }
            _ => None,
        }
    }

    /// The value at `path` (`#>`): each step a key of an object or an
    /// index of an array.
    pub fn path<'a>(&'a self, path: &[&str]) -> Option<&'a Json> {
        path.iter().try_fold(self, |at, step| match &at.kind {
            Kind::Object(_) => at.field(step),
            Kind::Array(_) => step.trim().parse::<i64>().ok().and_then(|i| at.element(i)),
            _ => None,
        })
    }

    /// PostgreSQL's `jsonb_typeof`.
    pub fn type_name(&self) -> &'static str {
        match self.kind {
            Kind::Null => "null",
            Kind::Bool(_) => "boolean",
            Kind::Number(_) => "number",
            Kind::String(_) => "string",
            Kind::Array(_) => "array",
            Kind::Object(_) => "object",
        }
    }

    /// `?`: `key` is a key of this object, or a string element of this
    /// array, or this string.
    pub fn has_key(&self, key: &str) -> bool {
        match &self.kind {
            Kind::Object(members) => members.iter().any(|(k, _)| k == key),
            Kind::Array(items) => items
                .iter()
                .any(|item| matches!(&item.kind, Kind::String(s) if s == key)),
            Kind::String(s) => s == key,
            _ => false,
        }
    }

    /// `@>`: PostgreSQL's containment. An object contains an object whose
    /// every member it has with a containing value; an array contains an
    /// array each of whose elements some element of it contains (and, at
    /// the top level, a scalar among its elements); scalars contain equal
    /// scalars.
    pub fn contains(&self, other: &Json) -> bool {
        match (&self.kind, &other.kind) {
            (Kind::Array(items), kind) if !matches!(kind, Kind::Array(_) | Kind::Object(_)) => {
                items.iter().any(|item| scalar_equal(&item.kind, kind))
            }
            _ => contains_nested(self, other),
        }
    }
}

fn contains_nested(a: &Json, b: &Json) -> bool {
    match (&a.kind, &b.kind) {
        (Kind::Object(_), Kind::Object(wanted)) => wanted.iter().all(|(key, value)| {
            a.field(key)
                .is_some_and(|have| contains_nested(have, value))
        }),
        (Kind::Array(items), Kind::Array(wanted)) => wanted.iter().all(|want| {
            items.iter().any(|item| match (&item.kind, &want.kind) {
                (Kind::Array(_), Kind::Array(_)) | (Kind::Object(_), Kind::Object(_)) => {
                    contains_nested(item, want)
                }
                (x, y) => scalar_equal(x, y),
            })
        }),
        (x, y) => scalar_equal(x, y),
    }
}

/// Equality of two scalars; numbers by value (`1.0` equals `1`).
fn scalar_equal(a: &Kind, b: &Kind) -> bool {
    match (a, b) {
        (Kind::Number(x), Kind::Number(y)) => number_value(x) == number_value(y),
        (Kind::Array(_) | Kind::Object(_), _) | (_, Kind::Array(_) | Kind::Object(_)) => false,
        _ => a == b,
    }
}

/// A printed number without the trailing zeros of its fraction.
fn number_value(n: &str) -> &str {
    if n.contains('.') {
        n.trim_end_matches('0').trim_end_matches('.')
    } else {
        n
    }
}

/// jsonb's order of object keys: shorter first, then bytewise.
fn key_order(a: &str, b: &str) -> Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// `s` as a JSON string, escaped as PostgreSQL escapes it.
pub fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jsonb(text: &str) -> String {
        parse(text).unwrap().into_jsonb().to_jsonb_text()
    }

    #[test]
    fn jsonb_normal_form() {
        assert_eq!(
            jsonb(r#"{"b":1,"a":[1,2, {"cc":null,"c":true}]}"#),
            r#"{"a": [1, 2, {"c": true, "cc": null}], "b": 1}"#
        );
        assert_eq!(jsonb(r#"{"a":1,"a":2}"#), r#"{"a": 2}"#);
        assert_eq!(
            jsonb(r#""tab\there \u00e9 \ud83d\ude00""#),
            "\"tab\\there é 😀\""
        );
    }

    #[test]
    fn numbers_print_as_numeric() {
        for (input, printed) in [
            ("1e2", "100"),
            ("1.50", "1.50"),
            ("-0", "0"),
            ("-0.0", "0.0"),
            ("1.5e-3", "0.0015"),
            ("12.5E+1", "125"),
            ("0.000", "0.000"),
            ("-12", "-12"),
            (
                "123456789012345678901234567890.5",
                "123456789012345678901234567890.5",
            ),
        ] {
            assert_eq!(jsonb(input), printed, "{input}");
        }
    }

    #[test]
    fn bad_json_is_refused() {
        for text in [
            "", "{", "[1,]", "01", "1.", "tru", "\"a", "{1:2}", "[1] x", "nul", "-",
        ] {
            assert!(matches!(parse(text), Err(ParseError::Syntax(_))), "{text}");
        }
        assert_eq!(parse("\"\\u0000\""), Err(ParseError::NulEscape));
        assert_eq!(parse(&"[".repeat(MAX_DEPTH + 1)), Err(ParseError::TooDeep));
        assert_eq!(parse("1e999999"), Err(ParseError::OutOfRange));
    }

    #[test]
    fn containment_follows_postgres() {
        let c = |a: &str, b: &str| parse(a).unwrap().contains(&parse(b).unwrap());
        assert!(c(r#"{"a":1,"b":{"c":[1,2]}}"#, r#"{"b":{"c":[2]}}"#));
        assert!(!c(r#"{"a":1}"#, r#"{"a":2}"#));
        assert!(c("[1,2,[3,4]]", "[[3]]"));
        assert!(c(r#"["a","b"]"#, r#""a""#));
        assert!(!c(r#"{"a":"b"}"#, r#""a""#));
        assert!(c("[1.0]", "[1]"));
        assert!(!c("[1,2]", "[[1]]"));
    }

    #[test]
    fn access_by_key_index_and_path() {
        let source = r#"{"a": {"b": [10, 20,  30]}, "s": "x"}"#;
        let v = parse(source).unwrap();
        assert_eq!(v.path(&["a", "b", "-1"]).unwrap().text(Some(source)), "30");
        assert_eq!(
            v.field("a").unwrap().text(Some(source)),
            r#"{"b": [10, 20,  30]}"#
        );
        assert_eq!(v.field("s").unwrap().kind, Kind::String("x".into()));
        assert!(v.path(&["a", "c"]).is_none());
        assert!(v.has_key("s") && !v.has_key("x"));
    }
}
