//! A subscription's copy of the relation it follows, and each epoch's
//! changes to it as signed rows.
//!
//! A checkpoint stores a table's change in an epoch as upserts and
//! deletes by key (the rows present after it, the keys gone), not as the
//! rows removed: an upsert that replaces a row does not say what it
//! replaced. The copy says: it holds the relation as of the last epoch
//! replayed, so each delta becomes the rows it removed (weight -1, or
//! minus a counted row's count) and the rows it added (+1, or plus the
//! count), with rows an upsert rewrote unchanged left out.

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, BooleanArray, Int64Array};
use datafusion::arrow::compute::kernels::boolean::{not, or};
use datafusion::arrow::compute::kernels::cmp::{distinct, neq};
use datafusion::arrow::compute::kernels::numeric::sub;
use datafusion::arrow::compute::{concat, concat_batches, filter, filter_record_batch};
use datafusion::arrow::datatypes::{Int64Type, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use weir_state::{RowPosition, StateTable, TableSpec};

use crate::error::{WeirError, WeirResult};

/// Rows with a signed weight each: what one epoch changed, or a snapshot.
#[derive(Debug)]
pub struct SignedRows {
    /// The relation's columns (a counted view's rows without their count).
    pub rows: RecordBatch,
    /// Each row's weight.
    pub weights: Int64Array,
}

/// The relation as of the last epoch replayed.
pub struct Replica {
    table: StateTable,
    /// The stored rows carry a count as their last column (a view output
    /// without a unique key, stored once per distinct row).
    counted: bool,
    /// The relation's columns as subscribers see them (without the count).
    rows_schema: SchemaRef,
}

impl Replica {
    /// A replica holding `table`.
    pub fn new(table: StateTable, counted: bool) -> WeirResult<Self> {
        let width = table.spec().visible_len() - usize::from(counted);
        let columns: Vec<usize> = (0..width).collect();
        let rows_schema = Arc::new(table.spec().schema.project(&columns)?);
        Ok(Replica {
            table,
            counted,
            rows_schema,
        })
    }

    /// How the relation is stored.
    pub fn spec(&self) -> &TableSpec {
        self.table.spec()
    }

    /// Every row now, each with its count.
    pub fn snapshot(&self) -> WeirResult<SignedRows> {
        let stored = self.table.snapshot().stored_rows()?;
        let visible = self.table.spec().visible_columns(&stored)?;
        self.signed(&visible, 1)
    }

    /// Replays one stored delta (as [`StateTable::apply_delta`] does) and
    /// returns what it changed, or `None` if nothing.
    pub fn apply(
        &mut self,
        upserts: Option<&RecordBatch>,
        deletes: Option<&RecordBatch>,
    ) -> WeirResult<Option<SignedRows>> {
        let mut parts = Vec::new();
        if let Some(deletes) = deletes.filter(|d| d.num_rows() > 0) {
            let (_, old) = self.existing(deletes)?;
            parts.push(self.signed(&old, -1)?);
        }
        if let Some(upserts) = upserts.filter(|u| u.num_rows() > 0) {
            let keys = upserts.project(&self.table.spec().key)?;
            let (found, old) = self.existing(&keys)?;
            let new = self.table.spec().visible_columns(upserts)?;
            // The upserts that replace a row, in the order of `old`.
            let replacing = filter_record_batch(&new, &found)?;
            if self.counted {
                parts.push(self.recounted(&old, &replacing)?);
            } else {
                let changed = rows_differ(&old, &replacing)?;
                parts.push(self.signed(&filter_record_batch(&old, &changed)?, -1)?);
                parts.push(self.signed(&filter_record_batch(&replacing, &changed)?, 1)?);
            }
            let fresh = not(&found)?;
            parts.push(self.signed(&filter_record_batch(&new, &fresh)?, 1)?);
        }
        self.table.apply_delta(upserts, deletes)?;
        if parts.iter().all(|p| p.rows.num_rows() == 0) {
            return Ok(None);
        }
        let weights: Vec<&dyn Array> = parts.iter().map(|p| &p.weights as &dyn Array).collect();
        Ok(Some(SignedRows {
            rows: concat_batches(&self.rows_schema, parts.iter().map(|p| &p.rows))?,
            weights: concat(&weights)?.as_primitive::<Int64Type>().clone(),
        }))
    }

    /// Counted rows whose count changed from `old`'s to `new`'s (the same
    /// rows, in order), each weighted by the difference.
    fn recounted(&self, old: &RecordBatch, new: &RecordBatch) -> WeirResult<SignedRows> {
        let width = new.num_columns() - 1;
        let count = |batch: &RecordBatch| {
            batch
                .column(width)
                .as_primitive_opt::<Int64Type>()
                .cloned()
                .ok_or_else(|| WeirError::internal("a view's row count is not int64"))
        };
        let difference = sub(&count(new)?, &count(old)?)?;
        let changed = neq(&difference, &Int64Array::new_scalar(0))?;
        let rows = filter_record_batch(&new.project(&(0..width).collect::<Vec<_>>())?, &changed)?;
        let weights = filter(&difference, &changed)?
            .as_primitive::<Int64Type>()
            .clone();
        Ok(SignedRows { rows, weights })
    }

    /// Whether each key of `keys` (key columns in key order) has a row,
    /// and those rows' visible columns, in order.
    fn existing(&self, keys: &RecordBatch) -> WeirResult<(BooleanArray, RecordBatch)> {
        let matches = self.table.lookup(keys)?;
        let found: BooleanArray = matches.iter().map(|m| Some(m.existing.is_some())).collect();
        let positions: Vec<RowPosition> = matches.iter().filter_map(|m| m.existing).collect();
        Ok((found, self.table.rows_at(&positions)?))
    }

    /// `visible` (visible stored columns) as subscribers see them, each
    /// row weighted `sign` times its count (or once, uncounted).
    fn signed(&self, visible: &RecordBatch, sign: i64) -> WeirResult<SignedRows> {
        let width = self.rows_schema.fields().len();
        let rows = RecordBatch::try_new(
            self.rows_schema.clone(),
            visible.columns()[..width].to_vec(),
        )?;
        let weights = if self.counted {
            let stored = visible
                .column(width)
                .as_primitive_opt::<Int64Type>()
                .ok_or_else(|| WeirError::internal("a view's row count is not int64"))?;
            stored.unary(|c| c * sign)
        } else {
            Int64Array::from_value(sign, visible.num_rows())
        };
        Ok(SignedRows { rows, weights })
    }
}

/// For two batches of the same rows' old and new values: whether any
/// column differs (NULLs equal).
fn rows_differ(old: &RecordBatch, new: &RecordBatch) -> WeirResult<BooleanArray> {
    let mut differ = BooleanArray::from(vec![false; old.num_rows()]);
    for (a, b) in old.columns().iter().zip(new.columns()) {
        differ = or(&differ, &distinct(a, b)?)?;
    }
    Ok(differ)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int32Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    fn keyed() -> Replica {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int32, false),
            Field::new("v", DataType::Utf8, true),
        ]));
        Replica::new(
            StateTable::new(TableSpec::with_primary_key(schema, vec![0])).unwrap(),
            false,
        )
        .unwrap()
    }

    fn rows(keys: &[i32], values: &[Option<&str>]) -> RecordBatch {
        RecordBatch::try_new(
            keyed().table.spec().schema.clone(),
            vec![
                Arc::new(Int32Array::from(keys.to_vec())),
                Arc::new(StringArray::from(values.to_vec())),
            ],
        )
        .unwrap()
    }

    fn listed(changes: &SignedRows) -> Vec<(i32, Option<String>, i64)> {
        let keys = changes
            .rows
            .column(0)
            .as_primitive::<datafusion::arrow::datatypes::Int32Type>();
        let values = changes.rows.column(1).as_string::<i32>();
        (0..changes.rows.num_rows())
            .map(|i| {
                let value = values.is_valid(i).then(|| values.value(i).to_owned());
                (keys.value(i), value, changes.weights.value(i))
            })
            .collect()
    }

    #[test]
    fn upserts_retract_what_they_replace_and_skip_what_they_keep() {
        let mut replica = keyed();
        let first = replica
            .apply(Some(&rows(&[1, 2, 3], &[Some("a"), None, Some("c")])), None)
            .unwrap()
            .unwrap();
        assert_eq!(listed(&first).len(), 3);
        // 1 changes, 2 is rewritten as it was (NULL), 3 is deleted, 4 is new.
        let keys = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("k", DataType::Int32, false)])),
            vec![Arc::new(Int32Array::from(vec![3]))],
        )
        .unwrap();
        let second = replica
            .apply(
                Some(&rows(&[1, 2, 4], &[Some("b"), None, Some("d")])),
                Some(&keys),
            )
            .unwrap()
            .unwrap();
        let mut got = listed(&second);
        got.sort();
        assert_eq!(
            got,
            vec![
                (1, Some("a".into()), -1),
                (1, Some("b".into()), 1),
                (3, Some("c".into()), -1),
                (4, Some("d".into()), 1),
            ]
        );
        let unchanged = replica
            .apply(Some(&rows(&[4], &[Some("d")])), None)
            .unwrap();
        assert!(unchanged.is_none());
        let mut now = listed(&replica.snapshot().unwrap());
        now.sort();
        assert_eq!(
            now,
            vec![
                (1, Some("b".into()), 1),
                (2, None, 1),
                (4, Some("d".into()), 1)
            ]
        );
    }

    #[test]
    fn counted_rows_change_by_their_counts() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("v", DataType::Int32, true),
            Field::new("__weir_count", DataType::Int64, false),
        ]));
        let spec = TableSpec::with_primary_key(schema.clone(), vec![0]);
        let mut replica = Replica::new(StateTable::new(spec).unwrap(), true).unwrap();
        let batch = |values: Vec<Option<i32>>, counts: Vec<i64>| {
            RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(Int32Array::from(values)),
                    Arc::new(Int64Array::from(counts)),
                ],
            )
            .unwrap()
        };
        replica
            .apply(Some(&batch(vec![Some(7), None], vec![3, 1])), None)
            .unwrap();
        let changed = replica
            .apply(Some(&batch(vec![Some(7), None], vec![5, 1])), None)
            .unwrap()
            .unwrap();
        // 7's count went from 3 to 5; NULL's stayed 1.
        assert_eq!(changed.rows.num_rows(), 1);
        assert_eq!(changed.weights.values().to_vec(), vec![2]);
        assert_eq!(changed.rows.num_columns(), 1);
        let deleted = replica
            .apply(
                None,
                Some(&batch(vec![Some(7)], vec![0]).project(&[0]).unwrap()),
            )
            .unwrap()
            .unwrap();
        assert_eq!(deleted.weights.values().to_vec(), vec![-5]);
    }
}
