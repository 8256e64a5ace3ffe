//! The `datagen` connector: synthetic rows for
//! `CREATE SOURCE s (...) WITH (connector = 'datagen', ...)`.
//!
//! Row `i`'s values are a pure function of the options, the column and `i`:
//! there is no sequential random state, so a source can resume at any
//! offset after a crash and produce exactly the rows it would have produced.
//!
//! | option | default | meaning |
//! |---|---|---|
//! | `rows_per_second` | `1000` | the rate at which the source emits rows (positive) |
//! | `total_rows` | none | the source ends after this many rows |
//! | `seed` | `0` | the seed every random column's own seed derives from |
//! | `start_time` | when the source was created | the event time of row 0, in Unix microseconds (reproducible event times) |
//! | `fields.<c>.kind` | `timestamp` for timestamp and date columns, otherwise `random` | `sequence`, `random` or `timestamp` |
//!
//! Per kind:
//!
//! - `sequence` (integer columns): `fields.<c>.start` (default `1`) and an
//!   optional inclusive `fields.<c>.end`; row `i` is `start + i`, cycling back
//!   to `start` after `end` (or after the column type's maximum).
//! - `random`: integers uniform in `[fields.<c>.min, fields.<c>.max]`
//!   (defaults `0` and `1000`), floats uniform in `[min, max)` (same
//!   defaults), strings of `fields.<c>.length` characters from `[a-zA-Z0-9]`
//!   (default `10`, at most `1000`) and booleans true half of the time.
//!   `fields.<c>.seed` replaces the seed derived from `seed` and the column's
//!   position.
//! - `timestamp` (timestamp and `Date32` columns): the event time of row `i`,
//!   `start_time + i / rows_per_second` seconds, in the column's unit.
//!
//! Columns are never NULL. [`DatagenSource`] reads a spec as
//! the stream runtime's `Source` (`paced.rs`), paced at `rows_per_second`.

use crate::generated::{draw, event_times, placeholder, MICROS_PER_SECOND};
use crate::paced::{PacedSource, RowGenerator};

pub use crate::paced::{split_rows, BLOCK_ROWS, SPLITS};

/// A `datagen` source as the stream runtime reads it.
pub type DatagenSource = PacedSource<DatagenSpec>;

use std::collections::BTreeMap;
use std::ops::Range;
use std::str::FromStr;
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Date32Array, Float32Array, Float64Array, GenericStringArray,
    Int16Array, Int32Array, Int64Array, OffsetSizeTrait, StringViewArray,
    TimestampMicrosecondArray, TimestampMillisecondArray, TimestampNanosecondArray,
    TimestampSecondArray,
};
use datafusion::arrow::buffer::{BooleanBuffer, Buffer, OffsetBuffer};
use datafusion::arrow::datatypes::{DataType, Field, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};

/// A `datagen` source's options do not fit its columns, or are malformed.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct DatagenError(pub String);

/// The version of the generator new sources get. A source keeps the
/// version it was created with, so its rows never change under it:
///
/// 1. a random string draws once per character;
/// 2. a random string draws once per eight characters (each 64-bit draw
///    read as base-62 digits), about eight times faster.
pub const GENERATOR_VERSION: u32 = 2;

/// The validated options of a `datagen` source together with its schema:
/// everything [`DatagenSpec::generate`] needs to produce any range of rows.
#[derive(Debug, Clone)]
pub struct DatagenSpec {
    schema: SchemaRef,
    rows_per_second: u64,
    total_rows: Option<u64>,
    start_time_micros: i64,
    /// One per field of `schema`, in order.
    columns: Vec<Generator>,
    /// See [`GENERATOR_VERSION`].
    version: u32,
}

/// How one column's values are computed from the row index.
#[derive(Debug, Clone)]
enum Generator {
    /// `start + i % period`: counts up from `start` and cycles after
    /// `period` values.
    Sequence { start: i64, period: u128 },
    /// Uniform in `[min, max]`.
    RandomInt { seed: u64, min: i64, max: i64 },
    /// Uniform in `[min, max)`.
    RandomFloat { seed: u64, min: f64, max: f64 },
    /// `length` characters from [`ALPHABET`].
    RandomString { seed: u64, length: usize },
    /// True half of the time.
    RandomBool { seed: u64 },
    /// The row's event time: `start_time_micros + i / rows_per_second` seconds.
    Timestamp,
}

/// The characters of random strings.
const ALPHABET: &[u8; 62] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/// The longest random string a column may ask for.
const MAX_STRING_LENGTH: usize = 1000;

const MICROS_PER_DAY: i128 = 86_400 * MICROS_PER_SECOND;

impl DatagenSpec {
    /// Validates a source's options against its schema.
    ///
    /// `options` are the `WITH` options except `connector`, keys in lower
    /// case; `fields.<column>.*` keys name columns exactly as the schema
    /// does. `start_time_micros` is the source's creation time (Unix
    /// microseconds), the event time of row 0.
    pub fn new(
        schema: SchemaRef,
        options: &BTreeMap<String, String>,
        start_time_micros: i64,
    ) -> Result<Self, DatagenError> {
        let mut rows_per_second = 1000;
        let mut total_rows = None;
        let mut seed = 0;
        let mut start_time_micros = start_time_micros;
        let mut fields: Vec<FieldOptions> = schema
            .fields()
            .iter()
            .map(|field| FieldOptions {
                column: field.name(),
                options: BTreeMap::new(),
            })
            .collect();
        for (key, value) in options {
            match key.as_str() {
                "rows_per_second" => {
                    rows_per_second = parse(key, value, "a positive integer")?;
                    if rows_per_second == 0 {
                        return Err(DatagenError(format!(
                            "datagen option 'rows_per_second' must be a positive integer, got '{value}'"
                        )));
                    }
                }
                "total_rows" => total_rows = Some(parse(key, value, "a non-negative integer")?),
                "seed" => seed = parse(key, value, "a non-negative integer")?,
                "start_time" => start_time_micros = parse(key, value, "an integer")?,
                _ => {
                    let (column, option) = key
                        .strip_prefix("fields.")
                        .and_then(|rest| rest.rsplit_once('.'))
                        .ok_or_else(|| DatagenError(format!("unknown datagen option '{key}'")))?;
                    let index = schema.index_of(column).map_err(|_| {
                        DatagenError(format!(
                            "datagen option '{key}' names no column of the source"
                        ))
                    })?;
                    fields[index].options.insert(option, value);
                }
            }
        }
        let columns = schema
            .fields()
            .iter()
            .zip(fields)
            .enumerate()
            .map(|(position, (field, options))| {
                Generator::new(field, options, draw(seed, position as u64 + 1))
            })
            .collect::<Result<_, _>>()?;
        Ok(DatagenSpec {
            schema,
            rows_per_second,
            total_rows,
            start_time_micros,
            columns,
            version: GENERATOR_VERSION,
        })
    }

    /// The same source generated by generator `version` (see
    /// [`GENERATOR_VERSION`]): a source created by an older Weir keeps
    /// producing the rows it always did.
    pub fn with_version(mut self, version: u32) -> Result<Self, DatagenError> {
        if !(1..=GENERATOR_VERSION).contains(&version) {
            return Err(DatagenError(format!(
                "datagen generator version {version} is unknown to this server (it knows 1 to {GENERATOR_VERSION})"
            )));
        }
        self.version = version;
        Ok(self)
    }

    /// The source's columns.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The rate at which the source emits rows.
    pub fn rows_per_second(&self) -> u64 {
        self.rows_per_second
    }

    /// The number of rows after which the source ends, if it ends.
    pub fn total_rows(&self) -> Option<u64> {
        self.total_rows
    }

    /// Rows `[from, from + count)` as one batch, cut short at
    /// [`total_rows`](Self::total_rows); `count` may be 0.
    pub fn generate(&self, from: u64, count: usize) -> RecordBatch {
        self.generate_columns(from, count, None)
    }

    /// Like [`generate`](Self::generate), but only the columns `read`
    /// marks are computed; the others hold zeros and empty strings (a view
    /// that does not read a column does not pay for it, and never sees
    /// it).
    pub fn generate_columns(&self, from: u64, count: usize, read: Option<&[bool]>) -> RecordBatch {
        let end = from
            .saturating_add(count as u64)
            .min(self.total_rows.unwrap_or(u64::MAX));
        let rows = from.min(end)..end;
        let len = (end - rows.start) as usize;
        let columns = self
            .columns
            .iter()
            .zip(self.schema.fields())
            .enumerate()
            .map(|(i, (generator, field))| {
                let wanted = read.is_none_or(|r| r.get(i).copied().unwrap_or(true));
                if wanted {
                    self.column(generator, field.data_type(), rows.clone())
                } else {
                    placeholder(field.data_type(), len)
                }
            })
            .collect();
        let options = RecordBatchOptions::new().with_row_count(Some((end - rows.start) as usize));
        RecordBatch::try_new_with_options(Arc::clone(&self.schema), columns, &options)
            .expect("generated columns have the schema's types")
    }

    /// One column's values for `rows`. Each generator computes a row's value
    /// from its index alone, so building a column is a loop over the rows.
    fn column(&self, generator: &Generator, data_type: &DataType, rows: Range<u64>) -> ArrayRef {
        match *generator {
            Generator::Sequence { start, period } => integers(data_type, rows, |i| {
                i128::from(start) + (u128::from(i) % period) as i128
            }),
            Generator::RandomInt { seed, min, max } => {
                integers(data_type, rows, |i| uniform_int(draw(seed, i), min, max))
            }
            Generator::RandomFloat { seed, min, max } => match data_type {
                DataType::Float32 => {
                    let (min, max) = (min as f32, max as f32);
                    Arc::new(Float32Array::from_iter_values(rows.map(|i| {
                        let value = uniform_float(draw(seed, i), min.into(), max.into()) as f32;
                        // Rounding to f32 may reach `max`, which is excluded.
                        if value < max {
                            value.max(min)
                        } else {
                            max.next_down().max(min)
                        }
                    })))
                }
                DataType::Float64 => Arc::new(Float64Array::from_iter_values(
                    rows.map(|i| uniform_float(draw(seed, i), min, max)),
                )),
                _ => unreachable!("DatagenSpec::new checked the column type"),
            },
            Generator::RandomString { seed, length } => {
                let len = (rows.end - rows.start) as usize;
                let mut bytes = vec![0u8; len * length];
                for (i, out) in rows.zip(bytes.chunks_exact_mut(length)) {
                    let row = draw(seed, i);
                    if self.version == 1 {
                        for (j, c) in out.iter_mut().enumerate() {
                            let h = draw(row, j as u64);
                            *c = ALPHABET[(((h >> 32) * ALPHABET.len() as u64) >> 32) as usize];
                        }
                    } else {
                        random_chars(row, out);
                    }
                }
                match data_type {
                    DataType::Utf8 => Arc::new(strings::<i32>(bytes, length, len)),
                    DataType::LargeUtf8 => Arc::new(strings::<i64>(bytes, length, len)),
                    DataType::Utf8View => {
                        Arc::new(StringViewArray::from(&strings::<i32>(bytes, length, len)))
                    }
                    _ => unreachable!("DatagenSpec::new checked the column type"),
                }
            }
            Generator::RandomBool { seed } => {
                let start = rows.start;
                let len = (rows.end - rows.start) as usize;
                Arc::new(BooleanArray::new(
                    BooleanBuffer::collect_bool(len, |j| draw(seed, start + j as u64) >> 63 == 1),
                    None,
                ))
            }
            Generator::Timestamp => {
                let micros = event_times(self.start_time_micros, self.rows_per_second, rows);
                match data_type {
                    DataType::Timestamp(unit, tz) => {
                        let tz = tz.clone();
                        match unit {
                            TimeUnit::Second => Arc::new(
                                TimestampSecondArray::from_iter_values(
                                    micros.map(|m| saturate(m.div_euclid(MICROS_PER_SECOND))),
                                )
                                .with_timezone_opt(tz),
                            ),
                            TimeUnit::Millisecond => Arc::new(
                                TimestampMillisecondArray::from_iter_values(
                                    micros.map(|m| saturate(m.div_euclid(1000))),
                                )
                                .with_timezone_opt(tz),
                            ),
                            TimeUnit::Microsecond => Arc::new(
                                TimestampMicrosecondArray::from_iter_values(micros.map(saturate))
                                    .with_timezone_opt(tz),
                            ),
                            TimeUnit::Nanosecond => Arc::new(
                                TimestampNanosecondArray::from_iter_values(
                                    micros.map(|m| saturate(m * 1000)),
                                )
                                .with_timezone_opt(tz),
                            ),
                        }
                    }
                    DataType::Date32 => Arc::new(Date32Array::from_iter_values(micros.map(|m| {
                        let days = m.div_euclid(MICROS_PER_DAY);
                        days.clamp(i32::MIN.into(), i32::MAX.into()) as i32
                    }))),
                    _ => unreachable!("DatagenSpec::new checked the column type"),
                }
            }
        }
    }
}

impl Generator {
    /// The generator `options` ask for on `field`; `derived_seed` is the
    /// column's seed unless `fields.<c>.seed` gives one.
    fn new(
        field: &Field,
        mut options: FieldOptions,
        derived_seed: u64,
    ) -> Result<Self, DatagenError> {
        let data_type = field.data_type();
        let int_range = match data_type {
            DataType::Int16 => Some((i16::MIN.into(), i16::MAX.into())),
            DataType::Int32 => Some((i32::MIN.into(), i32::MAX.into())),
            DataType::Int64 => Some((i64::MIN, i64::MAX)),
            _ => None,
        };
        let is_time = matches!(data_type, DataType::Timestamp(..) | DataType::Date32);
        let supported = int_range.is_some()
            || is_time
            || matches!(
                data_type,
                DataType::Float32
                    | DataType::Float64
                    | DataType::Utf8
                    | DataType::LargeUtf8
                    | DataType::Utf8View
                    | DataType::Boolean
            );
        if !supported {
            return Err(DatagenError(format!(
                "datagen does not support column '{}' of type {data_type}",
                field.name()
            )));
        }
        let kind = options
            .take::<String>("kind", "'sequence', 'random' or 'timestamp'")?
            .map(|kind| kind.to_ascii_lowercase())
            .unwrap_or_else(|| if is_time { "timestamp" } else { "random" }.into());
        let wrong_kind = || {
            DatagenError(format!(
                "datagen kind '{kind}' does not apply to column '{}' of type {data_type}",
                field.name()
            ))
        };
        let generator = match kind.as_str() {
            "sequence" => {
                let (lowest, highest) = int_range.ok_or_else(wrong_kind)?;
                let start = options.take_int("start", lowest, highest)?.unwrap_or(1);
                let end = options.take_int("end", lowest, highest)?.unwrap_or(highest);
                if end < start {
                    return Err(DatagenError(format!(
                        "datagen option '{}' ({end}) must not be less than '{}' ({start})",
                        options.key("end"),
                        options.key("start"),
                    )));
                }
                Generator::Sequence {
                    start,
                    period: (i128::from(end) - i128::from(start) + 1) as u128,
                }
            }
            "random" => {
                let seed = options
                    .take("seed", "a non-negative integer")?
                    .unwrap_or(derived_seed);
                match data_type {
                    DataType::Int16 | DataType::Int32 | DataType::Int64 => {
                        let (lowest, highest) = int_range.ok_or_else(wrong_kind)?;
                        let min = options.take_int("min", lowest, highest)?.unwrap_or(0);
                        let max = options.take_int("max", lowest, highest)?.unwrap_or(1000);
                        options.check_order(min, max)?;
                        Generator::RandomInt { seed, min, max }
                    }
                    DataType::Float32 | DataType::Float64 => {
                        let min = options.take_float("min", data_type)?.unwrap_or(0.0);
                        let max = options.take_float("max", data_type)?.unwrap_or(1000.0);
                        options.check_order(min, max)?;
                        Generator::RandomFloat { seed, min, max }
                    }
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                        let expected = format!("an integer from 1 to {MAX_STRING_LENGTH}");
                        let length = options.take("length", &expected)?.unwrap_or(10);
                        if !(1..=MAX_STRING_LENGTH).contains(&length) {
                            return Err(DatagenError(format!(
                                "datagen option '{}' must be {expected}, got '{length}'",
                                options.key("length")
                            )));
                        }
                        Generator::RandomString { seed, length }
                    }
                    DataType::Boolean => Generator::RandomBool { seed },
                    _ => return Err(wrong_kind()),
                }
            }
            "timestamp" if is_time => Generator::Timestamp,
            "timestamp" => return Err(wrong_kind()),
            _ => {
                return Err(DatagenError(format!(
                    "datagen option '{}' must be 'sequence', 'random' or 'timestamp', got '{kind}'",
                    options.key("kind")
                )))
            }
        };
        options.finish(&kind, data_type)?;
        Ok(generator)
    }
}

/// One column's `fields.<column>.*` options, removed as its kind reads them
/// so that what is left over is an option the kind does not have.
struct FieldOptions<'a> {
    column: &'a str,
    options: BTreeMap<&'a str, &'a String>,
}

impl FieldOptions<'_> {
    /// The full key of the column's `option`.
    fn key(&self, option: &str) -> String {
        format!("fields.{}.{option}", self.column)
    }

    /// Parses and removes `option`, if given.
    fn take<T: FromStr>(
        &mut self,
        option: &str,
        expected: &str,
    ) -> Result<Option<T>, DatagenError> {
        let key = self.key(option);
        self.options
            .remove(option)
            .map(|value| parse(&key, value, expected))
            .transpose()
    }

    /// An integer option, which must lie in `[lowest, highest]` (the
    /// column type's range).
    fn take_int(
        &mut self,
        option: &str,
        lowest: i64,
        highest: i64,
    ) -> Result<Option<i64>, DatagenError> {
        let expected = format!("an integer from {lowest} to {highest}");
        let value = self.take(option, &expected)?;
        match value {
            Some(value) if !(lowest..=highest).contains(&value) => Err(DatagenError(format!(
                "datagen option '{}' must be {expected}, got '{value}'",
                self.key(option)
            ))),
            _ => Ok(value),
        }
    }

    /// A finite float option that a column of `data_type` can hold.
    fn take_float(
        &mut self,
        option: &str,
        data_type: &DataType,
    ) -> Result<Option<f64>, DatagenError> {
        let expected = format!("a finite number that fits {data_type}");
        let value: Option<f64> = self.take(option, &expected)?;
        match value {
            Some(value)
                if !value.is_finite()
                    || (*data_type == DataType::Float32 && !(value as f32).is_finite()) =>
            {
                Err(DatagenError(format!(
                    "datagen option '{}' must be {expected}, got '{value}'",
                    self.key(option)
                )))
            }
            _ => Ok(value),
        }
    }

    /// Checks that `min` does not exceed `max`.
    fn check_order<T: PartialOrd + std::fmt::Display>(
        &self,
        min: T,
        max: T,
    ) -> Result<(), DatagenError> {
        if min > max {
            return Err(DatagenError(format!(
                "datagen option '{}' ({min}) must not exceed '{}' ({max})",
                self.key("min"),
                self.key("max")
            )));
        }
        Ok(())
    }

    /// Fails on the first option that the column's `kind` did not read.
    fn finish(self, kind: &str, data_type: &DataType) -> Result<(), DatagenError> {
        match self.options.keys().next() {
            Some(option) => Err(DatagenError(format!(
                "unknown datagen option '{}' for column '{}' of kind '{kind}' and type {data_type}",
                self.key(option),
                self.column
            ))),
            None => Ok(()),
        }
    }
}

impl RowGenerator for DatagenSpec {
    fn generate(&self, indexes: Range<u64>, read: Option<&[bool]>) -> RecordBatch {
        let count = (indexes.end - indexes.start) as usize;
        self.generate_columns(indexes.start, count, read)
    }

    fn per_second(&self) -> u64 {
        self.rows_per_second
    }

    fn end(&self) -> Option<u64> {
        self.total_rows
    }
}

/// Parses option `key`'s `value`, described as `expected` if it does not parse.
fn parse<T: FromStr>(key: &str, value: &str, expected: &str) -> Result<T, DatagenError> {
    value.parse().map_err(|_| {
        DatagenError(format!(
            "datagen option '{key}' must be {expected}, got '{value}'"
        ))
    })
}

/// An integer column of `data_type` whose row `i` is `value(i)`, which the
/// options guarantee fits the type.
fn integers(data_type: &DataType, rows: Range<u64>, value: impl Fn(u64) -> i128) -> ArrayRef {
    match data_type {
        DataType::Int16 => Arc::new(Int16Array::from_iter_values(rows.map(|i| value(i) as i16))),
        DataType::Int32 => Arc::new(Int32Array::from_iter_values(rows.map(|i| value(i) as i32))),
        DataType::Int64 => Arc::new(Int64Array::from_iter_values(rows.map(|i| value(i) as i64))),
        _ => unreachable!("DatagenSpec::new checked the column type"),
    }
}

/// `len` strings of `length` bytes each, laid end to end in `bytes`.
fn strings<O: OffsetSizeTrait>(bytes: Vec<u8>, length: usize, len: usize) -> GenericStringArray<O> {
    debug_assert!(bytes.iter().all(|b| ALPHABET.contains(b)));
    let offsets = OffsetBuffer::from_lengths(std::iter::repeat_n(length, len));
    // SAFETY: every byte is from ALPHABET, which is ASCII, so every string
    // is valid UTF-8; the offsets are `len` equal lengths covering `bytes`
    // exactly. (Checking it again cost a few percent of a source's rows.)
    unsafe { GenericStringArray::new_unchecked(offsets, Buffer::from_vec(bytes), None) }
}

/// Characters a draw of [`random_chars`] yields: eight base-62 digits use
/// 48 of its 64 bits.
const CHARS_PER_DRAW: usize = 8;

/// `length` characters from [`ALPHABET`] for the row whose draw is `row`:
/// each 64-bit draw, read as a fraction, yields its first eight base-62
/// digits (multiply by 62: the high word is the digit, the low word the
/// rest).
fn random_chars(row: u64, out: &mut [u8]) {
    for (block, chars) in out.chunks_mut(CHARS_PER_DRAW).enumerate() {
        let mut h = draw(row, block as u64);
        for c in chars {
            let wide = u128::from(h) * ALPHABET.len() as u128;
            *c = ALPHABET[(wide >> 64) as usize];
            h = wide as u64;
        }
    }
}

/// `h` scaled onto `[min, max]` by a widening multiply.
fn uniform_int(h: u64, min: i64, max: i64) -> i128 {
    let span = (i128::from(max) - i128::from(min) + 1) as u128;
    i128::from(min) + ((u128::from(h) * span) >> 64) as i128
}

/// `h` scaled onto `[min, max)`, or just `min` when `min == max`.
fn uniform_float(h: u64, min: f64, max: f64) -> f64 {
    let unit = (h >> 11) as f64 / (1u64 << 53) as f64;
    // Interpolating this way cannot overflow, even for min = -f64::MAX and
    // max = f64::MAX; rounding may still land on `max`, which is excluded.
    let value = min * (1.0 - unit) + max * unit;
    if value < max {
        value.max(min)
    } else {
        max.next_down().max(min)
    }
}

/// `value` clamped into `i64`.
fn saturate(value: i128) -> i64 {
    value.clamp(i64::MIN.into(), i64::MAX.into()) as i64
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Array, AsArray};
    use datafusion::arrow::datatypes::{
        Float64Type, Int16Type, Int32Type, Int64Type, Schema, TimestampNanosecondType,
    };

    fn schema(fields: &[(&str, DataType)]) -> SchemaRef {
        Arc::new(Schema::new(
            fields
                .iter()
                .map(|(name, data_type)| Field::new(*name, data_type.clone(), true))
                .collect::<Vec<_>>(),
        ))
    }

    fn options(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect()
    }

    fn spec(fields: &[(&str, DataType)], pairs: &[(&str, &str)]) -> DatagenSpec {
        DatagenSpec::new(schema(fields), &options(pairs), 1_700_000_000_000_000).unwrap()
    }

    fn error(fields: &[(&str, DataType)], pairs: &[(&str, &str)]) -> String {
        DatagenSpec::new(schema(fields), &options(pairs), 0)
            .unwrap_err()
            .to_string()
    }

    fn every_kind() -> Vec<(&'static str, DataType)> {
        vec![
            ("seq", DataType::Int64),
            ("cyc", DataType::Int16),
            ("small", DataType::Int16),
            ("n", DataType::Int32),
            ("wide", DataType::Int64),
            ("f", DataType::Float32),
            ("d", DataType::Float64),
            ("s", DataType::Utf8),
            ("ls", DataType::LargeUtf8),
            ("vs", DataType::Utf8View),
            ("b", DataType::Boolean),
            (
                "ts",
                DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
            ),
            ("tsec", DataType::Timestamp(TimeUnit::Second, None)),
            ("tms", DataType::Timestamp(TimeUnit::Millisecond, None)),
            ("tus", DataType::Timestamp(TimeUnit::Microsecond, None)),
            ("day", DataType::Date32),
        ]
    }

    fn every_kind_options() -> Vec<(&'static str, &'static str)> {
        vec![
            ("seed", "42"),
            ("rows_per_second", "7"),
            ("fields.seq.kind", "sequence"),
            ("fields.cyc.kind", "sequence"),
            ("fields.cyc.start", "-3"),
            ("fields.cyc.end", "3"),
            ("fields.small.min", "-5"),
            ("fields.small.max", "5"),
            ("fields.wide.min", "-9223372036854775808"),
            ("fields.wide.max", "9223372036854775807"),
            ("fields.d.seed", "9"),
            ("fields.s.length", "7"),
        ]
    }

    #[test]
    fn any_range_equals_the_same_rows_of_a_longer_run() {
        let spec = spec(&every_kind(), &every_kind_options());
        let whole = spec.generate(0, 200);
        let part = spec.generate(100, 50);
        assert_eq!(part.num_rows(), 50);
        assert_eq!(part, whole.slice(100, 50));
        // And a second spec built from the same options agrees.
        let again = self::spec(&every_kind(), &every_kind_options());
        assert_eq!(again.generate(100, 50), part);
    }

    #[test]
    fn columns_are_never_null() {
        let batch = spec(&every_kind(), &every_kind_options()).generate(0, 100);
        for column in batch.columns() {
            assert_eq!(column.null_count(), 0);
        }
    }

    #[test]
    fn sequences_count_up_and_cycle() {
        let spec = spec(
            &[
                ("a", DataType::Int64),
                ("b", DataType::Int32),
                ("c", DataType::Int16),
            ],
            &[
                ("fields.a.kind", "sequence"),
                ("fields.b.kind", "sequence"),
                ("fields.b.start", "10"),
                ("fields.b.end", "12"),
                ("fields.c.kind", "sequence"),
                ("fields.c.start", "32766"),
            ],
        );
        let batch = spec.generate(0, 7);
        let a = batch.column(0).as_primitive::<Int64Type>();
        assert_eq!(a.values().to_vec(), vec![1, 2, 3, 4, 5, 6, 7]);
        let b = batch.column(1).as_primitive::<Int32Type>();
        assert_eq!(b.values().to_vec(), vec![10, 11, 12, 10, 11, 12, 10]);
        // Without an end, a sequence cycles after the type's maximum.
        let c = batch.column(2).as_primitive::<Int16Type>();
        assert_eq!(c.values()[..3], [32766, 32767, 32766]);
        // Far along, the value is still start + i.
        let far = spec.generate(1_000_000_000_000, 1);
        assert_eq!(
            far.column(0).as_primitive::<Int64Type>().value(0),
            1_000_000_000_001
        );
    }

    #[test]
    fn random_values_stay_in_range() {
        let spec = spec(
            &[
                ("i", DataType::Int32),
                ("f", DataType::Float64),
                ("g", DataType::Float32),
                ("w", DataType::Int64),
                ("b", DataType::Boolean),
            ],
            &[
                ("fields.i.min", "-3"),
                ("fields.i.max", "3"),
                ("fields.f.min", "0.5"),
                ("fields.f.max", "0.75"),
                ("fields.g.min", "1"),
                ("fields.g.max", "1.0000001"),
                ("fields.w.min", "-9223372036854775808"),
                ("fields.w.max", "9223372036854775807"),
            ],
        );
        let batch = spec.generate(0, 10_000);
        let ints = batch.column(0).as_primitive::<Int32Type>();
        assert!(ints.values().iter().all(|v| (-3..=3).contains(v)));
        // Every value of a small range shows up.
        for v in -3..=3 {
            assert!(ints.values().contains(&v), "{v} never drawn");
        }
        let floats = batch.column(1).as_primitive::<Float64Type>();
        assert!(floats.values().iter().all(|v| (0.5..0.75).contains(v)));
        let narrow = batch
            .column(2)
            .as_any()
            .downcast_ref::<Float32Array>()
            .unwrap();
        assert!(narrow
            .values()
            .iter()
            .all(|v| (1.0..1.0000001f32).contains(v)));
        let wide = batch.column(3).as_primitive::<Int64Type>();
        assert!(wide.values().iter().any(|v| *v < 0) && wide.values().iter().any(|v| *v > 0));
        let trues = batch.column(4).as_boolean().true_count();
        assert!((4_500..5_500).contains(&trues), "{trues} of 10000 true");
    }

    #[test]
    fn column_seeds_are_independent_and_overridable() {
        let fields = [("a", DataType::Int64), ("b", DataType::Int64)];
        let same = spec(&fields, &[]).generate(0, 20);
        assert_ne!(same.column(0), same.column(1));
        let pinned =
            spec(&fields, &[("fields.a.seed", "5"), ("fields.b.seed", "5")]).generate(0, 20);
        assert_eq!(pinned.column(0), pinned.column(1));
        let reseeded = spec(&fields, &[("seed", "1")]).generate(0, 20);
        assert_ne!(reseeded.column(0), same.column(0));
    }

    #[test]
    fn strings_have_the_asked_length_and_alphabet() {
        let spec = spec(
            &[("s", DataType::Utf8), ("t", DataType::Utf8View)],
            &[("fields.s.length", "13")],
        );
        let batch = spec.generate(5, 100);
        let s = batch.column(0).as_string::<i32>();
        for value in s.iter().flatten() {
            assert_eq!(value.len(), 13);
            assert!(value.bytes().all(|c| c.is_ascii_alphanumeric()));
        }
        let t = batch.column(1).as_string_view();
        assert!(t.iter().flatten().all(|value| value.len() == 10));
        assert_ne!(s.value(0), s.value(1));
    }

    #[test]
    fn each_generator_version_keeps_its_strings() {
        let fields = [("s", DataType::Utf8)];
        let v1 = spec(&fields, &[])
            .with_version(1)
            .unwrap()
            .generate(0, 1000);
        let v2 = spec(&fields, &[]).generate(0, 1000);
        assert_ne!(v1.column(0), v2.column(0), "the versions differ");
        // Version 1 strings as the first version of this generator wrote
        // them; a source created then still produces exactly these.
        assert_eq!(v1.column(0).as_string::<i32>().value(0), "muqqDLAfmC");
        // Every character of the alphabet turns up about equally often.
        let mut counts = [0usize; 62];
        for value in v2.column(0).as_string::<i32>().iter().flatten() {
            for byte in value.bytes() {
                counts[ALPHABET.iter().position(|&a| a == byte).unwrap()] += 1;
            }
        }
        let (low, high) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        assert!(*low > 100 && *high < 230, "{counts:?}");
        assert!(spec(&fields, &[]).with_version(3).is_err());
    }

    #[test]
    fn columns_not_read_are_zeros_and_the_others_unchanged() {
        let fields = [("a", DataType::Int64), ("s", DataType::Utf8)];
        let all = spec(&fields, &[]).generate(7, 50);
        let some = spec(&fields, &[]).generate_columns(7, 50, Some(&[true, false]));
        assert_eq!(all.column(0), some.column(0));
        let unread = some.column(1).as_string::<i32>();
        assert_eq!(unread.null_count(), 0, "sources' columns are never NULL");
        assert!(unread.iter().all(|v| v == Some("")));
        let timestamps = [("t", DataType::Timestamp(TimeUnit::Microsecond, None))];
        let zeros = spec(&timestamps, &[]).generate_columns(0, 3, Some(&[false]));
        assert_eq!(zeros.column(0).null_count(), 0);
    }

    #[test]
    fn stepped_event_times_equal_the_formula() {
        for rate in [1, 3, 7, 999_983, 1_000_000, 1_000_001, 100_000_000] {
            for from in [0, 5, 123_456_789] {
                let stepped: Vec<i128> = event_times(-42, rate, from..from + 1000).collect();
                let formula: Vec<i128> = (from..from + 1000)
                    .map(|i| -42 + i128::from(i) * MICROS_PER_SECOND / i128::from(rate))
                    .collect();
                assert_eq!(stepped, formula, "rate {rate}, from {from}");
            }
        }
    }

    #[test]
    fn timestamps_follow_the_rate() {
        let start = 1_700_000_000_000_000;
        let spec = DatagenSpec::new(
            schema(&[
                ("ts", DataType::Timestamp(TimeUnit::Nanosecond, None)),
                ("day", DataType::Date32),
            ]),
            &options(&[("rows_per_second", "4")]),
            start,
        )
        .unwrap();
        let batch = spec.generate(10, 3);
        let ts = batch.column(0).as_primitive::<TimestampNanosecondType>();
        let base = (start + 10 * 250_000) * 1000;
        assert_eq!(
            ts.values().to_vec(),
            vec![base, base + 250_000_000, base + 500_000_000]
        );
        let days = batch
            .column(1)
            .as_any()
            .downcast_ref::<Date32Array>()
            .unwrap();
        assert_eq!(days.value(0), (start / 86_400_000_000) as i32);
    }

    #[test]
    fn timestamps_keep_the_column_time_zone() {
        let data_type = DataType::Timestamp(TimeUnit::Millisecond, Some("+02:00".into()));
        let batch = spec(&[("ts", data_type.clone())], &[]).generate(0, 2);
        assert_eq!(batch.column(0).data_type(), &data_type);
    }

    #[test]
    fn total_rows_ends_the_source() {
        let spec = spec(
            &[("a", DataType::Int64)],
            &[("total_rows", "10"), ("fields.a.kind", "sequence")],
        );
        assert_eq!(spec.total_rows(), Some(10));
        assert_eq!(spec.rows_per_second(), 1000);
        let batch = spec.generate(8, 5);
        assert_eq!(
            batch
                .column(0)
                .as_primitive::<Int64Type>()
                .values()
                .to_vec(),
            vec![9, 10]
        );
        assert_eq!(spec.generate(10, 5).num_rows(), 0);
        assert_eq!(spec.generate(50, 5).num_rows(), 0);
        assert_eq!(spec.generate(0, 0).num_rows(), 0);
    }

    #[test]
    fn a_source_without_columns_still_counts_rows() {
        let spec = spec(&[], &[]);
        assert_eq!(spec.generate(0, 3).num_rows(), 3);
    }

    #[test]
    fn bad_options_are_named() {
        let ints = [("a", DataType::Int32)];
        let text = [("s", DataType::Utf8)];
        for (fields, pairs, message) in [
            (
                &ints[..],
                &[("colour", "red")][..],
                "unknown datagen option 'colour'",
            ),
            (
                &ints,
                &[("fields.b.kind", "random")],
                "'fields.b.kind' names no column",
            ),
            (
                &ints,
                &[("fields.A.kind", "random")],
                "'fields.A.kind' names no column",
            ),
            (
                &ints,
                &[("fields.a.length", "3")],
                "unknown datagen option 'fields.a.length'",
            ),
            (
                &ints,
                &[("fields.a.kind", "sequence"), ("fields.a.min", "3")],
                "unknown datagen option 'fields.a.min'",
            ),
            (
                &ints,
                &[("fields.a.min", "5"), ("fields.a.max", "4")],
                "'fields.a.min' (5) must not exceed 'fields.a.max' (4)",
            ),
            (
                &ints,
                &[
                    ("fields.a.kind", "sequence"),
                    ("fields.a.start", "5"),
                    ("fields.a.end", "4"),
                ],
                "'fields.a.end' (4) must not be less than 'fields.a.start' (5)",
            ),
            (
                &ints,
                &[("fields.a.max", "3000000000")],
                "'fields.a.max' must be an integer from",
            ),
            (
                &ints,
                &[("fields.a.kind", "timestamp")],
                "kind 'timestamp' does not apply to column 'a'",
            ),
            (
                &ints,
                &[("fields.a.kind", "zigzag")],
                "'fields.a.kind' must be 'sequence', 'random' or 'timestamp', got 'zigzag'",
            ),
            (
                &text,
                &[("fields.s.kind", "sequence")],
                "kind 'sequence' does not apply to column 's' of type Utf8",
            ),
            (
                &text,
                &[("fields.s.length", "0")],
                "'fields.s.length' must be an integer from 1 to 1000",
            ),
            (
                &ints,
                &[("rows_per_second", "0")],
                "'rows_per_second' must be a positive integer, got '0'",
            ),
            (
                &ints,
                &[("rows_per_second", "fast")],
                "'rows_per_second' must be a positive integer",
            ),
            (
                &ints,
                &[("total_rows", "-1")],
                "'total_rows' must be a non-negative integer",
            ),
            (
                &ints,
                &[("seed", "x")],
                "'seed' must be a non-negative integer",
            ),
        ] {
            let got = error(fields, pairs);
            assert!(got.contains(message), "{pairs:?}: {got}");
        }
        let floats = [("f", DataType::Float32)];
        let got = error(&floats, &[("fields.f.max", "1e300")]);
        assert!(
            got.contains("'fields.f.max' must be a finite number that fits Float32"),
            "{got}"
        );
        let got = error(&floats, &[("fields.f.min", "2"), ("fields.f.max", "1")]);
        assert!(
            got.contains("'fields.f.min' (2) must not exceed 'fields.f.max' (1)"),
            "{got}"
        );
        let list = DataType::List(Arc::new(Field::new_list_field(DataType::Int32, true)));
        let got = error(&[("l", list)], &[]);
        assert!(
            got.contains("does not support column 'l' of type List"),
            "{got}"
        );
        let got = error(&[("d", DataType::Decimal128(10, 2))], &[]);
        assert!(
            got.contains("does not support column 'd' of type Decimal128(10, 2)"),
            "{got}"
        );
    }
}
