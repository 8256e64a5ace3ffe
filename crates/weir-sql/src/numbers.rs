//! Number literals beyond `bigint`'s and `numeric`'s ranges.
//!
//! An integer literal beyond `bigint` is a `numeric` in PostgreSQL
//! (`9223372036854775808`); DataFusion fails to plan it, so it is read as
//! `'9223372036854775808'::numeric(38,0)` ([`widen_big_integer`]), except
//! `-9223372036854775808`, which is `bigint`'s smallest value
//! ([`negate_smallest_bigint`]). Weir's `numeric` holds 38 digits; a
//! literal such as `1.7e308` (a `float8` column's largest values) would
//! fail to plan as one, so it is read as `double precision` instead, as if
//! written `'1.7e308'::float8` ([`widen_huge_literal`]). Literals within
//! the range stay exact.

use datafusion::sql::sqlparser::ast::{
    CastKind, DataType, ExactNumberInfo, Expr, UnaryOperator, Value, ValueWithSpan,
};

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

/// The digits of `bigint`'s smallest value, which only its negation fits.
const SMALLEST_BIGINT_DIGITS: &str = "9223372036854775808";

/// `-9223372036854775808` as one literal, `bigint`'s smallest value (its
/// digits alone do not fit `bigint`).
pub fn negate_smallest_bigint(expr: &mut Expr) {
    if let Expr::UnaryOp {
        op: UnaryOperator::Minus,
        expr: operand,
    } = expr
    {
        if let Expr::Value(ValueWithSpan {
            value: Value::Number(text, long),
            ..
        }) = operand.as_ref()
        {
            if text == SMALLEST_BIGINT_DIGITS {
                *expr = Expr::value(Value::Number(format!("-{text}"), *long));
            }
        }
    }
}

/// `expr` as a `numeric(38,0)` if it is an integer literal beyond
/// `bigint` that a `numeric` holds.
pub fn widen_big_integer(expr: &mut Expr) {
    if let Expr::Value(ValueWithSpan {
        value: Value::Number(text, _),
        ..
    }) = expr
    {
        let digits = text.trim_start_matches('0');
        let integer = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
        if integer && text.parse::<i64>().is_err() && digits.len() as i64 <= NUMERIC_DIGITS {
            let text = std::mem::take(text);
            *expr = Expr::Cast {
                kind: CastKind::DoubleColon,
                array: false,
                expr: Box::new(Expr::value(Value::SingleQuotedString(text))),
                data_type: DataType::Numeric(ExactNumberInfo::PrecisionAndScale(38, 0)),
                format: None,
            };
        }
    }
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

    #[test]
    fn integers_beyond_bigint_are_numeric() {
        let rewritten = |sql: &str| {
            let mut expr = datafusion::sql::sqlparser::parser::Parser::new(
                &datafusion::sql::sqlparser::dialect::PostgreSqlDialect {},
            )
            .try_with_sql(sql)
            .unwrap()
            .parse_expr()
            .unwrap();
            negate_smallest_bigint(&mut expr);
            widen_big_integer(&mut expr);
            expr.to_string()
        };
        assert_eq!(rewritten("9223372036854775807"), "9223372036854775807");
        assert_eq!(
            rewritten("9223372036854775808"),
            "'9223372036854775808'::NUMERIC(38,0)"
        );
        assert_eq!(rewritten("-9223372036854775808"), "-9223372036854775808");
        assert_eq!(rewritten("1.5"), "1.5");
    }
}
