//! `to_char(number, pattern)` with PostgreSQL's numeric template patterns
//! (`9`, `0`, `.`, `D`, `,`, `G`, `S`, `MI`, `PL`, `SG`, `PR`, `FM`, `L`,
//! `V`, `TH`, `RN`, `EEEE`), written as PostgreSQL writes them
//! (`formatting.c`): `to_char(1234.5, '9999.99')` is `' 1234.50'`, a
//! number too long for its pattern is `#`s. The locale is C's: `.` and
//! `,`, the currency symbol a space.

use datafusion::error::{DataFusionError, Result};

/// One element of a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Nine,
    Zero,
    /// `.` or `D`.
    Point,
    /// `,` or `G`.
    Group,
    Sign,
    Minus,
    Plus,
    PlusMinus,
    Brackets,
    Currency,
    /// `TH` (upper case) or `th`.
    Ordinal(bool),
    /// `RN` (upper case) or `rn`.
    Roman(bool),
    /// `FM`, `B`, `V`, `EEEE`: flags, written as nothing.
    Flag,
    Text(char),
}

/// Patterns by their spelling, longest first (PostgreSQL's keywords).
const KEYWORDS: &[(&str, Part)] = &[
    ("EEEE", Part::Flag),
    ("eeee", Part::Flag),
    ("FM", Part::Flag),
    ("fm", Part::Flag),
    ("MI", Part::Minus),
    ("mi", Part::Minus),
    ("PL", Part::Plus),
    ("pl", Part::Plus),
    ("SG", Part::PlusMinus),
    ("sg", Part::PlusMinus),
    ("PR", Part::Brackets),
    ("pr", Part::Brackets),
    ("RN", Part::Roman(true)),
    ("rn", Part::Roman(false)),
    ("TH", Part::Ordinal(true)),
    ("th", Part::Ordinal(false)),
    ("9", Part::Nine),
    ("0", Part::Zero),
    (".", Part::Point),
    ("D", Part::Point),
    ("d", Part::Point),
    (",", Part::Group),
    ("G", Part::Group),
    ("g", Part::Group),
    ("S", Part::Sign),
    ("s", Part::Sign),
    ("L", Part::Currency),
    ("l", Part::Currency),
    ("B", Part::Flag),
    ("b", Part::Flag),
    ("V", Part::Flag),
    ("v", Part::Flag),
];

/// Where an `S` stands: before the digits or after them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SignAt {
    None,
    Before,
    After,
}

/// A parsed pattern: its parts and what they add up to (PostgreSQL's
/// `NUMDesc`).
#[derive(Debug, Clone)]
pub struct NumberFormat {
    parts: Vec<Part>,
    /// Digit positions before and after the decimal point.
    pre: usize,
    post: usize,
    /// Digit positions after `V` (the value is multiplied by 10 to their
    /// number).
    multiply: usize,
    /// The first `0` before the point, counted from 1 (0: none), and
    /// the last `0`'s position among all digits.
    zero_start: usize,
    zero_end: usize,
    has_zero: bool,
    has_point: bool,
    fill: bool,
    sign_at: SignAt,
    /// Digit positions before the `S` when it comes before the point.
    pre_sign: usize,
    minus: bool,
    plus: bool,
    brackets: bool,
    roman: bool,
    scientific: bool,
}

/// A pattern PostgreSQL refuses, with its SQLSTATE (42601).
fn syntax(message: &str) -> DataFusionError {
    DataFusionError::External(Box::new(crate::error::WeirError::new(
        crate::error::SqlState::SYNTAX_ERROR,
        message.to_owned(),
    )))
}

impl NumberFormat {
    /// Parses `pattern`; PostgreSQL's refusals are 42601.
    pub fn parse(pattern: &str) -> Result<Self> {
        let mut format = NumberFormat {
            parts: Vec::new(),
            pre: 0,
            post: 0,
            multiply: 0,
            zero_start: 0,
            zero_end: 0,
            has_zero: false,
            has_point: false,
            fill: false,
            sign_at: SignAt::None,
            pre_sign: 0,
            minus: false,
            plus: false,
            brackets: false,
            roman: false,
            scientific: false,
        };
        let mut multiplying = false;
        let mut rest = pattern;
        while let Some(c) = rest.chars().next() {
            if c == '"' {
                // Quoted text stands as it is, up to the closing quote.
                let quoted = &rest[1..];
                let end = quoted.find('"').unwrap_or(quoted.len());
                format.parts.extend(quoted[..end].chars().map(Part::Text));
                rest = quoted.get(end + 1..).unwrap_or("");
                continue;
            }
            let Some((spelling, part)) = KEYWORDS.iter().find(|(k, _)| rest.starts_with(k)) else {
                format.parts.push(Part::Text(c));
                rest = &rest[c.len_utf8()..];
                continue;
            };
            rest = &rest[spelling.len()..];
            if format.scientific {
                return Err(syntax("\"EEEE\" must be the last pattern used"));
            }
            match part {
                Part::Nine | Part::Zero => {
                    if format.brackets {
                        return Err(syntax("\"9\" and \"0\" must be ahead of \"PR\""));
                    }
                    if multiplying {
                        format.multiply += 1;
                    } else {
                        if *part == Part::Zero && !format.has_zero && !format.has_point {
                            format.has_zero = true;
                            format.zero_start = format.pre + 1;
                        }
                        if format.has_point {
                            format.post += 1;
                        } else {
                            format.pre += 1;
                        }
                        if *part == Part::Zero {
                            format.zero_end = format.pre + format.post;
                        }
                    }
                }
                Part::Point => {
                    if format.has_point {
                        return Err(syntax("multiple decimal points"));
                    }
                    if multiplying {
                        return Err(syntax("cannot use \"V\" and decimal point together"));
                    }
                    format.has_point = true;
                }
                Part::Sign => {
                    if format.sign_at != SignAt::None {
                        return Err(syntax("cannot use \"S\" twice"));
                    }
                    if format.plus || format.minus || format.brackets {
                        return Err(syntax(
                            "cannot use \"S\" and \"PL\"/\"MI\"/\"SG\"/\"PR\" together",
                        ));
                    }
                    if format.has_point {
                        format.sign_at = SignAt::After;
                    } else {
                        format.sign_at = SignAt::Before;
                        format.pre_sign = format.pre;
                    }
                }
                Part::Minus | Part::Plus | Part::PlusMinus => {
                    if format.sign_at != SignAt::None {
                        return Err(syntax("cannot use \"S\" and \"PL\"/\"MI\"/\"SG\" together"));
                    }
                    format.minus |= matches!(part, Part::Minus | Part::PlusMinus);
                    format.plus |= matches!(part, Part::Plus | Part::PlusMinus);
                }
                Part::Brackets => {
                    if format.sign_at != SignAt::None || format.plus || format.minus {
                        return Err(syntax(
                            "cannot use \"PR\" and \"S\"/\"PL\"/\"MI\"/\"SG\" together",
                        ));
                    }
                    format.brackets = true;
                }
                Part::Roman(_) => format.roman = true,
                Part::Flag if spelling.eq_ignore_ascii_case("FM") => format.fill = true,
                Part::Flag if spelling.eq_ignore_ascii_case("V") => {
                    if format.has_point {
                        return Err(syntax("cannot use \"V\" and decimal point together"));
                    }
                    multiplying = true;
                }
                Part::Flag if spelling.eq_ignore_ascii_case("EEEE") => {
                    if format.fill
                        || format.sign_at != SignAt::None
                        || format.brackets
                        || format.minus
                        || format.plus
                        || format.roman
                        || multiplying
                    {
                        return Err(syntax("\"EEEE\" is incompatible with other formats"));
                    }
                    format.scientific = true;
                }
                _ => {}
            }
            format.parts.push(part.clone());
        }
        Ok(format)
    }

    /// The fraction digits a value is rounded to.
    pub fn fraction_digits(&self) -> usize {
        self.post
    }

    /// The power of ten `V` multiplies a value by.
    pub fn multiplier_exponent(&self) -> usize {
        self.multiply
    }

    /// Whether the pattern writes Roman numerals (`RN`).
    pub fn roman(&self) -> bool {
        self.roman
    }

    /// Whether the pattern writes scientific notation (`EEEE`).
    pub fn scientific(&self) -> bool {
        self.scientific
    }

    /// Writes a number given as its sign and its digits, rounded to
    /// [`Self::fraction_digits`] (`123.40`; no sign, at least one digit
    /// before the point).
    pub fn write(&self, negative: bool, digits: &str) -> String {
        let mut format = self.clone();
        format.pre += format.multiply;
        format.write_digits(negative, digits)
    }

    /// Writes `value` rounded to a whole number as a Roman numeral (`RN`;
    /// `#`s outside 1 to 3999).
    pub fn write_roman(&self, value: i64) -> String {
        let numeral = match value {
            1..=3999 => roman_numeral(value as u32),
            _ => "#".repeat(15),
        };
        let upper = self.parts.contains(&Part::Roman(true));
        let numeral = if upper {
            numeral
        } else {
            numeral.to_lowercase()
        };
        if self.fill {
            numeral
        } else {
            format!("{numeral:>15}")
        }
    }

    /// Writes a number in scientific notation (`EEEE`): `mantissa` and
    /// `exponent` as `1.23e+03` (at least two exponent digits), a space
    /// where a positive number's sign would be.
    pub fn write_scientific(&self, negative: bool, mantissa: &str, exponent: i32) -> String {
        let sign = if negative { '-' } else { ' ' };
        let exponent_sign = if exponent < 0 { '-' } else { '+' };
        format!("{sign}{mantissa}e{exponent_sign}{:02}", exponent.abs())
    }

    fn write_digits(mut self, negative: bool, digits: &str) -> String {
        let pre_len = digits.find('.').unwrap_or(digits.len());
        let (number, out_pre_spaces) = if pre_len <= self.pre {
            (digits.to_owned(), self.pre - pre_len)
        } else {
            let mut hashes = "#".repeat(self.pre + self.post + 1);
            hashes.replace_range(self.pre..=self.pre, ".");
            (hashes, 0)
        };
        let number = number.as_bytes();
        let sign = if negative { b'-' } else { b'+' };
        let sign_wrote;
        if self.plus || self.minus {
            // `PL` alone still writes the sign in the number.
            sign_wrote = !self.plus || self.minus;
        } else {
            if sign != b'-' && self.brackets && self.fill {
                self.brackets = false;
            }
            sign_wrote = sign == b'+' && self.fill && self.sign_at == SignAt::None;
            if self.sign_at == SignAt::Before && self.pre == self.pre_sign {
                self.sign_at = SignAt::After;
            }
        }
        if self.zero_start > 0 {
            self.zero_start -= 1;
        }
        let mut last_relevant: Option<usize> = None;
        if self.fill && self.has_point {
            last_relevant = last_relevant_digit(number);
            if let Some(relevant) = last_relevant {
                if self.zero_end > out_pre_spaces {
                    let last_zero = (number.len() - 1).min(self.zero_end - out_pre_spaces);
                    if relevant < last_zero {
                        last_relevant = Some(last_zero);
                    }
                }
            }
        }
        let mut count = (self.post + self.pre) as isize - 1;
        if !sign_wrote && out_pre_spaces == 0 {
            count += 1;
        }
        let mut writer = Writer {
            format: &self,
            number,
            at: 0,
            out_pre_spaces,
            sign,
            sign_wrote,
            last_relevant,
            count,
            current: 0,
            in_number: false,
            out: String::new(),
            end_at: None,
        };
        for part in &self.parts {
            match part {
                Part::Nine | Part::Zero | Part::Point => writer.digit(part),
                Part::Group => {
                    if writer.in_number {
                        writer.out.push(',');
                    } else if !self.fill {
                        writer.out.push(' ');
                    }
                }
                Part::Currency => writer.out.push(' '),
                Part::Minus => {
                    if sign == b'-' {
                        writer.out.push('-');
                    } else if !self.fill {
                        writer.out.push(' ');
                    }
                }
                Part::Plus => {
                    if sign == b'+' {
                        writer.out.push('+');
                    } else if !self.fill {
                        writer.out.push(' ');
                    }
                }
                Part::PlusMinus => writer.out.push(sign as char),
                Part::Ordinal(upper) => {
                    if number.first() != Some(&b'#') && sign != b'-' && !self.has_point {
                        let suffix = ordinal_suffix(number);
                        writer.out.push_str(&if *upper {
                            suffix.to_uppercase()
                        } else {
                            suffix.to_owned()
                        });
                    }
                }
                Part::Text(c) => writer.out.push(*c),
                Part::Sign | Part::Brackets | Part::Flag | Part::Roman(_) => {}
            }
        }
        let mut out = writer.out;
        if let Some(end) = writer.end_at {
            out.truncate(end);
        }
        out
    }
}

/// The digits being written into the pattern (PostgreSQL's `NUMProc`).
struct Writer<'a> {
    format: &'a NumberFormat,
    number: &'a [u8],
    /// The next character of `number` to write.
    at: usize,
    out_pre_spaces: usize,
    sign: u8,
    sign_wrote: bool,
    /// In fill mode, the last fraction digit worth writing.
    last_relevant: Option<usize>,
    /// Digit positions to write, less one (PostgreSQL's `num_count`).
    count: isize,
    /// The digit position being written.
    current: usize,
    /// Whether a digit has been written.
    in_number: bool,
    out: String,
    /// Where the output ends when a digit position outlasts the number
    /// (a float whose fraction digits were cut): PostgreSQL writes the
    /// string's end there, which ends its text.
    end_at: Option<usize>,
}

impl Writer<'_> {
    /// The leading `0` of `0.5` under `9.9`, written as a space.
    fn predecimal_space(&self) -> bool {
        !self.format.has_zero
            && self.at == 0
            && self.number.first() == Some(&b'0')
            && self.format.post != 0
    }

    fn relevant_is_point(&self) -> bool {
        self.last_relevant
            .is_some_and(|r| self.number.get(r) == Some(&b'.'))
    }

    /// One digit or point position (PostgreSQL's `NUM_numpart_to_char`).
    fn digit(&mut self, part: &Part) {
        let format = self.format;
        self.in_number = false;
        if !self.sign_wrote
            && (self.current >= self.out_pre_spaces
                || (format.has_zero && format.zero_start == self.current))
            && (!self.predecimal_space() || self.relevant_is_point())
        {
            if format.sign_at != SignAt::None {
                if format.sign_at == SignAt::Before {
                    self.out.push(self.sign as char);
                    self.sign_wrote = true;
                }
            } else if format.brackets {
                self.out.push(if self.sign == b'+' { ' ' } else { '<' });
                self.sign_wrote = true;
            } else if self.sign == b'+' {
                if !format.fill {
                    self.out.push(' ');
                }
                self.sign_wrote = true;
            } else {
                self.out.push('-');
                self.sign_wrote = true;
            }
        }
        if self.current < self.out_pre_spaces
            && (format.zero_start > self.current || !format.has_zero)
        {
            if !format.fill {
                self.out.push(' ');
            }
        } else if format.has_zero
            && self.current < self.out_pre_spaces
            && format.zero_start <= self.current
        {
            self.out.push('0');
            self.in_number = true;
        } else {
            let here = self.number.get(self.at).copied();
            if here == Some(b'.') {
                if !self.relevant_is_point() || format.fill {
                    self.out.push('.');
                }
            } else if self
                .last_relevant
                .is_some_and(|r| self.at > r && *part != Part::Zero)
            {
            } else if self.predecimal_space() {
                if !format.fill {
                    self.out.push(' ');
                } else if self.relevant_is_point() {
                    self.out.push('0');
                }
            } else if let Some(digit) = here {
                self.out.push(digit as char);
                self.in_number = true;
            } else if self.end_at.is_none() {
                self.end_at = Some(self.out.len());
            }
            if here.is_some() {
                self.at += 1;
            }
        }
        let mut end =
            self.count + isize::from(self.out_pre_spaces > 0) + isize::from(format.has_point);
        if self.last_relevant.is_some_and(|r| r == self.at) {
            end = self.current as isize;
        }
        if self.current as isize + 1 == end {
            if self.sign_wrote && format.brackets {
                self.out.push(if self.sign == b'+' { ' ' } else { '>' });
            } else if format.sign_at == SignAt::After {
                self.out.push(self.sign as char);
            }
        }
        self.current += 1;
    }
}

/// The last fraction digit that is not a trailing zero, or the point
/// when every one is (PostgreSQL's `get_last_relevant_decnum`).
fn last_relevant_digit(number: &[u8]) -> Option<usize> {
    let point = number.iter().position(|&b| b == b'.')?;
    Some(
        number[point + 1..]
            .iter()
            .rposition(|&b| b != b'0')
            .map_or(point, |i| point + 1 + i),
    )
}

/// `st`, `nd`, `rd` or `th` for the whole number `digits` ends with.
fn ordinal_suffix(digits: &[u8]) -> &'static str {
    let tail = &digits[..digits.iter().take_while(|b| b.is_ascii_digit()).count()];
    let last = tail.last().map_or(0, |b| b - b'0');
    let tens = tail.len().checked_sub(2).map_or(0, |i| tail[i] - b'0');
    match (tens, last) {
        (1, _) => "th",
        (_, 1) => "st",
        (_, 2) => "nd",
        (_, 3) => "rd",
        _ => "th",
    }
}

fn roman_numeral(mut value: u32) -> String {
    const NUMERALS: &[(u32, &str)] = &[
        (1000, "M"),
        (900, "CM"),
        (500, "D"),
        (400, "CD"),
        (100, "C"),
        (90, "XC"),
        (50, "L"),
        (40, "XL"),
        (10, "X"),
        (9, "IX"),
        (5, "V"),
        (4, "IV"),
        (1, "I"),
    ];
    let mut out = String::new();
    for &(amount, numeral) in NUMERALS {
        while value >= amount {
            out.push_str(numeral);
            value -= amount;
        }
    }
    out
}

/// The digits of `unscaled / 10^scale` rounded (half away from zero) to
/// `post` fraction digits, without sign, and whether it is negative.
pub fn decimal_digits(unscaled: i128, scale: i8, post: usize) -> (bool, String) {
    let negative = unscaled < 0;
    let magnitude = unscaled.unsigned_abs();
    let scale = scale.max(0) as usize;
    let (whole, fraction) = if post < scale {
        let drop = 10u128.pow((scale - post) as u32);
        let (q, r) = (magnitude / drop, magnitude % drop);
        let rounded = if r * 2 >= drop { q + 1 } else { q };
        split_digits(rounded, post)
    } else {
        let (whole, fraction) = split_digits(magnitude, scale);
        (whole, format!("{fraction}{}", "0".repeat(post - scale)))
    };
    let digits = if post == 0 {
        whole
    } else {
        format!("{whole}.{fraction}")
    };
    (
        negative && digits.bytes().any(|b| b.is_ascii_digit() && b != b'0'),
        digits,
    )
}

/// `value` as whole digits and `scale` fraction digits.
fn split_digits(value: u128, scale: usize) -> (String, String) {
    let text = format!("{value:0>width$}", width = scale + 1);
    let (whole, fraction) = text.split_at(text.len() - scale);
    (whole.to_owned(), fraction.to_owned())
}

/// A float's digits for `format`, as PostgreSQL writes them: at most
/// `max_digits` significant digits (15 for `double precision`, 6 for
/// `real`: `DBL_DIG`, `FLT_DIG`), rounded by the C library's rules; and
/// the format with as many fraction digits as were kept, which PostgreSQL
/// writes with (the positions beyond end the text).
pub fn float_digits(
    value: f64,
    max_digits: usize,
    format: &NumberFormat,
) -> Option<(bool, String, NumberFormat)> {
    if !value.is_finite() {
        return None;
    }
    let whole = format!("{:.0}", value.abs());
    let post = if whole.len() >= max_digits {
        0
    } else {
        format.fraction_digits().min(max_digits - whole.len())
    };
    let text = format!("{value:.post$}");
    let format = NumberFormat {
        post,
        ..format.clone()
    };
    Some(match text.strip_prefix('-') {
        Some(digits) => (true, digits.to_owned(), format),
        None => (false, text, format),
    })
}

/// `#`s for a value the pattern cannot write (NaN, infinity, a
/// multiplied value beyond 38 digits).
pub fn overflow(format: &NumberFormat) -> String {
    format.write(false, &"9".repeat(format.pre + format.multiply + 1))
}

/// `magnitude / 10^scale` in scientific notation with `post` fraction
/// digits, rounded half away from zero, as PostgreSQL writes `numeric`:
/// the mantissa (`1.23`) and the exponent (3), for
/// [`NumberFormat::write_scientific`].
pub fn scientific_digits(magnitude: u128, scale: i32, post: usize) -> (String, i32) {
    if magnitude == 0 {
        let fraction = if post > 0 {
            format!(".{}", "0".repeat(post))
        } else {
            String::new()
        };
        return (format!("0{fraction}"), 0);
    }
    let digits = magnitude.to_string();
    let mut exponent = digits.len() as i32 - 1 - scale;
    let keep = post + 1;
    let mut kept: Vec<u8> = digits.bytes().take(keep).collect();
    kept.resize(keep, b'0');
    if digits.as_bytes().get(keep).is_some_and(|&d| d >= b'5') {
        let mut i = keep;
        loop {
            if i == 0 {
                kept.insert(0, b'1');
                kept.pop();
                exponent += 1;
                break;
            }
            i -= 1;
            if kept[i] == b'9' {
                kept[i] = b'0';
            } else {
                kept[i] += 1;
                break;
            }
        }
    }
    let kept = String::from_utf8(kept).unwrap_or_default();
    let (first, rest) = kept.split_at(1);
    let mantissa = if rest.is_empty() {
        first.to_owned()
    } else {
        format!("{first}.{rest}")
    };
    (mantissa, exponent)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `to_char(value::numeric, pattern)`, `value` a decimal literal.
    fn numeric(value: &str, pattern: &str) -> String {
        let format = NumberFormat::parse(pattern).unwrap();
        let scale = value.find('.').map_or(0, |p| value.len() - p - 1);
        let unscaled: i128 = value.replace('.', "").parse().unwrap();
        let (negative, digits) = decimal_digits(unscaled, scale as i8, format.fraction_digits());
        if format.scientific() {
            let (mantissa, exponent) =
                scientific_digits(unscaled.unsigned_abs(), scale as i32, format.post);
            return format.write_scientific(unscaled < 0, &mantissa, exponent);
        }
        if format.roman() {
            return format.write_roman(digits.parse().unwrap());
        }
        format.write(negative, &digits)
    }

    /// `to_char(value::float8, pattern)` and `::float4` (`max_digits` 6).
    fn float(value: f64, max_digits: usize, pattern: &str) -> String {
        let format = NumberFormat::parse(pattern).unwrap();
        let (negative, digits, format) = float_digits(value, max_digits, &format).unwrap();
        format.write(negative, &digits)
    }

    /// PostgreSQL's answers (`SELECT to_char(value::numeric, pattern)`,
    /// PostgreSQL 15, C locale).
    #[test]
    fn numerics_are_written_as_postgresql_writes_them() {
        let cases: &[(&str, &str, &str)] = &[
            ("1234.5", "9999.99", " 1234.50"),
            ("-0.1", "99.99", "  -.10"),
            ("0.1", "0.9", " 0.1"),
            ("12345", "999", " ###"),
            ("-1234.5", "FM9,999.99", "-1,234.5"),
            ("1234.5", "S9999.9", "+1234.5"),
            ("-12", "999PR", " <12>"),
            ("12", "999PR", "  12 "),
            ("-12", "999MI", " 12-"),
            ("12", "999MI", " 12 "),
            ("5", "000", " 005"),
            ("0", "9999", "    0"),
            ("0", "FM9999", "0"),
            ("1.5", "FM9.00", "1.50"),
            ("12", "PL99", "+ 12"),
            ("-12", "PL99", " -12"),
            ("12", "SG99", "+12"),
            ("-12", "SG99", "-12"),
            ("-12", "S99", "-12"),
            ("12", "99S", "12+"),
            ("-12", "99S", "12-"),
            ("1234567.891", "9G999G999D99", " 1,234,567.89"),
            ("1234567.891", "FM9,999,999.999", "1,234,567.891"),
            ("0.5", "FM9.9", ".5"),
            ("1", "FM9.9", "1."),
            ("1", "9.9", " 1.0"),
            ("-1", "9.9", "-1.0"),
            ("0", "0.00", " 0.00"),
            ("-0.004", "9.99", "  .00"),
            ("0.004", "FM0.99", "0."),
            ("148.5", "999D9", " 148.5"),
            ("485", "L999", "  485"),
            ("485", "RN", "        CDLXXXV"),
            ("485", "FMRN", "CDLXXXV"),
            ("3999", "rn", "      mmmcmxcix"),
            ("21", "999TH", "  21ST"),
            ("11", "999th", "  11th"),
            ("2", "FM999th", "2nd"),
            ("123.456", "9.99EEEE", " 1.23e+02"),
            ("-0.000123", "9.9EEEE", "-1.2e-04"),
            ("0", "9.99EEEE", " 0.00e+00"),
            ("12345.678", "\"Total: \"9,999.99", "Total:  #,###.##"),
            ("-485", "\"[\" 999 \"]\"", "[ -485 ]"),
            ("999.999", "999.99", " ###.##"),
            ("9.995", "9.99", " #.##"),
            ("-9.995", "9.99", "-#.##"),
            ("100", "0000", " 0100"),
            ("-100", "0000", "-0100"),
            ("-1234.5", "99,999.99", " -1,234.50"),
        ];
        for (value, pattern, want) in cases {
            assert_eq!(
                numeric(value, pattern),
                *want,
                "to_char({value}, '{pattern}')"
            );
        }
    }

    /// PostgreSQL's answers for `double precision` and `real`, where they
    /// differ from `numeric`'s.
    #[test]
    fn floats_keep_postgresqls_digits() {
        assert_eq!(float(-0.004, 15, "9.99"), " -.00");
        assert_eq!(float(9.995, 15, "9.99"), " 9.99");
        assert_eq!(float(1234567.891, 6, "9G999G999D99"), " 1,234,568");
        assert_eq!(
            float(12345.678, 6, "\"Total: \"9,999.99"),
            "Total:  #,###.#"
        );
        assert_eq!(float(1234567.891, 15, "FM9,999,999.999"), "1,234,567.891");
    }

    #[test]
    fn patterns_postgresql_refuses_are_refused() {
        for pattern in ["9.9.9", "S9S", "S9MI", "9PR9", "9.9EEEE9", "9V9.9"] {
            assert!(NumberFormat::parse(pattern).is_err(), "{pattern}");
        }
    }
}
