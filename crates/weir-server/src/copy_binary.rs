//! PostgreSQL's binary COPY format, read into Arrow arrays of the target
//! columns' types (asyncpg's `copy_records_to_table` sends it).
//!
//! The data is a signature, flags and a header extension, then one tuple
//! per row (a field count, each field as a length, -1 for NULL, and the
//! value's binary form) and a trailer (a field count of -1). Fields vary
//! in length, so they are read one by one into a builder per column.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BinaryBuilder, BooleanBuilder, Date32Builder, Decimal128Builder, Float32Builder,
    Float64Builder, Int16Builder, Int32Builder, Int64Builder, IntervalMonthDayNanoBuilder,
    StringBuilder, Time64MicrosecondBuilder, TimestampMicrosecondBuilder,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, IntervalMonthDayNano, IntervalUnit, Schema};
use datafusion::arrow::record_batch::RecordBatch;

use crate::catalog::{ColumnDef, TableDef};
use crate::error::{SqlState, WeirError, WeirResult};

/// The first 11 bytes of every binary COPY stream.
const SIGNATURE: &[u8] = b"PGCOPY\n\xff\r\n\0";

/// Days from 1970-01-01 (Arrow's epoch) to 2000-01-01 (PostgreSQL's).
const EPOCH_DAYS: i32 = 10_957;

/// Microseconds between the two epochs.
const EPOCH_MICROS: i64 = EPOCH_DAYS as i64 * 86_400_000_000;

/// The rows of binary COPY `data` for the table columns `columns`.
pub fn parse(data: &[u8], table: &TableDef, columns: &[usize]) -> WeirResult<RecordBatch> {
    let mut reader = Reader { data, at: 0 };
    if reader.take(SIGNATURE.len())? != SIGNATURE {
        return Err(bad_format("COPY file signature not recognized"));
    }
    let flags = reader.i32()?;
    if flags & (1 << 16) != 0 {
        return Err(WeirError::unsupported("binary COPY with OIDs"));
    }
    let extension = reader.i32()?;
    reader.take(usize::try_from(extension).map_err(|_| bad_format("invalid header"))?)?;
    let mut decoders = columns
        .iter()
        .map(|&c| Decoder::new(&table.columns[c]))
        .collect::<WeirResult<Vec<_>>>()?;
    let mut row = 0;
    loop {
        let count = reader.i16()?;
        if count == -1 {
            break;
        }
        row += 1;
        if count as usize != decoders.len() {
            return Err(bad_format(&format!(
                "row field count is {count}, expected {}",
                decoders.len()
            ))
            .with_detail(format!("COPY {}, line {row}", table.name)));
        }
        for decoder in decoders.iter_mut() {
            let len = reader.i32()?;
            let value = match len {
                -1 => None,
                n if n >= 0 => Some(reader.take(n as usize)?),
                _ => return Err(bad_format("invalid field size")),
            };
            decoder
                .append(value)
                .map_err(|e| e.with_detail(format!("COPY {}, line {row}", table.name)))?;
        }
    }
    let fields: Vec<Field> = columns
        .iter()
        .map(|&c| {
            let column = &table.columns[c];
            Field::new(&column.name, column.data_type.clone(), true)
        })
        .collect();
    let arrays = decoders
        .iter_mut()
        .map(Decoder::finish)
        .collect::<WeirResult<Vec<ArrayRef>>>()?;
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?)
}

fn bad_format(message: &str) -> WeirError {
    WeirError::new(SqlState::BAD_COPY_FORMAT, message.to_owned())
}

/// A cursor over the COPY data.
struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> WeirResult<&'a [u8]> {
        let bytes = self
            .data
            .get(self.at..self.at.saturating_add(n))
            .ok_or_else(|| bad_format("unexpected EOF in COPY data"))?;
        self.at += n;
        Ok(bytes)
    }

    fn i16(&mut self) -> WeirResult<i16> {
        Ok(i16::from_be_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }

    fn i32(&mut self) -> WeirResult<i32> {
        Ok(i32::from_be_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
}

/// A column's builder, appending values from their binary form.
enum Decoder {
    Bool(BooleanBuilder),
    I16(Int16Builder),
    I32(Int32Builder),
    I64(Int64Builder),
    F32(Float32Builder),
    F64(Float64Builder),
    /// Text; `true` for jsonb, whose binary form has a version byte first.
    Text(StringBuilder, bool),
    /// A uuid's 16 bytes, kept as its canonical text.
    Uuid(StringBuilder),
    Bytes(BinaryBuilder),
    Date(Date32Builder),
    /// Microseconds, cast to the column's unit at the end.
    Time(Time64MicrosecondBuilder, DataType),
    /// Microseconds, cast to the column's unit at the end.
    Timestamp(TimestampMicrosecondBuilder, DataType),
    Interval(IntervalMonthDayNanoBuilder),
    Numeric(Decimal128Builder, u8, i8),
}

/// `N` bytes of `value`, or 22P03 (invalid binary representation).
fn fixed<const N: usize>(value: &[u8]) -> WeirResult<[u8; N]> {
    value.try_into().map_err(|_| {
        WeirError::new(
            SqlState("22P03"),
            format!(
                "incorrect binary data format: {} bytes where {N} were expected",
                value.len()
            ),
        )
    })
}

impl Decoder {
    fn new(column: &ColumnDef) -> WeirResult<Self> {
        let data_type = &column.data_type;
        Ok(match data_type {
            DataType::Boolean => Decoder::Bool(BooleanBuilder::new()),
            DataType::Int16 => Decoder::I16(Int16Builder::new()),
            DataType::Int32 => Decoder::I32(Int32Builder::new()),
            DataType::Int64 => Decoder::I64(Int64Builder::new()),
            DataType::Float32 => Decoder::F32(Float32Builder::new()),
            DataType::Float64 => Decoder::F64(Float64Builder::new()),
            DataType::Utf8 if column.is_uuid() => Decoder::Uuid(StringBuilder::new()),
            DataType::Utf8 => Decoder::Text(
                StringBuilder::new(),
                column.json == Some(crate::json::JsonKind::Jsonb),
            ),
            DataType::Binary => Decoder::Bytes(BinaryBuilder::new()),
            DataType::Date32 => Decoder::Date(Date32Builder::new()),
            DataType::Time64(_) => {
                Decoder::Time(Time64MicrosecondBuilder::new(), data_type.clone())
            }
            DataType::Timestamp(_, zone) => Decoder::Timestamp(
                TimestampMicrosecondBuilder::new().with_timezone_opt(zone.clone()),
                data_type.clone(),
            ),
            DataType::Interval(IntervalUnit::MonthDayNano) => {
                Decoder::Interval(IntervalMonthDayNanoBuilder::new())
            }
            DataType::Decimal128(p, s) => Decoder::Numeric(
                Decimal128Builder::new().with_data_type(data_type.clone()),
                *p,
                *s,
            ),
            other => {
                return Err(WeirError::unsupported(format!(
                    "binary COPY into a column of type {}",
                    crate::types::pg_type_name(other)
                )))
            }
        })
    }

    fn append(&mut self, value: Option<&[u8]>) -> WeirResult<()> {
        let Some(v) = value else {
            self.append_null();
            return Ok(());
        };
        match self {
            Decoder::Bool(b) => b.append_value(fixed::<1>(v)?[0] != 0),
            Decoder::I16(b) => b.append_value(i16::from_be_bytes(fixed(v)?)),
            Decoder::I32(b) => b.append_value(i32::from_be_bytes(fixed(v)?)),
            Decoder::I64(b) => b.append_value(i64::from_be_bytes(fixed(v)?)),
            Decoder::F32(b) => b.append_value(f32::from_be_bytes(fixed(v)?)),
            Decoder::F64(b) => b.append_value(f64::from_be_bytes(fixed(v)?)),
            Decoder::Text(b, jsonb) => {
                let v = match (*jsonb, v.split_first()) {
                    (false, _) => v,
                    (true, Some((1, text))) => text,
                    (true, _) => {
                        return Err(WeirError::new(
                            SqlState("22P03"),
                            "unsupported jsonb version number",
                        ))
                    }
                };
                b.append_value(std::str::from_utf8(v).map_err(|e| {
                    let bad = v[e.valid_up_to()];
                    WeirError::new(
                        SqlState::CHARACTER_NOT_IN_REPERTOIRE,
                        format!("invalid byte sequence for encoding \"UTF8\": 0x{bad:02x}"),
                    )
                })?)
            }
            Decoder::Uuid(b) => b.append_value(crate::uuid_type::format(&fixed(v)?)),
            Decoder::Bytes(b) => b.append_value(v),
            Decoder::Date(b) => {
                let days = i32::from_be_bytes(fixed(v)?);
                b.append_value(days.checked_add(EPOCH_DAYS).ok_or_else(out_of_range)?)
            }
            Decoder::Time(b, _) => b.append_value(i64::from_be_bytes(fixed(v)?)),
            Decoder::Timestamp(b, _) => {
                let micros = i64::from_be_bytes(fixed(v)?);
                b.append_value(micros.checked_add(EPOCH_MICROS).ok_or_else(out_of_range)?)
            }
            Decoder::Interval(b) => {
                let raw = fixed::<16>(v)?;
                let micros = i64::from_be_bytes(raw[..8].try_into().expect("8 bytes"));
                let days = i32::from_be_bytes(raw[8..12].try_into().expect("4 bytes"));
                let months = i32::from_be_bytes(raw[12..].try_into().expect("4 bytes"));
                let nanos = micros.checked_mul(1000).ok_or_else(out_of_range)?;
                b.append_value(IntervalMonthDayNano::new(months, days, nanos))
            }
            Decoder::Numeric(b, p, s) => {
                let value = arrow_pg::numeric::PgNumeric::from_binary(v).map_err(|e| {
                    WeirError::new(
                        SqlState("22P03"),
                        format!("incorrect binary data format: {e}"),
                    )
                })?;
                let unscaled = value.to_numeric(*p, *s).ok_or_else(|| {
                    WeirError::new(SqlState::NUMERIC_OUT_OF_RANGE, "numeric field overflow")
                })?;
                b.append_value(unscaled)
            }
        }
        Ok(())
    }

    fn append_null(&mut self) {
        match self {
            Decoder::Bool(b) => b.append_null(),
            Decoder::I16(b) => b.append_null(),
            Decoder::I32(b) => b.append_null(),
            Decoder::I64(b) => b.append_null(),
            Decoder::F32(b) => b.append_null(),
            Decoder::F64(b) => b.append_null(),
            Decoder::Text(b, _) | Decoder::Uuid(b) => b.append_null(),
            Decoder::Bytes(b) => b.append_null(),
            Decoder::Date(b) => b.append_null(),
            Decoder::Time(b, _) => b.append_null(),
            Decoder::Timestamp(b, _) => b.append_null(),
            Decoder::Interval(b) => b.append_null(),
            Decoder::Numeric(b, _, _) => b.append_null(),
        }
    }

    fn finish(&mut self) -> WeirResult<ArrayRef> {
        Ok(match self {
            Decoder::Bool(b) => Arc::new(b.finish()),
            Decoder::I16(b) => Arc::new(b.finish()),
            Decoder::I32(b) => Arc::new(b.finish()),
            Decoder::I64(b) => Arc::new(b.finish()),
            Decoder::F32(b) => Arc::new(b.finish()),
            Decoder::F64(b) => Arc::new(b.finish()),
            Decoder::Text(b, _) | Decoder::Uuid(b) => Arc::new(b.finish()),
            Decoder::Bytes(b) => Arc::new(b.finish()),
            Decoder::Date(b) => Arc::new(b.finish()),
            Decoder::Time(b, target) => cast(&b.finish(), target)?,
            Decoder::Timestamp(b, target) => cast(&b.finish(), target)?,
            Decoder::Interval(b) => Arc::new(b.finish()),
            Decoder::Numeric(b, _, _) => Arc::new(b.finish()),
        })
    }
}

fn out_of_range() -> WeirError {
    WeirError::new(SqlState::NUMERIC_OUT_OF_RANGE, "value out of range")
}
