//! `to_char(value, pattern)` with PostgreSQL's patterns. For dates and
//! times (`YYYY-MM-DD HH24:MI:SS`): DataFusion's `to_char` takes chrono's
//! (`%Y-%m-%d`) and echoed PostgreSQL patterns back as text, so this
//! wrapper translates the pattern and calls it. For numbers (`9,999.99`):
//! `to_char_number.rs`.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringArray, StringBuilder};
use datafusion::arrow::datatypes::{
    DataType, Field, FieldRef, Float32Type, Float64Type, Int64Type,
};
use datafusion::common::{exec_err, plan_err, Result, ScalarValue};
use datafusion::logical_expr::type_coercion::functions::fields_with_udf;
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

use crate::to_char_number::{
    decimal_digits, float_digits, overflow, scientific_digits, NumberFormat,
};

/// PostgreSQL template patterns and chrono's equivalents, longest first.
const PATTERNS: &[(&str, &str)] = &[
    ("HH24", "%H"),
    ("HH12", "%I"),
    ("YYYY", "%Y"),
    ("Month", "%B"),
    ("MONTH", "%B"),
    ("month", "%B"),
    ("DDD", "%j"),
    ("Mon", "%b"),
    ("MON", "%b"),
    ("mon", "%b"),
    ("Day", "%A"),
    ("DAY", "%A"),
    ("day", "%A"),
    ("YY", "%y"),
    ("MM", "%m"),
    ("DD", "%d"),
    ("HH", "%I"),
    ("MI", "%M"),
    ("SS", "%S"),
    ("MS", "%3f"),
    ("US", "%6f"),
    ("Dy", "%a"),
    ("AM", "%p"),
    ("PM", "%p"),
    ("am", "%P"),
    ("pm", "%P"),
    ("TZ", "%Z"),
];

/// A PostgreSQL `to_char` pattern as a chrono format: patterns translated,
/// double-quoted text and other characters kept literally, `FM` (no
/// padding) honoured for numeric fields.
pub fn chrono_format(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() * 2);
    let mut rest = pattern;
    let mut fill_mode = false;
    while let Some(c) = rest.chars().next() {
        if let Some(tail) = rest.strip_prefix("FM") {
            fill_mode = true;
            rest = tail;
            continue;
        }
        if c == '"' {
            // Quoted text stands as it is, up to the closing quote.
            let quoted = &rest[1..];
            let (text, after) = match quoted.find('"') {
                Some(end) => (&quoted[..end], &quoted[end + 1..]),
                None => (quoted, ""),
            };
            text.chars().for_each(|ch| push_literal(&mut out, ch));
            rest = after;
            continue;
        }
        match PATTERNS.iter().find(|(pg, _)| rest.starts_with(pg)) {
            Some((pg, chrono)) => {
                let unpadded =
                    fill_mode && matches!(*chrono, "%m" | "%d" | "%H" | "%I" | "%M" | "%S");
                if unpadded {
                    out.push_str(&format!("%-{}", &chrono[1..]));
                } else {
                    out.push_str(chrono);
                }
                rest = &rest[pg.len()..];
            }
            None => {
                push_literal(&mut out, c);
                rest = &rest[c.len_utf8()..];
            }
        }
        fill_mode = false;
    }
    out
}

fn push_literal(out: &mut String, c: char) {
    if c == '%' {
        out.push_str("%%");
    } else {
        out.push(c);
    }
}

/// DataFusion's `to_char` behind a pattern translation, and PostgreSQL's
/// number patterns.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct PgToChar {
    inner: ScalarUDF,
    signature: Signature,
}

impl PgToChar {
    /// The function, named `to_char`.
    pub fn udf() -> ScalarUDF {
        ScalarUDF::new_from_impl(PgToChar {
            inner: datafusion::functions::datetime::to_char().as_ref().clone(),
            signature: Signature::user_defined(Volatility::Immutable),
        })
    }
}

/// The type a number is formatted from: integers as `bigint`, floats as
/// themselves (`real` keeps fewer digits), decimals as they are.
fn number_type(data_type: &DataType) -> Option<DataType> {
    match data_type {
        t if t.is_null() || t.is_integer() => Some(DataType::Int64),
        DataType::Float16 | DataType::Float32 => Some(DataType::Float32),
        DataType::Float64 => Some(DataType::Float64),
        DataType::Decimal128(..) => Some(data_type.clone()),
        _ => None,
    }
}

impl ScalarUDFImpl for PgToChar {
    fn name(&self) -> &str {
        "to_char"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        if let [value, _] = args {
            if let Some(number) = number_type(value) {
                return Ok(vec![number, DataType::Utf8]);
            }
        }
        let fields: Vec<FieldRef> = args
            .iter()
            .map(|t| Arc::new(Field::new("arg", t.clone(), true)))
            .collect();
        Ok(fields_with_udf(&fields, &self.inner)?
            .iter()
            .map(|f| f.data_type().clone())
            .collect())
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let number = args
            .arg_fields
            .first()
            .is_some_and(|f| number_type(f.data_type()).is_some());
        if number {
            let nullable = args.arg_fields.iter().any(|f| f.is_nullable());
            return Ok(Arc::new(Field::new(self.name(), DataType::Utf8, nullable)));
        }
        self.inner.inner().return_field_from_args(args)
    }

    fn invoke_with_args(&self, mut args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if number_type(&args.args[0].data_type()).is_some() {
            return numbers_to_char(&args.args, args.number_rows);
        }
        if let Some(pattern) = args.args.get_mut(1) {
            *pattern = match &*pattern {
                ColumnarValue::Scalar(ScalarValue::Utf8(p)) => {
                    ColumnarValue::Scalar(ScalarValue::Utf8(p.as_deref().map(chrono_format)))
                }
                ColumnarValue::Array(array) if array.data_type() == &DataType::Utf8 => {
                    let translated: StringArray = array
                        .as_string::<i32>()
                        .iter()
                        .map(|p| p.map(chrono_format))
                        .collect();
                    ColumnarValue::Array(Arc::new(translated))
                }
                other => other.clone(),
            };
        }
        self.inner.inner().invoke_with_args(args)
    }
}

/// `to_char` of numbers: each value written with its row's pattern (a
/// constant pattern is parsed once). Formatting text is per value by
/// nature.
fn numbers_to_char(args: &[ColumnarValue], rows: usize) -> Result<ColumnarValue> {
    let [values, patterns] = args else {
        return plan_err!("to_char takes a value and a pattern");
    };
    let scalar_values = matches!(values, ColumnarValue::Scalar(_));
    let values = values.to_array(rows)?;
    let patterns = patterns.to_array(rows)?;
    let patterns = patterns.as_string::<i32>();
    let mut parsed: Option<(String, NumberFormat)> = None;
    let mut out = StringBuilder::with_capacity(rows, rows * 12);
    for row in 0..rows {
        if values.is_null(row) || patterns.is_null(row) {
            out.append_null();
            continue;
        }
        let pattern = patterns.value(row);
        if parsed.as_ref().is_none_or(|(p, _)| p != pattern) {
            parsed = Some((pattern.to_owned(), NumberFormat::parse(pattern)?));
        }
        let format = &parsed.as_ref().expect("parsed above").1;
        out.append_value(write_number(&values, row, format)?);
    }
    let array: ArrayRef = Arc::new(out.finish());
    Ok(if scalar_values && rows == 1 {
        ColumnarValue::Scalar(ScalarValue::try_from_array(&array, 0)?)
    } else {
        ColumnarValue::Array(array)
    })
}

/// Row `row` of `values` (a type [`number_type`] gives) written with
/// `format`.
fn write_number(values: &ArrayRef, row: usize, format: &NumberFormat) -> Result<String> {
    let multiply = format.multiplier_exponent() as i32;
    let float = match values.data_type() {
        DataType::Float64 => Some((values.as_primitive::<Float64Type>().value(row), 15)),
        DataType::Float32 => Some((
            f64::from(values.as_primitive::<Float32Type>().value(row)),
            6,
        )),
        _ => None,
    };
    if let Some((value, max_digits)) = float {
        let value = value * 10f64.powi(multiply);
        if format.roman() {
            return Ok(format.write_roman(value.round() as i64));
        }
        if format.scientific() {
            if !value.is_finite() {
                return Ok(overflow(format));
            }
            // C's `%e` digits, which Rust's `{:e}` also gives.
            let text = format!("{:.*e}", format.fraction_digits(), value.abs());
            let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
            let exponent = exponent.parse().unwrap_or(0);
            return Ok(format.write_scientific(value < 0.0, mantissa, exponent));
        }
        return Ok(match float_digits(value, max_digits, format) {
            Some((negative, digits, format)) => format.write(negative, &digits),
            None => overflow(format),
        });
    }
    let (unscaled, scale) = match values.data_type() {
        DataType::Int64 => (i128::from(values.as_primitive::<Int64Type>().value(row)), 0),
        DataType::Decimal128(_, scale) => (
            values
                .as_primitive::<datafusion::arrow::datatypes::Decimal128Type>()
                .value(row),
            i32::from(*scale),
        ),
        other => return exec_err!("to_char of {other}"),
    };
    // `V`: times 10 to the number of digits after it.
    let scale = scale - multiply;
    let (unscaled, scale) = if scale < 0 {
        match 10i128
            .checked_pow(scale.unsigned_abs())
            .and_then(|p| unscaled.checked_mul(p))
        {
            Some(v) => (v, 0),
            None => return Ok(overflow(format)),
        }
    } else {
        (unscaled, scale)
    };
    if format.roman() {
        let (_, whole) = decimal_digits(unscaled, scale as i8, 0);
        let whole: i64 = whole.parse().unwrap_or(i64::MAX);
        return Ok(format.write_roman(if unscaled < 0 { -whole } else { whole }));
    }
    if format.scientific() {
        let (mantissa, exponent) =
            scientific_digits(unscaled.unsigned_abs(), scale, format.fraction_digits());
        return Ok(format.write_scientific(unscaled < 0, &mantissa, exponent));
    }
    let (negative, digits) = decimal_digits(unscaled, scale as i8, format.fraction_digits());
    Ok(format.write(negative, &digits))
}

#[cfg(test)]
mod tests {
    use super::chrono_format;

    #[test]
    fn postgres_patterns_become_chrono_formats() {
        assert_eq!(chrono_format("YYYY-MM-DD"), "%Y-%m-%d");
        assert_eq!(chrono_format("HH24:MI:SS.MS"), "%H:%M:%S.%3f");
        assert_eq!(chrono_format("Dy, DD Mon YYYY"), "%a, %d %b %Y");
        assert_eq!(chrono_format("FMMM/FMDD"), "%-m/%-d");
        assert_eq!(chrono_format("\"Q\"YY 100%"), "Q%y 100%%");
    }
}
