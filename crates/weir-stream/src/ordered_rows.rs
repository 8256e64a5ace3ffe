//! [`OrderedRows`]: a bag of rows in an order (`ORDER BY`'s), with the
//! rows changed since the last checkpoint; the state of `TopN`.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, BooleanArray, Int64Array};
use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::PhysicalExprRef;
use weir_state::{DeltaBatches, TableSpec};

use crate::changes::{as_weights, encode_rows, row_converter, UNIT_COLUMN, WEIGHT_COLUMN};
use crate::{Changes, Result};

/// Bytes of one encoded key or row.
type Bytes = Box<[u8]>;

/// A bag of rows grouped by a key computed from each row, kept in key
/// order (a key with sort options gives `ORDER BY` order).
///
/// In memory every distinct row is its `arrow-row` encoding in a B-tree
/// under its key's encoding, with its multiplicity: top-N needs its input
/// in order, and its inputs are usually small (an aggregate's groups). The durable form is a
/// state table of the rows plus a weight column, keyed by the whole row;
/// [`OrderedRows::take_delta`] yields what changed since the last call.
#[derive(Debug)]
pub struct OrderedRows {
    schema: SchemaRef,
    state_schema: SchemaRef,
    key_exprs: Vec<PhysicalExprRef>,
    /// `None` when there is no key: every row is in one group.
    keys: Option<RowConverter>,
    rows: RowConverter,
    groups: BTreeMap<Bytes, BTreeMap<Bytes, i64>>,
    /// Rows changed since the last checkpoint, with their multiplicity
    /// then (0: absent). A row back at that multiplicity leaves the set, so
    /// it holds at most the rows that differ from the checkpoint, however
    /// long checkpoints are apart (a running total replaces its group's
    /// row on every change).
    dirty: BTreeMap<(Bytes, Bytes), i64>,
    distinct_rows: usize,
    /// Bytes of the encodings held in `groups` and `dirty`.
    bytes: usize,
}

/// Bytes a B-tree entry costs beyond its encodings: the boxed slices, the
/// multiplicity, the node's share.
const ENTRY_BYTES: usize = 56;

impl OrderedRows {
    /// An empty bag of rows of `schema`, grouped by `key_exprs` (evaluated
    /// on the rows) and ordered by them with `key_options` (ascending,
    /// nulls last when `None`).
    pub fn new(
        schema: SchemaRef,
        key_exprs: Vec<PhysicalExprRef>,
        key_options: Option<Vec<SortOptions>>,
    ) -> Result<Self> {
        let keys = if key_exprs.is_empty() {
            None
        } else {
            let fields = key_exprs
                .iter()
                .enumerate()
                .map(|(i, e)| {
                    let data_type = e.data_type(&schema)?;
                    Ok(match &key_options {
                        Some(options) => SortField::new_with_options(data_type, options[i]),
                        None => SortField::new(data_type),
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            Some(RowConverter::new(fields)?)
        };
        let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        if fields.is_empty() {
            // A state table needs a key column; rows without columns (the
            // input of `count(*)`) are all the same row.
            fields.push(Field::new(UNIT_COLUMN, DataType::Boolean, false));
        }
        fields.push(Field::new(WEIGHT_COLUMN, DataType::Int64, false));
        Ok(OrderedRows {
            rows: row_converter(&schema)?,
            schema,
            state_schema: Arc::new(Schema::new(fields)),
            key_exprs,
            keys,
            groups: BTreeMap::new(),
            dirty: BTreeMap::new(),
            distinct_rows: 0,
            bytes: 0,
        })
    }

    /// The shape of the durable state table: the rows plus a weight,
    /// keyed by every row column.
    pub fn state_spec(&self) -> TableSpec {
        TableSpec::with_primary_key(
            self.state_schema.clone(),
            (0..self.state_schema.fields().len() - 1).collect(),
        )
    }

    /// Number of distinct rows held.
    pub fn distinct_rows(&self) -> usize {
        self.distinct_rows
    }

    /// Bytes held: the encodings and the entries around them.
    pub fn memory_size(&self) -> usize {
        self.bytes + self.keys.as_ref().map_or(0, |k| k.size()) + self.rows.size()
    }

    /// The key columns of `rows`.
    fn key_columns(&self, rows: &RecordBatch) -> Result<Vec<ArrayRef>> {
        self.key_exprs
            .iter()
            .map(|e| e.evaluate(rows)?.into_array(rows.num_rows()))
            .collect()
    }

    /// The encoded keys of `rows`, one per row (empty keys when the bag has
    /// no key).
    fn encode_keys(&self, columns: &[ArrayRef], num_rows: usize) -> Result<Vec<Bytes>> {
        match &self.keys {
            None => Ok(vec![Bytes::default(); num_rows]),
            Some(converter) => {
                let rows = converter.convert_columns(columns)?;
                Ok(rows.iter().map(|r| r.data().into()).collect())
            }
        }
    }

    /// Adds `changes` to the bag.
    pub fn update(&mut self, changes: &Changes) -> Result<()> {
        let columns = self.key_columns(&changes.rows)?;
        let keys = self.encode_keys(&columns, changes.len())?;
        self.update_with_keys(changes, &keys)
    }

    /// Adds `changes`, whose encoded keys are `keys`.
    fn update_with_keys(&mut self, changes: &Changes, keys: &[Bytes]) -> Result<()> {
        let rows = encode_rows(&self.rows, &changes.rows)?;
        for ((key, row), &weight) in keys.iter().zip(rows).zip(changes.weights.values()) {
            self.add(key, row, weight);
        }
        Ok(())
    }

    /// Adds `weight` copies of the encoded `row` under the encoded `key`.
    fn add(&mut self, key: &Bytes, row: Bytes, weight: i64) {
        if weight == 0 {
            return;
        }
        if !self.groups.contains_key(key) {
            self.bytes += key.len() + ENTRY_BYTES;
        }
        let group = self.groups.entry(key.clone()).or_default();
        let (before, now) = match group.get_mut(&row) {
            Some(w) => {
                *w += weight;
                (*w - weight, *w)
            }
            None => {
                self.distinct_rows += 1;
                self.bytes += row.len() + ENTRY_BYTES;
                group.insert(row.clone(), weight);
                (0, weight)
            }
        };
        if now == 0 {
            group.remove(&row);
            self.distinct_rows -= 1;
            self.bytes -= row.len() + ENTRY_BYTES;
            if group.is_empty() {
                self.groups.remove(key);
                self.bytes -= key.len() + ENTRY_BYTES;
            }
        }
        self.mark_dirty(key.clone(), row, before, now);
    }

    /// Drops every row copy of the keys starting with `prefix` beyond the
    /// first `keep` in key order: what a top-N over an input that only
    /// inserts will never show again.
    pub fn keep_first(&mut self, prefix: &[u8], keep: usize) {
        let mut seen = 0usize;
        let mut dropped: Vec<(Bytes, Bytes, i64)> = Vec::new();
        let range = self
            .groups
            .range::<[u8], _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .take_while(|(key, _)| key.starts_with(prefix));
        for (key, group) in range {
            for (row, &weight) in group {
                let kept = (weight.max(0) as usize).min(keep - seen.min(keep));
                seen += kept;
                if weight > kept as i64 {
                    dropped.push((key.clone(), row.clone(), weight - kept as i64));
                }
            }
        }
        for (key, row, surplus) in dropped {
            self.add(&key, row, -surplus);
        }
    }

    /// Records that a row's multiplicity went from `before` to `now`.
    fn mark_dirty(&mut self, key: Bytes, row: Bytes, before: i64, now: i64) {
        let len = key.len() + row.len() + ENTRY_BYTES;
        match self.dirty.entry((key, row)) {
            Entry::Occupied(at_checkpoint) => {
                if *at_checkpoint.get() == now {
                    at_checkpoint.remove();
                    self.bytes -= len;
                }
            }
            Entry::Vacant(vacant) => {
                vacant.insert(before);
                self.bytes += len;
            }
        }
    }

    /// Every row in key order, each with its multiplicity, lazily.
    pub fn ordered(&self) -> impl Iterator<Item = (&[u8], i64)> {
        self.groups
            .values()
            .flat_map(|group| group.iter().map(|(row, &w)| (row.as_ref(), w)))
    }

    /// The rows whose encoded key starts with `prefix`, in key order,
    /// each with its multiplicity: with a key whose leading columns are a
    /// partition's, the rows of that partition (column encodings are
    /// self-delimiting, so no other partition's key starts with them).
    pub fn ordered_with_prefix<'a>(
        &'a self,
        prefix: &'a [u8],
    ) -> impl Iterator<Item = (&'a [u8], i64)> + 'a {
        self.groups
            .range::<[u8], _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .take_while(move |(key, _)| key.starts_with(prefix))
            .flat_map(|(_, group)| group.iter().map(|(row, &w)| (row.as_ref(), w)))
    }

    /// Encoded rows (from this bag) back to Arrow.
    pub fn decode(&self, rows: &[(&[u8], i64)]) -> Result<Changes> {
        let columns = if self.schema.fields().is_empty() {
            Vec::new()
        } else {
            let parser = self.rows.parser();
            self.rows
                .convert_rows(rows.iter().map(|(row, _)| parser.parse(row)))?
        };
        let batch = if columns.is_empty() {
            RecordBatch::try_new_with_options(
                self.schema.clone(),
                columns,
                &datafusion::arrow::record_batch::RecordBatchOptions::new()
                    .with_row_count(Some(rows.len())),
            )?
        } else {
            RecordBatch::try_new(self.schema.clone(), columns)?
        };
        let weights = Int64Array::from_iter_values(rows.iter().map(|(_, w)| *w));
        Changes::new(batch, weights)
    }

    /// Whether anything changed since the last [`OrderedRows::take_delta`].
    #[cfg(test)]
    fn is_dirty(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// The rows whose multiplicity changed since the last call: present
    /// ones as upserts (with their weight), vanished ones as deletes.
    pub fn take_delta(&mut self) -> Result<Option<DeltaBatches>> {
        if self.dirty.is_empty() {
            return Ok(None);
        }
        let mut present: Vec<(&[u8], i64)> = Vec::new();
        let mut absent: Vec<&[u8]> = Vec::new();
        for (key, row) in self.dirty.keys() {
            match self.groups.get(key).and_then(|g| g.get(row)) {
                Some(&w) => present.push((row, w)),
                None => absent.push(row),
            }
        }
        let upserts = if present.is_empty() {
            None
        } else {
            let changes = self.decode(&present)?;
            Some(self.to_state(changes)?)
        };
        let deletes = if absent.is_empty() {
            None
        } else {
            let absent: Vec<(&[u8], i64)> = absent.into_iter().map(|r| (r, 0)).collect();
            let keys = self.to_state(self.decode(&absent)?)?;
            let width = keys.num_columns() - 1;
            Some(keys.project(&(0..width).collect::<Vec<_>>())?)
        };
        for (key, row) in self.dirty.keys() {
            self.bytes -= key.len() + row.len() + ENTRY_BYTES;
        }
        self.dirty.clear();
        Ok(Some(DeltaBatches { upserts, deletes }))
    }

    /// Changes in the durable form: the rows (or the unit column), then
    /// the weight.
    fn to_state(&self, changes: Changes) -> Result<RecordBatch> {
        let mut columns = changes.rows.columns().to_vec();
        if columns.is_empty() {
            columns.push(Arc::new(BooleanArray::from(vec![true; changes.len()])));
        }
        columns.push(Arc::new(changes.weights));
        Ok(RecordBatch::try_new(self.state_schema.clone(), columns)?)
    }

    /// Loads rows saved by [`OrderedRows::dump`] or accumulated from deltas
    /// (recovery). Does not mark them changed.
    pub fn restore(&mut self, state: &RecordBatch) -> Result<()> {
        let width = self.schema.fields().len();
        let rows = RecordBatch::try_new_with_options(
            self.schema.clone(),
            state.columns()[..width].to_vec(),
            &datafusion::arrow::record_batch::RecordBatchOptions::new()
                .with_row_count(Some(state.num_rows())),
        )?;
        let weights = as_weights(state.column(state.num_columns() - 1))?;
        self.update(&Changes::new(rows, weights)?)?;
        for (key, row) in self.dirty.keys() {
            self.bytes -= key.len() + row.len() + ENTRY_BYTES;
        }
        self.dirty.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int32Array, StringArray};
    use datafusion::physical_expr::expressions::col;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int32, true),
            Field::new("v", DataType::Utf8, true),
        ]))
    }

    fn rows(k: &[Option<i32>], v: &[&str]) -> RecordBatch {
        RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(Int32Array::from(k.to_vec())),
                Arc::new(StringArray::from(v.to_vec())),
            ],
        )
        .unwrap()
    }

    fn bag() -> OrderedRows {
        let key = col("k", &schema()).unwrap();
        OrderedRows::new(schema(), vec![key], None).unwrap()
    }

    #[test]
    fn rows_come_in_key_order_with_their_multiplicity() {
        let mut bag = bag();
        bag.update(&Changes::inserts(rows(
            &[Some(2), Some(1), Some(1), None],
            &["b", "a", "a", "z"],
        )))
        .unwrap();
        assert_eq!(bag.distinct_rows(), 3);
        let all: Vec<(&[u8], i64)> = bag.ordered().collect();
        let decoded = bag.decode(&all).unwrap();
        assert_eq!(
            decoded.weights.values().to_vec(),
            vec![1, 2, 1],
            "NULL first, then 1 and 2"
        );
        let before = bag.memory_size();
        bag.update(&Changes::deletes(rows(&[Some(1), Some(1)], &["a", "a"])))
            .unwrap();
        assert_eq!(bag.distinct_rows(), 2);
        bag.take_delta().unwrap();
        assert!(bag.memory_size() < before, "freed rows stop counting");
    }

    #[test]
    fn the_dirty_set_holds_only_the_net_change_since_the_last_delta() {
        let mut bag = bag();
        bag.update(&Changes::inserts(rows(&[Some(1)], &["v0"])))
            .unwrap();
        bag.take_delta().unwrap();
        // A running total replaces its group's row on every change; rows
        // that come and go between two deltas leave no trace.
        for i in 0..1000 {
            let old = format!("v{i}");
            let new = format!("v{}", i + 1);
            bag.update(&Changes::deletes(rows(&[Some(1)], &[old.as_str()])))
                .unwrap();
            bag.update(&Changes::inserts(rows(&[Some(1)], &[new.as_str()])))
                .unwrap();
        }
        assert_eq!(bag.dirty.len(), 2, "the checkpointed row and the new one");
        let delta = bag.take_delta().unwrap().unwrap();
        assert_eq!(delta.upserts.unwrap().num_rows(), 1);
        assert_eq!(delta.deletes.unwrap().num_rows(), 1);
        // Back where the last delta left it: nothing to write.
        bag.update(&Changes::deletes(rows(&[Some(1)], &["v1000"])))
            .unwrap();
        bag.update(&Changes::inserts(rows(&[Some(1)], &["v1000"])))
            .unwrap();
        assert!(bag.take_delta().unwrap().is_none());
    }

    #[test]
    fn deltas_restore_the_same_bag() {
        let mut bag = bag();
        let mut durable = weir_state::StateTable::new(bag.state_spec()).unwrap();
        let mut replay = |delta: DeltaBatches| {
            durable
                .apply_delta(delta.upserts.as_ref(), delta.deletes.as_ref())
                .unwrap();
            durable.snapshot().stored_rows().unwrap()
        };
        bag.update(&Changes::inserts(rows(&[Some(1), Some(2)], &["a", "b"])))
            .unwrap();
        let first = bag.take_delta().unwrap().unwrap();
        assert_eq!(first.upserts.as_ref().unwrap().num_rows(), 2);
        assert!(first.deletes.is_none());
        replay(first);
        bag.update(&Changes::deletes(rows(&[Some(2)], &["b"])))
            .unwrap();
        let second = bag.take_delta().unwrap().unwrap();
        assert!(second.upserts.is_none());
        assert_eq!(second.deletes.as_ref().unwrap().num_rows(), 1);
        let stored = replay(second);
        assert!(bag.take_delta().unwrap().is_none());

        let mut copy = self::bag();
        copy.restore(&stored).unwrap();
        assert_eq!(copy.distinct_rows(), 1);
        assert!(!copy.is_dirty());
    }
}
