//! Accumulators that keep every distinct value of each group, with how
//! many rows hold it, in a durable table of their own: `(group columns,
//! value, count)` keyed by the group columns and the value.
//!
//! - [`ValueCounts`]: `min` and `max` of an input that deletes. The values
//!   are kept in order, so a deleted extreme makes the next one current
//!   without looking at any row.
//! - [`DistinctValues`]: `count(DISTINCT x)`. Order does not matter, so
//!   the (group, value) pairs are interned in a [`KeyIndex`] (one byte
//!   arena, no allocation per value) and the counts are a vector by pair.
//!
//! Neither holds input rows, only distinct values.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Int64Array, RecordBatch, UInt32Array,
};
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::error::DataFusionError;
use weir_state::{DeltaBatches, KeyId, KeyIndex, TableSpec};

use super::accumulator::{decode_values, grow, included, GroupAccumulator};
use crate::Result;

/// The durable table of an accumulator that keeps values.
pub(crate) trait ValueTable {
    /// The entries changed since the last call, group keys decoded by
    /// `keys` (the aggregate's groups, of `group_fields`).
    fn take_delta(
        &mut self,
        keys: &KeyIndex,
        group_fields: &[Field],
    ) -> Result<Option<DeltaBatches>>;

    /// Loads the durable table's rows, whose groups have ids `groups`.
    fn restore_values(&mut self, groups: &[KeyId], rows: &RecordBatch) -> Result<()>;

    /// Drops every value of `groups` (groups of windows the watermark
    /// closed, which no row can reach again); the durable table loses
    /// them at the next delta, taken before the groups are freed.
    fn forget(&mut self, groups: &[KeyId]);
}

/// The durable table of values of type `data_type` for groups of
/// `group_fields`.
pub(crate) fn value_table_spec(data_type: &DataType, group_fields: &[Field]) -> TableSpec {
    let mut fields = group_fields.to_vec();
    fields.push(Field::new("__weir_value", data_type.clone(), true));
    fields.push(Field::new("__weir_count", DataType::Int64, false));
    let key = (0..fields.len() - 1).collect();
    TableSpec::with_primary_key(Arc::new(Schema::new(fields)), key)
}

/// A delta of a value table: `upserts` (group ids, values, counts) and
/// `deletes` (group ids, values), group keys decoded by `keys`.
fn value_delta(
    spec: &TableSpec,
    keys: &KeyIndex,
    upserts: (Vec<KeyId>, ArrayRef, Vec<i64>),
    deletes: (Vec<KeyId>, ArrayRef),
) -> Result<DeltaBatches> {
    let external = |e| DataFusionError::External(Box::new(e));
    let (groups, values, counts) = upserts;
    let upserts = (!groups.is_empty())
        .then(|| {
            let mut columns = keys.decode(&groups).map_err(external)?;
            columns.push(values);
            columns.push(Arc::new(Int64Array::from(counts)));
            Ok::<_, DataFusionError>(RecordBatch::try_new(spec.schema.clone(), columns)?)
        })
        .transpose()?;
    let (groups, values) = deletes;
    let deletes = (!groups.is_empty())
        .then(|| {
            let mut columns = keys.decode(&groups).map_err(external)?;
            columns.push(values);
            Ok::<_, DataFusionError>(RecordBatch::try_new(spec.key_schema(), columns)?)
        })
        .transpose()?;
    Ok(DeltaBatches { upserts, deletes })
}

/// A key of [`ValueCounts`]: a group and a value's encoding.
type GroupValue = (KeyId, Box<[u8]>);

/// The entries of group `g` in a map keyed by (group, value).
fn group_range(g: KeyId) -> (Bound<GroupValue>, Bound<GroupValue>) {
    let start = Bound::Included((g, Box::default()));
    let end = match g.checked_add(1) {
        Some(next) => Bound::Excluded((next, Box::default())),
        None => Bound::Unbounded,
    };
    (start, end)
}

/// `min` or `max` of an input that deletes: every distinct value of each
/// group with how many rows hold it, ordered by the values' `arrow-row`
/// encoding (which orders as the values do). The extreme is the first or
/// last value of its group.
#[derive(Debug)]
pub(crate) struct ValueCounts {
    max: bool,
    data_type: DataType,
    converter: RowConverter,
    counts: BTreeMap<GroupValue, i64>,
    /// Entries changed since the last delta.
    changed: BTreeSet<GroupValue>,
    bytes: usize,
}

/// Bytes a B-tree entry of [`ValueCounts`] costs beyond its value's
/// encoding: the key's id and boxed slice, the count, the node's share.
const VALUE_ENTRY_BYTES: usize = 48;

impl ValueCounts {
    /// `max` (or `min`) of values of `data_type`.
    pub(crate) fn new(data_type: &DataType, max: bool) -> Result<Self> {
        Ok(ValueCounts {
            max,
            data_type: data_type.clone(),
            converter: RowConverter::new(vec![SortField::new(data_type.clone())])?,
            counts: BTreeMap::new(),
            changed: BTreeSet::new(),
            bytes: 0,
        })
    }
}

impl ValueTable for ValueCounts {
    fn take_delta(
        &mut self,
        keys: &KeyIndex,
        group_fields: &[Field],
    ) -> Result<Option<DeltaBatches>> {
        if self.changed.is_empty() {
            return Ok(None);
        }
        let spec = value_table_spec(&self.data_type, group_fields);
        let parser = self.converter.parser();
        let (mut up_groups, mut up_values, mut up_counts) = (Vec::new(), Vec::new(), Vec::new());
        let (mut gone_groups, mut gone_values) = (Vec::new(), Vec::new());
        for entry in std::mem::take(&mut self.changed) {
            match self.counts.get(&entry) {
                Some(&count) => {
                    up_groups.push(entry.0);
                    up_values.push(entry.1);
                    up_counts.push(count);
                }
                None => {
                    gone_groups.push(entry.0);
                    gone_values.push(entry.1);
                }
            }
        }
        let decode = |values: &[Box<[u8]>]| -> Result<ArrayRef> {
            let rows = values.iter().map(|v| parser.parse(v));
            Ok(self.converter.convert_rows(rows)?.remove(0))
        };
        let upserts = (up_groups, decode(&up_values)?, up_counts);
        let deletes = (gone_groups, decode(&gone_values)?);
        value_delta(&spec, keys, upserts, deletes).map(Some)
    }

    fn restore_values(&mut self, groups: &[KeyId], rows: &RecordBatch) -> Result<()> {
        let width = rows.num_columns();
        let values = self
            .converter
            .convert_columns(&rows.columns()[width - 2..width - 1])?;
        let counts = rows.column(width - 1).as_primitive::<Int64Type>();
        for (i, &g) in groups.iter().enumerate() {
            let bytes: Box<[u8]> = values.row(i).as_ref().into();
            self.bytes += bytes.len() + VALUE_ENTRY_BYTES;
            self.counts.insert((g, bytes), counts.value(i));
        }
        Ok(())
    }

    fn forget(&mut self, groups: &[KeyId]) {
        for &g in groups {
            let entries: Vec<GroupValue> = self
                .counts
                .range(group_range(g))
                .map(|(entry, _)| entry.clone())
                .collect();
            for entry in entries {
                self.counts.remove(&entry);
                self.bytes -= entry.1.len() + VALUE_ENTRY_BYTES;
                self.changed.insert(entry);
            }
        }
    }
}

impl GroupAccumulator for ValueCounts {
    fn update(
        &mut self,
        args: &[ArrayRef],
        groups: &[KeyId],
        weights: &[i64],
        mask: Option<&BooleanArray>,
        _groups_len: usize,
    ) -> Result<()> {
        let nulls = args[0].logical_nulls();
        let rows = self.converter.convert_columns(&args[..1])?;
        for (i, (&g, &w)) in groups.iter().zip(weights).enumerate() {
            if !included(mask, nulls.as_ref(), i) || w == 0 {
                continue;
            }
            let entry = (g, Box::<[u8]>::from(rows.row(i).as_ref()));
            let len = entry.1.len();
            let count = self.counts.entry(entry.clone()).or_insert(0);
            let new = *count == 0;
            *count += w;
            if *count < 0 {
                return Err(over_removed());
            }
            let gone = *count == 0;
            if gone {
                self.counts.remove(&entry);
            }
            match (new, gone) {
                (true, false) => self.bytes += len + VALUE_ENTRY_BYTES,
                (false, true) => self.bytes -= len + VALUE_ENTRY_BYTES,
                _ => {}
            }
            self.changed.insert(entry);
        }
        Ok(())
    }

    fn evaluate(&self, groups: &[KeyId]) -> Result<ArrayRef> {
        decode_values(&self.converter, groups, |g| {
            let mut range = self.counts.range(group_range(g));
            let found = if self.max {
                range.next_back()
            } else {
                range.next()
            };
            found.map(|((_, bytes), _)| bytes.as_ref())
        })
    }

    fn reset(&mut self, _group: KeyId) {
        // A group is reset only once every row left it, and with them
        // every value.
    }

    fn memory_size(&self) -> usize {
        self.bytes + self.converter.size()
    }

    fn values(&mut self) -> Option<&mut dyn ValueTable> {
        Some(self)
    }

    fn values_spec(&self, group_fields: &[Field]) -> Option<TableSpec> {
        Some(value_table_spec(&self.data_type, group_fields))
    }

    fn value_entries(&self) -> Option<usize> {
        Some(self.counts.len())
    }
}

fn over_removed() -> DataFusionError {
    DataFusionError::Internal(
        "a value was removed from an aggregate more often than it was added".into(),
    )
}

/// `count(DISTINCT x)`: each group's distinct values with how many rows
/// hold them, as (group id, value) pairs interned in a [`KeyIndex`], and
/// the number of distinct values per group.
///
/// Memory per distinct (group, value): the index's entry (the pair's
/// encoding, 5 bytes plus the value's, and about 26 bytes of spans and
/// hash table) and 13 bytes of count, group and change flag.
#[derive(Debug)]
pub(crate) struct DistinctValues {
    data_type: DataType,
    /// (group id, value) pairs.
    pairs: KeyIndex,
    /// By pair id: rows holding the pair; 0 for a pair that is gone but
    /// still to be deleted from the durable table.
    counts: Vec<i64>,
    /// By pair id: its group.
    group_of: Vec<KeyId>,
    /// By group id: how many pairs of the group have a count.
    distinct: Vec<i64>,
    /// Pairs changed since the last delta, and a flag per pair id.
    changed: Vec<KeyId>,
    is_changed: Vec<bool>,
}

impl DistinctValues {
    /// `count(DISTINCT x)` of values of `data_type`.
    pub(crate) fn new(data_type: &DataType) -> Result<Self> {
        Ok(DistinctValues {
            data_type: data_type.clone(),
            pairs: KeyIndex::new(&[DataType::UInt32, data_type.clone()]).map_err(external)?,
            counts: Vec::new(),
            group_of: Vec::new(),
            distinct: Vec::new(),
            changed: Vec::new(),
            is_changed: Vec::new(),
        })
    }

    /// Adds `weight` rows to pair `pair` of group `g` (`new`: just interned).
    fn add(&mut self, pair: KeyId, g: KeyId, new: bool, weight: i64) -> Result<()> {
        let p = pair as usize;
        if new {
            grow(&mut self.counts, p + 1, 0);
            grow(&mut self.group_of, p + 1, 0);
            grow(&mut self.is_changed, p + 1, false);
            self.counts[p] = 0;
            self.group_of[p] = g;
        }
        let before = self.counts[p];
        let after = before + weight;
        if after < 0 {
            return Err(over_removed());
        }
        self.counts[p] = after;
        grow(&mut self.distinct, g as usize + 1, 0);
        self.distinct[g as usize] += i64::from(after > 0) - i64::from(before > 0);
        self.mark(pair);
        Ok(())
    }

    fn mark(&mut self, pair: KeyId) {
        let flag = &mut self.is_changed[pair as usize];
        if !*flag {
            *flag = true;
            self.changed.push(pair);
        }
    }
}

fn external(e: weir_state::StateError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

impl ValueTable for DistinctValues {
    fn take_delta(
        &mut self,
        keys: &KeyIndex,
        group_fields: &[Field],
    ) -> Result<Option<DeltaBatches>> {
        if self.changed.is_empty() {
            return Ok(None);
        }
        let spec = value_table_spec(&self.data_type, group_fields);
        let changed = std::mem::take(&mut self.changed);
        let (present, gone): (Vec<KeyId>, Vec<KeyId>) = changed
            .into_iter()
            .partition(|&pair| self.counts[pair as usize] > 0);
        let values = |pairs: &[KeyId]| -> Result<ArrayRef> {
            Ok(self.pairs.decode(pairs).map_err(external)?.remove(1))
        };
        let groups = |pairs: &[KeyId]| -> Vec<KeyId> {
            pairs.iter().map(|&p| self.group_of[p as usize]).collect()
        };
        let counts = present.iter().map(|&p| self.counts[p as usize]).collect();
        let upserts = (groups(&present), values(&present)?, counts);
        let deletes = (groups(&gone), values(&gone)?);
        let delta = value_delta(&spec, keys, upserts, deletes)?;
        for &pair in present.iter().chain(&gone) {
            self.is_changed[pair as usize] = false;
        }
        for pair in gone {
            self.pairs.remove(pair);
        }
        Ok(Some(delta))
    }

    fn restore_values(&mut self, groups: &[KeyId], rows: &RecordBatch) -> Result<()> {
        let width = rows.num_columns();
        let group_ids: ArrayRef = Arc::new(UInt32Array::from_iter_values(groups.iter().copied()));
        let columns = [group_ids, rows.column(width - 2).clone()];
        let probe = self
            .pairs
            .prepare(&columns, rows.num_rows())
            .map_err(external)?;
        let counts = rows.column(width - 1).as_primitive::<Int64Type>();
        for (i, &g) in groups.iter().enumerate() {
            let (pair, new) = self.pairs.intern(&probe, i);
            self.add(pair, g, new, counts.value(i))?;
        }
        // Restored pairs are what the durable table holds already.
        for pair in std::mem::take(&mut self.changed) {
            self.is_changed[pair as usize] = false;
        }
        Ok(())
    }

    /// Scans every pair (a forgetting aggregate closes windows at most
    /// once per epoch; the scan is a pass over one vector of group ids).
    fn forget(&mut self, groups: &[KeyId]) {
        if groups.is_empty() {
            return;
        }
        let mut closing = vec![false; self.distinct.len()];
        for &g in groups {
            if let Some(flag) = closing.get_mut(g as usize) {
                *flag = true;
                self.distinct[g as usize] = 0;
            }
        }
        for pair in 0..self.counts.len() {
            let g = self.group_of[pair] as usize;
            if self.counts[pair] > 0 && closing.get(g).copied().unwrap_or(false) {
                self.counts[pair] = 0;
                self.mark(pair as KeyId);
            }
        }
    }
}

impl GroupAccumulator for DistinctValues {
    fn update(
        &mut self,
        args: &[ArrayRef],
        groups: &[KeyId],
        weights: &[i64],
        mask: Option<&BooleanArray>,
        _groups_len: usize,
    ) -> Result<()> {
        // Only the rows that count are encoded and hashed: a filtered
        // `count(DISTINCT x) FILTER (WHERE ...)` often takes few.
        let nulls = args[0].logical_nulls();
        let rows: Vec<u32> = (0..groups.len())
            .filter(|&i| included(mask, nulls.as_ref(), i) && weights[i] != 0)
            .map(|i| i as u32)
            .collect();
        let (groups, weights, values): (Cow<[KeyId]>, Cow<[i64]>, ArrayRef) =
            if rows.len() == groups.len() {
                (groups.into(), weights.into(), args[0].clone())
            } else {
                let indices = UInt32Array::from_iter_values(rows.iter().copied());
                (
                    rows.iter().map(|&i| groups[i as usize]).collect(),
                    rows.iter().map(|&i| weights[i as usize]).collect(),
                    take(&args[0], &indices, None)?,
                )
            };
        let group_ids = UInt32Array::from_iter_values(groups.iter().copied());
        let columns = [Arc::new(group_ids) as ArrayRef, values];
        let probe = self
            .pairs
            .prepare(&columns, groups.len())
            .map_err(external)?;
        for (i, (&g, &w)) in groups.iter().zip(weights.iter()).enumerate() {
            let (pair, new) = self.pairs.intern(&probe, i);
            self.add(pair, g, new, w)?;
        }
        Ok(())
    }

    fn evaluate(&self, groups: &[KeyId]) -> Result<ArrayRef> {
        Ok(Arc::new(Int64Array::from_iter_values(groups.iter().map(
            |&g| self.distinct.get(g as usize).copied().unwrap_or(0),
        ))))
    }

    fn reset(&mut self, _group: KeyId) {
        // A group is reset only once every row left it, and with them
        // every value.
    }

    fn memory_size(&self) -> usize {
        self.pairs.memory_size()
            + (self.counts.capacity() + self.distinct.capacity()) * 8
            + (self.group_of.capacity() + self.changed.capacity()) * 4
            + self.is_changed.capacity()
    }

    fn values(&mut self) -> Option<&mut dyn ValueTable> {
        Some(self)
    }

    fn values_spec(&self, group_fields: &[Field]) -> Option<TableSpec> {
        Some(value_table_spec(&self.data_type, group_fields))
    }

    fn value_entries(&self) -> Option<usize> {
        Some(self.pairs.len())
    }
}
