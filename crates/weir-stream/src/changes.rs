//! The change data model: a batch of rows with one signed weight per row.

use std::collections::HashMap;

use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, Int64Array, UInt32Array};
use datafusion::arrow::compute::{concat, concat_batches, filter_record_batch, take_record_batch};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::error::DataFusionError;

use crate::Result;

/// A Z-set delta: each row of `rows` is added `weights[i]` times (a
/// negative weight removes it). An update is a removal plus an addition.
#[derive(Debug, Clone)]
pub struct Changes {
    /// The rows.
    pub rows: RecordBatch,
    /// One weight per row, never null.
    pub weights: Int64Array,
}

impl Changes {
    /// Rows with their weights; the lengths must agree.
    pub fn new(rows: RecordBatch, weights: Int64Array) -> Result<Self> {
        if rows.num_rows() != weights.len() || weights.null_count() > 0 {
            return Err(DataFusionError::Internal(format!(
                "changes with {} rows and {} weights ({} null)",
                rows.num_rows(),
                weights.len(),
                weights.null_count()
            )));
        }
        Ok(Changes { rows, weights })
    }

    /// Every row of `rows` added once.
    pub fn inserts(rows: RecordBatch) -> Self {
        Self::uniform(rows, 1)
    }

    /// Every row of `rows` removed once.
    pub fn deletes(rows: RecordBatch) -> Self {
        Self::uniform(rows, -1)
    }

    fn uniform(rows: RecordBatch, weight: i64) -> Self {
        let weights = Int64Array::from_value(weight, rows.num_rows());
        Changes { rows, weights }
    }

    /// No rows of `schema`.
    pub fn empty(schema: SchemaRef) -> Self {
        Changes::inserts(RecordBatch::new_empty(schema))
    }

    /// The schema of the rows.
    pub fn schema(&self) -> SchemaRef {
        self.rows.schema()
    }

    /// Number of rows (not the sum of weights).
    pub fn len(&self) -> usize {
        self.rows.num_rows()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.num_rows() == 0
    }

    /// The same rows with every weight negated.
    pub fn negate(&self) -> Self {
        let weights = self.weights.unary(|w: i64| -w);
        Changes {
            rows: self.rows.clone(),
            weights,
        }
    }

    /// The rows where `mask` is true (null counts as false).
    pub fn filter(&self, mask: &BooleanArray) -> Result<Self> {
        let mask = null_as_false(mask);
        let rows = filter_record_batch(&self.rows, &mask)?;
        let weights = datafusion::arrow::compute::filter(&self.weights, &mask)?;
        Changes::new(rows, as_weights(&weights)?)
    }

    /// The rows at `indices`, in that order.
    pub fn take(&self, indices: &UInt32Array) -> Result<Self> {
        let rows = take_rows(&self.rows, indices)?;
        let weights = datafusion::arrow::compute::take(&self.weights, indices, None)?;
        Changes::new(rows, as_weights(&weights)?)
    }

    /// `len` rows from `offset`, without copying.
    pub fn slice(&self, offset: usize, len: usize) -> Self {
        Changes {
            rows: self.rows.slice(offset, len),
            weights: self.weights.slice(offset, len),
        }
    }

    /// The same columns under another schema with the same types (an
    /// operator's output takes its plan node's column names).
    pub fn with_schema(self, schema: SchemaRef) -> Result<Self> {
        let rows = RecordBatch::try_new_with_options(
            schema,
            self.rows.columns().to_vec(),
            &datafusion::arrow::record_batch::RecordBatchOptions::new()
                .with_row_count(Some(self.rows.num_rows())),
        )?;
        Changes::new(rows, self.weights)
    }

    /// All parts as one batch of `schema`.
    pub fn concat(schema: &SchemaRef, parts: &[Changes]) -> Result<Self> {
        match parts {
            [] => Ok(Changes::empty(schema.clone())),
            [one] => Ok(one.clone()),
            _ => {
                let rows = concat_batches(schema, parts.iter().map(|p| &p.rows))?;
                let weights: Vec<&dyn Array> = parts.iter().map(|p| &p.weights as _).collect();
                Changes::new(rows, as_weights(&concat(&weights)?)?)
            }
        }
    }

    /// The rows repeated by weight: the multiset as a plain batch. Fails
    /// on a negative weight, which a consistent collection never has.
    pub fn expand(&self) -> Result<RecordBatch> {
        if self.weights.values().iter().all(|&w| w == 1) {
            return Ok(self.rows.clone());
        }
        let mut indices = Vec::with_capacity(self.len());
        for (row, &weight) in self.weights.values().iter().enumerate() {
            if weight < 0 {
                return Err(DataFusionError::Internal(format!(
                    "row with negative multiplicity {weight}"
                )));
            }
            // Repeating a row by its weight is inherently per row; the
            // columns are then gathered with one `take` kernel.
            indices.extend(std::iter::repeat_n(row as u32, weight as usize));
        }
        take_rows(&self.rows, &UInt32Array::from(indices))
    }

    /// Equal rows merged into one with the sum of their weights; rows
    /// whose weights cancel are dropped.
    pub fn consolidate(&self) -> Result<Self> {
        if self.is_empty() {
            return Ok(self.clone());
        }
        let converter = row_converter(&self.schema())?;
        let rows = encode_rows(&converter, &self.rows)?;
        let mut slots: HashMap<&[u8], usize> = HashMap::with_capacity(self.len());
        let mut first = Vec::new();
        let mut sums: Vec<i64> = Vec::new();
        for (i, (row, &w)) in rows.iter().zip(self.weights.values()).enumerate() {
            let slot = *slots.entry(row.as_ref()).or_insert_with(|| {
                first.push(i as u32);
                sums.push(0);
                sums.len() - 1
            });
            sums[slot] += w;
        }
        let keep: Vec<usize> = (0..sums.len()).filter(|&s| sums[s] != 0).collect();
        let indices = UInt32Array::from_iter_values(keep.iter().map(|&s| first[s]));
        let weights = Int64Array::from_iter_values(keep.iter().map(|&s| sums[s]));
        Changes::new(take_rows(&self.rows, &indices)?, weights)
    }
}

/// The rows of `batch` at `indices`; also for batches without columns.
fn take_rows(batch: &RecordBatch, indices: &UInt32Array) -> Result<RecordBatch> {
    if batch.num_columns() == 0 {
        return Ok(RecordBatch::try_new_with_options(
            batch.schema(),
            Vec::new(),
            &datafusion::arrow::record_batch::RecordBatchOptions::new()
                .with_row_count(Some(indices.len())),
        )?);
    }
    Ok(take_record_batch(batch, indices)?)
}

/// `mask` with NULL read as false, as `WHERE` reads it.
pub(crate) fn null_as_false(mask: &BooleanArray) -> BooleanArray {
    if mask.null_count() > 0 {
        datafusion::arrow::compute::prep_null_mask_filter(mask)
    } else {
        mask.clone()
    }
}

/// Each row of `batch` encoded by `converter` (one empty encoding per row
/// when the batch has no columns, as for `count(*)`'s input).
pub(crate) fn encode_rows(converter: &RowConverter, batch: &RecordBatch) -> Result<Vec<Box<[u8]>>> {
    if batch.num_columns() == 0 {
        return Ok(vec![Box::default(); batch.num_rows()]);
    }
    let rows = converter.convert_columns(batch.columns())?;
    Ok(rows.iter().map(|r| r.data().into()).collect())
}

/// A converter of whole rows of `schema` to comparable bytes.
pub(crate) fn row_converter(schema: &SchemaRef) -> Result<RowConverter> {
    let fields = schema
        .fields()
        .iter()
        .map(|f| SortField::new(f.data_type().clone()))
        .collect();
    Ok(RowConverter::new(fields)?)
}

/// An array known to hold weights, as `Int64Array`.
pub(crate) fn as_weights(array: &ArrayRef) -> Result<Int64Array> {
    array
        .as_any()
        .downcast_ref::<Int64Array>()
        .cloned()
        .ok_or_else(|| DataFusionError::Internal("weights are not int64".into()))
}

/// The weight column's name in durable state.
pub const WEIGHT_COLUMN: &str = "__weir_weight";

/// The key column of durable state for rows that have no columns.
pub const UNIT_COLUMN: &str = "__weir_unit";

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int32Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    pub(crate) fn ints(values: &[i32]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int32, true)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int32Array::from(values.to_vec()))]).unwrap()
    }

    #[test]
    fn consolidate_sums_equal_rows_and_drops_cancelled_ones() {
        let rows = ints(&[1, 2, 1, 3, 2]);
        let changes = Changes::new(rows, Int64Array::from(vec![1, 1, 2, 1, -1])).unwrap();
        let merged = changes.consolidate().unwrap();
        let xs = merged
            .rows
            .column(0)
            .as_any()
            .downcast_ref::<Int32Array>()
            .unwrap();
        assert_eq!(xs.values().to_vec(), vec![1, 3]);
        assert_eq!(merged.weights.values().to_vec(), vec![3, 1]);
    }

    #[test]
    fn expand_repeats_rows_and_refuses_negative_weights() {
        let changes = Changes::new(ints(&[7, 8]), Int64Array::from(vec![2, 0])).unwrap();
        assert_eq!(changes.expand().unwrap().num_rows(), 2);
        let bad = Changes::new(ints(&[7]), Int64Array::from(vec![-1])).unwrap();
        assert!(bad.expand().is_err());
    }
}
