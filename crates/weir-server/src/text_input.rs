//! PostgreSQL's text input for `interval` and `bytea`, which Arrow's cast
//! kernels read differently: Arrow takes neither `04:05:06`, `1 year 2
//! months 3 days 04:05:06`, `@ 1 day ago` nor pg8000's `1 days 43260
//! seconds 0 microseconds` as an interval, and it reads `'\x0102'` as the
//! six bytes of its text instead of two bytes in hex.

use datafusion::arrow::datatypes::IntervalMonthDayNano;

/// Reads an interval as PostgreSQL's `interval_in` does (the reader lives
/// in the patched pgwire, which reads text parameters with it too).
pub fn parse_interval(text: &str) -> Option<IntervalMonthDayNano> {
    let interval = pgwire::types::interval_input::parse_interval(text)?;
    Some(IntervalMonthDayNano::new(
        interval.months,
        interval.days,
        interval.microseconds.checked_mul(1_000)?,
    ))
}

/// Reads `bytea` text: `\x` and hex digits (whitespace between pairs), or
/// the escape form, where `\\` is a backslash and `\ooo` an octal byte.
pub fn parse_bytea(text: &str) -> Option<Vec<u8>> {
    if let Some(hex) = text
        .strip_prefix("\\x")
        .or_else(|| text.strip_prefix("\\X"))
    {
        let digits: Vec<u8> = hex.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
        if !digits.len().is_multiple_of(2) {
            return None;
        }
        let value = |d: u8| (d as char).to_digit(16).map(|v| v as u8);
        return digits
            .chunks(2)
            .map(|pair| Some(value(pair[0])? << 4 | value(pair[1])?))
            .collect();
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            out.push(bytes[i]);
            i += 1;
        } else if bytes.get(i + 1) == Some(&b'\\') {
            out.push(b'\\');
            i += 2;
        } else {
            let octal = bytes.get(i + 1..i + 4)?;
            if !octal.iter().all(|b| (b'0'..=b'7').contains(b)) || octal[0] > b'3' {
                return None;
            }
            out.push((octal[0] - b'0') * 64 + (octal[1] - b'0') * 8 + (octal[2] - b'0'));
            i += 4;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interval(months: i32, days: i32, nanos: i64) -> Option<IntervalMonthDayNano> {
        Some(IntervalMonthDayNano::new(months, days, nanos))
    }

    #[test]
    fn intervals_read_as_postgresql_reads_them() {
        let s = 1_000_000_000i64;
        let h = 3_600 * s;
        for (text, expected) in [
            ("1 day", interval(0, 1, 0)),
            ("04:05:06", interval(0, 0, 4 * h + 5 * 60 * s + 6 * s)),
            (
                "1 year 2 months 3 days 04:05:06",
                interval(14, 3, 4 * h + 5 * 60 * s + 6 * s),
            ),
            (
                "1 days 43260 seconds 0 microseconds",
                interval(0, 1, 43_260 * s),
            ),
            ("@ 1 day 2 hours ago", interval(0, -1, -2 * h)),
            ("-3 hours", interval(0, 0, -3 * h)),
            ("1.5 days", interval(0, 1, 12 * h)),
            ("1.5 months", interval(1, 15, 0)),
            ("90 minutes", interval(0, 0, 90 * 60 * s)),
            ("1 week", interval(0, 7, 0)),
            ("2h 30m", interval(0, 0, 2 * h + 30 * 60 * s)),
            ("10", interval(0, 0, 10 * s)),
            ("-1 day +02:00:00.5", interval(0, -1, 2 * h + s / 2)),
            (
                "P1Y2M3DT4H5M6S",
                interval(14, 3, 4 * h + 5 * 60 * s + 6 * s),
            ),
            ("forever", None),
            ("1 fortnight", None),
            ("", None),
            ("1:2:3:4", None),
        ] {
            assert_eq!(parse_interval(text), expected, "{text}");
        }
    }

    #[test]
    fn bytea_reads_hex_and_escapes() {
        assert_eq!(parse_bytea("\\x0102ff"), Some(vec![1, 2, 255]));
        assert_eq!(parse_bytea("\\x01 02"), Some(vec![1, 2]));
        assert_eq!(parse_bytea("\\x"), Some(vec![]));
        assert_eq!(parse_bytea("abc"), Some(b"abc".to_vec()));
        assert_eq!(parse_bytea("a\\\\b\\001"), Some(b"a\\b\x01".to_vec()));
        assert_eq!(parse_bytea("\\x0"), None);
        assert_eq!(parse_bytea("\\xzz"), None);
        assert_eq!(parse_bytea("\\9"), None);
    }
}
