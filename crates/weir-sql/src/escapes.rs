//! PostgreSQL's escape string constants (`E'...'`), decoded before
//! sqlparser reads the text.
//!
//! An escape string spells bytes: `E'\xc3\xa9'` is `é`, and `E'\xff'` is
//! not text at all (PostgreSQL: 22021, invalid byte sequence). sqlparser
//! decodes each escape as a character on its own, so it refuses the first
//! and cannot tell the second. [`decode_escape_strings`] rewrites every
//! escape string as a standard one (`'é'`, quotes doubled) after checking
//! that its bytes are UTF-8; with `standard_conforming_strings` on, as
//! Weir always is, a standard string has no escapes, so the rewrite keeps
//! the meaning. Comments, quoted identifiers, standard and dollar-quoted
//! strings are skipped as PostgreSQL's lexer skips them.

use std::borrow::Cow;

use crate::ParseError;

/// `sql` with every `E'...'` rewritten as a standard string literal, or
/// the error PostgreSQL gives for its escapes.
pub fn decode_escape_strings(sql: &str) -> Result<Cow<'_, str>, ParseError> {
    let bytes = sql.as_bytes();
    let mut out: Option<String> = None;
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                i = bytes[i..]
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(bytes.len(), |n| i + n);
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => i = skip_block_comment(bytes, i),
            b'\'' => i = skip_quoted(bytes, i, b'\''),
            b'"' => i = skip_quoted(bytes, i, b'"'),
            b'$' if !continues_word(bytes, i) => i = skip_dollar_quoted(bytes, i),
            b'e' | b'E' if bytes.get(i + 1) == Some(&b'\'') && !continues_word(bytes, i) => {
                let (decoded, end) = decode_one(sql, i + 2)?;
                let out = out.get_or_insert_with(|| String::with_capacity(sql.len()));
                out.push_str(&sql[copied..i]);
                out.push('\'');
                out.push_str(&decoded.replace('\'', "''"));
                out.push('\'');
                copied = end;
                i = end;
            }
            _ => i += 1,
        }
    }
    Ok(match out {
        Some(mut out) => {
            out.push_str(&sql[copied..]);
            Cow::Owned(out)
        }
        None => Cow::Borrowed(sql),
    })
}

/// Whether the byte at `i` continues an identifier or keyword (so an `E`
/// there is not a prefix, and a `$` not a dollar quote).
fn continues_word(bytes: &[u8], i: usize) -> bool {
    i > 0 && {
        let before = bytes[i - 1];
        before.is_ascii_alphanumeric() || before == b'_' || before == b'$' || before >= 0x80
    }
}

/// The index after a `/* ... */` comment starting at `start`; comments
/// nest.
fn skip_block_comment(bytes: &[u8], start: usize) -> usize {
    let mut depth = 0;
    let mut i = start;
    while i + 1 < bytes.len() {
        match (bytes[i], bytes[i + 1]) {
            (b'/', b'*') => {
                depth += 1;
                i += 2;
            }
            (b'*', b'/') => {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    return i;
                }
            }
            _ => i += 1,
        }
    }
    bytes.len()
}

/// The index after a string or identifier quoted by `quote` starting at
/// `start` (a doubled quote stands for one).
fn skip_quoted(bytes: &[u8], start: usize, quote: u8) -> usize {
    let mut i = start + 1;
    while i < bytes.len() {
        if bytes[i] == quote {
            if bytes.get(i + 1) == Some(&quote) {
                i += 2;
                continue;
            }
            return i + 1;
        }
        i += 1;
    }
    bytes.len()
}

/// The index after a dollar-quoted string (`$tag$...$tag$`) starting at
/// `start`, or after the `$` when it starts none (a parameter `$1`).
fn skip_dollar_quoted(bytes: &[u8], start: usize) -> usize {
    let tag_end = bytes[start + 1..]
        .iter()
        .position(|&b| !(b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80))
        .map(|n| start + 1 + n);
    let Some(tag_end) = tag_end.filter(|&e| bytes[e] == b'$') else {
        return start + 1;
    };
    if bytes.get(start + 1).is_some_and(u8::is_ascii_digit) {
        return start + 1;
    }
    let tag = &bytes[start..=tag_end];
    let body = tag_end + 1;
    bytes[body..]
        .windows(tag.len())
        .position(|w| w == tag)
        .map_or(bytes.len(), |n| body + n + tag.len())
}

/// Decodes the escape string whose body starts at `body` (after `E'`):
/// its text and the index after its closing quote.
fn decode_one(sql: &str, body: usize) -> Result<(String, usize), ParseError> {
    let bytes = sql.as_bytes();
    let mut decoded: Vec<u8> = Vec::new();
    let mut i = body;
    let unterminated = || ParseError::Syntax("unterminated quoted string".into());
    loop {
        let &b = bytes.get(i).ok_or_else(unterminated)?;
        match b {
            b'\'' if bytes.get(i + 1) == Some(&b'\'') => {
                decoded.push(b'\'');
                i += 2;
            }
            b'\'' => break,
            b'\\' => {
                let &escaped = bytes.get(i + 1).ok_or_else(unterminated)?;
                i += 2;
                match escaped {
                    b'b' => decoded.push(0x08),
                    b'f' => decoded.push(0x0c),
                    b'n' => decoded.push(b'\n'),
                    b'r' => decoded.push(b'\r'),
                    b't' => decoded.push(b'\t'),
                    b'0'..=b'7' => {
                        let digits = digits_at(bytes, i - 1, 3, |b| (b'0'..=b'7').contains(&b));
                        let value = u32::from_str_radix(&sql[i - 1..i - 1 + digits], 8)
                            .expect("octal digits");
                        decoded.push(value as u8);
                        i += digits - 1;
                    }
                    b'x' if bytes.get(i).is_some_and(u8::is_ascii_hexdigit) => {
                        let digits = digits_at(bytes, i, 2, |b| b.is_ascii_hexdigit());
                        let value =
                            u8::from_str_radix(&sql[i..i + digits], 16).expect("hex digits");
                        decoded.push(value);
                        i += digits;
                    }
                    b'u' | b'U' => {
                        let width = if escaped == b'u' { 4 } else { 8 };
                        let (c, next) = unicode_escape(sql, i, width)?;
                        let mut buffer = [0; 4];
                        decoded.extend_from_slice(c.encode_utf8(&mut buffer).as_bytes());
                        i = next;
                    }
                    _ => {
                        // Any other character stands for itself (with its
                        // UTF-8 continuation bytes, copied as they come).
                        decoded.push(escaped);
                    }
                }
            }
            _ => {
                decoded.push(b);
                i += 1;
            }
        }
    }
    if let Some(zero) = decoded.iter().position(|&b| b == 0) {
        return Err(invalid_bytes(&decoded[zero..]));
    }
    match String::from_utf8(decoded) {
        Ok(text) => Ok((text, i + 1)),
        Err(e) => {
            let bad = e.utf8_error().valid_up_to();
            Err(invalid_bytes(&e.as_bytes()[bad..]))
        }
    }
}

/// How many of up to `max` bytes from `start` satisfy `digit`.
fn digits_at(bytes: &[u8], start: usize, max: usize, digit: impl Fn(u8) -> bool) -> usize {
    bytes[start..]
        .iter()
        .take(max)
        .take_while(|&&b| digit(b))
        .count()
}

/// The character of a `\uXXXX` (`width` 4) or `\UXXXXXXXX` (8) escape
/// whose digits start at `start`, and the index after them; a UTF-16
/// surrogate pair spelled as two `\u` escapes is one character.
fn unicode_escape(sql: &str, start: usize, width: usize) -> Result<(char, usize), ParseError> {
    let code = |at: usize, width: usize| -> Result<u32, ParseError> {
        let digits = sql
            .get(at..at + width)
            .filter(|d| d.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| ParseError::Syntax("invalid Unicode escape".into()))?;
        Ok(u32::from_str_radix(digits, 16).expect("hex digits"))
    };
    let invalid = || ParseError::InvalidEncoding("invalid Unicode escape value".into());
    let first = code(start, width)?;
    let next = start + width;
    if (0xD800..0xDC00).contains(&first) {
        let low = sql
            .get(next..next + 2)
            .filter(|s| *s == "\\u")
            .map(|_| code(next + 2, 4))
            .transpose()?
            .filter(|low| (0xDC00..0xE000).contains(low))
            .ok_or_else(|| ParseError::InvalidEncoding("invalid Unicode surrogate pair".into()))?;
        let combined = 0x10000 + ((first - 0xD800) << 10) + (low - 0xDC00);
        return Ok((char::from_u32(combined).ok_or_else(invalid)?, next + 6));
    }
    match char::from_u32(first) {
        Some(c) if first != 0 => Ok((c, next)),
        _ => Err(invalid()),
    }
}

/// PostgreSQL's error for bytes that are not UTF-8, naming the first
/// offending sequence as PostgreSQL does: as many bytes as its first one
/// announces.
fn invalid_bytes(bad: &[u8]) -> ParseError {
    let announced = match bad[0] {
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf7 => 4,
        _ => 1,
    };
    let shown: Vec<String> = bad
        .iter()
        .take(announced)
        .map(|b| format!("0x{b:02x}"))
        .collect();
    ParseError::InvalidEncoding(format!(
        "invalid byte sequence for encoding \"UTF8\": {}",
        shown.join(" ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(sql: &str) -> String {
        decode_escape_strings(sql).unwrap().into_owned()
    }

    fn refused(sql: &str) -> ParseError {
        decode_escape_strings(sql).unwrap_err()
    }

    #[test]
    fn escapes_become_the_bytes_they_spell() {
        assert_eq!(decoded(r"SELECT E'\xc3\xa9'"), "SELECT 'é'");
        assert_eq!(decoded(r"SELECT e'\303\251'"), "SELECT 'é'");
        assert_eq!(decoded(r"SELECT E'\u00e9\U0001F600'"), "SELECT 'é😀'");
        assert_eq!(decoded(r"SELECT E'\ud83d\ude00'"), "SELECT '😀'");
        assert_eq!(
            decoded(r"SELECT E'a\tb\nc\\d\'e''f\qg'"),
            "SELECT 'a\tb\nc\\d''e''fqg'"
        );
        assert_eq!(
            decoded(r"SELECT E'\x41\x4', E'\101\60'"),
            "SELECT 'A\u{4}', 'A0'"
        );
    }

    #[test]
    fn invalid_utf8_is_refused_as_postgres_refuses_it() {
        for (sql, bytes) in [
            (r"SELECT E'\xff'", "0xff"),
            (r"SELECT E'\xc3'", "0xc3"),
            (r"SELECT E'ok \xc3\x28'", "0xc3 0x28"),
            (r"SELECT E'\000'", "0x00"),
            (r"SELECT E'\xffa'", "0xff"),
        ] {
            match refused(sql) {
                ParseError::InvalidEncoding(m) => {
                    assert_eq!(
                        m,
                        format!("invalid byte sequence for encoding \"UTF8\": {bytes}")
                    )
                }
                other => panic!("{sql}: {other:?}"),
            }
        }
        assert!(matches!(
            refused(r"SELECT E'\ud83d'"),
            ParseError::InvalidEncoding(_)
        ));
        assert!(matches!(
            refused(r"SELECT E'\u0000'"),
            ParseError::InvalidEncoding(_)
        ));
        assert!(matches!(refused(r"SELECT E'\uzz'"), ParseError::Syntax(_)));
        assert!(matches!(refused(r"SELECT E'open"), ParseError::Syntax(_)));
    }

    #[test]
    fn other_quoting_is_left_alone() {
        for sql in [
            r"SELECT '\xff', 'E''\xff'''",
            r#"SELECT "E'\xff'" FROM t"#,
            r"SELECT $$E'\xff'$$, $tag$ E'\xff' $tag$, $1",
            "SELECT 1 -- E'\\xff'\n",
            r"SELECT /* E'\xff' /* nested */ E'\xff' */ 1",
            r"SELECT some_e'x' FROM t",
        ] {
            assert_eq!(decoded(sql), sql);
        }
        assert_eq!(decoded(r"SELECT $1, E'\x41'"), "SELECT $1, 'A'");
    }
}
