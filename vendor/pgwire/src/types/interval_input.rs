//! Weir: PostgreSQL's interval input (`interval_in`), which takes every
//! style whatever `IntervalStyle` says: `04:05:06`, `1 year 2 months 3
//! days 04:05:06`, `@ 1 day ago`, pg8000's `1 days 43260 seconds 0
//! microseconds`, ISO 8601 (`P1Y2M3DT4H5M6S`). pg_interval's parsers each
//! read one output style only. Used for text parameters here and for text
//! cast to `interval` in Weir's server.

use pg_interval::Interval;

const MICROS_PER_SECOND: f64 = 1e6;
const MICROS_PER_MINUTE: f64 = 60.0 * MICROS_PER_SECOND;
const MICROS_PER_HOUR: f64 = 60.0 * MICROS_PER_MINUTE;

/// What one unit of an interval field adds.
enum Unit {
    Months(f64),
    Days(f64),
    Micros(f64),
}

fn unit(word: &str) -> Option<Unit> {
    let w = word.to_ascii_lowercase();
    let w = w.as_str();
    Some(match w {
        "microsecond" | "microseconds" | "us" | "usec" | "usecs" => Unit::Micros(1.0),
        "millisecond" | "milliseconds" | "ms" | "msec" | "msecs" => Unit::Micros(1e3),
        "second" | "seconds" | "s" | "sec" | "secs" => Unit::Micros(1e6),
        "minute" | "minutes" | "m" | "min" | "mins" => Unit::Micros(60e6),
        "hour" | "hours" | "h" | "hr" | "hrs" => Unit::Micros(3600e6),
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
    micros: f64,
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
                self.micros += (days - whole) * 86_400e6;
            }
            Unit::Micros(n) => self.micros += amount * n,
        }
    }

    fn finish(self, negate: bool) -> Option<Interval> {
        let sign = if negate { -1.0 } else { 1.0 };
        let months = sign * self.months;
        let days = sign * self.days;
        let micros = (sign * self.micros).round();
        let fits = |v: f64, max: f64| v.is_finite() && v.abs() <= max;
        (fits(months, i32::MAX as f64) && fits(days, i32::MAX as f64) && fits(micros, 9.2e15))
            .then(|| Interval::new(months as i32, days as i32, micros as i64))
    }
}

/// `[-]H:MM[:SS[.fraction]]` as microseconds.
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
    let micros = hours * MICROS_PER_HOUR + minutes * MICROS_PER_MINUTE + seconds * MICROS_PER_SECOND;
    Some(if negative { -micros } else { micros })
}

/// ISO 8601's `P[nY][nM][nW][nD][T[nH][nM][nS]]`.
fn iso_8601(text: &str) -> Option<Interval> {
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
                    ('H', true) => Unit::Micros(3600e6),
                    ('M', true) => Unit::Micros(60e6),
                    ('S', true) => Unit::Micros(1e6),
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
pub fn parse_interval(text: &str) -> Option<Interval> {
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
            sum.micros += clock(token)?;
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
                sum.add(amount, Unit::Micros(1e6));
                i += 1;
            }
            None => return None,
        }
    }
    sum.finish(negate)
}
