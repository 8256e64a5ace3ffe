//! Record values to rows, for the connectors that read records (Kafka
//! values, lines of files): JSON objects, CSV lines or Avro datums,
//! decoded a batch of records at a time by arrow-json's, arrow-csv's and
//! arrow-avro's decoders; and what happens to a record that does not
//! parse.
//!
//! A batch's values are decoded together, one value per row. When that
//! fails (a value that does not parse, or one that is not exactly one
//! row), each value is decoded alone to find those that do not parse,
//! which `bad_records = 'skip'` leaves out and counts, `'dead_letter'`
//! also keeps (`dead_letters.rs`) and `'fail'` reports; then the rest are decoded together again. So the cost of a
//! bad record falls on its own batch only.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use datafusion::arrow::array::{new_null_array, ArrayRef};
use datafusion::arrow::compute::{cast_with_options, concat_batches, CastOptions};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::json::ReaderBuilder as JsonReaderBuilder;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::DataFusionError;

use crate::avro::AvroFormat;
use crate::dead_letters::{DeadLetter, DeadLetterBox, RecordPlace};

/// How a record's value is encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Format {
    /// One JSON object per record, its fields named as the columns
    /// (fields no column names are ignored; missing ones are NULL).
    Json,
    /// One CSV line per record, the columns in order, without a header.
    Csv {
        /// The field delimiter.
        delimiter: u8,
    },
    /// One Avro datum per record, its fields taken by name as JSON's are
    /// (and cast to the columns' types).
    Avro(Arc<AvroFormat>),
}

/// Record values gathered for one batch: each value followed by a
/// newline, so that the whole buffer is one input for a decoder.
#[derive(Debug, Default)]
pub struct Values {
    bytes: Vec<u8>,
    /// Where each value ends in `bytes` (after its newline).
    ends: Vec<usize>,
    /// The length of each binary value's frame; empty for text values
    /// (each followed by a newline of ours).
    frames: Vec<usize>,
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

    /// Adds one binary value behind `frame`, as is.
    fn push_framed(&mut self, frame: &[u8], value: &[u8]) {
        self.frames.push(frame.len());
        self.bytes.extend_from_slice(frame);
        self.bytes.extend_from_slice(value);
        self.ends.push(self.bytes.len());
    }

    /// Empties it, keeping its memory.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
        self.frames.clear();
    }

    /// Value `i`, with its newline (or frame).
    fn value(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }

    /// Record `i` as it is decoded: a text value without the newline it
    /// gets here, a binary one without the frame it gets here (an Avro
    /// datum, without a Confluent header it came with).
    pub fn record(&self, i: usize) -> &[u8] {
        let value = self.value(i);
        match self.frames.get(i) {
            Some(&frame) => &value[frame..],
            None => value.strip_suffix(b"\n").unwrap_or(value),
        }
    }
}

/// What to do with a record that does not parse (`bad_records`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadRecords {
    /// The view reading the source fails with the record's error.
    Fail,
    /// The record is left out and counted.
    Skip,
    /// The record is left out, counted and kept as a dead letter.
    DeadLetter,
}

impl BadRecords {
    /// Reads `bad_records = 'fail' | 'skip'`.
    pub fn parse(value: &str) -> Result<Self, String> {
        match value.to_ascii_lowercase().as_str() {
            "fail" => Ok(BadRecords::Fail),
            "skip" => Ok(BadRecords::Skip),
            "dead_letter" => Ok(BadRecords::DeadLetter),
            _ => Err(format!(
                "bad_records = '{value}': use 'fail' (the default), 'skip' or 'dead_letter'"
            )),
        }
    }
}

/// What a source's readers do with records that do not parse: the
/// option, the source's count, and where dead letters go.
#[derive(Debug, Clone)]
pub struct Rejects {
    mode: BadRecords,
    /// What the source reads, before a record's place in errors
    /// (`Kafka topic "t" `; empty where the place says it).
    subject: String,
    count: Arc<BadRecordCount>,
    letters: Option<DeadLetterBox>,
}

impl Rejects {
    /// Source `id`'s, reading `subject`, with `mode`; `letters` is needed
    /// for dead letters.
    pub fn new(
        id: u64,
        subject: String,
        mode: BadRecords,
        letters: Option<DeadLetterBox>,
    ) -> Result<Self, String> {
        if mode == BadRecords::DeadLetter && letters.is_none() {
            return Err(
                "bad_records = 'dead_letter' keeps records in the server's state store, \
                 which this process does not write: a view over such a source cannot run in \
                 a cluster"
                    .into(),
            );
        }
        Ok(Rejects {
            mode,
            subject,
            count: BadRecordCount::of_source(id),
            letters: letters.filter(|_| mode == BadRecords::DeadLetter),
        })
    }

    /// Handles `bad` (records of `values`) as `bad_records` says: fails
    /// with the first one, or counts them and, with dead letters, stores
    /// them before returning. `place(i)` says where record `i` was.
    pub async fn handle(
        &self,
        values: &Values,
        bad: &[BadRecord],
        place: impl Fn(usize) -> RecordPlace,
    ) -> Result<(), DataFusionError> {
        let Some(first) = bad.first() else {
            return Ok(());
        };
        if self.mode == BadRecords::Fail {
            return Err(DataFusionError::Execution(format!(
                "{}{}: the record does not parse: {} \
                 (bad_records = 'skip' or 'dead_letter' leaves such records out)",
                self.subject,
                place(first.index).text,
                first.error
            )));
        }
        self.count.add(bad, |i| place(i).text);
        let Some(letters) = &self.letters else {
            return Ok(());
        };
        let kept = bad
            .iter()
            .map(|b| {
                let place = place(b.index);
                DeadLetter {
                    key: place.key,
                    place: place.text,
                    error: b.error.clone(),
                    value: values.record(b.index).to_vec(),
                    passed_at: Some((place.split, place.passed_at)),
                }
            })
            .collect();
        letters
            .put(kept)
            .await
            .map_err(|e| DataFusionError::Execution(format!("storing dead letters: {e}")))
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

    /// Adds one record's value to `values`, as this format takes it.
    pub fn push(&self, values: &mut Values, value: &[u8]) {
        match &self.format {
            Format::Avro(avro) => match avro.framed(value) {
                Some((frame, datum)) => values.push_framed(frame, datum),
                None => values.push_framed(&[], value),
            },
            Format::Json | Format::Csv { .. } => values.push(value),
        }
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
        let rows = match &self.format {
            Format::Json => self.decode_json(bytes, records),
            Format::Csv { delimiter } => self.decode_csv(bytes, records, *delimiter),
            Format::Avro(avro) => self.decode_avro(avro, bytes, records),
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
        self.drain(&mut decoder, bytes, &self.schema)
    }

    /// Avro datums into the writer schema's columns, then the source's.
    fn decode_avro(
        &self,
        avro: &AvroFormat,
        bytes: &[u8],
        records: usize,
    ) -> Result<RecordBatch, String> {
        let mut decoder = avro.decoder(records.max(1))?;
        let written = decoder.schema();
        let rows = self.drain(&mut decoder, bytes, &written)?;
        conform(&self.schema, &rows)
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
        self.drain(&mut decoder, bytes, &self.schema)
    }

    /// Feeds all of `bytes` to `decoder` (taking each batch it fills),
    /// marks the input's end, and returns the rows, of `schema`, as one
    /// batch.
    fn drain(
        &self,
        decoder: &mut impl PushDecoder,
        bytes: &[u8],
        schema: &SchemaRef,
    ) -> Result<RecordBatch, String> {
        let mut batches = Vec::new();
        let mut rest = bytes;
        while !rest.is_empty() {
            let read = decoder.decode(rest)?;
            rest = &rest[read..];
            if read == 0 {
                // A full batch: take it before reading on. Nothing to take
                // means the decoder waits for the rest of a record that
                // the input cuts short (an Avro datum; CSV and JSON
                // decoders keep partial records themselves).
                let full = decoder.flush()?.ok_or("the record ends early")?;
                batches.push(full);
            }
        }
        // An empty input marks the end (a last CSV line without a break).
        decoder.decode(&[])?;
        batches.extend(decoder.flush()?);
        concat_batches(schema, &batches).map_err(|e| e.to_string())
    }
}

/// `batch` as rows of `schema`: columns taken by name and cast to
/// `schema`'s types (a value that does not convert is an error, not a
/// NULL); columns `batch` lacks are NULL.
pub fn conform(schema: &SchemaRef, batch: &RecordBatch) -> Result<RecordBatch, String> {
    let strict = CastOptions {
        safe: false,
        ..Default::default()
    };
    let columns = schema
        .fields()
        .iter()
        .map(|field| match batch.column_by_name(field.name()) {
            Some(column) if column.data_type() == field.data_type() => Ok(column.clone()),
            Some(column) => cast_with_options(column, field.data_type(), &strict)
                .map_err(|e| format!("column \"{}\": {e}", field.name())),
            None => Ok(new_null_array(field.data_type(), batch.num_rows())),
        })
        .collect::<Result<Vec<ArrayRef>, _>>()?;
    RecordBatch::try_new(schema.clone(), columns).map_err(|e| e.to_string())
}

/// arrow-json's, arrow-csv's and arrow-avro's push decoders, which share
/// a shape but no trait.
trait PushDecoder {
    fn decode(&mut self, bytes: &[u8]) -> Result<usize, String>;
    fn flush(&mut self) -> Result<Option<RecordBatch>, String>;
}

impl PushDecoder for datafusion::arrow::json::reader::Decoder {
    fn decode(&mut self, bytes: &[u8]) -> Result<usize, String> {
        self.decode(bytes).map_err(|e| e.to_string())
    }

    fn flush(&mut self) -> Result<Option<RecordBatch>, String> {
        self.flush().map_err(|e| e.to_string())
    }
}

impl PushDecoder for datafusion::arrow::csv::reader::Decoder {
    fn decode(&mut self, bytes: &[u8]) -> Result<usize, String> {
        self.decode(bytes).map_err(|e| e.to_string())
    }

    fn flush(&mut self) -> Result<Option<RecordBatch>, String> {
        self.flush().map_err(|e| e.to_string())
    }
}

impl PushDecoder for arrow_avro::reader::Decoder {
    fn decode(&mut self, bytes: &[u8]) -> Result<usize, String> {
        self.decode(bytes).map_err(|e| e.to_string())
    }

    fn flush(&mut self) -> Result<Option<RecordBatch>, String> {
        self.flush().map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Array, Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;
    use crate::avro::AvroFormat;

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
    fn records_come_back_without_what_was_added_for_decoding() {
        let mut text = Values::default();
        text.push(b"a,b\r\n");
        text.push(b"{}");
        assert_eq!((text.record(0), text.record(1)), (&b"a,b"[..], &b"{}"[..]));
        let mut binary = Values::default();
        binary.push_framed(b"\xc3\x01frame!!!", b"\x02\x0a");
        binary.push_framed(&[], b"\x04");
        assert_eq!(
            (binary.record(0), binary.record(1)),
            (&b"\x02\x0a"[..], &b"\x04"[..])
        );
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

    /// Avro's zigzag varint of `n`.
    fn long(n: i64, out: &mut Vec<u8>) {
        let mut z = ((n << 1) ^ (n >> 63)) as u64;
        while z >= 0x80 {
            out.push((z as u8 & 0x7f) | 0x80);
            z >>= 7;
        }
        out.push(z as u8);
    }

    /// The datum of `{id, name}` for the schema in `avro_schema`.
    fn datum(id: i64, name: Option<&str>) -> Vec<u8> {
        let mut out = Vec::new();
        long(id, &mut out);
        match name {
            None => long(0, &mut out),
            Some(name) => {
                long(1, &mut out);
                long(name.len() as i64, &mut out);
                out.extend_from_slice(name.as_bytes());
            }
        }
        out
    }

    fn avro_schema() -> &'static str {
        r#"{"type": "record", "name": "r", "fields": [
            {"name": "id", "type": "long"},
            {"name": "name", "type": ["null", "string"]}]}"#
    }

    #[test]
    fn avro_datums_become_rows_and_bad_ones_are_found() {
        let avro = AvroFormat::new(avro_schema(), false).expect("schema");
        let decoder = Decoder::new(Format::Avro(Arc::new(avro)), schema());
        let mut values = Values::default();
        // A datum ending in a byte that is a line break, whole.
        for value in [
            datum(1, Some("a")),
            datum(10, Some("\n")),
            datum(3, None)[..1].to_vec(),
            datum(4, None),
            [datum(5, None), datum(6, None)].concat(),
        ] {
            decoder.push(&mut values, &value);
        }
        let (rows, bad) = decoder.decode(&values);
        assert_eq!(ids(&rows), vec![Some(1), Some(10), Some(4)]);
        assert_eq!(bad.iter().map(|b| b.index).collect::<Vec<_>>(), vec![2, 4]);
        let names = rows
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!(names.value(1), "\n");
        assert!(names.is_null(2));
    }

    #[test]
    fn confluent_headers_are_stripped_and_required() {
        let avro = AvroFormat::new(avro_schema(), true).expect("schema");
        let decoder = Decoder::new(Format::Avro(Arc::new(avro)), schema());
        let mut values = Values::default();
        decoder.push(
            &mut values,
            &[&[0, 0, 0, 0, 7][..], &datum(7, Some("x"))].concat(),
        );
        decoder.push(&mut values, &datum(8, Some("no header")));
        let (rows, bad) = decoder.decode(&values);
        assert_eq!(ids(&rows), vec![Some(7)]);
        assert_eq!(bad.len(), 1);
        assert!(AvroFormat::new("{\"type\": \"record\"", false).is_err());
    }
}
