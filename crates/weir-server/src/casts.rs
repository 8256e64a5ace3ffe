//! Casts as PostgreSQL does them, where DataFusion's differ.
//!
//! The analyzer rule [`PostgresCasts`] runs after type coercion and
//! rewrites these casts:
//!
//! - text to `real`/`double precision`: DataFusion reads `'1e400'` as
//!   infinity; PostgreSQL fails with 22003 unless the text names infinity.
//! - float to integer: DataFusion truncates (`2.7` → 2); PostgreSQL rounds
//!   to the nearest, ties to even (`2.5` → 2, `3.5` → 4).
//! - numeric to integer: PostgreSQL rounds half away from zero (`2.5` →
//!   3); DataFusion truncates.
//! - text to `numeric`: PostgreSQL reads scientific notation (`1.5e3`),
//!   which Arrow's parser refuses; text and decimal literals keep every
//!   digit in an unconstrained `numeric` or fail with 22003 (Weir's holds
//!   10 fraction digits; PostgreSQL's never rounds an input value).
//! - text to timestamp: PostgreSQL reads `'2024-03-05 10:00'` (no
//!   seconds); Arrow's parser wants them.
//! - text to interval and to bytea: PostgreSQL's input forms
//!   ([`crate::text_input`]).
//! - text to an array: PostgreSQL's `{1,2,NULL}` ([`crate::array_input`]),
//!   each element read as text cast to the element type is; Arrow reads
//!   the whole text as one element.
//! - float to text: PostgreSQL's output form (`1`, `1e+16`, `Infinity`).
//! - timestamps to text: PostgreSQL's output form (`2024-03-05
//!   10:00:00+01`), a `timestamptz` in the session's time zone.
//! - `timestamptz` to `timestamp` or `date`: the local time in the
//!   session's time zone (Arrow's cast keeps the UTC time).
//! - `regtype` to text: the type's name (the value is the type's OID); to
//!   a number: the OID.
//! - to `varchar(n)`: cut to `n` characters, and tagged `varchar`
//!   ([`crate::varchar`]).
//! - to `uuid`: read in PostgreSQL's input forms ([`crate::uuid_type`]);
//!   a `uuid` or `varchar` to text: text no longer tagged.
//!
//! Writes assign values with [`assign_cast`], which applies the same text
//! casts (a write of literal rows is evaluated without the analyzer).
//!
//! Each is a cast of a rounded value or a checked function, vectorized.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, Decimal128Array, Float64Array, IntervalMonthDayNanoArray,
};
use datafusion::arrow::compute::{cast, cast_with_options, CastOptions};
use datafusion::arrow::datatypes::{DataType, Decimal128Type, Float64Type};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, DataFusionError, Result};
use datafusion::functions::utils::make_scalar_function;
use datafusion::logical_expr::{
    Cast, ColumnarValue, Expr, ExprSchemable, LogicalPlan, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

use crate::error::{SqlState, WeirError};
use crate::types::pg_type_name;

/// What a rewritten cast does before (or instead of) DataFusion's cast.
#[derive(Debug, PartialEq, Eq, Hash, Clone, Copy)]
enum Step {
    /// Text to float, failing on out-of-range text.
    TextToFloat,
    /// Text to numeric, also in scientific notation (`1.5e3`).
    TextToNumeric,
    /// A decimal literal with more fraction digits to an unconstrained
    /// numeric: exactly, or 22003 (a computed value is rounded, as
    /// PostgreSQL rounds a quotient).
    ExactNumeric,
    /// Round a float to the nearest integer, ties to even.
    RoundTiesEven,
    /// Round a decimal to a whole number, half away from zero.
    RoundDecimal,
    /// Text to timestamp, also without seconds.
    TextToTimestamp,
    /// Text to interval, in PostgreSQL's input forms.
    TextToInterval,
    /// Text to bytea: hex (`\x0102`) or escaped.
    TextToBytea,
    /// Text to an array, in PostgreSQL's `{...}` form.
    TextToArray,
    /// A float to text, written as PostgreSQL writes floats.
    FloatToText,
    /// A timestamp to text, written as PostgreSQL writes timestamps.
    TimestampToText,
    /// A `regtype` to text: the type's name.
    RegtypeToText,
    /// A `regtype` to a number: its OID, no longer a `regtype`.
    RegtypeToNumber,
    /// A `uuid` or `varchar` to text: the same text, no longer tagged
    /// (DataFusion drops a cast between equal Arrow types, tag and all).
    TaggedToText,
}

/// A function doing one [`Step`] and producing `output`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct CastStep {
    step: Step,
    output: DataType,
    signature: Signature,
}

impl CastStep {
    fn udf(step: Step, output: DataType) -> ScalarUDF {
        ScalarUDF::from(CastStep {
            step,
            output,
            signature: Signature::any(1, Volatility::Immutable),
        })
    }
}

impl ScalarUDFImpl for CastStep {
    fn name(&self) -> &str {
        match self.step {
            Step::TextToFloat => "weir_text_to_float",
            Step::TextToNumeric => "weir_text_to_numeric",
            Step::ExactNumeric => "weir_exact_numeric",
            Step::RoundTiesEven => "weir_round_ties_even",
            Step::RoundDecimal => "weir_round_decimal",
            Step::TextToTimestamp => "weir_text_to_timestamp",
            Step::TextToInterval => "weir_text_to_interval",
            Step::TextToBytea => "weir_text_to_bytea",
            Step::TextToArray => "weir_text_to_array",
            Step::FloatToText => "weir_float_to_text",
            Step::TimestampToText => "weir_timestamp_to_text",
            Step::RegtypeToText => "weir_regtype_to_text",
            Step::RegtypeToNumber => "weir_regtype_to_number",
            Step::TaggedToText => "weir_tagged_to_text",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(self.output.clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let step = |inputs: &[ArrayRef]| {
            let input = &inputs[0];
            match self.step {
                Step::TextToFloat => text_to_float(input, &self.output),
                Step::TextToNumeric => text_to_numeric(input, &self.output),
                Step::ExactNumeric => exact_numeric(input, &self.output),
                Step::RoundTiesEven => {
                    let floats = cast(input, &DataType::Float64)?;
                    let rounded: Float64Array = floats
                        .as_primitive::<Float64Type>()
                        .unary(f64::round_ties_even);
                    Ok(cast(&rounded, &self.output)?)
                }
                Step::RoundDecimal => round_decimal(input),
                Step::TextToTimestamp => text_to_timestamp(
                    input,
                    &self.output,
                    args.config_options.execution.time_zone.as_deref(),
                ),
                Step::TextToInterval => text_to_interval(input, &self.output),
                Step::TextToBytea => text_to_bytea(input, &self.output),
                Step::TextToArray => text_to_array(
                    input,
                    &self.output,
                    args.config_options.execution.time_zone.as_deref(),
                ),
                Step::FloatToText => float_to_text(input, &self.output),
                Step::RegtypeToText => Ok(cast(&crate::regtype::names(input)?, &self.output)?),
                Step::RegtypeToNumber | Step::TaggedToText => Ok(cast(input, &self.output)?),
                Step::TimestampToText => {
                    let zone = args.config_options.execution.time_zone.as_deref();
                    let text = crate::time_zone::timestamps_to_text(input, zone)?;
                    Ok(cast(&text, &self.output)?)
                }
            }
        };
        make_scalar_function(step, vec![])(&args.args)
    }
}

/// A decimal rounded to scale 0, half away from zero, as
/// `Decimal128(38, 0)`.
fn round_decimal(input: &ArrayRef) -> Result<ArrayRef> {
    let DataType::Decimal128(_, scale) = input.data_type() else {
        return Err(DataFusionError::Internal("not a decimal".into()));
    };
    if *scale <= 0 {
        return Ok(strict_cast(input, &DataType::Decimal128(38, 0))?);
    }
    let unit = 10i128.pow(*scale as u32);
    let rounded: Decimal128Array = input.as_primitive::<Decimal128Type>().unary(|v| {
        let (whole, rest) = (v / unit, v % unit);
        if rest.abs() * 2 >= unit {
            whole + v.signum()
        } else {
            whole
        }
    });
    Ok(Arc::new(rounded.with_precision_and_scale(38, 0)?))
}

/// Text cast to a timestamp type. Where Arrow's parser refuses a value,
/// a time without seconds (`10:00`) gets `:00` and the cast is tried
/// again; other errors stand.
///
/// Text without an offset cast to a `timestamptz` is a local time in the
/// session's `zone`, whatever zone the result is labelled with.
fn text_to_timestamp(input: &ArrayRef, output: &DataType, zone: Option<&str>) -> Result<ArrayRef> {
    if let (DataType::Timestamp(unit, Some(label)), Some(zone)) = (output, zone) {
        if label.as_ref() != zone {
            let local = DataType::Timestamp(*unit, Some(zone.into()));
            return Ok(cast(&text_to_timestamp(input, &local, None)?, output)?);
        }
    }
    let first = match strict_cast(input, output) {
        Ok(result) => return Ok(result),
        Err(e) => e,
    };
    let text = cast(input, &DataType::Utf8)?;
    let completed: datafusion::arrow::array::StringArray = text
        .as_string::<i32>()
        .iter()
        .map(|v| v.map(with_seconds))
        .collect();
    let completed: ArrayRef = Arc::new(completed);
    strict_cast(&completed, output).map_err(|_| first.into())
}

/// Each value of `input` (text) read with `parse`; a value it refuses is
/// the error `refused` makes of it.
fn parse_text<T, A>(
    input: &ArrayRef,
    parse: impl Fn(&str) -> Option<T>,
    refused: impl Fn(&str) -> WeirError,
) -> Result<A>
where
    A: FromIterator<Option<T>>,
{
    let text = cast(input, &DataType::Utf8)?;
    text.as_string::<i32>()
        .iter()
        .map(|v| {
            v.map(|v| parse(v).ok_or_else(|| DataFusionError::External(Box::new(refused(v)))))
                .transpose()
        })
        .collect()
}

/// Text cast to `numeric(p, s)`, read as PostgreSQL reads it (Arrow's
/// parser refuses `1e3`): 22P02 for text that is no number, 22003 for a
/// number that does not fit; rounded half away from zero to the scale.
fn text_to_numeric(input: &ArrayRef, output: &DataType) -> Result<ArrayRef> {
    let DataType::Decimal128(precision, scale) = *output else {
        return Ok(strict_cast(input, output)?);
    };
    let text = cast(input, &DataType::Utf8)?;
    let values = text
        .as_string::<i32>()
        .iter()
        .map(|v| v.map(|v| numeric_value(v, precision, scale)).transpose())
        .collect::<std::result::Result<Decimal128Array, WeirError>>()
        .map_err(|e| DataFusionError::External(Box::new(e)))?;
    Ok(Arc::new(values.with_precision_and_scale(precision, scale)?))
}

/// One text value as a `numeric(precision, scale)`'s unscaled integer.
fn numeric_value(text: &str, precision: u8, scale: i8) -> std::result::Result<i128, WeirError> {
    let number = arrow_pg::numeric::PgNumeric::parse(text).map_err(|message| {
        let state = if message.contains("overflows") {
            SqlState::NUMERIC_OUT_OF_RANGE
        } else {
            SqlState::INVALID_TEXT_REPRESENTATION
        };
        WeirError::new(state, message)
    })?;
    number
        .to_numeric(precision, scale)
        .ok_or_else(|| numeric_overflow(text.trim(), precision, scale))
}

/// 22003 for `value`, which does not fit `numeric(precision, scale)`: an
/// unconstrained `numeric` holds 10 fraction digits and 28 before the
/// point, and keeps values exactly.
fn numeric_overflow(value: &str, precision: u8, scale: i8) -> WeirError {
    if (precision, scale) == arrow_pg::numeric::UNCONSTRAINED {
        return WeirError::new(
            SqlState::NUMERIC_OUT_OF_RANGE,
            format!("numeric value {value} does not fit Weir's unconstrained numeric"),
        )
        .with_detail(
            "An unconstrained numeric holds up to 28 digits before the point and 10 after it, exactly.",
        )
        .with_hint("Declare the type with a precision and scale, such as numeric(38,20), to round to it.");
    }
    WeirError::new(
        SqlState::NUMERIC_OUT_OF_RANGE,
        format!("numeric field overflow: {value} does not fit numeric({precision},{scale})"),
    )
}

/// A decimal cast to an unconstrained numeric, which holds fewer fraction
/// digits: exactly (PostgreSQL keeps every digit of such a value), or
/// 22003 for a value whose digits beyond them are not zero.
fn exact_numeric(input: &ArrayRef, output: &DataType) -> Result<ArrayRef> {
    let (DataType::Decimal128(_, scale), DataType::Decimal128(_, kept)) =
        (input.data_type(), output)
    else {
        return Ok(strict_cast(input, output)?);
    };
    let dropped = u32::try_from(scale - kept).unwrap_or(0);
    let unit = 10i128.pow(dropped);
    let decimals = input.as_primitive::<Decimal128Type>();
    if let Some(inexact) = decimals.iter().flatten().find(|v| v % unit != 0) {
        let value = arrow_pg::numeric::PgNumeric::from_i128(inexact, *scale).to_text();
        let (precision, scale) = arrow_pg::numeric::UNCONSTRAINED;
        return Err(DataFusionError::External(Box::new(numeric_overflow(
            &value, precision, scale,
        ))));
    }
    Ok(strict_cast(input, output)?)
}

/// Text cast to an interval, read as PostgreSQL reads it; 22007 for text
/// that is no interval.
fn text_to_interval(input: &ArrayRef, output: &DataType) -> Result<ArrayRef> {
    let intervals: IntervalMonthDayNanoArray =
        parse_text(input, crate::text_input::parse_interval, |v| {
            WeirError::new(
                SqlState::INVALID_DATETIME_FORMAT,
                format!("invalid input syntax for type interval: \"{v}\""),
            )
        })?;
    Ok(strict_cast(&(Arc::new(intervals) as ArrayRef), output)?)
}

/// Text cast to bytea, read as PostgreSQL reads it; 22P02 for bad hex or
/// escapes.
fn text_to_bytea(input: &ArrayRef, output: &DataType) -> Result<ArrayRef> {
    let bytes: BinaryArray = parse_text(input, crate::text_input::parse_bytea, |_| {
        WeirError::new(
            SqlState::INVALID_TEXT_REPRESENTATION,
            "invalid input syntax for type bytea",
        )
    })?;
    Ok(strict_cast(&(Arc::new(bytes) as ArrayRef), output)?)
}

/// Text cast to an array of `output`'s element type: 22P02 for text that
/// is no array literal, 0A000 for an array of arrays; the elements as
/// text cast to the element type ([`text_to`]).
pub(crate) fn text_to_array(
    input: &ArrayRef,
    output: &DataType,
    zone: Option<&str>,
) -> Result<ArrayRef> {
    use crate::array_input::{parse_array, ArrayInputError};
    use datafusion::arrow::array::{ListArray, StringArray};
    use datafusion::arrow::buffer::{NullBuffer, OffsetBuffer};
    let DataType::List(element) = output else {
        return Ok(strict_cast(input, output)?);
    };
    let text = cast(input, &DataType::Utf8)?;
    let mut offsets: Vec<i32> = Vec::with_capacity(text.len() + 1);
    offsets.push(0);
    let mut elements: Vec<Option<String>> = Vec::new();
    for value in text.as_string::<i32>().iter() {
        if let Some(value) = value {
            let refused = |e| match e {
                ArrayInputError::Malformed => WeirError::new(
                    SqlState::INVALID_TEXT_REPRESENTATION,
                    format!("malformed array literal: \"{value}\""),
                ),
                ArrayInputError::Nested => WeirError::unsupported(format!(
                    "multidimensional arrays are not supported: \"{value}\""
                )),
            };
            elements.extend(
                parse_array(value).map_err(|e| DataFusionError::External(Box::new(refused(e))))?,
            );
        }
        let end = i32::try_from(elements.len())
            .map_err(|_| DataFusionError::Execution("array elements past 2^31".into()))?;
        offsets.push(end);
    }
    let elements: ArrayRef = Arc::new(StringArray::from(elements));
    let values = text_to(&elements, element.data_type(), zone)?;
    let present = NullBuffer::from_iter(text.as_string::<i32>().iter().map(|v| v.is_some()));
    Ok(Arc::new(ListArray::try_new(
        element.clone(),
        OffsetBuffer::new(offsets.into()),
        values,
        Some(present),
    )?))
}

/// Text cast to `to`, each value read as this module reads text of that
/// type (an array's elements).
fn text_to(input: &ArrayRef, to: &DataType, zone: Option<&str>) -> Result<ArrayRef> {
    match to {
        t if is_float(t) => text_to_float(input, t),
        DataType::Decimal128(..) => text_to_numeric(input, to),
        DataType::Timestamp(..) => text_to_timestamp(input, to, zone),
        DataType::Interval(_) => text_to_interval(input, to),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => text_to_bytea(input, to),
        DataType::List(_) => text_to_array(input, to, zone),
        _ => Ok(strict_cast(input, to)?),
    }
}

/// A float cast to text as PostgreSQL writes floats (`1`, `1e+16`,
/// `Infinity`), which is also how Weir sends them; Arrow writes `1.0`,
/// `1e16` and `inf`.
fn float_to_text(input: &ArrayRef, output: &DataType) -> Result<ArrayRef> {
    use pgwire::types::format::float_digits::ExtraFloatDigits;
    let format = ExtraFloatDigits(1);
    let text: datafusion::arrow::array::StringArray = match input.data_type() {
        DataType::Float32 => input
            .as_primitive::<datafusion::arrow::datatypes::Float32Type>()
            .iter()
            .map(|v| v.map(|v| format.format_f32(v)))
            .collect(),
        _ => cast(input, &DataType::Float64)?
            .as_primitive::<Float64Type>()
            .iter()
            .map(|v| v.map(|v| format.format_f64(v)))
            .collect(),
    };
    Ok(strict_cast(&(Arc::new(text) as ArrayRef), output)?)
}

/// A cast that fails on a value it cannot convert, as SQL's does (Arrow's
/// default turns such values into NULL).
fn strict_cast(
    input: &ArrayRef,
    output: &DataType,
) -> std::result::Result<ArrayRef, datafusion::arrow::error::ArrowError> {
    let options = CastOptions {
        safe: false,
        ..Default::default()
    };
    cast_with_options(input, output, &options)
}

/// `YYYY-MM-DD HH:MM[rest]` with `:00` after the minutes; anything else
/// as it is.
fn with_seconds(text: &str) -> String {
    let bytes = text.trim().as_bytes();
    let date = bytes.len() >= 10 && bytes[4] == b'-' && bytes[7] == b'-';
    let separator = bytes.get(10).is_some_and(|&b| b == b' ' || b == b'T');
    if !(date && separator) {
        return text.to_owned();
    }
    let time = &bytes[11..];
    let hours = time.iter().take_while(|b| b.is_ascii_digit()).count();
    let minutes_end = 11 + hours + 3;
    let has_minutes = (1..=2).contains(&hours)
        && time.get(hours) == Some(&b':')
        && time[hours + 1..].iter().take(2).all(u8::is_ascii_digit)
        && time.len() >= hours + 3;
    let has_seconds = bytes.get(minutes_end) == Some(&b':');
    if !has_minutes || has_seconds {
        return text.to_owned();
    }
    let trimmed = text.trim();
    format!("{}:00{}", &trimmed[..minutes_end], &trimmed[minutes_end..])
}

/// The expression that casts `value` (of type `from`) to `to` as
/// PostgreSQL does: the rule's rewrite of the cast (writes of literal rows
/// are evaluated without the analyzer, so they build it here).
pub fn assign_cast(value: Expr, from: &DataType, to: &DataType) -> Expr {
    postgres_cast(datafusion::logical_expr::cast(value, to.clone()), from).data
}

/// `cast` (an `Expr::Cast` of an operand of type `from`) as PostgreSQL
/// casts, where DataFusion's cast differs (see the module documentation).
fn postgres_cast(cast: Expr, from: &DataType) -> Transformed<Expr> {
    let Expr::Cast(Cast { expr: inner, field }) = cast else {
        return Transformed::no(cast);
    };
    if let Some(kind) = crate::json::JsonKind::of(&field) {
        return Transformed::yes(crate::json::input(kind, *inner));
    }
    if crate::uuid_type::is_uuid(&field) {
        let text = if is_text(from) {
            *inner
        } else {
            datafusion::logical_expr::cast(*inner, DataType::Utf8)
        };
        return Transformed::yes(crate::uuid_type::input(text));
    }
    if crate::varchar::is_cast_to_do(&field) {
        let text = if is_text(from) {
            *inner
        } else {
            let to_text = datafusion::logical_expr::cast(*inner, DataType::Utf8);
            postgres_cast(to_text, from).data
        };
        return Transformed::yes(crate::varchar::cast(text, &field));
    }
    let to = field.data_type().clone();
    let rounded = |step: Step, output: DataType, inner: Expr| {
        Expr::Cast(Cast {
            expr: Box::new(CastStep::udf(step, output).call(vec![inner])),
            field: field.clone(),
        })
    };
    Transformed::yes(if is_text(from) && is_float(&to) {
        CastStep::udf(Step::TextToFloat, to).call(vec![*inner])
    } else if is_text(from) && matches!(to, DataType::Decimal128(..)) {
        CastStep::udf(Step::TextToNumeric, to).call(vec![*inner])
    } else if to == crate::numeric_display::UNCONSTRAINED
        && matches!(from, DataType::Decimal128(_, s) if *s > arrow_pg::numeric::UNCONSTRAINED.1)
        && matches!(inner.as_ref(), Expr::Literal(..))
    {
        CastStep::udf(Step::ExactNumeric, to).call(vec![*inner])
    } else if is_text(from) && matches!(to, DataType::Timestamp(..)) {
        CastStep::udf(Step::TextToTimestamp, to).call(vec![*inner])
    } else if is_text(from) && matches!(to, DataType::Interval(_)) {
        CastStep::udf(Step::TextToInterval, to).call(vec![*inner])
    } else if is_text(from)
        && matches!(
            to,
            DataType::Binary | DataType::LargeBinary | DataType::BinaryView
        )
    {
        CastStep::udf(Step::TextToBytea, to).call(vec![*inner])
    } else if is_text(from) && matches!(to, DataType::List(_)) {
        CastStep::udf(Step::TextToArray, to).call(vec![*inner])
    } else if matches!(from, DataType::Timestamp(..)) && is_text(&to) {
        CastStep::udf(Step::TimestampToText, to).call(vec![*inner])
    } else if is_float(from) && is_text(&to) {
        CastStep::udf(Step::FloatToText, to).call(vec![*inner])
    } else if is_float(from) && is_integer(&to) {
        rounded(Step::RoundTiesEven, DataType::Float64, *inner)
    } else if matches!(from, DataType::Decimal128(..)) && is_integer(&to) {
        rounded(Step::RoundDecimal, DataType::Decimal128(38, 0), *inner)
    } else {
        return Transformed::no(Expr::Cast(Cast { expr: inner, field }));
    })
}

/// Text cast to a float type; 22003 where a finite text overflows.
fn text_to_float(input: &ArrayRef, output: &DataType) -> Result<ArrayRef> {
    let result = strict_cast(input, output)?;
    let as_f64 = cast(&result, &DataType::Float64)?;
    let values = as_f64.as_primitive::<Float64Type>();
    let text = cast(input, &DataType::Utf8)?;
    let text = text.as_string::<i32>();
    for i in 0..values.len() {
        if values.is_null(i) || values.value(i).is_finite() {
            continue;
        }
        let written = text.value(i).trim().trim_start_matches(['+', '-']);
        let named = ["inf", "infinity", "nan"]
            .iter()
            .any(|n| written.eq_ignore_ascii_case(n));
        if !named {
            return Err(DataFusionError::External(Box::new(WeirError::new(
                SqlState::NUMERIC_OUT_OF_RANGE,
                format!(
                    "\"{}\" is out of range for type {}",
                    text.value(i),
                    pg_type_name(output)
                ),
            ))));
        }
    }
    Ok(result)
}

fn is_float(t: &DataType) -> bool {
    matches!(t, DataType::Float32 | DataType::Float64)
}

fn is_integer(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64
    )
}

fn is_text(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

/// The rule (see the module documentation).
#[derive(Debug)]
pub struct PostgresCasts;

impl PostgresCasts {
    /// Rewrites one expression node (see the module documentation).
    fn rewrite_expr(e: Expr, schema: &DFSchema, zone: &str) -> Result<Transformed<Expr>> {
        let Expr::Cast(cast) = &e else {
            return Ok(Transformed::no(e));
        };
        if let Ok(field) = cast.expr.to_field(schema) {
            let to = cast.field.data_type();
            let tagged =
                crate::uuid_type::is_uuid(&field.1) || crate::varchar::is_varchar(&field.1);
            if tagged && is_text(to) && cast.field.metadata().is_empty() {
                let inner = cast.expr.as_ref().clone();
                return Ok(Transformed::yes(
                    CastStep::udf(Step::TaggedToText, to.clone()).call(vec![inner]),
                ));
            }
            if crate::regtype::is_regtype(&field.1) && (is_text(to) || to.is_integer()) {
                let step = if is_text(to) {
                    Step::RegtypeToText
                } else {
                    Step::RegtypeToNumber
                };
                let inner = cast.expr.as_ref().clone();
                return Ok(Transformed::yes(
                    CastStep::udf(step, to.clone()).call(vec![inner]),
                ));
            }
        }
        Ok(match cast.expr.get_type(schema) {
            Ok(from) => match local_time(e, &from, zone) {
                Transformed {
                    data,
                    transformed: false,
                    ..
                } => postgres_cast(data, &from),
                local => local,
            },
            Err(_) => Transformed::no(e),
        })
    }
}

/// A `timestamptz` cast to `timestamp` is its local time in the session's
/// `zone` (Arrow's cast keeps the UTC time).
fn local_time(cast: Expr, from: &DataType, zone: &str) -> Transformed<Expr> {
    match (&cast, from) {
        (Expr::Cast(Cast { expr, field }), DataType::Timestamp(unit, Some(_)))
            if matches!(
                field.data_type(),
                DataType::Timestamp(_, None) | DataType::Date32 | DataType::Date64
            ) =>
        {
            let zoned = datafusion::logical_expr::cast(
                expr.as_ref().clone(),
                DataType::Timestamp(*unit, Some(zone.into())),
            );
            let local = datafusion::functions::datetime::to_local_time().call(vec![zoned]);
            Transformed::yes(datafusion::logical_expr::cast(
                local,
                field.data_type().clone(),
            ))
        }
        _ => Transformed::no(cast),
    }
}

impl AnalyzerRule for PostgresCasts {
    fn analyze(&self, plan: LogicalPlan, config: &ConfigOptions) -> Result<LogicalPlan> {
        let zone = config.execution.time_zone.clone();
        let zone = zone.as_deref().unwrap_or("+00:00");
        crate::plan_rewrite::rewrite_expressions(plan, &|e, schema| {
            Self::rewrite_expr(e, schema, zone)
        })
    }

    fn name(&self) -> &str {
        "weir_postgres_casts"
    }
}

/// The rule, ready to add to a session.
pub fn rule() -> Arc<dyn AnalyzerRule + Send + Sync> {
    Arc::new(PostgresCasts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_without_seconds_get_them() {
        assert_eq!(with_seconds("2024-03-05 10:00"), "2024-03-05 10:00:00");
        assert_eq!(with_seconds("2024-03-05T9:30+02"), "2024-03-05T9:30:00+02");
        assert_eq!(with_seconds("2024-03-05 10:00:07"), "2024-03-05 10:00:07");
        assert_eq!(with_seconds("2024-03-05"), "2024-03-05");
        assert_eq!(with_seconds("soon"), "soon");
        assert_eq!(with_seconds("2024-03-05 1"), "2024-03-05 1");
    }
}
