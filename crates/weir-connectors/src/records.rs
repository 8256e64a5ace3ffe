//! Record values to rows, for the connectors that read records (Kafka
//! values, lines of files): JSON objects or CSV lines, decoded a batch of
//! records at a time by arrow-json's and arrow-csv's decoders; and what
//! happens to a record that does not parse.
//!
//! A batch's values are decoded together, one value per row. When that
//! fails (a value that does not parse, or one that is not exactly one
//! row), each value is decoded alone to find those that do not parse,
//! which `bad_records = 'skip'` leaves out and counts and `'fail'`
//! reports; then the rest are decoded together again. So the cost of a
//! bad record falls on its own batch only.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::json::ReaderBuilder as JsonReaderBuilder;
use datafusion::arrow::record_batch::RecordBatch;

/// How a record's value is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One JSON object per record, its fields named as the columns
    /// (fields no column names are ignored; missing ones are NULL).
    Json,
    /// One CSV line per record, the columns in order, without a header.
    Csv {
        /// The field delimiter.
        delimiter: u8,
    },
}

/// Record values gathered for one batch: each value followed by a
/// newline, so that the whole buffer is one input for a decoder.
#[derive(Debug, Default)]
pub struct Values {
    bytes: Vec<u8>,
    /// Where each value ends in `bytes` (after its newline).
    ends: Vec<usize>,
}

impl Values {
    /// Adds one record's value (a CSV line's own line break is dropped).
    pub fn push(&mut self, value: &[u8]) {
        let value = value.strip_suffix(b"\n").unwrap_or(value);
        let value = value.strip_suffix(b"\r").unwrap_or(value);
        self.bytes.extend_from_slice(value);
        self.bytes.push(b'\n');
        self.ends.push(self.bytes.len());
    }

    /// How many values it holds.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Empties it, keeping its memory.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }

    /// Value `i`, with its newline.
    fn value(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }
}

/// What to do with a record that does not parse (`bad_records`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadRecords {
    /// The view reading the source fails with the record's error.
    Fail,
    /// The record is left out and counted.
    Skip,
}

impl BadRecords {
    /// Reads `bad_records = 'fail' | 'skip'`.
    pub fn parse(value: &str) -> Result<Self, String> {
        match value.to_ascii_lowercase().as_str() {
            "fail" => Ok(BadRecords::Fail),
            "skip" => Ok(BadRecords::Skip),
            _ => Err(format!(
                "bad_records = '{value}': use 'fail' (the default) or 'skip'"
            )),
        }
    }
}

/// Records of a source that did not parse, since the server started.
#[derive(Debug, Default)]
pub struct BadRecordCount {
    /// How many.
    pub count: AtomicU64,
    /// Where the last one was and why it did not parse.
    pub last_error: Mutex<Option<String>>,
}

impl BadRecordCount {
    /// The count of source `id` (made on first use).
    pub fn of_source(id: u64) -> Arc<Self> {
        registry()
            .lock()
            .expect("bad record registry")
            .entry(id)
            .or_default()
            .clone()
    }

    /// Counts `bad`, where `place` says where a record (by its index among
    /// the batch's values) came from.
    pub fn add(&self, bad: &[BadRecord], place: impl Fn(usize) -> String) {
        let Some(last) = bad.last() else { return };
        self.count.fetch_add(bad.len() as u64, Ordering::Relaxed);
        *self.last_error.lock().expect("bad record lock") =
            Some(format!("{}: {}", place(last.index), last.error));
    }
}

/// The bad-record count of every source that reads records, by source id.
pub fn bad_record_counts() -> BTreeMap<u64, Arc<BadRecordCount>> {
    registry().lock().expect("bad record registry").clone()
}

fn registry() -> &'static Mutex<BTreeMap<u64, Arc<BadRecordCount>>> {
    static COUNTS: OnceLock<Mutex<BTreeMap<u64, Arc<BadRecordCount>>>> = OnceLock::new();
    COUNTS.get_or_init(Default::default)
}

/// A value that did not parse.
#[derive(Debug, Clone, PartialEq)]
pub struct BadRecord {
    /// Its index among the batch's values.
    pub index: usize,
    /// Why.
    pub error: String,
}

/// Decodes record values into rows of one schema.
#[derive(Debug, Clone)]
pub struct Decoder {
    format: Format,
    schema: SchemaRef,
}

impl Decoder {
    /// A decoder of `format` into rows of `schema`.
    pub fn new(format: Format, schema: SchemaRef) -> Self {
        Decoder { format, schema }
    }

    /// Decodes `values`: the rows of those that parse, in order, and the
    /// values that do not.
    pub fn decode(&self, values: &Values) -> (RecordBatch, Vec<BadRecord>) {
        if let Ok(rows) = self.decode_exact(&values.bytes, values.len()) {
            return (rows, Vec::new());
        }
        // Find the values that do not parse, one at a time.
        let mut good = Values::default();
        let mut bad = Vec::new();
        for index in 0..values.len() {
            let value = values.value(index);
            match self.decode_exact(value, 1) {
                Ok(_) => {
                    good.bytes.extend_from_slice(value);
                    good.ends.push(good.bytes.len());
                }
                Err(error) => bad.push(BadRecord { index, error }),
            }
        }
        let rows = self
            .decode_exact(&good.bytes, good.len())
            .unwrap_or_else(|_| RecordBatch::new_empty(self.schema.clone()));
        (rows, bad)
    }

    /// The rows of `bytes`, which must be exactly `records` rows.
    fn decode_exact(&self, bytes: &[u8], records: usize) -> Result<RecordBatch, String> {
        let rows = match self.format {
            Format::Json => self.decode_json(bytes, records),
            Format::Csv { delimiter } => self.decode_csv(bytes, records, delimiter),
        }?;
        if rows.num_rows() != records {
            return Err(match records {
                1 if rows.num_rows() == 0 => "the record holds no value".to_owned(),
                1 => format!("the record holds {} values, not one", rows.num_rows()),
                _ => "the records do not hold one value each".to_owned(),
            });
        }
        Ok(rows)
    }

    fn decode_json(&self, bytes: &[u8], records: usize) -> Result<RecordBatch, String> {
        let mut decoder = JsonReaderBuilder::new(self.schema.clone())
            .with_batch_size(records.max(1))
            .with_coerce_primitive(true)
            .build_decoder()
            .map_err(|e| e.to_string())?;
        self.drain(&mut decoder, bytes)
    }

    fn decode_csv(
        &self,
        bytes: &[u8],
        records: usize,
        delimiter: u8,
    ) -> Result<RecordBatch, String> {
        let mut decoder = datafusion::arrow::csv::ReaderBuilder::new(self.schema.clone())
            .with_header(false)
            .with_delimiter(delimiter)
            .with_batch_size(records.max(1))
            .build_decoder();
        self.drain(&mut decoder, bytes)
    }

    /// Feeds all of `bytes` to `decoder` (taking each batch it fills),
    /// marks the input's end, and returns the rows as one batch.
    fn drain(&self, decoder: &mut impl PushDecoder, bytes: &[u8]) -> Result<RecordBatch, String> {
        let mut batches = Vec::new();
        let mut rest = bytes;
        while !rest.is_empty() {
            let read = decoder.decode(rest).map_err(|e| e.to_string())?;
            rest = &rest[read..];
            if read == 0 {
                // A full batch: take it before reading on.
                batches.extend(decoder.flush().map_err(|e| e.to_string())?);
            }
        }
        // An empty input marks the end (a last CSV line without a break).
        decoder.decode(&[]).map_err(|e| e.to_string())?;
        batches.extend(decoder.flush().map_err(|e| e.to_string())?);
        concat_batches(&self.schema, &batches).map_err(|e| e.to_string())
    }
}

/// arrow-json's and arrow-csv's push decoders, which share a shape but
/// no trait.
trait PushDecoder {
    fn decode(&mut self, bytes: &[u8]) -> Result<usize, ArrowError>;
    fn flush(&mut self) -> Result<Option<RecordBatch>, ArrowError>;
}

impl PushDecoder for datafusion::arrow::json::reader::Decoder {
    fn decode(&mut self, bytes: &[u8]) -> Result<usize, ArrowError> {
        self.decode(bytes)
    }

    fn flush(&mut self) -> Result<Option<RecordBatch>, ArrowError> {
        self.flush()
    }
}

impl PushDecoder for datafusion::arrow::csv::reader::Decoder {
    fn decode(&mut self, bytes: &[u8]) -> Result<usize, ArrowError> {
        self.decode(bytes)
    }

    fn flush(&mut self) -> Result<Option<RecordBatch>, ArrowError> {
        self.flush()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Array, Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
        ]))
    }

    fn values(records: &[&str]) -> Values {
        let mut values = Values::default();
        for record in records {
            values.push(record.as_bytes());
        }
        values
    }

    fn ids(rows: &RecordBatch) -> Vec<Option<i64>> {
        let ids = rows
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        (0..ids.len())
            .map(|i| ids.is_valid(i).then(|| ids.value(i)))
            .collect()
    }

    #[test]
    fn json_objects_become_rows() {
        let decoder = Decoder::new(Format::Json, schema());
        let (rows, bad) = decoder.decode(&values(&[
            r#"{"id": 1, "name": "a"}"#,
            r#"{"name": "b", "extra": true}"#,
            r#"{"id": "3", "name": 4}"#,
        ]));
        assert!(bad.is_empty(), "{bad:?}");
        assert_eq!(ids(&rows), vec![Some(1), None, Some(3)]);
        let names = rows
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!(names.value(2), "4");
    }

    #[test]
    fn bad_json_records_are_found_one_by_one() {
        let decoder = Decoder::new(Format::Json, schema());
        let (rows, bad) = decoder.decode(&values(&[
            r#"{"id": 1}"#,
            r#"{"id": "#,
            r#"{"id": 2}"#,
            r#"{"id": "x"}"#,
            r#"{"id": 3} {"id": 4}"#,
            "",
            r#"{"id": 5}"#,
        ]));
        assert_eq!(ids(&rows), vec![Some(1), Some(2), Some(5)]);
        let indexes: Vec<usize> = bad.iter().map(|b| b.index).collect();
        assert_eq!(indexes, vec![1, 3, 4, 5], "{bad:?}");
        assert!(bad[3].error.contains("no value"), "{bad:?}");
    }

    #[test]
    fn csv_lines_become_rows() {
        let decoder = Decoder::new(Format::Csv { delimiter: b',' }, schema());
        let (rows, bad) = decoder.decode(&values(&["1,a\n", "2,\"b,c\"", "x,y", "4"]));
        assert_eq!(ids(&rows), vec![Some(1), Some(2)]);
        assert_eq!(bad.iter().map(|b| b.index).collect::<Vec<_>>(), vec![2, 3]);
        let names = rows
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!(names.value(1), "b,c");
    }
}
