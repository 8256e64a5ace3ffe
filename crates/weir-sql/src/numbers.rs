//! Number literals beyond `numeric`'s range. Weir's `numeric` holds 38
//! digits; a literal such as `1.7e308` (a `float8` column's largest
//! values) would fail to plan as one, so it is read as `double precision`
//! instead, as if written `'1.7e308'::float8`. Literals within the range
//! stay exact.

use datafusion::sql::sqlparser::ast::{CastKind, DataType, Expr, Value, ValueWithSpan};

/// The most digits a `numeric` holds, before or after the point.
const NUMERIC_DIGITS: i64 = 38;

/// Whether the number `text` has more digits before or after the point
/// than a `numeric` holds.
fn beyond_numeric(text: &str) -> bool {
    let (mantissa, exponent) = match text.find(['e', 'E']) {
        Some(i) => (&text[..i], text[i + 1..].parse::<i64>().unwrap_or(0)),
        None => (text, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let whole_digits = whole.trim_start_matches('0').len() as i64;
    let fraction_digits = fraction.trim_end_matches('0').len() as i64;
    let before = if whole_digits > 0 {
        whole_digits + exponent
    } else {
        // 0.00123e5: the first significant digit's place.
        let zeros = fraction.len() as i64 - fraction.trim_start_matches('0').len() as i64;
        exponent - zeros
    };
    let after = fraction_digits - exponent;
    before > NUMERIC_DIGITS || after > NUMERIC_DIGITS
}

/// `expr` as a `double precision` cast if it is a number literal that no
/// `numeric` holds.
pub fn widen_huge_literal(expr: &mut Expr) {
    if let Expr::Value(ValueWithSpan {
        value: Value::Number(text, _),
        ..
    }) = expr
    {
        if beyond_numeric(text) {
            let text = std::mem::take(text);
            *expr = Expr::Cast {
                kind: CastKind::DoubleColon,
                array: false,
                expr: Box::new(Expr::value(Value::SingleQuotedString(text))),
                data_type: DataType::DoublePrecision,
                format: None,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_numbers_beyond_38_digits_are_widened() {
        for (text, beyond) in [
            ("1.7e308", true),
            ("1e-40", true),
            ("1e10", false),
            ("123456789.123", false),
            ("99999999999999999999999999999999999999", false),
            ("999999999999999999999999999999999999999", true),
            ("0.00000000000000000000000000000000000001", false),
            ("1.5e-7", false),
        ] {
            assert_eq!(beyond_numeric(text), beyond, "{text}");
        }
    }
}
