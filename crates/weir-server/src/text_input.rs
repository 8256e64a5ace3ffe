//! PostgreSQL's text input for `interval` and `bytea`, which Arrow's cast
//! kernels read differently: Arrow takes neither `04:05:06`, `1 year 2
//! months 3 days 04:05:06`, `@ 1 day ago` nor pg8000's `1 days 43260
//! seconds 0 microseconds` as an interval, and it reads `'\x0102'` as the
//! six bytes of its text instead of two bytes in hex.

use datafusion::arrow::datatypes::IntervalMonthDayNano;

const NANOS_PER_SECOND: i64 = 1_000_000_000;
const NANOS_PER_MINUTE: i64 = 60 * NANOS_PER_SECOND;
const NANOS_PER_HOUR: i64 = 60 * NANOS_PER_MINUTE;

/// What one unit of an interval field adds.
enum Unit {
    Months(f64),
    Days(f64),
    Nanos(f64),
}

fn unit(word: &str) -> Option<Unit> {
    let w = word.to_ascii_lowercase();
    let w = w.as_str();
    Some(match w {
        "microsecond" | "microseconds" | "us" | "usec" | "usecs" => Unit::Nanos(1e3),
        "millisecond" | "milliseconds" | "ms" | "msec" | "msecs" => Unit::Nanos(1e6),
        "second" | "seconds" | "s" | "sec" | "secs" => Unit::Nanos(1e9),
        "minute" | "minutes" | "m" | "min" | "mins" => Unit::Nanos(60e9),
        "hour" | "hours" | "h" | "hr" | "hrs" => Unit::Nanos(3600e9),
        "day" | "days" | "d" => Unit::Days(1.0),
        "week" | "weeks" | "w" => Unit::Days(7.0),
        "month" | "months" | "mon" | "mons" => Unit::Months(1.0),
        "year" | "years" | "y" | "yr" | "yrs" => Unit::Months(12.0),
        "decade" | "decades" => Unit::Months(120.0),
        "century" | "centuries" => Unit::Months(1200.0),
        "millennium" | "millennia" => Unit::Months(12000.0),
        _ => return None,
    })
}

/// An interval being summed from its fields; fractions of months spill
/// into days (30 per month) and fractions of days into time, as in
/// PostgreSQL.
#[derive(Default)]
struct Sum {
    months: f64,
    days: f64,
    nanos: f64,
}

impl Sum {
    fn add(&mut self, amount: f64, unit: Unit) {
        match unit {
            Unit::Months(m) => {
                let months = amount * m;
                let whole = months.trunc();
                self.months += whole;
                self.add(months - whole, Unit::Days(30.0));
            }
            Unit::Days(d) => {
                let days = amount * d;
                let whole = days.trunc();
                self.days += whole;
                self.nanos += (days - whole) * 86_400e9;
            }
            Unit::Nanos(n) => self.nanos += amount * n,
        }
    }

    fn finish(self, negate: bool) -> Option<IntervalMonthDayNano> {
        let sign = if negate { -1.0 } else { 1.0 };
        let months = sign * self.months;
        let days = sign * self.days;
        let nanos = (sign * self.nanos).round();
        let fits = |v: f64, max: f64| v.is_finite() && v.abs() <= max;
        (fits(months, i32::MAX as f64) && fits(days, i32::MAX as f64) && fits(nanos, 9.2e18))
            .then(|| IntervalMonthDayNano::new(months as i32, days as i32, nanos as i64))
    }
}

/// `[-]H:MM[:SS[.fraction]]` as nanoseconds.
fn clock(text: &str) -> Option<f64> {
    let (negative, text) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let parts: Vec<&str> = text.split(':').collect();
    if !(2..=3).contains(&parts.len()) || parts.iter().any(|p| p.is_empty()) {
        return None;
    }
    let whole = |p: &str| {
        p.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| p.parse::<f64>().ok())?
    };
    let hours = whole(parts[0])?;
    let minutes = whole(parts[1])?;
    let seconds = match parts.get(2) {
        Some(s) if s.bytes().all(|b| b.is_ascii_digit() || b == b'.') => s.parse::<f64>().ok()?,
        Some(_) => return None,
        None => 0.0,
    };
    let nanos = hours * NANOS_PER_HOUR as f64 + minutes * NANOS_PER_MINUTE as f64 + seconds * 1e9;
    Some(if negative { -nanos } else { nanos })
}

/// ISO 8601's `P[nY][nM][nW][nD][T[nH][nM][nS]]`.
fn iso_8601(text: &str) -> Option<IntervalMonthDayNano> {
    let body = text.strip_prefix(['P', 'p'])?;
    let mut sum = Sum::default();
    let mut in_time = false;
    let mut number = String::new();
    for c in body.chars() {
        match c {
            'T' | 't' if number.is_empty() => in_time = true,
            '0'..='9' | '.' | '-' | '+' => number.push(c),
            _ => {
                let amount: f64 = number.parse().ok()?;
                number.clear();
                let unit = match (c.to_ascii_uppercase(), in_time) {
                    ('Y', false) => Unit::Months(12.0),
                    ('M', false) => Unit::Months(1.0),
                    ('W', false) => Unit::Days(7.0),
                    ('D', false) => Unit::Days(1.0),
                    ('H', true) => Unit::Nanos(3600e9),
                    ('M', true) => Unit::Nanos(60e9),
                    ('S', true) => Unit::Nanos(1e9),
                    _ => return None,
                };
                sum.add(amount, unit);
            }
        }
    }
    number.is_empty().then(|| sum.finish(false))?
}

/// Reads an interval as PostgreSQL's `interval_in` does (the
/// `postgres` and `postgres_verbose` forms, clock times and ISO 8601).
pub fn parse_interval(text: &str) -> Option<IntervalMonthDayNano> {
    let text = text.trim();
    if text.starts_with(['P', 'p']) {
        return iso_8601(text);
    }
    let text = text.strip_prefix('@').unwrap_or(text);
    // Split "1day" and "10:00" alike into number and word tokens.
    let mut tokens: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        let split = word
            .find(|c: char| c.is_ascii_alphabetic())
            .filter(|&i| i > 0 && !word.contains(':'));
        match split {
            Some(i) => {
                tokens.push(word[..i].to_owned());
                tokens.push(word[i..].to_owned());
            }
            None => tokens.push(word.to_owned()),
        }
    }
    if tokens.is_empty() {
        return None;
    }
    let mut negate = false;
    if tokens.last().is_some_and(|t| t.eq_ignore_ascii_case("ago")) {
        negate = true;
        tokens.pop();
    }
    let mut sum = Sum::default();
    let mut i = 0;
    while i < tokens.len() {
        let token = &tokens[i];
        if token.contains(':') {
            sum.nanos += clock(token)?;
            i += 1;
            continue;
        }
        let amount: f64 = token.parse().ok().filter(|v: &f64| v.is_finite())?;
        match tokens.get(i + 1).and_then(|w| unit(w)) {
            Some(unit) => {
                sum.add(amount, unit);
                i += 2;
            }
            // A bare number is seconds.
            None if i + 1 == tokens.len() => {
                sum.add(amount, Unit::Nanos(1e9));
                i += 1;
            }
            None => return None,
        }
    }
    sum.finish(negate)
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
        let h = NANOS_PER_HOUR;
        let s = NANOS_PER_SECOND;
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
