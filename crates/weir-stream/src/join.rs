//! Incremental joins: inner, outer, semi, anti and mark joins on equal
//! keys, with an optional residual condition.
//!
//! Each side is kept in columnar form, indexed by its join key
//! ([`KeyedRows`]). An inner join uses the delta rule
//! `Δ(L⋈R) = ΔL⋈R + L'⋈ΔR`: a change on one side probes the other side's
//! key index and is paired with the rows of its key, with `take` kernels.
//! The other kinds depend on whether a row has any match, so for the keys a
//! change touches they join the old and the new rows of those keys and
//! emit the difference. Either way the cost is the size of the touched key
//! groups.
//!
//! A side that is append-only (a source, or a stream of inserts) never
//! looks rows up for removal, so it keeps no row hashes.
//!
//! A processing-time temporal join, or lookup join (`JOIN t FOR
//! SYSTEM_TIME AS OF PROCTIME()`, as Flink and RisingWave write it), keeps
//! only its right side. Each left row (the left input only inserts) is
//! joined with the right rows of its key as they are when it comes, and
//! kept nowhere; a right-side change updates the right rows and emits
//! nothing, so earlier results stay as they were. Its state is the table
//! looked up, however many rows stream past.

use std::collections::BTreeSet;
use std::sync::Arc;

use datafusion::arrow::array::{new_null_array, Array, ArrayRef, BooleanArray, UInt32Array};
use datafusion::arrow::compute::{and, is_not_null, take, take_record_batch};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::common::JoinType;
use datafusion::error::DataFusionError;
use weir_state::{DeltaBatches, KeyId, KeyIndex, TableSpec};

use crate::join_window::{JoinExpiry, JoinWindows};
use crate::keyed_rows::KeyedRows;
use crate::operator::expect_tables;
use crate::plan::JoinSpec;
use crate::watermark::Watermarks;
use crate::{Changes, Operator, Result};

/// A join of two changing inputs.
#[derive(Debug)]
pub struct Join {
    spec: JoinSpec,
    left: KeyedRows,
    right: KeyedRows,
    output_schema: SchemaRef,
    key_types: Vec<DataType>,
    /// A window join's windows (see [`JoinWindows`]).
    windows: Option<JoinWindows>,
}

/// What a null-aware anti join needs to know about its right side as a
/// whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RightStatus {
    empty: bool,
    has_null: bool,
}

impl Join {
    /// A join of rows of `left_schema` and `right_schema`;
    /// `append_only[i]`: input `i` never deletes.
    pub fn new(
        spec: JoinSpec,
        left_schema: SchemaRef,
        right_schema: SchemaRef,
        output_schema: SchemaRef,
        append_only: [bool; 2],
    ) -> Result<Self> {
        let mut key_types = Vec::new();
        for (l, r) in spec.left_keys.iter().zip(&spec.right_keys) {
            let (lt, rt) = (l.data_type(&left_schema)?, r.data_type(&right_schema)?);
            if lt != rt {
                return Err(DataFusionError::NotImplemented(format!(
                    "join keys of different types ({lt} and {rt})"
                )));
            }
            key_types.push(lt);
        }
        if spec.null_aware && (spec.right_keys.len() != 1 || spec.filter.is_some()) {
            return Err(DataFusionError::NotImplemented(
                "materialized views do not support NOT IN with several columns or extra conditions"
                    .into(),
            ));
        }
        Ok(Join {
            left: KeyedRows::new(left_schema, spec.left_keys.clone(), !append_only[0])?,
            right: KeyedRows::new(right_schema, spec.right_keys.clone(), !append_only[1])?,
            spec,
            output_schema,
            key_types,
            windows: None,
        })
    }

    /// Makes the join forget the rows no row to come on the other side
    /// can match (a window or interval join, `expiry`: see
    /// [`JoinWindows`]; an outer, semi, anti or mark join's rows also
    /// wait for the preserved rows they matched).
    /// Both sides then keep rows by id, so that a row can leave the state.
    /// Other joins are unchanged.
    pub fn with_expiry(mut self, expiry: Option<JoinExpiry>) -> Result<Self> {
        let Some(expiry) = expiry else {
            return Ok(self);
        };
        if self.spec.null_aware || self.spec.temporal {
            return Ok(self);
        }
        let preserved = match self.spec.join_type {
            JoinType::Inner => [false, false],
            JoinType::Left | JoinType::LeftSemi | JoinType::LeftAnti | JoinType::LeftMark => {
                [true, false]
            }
            JoinType::Right | JoinType::RightSemi | JoinType::RightAnti | JoinType::RightMark => {
                [false, true]
            }
            JoinType::Full => [true, true],
        };
        let deletes = [self.left.updating(), self.right.updating()];
        let Some(windows) = JoinWindows::new(expiry, deletes, preserved) else {
            return Ok(self);
        };
        // Rows that leave need ids; a side that never deletes needs no
        // hashes to find deleted rows by.
        for (store, deletes) in [&mut self.left, &mut self.right].into_iter().zip(deletes) {
            if !deletes {
                let keys = store.key_exprs().to_vec();
                *store = KeyedRows::removable(store.schema().clone(), keys, true)?;
            }
        }
        self.windows = Some(windows);
        Ok(self)
    }

    /// Lists the rows just stored on a side by the values that expire them.
    fn list_windows(&mut self, from_left: bool, input: &Changes, ids: &[KeyId]) -> Result<()> {
        match self.windows.as_mut() {
            Some(windows) => windows.list(usize::from(!from_left), ids, &input.rows),
            None => Ok(()),
        }
    }

    fn side(&self, left: bool) -> &KeyedRows {
        if left {
            &self.left
        } else {
            &self.right
        }
    }

    fn side_mut(&mut self, left: bool) -> &mut KeyedRows {
        if left {
            &mut self.left
        } else {
            &mut self.right
        }
    }

    /// Whether each row's key can match: no NULL in it (unless the join
    /// treats NULLs as equal).
    fn matchable(&self, columns: &[ArrayRef], rows: usize) -> Result<Vec<bool>> {
        if self.spec.nulls_equal {
            return Ok(vec![true; rows]);
        }
        not_null_rows(columns, rows)
    }

    /// The delta rule: `input` (on the left side if `from_left`) paired
    /// with the other side's stored rows of the same keys.
    fn delta_inner(&self, from_left: bool, input: &Changes) -> Result<Changes> {
        let this = self.side(from_left);
        let other = self.side(!from_left);
        let columns = this.key_columns(&input.rows)?;
        let matchable = self.matchable(&columns, input.len())?;
        let other_keys = other.find_keys(&columns, input.len())?;
        let (mut mine, mut theirs) = (Vec::new(), Vec::new());
        for (i, key) in other_keys.iter().enumerate() {
            if let (true, Some(key)) = (matchable[i], key) {
                if other.has_key(*key) {
                    mine.push(i as u32);
                    theirs.push(*key);
                }
            }
        }
        if mine.is_empty() {
            return Ok(Changes::empty(self.output_schema.clone()));
        }
        // The other side's rows of each matched key, and which input row
        // each pairs with.
        let matches = other.rows_with_keys_each(&theirs)?;
        let pairs_mine: Vec<u32> = mine
            .iter()
            .zip(&matches.counts)
            .flat_map(|(&row, &count)| std::iter::repeat_n(row, count))
            .collect();
        let stored = &matches.rows;
        let at = UInt32Array::from(pairs_mine);
        let mine = Changes::new(
            take_batch(&input.rows, &at)?,
            as_i64(&take(&input.weights, &at, None)?)?,
        )?;
        let (left, right) = if from_left {
            (&mine, stored)
        } else {
            (stored, &mine)
        };
        let pairs = side_by_side(left, right)?;
        let pairs = match &self.spec.filter {
            Some(filter) => {
                let mask = filter.evaluate(&pairs.rows)?.into_array(pairs.len())?;
                let mask = mask
                    .as_any()
                    .downcast_ref::<BooleanArray>()
                    .ok_or_else(|| {
                        DataFusionError::Internal("join filter is not boolean".into())
                    })?;
                pairs.filter(mask)?
            }
            None => pairs,
        };
        pairs.with_schema(self.output_schema.clone())
    }

    /// The join of `left` and `right` (rows of the same keys), as `kind`.
    fn join(&self, kind: JoinType, left: &Changes, right: &Changes) -> Result<Changes> {
        let left_columns = self.left.key_columns(&left.rows)?;
        let right_columns = self.right.key_columns(&right.rows)?;
        let left_ok = self.matchable(&left_columns, left.len())?;
        let right_ok = self.matchable(&right_columns, right.len())?;
        // A scratch index of the right rows' keys: the rows of each key.
        let mut index = KeyIndex::new(&self.key_types).map_err(external)?;
        let probe = index
            .prepare(&right_columns, right.len())
            .map_err(external)?;
        let mut by_key: Vec<Vec<u32>> = Vec::new();
        for (j, _) in right_ok.iter().enumerate().filter(|(_, &ok)| ok) {
            let (key, _) = index.intern(&probe, j);
            if by_key.len() <= key as usize {
                by_key.resize(key as usize + 1, Vec::new());
            }
            by_key[key as usize].push(j as u32);
        }
        let probe = index.prepare(&left_columns, left.len()).map_err(external)?;
        let (mut li, mut ri) = (Vec::new(), Vec::new());
        for (i, _) in left_ok.iter().enumerate().filter(|(_, &ok)| ok) {
            if let Some(key) = index.find(&probe, i) {
                let matches = &by_key[key as usize];
                li.extend(std::iter::repeat_n(i as u32, matches.len()));
                ri.extend_from_slice(matches);
            }
        }
        let (li, ri) = (UInt32Array::from(li), UInt32Array::from(ri));
        let taken = |c: &Changes, at: &UInt32Array| -> Result<Changes> {
            Changes::new(
                take_batch(&c.rows, at)?,
                as_i64(&take(&c.weights, at, None)?)?,
            )
        };
        let mut pairs = side_by_side(&taken(left, &li)?, &taken(right, &ri)?)?;
        let (mut li, mut ri) = (li, ri);
        if let Some(filter) = &self.spec.filter {
            let mask = filter.evaluate(&pairs.rows)?.into_array(pairs.len())?;
            let mask = mask
                .as_any()
                .downcast_ref::<BooleanArray>()
                .ok_or_else(|| DataFusionError::Internal("join filter is not boolean".into()))?;
            let mask = crate::changes::null_as_false(mask);
            pairs = pairs.filter(&mask)?;
            li = filter_indices(&li, &mask)?;
            ri = filter_indices(&ri, &mask)?;
        }
        let left_matched = matched(left.len(), &li);
        let right_matched = matched(right.len(), &ri);
        let mut parts = Vec::new();
        match kind {
            JoinType::Inner => parts.push(pairs),
            JoinType::Left => {
                parts.push(pairs);
                parts.push(self.padded(left, &left_matched, true)?);
            }
            JoinType::Right => {
                parts.push(pairs);
                parts.push(self.padded(right, &right_matched, false)?);
            }
            JoinType::Full => {
                parts.push(pairs);
                parts.push(self.padded(left, &left_matched, true)?);
                parts.push(self.padded(right, &right_matched, false)?);
            }
            JoinType::LeftSemi => parts.push(left.filter(&BooleanArray::from(left_matched))?),
            JoinType::LeftAnti => parts.push(left.filter(&negated(&left_matched))?),
            JoinType::RightSemi => parts.push(right.filter(&BooleanArray::from(right_matched))?),
            JoinType::RightAnti => parts.push(right.filter(&negated(&right_matched))?),
            JoinType::LeftMark => parts.push(marked(left, left_matched)?),
            JoinType::RightMark => parts.push(marked(right, right_matched)?),
        }
        let parts = parts
            .into_iter()
            .map(|p| p.with_schema(self.output_schema.clone()))
            .collect::<Result<Vec<_>>>()?;
        Changes::concat(&self.output_schema, &parts)
    }

    /// The rows of one side that matched nothing, with NULLs for the
    /// other side's columns.
    fn padded(&self, rows: &Changes, matched: &[bool], side_is_left: bool) -> Result<Changes> {
        let lonely = rows.filter(&negated(matched))?;
        let other = self.side(!side_is_left).schema();
        let nulls: Vec<ArrayRef> = other
            .fields()
            .iter()
            .map(|f| new_null_array(f.data_type(), lonely.len()))
            .collect();
        let mut columns = Vec::new();
        if side_is_left {
            columns.extend(lonely.rows.columns().iter().cloned());
            columns.extend(nulls);
        } else {
            columns.extend(nulls);
            columns.extend(lonely.rows.columns().iter().cloned());
        }
        let batch = RecordBatch::try_new_with_options(
            self.output_schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(lonely.len())),
        )?;
        Changes::new(batch, lonely.weights)
    }

    /// `kind` join of one side's rows with the other side's.
    fn join_sides(
        &self,
        kind: JoinType,
        this_is_left: bool,
        this: &Changes,
        other: &Changes,
    ) -> Result<Changes> {
        if this_is_left {
            self.join(kind, this, other)
        } else {
            self.join(kind, other, this)
        }
    }

    /// The distinct keys of `input` that side `left` holds, and the other
    /// side's ids for the same key values.
    fn touched_keys(&self, from_left: bool, input: &Changes) -> Result<(Vec<KeyId>, Vec<KeyId>)> {
        let columns = self.side(from_left).key_columns(&input.rows)?;
        let mine = distinct(self.side(from_left).find_keys(&columns, input.len())?);
        let theirs = distinct(self.side(!from_left).find_keys(&columns, input.len())?);
        Ok((mine, theirs))
    }

    fn right_status(&self) -> Result<RightStatus> {
        let empty = self.right.is_empty();
        let null = new_null_array(&self.key_types[0], 1);
        let has_null = self
            .right
            .find_keys(&[null], 1)?
            .first()
            .copied()
            .flatten()
            .is_some_and(|k| self.right.has_key(k));
        Ok(RightStatus { empty, has_null })
    }

    /// `left NOT IN right` for left rows and the right rows of their keys.
    fn not_in(&self, left: &Changes, right: &Changes, status: RightStatus) -> Result<Changes> {
        if status.empty {
            return left.clone().with_schema(self.output_schema.clone());
        }
        if status.has_null {
            return Ok(Changes::empty(self.output_schema.clone()));
        }
        let unmatched = self.join(JoinType::LeftAnti, left, right)?;
        // `NULL NOT IN (non-empty set)` is NULL, so those rows drop out.
        let columns = self.left.key_columns(&unmatched.rows)?;
        let known = not_null_rows(&columns, unmatched.len())?;
        unmatched.filter(&BooleanArray::from(known))
    }

    /// A null-aware anti join's step: the touched keys' rows before and
    /// after, and, when the right side's emptiness or NULL-ness flipped,
    /// every other left row too (their answer depends on it).
    fn process_not_in(&mut self, from_left: bool, input: Changes) -> Result<Vec<Changes>> {
        let before = self.right_status()?;
        let (mine, theirs) = self.touched_keys(from_left, &input)?;
        let (left_keys, right_keys) = if from_left {
            (mine, theirs)
        } else {
            (theirs, mine)
        };
        let left_before = self.left.rows_with_keys(left_keys.iter().copied())?;
        let right_before = self.right.rows_with_keys(right_keys.iter().copied())?;
        let mut out = vec![self.not_in(&left_before, &right_before, before)?.negate()];
        self.side_mut(from_left).update(&input)?;
        let after = self.right_status()?;
        let (left_keys, right_keys) = {
            let (mine, theirs) = self.touched_keys(from_left, &input)?;
            if from_left {
                (mine, theirs)
            } else {
                (theirs, mine)
            }
        };
        let left_after = self.left.rows_with_keys(left_keys.iter().copied())?;
        let right_after = self.right.rows_with_keys(right_keys.iter().copied())?;
        out.push(self.not_in(&left_after, &right_after, after)?);
        if before != after {
            let (rest, _) = self.left.rows_without_keys(&left_keys)?;
            let rest_columns = self.left.key_columns(&rest.rows)?;
            let rights = distinct(self.right.find_keys(&rest_columns, rest.len())?);
            let rights = self.right.rows_with_keys(rights)?;
            out.push(self.not_in(&rest, &rights, before)?.negate());
            out.push(self.not_in(&rest, &rights, after)?);
        }
        Ok(out)
    }
}

impl Operator for Join {
    fn process(&mut self, port: usize, input: Changes) -> Result<Vec<Changes>> {
        let from_left = port == 0;
        if self.spec.null_aware {
            return self.process_not_in(from_left, input);
        }
        if self.spec.temporal {
            return self.process_temporal(from_left, input);
        }
        let kind = self.spec.join_type;
        if kind == JoinType::Inner {
            // The delta rule: the change joined with the other side.
            let out = self.delta_inner(from_left, &input)?;
            let ids = self.side_mut(from_left).update(&input)?;
            self.list_windows(from_left, &input, &ids)?;
            return Ok(vec![out]);
        }
        // Whether a row matches can flip: the touched keys' rows before
        // the change go out, after it come in.
        let (mine, theirs) = self.touched_keys(from_left, &input)?;
        let others = self.side(!from_left).rows_with_keys(theirs)?;
        let before = self.side(from_left).rows_with_keys(mine)?;
        let mut out = vec![self.join_sides(kind, from_left, &before, &others)?.negate()];
        let keys = self.side_mut(from_left).update(&input)?;
        self.list_windows(from_left, &input, &keys)?;
        let after = self.side(from_left).rows_with_keys(distinct_ids(keys))?;
        out.push(self.join_sides(kind, from_left, &after, &others)?);
        Ok(out)
    }

    fn advance(&mut self, watermarks: &Watermarks) -> Result<Vec<Changes>> {
        if let Some(windows) = self.windows.as_mut() {
            windows.expire(watermarks, [&mut self.left, &mut self.right])?;
        }
        Ok(Vec::new())
    }

    // A temporal join's state is its right side only.
    fn state_specs(&self) -> Vec<TableSpec> {
        if self.spec.temporal {
            return vec![self.right.state_spec()];
        }
        vec![self.left.state_spec(), self.right.state_spec()]
    }

    fn checkpoint(&mut self) -> Result<Vec<Option<DeltaBatches>>> {
        if self.spec.temporal {
            return Ok(vec![self.right.take_delta()?]);
        }
        Ok(vec![self.left.take_delta()?, self.right.take_delta()?])
    }

    fn restore(&mut self, tables: &[RecordBatch]) -> Result<()> {
        if self.spec.temporal {
            expect_tables(tables, 1)?;
            return self.right.restore(&tables[0]);
        }
        expect_tables(tables, 2)?;
        self.left.restore(&tables[0])?;
        self.right.restore(&tables[1])?;
        self.list_restored(tables)
    }

    fn restore_share(
        &mut self,
        tables: &[RecordBatch],
        instance: usize,
        placement: &crate::Placement,
    ) -> Result<()> {
        let by_key = self.spec.partitions();
        if self.spec.temporal {
            expect_tables(tables, 1)?;
            return self
                .right
                .restore_share(&tables[0], instance, placement, by_key);
        }
        expect_tables(tables, 2)?;
        self.left
            .restore_share(&tables[0], instance, placement, by_key)?;
        self.right
            .restore_share(&tables[1], instance, placement, by_key)?;
        self.list_restored(tables)
    }

    fn memory_size(&self) -> usize {
        self.left.memory_size() + self.right.memory_size()
    }

    fn state_rows(&self) -> Vec<usize> {
        if self.spec.temporal {
            return vec![self.right.live_rows()];
        }
        vec![self.left.live_rows(), self.right.live_rows()]
    }
}

impl Join {
    /// A temporal join's step: a left change is joined with the right rows
    /// of its keys as they are now; a right change only updates them.
    fn process_temporal(&mut self, from_left: bool, input: Changes) -> Result<Vec<Changes>> {
        if !from_left {
            self.right.update(&input)?;
            return Ok(Vec::new());
        }
        if self.spec.join_type == JoinType::Inner {
            return Ok(vec![self.delta_inner(true, &input)?]);
        }
        let columns = self.left.key_columns(&input.rows)?;
        let keys = distinct(self.right.find_keys(&columns, input.len())?);
        let matches = self.right.rows_with_keys(keys)?;
        Ok(vec![self.join(self.spec.join_type, &input, &matches)?])
    }

    /// Lists the restored rows by the values that expire them (`tables`:
    /// every stored row; rows of other instances find no key here and
    /// are skipped).
    fn list_restored(&mut self, tables: &[RecordBatch]) -> Result<()> {
        let Some(windows) = self.windows.as_mut() else {
            return Ok(());
        };
        for (side, stored) in tables.iter().enumerate() {
            let store = if side == 0 { &self.left } else { &self.right };
            let rows = store.stored_rows(stored)?;
            let ids = store.find_keys(&store.key_columns(&rows)?, rows.num_rows())?;
            let (ids, here): (Vec<KeyId>, Vec<u32>) = ids
                .into_iter()
                .enumerate()
                .filter_map(|(row, id)| id.map(|id| (id, row as u32)))
                .unzip();
            let rows = take_record_batch(&rows, &UInt32Array::from(here))?;
            windows.list(side, &ids, &rows)?;
        }
        Ok(())
    }
}

/// Each distinct id once, in first-seen order.
fn distinct(ids: Vec<Option<KeyId>>) -> Vec<KeyId> {
    distinct_ids(ids.into_iter().flatten().collect())
}

fn distinct_ids(ids: Vec<KeyId>) -> Vec<KeyId> {
    let mut seen = BTreeSet::new();
    ids.into_iter().filter(|id| seen.insert(*id)).collect()
}

/// Rows of both sides side by side, weights multiplied.
fn side_by_side(left: &Changes, right: &Changes) -> Result<Changes> {
    let columns: Vec<ArrayRef> = left
        .rows
        .columns()
        .iter()
        .chain(right.rows.columns())
        .cloned()
        .collect();
    let weights = datafusion::arrow::compute::kernels::numeric::mul(&left.weights, &right.weights)?;
    let mut fields: Vec<_> = left.rows.schema().fields().iter().cloned().collect();
    fields.extend(right.rows.schema().fields().iter().cloned());
    let batch = RecordBatch::try_new_with_options(
        Arc::new(Schema::new(fields)),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(left.len())),
    )?;
    Changes::new(batch, as_i64(&weights)?)
}

fn take_batch(batch: &RecordBatch, at: &UInt32Array) -> Result<RecordBatch> {
    let columns = batch
        .columns()
        .iter()
        .map(|c| take(c.as_ref(), at, None))
        .collect::<std::result::Result<Vec<ArrayRef>, _>>()?;
    Ok(RecordBatch::try_new_with_options(
        batch.schema(),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(at.len())),
    )?)
}

fn as_i64(array: &ArrayRef) -> Result<datafusion::arrow::array::Int64Array> {
    crate::changes::as_weights(array)
}

/// Whether each row has no NULL in any of `columns`.
fn not_null_rows(columns: &[ArrayRef], rows: usize) -> Result<Vec<bool>> {
    let mut mask = BooleanArray::from(vec![true; rows]);
    for column in columns {
        if column.null_count() > 0 {
            mask = and(&mask, &is_not_null(column.as_ref())?)?;
        }
    }
    Ok(mask.values().iter().collect())
}

fn matched(len: usize, indices: &UInt32Array) -> Vec<bool> {
    let mut matched = vec![false; len];
    for &i in indices.values() {
        matched[i as usize] = true;
    }
    matched
}

fn negated(mask: &[bool]) -> BooleanArray {
    BooleanArray::from_iter(mask.iter().map(|m| Some(!m)))
}

fn filter_indices(indices: &UInt32Array, mask: &BooleanArray) -> Result<UInt32Array> {
    let kept = datafusion::arrow::compute::filter(indices, mask)?;
    Ok(kept
        .as_any()
        .downcast_ref::<UInt32Array>()
        .expect("filtered indices")
        .clone())
}

/// `rows` with a trailing boolean column: whether each row matched.
fn marked(rows: &Changes, matched: Vec<bool>) -> Result<Changes> {
    let mut columns = rows.rows.columns().to_vec();
    columns.push(Arc::new(BooleanArray::from(matched)));
    let mut fields: Vec<_> = rows.schema().fields().iter().cloned().collect();
    fields.push(Arc::new(Field::new("mark", DataType::Boolean, false)));
    let batch = RecordBatch::try_new_with_options(
        Arc::new(Schema::new(fields)),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(rows.len())),
    )?;
    Changes::new(batch, rows.weights.clone())
}

fn external(e: weir_state::StateError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::join_window::{interval_join, joined_schema, window_join};
    use crate::testing::{int_bound, kv, kv_schema, net, rows};
    use datafusion::physical_expr::expressions::col;
    use datafusion::physical_expr::PhysicalExprRef;

    fn join(join_type: JoinType) -> Join {
        let schema = kv_schema();
        let spec = JoinSpec {
            join_type,
            left_keys: vec![col("k", &schema).unwrap()],
            right_keys: vec![col("k", &schema).unwrap()],
            filter: None,
            nulls_equal: false,
            null_aware: false,
            temporal: false,
        };
        let mut fields: Vec<_> = schema.fields().iter().cloned().collect();
        fields.extend(schema.fields().iter().cloned());
        let out = match join_type {
            JoinType::LeftSemi | JoinType::LeftAnti => schema.clone(),
            _ => Arc::new(Schema::new(fields)),
        };
        Join::new(spec, schema.clone(), schema, out, [false, false]).unwrap()
    }

    #[test]
    fn inner_join_multiplies_duplicates_and_retracts_on_delete() {
        let mut join = join(JoinType::Inner);
        let mut out = join
            .process(0, kv(&[(Some(1), Some(10), 2), (None, Some(0), 1)]))
            .unwrap();
        assert!(net(&out).is_empty(), "nothing on the right yet");
        out.extend(
            join.process(1, kv(&[(Some(1), Some(7), 1), (None, Some(0), 1)]))
                .unwrap(),
        );
        assert_eq!(net(&out), rows(&[("1,10,1,7", 2)]), "NULL keys never match");
        out.extend(join.process(0, kv(&[(Some(1), Some(10), -1)])).unwrap());
        assert_eq!(net(&out), rows(&[("1,10,1,7", 1)]));
        assert_eq!(join.state_rows(), vec![2, 2]);
    }

    /// A temporal join of `join_type` on `k`, its left side append-only.
    fn temporal(join_type: JoinType) -> Join {
        let base = join(join_type);
        let spec = JoinSpec {
            temporal: true,
            ..base.spec.clone()
        };
        let schema = kv_schema();
        Join::new(
            spec,
            schema.clone(),
            schema,
            base.output_schema.clone(),
            [true, false],
        )
        .unwrap()
    }

    #[test]
    fn temporal_join_reads_the_right_side_as_of_each_left_row() {
        let mut join = temporal(JoinType::Inner);
        let mut out = join.process(1, kv(&[(Some(1), Some(7), 1)])).unwrap();
        assert!(net(&out).is_empty(), "a right change emits nothing");
        out.extend(
            join.process(0, kv(&[(Some(1), Some(10), 1), (None, Some(0), 1)]))
                .unwrap(),
        );
        assert_eq!(net(&out), rows(&[("1,10,1,7", 1)]), "NULL keys never match");
        // The right row changes: the earlier result stays, later rows see
        // the new value.
        out.extend(
            join.process(1, kv(&[(Some(1), Some(7), -1), (Some(1), Some(8), 1)]))
                .unwrap(),
        );
        assert_eq!(net(&out), rows(&[("1,10,1,7", 1)]));
        out.extend(join.process(0, kv(&[(Some(1), Some(11), 1)])).unwrap());
        assert_eq!(net(&out), rows(&[("1,10,1,7", 1), ("1,11,1,8", 1)]));
        assert_eq!(join.state_rows(), vec![1], "left rows are not kept");
    }

    #[test]
    fn temporal_left_join_pads_rows_with_no_match_when_they_come() {
        let mut join = temporal(JoinType::Left);
        let mut out = join.process(0, kv(&[(Some(1), Some(10), 1)])).unwrap();
        out.extend(join.process(1, kv(&[(Some(1), Some(7), 2)])).unwrap());
        out.extend(
            join.process(0, kv(&[(Some(1), Some(11), 1), (Some(2), Some(12), 1)]))
                .unwrap(),
        );
        assert_eq!(
            net(&out),
            rows(&[
                ("1,10,NULL,NULL", 1),
                ("1,11,1,7", 2),
                ("2,12,NULL,NULL", 1)
            ]),
            "the padded row stays padded after its key arrives"
        );
        let mut semi = temporal(JoinType::LeftAnti);
        let mut out = semi.process(1, kv(&[(Some(1), Some(7), 1)])).unwrap();
        out.extend(
            semi.process(0, kv(&[(Some(1), Some(10), 1), (Some(2), Some(12), 1)]))
                .unwrap(),
        );
        assert_eq!(net(&out), rows(&[("2,12", 1)]));
    }

    #[test]
    fn temporal_join_state_survives_a_checkpoint() {
        let mut join = temporal(JoinType::Inner);
        join.process(1, kv(&[(Some(1), Some(7), 1), (Some(2), Some(8), 1)]))
            .unwrap();
        join.process(0, kv(&[(Some(1), Some(10), 1)])).unwrap();
        let deltas = join.checkpoint().unwrap();
        assert_eq!(deltas.len(), 1, "only the right side is state");
        let mut tables = Vec::new();
        for (spec, delta) in join.state_specs().into_iter().zip(deltas) {
            let mut table = weir_state::StateTable::new(spec).unwrap();
            if let Some(d) = delta {
                table
                    .apply_delta(d.upserts.as_ref(), d.deletes.as_ref())
                    .unwrap();
            }
            tables.push(table.snapshot().stored_rows().unwrap());
        }
        let mut restored = temporal(JoinType::Inner);
        restored.restore(&tables).unwrap();
        let out = restored.process(0, kv(&[(Some(2), Some(20), 1)])).unwrap();
        assert_eq!(net(&out), rows(&[("2,20,2,8", 1)]));
    }

    /// An inner join whose key is a window: bounded by watermark node 7
    /// on the left and 8 on the right.
    fn joined_by_window() -> Join {
        window_joined(JoinType::Inner)
    }

    /// A join of `join_type` whose key is a window, as [`joined_by_window`].
    fn window_joined(join_type: JoinType) -> Join {
        let bound = int_bound;
        let join = join(join_type);
        let (left, right) = (
            join.spec.left_keys[0].clone(),
            join.spec.right_keys[0].clone(),
        );
        join.with_expiry(Some(window_join(left, right, [bound(7), bound(8)])))
            .unwrap()
    }

    #[test]
    fn a_window_join_keeps_expiring_after_its_store_is_rebuilt() {
        let mut join = joined_by_window();
        // 3,000 left rows in each of windows 1, 2 and 3.
        let rows: Vec<_> = (1..=3)
            .flat_map(|w| (0..3000).map(move |v| (Some(w), Some(v), 1)))
            .collect();
        join.process(0, kv(&rows)).unwrap();
        join.checkpoint().unwrap();
        // Windows 1 and 2 go; their 6,000 rows outnumber the 3,000 left,
        // so the next delta rebuilds the store.
        join.advance(&Watermarks::from([(7, 3), (8, 3)])).unwrap();
        assert_eq!(join.state_rows(), vec![3000, 0]);
        join.checkpoint().unwrap();
        join.process(0, kv(&[(Some(4), Some(1), 1)])).unwrap();
        // Window 3 still goes when the bound passes it.
        join.advance(&Watermarks::from([(7, 4), (8, 4)])).unwrap();
        assert_eq!(join.state_rows(), vec![1, 0]);
    }

    #[test]
    fn a_window_join_drops_rows_the_other_sides_watermark_passed() {
        let mut join = joined_by_window();
        join.process(0, kv(&[(Some(1), Some(10), 1), (Some(4), Some(40), 1)]))
            .unwrap();
        join.process(1, kv(&[(Some(2), Some(20), 1), (Some(5), Some(50), 1)]))
            .unwrap();
        // Right rows of windows below 3 come no more: left window 1 goes;
        // left rows reach only 2, so no right row goes.
        join.advance(&Watermarks::from([(7, 2), (8, 3)])).unwrap();
        assert_eq!(join.state_rows(), vec![1, 2]);
        // The stored rows leave through the state's deltas, and a restored
        // join keeps expiring them.
        let deltas = join.checkpoint().unwrap();
        assert!(deltas[0].as_ref().is_some_and(|d| d.deletes.is_none()));
        let out = join.process(1, kv(&[(Some(4), Some(41), 1)])).unwrap();
        assert_eq!(net(&out), rows(&[("4,40,4,41", 1)]));
        join.advance(&Watermarks::from([(7, 6), (8, 6)])).unwrap();
        assert_eq!(join.state_rows(), vec![0, 0]);
        let deltas = join.checkpoint().unwrap();
        assert!(deltas
            .iter()
            .all(|d| d.as_ref().is_some_and(|d| d.deletes.is_some())));
    }

    #[test]
    fn an_outer_window_join_forgets_a_window_on_both_sides_at_once() {
        let mut join = window_joined(JoinType::Left);
        let mut out = join
            .process(0, kv(&[(Some(1), Some(10), 1), (Some(4), Some(40), 1)]))
            .unwrap();
        out.extend(join.process(1, kv(&[(Some(1), Some(11), 1)])).unwrap());
        // The left bound passed window 1, the right one did not: a right
        // row of window 1 can still come and must find its left rows (and
        // the left rows' matches, which decide their padding), so both
        // sides keep the window.
        join.advance(&Watermarks::from([(7, 3), (8, 1)])).unwrap();
        assert_eq!(join.state_rows(), vec![2, 1]);
        out.extend(join.process(1, kv(&[(Some(1), Some(12), 1)])).unwrap());
        // Both bounds passed window 1: it leaves both sides at once.
        join.advance(&Watermarks::from([(7, 3), (8, 3)])).unwrap();
        assert_eq!(join.state_rows(), vec![1, 0]);
        assert_eq!(
            net(&out),
            rows(&[("1,10,1,11", 1), ("1,10,1,12", 1), ("4,40,NULL,NULL", 1)])
        );
        // Window 4 is kept; its left row finds a match and its padding goes.
        out.extend(join.process(1, kv(&[(Some(4), Some(41), 1)])).unwrap());
        assert_eq!(
            net(&out),
            rows(&[("1,10,1,11", 1), ("1,10,1,12", 1), ("4,40,4,41", 1)])
        );
        join.advance(&Watermarks::from([(7, 5), (8, 5)])).unwrap();
        assert_eq!(join.state_rows(), vec![0, 0]);
    }

    #[test]
    fn an_anti_window_join_forgets_windows() {
        let mut anti = window_joined(JoinType::LeftAnti);
        let mut out = anti
            .process(0, kv(&[(Some(1), Some(10), 1), (Some(2), Some(20), 1)]))
            .unwrap();
        out.extend(anti.process(1, kv(&[(Some(2), Some(21), 1)])).unwrap());
        anti.advance(&Watermarks::from([(7, 3), (8, 3)])).unwrap();
        assert_eq!(anti.state_rows(), vec![0, 0]);
        assert_eq!(net(&out), rows(&[("1,10", 1)]));
    }

    #[test]
    fn a_semi_window_join_keeps_a_match_while_its_left_row_can_match_again() {
        let mut semi = window_joined(JoinType::LeftSemi);
        let mut out = semi.process(0, kv(&[(Some(1), Some(10), 1)])).unwrap();
        out.extend(semi.process(1, kv(&[(Some(1), Some(11), 1)])).unwrap());
        // No left row of window 1 can come, but a right one can: the
        // right row stays, or the next one would emit the left row again.
        semi.advance(&Watermarks::from([(7, 3), (8, 1)])).unwrap();
        assert_eq!(semi.state_rows(), vec![1, 1]);
        out.extend(semi.process(1, kv(&[(Some(1), Some(12), 1)])).unwrap());
        assert_eq!(net(&out), rows(&[("1,10", 1)]));
        semi.advance(&Watermarks::from([(7, 3), (8, 3)])).unwrap();
        assert_eq!(semi.state_rows(), vec![0, 0]);
    }

    #[test]
    fn an_outer_interval_join_keeps_a_match_until_its_left_row_is_done() {
        // Left v in [right v - 2, right v]: a left row can match right
        // rows until the right bound passes v + 2; a right row stays until
        // then for each left row it matched.
        let mut join = interval_joined(JoinType::Left);
        let mut out = join
            .process(0, kv(&[(Some(1), Some(10), 1), (Some(2), Some(5), 1)]))
            .unwrap();
        out.extend(join.process(1, kv(&[(Some(1), Some(11), 1)])).unwrap());
        join.advance(&Watermarks::from([(7, 20), (8, 11)])).unwrap();
        // The unmatched left row (5) can match nothing more and goes; the
        // right row stays, as its left row (10) can still be matched.
        assert_eq!(join.state_rows(), vec![1, 1]);
        out.extend(join.process(1, kv(&[(Some(1), Some(12), 1)])).unwrap());
        assert_eq!(
            net(&out),
            rows(&[("1,10,1,11", 1), ("1,10,1,12", 1), ("2,5,NULL,NULL", 1)])
        );
        join.advance(&Watermarks::from([(7, 20), (8, 13)])).unwrap();
        assert_eq!(join.state_rows(), vec![0, 2]);
        join.advance(&Watermarks::from([(7, 20), (8, 15)])).unwrap();
        assert_eq!(join.state_rows(), vec![0, 0]);
        // A full join's rows each wait for the other side's too.
        let mut full = interval_joined(JoinType::Full);
        full.process(0, kv(&[(Some(1), Some(10), 1)])).unwrap();
        full.process(1, kv(&[(Some(1), Some(11), 1)])).unwrap();
        full.advance(&Watermarks::from([(7, 20), (8, 11)])).unwrap();
        assert_eq!(full.state_rows(), vec![1, 1]);
        full.advance(&Watermarks::from([(7, 20), (8, 13)])).unwrap();
        assert_eq!(full.state_rows(), vec![0, 1]);
    }

    /// An inner join on `k` of append-only sides whose condition keeps
    /// the left `v` at most 2 below the right one (`l.v >= r.v - 2 AND
    /// l.v <= r.v`), the `v`s bounded by watermark nodes 7 (left) and 8
    /// (right).
    fn interval_join_on_v() -> Join {
        interval_joined(JoinType::Inner)
    }

    /// A join of `join_type` with [`interval_join_on_v`]'s condition.
    fn interval_joined(join_type: JoinType) -> Join {
        use datafusion::logical_expr::Operator as Op;
        use datafusion::physical_expr::expressions::{lit, BinaryExpr, Column};
        let schema = kv_schema();
        let joined = joined_schema(&schema, &schema);
        let (l, r): (PhysicalExprRef, PhysicalExprRef) =
            (Arc::new(Column::new("v", 1)), Arc::new(Column::new("v", 3)));
        let lower = BinaryExpr::new(
            l.clone(),
            Op::GtEq,
            Arc::new(BinaryExpr::new(r.clone(), Op::Minus, lit(2i32))),
        );
        let upper = BinaryExpr::new(l, Op::LtEq, r);
        let spec = JoinSpec {
            filter: Some(Arc::new(BinaryExpr::new(
                Arc::new(lower),
                Op::And,
                Arc::new(upper),
            ))),
            ..join(join_type).spec
        };
        let expiry = interval_join(
            &spec,
            &joined,
            &[None, Some(int_bound(7))],
            &[None, Some(int_bound(8))],
        );
        assert!(expiry.is_some(), "the condition bounds left v by right v");
        let out = Arc::new(joined);
        Join::new(spec, schema.clone(), schema, out, [true, true])
            .unwrap()
            .with_expiry(expiry)
            .unwrap()
    }

    /// A join of `join_type` over append-only sides: window-joined on `k`
    /// (`interval` false) or interval-joined on `v` as
    /// [`interval_join_on_v`]; the one that expires rows and one that
    /// keeps them all.
    fn expiring_and_keeping(join_type: JoinType, interval: bool) -> (Join, Join) {
        let base = join(join_type);
        let filter = interval
            .then(|| interval_joined(join_type).spec.filter)
            .flatten();
        let spec = JoinSpec {
            filter,
            ..base.spec.clone()
        };
        let make = || {
            let schema = kv_schema();
            Join::new(
                spec.clone(),
                schema.clone(),
                schema,
                base.output_schema.clone(),
                [true, true],
            )
            .unwrap()
        };
        let schema = kv_schema();
        let expiry = match interval {
            true => interval_join(
                &spec,
                &joined_schema(&schema, &schema),
                &[None, Some(int_bound(7))],
                &[None, Some(int_bound(8))],
            ),
            false => Some(window_join(
                spec.left_keys[0].clone(),
                spec.right_keys[0].clone(),
                [int_bound(7), int_bound(8)],
            )),
        };
        (make().with_expiry(expiry).unwrap(), make())
    }

    #[test]
    fn joins_that_forget_rows_answer_as_joins_that_keep_them() {
        let mut seed = 11u64;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        let mut rows_out = 0;
        let mut forgotten = 0;
        for join_type in [
            JoinType::Inner,
            JoinType::Left,
            JoinType::Right,
            JoinType::Full,
            JoinType::LeftSemi,
            JoinType::LeftAnti,
        ] {
            for interval in [false, true] {
                let (mut expiring, mut keeping) = expiring_and_keeping(join_type, interval);
                assert!(expiring.windows.is_some(), "{join_type} expires rows");
                let (mut from_expiring, mut from_keeping) = (Vec::new(), Vec::new());
                // Each side's watermark; its rows come at or after it.
                let mut watermarks = [0i32, 0i32];
                for _ in 0..60 {
                    for _ in 0..next(4) {
                        let side = next(2) as usize;
                        let rows: Vec<_> = (0..1 + next(3))
                            .map(|_| {
                                let (k, v) = match interval {
                                    true => (next(3) as i32, watermarks[side] + next(6) as i32),
                                    false => (watermarks[side] + next(3) as i32, next(4) as i32),
                                };
                                (Some(k), Some(v), 1)
                            })
                            .collect();
                        from_expiring.extend(expiring.process(side, kv(&rows)).unwrap());
                        from_keeping.extend(keeping.process(side, kv(&rows)).unwrap());
                    }
                    for watermark in &mut watermarks {
                        *watermark += next(3) as i32;
                    }
                    let [left, right] = watermarks;
                    expiring
                        .advance(&Watermarks::from([
                            (7, i64::from(left)),
                            (8, i64::from(right)),
                        ]))
                        .unwrap();
                    assert_eq!(
                        net(&from_expiring),
                        net(&from_keeping),
                        "{join_type}, interval: {interval}"
                    );
                }
                rows_out += net(&from_keeping).len();
                let kept: usize = keeping.state_rows().iter().sum();
                let held: usize = expiring.state_rows().iter().sum();
                assert!(held < kept, "{join_type}: {held} rows held of {kept}");
                forgotten += kept - held;
            }
        }
        assert!(rows_out > 500, "{rows_out} rows out");
        assert!(forgotten > 500, "{forgotten} rows forgotten");
    }

    #[test]
    fn an_interval_join_drops_rows_no_row_to_come_can_match() {
        let mut join = interval_join_on_v();
        join.process(0, kv(&[(Some(1), Some(1), 1), (Some(1), Some(5), 1)]))
            .unwrap();
        let out = join
            .process(1, kv(&[(Some(1), Some(3), 1), (Some(1), Some(9), 1)]))
            .unwrap();
        assert_eq!(net(&out), rows(&[("1,1,1,3", 1)]));
        // Right rows to come have v >= 6, so they need left rows from 4
        // up: left 1 goes. Left rows to come have v >= 4, so they need
        // right rows from 4 up: right 3 goes.
        join.advance(&Watermarks::from([(7, 4), (8, 6)])).unwrap();
        assert_eq!(join.state_rows(), vec![1, 1]);
        let out = join.process(1, kv(&[(Some(1), Some(6), 1)])).unwrap();
        assert_eq!(net(&out), rows(&[("1,5,1,6", 1)]));
        // A restored join lists its rows again and goes on expiring them.
        let stored: Vec<RecordBatch> = join
            .checkpoint()
            .unwrap()
            .into_iter()
            .map(|d| d.and_then(|d| d.upserts).expect("rows stored"))
            .collect();
        let mut restored = interval_join_on_v();
        restored.restore(&stored).unwrap();
        assert_eq!(restored.state_rows(), vec![1, 2]);
        restored
            .advance(&Watermarks::from([(7, 10), (8, 10)]))
            .unwrap();
        assert_eq!(restored.state_rows(), vec![0, 0]);
    }

    #[test]
    fn left_join_pads_rows_until_a_match_arrives_and_after_it_leaves() {
        let mut join = join(JoinType::Left);
        let mut out = join
            .process(0, kv(&[(Some(1), Some(10), 1), (None, Some(5), 1)]))
            .unwrap();
        assert_eq!(
            net(&out),
            rows(&[("1,10,NULL,NULL", 1), ("NULL,5,NULL,NULL", 1)])
        );
        out.extend(join.process(1, kv(&[(Some(1), Some(7), 1)])).unwrap());
        assert_eq!(net(&out), rows(&[("1,10,1,7", 1), ("NULL,5,NULL,NULL", 1)]));
        out.extend(join.process(1, kv(&[(Some(1), Some(7), -1)])).unwrap());
        assert_eq!(
            net(&out),
            rows(&[("1,10,NULL,NULL", 1), ("NULL,5,NULL,NULL", 1)])
        );
    }

    #[test]
    fn anti_join_keeps_rows_without_a_match() {
        let mut join = join(JoinType::LeftAnti);
        let mut out = join
            .process(0, kv(&[(Some(1), Some(10), 1), (Some(2), Some(20), 1)]))
            .unwrap();
        out.extend(join.process(1, kv(&[(Some(2), None, 1)])).unwrap());
        assert_eq!(net(&out), rows(&[("1,10", 1)]));
    }

    #[test]
    fn state_round_trips_through_checkpoint_and_restore() {
        let mut join = join(JoinType::Full);
        let mut out = join
            .process(0, kv(&[(Some(1), Some(10), 1), (Some(2), Some(20), 1)]))
            .unwrap();
        out.extend(join.process(1, kv(&[(Some(2), Some(7), 1)])).unwrap());
        let deltas = join.checkpoint().unwrap();
        let mut copy = self::join(JoinType::Full);
        let tables: Vec<RecordBatch> = deltas
            .into_iter()
            .zip(join.state_specs())
            .map(|(d, spec)| {
                let mut table = weir_state::StateTable::new(spec).unwrap();
                if let Some(d) = d {
                    table
                        .apply_delta(d.upserts.as_ref(), d.deletes.as_ref())
                        .unwrap();
                }
                table.snapshot().stored_rows().unwrap()
            })
            .collect();
        copy.restore(&tables).unwrap();
        let change = kv(&[(Some(1), Some(3), 1), (Some(2), Some(7), -1)]);
        let a = join.process(1, change.clone()).unwrap();
        let b = copy.process(1, change).unwrap();
        assert_eq!(net(&a), net(&b));
    }
}
