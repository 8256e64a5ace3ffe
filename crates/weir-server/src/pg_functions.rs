//! PostgreSQL functions DataFusion does not provide: `width_bucket`,
//! `quote_literal`, `div`, `sign`, `age`, `convert_from` and `convert_to`;
//! and `array_length` as PostgreSQL's (NULL for an empty array).

use std::sync::Arc;

use chrono::Datelike;
use datafusion::arrow::array::IntervalMonthDayNanoArray;
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, Decimal128Array, Float64Array, Int32Array, StringArray,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{
    DataType, Decimal128Type, Float64Type, IntervalMonthDayNano, IntervalUnit, TimeUnit,
    TimestampNanosecondType,
};
use datafusion::common::{DataFusionError, Result};
use datafusion::functions::utils::make_scalar_function;
use datafusion::logical_expr::expr_fn::SimpleScalarUDF;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::prelude::SessionContext;

use crate::error::{SqlState, WeirError};

/// Registers the functions in `ctx`.
pub fn register(ctx: &SessionContext) {
    ctx.register_udf(width_bucket());
    ctx.register_udf(quote_literal());
    ctx.register_udf(div());
    ctx.register_udf(sign());
    ctx.register_udf(age());
    ctx.register_udf(convert_from());
    ctx.register_udf(convert_to());
    ctx.register_udf(ScalarUDF::new_from_impl(ArrayLength::default()));
    ctx.register_udf(ScalarUDF::new_from_impl(
        crate::array_input::ArrayLike::default(),
    ));
    ctx.register_udf(ScalarUDF::new_from_impl(
        crate::array_compare::CompareArray::default(),
    ));
}

/// `array_length(array, dimension)`: DataFusion's, but NULL where it is
/// 0 (PostgreSQL's empty array has no dimensions, so no length in any),
/// and an `integer`, as in PostgreSQL.
#[derive(Debug, PartialEq, Eq, Hash)]
struct ArrayLength {
    inner: Arc<ScalarUDF>,
}

impl Default for ArrayLength {
    fn default() -> Self {
        ArrayLength {
            inner: datafusion::functions_nested::length::array_length_udf(),
        }
    }
}

impl ScalarUDFImpl for ArrayLength {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int32)
    }

    fn invoke_with_args(&self, mut args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        // DataFusion's returns its own type, which it checks.
        let types: Vec<DataType> = args
            .arg_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        let own = self.inner.return_type(&types)?;
        args.return_field = Arc::new(datafusion::arrow::datatypes::Field::new(
            self.name(),
            own,
            true,
        ));
        let lengths = self.inner.invoke_with_args(args)?.into_array(rows)?;
        let lengths = cast(&lengths, &DataType::Int32)?;
        let lengths: Int32Array = lengths
            .as_primitive::<datafusion::arrow::datatypes::Int32Type>()
            .iter()
            .map(|n| n.filter(|&n| n != 0))
            .collect();
        Ok(ColumnarValue::Array(Arc::new(lengths)))
    }
}

/// The encodings `convert_from` and `convert_to` know, by PostgreSQL's
/// names (and their aliases).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Encoding {
    Utf8,
    Latin1,
}

impl Encoding {
    /// The encoding `name` stands for; `role` ("source", "destination")
    /// for the error.
    fn named(name: &str, role: &str) -> Result<Encoding> {
        let normal: String = name
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_uppercase();
        match normal.as_str() {
            "UTF8" | "UNICODE" | "SQLASCII" => Ok(Encoding::Utf8),
            "LATIN1" | "ISO88591" => Ok(Encoding::Latin1),
            _ => Err(sql_error(
                "22023",
                format!("invalid {role} encoding name \"{name}\""),
            )),
        }
    }

    /// `bytes` as text of this encoding (22021 for bytes that are not).
    fn decode(self, bytes: &[u8]) -> Result<String> {
        match self {
            Encoding::Latin1 => Ok(bytes.iter().map(|&b| b as char).collect()),
            Encoding::Utf8 => std::str::from_utf8(bytes).map(str::to_owned).map_err(|e| {
                let bad = &bytes[e.valid_up_to()..];
                let len = e.error_len().unwrap_or(bad.len()).max(1);
                sql_error(
                    "22021",
                    format!(
                        "invalid byte sequence for encoding \"UTF8\": {}",
                        byte_sequence(&bad[..len])
                    ),
                )
            }),
        }
    }

    /// `text` in this encoding (22P05 for a character it cannot hold).
    fn encode(self, text: &str) -> Result<Vec<u8>> {
        match self {
            Encoding::Utf8 => Ok(text.as_bytes().to_vec()),
            Encoding::Latin1 => text
                .chars()
                .map(|c| {
                    u8::try_from(u32::from(c)).map_err(|_| {
                        sql_error(
                            "22P05",
                            format!(
                                "character with byte sequence {} in encoding \"UTF8\" has no \
                                 equivalent in encoding \"LATIN1\"",
                                byte_sequence(c.to_string().as_bytes())
                            ),
                        )
                    })
                })
                .collect(),
        }
    }
}

/// Bytes as PostgreSQL shows them in encoding errors: `0xc3 0xa9`.
fn byte_sequence(bytes: &[u8]) -> String {
    let shown: Vec<String> = bytes.iter().map(|b| format!("0x{b:02x}")).collect();
    shown.join(" ")
}

/// `convert_from(bytea, encoding)`: the bytes as text of that encoding.
fn convert_from() -> ScalarUDF {
    udf(
        "convert_from",
        vec![DataType::Binary, DataType::Utf8],
        DataType::Utf8,
        |args| {
            let texts = args[0]
                .as_binary::<i32>()
                .iter()
                .zip(args[1].as_string::<i32>().iter())
                .map(|pair| match pair {
                    (Some(bytes), Some(name)) => {
                        Encoding::named(name, "source")?.decode(bytes).map(Some)
                    }
                    _ => Ok(None),
                })
                .collect::<Result<StringArray>>()?;
            Ok(Arc::new(texts))
        },
    )
}

/// `convert_to(text, encoding)`: the text's bytes in that encoding.
fn convert_to() -> ScalarUDF {
    udf(
        "convert_to",
        vec![DataType::Utf8, DataType::Utf8],
        DataType::Binary,
        |args| {
            let bytes = args[0]
                .as_string::<i32>()
                .iter()
                .zip(args[1].as_string::<i32>().iter())
                .map(|pair| match pair {
                    (Some(text), Some(name)) => {
                        Encoding::named(name, "destination")?.encode(text).map(Some)
                    }
                    _ => Ok(None),
                })
                .collect::<Result<Vec<Option<Vec<u8>>>>>()?;
            Ok(Arc::new(BinaryArray::from_iter(bytes)))
        },
    )
}

/// A function of `args.len()` arguments, each cast to its type in `args`
/// first (so any number or text converts), giving `output`.
pub(crate) fn udf(
    name: &str,
    args: Vec<DataType>,
    output: DataType,
    f: impl Fn(&[ArrayRef]) -> Result<ArrayRef> + Send + Sync + 'static,
) -> ScalarUDF {
    let signature = Signature::any(args.len(), Volatility::Immutable);
    let f = make_scalar_function(
        move |inputs: &[ArrayRef]| {
            let cast_inputs = inputs
                .iter()
                .zip(&args)
                .map(|(input, to)| Ok(cast(input, to)?))
                .collect::<Result<Vec<_>>>()?;
            f(&cast_inputs)
        },
        vec![],
    );
    ScalarUDF::from(SimpleScalarUDF::new_with_signature(
        name,
        signature,
        output,
        Arc::new(move |args: &[ColumnarValue]| f(args)),
    ))
}

/// `width_bucket(operand, low, high, count)`: the bucket of `operand` among
/// `count` equal buckets from `low` to `high` (0 below, `count + 1` above).
fn width_bucket() -> ScalarUDF {
    let f64s = vec![DataType::Float64; 3];
    let args = [f64s, vec![DataType::Int32]].concat();
    udf("width_bucket", args, DataType::Int32, |args| {
        let [operand, low, high] = [0, 1, 2].map(|i| args[i].as_primitive::<Float64Type>().clone());
        let count = args[3].as_primitive::<datafusion::arrow::datatypes::Int32Type>();
        let buckets = (0..operand.len())
            .map(|row| {
                if [
                    operand.is_null(row),
                    low.is_null(row),
                    high.is_null(row),
                    count.is_null(row),
                ]
                .contains(&true)
                {
                    return Ok(None);
                }
                let (x, low, high, n) = (
                    operand.value(row),
                    low.value(row),
                    high.value(row),
                    count.value(row),
                );
                if n <= 0 {
                    return Err(invalid("count must be greater than zero"));
                }
                if low == high || !low.is_finite() || !high.is_finite() {
                    return Err(invalid("lower bound cannot equal upper bound"));
                }
                let bucket = if low < high {
                    match x {
                        x if x < low => 0,
                        x if x >= high => n + 1,
                        x => ((x - low) / (high - low) * n as f64) as i32 + 1,
                    }
                } else {
                    match x {
                        x if x > low => 0,
                        x if x <= high => n + 1,
                        x => ((low - x) / (low - high) * n as f64) as i32 + 1,
                    }
                };
                Ok(Some(bucket))
            })
            .collect::<Result<Int32Array>>()?;
        Ok(Arc::new(buckets))
    })
}

fn invalid(message: &str) -> DataFusionError {
    sql_error("2201G", message.to_owned())
}

/// An error with SQLSTATE `state`, as a function returns it.
fn sql_error(state: &'static str, message: String) -> DataFusionError {
    DataFusionError::External(Box::new(WeirError::new(SqlState(state), message)))
}

/// `quote_literal(text)`: the text as a string literal (`'it''s'`; with a
/// backslash, an `E'...'` literal with it doubled).
fn quote_literal() -> ScalarUDF {
    udf(
        "quote_literal",
        vec![DataType::Utf8],
        DataType::Utf8,
        |args| {
            let quoted: StringArray = args[0]
                .as_string::<i32>()
                .iter()
                .map(|text| {
                    text.map(|text| {
                        let body = text.replace('\'', "''");
                        if text.contains('\\') {
                            format!("E'{}'", body.replace('\\', "\\\\"))
                        } else {
                            format!("'{body}'")
                        }
                    })
                })
                .collect();
            Ok(Arc::new(quoted))
        },
    )
}

/// `div(a, b)`: the integer quotient of two `numeric`s, truncated toward
/// zero (22012 for a zero divisor).
fn div() -> ScalarUDF {
    let numeric = DataType::Decimal128(38, 10);
    udf(
        "div",
        vec![numeric.clone(), numeric],
        DataType::Decimal128(38, 0),
        |args| {
            let (a, b) = (
                args[0].as_primitive::<Decimal128Type>(),
                args[1].as_primitive::<Decimal128Type>(),
            );
            let quotients = (0..a.len())
                .map(|row| {
                    if a.is_null(row) || b.is_null(row) {
                        return Ok(None);
                    }
                    if b.value(row) == 0 {
                        return Err(DataFusionError::External(Box::new(WeirError::new(
                            SqlState::DIVISION_BY_ZERO,
                            "division by zero",
                        ))));
                    }
                    // Both at scale 10: the quotient of the raw values.
                    Ok(Some(a.value(row) / b.value(row)))
                })
                .collect::<Result<Decimal128Array>>()?;
            Ok(Arc::new(quotients.with_precision_and_scale(38, 0)?))
        },
    )
}

/// `sign(x)`: -1, 0 or 1, a `numeric` for a `numeric` argument, else a
/// `double precision`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Sign {
    signature: Signature,
}

impl ScalarUDFImpl for Sign {
    fn name(&self) -> &str {
        "sign"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        Ok(match args.first() {
            Some(DataType::Decimal128(..)) => DataType::Decimal128(38, 0),
            _ => DataType::Float64,
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let sign = |inputs: &[ArrayRef]| -> Result<ArrayRef> {
            let input = &inputs[0];
            Ok(match input.data_type() {
                DataType::Decimal128(..) => {
                    let signs: Decimal128Array = input
                        .as_primitive::<Decimal128Type>()
                        .unary(|v: i128| v.signum());
                    Arc::new(signs.with_precision_and_scale(38, 0)?)
                }
                _ => {
                    let floats = cast(input, &DataType::Float64)?;
                    let signs: Float64Array = floats
                        .as_primitive::<Float64Type>()
                        .unary(|v: f64| if v == 0.0 { 0.0 } else { v.signum() });
                    Arc::new(signs)
                }
            })
        };
        make_scalar_function(sign, vec![])(&args.args)
    }
}

fn sign() -> ScalarUDF {
    ScalarUDF::new_from_impl(Sign {
        signature: Signature::any(1, Volatility::Immutable),
    })
}

/// `age(a, b)`: `a - b` as PostgreSQL's `age` writes it, in years, months
/// and days (`1 year 2 mons 4 days`) rather than days alone. Timestamps
/// with a zone are compared in UTC.
fn age() -> ScalarUDF {
    let timestamp = DataType::Timestamp(TimeUnit::Nanosecond, None);
    let interval = DataType::Interval(IntervalUnit::MonthDayNano);
    udf(
        "age",
        vec![timestamp.clone(), timestamp],
        interval,
        |args| {
            let (later, earlier) = (
                args[0].as_primitive::<TimestampNanosecondType>(),
                args[1].as_primitive::<TimestampNanosecondType>(),
            );
            // Calendar arithmetic per value: no Arrow kernel borrows months.
            let ages: IntervalMonthDayNanoArray = later
                .iter()
                .zip(earlier.iter())
                .map(|pair| match pair {
                    (Some(a), Some(b)) => Some(symbolic_difference(a, b)),
                    _ => None,
                })
                .collect();
            Ok(Arc::new(ages))
        },
    )
}

/// The fields of a timestamp in nanoseconds since the epoch: year, month
/// (1 to 12), day, and nanoseconds into the day.
fn fields(nanos: i64) -> (i64, i64, i64, i64) {
    let time = chrono::DateTime::from_timestamp_nanos(nanos).naive_utc();
    let midnight = time.date().and_hms_opt(0, 0, 0).expect("midnight");
    let into_day = (time - midnight).num_nanoseconds().unwrap_or(0);
    (
        i64::from(time.year()),
        i64::from(time.month()),
        i64::from(time.day()),
        into_day,
    )
}

/// The days in `month` (1 to 12) of `year`.
fn days_in_month(year: i64, month: i64) -> i64 {
    let first = |y: i64, m: i64| chrono::NaiveDate::from_ymd_opt(y as i32, m as u32, 1);
    let next = if month == 12 {
        first(year + 1, 1)
    } else {
        first(year, month + 1)
    };
    match (first(year, month), next) {
        (Some(start), Some(end)) => (end - start).num_days(),
        _ => 30,
    }
}

/// PostgreSQL's `timestamp_age`: the field-by-field difference of `a` and
/// `b`, each negative field borrowing from the next larger one (a day
/// borrows the length of the month it counts from).
fn symbolic_difference(a: i64, b: i64) -> IntervalMonthDayNano {
    const DAY: i64 = 86_400_000_000_000;
    let ((y1, m1, d1, t1), (y2, m2, d2, t2)) = (fields(a), fields(b));
    let flip = if a < b { -1 } else { 1 };
    let (mut years, mut months, mut days, mut time) = (
        flip * (y1 - y2),
        flip * (m1 - m2),
        flip * (d1 - d2),
        flip * (t1 - t2),
    );
    while time < 0 {
        time += DAY;
        days -= 1;
    }
    while days < 0 {
        // The month counted from: the earlier timestamp's.
        let (year, month) = if a < b { (y1, m1) } else { (y2, m2) };
        days += days_in_month(year, month);
        months -= 1;
    }
    while months < 0 {
        months += 12;
        years -= 1;
    }
    IntervalMonthDayNano::new(
        (flip * (years * 12 + months)) as i32,
        (flip * days) as i32,
        flip * time,
    )
}
