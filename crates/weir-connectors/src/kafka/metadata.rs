//! `INCLUDE` columns: each record's key, partition, offset and timestamp
//! beside the columns its value decodes into (RisingWave's `INCLUDE key
//! AS k`, written by the parser as the option `include.key = 'k'`).

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BinaryBuilder, BooleanArray, Int32Array, Int64Array, TimestampMicrosecondArray,
};
use datafusion::arrow::compute::filter;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::record_batch::RecordBatch;

use crate::records::BadRecord;

/// What an `INCLUDE` column holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Include {
    /// The record's key (`bytea`).
    Key,
    /// Its partition (`integer`).
    Partition,
    /// Its offset (`bigint`).
    Offset,
    /// Its timestamp (`timestamptz`, from the record's milliseconds).
    Timestamp,
}

impl Include {
    /// The kind `INCLUDE <kind>` names.
    pub fn named(kind: &str) -> Result<Self, String> {
        match kind {
            "key" => Ok(Include::Key),
            "partition" => Ok(Include::Partition),
            "offset" => Ok(Include::Offset),
            "timestamp" => Ok(Include::Timestamp),
            _ => Err(format!(
                "INCLUDE {kind}: a Kafka source includes key, partition, offset or timestamp"
            )),
        }
    }

    /// The column's name when `INCLUDE` gives none.
    pub fn default_name(self) -> &'static str {
        match self {
            Include::Key => "_kafka_key",
            Include::Partition => "_kafka_partition",
            Include::Offset => "_kafka_offset",
            Include::Timestamp => "_kafka_timestamp",
        }
    }

    /// The column, called `name`.
    pub fn field(self, name: &str) -> Field {
        let data_type = match self {
            Include::Key => DataType::Binary,
            Include::Partition => DataType::Int32,
            Include::Offset => DataType::Int64,
            Include::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
        };
        Field::new(name, data_type, true)
    }
}

/// Where each gathered record came from: its partition and offset (for
/// bad-record reports and `INCLUDE`), and its timestamp and key when a
/// column includes them.
#[derive(Debug, Default)]
pub struct Origins {
    partitions: Vec<i32>,
    offsets: Vec<i64>,
    timestamps: Vec<Option<i64>>,
    /// Keys in one buffer (NULL where not kept).
    keys: BinaryBuilder,
}

impl Origins {
    /// Records one record's origin (`timestamp` in milliseconds, `key`
    /// only if a column includes it).
    pub fn push(
        &mut self,
        partition: i32,
        offset: i64,
        timestamp: Option<i64>,
        key: Option<&[u8]>,
    ) {
        self.partitions.push(partition);
        self.offsets.push(offset);
        self.timestamps.push(timestamp);
        self.keys.append_option(key);
    }

    /// Record `i`'s partition and offset.
    pub fn place(&self, i: usize) -> (i32, i64) {
        (self.partitions[i], self.offsets[i])
    }

    /// Empties it, keeping its memory.
    pub fn clear(&mut self) {
        self.partitions.clear();
        self.offsets.clear();
        self.timestamps.clear();
        self.keys.finish();
    }

    /// The `include` column of every gathered record.
    pub fn column(&self, include: Include) -> ArrayRef {
        match include {
            Include::Key => Arc::new(self.keys.finish_cloned()),
            Include::Partition => Arc::new(Int32Array::from(self.partitions.clone())),
            Include::Offset => Arc::new(Int64Array::from(self.offsets.clone())),
            Include::Timestamp => Arc::new(
                TimestampMicrosecondArray::from_iter(
                    self.timestamps.iter().map(|ms| ms.map(|ms| ms * 1000)),
                )
                .with_timezone("+00:00"),
            ),
        }
    }
}

/// Where a source column's values come from.
#[derive(Debug, Clone, Copy)]
enum Column {
    /// The value's column at this index of the value schema.
    Value(usize),
    /// A record's metadata.
    Included(Include),
}

/// How a batch of a source's rows is put together: the columns records'
/// values decode into, and the included ones, in the source's order.
#[derive(Debug, Clone)]
pub struct RowShape {
    schema: SchemaRef,
    columns: Vec<Column>,
    includes_key: bool,
}

impl RowShape {
    /// The shape of `schema`'s rows when `includes` name some of its
    /// columns, and the schema record values decode into (the others).
    pub fn new(
        schema: &SchemaRef,
        includes: &[(Include, String)],
    ) -> Result<(Self, SchemaRef), String> {
        let mut value_fields = Vec::new();
        let mut columns = Vec::new();
        for field in schema.fields() {
            match includes.iter().find(|(_, name)| name == field.name()) {
                Some(&(include, _)) => columns.push(Column::Included(include)),
                None => {
                    columns.push(Column::Value(value_fields.len()));
                    value_fields.push(field.clone());
                }
            }
        }
        if let Some((_, name)) = includes
            .iter()
            .find(|(_, name)| schema.field_with_name(name).is_err())
        {
            return Err(format!("the source has no INCLUDE column \"{name}\""));
        }
        let shape = RowShape {
            schema: schema.clone(),
            columns,
            includes_key: includes.iter().any(|(include, _)| *include == Include::Key),
        };
        Ok((shape, Arc::new(Schema::new(value_fields))))
    }

    /// Whether records' keys are kept for a column.
    pub fn includes_key(&self) -> bool {
        self.includes_key
    }

    /// The source's rows of the records whose values decoded into
    /// `values` (those not in `bad`, in order) from `origins`.
    pub fn assemble(
        &self,
        values: RecordBatch,
        origins: &Origins,
        bad: &[BadRecord],
    ) -> Result<RecordBatch, ArrowError> {
        if self
            .columns
            .iter()
            .all(|column| matches!(column, Column::Value(_)))
        {
            return Ok(values);
        }
        // The records that decoded, for the metadata columns.
        let decoded = (!bad.is_empty()).then(|| {
            let mut keep = vec![true; origins.partitions.len()];
            for record in bad {
                keep[record.index] = false;
            }
            BooleanArray::from(keep)
        });
        let columns = self
            .columns
            .iter()
            .map(|column| match *column {
                Column::Value(i) => Ok(values.column(i).clone()),
                Column::Included(include) => {
                    let all = origins.column(include);
                    match &decoded {
                        Some(decoded) => filter(&all, decoded),
                        None => Ok(all),
                    }
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        RecordBatch::try_new(self.schema.clone(), columns)
    }
}
