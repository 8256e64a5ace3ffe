//! Weir: exact PostgreSQL `numeric` values in text and binary form.
//!
//! The release converts Arrow decimals through `rust_decimal`, which holds
//! 28 significant digits: a `Decimal128(38, s)` value beyond that failed
//! to encode, and a parameter beyond it was decoded to a different number.
//! [`PgNumeric`] keeps the digits as text, so every value a `Decimal128`
//! holds goes out exactly, and a parameter either fits its target exactly
//! (rounded half away from zero to the target's scale, as PostgreSQL rounds
//! into `numeric(p, s)`) or fails with 22003. Its tests are in Weir's
//! `weir-server` (`numeric_wire.rs`), which runs them in the workspace.

use std::error::Error;

use bytes::{BufMut, BytesMut};
use pgwire::api::Type;
use pgwire::types::format::FormatOptions;
use pgwire::types::{FromSqlText, ToSqlText};
use postgres_types::{to_sql_checked, FromSql, IsNull, ToSql};

type BoxError = Box<dyn Error + Sync + Send>;

/// A finite decimal number: its sign and its digits around the point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgNumeric {
    negative: bool,
    /// Digits before the point, without leading zeros ("" for `0.5`).
    int: String,
    /// Digits after the point; their count is the display scale.
    frac: String,
}

/// Weir: the precision and scale of an unconstrained `numeric` (as
/// DataFusion plans `numeric` without a typmod). PostgreSQL keeps such a
/// value exactly, so a value with more fraction digits than its scale is
/// refused rather than rounded (see [`PgNumeric::to_numeric`]).
pub const UNCONSTRAINED: (u8, i8) = (38, 10);

const NUMERIC_POS: u16 = 0x0000;
const NUMERIC_NEG: u16 = 0x4000;

impl PgNumeric {
    /// The value `unscaled * 10^-scale` of an Arrow decimal.
    pub fn from_i128(unscaled: i128, scale: i8) -> Self {
        let negative = unscaled < 0;
        let mut digits = unscaled.unsigned_abs().to_string();
        if scale <= 0 {
            digits.extend(std::iter::repeat_n('0', scale.unsigned_abs() as usize));
            return Self::new(negative, digits, String::new());
        }
        let scale = scale as usize;
        if digits.len() <= scale {
            digits = format!("{}{digits}", "0".repeat(scale + 1 - digits.len()));
        }
        let frac = digits.split_off(digits.len() - scale);
        Self::new(negative, digits, frac)
    }

    /// The same value written with at least `scale` fraction digits: the
    /// trailing zeros beyond it are dropped, never a nonzero digit (how a
    /// column whose values PostgreSQL would print with their own scale is
    /// written, see `PG_NUMERIC_SCALE_KEY`).
    pub fn with_min_scale(mut self, scale: usize) -> Self {
        let kept = self.frac.trim_end_matches('0').len().max(scale);
        self.frac.truncate(kept);
        self
    }

    /// The same quotient written as PostgreSQL writes a quotient of its
    /// magnitude: with `16 - 4 * weight` fraction digits (16 significant
    /// digits; `weight` counts base-10000 digits before the point, -1 for
    /// a quotient below 1 and for zero), at least `min` and at most `max`
    /// (the digits computed), and never fewer than its nonzero ones (the
    /// quotient was rounded where PostgreSQL rounds it).
    pub fn with_quotient_scale(mut self, min: usize, max: usize) -> Self {
        let weight = if !self.int.is_empty() {
            ((self.int.len() - 1) / 4) as i64
        } else {
            let zeros = self.frac.bytes().take_while(|&b| b == b'0').count();
            if zeros == self.frac.len() {
                -1
            } else {
                -((zeros / 4) as i64) - 1
            }
        };
        let significant = self.frac.trim_end_matches('0').len();
        let scale = ((16 - 4 * weight).max(min as i64).clamp(0, max as i64) as usize)
            .max(significant);
        if self.frac.len() > scale {
            self.frac.truncate(scale);
        } else {
            self.frac.extend(std::iter::repeat_n('0', scale - self.frac.len()));
        }
        self
    }

    /// Weir: the same value written with a display scale of at least
    /// `min` fraction digits: a quotient's ([`Self::with_quotient_scale`],
    /// at most `max`, the digits computed) or any other value's
    /// ([`Self::with_min_scale`]).
    pub fn with_display_scale(self, min: usize, quotient: bool, max: usize) -> Self {
        if quotient {
            self.with_quotient_scale(min, max)
        } else {
            self.with_min_scale(min)
        }
    }

    fn new(negative: bool, int: String, frac: String) -> Self {
        let int = int.trim_start_matches('0').to_owned();
        let zero = int.is_empty() && frac.bytes().all(|b| b == b'0');
        PgNumeric {
            negative: negative && !zero,
            int,
            frac,
        }
    }

    /// Parses PostgreSQL's text form: `[+-]digits[.digits][e[+-]digits]`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let invalid = || format!("invalid input syntax for type numeric: \"{text}\"");
        let trimmed = text.trim();
        let (negative, rest) = match trimmed.as_bytes().first() {
            Some(b'-') => (true, &trimmed[1..]),
            Some(b'+') => (false, &trimmed[1..]),
            _ => (false, trimmed),
        };
        let (mantissa, exponent) = match rest.find(['e', 'E']) {
            Some(at) => {
                let exponent: i32 = rest[at + 1..].parse().map_err(|_| invalid())?;
                (&rest[..at], exponent)
            }
            None => (rest, 0),
        };
        let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if (int.is_empty() && frac.is_empty()) || !all_digits(int) || !all_digits(frac) {
            return Err(invalid());
        }
        if exponent.unsigned_abs() > 1000 {
            return Err("value overflows numeric format".into());
        }
        // Move the point by the exponent.
        let mut digits = format!("{int}{frac}");
        let mut point = int.len() as i64 + exponent as i64;
        if point < 0 {
            digits = format!("{}{digits}", "0".repeat(point.unsigned_abs() as usize));
            point = 0;
        }
        let point = point as usize;
        if point > digits.len() {
            digits.extend(std::iter::repeat_n('0', point - digits.len()));
        }
        let frac = digits.split_off(point);
        Ok(Self::new(negative, digits, frac))
    }

    /// PostgreSQL's text form, with every digit of the display scale.
    pub fn to_text(&self) -> String {
        let mut out = String::with_capacity(self.int.len() + self.frac.len() + 3);
        if self.negative {
            out.push('-');
        }
        if self.int.is_empty() {
            out.push('0');
        } else {
            out.push_str(&self.int);
        }
        if !self.frac.is_empty() {
            out.push('.');
            out.push_str(&self.frac);
        }
        out
    }

    /// The value as an Arrow decimal's unscaled integer at `scale`, rounded
    /// half away from zero; `None` if it does not fit in `precision`
    /// digits.
    pub fn to_i128(&self, precision: u8, scale: i8) -> Option<i128> {
        let (mut digits, next) = if scale >= 0 {
            let scale = scale as usize;
            let mut kept = self.int.clone();
            let frac = self.frac.as_bytes();
            for i in 0..scale {
                kept.push(frac.get(i).map_or('0', |&b| b as char));
            }
            (kept, frac.get(scale).copied())
        } else {
            let drop = scale.unsigned_abs() as usize;
            if self.int.len() <= drop {
                let next = (self.int.len() == drop).then(|| self.int.as_bytes()[0]);
                (String::new(), next)
            } else {
                let cut = self.int.len() - drop;
                (self.int[..cut].to_owned(), Some(self.int.as_bytes()[cut]))
            }
        };
        if digits.is_empty() {
            digits.push('0');
        }
        let mut value: i128 = digits.parse().ok()?;
        if next.is_some_and(|b| b >= b'5') {
            value = value.checked_add(1)?;
        }
        let significant = value.checked_abs()?.to_string().len();
        if value != 0 && significant > precision as usize {
            return None;
        }
        Some(if self.negative { -value } else { value })
    }

    /// The value as a `numeric(precision, scale)`'s unscaled integer: rounded
    /// to the scale as PostgreSQL rounds into a typmod, but exactly for an
    /// unconstrained `numeric` ([`UNCONSTRAINED`]), which PostgreSQL never
    /// rounds; `None` if it does not fit.
    pub fn to_numeric(&self, precision: u8, scale: i8) -> Option<i128> {
        let beyond = usize::try_from(scale).map_or("", |s| self.frac.get(s..).unwrap_or(""));
        if (precision, scale) == UNCONSTRAINED && beyond.bytes().any(|b| b != b'0') {
            return None;
        }
        self.to_i128(precision, scale)
    }

    /// The number of digits and the scale a decimal needs to hold this
    /// value exactly.
    pub fn precision_and_scale(&self) -> (usize, usize) {
        let digits = self.int.len() + self.frac.len();
        (digits.max(1), self.frac.len())
    }

    /// Nearest `f64`.
    pub fn to_f64(&self) -> f64 {
        self.to_text().parse().unwrap_or(f64::NAN)
    }

    /// PostgreSQL's binary form: base-10000 digit groups around the point.
    fn to_binary(&self, out: &mut BytesMut) {
        let int_pad = (4 - self.int.len() % 4) % 4;
        let int = format!("{}{}", "0".repeat(int_pad), self.int);
        let frac_pad = (4 - self.frac.len() % 4) % 4;
        let frac = format!("{}{}", self.frac, "0".repeat(frac_pad));
        let group = |s: &str| -> Vec<i16> {
            s.as_bytes()
                .chunks(4)
                .map(|c| std::str::from_utf8(c).unwrap().parse::<i16>().unwrap())
                .collect()
        };
        let mut groups = group(&int);
        let mut weight = groups.len() as i16 - 1;
        groups.extend(group(&frac));
        let leading = groups.iter().take_while(|&&g| g == 0).count();
        groups.drain(..leading);
        weight -= leading as i16;
        while groups.last() == Some(&0) {
            groups.pop();
        }
        if groups.is_empty() {
            weight = 0;
        }
        out.put_i16(groups.len() as i16);
        out.put_i16(weight);
        out.put_u16(if self.negative {
            NUMERIC_NEG
        } else {
            NUMERIC_POS
        });
        out.put_u16(self.frac.len() as u16);
        for g in groups {
            out.put_i16(g);
        }
    }

    /// The value of PostgreSQL's binary `numeric` form (parameters and
    /// binary COPY).
    pub fn from_binary(raw: &[u8]) -> Result<Self, BoxError> {
        let read = |at: usize| -> Result<u16, BoxError> {
            raw.get(at..at + 2)
                .map(|b| u16::from_be_bytes([b[0], b[1]]))
                .ok_or_else(|| "a numeric value is cut short".into())
        };
        let ndigits = read(0)? as usize;
        let weight = read(2)? as i16 as i64;
        let sign = read(4)?;
        let dscale = read(6)? as usize;
        if sign != NUMERIC_POS && sign != NUMERIC_NEG {
            return Err("NaN and infinite numeric values are not supported".into());
        }
        let mut groups = Vec::with_capacity(ndigits);
        for k in 0..ndigits {
            let g = read(8 + 2 * k)?;
            if g > 9999 {
                return Err("invalid digit in a numeric value".into());
            }
            groups.push(g);
        }
        // Group k stands at base-10000 position `weight - k`.
        let digit_at = |position: i64| -> u16 {
            let k = weight - position;
            if k >= 0 && (k as usize) < groups.len() {
                groups[k as usize]
            } else {
                0
            }
        };
        let mut int = String::new();
        for position in (0..=weight.max(-1)).rev() {
            int.push_str(&format!("{:04}", digit_at(position)));
        }
        let mut frac = String::new();
        let frac_groups = dscale.div_ceil(4) as i64;
        for position in 1..=frac_groups {
            frac.push_str(&format!("{:04}", digit_at(-position)));
        }
        frac.truncate(dscale);
        Ok(Self::new(sign == NUMERIC_NEG, int, frac))
    }
}

impl ToSql for PgNumeric {
    fn to_sql(&self, _ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
        self.to_binary(out);
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::NUMERIC
    }

    to_sql_checked!();
}

impl ToSqlText for PgNumeric {
    fn to_sql_text(
        &self,
        _ty: &Type,
        out: &mut BytesMut,
        _format_options: &FormatOptions,
    ) -> Result<IsNull, BoxError> {
        out.put_slice(self.to_text().as_bytes());
        Ok(IsNull::No)
    }
}

impl<'a> FromSql<'a> for PgNumeric {
    fn from_sql(_ty: &Type, raw: &'a [u8]) -> Result<Self, BoxError> {
        Self::from_binary(raw)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::NUMERIC
    }
}

impl<'a> FromSqlText<'a> for PgNumeric {
    fn from_sql_text(
        _ty: &Type,
        input: &'a [u8],
        _format_options: &FormatOptions,
    ) -> Result<Self, BoxError> {
        let text = std::str::from_utf8(input)?;
        Ok(Self::parse(text)?)
    }
}
